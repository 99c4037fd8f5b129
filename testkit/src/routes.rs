//! The daemon's routes as its router's source declares them, so tests that must
//! cover every route (the API table of daemon/README.md, the Host guard) cannot miss
//! one added later.

use std::collections::BTreeSet;

use lavender_api::Route;

/// `GET /status`, … as the router's source (`daemon/src/server/mod.rs`, included by
/// the test) declares them: `.answer(Route::Status, …)`, a route of the API's table
/// on its method, or `.route("/p", get(…).post(…))`.
pub fn router_routes(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for piece in source.split(".answer(Route::").skip(1) {
        let name: String = piece
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let route = Route::ALL
            .into_iter()
            .find(|r| format!("{r:?}") == name)
            .unwrap_or_else(|| panic!("Route::{name} is no route of lavender_api::Route"));
        out.insert(route.to_string());
    }
    for piece in source.split(".route(\"").skip(1) {
        let (path, rest) = piece.split_once('"').unwrap();
        // The handler expression: up to the parenthesis closing `.route(`.
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map(|(i, _)| i)
            .unwrap();
        let handler = &rest[..end];
        let mut found = false;
        for method in ["get", "post", "put", "patch", "delete"] {
            let call = format!("{method}(");
            let mut at = 0;
            while let Some(i) = handler[at..].find(&call) {
                let before = handler[..at + i].chars().last();
                if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':')) {
                    out.insert(format!("{} {path}", method.to_uppercase()));
                    found = true;
                }
                at += i + call.len();
            }
        }
        assert!(found, "no method found for route {path}: {handler}");
    }
    assert!(
        out.len() >= 10,
        "the router's routes were not found in its source: {out:?}"
    );
    out
}
