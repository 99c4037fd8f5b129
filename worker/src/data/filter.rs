//! `filter`: quality rules over the deduplicated documents. A document fails the first
//! rule it breaks; the manifest counts removals per rule (`removed_<rule>`).

use std::collections::HashSet;

use anyhow::Result;
use serde_json::json;

use super::documents::{DocWriter, read_docs};
use super::stage;
use super::step::{self, Ctx};
use crate::progress::{Progress, group};
use lavender::config::FilterConfig;

pub const STEP: &str = lavender::pipeline_step::PipelineStep::Filter.as_str();
const VERSION: u32 = 1;
pub const OUTPUT: &str = "documents.jsonl";

/// The rules, in the order they are checked; names are the manifest's `removed_<rule>`.
pub const RULES: [&str; 4] = ["min_chars", "max_chars", "nonprintable", "repeated_lines"];

/// The first rule `text` breaks, if any.
pub fn failed_rule(text: &str, f: &FilterConfig) -> Option<&'static str> {
    let chars = text.chars().count() as u64;
    if chars < f.min_chars {
        return Some("min_chars");
    }
    if chars > f.max_chars {
        return Some("max_chars");
    }
    let nonprintable = text
        .chars()
        .filter(|&c| (c.is_control() && !matches!(c, '\n' | '\t' | '\r')) || c == '\u{FFFD}')
        .count();
    if chars > 0 && nonprintable as f64 / chars as f64 > f.max_nonprintable_ratio {
        return Some("nonprintable");
    }
    if repeated_line_ratio(text) > f.max_repeated_line_ratio {
        return Some("repeated_lines");
    }
    None
}

/// Share of non-empty lines that repeat an earlier line of the same document.
pub fn repeated_line_ratio(text: &str) -> f64 {
    let mut seen = HashSet::new();
    let (mut lines, mut repeats) = (0usize, 0usize);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        lines += 1;
        if !seen.insert(line) {
            repeats += 1;
        }
    }
    if lines == 0 {
        0.0
    } else {
        repeats as f64 / lines as f64
    }
}

pub fn run(ctx: &Ctx) -> Result<()> {
    let cfg = &ctx.settings.data.filter;
    let up = step::upstream(ctx, super::dedup::STEP, STEP)?;
    let files = step::upstream_outputs(ctx, &up)?;
    let config_hash = step::config_hash(STEP, VERSION, &json!({ "filter": cfg }));
    let inputs: Vec<_> = files.iter().map(|(_, f)| f.clone()).collect();
    if let Some(m) = step::fresh_manifest(ctx, STEP, &config_hash, &inputs)? {
        step::say_skipped(STEP, &m);
        return Ok(());
    }

    let staged = stage::begin(&ctx.root.join(lavender::data_root::FILTERED))?;
    let mut out = DocWriter::create(&staged.dir().join(OUTPUT))?;
    let mut progress = Progress::new(STEP, Some(step::total_size(&files)), "docs");
    let mut removed = [0u64; RULES.len()];
    let mut input_docs = 0u64;
    for (path, _) in &files {
        read_docs(path, |text, bytes| {
            input_docs += 1;
            progress.advance(bytes, 1);
            match failed_rule(text, cfg) {
                Some(rule) => {
                    removed[RULES.iter().position(|r| *r == rule).expect("a rule")] += 1;
                    Ok(())
                }
                None => out.write(text),
            }
        })?;
    }
    progress.finish();
    let (documents, bytes, _) = out.finish()?;
    let total_removed: u64 = removed.iter().sum();
    if documents == 0 {
        return Err(ctx.settings.config_error(
            "data.filter",
            format!(
                "filter removed every document ({}); loosen data.filter",
                describe(&removed)
            ),
        ));
    }

    let mut m = step::new_manifest(STEP, VERSION, config_hash, inputs);
    m.counts.insert("documents".into(), documents);
    m.counts.insert("removed".into(), total_removed);
    m.counts.insert("input_documents".into(), input_docs);
    m.counts.insert("bytes".into(), bytes);
    for (rule, n) in RULES.iter().zip(removed) {
        m.counts.insert(format!("removed_{rule}"), n);
    }
    m.outputs = vec![OUTPUT.into()];
    step::commit(ctx, staged, m)?;
    eprintln!(
        "filter: {} documents kept, {} removed ({})",
        group(documents),
        group(total_removed),
        describe(&removed)
    );
    Ok(())
}

fn describe(removed: &[u64]) -> String {
    RULES
        .iter()
        .zip(removed)
        .map(|(r, n)| format!("{r} {}", group(*n)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> FilterConfig {
        FilterConfig {
            min_chars: 5,
            max_chars: 50,
            max_nonprintable_ratio: 0.1,
            max_repeated_line_ratio: 0.5,
        }
    }

    #[test]
    fn each_rule_catches_its_case() {
        let f = rules();
        assert_eq!(failed_rule("abc", &f), Some("min_chars"));
        assert_eq!(failed_rule(&"x".repeat(51), &f), Some("max_chars"));
        assert_eq!(failed_rule("ab\u{1}\u{2}cdef", &f), Some("nonprintable"));
        assert_eq!(
            failed_rule("la\nla\nla\nla\nfin", &f),
            Some("repeated_lines")
        );
        assert_eq!(failed_rule("Good line.\nAnother.", &f), None);
        // Counted in characters, not bytes.
        assert_eq!(failed_rule("ééééé", &f), None);
    }

    #[test]
    fn repeated_line_ratio_ignores_blank_lines() {
        assert_eq!(repeated_line_ratio("a\n\n\nb"), 0.0);
        assert_eq!(repeated_line_ratio("a\na\na\nb"), 0.5);
    }
}
