//! Where the report's time goes, per event: each stage of the pipeline
//! run alone, on one thread, over one log, then the whole pipeline with
//! 1, 2, ... decoder threads.
//!
//!   cargo bench -p kmemtrace-analysis --bench cost_split -- LOG
//!
//! (or KMT_BENCH_LOG=LOG). Stages: read (the stored blocks from the file,
//! page cache warm), decompress (zstd), walk (sub-buffer headers and record
//! framing), decode (typed kmem events, interning; what the decoders add to
//! the three before), merge (k-way by time over decoded blocks), analyse
//! (the object tracker and the passes). The decoders run in parallel in the
//! real pipeline; the merge and the analysis on one thread: that one sets
//! the pace once decoding is spread over enough cores.

use kmemtrace_analysis::filter::Filter;
use kmemtrace_analysis::intern::{Interner, SiteTable};
use kmemtrace_analysis::passes::objects::Objects;
use kmemtrace_analysis::passes::{cross_cpu, misuse, page, slab, Passes};
use kmemtrace_analysis::stream::decode::{BlockOut, Decoder, Local};
use kmemtrace_analysis::stream::merge::{Merger, StreamInput, Submit};
use kmemtrace_analysis::{analyse, Options, Symbols};
use kmemtrace_format::block::{decode_payload_into, BLOCK_HEADER_LEN};
use kmemtrace_format::log::{CpuBlockRef, Log};
use kmemtrace_format::records::CPU_DATA_HEADER_LEN;
use kmemtrace_format::walk::{subbufs, with_endian, WithEndian};
use kmemtrace_format::Endian;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Mutex};
use std::time::Instant;

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// Counts the data records of decompressed payloads.
struct Walk<'a>(&'a Log, &'a [(CpuBlockRef, Vec<u8>)]);

impl WithEndian for Walk<'_> {
    type Output = u64;
    fn run<E: Endian>(self, e: E) -> u64 {
        let mut n = 0;
        for (r, data) in self.1 {
            for item in subbufs(e, &self.0.layout, r.first_subbuf, data) {
                if let Ok(sb) = item.subbuf {
                    n += sb.data_events(e).count() as u64;
                }
            }
        }
        n
    }
}

fn main() {
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .or_else(|| std::env::var("KMT_BENCH_LOG").ok());
    let Some(path) = path else {
        eprintln!(
            "cost_split: give a log: cargo bench -p kmemtrace-analysis --bench cost_split -- LOG"
        );
        return;
    };
    let log = Log::open(std::path::Path::new(&path)).expect("open the log");
    let mut blocks: Vec<CpuBlockRef> = Vec::new();
    for cpu in log.cpus() {
        blocks.extend(log.cpu_blocks(cpu).into_iter().copied());
    }
    let file = std::fs::File::open(&path).expect("open");

    // 1. read
    let t = Instant::now();
    let stored: Vec<Vec<u8>> = blocks
        .iter()
        .map(|r| {
            let mut b = vec![0u8; BLOCK_HEADER_LEN + r.header.stored_len as usize];
            file.read_exact_at(&mut b, r.offset).expect("read");
            b
        })
        .collect();
    let t_read = secs(t);

    // 2. decompress
    let t = Instant::now();
    let mut dctx = None;
    let payloads: Vec<(CpuBlockRef, Vec<u8>)> = blocks
        .iter()
        .zip(&stored)
        .map(|(r, s)| {
            let mut out = Vec::new();
            let p = &s[BLOCK_HEADER_LEN..];
            let data = match decode_payload_into(&r.header, p, &mut dctx, &mut out).expect("zstd") {
                None => p.to_vec(),
                Some(n) => {
                    out.truncate(n);
                    out
                }
            };
            (*r, data[CPU_DATA_HEADER_LEN.min(data.len())..].to_vec())
        })
        .collect();
    let t_zstd = secs(t);
    drop(stored);

    // 3. walk
    let t = Instant::now();
    let records = with_endian(log.endian, Walk(&log, &payloads));
    let t_walk = secs(t);
    drop(payloads);

    // 4. decode (one thread, every block)
    let kmem = log.kmem_decoder();
    let filter = Filter::default();
    let interner = Interner::new();
    let sites = SiteTable::default();
    let progress = AtomicU64::new(0);
    let pool = Mutex::new(Vec::new());
    let dec = Decoder {
        log: &log,
        kmem: &kmem,
        interner: &interner,
        sites: &sites,
        filter: &filter,
        progress: &progress,
        pool: &pool,
    };
    let mut local = Local::new(&dec);
    let t = Instant::now();
    let outs: Vec<BlockOut> = blocks.iter().map(|r| dec.decode(r, &mut local)).collect();
    let t_decode_all = secs(t);
    let events: u64 = outs.iter().map(|o| o.events.len() as u64).sum();

    // 5. merge
    let cpus = log.cpus();
    let inputs: Vec<StreamInput> = cpus
        .iter()
        .map(|&cpu| StreamInput {
            cpu,
            blocks: blocks
                .iter()
                .filter(|b| b.cpu == cpu)
                .map(|b| (b.first_subbuf, b.count))
                .collect(),
            written: log.end_total(cpu).map(|t| t.subbufs),
        })
        .collect();
    let mut per_cpu: Vec<Vec<Option<BlockOut>>> = cpus.iter().map(|_| Vec::new()).collect();
    for (r, o) in blocks.iter().zip(outs) {
        let i = cpus.binary_search(&r.cpu).expect("cpu");
        per_cpu[i].push(Some(o));
    }
    let per_cpu = Mutex::new(per_cpu);
    let submit: Submit<'_> = Box::new(|i, k| {
        let (tx, rx) = mpsc::sync_channel(1);
        let out = per_cpu.lock().unwrap()[i][k].take().expect("block");
        tx.send(out).unwrap();
        rx
    });
    let t = Instant::now();
    let mut m = Merger::new(inputs, submit, (4, 1 << 20), None);
    let mut merged = Vec::with_capacity(events as usize);
    while let Some(ev) = m.next_event() {
        merged.push(ev);
    }
    let t_merge = secs(t);
    let windows = std::mem::take(&mut m.windows);
    drop(m);

    // 6. analyse
    let syms = Symbols {
        table: None,
        raw: true,
        source: String::new(),
    };
    let mut passes = Passes {
        objects: Objects::new(&filter, 32768, &sites, Box::new(|a| syms.name(a))),
        slab: slab::SlabPass::new(&log.cpu_nodes, false),
        misuse: misuse::MisusePass::default(),
        cross_cpu: cross_cpu::CrossCpuPass::default(),
        page: page::PagePass::new(&filter, 4096),
        first_ts: None,
        last_ts: 0,
    };
    let t = Instant::now();
    for ev in &merged {
        passes.event(ev, &windows);
    }
    passes.finish();
    let t_analyse = secs(t);

    let n = events.max(1) as f64;
    let t_decode = (t_decode_all - t_read - t_zstd - t_walk).max(0.0);
    println!(
        "{path}: {} events ({} records in the sub-buffers), {} blocks, {} CPUs",
        events,
        records,
        blocks.len(),
        cpus.len()
    );
    println!("{:<12} {:>9} {:>10}", "stage", "seconds", "ns/event");
    for (name, s) in [
        ("read", t_read),
        ("decompress", t_zstd),
        ("walk", t_walk),
        ("decode", t_decode),
        ("merge", t_merge),
        ("analyse", t_analyse),
    ] {
        println!("{name:<12} {s:>9.3} {:>10.1}", s * 1e9 / n);
    }
    let serial = t_merge + t_analyse;
    println!(
        "one thread in all: {:.3} s; the serial part (merge + analyse) alone allows {:.1} M events/s",
        t_decode_all + serial,
        n / serial / 1e6
    );

    // 7. the whole pipeline, by decoder threads
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get());
    let mut threads = 1;
    while threads <= cores.max(1) {
        let opts = Options {
            filter: Filter::default(),
            comm: None,
            traced: None,
            per_pointer: false,
            remember_frees: 32768,
            min_age: 0,
            sort: vec![kmemtrace_analysis::model::SortKey::Bytes],
            lines: None,
            threads: Some(threads),
        };
        let t = Instant::now();
        let out = analyse(&log, &syms, opts, &mut |_| {});
        let s = secs(t);
        println!(
            "pipeline, {threads:>2} decoder threads: {s:.3} s, {:.1} M events/s ({} slab events)",
            n / s / 1e6,
            out.report.capture.slab_events
        );
        threads *= 2;
    }
}
