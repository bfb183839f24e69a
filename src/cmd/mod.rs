//! The commands, one file each (as tokio's mini-redis keeps `src/cmd/`): each reads top to
//! bottom as the flow profile → plan → apply → bootstrap → report, and prints what the work
//! returned through [`output`] (for people and as JSON). What several commands share lives
//! below them: [`crate::converge`] (the `up` that `scale` and `heal` run too),
//! [`crate::cluster`] (an opened cluster: its nodes, ssh_config and sessions),
//! [`crate::context`] and [`crate::error`]. [`crate::args`] parses the command line and
//! calls the command's function here.

pub mod bake;
pub mod bench;
pub mod check;
pub mod completions;
pub mod down;
pub mod heal;
pub mod jobs;
pub mod jupyter;
pub mod output;
pub mod plan;
pub mod pull;
pub mod push;
pub mod run;
pub mod scale;
pub mod schema;
pub mod ssh;
pub mod ssh_config;
pub mod stage;
pub mod start;
pub mod status;
pub mod stop;
pub mod tensorboard;
pub mod top;
pub mod up;
pub mod validate;

use std::io::{BufRead, IsTerminal};
use std::path::Path;

use crate::error::Error;
use crate::input;

/// `plan` exit code when changes are pending (like `terraform plan -detailed-exitcode`).
pub const PLAN_HAS_CHANGES: u8 = 10;

/// A path from the command line, as it may appear in a message (shortened, escaped).
pub(crate) fn shown_path(path: &Path) -> String {
    input::shown(&path.to_string_lossy())
}

/// What a question before a deletion came to.
pub(crate) enum Answer {
    Yes,
    /// No terminal to ask on, and no `--yes`.
    NoTerminal,
    /// Anything but `y`/`yes`, as typed (shortened, escaped).
    No(String),
}

/// `--yes`, or a `y` typed on the terminal after `question`.
pub(crate) fn ask(question: &str, yes: bool, what: &str) -> Result<Answer, Error> {
    if yes {
        return Ok(Answer::Yes);
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Ok(Answer::NoTerminal);
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::Runtime(format!("{what}: reading the answer: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(Answer::Yes)
    } else {
        Ok(Answer::No(input::shown(answer.trim())))
    }
}
