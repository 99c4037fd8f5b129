//! `--key value` arguments (and repeatable ones such as `--header`), with errors
//! that name the flag.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;

use lavender_client::Target;

pub struct Args {
    values: BTreeMap<String, Vec<String>>,
}

impl Args {
    /// Parses `--key value` pairs; a flag without a value is an error.
    pub fn parse(raw: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut it = raw.into_iter();
        while let Some(k) = it.next() {
            let Some(key) = k.strip_prefix("--") else {
                return Err(format!(
                    "unexpected argument {k:?}; arguments are --key value"
                ));
            };
            let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            values.entry(key.to_string()).or_default().push(v);
        }
        Ok(Args { values })
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    pub fn all(&self, key: &str) -> Vec<String> {
        self.values.get(key).cloned().unwrap_or_default()
    }

    pub fn get<T: FromStr>(&self, key: &str, default: T) -> Result<T, String> {
        match self.str(key) {
            None => Ok(default),
            Some(s) => s
                .parse()
                .map_err(|_| format!("--{key} {s:?} is not a valid value")),
        }
    }

    pub fn opt<T: FromStr>(&self, key: &str) -> Result<Option<T>, String> {
        self.str(key)
            .map(|s| {
                s.parse()
                    .map_err(|_| format!("--{key} {s:?} is not a valid value"))
            })
            .transpose()
    }

    pub fn required(&self, key: &str) -> Result<&str, String> {
        self.str(key).ok_or_else(|| format!("--{key} is required"))
    }

    /// `--tcp HOST:PORT` or `--unix PATH`.
    pub fn target(&self) -> Result<Target, String> {
        match (self.str("tcp"), self.str("unix")) {
            (Some(a), None) => Ok(Target::Tcp(a.to_string())),
            (None, Some(p)) => Ok(Target::Unix(PathBuf::from(p))),
            _ => Err("give exactly one of --tcp HOST:PORT or --unix SOCKET".into()),
        }
    }
}
