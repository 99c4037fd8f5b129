//! Remote retention (`replicate.keep`), apart from the local one, so the remote can
//! keep what the local disk could not: per run, the newest `keep` committed remote
//! checkpoints, plus the best by validation loss, each stage's last and every final
//! one. Pure: which to drop; the replicator deletes them (manifest first).

use std::collections::BTreeSet;

use super::manifest::RemoteManifest;

/// The names of `run`'s remote checkpoints (`all`, any order) that `keep` drops.
pub(crate) fn drop_list(all: &[&RemoteManifest], keep: usize) -> Vec<String> {
    let mut sorted: Vec<&RemoteManifest> = all.to_vec();
    sorted.sort_by(|a, b| {
        (a.completed_unix_ms, a.step, &a.checkpoint).cmp(&(
            b.completed_unix_ms,
            b.step,
            &b.checkpoint,
        ))
    });
    let mut kept: BTreeSet<&str> = sorted
        .iter()
        .rev()
        .take(keep.max(1))
        .map(|m| m.checkpoint.as_str())
        .collect();
    if let Some(best) = sorted
        .iter()
        .filter(|m| m.val_loss.is_some_and(f64::is_finite))
        .min_by(|a, b| a.val_loss.unwrap().total_cmp(&b.val_loss.unwrap()))
    {
        kept.insert(&best.checkpoint);
    }
    let stages: BTreeSet<&str> = sorted.iter().map(|m| m.stage.as_str()).collect();
    for stage in stages {
        if let Some(last) = sorted.iter().rev().find(|m| m.stage == stage) {
            kept.insert(&last.checkpoint);
        }
    }
    for m in &sorted {
        if m.checkpoint.starts_with("final") {
            kept.insert(&m.checkpoint);
        }
    }
    sorted
        .iter()
        .filter(|m| !kept.contains(m.checkpoint.as_str()))
        .map(|m| m.checkpoint.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, stage: &str, at: u64, val: Option<f64>) -> RemoteManifest {
        RemoteManifest {
            checkpoint: name.into(),
            stage: stage.into(),
            step: at,
            val_loss: val,
            completed_unix_ms: at * 1000,
            ..super::super::manifest::tests::manifest(&[])
        }
    }

    #[test]
    fn keeps_the_newest_the_best_each_stages_last_and_the_finals() {
        let all = [
            m("pretrain-1", "pretrain", 1, Some(3.0)),
            m("pretrain-2", "pretrain", 2, Some(0.5)),
            m("pretrain-3", "pretrain", 3, Some(2.0)),
            m("pretrain-4", "pretrain", 4, None),
            m("sft-5", "sft", 5, Some(9.0)),
            m("sft-6", "sft", 6, None),
            m("sft-7", "sft", 7, None),
            m("final-8", "sft", 8, None),
        ];
        let refs: Vec<&RemoteManifest> = all.iter().rev().collect();
        let table: [(usize, &[&str]); 3] = [
            // newest 1 (final-8), best (pretrain-2), pretrain's last (pretrain-4)
            (1, &["pretrain-1", "pretrain-3", "sft-5", "sft-6", "sft-7"]),
            (3, &["pretrain-1", "pretrain-3", "sft-5"]),
            (20, &[]),
        ];
        for (keep, dropped) in table {
            assert_eq!(drop_list(&refs, keep), dropped, "keep {keep}");
        }
        assert_eq!(drop_list(&[], 1), Vec::<String>::new());
    }
}
