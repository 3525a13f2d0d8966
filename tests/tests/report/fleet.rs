//! The fleet job (`kmemtrace-diff/fleet/kmemtrace_fleet_diff.py`) over the
//! Parquet exports of many captures gives, board by board, the numbers and
//! verdicts `kmemtrace-diff --base ... --new ...` gives on the logs: every
//! changed figure with its medians, spreads, rates and noise flag, the new
//! and vanished call sites, each gate's rows and breaches, and the JUnit
//! test cases, on Spark in local mode (PyPI `pyspark`, a Java runtime) and
//! on DuckDB. It refuses
//! the rules kmemtrace-diff refuses, in the same words, and says which
//! captures are not whole, with kmemtrace-diff's exit status.

use crate::diff::workload_with;
use crate::{common, temp_log};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn job() -> PathBuf {
    common::workspace().join("kmemtrace-diff/fleet/kmemtrace_fleet_diff.py")
}

/// Whether python3 can import `module`; a visible skip of `test` if not.
fn python_has(test: &str, module: &str, install: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        common::skip(test, common::Missing::Tool, install);
    }
    ok
}

/// The captures: the five bundled real ones (two boards of one baseline,
/// x86_64 kernels 6.1 and this one, one with allocation stalls) and three
/// runs of a synthetic load, written as logs into `dir` and exported into
/// `dir/dataset/NAME`.
fn fleet(dir: &Path) -> Vec<(String, PathBuf)> {
    let data = common::workspace().join("tests/data");
    let mut logs: Vec<(String, PathBuf)> = [
        "board-arm64",
        "board-armhf",
        "boot-6.1-x86_64",
        "sample-x86_64",
        "stalls-6.1-x86_64",
    ]
    .iter()
    .map(|n| (n.to_string(), data.join(format!("{n}.kmt"))))
    .collect();
    // Three runs of one build: an odd count, rows some runs lack, a double
    // free in one.
    for (run, (extra, double)) in [(120, 0), (250, 3), (90, 0)].into_iter().enumerate() {
        let path = dir.join(format!("synth-run{run}.kmt"));
        std::fs::write(&path, workload_with(extra, double)).unwrap();
        logs.push((format!("synth-run{run}"), path));
    }
    std::fs::create_dir(dir.join("dataset")).unwrap();
    for (name, log) in &logs {
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-export"))
                .arg(log)
                .args(["--to", "parquet", "-q", "--capture", name, "-o"])
                .arg(dir.join("dataset").join(name)),
        );
    }
    logs
}

const RULES: &str = r#"
[[gate]]
metric = "hits"
max_increase_pct = 20

[[gate]]
metric = "live_bytes"
callsite = "alloc_*"
max_increase = 1000

[[gate]]
metric = "misuse:double_free"
max = 0

[[gate]]
metric = "hits"
per_second = true
cache = "kmalloc-*"
max_increase_pct = 50

[[gate]]
name = "order 3 blocks left"
metric = "live_blocks"
order = 3
max = 5.5

[[gate]]
metric = "frag_pct"
cache = "kmalloc-1?"
max_increase = 0.25

[[gate]]
metric = "stall_p99_ns"
stall_site = "nothing*"
max_increase_pct = 10

[[gate]]
metric = "stalls"
stall_site = "nothing*"
max = 0
allow_no_match = true
"#;

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The job's run: exit status, JSON document (with --json), stderr.
fn run_job(args: &[&str]) -> (Option<i32>, Output) {
    let out = Command::new("python3")
        .arg(job())
        .args(args)
        .output()
        .expect("python3");
    (out.status.code(), out)
}

/// A side's capture names, sorted (kmemtrace-diff names a capture by its
/// path: its file name without `.kmt` is the export's name).
fn names(side: &Value) -> Vec<String> {
    let mut v: Vec<String> = side["captures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = c["name"].as_str().unwrap();
            let file = n.rsplit('/').next().unwrap();
            file.strip_suffix(".kmt").unwrap_or(file).to_string()
        })
        .collect();
    v.sort();
    v
}

/// Two JSON values equal, numbers by value (`50` and `50.0` alike).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Asserts that the job's document holds kmemtrace-diff's comparisons.
fn assert_same_comparisons(diff: &Value, job: &Value, engine: &str) {
    assert_eq!(names(&diff["base"]), names(&job["base"]), "{engine}: base");
    let boards: BTreeMap<Vec<String>, &Value> = job["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (names(&c["new"]), c))
        .collect();
    let want = diff["comparisons"].as_array().unwrap();
    assert_eq!(boards.len(), want.len(), "{engine}: boards");
    for d in want {
        let side = names(&d["new"]);
        let j = boards[&side];
        let at = format!("{engine}, board {side:?}");
        for key in [
            "within_noise",
            "new_callsites",
            "vanished_callsites",
            "new_page_callsites",
            "vanished_page_callsites",
            "gates_failed",
        ] {
            assert!(
                same(&d[key], &j[key]),
                "{at}: {key}: {} / {}",
                d[key],
                j[key]
            );
        }
        let (dc, jc) = (
            d["changes"].as_array().unwrap(),
            j["changes"].as_array().unwrap(),
        );
        assert_eq!(dc.len(), jc.len(), "{at}: changes");
        for (i, (x, y)) in dc.iter().zip(jc).enumerate() {
            assert!(same(x, y), "{at}: change {i}:\n{x}\n{y}");
        }
        let (dg, jg) = (
            d["gates"].as_array().unwrap(),
            j["gates"].as_array().unwrap(),
        );
        assert_eq!(dg.len(), jg.len(), "{at}: gates");
        for (x, y) in dg.iter().zip(jg) {
            assert!(same(x, y), "{at}: gate:\n{x}\n{y}");
        }
    }
}

#[test]
fn the_fleet_job_gives_kmemtrace_diffs_numbers_and_verdicts_on_spark_and_duckdb() {
    const TEST: &str =
        "the_fleet_job_gives_kmemtrace_diffs_numbers_and_verdicts_on_spark_and_duckdb";
    if !python_has(TEST, "duckdb", "python3 with duckdb (pip install duckdb)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let logs = fleet(dir.path());
    let rules = write(dir.path(), "rules.toml", RULES);
    let log = |n: &str| logs.iter().find(|(name, _)| name == n).unwrap().1.clone();
    let out = Command::new(common::bin("kmemtrace-diff"))
        .arg("--base")
        .args([log("board-arm64"), log("board-armhf")])
        .arg("--new")
        .arg(log("boot-6.1-x86_64"))
        .arg("--new")
        .args([log("sample-x86_64"), log("stalls-6.1-x86_64")])
        .arg("--new")
        .args((0..3).map(|r| log(&format!("synth-run{r}"))))
        .arg("--gate")
        .arg(&rules)
        .arg("--json")
        .arg("--junit")
        .arg(dir.path().join("diff.xml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a gate fails");
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The comparison has what the job must reproduce: changes inside the
    // noise, a vanished call site, failed and passed gates.
    let c = &diff["comparisons"];
    assert!(
        (0..3).any(|i| c[i]["within_noise"].as_u64() > Some(0)),
        "{c}"
    );
    assert!(
        (0..3).all(|i| c[i]["gates_failed"].as_u64() > Some(0)),
        "{c}"
    );
    assert!(c[2]["gates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["passed"] == true));

    let dataset = dir.path().join("dataset");
    let args = |engine: &'static str| -> Vec<String> {
        [
            dataset.to_str().unwrap(),
            "--base",
            "board-*",
            "--board",
            "^(boot|synth|s)",
            "--gate",
            rules.to_str().unwrap(),
            "--json",
            "--engine",
            engine,
            "--junit",
            dir.path().join(format!("{engine}.xml")).to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    // The boards by name: `sample` and `stalls` are both board `s`.
    let mut engines = vec!["duckdb"];
    if python_has(
        TEST,
        "pyspark",
        "python3 with pyspark and a Java runtime (pip install pyspark)",
    ) {
        engines.push("spark");
    }
    for engine in engines {
        let mut a = args(engine);
        if engine == "spark" {
            a.extend(["--master".into(), "local[2]".into()]);
        }
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out) = run_job(&a);
        assert_eq!(
            code,
            Some(1),
            "{engine}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let job: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(job["engine"], engine);
        assert_same_comparisons(&diff, &job, engine);
        let job_xml = dir.path().join(format!("{engine}.xml"));
        assert_ne!(crate::diff::junit_valid(&job_xml, TEST), Some(false));
        let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap();
        assert_eq!(
            test_cases(&read("diff.xml")),
            test_cases(&read(&format!("{engine}.xml"))),
            "{engine}: JUnit"
        );
    }
}

/// A JUnit document's test cases, suite by suite, without the class name
/// (the program's and the board's).
fn test_cases(xml: &str) -> Vec<Vec<String>> {
    xml.split("<testsuite ")
        .skip(1)
        .map(|suite| {
            suite
                .split("<testcase ")
                .skip(1)
                .map(|case| {
                    let case = &case[..case.find("</testcase>").unwrap()];
                    let (head, body) = case.split_once('>').unwrap();
                    let name = head.split(" classname=").next().unwrap();
                    format!("{name}>{body}")
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_fleet_jobs_metrics_are_kmemtrace_diffs_and_the_exports_say_their_kinds() {
    const TEST: &str = "the_fleet_jobs_metrics_are_kmemtrace_diffs_and_the_exports_say_their_kinds";
    if !python_has(TEST, "duckdb", "python3 with duckdb (pip install duckdb)") {
        return;
    }
    // Names and scopes as `kmemtrace-diff --help` lists them.
    let help = common::stdout_ok(Command::new(common::bin("kmemtrace-diff")).arg("--help"));
    let listed: Vec<(String, String)> = help
        .lines()
        .skip_while(|l| !l.starts_with("Metrics"))
        .filter_map(metric_row)
        .filter(|(n, _)| !n.contains(':'))
        .collect();
    let (code, out) = run_job(&["--metrics"]);
    assert_eq!(code, Some(0));
    let job = String::from_utf8(out.stdout).unwrap();
    let mine: Vec<(String, String, String)> = job
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].into(), f[1].into(), f[2].into())
        })
        .collect();
    // (The misuse kinds' names are held to kmemtrace-diff's by the rules
    // test: its message lists them all.)
    let names: Vec<(String, String)> = mine
        .iter()
        .filter(|(n, _, _)| !n.contains(':'))
        .map(|(n, s, _)| (n.clone(), s.clone()))
        .collect();
    assert_eq!(names, listed);
    // Each metric's kind as the exports write it, over every capture.
    let dir = tempfile::tempdir().unwrap();
    let log = temp_log(&workload_with(50, 2));
    let data = common::workspace().join("tests/data");
    for (name, path) in [
        ("synth", log.path().to_path_buf()),
        ("stalls", data.join("stalls-6.1-x86_64.kmt")),
        ("sample", data.join("sample-x86_64.kmt")),
    ] {
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-export"))
                .arg(path)
                .args(["--to", "parquet", "-q", "--capture", name, "-o"])
                .arg(dir.path().join(name)),
        );
    }
    let q = format!(
        "import duckdb, json; print(json.dumps(duckdb.sql(\"select distinct metric, kind from \
         read_parquet('{}/*/figures.parquet') order by 1\").fetchall()))",
        dir.path().display()
    );
    let kinds: Vec<(String, String)> =
        serde_json::from_str(&common::stdout_ok(Command::new("python3").args(["-c", &q]))).unwrap();
    let seen: Vec<&str> = kinds.iter().map(|(m, _)| m.as_str()).collect();
    for m in [
        "hits",
        "frag_pct",
        "live_bytes",
        "stall_p99_ns",
        "misuse:double_free",
    ] {
        assert!(seen.contains(&m), "{m} not in {seen:?}");
    }
    for (metric, kind) in &kinds {
        let want = match metric.split_once(':') {
            Some(_) => "count",
            None => mine
                .iter()
                .find(|(n, _, _)| n == metric)
                .map(|(_, _, k)| k.as_str())
                .unwrap(),
        };
        assert_eq!(kind, want, "{metric}");
    }
}

/// `  NAME   SCOPES  ...` of the help's metric table.
fn metric_row(l: &str) -> Option<(String, String)> {
    let rest = l.strip_prefix("  ")?;
    let mut f = rest.split_whitespace();
    let (name, scopes) = (f.next()?, f.next()?);
    let ok = !rest.starts_with(' ')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:".contains(c))
        && scopes.chars().all(|c| "tckpos".contains(c));
    ok.then(|| (name.to_string(), scopes.to_string()))
}

#[test]
fn the_fleet_job_refuses_the_rules_kmemtrace_diff_refuses_in_the_same_words() {
    let dir = tempfile::tempdir().unwrap();
    for (i, text) in [
        "[[gate]]\nmetric = \"hitz\"\nmax = 1\n",
        "\n[[gate]]\nmetric = \"hits\"\nmax = 1\n\n[[gate]]\nmetric = \"bytes\"\ncallsite = \"f+0x10\"\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\ncallsite = \"a\"\ncache = \"b\"\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\norder = 11\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\ncache = \" \"\nmax = 1\n",
        "[[gate]]\nmetric = \"failed\"\ncache = \"kmalloc-64\"\nmax = 1\n",
        "[[gate]]\nmetric = \"live_bytes\"\nper_second = true\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\nmax = -1\n",
        "[[gate]]\nmetric = \"hits\"\nmax_increase_pct = nan\n",
        "[[gate]]\nmetric = \"hits\"\n",
        "[[gate]]\nmetric = \"page_misuse:double_free\"\nmax = 0\n",
        "# nothing\n",
        // The second selector in kmemtrace-diff's order, not the file's.
        "[[gate]]\nmetric = \"hits\"\nstall_site = \"a\"\ncallsite = \"b\"\nmax = 1\n",
    ]
    .iter()
    .enumerate()
    {
        let (d, j) = both_on_rules(dir.path(), &format!("r{i}.toml"), text);
        let said = |o: &Output, prog: &str| {
            let e = String::from_utf8_lossy(&o.stderr).trim().to_string();
            e.strip_prefix(&format!("{prog}: ")).unwrap_or(&e).to_string()
        };
        assert_eq!(d.status.code(), Some(2), "{text}");
        assert_eq!(j.status.code(), Some(2), "{text}");
        assert_eq!(said(&d, "kmemtrace-diff"), said(&j, "kmemtrace-fleet-diff"), "{text}");
    }
}

/// kmemtrace-diff and the job on the same rules file `name` of `text`:
/// their outputs. The job reads its rules before any data, so it is given
/// none; kmemtrace-diff, one small log twice.
fn both_on_rules(dir: &Path, name: &str, text: &str) -> (Output, Output) {
    let rules = write(dir, name, text);
    let log = write(dir, "rules-test.kmt", workload_with(0, 0));
    let d = Command::new(common::bin("kmemtrace-diff"))
        .args([&log, &log])
        .arg("--gate")
        .arg(&rules)
        .output()
        .unwrap();
    let (_, j) = run_job(&["none", "--base", "x", "--gate", rules.to_str().unwrap()]);
    (d, j)
}

/// Rules that the file's reader refuses (a field, a type): at the same
/// line as kmemtrace-diff (serde's words differ), before any rule's
/// meaning is judged.
#[test]
fn the_fleet_job_refuses_fields_and_types_at_kmemtrace_diffs_line() {
    let dir = tempfile::tempdir().unwrap();
    for (i, text) in [
        "[[gate]]\nmetric = \"hitz\"\nmax = 1\n\n[[gate]]\nmetric = \"hits\"\nbogus = 1\nmax = 1\n",
        "[[gate]]\nname = 5\nmetric = \"hits\"\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\nper_second = 1\nmax = 1\n",
        "[[gate]]\nmetric = \"hits\"\nmax = \"1\"\n",
    ]
    .iter()
    .enumerate()
    {
        let (d, j) = both_on_rules(dir.path(), &format!("t{i}.toml"), text);
        // `kmemtrace-diff: FILE line N: why`: the line.
        let line = |o: &Output| {
            let e = String::from_utf8_lossy(&o.stderr).to_string();
            e.split(": ").nth(1).unwrap_or("").to_string()
        };
        assert_eq!(
            (d.status.code(), j.status.code()),
            (Some(2), Some(2)),
            "{text}"
        );
        assert!(line(&d).contains(" line "), "{text}: {}", line(&d));
        assert_eq!(line(&d), line(&j), "{text}");
    }
}

#[test]
fn the_fleet_job_exits_as_kmemtrace_diff_does_and_leaves_junit_on_errors() {
    const TEST: &str = "the_fleet_job_exits_as_kmemtrace_diff_does_and_leaves_junit_on_errors";
    if !python_has(TEST, "duckdb", "python3 with duckdb (pip install duckdb)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    std::fs::create_dir(&ds).unwrap();
    for (name, extra) in [("base", 0), ("b-1", 30)] {
        let log = write(dir.path(), &format!("{name}.kmt"), workload_with(extra, 0));
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-export"))
                .arg(&log)
                .args(["--to", "parquet", "-q", "--capture", name, "-o"])
                .arg(ds.join(name)),
        );
    }
    let rules = write(
        dir.path(),
        "r.toml",
        "[[gate]]\nmetric = \"hits\"\nmax = 0\n",
    );
    let junit = dir.path().join("j.xml");
    let (rules_arg, junit_arg) = (rules.to_str().unwrap(), junit.to_str().unwrap());
    let job = |data: &str| {
        run_job(&[
            "--engine", "duckdb", "--base", "base", "--gate", rules_arg, "--junit", junit_arg, data,
        ])
    };
    // A gate fails: 1, and the report says so.
    let ds_arg = ds.to_str().unwrap();
    assert_eq!(job(ds_arg).0, Some(1));
    assert!(std::fs::read_to_string(&junit)
        .unwrap()
        .contains("failures=\"1\""));
    // The exports by a glob, as by their directory.
    assert_eq!(job(&format!("{ds_arg}/*")).0, Some(1));
    // No such dataset: 3, with a JUnit report in error.
    let (code, out) = job(dir.path().join("nope").to_str().unwrap());
    assert_eq!(code, Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("errors=\"1\"") && xml.contains("no such file"),
        "{xml}"
    );
    assert_ne!(crate::diff::junit_valid(&junit, TEST), Some(false));
    // No baseline capture of that name: 3.
    let (code, _) = run_job(&["--engine", "duckdb", ds_arg, "--base", "nothing"]);
    assert_eq!(code, Some(3));
    // An output that cannot be written: 4.
    let (code, _) = run_job(&[
        "--engine",
        "duckdb",
        ds_arg,
        "--base",
        "base",
        "--out",
        "/proc/nope",
    ]);
    assert_eq!(code, Some(4));
    // --junit without gates, a negative -l: usage errors.
    let (code, _) = run_job(&[ds_arg, "--base", "base", "--junit", junit_arg]);
    assert_eq!(code, Some(2));
    let (code, _) = run_job(&[ds_arg, "--base", "base", "-l", "-1"]);
    assert_eq!(code, Some(2));
    // An export from before figures.parquet: 3, named.
    std::fs::remove_file(ds.join("b-1/figures.parquet")).unwrap();
    let (code, out) = run_job(&["--engine", "duckdb", ds_arg, "--base", "base"]);
    assert_eq!(code, Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("without figures.parquet"));
}

#[test]
fn a_capture_that_is_not_whole_is_said_and_its_boards_gates_are_not_judged() {
    const TEST: &str = "a_capture_that_is_not_whole_is_said_and_its_boards_gates_are_not_judged";
    if !python_has(TEST, "duckdb", "python3 with duckdb (pip install duckdb)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let whole = workload_with(20, 0);
    // Cut inside the data: kmemtrace-export writes what it could read.
    let cut = &whole[..whole.len() * 2 / 3];
    std::fs::create_dir(dir.path().join("ds")).unwrap();
    for (name, bytes) in [("base", &whole[..]), ("good-1", &whole[..]), ("bad-1", cut)] {
        let log = write(dir.path(), &format!("{name}.kmt"), bytes);
        let out = Command::new(common::bin("kmemtrace-export"))
            .arg(&log)
            .args(["--to", "parquet", "-q", "--capture", name, "-o"])
            .arg(dir.path().join("ds").join(name))
            .output()
            .unwrap();
        assert!(matches!(out.status.code(), Some(0 | 5)), "{out:?}");
    }
    let rules = write(
        dir.path(),
        "rules.toml",
        "[[gate]]\nmetric = \"hits\"\nmax_increase = 0\n",
    );
    let ds = dir.path().join("ds");
    let (code, out) = run_job(&[
        ds.to_str().unwrap(),
        "--base",
        "base",
        "--board",
        "^([a-z]+)-",
        "--engine",
        "duckdb",
        "--gate",
        rules.to_str().unwrap(),
        "--json",
        "--junit",
        dir.path().join("fleet.xml").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code, Some(5), "{stderr}");
    assert!(
        stderr.contains("warning: bad-1: it is cut short"),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let board = |n: &str| {
        doc["comparisons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["board"] == n)
            .unwrap()
            .clone()
    };
    let bad = board("bad");
    assert_eq!(bad["gates"], serde_json::json!([]));
    // In JUnit (valid for CI servers): the board's suite has one test case
    // in error.
    let junit = dir.path().join("fleet.xml");
    assert_ne!(crate::diff::junit_valid(&junit, TEST), Some(false));
    let xml = std::fs::read_to_string(&junit).unwrap();
    let suite = xml.split("<testsuite name=\"bad\"").nth(1).unwrap();
    let suite = &suite[..suite.find("</testsuite>").unwrap()];
    assert!(suite.contains("errors=\"1\""), "{suite}");
    assert!(
        suite.contains("<error type=\"kmemtrace-fleet-diff\" message=\"bad-1: it is cut short"),
        "{suite}"
    );
    assert!(bad["not_whole"][0]
        .as_str()
        .unwrap()
        .starts_with("bad-1: it is cut short"));
    let good = board("good");
    assert_eq!(good["gates"][0]["passed"], true, "{good}");
    // kmemtrace-diff says the same capture is not whole.
    let d = Command::new(common::bin("kmemtrace-diff"))
        .arg(dir.path().join("base.kmt"))
        .arg(dir.path().join("bad-1.kmt"))
        .output()
        .unwrap();
    assert_eq!(d.status.code(), Some(5));
}
