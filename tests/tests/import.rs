//! `kmemtraced --import`: the real foreign-kernel dumps in ../shared/data
//! (armhf: 32-bit little-endian; s390x: 64-bit big-endian) become logs whose
//! events, decoded with the library on this host, are exactly those of the
//! kernel's own text (`trace.txt.gz`), CPU by CPU, event by event, pid by
//! pid; the overflow dumps keep their losses (statistics and sub-buffer
//! flags); the byte order is found by each of its three means; tars read
//! like directories; broken dumps fail with one line and exit status 4.

mod common;

use flate2::read::GzDecoder;
use kmemtrace_format::records::{NoteRecord, StatsPhase};
use kmemtrace_import::log::Log;
use kmemtrace_kernel::{CpuStats, Endian, RunTimeEndian};
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// (cpu, event, pid) → count.
type Counts = BTreeMap<(u32, String, i32), u64>;

/// The kernel's text rendering: `<comm>-<pid> [cpu] <flags> <ts>: <event>: ...`.
fn text_counts(gz: &Path) -> Counts {
    let mut s = String::new();
    GzDecoder::new(fs::File::open(gz).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    let mut c = Counts::new();
    for line in s
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        // The CPU field is the first `[digits]` after the task.
        let bytes = line.as_bytes();
        let mut at = None;
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'[' {
                if let Some(j) = line[i + 1..].find(']') {
                    let inner = &line[i + 1..i + 1 + j];
                    if !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit()) {
                        at = Some((i, i + 1 + j));
                        break;
                    }
                }
            }
        }
        let (open, close) = at.unwrap_or_else(|| panic!("no [cpu] in {line:?}"));
        let cpu: u32 = line[open + 1..close].parse().unwrap();
        let task = line[..open].trim();
        let pid: i32 = task.rsplit_once('-').unwrap().1.parse().unwrap();
        let mut rest = line[close + 1..].split_whitespace();
        let _flags = rest.next().unwrap();
        let _ts = rest.next().unwrap();
        let event = rest.next().unwrap().trim_end_matches(':').to_string();
        *c.entry((cpu, event, pid)).or_default() += 1;
    }
    c
}

/// What a log holds, decoded with the library.
struct Decoded {
    log: Log,
    counts: Counts,
    bad_subbufs: u64,
    subbufs: BTreeMap<u32, u64>,
    flagged: BTreeMap<u32, u64>,
    stored_lost: BTreeMap<u32, u64>,
}

fn decode(path: &Path) -> Decoded {
    let log = Log::open(path).unwrap();
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    assert!(log.truncated.is_none());
    assert_eq!(log.end.as_ref().map(|e| e.reason.as_str()), Some("import"));
    let mut d = Decoded {
        counts: Counts::new(),
        bad_subbufs: 0,
        subbufs: BTreeMap::new(),
        flagged: BTreeMap::new(),
        stored_lost: BTreeMap::new(),
        log,
    };
    let log = &d.log;
    let endian = log.endian;
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
            |v| {
                *d.subbufs.entry(cpu).or_default() += 1;
                let sb = match v.subbuf {
                    Ok(sb) => sb,
                    Err(_) => {
                        d.bad_subbufs += 1;
                        return;
                    }
                };
                if sb.missed_events {
                    *d.flagged.entry(cpu).or_default() += 1;
                }
                *d.stored_lost.entry(cpu).or_default() += sb.lost_events.unwrap_or(0);
                for ev in sb.data_events(endian) {
                    let Ok((_, _, payload)) = ev else {
                        d.bad_subbufs += 1;
                        return;
                    };
                    let id = u32::from(endian.read_u16(payload, 0).unwrap());
                    let f = log
                        .format_by_id(id)
                        .unwrap_or_else(|| panic!("event id {id} has no format"));
                    let pf = f
                        .common_fields
                        .iter()
                        .find(|f| f.name == "common_pid")
                        .unwrap();
                    let pid = endian.read_int(payload, pf.offset, pf.size).unwrap() as i32;
                    *d.counts.entry((cpu, f.name.clone(), pid)).or_default() += 1;
                }
            },
            |p| panic!("{p}"),
        );
    }
    d
}

fn kmemtraced(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(common::bin("kmemtraced"))
        .args(args)
        .output()
        .unwrap()
}

fn import(dump: &Path, out: &Path) -> Output {
    kmemtraced(&[
        "--import".as_ref(),
        dump.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "-q".as_ref(),
    ])
}

fn import_ok(dump: &Path, out: &Path) {
    let o = import(dump, out);
    assert!(
        o.status.success(),
        "import {} failed: {}",
        dump.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Imports `dump`, expecting failure with exit status 3 and one line on
/// stderr containing `want`.
fn import_fails(dump: &Path, out: &Path, want: &str) {
    let o = import(dump, out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{}: {err}", dump.display());
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("kmemtraced: import: "), "{err}");
    assert!(err.contains(want), "want {want:?} in {err}");
    assert!(!out.exists(), "a failed import leaves no output");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            fs::copy(e.path(), &t).unwrap();
        }
    }
}

fn notes(log: &Log) -> Vec<&NoteRecord> {
    log.notes.iter().collect()
}

/// A dump's `stats` file, its counters in the width of the log's long.
fn stats_file(dir: &Path, cpu: u32, name: &str, log: &Log) -> CpuStats {
    CpuStats::parse(&fs::read_to_string(dir.join(format!("per_cpu/cpu{cpu}/{name}"))).unwrap())
        .unwrap()
        .with_long_size(usize::from(log.arch.long_size))
}

fn check_json(log: &Path) -> (i32, serde_json::Value) {
    let o = Command::new(common::bin("kmemtrace-check"))
        .arg("--json")
        .arg(log)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("check --json: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code().unwrap_or(-1), v)
}

fn report_json(log: &Path) -> serde_json::Value {
    common::json_stdout(
        Command::new(common::bin("kmemtrace-report"))
            .args(["--json", "-q"])
            .arg(log),
    )
}

/// One shared capture: import, decode, compare with the kernel's text,
/// check and report.
fn foreign(arch: &str, dump: &str, text: &str) {
    let Some(data) = common::shared_data_or_skip(&format!("import {arch}/{dump}")) else {
        return;
    };
    let dir = data.join(arch).join(dump);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.kmt");
    import_ok(&dir, &out);
    let d = decode(&out);
    let log = &d.log;

    // The arch tag is the dump's, not this host's.
    let (order, long) = match arch {
        "s390x" => (RunTimeEndian::Big, 8),
        "armhf" => (RunTimeEndian::Little, 4),
        _ => unreachable!(),
    };
    assert_eq!(log.arch.byte_order, order);
    assert_eq!(log.arch.long_size, long);
    assert_eq!(log.arch.data_offset, 8 + u32::from(long));
    assert_eq!(log.arch.subbuf_size, 4096);
    assert_eq!(log.arch.page_size, Some(4096));
    assert_eq!(log.arch.nr_cpus, Some(2));
    assert_eq!(
        log.arch.byte_order_source.as_deref(),
        Some("dump endianness file")
    );
    assert_eq!(log.arch.trace_clock.as_deref(), Some("local"));
    let m = fs::read_to_string(dir.join("uname_m.txt")).unwrap();
    assert_eq!(log.arch.machine.as_deref(), Some(m.trim()));
    assert!(log.kallsyms.is_some(), "kallsyms travels with the log");
    assert!(
        log.pids.comm_count() > 0,
        "saved_cmdlines travels with the log"
    );
    assert!(notes(log).iter().any(|n| !n.warning
        && n.text.starts_with("byte order")
        && n.text.contains("endianness file")));
    assert!(
        !notes(log).iter().any(|n| n.warning),
        "no warnings: {:?}",
        log.notes
    );

    // Every sub-buffer decodes, and the events are the kernel's text's.
    assert_eq!(d.bad_subbufs, 0);
    for cpu in 0..2u32 {
        let len = fs::metadata(dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")))
            .unwrap()
            .len();
        assert_eq!(d.subbufs.get(&cpu).copied().unwrap_or(0), len / 4096);
    }
    let want = text_counts(&data.join(arch).join(text));
    let total: u64 = want.values().sum();
    assert!(total > 0);
    if d.counts != want {
        let diff: Vec<_> = want
            .keys()
            .chain(d.counts.keys())
            .filter(|k| want.get(*k) != d.counts.get(*k))
            .take(10)
            .map(|k| (k.clone(), want.get(k), d.counts.get(k)))
            .collect();
        panic!("{arch}/{dump}: events differ from the kernel's text (cpu, event, pid): want, got: {diff:?}");
    }
    // Per CPU, per event (the README's tables).
    let mut per: BTreeMap<(u32, String), u64> = BTreeMap::new();
    for ((cpu, ev, _), n) in &d.counts {
        *per.entry((*cpu, ev.clone())).or_default() += n;
    }
    eprintln!("{arch}/{dump}: {total} events, per (cpu, event): {per:?}");

    // Statistics: start missing, end = stats.after_drain, periodic = stats.
    for cpu in 0..2u32 {
        let end: Vec<_> = log.cpu_stats(cpu, StatsPhase::End).collect();
        assert_eq!(end.len(), 1);
        let after = stats_file(&dir, cpu, "stats.after_drain", log);
        assert_eq!(end[0].parsed.as_ref().unwrap(), &after);
        let periodic: Vec<_> = log.cpu_stats(cpu, StatsPhase::Periodic).collect();
        assert_eq!(periodic.len(), 1);
        let before = stats_file(&dir, cpu, "stats", log);
        assert_eq!(periodic[0].parsed.as_ref().unwrap(), &before);
        assert_eq!(log.cpu_stats(cpu, StatsPhase::Start).count(), 0);
        // The events decoded are those the kernel says it held.
        let got: u64 = d
            .counts
            .iter()
            .filter(|((c, _, _), _)| *c == cpu)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(Some(got), before.entries, "cpu{cpu}");
        // Losses: the stats' overrun, and the sub-buffers' flags.
        let overrun = after.overrun.unwrap();
        let flagged = d.flagged.get(&cpu).copied().unwrap_or(0);
        let stored = d.stored_lost.get(&cpu).copied().unwrap_or(0);
        if dump == "raw" {
            assert_eq!((overrun, flagged, stored), (0, 0, 0), "cpu{cpu}");
        } else {
            assert!(overrun > 0);
            assert_eq!(flagged, 1, "cpu{cpu}: one sub-buffer flags the overwrite");
            assert!(
                stored == overrun || stored == 0,
                "cpu{cpu}: stored lost count {stored} vs overrun {overrun}"
            );
            let lost_note = notes(log).iter().any(|n| {
                n.text
                    .starts_with(&format!("cpu{cpu}: the kernel lost {overrun} events"))
            });
            assert!(lost_note, "{:?}", log.notes);
        }
    }

    // kmemtrace-check: clean for the complete captures; for the overflow
    // ones, the losses of the flags (and of the statistics, where the
    // check uses end statistics without a start snapshot).
    let (code, v) = check_json(&out);
    let f = &v["files"][0];
    assert_eq!(f["total"]["events"].as_u64(), Some(total), "{f}");
    assert_eq!(f["blocks"]["damaged_regions"].as_u64(), Some(0));
    for c in f["cpus"].as_array().unwrap() {
        assert_eq!(c["bad_subbufs"].as_u64(), Some(0), "{c}");
        assert_eq!(c["missing_subbufs"].as_u64(), Some(0), "{c}");
        assert_eq!(c["unknown_events"].as_u64(), Some(0), "{c}");
    }
    if dump == "raw" {
        assert_eq!(code, 0, "{f}");
        assert_eq!(f["verdict"].as_str(), Some("ok"));
    } else {
        assert_eq!(f["verdict"].as_str(), Some("lost"), "{f}");
        for c in f["cpus"].as_array().unwrap() {
            let cpu = c["cpu"].as_u64().unwrap() as u32;
            let lost = &c["lost"];
            assert_eq!(
                lost["subbuf_flagged"].as_u64(),
                d.flagged.get(&cpu).copied()
            );
            assert_eq!(
                lost["subbuf_stored"].as_u64(),
                d.stored_lost.get(&cpu).copied()
            );
            let overrun = stats_file(&dir, cpu, "stats.after_drain", log)
                .overrun
                .unwrap();
            // No start snapshot in these dumps: the end counters, whole.
            assert_eq!(lost["source"].as_str(), Some("stats"), "{c}");
            assert_eq!(
                lost["stats"]["since"].as_str(),
                Some("buffer creation"),
                "{c}"
            );
            assert_eq!(lost["events"].as_u64(), Some(overrun), "{c}");
        }
    }

    // kmemtrace-report reads it as it would a live recording.
    let r = report_json(&out);
    assert_eq!(
        r["capture"]["events"].as_u64(),
        Some(total),
        "{}",
        r["capture"]
    );
    assert_eq!(r["input"]["end_reason"].as_str(), Some("import"));
    assert_eq!(
        r["kernel"]["byte_order"].as_str(),
        Some(order.name()),
        "{}",
        r["kernel"]
    );
}

#[test]
fn armhf_raw() {
    foreign("armhf", "raw", "trace.txt.gz");
}

#[test]
fn armhf_raw_overflow() {
    foreign("armhf", "raw_overflow", "trace_overflow.txt.gz");
}

#[test]
fn s390x_raw() {
    foreign("s390x", "raw", "trace.txt.gz");
}

#[test]
fn s390x_raw_overflow() {
    foreign("s390x", "raw_overflow", "trace_overflow.txt.gz");
}

/// The byte order without the endianness file comes from uname, and
/// without uname from the sub-buffers; the log says which.
#[test]
fn byte_order_from_uname_then_from_the_data() {
    let Some(data) = common::shared_data_or_skip("byte_order_from_uname_then_from_the_data") else {
        return;
    };
    for (arch, order, machine) in [
        ("s390x", RunTimeEndian::Big, "s390x"),
        ("armhf", RunTimeEndian::Little, "armv7l"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        copy_dir(&data.join(arch).join("raw_overflow"), &dir);
        let expect_events: u64 = text_counts(&data.join(arch).join("trace_overflow.txt.gz"))
            .values()
            .sum();

        fs::remove_file(dir.join("endianness.txt")).unwrap();
        let out = tmp.path().join("uname.kmt");
        import_ok(&dir, &out);
        let d = decode(&out);
        assert_eq!(d.log.arch.byte_order, order, "{arch}");
        assert_eq!(
            d.log.arch.byte_order_source.as_deref(),
            Some("uname machine")
        );
        assert!(
            notes(&d.log)
                .iter()
                .any(|n| n.text.contains(&format!("from uname machine {machine}"))),
            "{:?}",
            d.log.notes
        );
        assert_eq!(d.counts.values().sum::<u64>(), expect_events);

        for f in ["uname.txt", "uname_m.txt", "cpuinfo.txt"] {
            let _ = fs::remove_file(dir.join(f));
        }
        let out = tmp.path().join("data.kmt");
        import_ok(&dir, &out);
        let d = decode(&out);
        assert_eq!(d.log.arch.byte_order, order, "{arch}");
        assert_eq!(
            d.log.arch.byte_order_source.as_deref(),
            Some("sub-buffer plausibility")
        );
        assert!(notes(&d.log).iter().any(|n| n.text.contains(&format!(
            "10 of 10 sampled sub-buffers decode {}-endian",
            order.name()
        ))));
        assert_eq!(d.counts.values().sum::<u64>(), expect_events);
        assert_eq!(d.log.arch.machine, None);
    }
}

/// A minimal ustar writer for the tests.
fn tar_of(dir: &Path, prefix: &str) -> Vec<u8> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) {
        let mut v: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap()).collect();
        v.sort_by_key(|e| e.file_name());
        for e in v {
            let name = format!("{rel}{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), &format!("{name}/"), out);
            } else {
                out.push((name, e.path()));
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, prefix, &mut files);
    let mut t = Vec::new();
    for (name, path) in files {
        let data = fs::read(path).unwrap();
        assert!(name.len() < 100);
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        t.extend_from_slice(&h);
        t.extend_from_slice(&data);
        t.resize(t.len().div_ceil(512) * 512, 0);
    }
    t.extend_from_slice(&[0u8; 1024]);
    t
}

/// A tar (with `./` names or under a directory) and a tar.gz import to the
/// same log content as the directory.
#[test]
fn tar_and_tar_gz_import_like_the_directory() {
    let Some(data) = common::shared_data_or_skip("tar_and_tar_gz_import_like_the_directory") else {
        return;
    };
    let dir = data.join("s390x/raw_overflow");
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("dir.kmt");
    import_ok(&dir, &reference);
    let want = decode(&reference);

    let plain = tar_of(&dir, "./");
    fs::write(tmp.path().join("a.tar"), &plain).unwrap();
    fs::write(tmp.path().join("b.tar"), tar_of(&dir, "capture-1/")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &plain).unwrap();
    fs::write(tmp.path().join("c.tar.gz"), gz.finish().unwrap()).unwrap();
    for t in ["a.tar", "b.tar", "c.tar.gz"] {
        let out = tmp.path().join(format!("{t}.kmt"));
        import_ok(&tmp.path().join(t), &out);
        let got = decode(&out);
        assert_eq!(got.counts, want.counts, "{t}");
        assert_eq!(got.log.arch.byte_order, want.log.arch.byte_order);
        assert_eq!(got.log.metas.len(), want.log.metas.len(), "{t}");
        assert_eq!(got.stored_lost, want.stored_lost);
    }
    // A tar cut short is refused.
    fs::write(tmp.path().join("cut.tar"), &plain[..plain.len() / 2]).unwrap();
    import_fails(
        &tmp.path().join("cut.tar"),
        &tmp.path().join("cut.kmt"),
        "ends inside",
    );
}

/// Broken dumps: one line, exit status 4, no output left behind.
#[test]
fn broken_dumps_fail_with_one_line() {
    let Some(data) = common::shared_data_or_skip("broken_dumps_fail_with_one_line") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let fresh = |name: &str, arch: &str| {
        let d = tmp.path().join(name);
        copy_dir(&data.join(arch).join("raw_overflow"), &d);
        d
    };
    let out = tmp.path().join("out.kmt");

    let d = fresh("no_hp", "armhf");
    fs::remove_file(d.join("events/header_page")).unwrap();
    import_fails(&d, &out, "no events/header_page");
    // A log already there is what it was after a failed import.
    fs::write(&out, b"an earlier log").unwrap();
    let o = import(&d, &out);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(fs::read(&out).unwrap(), b"an earlier log");
    assert!(!tmp.path().join("out.kmt.old").exists());
    fs::remove_file(&out).unwrap();

    let d = fresh("bad_size", "armhf");
    let hp = fs::read_to_string(d.join("events/header_page")).unwrap();
    fs::write(
        d.join("events/header_page"),
        hp.replace("size:4084", "size:4000"),
    )
    .unwrap();
    import_fails(&d, &out, "events/header_page");

    // s390x data described as a 32-bit kernel's: nothing decodes.
    let d = fresh("long4", "s390x");
    let hp = fs::read_to_string(d.join("events/header_page")).unwrap();
    let hp32 = hp
        .replace(
            "local_t commit;\toffset:8;\tsize:8;",
            "local_t commit;\toffset:8;\tsize:4;",
        )
        .replace("offset:16;\tsize:4080;", "offset:12;\tsize:4084;");
    assert_ne!(hp, hp32);
    fs::write(d.join("events/header_page"), hp32).unwrap();
    import_fails(&d, &out, "header_page");

    // armhf data with an s390x header_page (64-bit, and big-endian by its
    // endianness file): the data contradicts it.
    let d = fresh("wrong_kernel", "armhf");
    fs::copy(
        data.join("s390x/raw_overflow/events/header_page"),
        d.join("events/header_page"),
    )
    .unwrap();
    import_fails(&d, &out, "sub-buffers");

    let d = fresh("no_data", "armhf");
    fs::remove_dir_all(d.join("per_cpu")).unwrap();
    import_fails(&d, &out, "no per_cpu/cpuN/trace_pipe_raw");

    import_fails(&tmp.path().join("missing"), &out, "does not exist");
    let junk = tmp.path().join("junk.bin");
    fs::write(&junk, vec![0x5a; 4096]).unwrap();
    import_fails(&junk, &out, "neither a directory, a tar archive");

    // --import without -o is a usage error.
    let o = kmemtraced(&["--import".as_ref(), d.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    // --import does not mix with live-recording options.
    let o = kmemtraced(&[
        "--import".as_ref(),
        d.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "-d".as_ref(),
        "1s".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A trace_pipe_raw cut inside a sub-buffer: the whole sub-buffers are
/// kept, and a warning NOTE says what was left out.
#[test]
fn partial_last_subbuf_is_left_out_with_a_note() {
    let Some(data) = common::shared_data_or_skip("partial_last_subbuf_is_left_out_with_a_note")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    copy_dir(&data.join("armhf/raw"), &d);
    let raw = d.join("per_cpu/cpu1/trace_pipe_raw");
    let len = fs::metadata(&raw).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&raw).unwrap();
    f.set_len(len - 100).unwrap();
    let out = tmp.path().join("x.kmt");
    let o = import(&d, &out);
    assert!(o.status.success());
    let got = decode(&out);
    assert_eq!(got.subbufs[&1], len / 4096 - 1);
    assert_eq!(got.bad_subbufs, 0);
    assert!(
        notes(&got.log).iter().any(|n| n.warning
            && n.text
                .contains("not a whole number of 4096-byte sub-buffers")
            && n.text.contains("last 3996 bytes")),
        "{:?}",
        got.log.notes
    );
    // And the kernel's count no longer matches: said too.
    assert!(notes(&got.log)
        .iter()
        .any(|n| n.warning && n.text.starts_with("cpu1: ") && n.text.contains("events decoded")));
}

/// The shared foreign dumps imported with kpack hold the same sub-buffers,
/// bit for bit, as imported with zstd alone, and report the same.
#[test]
fn kpack_imports_hold_the_same_sub_buffers_and_report_the_same() {
    let Some(data) = common::shared_data_or_skip("kpack imports") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["armhf", "s390x"] {
        let dir = data.join(arch).join("raw");
        let mut logs = Vec::new();
        for c in ["1", "kpack"] {
            let out = tmp.path().join(format!("{arch}-{c}.kmt"));
            let o = kmemtraced(&[
                "--import".as_ref(),
                dir.as_os_str(),
                "-c".as_ref(),
                c.as_ref(),
                "-o".as_ref(),
                out.as_os_str(),
                "-q".as_ref(),
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            logs.push(out);
        }
        let raw = |p: &Path| {
            let log = Log::open(p).unwrap();
            let mut all = Vec::new();
            for cpu in log.cpus() {
                log.visit_cpu(cpu, |v| all.extend_from_slice(v.raw), |p| panic!("{p}"));
            }
            (
                log.version,
                log.blocks
                    .iter()
                    .map(|b| b.header.flags)
                    .collect::<Vec<_>>(),
                all,
            )
        };
        let (zstd, packed) = (raw(&logs[0]), raw(&logs[1]));
        assert_eq!(zstd.0, (1, 1), "{arch}");
        assert_eq!(packed.0, (1, 3), "{arch}");
        assert!(
            packed
                .1
                .iter()
                .all(|f| f & kmemtrace_format::block::FLAG_KPACK != 0),
            "{arch}: {:?}",
            packed.1
        );
        assert!(zstd.2 == packed.2, "{arch}: the sub-buffers differ");
        let (code, check) = check_json(&logs[1]);
        assert_eq!(code, 0, "{arch}: {check}");
        let mut reports = logs.iter().map(|l| report_json(l)).collect::<Vec<_>>();
        for r in &mut reports {
            // Its name, size and version: the only differences allowed.
            for k in ["name", "bytes", "format_version"] {
                r["input"][k].take();
            }
        }
        assert_eq!(reports[0], reports[1], "{arch}");
    }
}

/// A buffer reset between a dump's start snapshot and its later ones (the
/// overrun counter falls): the import's summary counts the losses after
/// the reset, as kmemtrace-check counts them in the log it writes. It
/// used to take start-to-end differences, where the fall counted 0.
#[test]
fn a_reset_between_snapshots_counts_the_same_losses_as_the_checker() {
    let Some(data) = common::shared_data_or_skip("import after a reset") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let dump = d.path().join("dump");
    copy_dir(&data.join("armhf/raw_overflow"), &dump);
    let cpu0 = dump.join("per_cpu/cpu0");
    // Before the reset the kernel had counted more overruns (9000) than it
    // counts after it (8577 in `stats`, the same in `stats.after_drain`).
    let before = fs::read_to_string(cpu0.join("stats"))
        .unwrap()
        .replace("overrun: 8577", "overrun: 9000")
        .replace("now ts:    15.398959", "now ts:    15.000000");
    assert!(before.contains("overrun: 9000"), "{before}");
    fs::write(cpu0.join("stats.start"), before).unwrap();
    let out = d.path().join("reset.kmt");
    let o = kmemtraced(&[
        "--import".as_ref(),
        dump.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let summary: u64 = err
        .split_once(" lost by the kernel")
        .and_then(|(before, _)| before.rsplit(", ").next())
        .unwrap_or_else(|| panic!("no losses in the summary: {err}"))
        .replace(',', "")
        .parse()
        .unwrap();
    let (_, v) = check_json(&out);
    let f = &v["files"][0];
    let per_cpu: Vec<u64> = f["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["lost"]["events"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(per_cpu[0], 8577, "cpu0 after the reset: {f}");
    assert_eq!(summary, per_cpu.iter().sum::<u64>(), "{err}\n{f}");
}
