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
//! (the object tracker and the passes), route (what splitting the events
//! into 4 shards adds to decoding), peak deltas (what recording the changes
//! of live bytes and replaying them in the combiner adds, with more than
//! one shard). Decoders and shards run in parallel in the real pipeline.

use kmemtrace_analysis::combine::{summarise, Combiner};
use kmemtrace_analysis::event::bucket;
use kmemtrace_analysis::filter::Filter;
use kmemtrace_analysis::intern::{Interner, SiteTable};
use kmemtrace_analysis::passes::objects::Objects;
use kmemtrace_analysis::passes::{cross_cpu, misuse, slab, EpochOut, Passes};
use kmemtrace_analysis::stream::blocks::Blocks;
use kmemtrace_analysis::stream::decode::{Decoder, Local};
use kmemtrace_analysis::stream::merge::Merger;
use kmemtrace_analysis::stream::{Assembler, Shard, StreamInput, EPOCH_SHIFT, LOOK_AHEAD};
use kmemtrace_analysis::{analyse, Options, Symbols};
use kmemtrace_format::block::{decode_payload_into, PayloadDecoder, BLOCK_HEADER_LEN};
use kmemtrace_format::records::CPU_DATA_HEADER_LEN;
use kmemtrace_import::log::{CpuBlockRef, Log};
use kmemtrace_import::walk::{subbufs, with_endian, WithEndian};
use kmemtrace_kernel::Endian;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
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

    // 2. decompress: into one reused buffer, as each decoder thread does
    // (a fresh one per block would time the kernel zeroing and faulting
    // in its pages); keeping the payloads for the next stages is not timed.
    let mut dec = PayloadDecoder::default();
    let mut out = Vec::new();
    let mut t_zstd = 0.0;
    let payloads: Vec<(CpuBlockRef, Vec<u8>)> = blocks
        .iter()
        .zip(&stored)
        .map(|(r, s)| {
            let p = &s[BLOCK_HEADER_LEN..];
            let t = Instant::now();
            let n = decode_payload_into(&r.header, p, &mut dec, &mut out).expect("zstd");
            t_zstd += secs(t);
            let data = match n {
                None => p,
                Some(n) => &out[..n],
            };
            (*r, data[CPU_DATA_HEADER_LEN.min(data.len())..].to_vec())
        })
        .collect();
    drop(stored);

    // 3. walk
    let t = Instant::now();
    let records = with_endian(log.endian, Walk(&log, &payloads));
    let t_walk = secs(t);
    drop(payloads);

    // 4. decode (one thread, every block), into one shard and into four
    let kmem = log.kmem_decoder();
    let filter = Filter::default();
    let interner = Interner::new();
    let sites = SiteTable::default();
    let progress = AtomicU64::new(0);
    let stack_table = kmemtrace_analysis::intern::StackTable::default();
    let tracepoints = kmemtrace_analysis::stream::tracepoints::Tracepoints::default();
    let decoder = |shards: usize| Decoder {
        log: &log,
        kmem: &kmem,
        interner: &interner,
        sites: &sites,
        filter: &filter,
        progress: &progress,
        shards,
        switches: kmemtrace_import::tasks::SwitchReader::new(&log),
        stack_reader: kmemtrace_import::stacks::StackReader::new(&log),
        stacks: &stack_table,
        tracepoints: &tracepoints,
    };
    let decode_all = |shards: usize| {
        let dec = decoder(shards);
        let mut local = Local::new(&dec);
        // Emptied event vectors handed back, as the pipeline's pool does
        // (fresh ones would time page faults and zeroing).
        let mut pool: Vec<Vec<_>> = Vec::new();
        let t = Instant::now();
        let n: usize = blocks
            .iter()
            .map(|r| {
                let parts = dec
                    .decode(r, &mut local, &mut || pool.pop().unwrap_or_default())
                    .parts;
                let n = parts.iter().map(Vec::len).sum::<usize>();
                pool.extend(parts.into_iter().map(|mut v| {
                    v.clear();
                    v
                }));
                n
            })
            .sum();
        (secs(t), n as u64)
    };
    decode_all(1); // warm
    let (t_decode_all, events) = decode_all(1);
    let (t_route4, _) = decode_all(4);

    // 5. merge: the one shard's merge over blocks decoded beforehand
    let cpus = log.cpus();
    let streams: Vec<Vec<CpuBlockRef>> = cpus
        .iter()
        .map(|&c| blocks.iter().filter(|b| b.cpu == c).copied().collect())
        .collect();
    let dec1 = decoder(1);
    let lens: Vec<usize> = streams.iter().map(Vec::len).collect();
    let inputs = StreamInput::of(&log, &cpus, &streams);
    let store = Blocks::new(&dec1, streams, Assembler::new(inputs), 1);
    let mut merged = Vec::with_capacity(events as usize);
    let mut t_merge = 0.0;
    std::thread::scope(|scope| {
        let store = &store;
        scope.spawn(move || store.work());
        for (i, &n) in lens.iter().enumerate() {
            for k in 0..n {
                store.request(i, k);
                // Wait for it (or decode it here): the merge below should
                // not wait for decoding.
                let (part, _) = store.take(i, k, 1, &mut None);
                drop(part);
            }
        }
        let mut m = Merger::new(store, 0, 1);
        // Written into memory touched beforehand: page faults are not the
        // merge's.
        if let Some(first) = m.next_event() {
            merged.resize(events as usize, first);
            let t = Instant::now();
            let mut n = 1;
            while let Some(x) = m.next_event() {
                merged[n] = x;
                n += 1;
            }
            t_merge = secs(t);
            merged.truncate(n);
        }
        store.close();
    });

    // 6. analyse, one shard (its own peaks), then the peaks' deltas
    let syms = Symbols {
        table: None,
        raw: true,
        source: String::new(),
    };
    let passes = |deltas: bool| Passes {
        objects: Objects::new(&filter, 32768, &sites, Box::new(|a| syms.name(a))),
        slab: slab::SlabPass::new(&log.cpu_nodes, false, deltas, false),
        misuse: misuse::MisusePass::default(),
        cross_cpu: cross_cpu::CrossCpuPass::default(),
        untraced: kmemtrace_analysis::passes::untraced::UntracedPass::default(),
        pages: kmemtrace_analysis::passes::pages::PagesPass::new(&filter, 4096, false, false),
        stalls: kmemtrace_analysis::passes::stalls::StallsPass::new(8),
        first_ts: None,
        last_ts: 0,
    };
    // As a shard does: each run of LOOK_AHEAD events shown to the passes
    // first; and without, to show what that buys.
    let (mut t_analyse, mut t_blind) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let mut one = passes(false);
        let t = Instant::now();
        for next in merged.chunks(LOOK_AHEAD) {
            one.look_ahead(next);
            for (ev, k) in next {
                one.event(ev, *k);
            }
        }
        t_analyse = t_analyse.min(secs(t));
        let mut one = passes(false);
        let t = Instant::now();
        for (ev, k) in &merged {
            one.event(ev, *k);
        }
        t_blind = t_blind.min(secs(t));
    }
    // The combiner's part with four shards: each shard's epochs recorded,
    // then replayed (merged by order, peaks applied, occurrences judged).
    const SHARDS: usize = 4;
    // The same split without deltas: what four shards' separate state costs.
    let mut plain: Vec<Passes> = (0..SHARDS).map(|_| passes(false)).collect();
    let t = Instant::now();
    for (ev, k) in &merged {
        plain[bucket(ev.key()) % SHARDS].event(ev, *k);
    }
    let t_split4 = secs(t);
    drop(plain);
    let mut shards: Vec<Passes> = (0..SHARDS).map(|_| passes(true)).collect();
    let assembler = Mutex::new(Assembler::new(Vec::new()));
    let mut combiner = Combiner::default();
    let (mut t_summarise, mut t_combine) = (0.0, 0.0);
    let mut epoch: Option<u64> = None;
    // Epochs are handed over as the stream passes them, as in the pipeline
    // (keeping them all would time page faults, not the work).
    let mut hand_over = |e: u64, shards: &mut Vec<Passes>, ts: &mut f64, tc: &mut f64| {
        let outs: Vec<EpochOut> = shards.iter_mut().map(|s| s.end_epoch()).collect();
        let t = Instant::now();
        let sum = summarise(e, outs);
        *ts += secs(t);
        let t = Instant::now();
        combiner.fold(sum, &assembler);
        *tc += secs(t);
    };
    let t = Instant::now();
    for (ev, k) in &merged {
        let e = k.ts >> EPOCH_SHIFT;
        if let Some(c) = epoch.filter(|&c| e > c) {
            hand_over(c, &mut shards, &mut t_summarise, &mut t_combine);
        }
        epoch = Some(e);
        shards[bucket(ev.key()) % SHARDS].event(ev, *k);
    }
    if let Some(c) = epoch {
        hand_over(c, &mut shards, &mut t_summarise, &mut t_combine);
    }
    let t_shards4 = secs(t) - t_summarise - t_combine;
    let t_deltas = (t_shards4 - t_split4).max(0.0);
    let t_split = (t_split4 - t_analyse).max(0.0);

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
    let t_route = (t_route4 - t_decode_all).max(0.0);
    for (name, s) in [
        ("read", t_read),
        ("decompress", t_zstd),
        ("walk", t_walk),
        ("decode", t_decode),
        ("route (4)", t_route),
        ("merge", t_merge),
        ("analyse", t_analyse),
        ("  (blind)", t_blind),
        ("split (4)", t_split),
        ("deltas (4)", t_deltas),
        ("summarise (4)", t_summarise),
        ("fold (serial)", t_combine),
    ] {
        println!("{name:<12} {s:>9.3} {:>10.1}", s * 1e9 / n);
    }
    let shard = t_merge + t_analyse + t_split + t_deltas;
    println!(
        "one thread in all: {:.3} s. Per event: decoders {:.1} ns, shards {:.1} ns, the combiner (serial) {:.1} ns: \
         with D decoders, S shards and S/2 combiners on as many cores, about min(D/{:.1}, S/{:.1}, 1/{:.1}) G events/s",
        t_decode_all + t_merge + t_analyse,
        (t_decode_all + t_route) * 1e9 / n,
        (shard + t_summarise) * 1e9 / n,
        t_combine * 1e9 / n,
        (t_decode_all + t_route) * 1e9 / n,
        (shard + 2.0 * t_summarise) * 1e9 / n,
        t_combine * 1e9 / n,
    );

    // 7. the whole pipeline, by decoder threads
    let cores = std::thread::available_parallelism().map_or(2, |c| c.get());
    let mut threads = 1;
    while threads <= cores.max(1) {
        let opts = Options {
            sort: vec![kmemtrace_analysis::model::SortKey::Bytes],
            threads: Some(threads),
            ..Options::default()
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
