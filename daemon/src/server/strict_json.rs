//! A JSON body extractor whose errors are 400s that say what is wrong (an unknown
//! field is named), instead of axum's 422.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

pub struct StrictJson<T>(pub T);

impl<S, T> FromRequest<S> for StrictJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            ApiError::new(e.status(), format!("could not read the request body: {e}"))
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return serde_json::from_slice(b"{}").map(StrictJson).map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("invalid request body: {e}"),
                )
            });
        }
        serde_json::from_slice(&bytes).map(StrictJson).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {e}"),
            )
        })
    }
}
