//! The command line: text sections, stdin, symbols, exit codes.

use crate::synthetic::{planted, site, Synth, PLANTED};
use crate::{common, report, report_json, temp_log};
use std::io::Write;
use std::process::{Command, Stdio};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn text_report_has_summary_callsites_misuse_and_leaks() {
    let log = temp_log(&planted("6.18.44").build());
    let o = report(&[log.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = stdout(&o);
    for want in [
        "SLAB CALL SITES",
        "SUMMARY (SLAB allocator)",
        "Total bytes requested:",
        "Internal fragmentation:",
        "Cross-CPU frees: 10/",
        "Cross-NUMA-node allocations: 3/",
        "ALLOCATOR MISUSE",
        "[error] kmalloc()ed object freed by kmem_cache_free(): 4",
        "[info] kmem_cache_alloc()ed object freed by kfree(): 5",
        "legal since 6.4",
        "LEAKS",
        "leaky_alloc+0x10",
        "12,928/128", // alloc_a: 101 hits x 128 bytes
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
    assert!(
        !t.contains('\x1b'),
        "NO_COLOR and not a terminal: no escapes"
    );
    // Sections on demand.
    let o = report(&[
        log.path().to_str().unwrap(),
        "--caches",
        "--matrix",
        "--alloc",
        "-l",
        "10",
    ]);
    let t = stdout(&o);
    for want in [
        "SLAB CACHES",
        "KMALLOC SIZE CLASSES",
        "kmalloc-128",
        "CROSS-CPU FREES",
        "OBJECTS (per pointer",
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
    assert!(!t.contains("LEAKS"), "only the sections asked for");
}

/// `--timings`: the phases, each stage's threads as `-j` makes them, and
/// the prediction, on standard error; the report itself unchanged.
#[test]
fn timings_say_where_the_time_went_and_predict_other_core_counts() {
    let log = temp_log(&planted("6.18.44").build());
    let path = log.path().to_str().unwrap();
    let plain = report(&["-j", "4", path]);
    let o = report(&["-j", "4", "--timings=4", path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stdout(&o), stdout(&plain), "--timings changes only stderr");
    let e = String::from_utf8_lossy(&o.stderr);
    let row = |stage: &str| stage_threads(&e, stage);
    // -j 4: four decoders, four shards, two combiners, the fold.
    assert_eq!(
        [row("decode"), row("shard"), row("combine"), row("fold")],
        [Some(4), Some(4), Some(2), Some(1)],
        "{e}"
    );
    for want in ["open log", "stream", "print", "predicted on 4 cores: "] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    // Every event the report counts passed through the stream.
    let events = e
        .lines()
        .next()
        .and_then(|l| l.split('(').nth(1))
        .and_then(|l| l.split_whitespace().next())
        .map(|n| n.replace(',', "").parse::<u64>().unwrap());
    assert!(events.is_some_and(|n| n > 0), "{e}");
    // Without a value: 16 cores. -j 2: one decoder beside the one shard.
    let o = report(&["--timings", "-j", "2", path]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("predicted on 16 cores: "), "{e}");
    assert_eq!(
        [stage_threads(&e, "decode"), stage_threads(&e, "shard")],
        [Some(1), Some(1)],
        "{e}"
    );
    // -j 1: one thread in all, the shard decoding every block, and said so.
    let o = report(&["--timings", "-j", "1", path]);
    assert_eq!(stdout(&o), stdout(&plain));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        [stage_threads(&e, "decode"), stage_threads(&e, "shard")],
        [Some(0), Some(1)],
        "{e}"
    );
    assert!(
        e.contains("blocks the shards decoded while they waited"),
        "{e}"
    );
}

/// The threads column of `stage`'s row in a `--timings` table.
fn stage_threads(table: &str, stage: &str) -> Option<usize> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(stage))
        .unwrap_or_else(|| panic!("no {stage} row in:\n{table}"))
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse::<usize>().ok())
}

#[test]
fn reads_standard_input() {
    let bytes = planted("6.18.44").build();
    let mut c = Command::new(common::bin("kmemtrace-report"))
        .args(["-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(&bytes).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success());
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["input"]["name"], "<stdin>");
    assert_eq!(r["leaks"]["objects"], PLANTED.leaks);
}

#[test]
fn symbols_raw_or_from_another_file() {
    let log = temp_log(&planted("6.18.44").build());
    let r = report_json(log.path(), &["--raw-ip"]);
    let want = format!("0x{:x}", site("leaky_alloc"));
    assert!(r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["callsite"] == want.as_str()));
    // A System.map naming the same addresses differently.
    let mut map = tempfile::NamedTempFile::new().unwrap();
    writeln!(map, "{:016x} T renamed_leaky", site("leaky_alloc") - 0x10).unwrap();
    writeln!(map, "{:016x} T after_it", site("leaky_alloc") + 0xf0).unwrap();
    let r = report_json(log.path(), &["--kallsyms", map.path().to_str().unwrap()]);
    assert_eq!(r["leaks"]["groups"][0]["callsite"], "renamed_leaky+0x10");
}

#[test]
fn exit_codes() {
    // 3: not there, not a log.
    let o = report(&["/nonexistent/x.kmt"]);
    assert_eq!(o.status.code(), Some(3));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "one clear line: {e}");
    let junk = temp_log(b"this is not a kmemtrace log at all");
    assert_eq!(
        report(&[junk.path().to_str().unwrap()]).status.code(),
        Some(3)
    );
    // 2: usage.
    let log = temp_log(&planted("6.18.44").build());
    let p = log.path().to_str().unwrap();
    assert_eq!(report(&[p, "-s", "nonsense"]).status.code(), Some(2));
    assert_eq!(report(&[p, "--cpu", "x"]).status.code(), Some(2));
    assert_eq!(report(&[p, "--time", "5"]).status.code(), Some(2));
    assert_eq!(report(&[p, "--min-age", "1y"]).status.code(), Some(2));
    // A time window beside the capture, as a CPU it does not have.
    let o = report(&[p, "--time", "1000..2000"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds none of the capture's events"));
    assert_eq!(report(&[p, "--time", "0..1000"]).status.code(), Some(0));
    // -l 0: every row, as kmemtrace-check's --max-problems 0.
    let all = stdout(&report(&[p, "--caller", "-l", "0"]));
    let (shown, of) = all
        .lines()
        .find_map(|l| l.strip_prefix("SLAB CALL SITES (sorted by bytes,hit; "))
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.rsplit("; ").next())
        .and_then(|r| r.split_once(" of "))
        .expect("the call-site table's title");
    assert_eq!(shown, of, "{all}");
    assert_ne!(shown, "0", "{all}");
    assert_eq!(report(&["--bogus"]).status.code(), Some(2));
    // 1: --fail-on with certain findings of that severity.
    assert_eq!(report(&[p, "--fail-on", "error"]).status.code(), Some(1));
    assert_eq!(report(&[p]).status.code(), Some(0));
    // A clean log passes the gate; its info findings do not fail "warning".
    let mut s = Synth::new("6.18.0");
    s.kmalloc(0, 10, 1, "alloc_a", 0xffff_8880_0000_1000, 8, 8);
    s.kfree(1, 20, 1, "free_a", 0xffff_8880_0000_1000);
    s.kfree(1, 30, 1, "free_a", 0xffff_8880_0000_2000); // unseen: info
    let clean = temp_log(&s.build());
    let c = clean.path().to_str().unwrap();
    assert_eq!(report(&[c, "--fail-on", "warning"]).status.code(), Some(0));
    assert_eq!(report(&[c, "--fail-on", "info"]).status.code(), Some(1));
    // A truncated log still reports, and exits 5.
    let bytes = planted("6.18.44").build();
    let cut = temp_log(&bytes[..bytes.len() * 2 / 3]);
    let o = report(&[cut.path().to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(5));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["input"]["complete"], false);
}

#[test]
fn help_has_examples() {
    let o = report(&["--help"]);
    assert!(o.status.success());
    let t = stdout(&o);
    assert!(t.contains("Examples:") && t.contains("Exit status"), "{t}");
    assert!(t.contains("5  damaged input"), "{t}");
}

#[test]
fn damaged_logs_never_crash() {
    let bytes = planted("6.1.0").build();
    let mut n = 0;
    for (i, step) in [(0usize, 97usize), (13, 251), (40, 1009)] {
        for k in 0..12 {
            let mut b = bytes.clone();
            let at = (i + k * step * 7) % b.len();
            for j in 0..8 {
                if let Some(x) = b.get_mut(at + j * step) {
                    *x ^= 0x5a;
                }
            }
            let f = temp_log(&b);
            let o = report(&[f.path().to_str().unwrap(), "--json", "--alloc"]);
            assert!(
                matches!(o.status.code(), Some(0) | Some(3) | Some(5)),
                "flip at {at}: {:?}\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );
            n += 1;
        }
    }
    assert_eq!(n, 36);
    // A log with its END block but a damaged block before it is not
    // called complete.
    let damaged = common::workspace().join("format-spec/test-vectors/damaged.kmt");
    let text = stdout(&report(&[damaged.to_str().unwrap()]));
    assert!(text.contains("; ended (synthetic) but damaged;"), "{text}");
    assert!(text.contains("CPU 1: 2 sub-buffers missing"), "{text}");
}

#[test]
fn json_has_the_documented_top_level_fields() {
    let log = temp_log(&planted("6.18.44").build());
    let r = report_json(log.path(), &[]);
    let mut keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = vec![
        "schema",
        "generator",
        "input",
        "kernel",
        "filters",
        "capture",
        "summary",
        "sort",
        "lines",
        "callsites",
        "caches",
        "size_classes",
        "cross_cpu",
        "misuse",
        "trace_completeness",
        "leaks",
        "allocs",
        "page_allocator",
        "pages",
        "problems",
    ];
    want.sort_unstable();
    assert_eq!(keys, want);
    // Every one is described in JSON.md.
    let doc =
        std::fs::read_to_string(common::workspace().join("kmemtrace-report/JSON.md")).unwrap();
    for k in want {
        assert!(
            doc.contains(&format!("| `{k}` |")),
            "JSON.md does not describe {k}"
        );
    }
    assert_eq!(r["misuse"].as_array().unwrap().len(), 8);
    assert!(r["allocs"].is_null(), "only with --alloc");
}

#[test]
fn wrong_cpus_binary_symbols_and_damage_get_one_clear_line() {
    let log = temp_log(&planted("6.18.44").build());
    let path = log.path().to_str().unwrap();
    // A CPU the machine did not have.
    let o = report(&[path, "--cpu", "99"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--cpu 99: the log has no such CPU"), "{e}");
    assert!(o.stdout.is_empty(), "no empty table");
    // A binary file given as kallsyms: a short message, no raw bytes.
    let o = report(&[path, "--kallsyms", "/bin/sh"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("binary data, not kallsyms text"), "{e}");
    assert!(e.len() < 200 && !e.contains('\0'), "{e:?}");
    // Damage is named with its offset once.
    let mut bytes = planted("6.18.44").build();
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    let damaged = temp_log(&bytes);
    let o = report(&[damaged.path().to_str().unwrap()]);
    let t = stdout(&o);
    let line = t.lines().find(|l| l.starts_with("problems:")).expect(&t);
    let first = line.split("first: ").nth(1).unwrap();
    let off = first.split(':').next().unwrap();
    assert!(!first[off.len()..].contains(off), "offset repeated: {line}");
}

/// `--page` on a capture without page events says so instead of nothing;
/// the default report of such a capture stays without the section.
#[test]
fn page_section_asked_for_on_a_slab_only_capture_says_it_is_empty() {
    let mut s = Synth::new("6.18.44");
    s.kmalloc(0, 10, 1, "alloc_a", 0xffff_8880_0000_1000, 8, 8);
    s.kfree(0, 20, 1, "free_a", 0xffff_8880_0000_1000);
    let log = temp_log(&s.build());
    let p = log.path().to_str().unwrap();
    let note = "No page-allocator events (kmem:mm_page_*) in the selection";
    assert!(stdout(&report(&[p, "--page"])).contains(note));
    assert!(!stdout(&report(&[p])).contains(note));
}
