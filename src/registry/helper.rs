//! Docker's credential helpers, run the way `docker pull` runs them: the program
//! `docker-credential-<name>` from PATH with the argument `get`, the registry's server URL on
//! its stdin, and `{"ServerURL": .., "Username": .., "Secret": ..}` on its stdout. A
//! `Username` of `<token>` makes the secret an identity token (as Docker reads it). The
//! secret is read from the helper's stdout into memory only: never an argument, a file or a
//! line of output.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::input::shown;

/// What a helper says when it keeps nothing for the registry: Docker then pulls anonymously.
const NOT_FOUND: &str = "credentials not found in native keychain";

/// How long a helper may take (a desktop keychain may ask the user to unlock it).
const HELPER_TIMEOUT: Duration = Duration::from_secs(120);

/// The largest answer read from a helper.
const ANSWER_MAX: u64 = 64 * 1024;

/// What a helper answered for a registry.
#[derive(PartialEq, Eq)]
pub struct Answer {
    pub user: String,
    pub secret: String,
    /// `Username: <token>`: the secret is an identity token, not a password.
    pub identity_token: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Answer {{ user: {:?}, secret: <redacted>, identity_token: {} }}",
            self.user, self.identity_token
        )
    }
}

/// A helper's name, as it ends the program's name: 1-64 letters, digits, `.`, `_` and `-`,
/// starting with a letter or digit (so never a path, an option or shell text).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{}` cannot name a credential helper (1-64 letters, digits, `.`, `_` and `-`)",
            shown(name)
        ))
    }
}

/// The server URL Docker gives a helper for a registry: Docker Hub's index URL, else the
/// registry's host[:port] as the image reference names it.
pub fn server_url(registry: &str) -> String {
    if registry == super::DOCKER_HUB {
        "https://index.docker.io/v1/".to_string()
    } else {
        registry.to_string()
    }
}

/// A helper's stdout after `get`; `Ok(None)` when it keeps nothing for the registry.
pub fn parse_answer(stdout: &str) -> Result<Option<Answer>, String> {
    if stdout.trim() == NOT_FOUND {
        return Ok(None);
    }
    let value: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|_| "answered something that is not the helper protocol's JSON".to_string())?;
    let field = |name: &str| value.get(name).and_then(|v| v.as_str());
    let (Some(user), Some(secret)) = (field("Username"), field("Secret")) else {
        return Err("answered JSON without a Username and a Secret".to_string());
    };
    if secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(Answer {
        user: user.to_string(),
        secret: secret.to_string(),
        identity_token: user == "<token>",
    }))
}

/// Runs `docker-credential-<name> get` for `registry`. `Ok(None)`: the helper keeps nothing
/// for it. Every failure is one line naming the helper, without anything it answered.
pub fn get(name: &str, registry: &str) -> Result<Option<Answer>, String> {
    check_name(name)?;
    let program = format!("docker-credential-{name}");
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // what a helper says on stderr is never shown (it may hold anything)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("the credential helper `{program}` is not on PATH")
            }
            _ => format!("cannot run the credential helper `{program}`: {e}"),
        })?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("cannot talk to the credential helper `{program}`"));
    };
    let _ = stdin.write_all(format!("{}\n", server_url(registry)).as_bytes());
    drop(stdin);
    // Its answer is read on another thread and the helper waited for here, up to a deadline:
    // a helper that hangs (a keychain waiting for its user) is killed, not `up` hung.
    let deadline = Instant::now() + HELPER_TIMEOUT;
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.take(ANSWER_MAX).read_to_string(&mut out);
        let _ = done.send(out);
    });
    let answered = finished
        .recv_timeout(HELPER_TIMEOUT)
        .ok()
        .and_then(|out| loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some((Ok(status), out)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => break None,
                Err(e) => break Some((Err(e), out)),
            }
        });
    let Some((status, out)) = answered else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "the credential helper `{program}` did not answer within {} s",
            HELPER_TIMEOUT.as_secs()
        ));
    };
    let status = status.map_err(|e| format!("the credential helper `{program}`: {e}"))?;
    if !status.success() {
        // Docker's own answer for "nothing kept for this registry": pull anonymously.
        if out.trim() == NOT_FOUND {
            return Ok(None);
        }
        // Its message is not shown: a broken helper may print anything, secrets included.
        return Err(format!(
            "the credential helper `{program}` failed ({status}) for {}",
            shown(registry)
        ));
    }
    parse_answer(&out).map_err(|why| format!("the credential helper `{program}` {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_names_are_program_name_endings_only() {
        for good in [
            "desktop",
            "osxkeychain",
            "ecr-login",
            "pass",
            "gcloud",
            "acr-env",
            "x.1_y",
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "../bin/sh",
            "-v",
            "a b",
            "a;rm",
            "a/b",
            ".hidden",
            &"x".repeat(65),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains("cannot name a credential helper"), "{e}");
        }
        assert!(!check_name("a\u{1b}[31m").unwrap_err().contains('\u{1b}'));
    }

    #[test]
    fn the_server_url_is_what_docker_gives_a_helper() {
        assert_eq!(server_url("docker.io"), "https://index.docker.io/v1/");
        assert_eq!(server_url("reg.example:5443"), "reg.example:5443");
    }

    #[test]
    fn answers_are_read_as_docker_reads_them() {
        let a = parse_answer(r#"{"ServerURL":"r","Username":"alice","Secret":"s3cret"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.user.as_str(), a.secret.as_str(), a.identity_token),
            ("alice", "s3cret", false)
        );
        let t = parse_answer(r#"{"ServerURL":"r","Username":"<token>","Secret":"eyJ.tok"}"#)
            .unwrap()
            .unwrap();
        assert!(t.identity_token);
        assert_eq!(
            parse_answer("credentials not found in native keychain\n"),
            Ok(None)
        );
        assert_eq!(parse_answer(r#"{"Username":"u","Secret":""}"#), Ok(None));
        let e = parse_answer("password=hunter2").unwrap_err();
        assert!(
            !e.contains("hunter2") && e.contains("not the helper protocol"),
            "{e}"
        );
        assert!(parse_answer(r#"{"Username":"u"}"#)
            .unwrap_err()
            .contains("Secret"));
        assert!(!format!("{t:?}").contains("eyJ"));
    }
}
