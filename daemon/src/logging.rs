//! Where the daemon's tracing goes. A daemon in the background or under a service
//! manager writes to stderr, which whoever started it captures (`state/lavenderd.log`,
//! the journal). `start --foreground` owns the terminal for its view, so there the
//! lines go to `state/lavenderd.log` instead, and WARN/ERROR are also shown once in
//! the view, in its own format. Alerts are logged under [`ALERT_TARGET`] and left out
//! of the view: the feed shows them already.
//!
//! `state/lavenderd.log` rotates by size (`logging`) when the daemon writes it: in the
//! foreground, and when its stderr is that file (a daemon `lavenderd start` left in
//! the background, a LaunchAgent). The journal rotates itself.

use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};

use anyhow::{Context, Result};
use lavender::config::LoggingConfig;

use crate::logs::rotating::RotatingFile;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::Context as LayerContext;

/// The target of the alert sink's log lines.
pub const ALERT_TARGET: &str = "lavenderd::alert";

/// Prints one line in the foreground view.
pub type ViewPrinter = Box<dyn Fn(String) + Send + Sync>;

/// Set once, when the daemon writes its log file itself (see the module's doc).
static LOG_FILE: OnceLock<Mutex<RotatingFile>> = OnceLock::new();
/// Set once, when the foreground view starts.
static VIEW: OnceLock<ViewPrinter> = OnceLock::new();

/// Installs the subscriber: formatted lines to stderr (or, once [`to_file`] was
/// called, to the log file), and WARN/ERROR into the view once one is registered.
/// `ansi`: colours, for a terminal that will keep receiving the lines.
pub fn init(ansi: bool) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LAVENDER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(LogWriter)
                .with_filter(filter),
        )
        .with(ViewLayer)
        .init();
}

/// From now on, log lines are appended to `path` (rotating) instead of stderr.
pub fn to_file(path: &Path, limits: LoggingConfig) -> Result<()> {
    let file = RotatingFile::open(path, limits)
        .with_context(|| format!("open the daemon log {}", path.display()))?;
    // A second foreground daemon in one process (tests) keeps the first file.
    let _ = LOG_FILE.set(Mutex::new(file));
    Ok(())
}

/// When this process's stderr is the log file at `path` (it was started with its
/// output there), log lines go through a rotating writer of that file, and each
/// rotation points stdout and stderr at the new file, so anything else printed (a
/// panic) lands there too. A restart alone keeps the descriptors, so the new image
/// finds its stderr is the log again. Otherwise (a terminal, the journal) nothing
/// changes. Called again (a config reload), it takes the new limits.
pub fn rotate_own_log(path: &Path, limits: LoggingConfig) -> Result<()> {
    if let Some(log) = LOG_FILE.get() {
        lock(log).set_limits(limits);
        return Ok(());
    }
    if !stderr_is(path) {
        return Ok(());
    }
    let file = RotatingFile::open(path, limits)
        .with_context(|| format!("open the daemon log {}", path.display()))?
        .on_rotate(|new| {
            let _ = nix::unistd::dup2_stdout(new);
            let _ = nix::unistd::dup2_stderr(new);
        });
    let _ = LOG_FILE.set(Mutex::new(file));
    Ok(())
}

/// The stderr descriptor and `path` are the same file.
fn stderr_is(path: &Path) -> bool {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let (Ok(fd), Ok(file)) = (std::fs::File::from(fd).metadata(), std::fs::metadata(path)) else {
        return false;
    };
    fd.dev() == file.dev() && fd.ino() == file.ino()
}

fn lock(log: &'static Mutex<RotatingFile>) -> MutexGuard<'static, RotatingFile> {
    // A writer that panicked mid-line leaves the file usable.
    log.lock().unwrap_or_else(|p| p.into_inner())
}

/// From now on, WARN and ERROR lines are also printed by `printer`.
pub fn show_in_view(printer: ViewPrinter) {
    let _ = VIEW.set(printer);
}

struct LogWriter;

enum Sink {
    File(MutexGuard<'static, RotatingFile>),
    Stderr(std::io::Stderr),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.append(buf).map(|()| buf.len()),
            Sink::Stderr(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(_) => Ok(()),
            Sink::Stderr(e) => e.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Sink;
    fn make_writer(&'a self) -> Sink {
        match LOG_FILE.get() {
            Some(f) => Sink::File(lock(f)),
            None => Sink::Stderr(std::io::stderr()),
        }
    }
}

/// WARN and ERROR events, as view lines, once a view is registered.
struct ViewLayer;

impl<S: Subscriber> Layer<S> for ViewLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: LayerContext<'_, S>) {
        let meta = event.metadata();
        if *meta.level() > Level::WARN || meta.target() == ALERT_TARGET {
            return;
        }
        let Some(view) = VIEW.get() else {
            return;
        };
        let mut text = Text::default();
        event.record(&mut text);
        view(view_line(
            *meta.level(),
            &chrono::Local::now().format("%H:%M:%S").to_string(),
            &text.0,
        ));
    }
}

/// `HH:MM:SS  warning            message key=value`, aligned with the feed's lines.
pub fn view_line(level: Level, time: &str, text: &str) -> String {
    let label = if level == Level::ERROR {
        "error"
    } else {
        "warning"
    };
    format!("{time}  {label:<18} {text}")
}

/// The message first, then the other fields as `key=value`.
#[derive(Default)]
struct Text(String);

impl Text {
    fn push(&mut self, name: &str, value: &str) {
        if name == "message" {
            self.0.insert_str(0, value);
        } else {
            self.0.push_str(&format!(" {name}={value}"));
        }
    }
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.push(field.name(), &format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_lines_say_the_level_in_words() {
        assert_eq!(
            view_line(Level::WARN, "10:00:00", "disk slow"),
            "10:00:00  warning            disk slow"
        );
        assert!(view_line(Level::ERROR, "10:00:00", "x").contains("  error  "));
    }

    #[test]
    fn the_message_comes_before_the_fields() {
        let mut t = Text::default();
        t.push("pgid", "7");
        t.push("message", "killed");
        assert_eq!(t.0, "killed pgid=7");
    }
}
