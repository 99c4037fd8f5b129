//! The `api:` section: whom the daemon's HTTP API answers over TCP (the Unix socket
//! is the daemon's user's alone and is not concerned).
//!
//! A request must name the daemon in its `Host` by a loopback name or address
//! (`localhost`, `127.0.0.0/8`, `[::1]`, any port) or by an entry of `allowed_hosts`,
//! so a web page whose own name was rebound to 127.0.0.1 (DNS rebinding) cannot read
//! the status. When the API may listen beyond loopback
//! (`supervisor.allow_non_loopback`), reads need the bearer token too, unless
//! `public_reads`. Every key has a default, so configs written before this section
//! existed still load.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::error::{ConfigError, ConfigErrorKind};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// More names or addresses a request's `Host` may give, as the header writes
    /// them: `gpu-box.lan` (any port) or `gpu-box.lan:7070` (that port only).
    pub allowed_hosts: Vec<String>,
    /// With `supervisor.allow_non_loopback`, reads (GET) are open without the token.
    pub public_reads: bool,
}

impl ApiConfig {
    pub fn is_default(&self) -> bool {
        *self == ApiConfig::default()
    }

    /// Whether a request naming `host` (its `Host`, already split) is for this
    /// daemon: a loopback name or address, or an entry of `allowed_hosts`.
    pub fn allows(&self, host: &HostPort) -> bool {
        host.is_loopback()
            || self
                .allowed_hosts
                .iter()
                .filter_map(|entry| HostPort::parse(entry))
                .any(|entry| host.matches(&entry))
    }
}

/// A `Host` header's value split into the name or address (an IPv6 address without
/// its brackets) and the port, if one is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPort<'a> {
    pub host: &'a str,
    pub port: Option<u16>,
}

impl<'a> HostPort<'a> {
    /// `name`, `name:port`, `1.2.3.4[:port]` or `[v6][:port]`; `None` for anything
    /// else (a scheme, a path, a bare IPv6 address, an empty name or port).
    pub fn parse(text: &'a str) -> Option<HostPort<'a>> {
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (v6, after) = rest.split_once(']')?;
            v6.parse::<Ipv6Addr>().ok()?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':')?),
            };
            (v6, port)
        } else {
            let (host, port) = match text.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            };
            let name_ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
            if !name_ok {
                return None;
            }
            (host, port)
        };
        let port = match port {
            None => None,
            Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
                Some(p.parse().ok()?)
            }
            Some(_) => return None,
        };
        Some(HostPort { host, port })
    }

    /// `localhost`, an address of 127.0.0.0/8, `::1` (or `::ffff:127.x.y.z`).
    pub fn is_loopback(&self) -> bool {
        let host = self.host.strip_suffix('.').unwrap_or(self.host);
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
            || host.parse::<Ipv6Addr>().is_ok_and(|ip| {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            })
    }

    /// Whether this `Host` is what `entry` (of `allowed_hosts`) allows: the same name,
    /// letter case and a final dot aside, and the entry's port when it has one.
    pub fn matches(&self, entry: &HostPort) -> bool {
        fn plain(h: &str) -> &str {
            h.strip_suffix('.').unwrap_or(h)
        }
        let same_host = match (
            self.host.parse::<Ipv6Addr>(),
            entry.host.parse::<Ipv6Addr>(),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => plain(self.host).eq_ignore_ascii_case(plain(entry.host)),
        };
        same_host && entry.port.is_none_or(|p| self.port == Some(p))
    }
}

pub(crate) fn validate(api: &ApiConfig) -> Result<(), ConfigError> {
    for (i, entry) in api.allowed_hosts.iter().enumerate() {
        if HostPort::parse(entry).is_none() {
            return Err(ConfigError::new(ConfigErrorKind::Invalid {
                path: format!("api.allowed_hosts[{i}]"),
                message: format!(
                    "`{entry}` is not a host name or address with an optional port; write it as a Host header does, e.g. gpu-box.lan, gpu-box.lan:7070, 10.0.0.5 or [fd00::5]:7070"
                ),
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(text: &str) -> HostPort<'_> {
        HostPort::parse(text).unwrap_or_else(|| panic!("{text:?} should parse"))
    }

    #[test]
    fn host_values_split_into_name_and_port() {
        assert_eq!(
            hp("localhost:7070"),
            HostPort {
                host: "localhost",
                port: Some(7070)
            }
        );
        assert_eq!(hp("[::1]:7070").host, "::1");
        assert_eq!(hp("[::1]").port, None);
        assert_eq!(hp("gpu-box.lan").port, None);
        for bad in [
            "",
            ":7070",
            "localhost:",
            "localhost:99999",
            "localhost:7x",
            "::1",
            "[::1",
            "[::1]7070",
            "[evil]:1",
            "http://localhost",
            "localhost/status",
            "evil example",
            "a@b",
        ] {
            assert_eq!(HostPort::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn loopback_names_and_addresses() {
        for ok in [
            "localhost",
            "LocalHost:7070",
            "localhost.:80",
            "127.0.0.1:7070",
            "127.3.2.1",
            "[::1]:7070",
            "[0:0:0:0:0:0:0:1]",
            "[::ffff:127.0.0.1]:7070",
        ] {
            assert!(hp(ok).is_loopback(), "{ok}");
        }
        for no in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "0127.0.0.1",
            "128.0.0.1",
            "0.0.0.0:7070",
            "[::]:7070",
            "[::2]",
            "gpu-box.lan:7070",
        ] {
            assert!(!hp(no).is_loopback(), "{no}");
        }
    }

    #[test]
    fn allowed_hosts_match_by_name_and_their_port_if_any() {
        let api = ApiConfig {
            allowed_hosts: vec![
                "GPU-box.lan".into(),
                "10.0.0.5:7070".into(),
                "[fd00::5]".into(),
            ],
            public_reads: false,
        };
        for ok in [
            "gpu-box.lan",
            "gpu-box.lan:9",
            "gpu-box.lan.:7070",
            "10.0.0.5:7070",
            "[fd00:0::5]:1",
            "localhost",
        ] {
            assert!(api.allows(&hp(ok)), "{ok}");
        }
        for no in [
            "10.0.0.5",
            "10.0.0.5:7071",
            "evil.example",
            "gpu-box.lan.evil",
        ] {
            assert!(!api.allows(&hp(no)), "{no}");
        }
        assert!(!ApiConfig::default().allows(&hp("gpu-box.lan")));
    }
}
