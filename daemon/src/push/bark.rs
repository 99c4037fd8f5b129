//! Bark (iOS push): `POST <server>/push` with `{device_key, title, body, level,
//! group, url}`; milestones are `passive` (silent), alerts `timeSensitive`. Success
//! is HTTP 200 with `{"code":200,…}`.

use std::path::{Path, PathBuf};

use lavender::config::BarkConfig;
use serde_json::json;

use super::delivery::{self, DeliveryError};
use super::message::{Level, Notification};

/// The public server, used when neither the config nor the env file names one.
pub(super) const DEFAULT_SERVER: &str = "https://api.day.app";

pub(super) struct Bark {
    server: String,
    key: String,
    group: String,
    url: Option<String>,
}

/// `KEY=value` lines of a `*.bark.env` file (`export`, quotes and `#` comments allowed).
fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.starts_with('#') {
                return None;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (key, value) = line.split_once('=')?;
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            Some((key.trim().to_string(), value.to_string()))
        })
        .collect()
}

/// The env file: the configured one, else the first `*.bark.env` in `state_dir`.
fn env_file(cfg: &BarkConfig, state_dir: &Path) -> Option<PathBuf> {
    if let Some(path) = &cfg.env_file {
        return Some(path.clone());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(state_dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".bark.env"))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

impl Bark {
    /// The channel, or why it is off: no key in the config nor in an env file.
    pub fn from_config(cfg: &BarkConfig, state_dir: &Path) -> Result<Bark, String> {
        let file = env_file(cfg, state_dir);
        let vars = match &file {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => parse_env(&text),
                Err(e) if cfg.key.is_none() => {
                    return Err(format!("cannot read {}: {e}", path.display()));
                }
                Err(_) => Vec::new(),
            },
            None => Vec::new(),
        };
        let var = |name: &str| {
            vars.iter()
                .rev()
                .find(|(k, v)| k == name && !v.is_empty())
                .map(|(_, v)| v.clone())
        };
        let key = cfg
            .key
            .clone()
            .filter(|k| !k.is_empty())
            .or_else(|| var("BARK_KEY"));
        let Some(key) = key else {
            return Err(match file {
                Some(path) => format!("no BARK_KEY in {}", path.display()),
                None => format!(
                    "no notify.bark.key and no *.bark.env file in {}",
                    state_dir.display()
                ),
            });
        };
        let server = cfg
            .server
            .clone()
            .or_else(|| var("BARK_SERVER"))
            .unwrap_or_else(|| DEFAULT_SERVER.to_string());
        Ok(Bark {
            server: server.trim_end_matches('/').to_string(),
            key,
            group: cfg.group.clone(),
            url: cfg.url.clone(),
        })
    }

    pub async fn deliver(
        &self,
        http: &reqwest::Client,
        n: &Notification,
    ) -> Result<String, DeliveryError> {
        let mut payload = json!({
            "device_key": self.key,
            "body": if n.body.is_empty() { &n.title } else { &n.body },
            "level": match n.level {
                Level::Milestone => "passive",
                Level::Alert => "timeSensitive",
            },
            "group": self.group,
        });
        if !n.title.is_empty() && !n.body.is_empty() {
            payload["title"] = json!(n.title);
        }
        if let Some(url) = &self.url {
            payload["url"] = json!(url);
        }
        let req = http.post(format!("{}/push", self.server)).json(&payload);
        let (status, body) = delivery::send(req).await?;
        let answer = delivery::judge(status, &body)?;
        // Bark answers 200 with its own code; anything but 200 there is a refusal.
        let code = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_i64()));
        match code {
            Some(200) => Ok(answer),
            Some(code) if code >= 500 => Err(DeliveryError::retry(format!(
                "Bark answered code {code}: {}",
                delivery::clip(&body, 300)
            ))),
            _ => Err(DeliveryError::fatal(format!(
                "Bark did not confirm the push: {}",
                delivery::clip(&body, 300)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_lines() {
        let vars = parse_env(
            "# mine\nexport BARK_KEY=\"abc\"\nBARK_SERVER = 'https://b.example/'\nnoise\n",
        );
        assert_eq!(
            vars,
            [
                ("BARK_KEY".into(), "abc".into()),
                ("BARK_SERVER".into(), "https://b.example/".into())
            ]
        );
    }

    #[test]
    fn key_and_server_sources() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BarkConfig::default();
        let off = Bark::from_config(&cfg, dir.path()).err().unwrap();
        assert!(off.contains("no notify.bark.key"), "{off}");

        std::fs::write(dir.path().join("phone.bark.env"), "BARK_KEY=k1\n").unwrap();
        let bark = Bark::from_config(&cfg, dir.path()).unwrap();
        assert_eq!(
            (bark.key.as_str(), bark.server.as_str()),
            ("k1", DEFAULT_SERVER)
        );

        std::fs::write(
            dir.path().join("phone.bark.env"),
            "BARK_KEY=k1\nBARK_SERVER=https://b.example/\n",
        )
        .unwrap();
        let cfg = BarkConfig {
            key: Some("k2".into()),
            ..BarkConfig::default()
        };
        let bark = Bark::from_config(&cfg, dir.path()).unwrap();
        assert_eq!(
            (bark.key.as_str(), bark.server.as_str()),
            ("k2", "https://b.example")
        );

        std::fs::write(dir.path().join("phone.bark.env"), "BARK_KEY=\n").unwrap();
        let off = Bark::from_config(&BarkConfig::default(), dir.path())
            .err()
            .unwrap();
        assert!(off.contains("no BARK_KEY in"), "{off}");
    }
}
