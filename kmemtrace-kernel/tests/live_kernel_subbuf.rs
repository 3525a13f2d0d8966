//! Decodes real sub-buffers from the running kernel and compares them with
//! the kernel's own text rendering of the same events.
//!
//! In a private tracefs instance (`instances/kmt-subbuf-test-<pid>`): enable
//! the kmem events, cause some allocations, stop recording, read the
//! non-consuming `trace` text and each CPU's `stats`, then drain every
//! `per_cpu/cpuN/trace_pipe_raw` (non-blocking, in sub-buffer-sized reads,
//! until EAGAIN or end of file) and decode it with the layout from the
//! instance's `events/header_page`. Event counts per CPU, the stats'
//! `entries`, and each event's CPU, time stamp (in microseconds, as printed)
//! and name must agree. The instance is removed even on failure.
//!
//! Skipped, with a message, when not root or without tracefs. Only trace
//! events are used (function-tracer knobs are refused on some machines).

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use kmemtrace_kernel::{
    parse_subbuf, BigEndian, Endian, HeaderEvent, HeaderPage, LittleEndian, RbRecordKind,
    SubBufLayout,
};

fn skip(why: &str) {
    common::skip("live_kernel_subbuf", common::Missing::Tracefs, why);
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn tracefs() -> Option<PathBuf> {
    for d in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(d).join("instances").is_dir() {
            return Some(PathBuf::from(d));
        }
    }
    let _ = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status();
    Path::new("/sys/kernel/tracing/instances")
        .is_dir()
        .then(|| PathBuf::from("/sys/kernel/tracing"))
}

/// Removes the instance when dropped (after disabling its events).
struct Instance {
    dir: PathBuf,
}

impl Instance {
    fn create(tracefs: &Path) -> std::io::Result<Self> {
        let dir = tracefs
            .join("instances")
            .join(format!("kmt-subbuf-test-{}", std::process::id()));
        fs::create_dir(&dir)?;
        Ok(Instance { dir })
    }
    fn write(&self, file: &str, v: &str) {
        let p = self.dir.join(file);
        let mut f = OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        f.write_all(v.as_bytes())
            .unwrap_or_else(|e| panic!("writing {v:?} to {}: {e}", p.display()));
    }
    /// `events/header_page` and `events/header_event` answer only a read at
    /// offset 0 (`show_header_page_file()`: `if (*ppos) return 0;`), so a
    /// reader that starts with a small probe read (as `read_to_string`
    /// does) gets a truncated text: read them with one large read.
    fn read_once(&self, file: &str) -> String {
        let p = self.dir.join(file);
        let mut f = fs::File::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut buf = vec![0u8; 1 << 16];
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(n < buf.len(), "{}: larger than one read", p.display());
        String::from_utf8(buf[..n].to_vec()).expect("text")
    }
    fn read(&self, file: &str) -> String {
        let p = self.dir.join(file);
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        for (f, v) in [("tracing_on", "0"), ("events/kmem/enable", "0")] {
            if let Ok(mut h) = OpenOptions::new().write(true).open(self.dir.join(f)) {
                let _ = h.write_all(v.as_bytes());
            }
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!(
                "live_kernel_subbuf: could not remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// Some work that allocates: files, processes, memory.
fn workload() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        let p = dir.path().join(format!("f{i}"));
        fs::write(&p, vec![i as u8; 1000 + 97 * i]).unwrap();
        let _ = fs::read(&p).unwrap();
    }
    for _ in 0..3 {
        let _ = Command::new("true").status();
    }
    let v: Vec<Vec<u8>> = (0..64).map(|i| vec![1u8; 4096 * (1 + i % 8)]).collect();
    assert_eq!(v.len(), 64);
}

/// Drains one CPU's `trace_pipe_raw`.
fn drain(path: &Path, subbuf_size: usize, flags: i32) -> Vec<u8> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut buf = vec![0u8; subbuf_size];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                assert_eq!(n, subbuf_size, "{}: short read", path.display());
                out.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    out
}

/// Decoded data events `(ts, common_type)`, pages with missed events, and
/// counts of the other records `[type_len 0, padding, time extend, time stamp]`.
struct Decoded {
    events: Vec<(u64, u16)>,
    missed: usize,
    other: [usize; 4],
}

fn decode<E: Endian>(e: E, layout: &SubBufLayout, raw: &[u8], what: &str) -> Decoded {
    let mut d = Decoded {
        events: Vec::new(),
        missed: 0,
        other: [0; 4],
    };
    for (i, page) in layout.split(raw).enumerate() {
        let sb =
            parse_subbuf(e, layout, page).unwrap_or_else(|err| panic!("{what} page {i}: {err}"));
        d.missed += usize::from(sb.missed_events);
        for r in sb.events(e) {
            let r = r.unwrap_or_else(|err| panic!("{what} page {i}: {err}"));
            match r.kind {
                RbRecordKind::Data { payload } => {
                    d.other[0] += usize::from(r.len - payload.len() == 8);
                    d.events
                        .push((r.ts, e.read_u16(payload, 0).expect("common_type")));
                }
                RbRecordKind::Padding { .. } => d.other[1] += 1,
                RbRecordKind::TimeExtend { .. } => d.other[2] += 1,
                RbRecordKind::TimeStamp { .. } => d.other[3] += 1,
            }
        }
    }
    d
}

#[test]
fn live_kernel_sub_buffers_match_kernel_text() {
    if !is_root() {
        return skip("not root");
    }
    let flags = common::O_NONBLOCK;
    let Some(tfs) = tracefs() else {
        return skip("no tracefs (and mounting it failed)");
    };
    let inst = match Instance::create(&tfs) {
        Ok(i) => i,
        Err(e) => return skip(&format!("cannot create a tracefs instance: {e}")),
    };

    let hp = HeaderPage::parse(&inst.read_once("events/header_page")).expect("header_page");
    assert_eq!(
        HeaderEvent::parse(&inst.read_once("events/header_event")).expect("header_event"),
        HeaderEvent::KERNEL
    );
    let layout = SubBufLayout::from_header_page(&hp);
    if let Ok(kb) = fs::read_to_string(inst.dir.join("buffer_subbuf_size_kb")) {
        assert_eq!(
            kb.trim().parse::<usize>().unwrap() * 1024,
            layout.subbuf_size,
            "buffer_subbuf_size_kb"
        );
    }
    #[cfg(target_pointer_width = "64")]
    assert_eq!(layout.long_size, 8);

    let mut names: BTreeMap<u16, String> = BTreeMap::new();
    for ent in fs::read_dir(inst.dir.join("events/kmem")).unwrap() {
        let ent = ent.unwrap();
        if let Ok(id) = fs::read_to_string(ent.path().join("id")) {
            names.insert(
                id.trim().parse().unwrap(),
                ent.file_name().to_string_lossy().into_owned(),
            );
        }
    }
    assert!(!names.is_empty(), "no kmem events");

    inst.write("buffer_size_kb", "2048");
    inst.write("tracing_on", "1");
    inst.write("events/kmem/enable", "1");
    workload();
    // An idle gap longer than 2^27 ns makes later events likely to need a
    // time extend.
    std::thread::sleep(std::time::Duration::from_millis(300));
    workload();
    inst.write("tracing_on", "0");
    inst.write("events/kmem/enable", "0");

    let (text, lost_lines) = common::parse_trace_text(&inst.read("trace"));
    let mut cpus: Vec<usize> = fs::read_dir(inst.dir.join("per_cpu"))
        .unwrap()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("cpu")?
                .parse()
                .ok()
        })
        .collect();
    cpus.sort_unstable();
    let stats: Vec<String> = cpus
        .iter()
        .map(|c| inst.read(&format!("per_cpu/cpu{c}/stats")))
        .collect();

    let mut total = 0;
    let mut total_missed = 0;
    for (k, &cpu) in cpus.iter().enumerate() {
        let what = format!("cpu{cpu}");
        let raw = drain(
            &inst.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")),
            layout.subbuf_size,
            flags,
        );
        let d = if cfg!(target_endian = "big") {
            decode(BigEndian, &layout, &raw, &what)
        } else {
            decode(LittleEndian, &layout, &raw, &what)
        };
        total_missed += d.missed;
        let events = d.events;

        let entries: u64 = stats[k]
            .lines()
            .find_map(|l| l.strip_prefix("entries:")?.trim().parse().ok())
            .expect("stats entries");
        assert_eq!(
            entries,
            events.len() as u64,
            "{what}: stats entries vs decoded events"
        );
        assert!(
            events.windows(2).all(|w| w[0].0 <= w[1].0),
            "{what}: time goes backwards"
        );

        let text_cpu: Vec<(u64, &str)> = text
            .iter()
            .filter(|t| t.0 == cpu)
            .map(|t| (t.1, t.2.as_str()))
            .collect();
        assert_eq!(
            text_cpu.len(),
            events.len(),
            "{what}: events in text vs sub-buffers"
        );
        for (i, ((ns, id), (us, nm))) in events.iter().zip(&text_cpu).enumerate() {
            let name = names.get(id).map(String::as_str).unwrap_or("?");
            assert_eq!(
                (common::ns_to_printed_usecs(*ns), name),
                (*us, *nm),
                "{what}: event {i} (ts {ns} ns)"
            );
        }
        eprintln!(
            "{what}: {} sub-buffers, {} events match the kernel's text \
             ({} type_len 0, {} padding, {} time extend, {} time stamp records)",
            raw.len() / layout.subbuf_size,
            events.len(),
            d.other[0],
            d.other[1],
            d.other[2],
            d.other[3]
        );
        total += events.len();
    }
    assert_eq!(total, text.len());
    assert!(total > 0, "the workload produced no kmem events");
    if total_missed > 0 || lost_lines > 0 {
        eprintln!("note: {total_missed} sub-buffers with missed events, {lost_lines} LOST lines in the text");
    }
    drop(inst);
}
