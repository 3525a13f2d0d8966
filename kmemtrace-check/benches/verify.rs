//! Verification speed: `cargo bench -p kmemtrace-check --bench verify`.
//!
//! With `KMT_BENCH_LOG=<log>` it checks that log (e.g. one recorded by
//! kmemtraced under load). Without, it **synthesises** a large log from the
//! real s390x capture in `../shared/data/s390x/raw` (its 200 real CPU 0 sub-buffers,
//! CPU 0's, repeated on two CPUs with their page time stamps shifted forward so time keeps
//! increasing, until `KMT_BENCH_MB` MiB of sub-buffers, default 1024),
//! written once compressed (zstd 1, as the recorder does) and once
//! uncompressed. With `KMT_BENCH_REPEAT=<log>` the sub-buffers repeated are
//! that log's instead (time stamps shifted the same way; sub-buffers that
//! hold absolute time stamps are left out).
//!
//! Prints, per log: time to open (index), time to check in full, MB/s of
//! uncompressed sub-buffer data, MB/s of file, events/s.

use kmemtrace_check::{check_log, Options};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{Meta, MetaKind, StatsPhase, StatsRecord};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_import::log::Log;
use kmemtrace_kernel::{parse_subbuf, Endian, HeaderPage, RbRecordKind, RunTimeEndian};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Instant;

fn bench(path: &Path, label: &str) {
    let file_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    // Warm the page cache.
    let _ = std::fs::read(path);
    for threads in [1usize, 0] {
        let mut best = (f64::MAX, f64::MAX);
        let mut report = None;
        for _ in 0..3 {
            let t0 = Instant::now();
            let log = Log::open(path).expect("open");
            let t_open = t0.elapsed().as_secs_f64();
            let r = check_log(&log, &Options { threads }, &AtomicU64::new(0));
            let t_all = t0.elapsed().as_secs_f64();
            if t_all < best.1 {
                best = (t_open, t_all);
            }
            report = Some(r);
        }
        let r = report.unwrap();
        let data = r.total.counts.data_bytes as f64;
        let mb = |b: f64, t: f64| b / t / 1e6;
        println!(
            "{label}: threads {}: open {:.3} s, total {:.3} s; {:.0} MB/s of sub-buffer data ({:.0} MB), {:.0} MB/s of file ({:.0} MB), {:.1} M events/s; verdict {}",
            if threads == 0 { "all".to_string() } else { threads.to_string() },
            best.0,
            best.1,
            mb(data, best.1),
            data / 1e6,
            mb(file_len as f64, best.1),
            file_len as f64 / 1e6,
            r.total.counts.events as f64 / best.1 / 1e6,
            r.summary
        );
    }
}

/// Real sub-buffers to repeat, with their arch tag and metadata.
struct Source {
    arch: ArchTag,
    metas: Vec<Meta>,
    pages: Vec<Vec<u8>>,
}

fn from_capture(dir: &Path) -> Source {
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let hp = HeaderPage::parse(&text("events/header_page")).unwrap();
    let mut arch = ArchTag::new(
        RunTimeEndian::Big,
        hp.long_size() as u8,
        4096,
        hp.data_offset() as u32,
    );
    arch.machine = Some("s390x".into());
    let mut metas = vec![
        Meta::new(MetaKind::HeaderPage, text("events/header_page")),
        Meta::new(MetaKind::HeaderEvent, text("events/header_event")),
        Meta::new(MetaKind::Kallsyms, text("kallsyms")),
    ];
    for e in std::fs::read_dir(dir.join("events/kmem")).unwrap() {
        let ev = e.unwrap().file_name().to_string_lossy().into_owned();
        let id: u32 = text(&format!("events/kmem/{ev}/id"))
            .trim()
            .parse()
            .unwrap();
        metas.push(Meta::event_format(
            "kmem",
            &ev,
            id,
            text(&format!("events/kmem/{ev}/format")),
        ));
    }
    let mut pages = Vec::new();
    // One CPU's pages, in stream order: time increases through them.
    let raw = std::fs::read(dir.join("per_cpu/cpu0/trace_pipe_raw")).unwrap();
    pages.extend(raw.chunks_exact(4096).map(|p| p.to_vec()));
    Source { arch, metas, pages }
}

fn from_log(path: &Path) -> Source {
    let log = Log::open(path).expect("open source log");
    let mut pages = Vec::new();
    // The first CPU's pages, in stream order: time increases through them.
    for cpu in log.cpus().into_iter().take(1) {
        log.visit_cpu(
            cpu,
            |v| {
                let Ok(sb) = v.subbuf else { return };
                let abs = sb.events(log.endian).any(
                    |r| matches!(r, Ok(r) if matches!(r.kind, RbRecordKind::TimeStamp { .. })),
                );
                if !abs && !sb.missed_events {
                    pages.push(v.raw.to_vec());
                }
            },
            |_| {},
        );
    }
    Source {
        arch: log.arch.clone(),
        metas: log.metas.clone(),
        pages,
    }
}

/// Writes `mb` MiB of sub-buffers, `src.pages` repeated on two CPUs with
/// time shifted forward on each round.
fn synthesise(src: &Source, mb: u64, c: Compression, out: &Path) {
    let e = src.arch.byte_order;
    let layout = kmemtrace_kernel::SubBufLayout {
        long_size: usize::from(src.arch.long_size),
        data_offset: src.arch.data_offset as usize,
        subbuf_size: src.arch.subbuf_size as usize,
    };
    // Time covered by the pages, to shift each round past the last.
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for p in &src.pages {
        if let Ok(sb) = parse_subbuf(e, &layout, p) {
            lo = lo.min(sb.timestamp);
            for r in sb.events(e).flatten() {
                hi = hi.max(r.ts);
            }
        }
    }
    let span = hi.saturating_sub(lo) + 1;
    // Per CPU, pages in time order so each CPU's stream is monotonic.
    let mut sorted: Vec<&Vec<u8>> = src.pages.iter().collect();
    sorted.sort_by_key(|p| {
        parse_subbuf(e, &layout, p)
            .map(|s| s.timestamp)
            .unwrap_or(0)
    });
    let f = std::fs::File::create(out).unwrap();
    let mut w = LogWriter::new(BufWriter::with_capacity(1 << 20, f), &src.arch, c).unwrap();
    for m in &src.metas {
        w.write_meta(m).unwrap();
    }
    for cpu in 0..2 {
        w.write_stats(&StatsRecord {
            cpu,
            phase: StatsPhase::Start,
            wall_ns: None,
            text: b"overrun: 0\ncommit overrun: 0\ndropped events: 0\n".to_vec(),
        })
        .unwrap();
    }
    let sb = layout.subbuf_size;
    let per_block = (1 << 20) / sb; // 1 MiB blocks, like the recorder
    let target = mb << 20;
    let (mut written, mut round) = (0u64, 0u64);
    let mut bufs = [Vec::new(), Vec::new()];
    'outer: loop {
        for p in &sorted {
            for (cpu, buf) in bufs.iter_mut().enumerate() {
                let mut q = (*p).clone();
                let ts = e.read_u64(&q, 0).unwrap() + round * span;
                let bytes = if e.is_big_endian() {
                    ts.to_be_bytes()
                } else {
                    ts.to_le_bytes()
                };
                q[..8].copy_from_slice(&bytes);
                buf.extend_from_slice(&q);
                if buf.len() >= per_block * sb {
                    w.write_cpu_data(cpu as u32, buf).unwrap();
                    written += buf.len() as u64;
                    buf.clear();
                }
            }
            if written >= target {
                break 'outer;
            }
        }
        round += 1;
    }
    for (cpu, buf) in bufs.iter().enumerate() {
        if !buf.is_empty() {
            w.write_cpu_data(cpu as u32, buf).unwrap();
        }
        w.write_stats(&StatsRecord {
            cpu: cpu as u32,
            phase: StatsPhase::End,
            wall_ns: None,
            text: b"overrun: 0\ncommit overrun: 0\ndropped events: 0\n".to_vec(),
        })
        .unwrap();
    }
    w.finish(None, "benchmark", None).unwrap();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(p) = std::env::var_os("KMT_BENCH_LOG") {
        bench(Path::new(&p), "real log");
        return;
    }
    let mb: u64 = std::env::var("KMT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let src = match std::env::var_os("KMT_BENCH_REPEAT") {
        Some(p) => from_log(Path::new(&p)),
        None => {
            let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/s390x/raw");
            if !data.is_dir() {
                eprintln!(
                    "SKIP verify bench: {} not found and KMT_BENCH_LOG not set",
                    data.display()
                );
                return;
            }
            from_capture(&data)
        }
    };
    let dir = std::env::temp_dir();
    for (c, name) in [
        (Compression::Zstd(1), "zstd1"),
        (Compression::None, "plain"),
    ] {
        let out: PathBuf = dir.join(format!("kmemtrace-bench-{}-{name}.kmt", std::process::id()));
        synthesise(&src, mb, c, &out);
        bench(
            &out,
            &format!("synthetic {mb} MiB ({name}, real sub-buffers repeated)"),
        );
        let _ = std::fs::remove_file(&out);
    }
}
