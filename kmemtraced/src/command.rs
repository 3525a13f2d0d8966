//! The traced command's life: started with the signals a shell would give
//! it and, with `-F`, its pid in the event filter before it runs; stop
//! signals passed on to it; its exit status; and waiting for it, so that
//! it is never orphaned by the recorder's own failure.

use crate::cli::Cli;
use crate::failure::{Failure, Result};
use crate::sys;
use crate::tracefs::Instance;
use nix::sys::signal::Signal;
use std::fs::OpenOptions;
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `command exited N` or `command killed by SIG`, and the shell's status.
pub fn describe_exit(st: std::process::ExitStatus) -> (String, i32) {
    match (st.code(), st.signal()) {
        (Some(c), _) => (format!("command exited {c}"), c),
        (None, Some(s)) => {
            let name = Signal::try_from(s).map_or_else(|_| s.to_string(), |x| x.to_string());
            (format!("command killed by {name}"), 128 + s)
        }
        _ => ("command exited".into(), -1),
    }
}

/// Whether `p` is a regular file that this process may execute.
fn executable(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.is_file())
        && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Finds COMMAND as a shell would, before anything is set up or any file
/// touched: a name with a `/` is that file, another is looked up in
/// `PATH` (an empty entry being the current directory). Not found exits
/// 127, found but not executable (or a directory) 126, as the shell does.
pub fn resolve(program: &str) -> Result<PathBuf> {
    use kmemtrace_cli::exit::{NOT_EXECUTABLE, NOT_FOUND};
    let fail = |code: kmemtrace_cli::exit::Code, why: &str| Failure {
        code: code.code,
        msg: format!("{program}: {why}"),
    };
    if program.is_empty() {
        return Err(fail(NOT_FOUND, "command not found"));
    }
    if program.contains('/') {
        let p = PathBuf::from(program);
        return if executable(&p) {
            Ok(p)
        } else if p.is_dir() {
            Err(fail(NOT_EXECUTABLE, "is a directory"))
        } else if p.exists() {
            Err(fail(NOT_EXECUTABLE, "permission denied (not executable)"))
        } else {
            Err(fail(NOT_FOUND, "no such file"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut not_executable = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let p = dir.join(program);
        if executable(&p) {
            return Ok(p);
        }
        // Found but not ours to run (`executable` said no): the shell's 126.
        if p.metadata().is_ok_and(|m| m.is_file()) {
            not_executable.get_or_insert(p);
        }
    }
    match not_executable {
        Some(p) => Err(fail(
            NOT_EXECUTABLE,
            &format!("{} is not executable", p.display()),
        )),
        None => Err(fail(NOT_FOUND, "command not found (not in PATH)")),
    }
}

/// Starts COMMAND, found as [`resolve`] found it (its pid added to the
/// event filter first with `-F`).
pub fn start_command(cli: &Cli, program: &Path, output: &Path, inst: &Instance) -> Result<Child> {
    let mut cmd = Command::new(program);
    std::os::unix::process::CommandExt::arg0(&mut cmd, &cli.command[0]);
    cmd.args(&cli.command[1..]);
    if output.as_os_str() == "-" {
        // The log owns standard output: the command's goes to stderr.
        if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
            cmd.stdout(Stdio::from(fd));
        }
    }
    let filter = if cli.follow_command {
        OpenOptions::new()
            .append(true)
            .open(inst.dir.file("set_event_pid"))
            .ok()
    } else {
        None
    };
    sys::spawn_command(&mut cmd, filter)
        .map_err(|e| Failure::runtime(format!("cannot run `{}`: {e}", cli.command[0])))
}

/// Passes a stop signal on to the command, unless the terminal already sent
/// it to the command's process group (Ctrl-C reaches both of us).
pub fn pass_on(child: &Child, r: sys::Received) {
    if !(r.to_group && sys::in_our_process_group(child.id())) {
        sys::kill(child.id(), r.signal);
    }
}

/// The command's exit status if it exits within `limit`.
pub fn wait_briefly(c: &mut Child, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(describe_exit(st).1);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for the command to exit, passing stop signals on to it.
pub fn wait_passing_signals(c: &mut Child, signals: &nix::sys::signalfd::SignalFd) {
    while !matches!(c.try_wait(), Ok(Some(_)) | Err(_)) {
        let _ = sys::wait_readable(&[signals.as_fd()], Duration::from_millis(200));
        for r in sys::pending_signals(signals) {
            if r.signal != Signal::SIGCHLD {
                pass_on(c, r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::resolve;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn commands_are_found_as_the_shell_finds_them() {
        assert!(resolve("sh").unwrap().ends_with("sh"));
        assert_eq!(resolve("nosuchcmd-kmemtrace").unwrap_err().code, 127);
        assert_eq!(resolve("./nosuchcmd-kmemtrace").unwrap_err().code, 127);
        assert_eq!(resolve("").unwrap_err().code, 127);
        assert_eq!(resolve("/").unwrap_err().code, 126);
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("plain");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(script.to_str().unwrap()).unwrap_err();
        assert_eq!(e.code, 126, "{}", e.msg);
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve(script.to_str().unwrap()).unwrap(), script);
    }
}
