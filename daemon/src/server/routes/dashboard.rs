use axum::http::header;
use axum::response::IntoResponse;

use crate::web::page;

/// `GET /`: the dashboard page.
pub async fn get() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                page::CONTENT_SECURITY_POLICY,
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        page::html(),
    )
}
