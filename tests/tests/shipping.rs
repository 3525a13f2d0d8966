//! Shipping: man pages and shell completions that say what `--help` says,
//! `--version` naming the formats, and the Debian package installed and
//! removed on this machine.

mod common;

use common::{bin, skip, workspace, Missing};
use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAMS: [&str; 5] = [
    "kmemtraced",
    "kmemtrace-report",
    "kmemtrace-check",
    "kmemtrace-diff",
    "kmemtrace-export",
];

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The long options `--help` defines: the first `--name` of each line
/// that starts with an option (not those its prose mentions). clap and
/// argparse indent an option by two spaces (clap six where it has no short
/// form) and wrap its prose deeper, where a wrapped line may begin with an
/// option that prose names.
fn long_options(help: &str) -> Vec<String> {
    const OPTION_INDENT_MAX: usize = 6;
    let mut out: Vec<String> = help
        .lines()
        .filter(|l| l.len() - l.trim_start().len() <= OPTION_INDENT_MAX)
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            let at = l.find("--")?;
            let name: String = l[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn bin_dir() -> PathBuf {
    bin("kmemtraced").parent().unwrap().to_path_buf()
}

#[test]
fn man_pages_and_completions_carry_every_option_of_help() {
    let out = tempfile::tempdir().unwrap();
    run(
        Command::new(workspace().join("scripts/man-and-completions.sh"))
            .arg(bin_dir())
            .arg(out.path()),
    );
    let read =
        |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let job = workspace().join("kmemtrace-diff/fleet/kmemtrace_fleet_diff.py");
    for p in PROGRAMS.iter().chain(&["kmemtrace-fleet-diff"]) {
        let help = if *p == "kmemtrace-fleet-diff" {
            run(Command::new("python3").arg(&job).arg("--help"))
        } else {
            run(Command::new(bin(p)).arg("--help"))
        };
        let options = long_options(&help);
        assert!(
            options.iter().any(|o| o == "help") && options.len() > 3,
            "{p}: {options:?}"
        );
        let man = read(out.path().join(format!("man/man1/{p}.1")));
        assert!(man.contains(&format!(".TH {p} 1")), "{p}'s man page: {man}");
        let bash = read(out.path().join(format!("completions/bash/{p}")));
        let zsh = read(out.path().join(format!("completions/zsh/_{p}")));
        let fish = read(out.path().join(format!("completions/fish/{p}.fish")));
        for o in &options {
            let roff = format!("\\-\\-{}", o.replace('-', "\\-"));
            assert!(man.contains(&roff), "{p}: --{o} not in its man page");
            assert!(bash.contains(&format!("--{o}")), "{p}: --{o} not in bash's");
            assert!(zsh.contains(&format!("--{o}")), "{p}: --{o} not in zsh's");
            assert!(
                fish.contains(&format!("-l {o}")),
                "{p}: --{o} not in fish's"
            );
        }
        // The man page's NAME line is the help's first line (roff escapes
        // its quotes: its first two words suffice).
        // (argparse's help starts with the usage, then the description.)
        let about = match help.strip_prefix("usage: ") {
            Some(rest) => rest.split("\n\n").nth(1).unwrap().lines().next().unwrap(),
            None => help.lines().next().unwrap(),
        };
        let first_words: Vec<&str> = about
            .split_whitespace()
            .take(2)
            .map(|w| w.trim_end_matches(|c: char| !c.is_alphanumeric()))
            .collect();
        let first_words = first_words.join(" ");
        assert!(
            man.contains(&first_words),
            "{p}: {first_words:?} not in its man page"
        );
    }
    // An unknown shell is a usage error.
    let o = Command::new(bin("kmemtrace-report"))
        .args(["--generate-completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn version_names_the_formats_read_and_written() {
    for p in PROGRAMS {
        let v = run(Command::new(bin(p)).arg("--version"));
        let first = v.lines().next().unwrap();
        assert!(first.starts_with(&format!("{p} 0.")), "{v}");
        let reads = v.lines().find(|l| l.starts_with("reads: "));
        let writes = v.lines().find(|l| l.starts_with("writes: "));
        if p == "kmemtraced" {
            // What --import reads: other tools' captures, not logs.
            let r = reads.unwrap_or_else(|| panic!("{p}: {v}"));
            assert!(
                r.contains("trace.dat 6-7") && r.contains("dumps") && !r.contains("kmemtrace log"),
                "{v}"
            );
        } else {
            let r = reads.unwrap_or_else(|| panic!("{p}: {v}"));
            assert!(
                r.contains("kmemtrace log 1.0-1.") && r.contains("trace.dat 6-7"),
                "{v}"
            );
        }
        if p != "kmemtrace-check" {
            assert!(writes.is_some(), "{p}: {v}");
        }
    }
    let v = run(Command::new(bin("kmemtraced")).arg("--version"));
    assert!(v.contains("writes: kmemtrace log 1.3"), "{v}");
    let v = run(Command::new(bin("kmemtrace-export")).arg("--version"));
    assert!(
        v.contains("trace.dat 6-7") && v.contains("Parquet (kmemtrace-parquet/"),
        "{v}"
    );
    // -V stays one line.
    let v = run(Command::new(bin("kmemtrace-report")).arg("-V"));
    assert_eq!(v.lines().count(), 1, "{v}");
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Removes the package however the test ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["-r", "kmemtrace"]).output();
    }
}

#[test]
fn the_debian_package_installs_and_removes_cleanly() {
    const TEST: &str = "the_debian_package_installs_and_removes_cleanly";
    for tool in ["dpkg", "dpkg-deb", "objdump", "man"] {
        if !have(tool) {
            return skip(
                TEST,
                Missing::Tool,
                &format!("no {tool} (Debian: dpkg, binutils, man-db)"),
            );
        }
    }
    if !nix_is_root() {
        return skip(TEST, Missing::Machine, "dpkg -i needs root");
    }
    if Command::new("dpkg")
        .args(["-s", "kmemtrace"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return skip(
            TEST,
            Missing::Machine,
            "a kmemtrace package is installed already",
        );
    }
    let out = tempfile::tempdir().unwrap();
    let deb = run(Command::new(workspace().join("scripts/deb.sh"))
        .arg(bin_dir())
        .arg(out.path()));
    let deb = Path::new(deb.trim());
    assert!(deb.exists(), "{}", deb.display());
    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(deb));
    for want in [
        "./usr/bin/kmemtraced",
        "./usr/share/kmemtrace/kmemtrace-capture.sh",
        "./usr/share/kmemtrace/kmemtrace_fleet_diff.py",
        "./usr/bin/kmemtrace-fleet-diff -> ../share/kmemtrace/kmemtrace_fleet_diff.py",
        "./usr/share/man/man1/kmemtrace-report.1.gz",
        "./usr/share/bash-completion/completions/kmemtrace-diff",
        "./usr/share/zsh/vendor-completions/_kmemtrace-check",
        "./usr/share/fish/vendor_completions.d/kmemtrace-export.fish",
        "./usr/share/doc/kmemtrace/FORMAT.md",
        "./usr/share/doc/kmemtrace/kmemtrace-report-JSON.md",
        "./usr/share/doc/kmemtrace/PARQUET.md",
        "./usr/share/doc/kmemtrace/copyright",
    ] {
        assert!(
            contents.contains(want),
            "{want} not in the package:\n{contents}"
        );
    }

    let _installed = Installed;
    run(Command::new("dpkg").arg("-i").arg(deb));
    let man = run(Command::new("man").args(["-w", "kmemtraced"]));
    assert_eq!(man.trim(), "/usr/share/man/man1/kmemtraced.1.gz");
    for p in PROGRAMS {
        let v = run(Command::new(format!("/usr/bin/{p}")).arg("--version"));
        assert!(v.starts_with(&format!("{p} 0.")), "{v}");
    }
    // The fleet job runs from its link (its metric table needs no engine),
    // with the package's version and its man page.
    let metrics = run(Command::new("/usr/bin/kmemtrace-fleet-diff").arg("--metrics"));
    assert!(metrics.contains("  hits "), "{metrics}");
    let v = run(Command::new("/usr/bin/kmemtrace-fleet-diff").arg("--version"));
    let packaged = run(Command::new("/usr/bin/kmemtraced").arg("--version"));
    let version = packaged.split_whitespace().nth(1).unwrap();
    assert!(
        v.starts_with(&format!("kmemtrace-fleet-diff {version}\n")),
        "{v}"
    );
    let man = run(Command::new("man").args(["-w", "kmemtrace-fleet-diff"]));
    assert_eq!(man.trim(), "/usr/share/man/man1/kmemtrace-fleet-diff.1.gz");
    run(Command::new("dpkg").args(["-r", "kmemtrace"]));
    for p in PROGRAMS.iter().chain(&["kmemtrace-fleet-diff"]) {
        assert!(
            !Path::new(&format!("/usr/bin/{p}")).exists(),
            "{p} left behind"
        );
    }
    let status = Command::new("dpkg")
        .args(["-s", "kmemtrace"])
        .output()
        .unwrap();
    assert!(!status.status.success(), "still installed");
}

fn nix_is_root() -> bool {
    run(Command::new("id").arg("-u")).trim() == "0"
}
