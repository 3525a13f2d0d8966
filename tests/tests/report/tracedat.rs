//! trace-cmd's trace.dat read by every tool: the real files of the foreign
//! kernels (`../shared/data/*/tracecmd/`: v7 zstd as recorded in the guest,
//! and the same converted to v6) give the totals of the in-guest
//! `trace-cmd report` text beside them; a trace.dat recorded here by
//! trace-cmd in an instance of its own, while kmemtraced records, gives the
//! same figures as kmemtraced's log.

use crate::foreign::import;
use crate::raw::{gunzip, text_totals, TextTotals};
use crate::{common, report_json};
use kmemtrace_import::log::Origin;
use kmemtrace_testkit::Rng;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// `trace-cmd report` prints `kmalloc:  (sym+0x2c) call_site=sym+0x2c ...`:
/// without the parenthesised symbol, the kernel's own line shape.
fn kernel_shape(line: &str) -> String {
    let Some(j) = line.find(" call_site=") else {
        return line.to_string();
    };
    let head = &line[..j];
    match head.rfind(" (") {
        Some(open) if head[..open].trim_end().ends_with(':') => {
            format!("{}{}", head[..open].trim_end(), &line[j..])
        }
        _ => line.to_string(),
    }
}

fn report_text_totals(text: &str) -> BTreeMap<String, TextTotals> {
    let shaped: String = text.lines().map(|l| kernel_shape(l) + "\n").collect();
    text_totals(&shaped)
}

/// Events of `name` in trace-cmd report text.
fn count(text: &str, name: &str) -> u64 {
    let tag = format!(" {name}:");
    text.lines().filter(|l| l.contains(&tag)).count() as u64
}

fn callsite_totals(r: &serde_json::Value) -> BTreeMap<String, TextTotals> {
    r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = |k: &str| c[k].as_u64().unwrap();
            (
                c["callsite"].as_str().unwrap().to_string(),
                TextTotals {
                    hits: n("hits"),
                    bytes_req: n("bytes_req"),
                    bytes_alloc: n("bytes_alloc"),
                    free_calls: n("free_calls"),
                },
            )
        })
        .collect()
}

#[test]
fn foreign_trace_dat_files_report_what_trace_cmd_printed() {
    let test = "foreign_trace_dat_files_report_what_trace_cmd_printed";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (arch, big) in [("armhf", false), ("s390x", true)] {
        let td = data.join(arch).join("tracecmd");
        let text = gunzip(&td.join("report.txt.gz"));
        let want = report_text_totals(&text);
        assert!(want.values().map(|t| t.hits).sum::<u64>() > 1000, "{arch}");
        let mut reports = Vec::new();
        for file in ["trace.dat", "trace.v6.dat"] {
            let dat = td.join(file);
            // Read directly, and through kmemtraced --import.
            let direct = report_json(&dat, &[]);
            let log = import(&dat, dir.path(), &format!("{arch}-{file}"));
            let arch_tag = kmemtrace_import::log::Log::open(&log).unwrap().arch;
            assert_eq!(
                arch_tag.byte_order_source.as_deref(),
                Some("trace.dat header")
            );
            let imported = report_json(&log, &[]);
            for r in [&direct, &imported] {
                assert_eq!(callsite_totals(r), want, "{arch} {file}");
                let pa = &r["page_allocator"];
                assert_eq!(pa["allocs"], count(&text, "mm_page_alloc"), "{arch} {file}");
                assert_eq!(pa["frees"], count(&text, "mm_page_free"), "{arch} {file}");
                assert_eq!(
                    r["kernel"]["byte_order"],
                    if big { "big" } else { "little" }
                );
                assert_eq!(r["kernel"]["trace_clock"], "local");
                assert_eq!(r["capture"]["lost_windows_total"], 0);
            }
            assert!(direct["input"]["name"]
                .as_str()
                .unwrap()
                .ends_with("(trace.dat)"));
            reports.push(imported);
            // kmemtrace-check reads it too, and says what it lacks.
            let out = Command::new(common::bin("kmemtrace-check"))
                .arg(&dat)
                .output()
                .unwrap();
            let says = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{says}");
            assert!(says.contains("no start statistics"), "{says}");
            // It is read in place: its sizes and offsets are the file's,
            // and it says so.
            assert!(
                says.contains("a trace-cmd trace.dat, checked read as kmemtrace log"),
                "{says}"
            );
            assert!(
                says.contains("read in place: sizes and offsets are the file's"),
                "{says}"
            );
            // Nothing converted it: the arch tag names the import it is
            // read as.
            assert!(
                says.contains("\n  read in place as kmemtraced ") && !says.contains("converted by"),
                "{says}"
            );
        }
        // Version 7 (zstd) and 6 (plain) hold the same events.
        let strip = |r: &serde_json::Value| {
            let mut r = r.clone();
            r["input"] = serde_json::Value::Null;
            r["problems"] = serde_json::Value::Null;
            r
        };
        assert_eq!(strip(&reports[0]), strip(&reports[1]), "{arch}");
    }
}

#[test]
fn kernel_shape_takes_off_trace_cmds_symbol() {
    let l = "  sh-469 [001] 27.263808: kmalloc:    (alloc_bprm+0x2c) call_site=alloc_bprm+0x2c ptr=0xc230ec00 bytes_req=348";
    assert_eq!(
        kernel_shape(l),
        "  sh-469 [001] 27.263808: kmalloc: call_site=alloc_bprm+0x2c ptr=0xc230ec00 bytes_req=348"
    );
}

/// `tests/data/trace-cmd-in-instance.sh`, if trace-cmd is installed.
pub(crate) fn trace_cmd() -> Option<std::path::PathBuf> {
    let have = Command::new("trace-cmd")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    have.then(|| common::workspace().join("tests/data/trace-cmd-in-instance.sh"))
}

/// A recorder stopped (SIGTERM) and waited for when dropped, so a failing
/// assertion leaves no recorder behind.
struct Running(Option<std::process::Child>);

impl Running {
    fn stop(mut self) -> std::process::Output {
        let child = self.0.take().unwrap();
        term(child.id());
        child.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            term(c.id());
            let _ = c.wait();
        }
    }
}

fn term(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

/// Removes the instance when dropped (trace-cmd leaves one it did not make).
struct Instance(std::path::PathBuf);

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_trace_dat_recorded_here_beside_kmemtraced_gives_the_same_figures() {
    let test = "a_trace_dat_recorded_here_beside_kmemtraced_gives_the_same_figures";
    let Some(tracefs) = common::tracefs_or_skip(test) else {
        return;
    };
    let Some(wrapper) = trace_cmd() else {
        common::skip(test, common::Missing::Tool, "trace-cmd is not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.kmt");
    let dat = dir.path().join("t.dat");
    let rec = Running(Some(
        Command::new(common::bin("kmemtraced"))
            .args(["--page-stacks", "off", "-o"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    // kmemtraced is tracing once its instance is there and a moment passed.
    let prefix = format!("kmemtraced-{}-", rec.0.as_ref().unwrap().id());
    assert!(common::wait_until(10, || !common::instances_with_prefix(
        &prefix
    )
    .is_empty()));
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The workload says its pid, so its events are told apart from the
    // rest of the machine's in both recordings (by pid: trace-cmd's copy of
    // saved_cmdlines can be cut short while tasks start, see tracedat.rs).
    let pidfile = dir.path().join("pid");
    let script = format!(
        "import os, time\nopen('{}', 'w').write(str(os.getpid()))\ntime.sleep(0.3)\nfor i in range(300):\n    r, w = os.pipe()\n    os.close(r)\n    os.close(w)\n",
        pidfile.display()
    );
    let name = format!("kmt-tracedat-{}", std::process::id());
    let _instance = Instance(tracefs.join("instances").join(&name));
    let mut trace_cmd_record = Command::new(&wrapper);
    trace_cmd_record
        .args([
            &name,
            "record",
            "-B",
            &name,
            "-e",
            "kmem:kmalloc",
            "-e",
            "kmem:kfree",
        ])
        .args([
            "-e",
            "kmem:kmem_cache_alloc",
            "-e",
            "kmem:kmem_cache_free",
            "-o",
        ])
        .arg(&dat)
        .args(["--", "python3", "-c", &script]);
    common::stdout_ok(&mut trace_cmd_record);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = rec.stop();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same span of time: trace-cmd's, which started later and stopped
    // sooner.
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let theirs_all = report_json(&dat, &["--pid", &pid]);
    // Each instance's ring buffer reads the clock for itself, so one event
    // has times a little apart in the two (under a microsecond here), and
    // the child trace-cmd forks runs before trace-cmd traces: the window
    // starts 100 ms in, while the workload sleeps, and ends 5 us late.
    let at = |k: &str, margin: i64| {
        let ns = theirs_all["capture"][k]
            .as_u64()
            .unwrap()
            .saturating_add_signed(margin);
        format!("@{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
    };
    let window = format!(
        "{}..{}",
        at("first_ts_ns", 100_000_000),
        at("last_ts_ns", 5_000)
    );
    let ours = report_json(&log, &["--pid", &pid, "--time", &window]);
    let theirs = report_json(&dat, &["--pid", &pid, "--time", &window]);
    let hits = |r: &serde_json::Value| r["summary"]["alloc_events"].as_u64().unwrap();
    assert!(
        hits(&ours) >= 600,
        "the workload made {} allocations",
        hits(&ours)
    );
    let (a, b) = (callsite_totals(&ours), callsite_totals(&theirs));
    let differ: Vec<_> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| (k, a.get(k), b.get(k)))
        .collect();
    assert!(differ.is_empty(), "{differ:?}");
    for k in [
        "alloc_events",
        "free_events",
        "bytes_requested",
        "bytes_allocated",
    ] {
        assert_eq!(ours["summary"][k], theirs["summary"][k], "{k}");
    }

    assert_eq!(theirs["capture"]["lost_windows_total"], 0);
}

/// `kmemtraced [OPTIONS] -o LOG -- sh -c SCRIPT`, asserting success.
pub(crate) fn record(log: &std::path::Path, options: &[&str], script: &str) {
    common::stdout_ok(
        Command::new(common::bin("kmemtraced"))
            .args(options)
            .arg("-o")
            .arg(log)
            .args(["--", "sh", "-c", script]),
    );
}

/// `kmemtrace-export INPUT --to trace-dat -o OUT` (version 7, the
/// default), asserting success.
pub(crate) fn export(input: &std::path::Path, out: &std::path::Path) {
    export_version(input, out, &[]);
}

/// `kmemtrace-export INPUT --to trace-dat [OPTIONS] -o OUT`, asserting
/// success; returns its summary line.
fn export_version(input: &std::path::Path, out: &std::path::Path, options: &[&str]) -> String {
    let o = Command::new(common::bin("kmemtrace-export"))
        .arg(input)
        .args(["--to", "trace-dat"])
        .args(options)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

/// The version a trace.dat's header says, and its compression (v7).
fn dat_version(dat: &std::path::Path) -> (String, Option<String>) {
    let b = std::fs::read(dat).unwrap();
    assert_eq!(&b[..10], b"\x17\x08\x44tracing");
    let cstr = |at: usize| {
        let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
        (String::from_utf8_lossy(&b[at..end]).into_owned(), end + 1)
    };
    let (version, at) = cstr(10);
    // Byte order, long size, page size; then v7's compression name.
    let compression = (version == "7").then(|| cstr(at + 6).0);
    (version, compression)
}

/// `trace-cmd report -i FILE`'s output.
fn trace_cmd_report(dat: &std::path::Path) -> String {
    trace_cmd_listing(dat, true)
}

/// `trace-cmd report [-N] -i FILE`'s output: with its plugins or without
/// (`-N`: each event through its own print fmt).
pub(crate) fn trace_cmd_listing(dat: &std::path::Path, plugins: bool) -> String {
    let mut c = Command::new("trace-cmd");
    c.arg("report");
    if !plugins {
        c.arg("-N");
    }
    common::stdout_ok(c.arg("-i").arg(dat))
}

#[test]
fn foreign_captures_exported_list_the_same_events_in_trace_cmd() {
    let test = "foreign_captures_exported_list_the_same_events_in_trace_cmd";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    if trace_cmd().is_none() {
        common::skip(test, common::Missing::Tool, "trace-cmd is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for arch in ["armhf", "s390x"] {
        let original = data.join(arch).join("tracecmd/trace.dat");
        let want = trace_cmd_report(&original);
        assert!(want.lines().count() > 30_000, "{arch}");
        // trace.dat (v7, zstd) -> our log -> trace.dat, version 7 (the
        // default, zstd-compressed as trace-cmd 3 writes it) and version 6
        // (uncompressed): trace-cmd prints every event as it printed the
        // original, line for line, from both.
        let log = import(&original, dir.path(), arch);
        let v7 = dir.path().join(format!("{arch}.dat"));
        let v6 = dir.path().join(format!("{arch}.v6.dat"));
        let said = export_version(&log, &v7, &[]);
        assert!(said.contains("trace.dat version 7 (zstd"), "{said}");
        export_version(&log, &v6, &["--trace-dat-version", "6"]);
        assert_eq!(
            dat_version(&v7),
            ("7".into(), Some("zstd".into())),
            "{arch}"
        );
        assert_eq!(dat_version(&v6), ("6".into(), None), "{arch}");
        for (out, version) in [(&v7, 7), (&v6, 6)] {
            let got = trace_cmd_report(out);
            if got != want {
                let first = got.lines().zip(want.lines()).position(|(a, b)| a != b);
                panic!("{arch} version {version}: first differing line {first:?}");
            }
        }
        // The pages compressed take a fraction of the uncompressed file.
        let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len();
        assert!(
            size(&v7) * 3 < size(&v6),
            "{arch}: {} vs {}",
            size(&v7),
            size(&v6)
        );
        // trace-cmd's own account of the file: version 7, zstd, one
        // buffer of compressed CPU data.
        let dump = common::stdout_ok(
            Command::new("trace-cmd")
                .args(["dump", "--summary", "-i"])
                .arg(&v7),
        );
        assert!(dump.contains("zstd\t[Compression algorithm]"), "{dump}");
        assert!(dump.contains("[10 sections]"), "{dump}");
    }
}

#[test]
fn a_log_of_this_kernel_exported_reads_back_the_same() {
    let test = "a_log_of_this_kernel_exported_reads_back_the_same";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    exported_reads_back_the_same(test, &[]);
}

/// Sub-buffers of 64 KiB are cut into the machine's pages: trace-cmd reads
/// them, and the trace.dat's page size stays the machine's (the page
/// allocator's bytes), with every event listed as from the log.
#[test]
fn a_log_with_big_sub_buffers_exports_in_machine_pages() {
    let test = "a_log_with_big_sub_buffers_exports_in_machine_pages";
    let Some(tracefs) = common::tracefs_or_skip(test) else {
        return;
    };
    if !tracefs.join("buffer_subbuf_size_kb").exists() {
        common::skip(
            test,
            common::Missing::Machine,
            "no buffer_subbuf_size_kb (Linux 6.8+)",
        );
        return;
    }
    let (log, dat, _dir) = exported_reads_back_the_same(test, &["--subbuf-kb", "64"]);
    let l = kmemtrace_import::log::Log::open(&log).unwrap();
    assert_eq!(l.layout.subbuf_size, 65536);
    let listing = |p: &std::path::Path| {
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-report"))
                .args(["--events", "--all-tasks"])
                .arg(p),
        )
    };
    let (a, b) = (listing(&log), listing(&dat));
    assert!(a.lines().count() > 1000);
    if a != b {
        let first = a.lines().zip(b.lines()).position(|(x, y)| x != y);
        panic!("listings differ first at line {first:?}");
    }
}

/// Records with `options`, exports, and compares the report of the log and
/// of the trace.dat, and trace-cmd's event counts; returns the log, the
/// trace.dat and the directory holding them.
fn exported_reads_back_the_same(
    test: &str,
    options: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("k.kmt");
    // A trace.dat has no place for the recorder's own threads: count them
    // as the workload's in both.
    let mut opts = vec!["--trace-self"];
    opts.extend_from_slice(options);
    record(
        &log,
        &opts,
        "for i in 1 2 3 4 5 6 7 8; do ls / >/dev/null; done",
    );
    let dat = dir.path().join("k.dat");
    export(&log, &dat);
    // Read back by our own reader, the figures are the same, page call
    // sites from the kernel stacks included.
    // Nor for the CPU -> node map (and perf's figure that needs it).
    let strip = |mut r: serde_json::Value| {
        for k in ["input", "problems", "filters"] {
            r[k] = serde_json::Value::Null;
        }
        for k in ["cross_node_allocs", "perf_cross_cpu_allocations"] {
            r["summary"][k] = serde_json::Value::Null;
        }
        r
    };
    let a = strip(report_json(&log, &["--all-tasks"]));
    let b = strip(report_json(&dat, &["--all-tasks"]));
    assert!(a["summary"]["alloc_events"].as_u64().unwrap() > 100);
    for k in [
        "summary",
        "callsites",
        "caches",
        "page_allocator",
        "misuse",
        "leaks",
    ] {
        assert_eq!(a[k], b[k], "{k}");
    }
    assert_eq!(a["pages"]["callsites"], b["pages"]["callsites"]);
    // trace-cmd lists as many kmem events as the log holds, by name.
    if trace_cmd().is_none() {
        common::skip(test, common::Missing::Tool, "trace-cmd is not installed");
        return (log, dat, dir);
    }
    let text = trace_cmd_report(&dat);
    let (_, evs) = common::decode_kmem(&log);
    for (name, kind) in [
        ("kmalloc", kmemtrace_kernel::KmemKind::Kmalloc),
        ("kfree", kmemtrace_kernel::KmemKind::Kfree),
        ("mm_page_alloc", kmemtrace_kernel::KmemKind::MmPageAlloc),
    ] {
        let want = evs.iter().filter(|e| e.kind == kind).count() as u64;
        assert_eq!(count(&text, name), want, "{name}");
    }
    (log, dat, dir)
}

#[test]
fn damaged_trace_dat_files_are_refused_or_read_never_a_crash() {
    let test = "damaged_trace_dat_files_are_refused_or_read_never_a_crash";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for file in ["armhf/tracecmd/trace.dat", "s390x/tracecmd/trace.v6.dat"] {
        let good = std::fs::read(data.join(file)).unwrap();
        let mut cases: Vec<Vec<u8>> = Vec::new();
        // Cut at 30 places, the header and metadata most of all.
        for i in 0..30usize {
            let at = if i < 20 {
                i * i * 97
            } else {
                good.len() * (i - 19) / 11
            };
            cases.push(good[..at.min(good.len())].to_vec());
        }
        // 40 single bytes flipped, spread by a fixed sequence.
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..40 {
            let mut b = good.clone();
            let at = rng.below(b.len() as u64 / 4) as usize;
            b[at] ^= 0xff;
            cases.push(b);
        }
        for (i, bytes) in cases.iter().enumerate() {
            let input = dir.path().join("bad.dat");
            std::fs::write(&input, bytes).unwrap();
            let out = Command::new(common::bin("kmemtraced"))
                .arg("--import")
                .arg(&input)
                .arg("-o")
                .arg(dir.path().join("bad.kmt"))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.code().is_some(),
                "{file} case {i}: killed by a signal"
            );
            assert!(!err.contains("panicked"), "{file} case {i}: {err}");
        }
    }
}

/// `kmemtrace-export`'s progress line is for terminals: with standard
/// error a pipe it says only its summary, and with -q nothing at all (the
/// file written all the same); on a terminal (`script` gives it one)
/// whatever progress line it drew is wiped before the summary.
#[test]
fn export_progress_is_for_terminals_and_quiet_says_nothing() {
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    let dir = tempfile::tempdir().unwrap();
    let have_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    for to in ["trace-dat", "perfetto"] {
        let out = dir.path().join(format!("s.{to}"));
        let run = |extra: &[&str]| {
            let o = Command::new(common::bin("kmemtrace-export"))
                .arg(&sample)
                .args(["--to", to])
                .args(extra)
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap();
            let err = String::from_utf8(o.stderr).unwrap();
            assert!(o.status.success(), "{to}: {err}");
            err
        };
        let err = run(&[]);
        assert!(!err.contains('\r'), "{to}: {err:?}");
        assert_eq!(err.lines().count(), 1, "{to}: {err:?}");
        assert!(err.starts_with("kmemtrace-export: "), "{to}: {err:?}");
        std::fs::remove_file(&out).unwrap();
        assert_eq!(run(&["-q"]), "", "{to}");
        assert!(std::fs::metadata(&out).unwrap().len() > 1000, "{to}");
        if !have_script {
            continue;
        }
        // On a terminal: the summary last, the progress line wiped (a run
        // of spaces over it) before anything else is written.
        let cmd = format!(
            "{} {} --to {to} -o {}",
            common::bin("kmemtrace-export").display(),
            sample.display(),
            out.display()
        );
        // A fresh name: no line about a previous file kept.
        std::fs::remove_file(&out).unwrap();
        let tty = common::stdout_ok(Command::new("script").args(["-qefc", &cmd, "/dev/null"]));
        let parts: Vec<&str> = tty.split('\r').collect();
        let last = parts.iter().rev().find(|p| !p.trim().is_empty()).unwrap();
        assert!(
            last.starts_with("kmemtrace-export: ") && last.contains(" -> "),
            "{to}: {tty:?}"
        );
        // (A progress line is followed by the next one, or wiped.)
        let progress =
            |p: &str| p.starts_with("kmemtrace-export: ") && p.contains(" sub-buffers, ");
        for (i, p) in parts.iter().enumerate() {
            if progress(p) {
                let next = parts[i + 1];
                assert!(next.trim().is_empty() || progress(next), "{to}: {tty:?}");
            }
        }
    }
}

/// `kmemtrace-check --json` of `file`: its exit status and its one file's
/// report.
fn check_file_json(
    file: &std::path::Path,
    tmpdir: Option<&std::path::Path>,
) -> (i32, serde_json::Value) {
    let mut cmd = Command::new(common::bin("kmemtrace-check"));
    cmd.arg("--json").arg(file);
    if let Some(t) = tmpdir {
        cmd.env("TMPDIR", t);
    }
    let out = cmd.output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v["files"][0].clone())
}

/// Events of each CPU in a check report.
fn cpu_events(r: &serde_json::Value) -> Vec<(u64, u64)> {
    r["cpus"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| (c["cpu"].as_u64().unwrap(), c["events"].as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// A trace.dat (and a capture-script dump) is read in place, not converted
/// into a temporary log first: with TMPDIR naming a file (no temporary
/// file can be made under it) the report and the check are the same as
/// with a usable one, and the sizes the check gives are the trace.dat's
/// own.
#[test]
fn a_trace_dat_is_read_in_place_without_a_temporary_file() {
    let test = "a_trace_dat_is_read_in_place_without_a_temporary_file";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("not-a-directory");
    std::fs::write(&not_a_dir, b"").unwrap();
    for file in [
        "armhf/tracecmd/trace.dat",
        "s390x/tracecmd/trace.v6.dat",
        "s390x/raw",
    ] {
        let path = data.join(file);
        let report = |tmpdir: &std::path::Path| {
            let out = Command::new(common::bin("kmemtrace-report"))
                .args(["-q", "--json"])
                .arg(&path)
                .env("TMPDIR", tmpdir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{file}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        assert!(
            report(dir.path()) == report(&not_a_dir),
            "{file}: the report differs without a usable TMPDIR"
        );
        let (code, r) = check_file_json(&path, Some(&not_a_dir));
        assert_eq!(code, 0, "{file}: {r}");
        assert!(cpu_events(&r).iter().all(|&(_, n)| n > 0), "{file}: {r}");
        let origin = kmemtrace_import::open_log(&path).unwrap().origin;
        if file.ends_with("raw") {
            assert_eq!(origin, Origin::Dump, "{file}");
            continue;
        }
        assert_eq!(origin, Origin::TraceDat, "{file}");
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(r["bytes"].as_u64(), Some(len), "{file}");
        assert!(r["end"]["offset"].as_u64().unwrap() <= len, "{file}");
    }
}

/// A trace.dat damaged in its CPU data costs what is damaged, not the
/// file: a v7 chunk that does not decompress is a problem with its offset
/// (the converted log it was read through before could not be made: the
/// file was unusable), and the other CPU is read whole; a v6 file cut
/// short in its last CPU's data is read up to the cut, which is named.
/// Both are damaged (exit 5). Damage to the metadata leaves the file
/// unusable (exit 3), as before.
#[test]
fn a_trace_dat_damaged_in_its_cpu_data_is_read_up_to_the_damage() {
    let test = "a_trace_dat_damaged_in_its_cpu_data_is_read_up_to_the_damage";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let problems = |r: &serde_json::Value| -> String {
        r["problems"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|p| p["message"].to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };

    // v7: the magic of a zstd frame in the CPU data (after the metadata
    // sections, which come first) made unknown.
    let good_path = data.join("armhf/tracecmd/trace.dat");
    let good = std::fs::read(&good_path).unwrap();
    let (_, good_r) = check_file_json(&good_path, None);
    let frames: Vec<usize> = good
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == [0x28, 0xb5, 0x2f, 0xfd])
        .map(|(i, _)| i)
        .collect();
    assert!(frames.len() > 20, "{} zstd frames", frames.len());
    let mut bad = good.clone();
    let at = frames[frames.len() - 10];
    bad[at] ^= 0xff;
    let input = dir.path().join("chunk.dat");
    std::fs::write(&input, &bad).unwrap();
    let (code, r) = check_file_json(&input, None);
    assert_eq!(code, 5, "{r}");
    let p = problems(&r);
    assert!(p.contains("Zstd chunk"), "{p}");
    assert_eq!(r["problems"][0]["offset"].as_u64(), Some(at as u64), "{p}");
    // One CPU's data is damaged, the other's is read whole.
    let (good_ev, bad_ev) = (cpu_events(&good_r), cpu_events(&r));
    assert_eq!(good_ev.len(), 2);
    let same = good_ev.iter().filter(|g| bad_ev.contains(g)).count();
    assert_eq!(same, 1, "{good_ev:?} {bad_ev:?}");

    // v6 cut short in its last CPU's data.
    let good_path = data.join("s390x/tracecmd/trace.v6.dat");
    let good = std::fs::read(&good_path).unwrap();
    let (_, good_r) = check_file_json(&good_path, None);
    let input = dir.path().join("cut.dat");
    let cut = good.len() - good.len() / 8;
    std::fs::write(&input, &good[..cut]).unwrap();
    let (code, r) = check_file_json(&input, None);
    assert_eq!(code, 5, "{r}");
    let p = problems(&r);
    assert!(p.contains("cut short"), "{p}");
    assert_eq!(r["problems"][0]["offset"].as_u64(), Some(cut as u64), "{p}");
    let (good_ev, cut_ev) = (cpu_events(&good_r), cpu_events(&r));
    assert_eq!(good_ev[0], cut_ev[0], "the first CPU's data is whole");
    assert!(cut_ev[1].1 < good_ev[1].1, "{cut_ev:?}");

    // Cut in the metadata: unusable.
    let input = dir.path().join("meta.dat");
    std::fs::write(&input, &good[..good.len() / 100]).unwrap();
    let (code, r) = check_file_json(&input, None);
    assert_eq!(code, 3, "{r}");
}
