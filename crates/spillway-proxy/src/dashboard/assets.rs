//! The dashboard's files, compiled into the binary.
//!
//! Why embedded: the proxy runs where the incident is, and that machine may have no route to a
//! CDN. Every byte the pages need is here; the pages load nothing from anywhere else (their
//! Content-Security-Policy says so too).

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// URL path under the admin listener.
    pub path: &'static str,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

macro_rules! asset {
    ($path:literal, $file:literal, $ty:expr) => {
        Asset {
            path: $path,
            content_type: $ty,
            body: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/", $file)),
        }
    };
}

/// Every file, by URL path. `/` is the dashboard.
pub const ASSETS: &[Asset] = &[
    asset!("/", "index.html", HTML),
    asset!("/assets/calc.html", "calc.html", HTML),
    asset!("/assets/style.css", "style.css", CSS),
    asset!("/assets/api.js", "api.js", JS),
    asset!("/assets/chart.js", "chart.js", JS),
    asset!("/assets/dashboard.js", "dashboard.js", JS),
    asset!("/assets/calc.js", "calc.js", JS),
    asset!("/assets/format.js", "format.js", JS),
    asset!("/assets/fleet.js", "fleet.js", JS),
];

/// The asset at `path`, if any.
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}
