//! `lavenderd logs [-f] [-n N]`: the pipeline log, read from the files.

use std::io::{Read, Seek, SeekFrom, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::pipeline::PipelineRecord;
use crate::settings::Settings;

pub async fn run(settings: &Settings, follow: bool, lines: usize) -> Result<ExitCode> {
    let layout = &settings.layout;
    let record = PipelineRecord::load(layout)?;
    let Some(mut path) = crate::logs::current_log(layout, record.log_file.as_deref()) else {
        bail!("no pipeline log yet in {}", layout.logs_dir().display());
    };
    let text =
        crate::logs::tail(&path, lines).with_context(|| format!("read {}", path.display()))?;
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut pos = std::fs::metadata(&path)?.len();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        // A new pipeline start opens a new log: follow it.
        let record = PipelineRecord::load(layout).unwrap_or_else(|_| PipelineRecord::idle());
        if let Some(newer) = crate::logs::current_log(layout, record.log_file.as_deref())
            && newer != path
        {
            println!("==> {} <==", newer.display());
            path = newer;
            pos = 0;
        }
        let Ok(mut f) = std::fs::File::open(&path) else {
            continue;
        };
        let len = f.metadata()?.len();
        if len < pos {
            pos = 0;
        }
        if len > pos {
            f.seek(SeekFrom::Start(pos))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            pos += buf.len() as u64;
            out.write_all(&buf)?;
            out.flush()?;
        }
    }
}
