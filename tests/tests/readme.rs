//! Every command line of the README's "Typical use" runs as written (on
//! the bundled capture where it names one; recording ones on this kernel,
//! shortened), and does what a reader expects: no usage error, no
//! unusable input, no damage, output where output is promised. Lines that
//! name a machine or a program we do not have get a local stand-in, listed
//! in `STAND_INS`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the README names and the test cannot have, and what runs instead.
const STAND_INS: &[(&str, &str)] = &[
    ("-d 10s", "-d 1s"),
    ("-d 30s", "-d 1s"),
    ("-d 10 ", "-d 1 "),
    ("/usr/lib/debug/lib/modules/6.1.0-50-amd64", "modules"),
    ("make -j8", "sh -c 'ls -R /usr/share/doc >/dev/null'"),
    ("ssh laptop 'cat > board.kmt'", "sh -c 'cat > streamed.kmt'"),
];

/// The README's text.
fn readme() -> String {
    std::fs::read_to_string(common::workspace().join("README.md")).unwrap()
}

/// The fenced block of `lang` after the heading `heading`.
fn block_after(text: &str, heading: &str, lang: &str) -> String {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("README lacks {heading}"));
    let rest = &text[start..];
    let open = format!("```{lang}\n");
    let b = rest
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} after {heading}"))
        + open.len();
    let e = rest[b..].find("```").unwrap();
    rest[b..b + e].to_string()
}

/// The command lines of a shell block: comments and blank lines left out.
fn command_lines(block: &str) -> Vec<String> {
    block
        .lines()
        .map(|l| match l.find("  #") {
            Some(i) => l[..i].trim_end(),
            None => l.trim_end(),
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// What a line must not exit with: usage, unusable input, output error,
/// damage, a failed recording, a command not run, a panic.
const NEVER: &[i32] = &[2, 3, 4, 5, 6, 101, 126, 127];

fn prepared(dir: &Path, text: &str) {
    let data = common::workspace().join("tests/data");
    let sample = data.join("sample-x86_64.kmt");
    for name in [
        "board.kmt",
        "new.kmt",
        "run1.kmt",
        "run2.kmt",
        "run3.kmt",
        "new1.kmt",
        "new2.kmt",
        "new3.kmt",
        "board1.kmt",
        "board2.kmt",
    ] {
        std::fs::copy(&sample, dir.join(name)).unwrap();
    }
    let base = Command::new(common::bin("kmemtrace-report"))
        .arg(&sample)
        .arg("--json")
        .output()
        .unwrap();
    std::fs::write(dir.join("base.json"), base.stdout).unwrap();
    std::fs::write(
        dir.join("gates.toml"),
        block_after(text, "A gates file", "toml"),
    )
    .unwrap();
    let o = Command::new(common::bin("kmemtrace-export"))
        .arg(&sample)
        .arg("-o")
        .arg(dir.join("trace.dat"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(
        common::workspace().join("kmemtraced/kmemtrace-capture.sh"),
        dir.join("kmemtrace-capture.sh"),
    )
    .unwrap();
    // A file with DWARF for `--vmlinux` (its addresses are not the log's
    // kernel's: the call sites come out `??`).
    std::fs::copy(common::bin("kmemtrace-report"), dir.join("vmlinux")).unwrap();
    // ... and a directory with a ".ko" with DWARF for `--modules`.
    std::fs::create_dir(dir.join("modules")).unwrap();
    std::fs::copy(common::bin("kmemtrace-report"), dir.join("modules/kmt.ko")).unwrap();
    std::fs::create_dir(dir.join("dataset")).unwrap();
}

/// `PATH` with the programs under test first.
fn path_with_programs() -> String {
    let bin: PathBuf = common::bin("kmemtrace-report")
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn every_typical_use_line_runs_as_written() {
    let text = readme();
    let lines = command_lines(&block_after(&text, "## Typical use", "sh"));
    assert!(lines.len() >= 20, "{lines:?}");
    let d = tempfile::tempdir().unwrap();
    prepared(d.path(), &text);
    let can_trace = common::tracefs().is_some();
    let mut servers: Vec<std::process::Child> = Vec::new();
    let mut ran = 0;
    for line in &lines {
        let records = line.starts_with("kmemtraced") || line.starts_with("sh kmemtrace-capture.sh");
        if records && !can_trace {
            common::skip(
                "every_typical_use_line_runs_as_written",
                common::Missing::Tracefs,
                &format!("cannot trace here: `{line}` not run"),
            );
            continue;
        }
        let mut cmd = line.clone();
        for (from, to) in STAND_INS {
            cmd = cmd.replace(from, to);
        }
        if cmd.contains("$(pidof postgres)") {
            // Two processes, as a server has, that exit by themselves.
            servers = (0..2)
                .map(|_| Command::new("sleep").arg("2").spawn().unwrap())
                .collect();
            let pids: Vec<String> = servers.iter().map(|c| c.id().to_string()).collect();
            cmd = cmd.replace("$(pidof postgres)", &pids.join(" "));
        }
        let o = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(d.path())
            .env("PATH", path_with_programs())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let code = o.status.code().unwrap_or(-1);
        assert!(!NEVER.contains(&code), "`{line}` exited {code}: {err}");
        assert!(!err.contains("panicked"), "`{line}`: {err}");
        let shows = line.contains("kmemtrace-report")
            || line.contains("kmemtrace-diff")
            || line.contains("kmemtrace-check");
        if shows && !line.contains('>') && !line.contains("--html") {
            assert!(!o.stdout.is_empty(), "`{line}` printed nothing");
        }
        ran += 1;
    }
    for s in &mut servers {
        let _ = s.wait();
    }
    assert!(ran >= 15, "{ran} lines ran");
    // What the lines promised is there.
    for f in [
        "report.json",
        "board.html",
        "board.dat",
        "board.pftrace",
        "junit.xml",
    ] {
        assert!(d.path().join(f).is_file(), "{f} was written");
    }
    assert!(d
        .path()
        .join("dataset/board1/slab_events.parquet")
        .is_file());
    if can_trace {
        for f in [
            "boot.kmt",
            "make.kmt",
            "db.kmt",
            "streamed.kmt",
            "slab.kmt",
            "dump.tar.gz",
        ] {
            assert!(d.path().join(f).is_file(), "{f} was recorded");
        }
    }
    // The DuckDB example, with what the README tells users to install.
    let py = block_after(&text, "The Parquet dataset with DuckDB", "python");
    let o = Command::new("python3")
        .args(["-c", &py])
        .current_dir(d.path())
        .output();
    match o {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'duckdb'") => {
            common::skip(
                "every_typical_use_line_runs_as_written",
                common::Missing::Tool,
                "python3 has no duckdb: the README's DuckDB example not run",
            );
        }
        Ok(o) => {
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert!(
                out.contains("call_site_sym") && out.contains("bytes"),
                "{out}"
            );
        }
        Err(e) => panic!("python3: {e}"),
    }
}

#[test]
fn the_readme_stays_short() {
    let n = readme().len();
    assert!(
        n <= 16 * 1024,
        "README.md is {n} bytes: figures go to docs/"
    );
}

/// `[workspace.package]`'s `key = "value"` in Cargo.toml.
/// The README's table of exit codes names every code of the programs'
/// one table, and nothing the table lacks but the capture script's
/// signal codes.
#[test]
fn the_readmes_exit_codes_are_the_one_table() {
    let text = readme();
    let start = text
        .find("## Exit status")
        .expect("README lacks ## Exit status");
    let mut codes: Vec<u8> = text[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| code |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            l.split('|').nth(1).unwrap().split(',').map(move |c| {
                c.trim()
                    .parse::<u8>()
                    .unwrap_or_else(|_| panic!("a code in {l}"))
            })
        })
        .collect();
    let signals = codes.split_off(codes.partition_point(|&c| c < 128));
    let table: Vec<u8> = kmemtrace_cli::exit::ALL.iter().map(|c| c.code).collect();
    assert_eq!(codes, table, "the README's exit codes");
    assert_eq!(
        signals,
        [128 + 1, 128 + 2, 128 + 15],
        "SIGHUP, SIGINT, SIGTERM"
    );
}

fn workspace_value(key: &str) -> String {
    let toml = std::fs::read_to_string(common::workspace().join("Cargo.toml")).unwrap();
    toml.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("Cargo.toml has no {key}"))
        .to_string()
}

#[test]
fn the_stated_minimum_rust_is_what_the_locked_dependencies_need() {
    let stated = workspace_value("rust-version");
    // This host's dependencies only: offline, a fresh machine's package
    // cache holds none of the crates other systems need (android-tzdata).
    let host = String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host");
    let o = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(common::workspace())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().unwrap_or(0)).collect() };
    let needed = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["rust_version"].as_str()?, p["name"].as_str()?)))
        .max_by_key(|(v, _)| version(v))
        .unwrap();
    assert!(
        version(&stated) >= version(needed.0),
        "rust-version {stated}, but {} needs {}",
        needed.1,
        needed.0
    );
    assert!(readme().contains(&format!("Rust {stated} or later")));
}

#[test]
fn the_readme_says_what_ci_installs_and_the_project_has_its_licences() {
    let ci = std::fs::read_to_string(common::workspace().join(".ci/run")).unwrap();
    let text = readme();
    // `need+=(PACKAGE)` and pip's packages.
    let mut packages: Vec<&str> = ci
        .split("need+=(")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .collect();
    packages.extend(["perfetto", "protobuf", "duckdb", "pyspark"]);
    assert!(packages.len() >= 9, "{packages:?}");
    for p in packages {
        assert!(text.contains(p), "README does not say .ci/run installs {p}");
    }
    let license = workspace_value("license");
    assert_eq!(license, "MIT OR Apache-2.0");
    for f in ["LICENSE-MIT", "LICENSE-APACHE", "CHANGELOG.md"] {
        let t = std::fs::read_to_string(common::workspace().join(f)).unwrap();
        assert!(t.len() > 500, "{f}");
    }
}
