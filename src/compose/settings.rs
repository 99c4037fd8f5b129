//! The config values the status needs, read once per config (at start and at each
//! reload) and handed to the refresher, the cache and [`super::compose`].

use crate::config::{Config, PipelineStep, Scale, ScalesConfig, SupervisorConfig};

/// The config values the status needs.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSettings {
    /// The `supervisor:` section: the allowances of a worker's phases, and what a
    /// hang gets.
    pub supervisor: SupervisorConfig,
    pub default_scale: Scale,
    pub default_chunk: u32,
    pub steps: Vec<PipelineStep>,
    /// `notify.disk_floor_mib`: the floor of the disk-low alert.
    pub disk_floor_mib: u64,
    /// The scale presets, for the shards each scale wants.
    pub scales: ScalesConfig,
}

impl StatusSettings {
    pub fn from_config(config: &Config) -> StatusSettings {
        StatusSettings {
            supervisor: config.supervisor.clone(),
            default_scale: config.scale,
            default_chunk: config.chunk,
            steps: config.steps.clone(),
            disk_floor_mib: config.notify.disk_floor_mib,
            scales: config.scales,
        }
    }
}
