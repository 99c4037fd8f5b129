//! What the channels share: one HTTP delivery attempt and how an answer counts
//! (success, retry, give up).

use reqwest::{RequestBuilder, StatusCode};

/// Why one attempt failed, and whether another attempt could succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DeliveryError {
    pub message: String,
    pub retryable: bool,
}

impl DeliveryError {
    pub fn retry(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            retryable: true,
        }
    }

    pub fn fatal(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            retryable: false,
        }
    }
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// An error and its causes on one line (`error sending request …: Connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

/// Sends the request; `Ok` is the status and the body text, whatever the status.
pub(super) async fn send(req: RequestBuilder) -> Result<(StatusCode, String), DeliveryError> {
    let response = req
        .send()
        .await
        .map_err(|e| DeliveryError::retry(chain(&e)))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| DeliveryError::retry(format!("reading the answer: {}", chain(&e))))?;
    Ok((status, body))
}

/// Shortened for log lines.
pub(super) fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// 2xx is success; 408, 429 and 5xx may pass on a retry; any other answer will not.
pub(super) fn judge(status: StatusCode, body: &str) -> Result<String, DeliveryError> {
    let answer = format!("{} {}", status.as_u16(), clip(body, 300));
    if status.is_success() {
        Ok(answer.trim_end().to_string())
    } else if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        Err(DeliveryError::retry(format!("server answered {answer}")))
    } else {
        Err(DeliveryError::fatal(format!("server answered {answer}")))
    }
}
