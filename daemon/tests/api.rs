//! The API against the real daemon: schema, auth on TCP and the socket, strict
//! bodies, 409, one daemon per state directory, stale socket replacement.

use std::os::unix::fs::PermissionsExt;

use lavender_testkit::*;

const TRAIN_ONLY: &str = "[train]";

#[test]
fn reads_are_open_and_mutations_need_the_token_or_the_socket() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        "",
        TRAIN_ONLY,
    );
    env.serve();

    // Never started: every key present, valid against the contract.
    let st = env.status();
    assert_eq!(st["pipeline"]["running"], false);
    assert_eq!(
        st["pipeline"]["scale"], "tiny",
        "scale comes from the config when not passed"
    );
    assert_eq!(env.tcp("GET", "/healthz", None, None).status, 200);

    let sock = env.state_dir().join("lavenderd.sock");
    assert_eq!(
        std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(env.state_dir().join("token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    let body = r#"{"scale":"tiny"}"#;
    let r = env.tcp("POST", "/pipeline/start", Some(body), None);
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("Bearer"));
    let r = env.tcp("POST", "/pipeline/start", Some(body), Some("not-the-token"));
    assert_eq!(r.status, 401);
    let r = env.tcp("POST", "/pipeline/stop", Some("{}"), None);
    assert_eq!(r.status, 401);

    let r = env.tcp(
        "POST",
        "/pipeline/start",
        Some(r#"{"scale":"tiny","chunks":2}"#),
        Some(&env.token()),
    );
    assert_eq!(r.status, 400);
    assert!(
        r.body.contains("chunks"),
        "the unknown field is named: {}",
        r.body
    );

    let r = env.tcp("POST", "/pipeline/start", Some(body), Some(&env.token()));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = env.tcp("POST", "/pipeline/start", Some(body), Some(&env.token()));
    assert_eq!(r.status, 409, "{}", r.body);

    wait_until(
        std::time::Duration::from_secs(10),
        "training progress",
        || env.status()["training"]["step"].as_u64().unwrap_or(0) >= 3,
    );
    let st = env.status();
    assert_eq!(st["pipeline"]["running"], true);
    assert_eq!(st["active_step"], "train");
    assert_eq!(st["steps"]["train"], "running");

    let big = format!(r#"{{"resume":"{}"}}"#, "x".repeat(100_000));
    let r = env.tcp("POST", "/pipeline/start", Some(&big), Some(&env.token()));
    assert_eq!(r.status, 413, "request bodies are size-limited");

    // The socket needs no token: the peer uid is ours.
    let r = env.uds("POST", "/pipeline/stop", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["saved_checkpoint"].is_string(), "{}", r.body);
    assert_eq!(env.status()["pipeline"]["state"], "stopped");
}

#[test]
fn a_second_daemon_is_refused_and_names_the_first() {
    let mut env = Env::new(&[], "", TRAIN_ONLY);
    let pid = env.serve();
    let out = env.run(&["serve"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("pid {pid}")), "{err}");
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let mut env = Env::new(&[], "", TRAIN_ONLY);
    std::fs::create_dir_all(env.state_dir()).unwrap();
    let sock = env.state_dir().join("lavenderd.sock");
    // Left behind by a daemon that was killed: a socket nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    env.serve();
    assert_eq!(env.uds("GET", "/status", None).unwrap().status, 200);
}

#[test]
fn non_loopback_listen_needs_the_flag() {
    let env = Env::new(&[], "", TRAIN_ONLY);
    let out = env.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--allow-non-loopback"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn status_json_works_without_a_daemon() {
    let env = Env::new(&[], "", "[downloads, train]");
    let out = env.run(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_valid(&v);
    assert_eq!(v["steps"]["downloads"], "pending");
    assert_eq!(v["pipeline"]["state"], "idle");
    let out = env.run(&["status"]);
    assert!(stdout(&out).contains("pipeline:"), "{}", stdout(&out));
}

#[test]
fn chunk_two_without_a_previous_checkpoint_is_a_clear_error() {
    let mut env = Env::new(&[], "", TRAIN_ONLY);
    env.serve();
    let out = env.run(&["start", "--chunk", "2"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("chunk 1") && err.contains("--resume"), "{err}");
    assert_eq!(
        env.status()["pipeline"]["running"],
        false,
        "nothing was started"
    );
}

/// One kept-alive connection carries the status, the other routes and pipelined
/// requests, over TCP and the Unix socket, as one HTTP server.
#[test]
fn status_and_the_other_routes_share_a_kept_alive_connection() {
    let mut env = Env::new(&["--total-steps", "100", "--step-ms", "20"], "", TRAIN_ONLY);
    env.serve();
    let addr = env.addr();
    let check = |r: &Http| {
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            r.head.contains("content-type: application/json"),
            "{}",
            r.head
        );
        assert!(r.head.contains("\r\ndate: "), "{}", r.head);
        assert_valid(&r.json());
    };

    let mut c = KeepAlive::tcp(&addr);
    // Pipelined: three requests in one write, three answers in order.
    let status = c.request("GET", "/status", None, None);
    c.write(status.repeat(3).as_bytes());
    let first: Vec<Http> = (0..3).map(|_| c.answer()).collect();
    first.iter().for_each(check);
    // One request in two writes.
    let (a, b) = status.split_at(9);
    c.write(a.as_bytes());
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.write(b.as_bytes());
    check(&c.answer());
    // A mutation on the same connection meets the auth ...
    let r = c.send("POST", "/pipeline/start", Some(r#"{"scale":"tiny"}"#), None);
    assert_eq!(r.status, 401, "{}", r.body);
    // ... and the status that follows is the same document.
    let routed = c.send("GET", "/status", None, None);
    check(&routed);
    let keys = |r: &Http| {
        let mut k: Vec<String> = r.json().as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&first[0]), keys(&routed));
    assert_eq!(first[0].json()["pipeline"], routed.json()["pipeline"]);
    assert_eq!(c.send("GET", "/healthz", None, None).status, 200);

    // `Connection: close` is honoured.
    let mut d = KeepAlive::tcp(&addr);
    d.write(b"GET /status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = d.answer();
    check(&r);
    assert!(r.head.contains("connection: close"), "{}", r.head);
    assert!(d.closed_by_server());

    // The Unix socket: the status, then a mutation that passes the peer check (400
    // names the bad field; 401 would mean the peer's uid was lost on the way).
    let mut u = KeepAlive::uds(&env.state_dir().join("lavenderd.sock"));
    check(&u.send("GET", "/status", None, None));
    let r = u.send(
        "POST",
        "/pipeline/start",
        Some(r#"{"scale":"tiny","chunks":2}"#),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.body);

    // Many connections open at once: every one is answered, twice.
    let mut many: Vec<_> = (0..300).map(|_| KeepAlive::tcp(&addr)).collect();
    for c in &mut many {
        check(&c.send("GET", "/status", None, None));
    }
    for c in &mut many {
        check(&c.send("GET", "/status", None, None));
    }
}
