use std::process::ExitCode;

use anyhow::Result;

use crate::settings::{GlobalArgs, Settings};

/// `config check`: load and validate the layered config; print it resolved.
pub fn check(args: &GlobalArgs) -> Result<ExitCode> {
    let settings = Settings::load(args)?;
    print!("{}", settings.config.resolved().to_yaml());
    eprintln!(
        "config OK ({}); {}; state directory {}",
        settings
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in defaults".into()),
        settings.data_root.line(),
        settings.layout.state_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
