//! The static board binaries (`scripts/cross-build.sh`, in
//! `target/boards/TARGET/`) run under qemu user mode on real captures: a
//! 32-bit ARM or arm64 build imports the foreign kernels' dumps, checks
//! them and reports on them exactly as this host's build does, so a broken
//! cross build is caught. `.ci/run` builds the aarch64 and armv7 ones; a
//! machine without them skips, saying so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The qemu user-mode emulator a target's binaries run under (`None`: this
/// host runs them itself).
fn emulator(target: &str) -> Option<&'static str> {
    match target.split('-').next() {
        Some("aarch64") => Some("qemu-aarch64-static"),
        Some("armv7") | Some("arm") => Some("qemu-arm-static"),
        Some("i686") => Some("qemu-i386-static"),
        _ => None,
    }
}

/// The board builds present: `(target, directory)`.
fn boards() -> Vec<(String, PathBuf)> {
    let dir = common::workspace().join("target/boards");
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
                .filter(|(_, p)| p.join("kmemtrace-report").is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The board builds, or `None` having said that `test` skips.
fn boards_or_skip(test: &str) -> Option<Vec<(String, PathBuf)>> {
    let boards = boards();
    if boards.is_empty() {
        common::skip(
            test,
            common::Missing::Tool,
            "no board binaries in target/boards (scripts/cross-build.sh builds them)",
        );
        return None;
    }
    Some(boards)
}

/// `bin ARGS`, under the target's emulator where it needs one.
fn command(target: &str, bin: &Path, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = match emulator(target) {
        Some(q) => {
            let mut c = Command::new(q);
            c.arg(bin);
            c
        }
        None => Command::new(bin),
    };
    c.args(args);
    c
}

#[test]
fn board_binaries_under_qemu_read_the_foreign_captures_as_this_host_does() {
    let test = "board_binaries_under_qemu_read_the_foreign_captures_as_this_host_does";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let Some(boards) = boards_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (target, bins) in &boards {
        if let Some(q) = emulator(target) {
            if Command::new(q).arg("--version").output().is_err() {
                common::skip(
                    test,
                    common::Missing::Tool,
                    &format!("{q} is not installed"),
                );
                return;
            }
        }
        for arch in ["armhf", "s390x"] {
            // zstd and kpack: the board packs (a 32-bit armv7 too) and
            // unpacks what it packed, and both logs list the same events.
            let mut listings = Vec::new();
            for c in ["1", "kpack"] {
                let what = format!("{target} on {arch}, -c {c}");
                let log = dir.path().join(format!("{target}-{arch}-{c}.kmt"));
                let dump = data.join(arch).join("raw");
                common::stdout_ok(&mut command(
                    target,
                    &bins.join("kmemtraced"),
                    &[
                        "--import".as_ref(),
                        dump.as_os_str(),
                        "-c".as_ref(),
                        c.as_ref(),
                        "-o".as_ref(),
                        log.as_os_str(),
                    ],
                ));
                // The board's own check and report, beside this host's on
                // the board's log.
                for (tool, args) in [
                    ("kmemtrace-check", vec!["--json"]),
                    ("kmemtrace-report", vec!["--json"]),
                    ("kmemtrace-report", vec!["--events", "-q"]),
                ] {
                    let mut a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
                    a.push(log.as_os_str());
                    let board = common::stdout_ok(&mut command(target, &bins.join(tool), &a));
                    let host = common::stdout_ok(Command::new(common::bin(tool)).args(&a));
                    assert!(board.len() > 1000, "{what}: {tool} {args:?}");
                    assert!(
                        board == host,
                        "{what}: {tool} {args:?} differs from this host's"
                    );
                    if args[0] == "--events" {
                        listings.push(board);
                    }
                }
            }
            assert!(
                listings[0] == listings[1],
                "{target} on {arch}: the kpack log lists other events"
            );
        }
    }
}

/// `scripts/release.sh --no-build`: a reproducible tarball per board build
/// with its binaries as built and the capture script, and SHA256SUMS that
/// `sha256sum -c` accepts.
#[test]
fn release_tarballs_of_the_board_builds_with_their_checksums() {
    let test = "release_tarballs_of_the_board_builds_with_their_checksums";
    let Some(boards) = boards_or_skip(test) else {
        return;
    };
    let release = |out: &Path| {
        let o = Command::new(common::workspace().join("scripts/release.sh"))
            .arg("--no-build")
            .arg(out)
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(out.join("SHA256SUMS")).unwrap()
    };
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sums = release(a.path());
    assert_eq!(sums, release(b.path()), "the tarballs are not reproducible");
    assert_eq!(sums.lines().count(), boards.len(), "{sums}");
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(a.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let x = tempfile::tempdir().unwrap();
    for (target, bins) in &boards {
        let tarball = sums
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .find(|n| n.ends_with(&format!("-{target}.tar.gz")))
            .unwrap_or_else(|| panic!("no tarball for {target} in {sums}"));
        let st = Command::new("tar")
            .arg("xzf")
            .arg(a.path().join(tarball))
            .current_dir(x.path())
            .status()
            .unwrap();
        assert!(st.success());
        let dir = x.path().join(tarball.trim_end_matches(".tar.gz"));
        for b in ["kmemtraced", "kmemtrace-check", "kmemtrace-report"] {
            let packed = std::fs::read(dir.join(b)).unwrap();
            assert!(
                packed == std::fs::read(bins.join(b)).unwrap(),
                "{target}: {b} differs"
            );
        }
        for f in [
            "kmemtrace-capture.sh",
            "FORMAT.md",
            "LICENSE-MIT",
            "LICENSE-APACHE",
        ] {
            assert!(dir.join(f).is_file(), "{target}: no {f}");
        }
    }
}
