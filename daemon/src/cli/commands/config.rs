use std::process::ExitCode;

use anyhow::Result;

use crate::config_source::ConfigSource;
use crate::settings::{GlobalArgs, Settings};

/// `config check`: load and validate the layered config; print it resolved (relative
/// paths taken from the config file's folder); then check that the files it names
/// exist (sources, `sft_jsonl`, `dpo_jsonl`, `init_from`, the worker program), each
/// one missing named with its key, the file and line that set it and the resolved
/// path. Exit 1 when one is missing.
pub fn check(args: &GlobalArgs) -> Result<ExitCode> {
    let settings = Settings::load(args)?;
    print!("{}", settings.config.resolved().to_yaml());
    let source = ConfigSource::from_process(settings.config_file.clone());
    let origins = source
        .read(None)
        .map_err(|e| anyhow::anyhow!(e))?
        .map(|l| l.origins);
    let missing = source.missing(&settings.config, origins.as_ref());
    let name = settings
        .config_file
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "built-in defaults".into());
    if !missing.is_empty() {
        for line in &missing {
            eprintln!("{line}");
        }
        eprintln!(
            "config {name}: {} path(s) it names do not exist",
            missing.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    if let Some(url) = &settings.config.replicate.url {
        eprintln!(
            "{}",
            bucket_trust(url, settings.config.replicate.signing_key_file.is_some())
        );
    }
    eprintln!(
        "config OK ({name}); {}; state directory {}",
        settings.data_root.line(),
        settings.layout.state_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// What a restore from `url` trusts, said plainly (`config check` prints it).
fn bucket_trust(url: &str, signed: bool) -> String {
    if signed {
        format!(
            "replicate: copies in {url} are signed with replicate.signing_key_file; a restore refuses one unsigned or altered (keep the key off this data root, and the same file on every machine that restores)"
        )
    } else {
        format!(
            "replicate: no replicate.signing_key_file, so a restore trusts {url} as it is: whoever can write there (a teammate's job, a leaked key) decides what this machine resumes from, and a Hugging Face checkpoint's pickles (optimizer.pt, rng_state.pth) run code when loaded. Names and paths are checked either way; set a signing key to check the bytes (docs/OPERATIONS.md, \"Replication\")"
        )
    }
}
