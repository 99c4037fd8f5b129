//! A request and its rendering.

use std::fmt::Write as _;

use lavender_api::Route;

/// A request to render: method, target path, `Host`, extra headers, body.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    path: String,
    host: String,
    /// Extra header lines, each ending in `\r\n`.
    headers: String,
    body: Vec<u8>,
}

impl Request {
    /// `method path`, naming `localhost` in its `Host`.
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            method: method.to_string(),
            path: path.to_string(),
            host: "localhost".into(),
            headers: String::new(),
            body: Vec::new(),
        }
    }

    /// A route of the API's table (`lavender_api::Route`), on its method.
    pub fn to(route: Route) -> Request {
        Request::new(route.method().as_str(), route.path())
    }

    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    pub fn post(path: &str) -> Request {
        Request::new("POST", path)
    }

    /// The `Host` header's value (the daemon answers loopback names only).
    pub fn host(mut self, host: &str) -> Request {
        self.host = host.to_string();
        self
    }

    /// One more header line (`name: value`).
    pub fn header(mut self, name: &str, value: &str) -> Request {
        let _ = write!(self.headers, "{name}: {value}\r\n");
        self
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> Request {
        self.header("Authorization", &format!("Bearer {token}"))
    }

    /// `Connection: close`: the server closes after answering.
    pub fn close(self) -> Request {
        self.header("Connection", "close")
    }

    /// A JSON body (`Content-Type: application/json`).
    pub fn json(self, body: impl Into<Vec<u8>>) -> Request {
        self.header("Content-Type", "application/json").body(body)
    }

    /// A body as it is (add its `Content-Type` with [`Request::header`]).
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// The bytes to send. `Content-Length` goes with a body, and with any method
    /// but GET and HEAD (a POST without a body says 0).
    pub fn render(&self) -> Rendered {
        let mut text = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n{}",
            self.method, self.path, self.host, self.headers
        );
        let bodiless = matches!(self.method.as_str(), "GET" | "HEAD");
        if !self.body.is_empty() || !bodiless {
            let _ = write!(text, "Content-Length: {}\r\n", self.body.len());
        }
        text.push_str("\r\n");
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(&self.body);
        Rendered {
            bytes,
            head_only: self.method == "HEAD",
        }
    }
}

/// A rendered request: sent as it is, as often as wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    bytes: Vec<u8>,
    /// A HEAD request: its answer has a head and no body, whatever it announces.
    pub(crate) head_only: bool,
}

impl Rendered {
    /// Bytes written by hand (one or several requests, or part of one); their
    /// answers are read as answers to requests other than HEAD.
    pub fn raw(bytes: impl Into<Vec<u8>>) -> Rendered {
        Rendered {
            bytes: bytes.into(),
            head_only: false,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Request) -> String {
        String::from_utf8(r.render().bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_get_has_no_length_and_a_post_always_has_one() {
        assert_eq!(
            text(&Request::get("/status").host("127.0.0.1:7070")),
            "GET /status HTTP/1.1\r\nHost: 127.0.0.1:7070\r\n\r\n"
        );
        assert_eq!(
            text(&Request::post("/pipeline/stop").bearer("t").close()),
            "POST /pipeline/stop HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(
            text(&Request::post("/pipeline/start").json(r#"{"scale":"tiny"}"#)),
            "POST /pipeline/start HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"scale\":\"tiny\"}"
        );
        assert!(Request::new("HEAD", "/").render().head_only);
        assert_eq!(
            text(&Request::to(Route::Stop)),
            text(&Request::post("/pipeline/stop"))
        );
    }
}
