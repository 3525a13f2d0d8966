//! Man pages and shell completions, written from the very clap definitions
//! that `--help` prints, so the three never disagree.
//!
//! Every program answers two arguments of its own, given alone and left
//! out of its help (they are for packaging, not for use):
//!
//! - `--generate-man`: its man page (roff, section 1) on standard output;
//! - `--generate-completions SHELL`: its completion script for `bash`,
//!   `zsh` or `fish`.
//!
//! `scripts/man-and-completions.sh BIN_DIR OUT_DIR` writes them all.

use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

/// The shells completions are written for.
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// What a command line asks to be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generate {
    Man,
    Completions(Shell),
}

/// The generation a program's arguments (after its name) ask for: `None`
/// for every other command line, `Some(Err)` for a shell not supported.
pub fn wanted(args: &[String]) -> Option<Result<Generate, String>> {
    match args {
        [a] if a == "--generate-man" => Some(Ok(Generate::Man)),
        [a, shell] if a == "--generate-completions" => Some(shell_named(shell)),
        [a] => a.strip_prefix("--generate-completions=").map(shell_named),
        _ => None,
    }
}

fn shell_named(name: &str) -> Result<Generate, String> {
    SHELLS
        .iter()
        .find(|s| s.to_string() == name)
        .map(|&s| Generate::Completions(s))
        .ok_or_else(|| format!("no completions for {name:?}: bash, zsh or fish"))
}

/// Writes what `what` asks for of `cmd` to `out`.
pub fn write(what: Generate, mut cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    match what {
        Generate::Man => clap_mangen::Man::new(cmd).render(out),
        Generate::Completions(shell) => {
            let name = cmd.get_name().to_string();
            clap_complete::generate(shell, &mut cmd, name, out);
            Ok(())
        }
    }
}

/// Called first thing in `main`: where the command line asks for a man
/// page or completions, writes them for the program's command (`cmd`, made
/// only then) to standard output and returns the exit status; otherwise
/// `None`, and the program goes on.
pub fn from_args(cmd: impl FnOnce() -> clap::Command) -> Option<ExitCode> {
    // args_os: a path that is not UTF-8 is the program's to handle, not a
    // panic here.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let what = wanted(&args)?;
    let code = match what {
        Ok(what) => {
            let mut out = std::io::stdout().lock();
            match write(what, cmd(), &mut out).and_then(|_| out.flush()) {
                Ok(()) => crate::exit::OK,
                Err(e) => {
                    eprintln!("standard output: {e}");
                    crate::exit::OUTPUT
                }
            }
        }
        Err(e) => {
            eprintln!("{e}");
            crate::exit::USAGE
        }
    };
    Some(code.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_the_generation_arguments_alone() {
        assert_eq!(wanted(&args(&["--generate-man"])), Some(Ok(Generate::Man)));
        assert_eq!(
            wanted(&args(&["--generate-completions", "zsh"])),
            Some(Ok(Generate::Completions(Shell::Zsh)))
        );
        assert_eq!(
            wanted(&args(&["--generate-completions=fish"])),
            Some(Ok(Generate::Completions(Shell::Fish)))
        );
        assert!(matches!(
            wanted(&args(&["--generate-completions", "tcsh"])),
            Some(Err(_))
        ));
        // Anything else is the program's own command line.
        for a in [
            &["LOG"][..],
            &["--generate-man", "LOG"],
            &["LOG", "--generate-man"],
            &[],
        ] {
            assert_eq!(wanted(&args(a)), None, "{a:?}");
        }
    }

    #[test]
    fn man_page_and_completions_carry_the_options() {
        let cmd = || {
            clap::Command::new("prog")
                .about("Does a thing")
                .arg(clap::Arg::new("depth").long("depth").help("How deep"))
        };
        let mut man = Vec::new();
        write(Generate::Man, cmd(), &mut man).unwrap();
        let man = String::from_utf8(man).unwrap();
        assert!(
            man.starts_with(".ie") || man.contains(".TH prog 1"),
            "{man}"
        );
        assert!(man.contains("depth") && man.contains("How deep"), "{man}");
        for shell in SHELLS {
            let mut out = Vec::new();
            write(Generate::Completions(shell), cmd(), &mut out).unwrap();
            let s = String::from_utf8(out).unwrap();
            assert!(s.contains("depth"), "{shell}: {s}");
        }
    }
}
