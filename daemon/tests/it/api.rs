//! The API against the real daemon: schema, auth on TCP and the socket, strict
//! bodies, 409, one daemon per state directory, stale socket replacement.

use std::os::unix::fs::PermissionsExt;

use lavender_testkit::http::tcp_as;
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

const ROUTER: &str = include_str!("../../src/server/mod.rs");

/// Every route the router's source declares, as (method, a path it serves), so a
/// route added later is covered too.
fn every_route() -> Vec<(String, String)> {
    let routes: Vec<(String, String)> = router_routes(ROUTER)
        .iter()
        .map(|r| {
            let (method, path) = r.split_once(' ').unwrap();
            (method.to_string(), path.replace("{id}", "current"))
        })
        .collect();
    for known in ["GET /status", "GET /events", "POST /pipeline/stop"] {
        assert!(
            routes.iter().any(|(m, p)| format!("{m} {p}") == known),
            "{known} not among the router's routes {routes:?}"
        );
    }
    routes
}

/// One raw request over `c` and its answer.
fn raw<S: std::io::Read + std::io::Write>(c: &mut KeepAlive<S>, text: &str) -> Http {
    c.write(text.as_bytes());
    c.answer()
}

/// DNS rebinding: a web page whose own name now resolves to 127.0.0.1 sends that
/// name in `Host`. Every route of the router, and a path it lacks, answers 421 with
/// a one-line reason, with the token or without; loopback names and addresses are
/// served with or without a port; the Unix socket is exempt.
#[test]
fn a_request_naming_another_host_gets_421_on_every_route() {
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        "",
        TRAIN_ONLY,
    );
    env.serve();
    let addr = env.addr();
    let token = env.token();
    let mut targets = every_route();
    targets.push(("GET".into(), "/no-such-route".into()));
    for (method, path) in &targets {
        let body = (method == "POST").then_some("{}");
        for host in [
            "evil.example",
            "evil.example:7070",
            "127.0.0.1.evil.example",
        ] {
            for t in [None, Some(token.as_str())] {
                let r = tcp_as(&addr, host, method, path, body, t);
                assert_eq!(r.status, 421, "{method} {path}, Host {host}: {}", r.body);
                let reason = r.json()["error"].as_str().unwrap().to_string();
                assert!(
                    reason.contains(host) && reason.contains("api.allowed_hosts"),
                    "{reason}"
                );
                assert!(!reason.contains('\n'), "one line: {reason}");
            }
        }
    }
    assert_eq!(env.status()["pipeline"]["state"], "idle", "nothing ran");

    let mut c = KeepAlive::tcp(&addr);
    // An absolute-form target names the host that counts, whatever `Host` says.
    let r = raw(
        &mut c,
        "GET http://evil.example/status HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(r.status, 421, "{}", r.body);
    // No `Host` at all: 400, for HTTP/1.1 and 1.0 alike.
    for version in ["1.1", "1.0"] {
        let mut c = KeepAlive::tcp(&addr);
        let r = raw(&mut c, &format!("GET /status HTTP/{version}\r\n\r\n"));
        assert_eq!(r.status, 400, "HTTP/{version}: {}", r.body);
        assert!(r.body.contains("Host header"), "{}", r.body);
    }
    let r = raw(
        &mut c,
        "GET /status HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n",
    );
    assert_eq!(r.status, 400, "two Host headers: {}", r.body);

    for host in [
        "localhost:7070",
        "127.0.0.1:7070",
        "[::1]:7070",
        "localhost",
        "127.0.0.1",
        "[::1]",
        "LOCALHOST:1",
        addr.as_str(),
    ] {
        let r = tcp_as(&addr, host, "GET", "/status", None, None);
        assert_eq!(r.status, 200, "Host {host}: {}", r.body);
        assert_valid(&r.json());
        assert_eq!(
            tcp_as(&addr, host, "GET", "/healthz", None, None).status,
            200
        );
    }
    let r = tcp_as(
        &addr,
        "[::1]:7070",
        "POST",
        "/pipeline/start",
        Some("{}"),
        None,
    );
    assert_eq!(
        r.status, 401,
        "a loopback Host still needs the token to change things"
    );

    let mut u = KeepAlive::uds(&env.state_dir().join("lavenderd.sock"));
    let r = raw(&mut u, "GET /status HTTP/1.1\r\nHost: evil.example\r\n\r\n");
    assert_eq!(r.status, 200, "the Unix socket is exempt: {}", r.body);
    assert_valid(&r.json());
}

#[test]
fn allowed_hosts_are_served_by_name_and_their_port() {
    let mut env = Env::new(
        &[],
        "api:\n  allowed_hosts: [gpu-box.lan, '10.9.8.7:7070']",
        TRAIN_ONLY,
    );
    env.serve();
    let addr = env.addr();
    for host in [
        "gpu-box.lan",
        "GPU-Box.lan:7070",
        "10.9.8.7:7070",
        "localhost:7070",
    ] {
        let r = tcp_as(&addr, host, "GET", "/status", None, None);
        assert_eq!(r.status, 200, "Host {host}: {}", r.body);
    }
    for host in [
        "10.9.8.7:7071",
        "10.9.8.7",
        "other.lan",
        "gpu-box.lan.evil.example",
    ] {
        let r = tcp_as(&addr, host, "GET", "/status", None, None);
        assert_eq!(r.status, 421, "Host {host}: {}", r.body);
    }
}

/// A daemon allowed beyond loopback answers reads only with the token, unless
/// `api.public_reads`; the CLI (over the Unix socket) works either way.
#[test]
fn beyond_loopback_reads_need_the_token_unless_public_reads() {
    let mut env = Env::new(&[], "", TRAIN_ONLY);
    env.serve_args.push("--allow-non-loopback".into());
    env.serve();
    let addr = env.addr();
    let token = env.token();
    for (method, path) in every_route() {
        let body = (method == "POST").then_some("{}");
        let r = tcp_as(&addr, "localhost", &method, &path, body, None);
        assert_eq!(
            r.status, 401,
            "{method} {path} without the token: {}",
            r.body
        );
        if method == "GET" {
            assert!(r.body.contains("api.public_reads"), "{}", r.body);
        }
    }
    let r = tcp_as(&addr, "localhost", "GET", "/status", None, Some(&token));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_valid(&r.json());
    let r = tcp_as(&addr, "evil.example", "GET", "/status", None, Some(&token));
    assert_eq!(r.status, 421, "the token does not lift the Host check");
    let out = env.run(&["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_valid(&serde_json::from_str(&stdout(&out)).unwrap());

    let mut public = Env::new(
        &[],
        "  allow_non_loopback: true\napi:\n  public_reads: true",
        TRAIN_ONLY,
    );
    public.serve();
    let addr = public.addr();
    let r = tcp_as(&addr, "localhost", "GET", "/status", None, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = tcp_as(
        &addr,
        "localhost",
        "POST",
        "/pipeline/start",
        Some("{}"),
        None,
    );
    assert_eq!(r.status, 401, "changes still need the token: {}", r.body);
}
