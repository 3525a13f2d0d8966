//! kmemtrace-check end to end: logs built from the real foreign-kernel
//! captures (see `check/capture.rs`), damaged on purpose in every way the
//! checker claims to find, and logs recorded from this machine's kernel.

mod common;
mod check {
    pub mod capture;
    pub mod live;
    mod windows;
}

use check::capture::{self, block_containing, block_offsets, Build};
use kmemtrace_format::block::Compression;
use kmemtrace_kernel::RunTimeEndian;
use kmemtrace_testkit::synth::{LogBuilder, Rng};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Exit code, stdout, stderr.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut c = Command::new(common::bin("kmemtrace-check"));
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR");
    let mut child = c.spawn().expect("run kmemtrace-check");
    if let Some(data) = stdin {
        let mut si = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = si.write_all(&data);
        });
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

pub fn tmp(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    f
}

/// `--json` on one file: (exit code, the file's report).
pub fn check_json(path: &Path) -> (i32, Value) {
    let (code, out, err) = run(&["--json", path.to_str().unwrap()], None);
    let doc: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(doc["schema"], "kmemtrace-check/1");
    assert_eq!(doc["exit_code"], code);
    (code, doc["files"][0].clone())
}

fn check_bytes_json(bytes: &[u8]) -> (i32, Value) {
    let f = tmp(bytes);
    check_json(f.path())
}

fn problems(r: &Value) -> Vec<Value> {
    r["problems"].as_array().unwrap().clone()
}

fn kinds(r: &Value) -> Vec<String> {
    problems(r)
        .iter()
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Per-CPU expectations from the captures' README files.
struct Expect {
    arch: &'static str,
    which: &'static str,
    events: [u64; 2],
    first_ts: [u64; 2],
    last_ts: [u64; 2],
    overrun: [u64; 2],
    stored: [u64; 2],
    flagged: [u64; 2],
    flag_only: [u64; 2],
}

const EXPECT: [Expect; 4] = [
    Expect {
        arch: "armhf",
        which: "raw",
        events: [17794, 17533],
        first_ts: [4449503360, 4453509360],
        last_ts: [5045739680, 5045152000],
        overrun: [0, 0],
        stored: [0, 0],
        flagged: [0, 0],
        flag_only: [0, 0],
    },
    Expect {
        arch: "s390x",
        which: "raw",
        events: [17173, 16833],
        first_ts: [4317723752, 4320250552],
        last_ts: [5003935062, 5003068509],
        overrun: [0, 0],
        stored: [0, 0],
        flagged: [0, 0],
        flag_only: [0, 0],
    },
    Expect {
        arch: "armhf",
        which: "raw_overflow",
        events: [626, 613],
        first_ts: [15347582576, 15277592896],
        last_ts: [15382507712, 15380814848],
        overrun: [8577, 8702],
        stored: [8577, 0],
        flagged: [1, 1],
        flag_only: [0, 1],
    },
    Expect {
        arch: "s390x",
        which: "raw_overflow",
        events: [411, 375],
        first_ts: [15355453685, 15295792776],
        last_ts: [15383348708, 15387512476],
        overrun: [8481, 8532],
        stored: [0, 8532],
        flagged: [1, 1],
        flag_only: [1, 0],
    },
];

#[test]
fn foreign_captures_check_clean_with_exact_figures() {
    let Some(data) = common::shared_data_or_skip("foreign_captures_check_clean_with_exact_figures")
    else {
        return;
    };
    for e in &EXPECT {
        for compression in [Compression::None, Compression::Zstd(3)] {
            let dir = capture::capture_dir(&data, e.arch, e.which);
            let bytes = capture::build(
                &dir,
                &Build {
                    compression,
                    subbufs_per_block: 7,
                    ..Default::default()
                },
            );
            let what = format!("{} {} {compression:?}", e.arch, e.which);
            let (code, r) = check_bytes_json(&bytes);
            assert!(problems(&r).is_empty(), "{what}: {:#?}", r["problems"]);
            assert!(
                r["warnings"].as_array().unwrap().is_empty(),
                "{what}: {:#?}",
                r["warnings"]
            );
            let lost_total: u64 = e.overrun.iter().sum();
            assert_eq!(code, if lost_total > 0 { 1 } else { 0 }, "{what}");
            for cpu in 0..2 {
                let c = &r["cpus"][cpu];
                assert_eq!(c["cpu"], cpu as u64);
                assert_eq!(c["events"], e.events[cpu], "{what} cpu {cpu}");
                assert_eq!(c["first_ts"], e.first_ts[cpu], "{what} cpu {cpu}");
                assert_eq!(c["last_ts"], e.last_ts[cpu], "{what} cpu {cpu}");
                assert_eq!(c["ordering_violations"], 0);
                let l = &c["lost"];
                assert_eq!(l["events"], e.overrun[cpu], "{what} cpu {cpu}");
                assert_eq!(l["subbuf_stored"], e.stored[cpu], "{what} cpu {cpu}");
                assert_eq!(l["subbuf_flagged"], e.flagged[cpu], "{what} cpu {cpu}");
                assert_eq!(l["subbuf_flag_only"], e.flag_only[cpu], "{what} cpu {cpu}");
                assert_eq!(l["stats"]["overrun"], e.overrun[cpu]);
                assert_eq!(l["source"], "stats");
                assert_eq!(l["lower_bound"], false);
            }
            let events: u64 = e.events.iter().sum();
            assert_eq!(r["total"]["events"], events);
            assert_eq!(r["total"]["lost"]["events"], lost_total);
            // The loss windows: sub-buffer 0 of each CPU, with the stored
            // count where there is one.
            let w = r["loss_windows"].as_array().unwrap();
            assert_eq!(w.len() as u64, e.flagged.iter().sum::<u64>(), "{what}");
            for win in w {
                let cpu = win["cpu"].as_u64().unwrap() as usize;
                assert_eq!(win["subbuf"], 0);
                assert_eq!(win["before_ts"], e.first_ts[cpu]);
                assert!(win["after_ts"].is_null());
                let want = if e.stored[cpu] > 0 {
                    Value::from(e.stored[cpu])
                } else {
                    Value::Null
                };
                assert_eq!(win["count"], want, "{what}");
                assert_eq!(win["exact"], compression == Compression::None);
            }
        }
    }
}

/// The boot-time capture of Debian's 6.1 kernel (tests/data): CPU 1's
/// buffer overflowed during boot; the kernel's counters from zero and the
/// sub-buffer flag say the same 6,695 events, and nothing else is amiss.
#[test]
fn boot_drain_of_another_kernel_checks_with_its_boot_losses() {
    let path = common::workspace().join("tests/data/boot-6.1-x86_64.kmt");
    let (code, r) = check_json(&path);
    assert_eq!(code, 1, "events were lost");
    assert!(problems(&r).is_empty(), "{:#?}", r["problems"]);
    assert!(
        r["warnings"].as_array().unwrap().is_empty(),
        "{:#?}",
        r["warnings"]
    );
    assert_eq!(r["total"]["events"], 103_943);
    assert_eq!(r["total"]["lost"]["events"], 6_695);
    let l = &r["cpus"][1]["lost"];
    assert_eq!(l["source"], "stats");
    assert_eq!(l["stats"]["overrun"], 6_695);
    assert_eq!(l["subbuf_flagged"], 1);
    assert_eq!(r["cpus"][0]["lost"]["events"], 0);
    // And the report reads it on this host.
    let out = Command::new(common::bin("kmemtrace-report"))
        .args(["-q", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["capture"]["events"], 103_943);
    assert!(doc["callsites"].as_array().is_some_and(|c| c.len() > 100));
}

#[test]
fn human_report_table_and_verdicts() {
    let Some(data) = common::shared_data_or_skip("human_report_table_and_verdicts") else {
        return;
    };
    let ovf = tmp(&capture::build(
        &capture::capture_dir(&data, "armhf", "raw_overflow"),
        &Build::default(),
    ));
    let clean = tmp(&capture::build(
        &capture::capture_dir(&data, "armhf", "raw"),
        &Build::default(),
    ));
    let (code, out, err) = run(&[clean.path().to_str().unwrap()], None);
    assert_eq!(code, 0, "{out}{err}");
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "{}: OK (35,327 events on 2 CPUs, nothing lost)",
            clean.path().display()
        )
    );
    assert!(out.contains("CPU"), "{out}");
    assert!(out.contains("17,794"), "{out}");
    assert!(err.is_empty(), "{err}");

    let (code, out, _) = run(&[ovf.path().to_str().unwrap()], None);
    assert_eq!(code, 1, "{out}");
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "{}: LOST 17,279 of 18,518 events (93.3%) on 2 CPUs",
            ovf.path().display()
        )
    );
    // Table: header, 2 CPUs, total, right-aligned columns.
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.trim_start()
                .starts_with(|c: char| c.is_ascii_digit() || c == 'a' || c == 'C')
        })
        .collect();
    assert!(rows.iter().any(|l| l.contains("lost %")), "{out}");
    assert!(out.contains("8,577"), "{out}");
    assert!(out.contains("8,702"), "{out}");
    assert!(out.contains("count not stored"), "{out}");
    assert!(out.contains("kernel statistics, end minus start"), "{out}");
    let header = out.lines().find(|l| l.contains("sub-buffers")).unwrap();
    let all = out
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap();
    assert_eq!(header.len(), all.len(), "aligned:\n{out}");

    // -q: verdicts only; several files: the worst exit code.
    let (code, out, _) = run(
        &[
            "-q",
            clean.path().to_str().unwrap(),
            ovf.path().to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 1);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out
        .lines()
        .next()
        .unwrap()
        .ends_with("OK (35,327 events on 2 CPUs, nothing lost)"));
    // Not a terminal: no colour, no progress.
    assert!(!out.contains('\x1b'));

    // Standard input.
    let bytes = std::fs::read(ovf.path()).unwrap();
    let (code, out, _) = run(&["-q", "-"], Some(&bytes));
    assert_eq!(code, 1);
    assert_eq!(
        out,
        "<stdin>: LOST 17,279 of 18,518 events (93.3%) on 2 CPUs\n"
    );
}

#[test]
fn unusable_input_exits_3_and_usage_errors_2() {
    let junk = tmp(b"this is not a kmemtrace log at all\n");
    let empty = tmp(b"");
    for (args, want) in [
        (vec![junk.path().to_str().unwrap()], "not a kmemtrace log"),
        (vec![empty.path().to_str().unwrap()], "shorter than"),
        (vec!["/nonexistent/x.kmt"], "cannot read"),
    ] {
        let (code, out, err) = run(&args, None);
        assert_eq!(code, 3, "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
        assert!(out.contains("UNUSABLE"), "{out}");
        // -q: the verdict line alone, which says it.
        let quiet: Vec<&str> = ["-q"].into_iter().chain(args.iter().copied()).collect();
        let (code, out, err) = run(&quiet, None);
        assert_eq!(code, 3);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains(want), "{out}");
        assert!(err.is_empty(), "{err}");
    }
    let (code, _, err) = run(&[], None);
    assert_eq!(code, 2, "usage: {err}");
    let (code, _, _) = run(&["--bogus", "x"], None);
    assert_eq!(code, 2);
    let (code, out, _) = run(&["--help"], None);
    assert_eq!(code, 0);
    for s in [
        "Exit status",
        "0  done: intact",
        "1  done, and the answer is no: intact, but",
        "2  usage error",
        "3  unusable input",
        "5  damaged input",
        "Examples",
    ] {
        assert!(out.contains(s), "--help lacks {s:?}");
    }
    // A log whose ARCH block is missing is a damaged log: nothing decodes.
    let (code, r) = check_bytes_json(&kmemtrace_format::block::encode_file_header());
    assert_eq!(code, 5);
    assert_eq!(r["verdict"], "damaged");
    assert!(problems(&r)[0]["message"]
        .as_str()
        .unwrap()
        .contains("no intact ARCH block"));
}

/// A small log with many blocks, for cutting and flipping.
fn small_log(data: &Path, compression: Compression) -> Vec<u8> {
    capture::build(
        &capture::capture_dir(data, "s390x", "raw_overflow"),
        &Build {
            compression,
            subbufs_per_block: 1,
            kallsyms: false,
            ..Default::default()
        },
    )
}

/// Cuts `bytes` at `n` random offsets (and the edge cases): a cut inside
/// the file header is unusable (3), inside the ARCH block damaged (2) with
/// nothing decodable; any other is damaged (2) with
/// exactly one truncation finding, at the cut block's offset (or, at a
/// block boundary, at the cut), and every complete CPU_DATA block checked.
pub fn assert_truncations(bytes: &[u8], n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let blocks = block_offsets(bytes);
    let arch_end = blocks[0].1;
    let mut cuts: Vec<u64> = (0..n).map(|_| rng.below(bytes.len() as u64)).collect();
    cuts.extend([0, 15, 16, arch_end - 1, arch_end, bytes.len() as u64 - 1]);
    for cut in cuts {
        let (code, r) = check_bytes_json(&bytes[..cut as usize]);
        if cut < 16 {
            assert_eq!(code, 3, "cut {cut}");
            continue;
        }
        if cut < arch_end {
            assert_eq!(code, 5, "cut {cut}");
            assert_eq!(problems(&r)[0]["offset"], 16, "cut {cut}");
            continue;
        }
        assert_eq!(code, 5, "cut {cut}");
        let t: Vec<Value> = problems(&r)
            .into_iter()
            .filter(|p| p["kind"] == "truncation")
            .collect();
        assert_eq!(t.len(), 1, "cut {cut}: {:#?}", r["problems"]);
        // Cut inside a block: named by its offset; at a boundary: no END.
        let inside = blocks.iter().find(|(s, e)| *s < cut && cut < *e);
        match inside {
            Some((s, _)) => assert_eq!(t[0]["offset"], *s, "cut {cut}"),
            None => assert_eq!(t[0]["offset"], cut, "cut {cut}"),
        }
        // Every complete CPU_DATA block is read and checked.
        let complete: Vec<(u64, u64)> = blocks
            .iter()
            .copied()
            .filter(|(s, e)| *e <= cut && bytes[*s as usize + 4] == 3)
            .collect();
        let log = kmemtrace_import::log::Log::from_bytes("t", &bytes[..cut as usize]).unwrap();
        assert_eq!(log.blocks.len(), complete.len(), "cut {cut}");
        let subbufs: u64 = log.blocks.iter().map(|b| u64::from(b.count)).sum();
        assert_eq!(r["total"]["blocks"], complete.len() as u64, "cut {cut}");
        assert_eq!(r["total"]["subbufs"], subbufs, "cut {cut}");
        // Nothing else is wrong (metadata: logs without kallsyms).
        assert!(
            kinds(&r)
                .iter()
                .all(|k| k == "truncation" || k == "metadata"),
            "cut {cut}: {:#?}",
            r["problems"]
        );
    }
}

/// Flips one random bit in each of `n` copies of `bytes` (and in the
/// file header and ARCH block): every flip is detected (5), the first
/// problem being damage at the flipped block (the file header's at offset
/// 0, the magic included: the intact ARCH block after it shows the file is
/// a log).
pub fn assert_flips(bytes: &[u8], n: usize, seed: u64) {
    let mut rng = Rng(seed);
    let arch_end = block_offsets(bytes)[0].1;
    let mut at: Vec<u64> = (0..n).map(|_| rng.below(bytes.len() as u64)).collect();
    at.extend([0, 3, 7, 9, 13, 16, 20, arch_end - 1]);
    for pos in at {
        let mut b = bytes.to_vec();
        b[pos as usize] ^= 1 << rng.below(8);
        let (code, r) = check_bytes_json(&b);
        assert_eq!(code, 5, "flip at {pos}: {r:#}");
        let start = block_containing(bytes, pos).map_or(0, |b| b.0);
        let first = &problems(&r)[0];
        assert_eq!(
            first["kind"], "damage",
            "flip at {pos}: {:#?}",
            r["problems"]
        );
        assert_eq!(
            first["offset"], start,
            "flip at {pos}: {:#?}",
            r["problems"]
        );
    }
}

#[test]
fn truncated_logs_report_truncation_and_keep_every_complete_block() {
    let Some(data) = common::shared_data_or_skip("truncated_logs_report_truncation") else {
        return;
    };
    for compression in [Compression::None, Compression::Zstd(1)] {
        assert_truncations(&small_log(&data, compression), 40, 0x5eed_1234_abcd_0001);
    }
}

#[test]
fn every_single_byte_flip_is_detected_in_its_block() {
    let Some(data) = common::shared_data_or_skip("every_single_byte_flip_is_detected") else {
        return;
    };
    for compression in [Compression::None, Compression::Zstd(1)] {
        assert_flips(&small_log(&data, compression), 60, 0x0dd_f11b_5eed);
    }
}

#[test]
fn sequence_gaps_say_how_much_was_lost() {
    let Some(data) = common::shared_data_or_skip("sequence_gaps") else {
        return;
    };
    let bytes = capture::build(
        &capture::capture_dir(&data, "armhf", "raw"),
        &Build {
            subbufs_per_block: 10,
            skip_blocks: vec![(1, 3), (1, 4), (0, 0)],
            ..Default::default()
        },
    );
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    let seq: Vec<Value> = problems(&r)
        .into_iter()
        .filter(|p| p["kind"] == "sequence")
        .collect();
    assert_eq!(seq.len(), 2, "{:#?}", r["problems"]);
    let m: Vec<&str> = seq.iter().map(|p| p["message"].as_str().unwrap()).collect();
    assert!(
        m.iter().any(|m| m.contains(
            "CPU 0: 1 block (10 sub-buffers, 40,960 bytes) missing before this, its first block"
        )),
        "{m:?}"
    );
    assert!(
        m.iter()
            .any(|m| m.contains("CPU 1: 2 blocks (20 sub-buffers, 81,920 bytes) missing between")),
        "{m:?}"
    );
    assert_eq!(r["cpus"][1]["missing_blocks"], 2);
    assert_eq!(r["cpus"][1]["missing_subbufs"], 20);
}

#[test]
fn time_going_backwards_is_located() {
    let Some(data) = common::shared_data_or_skip("time_going_backwards") else {
        return;
    };
    // Swap sub-buffers 10 and 11 of CPU 1: time steps back where 10's
    // events follow 11's.
    fn swap(cpu: u32, raw: &mut [u8]) {
        if cpu == 1 {
            let (a, b) = raw.split_at_mut(11 * 4096);
            a[10 * 4096..].swap_with_slice(&mut b[..4096]);
        }
    }
    for compression in [Compression::None, Compression::Zstd(1)] {
        let bytes = capture::build(
            &capture::capture_dir(&data, "s390x", "raw"),
            &Build {
                compression,
                subbufs_per_block: 4,
                edit: Some(swap),
                ..Default::default()
            },
        );
        let (code, r) = check_bytes_json(&bytes);
        assert_eq!(code, 5);
        let ord: Vec<Value> = problems(&r)
            .into_iter()
            .filter(|p| p["kind"] == "ordering")
            .collect();
        assert_eq!(ord.len(), 1, "{:#?}", r["problems"]);
        assert_eq!(r["cpus"][1]["ordering_violations"], 1);
        let p = &ord[0];
        assert_eq!(p["cpu"], 1);
        assert_eq!(p["subbuf"], 11);
        assert!(p["previous_ts"].as_u64().unwrap() > p["ts"].as_u64().unwrap());
        assert_eq!(p["subbuf_offset"], 16);
        // Block of sub-buffers 8..12, sub-buffer 3 in it.
        assert_eq!(p["subbuf_in_block"], 3);
        let block = p["block"].as_u64().unwrap();
        if compression == Compression::None {
            assert_eq!(p["exact"], true);
            assert_eq!(p["offset"], block + 20 + 24 + 3 * 4096 + 16);
        } else {
            assert_eq!(p["exact"], false);
            assert_eq!(p["offset"], block);
        }
        let msg = p["message"].as_str().unwrap();
        assert!(msg.contains("time goes backwards on CPU 1"), "{msg}");
    }
    // The human form names the block and sub-buffer of compressed data.
    let bytes = capture::build(
        &capture::capture_dir(&data, "s390x", "raw"),
        &Build {
            subbufs_per_block: 4,
            edit: Some(swap),
            ..Default::default()
        },
    );
    let f = tmp(&bytes);
    let (code, out, _) = run(&[f.path().to_str().unwrap()], None);
    assert_eq!(code, 5);
    assert!(
        out.contains(", sub-buffer 3 +16 (CPU 1, sub-buffer 11 of the CPU): time goes backwards"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .contains(": DAMAGED: 1 problem (first in block at offset"),
        "{out}"
    );
}

/// Offset of the fourth record of an armhf sub-buffer.
fn third_event_offset(page: &[u8]) -> usize {
    use kmemtrace_kernel::{parse_subbuf, LittleEndian, SubBufLayout};
    let l = SubBufLayout {
        long_size: 4,
        data_offset: 12,
        subbuf_size: 4096,
    };
    let sb = parse_subbuf(LittleEndian, &l, page).unwrap();
    let r = sb.events(LittleEndian).nth(3).unwrap().unwrap();
    r.offset
}

#[test]
fn segment_seams_keep_ordering_and_loss_windows() {
    let Some(data) = common::shared_data_or_skip("segment_seams") else {
        return;
    };
    // With 4 sub-buffers per block the checker's segments (8 blocks) start
    // at sub-buffers 0, 32, 64, ... of a CPU. Swap 31 and 32 of CPU 1 (time
    // steps back right at a seam) and flag sub-buffer 64 of CPU 0 as
    // having lost events, without a count.
    fn edit(cpu: u32, raw: &mut [u8]) {
        if cpu == 1 {
            let (a, b) = raw.split_at_mut(32 * 4096);
            a[31 * 4096..].swap_with_slice(&mut b[..4096]);
        } else {
            raw[64 * 4096 + 12] |= 0x80; // big-endian commit: bit 31
        }
    }
    let dir = capture::capture_dir(&data, "s390x", "raw");
    let bytes = capture::build(
        &dir,
        &Build {
            subbufs_per_block: 4,
            edit: Some(edit),
            ..Default::default()
        },
    );
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    let ord: Vec<Value> = problems(&r)
        .into_iter()
        .filter(|p| p["kind"] == "ordering")
        .collect();
    assert_eq!(ord.len(), 1, "{:#?}", r["problems"]);
    assert_eq!(
        (ord[0]["cpu"].clone(), ord[0]["subbuf"].clone()),
        (Value::from(1), Value::from(32))
    );
    assert_eq!(r["cpus"][1]["ordering_violations"], 1);
    // The window's previous event is the last of sub-buffer 63.
    use kmemtrace_kernel::{parse_subbuf, SubBufLayout};
    let l = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };
    let raw = capture::raw_cpu(&dir, 0);
    let e = kmemtrace_kernel::BigEndian;
    let sb63 = parse_subbuf(e, &l, &raw[63 * 4096..64 * 4096]).unwrap();
    let last63 = sb63.events(e).map(|r| r.unwrap().ts).last().unwrap();
    let sb64 = parse_subbuf(e, &l, &raw[64 * 4096..65 * 4096]).unwrap();
    let first64 = sb64.data_events(e).next().unwrap().unwrap().1;
    let w = r["loss_windows"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0]["subbuf"], 64);
    assert_eq!(w[0]["after_ts"], last63);
    assert_eq!(w[0]["before_ts"], first64);
    assert!(w[0]["count"].is_null());
    // The statistics say nothing was overwritten: a lower bound, and a
    // warning that the two sources disagree.
    assert_eq!(r["cpus"][0]["lost"]["lower_bound"], true);
    let warn: Vec<String> = r["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        warn.iter()
            .any(|m| m.contains("overrun counter did not grow")),
        "{warn:?}"
    );
}

#[test]
fn undecodable_sub_buffers_are_located() {
    let Some(data) = common::shared_data_or_skip("undecodable_sub_buffers") else {
        return;
    };
    // CPU 0, sub-buffer 5: commit beyond the data area. Sub-buffer 6: an
    // event length that runs past the commit. Sub-buffer 7: the rest of
    // its commit zeroed from its fourth record on (zeros read as a
    // zero-length event).
    fn damage(cpu: u32, raw: &mut [u8]) {
        if cpu == 0 {
            let p = 5 * 4096;
            raw[p + 8..p + 12].copy_from_slice(&5000u32.to_le_bytes());
            let p = 6 * 4096;
            // First event header: type_len 28 (116 bytes), delta 0.
            raw[p + 12..p + 16].copy_from_slice(&28u32.to_le_bytes());
            raw[p + 8..p + 12].copy_from_slice(&100u32.to_le_bytes());
            let p = 7 * 4096;
            let commit = u32::from_le_bytes(raw[p + 8..p + 12].try_into().unwrap()) as usize;
            let at = third_event_offset(&raw[p..p + 4096]);
            raw[p + at..p + 12 + commit].fill(0);
            // Sub-buffer 8: a null padding (type_len 29, delta 0) at 12.
            let p = 8 * 4096;
            raw[p + 12..p + 16].copy_from_slice(&29u32.to_le_bytes());
        }
    }
    let bytes = capture::build(
        &capture::capture_dir(&data, "armhf", "raw"),
        &Build {
            compression: Compression::None,
            subbufs_per_block: 4,
            edit: Some(damage),
            ..Default::default()
        },
    );
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    let sub: Vec<Value> = problems(&r)
        .into_iter()
        .filter(|p| p["kind"] == "sub_buffer")
        .collect();
    let at: Vec<(u64, u64)> = sub
        .iter()
        .map(|p| {
            (
                p["subbuf"].as_u64().unwrap(),
                p["subbuf_offset"].as_u64().unwrap(),
            )
        })
        .collect();
    let raw7 = capture::raw_cpu(&capture::capture_dir(&data, "armhf", "raw"), 0);
    let third = third_event_offset(&raw7[7 * 4096..8 * 4096]) as u64;
    assert_eq!(at, [(5, 8), (6, 12), (7, third), (8, 12)], "{sub:#?}");
    assert!(sub[0]["message"]
        .as_str()
        .unwrap()
        .contains("beyond the data area"));
    assert!(sub[1]["message"]
        .as_str()
        .unwrap()
        .contains("past the end of the commit"));
    assert!(sub[3]["message"].as_str().unwrap().contains("null padding"));
    // Exact file offsets: uncompressed blocks.
    for p in &sub {
        let b = p["block"].as_u64().unwrap();
        let i = p["subbuf_in_block"].as_u64().unwrap();
        assert_eq!(
            p["offset"],
            b + 44 + i * 4096 + p["subbuf_offset"].as_u64().unwrap()
        );
    }
    assert_eq!(r["cpus"][0]["bad_subbufs"], 1);
    assert_eq!(r["cpus"][0]["bad_event_streams"], 3);
}

#[test]
fn missing_metadata_is_reported() {
    let Some(data) = common::shared_data_or_skip("missing_metadata") else {
        return;
    };
    let bytes = capture::build(
        &capture::capture_dir(&data, "armhf", "raw_overflow"),
        &Build {
            kallsyms: false,
            drop_formats: vec!["kfree".into()],
            ..Default::default()
        },
    );
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    let msgs: Vec<String> = problems(&r)
        .iter()
        .map(|p| p["message"].as_str().unwrap().to_string())
        .collect();
    assert!(msgs.iter().any(|m| m.contains("no kallsyms")), "{msgs:?}");
    // kfree: 55 on CPU 0, 44 on CPU 1 (README).
    assert!(
        msgs.iter()
            .any(|m| m.contains("no format for event id") && m.contains("55 events on CPU 0")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.contains("no format for event id") && m.contains("44 events on CPU 1")),
        "{msgs:?}"
    );
    assert_eq!(r["cpus"][0]["unknown_events"], 55);
}

#[test]
fn end_block_totals_and_blocks_after_end() {
    let Some(data) = common::shared_data_or_skip("end_block_totals") else {
        return;
    };
    let dir = capture::capture_dir(&data, "s390x", "raw_overflow");
    let bytes = capture::build(
        &dir,
        &Build {
            subbufs_per_block: 1,
            ..Default::default()
        },
    );
    // A block after END: a copy of the first STATS block appended.
    let blocks = block_offsets(&bytes);
    let stats = blocks
        .iter()
        .find(|(s, _)| bytes[*s as usize + 4] == 4)
        .unwrap();
    let mut b = bytes.clone();
    b.extend_from_slice(&bytes[stats.0 as usize..stats.1 as usize]);
    let (code, r) = check_bytes_json(&b);
    assert_eq!(code, 5);
    let p = problems(&r);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0]["kind"], "structure");
    assert_eq!(p[0]["offset"], bytes.len() as u64);
    assert!(p[0]["message"]
        .as_str()
        .unwrap()
        .contains("after the END block"));

    // END that lists more than the log holds: a CPU_DATA block dropped
    // from the file after writing (the writer counted it).
    let cpu_block = blocks
        .iter()
        .filter(|(s, _)| bytes[*s as usize + 4] == 3)
        .nth(2)
        .unwrap();
    let mut b = bytes[..cpu_block.0 as usize].to_vec();
    b.extend_from_slice(&bytes[cpu_block.1 as usize..]);
    let (code, r) = check_bytes_json(&b);
    assert_eq!(code, 5);
    let k = kinds(&r);
    assert!(k.contains(&"end_totals".to_string()), "{k:?}");
    let msgs: Vec<String> = problems(&r)
        .iter()
        .map(|p| p["message"].as_str().unwrap().to_string())
        .collect();
    assert!(msgs.iter().any(|m| m.contains("END counts")), "{msgs:?}");
    assert!(msgs.iter().any(|m| m.contains("END says CPU 0 wrote 5 blocks, 5 sub-buffers, 20,480 bytes; the log holds 4, 4, 16,384")), "{msgs:?}");
}

#[test]
fn a_cpu_data_block_that_does_not_decompress_is_damage() {
    let Some(data) = common::shared_data_or_skip("cpu_data_does_not_decompress") else {
        return;
    };
    let mut bytes = capture::build(
        &capture::capture_dir(&data, "armhf", "raw"),
        &Build {
            subbufs_per_block: 16,
            ..Default::default()
        },
    );
    // The third CPU_DATA block: damage the end of its zstd frame, then fix
    // the CRC, as a bug in a writer would leave it.
    let (start, end) = block_offsets(&bytes)
        .into_iter()
        .filter(|(s, _)| bytes[*s as usize + 4] == 3)
        .nth(2)
        .unwrap();
    let (s, e) = (start as usize, end as usize);
    for k in [6, 40, 90] {
        bytes[e - k] ^= 0x5a;
    }
    let crc = crc32fast_hash(&bytes[s..s + 16], &bytes[s + 20..e]);
    bytes[s + 16..s + 20].copy_from_slice(&crc.to_le_bytes());
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    let p = problems(&r);
    assert_eq!(p[0]["kind"], "damage", "{p:#?}");
    assert_eq!(p[0]["offset"], start);
    assert!(
        p[0]["message"].as_str().unwrap().contains("decompress"),
        "{p:#?}"
    );
    // Its 16 sub-buffers are not counted; the others are.
    assert_eq!(r["total"]["subbufs"], 287 - 16);
}

/// CRC-32 of a block header's first 16 bytes and its payload.
fn crc32fast_hash(head: &[u8], payload: &[u8]) -> u32 {
    let h: [u8; 20] = {
        let mut h = [0u8; 20];
        h[..16].copy_from_slice(head);
        h
    };
    kmemtrace_format::block::BlockHeader::compute_crc(&h, payload)
}

#[test]
fn json_fields_are_documented() {
    let Some(data) = common::shared_data_or_skip("json_fields_are_documented") else {
        return;
    };
    let doc = std::fs::read_to_string(common::workspace().join("kmemtrace-check/JSON.md")).unwrap();
    // A report with every optional part: losses, stats, windows, problems,
    // warnings (no stats for one variant).
    let mut b = capture::build(
        &capture::capture_dir(&data, "s390x", "raw_overflow"),
        &Build {
            compression: Compression::None,
            ..Default::default()
        },
    );
    let n = b.len();
    b[n - 30] ^= 0x40; // damage the END block
    let (_, r) = check_bytes_json(&b);
    let (_, r2) = check_bytes_json(&capture::build(
        &capture::capture_dir(&data, "s390x", "raw_overflow"),
        &Build {
            stats: false,
            ..Default::default()
        },
    ));
    fn keys(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut all = std::collections::BTreeSet::new();
    keys(&r, &mut all);
    keys(&r2, &mut all);
    for k in [
        "schema",
        "exit_code",
        "files",
        "warnings",
        "loss_windows",
        "previous_ts",
        "stats",
    ] {
        assert!(doc.contains(&format!("`{k}`")), "JSON.md lacks `{k}`");
    }
    for k in &all {
        assert!(
            doc.contains(&format!("`{k}`")),
            "JSON.md does not document `{k}`"
        );
    }
}

/// Writes sample logs for manual inspection when KMT_SAMPLES names a dir.
#[test]
fn write_samples_when_asked() {
    let (Some(dir), Some(data)) = (std::env::var_os("KMT_SAMPLES"), common::shared_data()) else {
        return;
    };
    let dir = Path::new(&dir);
    for (arch, which) in [
        ("armhf", "raw"),
        ("armhf", "raw_overflow"),
        ("s390x", "raw"),
        ("s390x", "raw_overflow"),
    ] {
        let b = capture::build(&capture::capture_dir(&data, arch, which), &Build::default());
        std::fs::write(dir.join(format!("{arch}-{which}.kmt")), b).unwrap();
    }
}

/// A log whose arch tag and uname machine are as given.
fn log_of_machine(order: RunTimeEndian, long: u8, machine: &str) -> Vec<u8> {
    let mut b = LogBuilder::new(order, long, 4096);
    b.arch.machine = Some(machine.into());
    b.arch.page_size = Some(4096);
    b.build().unwrap()
}

#[test]
fn bi_endian_machine_names_are_never_damage() {
    use RunTimeEndian::{Big, Little};
    // A real little-endian MIPS64 kernel says `mips64`; SuperH, ARC, Xtensa
    // and MicroBlaze kernels name no byte order either; compat names
    // (armv8l under linux32 on arm64) name no long size.
    for (order, long, m) in [
        (Little, 8, "mips64"),
        (Big, 8, "mips64"),
        (Little, 4, "mips"),
        (Big, 4, "sh4a"),
        (Little, 4, "xtensa"),
        (Big, 4, "microblaze"),
        (Little, 8, "armv8l"),
        (Little, 8, "i686"),
    ] {
        let (_, r) = check_bytes_json(&log_of_machine(order, long, m));
        assert!(
            !kinds(&r).contains(&"arch".to_string()),
            "{m} {order:?} {long}: {:#?}",
            r["problems"]
        );
    }
    // Names that settle a fact still catch a contradicting tag.
    for (order, long, m) in [
        (Big, 8, "x86_64"),
        (Little, 8, "s390x"),
        (Little, 4, "aarch64"),
    ] {
        let (code, r) = check_bytes_json(&log_of_machine(order, long, m));
        assert_eq!(code, 5, "{m}");
        assert!(kinds(&r).contains(&"arch".to_string()), "{m}: {r:#}");
    }
}

/// (cpu, start, end) of each uncompressed CPU_DATA block.
fn cpu_data_blocks(bytes: &[u8]) -> Vec<(u32, u64, u64)> {
    block_offsets(bytes)
        .into_iter()
        .filter(|(s, _)| bytes[*s as usize + 4] == 3)
        .map(|(s, e)| {
            let p = s as usize + 20;
            (
                u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap()),
                s,
                e,
            )
        })
        .collect()
}

#[test]
fn damaged_first_and_last_blocks_are_losses_in_the_check_and_the_report() {
    let Some(data) = common::shared_data_or_skip("damaged_first_and_last_blocks") else {
        return;
    };
    let mut bytes = capture::build(
        &capture::capture_dir(&data, "armhf", "raw"),
        &Build {
            subbufs_per_block: 10,
            compression: Compression::None,
            ..Default::default()
        },
    );
    let blocks = cpu_data_blocks(&bytes);
    let first0 = blocks.iter().find(|b| b.0 == 0).unwrap();
    let last1 = blocks.iter().rev().find(|b| b.0 == 1).unwrap();
    // Sub-buffers in CPU 1's last block (it may be shorter than 10).
    let p = last1.1 as usize + 20;
    let last1_subbufs = u64::from(u32::from_le_bytes(bytes[p + 4..p + 8].try_into().unwrap()));
    for b in [first0, last1] {
        bytes[b.1 as usize + 20 + 100] ^= 0x40;
    }
    let (code, r) = check_bytes_json(&bytes);
    assert_eq!(code, 5);
    assert_eq!(r["cpus"][0]["missing_subbufs"], 10, "{:#?}", r["cpus"]);
    assert_eq!(r["cpus"][1]["missing_subbufs"], last1_subbufs);

    let f = tmp(&bytes);
    let out = Command::new(common::bin("kmemtrace-report"))
        .arg(f.path())
        .arg("--json")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let cpus = doc["capture"]["cpus"]
        .as_array()
        .or(doc["cpus"].as_array())
        .unwrap();
    let missing = |c: u64| cpus.iter().find(|x| x["cpu"] == c).unwrap()["missing_subbufs"].clone();
    assert_eq!(missing(0), 10, "{cpus:#?}");
    assert_eq!(missing(1), last1_subbufs, "{cpus:#?}");
    let windows = doc["capture"]["lost_windows"]
        .as_array()
        .or(doc["lost_windows"].as_array())
        .unwrap();
    assert!(
        windows.iter().any(|w| w["cpu"] == 0 && w["start_ns"] == 0),
        "{windows:#?}"
    );
    assert!(
        windows
            .iter()
            .any(|w| w["cpu"] == 1 && w["end_ns"].is_null()),
        "{windows:#?}"
    );
}

#[test]
fn a_result_that_cannot_be_written_is_one_line_and_exit_4() {
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    for json in [false, true] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut c = Command::new(common::bin("kmemtrace-check"));
        if json {
            c.arg("--json");
        }
        let o = c.arg(&sample).stdout(full).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains("writing the result"), "{e}");
    }
}

#[test]
fn a_skip_is_logged_for_ci_with_what_was_missing() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("skips");
    common::log_skip(&log, "t1", common::Missing::Tracefs, "no tracefs");
    common::log_skip(&log, "t2", common::Missing::Machine, "one CPU");
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text, "tracefs\tt1\tno tracefs\nmachine\tt2\tone CPU\n");
}
