//! kmemtrace-diff: a capture with a known extra loop against its baseline,
//! from logs and from stored report documents; gates and their exit codes;
//! noise from several baseline captures; one baseline against many boards;
//! JUnit checked against the schema CI servers read; captures of this
//! kernel with N more pipes; foreign kernels compared by symbol.

use crate::raw::{gunzip, text_totals};
use crate::synthetic::Synth;
use crate::{common, report_json, temp_log};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// 400 kmalloc/kfree pairs from `alloc_a` over 0.8 s, and `extra` more
/// 192-byte kmallocs from `alloc_b`, freed on the other CPU.
fn workload(extra: u64) -> Vec<u8> {
    workload_with(extra, 0)
}

/// [`workload`], with the first `double_frees` alloc_b objects freed twice.
pub(crate) fn workload_with(extra: u64, double_frees: u64) -> Vec<u8> {
    let mut s = Synth::new("6.18.44");
    let mut ts = 1_000_000_000u64;
    let mut ptr = 0xffff_8880_1000_0000u64;
    for i in 0..400u64 {
        ts += 2_000_000;
        s.kmalloc((i % 2) as u32, ts, 100, "alloc_a", ptr, 100, 128);
        s.kfree((i % 2) as u32, ts + 1_000, 100, "free_a", ptr);
        ptr += 0x80;
    }
    for i in 0..extra {
        ts += 1_000;
        s.kmalloc(0, ts, 100, "alloc_b", ptr, 160, 192);
        s.kfree(1, ts + 500, 100, "free_b", ptr);
        if i < double_frees {
            s.kfree(1, ts + 700, 100, "free_b", ptr);
        }
        ptr += 0x100 + i % 2 * 0x40;
    }
    s.build()
}

/// `kmemtrace-diff ARGS... MORE...`, its output.
pub(crate) fn diff(args: &[&Path], more: &[&str]) -> Output {
    Command::new(common::bin("kmemtrace-diff"))
        .args(args)
        .args(more)
        .output()
        .unwrap()
}

/// `kmemtrace-diff BASE NEW --gate RULES EXTRA...`: exit status, stdout.
fn gated(base: &Path, new: &Path, rules: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["--gate", rules.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = diff(&[base, new], &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code(), format!("{stdout}{stderr}"))
}

fn diff_json(base: &Path, new: &Path) -> Value {
    common::json_stdout(
        Command::new(common::bin("kmemtrace-diff"))
            .arg(base)
            .arg(new)
            .arg("--json"),
    )
}

fn change<'a>(c: &'a Value, scope: &str, name: &str, metric: &str) -> Option<&'a Value> {
    c["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scope"] == scope && c["name"] == name && c["metric"] == metric)
}

fn rules(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

fn stored_report(log: &Path) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
    let v = report_json(log, &[]);
    std::io::Write::write_all(&mut f, v.to_string().as_bytes()).unwrap();
    f
}

#[test]
fn an_extra_loop_is_named_with_its_size_from_logs_and_from_reports() {
    let base = temp_log(&workload(0));
    let new = temp_log(&workload(250));
    let d = diff_json(base.path(), new.path());
    assert_eq!(d["schema"], "kmemtrace-diff/1");
    let c = &d["comparisons"][0];
    assert_eq!(c["new_callsites"], serde_json::json!(["alloc_b"]));
    let hits = change(c, "callsite", "alloc_b", "hits").unwrap();
    assert_eq!(
        (hits["base"].clone(), hits["new"].as_u64()),
        (Value::Null, Some(250))
    );
    let total = change(c, "total", "total", "hits").unwrap();
    assert_eq!(
        (total["base"].as_u64(), total["new"].as_u64()),
        (Some(400), Some(650))
    );
    assert_eq!(total["delta"], 250);
    assert_eq!(total["pct"], 62.5);
    assert_eq!(
        change(c, "total", "total", "bytes").unwrap()["delta"],
        250 * 192
    );
    assert_eq!(
        change(c, "total", "total", "cross_cpu_frees").unwrap()["delta"],
        250
    );
    assert_eq!(
        change(c, "cache", "kmalloc-192", "hits").unwrap()["delta"],
        250
    );
    // The fragmentation of the totals, from the added-up bytes.
    let frag = change(c, "total", "total", "frag_pct").unwrap();
    let want = 100.0 - 100.0 * (400.0 * 100.0 + 250.0 * 160.0) / (400.0 * 128.0 + 250.0 * 192.0);
    assert!(
        (frag["new"].as_f64().unwrap() - want).abs() < 1e-9,
        "{frag}"
    );
    // alloc_a did not change; the largest change comes first.
    assert!(change(c, "callsite", "alloc_a", "hits").is_none());
    assert_eq!(c["changes"][0]["delta"], 250 * 192);
    // Rates per second of capture: 400 allocations in 0.8 s.
    let r = total["base_per_s"].as_f64().unwrap();
    let secs = d["base"]["seconds"].as_f64().unwrap();
    assert!((r - 400.0 / secs).abs() < 1e-6, "{r} {secs}");

    // The same from stored report documents.
    let (jb, jn) = (stored_report(base.path()), stored_report(new.path()));
    let from_json = diff_json(jb.path(), jn.path());
    assert_eq!(from_json["comparisons"][0]["changes"], c["changes"]);

    // -s pct puts the new call site (an infinite change) first; -m keeps
    // only the metrics asked for.
    let by_pct = common::json_stdout(
        Command::new(common::bin("kmemtrace-diff"))
            .args([base.path(), new.path()])
            .args(["--json", "-s", "pct", "-m", "hits,req"]),
    );
    let ch = by_pct["comparisons"][0]["changes"].as_array().unwrap();
    assert!(ch
        .iter()
        .all(|c| c["metric"] == "hits" || c["metric"] == "req"));
    assert_eq!(
        (ch[0]["name"].as_str(), ch[0]["pct"].is_null()),
        (Some("alloc_b"), true)
    );

    // A capture against itself: nothing changed.
    let same = diff_json(base.path(), base.path());
    assert_eq!(same["comparisons"][0]["changes"], serde_json::json!([]));
}

#[test]
fn gates_fail_with_exit_1_and_their_figures_and_hold_on_the_same_workload() {
    let base = temp_log(&workload(100));
    let more = temp_log(&workload(150));
    let same = temp_log(&workload(100));
    let r = rules(
        "# release gates\n\
         [[gate]]\n\
         name = \"alloc_b grows\"\n\
         metric = \"hits\"\n\
         callsite = \"alloc_?\"\n\
         max_increase_pct = 20\n\
         \n\
         [[gate]]\n\
         metric = \"misuse:double_free\"\n\
         max = 0\n\
         [[gate]]\n\
         metric = \"hits\"\n\
         cache = \"kmalloc-1*\"\n\
         max_increase = 100\n",
    );
    let (code, text) = gated(base.path(), more.path(), r.path(), &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("Gates: 1 of 3 failed"), "{text}");
    assert!(
        text.contains("FAIL  alloc_b grows  (rules line 4)"),
        "{text}"
    );
    assert!(
        text.contains("alloc_b: 100 -> 150: increase 50.0% > 20%"),
        "{text}"
    );
    // The JSON has each gate's rows.
    let json = |new: &Path| {
        let (code, out) = gated(base.path(), new, r.path(), &["--json"]);
        (code, serde_json::from_str::<Value>(&out).unwrap())
    };
    let (code, d) = json(more.path());
    assert_eq!(code, Some(1));
    let g = &d["comparisons"][0]["gates"];
    assert_eq!(d["gates_failed"], 1);
    let checked = g[0]["checked"].as_array().unwrap();
    let names: Vec<&str> = checked
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alloc_a", "alloc_b"]);
    assert_eq!(checked[1]["breaches"].as_array().unwrap().len(), 1);
    assert_eq!(g[1]["passed"], true);
    assert_eq!(
        g[2]["passed"], true,
        "kmalloc-128 and -192 grew by 0 and 50"
    );
    // The same workload twice passes every gate.
    let (code, text) = gated(base.path(), same.path(), r.path(), &[]);
    assert_eq!(code, Some(0), "{text}");
    // Misuse: the total's certain count, and per call site every
    // occurrence whose object was allocated there.
    let twice = temp_log(&workload_with(100, 3));
    let (code, d) = json(twice.path());
    assert_eq!(code, Some(1));
    let c = &d["comparisons"][0];
    assert_eq!(
        change(c, "total", "total", "misuse:double_free").unwrap()["delta"],
        3
    );
    assert_eq!(
        change(c, "callsite", "alloc_b", "misuse:double_free").unwrap()["new"],
        3
    );
    assert_eq!(c["gates"][1]["checked"][0]["new"], 3);
    assert_eq!(c["gates"][1]["passed"], false);
    // A pattern that matches nothing is a typo unless allowed.
    let typo = "[[gate]]\nmetric = \"hits\"\ncallsite = \"alloc_pipe*\"\nmax = 0\n";
    let (code, text) = gated(base.path(), same.path(), rules(typo).path(), &[]);
    assert_eq!(code, Some(1));
    assert!(text.contains("no row matched in either capture"), "{text}");
    let allowed = rules(&format!("{typo}allow_no_match = true\n"));
    assert_eq!(
        gated(base.path(), same.path(), allowed.path(), &[]).0,
        Some(0)
    );
    // A call site the baseline lacks breaks an increase limit.
    let none = temp_log(&workload(0));
    let (code, text) = gated(none.path(), more.path(), r.path(), &[]);
    assert_eq!(code, Some(1));
    assert!(
        text.contains("alloc_b: - -> 150: from none to 150"),
        "{text}"
    );
}

#[test]
fn a_bad_rule_exits_2_naming_its_line_and_why() {
    let base = temp_log(&workload(0));
    for (text, line, why) in [
        (
            "[[gate]]\nmetric = \"hitz\"\nmax = 1\n",
            2,
            "metric \"hitz\" is not known",
        ),
        ("[[gate]]\nmetric = \"hits\"\n", 2, "the rule has no limit"),
        (
            "[[gate]]\nmetric = \"hits\"\nmax = 1\nmetirc = \"x\"\n",
            4,
            "unknown field `metirc`",
        ),
        (
            "[[gate]]\nmetric = \"hits\"\ncallsite = \"a\"\ncache = \"b\"\nmax = 1\n",
            4,
            "one of callsite",
        ),
        (
            "\n[[gate]]\nmetric = \"req\"\npage_callsite = \"x\"\nmax = 1\n",
            3,
            "no figure per page_callsite",
        ),
        (
            "[[gate]]\nmetric = \"live_bytes\"\nper_second = true\nmax = 1\n",
            2,
            "no rate per second",
        ),
        (
            "[[gate]]\nmetric = \"hits\"\nmax_increase_pct = -5\n",
            3,
            "0 or more",
        ),
        (
            "[[gate]]\nmetric = \"misuse:double_fre\"\nmax = 0\n",
            2,
            "is not known",
        ),
        ("[[gate]]\nmetric = hits\n", 2, ""),
        ("[[gates]]\nmetric = \"hits\"\n", 1, "unknown field `gates`"),
        (
            "[[gate]]\nmetric = \"hits\"\ncallsite = \"alloc_a+0x10\"\nmax = 1\n",
            3,
            "leave out the +0x offset",
        ),
        (
            "[[gate]]\nmetric = \"hits\"\norder = 11\nmax = 1\n",
            3,
            "order is a number, 0 to 10",
        ),
    ] {
        let r = rules(text);
        let out = diff(
            &[base.path(), base.path()],
            &["--gate", r.path().to_str().unwrap()],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(&format!(" line {line}: ")), "{text}: {err}");
        assert!(err.contains(why), "{text}: {err}");
    }
    let empty = rules("# nothing\n");
    let out = diff(
        &[base.path(), base.path()],
        &["--gate", empty.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [[gate]] rule"));
    // Bad options are usage errors too.
    let out = diff(&[base.path(), base.path()], &["-s", "size"]);
    assert_eq!(out.status.code(), Some(2));
    let out = diff(&[base.path()], &[]);
    assert_eq!(out.status.code(), Some(2));
    // A metric that names none is refused, not shown as "no change".
    let out = diff(&[base.path(), base.path()], &["-m", "hits,nosuchmetric"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"nosuchmetric\" matches none"));
    let out = diff(&[base.path(), base.path()], &["-m", "misuse:*"]);
    assert_eq!(out.status.code(), Some(0));
    // Standard input once, a log or a report document.
    let out = diff(&[Path::new("-"), Path::new("-")], &[]);
    assert_eq!(out.status.code(), Some(2));
    let document = stored_report(base.path());
    for input in [base.path(), document.path()] {
        let out = Command::new(common::bin("kmemtrace-diff"))
            .args([Path::new("-"), base.path()])
            .stdin(std::fs::File::open(input).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{}: {err}", input.display());
    }
}

/// A capture cut short (no END block), damaged, or without kmem events
/// is said; a gate cannot stand on it: exit 3, and a JUnit error.
#[test]
fn a_gate_does_not_stand_on_a_partial_capture() {
    let whole = workload(0);
    let base = temp_log(&whole);
    let cut = temp_log(&whole[..whole.len() * 3 / 4]);
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("j.xml");
    let r = rules("[[gate]]\nmetric = \"hits\"\nmax_increase_pct = 50\n");
    let args = [
        "--gate",
        r.path().to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ];
    let out = diff(&[base.path(), cut.path()], &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "damaged input: {err}");
    assert!(
        err.contains("cannot gate on") && err.contains("cut short"),
        "{err}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<error") && xml.contains("cut short"), "{xml}");
    // The same gate on the whole capture holds.
    assert_eq!(
        diff(&[base.path(), base.path()], &args).status.code(),
        Some(0)
    );
    // Without a gate: compared, with a warning, and exit 5 all the same.
    let out = diff(&[base.path(), cut.path()], &[]);
    assert_eq!(out.status.code(), Some(5));
    assert!(!out.stdout.is_empty(), "compared");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("cut short"),
        "{err}"
    );
}

#[test]
fn unusable_input_exits_3() {
    let base = temp_log(&workload(0));
    let mut bad = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut bad, b"{\"not\": \"a report\"}").unwrap();
    let out = diff(&[base.path(), bad.path()], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kmemtrace-report schema"));
    let out = diff(&[base.path(), Path::new("/nonexistent.kmt")], &[]);
    assert_eq!(out.status.code(), Some(3));
    // A document cut with -l would make the rest look vanished.
    let mut cut = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
    let v = report_json(base.path(), &["-l", "1"]);
    assert_eq!(v["lines"], 1);
    std::io::Write::write_all(&mut cut, v.to_string().as_bytes()).unwrap();
    let out = diff(&[base.path(), cut.path()], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("made with -l 1"));
    // Another schema's meanings are not this version's.
    let mut v2 = report_json(base.path(), &[]);
    v2["schema"] = "kmemtrace-report/2".into();
    let mut later = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
    std::io::Write::write_all(&mut later, v2.to_string().as_bytes()).unwrap();
    let out = diff(&[base.path(), later.path()], &[]);
    assert_eq!(out.status.code(), Some(3));
    // With --junit, CI gets a report in error rather than none.
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("j.xml");
    let r = rules("[[gate]]\nmetric = \"hits\"\nmax = 1\n");
    let out = diff(
        &[base.path(), later.path()],
        &[
            "--gate",
            r.path().to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("errors=\"1\"") && xml.contains("<error "),
        "{xml}"
    );
    if junit_valid(&junit, "unusable_input_exits_3") == Some(false) {
        panic!("invalid JUnit:\n{xml}");
    }
    // Mistyped options too (errors of the option parser's own), with
    // either spelling of --junit.
    let gate = r.path().to_str().unwrap();
    let spaced = dir.path().join("spaced.xml");
    let joined = dir.path().join("joined.xml");
    let joined_arg = format!("--junit={}", joined.display());
    for (xml_path, args, typo) in [
        (
            &spaced,
            vec![
                "--gate",
                gate,
                "--junit",
                spaced.to_str().unwrap(),
                "--gates-typo",
            ],
            "--gates-typo",
        ),
        (
            &joined,
            vec!["--gate", gate, &joined_arg, "-l", "many"],
            "many",
        ),
    ] {
        let out = diff(&[base.path(), later.path()], &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let xml = std::fs::read_to_string(xml_path).unwrap();
        assert!(xml.contains("<error ") && xml.contains(typo), "{xml}");
        if junit_valid(xml_path, "unusable_input_exits_3") == Some(false) {
            panic!("invalid JUnit:\n{xml}");
        }
    }
}

#[test]
fn changes_inside_the_baselines_spread_are_not_flagged() {
    let runs: Vec<_> = [100, 104, 97]
        .iter()
        .map(|&n| temp_log(&workload(n)))
        .collect();
    let inside = temp_log(&workload(102));
    let outside = temp_log(&workload(130));
    let r = rules("[[gate]]\nmetric = \"hits\"\ncallsite = \"alloc_b\"\nmax_increase_pct = 1\n");
    let run = |new: &Path| {
        let mut c = Command::new(common::bin("kmemtrace-diff"));
        c.arg("--base").args(runs.iter().map(|r| r.path()));
        c.arg("--new").arg(new);
        c.args(["--gate", r.path().to_str().unwrap(), "--json"]);
        c.output().unwrap()
    };
    let out = run(inside.path());
    // 102 is 2% above the median (100) but inside 97..104: not flagged,
    // and the 1% gate holds.
    assert_eq!(out.status.code(), Some(0));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &d["comparisons"][0];
    let hits = change(c, "callsite", "alloc_b", "hits").unwrap();
    assert_eq!(hits["base"], 100);
    assert_eq!(hits["base_spread"], serde_json::json!([97, 104]));
    assert_eq!(hits["outside_noise"], false);
    assert!(c["within_noise"].as_u64().unwrap() > 0);
    let out = run(outside.path());
    assert_eq!(out.status.code(), Some(1));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hits = change(&d["comparisons"][0], "callsite", "alloc_b", "hits").unwrap();
    assert_eq!(
        (hits["new"].as_u64(), hits["outside_noise"].as_bool()),
        (Some(130), Some(true))
    );
    // The table leaves the noise out unless --all.
    let text = |extra: &[&str]| {
        let mut c = Command::new(common::bin("kmemtrace-diff"));
        c.arg("--base").args(runs.iter().map(|r| r.path()));
        c.arg("--new").arg(inside.path()).args(extra);
        String::from_utf8(c.output().unwrap().stdout).unwrap()
    };
    let quiet = text(&[]);
    assert!(
        quiet.contains("inside the baseline's own spread not shown"),
        "{quiet}"
    );
    assert!(!quiet.contains("alloc_b "), "{quiet}");
    assert!(text(&["--all"]).contains("97..104 (noise)"));
}

/// Validates `xml` with xmllint against the JUnit schema; `None` (after
/// saying so) where xmllint is missing.
pub(crate) fn junit_valid(xml: &Path, test: &str) -> Option<bool> {
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/report/data/junit.xsd");
    match Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&xsd)
        .arg(xml)
        .output()
    {
        Ok(o) => Some(o.status.success()),
        Err(_) => {
            common::skip(
                test,
                common::Missing::Tool,
                "xmllint (libxml2-utils) is not installed",
            );
            None
        }
    }
}

#[test]
fn one_baseline_many_boards_one_summary_and_one_junit_file() {
    let test = "one_baseline_many_boards_one_summary_and_one_junit_file";
    let base = temp_log(&workload(100));
    let stored = stored_report(base.path());
    let good = temp_log(&workload(105));
    let bad = temp_log(&workload(200));
    let r = rules(
        "[[gate]]\nname = \"alloc_b <& 20%\"\nmetric = \"hits\"\ncallsite = \"alloc_b\"\nmax_increase_pct = 20\n\
         [[gate]]\nmetric = \"live_bytes\"\nmax = 0\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let out = Command::new(common::bin("kmemtrace-diff"))
        .arg("--base")
        .args([stored.path(), good.path(), bad.path()])
        .args(["--gate", r.path().to_str().unwrap()])
        .arg("--junit")
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.split("Summary:").nth(1).expect("a summary table");
    let good_name = good.path().display().to_string();
    let bad_name = bad.path().display().to_string();
    let row = |name: &str| {
        summary
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    assert!(row(&good_name).ends_with("2 passed"), "{summary}");
    assert!(row(&bad_name).ends_with("1 of 2 FAILED"), "{summary}");

    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 2, "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 4);
    assert_eq!(xml.matches("<failure ").count(), 1);
    assert!(xml.contains("<testsuites name=\"kmemtrace-diff\" tests=\"4\" failures=\"1\""));
    assert!(xml.contains("name=\"alloc_b &lt;&amp; 20%\""), "{xml}");
    assert!(
        xml.contains("alloc_b: 100 -&gt; 200: increase 100.0% &gt; 20%"),
        "{xml}"
    );
    if junit_valid(&junit, test) != Some(true) {
        assert!(junit_valid(&junit, test).is_none(), "invalid JUnit:\n{xml}");
        return;
    }
    // The check can fail: a test case without its name is refused.
    let broken = dir.path().join("broken.xml");
    std::fs::write(
        &broken,
        xml.replacen("<testcase name=", "<testcase title=", 1),
    )
    .unwrap();
    assert_eq!(junit_valid(&broken, test), Some(false));
}

fn record_pipes(dir: &Path, name: &str, pipes: u32) -> PathBuf {
    let out = dir.join(format!("{name}.kmt"));
    let script = format!(
        "import os\nfor i in range({pipes}):\n    r, w = os.pipe()\n    os.close(r)\n    os.close(w)\n"
    );
    let st = Command::new(common::bin("kmemtraced"))
        .args(["-F", "-o"])
        .arg(&out)
        .args(["--", "python3", "-c", &script])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

#[test]
fn captures_of_this_kernel_with_more_pipes_name_alloc_pipe_info() {
    let test = "captures_of_this_kernel_with_more_pipes_name_alloc_pipe_info";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    if Command::new("python3").arg("-V").output().is_err() {
        common::skip(test, common::Missing::Tool, "python3 is not installed");
        return;
    }
    const PIPES: u32 = 200;
    const EXTRA: u32 = 300;
    let dir = tempfile::tempdir().unwrap();
    let base = record_pipes(dir.path(), "base", PIPES);
    let again = record_pipes(dir.path(), "again", PIPES);
    let more = record_pipes(dir.path(), "more", PIPES + EXTRA);
    let r = rules(
        "[[gate]]\nmetric = \"hits\"\ncallsite = \"alloc_pipe_info*\"\nmax_increase_pct = 20\n",
    );
    let gate = ["--gate", r.path().to_str().unwrap(), "--json"];
    let out = diff(&[&base, &more], &gate);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &d["comparisons"][0];
    // alloc_pipe_info() allocates twice per pipe: the pipe_inode_info
    // (kzalloc) and its buffer array (kcalloc); one inode per pipe.
    let delta = |scope: &str, name: &str| {
        change(c, scope, name, "hits").map_or(0, |ch| ch["delta"].as_i64().unwrap())
    };
    assert_eq!(
        delta("callsite", "alloc_pipe_info"),
        2 * i64::from(EXTRA),
        "{c}"
    );
    assert_eq!(delta("callsite", "alloc_inode"), i64::from(EXTRA));
    // The size classes it uses grow by as much (pipe_inode_info is 192
    // bytes on x86_64; 16 pipe_buffers of 40 bytes, kmalloc-1k), give or
    // take what python's own work puts there (within 5%).
    let mut classes = 0;
    for row in report_json(&more, &["--callsite", "alloc_pipe_info*"])["size_classes"]
        .as_array()
        .unwrap()
    {
        let name = row["name"].as_str().unwrap();
        let d = delta("cache", name);
        assert!(
            (d - i64::from(EXTRA)).abs() <= i64::from(EXTRA) / 20,
            "{name}: {d}"
        );
        classes += 1;
    }
    assert!(classes >= 1);
    let failed = &c["gates"][0];
    assert_eq!(failed["passed"], false);
    // A log and its stored report give the same figures: the recorder's
    // own threads and the traced tree are selected as the report does.
    let stored = stored_report(&base);
    let d = common::json_stdout(
        Command::new(common::bin("kmemtrace-diff"))
            .arg(stored.path())
            .arg(&base)
            .arg("--json"),
    );
    assert_eq!(d["comparisons"][0]["changes"], serde_json::json!([]));
    // The same workload twice passes.
    let out = diff(&[&base, &again], &gate);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn foreign_kernels_compare_by_function_as_their_own_text_counts() {
    let test = "foreign_kernels_compare_by_function_as_their_own_text_counts";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut logs = Vec::new();
    let mut want = Vec::new();
    for arch in ["armhf", "s390x"] {
        logs.push(crate::foreign::import(
            &data.join(arch).join("raw"),
            dir.path(),
            arch,
        ));
        // Allocation hits per function, from the kernel's own text.
        let mut by_fn: BTreeMap<String, u64> = BTreeMap::new();
        for (site, t) in text_totals(&gunzip(&data.join(arch).join("trace.txt.gz"))) {
            if t.hits > 0 {
                // By function, compiler suffixes and _noprof off, as the
                // diff compares kernels built differently.
                let f = site.split("+0x").next().unwrap();
                let f = f.split('.').next().unwrap();
                let f = f.strip_suffix("_noprof").unwrap_or(f).to_string();
                *by_fn.entry(f).or_insert(0) += t.hits;
            }
        }
        want.push(by_fn);
    }
    let d = diff_json(&logs[0], &logs[1]);
    let c = &d["comparisons"][0];
    let kernels: Vec<&str> = [&d["base"], &c["new"]]
        .iter()
        .map(|s| s["captures"][0]["kernel"].as_str().unwrap())
        .collect();
    assert!(
        kernels[0].ends_with("armv7l") && kernels[1].ends_with("s390x"),
        "{kernels:?}"
    );
    let mut common_sites = 0;
    for (f, &b) in &want[0] {
        let n = want[1].get(f).copied();
        let ch = change(c, "callsite", f, "hits");
        match (n, ch) {
            (Some(n), Some(ch)) => {
                common_sites += 1;
                assert_eq!(
                    (ch["base"].as_u64(), ch["new"].as_u64()),
                    (Some(b), Some(n)),
                    "{f}"
                );
            }
            (Some(n), None) => {
                common_sites += 1;
                assert_eq!(n, b, "{f} unchanged");
            }
            (None, _) => assert!(
                c["vanished_callsites"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v == f.as_str()),
                "{f}"
            ),
        }
    }
    assert!(
        common_sites > 10,
        "only {common_sites} functions on both kernels"
    );
    for f in want[1].keys().filter(|f| !want[0].contains_key(*f)) {
        assert!(
            c["new_callsites"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == f.as_str()),
            "{f}"
        );
    }
}
