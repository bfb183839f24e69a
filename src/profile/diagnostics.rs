//! Where a profile error is and how it reads: file, line, column and field like a compiler,
//! the nearest valid key suggested for an unknown one, values shortened and escaped.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::input::{self, shown};

/// A profile error with its place in the file, printed like a compiler diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ProfileError {
    pub file: PathBuf,
    /// 1-based line and column, when the place is known.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `workers.count`.
    pub field: String,
    pub message: String,
    /// Boxed: keeps the error (and every `Result` carrying it) small.
    pub help: Option<Box<str>>,
}

/// Longest message shown for a profile error: serde quotes whole values in its messages.
const MESSAGE_MAX: usize = 240;

impl ProfileError {
    /// Builds an error whose field and message are safe to print: control characters
    /// escaped, a huge key or value cut short.
    pub(super) fn new(
        file: &Path,
        (line, column): (Option<usize>, Option<usize>),
        field: &str,
        message: &str,
        help: Option<String>,
    ) -> ProfileError {
        ProfileError {
            file: file.to_path_buf(),
            line,
            column,
            field: shown(field),
            message: input::shown_message(message, MESSAGE_MAX),
            help: help.map(|h| input::shown_message(&h, MESSAGE_MAX).into()),
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The path comes from the command line: it may hold anything a terminal would act on.
        let file = self.file.to_string_lossy();
        write!(f, "{}", input::shown_message(&file, MESSAGE_MAX))?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)?;
        } else {
            write!(f, ": `{}`: {}", self.field, self.message)?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

pub(super) fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ProfileError {
    let place = match e.span() {
        Some(span) => {
            let (l, c) = line_col(text, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    let message = e.message().trim().to_string();
    let field = match (e.span(), missing_field(&message)) {
        // serde reports a missing key at the table that lacks it (the whole file for a
        // top-level one): name the missing key, not the first key written there.
        (Some(span), Some(missing)) => match table_header_at(text, span.start) {
            Some(table) => format!("{table}.{missing}"),
            None => missing.to_string(),
        },
        (None, Some(missing)) => missing.to_string(),
        (Some(span), None) => field_at(text, span.start),
        (None, None) => String::new(),
    };
    let mut help = unknown_field_help(&message);
    if help.is_none() && field == "name" && message.contains("cannot be a cluster name") {
        help = Some(input::CLUSTER_NAME_RULE.to_string());
    }
    ProfileError::new(path, place, &field, &message, help)
}

/// `x` in serde's "missing field `x`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

/// The `[table]` whose header is written on the line holding `offset`, if that line is one.
fn table_header_at(text: &str, offset: usize) -> Option<String> {
    let (line_no, _) = line_col(text, offset);
    let line = text.lines().nth(line_no - 1)?;
    table_header(line.trim())
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" suggests the nearest valid key.
fn unknown_field_help(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let candidates: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    let nearest = nearest(unknown, &candidates);
    match nearest {
        Some(best) => Some(format!("did you mean `{best}`?")),
        None if !candidates.is_empty() => {
            Some(format!("valid keys here: {}", candidates.join(", ")))
        }
        None => None,
    }
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    // Edit distance costs length × length: a huge word is no typo, and must not take seconds.
    if word.len() > 128 {
        return None;
    }
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key path at a byte offset: the enclosing `[table]` plus the key on that line.
fn field_at(text: &str, offset: usize) -> String {
    let (line_no, _) = line_col(text, offset);
    let mut table = String::new();
    let mut key = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if i + 1 > line_no {
            break;
        }
        if let Some(header) = table_header(trimmed) {
            table = header;
            key.clear();
        } else if i + 1 == line_no {
            if let Some((k, _)) = trimmed.split_once('=') {
                key = k.trim().trim_matches('"').to_string();
            }
        }
    }
    match (table.is_empty(), key.is_empty()) {
        (true, _) => key,
        (false, true) => table,
        (false, false) => format!("{table}.{key}"),
    }
}

fn table_header(trimmed: &str) -> Option<String> {
    let inner = trimmed.strip_prefix('[')?.split(']').next()?;
    Some(inner.trim_matches('[').trim().to_string())
}

/// Finds the line and column where a dotted field (`workers.count`) is written.
pub(super) fn locate_field(text: &str, field: &str) -> (Option<usize>, Option<usize>) {
    let (table, key) = match field.rsplit_once('.') {
        Some((t, k)) => (t, k),
        None => ("", field),
    };
    let mut current = String::new();
    let mut table_line = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(header) = table_header(trimmed) {
            current = header;
            if current == field {
                table_line = Some((i + 1, line.len() - trimmed.len() + 1));
            }
            continue;
        }
        if current != table {
            continue;
        }
        if let Some((k, _)) = trimmed.split_once('=') {
            if k.trim().trim_matches('"') == key {
                return (Some(i + 1), Some(line.len() - trimmed.len() + 1));
            }
        }
    }
    match table_line {
        Some((l, c)) => (Some(l), Some(c)),
        None => (None, None),
    }
}
