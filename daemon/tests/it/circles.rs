//! No import circle between the source files of any crate of the workspace: a file
//! that takes a name from another never gets one back, directly or around a longer
//! ring. A name is followed to the file that defines it (through `pub use`
//! re-exports), as `farm-studio look` draws the house. Test code (`tests.rs` files,
//! `#[cfg(test)]` modules) is left out: it may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::architecture::{code_only, rust_files, spell_out};

/// A module path from the crate's root (`["notify", "queue"]`).
type ModPath = Vec<String>;

struct Unit {
    file: String,
    module: ModPath,
    /// Names defined in the file (items, inline modules).
    defines: BTreeSet<String>,
    /// `pub use` re-exports: the name they give and the path they name.
    reexports: BTreeMap<String, Vec<String>>,
    /// Every path the file names (`crate::a::B`, `super::c::D`, `child::E`),
    /// as absolute module paths plus the names after them.
    paths: Vec<Vec<String>>,
}

/// The module path of `file` in a crate whose sources are under `src`.
fn module_path(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") || !parts.is_empty() && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// `code` without its `#[cfg(test)]` items (a `mod tests { … }` block or a
/// `mod tests;` line).
fn without_test_code(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let semi = after.find(';').unwrap_or(after.len());
        let brace = after.find('{').unwrap_or(after.len());
        if semi < brace {
            rest = &after[(semi + 1).min(after.len())..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices().skip(brace) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// Whether `code[at]` starts a word (not the tail of an identifier or a path).
fn word_starts(code: &str, at: usize) -> bool {
    !code[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
}

fn names_defined(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for kw in [
        "fn ", "struct ", "enum ", "const ", "static ", "type ", "trait ", "mod ", "union ",
    ] {
        let mut from = 0;
        while let Some(at) = code[from..].find(kw).map(|i| i + from) {
            from = at + kw.len();
            if word_starts(code, at) {
                let name = ident(code[from..].trim_start());
                if !name.is_empty() {
                    out.insert(name.to_string());
                }
            }
        }
    }
    out
}

/// The use-trees of every `use` statement in `code`, spelled out, each with
/// whether it is re-exported (`pub use`, `pub(crate) use`).
fn use_statements(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use ").map(|i| i + from) {
        from = at + 4;
        if !word_starts(code, at) {
            continue;
        }
        let before = code[..at].trim_end();
        let tail = before
            .rsplit(|c: char| c.is_whitespace() || matches!(c, ';' | '{' | '}' | ']'))
            .next()
            .unwrap_or_default();
        let public = tail == "pub" || tail.starts_with("pub(");
        let end = code[from..].find(';').map_or(code.len(), |i| i + from);
        for path in spell_out(&code[from..end], "") {
            // `a::b as c`: the name it gives is not a path segment.
            let path = path.split(" as ").next().unwrap_or_default().trim();
            out.push((public, path.to_string()));
        }
        from = end;
    }
    out
}

/// `path` (as written in the file of `module`) as an absolute module path plus
/// names, or `None` for another crate's path.
fn absolute(path: &str, module: &ModPath, children: &BTreeSet<String>) -> Option<Vec<String>> {
    let segs: Vec<String> = path
        .split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let first = segs.first()?;
    let (base, rest): (ModPath, &[String]) = match first.as_str() {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (module.clone(), &segs[1..]),
        "super" => {
            let mut base = module.clone();
            let mut i = 0;
            while segs.get(i).is_some_and(|s| s == "super") {
                base.pop();
                i += 1;
            }
            (base, &segs[i..])
        }
        name if children.contains(name) => (module.clone(), &segs[..]),
        _ => return None,
    };
    let mut out = base;
    out.extend(rest.iter().cloned());
    Some(out)
}

/// `code` without its `pub use …;` statements.
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest
        .find("pub use ")
        .or_else(|| rest.find("pub(crate) use "))
    {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').map_or(rest.len(), |i| at + i + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Every `crate::`, `super::` and `self::` path outside `use` statements too
/// (`crate::a::f()` in a body).
fn inline_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root).map(|i| i + from) {
            from = at + root.len();
            if !word_starts(code, at) {
                continue;
            }
            for p in spell_out(&code[from..], "") {
                out.push(format!("{root}{p}"));
            }
        }
    }
    out
}

fn read_crate(src: &Path) -> Vec<Unit> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut units = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let name = rel.to_string_lossy();
        // Binaries are roots of their own; test files only test.
        let beside_lib = name == "main.rs" && src.join("lib.rs").is_file();
        if beside_lib
            || name.starts_with("bin/")
            || name.ends_with("tests.rs")
            || name.contains("/tests/")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let code = without_test_code(&code_only(&text));
        let module = module_path(src, &file);
        let defines = names_defined(&code);
        let children: BTreeSet<String> = code
            .match_indices("mod ")
            .filter(|(at, _)| word_starts(&code, *at))
            .map(|(at, _)| ident(code[at + 4..].trim_start()).to_string())
            .collect();
        let mut reexports = BTreeMap::new();
        let mut paths = Vec::new();
        for (public, path) in use_statements(&code) {
            let Some(abs) = absolute(&path, &module, &children) else {
                continue;
            };
            // A re-export hands a name on; it is followed, not counted as taken.
            if public {
                if let Some(last) = abs.last() {
                    reexports.insert(last.clone(), abs);
                }
            } else {
                paths.push(abs);
            }
        }
        for path in inline_paths(&without_reexports(&code)) {
            if let Some(abs) = absolute(&path, &module, &children) {
                paths.push(abs);
            }
        }
        units.push(Unit {
            file: file.to_string_lossy().into_owned(),
            module,
            defines,
            reexports,
            paths,
        });
    }
    units
}

/// The file a path's name comes from: the deepest module file on the path, then
/// through that file's re-exports while the name is not its own.
fn resolve(units: &[Unit], path: &[String], depth: usize) -> Option<usize> {
    let (at, unit) = (0..=path.len()).rev().find_map(|n| {
        units
            .iter()
            .position(|u| u.module == path[..n])
            .map(|i| (n, i))
    })?;
    let Some(name) = path.get(at) else {
        return Some(unit);
    };
    if depth < 8
        && !units[unit].defines.contains(name)
        && let Some(target) = units[unit].reexports.get(name)
        && target.as_slice() != path
    {
        let mut next = target.clone();
        next.extend(path[at + 1..].iter().cloned());
        return resolve(units, &next, depth + 1).or(Some(unit));
    }
    Some(unit)
}

/// The circles among `units`: each a ring of files (sorted), then the arrows inside
/// it (`from -> to: path`).
fn circles(units: &[Unit]) -> Vec<Vec<String>> {
    circles_with_arrows(units)
        .into_iter()
        .map(|(ring, _)| ring)
        .collect()
}

fn circles_with_arrows(units: &[Unit]) -> Vec<(Vec<String>, Vec<String>)> {
    let mut edges: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); units.len()];
    for (from, unit) in units.iter().enumerate() {
        for path in &unit.paths {
            if let Some(to) = resolve(units, path, 0)
                && to != from
            {
                edges[from].insert(to);
            }
        }
    }
    // Tarjan's strongly connected components; a component of two or more files is a circle.
    struct Walk<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk, v: usize) {
        w.index[v] = Some(w.next);
        w.low[v] = w.next;
        w.next += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &to in w.edges[v].clone().iter() {
            match w.index[to] {
                None => {
                    visit(w, to);
                    w.low[v] = w.low[v].min(w.low[to]);
                }
                Some(i) if w.on_stack[to] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut ring = Vec::new();
            while let Some(x) = w.stack.pop() {
                w.on_stack[x] = false;
                ring.push(x);
                if x == v {
                    break;
                }
            }
            if ring.len() > 1 {
                w.found.push(ring);
            }
        }
    }
    let mut w = Walk {
        edges: &edges,
        index: vec![None; units.len()],
        low: vec![0; units.len()],
        on_stack: vec![false; units.len()],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..units.len() {
        if w.index[v].is_none() {
            visit(&mut w, v);
        }
    }
    w.found
        .into_iter()
        .map(|ring| {
            let mut files: Vec<String> = ring.iter().map(|&i| units[i].file.clone()).collect();
            files.sort();
            let mut arrows = Vec::new();
            for &from in &ring {
                for path in &units[from].paths {
                    if let Some(to) = resolve(units, path, 0)
                        && to != from
                        && ring.contains(&to)
                    {
                        arrows.push(format!(
                            "{} -> {}: {}",
                            units[from].file,
                            units[to].file,
                            path.join("::")
                        ));
                    }
                }
            }
            arrows.dedup();
            (files, arrows)
        })
        .collect()
}

/// The `src` folders of the workspace's members (root `Cargo.toml`).
fn member_sources(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace's Cargo.toml");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(|m| {
            if m == "." {
                root.to_path_buf()
            } else {
                root.join(m)
            }
            .join("src")
        })
        .filter(|src| src.is_dir())
        .collect()
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let root = lavender_testkit::repo();
    let sources = member_sources(&root);
    assert!(
        sources.iter().any(|s| s.ends_with("daemon/src")) && sources.len() >= 4,
        "the workspace's members were not read: {sources:?}"
    );
    let mut found = Vec::new();
    for src in &sources {
        for (ring, arrows) in circles_with_arrows(&read_crate(src)) {
            let text = format!("{}\n  {}", ring.join(" ↔ "), arrows.join("\n  "));
            found.push(text.replace(&format!("{}/", root.display()), ""));
        }
    }
    assert!(
        found.is_empty(),
        "import circles between files (`farm-studio look <dir>/` draws what ties each; move the shared names into a file both import):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_follows_reexports_and_finds_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |p: &str, text: &str| {
        let path = src.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\n");
    // a/mod.rs re-exports X from a/x.rs; b uses it through the re-export.
    write("a/mod.rs", "mod x;\npub use x::X;\npub fn helper() {}\n");
    write("a/x.rs", "pub struct X;\n");
    write(
        "b.rs",
        "use crate::a::X;\npub fn f() -> X { X }\n#[cfg(test)]\nmod tests { use crate::a::helper; }\n",
    );
    assert!(circles(&read_crate(src)).is_empty(), "no ring yet");
    // x.rs takes a name from b.rs: a/x.rs ↔ b.rs, though b names only `crate::a`.
    write("a/x.rs", "use crate::b::f;\npub struct X;\n");
    let rings = circles(&read_crate(src));
    assert_eq!(rings.len(), 1, "{rings:?}");
    assert!(
        rings[0][0].ends_with("a/x.rs") && rings[0][1].ends_with("b.rs"),
        "{rings:?}"
    );
    // The same ring through a body's path, and a `super::` path.
    write(
        "a/x.rs",
        "pub struct X;\npub fn g() { super::super::b::f(); }\n",
    );
    assert_eq!(circles(&read_crate(src)).len(), 1);
}
