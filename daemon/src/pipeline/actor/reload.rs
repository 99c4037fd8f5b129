//! A reload (SIGHUP, `lavenderd reload`): the config file read again, each changed
//! key logged with when it takes effect (`pipeline/reload.rs`), and the new config
//! kept for the next worker started and the next start. The running worker is not
//! touched, nor is the config its pipeline started with.

use super::{Actor, backend_for};
use crate::pipeline::reload::Reload as ReloadReport;

impl Actor {
    pub(super) fn reload(&mut self) -> Result<ReloadReport, String> {
        let loaded = self.source.read(None).map_err(|e| {
            tracing::error!("reload: config not reloaded: {e}");
            format!("config not reloaded: {e}")
        })?;
        let (config, file) = match loaded {
            Some(l) => (l.config, Some(l.file.path)),
            // No file: the defaults and the environment, as the daemon started.
            None => (self.config.clone(), None),
        };
        let report = ReloadReport::new(file, &self.config, config.clone());
        for line in report.lines() {
            tracing::info!("{line}");
        }
        if config.launch != self.config.launch {
            self.backend = backend_for(&self.layout, &config);
        }
        self.config = config;
        Ok(report)
    }
}
