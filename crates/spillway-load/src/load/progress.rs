//! A terminal progress bar with live counts, hidden when stdout is not a terminal.
//!
//! Why: a run past the knee can look frozen (nothing succeeds for seconds); live counts show it
//! is the target that is stuck, not the tool. Hidden in pipes and CI so logs stay clean.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Live;

/// A running progress display; stop it with [`Progress::finish`].
pub struct Progress {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Shows `label` and the live counts of `live` over a run of `total`, refreshed 5× a second.
    /// Draws nothing when stdout is not a terminal.
    pub fn start(label: &str, live: Arc<Live>, total: Duration) -> Progress {
        let bar = if std::io::stdout().is_terminal() {
            ProgressBar::with_draw_target(
                Some(total.as_secs().max(1)),
                ProgressDrawTarget::stdout(),
            )
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len}s {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_owned());
        let b = bar.clone();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                b.set_position(start.elapsed().as_secs());
                b.set_message(format!(
                    "offered {} sent {} ok {} rejected {} timed-out {} throttled {} errors {} in-flight {}",
                    live.offered.load(Ordering::Relaxed),
                    live.sent.load(Ordering::Relaxed),
                    live.goodput.load(Ordering::Relaxed),
                    live.rejected.load(Ordering::Relaxed),
                    live.timed_out.load(Ordering::Relaxed),
                    live.throttled.load(Ordering::Relaxed),
                    live.errors.load(Ordering::Relaxed),
                    live.in_flight(),
                ));
            }
        });
        Progress {
            bar,
            task: Some(task),
        }
    }

    /// Stops refreshing and clears the bar.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}
