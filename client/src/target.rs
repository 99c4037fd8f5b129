//! Where requests go: a TCP address or a Unix socket, and the stream to either.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `host:port`.
    Tcp(String),
    Unix(PathBuf),
}

impl Target {
    /// A connected stream (TCP with `TCP_NODELAY`: a request is one write).
    pub fn connect(&self) -> io::Result<Stream> {
        let stream = match self {
            Target::Tcp(addr) => {
                let s = TcpStream::connect(addr)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            Target::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        };
        Ok(stream)
    }

    /// `tcp 127.0.0.1:7070` or `unix /path/to/socket`.
    pub fn describe(&self) -> String {
        match self {
            Target::Tcp(a) => format!("tcp {a}"),
            Target::Unix(p) => format!("unix {}", p.display()),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Target::Tcp(_) => "tcp",
            Target::Unix(_) => "unix",
        }
    }
}

/// A connected TCP or Unix stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Read and write timeouts (`None`: wait for ever).
    pub fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}
