//! The tracked tree says what and why, never which ticket or round asked for it: a comment,
//! a doc, a test's message or a script that cites an issue, a stop or a run by its number
//! means nothing to a reader outside the project's tracker, and the history it points to lives
//! in git and the CHANGELOG. This is the linter that keeps it so: every file git tracks (but
//! the lock file and this one) is read as text, and each line naming "issue", "stop", "run" or
//! "round" (or their plurals) followed by a number fails the test with its place. A number
//! that is a measurement (a duration after "stop", a share after "run") or a command's
//! argument in code (a shell function named `stop` called with its status) is not a ticket: the first kind is told by its unit, the
//! second is listed below with its reason.

use std::path::Path;
use std::process::Command;

/// Lines whose words only look like a ticket: (file, a piece of the line, why it stays).
const NOT_TICKETS: &[(&str, &str, &str)] = &[
    (
        "templates/images/node/entrypoint.sh",
        concat!("stop", " 1"),
        "a call of the script's own `stop` function with its exit status",
    ),
    (
        "tests/autostop_agent.rs",
        concat!("job_runner.sh run", " 7"),
        "the job runner's `run` command with a job number",
    ),
    (
        "templates/images/horovod/horovod-project.cmake",
        concat!("suite-time.md, stop", " 72"),
        "the file's text is an input of every Horovod image's hash: it is reworded with the \
         recipe's next real change, so that no image is rebuilt for a comment",
    ),
];

/// Files never read: the lock file (package names and versions) and this linter (its own
/// examples).
const SKIPPED: &[&str] = &["Cargo.lock", "tests/no_ticket_numbers.rs"];

const WORDS: &[&str] = &[
    "issues", "issue", "stops", "stop", "runs", "run", "rounds", "round",
];

/// What may follow a number that is a measurement, not a ticket.
const UNITS: &[&str] = &[
    "s", "ms", "min", "x", "%", "cpu", "kb", "mb", "gb", "byte", "bytes", "second", "seconds",
    "minute", "minutes",
];

/// Whether `rest` (what follows the number) makes it a measurement or a shell redirection.
fn is_measure(rest: &str) -> bool {
    let mut chars = rest.chars();
    match chars.next() {
        Some('.') => return chars.next().is_some_and(|c| c.is_ascii_digit()),
        Some('>') => return true,
        _ => {}
    }
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    UNITS.iter().any(|unit| {
        rest.get(..unit.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(unit))
            && !rest[unit.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The ticket-like phrases of one line: a word of [`WORDS`], one space, an optional `#`, a number.
fn ticket_phrases(line: &str) -> Vec<String> {
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut found = Vec::new();
    for (start, _) in lower.char_indices() {
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let Some(word) = WORDS.iter().find(|w| lower[start..].starts_with(*w)) else {
            continue;
        };
        let after_word = &lower[start + word.len()..];
        let Some(after_space) = after_word.strip_prefix(' ') else {
            continue;
        };
        let number = after_space.strip_prefix('#').unwrap_or(after_space);
        let digits = number.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || is_measure(&number[digits..]) {
            continue;
        }
        let end = lower.len() - number.len() + digits;
        found.push(line[start..end].to_string());
    }
    found
}

fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("git runs (the linter reads the files git tracks)");
    assert!(
        out.status.success(),
        "git ls-files in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn no_ticket_or_round_numbers_in_the_tracked_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = tracked_files(root);
    assert!(
        files.len() > 100,
        "git lists the tree: {} files",
        files.len()
    );
    let mut hits = Vec::new();
    for file in &files {
        if SKIPPED.contains(&file.as_str()) {
            continue;
        }
        // binary and non-UTF-8 files hold no prose; a file listed but gone is git's business
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            let phrases = ticket_phrases(line);
            if phrases.is_empty()
                || NOT_TICKETS
                    .iter()
                    .any(|(f, piece, _)| f == file && line.contains(piece))
            {
                continue;
            }
            hits.push(format!("{file}:{}: {}", n + 1, phrases.join(", ")));
        }
    }
    assert!(
        hits.is_empty(),
        "{} line(s) name a ticket or a round by its number; say what and why instead (the \
         history is in git and CHANGELOG.md):\n{}",
        hits.len(),
        hits.join("\n")
    );
}

/// The allow-list still names lines that exist: a stale entry would hide nothing and mislead.
#[test]
fn every_listed_exception_is_still_there() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, piece, why) in NOT_TICKETS {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(
            text.lines()
                .any(|l| l.contains(piece) && !ticket_phrases(l).is_empty()),
            "{file} no longer has `{piece}` ({why}): drop it from NOT_TICKETS"
        );
    }
}

#[test]
fn the_matcher_tells_tickets_from_measurements() {
    // the examples hold a `·` between word and number, taken out here: this file's own text
    // names no ticket
    let ticket = |s: &str| ticket_phrases(&s.replace('·', ""));
    let want = |v: &[&str]| v.iter().map(|s| s.replace('·', "")).collect::<Vec<_>>();
    assert_eq!(ticket("Jobs (issue ·34): every run"), want(&["issue ·34"]));
    assert_eq!(
        ticket("since Stop ·61, and runs ·30 and 31"),
        want(&["Stop ·61", "runs ·30"])
    );
    assert_eq!(ticket("round ·#3 of the review"), want(&["round ·#3"]));
    assert_eq!(ticket("// see Issues ·50 and 51."), want(&["Issues ·50"]));
    // measurements, words inside other words, words without a number
    assert!(ticket("up 142.9 s, stop ·18.2 s, start 57.3 s").is_empty());
    assert!(ticket("the agent's stop ·117 s, `start` 233 s").is_empty());
    assert!(ticket("a pipe runs ·2.8x faster; a load runs ·3x").is_empty());
    assert!(ticket(".ci/run ·2>&1 | tee ci.log").is_empty());
    assert!(ticket("rerun 5 times; nonstop 3; the run, then 4").is_empty());
    assert!(ticket("the stop of both took 92 s").is_empty());
}
