//! Decoder throughput on real captures: `cargo bench -p kmemtrace-format`.
//!
//! Decodes every sub-buffer of the real foreign-kernel captures in
//! `../shared/data` (armhf: 32-bit little-endian; s390x: 64-bit big-endian)
//! and of any `.kmt` logs named in `KMT_BENCH_LOGS` (colon-separated), in
//! two passes each: ring-buffer records only, and records plus typed kmem
//! events. Prints events per second. Timing lives here, never in tests.

use kmemtrace_import::log::Log;
use kmemtrace_kernel::{
    parse_subbuf, BigEndian, Endian, EventFormat, HeaderPage, KmemDecoder, LittleEndian,
    RbRecordKind, RunTimeEndian, SubBufLayout,
};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

struct Capture {
    name: String,
    endian: RunTimeEndian,
    layout: SubBufLayout,
    data: Vec<u8>,
    decoder: KmemDecoder,
}

fn foreign(dir: &Path, name: &str, endian: RunTimeEndian) -> Option<Capture> {
    let hp = std::fs::read_to_string(dir.join("events/header_page")).ok()?;
    let layout = SubBufLayout::from_header_page(&HeaderPage::parse(&hp).ok()?);
    let mut formats = Vec::new();
    for e in std::fs::read_dir(dir.join("events/kmem")).ok()? {
        let p = e.ok()?.path().join("format");
        if let Ok(t) = std::fs::read_to_string(&p) {
            if let Ok(f) = EventFormat::parse(&t, Some("kmem")) {
                formats.push(f);
            }
        }
    }
    let mut data = Vec::new();
    for cpu in 0.. {
        match std::fs::read(dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))) {
            Ok(d) => data.extend_from_slice(&d),
            Err(_) => break,
        }
    }
    Some(Capture {
        name: name.into(),
        endian,
        layout,
        data,
        decoder: KmemDecoder::new(&formats),
    })
}

fn from_log(path: &str) -> Option<Capture> {
    let log = Log::open(Path::new(path)).ok()?;
    let mut data = Vec::new();
    for cpu in log.cpus() {
        log.visit_cpu(cpu, |v| data.extend_from_slice(v.raw), |_| {});
    }
    Some(Capture {
        name: path.into(),
        endian: log.endian,
        layout: log.layout,
        decoder: log.kmem_decoder(),
        data,
    })
}

fn pass<E: Endian>(c: &Capture, e: E, typed: bool) -> (u64, u64) {
    let mut events = 0u64;
    let mut sum = 0u64;
    for page in c.data.chunks_exact(c.layout.subbuf_size) {
        let Ok(sb) = parse_subbuf(e, &c.layout, page) else {
            continue;
        };
        for r in sb.events(e) {
            let Ok(r) = r else { break };
            if let RbRecordKind::Data { payload } = r.kind {
                events += 1;
                if typed {
                    if let Ok(Some(ev)) = c.decoder.decode(e, payload) {
                        sum = sum.wrapping_add(ev.ptr ^ ev.bytes_alloc ^ ev.call_site);
                    }
                } else {
                    sum = sum.wrapping_add(r.ts);
                }
            }
        }
    }
    (events, sum)
}

fn measure(c: &Capture, typed: bool) -> (u64, f64) {
    let run = || match c.endian {
        RunTimeEndian::Little => pass(c, LittleEndian, typed),
        RunTimeEndian::Big => pass(c, BigEndian, typed),
    };
    let (events, _) = run();
    let mut iters = 0u64;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        black_box(run());
        iters += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    (events, (events * iters) as f64 / secs)
}

fn main() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    let mut caps: Vec<Capture> = Vec::new();
    for (arch, e) in [
        ("armhf", RunTimeEndian::Little),
        ("s390x", RunTimeEndian::Big),
    ] {
        if let Some(c) = foreign(
            &shared.join(arch).join("raw"),
            &format!("{arch} (real, 6.1)"),
            e,
        ) {
            caps.push(c);
        }
    }
    if let Ok(list) = std::env::var("KMT_BENCH_LOGS") {
        caps.extend(
            list.split(':')
                .filter(|s| !s.is_empty())
                .filter_map(from_log),
        );
    }
    if caps.is_empty() {
        eprintln!("no captures: ../shared/data is missing and KMT_BENCH_LOGS is unset");
        return;
    }
    println!(
        "{:<28} {:>10} {:>10} {:>22} {:>22}",
        "capture", "events", "MiB", "records only (ev/s)", "typed kmem (ev/s)"
    );
    for c in &caps {
        let (n, raw) = measure(c, false);
        let (_, typed) = measure(c, true);
        println!(
            "{:<28} {:>10} {:>10.1} {:>19.1} M {:>19.1} M",
            c.name,
            n,
            c.data.len() as f64 / (1 << 20) as f64,
            raw / 1e6,
            typed / 1e6
        );
    }
}
