//! Range and consistency rules. Errors name the key path; the loader adds where the
//! value came from.

use std::collections::HashSet;
use std::fmt::Display;

use super::error::{ConfigError, ConfigErrorKind};
use super::scale::Scale;
use super::sections::{Config, SupervisorConfig};
use super::source::{Compression, DataSource, PathSource, SourceFormat};
use super::supervision::{ReplayTolerance, StaleAfter};

type Check = Result<(), ConfigError>;

fn out_of_range(path: &str, value: impl Display, range: &str) -> ConfigError {
    ConfigError::new(ConfigErrorKind::OutOfRange {
        path: path.to_string(),
        value: value.to_string(),
        range: range.to_string(),
    })
}

fn invalid(path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(ConfigErrorKind::Invalid {
        path: path.to_string(),
        message: message.into(),
    })
}

fn at_least<T: PartialOrd + Display>(path: &str, value: T, min: T) -> Check {
    if value >= min {
        Ok(())
    } else {
        Err(out_of_range(path, &value, &format!("{min}..")))
    }
}

/// `lo <= value <= hi` (or `< hi` when `hi_open`); NaN is always out of range.
fn fraction(path: &str, value: f64, lo: f64, hi: f64, hi_open: bool) -> Check {
    let ok = value >= lo && if hi_open { value < hi } else { value <= hi };
    if ok {
        Ok(())
    } else {
        let op = if hi_open { ".." } else { "..=" };
        Err(out_of_range(path, value, &format!("{lo:?}{op}{hi:?}")))
    }
}

fn positive(path: &str, value: f64) -> Check {
    if value > 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(out_of_range(path, value, "greater than 0"))
    }
}

fn non_negative(path: &str, value: f64) -> Check {
    if value >= 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(out_of_range(path, value, "0.0 or more"))
    }
}

pub(crate) fn validate(c: &Config) -> Check {
    if !(1..=4).contains(&c.chunk) {
        return Err(out_of_range("chunk", c.chunk, "1..=4"));
    }
    if c.steps.is_empty() {
        return Err(invalid("steps", "list at least one pipeline step"));
    }
    let mut seen = HashSet::new();
    for (i, step) in c.steps.iter().enumerate() {
        if !seen.insert(step) {
            return Err(invalid(
                &format!("steps[{i}]"),
                format!("`{step}` is listed twice; list each step once"),
            ));
        }
    }
    if c.worker.command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(invalid(
            "worker.command",
            "give the worker program, e.g. [lavender-worker]",
        ));
    }
    validate_data(c)?;
    validate_scales(c)?;
    validate_model(c)?;
    validate_training(c)?;
    validate_supervisor(c)?;
    super::api::validate(&c.api)?;
    super::launch::validate(&c.launch)?;
    super::logging::validate(&c.logging)?;
    super::replicate::validate(&c.replicate)?;
    super::tracking::validate(&c.tracking)?;
    // A torchrun script may run several processes; lavender-worker never does.
    if c.runs_lavender_worker() {
        c.check_one_process(None)?;
    }
    super::notify::validate(&c.notify)
}

fn validate_data(c: &Config) -> Check {
    let d = &c.data;
    if d.sources.is_empty() {
        return Err(invalid(
            "data.sources",
            "list at least one source, e.g. - embedded: tinyshakespeare",
        ));
    }
    for (i, source) in d.sources.iter().enumerate() {
        if let DataSource::Path(p) = source {
            validate_path_source(i, p)?;
        }
        if let DataSource::Url { url, sha256 } = source {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(invalid(
                    &format!("data.sources[{i}].url"),
                    format!("`{url}` is not an http(s) URL"),
                ));
            }
            if sha256.len() != 64 || !sha256.chars().all(|ch| ch.is_ascii_hexdigit()) {
                return Err(invalid(
                    &format!("data.sources[{i}].sha256"),
                    "expected 64 hex digits (the output of `sha256sum FILE`)",
                ));
            }
        }
    }
    if d.document_separator.is_empty() {
        return Err(invalid(
            "data.document_separator",
            "must not be empty; the default is \"\\n\\n\" (blank line)",
        ));
    }
    fraction(
        "data.dedup.near_threshold",
        d.dedup.near_threshold,
        0.0,
        1.0,
        false,
    )?;
    at_least("data.filter.min_chars", d.filter.min_chars, 1)?;
    if d.filter.max_chars < d.filter.min_chars {
        return Err(out_of_range(
            "data.filter.max_chars",
            d.filter.max_chars,
            &format!("{}.. (at least data.filter.min_chars)", d.filter.min_chars),
        ));
    }
    fraction(
        "data.filter.max_nonprintable_ratio",
        d.filter.max_nonprintable_ratio,
        0.0,
        1.0,
        false,
    )?;
    fraction(
        "data.filter.max_repeated_line_ratio",
        d.filter.max_repeated_line_ratio,
        0.0,
        1.0,
        false,
    )?;
    at_least("data.shards.shard_bytes", d.shards.shard_bytes, 1024)?;
    fraction(
        "data.shards.validation_fraction",
        d.shards.validation_fraction,
        0.0,
        1.0,
        true,
    )?;
    // Byte-level BPE starts from 256 byte tokens.
    if !(256..=1_048_576).contains(&d.tokenizer.vocab_size) {
        return Err(out_of_range(
            "data.tokenizer.vocab_size",
            d.tokenizer.vocab_size,
            "256..=1048576",
        ));
    }
    at_least("data.tokenizer.min_frequency", d.tokenizer.min_frequency, 1)?;
    fraction("data.heldout_fraction", d.heldout_fraction, 0.0, 1.0, true)?;
    at_least("data.hard_examples.upsample", d.hard_examples.upsample, 1)
}

/// The keys of a local source that its format reads, and no others.
fn validate_path_source(i: usize, p: &PathSource) -> Check {
    let key = |name: &str| format!("data.sources[{i}].{name}");
    if p.path.as_os_str().is_empty() {
        return Err(invalid(&key("path"), "give a file, a directory or a glob"));
    }
    let (format, reads) = (p.format, |k: &str| match p.format {
        SourceFormat::Text => false,
        SourceFormat::Jsonl => k == "field" || k == "compression",
        SourceFormat::Parquet => k == "column",
        SourceFormat::Datasets => k == "field" || k == "split",
    });
    let set = [
        (
            "compression",
            p.compression != Compression::Auto && format != SourceFormat::Text,
        ),
        ("field", p.field.is_some()),
        ("column", p.column.is_some()),
        ("split", p.split.is_some()),
    ];
    for (name, is_set) in set {
        if is_set && !reads(name) {
            let hint = match (format, name) {
                (SourceFormat::Parquet, "field") => "; a Parquet source names its text `column:`",
                (SourceFormat::Jsonl | SourceFormat::Datasets, "column") => {
                    "; this format names its text `field:`"
                }
                (SourceFormat::Parquet | SourceFormat::Datasets, "compression") => {
                    "; its pages are compressed inside the file (snappy, gzip, zstd) and read as they are"
                }
                _ => "",
            };
            return Err(invalid(
                &key(name),
                format!("format {format} does not read `{name}`; remove it{hint}"),
            ));
        }
    }
    for (name, value) in [
        ("field", &p.field),
        ("column", &p.column),
        ("split", &p.split),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(invalid(
                &key(name),
                "must not be empty; leave it out for the default",
            ));
        }
    }
    Ok(())
}

/// Each preset on its own, so a bad preset is found whatever scale runs.
fn validate_scales(c: &Config) -> Check {
    for scale in Scale::ALL {
        let preset = c.scales.get(scale);
        let path = format!("scales.{scale}");
        at_least(&format!("{path}.total_steps"), preset.total_steps, 1)?;
        at_least(&format!("{path}.shards"), preset.shards, 1)?;
        let m = &preset.model;
        let key = |name: &str| format!("{path}.model.{name}");
        at_least(&key("n_layer"), m.n_layer, 1)?;
        at_least(&key("n_head"), m.n_head, 1)?;
        at_least(&key("n_embd"), m.n_embd, 1)?;
        at_least(&key("n_positions"), m.n_positions, 1)?;
        if !m.n_embd.is_multiple_of(m.n_head) {
            return Err(invalid(
                &key("n_embd"),
                format!(
                    "{} is not a multiple of {} ({}); each head needs an equal share",
                    m.n_embd,
                    key("n_head"),
                    m.n_head
                ),
            ));
        }
    }
    Ok(())
}

/// The key that sets model size `name` for this run: `model.<name>` when it is set,
/// else the scale preset's `scales.<scale>.model.<name>`. Errors name it, so the
/// loader points at the line that gave the value.
fn model_key(c: &Config, name: &str) -> String {
    let m = &c.model;
    let set = match name {
        "n_layer" => m.n_layer.is_some(),
        "n_head" => m.n_head.is_some(),
        "n_embd" => m.n_embd.is_some(),
        _ => m.n_positions.is_some(),
    };
    if set {
        format!("model.{name}")
    } else {
        format!("scales.{}.model.{name}", c.scale)
    }
}

fn validate_model(c: &Config) -> Check {
    let m = c.model_size();
    at_least(&model_key(c, "n_layer"), m.n_layer, 1)?;
    at_least(&model_key(c, "n_head"), m.n_head, 1)?;
    at_least(&model_key(c, "n_embd"), m.n_embd, 1)?;
    if !m.n_embd.is_multiple_of(m.n_head) {
        // Blame the value the user set (n_embd before n_head), else the preset.
        let blamed = if c.model.n_embd.is_none() && c.model.n_head.is_some() {
            model_key(c, "n_head")
        } else {
            model_key(c, "n_embd")
        };
        return Err(invalid(
            &blamed,
            format!(
                "model width {} ({}) is not a multiple of the head count {} ({}); each head needs an equal share",
                m.n_embd,
                model_key(c, "n_embd"),
                m.n_head,
                model_key(c, "n_head")
            ),
        ));
    }
    at_least(&model_key(c, "n_positions"), m.n_positions, 1)?;
    let m = &c.model;
    if m.init_from
        .as_ref()
        .is_some_and(|p| p.as_os_str().is_empty())
    {
        return Err(invalid(
            "model.init_from",
            "give a Hugging Face GPT-2 checkpoint directory, or null",
        ));
    }
    fraction("model.dropout", m.dropout, 0.0, 1.0, true)?;
    positive("model.layer_norm_epsilon", m.layer_norm_epsilon)?;

    let o = &c.optimizer;
    fraction("optimizer.betas[0]", o.betas[0], 0.0, 1.0, true)?;
    fraction("optimizer.betas[1]", o.betas[1], 0.0, 1.0, true)?;
    positive("optimizer.eps", o.eps)?;
    non_negative("optimizer.weight_decay", o.weight_decay)?;
    non_negative("optimizer.grad_clip", o.grad_clip)?;
    fraction("optimizer.min_lr_ratio", o.min_lr_ratio, 0.0, 1.0, false)
}

fn validate_training(c: &Config) -> Check {
    let t = &c.training;
    at_least("training.batch_size", t.batch_size, 1)?;
    at_least("training.seq_len", t.seq_len, 1)?;
    let n_positions = c.model_size().n_positions;
    // With model.init_from the context length is the checkpoint's (its config.json),
    // which the worker checks when it reads it.
    if c.model.init_from.is_none() && t.seq_len > n_positions {
        return Err(out_of_range(
            "training.seq_len",
            t.seq_len,
            &format!(
                "1..={n_positions} ({} at scale {})",
                model_key(c, "n_positions"),
                c.scale
            ),
        ));
    }
    at_least("training.grad_accum", t.grad_accum, 1)?;
    at_least("training.log_every", t.log_every, 1)?;
    at_least("training.eval_every", t.eval_every, 1)?;
    at_least("training.eval_batches", t.eval_batches, 1)?;
    at_least("training.keep_checkpoints", t.keep_checkpoints, 1)?;
    if let Some(ema) = &t.ema {
        let ok = ema.decay > 0.0 && ema.decay < 1.0;
        if !ok {
            return Err(out_of_range(
                "training.ema.decay",
                ema.decay,
                "between 0 and 1, both excluded (e.g. 0.999)",
            ));
        }
        at_least("training.ema.every", ema.every, 1)?;
    }
    if t.stages.is_empty() {
        return Err(invalid(
            "training.stages",
            "list at least one stage, e.g. - {name: pretrain, steps: null, lr: 3.0e-3}",
        ));
    }
    let mut names = HashSet::new();
    for (i, stage) in t.stages.iter().enumerate() {
        let path = format!("training.stages[{i}]");
        let name_ok = !stage.name.is_empty()
            && stage
                .name
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if !name_ok {
            return Err(invalid(
                &format!("{path}.name"),
                format!(
                    "`{}` is not a valid stage name; use lowercase letters, digits and _ ([a-z0-9_]+)",
                    stage.name
                ),
            ));
        }
        if !names.insert(stage.name.as_str()) {
            return Err(invalid(
                &format!("{path}.name"),
                format!(
                    "stage `{}` is listed twice; stage names must be unique",
                    stage.name
                ),
            ));
        }
        if let Some(steps) = stage.steps {
            at_least(&format!("{path}.steps"), steps, 1)?;
        }
        positive(&format!("{path}.lr"), stage.lr)?;
        at_least(
            &format!("{path}.checkpoint_every"),
            stage.checkpoint_every,
            1,
        )?;
        if let Some(beta) = stage.beta {
            positive(&format!("{path}.beta"), beta)?;
        }
    }
    let spike = &t.spike;
    if !(spike.factor > 1.0 && spike.factor.is_finite()) {
        return Err(out_of_range(
            "training.spike.factor",
            spike.factor,
            "greater than 1 (e.g. 3.0: a loss above 3 × the recent median)",
        ));
    }
    at_least("training.spike.window", spike.window, 1)?;
    at_least("training.spike.patience", spike.patience, 1)
}

fn validate_supervisor(c: &Config) -> Check {
    let s = &c.supervisor;
    if !s.listen.ip().is_loopback() && !s.allow_non_loopback {
        return Err(invalid(
            "supervisor.listen",
            format!(
                "{} is not a loopback address; use 127.0.0.1, or set supervisor.allow_non_loopback: true to expose the API",
                s.listen
            ),
        ));
    }
    if s.max_restarts > 0 && s.restart_backoff_s.is_empty() {
        return Err(invalid(
            "supervisor.restart_backoff_s",
            "list at least one wait in seconds (e.g. [10, 30, 90]) or set supervisor.max_restarts: 0",
        ));
    }
    if let Some(bad) = s
        .restart_backoff_s
        .iter()
        .find(|w| !w.is_finite() || **w < 0.0 || **w > 86_400.0)
    {
        return Err(invalid(
            "supervisor.restart_backoff_s",
            format!(
                "{bad} is not a wait in seconds; use numbers from 0 to 86400 (e.g. [10, 30, 90])"
            ),
        ));
    }
    at_least("supervisor.stop_timeout_s", s.stop_timeout_s, 1)?;
    if let Some(keep) = s.keep_runs {
        at_least("supervisor.keep_runs", keep, 1)?;
    }
    at_least("supervisor.poll_interval_ms", s.poll_interval_ms, 10)?;
    supervision_rules(s)
}

/// A wait in seconds that must be more than zero.
fn positive_seconds(path: &str, value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(invalid(
            path,
            format!("{value} is not a wait in seconds; give a number greater than 0"),
        ))
    }
}

/// The hang, failure and divergence keys (`supervision.rs`), checked together.
fn supervision_rules(s: &SupervisorConfig) -> Result<(), ConfigError> {
    if let StaleAfter::Seconds(secs) = s.stale_after_s
        && !(secs.is_finite() && secs > 0.0)
    {
        return Err(invalid(
            "supervisor.stale_after_s",
            format!("{secs} is not a timeout; give `auto` or a number of seconds greater than 0"),
        ));
    }
    if !(s.slowdown.factor.is_finite() && s.slowdown.factor > 1.0) {
        return Err(invalid(
            "supervisor.slowdown.factor",
            format!(
                "{} is not a slowdown: the alert comes when the step time is above factor × its baseline; give a number above 1 (e.g. 1.3)",
                s.slowdown.factor
            ),
        ));
    }
    positive_seconds("supervisor.slowdown.for_s", s.slowdown.for_s)?;
    if s.drill.every_checkpoints == Some(0) {
        return Err(invalid(
            "supervisor.drill.every_checkpoints",
            "0 checkpoints between drills; give 1 or more, or null for none".to_string(),
        ));
    }
    if let Some(device) = &s.drill.device
        && serde_json::from_value::<super::sections::Device>(serde_json::Value::String(
            device.clone(),
        ))
        .is_err()
    {
        return Err(invalid(
            "supervisor.drill.device",
            format!(
                "`{device}` is not a device; give cpu, cuda, cuda:N, mps or auto, or null for the run's"
            ),
        ));
    }
    if let Some(h) = s.drill.every_hours
        && !(h.is_finite() && h > 0.0)
    {
        return Err(invalid(
            "supervisor.drill.every_hours",
            format!("{h} hours between drills; give a number above 0, or null for none"),
        ));
    }
    if let ReplayTolerance::Relative(r) = s.replay_tolerance
        && !(r.is_finite() && (0.0..1.0).contains(&r))
    {
        return Err(invalid(
            "supervisor.replay_tolerance",
            format!(
                "{r} is not a relative tolerance; give a fraction from 0 to below 1, exact or auto"
            ),
        ));
    }
    let a = &s.stale_auto;
    if !(a.factor.is_finite() && a.factor >= 1.0) {
        return Err(invalid(
            "supervisor.stale_auto.factor",
            format!(
                "{} is too small: the allowance is factor × the longest interval seen; give 1 or more (e.g. 5)",
                a.factor
            ),
        ));
    }
    positive_seconds("supervisor.stale_auto.floor_s", a.floor_s)?;
    positive_seconds("supervisor.stale_auto.ceiling_s", a.ceiling_s)?;
    if a.ceiling_s < a.floor_s {
        return Err(invalid(
            "supervisor.stale_auto.ceiling_s",
            format!(
                "{} is below supervisor.stale_auto.floor_s ({}); give a ceiling at least the floor",
                a.ceiling_s, a.floor_s
            ),
        ));
    }
    for (key, value) in [
        ("startup_grace_s", s.startup_grace_s),
        ("loading_grace_s", s.loading_grace_s),
        ("evaluating_grace_s", s.evaluating_grace_s),
        ("saving_grace_s", s.saving_grace_s),
    ] {
        if value == 0 {
            return Err(invalid(
                &format!("supervisor.{key}"),
                "0 is not a timeout; give a number of seconds of at least 1",
            ));
        }
    }
    positive_seconds("supervisor.stall_kill_grace_s", s.stall_kill_grace_s)?;
    if s.max_same_failure == 0 {
        return Err(invalid(
            "supervisor.max_same_failure",
            "give at least 1 (times in a row the same failure may end a worker before the pipeline fails; 3 by default)",
        ));
    }
    if s.rollback_window_steps == 0 {
        return Err(invalid(
            "supervisor.rollback_window_steps",
            "give at least 1 (training steps between two divergences for the earlier rollback to stop counting; 1000 by default)",
        ));
    }
    if s.max_no_progress_restarts == 0 {
        return Err(invalid(
            "supervisor.max_no_progress_restarts",
            "give at least 1 (restarts in a row that did not train past the step they resumed from, before the pipeline fails)",
        ));
    }
    validate_data_step_allowance(s)
}

/// `supervisor.data_step_stale_after_s`: the data steps' and `mine_hard`'s allowance.
fn validate_data_step_allowance(s: &SupervisorConfig) -> Result<(), ConfigError> {
    if s.data_step_stale_after_s == 0 {
        return Err(invalid(
            "supervisor.data_step_stale_after_s",
            "0 is not a timeout; give a number of seconds of at least 1 (how long a data step or mine_hard may go without a progress beat)",
        ));
    }
    Ok(())
}
