//! The daemon acts on the config file, and says so: a start while a pipeline runs
//! with another config is refused naming the keys that differ (before, it answered
//! "already running" whatever the file said); `lavenderd reload` and SIGHUP read the
//! file again and name, key by key, what changed and when it takes effect, while the
//! worker keeps running.

use std::time::Duration;

use lavender_testkit::{Env, send_signal, stderr, stdout};

const T: Duration = Duration::from_secs(30);

#[test]
fn another_config_is_refused_while_running_and_a_reload_names_each_change() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        "",
        "[train]",
    );
    let daemon_pid = env.serve();
    env.start(&[]);
    env.wait_step(2, T);
    let worker = env.worker_pid();
    let original = std::fs::read_to_string(&env.config).unwrap();
    assert!(original.contains("stop_timeout_s: 10"), "{original}");
    let edited = format!(
        "{}training: {{batch_size: 3}}\n",
        original.replace("stop_timeout_s: 10", "stop_timeout_s: 11")
    );
    std::fs::write(&env.config, &edited).unwrap();

    // A start naming the edited file: refused, the differences named.
    let out = env.run(&["start"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{} differs in supervisor.stop_timeout_s, training.batch_size: stop it first",
            env.config.display()
        )),
        "{err}"
    );

    // `lavenderd reload`: each key with when it takes effect.
    let out = env.run(&["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "data root: {} (--data-root)\nconfig reloaded from {}: 2 key(s) changed\n  supervisor.stop_timeout_s: takes effect now\n  training.batch_size: takes effect at the next `lavenderd start`\n",
            env.data_root.display(),
            env.config.display()
        )
    );

    // SIGHUP: the same, in the daemon's log.
    std::fs::write(
        &env.config,
        edited.replace("worker:\n", "worker:\n  env: {EXTRA: \"1\"}\n"),
    )
    .unwrap();
    send_signal(daemon_pid as i32, 1);
    env.log_with("worker.env.EXTRA: takes effect at the next worker start", T);
    // The worker was not touched.
    assert_eq!(env.worker_pid(), worker);
    assert_eq!(env.status()["pipeline"]["state"], "running");

    // A file that does not load: the reload is refused with its place; nothing changes.
    std::fs::write(&env.config, format!("{edited}chunk: 9\n")).unwrap();
    let out = env.run(&["reload"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("{}:", env.config.display()))
            && stderr(&out).contains("chunk"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&env.config, &edited).unwrap();
    env.stop_saved();
}
