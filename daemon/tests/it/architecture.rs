//! docs/ARCHITECTURE.md stays true of the daemon's structure: its layer order
//! ("Daemon layers") holds for every `crate::` path in `daemon/src`, and every
//! top-level module is placed in it; the CLI reaches the daemon through the API
//! ("The API"), whose route table is the one place a route is written.

use std::path::{Path, PathBuf};

const DOC: &str = include_str!("../../../docs/ARCHITECTURE.md");

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
pub(super) fn code_only(src: &str) -> String {
    lex(src).0
}

/// `src` as [`code_only`] gives it, and its string literals as written between the
/// quotes (escapes left as they are).
fn lex(src: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut literals = Vec::new();
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
            let start = j;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    literals.push(chars[start..j].iter().collect());
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            let start = i;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            literals.push(chars[start..i.min(chars.len())].iter().collect());
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
    (out, literals)
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
pub(super) fn spell_out(text: &str, prefix: &str) -> Vec<String> {
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

pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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

/// Every import in `files` (path, module, source) that runs up `layers`.
fn upward_imports(layers: &Layers, files: &[(String, String, String)]) -> Vec<Violation> {
    let mut found = Vec::new();
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
            found.push(Violation {
                file: file.clone(),
                path: format!("{root}::{path}"),
                from: layers.describe(module),
                to: layers.describe(&to_module),
            });
        }
    }
    found
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
    let found = upward_imports(&layers, &files);
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
    let found = upward_imports(
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

/// A file or directory the repository holds, as paths relative to its root (a
/// directory with a trailing `/`); build output, caches and the venv left out.
fn repository_index(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(
                name.as_str(),
                "target" | ".git" | ".venv" | "node_modules" | "__pycache__" | "data-root"
            ) {
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &path, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// `a/{b,c}.rs` → `a/b.rs`, `a/c.rs` (one pair of braces).
fn expand_braces(span: &str) -> Vec<String> {
    match (span.find('{'), span.find('}')) {
        (Some(open), Some(close)) if open < close => span[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &span[..open], alt.trim(), &span[close + 1..]))
            .collect(),
        _ => vec![span.to_string()],
    }
}

/// What the doc names, with the line it is on: paths and module paths.
#[derive(Debug, Default)]
struct Named {
    paths: Vec<(usize, String)>,
    modules: Vec<(usize, String)>,
}

/// The repository paths and module paths `doc` names: code spans outside fenced
/// blocks, the first column of the repository layout, and the file and folder names
/// in the diagrams. Paths inside the data root (the on-disk layout's first level:
/// `state/`, `checkpoints/`, …), config keys, routes and addresses are not the
/// repository's.
fn named_in(doc: &str) -> Named {
    let is_module = |s: &str| {
        let mut parts = s.split("::");
        let first = parts.next().unwrap_or_default();
        s.contains("::")
            && first.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && first
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
    };
    let mut data_root: Vec<String> = Vec::new();
    let mut named = Named::default();
    let mut section = "";
    let mut fence: Option<String> = None;
    let mut candidates: Vec<(usize, String)> = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        if let Some(title) = line.strip_prefix("## ") {
            section = title;
        }
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(lang.trim().to_string()),
            };
            continue;
        }
        match fence.as_deref() {
            Some(_) if section.starts_with("On-disk layout") => {
                if let Some(rest) = line.strip_prefix("  ")
                    && !rest.starts_with(' ')
                    && let Some((first, _)) = rest.split_once('/')
                {
                    data_root.push(first.to_string());
                }
            }
            Some(_) if section.starts_with("Repository layout") => {
                if let Some(first) = line.split_whitespace().next()
                    && !line.starts_with(' ')
                {
                    candidates.push((n, first.to_string()));
                }
            }
            Some(_) => {
                for word in line.split(|c: char| {
                    !(c.is_alphanumeric() || c == '_' || c == '/' || c == '.' || c == ':')
                }) {
                    let word = word.trim_matches(|c| c == '.' || c == ':');
                    let dir = word.ends_with('/') && word.len() > 1 && !word.starts_with('/');
                    if word.ends_with(".rs") || dir || is_module(word) {
                        candidates.push((n, word.to_string()));
                    }
                }
            }
            None => {
                for span in line.split('`').skip(1).step_by(2) {
                    candidates.push((n, span.replace("\\|", "|")));
                }
            }
        }
    }
    for (n, span) in candidates {
        if is_module(&span) {
            named.modules.push((n, span));
            continue;
        }
        let pathlike = span.contains('/') || span.ends_with(".rs") || span.ends_with(".md");
        let foreign = span.starts_with('/')
            || span.contains(|c: char| c.is_whitespace() || "<>*…=@".contains(c))
            || span.contains("::");
        if !pathlike || foreign {
            continue;
        }
        for path in expand_braces(&span) {
            let components: Vec<&str> = path.trim_end_matches('/').split('/').collect();
            let first = components[0].trim_start_matches("./");
            // A config key (`model.n_layer/…`), an address (`127.0.0.0/8`), the data root.
            let not_a_folder = components[..components.len() - 1]
                .iter()
                .any(|c| c.contains('.') && !c.starts_with('.'));
            let no_letter = !first.contains(|c: char| c.is_ascii_alphabetic());
            if not_a_folder
                || no_letter
                || data_root.iter().any(|d| d == first)
                || path.starts_with("./")
            {
                continue;
            }
            named.paths.push((n, path));
        }
    }
    named
}

/// The module a path of segments names, resolved against the package sources:
/// `lavender::…` the core, `lavenderd::…` the daemon, otherwise a module of that
/// name anywhere in a package (`notify::pushes`). The last segment may be an item
/// the module defines or re-exports.
fn module_exists(index: &[String], root: &Path, module: &str) -> bool {
    let segments: Vec<&str> = module.split("::").collect();
    let crate_roots = [
        ("lavender", "src/"),
        ("lavenderd", "daemon/src/"),
        ("lavender_export", "export/src/"),
        ("lavender_worker", "worker/src/"),
        ("lavender_client", "client/src/"),
        ("lavender_api", "api/src/"),
        ("lavender_testkit", "testkit/src/"),
    ];
    // (the module's file, the folder of its children)
    let starts: Vec<(String, String)> = match crate_roots.iter().find(|(c, _)| *c == segments[0]) {
        Some((_, dir)) => vec![(format!("{dir}lib.rs"), dir.to_string())],
        None => index
            .iter()
            .filter(|p| p.contains("src/"))
            .filter_map(|p| {
                let own = format!("/{}.rs", segments[0]);
                let folder = format!("/{}/mod.rs", segments[0]);
                if p.ends_with(&own) {
                    Some((p.clone(), format!("{}/", p.trim_end_matches(".rs"))))
                } else if p.ends_with(&folder) {
                    Some((p.clone(), p.trim_end_matches("mod.rs").to_string()))
                } else {
                    None
                }
            })
            .collect(),
    };
    starts.into_iter().any(|(mut file, mut dir)| {
        for (i, seg) in segments.iter().enumerate().skip(1) {
            let own = format!("{dir}{seg}.rs");
            let folder = format!("{dir}{seg}/mod.rs");
            if index.contains(&own) {
                (file, dir) = (own, format!("{dir}{seg}/"));
            } else if index.contains(&folder) {
                (file, dir) = (folder, format!("{dir}{seg}/"));
            } else {
                let text = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
                let word = |w: &str| w == *seg;
                return i == segments.len() - 1
                    && text
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .any(word);
            }
        }
        true
    })
}

#[test]
fn every_path_and_module_the_architecture_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let index = repository_index(&root);
    let named = named_in(DOC);
    assert!(
        named.paths.len() > 40 && named.modules.len() > 4,
        "the doc's paths were not found: {named:?}"
    );
    let mut missing = Vec::new();
    for (line, path) in &named.paths {
        let wanted = path.trim_start_matches("./");
        let dir = wanted.ends_with('/');
        let found = index.iter().any(|p| {
            let p = if dir {
                p.as_str()
            } else {
                p.trim_end_matches('/')
            };
            p == wanted || p.ends_with(&format!("/{wanted}"))
        });
        if !found {
            missing.push(format!(
                "docs/ARCHITECTURE.md:{line}: `{path}` is no file or folder of the repository"
            ));
        }
    }
    for (line, module) in &named.modules {
        if !module_exists(&index, &root, module) {
            missing.push(format!(
                "docs/ARCHITECTURE.md:{line}: `{module}` is no module (or item of one) in the packages' sources"
            ));
        }
    }
    let layers = Layers::from_doc(DOC);
    for module in layers.order.iter().chain(&layers.leaves) {
        let file = format!("daemon/src/{module}.rs");
        if !index.contains(&file) && !index.contains(&format!("daemon/src/{module}/")) {
            missing.push(format!(
                "docs/ARCHITECTURE.md (\"Daemon layers\") places `{module}`, which daemon/src does not have"
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what is not there; fix the doc or the code:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_architecture_check_reads_paths_modules_and_skips_what_is_not_the_repositorys() {
    let doc = "## Repository layout\n\n```\nsrc/   core\n  more text\n```\n\n\
        ## On-disk layout (data root)\n\n```\n<data_root>/\n  state/   the daemon's\n```\n\n\
        ## Map\n\nSee `pipeline/{judge,stop}.rs`, `state/pipeline.json`, `model.n_layer/n_head`,\n\
        `GET /status`, `127.0.0.0/8`, `notify::pushes`, `Config::resolved`, `events.jsonl`.\n\n\
        ```text\n box (status/refresher.rs) ── feed/ ── lavender::time::duration\n```\n";
    let named = named_in(doc);
    let paths: Vec<&str> = named.paths.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "src/",
            "pipeline/judge.rs",
            "pipeline/stop.rs",
            "status/refresher.rs",
            "feed/"
        ]
    );
    let modules: Vec<&str> = named.modules.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(modules, ["notify::pushes", "lavender::time::duration"]);

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let index = repository_index(&root);
    assert!(module_exists(&index, &root, "lavender::time::duration"));
    assert!(module_exists(&index, &root, "notify::pushes"));
    assert!(!module_exists(&index, &root, "notify::no_such_item"));
    assert!(!module_exists(&index, &root, "lavender::no_such_module::x"));
}

/// The daemon's modules behind the API: the CLI names none of them.
const BEHIND_THE_API: [&str; 4] = ["pipeline", "status", "server", "feed"];

/// What of [`BEHIND_THE_API`] the CLI still names, and why (docs/ARCHITECTURE.md,
/// "The API"). Each goes once the core reads that part of the on-disk contract; an
/// entry the CLI no longer names fails the test, so the list only shrinks.
const CLI_STILL_NAMES: &[(&str, &str)] = &[];

/// Every `crate::` path in `files` (shown path, source) into [`BEHIND_THE_API`]
/// that `allowed` does not list (an entry allows what lies below it), as `file: path`.
fn behind_the_api(files: &[(String, String)], allowed: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, src) in files {
        for path in paths_below(&code_only(src), "crate") {
            let module = path.split("::").next().unwrap_or_default();
            let listed = allowed
                .iter()
                .any(|a| path == *a || path.starts_with(&format!("{a}::")));
            if BEHIND_THE_API.contains(&module) && !listed {
                found.push(format!("{file}: crate::{path}"));
            }
        }
    }
    found
}

#[test]
fn the_cli_reaches_the_daemon_through_the_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src.join("cli"), &mut paths);
    paths.sort();
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let shown = format!("daemon/src/{}", p.strip_prefix(&src).unwrap().display());
            let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {shown}: {e}"));
            (shown, text)
        })
        .collect();
    let allowed: Vec<&str> = CLI_STILL_NAMES.iter().map(|(p, _)| *p).collect();
    let found = behind_the_api(&files, &allowed);
    assert!(
        found.is_empty(),
        "the CLI names the daemon's {BEHIND_THE_API:?} modules; ask the daemon through the API \
         (lavender-api, crate::client) or, with the daemon down, read the files through the \
         core (docs/ARCHITECTURE.md, \"The API\"):\n{}",
        found.join("\n")
    );
    let named: Vec<String> = behind_the_api(&files, &[])
        .into_iter()
        .filter_map(|n| Some(n.split_once(": crate::")?.1.to_string()))
        .collect();
    let stale: Vec<&str> = allowed
        .iter()
        .copied()
        .filter(|a| {
            !named
                .iter()
                .any(|n| n == a || n.starts_with(&format!("{a}::")))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "CLI_STILL_NAMES lists what the CLI no longer names; remove it: {stale:?}"
    );
}

/// The string literals of Rust `src` outside its comments, as written between the
/// quotes (escapes left as they are).
fn string_literals(src: &str) -> Vec<String> {
    lex(src).1
}

/// The route `literal` spells, if any: a route's path, with a query or its `{…}`
/// segments filled in. `/` (the dashboard) is left out: it is every path's separator.
fn route_in(literal: &str) -> Option<lavender_api::Route> {
    lavender_api::Route::ALL.into_iter().find(|r| {
        let path = r.path();
        let stem = path.split('{').next().unwrap_or(path);
        path != "/"
            && (literal == path
                || literal.starts_with(&format!("{path}?"))
                || (stem != path && literal.starts_with(stem)))
    })
}

#[test]
fn route_strings_are_written_only_in_the_api_route_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let table = root.join("api/src/routes.rs");
    let mut found = Vec::new();
    for dir in ["src", "api/src", "client/src", "daemon/src"] {
        let mut paths = Vec::new();
        rust_files(&root.join(dir), &mut paths);
        paths.sort();
        for p in paths.iter().filter(|p| **p != table) {
            let text =
                std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            // Tests may spell a route out: they check what goes over the wire.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for literal in string_literals(code) {
                if let Some(route) = route_in(&literal) {
                    found.push(format!(
                        "{}: \"{literal}\" spells {route}",
                        p.strip_prefix(&root).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a route written outside api/src/routes.rs; name it from lavender_api::Route:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_router_serves_every_route_of_the_table_and_no_other() {
    let served = lavender_testkit::router_routes(include_str!("../../src/server/mod.rs"));
    let table: std::collections::BTreeSet<String> = lavender_api::Route::ALL
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        served, table,
        "daemon/src/server/mod.rs answers every route of lavender_api::Route and no other"
    );
}

#[test]
fn the_route_check_reads_literals_and_knows_the_routes() {
    let literals = string_literals(
        r##"
        // "/status" in a comment
        let a = "/status"; let b = r#"/pipeline/stop"#; let c = '"'; let d: &'a str = "/";
        let e = format!("/runs/{id}/history?points={n}"); /* "/healthz" */ let f = "x\"y";
        "##,
    );
    assert_eq!(
        literals,
        [
            "/status",
            "/pipeline/stop",
            "/",
            "/runs/{id}/history?points={n}",
            "x\\\"y"
        ]
    );
    use lavender_api::Route;
    assert_eq!(route_in("/status"), Some(Route::Status));
    assert_eq!(route_in("/logs?lines=5"), Some(Route::Logs));
    assert_eq!(route_in("/runs/current/history"), Some(Route::History));
    assert_eq!(route_in("/runs"), Some(Route::Runs));
    assert_eq!(route_in("/"), None);
    assert_eq!(route_in("/statusx"), None);
    let files = [(
        "daemon/src/cli/x.rs".to_string(),
        "use crate::{pipeline::PipelineRecord, client::Client}; crate::status::offline();"
            .to_string(),
    )];
    assert_eq!(
        behind_the_api(&files, &["status::offline"]),
        ["daemon/src/cli/x.rs: crate::pipeline::PipelineRecord"]
    );
}

/// What a package's `Cargo.toml` depends on: (normal, build, dev) crate names.
type Deps = (Vec<String>, Vec<String>, Vec<String>);

/// The dependency names of a `Cargo.toml`, by kind: `[dependencies]` and a target's
/// `[target.….dependencies]` are normal, then `[build-dependencies]` and
/// `[dev-dependencies]` (keys as written: `serde.workspace = true` is `serde`).
fn manifest_deps(toml: &str) -> Deps {
    let (mut normal, mut build, mut dev) = (Vec::new(), Vec::new(), Vec::new());
    let mut section = String::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        let Some(key) = line.split(['=', '.']).next().map(str::trim) else {
            continue;
        };
        if key.is_empty() || line.starts_with('#') || !line.contains('=') {
            continue;
        }
        let list = match section.as_str() {
            "[dependencies]" => &mut normal,
            "[build-dependencies]" => &mut build,
            "[dev-dependencies]" => &mut dev,
            s if s.starts_with("[target.") && s.ends_with(".dependencies]") => &mut normal,
            _ => continue,
        };
        list.push(key.to_string());
    }
    for list in [&mut normal, &mut build, &mut dev] {
        list.sort();
    }
    (normal, build, dev)
}

/// `text` without what stands in parentheses (nested ones too): a remark on a crate,
/// not a crate.
fn without_remarks(text: &str) -> String {
    let mut depth = 0usize;
    text.chars()
        .filter(|&c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

/// The backticked names in `text`, sorted.
fn ticked(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// Each package the "Dependencies" section lists, with its dependencies by kind:
/// a bullet names the package first, then the crates, `Build:` and `Tests:` last.
fn documented_deps(doc: &str) -> Vec<(String, Deps)> {
    let doc = format!("\n{doc}");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Dependencies"))
        .expect("docs/ARCHITECTURE.md has no \"## Dependencies\" section");
    let mut bullets: Vec<String> = Vec::new();
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("- ") {
            bullets.push(rest.to_string());
        } else if let (Some(last), true) = (bullets.last_mut(), line.starts_with("  ")) {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    bullets
        .iter()
        .map(|bullet| {
            let plain = without_remarks(bullet);
            let (rest, dev) = plain.split_once("Tests:").unwrap_or((&plain, ""));
            let (rest, build) = rest.split_once("Build:").unwrap_or((rest, ""));
            let mut normal = ticked(rest);
            let package = rest
                .split('`')
                .nth(1)
                .unwrap_or_else(|| {
                    panic!("a bullet of \"Dependencies\" names no package: {bullet}")
                })
                .to_string();
            normal.retain(|n| *n != package);
            (package, (normal, ticked(build), ticked(dev)))
        })
        .collect()
}

/// Every workspace member's `Cargo.toml`, by package name.
fn workspace_manifests() -> Vec<(String, Deps)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = workspace
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("the workspace's Cargo.toml lists no members");
    ticked(&members.replace('"', "`"))
        .iter()
        .map(|member| {
            let toml = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
            // The root manifest holds the workspace's tables too; only the package's
            // own count.
            let own = toml.split("[package]").nth(1).expect("a [package] table");
            let name = own
                .lines()
                .find_map(|l| l.strip_prefix("name = "))
                .expect("a package name")
                .trim_matches('"')
                .to_string();
            (name, manifest_deps(own))
        })
        .collect()
}

#[test]
fn the_dependency_list_is_what_the_manifests_name() {
    let documented = documented_deps(DOC);
    let mut wrong = Vec::new();
    for (package, deps) in workspace_manifests() {
        let Some((_, listed)) = documented.iter().find(|(p, _)| *p == package) else {
            wrong.push(format!("`{package}` is not listed"));
            continue;
        };
        for (kind, actual, doc) in [
            ("", &deps.0, &listed.0),
            ("Build: ", &deps.1, &listed.1),
            ("Tests: ", &deps.2, &listed.2),
        ] {
            let missing: Vec<_> = actual.iter().filter(|d| !doc.contains(d)).collect();
            let extra: Vec<_> = doc.iter().filter(|d| !actual.contains(d)).collect();
            if !missing.is_empty() || !extra.is_empty() {
                wrong.push(format!(
                    "`{package}` {kind}missing {missing:?}, named but not used {extra:?}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md's \"Dependencies\" differs from the Cargo.toml files:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_dependency_check_reads_kinds_targets_and_remarks() {
    let toml = "[package]\nname = \"x\"\n[dependencies]\nserde.workspace = true\n\
                tch = { version = \"0.26\" }\n# old = 1\n[target.'cfg(unix)'.dependencies]\n\
                inotify = \"0.11\"\n[build-dependencies]\ncc = \"1\"\n[dev-dependencies]\n\
                tempfile.workspace = true\n[features]\nhooks = []\n";
    assert_eq!(
        manifest_deps(toml),
        (
            vec!["inotify".into(), "serde".into(), "tch".into()],
            vec!["cc".into()],
            vec!["tempfile".into()]
        )
    );
    let doc = "## Dependencies\n\n- `x` (`src/`): `serde`, `tch` (with `torch-sys`\n  \
               (a remark)), `inotify`. Build: `cc`. Tests: `tempfile`.\n\n## Next\n";
    assert_eq!(
        documented_deps(doc),
        vec![(
            "x".to_string(),
            (
                vec!["inotify".into(), "serde".into(), "tch".into()],
                vec!["cc".into()],
                vec!["tempfile".into()]
            )
        )]
    );
}
