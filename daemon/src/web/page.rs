//! The dashboard: one self-contained HTML file (inline CSS, JS and SVG charts; no
//! CDN, no web fonts), so it works on a machine with no network.

use std::sync::OnceLock;

use lavender_api::Route;

/// The page as written: its `ROUTES` object is empty until [`html`] fills it in.
const TEMPLATE: &str = include_str!("dashboard.html");
const ROUTES_SLOT: &str = "/*ROUTES*/{}";

/// The page as served: its script names each route it uses by the route table's
/// name (`ROUTES.Events`), so no path is written twice.
pub fn html() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        let routes: serde_json::Map<String, serde_json::Value> = Route::ALL
            .iter()
            .map(|r| (format!("{r:?}"), r.path().into()))
            .collect();
        TEMPLATE.replacen(
            ROUTES_SLOT,
            &serde_json::Value::Object(routes).to_string(),
            1,
        )
    })
}

/// Scripts and styles are inline; everything else may come from this daemon only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // The SVG namespace is a name, not a fetch.
        let html = html().replace("http://www.w3.org/2000/svg", "");
        for needle in ["http://", "https://", "//cdn", "@import", "<link", "src="] {
            assert!(
                !html.contains(needle),
                "the dashboard references {needle:?}"
            );
        }
    }

    #[test]
    fn the_page_takes_its_routes_from_the_route_table() {
        for route in Route::ALL.into_iter().filter(|r| *r != Route::Dashboard) {
            let written = format!("\"{}", route.path());
            assert!(
                !TEMPLATE.contains(&written),
                "dashboard.html writes {route}'s path itself: use ROUTES.{route:?}"
            );
        }
        assert_eq!(TEMPLATE.matches(ROUTES_SLOT).count(), 1);
        let served = html();
        assert!(!served.contains(ROUTES_SLOT));
        for used in [
            "ROUTES.Checkpoints",
            "ROUTES.History",
            "ROUTES.Events",
            "ROUTES.Stop",
        ] {
            assert!(served.contains(used), "{used}");
        }
        assert!(served.contains(r#""History":"/runs/{id}/history""#));
    }
}
