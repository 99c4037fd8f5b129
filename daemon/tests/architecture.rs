//! docs/ARCHITECTURE.md stays true of the daemon's structure: its layer order
//! ("Daemon layers") holds for every `crate::` path in `daemon/src`, and every
//! top-level module is placed in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DOC: &str = include_str!("../../docs/ARCHITECTURE.md");

/// Back-edges being removed by a change under way elsewhere: (importing module,
/// imported path prefix). Each must still exist, so the entry goes with the edge.
const ALLOWED: &[(&str, &str)] = &[("service", "cli::client")];

/// Where a top-level module stands: its rank in the order (0 = top), or a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Layer(usize),
    Leaf,
}

struct Layers {
    order: Vec<String>,
    leaves: Vec<String>,
}

impl Layers {
    /// The order line (`main → cli → …`) and the `Leaves:` line of the section.
    fn from_doc(doc: &str) -> Layers {
        let doc = format!("\n{doc}");
        let section = doc
            .split("\n## ")
            .find(|s| s.starts_with("Daemon layers"))
            .expect("docs/ARCHITECTURE.md has no \"## Daemon layers\" section");
        let order_line = section
            .lines()
            .find(|l| l.starts_with("main →"))
            .expect("the \"Daemon layers\" section has no line `main → …`");
        let leaves_line = section
            .lines()
            .find(|l| l.starts_with("Leaves:"))
            .expect("the \"Daemon layers\" section has no `Leaves:` line");
        Layers {
            order: order_line
                .split('→')
                .map(|m| m.trim().to_string())
                .collect(),
            leaves: leaves_line
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect(),
        }
    }

    fn place(&self, module: &str) -> Option<Place> {
        if let Some(rank) = self.order.iter().position(|m| m == module) {
            return Some(Place::Layer(rank));
        }
        self.leaves
            .iter()
            .any(|m| m == module)
            .then_some(Place::Leaf)
    }

    fn describe(&self, module: &str) -> String {
        match self.place(module) {
            Some(Place::Layer(rank)) => {
                format!("`{module}` (layer {} of {})", rank + 1, self.order.len())
            }
            Some(Place::Leaf) => format!("`{module}` (a leaf)"),
            None => format!("`{module}` (not placed)"),
        }
    }

    /// Whether `from` may import `to`: a layer imports layers below it and leaves; a
    /// leaf imports leaves.
    fn allows(&self, from: Place, to: Place) -> bool {
        match (from, to) {
            (_, Place::Leaf) => true,
            (Place::Layer(a), Place::Layer(b)) => b > a,
            (Place::Leaf, Place::Layer(_)) => false,
        }
    }
}

/// Rust source with comments, string and character literals blanked out, so a
/// path in a doc comment or a message is not taken for an import.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && matches!(next, Some('"') | Some('#'))
            && !ident_char(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A character literal ('x', '\n', '\''), else a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Every path below `root::` in `code`, as written (`pipeline::PipelineRecord`),
/// with `root::{a::b, c}` groups spelled out (`a::b`, `c`).
fn paths_below(code: &str, root: &str) -> Vec<String> {
    let prefix = format!("{root}::");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(&prefix) {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + prefix.len()..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        out.extend(spell_out(after, ""));
    }
    out
}

/// The paths a use-tree at the start of `text` names, each prefixed with `prefix`.
fn spell_out(text: &str, prefix: &str) -> Vec<String> {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0;
        let mut items = Vec::new();
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[start..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return items
            .into_iter()
            .filter(|item| !item.trim().is_empty())
            .flat_map(|item| spell_out(item, prefix))
            .collect();
    }
    let mut path = String::from(prefix);
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        path.push_str(&rest[..end]);
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(after) if after.trim_start().starts_with('{') => {
                path.push_str("::");
                return spell_out(after, &path);
            }
            Some(after) => {
                path.push_str("::");
                rest = after;
            }
            None => return vec![path.trim_end_matches("::").to_string()],
        }
    }
}

/// The top-level module a file of `src` belongs to (`main` for the binaries).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("a file under src");
    let first = rel
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy();
    match first.strip_suffix(".rs") {
        Some("main") => "main".into(),
        Some(name) => name.into(),
        None if first == "bin" => "main".into(),
        None => first.into_owned(),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// An import that runs up: where, what, and both ends.
#[derive(Debug, PartialEq)]
struct Violation {
    file: String,
    path: String,
    from: String,
    to: String,
}

/// Every import in `files` (path, source) that runs up `layers`, and the allowed
/// back-edges seen.
fn upward_imports(
    layers: &Layers,
    files: &[(String, String, String)],
) -> (Vec<Violation>, BTreeMap<(String, String), usize>) {
    let mut found = Vec::new();
    let mut allowed_seen = BTreeMap::new();
    for (file, module, src) in files {
        let code = code_only(src);
        let root = if module == "main" {
            "lavenderd"
        } else {
            "crate"
        };
        let Some(from) = layers.place(module) else {
            continue;
        };
        for path in paths_below(&code, root) {
            let to_module = path.split("::").next().unwrap_or_default().to_string();
            if &to_module == module {
                continue;
            }
            let Some(to) = layers.place(&to_module) else {
                continue;
            };
            if layers.allows(from, to) {
                continue;
            }
            if let Some((m, p)) = ALLOWED
                .iter()
                .find(|(m, p)| m == module && (path == *p || path.starts_with(&format!("{p}::"))))
            {
                *allowed_seen
                    .entry((m.to_string(), p.to_string()))
                    .or_default() += 1;
                continue;
            }
            found.push(Violation {
                file: file.clone(),
                path: format!("{root}::{path}"),
                from: layers.describe(module),
                to: layers.describe(&to_module),
            });
        }
    }
    (found, allowed_seen)
}

/// The top-level modules `lib.rs` declares.
fn declared_modules(lib: &str) -> Vec<String> {
    code_only(lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn no_import_runs_up_the_daemon_layers() {
    let layers = Layers::from_doc(DOC);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read daemon/src/lib.rs");
    let unplaced: Vec<String> = declared_modules(&lib)
        .into_iter()
        .filter(|m| layers.place(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "daemon/src/lib.rs declares module(s) {unplaced:?} that docs/ARCHITECTURE.md (\"Daemon layers\") does not place: add each to the order or the leaves"
    );

    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let files: Vec<(String, String, String)> = paths
        .iter()
        .filter(|p| {
            p.file_name().is_some_and(|n| n != "lib.rs") || p.parent() != Some(src.as_path())
        })
        .map(|p| {
            let shown = format!("daemon/src/{}", p.strip_prefix(&src).unwrap().display());
            let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {shown}: {e}"));
            (shown, module_of(&src, p), text)
        })
        .collect();
    let (found, allowed_seen) = upward_imports(&layers, &files);
    let report: Vec<String> = found
        .iter()
        .map(|v| {
            format!(
                "{} imports `{}`: {} may not import {}, which is above it",
                v.file, v.path, v.from, v.to
            )
        })
        .collect();
    assert!(
        report.is_empty(),
        "imports that run up the daemon's layers (docs/ARCHITECTURE.md, \"Daemon layers\"); move what both need below both:\n{}",
        report.join("\n")
    );
    for (module, path) in ALLOWED {
        assert!(
            allowed_seen.contains_key(&(module.to_string(), path.to_string())),
            "the allowed back-edge {module} → {path} is gone: remove it from ALLOWED"
        );
    }
}

#[test]
fn the_layer_check_reads_grouped_paths_and_ignores_comments_and_strings() {
    let code = code_only(
        r##"
        use crate::{alert::Alert, pipeline::{self, PipelineRecord}};
        use crate::status::StatusCache; // crate::cli::nothing
        /// see `crate::server::serve`
        let s = "crate::daemon::run";
        let c = '"'; let l: &'static str = x;
        tracing::warn!(target: crate::logging::ALERT_TARGET, "x");
        let raw = r#"crate::web::x"#;
        "##,
    );
    assert_eq!(
        paths_below(&code, "crate"),
        [
            "alert::Alert",
            "pipeline::self",
            "pipeline::PipelineRecord",
            "status::StatusCache",
            "logging::ALERT_TARGET"
        ]
    );

    let layers = Layers::from_doc(
        "## Daemon layers\n\nmain → cli → pipeline → notify\n\nLeaves: `alert`, `layout`.\n",
    );
    let file = |name: &str, module: &str, src: &str| {
        (name.to_string(), module.to_string(), src.to_string())
    };
    let (found, _) = upward_imports(
        &layers,
        &[
            file("notify/a.rs", "notify", "use crate::pipeline::Record;"),
            file(
                "pipeline/b.rs",
                "pipeline",
                "use crate::{notify::N, alert::A, pipeline::x::Y};",
            ),
            file(
                "alert.rs",
                "alert",
                "use crate::layout::L; fn f() { crate::cli::run(); }",
            ),
            file("main.rs", "main", "use lavenderd::cli::Cli;"),
        ],
    );
    assert_eq!(
        found,
        [
            Violation {
                file: "notify/a.rs".into(),
                path: "crate::pipeline::Record".into(),
                from: "`notify` (layer 4 of 4)".into(),
                to: "`pipeline` (layer 3 of 4)".into(),
            },
            Violation {
                file: "alert.rs".into(),
                path: "crate::cli::run".into(),
                from: "`alert` (a leaf)".into(),
                to: "`cli` (layer 2 of 4)".into(),
            },
        ]
    );
}
