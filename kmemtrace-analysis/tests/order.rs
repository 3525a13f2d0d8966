//! The one order: whatever the number of shards, each shard's merge is the
//! single-shard merge restricted to that shard's events, also when a CPU's
//! clock goes back within a block and across blocks.

use kmemtrace_analysis::event::bucket;
use kmemtrace_analysis::filter::Filter;
use kmemtrace_analysis::intern::{Interner, SiteTable};
use kmemtrace_analysis::stream::blocks::Blocks;
use kmemtrace_analysis::stream::decode::Decoder;
use kmemtrace_analysis::stream::merge::{Merger, OrderKey};
use kmemtrace_analysis::stream::{Assembler, StreamInput};
use kmemtrace_import::log::{CpuBlockRef, Log};
use kmemtrace_kernel::{LittleEndian, RunTimeEndian};
use kmemtrace_testkit::synth::{encode_event, LogBuilder, SynthRecord, Value};
use kmemtrace_testkit::Rng;
use std::sync::atomic::AtomicU64;

const KMALLOC: &str = include_str!("../../tests/tests/report/data/x86_64-6.18/kmalloc.format");

/// Two CPUs, a block per sub-buffer, clocks going back now and then (by
/// more than a block's span, so across blocks too).
fn log() -> Vec<u8> {
    let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
    b.subbufs_per_block = 1;
    b.arch.page_size = Some(4096);
    let f = b.format("kmem", KMALLOC).unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut rnd = |n: u64| rng.below(n);
    let mut ts = [1_000_000_000u64; 2];
    for _ in 0..6000 {
        let cpu = rnd(2) as usize;
        ts[cpu] += 1 + rnd(3000);
        let back = rnd(50) == 0;
        let t = if back {
            ts[cpu] - rnd(400_000)
        } else {
            ts[cpu]
        };
        let payload = encode_event(
            LittleEndian,
            &f,
            100,
            &[
                ("call_site", Value::Uint(0xffff_ffff_8100_0010)),
                ("ptr", Value::Uint(0xffff_8880_0000_0000 + 64 * rnd(5000))),
                ("bytes_req", Value::Uint(32)),
                ("bytes_alloc", Value::Uint(32)),
                ("node", Value::Int(-1)),
            ],
        )
        .unwrap();
        let r = if back {
            SynthRecord::AbsEvent { ts: t, payload }
        } else {
            SynthRecord::Event { ts: t, payload }
        };
        b.record(cpu as u32, r);
    }
    b.build().unwrap()
}

/// Every shard's merged events, with their keys.
fn merged(log: &Log, shards: usize) -> Vec<Vec<(u64, OrderKey)>> {
    let kmem = log.kmem_decoder();
    let stacks = kmemtrace_analysis::intern::StackTable::default();
    let tracepoints = kmemtrace_analysis::stream::tracepoints::Tracepoints::default();
    let (filter, interner, sites, progress) = (
        Filter::default(),
        Interner::new(),
        SiteTable::default(),
        AtomicU64::new(0),
    );
    let dec = Decoder {
        log,
        kmem: &kmem,
        interner: &interner,
        sites: &sites,
        filter: &filter,
        progress: &progress,
        shards,
        switches: None,
        stack_reader: None,
        stacks: &stacks,
        tracepoints: &tracepoints,
    };
    let cpus = log.cpus();
    let streams: Vec<Vec<CpuBlockRef>> = cpus
        .iter()
        .map(|&c| log.cpu_blocks(c).into_iter().copied().collect())
        .collect();
    assert!(streams.iter().all(|s| s.len() > 20), "many blocks per CPU");
    let inputs = StreamInput::of(log, &cpus, &streams);
    let blocks = Blocks::new(&dec, streams, Assembler::new(inputs), 4);
    std::thread::scope(|scope| {
        let blocks = &blocks;
        scope.spawn(move || blocks.work());
        let out = (0..shards)
            .map(|s| {
                let mut m = Merger::new(blocks, s, 2);
                let mut v = Vec::new();
                while let Some((ev, key)) = m.next_event() {
                    v.push((ev.key(), key));
                }
                v
            })
            .collect();
        blocks.close();
        out
    })
}

#[test]
fn each_shard_merges_in_the_single_order() {
    let bytes = log();
    let dir = std::env::temp_dir().join(format!("kmt-order-{}.kmt", std::process::id()));
    std::fs::write(&dir, &bytes).unwrap();
    let log = Log::open(&dir).unwrap();
    let one = merged(&log, 1).remove(0);
    assert_eq!(one.len(), 6000);
    let keys: Vec<OrderKey> = one.iter().map(|x| x.1).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys ascend");
    for shards in [2, 3, 5] {
        let parts = merged(&log, shards);
        for (s, part) in parts.iter().enumerate() {
            let want: Vec<(u64, OrderKey)> = one
                .iter()
                .copied()
                .filter(|(ptr, _)| bucket(*ptr) % shards == s)
                .collect();
            assert_eq!(*part, want, "shard {s} of {shards}");
        }
    }
    let _ = std::fs::remove_file(&dir);
}
