//! What the user sees while something slow runs: indicatif bars on a terminal, plain
//! timestamped lines otherwise (CI logs, pipes), nothing with `--quiet`.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Clone)]
pub struct Progress {
    multi: MultiProgress,
    tty: bool,
    quiet: bool,
    start: Instant,
}

impl Progress {
    /// Progress on stderr; `quiet` silences everything but errors (for `--json`).
    pub fn new(quiet: bool) -> Progress {
        let tty = std::io::stderr().is_terminal() && !quiet;
        let target = if tty {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Progress {
            multi: MultiProgress::with_draw_target(target),
            tty,
            quiet,
            start: Instant::now(),
        }
    }

    /// A permanent line above the bars.
    pub fn line(&self, msg: impl AsRef<str>) {
        if self.quiet {
            return;
        }
        if self.tty {
            let _ = self.multi.println(msg.as_ref());
        } else {
            let t = self.start.elapsed().as_secs_f64();
            eprintln!("[{t:7.1}s] {}", msg.as_ref());
        }
    }

    /// A bar counting `total` things to wait for; its message says what is awaited.
    pub fn bar(&self, what: &str, total: u64) -> ProgressBar {
        self.bar_of(
            "{spinner} {prefix} [{bar:20}] {pos}/{len} {elapsed} {wide_msg}",
            what,
            total,
        )
    }

    /// A bar counting `total` bytes (with the rate); its message says what else is counted.
    pub fn bytes_bar(&self, what: &str, total: u64) -> ProgressBar {
        self.bar_of(
            "{spinner} {prefix} [{bar:20}] {bytes}/{total_bytes} {binary_bytes_per_sec} {elapsed} {wide_msg}",
            what,
            total,
        )
    }

    fn bar_of(&self, template: &str, what: &str, total: u64) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new(total));
        bar.set_style(
            ProgressStyle::with_template(template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }

    /// A spinner for one step of unknown length.
    pub fn spinner(&self, what: &str) -> ProgressBar {
        let bar = self.multi.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix} {elapsed} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(what.to_string());
        bar.enable_steady_tick(Duration::from_millis(200));
        bar
    }

    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// Whether bars are drawn (a terminal, not quiet); otherwise only lines are shown.
    pub fn is_terminal(&self) -> bool {
        self.tty
    }
}
