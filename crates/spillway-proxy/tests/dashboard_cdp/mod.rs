//! A minimal Chrome DevTools Protocol driver for the dashboard's browser test: launch Debian's
//! `chromium` headless, attach to one page, evaluate JavaScript, take PNG screenshots.
//!
//! Why our own ~200 lines and not a CDP crate: the test needs five commands
//! (`Target.createTarget`, `Target.attachToTarget`, `Runtime.evaluate`,
//! `Emulation.setDeviceMetricsOverride`, `Page.captureScreenshot`), and the crates that wrap
//! the whole protocol (`headless_chrome`, `chromiumoxide`) pull in a large tree and, in some
//! configurations, download a browser. `tungstenite` (sync WebSocket) and `serde_json` are all
//! this needs. Protocol reference: <https://chromedevtools.github.io/devtools-protocol/>.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

/// Where Debian installs it (`apt-get install -y chromium`).
pub const CHROMIUM_PATHS: [&str; 3] = [
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
];

/// A headless browser with one page attached.
pub struct Browser {
    child: Child,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    session: String,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.ws.close(None);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The browser binary, if one is installed.
pub fn find_chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SPILLWAY_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    CHROMIUM_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn fresh_profile() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("spillway-chromium-{}-{nanos}", std::process::id()))
}

impl Browser {
    /// Launches `chromium` headless with a fresh profile and no background traffic, and attaches
    /// to a new `width`×`height` page.
    pub fn launch(chromium: &Path, width: u32, height: u32) -> Result<Browser, String> {
        let profile = fresh_profile();
        std::fs::create_dir_all(&profile).map_err(|e| format!("profile dir: {e}"))?;
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-default-apps",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.display()),
                "about:blank",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromium.display()))?;
        // Chromium writes "<port>\n<browser ws path>" here once it listens.
        let port_file = profile.join("DevToolsActivePort");
        let until = Instant::now() + Duration::from_secs(30);
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(p), Some(path)) = (lines.next(), lines.next()) {
                    if let Ok(p) = p.trim().parse::<u16>() {
                        break (p, path.trim().to_string());
                    }
                }
            }
            if Instant::now() > until {
                return Err("chromium did not open its DevTools port within 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| format!("connect to DevTools: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tungstenite::client(url.as_str(), stream)
            .map_err(|e| format!("DevTools handshake: {e}"))?;
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = b.call("Target.createTarget", json!({ "url": "about:blank" }))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or("no targetId")?
            .to_string();
        let attached = b.call(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        )?;
        b.session = attached["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_string();
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )?;
        Ok(b)
    }

    /// Sends one command (to the attached page once there is one) and waits for its answer,
    /// skipping events.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            msg["sessionId"] = Value::String(self.session.clone());
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .map_err(|e| format!("{method}: send: {e}"))?;
        loop {
            let m = self.ws.read().map_err(|e| format!("{method}: read: {e}"))?;
            let Message::Text(t) = m else { continue };
            let v: Value =
                serde_json::from_str(t.as_str()).map_err(|e| format!("{method}: bad JSON: {e}"))?;
            if v["id"].as_u64() != Some(id) {
                continue; // an event, or another session's message
            }
            if let Some(e) = v.get("error") {
                return Err(format!("{method}: {e}"));
            }
            return Ok(v["result"].clone());
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(format!("{expr}: {ex}"));
        }
        Ok(r["result"]["value"].clone())
    }

    /// Navigates to `url` and waits (at most 20 s) until the document has loaded.
    pub fn goto(&mut self, url: &str) -> Result<(), String> {
        self.eval(&format!("location.href = {}; true", json!(url)))?;
        std::thread::sleep(Duration::from_millis(100));
        self.wait_for(
            &format!(
                "location.href === {} && document.readyState === 'complete'",
                json!(url)
            ),
            Duration::from_secs(20),
        )
        .map(|_| ())
    }

    /// Polls `expr` every 100 ms until it is truthy (returns its value) or `timeout` passes.
    pub fn wait_for(&mut self, expr: &str, timeout: Duration) -> Result<Value, String> {
        let until = Instant::now() + timeout;
        let mut last = Value::Null;
        loop {
            // Navigation can destroy the context mid-call: treat that as "not yet".
            if let Ok(v) = self.eval(expr) {
                let truthy = match &v {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    Value::Number(n) => n.as_f64() != Some(0.0),
                    Value::String(s) => !s.is_empty(),
                    _ => true,
                };
                if truthy {
                    return Ok(v);
                }
                last = v;
            }
            if Instant::now() > until {
                return Err(format!(
                    "timed out after {timeout:?} waiting for `{expr}` (last value {last})"
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Writes a PNG of the page's viewport to `path`.
    pub fn screenshot(&mut self, path: &Path) -> Result<(), String> {
        // Let the page paint what its DOM holds now: headless Chromium captures the last
        // composited frame, which can predate a change made a moment ago.
        self.eval(
            "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))",
        )?;
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }))?;
        let data = r["data"].as_str().ok_or("no screenshot data")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("screenshot base64: {e}"))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(path, png).map_err(|e| format!("{}: {e}", path.display()))
    }
}
