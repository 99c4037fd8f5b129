//! An answer: its head (status line and headers) and body, and the framing rules
//! that say where the body ends.

use std::borrow::Cow;
use std::io;

/// An answer's status line and headers, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// The status line and the header lines, joined by `\r\n`, without the blank line.
    pub text: String,
    pub(crate) framing: Framing,
    /// The server closes the connection after this answer.
    pub(crate) closes: bool,
}

/// Where an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (a HEAD request, 1xx, 204, 304).
    Empty,
    Length(usize),
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

impl Head {
    /// The first header called `name` (any letter case), its value trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.text, name)
    }

    /// Parses the head's text (without its blank line). `head_only`: the answer to
    /// a HEAD request, which has no body.
    pub(crate) fn parse(text: String, head_only: bool) -> io::Result<Head> {
        let mut lines = text.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let mut words = status_line.split(' ');
        let version = words.next().unwrap_or("");
        let status: u16 = words
            .next()
            .filter(|_| version.starts_with("HTTP/1."))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(format!("not an HTTP/1.x status line: {status_line:?}")))?;
        let (mut length, mut chunked, mut close, mut keep_alive) = (None, false, false, false);
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| invalid(format!("bad Content-Length {value:?}")))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close |= value.eq_ignore_ascii_case("close");
                keep_alive |= value.eq_ignore_ascii_case("keep-alive");
            }
        }
        let framing = if head_only || status < 200 || status == 204 || status == 304 {
            Framing::Empty
        } else if chunked {
            Framing::Chunked
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            Framing::UntilClose
        };
        let closes =
            close || framing == Framing::UntilClose || (version == "HTTP/1.0" && !keep_alive);
        Ok(Head {
            status,
            text,
            framing,
            closes,
        })
    }
}

/// An answer: status, head and body (chunks decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub head: Head,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (any letter case), its value trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.header(name)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The server closes the connection after this answer.
    pub fn closes(&self) -> bool {
        self.head.closes
    }
}

fn header<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

pub(crate) fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One step of a chunked body at the start of `raw`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    /// More bytes are needed.
    Incomplete,
    /// A chunk's data, and how many bytes of `raw` it took.
    Data(std::ops::Range<usize>, usize),
    /// The last chunk (and any trailers), and how many bytes it took.
    Last(usize),
}

/// Decodes the chunk at the start of `raw`, consuming nothing: the caller drains
/// what was used, so a read that stops half-way loses nothing.
pub(crate) fn chunk(raw: &[u8]) -> io::Result<Chunk> {
    let Some(line_end) = find(raw, b"\r\n") else {
        return Ok(Chunk::Incomplete);
    };
    let line = String::from_utf8_lossy(&raw[..line_end]);
    let size_text = line.split(';').next().unwrap_or("").trim();
    let size = usize::from_str_radix(size_text, 16)
        .map_err(|_| invalid(format!("bad chunk size {size_text:?}")))?;
    let start = line_end + 2;
    if size == 0 {
        // Trailers, if any, then the blank line.
        let rest = &raw[start..];
        return Ok(if rest.starts_with(b"\r\n") {
            Chunk::Last(start + 2)
        } else {
            match find(rest, b"\r\n\r\n") {
                Some(i) => Chunk::Last(start + i + 4),
                None => Chunk::Incomplete,
            }
        });
    }
    let end = start + size;
    if raw.len() < end + 2 {
        return Ok(Chunk::Incomplete);
    }
    if &raw[end..end + 2] != b"\r\n" {
        return Err(invalid("a chunk not followed by CRLF"));
    }
    Ok(Chunk::Data(start..end, end + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        Head::parse(text.to_string(), false).unwrap()
    }

    #[test]
    fn framing_follows_the_head() {
        let h = head("HTTP/1.1 200 OK\r\ncontent-length: 12\r\nDate: x");
        assert_eq!(
            (h.status, h.framing, h.closes),
            (200, Framing::Length(12), false)
        );
        assert_eq!(h.header("DATE"), Some("x"));
        let h = head("HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked");
        assert_eq!(h.framing, Framing::Chunked);
        let h = head("HTTP/1.1 200 OK");
        assert_eq!((h.framing, h.closes), (Framing::UntilClose, true));
        let h = head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0");
        assert!(h.closes);
        assert!(head("HTTP/1.0 200 OK\r\nContent-Length: 0").closes);
        assert_eq!(head("HTTP/1.1 204 No Content").framing, Framing::Empty);
        let h = Head::parse("HTTP/1.1 200 OK\r\nContent-Length: 9".into(), true).unwrap();
        assert_eq!(h.framing, Framing::Empty);
        for bad in [
            "SSH-2.0 x",
            "HTTP/1.1 abc",
            "HTTP/1.1 200 OK\r\nContent-Length: -1",
        ] {
            assert!(Head::parse(bad.into(), false).is_err(), "{bad}");
        }
    }

    #[test]
    fn chunks_decode_only_when_complete() {
        let raw = b"3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(chunk(&raw[..6]).unwrap(), Chunk::Incomplete);
        assert_eq!(chunk(raw).unwrap(), Chunk::Data(3..6, 8));
        assert_eq!(chunk(&raw[8..]).unwrap(), Chunk::Last(5));
        assert_eq!(chunk(b"0\r\n").unwrap(), Chunk::Incomplete);
        assert_eq!(
            chunk(b"0\r\nX-Trailer: 1\r\n\r\nnext").unwrap(),
            Chunk::Last(19)
        );
        assert_eq!(
            chunk(b"a;ext=1\r\n0123456789\r\n").unwrap(),
            Chunk::Data(9..19, 21)
        );
        assert!(chunk(b"zz\r\n").is_err());
        assert!(chunk(b"1\r\nab\r\n").is_err());
    }
}
