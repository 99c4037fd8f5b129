//! The floor: a thread per connection, blocking reads and one write per request.

use std::io::{Read, Write};
use std::sync::Arc;

use crate::Listen;

/// Serves `body` as the answer to every request on `listen`, for ever.
pub fn serve(body: &str, listen: Listen) {
    let response: Arc<[u8]> = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
    .into();
    match listen {
        Listen::Tcp(addr) => {
            let l = std::net::TcpListener::bind(&addr).unwrap_or_else(|e| fail(&addr, e));
            println!("{}", l.local_addr().expect("bound address"));
            for conn in l.incoming().flatten() {
                let _ = conn.set_nodelay(true);
                spawn(conn, response.clone());
            }
        }
        Listen::Unix(path) => {
            let _ = std::fs::remove_file(&path);
            let l = std::os::unix::net::UnixListener::bind(&path)
                .unwrap_or_else(|e| fail(&path.display().to_string(), e));
            println!("{}", path.display());
            for conn in l.incoming().flatten() {
                spawn(conn, response.clone());
            }
        }
    }
}

fn fail(addr: &str, e: std::io::Error) -> ! {
    eprintln!("status-reference: cannot bind {addr}: {e}");
    std::process::exit(1);
}

/// Answers each request on `conn` once its header block has arrived (a request
/// without a body, as `GET /status` is), until the peer closes.
fn spawn<S: Read + Write + Send + 'static>(mut conn: S, response: Arc<[u8]>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut have = 0;
        loop {
            let n = match conn.read(&mut buf[have..]) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            have += n;
            // Every complete request in the buffer gets its answer, in order.
            while let Some(end) = find_blank_line(&buf[..have]) {
                if conn.write_all(&response).is_err() {
                    return;
                }
                buf.copy_within(end..have, 0);
                have -= end;
            }
            if have == buf.len() {
                return; // a header block larger than the buffer: not a status request
            }
        }
    });
}

/// The index just past the first `\r\n\r\n` in `b`.
fn find_blank_line(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}
