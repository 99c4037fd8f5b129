//! `lavender_export::resolve` and step parsing: each field of SOURCE's config is
//! filled from the run only when not given, foreign checkpoints infer nothing,
//! unexported ones are refused.

use std::fs;
use std::path::{Path, PathBuf};

use lavender_export::{
    self as export, ExportError, ExportOptions, Field, ResolveOptions, Selection, checkpoint_step,
};
use lavender_testkit::fabricated_run::*;
use serde_json::Value;

/// A run with β1 = `beta1`, exported (all checkpoints: steps 2, 4, 6).
fn exported_run(root: &Path, beta1: f64) -> (PathBuf, Vec<PathBuf>) {
    let run = make_run(
        root,
        &RunSpec {
            beta1,
            ..RunSpec::default()
        },
    );
    let report = export::export(&ExportOptions {
        selection: Selection::All,
        ..ExportOptions::new(&run)
    })
    .unwrap();
    let paths = report
        .checkpoints
        .into_iter()
        .map(|c| c.path.unwrap())
        .collect();
    (run, paths)
}

fn opts(checkpoints: &[PathBuf]) -> ResolveOptions {
    ResolveOptions {
        checkpoints: checkpoints.to_vec(),
        ..ResolveOptions::default()
    }
}

#[test]
fn steps_come_from_names_or_from_lavenders_trainer_state() {
    let root = tempfile::tempdir().unwrap();
    for (name, step) in [("checkpoint-120", 120), ("step_7", 7), ("step_8.ckpt", 8)] {
        let d = root.path().join(name);
        fs::create_dir(&d).unwrap();
        assert_eq!(checkpoint_step(&d).unwrap(), step, "{name}");
    }
    let run = make_run(root.path(), &RunSpec::default());
    let lavender = &checkpoints(&run)[1];
    assert!(
        lavender
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("pretrain-")
    );
    assert_eq!(checkpoint_step(lavender).unwrap(), 4);
    let other = root.path().join("final_model");
    fs::create_dir(&other).unwrap();
    let err = checkpoint_step(&other).unwrap_err().to_string();
    assert!(
        err.contains("final_model") && err.contains("checkpoint-<N>"),
        "{err}"
    );
}

#[test]
fn model_path_is_filled_with_the_newest_exported_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let (run, ckpts) = exported_run(root.path(), 0.9);
    let r = export::resolve(&opts(&ckpts)).unwrap();
    assert_eq!(r.run.as_deref(), Some(run.as_path()));
    assert_eq!(r.model_path.as_ref(), Some(&ckpts[2]));
    assert_eq!(r.sources.model_path, Field::Run);
    let steps: Vec<Option<u64>> = r.checkpoints.iter().map(|c| c.step).collect();
    assert_eq!(steps, [Some(2), Some(4), Some(6)]);
}

#[test]
fn an_explicit_model_path_wins() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let r = export::resolve(&ResolveOptions {
        model_path: Some("/models/base".into()),
        ..opts(&ckpts)
    })
    .unwrap();
    assert_eq!(r.model_path, Some(PathBuf::from("/models/base")));
    assert_eq!(r.sources.model_path, Field::Explicit);
}

#[test]
fn an_adamw_run_has_source_momentum_zero_whatever_its_beta1() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.95);
    let r = export::resolve(&opts(&ckpts)).unwrap();
    // SOURCE's momentum is heavy-ball SGD's; AdamW's β1 is not one.
    assert_eq!(r.momentum, Some(0.0));
    assert_eq!(r.sources.momentum, Field::Run);
    assert_eq!(r.use_adam_preconditioner, Some(true));
    assert_eq!(r.sources.use_adam_preconditioner, Field::Run);
    assert_eq!(r.optimizer.as_deref(), Some("adamw"));
    assert!(r.segment_details.unwrap().iter().all(|s| s.factor == 1.0));
}

#[test]
fn an_explicit_momentum_wins() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.95);
    let r = export::resolve(&ResolveOptions {
        momentum: Some(0.5),
        ..opts(&ckpts)
    })
    .unwrap();
    assert_eq!(r.momentum, Some(0.5));
    assert_eq!(r.sources.momentum, Field::Explicit);
}

#[test]
fn explicit_zero_and_false_survive() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.95);
    let r = export::resolve(&ResolveOptions {
        momentum: Some(0.0),
        use_adam_preconditioner: Some(false),
        ..opts(&ckpts)
    })
    .unwrap();
    assert_eq!(r.momentum, Some(0.0), "0.0 is a value, not unset");
    assert_eq!(r.sources.momentum, Field::Explicit);
    assert_eq!(r.use_adam_preconditioner, Some(false));
    assert_eq!(r.sources.use_adam_preconditioner, Field::Explicit);
    let segs = r.segment_details.as_ref().unwrap();
    assert!(segs.iter().all(|s| s.factor == 1.0));
    let yaml = export::resolve_yaml(&r);
    assert!(
        yaml.contains("  momentum: 0.0\n") && yaml.contains("use_adam_preconditioner: false"),
        "{yaml}"
    );
}

#[test]
fn step_lrs_and_per_segment_lists_come_from_the_runs_history() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let r = export::resolve(&opts(&ckpts[..2])).unwrap();
    let want: Vec<f64> = (1..=4).map(lr).collect();
    assert_eq!(r.step_lrs, Some(want), "up to the last checkpoint given");
    assert_eq!(r.sources.step_lrs, Field::Run);
    // SOURCE's lists: one average rate and one step count per segment.
    assert_eq!(r.segments, 2);
    assert_eq!(r.step_size_list, Some(vec![2, 2]));
    let avg = r.lr_list.unwrap();
    assert_eq!(avg.len(), 2);
    assert!((avg[1] - (lr(3) + lr(4)) / 2.0).abs() < 1e-18, "{avg:?}");
    assert_eq!(r.sources.lr_list, Field::Run);
}

#[test]
fn fewer_segments_group_checkpoints_as_source_does() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let err = export::resolve(&ResolveOptions {
        segments: Some(2),
        ..opts(&ckpts)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--segments: 2 does not divide the 3"), "{err}");
    let r = export::resolve(&ResolveOptions {
        segments: Some(2),
        ..opts(&ckpts[..2])
    })
    .unwrap();
    let r1 = export::resolve(&ResolveOptions {
        segments: Some(1),
        ..opts(&ckpts[..2])
    })
    .unwrap();
    assert_eq!(
        (r.step_size_list, r1.step_size_list),
        (Some(vec![2, 2]), Some(vec![4]))
    );
    let seg = &r1.segment_details.unwrap()[0];
    let want: f64 = (1..=4).map(lr).sum();
    assert!((seg.lr_x_steps - want).abs() < 1e-15, "{seg:?}");
    assert_eq!((seg.from_step, seg.to_step), (0, 4));
}

#[test]
fn explicit_step_lrs_win() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let lrs = vec![0.25; 6];
    let r = export::resolve(&ResolveOptions {
        step_lrs: Some(lrs.clone()),
        ..opts(&ckpts)
    })
    .unwrap();
    assert_eq!(r.step_lrs, Some(lrs));
    assert_eq!(r.sources.step_lrs, Field::Explicit);
    assert_eq!(r.sources.lr_list, Field::Explicit);
    assert_eq!(r.lr_list, Some(vec![0.25; 3]));
    let x: Vec<f64> = r
        .segment_details
        .unwrap()
        .iter()
        .map(|s| s.lr_x_steps)
        .collect();
    assert_eq!(x, [0.5, 0.5, 0.5]);
}

#[test]
fn explicit_per_segment_lists_pass_through_and_go_together() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let r = export::resolve(&ResolveOptions {
        lr_list: Some(vec![1e-3, 2e-3, 3e-3]),
        step_size_list: Some(vec![2, 2, 2]),
        ..opts(&ckpts)
    })
    .unwrap();
    assert_eq!(r.lr_list, Some(vec![1e-3, 2e-3, 3e-3]));
    assert_eq!(r.sources.lr_list, Field::Explicit);
    let err = export::resolve(&ResolveOptions {
        lr_list: Some(vec![1e-3]),
        ..opts(&ckpts)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("only together with step_size_list"), "{err}");
    let err = export::resolve(&ResolveOptions {
        lr_list: Some(vec![1e-3; 2]),
        step_size_list: Some(vec![2; 2]),
        ..opts(&ckpts)
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--lr-list: has 2 values") && err.contains("3 segments"),
        "{err}"
    );
}

#[test]
fn a_heavy_ball_momentum_of_095_makes_lr_times_steps_twenty_fold() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let adamw = export::resolve(&opts(&ckpts)).unwrap();
    // An SGD-momentum trajectory's β is given explicitly.
    let sgd = export::resolve(&ResolveOptions {
        momentum: Some(0.95),
        ..opts(&ckpts)
    })
    .unwrap();
    let plain = adamw.segment_details.unwrap();
    let scaled = sgd.segment_details.as_ref().unwrap();
    assert_eq!(plain.len(), 3);
    for (p, s) in plain.iter().zip(scaled) {
        let want: f64 = (p.from_step + 1..=p.to_step).map(lr).sum();
        assert!((p.lr_x_steps - want).abs() < 1e-15, "{p:?}");
        let ratio = s.lr_x_steps / p.lr_x_steps;
        assert!((ratio - 20.0).abs() < 1e-9, "ratio {ratio}");
    }
    let yaml = export::resolve_yaml(&sgd);
    assert!(
        yaml.contains("  momentum: 0.95\n") && yaml.contains("× 20.0000"),
        "{yaml}"
    );
}

#[test]
fn yaml_floats_read_back_as_floats() {
    assert_eq!(export::yaml_float(0.0), "0.0");
    assert_eq!(export::yaml_float(1e-7), "1.0e-7");
    assert_eq!(export::yaml_float(3.5e-4), "0.00035");
    assert_eq!(export::yaml_float(1e20), "1.0e+20");
    assert_eq!(export::yaml_float(-2.5e-9), "-2.5e-9");
}

#[test]
fn foreign_checkpoints_infer_nothing_and_pass_through_unchanged() {
    let root = tempfile::tempdir().unwrap();
    // An unrelated lavender-looking run config higher up must not be taken.
    fs::write(root.path().join("config.yaml"), config_yaml(0.95)).unwrap();
    let hf_out = root.path().join("experiments/hf-trainer/output");
    let bergson = root.path().join("experiments/bergson");
    let mut given = Vec::new();
    for step in [100, 200] {
        let d = hf_out.join(format!("checkpoint-{step}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join("trainer_state.json"),
            r#"{"global_step": 100, "log_history": []}"#,
        )
        .unwrap();
        given.push(d);
    }
    let r = export::resolve(&opts(&given)).unwrap();
    assert_eq!(r.run, None);
    assert_eq!(r.model_path, None);
    assert_eq!(r.momentum, None);
    assert_eq!(r.use_adam_preconditioner, None);
    assert_eq!(r.step_lrs, None);
    assert_eq!(r.lr_list, None);
    assert_eq!(r.segment_details, None);
    assert_eq!(
        (r.sources.model_path, r.sources.momentum, r.sources.lr_list),
        (Field::Unset, Field::Unset, Field::Unset)
    );
    let yaml = export::resolve_yaml(&r);
    assert!(
        !yaml.contains("momentum:") && !yaml.contains("lr_list:"),
        "unset values are left to bergson: {yaml}"
    );
    let paths: Vec<&PathBuf> = r.checkpoints.iter().map(|c| &c.path).collect();
    assert_eq!(paths, given.iter().collect::<Vec<_>>());
    assert_eq!(r.checkpoints[1].step, Some(200));

    // Raw step_<N>.ckpt directories, even with a config.yaml right beside them.
    fs::create_dir_all(bergson.join("step_5.ckpt")).unwrap();
    fs::write(bergson.join("config.yaml"), config_yaml(0.95)).unwrap();
    let r = export::resolve(&opts(&[bergson.join("step_5.ckpt")])).unwrap();
    assert_eq!((r.run, r.momentum), (None, None));
    assert_eq!(r.checkpoints[0].step, Some(5));

    // Explicit values still pass through, and the segments follow from them.
    let r = export::resolve(&ResolveOptions {
        momentum: Some(0.5),
        step_lrs: Some(vec![0.5; 200]),
        ..opts(&given)
    })
    .unwrap();
    assert_eq!(r.segment_details.unwrap()[1].lr_x_steps, 100.0);
}

#[test]
fn an_unexported_lavender_checkpoint_says_to_export_first() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    let raw = checkpoints(&run)[0].clone();
    let err = export::resolve(&opts(std::slice::from_ref(&raw))).unwrap_err();
    assert!(matches!(err, ExportError::NotExported { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("lavenderd export")
            && msg.contains(&raw.display().to_string())
            && msg.contains("exported/checkpoint-<step>"),
        "{msg}"
    );
}

/// The one rule, `lavender::checkpoint::is_complete` (the marker parses), for every
/// reader: a save whose `trainer_state.json` is empty or cut short is no checkpoint
/// for `--resume latest`, export, step parsing, model dimensions or resolve.
#[test]
fn a_checkpoint_whose_marker_does_not_parse_is_incomplete_for_every_reader() {
    for marker in ["", "  \n", "{\"step\": 6, \"st", "not json"] {
        let root = tempfile::tempdir().unwrap();
        let run = make_run(root.path(), &RunSpec::default());
        let all = checkpoints(&run);
        let (older, newest) = (all[1].clone(), all[2].clone());
        fs::write(newest.join("trainer_state.json"), marker).unwrap();
        assert!(!lavender::checkpoint::is_complete(&newest), "{marker:?}");

        let latest =
            lavender::checkpoint::resolve_resume("latest", &root.path().join("checkpoints"))
                .unwrap();
        assert_eq!(latest.path, older, "--resume latest skips {marker:?}");
        let by_run =
            lavender::checkpoint::resolve_resume(run.to_str().unwrap(), root.path()).unwrap();
        assert_eq!(by_run.path, older, "--resume <run> skips {marker:?}");
        assert!(
            lavender::checkpoint::resolve_resume(newest.to_str().unwrap(), root.path()).is_err(),
            "--resume <it> is refused with {marker:?}"
        );

        assert!(matches!(
            checkpoint_step(&newest),
            Err(ExportError::NoStep { .. })
        ));
        assert!(export::model_dims(&newest).is_err(), "{marker:?}");
        let err = export::resolve(&opts(std::slice::from_ref(&newest))).unwrap_err();
        assert!(
            err.to_string().contains("incomplete")
                && err.to_string().contains(&newest.display().to_string()),
            "{err}"
        );

        let report = export::export(&ExportOptions {
            selection: Selection::All,
            ..ExportOptions::new(&run)
        })
        .unwrap();
        let steps: Vec<u64> = report.checkpoints.iter().map(|c| c.step).collect();
        assert_eq!(
            steps,
            [2, 4],
            "the incomplete step 6 is not exported ({marker:?})"
        );
    }
}

#[test]
fn an_export_into_the_run_directory_is_found_too() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(
        root.path(),
        &RunSpec {
            beta1: 0.8,
            ..RunSpec::default()
        },
    );
    export::export(&ExportOptions {
        out: Some(run.clone()),
        ..ExportOptions::new(&run)
    })
    .unwrap();
    let r = export::resolve(&opts(&[run.join("checkpoint-6")])).unwrap();
    assert_eq!(r.run.as_deref(), Some(run.as_path()));
    // Found as the run's: an AdamW run, so SOURCE's momentum is 0.0 whatever β1.
    assert_eq!(r.momentum, Some(0.0));
    assert_eq!(r.sources.momentum, Field::Run);
    assert_eq!(r.use_adam_preconditioner, Some(true));
    // The export is not mistaken for a lavender checkpoint of the run.
    assert_eq!(checkpoints(&run).len(), 3);
}

#[test]
fn checkpoints_of_two_runs_are_refused() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (_, ca) = exported_run(a.path(), 0.9);
    let (_, cb) = exported_run(b.path(), 0.9);
    let err = export::resolve(&opts(&[ca[0].clone(), cb[1].clone()]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("one run's trajectory"), "{err}");
}

#[test]
fn bad_options_are_named() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.9);
    let err = export::resolve(&ResolveOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("at least one checkpoint"), "{err}");
    let err = export::resolve(&ResolveOptions {
        momentum: Some(1.0),
        ..opts(&ckpts)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--momentum: 1 is not in [0, 1)"), "{err}");
    let err = export::resolve(&ResolveOptions {
        step_lrs: Some(vec![0.1; 3]),
        ..opts(&ckpts)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--step-lrs: has 3 learning rates"), "{err}");
    let typo = root.path().join("exported/checkpoint-66");
    let err = export::resolve(&opts(&[typo])).unwrap_err().to_string();
    assert!(
        err.contains("checkpoint-66") && err.contains("not found"),
        "{err}"
    );
    let reversed: Vec<PathBuf> = ckpts.iter().rev().cloned().collect();
    let err = export::resolve(&opts(&reversed)).unwrap_err().to_string();
    assert!(err.contains("training order"), "{err}");
}

#[test]
fn json_output_says_where_each_value_came_from() {
    let root = tempfile::tempdir().unwrap();
    let (_, ckpts) = exported_run(root.path(), 0.95);
    let r = export::resolve(&ResolveOptions {
        momentum: Some(0.0),
        ..opts(&ckpts)
    })
    .unwrap();
    let v: Value = serde_json::from_str(&export::resolve_json(&r)).unwrap();
    assert_eq!(v["momentum"], 0.0);
    assert_eq!(v["sources"]["momentum"], "explicit");
    assert_eq!(v["sources"]["lr_list"], "run");
    assert_eq!(v["step_lrs"].as_array().unwrap().len(), 6);
    assert_eq!(v["lr_list"].as_array().unwrap().len(), 3);
    assert_eq!(v["step_size_list"], serde_json::json!([2, 2, 2]));
    assert_eq!(v["segment_details"][2]["to_step"], 6);
    let yaml = export::resolve_yaml(&r);
    assert!(
        yaml.contains("approx_unrolling_cfg:\n")
            && yaml.contains("  momentum: 0.0\n")
            && yaml.contains("  step_size_list: [2, 2, 2]\n")
            && yaml.contains("  segments: 3\n"),
        "{yaml}"
    );
}

#[test]
fn only_lavenders_layouts_are_probed_not_any_config_yaml_above() {
    let root = tempfile::tempdir().unwrap();
    let run = make_run(root.path(), &RunSpec::default());
    // An export moved out of its run, below an unrelated config.yaml.
    let elsewhere = root.path().join("projects/attribution/models");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(root.path().join("projects/config.yaml"), config_yaml(0.5)).unwrap();
    export::export(&ExportOptions {
        out: Some(elsewhere.clone()),
        ..ExportOptions::new(&run)
    })
    .unwrap();
    let r = export::resolve(&opts(&[elsewhere.join("checkpoint-6")])).unwrap();
    assert_eq!(r.run, None);
    assert_eq!((r.momentum, r.sources.momentum), (None, Field::Unset));
    assert_eq!(r.checkpoints[0].step, Some(6));
}
