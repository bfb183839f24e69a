//! `completions SHELL` and `man`: what a shell and `man` need, generated from the command
//! line's own definition (passed in by [`crate::args`], so that this file never drifts from
//! it and never imports it), printed on stdout for the user to put where their shell or
//! `man` looks.

use clap_complete::Shell;

use crate::cmd::output::print_whole;
use crate::error::Error;

/// The completion script of `shell` for `command` (the whole `hvd-cluster` command line).
pub fn completions(shell: Shell, mut command: clap::Command) -> Result<u8, Error> {
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name.clone(), &mut script);
    if shell == Shell::Bash {
        script = bash_arms_as_the_loop_spells_them(&script, &name);
    }
    print_whole(&script)
}

/// clap_complete's bash script (4.6) spells the state of a command under a hyphenated
/// program name two ways: its loop arrives at `hvd__cluster__subcmd__down`, its case arms
/// wait for `hvd__subcmd__cluster__subcmd__down`, so no option after a command ever
/// completed (clap-rs/clap#6421, open). The arms are respelled as the loop spells them.
fn bash_arms_as_the_loop_spells_them(script: &[u8], name: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(script);
    let arms = name.replace('-', "__subcmd__");
    let loop_spelling = name.replace('-', "__");
    if arms == loop_spelling {
        return script.to_vec();
    }
    text.replace(&arms, &loop_spelling).into_bytes()
}

/// The man page (roff) of `command`: its about text, every option and the subcommands.
pub fn man_page(command: clap::Command) -> Result<u8, Error> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(|e| Error::Runtime(format!("cannot render the man page: {e}")))?;
    print_whole(&page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("hvd-cluster")
            .about("one profile in, a cluster out")
            .subcommand(clap::Command::new("up").arg(clap::Arg::new("file")))
            .subcommand(clap::Command::new("down"))
    }

    #[test]
    fn every_shell_gets_a_script_that_names_the_subcommands() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "hvd-cluster", &mut script);
            let text = String::from_utf8(script).expect("a script is text");
            assert!(
                text.contains("hvd-cluster") && text.contains("up") && text.contains("down"),
                "{shell}: {text}"
            );
        }
    }

    #[test]
    fn bash_arms_are_spelled_as_the_loop_spells_them() {
        let mut script = Vec::new();
        clap_complete::generate(Shell::Bash, &mut command(), "hvd-cluster", &mut script);
        let fixed = String::from_utf8(bash_arms_as_the_loop_spells_them(&script, "hvd-cluster"))
            .expect("text");
        assert!(
            fixed.contains("cmd=\"hvd__cluster__subcmd__up\""),
            "{fixed}"
        );
        assert!(fixed.contains("hvd__cluster__subcmd__up)"), "{fixed}");
        assert!(!fixed.contains("hvd__subcmd__cluster"), "{fixed}");
        // a name without a hyphen is left as it is
        assert_eq!(bash_arms_as_the_loop_spells_them(b"abc", "tool"), b"abc");
    }

    #[test]
    fn the_man_page_is_roff_with_the_name_and_the_subcommands() {
        let mut page = Vec::new();
        clap_mangen::Man::new(command())
            .render(&mut page)
            .expect("renders");
        let text = String::from_utf8(page).expect("roff is text");
        assert!(
            text.starts_with(".ie") || text.contains(".TH hvd-cluster"),
            "{text}"
        );
        assert!(text.contains("one profile in, a cluster out"), "{text}");
        assert!(text.contains("hvd\\-cluster\\-up"), "{text}");
    }
}
