//! The fenced blocks of the repository's Markdown (README.md, docs/*.md): their info
//! string, where they are, and the `<!-- not run: reason -->` marker a shell block
//! that cannot run in a test carries on the line before it.

use std::path::Path;

/// The info strings of a block of commands a user types.
pub const SHELL: &[&str] = &["sh", "bash", "shell", "console"];

/// The marker, on the line just before a shell block, of one no test runs.
pub const NOT_RUN: &str = "<!-- not run:";

/// One fenced block.
#[derive(Debug, Clone)]
pub struct Block {
    /// `docs/PYTHON.md`, relative to the repository.
    pub doc: String,
    /// The 1-based line of its opening fence.
    pub line: usize,
    /// Its info string (`sh`, `yaml`, `text`), empty when it has none.
    pub info: String,
    /// Why no test runs it, from a `<!-- not run: reason -->` line before it.
    pub not_run: Option<String>,
    /// The `## ` heading it is under (empty before the first).
    pub section: String,
    pub body: String,
}

impl Block {
    pub fn is_shell(&self) -> bool {
        SHELL.contains(&self.info.as_str())
    }

    /// `docs/PYTHON.md:137`, for messages.
    pub fn place(&self) -> String {
        format!("{}:{}", self.doc, self.line)
    }
}

/// Every fenced block of `text` (the file `doc`), in order.
pub fn blocks(doc: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut section = String::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim().strip_prefix("```") else {
            if let Some(title) = lines[i].strip_prefix("## ") {
                section = title.trim().to_string();
            }
            i += 1;
            continue;
        };
        let open = i;
        let end = (open + 1..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .unwrap_or_else(|| panic!("{doc}:{}: a fenced block is never closed", open + 1));
        let not_run = open
            .checked_sub(1)
            .and_then(|p| lines[p].trim().strip_prefix(NOT_RUN))
            .map(|r| r.trim_end_matches("-->").trim().to_string());
        out.push(Block {
            doc: doc.to_string(),
            line: open + 1,
            info: info.trim().to_string(),
            not_run,
            section: section.clone(),
            body: lines[open + 1..end].join("\n") + "\n",
        });
        i = end + 1;
    }
    out
}

/// The fenced blocks of README.md and of every file in docs/, in that order.
pub fn repository_blocks() -> Vec<Block> {
    let root = crate::repo();
    let mut docs = vec!["README.md".to_string()];
    let mut in_docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs.iter()
        .flat_map(|d| blocks(d, &read(&root.join(d))))
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_their_info_line_and_marker() {
        let text = "## A\n```sh\nls\n```\n<!-- not run: needs a GPU -->\n```sh\nnvidia-smi\n```\n```\nplain\n```\n";
        let b = blocks("X.md", text);
        assert_eq!(b.len(), 3);
        assert_eq!(
            (b[0].line, b[0].info.as_str(), b[0].not_run.as_deref()),
            (2, "sh", None)
        );
        assert_eq!(b[1].not_run.as_deref(), Some("needs a GPU"));
        assert_eq!(b[1].section, "A");
        assert_eq!(b[1].body, "nvidia-smi\n");
        assert_eq!(b[2].info, "");
        assert!(!b[2].is_shell());
    }
}
