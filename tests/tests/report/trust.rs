//! What a user can trust: a cut or damaged log is said by every tool, with
//! what it costs, and exits 5 (the one exit-code table); a filter that
//! selects nothing is a usage error naming what the log has; a file that
//! is not a capture is named with what to run; the first table leads with
//! what costs most; flags compose as the README's examples read.

use crate::{common, report};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sample() -> PathBuf {
    common::workspace().join("tests/data/sample-x86_64.kmt")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The sample, cut at `num/den` of its length, in `dir`.
fn cut(dir: &Path, num: usize, den: usize) -> PathBuf {
    let b = std::fs::read(sample()).unwrap();
    let p = dir.join(format!("cut-{num}-{den}.kmt"));
    std::fs::write(&p, &b[..b.len() * num / den]).unwrap();
    p
}

/// The sample with three bytes flipped in its CPU data.
fn flipped(dir: &Path) -> PathBuf {
    let mut b = std::fs::read(sample()).unwrap();
    let n = b.len();
    for off in [n / 3, n / 2, 2 * n / 3] {
        b[off] ^= 0xff;
    }
    let p = dir.join("flipped.kmt");
    std::fs::write(&p, &b).unwrap();
    p
}

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(common::bin(bin))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

#[test]
fn every_tool_says_a_cut_or_damaged_log_and_exits_5() {
    let d = tempfile::tempdir().unwrap();
    let cut90 = cut(d.path(), 9, 10);
    let flip = flipped(d.path());
    for (log, said) in [(&cut90, "cut short"), (&flip, "is damaged")] {
        let l = log.to_str().unwrap();
        let out = |name: &str| d.path().join(name).to_str().unwrap().to_string();
        let runs: Vec<(&str, Vec<String>)> = vec![
            ("kmemtrace-report", vec![l.into()]),
            ("kmemtrace-report", vec![l.into(), "--json".into()]),
            ("kmemtrace-report", vec![l.into(), "--events".into()]),
            (
                "kmemtrace-report",
                vec![l.into(), "--fail-on".into(), "error".into()],
            ),
            (
                "kmemtrace-export",
                vec![l.into(), "-o".into(), out("x.dat")],
            ),
            (
                "kmemtrace-export",
                vec![
                    l.into(),
                    "--to".into(),
                    "perfetto".into(),
                    "-o".into(),
                    out("x.pftrace"),
                ],
            ),
            (
                "kmemtrace-diff",
                vec![sample().to_str().unwrap().into(), l.into()],
            ),
            ("kmemtrace-check", vec![l.into()]),
        ];
        for (bin, args) in runs {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = run(bin, &args);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(5), "{bin} {args:?}: {e}");
            if bin != "kmemtrace-check" {
                assert!(e.contains(said), "{bin} {args:?} says it: {e}");
            }
        }
        // What it costs: per CPU, after which time events are unknown.
        let e = stderr(&report(&[l]));
        if said == "cut short" {
            assert!(
                e.contains("events unknown")
                    && e.contains("CPU 0 after")
                    && e.contains("CPU 1 after"),
                "{e}"
            );
        }
    }
    // A gate never passes on it.
    let gates = d.path().join("g.toml");
    std::fs::write(
        &gates,
        "[[gate]]\nmetric = \"hits\"\nmax_increase_pct = 1000\n",
    )
    .unwrap();
    let o = run(
        "kmemtrace-diff",
        &[
            sample().to_str().unwrap(),
            cut90.to_str().unwrap(),
            "--gate",
            gates.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    // A whole log: 0.
    assert_eq!(report(&[sample().to_str().unwrap()]).status.code(), Some(0));
}

#[test]
fn filters_that_select_nothing_are_usage_errors_that_name_what_there_is() {
    let s = sample();
    let s = s.to_str().unwrap();
    for (args, names) in [
        (vec!["--comm", "nosuch"], "task names: "),
        (vec!["--pid", "999999"], "tasks in the log: "),
        (vec!["--callsite", "nosuch_function"], "tasks in the log: "),
        (vec!["--events", "--pid", "999999"], "tasks in the log: "),
        (vec!["--events", "--comm", "nosuch"], "task names: "),
    ] {
        let mut a = vec![s];
        a.extend(&args);
        let o = report(&a);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(names), "{args:?}: {e}");
        if args[0] != "--events" {
            assert!(stdout(&o).is_empty(), "{args:?}: no empty report");
        }
    }
    // Globs: the workers' names.
    let o = report(&[s, "--comm", "stress-ng*", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o = report(&[s, "--comm", "stress-ng-fork", "--json"]);
    let exact: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let allocs = |v: &serde_json::Value| v["summary"]["alloc_events"].as_u64().unwrap();
    assert!(
        allocs(&all) > allocs(&exact),
        "stress-ng* takes stress-ng-fork and the rest"
    );
    // The parent, named stress-ng, allocates nothing itself: the miss hints the glob.
    let o = report(&[s, "--comm", "stress-ng"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("'stress-ng*'"), "{}", stderr(&o));
}

#[test]
fn the_first_table_leads_with_the_most_bytes_and_says_how_it_is_sorted() {
    let o = report(&[sample().to_str().unwrap(), "--caller", "-l", "5"]);
    let t = stdout(&o);
    let header = t
        .lines()
        .find(|l| l.starts_with("SLAB CALL SITES"))
        .unwrap();
    assert!(
        header.contains("sorted by bytes,hit") && header.contains("-s frag,hit,bytes"),
        "{header}"
    );
    let r: serde_json::Value =
        serde_json::from_slice(&report(&[sample().to_str().unwrap(), "--json"]).stdout).unwrap();
    let bytes: Vec<u64> = r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes_alloc"].as_u64().unwrap_or(0))
        .collect();
    let max = *bytes.iter().max().unwrap();
    assert_eq!(bytes[0], max, "the first row allocates the most bytes");
}

#[test]
fn sort_and_lines_compose_with_section_flags() {
    let s = sample();
    let o = report(&[
        s.to_str().unwrap(),
        "-s",
        "waste",
        "-l",
        "7",
        "--caches",
        "--matrix",
    ]);
    let t = stdout(&o);
    for want in [
        "SLAB CALL SITES (sorted by waste",
        "SLAB CACHES",
        "CROSS-CPU FREES",
    ] {
        assert!(t.contains(want), "{want} in:\n{t}");
    }
    assert!(!t.contains("LEAKS"), "only what was asked");
}

#[test]
fn files_that_are_not_captures_are_named_with_what_to_run() {
    let d = tempfile::tempdir().unwrap();
    let gz = d.path().join("a.kmt.gz");
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut z, &std::fs::read(sample()).unwrap()).unwrap();
    std::fs::write(&gz, z.finish().unwrap()).unwrap();
    let perf = d.path().join("perf.data");
    std::fs::write(&perf, b"PERFILE2\x68\0\0\0\0\0\0\0more bytes").unwrap();
    for (f, want) in [(&gz, "zcat"), (&perf, "perf.data file")] {
        for bin in [
            "kmemtrace-report",
            "kmemtrace-check",
            "kmemtrace-export",
            "kmemtrace-diff",
        ] {
            let mut args = vec![f.to_str().unwrap()];
            let out = d.path().join("out.dat");
            match bin {
                "kmemtrace-export" => args.extend(["-o", out.to_str().unwrap()]),
                "kmemtrace-diff" => args.insert(0, f.to_str().unwrap()),
                _ => {}
            }
            let o = run(bin, &args);
            let all = stderr(&o) + &stdout(&o);
            assert_eq!(o.status.code(), Some(3), "{bin} {f:?}: {all}");
            assert!(
                all.contains(want) && !all.contains("magic"),
                "{bin} {f:?}: {all}"
            );
        }
    }
}

#[test]
fn the_checker_says_an_error_once_on_a_terminal() {
    let d = tempfile::tempdir().unwrap();
    let junk = d.path().join("junk.kmt");
    std::fs::write(&junk, b"this is not a kmemtrace log at all\n").unwrap();
    // `script` gives the checker a terminal for stdout and stderr alike.
    let cmd = format!(
        "{} {}",
        common::bin("kmemtrace-check").display(),
        junk.display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("NO_COLOR", "1")
        .output();
    let Ok(o) = o else {
        common::skip(
            "the_checker_says_an_error_once_on_a_terminal",
            common::Missing::Tool,
            "no `script` (util-linux)",
        );
        return;
    };
    let t = String::from_utf8_lossy(&o.stdout);
    assert_eq!(t.matches("not a kmemtrace log").count(), 1, "{t}");
    assert_eq!(o.status.code(), Some(3), "{t}");
}

#[test]
fn events_leave_out_the_recorder_and_warn_once() {
    if common::tracefs_or_skip("events_leave_out_the_recorder_and_warn_once").is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("own.kmt");
    let o = run(
        "kmemtraced",
        &[
            "-q",
            "-o",
            log.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 300 ]; do cat /proc/self/stat >/dev/null; i=$((i+1)); done",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let l = log.to_str().unwrap();
    // This recorder's threads, as its log lists them: not those of another
    // recorder that a test beside this one runs (named kmt-* too).
    let opened = kmemtrace_import::log::Log::open(&log).unwrap();
    let own: std::collections::HashSet<i32> = kmemtrace_import::tasks::recorder_tids(&opened)
        .into_iter()
        .collect();
    assert!(!own.is_empty(), "the log lists the recorder's threads");
    let recorder = |t: &str| {
        t.lines()
            .filter(|l| {
                let mut f = l.split_whitespace();
                let tid = f.next().and_then(|c| c.rsplit('-').next()?.parse().ok());
                tid.is_some_and(|t: i32| own.contains(&t))
                    && f.nth(1).is_some_and(|f| !f.contains(['h', 's', 'H', 'z']))
            })
            .count()
    };
    let o = report(&[l, "--events"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let all = report(&[l, "--events", "--all-tasks"]);
    assert_eq!(
        recorder(&stdout(&o)),
        0,
        "the recorder's own events left out by default"
    );
    assert!(recorder(&stdout(&all)) > 0, "and kept with --all-tasks");
    let e = stderr(&o);
    assert!(
        e.matches("page=").count() <= 1,
        "one line for every page event: {e}"
    );
}

#[test]
fn versions_name_the_commit_they_were_built_from() {
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(common::workspace())
        .output();
    let Some(head) = head
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        common::skip(
            "versions_name_the_commit_they_were_built_from",
            common::Missing::Tool,
            "not a git checkout",
        );
        return;
    };
    for bin in [
        "kmemtraced",
        "kmemtrace-check",
        "kmemtrace-report",
        "kmemtrace-diff",
        "kmemtrace-export",
    ] {
        let v = stdout(&run(bin, &["--version"]));
        assert!(v.contains("(commit ") && v.contains(&head), "{bin}: {v}");
    }
}

#[test]
fn diff_gates_in_colour_on_a_terminal_and_never_with_no_color() {
    let d = tempfile::tempdir().unwrap();
    let gates = d.path().join("g.toml");
    std::fs::write(&gates, "[[gate]]\nmetric = \"hits\"\nmax = 0\n").unwrap();
    let s = sample();
    let cmd = format!(
        "{} {} {} --gate {}",
        common::bin("kmemtrace-diff").display(),
        s.display(),
        s.display(),
        gates.display()
    );
    let on_tty = |no_color: bool| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if no_color {
            c.env("NO_COLOR", "1");
        }
        c.output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Some(coloured) = on_tty(false) else {
        common::skip(
            "diff_gates_in_colour_on_a_terminal_and_never_with_no_color",
            common::Missing::Tool,
            "no `script` (util-linux)",
        );
        return;
    };
    assert!(coloured.contains("\x1b[1;31mFAIL\x1b[0m"), "{coloured}");
    let plain = on_tty(true).unwrap();
    assert!(plain.contains("FAIL") && !plain.contains('\x1b'), "{plain}");
}

#[test]
fn every_tool_keeps_a_previous_output_and_creates_no_directories() {
    let d = tempfile::tempdir().unwrap();
    let s = sample();
    let s = s.to_str().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    let gates = p("g.toml");
    std::fs::write(
        &gates,
        "[[gate]]\nmetric = \"hits\"\nmax_increase_pct = 1000\n",
    )
    .unwrap();
    // Each writes NAME twice: the first's output is NAME.old after the second.
    let runs: Vec<(&str, Vec<String>, String)> = vec![
        (
            "kmemtrace-export",
            vec![s.into(), "-o".into(), p("x.dat")],
            p("x.dat"),
        ),
        (
            "kmemtrace-export",
            vec![
                s.into(),
                "--to".into(),
                "perfetto".into(),
                "-o".into(),
                p("x.pftrace"),
            ],
            p("x.pftrace"),
        ),
        (
            "kmemtrace-report",
            vec![s.into(), "--html".into(), p("r.html")],
            p("r.html"),
        ),
        (
            "kmemtrace-diff",
            vec![
                s.into(),
                s.into(),
                "--gate".into(),
                gates.clone(),
                "--junit".into(),
                p("j.xml"),
            ],
            p("j.xml"),
        ),
    ];
    for (bin, args, out) in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        std::fs::write(out, b"the user's own file").unwrap();
        let o = run(bin, &args);
        assert_eq!(o.status.code(), Some(0), "{bin}: {}", stderr(&o));
        assert_eq!(
            std::fs::read(format!("{out}.old")).unwrap(),
            b"the user's own file",
            "{bin}"
        );
        assert_ne!(std::fs::read(out).unwrap(), b"the user's own file", "{bin}");
    }
    // A dataset directory: an earlier one is kept, another never moved.
    let ds = p("ds");
    for _ in 0..2 {
        let o = run("kmemtrace-export", &[s, "--to", "parquet", "-o", &ds, "-q"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    assert!(Path::new(&format!("{ds}/manifest.json")).is_file());
    assert!(Path::new(&format!("{ds}.old/manifest.json")).is_file());
    let mine = p("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(format!("{mine}/thesis.tex"), "x").unwrap();
    let o = run("kmemtrace-export", &[s, "--to", "parquet", "-o", &mine]);
    assert_eq!(o.status.code(), Some(4));
    assert!(Path::new(&format!("{mine}/thesis.tex")).exists());
    assert!(!Path::new(&format!("{mine}.old")).exists());
    // No tool creates a path on the way: every one exits 4, the same.
    let deep = p("no/such/dir");
    for (bin, args) in [
        (
            "kmemtrace-export",
            vec![s.to_string(), "-o".into(), format!("{deep}/x.dat")],
        ),
        (
            "kmemtrace-export",
            vec![
                s.into(),
                "--to".into(),
                "parquet".into(),
                "-o".into(),
                format!("{deep}/ds"),
            ],
        ),
        (
            "kmemtrace-report",
            vec![s.into(), "--html".into(), format!("{deep}/r.html")],
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(bin, &args);
        assert_eq!(o.status.code(), Some(4), "{bin} {args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    }
    assert!(!d.path().join("no").exists());
}
