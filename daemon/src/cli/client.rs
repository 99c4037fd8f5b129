//! A minimal HTTP/1.1 client over the daemon's Unix socket (one request per
//! connection, `Connection: close`), enough for the CLI's JSON requests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

pub struct Client {
    socket: PathBuf,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.body)
            .with_context(|| format!("unexpected answer from the daemon: {}", self.body))
    }

    /// The `error` of a `{"error": ...}` body, else the body.
    pub fn error_text(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error")?.as_str().map(str::to_string))
            .unwrap_or_else(|| self.body.trim().to_string())
    }
}

impl Client {
    pub fn new(socket: &Path) -> Client {
        Client {
            socket: socket.to_path_buf(),
        }
    }

    /// True when a daemon answers on the socket.
    pub async fn is_up(&self) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(2), self.request("GET", "/healthz", None)).await,
            Ok(Ok(r)) if r.status == 200
        )
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Response> {
        let mut stream = UnixStream::connect(&self.socket)
            .await
            .with_context(|| format!("connect to the daemon at {}", self.socket.display()))?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: lavenderd\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .with_context(|| format!("read the daemon's answer to {method} {path}"))?;
        parse(&raw)
    }
}

fn parse(raw: &[u8]) -> Result<Response> {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("the daemon closed the connection without a complete answer");
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("the daemon's answer has no HTTP status line")?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut body = raw[split + 4..].to_vec();
    if chunked {
        body = dechunk(&body)?;
    }
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            bail!("truncated chunked answer");
        };
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .context("bad chunk size in the daemon's answer")?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            bail!("truncated chunked answer");
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_plain_and_chunked() {
        let r = super::parse(b"HTTP/1.1 409 Conflict\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (409, "{}"));
        let r = super::parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!(r.body, "abcde");
    }
}
