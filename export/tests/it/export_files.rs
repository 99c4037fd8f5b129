//! `lavender_export::export` on a fabricated run: the Hugging Face layout, the
//! optimizer moments bitwise, the dense learning rates, reuse and atomicity.

use std::fs;
use std::path::Path;

use lavender_export::{self as export, Carried, ExportOptions, ExportStatus, Selection};
use lavender_testkit::fabricated_run::*;
use lavender_testkit::read_json;
use safetensors::SafeTensors;
use serde_json::{Value, json};

fn export_all(run: &Path) -> export::ExportReport {
    export::export(&ExportOptions {
        selection: Selection::All,
        ..ExportOptions::new(run)
    })
    .unwrap()
}

fn header_metadata(path: &Path) -> Value {
    let bytes = fs::read(path).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    json!(meta.metadata())
}

#[test]
fn every_checkpoint_becomes_a_hugging_face_model_directory() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let report = export_all(&run);
    assert_eq!(report.out, run.join("exported"));
    let steps: Vec<u64> = report.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, [2, 4, 6]);
    assert!(
        report
            .checkpoints
            .iter()
            .all(|c| c.status == ExportStatus::Written)
    );

    let dir = run.join("exported/checkpoint-4");
    let cfg = read_json(&dir.join("config.json"));
    assert_eq!(cfg["model_type"], "gpt2");
    assert_eq!(cfg["architectures"], json!(["GPT2LMHeadModel"]));
    assert_eq!(cfg["activation_function"], "gelu_new");
    assert_eq!(cfg["vocab_size"], VOCAB);
    assert_eq!(cfg["n_positions"], POSITIONS);
    assert_eq!(cfg["n_embd"], EMBD);
    assert_eq!(cfg["n_layer"], 1);
    assert_eq!(cfg["n_head"], 2);
    assert_eq!(cfg["layer_norm_epsilon"], 1e-5);
    assert_eq!(cfg["tie_word_embeddings"], true);
    assert_eq!(cfg["bos_token_id"], 0);
    assert_eq!(cfg["eos_token_id"], 0);
    assert_eq!(cfg["pad_token_id"], 1);
    let gen_cfg = read_json(&dir.join("generation_config.json"));
    assert_eq!(gen_cfg["eos_token_id"], 0);
    let tok_cfg = read_json(&dir.join("tokenizer_config.json"));
    assert_eq!(tok_cfg["eos_token"], "<|endoftext|>");
    assert_eq!(tok_cfg["pad_token"], "<|pad|>");
    assert_eq!(tok_cfg["model_max_length"], POSITIONS);
    assert_eq!(
        fs::read(dir.join("tokenizer.json")).unwrap(),
        fs::read(run.join("tokenizer.json")).unwrap()
    );

    // Weights: the same tensors, byte for byte, under the same names; header exactly
    // {"format": "pt"}; no lm_head.
    let source = &report.checkpoints[1].source;
    let src_bytes = fs::read(source.join("model.safetensors")).unwrap();
    let out_bytes = fs::read(dir.join("model.safetensors")).unwrap();
    let src = SafeTensors::deserialize(&src_bytes).unwrap();
    let out = SafeTensors::deserialize(&out_bytes).unwrap();
    let mut names = out.names();
    names.sort();
    let mut want: Vec<String> = param_shapes().into_iter().map(|(n, _)| n).collect();
    want.sort();
    assert_eq!(names, want);
    assert!(!names.contains(&"lm_head.weight"));
    for n in names {
        assert_eq!(
            out.tensor(n).unwrap().data(),
            src.tensor(n).unwrap().data(),
            "{n}"
        );
    }
    assert_eq!(
        header_metadata(&dir.join("model.safetensors")),
        json!({"format": "pt"})
    );

    // Provenance, with lavender's own state.
    let marker = read_json(&dir.join("lavender_export.json"));
    assert_eq!(marker["source"]["step"], 4);
    assert_eq!(marker["lavender_trainer_state"]["stage"], "pretrain");
}

#[test]
fn optimizer_moments_are_the_checkpoints_bitwise() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let report = export_all(&run);
    for c in &report.checkpoints {
        let exported = c.path.as_ref().unwrap().join("optimizer.safetensors");
        let original = c.source.join("optimizer.safetensors");
        assert_eq!(
            fs::read(&exported).unwrap(),
            fs::read(&original).unwrap(),
            "{}",
            exported.display()
        );
        let bytes = fs::read(&exported).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for (name, _) in param_shapes() {
            assert!(st.tensor(&format!("{name}.exp_avg_sq")).is_ok(), "{name}");
            assert!(st.tensor(&format!("{name}.exp_avg")).is_ok(), "{name}");
        }
        // The same moments for torch.load readers (checked against torch itself in
        // worker/tests/attribution_bergson.rs): a stored zip with torch's records.
        let pt = fs::read(c.path.as_ref().unwrap().join("optimizer.pt")).unwrap();
        assert_eq!(&pt[..4], b"PK\x03\x04");
        for record in [
            "optimizer/data.pkl",
            "optimizer/version",
            "optimizer/data/0",
        ] {
            assert!(
                pt.windows(record.len()).any(|w| w == record.as_bytes()),
                "{record}"
            );
        }
        // Every moment's bytes are in it, unchanged.
        let exp_avg_sq = st
            .tensor("transformer.h.0.mlp.c_fc.weight.exp_avg_sq")
            .unwrap();
        let data = exp_avg_sq.data();
        assert!(pt.windows(data.len()).any(|w| w == data));
        let meta = header_metadata(&exported);
        assert_eq!(meta["step"], c.step.to_string());
        assert_eq!(meta["betas"], "[0.9, 0.999]");
        assert_eq!(meta["eps"], "0.00000001");
        assert_eq!(meta["weight_decay"], "0.1");
        // Not a copy: the checkpoint's own file, hard-linked.
        assert_eq!(c.optimizer_file, Some(Carried::Linked));
        assert_eq!(inode(&exported), inode(&original), "{}", exported.display());
    }
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // The export outlives the checkpoint: retention deleting it leaves the link.
    let first = &report.checkpoints[0];
    let kept = fs::read(first.source.join("optimizer.safetensors")).unwrap();
    fs::remove_dir_all(&first.source).unwrap();
    let exported = first.path.as_ref().unwrap().join("optimizer.safetensors");
    assert_eq!(fs::read(&exported).unwrap(), kept);
    // Reused exports say how they carry the file too.
    let again = export_all(&run);
    assert!(
        again.checkpoints[1..]
            .iter()
            .all(|c| c.status == ExportStatus::Reused && c.optimizer_file == Some(Carried::Linked)),
        "{:?}",
        again.checkpoints
    );
}

fn inode(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).unwrap();
    (m.dev(), m.ino())
}

/// An export to another filesystem (tmpfs at /dev/shm) cannot link: it copies, and
/// says so in a warning.
#[cfg(target_os = "linux")]
#[test]
fn an_export_on_another_filesystem_copies_the_moments_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let out = tempfile::tempdir_in("/dev/shm").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_ne!(
        fs::metadata(out.path()).unwrap().dev(),
        fs::metadata(root.path()).unwrap().dev(),
        "/dev/shm must be another filesystem than the temporary directory for this test"
    );
    let report = export::export(&ExportOptions {
        selection: Selection::All,
        out: Some(out.path().to_path_buf()),
        ..ExportOptions::new(&run)
    })
    .unwrap();
    for c in &report.checkpoints {
        assert_eq!(c.optimizer_file, Some(Carried::Copied));
        let exported = c.path.as_ref().unwrap().join("optimizer.safetensors");
        assert_eq!(
            fs::read(&exported).unwrap(),
            fs::read(c.source.join("optimizer.safetensors")).unwrap()
        );
    }
    assert_eq!(report.warnings.len(), 3, "{:?}", report.warnings);
    for (w, step) in report.warnings.iter().zip([2, 4, 6]) {
        assert!(
            w.contains(&format!("checkpoint-{step}: optimizer.safetensors copied"))
                && w.contains("another filesystem"),
            "{w}"
        );
    }
    let text = export::export_text(&report);
    assert!(
        text.contains("warning: checkpoint-2: optimizer.safetensors copied"),
        "{text}"
    );
}

#[test]
fn log_history_has_the_trainers_learning_rate_for_every_step() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    export_all(&run);
    for step in [2u64, 4, 6] {
        let path = run.join(format!("exported/checkpoint-{step}/trainer_state.json"));
        let st = read_json(&path);
        assert_eq!(st["global_step"], step);
        assert_eq!(st["epoch"], step as f64 / 10.0);
        assert_eq!(st["logging_steps"], 1);
        let lrs: Vec<(u64, f64)> = st["log_history"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| Some((e["step"].as_u64()?, e["learning_rate"].as_f64()?)))
            .collect();
        let want: Vec<(u64, f64)> = (1..=step).map(|s| (s, lr(s))).collect();
        assert_eq!(lrs, want, "{}", path.display());
        // Evaluation entries travel too, as in Hugging Face's history, each with
        // its step's learning rate (SOURCE maps step → learning_rate over all).
        let evals: Vec<&Value> = st["log_history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.get("eval_loss").is_some())
            .collect();
        assert!(!evals.is_empty());
        for e in evals {
            assert_eq!(
                e["learning_rate"].as_f64(),
                Some(lr(e["step"].as_u64().unwrap()))
            );
        }
        // Only TrainerState's fields: its load_from_json passes every key on.
        let keys: Vec<&str> = st.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(
            !keys.contains(&"step") && !keys.contains(&"stage"),
            "{keys:?}"
        );
        // Sorted keys: this crate's serde_json map is ordered, so re-serializing
        // the parsed value reproduces a sorted file exactly.
        let sorted_map: serde_json::Map<String, Value> =
            serde_json::from_str(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(sorted_map.keys().next().unwrap(), "a");
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text, serde_json::to_string_pretty(&st).unwrap() + "\n");
    }
}

#[test]
fn rerunning_reuses_complete_exports_and_force_rebuilds_them() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    export_all(&run);
    let sentinel = run.join("exported/checkpoint-2/sentinel");
    fs::write(&sentinel, b"kept").unwrap();

    let again = export_all(&run);
    assert!(
        again
            .checkpoints
            .iter()
            .all(|c| c.status == ExportStatus::Reused),
        "{again:?}"
    );
    assert!(sentinel.exists(), "a reused export is left as it is");

    // An export missing a file is not complete: rebuilt.
    fs::remove_file(run.join("exported/checkpoint-4/tokenizer_config.json")).unwrap();
    let third = export_all(&run);
    assert_eq!(third.checkpoints[1].status, ExportStatus::Written);
    assert_eq!(third.checkpoints[0].status, ExportStatus::Reused);

    let forced = export::export(&ExportOptions {
        selection: Selection::All,
        force: true,
        ..ExportOptions::new(&run)
    })
    .unwrap();
    assert!(
        forced
            .checkpoints
            .iter()
            .all(|c| c.status == ExportStatus::Written)
    );
    assert!(!sentinel.exists());
    assert_no_temporaries(&run.join("exported"));
}

#[test]
fn a_new_checkpoint_at_an_exported_step_replaces_the_export() {
    let root = tempfile::tempdir().unwrap();
    let spec = RunSpec::default();
    let run = make_run(root.path(), &spec);
    export_all(&run);
    let before = fs::read(run.join("exported/checkpoint-6/model.safetensors")).unwrap();
    // A resume from step 4 trained step 6 again: a newer checkpoint, same step.
    let old = checkpoints(&run).pop().unwrap();
    fs::remove_dir_all(&old).unwrap();
    save_checkpoint(&run, "sft", 6, 9, &spec);
    let report = export_all(&run);
    assert_eq!(report.checkpoints[2].status, ExportStatus::Written);
    let after = fs::read(run.join("exported/checkpoint-6/model.safetensors")).unwrap();
    assert_ne!(before, after);
}

#[test]
fn two_checkpoints_of_one_step_export_the_newest() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(
        root.path(),
        &RunSpec {
            saves: vec![("pretrain", 3), ("dpo", 6), ("final", 6)],
            ..RunSpec::default()
        },
    );
    let report = export_all(&run);
    let statuses: Vec<(&str, bool)> = report
        .checkpoints
        .iter()
        .map(|c| {
            (
                c.stage.as_str(),
                matches!(c.status, ExportStatus::Skipped { .. }),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [("pretrain", false), ("dpo", true), ("final", false)]
    );
    let marker = read_json(&run.join("exported/checkpoint-6/lavender_export.json"));
    assert_eq!(marker["source"]["stage"], "final");
}

fn assert_no_temporaries(dir: &Path) {
    let tmp: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

#[test]
fn a_failed_export_leaves_nothing_that_looks_complete() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    // The second checkpoint's moments belong to another model.
    let broken = checkpoints(&run)[1].clone();
    write_tensors(
        &broken.join("optimizer.safetensors"),
        model_tensors(1),
        [("step".to_string(), "4".to_string())].into(),
    );
    // A leftover of an export process that died mid-way.
    let out = run.join("exported");
    fs::create_dir_all(out.join(".tmp-checkpoint-2-999999999-0/x")).unwrap();

    let err = export::export(&ExportOptions {
        selection: Selection::All,
        ..ExportOptions::new(&run)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("optimizer.safetensors") && err.contains("exp_avg"),
        "{err}"
    );
    assert!(out.join("checkpoint-2").join("trainer_state.json").exists());
    assert!(
        !out.join("checkpoint-4").exists(),
        "no partial checkpoint-4"
    );
    assert_no_temporaries(&out);
}

#[test]
fn a_checkpoint_without_moments_exports_with_a_warning() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(
        root.path(),
        &RunSpec {
            with_optimizer: false,
            ..RunSpec::default()
        },
    );
    let report = export::export(&ExportOptions::new(&run)).unwrap();
    assert_eq!(report.checkpoints.len(), 1, "default: the newest only");
    let c = &report.checkpoints[0];
    assert_eq!(c.step, 6);
    assert!(!c.optimizer);
    assert!(
        !run.join("exported/checkpoint-6/optimizer.safetensors")
            .exists()
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("no optimizer.safetensors")),
        "{:?}",
        report.warnings
    );
    assert!(!run.join("exported/checkpoint-6/optimizer.pt").exists());
    let text = export::export_text(&report);
    assert!(
        text.contains("warning:") && text.contains("checkpoint-6"),
        "{text}"
    );
}

#[test]
fn a_history_from_another_trajectory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let mut history = read_json(&run.join("log_history.json"));
    for e in history.as_array_mut().unwrap() {
        if e["step"] == 6 && e.get("learning_rate").is_some() {
            e["learning_rate"] = json!(0.5);
        }
    }
    fs::write(
        run.join("log_history.json"),
        serde_json::to_vec(&history).unwrap(),
    )
    .unwrap();
    let err = export::export(&ExportOptions::new(&run))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("log_history.json") && err.contains("learning_rate 0.5"),
        "{err}"
    );
    assert!(!run.join("exported/checkpoint-6").exists());
}

#[test]
fn named_checkpoints_and_custom_out() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let names: Vec<String> = checkpoints(&run)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let out = root.path().join("elsewhere");
    let report = export::export(&ExportOptions {
        selection: Selection::Named(vec![names[2].clone(), names[0].clone()]),
        out: Some(out.clone()),
        ..ExportOptions::new(&run)
    })
    .unwrap();
    let steps: Vec<u64> = report.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, [2, 6], "in training order");
    assert!(out.join("checkpoint-2/model.safetensors").exists());

    let err = export::export(&ExportOptions {
        selection: Selection::Named(vec!["pretrain-99-00-00-0042".into()]),
        ..ExportOptions::new(&run)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("pretrain-99-00-00-0042") && err.contains(&names[0]),
        "{err}"
    );
}

#[test]
fn locate_run_takes_a_path_a_name_or_the_newest() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let newer = root.path().join("checkpoints/run-2026-02-01_00-00-00");
    fs::create_dir_all(&newer).unwrap();
    let runs = root.path().join("checkpoints");
    assert_eq!(export::locate_run(&runs, None).unwrap(), newer);
    assert_eq!(export::locate_run(&runs, Some(RUN_NAME)).unwrap(), run);
    assert_eq!(
        export::locate_run(&runs, Some(run.to_str().unwrap())).unwrap(),
        run
    );
    let err = export::locate_run(&runs, Some("run-1999"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("run-1999") && err.contains(RUN_NAME), "{err}");
    let empty = tempfile::tempdir().unwrap();
    let err = export::locate_run(&empty.path().join("checkpoints"), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a training run not found"), "{err}");
}

#[test]
fn json_report_names_every_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let report = export_all(&run);
    let v: Value = serde_json::from_str(&export::export_json(&report)).unwrap();
    assert_eq!(v["checkpoints"].as_array().unwrap().len(), 3);
    assert_eq!(v["checkpoints"][0]["status"], "written");
    assert_eq!(v["checkpoints"][0]["step"], 2);
    assert_eq!(v["checkpoints"][0]["optimizer"], true);
}

#[test]
fn the_run_history_is_rewritten_as_hf_readers_take_it() {
    let root = tempfile::tempdir().unwrap();
    // The fabricated history has evaluations without a learning_rate, as the
    // worker writes them; SOURCE reads this file for exports under the run.
    let run = make_run(root.path(), &RunSpec::default());
    let before = read_json(&run.join("log_history.json"));
    let evals_before = before
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("eval_loss").is_some() && e.get("learning_rate").is_none())
        .count();
    assert!(evals_before > 0);
    let report = export_all(&run);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let history = read_json(&run.join("log_history.json"));
    let entries = history.as_array().unwrap();
    // One entry per step: each evaluation is on its step's training entry.
    let steps: Vec<u64> = entries
        .iter()
        .map(|e| e["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=6).collect::<Vec<u64>>());
    for e in entries {
        let step = e["step"].as_u64().unwrap();
        assert_eq!(e["learning_rate"].as_f64(), Some(lr(step)), "{e}");
        assert!(e["loss"].is_number(), "{e}");
        assert_eq!(e.get("eval_loss").is_some(), step % 2 == 0, "{e}");
    }
    let bytes = fs::read(run.join("log_history.json")).unwrap();
    let again = export::export(&ExportOptions {
        selection: Selection::All,
        force: true,
        ..ExportOptions::new(&run)
    })
    .unwrap();
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    assert_eq!(fs::read(run.join("log_history.json")).unwrap(), bytes);
}

/// `--ema` exports each checkpoint's moving-average weights (`ema.safetensors`) as
/// the model, without the weights' optimizer moments, beside the plain exports.
#[test]
fn ema_exports_the_moving_average_weights() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let ckpts = checkpoints(&run);
    // Before any checkpoint has an average: an error naming the file and the key.
    let err = export::export(&ExportOptions {
        ema: true,
        ..ExportOptions::new(&run)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("ema.safetensors")
            && err.contains("training.ema")
            && err.contains("without --ema"),
        "{err}"
    );
    for c in &ckpts {
        write_tensors(
            &c.join(export::EMA_FILE),
            model_tensors(77),
            Default::default(),
        );
    }
    let plain = export_all(&run);
    let report = export::export(&ExportOptions {
        selection: Selection::All,
        ema: true,
        ..ExportOptions::new(&run)
    })
    .unwrap();
    assert_eq!(report.out, run.join("exported-ema"));
    assert!(
        report
            .checkpoints
            .iter()
            .all(|c| c.status == ExportStatus::Written && !c.optimizer)
    );
    let dir = run.join("exported-ema/checkpoint-4");
    assert!(
        !dir.join("optimizer.safetensors").exists(),
        "the moments are the weights'"
    );
    let tensors = |path: &Path| -> Vec<(String, Vec<u8>)> {
        let bytes = fs::read(path).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut v: Vec<(String, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .map(|(n, t)| (n, t.data().to_vec()))
            .collect();
        v.sort();
        v
    };
    let ema = tensors(&dir.join("model.safetensors"));
    assert_eq!(ema, tensors(&ckpts[1].join(export::EMA_FILE)));
    assert_ne!(
        ema,
        tensors(&run.join("exported/checkpoint-4/model.safetensors"))
    );
    assert_eq!(
        read_json(&dir.join("lavender_export.json"))["source"]["weights"],
        "ema"
    );
    // The plain exports stay as they were, and each kind is reused by a rerun of it.
    assert!(plain.checkpoints.iter().all(|c| c.optimizer));
    let again = export::export(&ExportOptions {
        selection: Selection::All,
        ema: true,
        ..ExportOptions::new(&run)
    })
    .unwrap();
    assert!(
        again
            .checkpoints
            .iter()
            .all(|c| c.status == ExportStatus::Reused)
    );
}
