//! `lavenderd logs [-f] [-n N]`: the pipeline log, read from the files, across its
//! rotated files (`<log>.1`, …): `-n` reaches into them when the current file holds
//! fewer lines, and `-f` follows through a rotation without losing or repeating a line.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use lavender::pipeline_file::PipelineRecord;

use crate::logs::follow::Follower;
use crate::settings::Settings;

/// How often `-f` looks for new lines.
const POLL: Duration = Duration::from_millis(250);

pub async fn run(settings: &Settings, follow: bool, lines: usize) -> Result<ExitCode> {
    let layout = &settings.layout;
    let keep = settings.config.logging.keep;
    let record = PipelineRecord::load(layout)?;
    let Some(path) = crate::logs::current_log(layout, record.log_file.as_deref()) else {
        bail!("no pipeline log yet in {}", layout.logs_dir().display());
    };
    // The tail and the following share one open file and one offset (the end of its
    // last whole line), so a line written meanwhile is shown once, by one or the other.
    let file = std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
    let end = file.metadata()?.len();
    let from = if follow {
        crate::logs::line_start_before(&file, end)?
    } else {
        end
    };
    let text = crate::logs::tail_to(&path, &file, from, lines)
        .with_context(|| format!("read {}", path.display()))?;
    let mut follower = if follow {
        Some(Follower::at(&path, file, from, keep)?)
    } else {
        None
    };
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    let Some(follower) = follower.as_mut() else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut buf = Vec::new();
    loop {
        tokio::time::sleep(POLL).await;
        follower
            .poll(&mut buf)
            .with_context(|| format!("read {}", follower.path().display()))?;
        // A new pipeline start opens a new log: follow it, from its start.
        let record = PipelineRecord::load(layout).unwrap_or_else(|_| PipelineRecord::idle());
        if let Some(newer) = crate::logs::current_log(layout, record.log_file.as_deref())
            && newer != follower.path()
            && let Ok(next) = Follower::from_start(&newer, keep)
        {
            buf.extend_from_slice(format!("==> {} <==\n", newer.display()).as_bytes());
            *follower = next;
            follower.poll(&mut buf)?;
        }
        if !buf.is_empty() {
            out.write_all(&buf)?;
            out.flush()?;
            buf.clear();
        }
    }
}
