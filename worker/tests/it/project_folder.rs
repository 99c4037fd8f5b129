//! A project folder as a user keeps it: `lavender.yaml` naming its corpus folder,
//! its data root and its worker program by paths relative to itself, started with
//! `lavenderd start --config ../project/lavender.yaml` from another folder, as a
//! detached daemon (no `serve` of the test's), with the real worker. The daemon reads
//! the config file at each start: an edited config reaches it and `start` names the
//! keys that changed; a file added to the corpus folder reruns `downloads` and the
//! steps after it, and `start` names the file.
//!
//! Before the change: the worker looked the corpus up in `<data_root>/state/` (the
//! daemon's copy of the config kept it relative), and a second `start --config` ran
//! the config the daemon was first started with; a file added to the corpus changed
//! nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lavender_testkit::{Lavenderd, WORDS, lavenderd, stderr, stdout, write_speeches};
use serde_json::Value;

const WORKER: &str = env!("CARGO_BIN_EXE_lavender-worker");
const T: Duration = Duration::from_secs(120);

fn config(min_chars: u32) -> String {
    format!(
        r#"steps: [downloads, dedup, filter]
device: cpu
threads: 1
data_root: data
worker:
  command: [bin/lavender-worker]
data:
  sources:
    - path: corpus/
  filter: {{min_chars: {min_chars}}}
supervisor:
  listen: 127.0.0.1:0
  poll_interval_ms: 50
notify:
  desktop: false
"#
    )
}

/// `lavenderd ARGS…` run in `cwd` with the project's config named relatively, and no
/// `LAVENDER_*` variable of the test's environment.
fn lavenderd_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(lavenderd())
        .current_dir(cwd)
        .args(["--config", "../project/lavender.yaml"])
        .args(args)
        .env_remove("LAVENDER_DATA_ROOT")
        .env_remove("LAVENDER_CONFIG")
        .env_remove("LAVENDER_SCALE")
        .env_remove("LAVENDER_CHUNK")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn started(out: &Output) -> String {
    assert!(
        out.status.success(),
        "lavenderd start failed\nstdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// The files `downloads` read, from its manifest.
fn downloads_inputs(data_root: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(data_root.join("corpus/manifest.json")).unwrap();
    let m: Value = serde_json::from_str(&text).unwrap();
    m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect()
}

#[test]
fn a_project_folder_started_from_another_folder_runs_its_own_files_and_start_names_changes() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(project.join("bin")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    write_speeches(&project.join("corpus"), &WORDS);
    std::os::unix::fs::symlink(WORKER, project.join("bin/lavender-worker")).unwrap();
    // The guard writes project/lavender.yaml and, when dropped, ends the daemon that
    // `start` leaves in the background (its pid file) and its worker.
    let d = Lavenderd::with_real_worker(&project, &config(20));
    let data_root = project.join("data");
    assert_eq!(d.data_root, data_root);
    let show_log =
        || std::fs::read_to_string(data_root.join("state/lavenderd.log")).unwrap_or_default();

    // Started from another folder: a background daemon, the project's own paths.
    let out = started(&lavenderd_in(&elsewhere, &["start", "--scale", "tiny"]));
    let config_file = project.join("lavender.yaml");
    assert!(
        out.contains(&format!(
            "config: {} (no previous start)",
            config_file.display()
        )),
        "{out}"
    );
    let st = d.wait_state("finished", T);
    assert_eq!(st["steps"]["filter"], "done", "{st:#}\n{}", show_log());
    assert_eq!(
        downloads_inputs(&data_root),
        [project.join("corpus/corpus.txt")]
    );
    // The worker's copy of the config holds absolute paths.
    let given = std::fs::read_to_string(data_root.join("state/pipeline-config.yaml")).unwrap();
    assert!(
        given.contains(&project.join("corpus").display().to_string())
            && given.contains(&project.join("bin/lavender-worker").display().to_string()),
        "{given}"
    );

    // The config edited: the same command runs it, and says which key changed.
    std::fs::write(&config_file, config(30)).unwrap();
    let out = started(&lavenderd_in(&elsewhere, &["start", "--scale", "tiny"]));
    assert!(
        out.contains(&format!(
            "config: {} (changed since the last start: data.filter.min_chars)",
            config_file.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("notice: filter runs again: data.filter changed since it ran at "),
        "{out}"
    );
    d.wait_state("finished", T);
    let given = std::fs::read_to_string(data_root.join("state/pipeline-config.yaml")).unwrap();
    assert!(given.contains("min_chars: 30"), "{given}");

    // A file added to the corpus folder: downloads runs again and start names it.
    let added = project.join("corpus/more.txt");
    std::fs::write(
        &added,
        "SPEAKER1:\nA new speech of the river and the crown.",
    )
    .unwrap();
    let out = started(&lavenderd_in(&elsewhere, &["start", "--scale", "tiny"]));
    assert!(out.contains("(unchanged since the last start)"), "{out}");
    assert!(
        out.contains(&format!(
            "notice: downloads runs again: {} added since it ran at ",
            added.display()
        )),
        "{out}"
    );
    assert!(
        out.contains("finished steps run again: downloads, dedup, filter"),
        "{out}"
    );
    d.wait_state("finished", T);
    assert_eq!(
        downloads_inputs(&data_root),
        [project.join("corpus/corpus.txt"), added.clone()]
    );
}

/// The 1-based line of `text` that holds `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    1 + text
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} is not in the config"))
}

/// A project whose `lavender.yaml` holds a value only the worker can judge: a
/// `model.init_from` folder that is there but holds no checkpoint, then a stage the
/// trainer does not run. The daemon's checks before launch pass both; the worker
/// rejects them, and the status, the run's `failed` event and the pipeline log name
/// the key and the line of the project's file, not the daemon's copy of it.
///
/// Before the change: the worker named no file (`model.init_from: /…/models/gpt2 is
/// not a Hugging Face GPT-2 checkpoint`, `training.stages[1].name = "warmup"`), and
/// an error of its config loading named `state/pipeline-config.yaml`.
#[test]
fn a_value_the_worker_rejects_is_named_by_the_line_of_the_project_s_file() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(project.join("bin")).unwrap();
    std::fs::create_dir_all(project.join("models/gpt2")).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    write_speeches(&project.join("corpus"), &WORDS);
    std::os::unix::fs::symlink(WORKER, project.join("bin/lavender-worker")).unwrap();
    let head = "steps: [train]\ndevice: cpu\nthreads: 1\ndata_root: data\nworker:\n  command: [bin/lavender-worker]\ndata:\n  sources:\n    - path: corpus/\nsupervisor:\n  listen: 127.0.0.1:0\n  poll_interval_ms: 50\nnotify:\n  desktop: false\n";
    let with_init = format!("{head}model:\n  init_from: models/gpt2\n");
    let d = Lavenderd::with_real_worker(&project, &with_init);
    let config_file = project.join("lavender.yaml");
    let show_log =
        || std::fs::read_to_string(d.data_root.join("state/lavenderd.log")).unwrap_or_default();

    // Each start: from another folder, a detached daemon, the real worker.
    let fails_naming = |text: &str, key: &str, value: &str| {
        let at = format!("{}:{}:", config_file.display(), line_of(text, value));
        started(&lavenderd_in(&elsewhere, &["start", "--scale", "tiny"]));
        let st = d.wait_state("failed", T);
        let failure = &st["pipeline"]["failure"];
        let message = failure["message"].as_str().unwrap_or_default();
        assert_eq!(failure["kind"], "config", "{st:#}\n{}", show_log());
        assert!(
            message.contains(&at) && message.contains(&format!(" {key}: ")),
            "the status names {at} and {key}: {message}"
        );
        assert!(!message.contains("pipeline-config"), "{message}");
        // The run's `failed` event carries the same words.
        let event = lavender_testkit::events(&d.run_dir())
            .into_iter()
            .rfind(|e| e["kind"] == "failed")
            .unwrap_or_else(|| panic!("no failed event in {}", d.run_dir().display()));
        assert_eq!(event["failure"]["message"], message, "{event}");
        // The pipeline log: the worker's own error line.
        let log_file = d.pipeline_json()["log_file"].as_str().unwrap().to_string();
        let log = std::fs::read_to_string(&log_file).unwrap();
        let said: Vec<&str> = log.lines().filter(|l| l.contains(key)).collect();
        assert!(
            !said.is_empty()
                && said
                    .iter()
                    .all(|l| l.contains(&at) && !l.contains("pipeline-config")),
            "{log_file}:\n{log}"
        );
        message.to_string()
    };

    let message = fails_naming(&with_init, "model.init_from", "init_from:");
    assert!(
        message.contains(&format!(
            "{} is not a Hugging Face GPT-2 checkpoint: config.json is missing",
            project.join("models/gpt2").display()
        )),
        "{message}"
    );

    // The folder dropped, a stage the trainer does not run added.
    let with_stage = format!(
        "{head}training:\n  stages:\n    - {{name: pretrain, steps: 2, lr: 3.0e-3}}\n    - {{name: warmup, steps: 2, lr: 1.0e-3}}\n"
    );
    std::fs::write(&config_file, &with_stage).unwrap();
    let message = fails_naming(&with_stage, "training.stages[1].name", "warmup");
    assert!(
        message
            .contains("\"warmup\" is not a stage the trainer runs; name it pretrain, sft or dpo"),
        "{message}"
    );
}
