use std::io::Write;
use std::path::{Path, PathBuf};

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err(text: &str) -> ConfigError {
    Config::from_yaml_str(text, "configs/my.yaml").expect_err("config should be rejected")
}

fn file_origin(e: &ConfigError) -> (String, u32, u32) {
    match &e.origin {
        Some(Origin::File { name, line, column }) => (name.to_string(), *line, *column),
        other => panic!("expected a file origin, got {other:?} in `{e}`"),
    }
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}

#[test]
fn defaults_parse_and_validate() {
    let config = Config::default();
    config.validate().unwrap();
    assert_eq!(config.scale, Scale::Tiny);
    assert_eq!(config.chunk, 1);
    assert_eq!(config.seed, 1337);
    assert_eq!(config.supervisor.listen, "127.0.0.1:7070".parse().unwrap());
    assert_eq!(
        config.training.save_optimizer_state,
        SaveOptimizerState::All
    );
    assert_eq!(
        config.data.sources,
        vec![DataSource::Embedded(EmbeddedCorpus::Tinyshakespeare)]
    );
    assert_eq!(config.data.document_separator, "\n\n");
    assert_eq!(config.optimizer.betas, [0.9, 0.95]);
    assert_eq!(config.model.layer_norm_epsilon, 1.0e-5);
    assert_eq!(config.steps, PipelineStep::ALL);
    assert_eq!(config.steps[3], PipelineStep::BuildShards);
    assert_eq!(config.training.stages[2].beta, Some(0.1));
}

#[test]
fn default_equals_parsing_default_yaml() {
    let parsed = Config::from_yaml_str(DEFAULT_YAML, "configs/default.yaml").unwrap();
    assert_eq!(Config::default(), parsed);
    // And an empty file is the defaults too.
    assert_eq!(Config::from_yaml_str("", "empty.yaml").unwrap(), parsed);
}

#[test]
fn default_yaml_comments_every_key() {
    // Every key line is preceded by a comment line or carries one (the brief for
    // operators reading configs/default.yaml).
    let lines: Vec<&str> = DEFAULT_YAML.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let is_key = !t.is_empty() && !t.starts_with('#') && !t.starts_with('-');
        if is_key && !t.ends_with(':') {
            let prev = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
            let commented =
                line.contains(" # ") || prev.is_some_and(|p| p.trim_start().starts_with('#'));
            assert!(commented, "line {} has no comment: {line}", i + 1);
        }
    }
}

#[test]
fn to_yaml_round_trips() {
    let mut config = Config {
        scale: Scale::Medium,
        data_root: Some(PathBuf::from("/mnt/ssd/lavender")),
        data_root_candidates: vec!["/Volumes/2TBSSD".into(), "/mnt/ssd".into()],
        ..Config::default()
    };
    config
        .worker
        .env
        .insert("OMP_NUM_THREADS".into(), "4".into());
    config
        .data
        .sources
        .push(DataSource::Path(PathSource::text("corpus/extra.txt")));
    config.data.sources.push(DataSource::Path(PathSource {
        format: SourceFormat::Jsonl,
        compression: Compression::Zstd,
        field: Some("content".into()),
        ..PathSource::text("dumps/*.jsonl.zst")
    }));
    config.data.on_bad_record = OnBadRecord::Skip;
    config.model.init_from = Some("models/gpt2".into());
    config.data.sources.push(DataSource::Url {
        url: "https://example.org/a.txt".into(),
        sha256: "a".repeat(64),
    });
    config.training.stages[0].steps = Some(1234);
    config.training.save_optimizer_state = SaveOptimizerState::Last;
    config.supervisor.keep_runs = Some(5);
    config.optimizer.eps = 1.0e-8;
    let yaml = config.to_yaml();
    let back = Config::from_yaml_str(&yaml, "run/config.yaml")
        .unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
    assert_eq!(back, config, "{yaml}");
    assert_eq!(
        Config::from_yaml_str(&Config::default().to_yaml(), "x").unwrap(),
        Config::default()
    );
}

#[test]
fn layering_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "my.yaml",
        "seed: 1\nchunk: 2\ntraining:\n  batch_size: 8\n",
    );
    // File beats defaults; keys the file leaves out keep their defaults.
    let opts = LoadOptions {
        file: Some(file.clone()),
        ..Default::default()
    };
    let c = Config::load(&opts).unwrap();
    assert_eq!((c.seed, c.chunk, c.training.batch_size), (1, 2, 8));
    assert_eq!(c.training.seq_len, 64);

    // Environment beats file.
    let opts = LoadOptions {
        file: Some(file.clone()),
        env: env(&[
            ("LAVENDER_SEED", "2"),
            ("LAVENDER__TRAINING__BATCH_SIZE", "4"),
            ("LAVENDER_SCALE", "small"),
            ("LAVENDER_CHUNK", "3"),
            ("LAVENDER_LOG", "debug"), // not a config variable: ignored
        ]),
        overrides: vec![],
        cwd: None,
    };
    let c = Config::load(&opts).unwrap();
    assert_eq!(
        (c.seed, c.chunk, c.training.batch_size, c.scale),
        (2, 3, 4, Scale::Small)
    );

    // Overrides beat environment.
    let opts = LoadOptions {
        overrides: vec![
            ("seed".into(), "3".into()),
            ("training.batch_size".into(), "2".into()),
            ("training.stages[1].lr".into(), "0.5".into()),
            ("supervisor.restart_backoff_s".into(), "[1, 2]".into()),
        ],
        ..opts
    };
    let c = Config::load(&opts).unwrap();
    assert_eq!((c.seed, c.training.batch_size), (3, 2));
    assert_eq!(c.training.stages[1].lr, 0.5);
    assert_eq!(c.supervisor.restart_backoff_s, vec![1.0, 2.0]);
}

#[test]
fn data_root_env_var_is_not_a_layer() {
    let opts = LoadOptions {
        env: env(&[("LAVENDER_DATA_ROOT", "/tmp/elsewhere")]),
        ..Default::default()
    };
    let c = Config::load(&opts).unwrap();
    assert_eq!(c.data_root, None);
    assert_eq!(opts.env_data_root(), Some(PathBuf::from("/tmp/elsewhere")));
}

#[test]
fn scale_presets() {
    let c = Config::default();
    let p = |s: Scale| {
        let preset = c.scales.get(s);
        let m = preset.model;
        (
            preset.total_steps,
            preset.shards,
            (m.n_layer, m.n_head, m.n_embd, m.n_positions),
        )
    };
    assert_eq!(p(Scale::Tiny), (1_400, 4, (2, 2, 64, 128)));
    assert_eq!(p(Scale::Small), (50_000, 21, (6, 6, 384, 256)));
    assert_eq!(p(Scale::Medium), (105_000, 43, (8, 8, 512, 512)));
    // GPT-2 small's layout.
    assert_eq!(p(Scale::Large), (200_000, 81, (12, 12, 768, 1024)));
    for scale in Scale::ALL {
        assert_eq!(scale.to_string().parse::<Scale>().unwrap(), scale);
    }
    let e = "huge".parse::<Scale>().unwrap_err();
    assert!(e.to_string().contains("tiny"), "{e}");
}

fn size(n_layer: u32, n_head: u32, n_embd: u32, n_positions: u32) -> ModelSize {
    ModelSize {
        n_layer,
        n_head,
        n_embd,
        n_positions,
    }
}

fn load(env_vars: &[(&str, &str)], overrides: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::load(&LoadOptions {
        env: env(env_vars),
        overrides: overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..LoadOptions::default()
    })
}

#[test]
fn model_size_follows_the_scale_unless_set() {
    // The model keys default to null: each scale builds its preset's model.
    let c = Config::default();
    assert_eq!(
        (c.model.n_layer, c.model.n_head, c.model.n_embd),
        (None, None, None)
    );
    assert_eq!(c.model_size(), size(2, 2, 64, 128));
    let at = |scale: &str| load(&[("LAVENDER_SCALE", scale)], &[]).unwrap();
    assert_eq!(at("small").model_size(), size(6, 6, 384, 256));
    assert_eq!(at("medium").model_size(), size(8, 8, 512, 512));
    assert_eq!(at("large").model_size(), size(12, 12, 768, 1024));
    // The preset's steps and shards come from the same section.
    assert_eq!(at("small").preset().shards, 21);
    assert_eq!(at("small").total_steps(), 50_000);

    // An explicit value wins over the preset, key by key, at any scale.
    let c = load(&[("LAVENDER_SCALE", "large")], &[("model.n_layer", "3")]).unwrap();
    assert_eq!(c.model_size(), size(3, 12, 768, 1024));

    // The presets themselves are config: a file, the environment or an override
    // changes them, in the usual order.
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "my.yaml",
        "scale: small\nscales:\n  small:\n    shards: 30\n    model: {n_layer: 4}\n",
    );
    let opts = LoadOptions {
        file: Some(file),
        env: env(&[("LAVENDER__SCALES__SMALL__MODEL__N_EMBD", "192")]),
        overrides: vec![("scales.small.total_steps".into(), "999".into())],
        cwd: None,
    };
    let c = Config::load(&opts).unwrap();
    assert_eq!(c.model_size(), size(4, 6, 192, 256));
    assert_eq!((c.preset().shards, c.total_steps()), (30, 999));
    // Keys the file leaves out keep the built-in preset.
    assert_eq!(c.scales.medium, Config::default().scales.medium);
}

#[test]
fn a_config_written_for_another_scale_builds_that_scale_s_model() {
    // The daemon writes the worker's config as its own config with the requested
    // scale; the worker loads that file with --scale. The model must be the requested
    // scale's, not the daemon's default scale's.
    let daemon = Config::default();
    assert_eq!(daemon.scale, Scale::Tiny);
    let mut worker = daemon.clone();
    worker.scale = Scale::Small;
    let text = worker.to_yaml();
    let back = Config::from_yaml_str(&text, "state/worker-config.yaml").unwrap();
    assert_eq!(back.model_size(), size(6, 6, 384, 256), "{text}");

    // The run's config.yaml records the sizes it trained with; read at another scale
    // it still names the same model.
    let run = back.resolved();
    assert_eq!(run.model.n_layer, Some(6));
    let mut reread = Config::from_yaml_str(&run.to_yaml(), "run/config.yaml").unwrap();
    reread.scale = Scale::Large;
    assert_eq!(reread.model_size(), size(6, 6, 384, 256));
    assert_eq!(reread.resolved().model, run.model);
}

#[test]
fn model_errors_name_the_key_that_set_the_value() {
    // A preset value: the error names scales.<scale>.model.<key> and points at the
    // line that set it.
    let e = load(
        &[("LAVENDER_SCALE", "medium")],
        &[("scales.medium.model.n_head", "7")],
    )
    .unwrap_err();
    assert_eq!(e.path(), Some("scales.medium.model.n_embd"), "{e}");
    let e = err("scales:\n  small:\n    model: {n_head: 5}\n");
    assert_eq!(e.path(), Some("scales.small.model.n_embd"), "{e}");
    assert!(
        e.to_string().contains("scales.small.model.n_head (5)"),
        "{e}"
    );

    // An explicit head count that does not divide the preset's width: blamed.
    let e = err("scale: small\nmodel:\n  n_head: 5\n");
    assert_eq!(e.path(), Some("model.n_head"), "{e}");
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 3, 11));
    assert!(
        e.to_string().contains(
            "384 (scales.small.model.n_embd) is not a multiple of the head count 5 (model.n_head)"
        ),
        "{e}"
    );
    // An explicit width: it is blamed.
    let e = err("model:\n  n_embd: 65\n");
    assert_eq!(e.path(), Some("model.n_embd"), "{e}");
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 2, 11));

    // seq_len is checked against the resolved context length, at each scale.
    let e = err("training:\n  seq_len: 200\n");
    assert_eq!(e.path(), Some("training.seq_len"), "{e}");
    assert!(
        e.to_string()
            .contains("1..=128 (scales.tiny.model.n_positions at scale tiny)"),
        "{e}"
    );
    Config::from_yaml_str("scale: small\ntraining:\n  seq_len: 200\n", "t").unwrap();
    let e = err("scale: small\nmodel: {n_positions: 100}\ntraining:\n  seq_len: 200\n");
    assert!(
        e.to_string()
            .contains("1..=100 (model.n_positions at scale small)"),
        "{e}"
    );
    // A zero in a preset, and an unknown key in one.
    let e = load(&[], &[("scales.large.model.n_layer", "0")]).unwrap_err();
    assert_eq!(e.path(), Some("scales.large.model.n_layer"), "{e}");
    let e = load(&[], &[("scales.tiny.shards", "0")]).unwrap_err();
    assert_eq!(e.path(), Some("scales.tiny.shards"), "{e}");
    let e = err("scales:\n  tiny:\n    steps: 5\n");
    assert!(e.to_string().contains("`scales.tiny.steps`"), "{e}");
}

#[test]
fn shard_shortfall_is_one_line_naming_preset_counts_and_key() {
    let c = load(&[("LAVENDER_SCALE", "small")], &[]).unwrap();
    let short = c.shard_shortfall(1).expect("1 of 21 shards is short");
    assert_eq!(
        short.to_string(),
        "scale small wants 21 shards but the data fills only 1, so training repeats it; add corpus under data.sources"
    );
    assert_eq!((short.wanted, short.available), (21, 1));
    assert!(c.shard_shortfall(21).is_none());
    assert!(c.shard_shortfall(80).is_none());
    // The preset's own (overridden) count is what is compared.
    let c = load(
        &[("LAVENDER_SCALE", "small")],
        &[("scales.small.shards", "1")],
    )
    .unwrap();
    assert!(c.shard_shortfall(1).is_none());
}

#[test]
fn stage_steps_sum_to_preset_total() {
    for scale in Scale::ALL {
        let c = Config {
            scale,
            ..Config::default()
        };
        let total = c.preset().total_steps;
        assert_eq!(c.total_steps(), total, "{scale}");
        // pretrain 70 %, sft 15 %, dpo 15 %.
        assert_eq!(c.stage_steps(0), total * 70 / 100, "{scale}");
        assert_eq!(c.stage_steps(1), total * 15 / 100, "{scale}");
    }
    // Uneven totals still add up, and every stage gets at least one step.
    assert_eq!(
        scale::split_steps(7, &["pretrain", "sft", "dpo"])
            .iter()
            .sum::<u64>(),
        7
    );
    assert_eq!(
        scale::split_steps(1, &["pretrain", "sft", "dpo"]),
        vec![1, 1, 1]
    );
    // An explicit stage keeps its steps; the null stages share the preset.
    let mut c = Config::default();
    c.training.stages[1].steps = Some(5);
    assert_eq!(c.stage_steps(1), 5);
    assert_eq!(c.stage_steps(0) + c.stage_steps(2), 1_400);
    assert_eq!(c.total_steps(), 1_405);
}

#[test]
fn unknown_key_suggests_nearest_with_location() {
    let e = err("seed: 1\ntrainig:\n  batch_size: 8\n");
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 2, 1));
    match &*e.kind {
        ConfigErrorKind::UnknownKey {
            path, suggestion, ..
        } => {
            assert_eq!(path, "trainig");
            assert_eq!(suggestion.as_deref(), Some("training"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:2:1: unknown key `trainig` — did you mean `training`?"
    );

    let e = err("training:\n  batch_size: 8\n  batchsize: 8\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:3: unknown key `training.batchsize` — did you mean `batch_size`?"
    );

    // Nothing near: list the valid keys.
    let e = err("model:\n  zzzzzzzz: 1\n");
    let msg = e.to_string();
    assert!(
        msg.starts_with("configs/my.yaml:2:3: unknown key `model.zzzzzzzz` — valid keys here:"),
        "{msg}"
    );
    assert!(msg.contains("`n_layer`"), "{msg}");
}

#[test]
fn wrong_type_names_path_and_location() {
    let e = err("seed: 3\ntraining:\n  batch_size: sixteen\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:15: training.batch_size: expected an integer, found \"sixteen\""
    );
    assert_eq!(e.path(), Some("training.batch_size"));

    let e = err("training:\n  stages:\n    - {name: a, lr: fast}\n");
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 3, 21));
    assert!(
        e.to_string()
            .contains("training.stages[0].lr: expected a number, found \"fast\""),
        "{e}"
    );

    let e = err("threads: -1\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:1:10: threads: -1 is out of range (0..=4294967295)"
    );

    let e = err("device: gpu\n");
    assert!(
        e.to_string()
            .starts_with("configs/my.yaml:1:9: device: unknown value `gpu`"),
        "{e}"
    );

    let e = err("optimizer:\n  betas: [0.9]\n");
    assert!(
        e.to_string()
            .contains("optimizer.betas: expected a list of 2 items"),
        "{e}"
    );
}

#[test]
fn out_of_range_chunk_has_location() {
    let e = err("scale: tiny\nseed: 1\nchunk: 7\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:8: chunk: 7 is out of range (1..=4)"
    );
    // validate() alone names the path without a position.
    let c = Config {
        chunk: 0,
        ..Config::default()
    };
    let e = c.validate().unwrap_err();
    assert_eq!(e.to_string(), "chunk: 0 is out of range (1..=4)");
}

#[test]
fn range_errors_from_env_and_overrides_name_them() {
    let opts = LoadOptions {
        env: env(&[("LAVENDER_CHUNK", "9")]),
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "environment variable LAVENDER_CHUNK: chunk: 9 is out of range (1..=4)"
    );
    let opts = LoadOptions {
        overrides: vec![("training.stages[0].lr".into(), "-1".into())],
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert_eq!(
        e.origin,
        Some(Origin::Override("training.stages[0].lr".into()))
    );
    assert!(
        e.to_string()
            .contains("training.stages[0].lr: -1 is out of range"),
        "{e}"
    );

    let opts = LoadOptions {
        overrides: vec![("training.stages[7].lr".into(), "1".into())],
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert!(matches!(*e.kind, ConfigErrorKind::BadKeyPath { .. }), "{e}");
}

#[test]
fn save_optimizer_state_accepts_booleans() {
    let state = |v: &str| {
        Config::from_yaml_str(
            &format!("training:\n  save_optimizer_state: {v}\n"),
            "t.yaml",
        )
        .map(|c| c.training.save_optimizer_state)
    };
    assert_eq!(state("true").unwrap(), SaveOptimizerState::Last);
    assert_eq!(state("false").unwrap(), SaveOptimizerState::None);
    assert_eq!(state("none").unwrap(), SaveOptimizerState::None);
    assert_eq!(state("last").unwrap(), SaveOptimizerState::Last);
    assert_eq!(state("all").unwrap(), SaveOptimizerState::All);
    let e = state("al").unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.yaml:2:25: training.save_optimizer_state: unknown value `al` — did you mean `all`? (valid values: `none`, `last`, `all`)"
    );
}

#[test]
fn bad_source_items() {
    let e = err("data:\n  sources:\n    - {embedded: tinyshakespeare, path: /x}\n");
    assert_eq!(e.path(), Some("data.sources[0]"));
    assert_eq!(file_origin(&e).1, 3);
    assert!(e.to_string().contains("exactly one of"), "{e}");

    let e = err("data:\n  sources:\n    - url: https://example.org/a.txt\n");
    assert!(e.to_string().contains("needs `sha256: HEX`"), "{e}");

    let e = err("data:\n  sources:\n    - embeded: tinyshakespeare\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:7: unknown key `data.sources[0].embeded` — did you mean `embedded`?"
    );

    let e = err("data:\n  sources:\n    - tinyshakespeare\n");
    assert!(
        e.to_string().contains("data.sources[0]: expected a source"),
        "{e}"
    );

    let e = err("data:\n  sources:\n    - embedded: shakespeare\n");
    assert!(e.to_string().contains("unknown value `shakespeare`"), "{e}");

    let e = err("data:\n  sources:\n    - {url: https://example.org/a.txt, sha256: abc}\n");
    assert_eq!(e.path(), Some("data.sources[0].sha256"));
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 3, 48));
}

#[test]
fn local_sources_take_a_format_and_the_keys_it_reads() {
    let c = Config::from_yaml_str(
        "data:\n  sources:\n    - {path: a.txt}\n    - {path: d/*.jsonl.gz, format: jsonl, field: body}\n    - {path: hub/, format: parquet, column: content}\n    - {path: saved, format: datasets, split: validation}\n  on_bad_record: skip\n",
        "s.yaml",
    )
    .unwrap();
    let p = |i: usize| match &c.data.sources[i] {
        DataSource::Path(p) => p.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(p(0), PathSource::text("a.txt"));
    assert_eq!(
        (p(1).format, p(1).text_key()),
        (SourceFormat::Jsonl, "body")
    );
    assert_eq!(
        (p(2).format, p(2).text_key()),
        (SourceFormat::Parquet, "content")
    );
    assert_eq!(p(3).text_key(), DEFAULT_TEXT_KEY);
    assert_eq!(p(3).split.as_deref(), Some("validation"));
    assert_eq!(c.data.on_bad_record, OnBadRecord::Skip);
    // A plain path item writes back as it was read, so its manifests' hashes hold.
    let yaml = c.to_yaml();
    assert!(yaml.contains("- path: a.txt\n"), "{yaml}");

    let e = err("data:\n  sources:\n    - {path: a.csv, format: csv}\n");
    assert_eq!(e.path(), Some("data.sources[0].format"));
    assert!(
        e.to_string().contains("unknown value `csv`") && e.to_string().contains("jsonl"),
        "{e}"
    );
    let e = err("data:\n  sources:\n    - {path: a.parquet, format: parquet, field: body}\n");
    assert_eq!(e.path(), Some("data.sources[0].field"));
    assert!(e.to_string().contains("names its text `column:`"), "{e}");
    assert_eq!(file_origin(&e).1, 3);
    let e = err("data:\n  sources:\n    - {path: a.parquet, format: parquet, compression: gzip}\n");
    assert!(e.to_string().contains("compressed inside the file"), "{e}");
    let e = err("data:\n  sources:\n    - {path: a.txt, field: body}\n");
    assert!(
        e.to_string().contains("format text does not read `field`"),
        "{e}"
    );
    let e = err("data:\n  sources:\n    - {embedded: tinyshakespeare, format: jsonl}\n");
    assert!(e.to_string().contains("add `path: PATH`"), "{e}");
    let e = err("data:\n  on_bad_record: ignore\n");
    assert!(e.to_string().contains("unknown value `ignore`"), "{e}");
}

#[test]
fn init_from_takes_the_context_length_from_the_checkpoint() {
    // The preset's n_positions (128 at tiny) does not bound seq_len: the checkpoint's does,
    // which the worker reads.
    let c = Config::from_yaml_str(
        "model: {init_from: gpt2}\ntraining: {seq_len: 1024}\n",
        "i.yaml",
    )
    .unwrap();
    assert_eq!(c.model.init_from.as_deref(), Some(Path::new("gpt2")));
    let e = err("training: {seq_len: 1024}\n");
    assert_eq!(e.path(), Some("training.seq_len"));
}

#[test]
fn bad_stage_names() {
    let e = err("training:\n  stages:\n    - {name: Pre-Train, lr: 0.001}\n");
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 3, 14));
    assert_eq!(e.path(), Some("training.stages[0].name"));
    assert!(e.to_string().contains("[a-z0-9_]+"), "{e}");

    let e = err("training:\n  stages:\n    - {name: a, lr: 0.1}\n    - {name: a, lr: 0.1}\n");
    assert_eq!(file_origin(&e).1, 4);
    assert!(e.to_string().contains("unique"), "{e}");

    // A stage that leaves out optional keys is fine.
    let c =
        Config::from_yaml_str("training:\n  stages:\n    - {name: only, lr: 0.1}\n", "t").unwrap();
    assert_eq!(c.training.stages[0].checkpoint_every, 100);
    assert_eq!(c.total_steps(), 1_400);

    let e = err("training:\n  stages:\n    - {name: a}\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:7: training.stages[0]: missing key `lr` — add it"
    );
}

#[test]
fn other_validation_rules() {
    let e = err("supervisor:\n  listen: 0.0.0.0:7070\n");
    assert!(e.to_string().contains("allow_non_loopback"), "{e}");
    Config::from_yaml_str(
        "supervisor:\n  listen: 0.0.0.0:7070\n  allow_non_loopback: true\n",
        "t",
    )
    .unwrap();
    let e = err("supervisor:\n  listen: localhost\n");
    assert_eq!(e.path(), Some("supervisor.listen"));
    let e = err("model:\n  n_embd: 65\n");
    assert!(
        e.to_string().contains("not a multiple of the head count 2"),
        "{e}"
    );
    let e = err("training:\n  seq_len: 512\n");
    assert!(e.to_string().contains("model.n_positions"), "{e}");
    let e = err("steps: [downloads, downloads]\n");
    assert_eq!(e.path(), Some("steps[1]"));
}

#[test]
fn malformed_yaml_reports_parser_location() {
    let e = err("seed: 1\nmodel: {n_layer: 2\nchunk: 1\n");
    assert!(matches!(*e.kind, ConfigErrorKind::Syntax { .. }), "{e}");
    let (name, line, _) = file_origin(&e);
    assert_eq!(name, "configs/my.yaml");
    assert!(line >= 2, "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with("configs/my.yaml:"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");

    let e = err("- just\n- a list\n");
    assert!(
        e.to_string().contains("expected a mapping of config keys"),
        "{e}"
    );
}

#[test]
fn unknown_generic_env_variable_is_an_error() {
    let opts = LoadOptions {
        env: env(&[("LAVENDER__TRAINING__BATCHSIZE", "4")]),
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "environment variable LAVENDER__TRAINING__BATCHSIZE: unknown key `training.batchsize` — did you mean `batch_size`?"
    );
    let opts = LoadOptions {
        env: env(&[("LAVENDER__SEED", "many")]),
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "environment variable LAVENDER__SEED: seed: expected an integer, found \"many\""
    );
    let opts = LoadOptions {
        env: env(&[("LAVENDER__SEED__X", "1")]),
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("environment variable LAVENDER__SEED__X: cannot set"),
        "{e}"
    );
}

#[test]
fn unknown_override_key_names_the_override() {
    let opts = LoadOptions {
        overrides: vec![("trainig.batch_size".into(), "8".into())],
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "override `trainig.batch_size=…`: unknown key `trainig` — did you mean `training`?"
    );
}

#[test]
fn missing_config_file_names_it() {
    let opts = LoadOptions {
        file: Some("/nonexistent/lavender.yaml".into()),
        ..Default::default()
    };
    let e = Config::load(&opts).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/lavender.yaml"), "{e}");
}

#[test]
fn key_paths_parse() {
    use tree::{Segment, parse_key_path, render_key_path};
    let p = parse_key_path("training.stages[1].lr").unwrap();
    assert_eq!(
        p,
        vec![
            Segment::Key("training".into()),
            Segment::Key("stages".into()),
            Segment::Index(1),
            Segment::Key("lr".into())
        ]
    );
    assert_eq!(render_key_path(&p), "training.stages[1].lr");
    assert!(parse_key_path("").is_none());
    assert!(parse_key_path("a..b").is_none());
    assert!(parse_key_path("a[x]").is_none());
}

#[test]
fn resolved_yaml_reads_with_plain_serde_saphyr() {
    // The worker may read <run>/config.yaml with serde-saphyr directly.
    let config = Config::default();
    let back: Config = serde_saphyr::from_str(&config.to_yaml()).unwrap();
    assert_eq!(back, config);
}

#[test]
fn retention_is_the_daemons_unless_set_to_worker() {
    assert_eq!(Config::default().supervisor.retention, Retention::Daemon);
    let c = Config::from_yaml_str("supervisor:\n  retention: worker\n", "my.yaml").unwrap();
    assert_eq!(c.supervisor.retention, Retention::Worker);
    let e = err("supervisor:\n  retention: deamon\n").to_string();
    assert!(
        e.contains("supervisor.retention") && e.contains("daemon"),
        "{e}"
    );
}

#[test]
fn spike_rules_default_and_bad_values_name_key_and_location() {
    let c = Config::default();
    assert_eq!(
        (
            c.training.spike.factor,
            c.training.spike.window,
            c.training.spike.patience
        ),
        (3.0, 100, 3)
    );
    let e = err("training:\n  spike: {factor: 0.5, window: 10, patience: 2}\n");
    assert_eq!(e.path(), Some("training.spike.factor"));
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 2, 19));
    assert!(e.to_string().contains("greater than 1"), "{e}");
    let e = err("training:\n  spike:\n    window: 0\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:13: training.spike.window: 0 is out of range (1..)"
    );
    let e = err("training:\n  spike:\n    patience: -1\n");
    assert_eq!(file_origin(&e).1, 3, "{e}");
    let e = err("training:\n  spike:\n    factr: 2\n");
    assert!(e.to_string().contains("did you mean `factor`"), "{e}");
    // A config written before the key (a run's config.yaml) still reads.
    let old = Config::default().to_yaml().replace(
        "  spike:\n    factor: 3.0\n    window: 100\n    patience: 3\n",
        "",
    );
    assert!(!old.contains("spike"), "{old}");
    let c: Config = serde_saphyr::from_str(&old).unwrap();
    assert_eq!(c.training.spike, SpikeConfig::default());
}

#[test]
fn supervision_defaults() {
    let s = Config::default().supervisor;
    assert_eq!(s.stale_after_s, StaleAfter::Auto);
    assert_eq!(s.on_stall, OnStall::Restart);
    assert_eq!(s.on_diverged, OnDiverged::Rollback);
    assert_eq!(s.max_no_progress_restarts, 3);
    assert_eq!(s.max_rollbacks, 2);
    assert_eq!(s.rollback_window_steps, 1000);
    assert_eq!(s.max_same_failure, 3);
    assert!(s.resume_on_start);
    assert_eq!(s.on_failure.config, FailureAction::Fail);
    assert_eq!(s.on_failure.incompatible_checkpoint, FailureAction::Fail);
    assert_eq!(s.on_failure.data, FailureAction::Fail);
    assert_eq!(s.on_failure.crash, FailureAction::Restart);
    let c = Config::from_yaml_str(
        "supervisor:\n  stale_after_s: 2.5\n  on_stall: alert\n  on_failure: {out_of_memory: fail}\n",
        "my.yaml",
    )
    .unwrap();
    assert_eq!(c.supervisor.stale_after_s, StaleAfter::Seconds(2.5));
    assert_eq!(c.supervisor.on_stall, OnStall::Alert);
    assert_eq!(c.supervisor.on_failure.out_of_memory, FailureAction::Fail);
    // The other kinds keep their defaults.
    assert_eq!(c.supervisor.on_failure.crash, FailureAction::Restart);
    let back = Config::from_yaml_str(&c.to_yaml(), "resolved.yaml").unwrap();
    assert_eq!(back.supervisor, c.supervisor);
}

/// Each bad supervision value: the key, where it was written and what is allowed.
#[test]
fn bad_supervision_values_name_the_key_the_place_and_the_allowed_values() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "  on_stall: kill\n",
            "supervisor.on_stall",
            &["restart", "alert"],
        ),
        ("  mode: watch\n", "supervisor.mode", &["act", "observe"]),
        (
            "  on_diverged: ignore\n",
            "supervisor.on_diverged",
            &["rollback", "fail"],
        ),
        (
            "  on_failure:\n    crash: retry\n",
            "supervisor.on_failure.crash",
            &["fail", "restart"],
        ),
        (
            "  stale_after_s: soon\n",
            "supervisor.stale_after_s",
            &["auto", "seconds"],
        ),
        (
            "  stale_after_s: 0\n",
            "supervisor.stale_after_s",
            &["auto"],
        ),
        (
            "  stale_after_s: -5\n",
            "supervisor.stale_after_s",
            &["auto"],
        ),
        (
            "  startup_grace_s: 0\n",
            "supervisor.startup_grace_s",
            &["1"],
        ),
        (
            "  saving_grace_s: -1\n",
            "supervisor.saving_grace_s",
            &["0.."],
        ),
        (
            "  loading_grace_s: 0\n",
            "supervisor.loading_grace_s",
            &["1"],
        ),
        (
            "  evaluating_grace_s: 0\n",
            "supervisor.evaluating_grace_s",
            &["1"],
        ),
        (
            "  stall_kill_grace_s: 0\n",
            "supervisor.stall_kill_grace_s",
            &["greater than 0"],
        ),
        (
            "  max_rollbacks: -1\n",
            "supervisor.max_rollbacks",
            &["0.."],
        ),
        (
            "  max_no_progress_restarts: 0\n",
            "supervisor.max_no_progress_restarts",
            &["at least 1"],
        ),
        (
            "  max_same_failure: 0\n",
            "supervisor.max_same_failure",
            &["at least 1"],
        ),
        (
            "  rollback_window_steps: 0\n",
            "supervisor.rollback_window_steps",
            &["at least 1"],
        ),
        (
            "  stale_auto: {factor: 0.5}\n",
            "supervisor.stale_auto.factor",
            &["1 or more"],
        ),
        (
            "  stale_auto: {floor_s: 100, ceiling_s: 50}\n",
            "supervisor.stale_auto.ceiling_s",
            &["floor"],
        ),
        (
            "  slowdown: {factor: 1}\n",
            "supervisor.slowdown.factor",
            &["above 1"],
        ),
        (
            "  slowdown: {for_s: 0}\n",
            "supervisor.slowdown.for_s",
            &["greater than 0"],
        ),
    ];
    for (yaml, key, allowed) in cases {
        let e = err(&format!("supervisor:\n{yaml}"));
        let text = e.to_string();
        assert!(text.contains(key), "{yaml}: {text}");
        let (file, line, _) = file_origin(&e);
        assert_eq!(file, "configs/my.yaml", "{yaml}: {text}");
        assert!(line >= 2, "{yaml}: {text}");
        assert!(
            text.starts_with(&format!("configs/my.yaml:{line}:")),
            "{yaml}: {text}"
        );
        for word in *allowed {
            assert!(text.contains(word), "{yaml}: `{word}` not in {text}");
        }
    }
}

#[test]
fn precision_tf32_and_ema_load_and_bad_values_are_located() {
    let d = Config::default();
    assert_eq!(d.training.precision, Precision::Auto);
    assert!(!d.training.tf32);
    assert_eq!(d.training.ema, None);
    let c = Config::from_yaml_str(
        "training:\n  precision: bf16\n  tf32: true\n  ema: {decay: 0.999}\n",
        "my.yaml",
    )
    .unwrap();
    assert_eq!(c.training.precision, Precision::Bf16);
    assert!(c.training.tf32);
    assert_eq!(
        c.training.ema,
        Some(EmaConfig {
            decay: 0.999,
            every: 1
        })
    );
    let back = Config::from_yaml_str(&c.to_yaml(), "run/config.yaml").unwrap();
    assert_eq!(back, c);

    let e = err("training:\n  precision: fp8\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:2:14: training.precision: unknown value `fp8` — did you mean `fp32`? (valid values: `auto`, `fp32`, `bf16`, `fp16`)"
    );
    for decay in ["1.0", "0", "-0.5", "1.5"] {
        let e = err(&format!("training:\n  ema:\n    decay: {decay}\n"));
        let text = e.to_string();
        assert!(
            text.starts_with("configs/my.yaml:3:12: training.ema.decay:")
                && text.contains("between 0 and 1"),
            "{decay}: {text}"
        );
    }
    let e = err("training:\n  ema: {decay: 0.9, every: 0}\n");
    assert_eq!(e.path(), Some("training.ema.every"));
    let e = err("training:\n  ema: {decay: 0.9, evry: 2}\n");
    assert!(e.to_string().contains("did you mean `every`?"), "{e}");
}

#[test]
fn devices_name_a_gpu_by_index() {
    for (text, device) in [
        ("auto", Device::Auto),
        ("cpu", Device::Cpu),
        ("cuda", Device::Cuda(None)),
        ("cuda:0", Device::Cuda(Some(0))),
        ("cuda:3", Device::Cuda(Some(3))),
        ("mps", Device::Mps),
    ] {
        let c = Config::from_yaml_str(&format!("device: {text}\n"), "my.yaml").unwrap();
        assert_eq!(c.device, device, "{text}");
        assert_eq!(device.to_string(), text);
        assert_eq!(Config::from_yaml_str(&c.to_yaml(), "x").unwrap(), c);
    }
    assert_eq!(Device::Cuda(None).cuda_index(), Some(0));
    assert_eq!(Device::Cuda(Some(2)).cuda_index(), Some(2));
    assert_eq!(Device::Cpu.cuda_index(), None);
    for bad in ["cuda:", "cuda:x", "cuda:-1", "gpu:0"] {
        let e = err(&format!("device: \"{bad}\"\n")).to_string();
        assert!(
            e.starts_with(&format!(
                "configs/my.yaml:1:9: device: unknown value `{bad}`"
            )) && e.contains("`cuda:N`"),
            "{e}"
        );
    }
}

#[test]
fn lavender_worker_is_one_process_and_config_check_says_so() {
    // Several Slurm tasks of lavender-worker: refused, naming the torchrun path.
    let e = err("launch:\n  backend: slurm\n  slurm:\n    ntasks: 4\n    nodes: 1\n");
    let text = e.to_string();
    assert!(
        text.starts_with("configs/my.yaml:4:13: launch.slurm.ntasks: 4 tasks would start 4 copies of lavender-worker")
            && text.contains("torchrun")
            && text.contains("docs/PYTHON.md"),
        "{text}"
    );
    // Several nodes: refused before anything is submitted, naming the torchrun launcher.
    let e = err("launch:\n  backend: slurm\n  slurm:\n    ntasks: 2\n    nodes: 2\n");
    assert_eq!(e.path(), Some("launch.slurm.nodes"));
    let text = e.to_string();
    assert!(
        text.contains("2 nodes would start copies of lavender-worker on 2 hosts")
            && text.contains("examples/torchrun/slurm-torchrun.sh")
            && text.contains("docs/SLURM.md"),
        "{text}"
    );
    // By its path too.
    let e =
        err("worker:\n  command: [/opt/bin/lavender-worker]\nlaunch:\n  slurm:\n    ntasks: 2\n");
    assert_eq!(e.path(), Some("launch.slurm.ntasks"));
    // A torchrun script may run one task per GPU.
    let c = Config::from_yaml_str(
        "worker:\n  command: [torchrun, --nproc-per-node=4, train.py]\nlaunch:\n  backend: slurm\n  slurm:\n    ntasks: 4\n",
        "my.yaml",
    )
    .unwrap();
    assert!(!c.runs_lavender_worker());
    // ... but lavender-worker itself, started by such a wrapper, still refuses.
    let e = c.check_one_process(None).unwrap_err();
    assert_eq!(e.path(), Some("launch.slurm.ntasks"));

    let one = Config::default();
    assert!(one.runs_lavender_worker());
    one.check_one_process(None).unwrap();
    one.check_one_process(Some("1")).unwrap();
    let e = one.check_one_process(Some("8")).unwrap_err().to_string();
    assert!(
        e.starts_with("WORLD_SIZE: 8 processes were started")
            && e.contains("one process on one device")
            && e.contains("docs/PYTHON.md"),
        "{e}"
    );
}

#[test]
fn api_section_defaults_round_trips_and_locates_bad_hosts() {
    let c = Config::default();
    assert!(c.api.allowed_hosts.is_empty() && !c.api.public_reads);
    // Left out of a resolved config when it is the default, so older readers load it.
    assert!(!c.to_yaml().contains("api:"), "{}", c.to_yaml());

    let c = Config::from_yaml_str(
        "api:\n  allowed_hosts: [gpu-box.lan, '10.0.0.5:7070', '[fd00::5]']\n  public_reads: true\n",
        "t",
    )
    .unwrap();
    assert_eq!(c.api.allowed_hosts.len(), 3);
    assert!(c.api.public_reads);
    assert_eq!(Config::from_yaml_str(&c.to_yaml(), "t").unwrap(), c);

    let e = err("api:\n  allowed_hosts:\n    - gpu-box.lan\n    - http://gpu-box.lan\n");
    assert_eq!(e.path(), Some("api.allowed_hosts[1]"));
    assert_eq!(file_origin(&e), ("configs/my.yaml".into(), 4, 7));
    assert!(e.to_string().contains("`http://gpu-box.lan`"), "{e}");
    let e = err("api:\n  public_read: true\n");
    assert!(e.to_string().contains("did you mean `public_reads`"), "{e}");

    let opts = LoadOptions {
        env: vec![("LAVENDER__API__PUBLIC_READS".into(), "true".into())],
        ..Default::default()
    };
    assert!(Config::load(&opts).unwrap().api.public_reads);
}

#[test]
fn logging_rotation_keys_are_checked_with_their_location() {
    let c = Config::from_yaml_str("logging:\n  max_bytes: 4096\n  keep: 2\n", "my.yaml").unwrap();
    assert_eq!((c.logging.max_bytes, c.logging.keep), (4096, 2));
    assert_eq!(Config::default().logging, LoggingConfig::default());
    let e = err("seed: 1\nlogging:\n  max_bytes: 10\n");
    assert_eq!(
        e.to_string(),
        "configs/my.yaml:3:14: logging.max_bytes: 10 is out of range (1024..)"
    );
    let e = err("logging:\n  keep: 0\n");
    assert!(
        e.to_string()
            .starts_with("configs/my.yaml:2:9: logging.keep: "),
        "{e}"
    );
    let e = err("logging:\n  max_byte: 4096\n");
    assert!(
        e.to_string().starts_with(
            "configs/my.yaml:2:3: unknown key `logging.max_byte` — did you mean `max_bytes`?"
        ),
        "{e}"
    );
}

#[test]
fn replicate_keys_are_checked_and_errors_name_the_key() {
    let c = Config::default();
    assert!(!c.replicate.enabled());
    assert!(!c.to_yaml().contains("replicate"), "off: left out");
    let c = Config::from_yaml_str(
        "replicate:\n  url: s3://bucket/some/prefix/\n  endpoint: http://127.0.0.1:8333\n  path_style: true\n  keep: 2\n  max_mbps: 12.5\n",
        "my.yaml",
    )
    .unwrap();
    assert_eq!(
        c.replicate.target(),
        Some(crate::config::ReplicateTarget::S3 {
            bucket: "bucket".into(),
            prefix: "some/prefix".into()
        })
    );
    assert_eq!(
        c.replicate.target().unwrap().to_string(),
        "s3://bucket/some/prefix"
    );
    let back = Config::from_yaml_str(&c.to_yaml(), "resolved").unwrap();
    assert_eq!(back.replicate, c.replicate);

    for (text, key, says) in [
        (
            "replicate:\n  url: s3://\n",
            "replicate.url",
            "names no bucket",
        ),
        (
            "replicate:\n  url: s3://AKIA:secret@bucket/p\n",
            "replicate.url",
            "credentials",
        ),
        (
            "replicate:\n  url: ftp://x/y\n",
            "replicate.url",
            "unknown scheme",
        ),
        (
            "replicate:\n  url: file://relative\n",
            "replicate.url",
            "absolute",
        ),
        (
            "replicate:\n  url: file:///mnt/nas\n  endpoint: http://x:1\n",
            "replicate.endpoint",
            "s3:// replicate.url only",
        ),
        (
            "replicate:\n  url: s3://b\n  endpoint: 127.0.0.1:8333\n",
            "replicate.endpoint",
            "not a URL",
        ),
        (
            "replicate:\n  url: s3://b\n  endpoint: http://k:s@host\n",
            "replicate.endpoint",
            "credentials",
        ),
        (
            "replicate:\n  url: s3://b\n  keep: 0\n",
            "replicate.keep",
            "at least 1",
        ),
        (
            "replicate:\n  url: s3://b\n  max_mbps: 0\n",
            "replicate.max_mbps",
            "above 0",
        ),
        (
            "replicate:\n  url: s3://b\n  max_lag_s: 0\n",
            "replicate.max_lag_s",
            "1..",
        ),
    ] {
        let e = err(text).to_string();
        assert!(e.starts_with("configs/my.yaml:"), "{e}");
        assert!(e.contains(&format!("{key}: ")), "{text}: {e}");
        assert!(e.contains(says), "{text}: {e}");
        assert!(!e.contains("secret@"), "{e}");
    }
    let e = err("replicate:\n  urll: s3://b\n").to_string();
    assert!(e.contains("`replicate.urll`") && e.contains("`url`"), "{e}");
}

#[test]
fn tracking_keys_are_checked_and_errors_name_the_key() {
    let c = Config::default();
    assert!(!c.tracking.any());
    assert!(!c.to_yaml().contains("tracking"), "off: left out");
    let c = Config::from_yaml_str(
        "tracking:\n  mlflow: {uri: 'http://127.0.0.1:5000', experiment: gpt2 runs}\n  tensorboard: {dir: /tmp/tb, metrics: worker}\n  wandb: {project: p-1, mode: offline}\n",
        "my.yaml",
    )
    .unwrap();
    let m = c.tracking.mlflow.as_ref().unwrap();
    assert_eq!(m.experiment, "gpt2 runs");
    assert_eq!(m.metrics, crate::config::MetricsWriter::Daemon);
    let tb = c.tracking.tensorboard.as_ref().unwrap();
    assert_eq!(tb.metrics, crate::config::MetricsWriter::Worker);
    assert_eq!(
        c.tracking.wandb.as_ref().unwrap().mode,
        crate::config::WandbMode::Offline
    );
    let back = Config::from_yaml_str(&c.to_yaml(), "resolved").unwrap();
    assert_eq!(back.tracking, c.tracking);

    for (text, key, says) in [
        (
            "tracking:\n  mlflow: {uri: localhost:5000}\n",
            "tracking.mlflow.uri",
            "http",
        ),
        (
            "tracking:\n  mlflow: {uri: 'file:///tmp/m'}\n",
            "tracking.mlflow.uri",
            "over http(s)",
        ),
        (
            "tracking:\n  mlflow: {uri: 'http://u:pw@host:5000'}\n",
            "tracking.mlflow.uri",
            "MLFLOW_TRACKING_TOKEN",
        ),
        (
            "tracking:\n  mlflow: {uri: 'http://h:1', experiment: ''}\n",
            "tracking.mlflow.experiment",
            "1 to 256",
        ),
        (
            "tracking:\n  wandb: {project: 'a/b'}\n",
            "tracking.wandb.project",
            "letters",
        ),
        (
            "tracking:\n  wandb: {project: p, entity: 'x y'}\n",
            "tracking.wandb.entity",
            "letters",
        ),
    ] {
        let e = Config::from_yaml_str(text, "my.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(key) && e.contains(says), "{text}: {e}");
    }
}
