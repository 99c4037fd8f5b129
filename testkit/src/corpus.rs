//! A small generated corpus for the real worker: enough for a tokenizer, shards and
//! derived SFT/DPO sets, and fast to process.

use std::path::{Path, PathBuf};

/// The vocabulary of [`write_speeches`]; a test may take fewer of them.
pub const WORDS: [&str; 12] = [
    "gentle", "sword", "crown", "night", "river", "honest", "fortune", "storm", "letter", "garden",
    "winter", "promise",
];

/// Writes `dir/corpus.txt`, 400 short speeches (about 24 KiB) over `words`, and
/// returns its path.
pub fn write_speeches(dir: &Path, words: &[&str]) -> PathBuf {
    let docs: Vec<String> = (0..400)
        .map(|i| {
            format!(
                "SPEAKER{}:\nThe {} and the {} of speech {i} are {} tonight.",
                i % 7,
                words[i % words.len()],
                words[(i * 5 + 3) % words.len()],
                words[(i * 7 + 1) % words.len()]
            )
        })
        .collect();
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("corpus.txt");
    std::fs::write(&path, docs.join("\n\n")).unwrap();
    path
}
