//! `notify.deadman`: a real HTTP receiver on loopback sees the daemon's pings every
//! `every_s` while it lives, and none once the daemon is SIGKILLed (the outside
//! service would alert).

use std::time::{Duration, Instant};

use lavender_testkit::notify::Recorder;
use lavender_testkit::{Env, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadman_hears_pings_while_the_daemon_lives_and_none_after_sigkill() {
    let server = Recorder::start().await;
    let mut env = Env::new(
        &["--total-steps", "100000", "--step-ms", "20"],
        &format!(
            "notify:\n  desktop: false\n  deadman: {{url: \"{}/ping/run-1\", every_s: 1}}",
            server.url()
        ),
        "[train]",
    );
    env.serve();
    env.start(&[]);
    let pings = || server.at("/ping/run-1");
    wait_until(Duration::from_secs(20), "three pings", || {
        pings().len() >= 3
    });
    let got = pings();
    for pair in got.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(500),
            "pinged every_s apart: {gap:?}"
        );
    }
    env.kill_daemons();
    // A request written just before the kill may still arrive: count from a moment
    // later, then watch three periods in which a live daemon would have pinged three times.
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_kill = pings().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        pings().len(),
        after_kill,
        "pinged after the SIGKILL ({:?} ago)",
        killed.elapsed()
    );
}
