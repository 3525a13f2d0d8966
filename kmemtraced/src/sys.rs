//! Every system call the recorder makes that std does not wrap: signals,
//! poll, pipes, thread ids, resource usage, mounting, and starting the traced
//! command with its pid already in the event filter. The only module allowed
//! `unsafe` (for `CommandExt::pre_exec`, `setpriority` and `sched_setscheduler`).

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// Signals that stop a recording, plus SIGCHLD for the traced command.
const HANDLED: [Signal; 5] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGCHLD,
];

/// Blocks the stop signals in the calling thread (threads spawned later
/// inherit the mask) and returns a descriptor that reads them.
pub fn block_signals() -> io::Result<SignalFd> {
    let mut set = SigSet::empty();
    for s in HANDLED {
        set.add(s);
    }
    set.thread_block().map_err(io::Error::from)?;
    SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(io::Error::from)
}

/// A signal read from the signal descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub signal: Signal,
    /// Sent by the kernel to a whole process group (the terminal's Ctrl-C,
    /// Ctrl-\, hang-up: `SI_KERNEL`), rather than by a process with
    /// kill(2): the traced command, in our group, got it too.
    pub to_group: bool,
}

/// Reads the pending signals from a signal descriptor (non-blocking).
pub fn pending_signals(sfd: &SignalFd) -> Vec<Received> {
    let mut out = Vec::new();
    while let Ok(Some(info)) = sfd.read_signal() {
        if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
            out.push(Received {
                signal,
                to_group: info.ssi_code == nix::libc::SI_KERNEL,
            });
        }
    }
    out
}

/// Whether process `pid` is in our process group (so that the terminal's
/// signals reach it as they reach us).
pub fn in_our_process_group(pid: u32) -> bool {
    let Ok(p) = i32::try_from(pid) else {
        return false;
    };
    nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(p)))
        .is_ok_and(|g| g == nix::unistd::getpgrp())
}

/// Signals a program started by us finds as a shell would leave them:
/// none blocked, and these at their default action (the recorder blocks
/// the stop signals for its signal descriptor, and a background job may
/// have been started with SIGINT and SIGQUIT ignored; both would be
/// inherited across exec, and `std::process::Command` resets neither).
const RESET_IN_CHILD: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGCHLD,
    Signal::SIGPIPE,
];

/// Unblocks every signal and restores the default action of
/// [`RESET_IN_CHILD`]; async-signal-safe (sigprocmask and sigaction only).
fn reset_signals() -> io::Result<()> {
    SigSet::empty().thread_set_mask().map_err(io::Error::from)?;
    for s in RESET_IN_CHILD {
        // SAFETY: installing SIG_DFL runs no code of ours.
        #[allow(unsafe_code)]
        unsafe { nix::sys::signal::signal(s, nix::sys::signal::SigHandler::SigDfl) }
            .map_err(io::Error::from)?;
    }
    Ok(())
}

/// Ignores the signals a terminal sends to a process group (the guardian
/// must outlive the recorder it watches).
pub fn ignore_terminal_signals() {
    for s in [Signal::SIGINT, Signal::SIGQUIT, Signal::SIGHUP] {
        // SAFETY: installing SIG_IGN runs no code of ours.
        #[allow(unsafe_code)]
        let _ = unsafe { nix::sys::signal::signal(s, nix::sys::signal::SigHandler::SigIgn) };
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns which
/// are readable (POLLIN, or an error/hangup condition, which a read will
/// report). Interrupted waits count as a timeout.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
        .collect();
    let t = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    match nix::poll::poll(&mut pfds, t) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok(vec![false; fds.len()]),
        Err(e) => return Err(e.into()),
    }
    Ok(pfds
        .iter()
        .map(|p| {
            p.revents().is_some_and(|r| {
                r.intersects(
                    PollFlags::POLLIN
                        | PollFlags::POLLERR
                        | PollFlags::POLLHUP
                        | PollFlags::POLLNVAL,
                )
            })
        })
        .collect())
}

/// A close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// Moves up to `len` bytes of whole pages from `from` into the pipe `to`
/// without blocking: splice(2) with SPLICE_F_MOVE | SPLICE_F_NONBLOCK.
/// Returns the bytes moved (0 at end of file).
pub fn splice_into_pipe(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: splice reads the two descriptors and lengths only; the null
    // offsets mean "the files' own positions" (trace_pipe_raw and a pipe
    // have none).
    #[allow(unsafe_code)]
    let n = unsafe {
        nix::libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            nix::libc::SPLICE_F_MOVE | nix::libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Asks for a pipe of at least `bytes` (F_SETPIPE_SZ); returns its size.
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let want = nix::libc::c_int::try_from(bytes).unwrap_or(nix::libc::c_int::MAX);
    // SAFETY: F_SETPIPE_SZ takes an integer argument and touches no memory.
    #[allow(unsafe_code)]
    let n = unsafe { nix::libc::fcntl(fd.as_raw_fd(), nix::libc::F_SETPIPE_SZ, want) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Writes one byte to a pipe (used to wake pollers).
pub fn poke(fd: BorrowedFd<'_>) {
    let _ = nix::unistd::write(fd, b"x");
}

/// The calling thread's kernel task id.
pub fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// Sets the calling thread's nice value (Linux applies it per thread).
/// Lowering it needs CAP_SYS_NICE.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    let tid = nix::unistd::gettid().as_raw() as nix::libc::id_t;
    // SAFETY: setpriority only reads its integer arguments.
    #[allow(unsafe_code)]
    let r = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the calling thread under SCHED_FIFO at `priority` (threads it
/// starts later inherit it). Needs CAP_SYS_NICE or an RLIMIT_RTPRIO, and
/// real-time time in its cgroup where RT group scheduling is on.
pub fn set_thread_fifo(priority: u8) -> io::Result<()> {
    // The kernel's struct sched_param is one int (libc's may be longer:
    // musl's has POSIX's sporadic-server fields too).
    let param: nix::libc::c_int = priority.into();
    // The system call itself, which is per thread: musl's
    // sched_setscheduler() always fails with ENOSYS (POSIX makes it per
    // process), and the board builds are musl.
    // SAFETY: `param` outlives the call, which only reads it; pid 0 is the
    // calling thread.
    #[allow(unsafe_code)]
    let r = unsafe {
        // syscall() reads each argument as a long: pass longs.
        nix::libc::syscall(
            nix::libc::SYS_sched_setscheduler,
            0 as nix::libc::c_long,
            nix::libc::c_long::from(nix::libc::SCHED_FIFO),
            &param as *const nix::libc::c_int,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether our threads may run under SCHED_FIFO at `priority`: tried on a
/// thread of ours that then exits.
pub fn fifo_allowed(priority: u8) -> bool {
    std::thread::spawn(move || set_thread_fifo(priority).is_ok())
        .join()
        .unwrap_or(false)
}

/// Keeps the calling thread (and the threads it starts later) off CPU
/// `cpu`, within the CPUs it may already use, unless that would leave it
/// none. Returns whether the affinity changed. The mask the kernel gives
/// back holds only the CPUs active now: CPUs coming online later are not
/// added (if all the thread's CPUs go offline, the kernel lets it run
/// anywhere again).
pub fn avoid_cpu(cpu: u32) -> io::Result<bool> {
    use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
    let me = nix::unistd::Pid::from_raw(0);
    let mut set = sched_getaffinity(me)?;
    let cpu = cpu as usize;
    if !set.is_set(cpu).unwrap_or(false) {
        return Ok(false);
    }
    set.unset(cpu)?;
    if !(0..CpuSet::count()).any(|c| set.is_set(c).unwrap_or(false)) {
        return Ok(false);
    }
    sched_setaffinity(me, &set)?;
    Ok(true)
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `uname`: (sysname, nodename, release, version, machine).
pub fn uname() -> Option<[String; 5]> {
    let u = nix::sys::utsname::uname().ok()?;
    let s = |x: &std::ffi::OsStr| x.to_string_lossy().into_owned();
    Some([
        s(u.sysname()),
        s(u.nodename()),
        s(u.release()),
        s(u.version()),
        s(u.machine()),
    ])
}

/// The page size.
pub fn page_size() -> Option<u32> {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|v| u32::try_from(v).ok())
}

/// This process's CPU time (user + system, all threads) and peak RSS in KiB.
pub fn self_usage() -> (Duration, u64) {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
            };
            (
                tv(u.user_time()) + tv(u.system_time()),
                u.max_rss().max(0) as u64,
            )
        }
        Err(_) => (Duration::ZERO, 0),
    }
}

/// Mounts tracefs at `dir`.
pub fn mount_tracefs(dir: &Path) -> io::Result<()> {
    nix::mount::mount(
        Some("nodev"),
        dir,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(io::Error::from)
}

/// Sends `sig` to `pid`.
pub fn kill(pid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
}

/// Starts `cmd` with the signals a shell would give it ([`reset_signals`]).
/// With `pid_filter` (an open, non-truncating handle on the instance's
/// `set_event_pid`), the child writes its own pid there between fork and
/// exec, so the filter holds before the command's first instruction
/// (trace-cmd's `-F` does the same).
pub fn spawn_command(cmd: &mut Command, mut pid_filter: Option<File>) -> io::Result<Child> {
    // SAFETY: the closure runs in the child between fork and exec; it only
    // calls sigprocmask, sigaction, getpid and write(2) on a stack buffer,
    // all async-signal-safe, and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            reset_signals()?;
            if let Some(f) = pid_filter.as_mut() {
                let mut buf = [0u8; 24];
                let n = format_decimal(std::process::id(), &mut buf);
                f.write_all(&buf[buf.len() - n..])?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Writes `v` in decimal with a trailing newline at the end of `buf`;
/// returns the number of bytes used (no allocation).
fn format_decimal(mut v: u32, buf: &mut [u8; 24]) -> usize {
    let mut i = buf.len() - 1;
    buf[i] = b'\n';
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.len() - i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        let mut b = [0u8; 24];
        let n = format_decimal(4_294_967_295, &mut b);
        assert_eq!(&b[24 - n..], b"4294967295\n");
        let n = format_decimal(0, &mut b);
        assert_eq!(&b[24 - n..], b"0\n");
    }
}
