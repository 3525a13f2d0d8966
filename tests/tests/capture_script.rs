//! `kmemtraced/kmemtrace-capture.sh` run for real on this kernel under
//! busybox `sh`, with a PATH holding nothing but busybox applets (what a
//! board with a read-only busybox root file system offers), then imported
//! with `kmemtraced --import` and checked: the workload's own events are in
//! the log under its pid, every sub-buffer decodes, kmemtrace-check and
//! kmemtrace-report accept it, and the script's tracefs instance is gone.
//!
//! Needs root, tracefs and busybox (Debian's busybox-static, installed here
//! if missing and possible); skips with a message otherwise.

mod common;

use kmemtrace_format::records::{MetaKind, StatsPhase};
use kmemtrace_import::log::Log;
use kmemtrace_kernel::{Endian, RunTimeEndian};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn find_busybox() -> Option<PathBuf> {
    for d in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(d).join("busybox");
        if p.is_file() {
            return Some(p);
        }
    }
    ["/usr/bin/busybox", "/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// busybox, installing Debian's busybox-static if it is missing and we may.
fn busybox() -> Option<PathBuf> {
    static BB: OnceLock<Option<PathBuf>> = OnceLock::new();
    BB.get_or_init(|| {
        if let Some(p) = find_busybox() {
            return Some(p);
        }
        if is_root() {
            let apt = |args: &[&str]| {
                Command::new("apt-get")
                    .args(args)
                    .env("DEBIAN_FRONTEND", "noninteractive")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false)
            };
            if !apt(&["install", "-y", "-qq", "busybox-static"]) {
                apt(&["update", "-qq"]);
                apt(&["install", "-y", "-qq", "busybox-static"]);
            }
        }
        find_busybox()
    })
    .clone()
}

/// Root, tracefs and busybox, or a SKIP line.
fn ready(test: &str) -> Option<PathBuf> {
    if !is_root() {
        common::skip(
            test,
            common::Missing::Tracefs,
            "needs root (the script creates a tracefs instance)",
        );
        return None;
    }
    common::tracefs_or_skip(test)?;
    let bb = busybox();
    if bb.is_none() {
        common::skip(
            test,
            common::Missing::Tool,
            "busybox is not installed and busybox-static could not be installed",
        );
    }
    bb
}

/// A directory of busybox applet symlinks: the only PATH the script gets.
fn applets(bb: &Path, dir: &Path) -> PathBuf {
    let d = dir.join("bin");
    fs::create_dir_all(&d).unwrap();
    let list = Command::new(bb).arg("--list").output().unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    for a in list.split_whitespace() {
        if a.contains('/') {
            continue;
        }
        let _ = symlink(bb, d.join(a));
    }
    assert!(d.join("sh").exists() && d.join("dd").exists());
    d
}

fn script() -> PathBuf {
    common::workspace().join("kmemtraced/kmemtrace-capture.sh")
}

fn capture_cmd(bb: &Path, bin: &Path, args: &[&str]) -> Command {
    // A shell cannot trap a signal that was ignored when it started
    // (POSIX), as SIGINT and SIGHUP are under `nohup cargo test &`: the
    // script starts with them at their defaults, where coreutils' env can
    // set them so (it execs, keeping the pid).
    static ENV_RESETS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let resets = *ENV_RESETS.get_or_init(|| {
        Command::new("/usr/bin/env")
            .args(["--default-signal=INT,HUP,QUIT", "true"])
            .status()
            .is_ok_and(|s| s.success())
    });
    let mut c = if resets {
        let mut c = Command::new("/usr/bin/env");
        c.arg("--default-signal=INT,HUP,QUIT").arg(bb);
        c
    } else {
        Command::new(bb)
    };
    c.arg("sh")
        .arg(script())
        .args(args)
        .env_clear()
        .env("PATH", bin)
        .stdin(Stdio::null());
    c
}

fn instance_exists(pid: u32) -> bool {
    common::instances_with_prefix(&format!("kmt-capture-{pid}"))
        .iter()
        .any(|n| n == &format!("kmt-capture-{pid}"))
}

/// Runs to the end (at most `limit`), returning the output and the pid.
fn run(mut c: Command, limit: Duration) -> (Output, u32) {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (wait_at_most(child, limit), pid)
}

/// Waits for the script to end; past `limit`, kills it and fails.
fn wait_at_most(child: std::process::Child, limit: Duration) -> Output {
    let pid = child.id();
    let start = Instant::now();
    std::thread::scope(|s| {
        let h = s.spawn(|| child.wait_with_output().unwrap());
        while !h.is_finished() {
            if start.elapsed() > limit {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                panic!("the capture script ran longer than {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        h.join().unwrap()
    })
}

fn import(dump: &Path, out: &Path) {
    let o = Command::new(common::bin("kmemtraced"))
        .arg("--import")
        .arg(dump)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Events per (event name, pid), sub-buffers that do not decode, and
/// the log.
fn decode(path: &Path) -> (Log, BTreeMap<(String, i32), u64>, u64) {
    let log = Log::open(path).unwrap();
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    let mut counts = BTreeMap::new();
    let mut bad = 0u64;
    let e = log.endian;
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
            |v| {
                let Ok(sb) = v.subbuf else {
                    bad += 1;
                    return;
                };
                for ev in sb.data_events(e) {
                    let Ok((_, _, p)) = ev else {
                        bad += 1;
                        return;
                    };
                    let id = u32::from(e.read_u16(p, 0).unwrap());
                    let f = log.format_by_id(id).expect("a format for every event");
                    let pf = f
                        .common_fields
                        .iter()
                        .find(|f| f.name == "common_pid")
                        .unwrap();
                    let pid = e.read_int(p, pf.offset, pf.size).unwrap() as i32;
                    *counts.entry((f.name.clone(), pid)).or_default() += 1;
                }
            },
            |p| panic!("{p}"),
        );
    }
    (log, counts, bad)
}

fn meta_other<'a>(log: &'a Log, name: &str) -> Option<&'a [u8]> {
    log.meta(MetaKind::Other, name)
        .map(|m| m.content.as_slice())
}

fn lost_any(log: &Log) -> bool {
    log.cpus().iter().any(|&c| {
        let s = log.cpu_stats(c, StatsPhase::Start).find_map(|s| s.parsed);
        let e = log.cpu_stats(c, StatsPhase::End).find_map(|s| s.parsed);
        matches!((s, e), (Some(s), Some(e)) if e.lost_since(&s) > 0)
    })
}

#[test]
fn script_records_a_workload_under_busybox_and_imports() {
    let Some(bb) = ready("script_records_a_workload_under_busybox_and_imports") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = applets(&bb, tmp.path());
    let work = tmp.path().join("work");
    fs::create_dir(&work).unwrap();
    let pidfile = tmp.path().join("workload.pid");
    // 300 files created (each open allocates a struct file in the shell's
    // own context), read back and removed.
    let workload = format!(
        "echo $$ > {p}; i=0; while [ $i -lt 300 ]; do echo x > {w}/f$i; i=$((i+1)); done; \
         cat {w}/f1 > /dev/null; rm -r {w}; exit 3",
        p = pidfile.display(),
        w = work.display()
    );
    let dump = tmp.path().join("dump");
    let c = capture_cmd(
        &bb,
        &bin,
        &[
            "-b",
            "8192",
            "-o",
            dump.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &workload,
        ],
    );
    let (o, spid) = run(c, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "script failed: {err}");
    assert!(err.contains("recording"), "{err}");
    assert!(!instance_exists(spid), "the script's instance was removed");
    let wpid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // The dump, laid out like tracefs.
    for f in [
        "events/header_page",
        "events/header_event",
        "events/kmem/kmalloc/format",
        "events/kmem/kmalloc/id",
        "events/kmem/kmem_cache_alloc/format",
        "kallsyms",
        "saved_cmdlines",
        "saved_tgids",
        "uname",
        "uname_m",
        "page_size_bytes",
        "nproc",
        "cpus_online",
        "trace_clock",
        "endianness",
        "capture_info",
        "per_cpu/cpu0/trace_pipe_raw",
        "per_cpu/cpu0/stats.start",
        "per_cpu/cpu0/stats",
        "per_cpu/cpu0/stats.after_drain",
    ] {
        assert!(dump.join(f).is_file(), "{f} missing from the dump");
    }
    assert!(!dump.join(".kmt-ctl").exists());
    let info = fs::read_to_string(dump.join("capture_info")).unwrap();
    assert!(info.contains("stop_reason=command exited 3"), "{info}");
    assert!(info.contains("exit_status=3"), "{info}");
    assert!(info.contains("drain=complete"), "{info}");
    let ncpu: usize = fs::read_to_string(dump.join("nproc"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut total = 0;
    for c in 0..ncpu {
        let len = fs::metadata(dump.join(format!("per_cpu/cpu{c}/trace_pipe_raw")))
            .unwrap()
            .len();
        assert_eq!(len % 4096, 0, "whole sub-buffers only (cpu{c}: {len})");
        total += len;
    }
    assert!(total > 0);

    // Imported: this machine's arch, every sub-buffer decodes, the
    // workload's events under its pid.
    let log_path = tmp.path().join("x.kmt");
    import(&dump, &log_path);
    let (log, counts, bad) = decode(&log_path);
    assert_eq!(bad, 0);
    // Page stacks for a sample of page frames by default, the filter
    // written as the recorder writes it, and read back as such.
    use kmemtrace_import::stacks::{pfn_sample_filter, PageStackSample};
    let stacks = String::from_utf8_lossy(meta_other(&log, "page_stacks").unwrap()).into_owned();
    assert!(
        stacks.contains(&format!(
            "kmem:mm_page_alloc stacktrace if {}",
            pfn_sample_filter(16)
        )),
        "{stacks}"
    );
    assert_eq!(PageStackSample::of_log(&log).one_in(), 16);
    let host = if cfg!(target_endian = "big") {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    };
    assert_eq!(log.arch.byte_order, host);
    assert_eq!(
        log.arch.byte_order_source.as_deref(),
        Some("dump endianness file")
    );
    let m = Command::new("uname").arg("-m").output().unwrap();
    assert_eq!(
        log.arch.machine.as_deref(),
        Some(String::from_utf8_lossy(&m.stdout).trim())
    );
    assert_eq!(log.arch.nr_cpus, Some(ncpu as u32));
    assert!(log.arch.start_trace_ns.is_some());
    assert!(log.arch.start_wall_ns.is_some());
    assert_eq!(log.end.as_ref().unwrap().exit_status, Some(3));
    assert!(log.kallsyms.is_some());
    assert!(meta_other(&log, "capture_info").is_some());
    // The /proc files the page analysis reads, under the recorder's names.
    use kmemtrace_import::pagetypes::{self, MIN_FREE_KBYTES_META, PAGETYPEINFO_META};
    assert!(meta_other(&log, PAGETYPEINFO_META).is_some());
    assert_eq!(pagetypes::of_log(&log).fallback, None);
    assert!(meta_other(&log, MIN_FREE_KBYTES_META).is_some());
    assert!(pagetypes::min_free_kbytes(&log).is_some_and(|k| k > 0));
    for c in 0..ncpu as u32 {
        assert_eq!(log.cpu_stats(c, StatsPhase::Start).count(), 1);
        assert_eq!(log.cpu_stats(c, StatsPhase::End).count(), 1);
    }
    assert!(
        !log.notes.iter().any(|n| n.warning),
        "warnings: {:?}",
        log.notes
    );
    let mine: BTreeMap<&str, u64> = counts
        .iter()
        .filter(|((_, p), _)| *p == wpid)
        .map(|((e, _), n)| (e.as_str(), *n))
        .collect();
    eprintln!("workload pid {wpid}: {mine:?}");
    let allocs = mine.get("kmem_cache_alloc").copied().unwrap_or(0);
    if lost_any(&log) {
        // The kernel overwrote some events (a busy machine): some remain.
        assert!(allocs > 0, "{mine:?}");
    } else {
        assert!(
            allocs >= 300,
            "300 files opened, {allocs} slab allocations: {mine:?}"
        );
    }
    let decoded: u64 = counts.values().sum();

    // kmemtrace-check: no damage, every event known; kmemtrace-report sees
    // the same events and the workload's allocations.
    let o = Command::new(common::bin("kmemtrace-check"))
        .arg("--json")
        .arg(&log_path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["files"][0];
    assert!(
        matches!(f["verdict"].as_str(), Some("ok") | Some("lost")),
        "{f}"
    );
    assert_eq!(f["total"]["events"].as_u64(), Some(decoded));
    for c in f["cpus"].as_array().unwrap() {
        assert_eq!(c["bad_subbufs"].as_u64(), Some(0), "{c}");
        assert_eq!(c["missing_subbufs"].as_u64(), Some(0), "{c}");
        assert_eq!(c["unknown_events"].as_u64(), Some(0), "{c}");
        assert_eq!(c["ordering_violations"].as_u64(), Some(0), "{c}");
    }
    let o = Command::new(common::bin("kmemtrace-report"))
        .args(["--json", "-q", "--pid", &wpid.to_string()])
        .arg(&log_path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        r["summary"]["alloc_events"].as_u64().unwrap_or(0) >= allocs.min(1),
        "{}",
        r["summary"]
    );
}

#[test]
fn script_duration_into_a_tar_gz() {
    let Some(bb) = ready("script_duration_into_a_tar_gz") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = applets(&bb, tmp.path());
    let out = tmp.path().join("cap.tar.gz");
    let c = capture_cmd(
        &bb,
        &bin,
        &[
            "-q",
            "-d",
            "1",
            "-e",
            "kmem:kmalloc,kfree,kmem/kmem_cache_alloc,nosuch",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let (o, spid) = run(c, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("no event kmem:nosuch"), "{err}");
    assert!(!instance_exists(spid));
    assert!(out.is_file());
    // Kernel addresses and symbols: owner-only, as the recorder's logs.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the dump's mode");
    assert!(
        !tmp.path().join("cap.tar.gz.d").exists(),
        "the work directory is removed"
    );
    let log_path = tmp.path().join("x.kmt");
    import(&out, &log_path);
    let (log, counts, bad) = decode(&log_path);
    assert_eq!(bad, 0);
    assert_eq!(
        log.arch.events.as_deref(),
        Some("kmem:kmalloc,kmem:kfree,kmem:kmem_cache_alloc")
    );
    for (ev, _) in counts.keys() {
        assert!(
            ["kmalloc", "kfree", "kmem_cache_alloc"].contains(&ev.as_str()),
            "{ev} was not enabled"
        );
    }
    let info = String::from_utf8_lossy(meta_other(&log, "capture_info").unwrap()).into_owned();
    assert!(info.contains("stop_reason=duration"), "{info}");
    assert!(log
        .notes
        .iter()
        .any(|n| n.text.contains("gzip'd tar archive")));
}

/// Whether the script's instance has tracing on: the script sets it just
/// after it enters its recording state, the one where a first signal stops
/// rather than aborts.
fn instance_records(pid: u32) -> bool {
    let Some(t) = common::tracefs() else {
        return false;
    };
    let on = t.join(format!("instances/kmt-capture-{pid}/tracing_on"));
    fs::read_to_string(on).is_ok_and(|s| s.trim() == "1")
}

/// Starts the script recording the whole system into the directory
/// `dump`, and returns once it records. A signal sent before would abort
/// the setup, so the wait is on tracing being on, not on the dump's
/// directory (made before the readers and the stack triggers, which take
/// long on a loaded machine).
fn start_recording(bb: &Path, bin: &Path, dump: &Path) -> std::process::Child {
    let mut c = capture_cmd(bb, bin, &["-q", "-o", dump.to_str().unwrap()]);
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !(instance_records(child.id()) && dump.join("per_cpu").is_dir()) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the script did not start recording"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Something recorded before the signal.
    std::thread::sleep(Duration::from_millis(700));
    child
}

/// A script that records, signalled by the busybox shell command `kills`
/// (`PID` in it stands for the script's pid) and waited for (at most a
/// minute): its temporary directory, the dump's directory in it, its pid
/// and what it printed. `None` where it cannot run (said).
fn record_and_signal(test: &str, kills: &str) -> Option<(tempfile::TempDir, PathBuf, u32, Output)> {
    let bb = ready(test)?;
    let tmp = tempfile::tempdir().unwrap();
    let bin = applets(&bb, tmp.path());
    let dump = tmp.path().join("dump");
    let child = start_recording(&bb, &bin, &dump);
    let pid = child.id();
    let st = Command::new(bin.join("sh"))
        .arg("-c")
        .arg(kills.replace("PID", &pid.to_string()))
        .status()
        .unwrap();
    assert!(st.success(), "{kills}");
    let out = wait_at_most(child, Duration::from_secs(60));
    Some((tmp, dump, pid, out))
}

#[test]
fn script_stops_cleanly_on_sigint() {
    let Some((tmp, dump, pid, o)) =
        record_and_signal("script_stops_cleanly_on_sigint", "kill -INT PID")
    else {
        return;
    };
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !instance_exists(pid),
        "the instance is removed after SIGINT"
    );
    let info = fs::read_to_string(dump.join("capture_info")).unwrap();
    assert!(info.contains("stop_reason=signal SIGINT"), "{info}");
    let log_path = tmp.path().join("x.kmt");
    import(&dump, &log_path);
    let (_, counts, bad) = decode(&log_path);
    assert_eq!(bad, 0);
    assert!(!counts.is_empty(), "a running system allocates something");
}

/// A second signal aborts: the shell's 128 + the signal, the tracefs
/// instance removed, and what was recorded left where the user finds it.
#[test]
fn script_aborts_on_a_second_signal() {
    // Both arrive within one of the recording loop's one-second sleeps:
    // the shell acts on them in turn when it ends, stop then abort.
    let Some((_tmp, dump, pid, o)) = record_and_signal(
        "script_aborts_on_a_second_signal",
        "kill -INT PID && kill -TERM PID",
    ) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("SIGTERM: aborted"), "{err}");
    assert!(
        err.contains(&format!("what was recorded is in {}", dump.display())),
        "{err}"
    );
    assert!(!instance_exists(pid), "the instance is removed on abort");
    assert!(dump.join("per_cpu").is_dir(), "what was recorded is kept");
}

#[test]
fn script_usage_and_errors() {
    let Some(bb) = ready("script_usage_and_errors") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = applets(&bb, tmp.path());
    let go = |args: &[&str]| capture_cmd(&bb, &bin, args).output().unwrap();
    let one_line = |o: &Output| {
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        e
    };

    let o = go(&["-h"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("usage: kmemtrace-capture"));

    let o = go(&["-Z"]);
    assert_eq!(o.status.code(), Some(2));
    let o = go(&["-P", "3", "-d", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(one_line(&o).contains("-P wants a power of two"));
    let o = go(&["-d", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(one_line(&o).contains("-d wants whole seconds"));

    let o = go(&["-t", "/nonexistent", "-d", "1"]);
    assert_eq!(o.status.code(), Some(3), "tracefs unavailable");
    assert!(one_line(&o).contains("/nonexistent is not a tracefs mount"));

    let exists = tmp.path().join("exists");
    fs::create_dir(&exists).unwrap();
    let o = go(&["-d", "1", "-o", exists.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "the dump cannot be written");
    assert!(one_line(&o).contains("already exists"));

    let o = go(&[
        "-d",
        "1",
        "-e",
        "nosuch_event",
        "-o",
        tmp.path().join("n").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "no such event: usage");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("none of the requested events"), "{e}");
    assert!(!tmp.path().join("n").exists(), "nothing left behind");

    // Not root: one line, before touching tracefs.
    use std::os::unix::process::CommandExt;
    let o = Command::new(&bb)
        .arg("sh")
        .arg(script())
        .args(["-d", "1", "-o", "/tmp/kmt-never"])
        .env_clear()
        .env("PATH", &bin)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "tracefs not permitted");
    assert!(one_line(&o).contains("must run as root"));
    assert!(!Path::new("/tmp/kmt-never").exists());
}

/// The script cannot use the programs' table of exit codes; its own
/// names for them must say the same.
#[test]
fn the_scripts_exit_codes_are_the_one_table() {
    use kmemtrace_cli::exit;
    let text = std::fs::read_to_string(script()).unwrap();
    let value = |name: &str| -> u8 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name}= in the script"))
            .parse()
            .unwrap()
    };
    for (name, code) in [
        ("E_USAGE", exit::USAGE),
        ("E_TRACEFS", exit::INPUT),
        ("E_OUTPUT", exit::OUTPUT),
        ("E_FAILED", exit::FAILED),
    ] {
        assert_eq!(value(name), code.code, "kmemtrace-capture.sh's {name}");
    }
    // Its usage lists them with the table's numbers.
    let words_of_text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (code, words) in [
        (exit::USAGE, "usage error"),
        (exit::INPUT, "no usable tracefs"),
        (exit::OUTPUT, "the output could not be written"),
        (exit::FAILED, "the recording failed"),
    ] {
        let said = format!("{} {words}", code.code);
        assert!(
            words_of_text.contains(&said),
            "the script's usage lacks {said:?}"
        );
    }
}

/// The script samples page stacks as kmemtraced does by default, and its
/// usage, the recorder's help and the report's say so.
#[test]
fn the_scripts_page_sample_is_the_recorders_default() {
    let text = std::fs::read_to_string(script()).unwrap();
    let sample: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("PAGE_SAMPLE="))
        .expect("PAGE_SAMPLE= in the script")
        .parse()
        .unwrap();
    assert!(
        text.contains(&format!("(default {sample}: frame numbers")),
        "the script's usage states its -P default"
    );
    let help = |program: &str| {
        let o = Command::new(common::bin(program))
            .arg("--help")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let recorder = help("kmemtraced");
    assert!(
        recorder.contains(&format!("up to 1024; default {sample})")),
        "kmemtraced's --page-stacks default is the script's {sample}: {recorder}"
    );
    let report = help("kmemtrace-report");
    assert!(
        report.contains(&format!(
            "by default for 1 in {sample} page frames, whose allocations then count as the {sample}"
        )),
        "the report's help states the recorder's sample: {report}"
    );
}

#[test]
fn the_scripts_default_events_are_the_one_kmem_list() {
    let text = std::fs::read_to_string(script()).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("DEFAULT_EVENTS=\""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("DEFAULT_EVENTS=\"...\" in the script");
    let mut script_events: Vec<&str> = line.split_whitespace().collect();
    let mut known: Vec<&str> = kmemtrace_kernel::KmemKind::ALL
        .iter()
        .map(|k| k.name())
        .collect();
    script_events.sort_unstable();
    known.sort_unstable();
    assert_eq!(
        script_events, known,
        "kmemtrace-capture.sh's DEFAULT_EVENTS"
    );
}

#[test]
fn the_scripts_stall_events_are_the_one_stall_list() {
    let text = std::fs::read_to_string(script()).unwrap();
    let list = |name: &str| -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=\"")))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{name}=\"...\" in the script"))
            .split_whitespace()
            .map(str::to_string)
            .collect();
        v.sort_unstable();
        v
    };
    let known = |l: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = l.iter().map(|s| s.to_string()).collect();
        v.sort_unstable();
        v
    };
    use kmemtrace_kernel::stalls::{STACKED_STALL_EVENTS, STALL_EVENTS};
    assert_eq!(list("STALL_EVENTS"), known(&STALL_EVENTS));
    assert_eq!(list("STACKED_STALL_EVENTS"), known(&STACKED_STALL_EVENTS));
}
