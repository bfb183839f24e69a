//! What a benchmark job printed, kept as it streams in: every marked line (results,
//! allreduce timings), the last lines of the rest for a failure's message, and the exit code
//! the remote shell appends (`HVD_EXIT=N`).

use std::collections::VecDeque;

use crate::input;

/// What a job printed: every marked line, and the last lines of the rest (a job's noise is
/// not kept without bound).
#[derive(Default)]
pub struct JobOutput {
    marked: Vec<String>,
    recent: VecDeque<String>,
    exit: Option<String>,
}

impl JobOutput {
    pub fn push(&mut self, line: String) {
        if let Some(code) = line.strip_prefix("HVD_EXIT=") {
            self.exit = Some(code.trim().to_string());
            return;
        }
        let marked = ["HVD_BENCH_RANK", "HVD_BW"]
            .iter()
            .any(|m| line.contains(m));
        if marked && self.marked.len() < 100_000 {
            self.marked.push(line.clone());
        }
        if !line.trim().is_empty() {
            self.recent.push_back(line);
            if self.recent.len() > 200 {
                self.recent.pop_front();
            }
        }
    }
    pub fn exited_zero(&self) -> bool {
        self.exit.as_deref() == Some("0")
    }
    pub fn text(&self) -> String {
        self.marked.join("\n")
    }
    pub fn tail(&self, n: usize) -> String {
        let lines: Vec<String> = self
            .recent
            .iter()
            .skip(self.recent.len().saturating_sub(n))
            .map(|l| input::shown_message(l, 300))
            .collect();
        let exit = self.exit.as_deref().unwrap_or("none: the connection ended");
        format!("{}\n(exit status {})", lines.join("\n"), input::shown(exit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_results_and_a_bounded_tail() {
        let mut o = JobOutput::default();
        o.push("[0]<stdout>:HVD_BENCH_RANK rank=0".into());
        for i in 0..1000 {
            o.push(format!("noise {i}"));
        }
        o.push("[0]<stdout>:HVD_BW size_mib=1".into());
        o.push(String::new());
        assert!(!o.exited_zero());
        o.push("HVD_EXIT=0".into());
        assert!(o.exited_zero());
        assert_eq!(
            o.text(),
            "[0]<stdout>:HVD_BENCH_RANK rank=0\n[0]<stdout>:HVD_BW size_mib=1"
        );
        assert_eq!(o.recent.len(), 200);
        let tail = o.tail(2);
        assert_eq!(
            tail,
            "noise 999\n[0]<stdout>:HVD_BW size_mib=1\n(exit status 0)"
        );
    }

    #[test]
    fn a_failure_tail_is_escaped_and_says_when_no_exit_came() {
        let mut o = JobOutput::default();
        o.push("ImportError: \u{1b}[31mno module".into());
        o.push("HVD_EXIT=1".into());
        assert!(!o.exited_zero());
        assert!(o.tail(5).contains("\\u{1b}[31m"), "{}", o.tail(5));
        let cut = JobOutput::default();
        assert!(cut
            .tail(5)
            .ends_with("(exit status none: the connection ended)"));
    }
}
