//! `GET /metrics`: the status as Prometheus gauges and counters (text format
//! 0.0.4). A value the status does not know (no heartbeat yet) is left out, so a
//! dashboard shows a gap rather than a false zero; HELP and TYPE are always there.

pub mod notifications;
pub mod text;

pub use notifications::{NotificationCount, notification_counts};

use lavender::status::{PipelineState, Status};

use text::{Family, MetricType};

/// What the metrics are made of.
pub struct Inputs<'a> {
    pub status: &'a Status,
    /// Free bytes for unprivileged users on the data root's filesystem.
    pub disk_available_bytes: Option<u64>,
    pub worker_restarts: u64,
    /// `None` until a notifications module provides counts.
    pub notifications: Option<Vec<NotificationCount>>,
    /// What the checkpoints room did since the daemon started.
    pub checkpoints: Option<&'a crate::checkpoints::lifecycle::Report>,
}

const STATES: [PipelineState; 8] = [
    PipelineState::Idle,
    PipelineState::Running,
    PipelineState::Stopping,
    PipelineState::Stopped,
    PipelineState::Finished,
    PipelineState::Crashed,
    PipelineState::Failed,
    PipelineState::WaitingForDisk,
];

pub fn render(m: &Inputs<'_>) -> String {
    let t = &m.status.training;
    let gauge =
        |name, help, v: Option<f64>| Family::new(name, help, MetricType::Gauge).sample_opt(&[], v);
    let bool01 = |b: bool| Some(if b { 1.0 } else { 0.0 });
    let families = [
        gauge(
            "lavender_training_step",
            "Optimizer steps done in the current run.",
            t.step.map(|v| v as f64),
        ),
        gauge(
            "lavender_training_total_steps",
            "Optimizer steps the run will take.",
            t.total_steps.map(|v| v as f64),
        ),
        gauge(
            "lavender_training_loss",
            "Training loss at the last heartbeat.",
            t.loss,
        ),
        gauge(
            "lavender_training_loss_smooth",
            "Exponential moving average of the training loss.",
            t.loss_smooth,
        ),
        gauge(
            "lavender_training_learning_rate",
            "Learning rate at the last heartbeat.",
            t.lr,
        ),
        gauge(
            "lavender_training_steps_per_second",
            "Training speed over the worker's recent window.",
            t.steps_per_sec,
        ),
        gauge(
            "lavender_training_eta_seconds",
            "Estimated seconds until the run's last step.",
            t.eta_seconds.map(|v| v as f64),
        ),
        gauge(
            "lavender_heartbeat_age_seconds",
            "Seconds since the worker last wrote heartbeat.json.",
            t.heartbeat_age_s.map(|v| v as f64),
        ),
        gauge(
            "lavender_heartbeat_stale",
            "1 when the live worker has gone longer without a heartbeat than its phase allows (supervisor.stale_after_s while training).",
            bool01(t.heartbeat_stale),
        ),
        gauge(
            "lavender_checkpoints",
            "Complete checkpoints in the current run.",
            Some(t.checkpoints as f64),
        ),
        gauge(
            "lavender_verified_checkpoints",
            "Checkpoints of the current run the daemon read back and found matching their manifest.",
            Some(t.verified_checkpoints as f64),
        ),
        gauge(
            "lavender_disk_available_bytes",
            "Bytes available on the data root's filesystem.",
            m.disk_available_bytes.map(|v| v as f64),
        ),
        Family::new(
            "lavender_worker_restarts_total",
            "Crash restarts of the worker since the daemon started.",
            MetricType::Counter,
        )
        .sample(&[], m.worker_restarts as f64),
        notifications_family(m.notifications.as_deref()),
        checkpoint_reads_family(m.checkpoints),
        Family::new(
            "lavender_checkpoints_dropped_total",
            "Checkpoints the daemon's retention deleted since the daemon started.",
            MetricType::Counter,
        )
        .sample_opt(&[], m.checkpoints.map(|c| c.dropped as f64)),
        gauge(
            "lavender_checkpoint_storage_error",
            "1 while a checkpoint cannot be read (EIO, ESTALE, EACCES, ...): retention and replication wait.",
            m.checkpoints
                .map(|c| if c.storage_error.is_some() { 1.0 } else { 0.0 }),
        ),
        goodput_family(m.status.goodput.as_ref()),
        gauge(
            "lavender_goodput_ratio",
            "Productive seconds over the run's counted seconds (wall less stopped).",
            m.status.goodput.as_ref().and_then(|g| g.goodput),
        ),
        STATES.iter().fold(
            Family::new(
                "lavender_pipeline_state",
                "The pipeline's state: 1 for the current one, 0 for the others.",
                MetricType::Gauge,
            ),
            |f, s| {
                f.sample(
                    &[("state", s.as_str())],
                    if *s == m.status.pipeline.state {
                        1.0
                    } else {
                        0.0
                    },
                )
            },
        ),
    ];
    let mut out = String::new();
    for f in &families {
        f.write(&mut out);
    }
    out
}

/// The current run's wall time by goodput bucket (`state/goodput.json`); no sample
/// before the ledger counted the run.
fn goodput_family(goodput: Option<&lavender::goodput::GoodputStatus>) -> Family {
    let family = Family::new(
        "lavender_goodput_seconds",
        "Seconds of the current run's wall time, by bucket (productive, or where it was lost).",
        MetricType::Gauge,
    );
    let Some(g) = goodput else { return family };
    lavender::goodput::Bucket::ALL.iter().fold(family, |f, b| {
        f.sample(&[("bucket", b.as_str())], g.seconds.get(*b))
    })
}

/// Checkpoints read back by the daemon since it started, by what was found.
fn checkpoint_reads_family(report: Option<&crate::checkpoints::lifecycle::Report>) -> Family {
    let family = Family::new(
        "lavender_checkpoint_reads_total",
        "Checkpoints the daemon read back since it started, by verdict (verified, damaged).",
        MetricType::Counter,
    );
    let Some(r) = report else { return family };
    family
        .sample(&[("verdict", "verified")], r.verified as f64)
        .sample(&[("verdict", "damaged")], r.damaged as f64)
}

fn notifications_family(counts: Option<&[NotificationCount]>) -> Family {
    let family = Family::new(
        "lavender_notifications_total",
        "Notifications sent, by channel and outcome (sent, failed, suppressed).",
        MetricType::Counter,
    );
    counts.unwrap_or_default().iter().fold(family, |f, c| {
        f.sample(
            &[("channel", &c.channel), ("outcome", &c.outcome)],
            c.count as f64,
        )
    })
}

/// Free bytes for unprivileged users where `path` (or its nearest existing
/// ancestor) lives; exact, unlike the status's GiB with one decimal.
pub fn disk_available_bytes(path: &std::path::Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let st = nix::sys::statvfs::statvfs(existing).ok()?;
    // The field types differ by platform (u32 on macOS, u64 on Linux).
    #[allow(clippy::unnecessary_cast)]
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}
