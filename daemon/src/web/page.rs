//! The dashboard: one self-contained HTML file (inline CSS, JS and SVG charts; no
//! CDN, no web fonts), so it works on a machine with no network.

pub const HTML: &str = include_str!("dashboard.html");

/// Scripts and styles are inline; everything else may come from this daemon only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[cfg(test)]
mod tests {
    use super::HTML;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // The SVG namespace is a name, not a fetch.
        let html = HTML.replace("http://www.w3.org/2000/svg", "");
        for needle in ["http://", "https://", "//cdn", "@import", "<link", "src="] {
            assert!(
                !html.contains(needle),
                "the dashboard references {needle:?}"
            );
        }
    }
}
