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
use std::path::Path;
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

/// Starts COMMAND (its pid added to the event filter first with `-F`).
pub fn start_command(cli: &Cli, output: &Path, inst: &Instance) -> Result<Child> {
    let mut cmd = Command::new(&cli.command[0]);
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
