//! What a kmem-aware transform of the sub-buffers would buy before the
//! entropy stage (issue 15, part 3), measured on a real log:
//!
//!   cargo run --release -p kmemtrace-format --example codec_probe -- LOG.kmt
//!
//! The transform XORs each data record's payload, after its 2-byte
//! `common_type`, with the previous payload of the same event type and
//! length on the same CPU (kmem records of one type differ in a few bytes:
//! pointers' low bits, sizes, call sites). It is reversible: the record
//! headers and `common_type` stay as they were, so a decoder finds each
//! record and its predecessor before undoing the XOR. The probe prints,
//! for the raw and the transformed sub-buffers, zstd's bytes per event and
//! compression speed at levels 1 and the fast levels, in blocks of 32
//! sub-buffers as the recorder writes them, and the transform's own cost.

use kmemtrace_format::endian::Endian;
use kmemtrace_format::log::Log;
use kmemtrace_format::subbuf::{parse_subbuf, RbRecordKind, SubBufLayout};
use kmemtrace_format::walk::{walk_cpu, with_endian, WithEndian};
use std::collections::HashMap;
use std::time::Instant;

/// Sub-buffers per compressed block, as the recorder's CPU_DATA blocks.
const BLOCK_SUBBUFS: usize = 32;

/// Every CPU's sub-buffers, raw, and the number of data events.
fn subbufs(log: &Log) -> (Vec<Vec<u8>>, u64) {
    struct Collect<'a>(&'a Log);
    impl WithEndian for Collect<'_> {
        type Output = (Vec<Vec<u8>>, u64);
        fn run<E: Endian>(self, e: E) -> Self::Output {
            let mut per_cpu = Vec::new();
            let mut events = 0u64;
            for cpu in self.0.cpus() {
                let mut bytes = Vec::new();
                walk_cpu(
                    self.0,
                    e,
                    cpu,
                    |_, item| {
                        if let Ok(sb) = &item.subbuf {
                            events += sb.count_data_events(e).unwrap_or(0) as u64;
                        }
                        bytes.extend_from_slice(item.raw);
                    },
                    |_| {},
                );
                per_cpu.push(bytes);
            }
            (per_cpu, events)
        }
    }
    with_endian(log.endian, Collect(log))
}

/// The transform, in place over one CPU's sub-buffers.
fn transform<E: Endian>(e: E, layout: &SubBufLayout, bytes: &mut [u8]) {
    let size = layout.subbuf_size;
    let mut prev: HashMap<(u16, usize), Vec<u8>> = HashMap::new();
    for n in 0..bytes.len() / size {
        let raw = bytes[n * size..(n + 1) * size].to_vec();
        let Ok(sb) = parse_subbuf(e, layout, &raw) else {
            continue;
        };
        for r in sb.events(e) {
            let Ok(r) = r else { break };
            let RbRecordKind::Data { payload } = r.kind else {
                continue;
            };
            if payload.len() < 2 {
                continue;
            }
            let off = n * size + (payload.as_ptr() as usize - raw.as_ptr() as usize);
            let id = u16::from_ne_bytes([payload[0], payload[1]]);
            let key = (id, payload.len());
            if let Some(p) = prev.get(&key) {
                for (i, b) in p.iter().enumerate().skip(2) {
                    bytes[off + i] ^= b;
                }
            }
            prev.insert(key, payload.to_vec());
        }
    }
}

/// zstd over blocks of [`BLOCK_SUBBUFS`] sub-buffers: (bytes, seconds).
fn zstd_blocks(cpus: &[Vec<u8>], subbuf_size: usize, level: i32) -> (usize, f64) {
    let mut c = zstd::bulk::Compressor::new(level).unwrap();
    let t = Instant::now();
    let mut out = 0;
    for bytes in cpus {
        for block in bytes.chunks(subbuf_size * BLOCK_SUBBUFS) {
            out += c.compress(block).unwrap().len();
        }
    }
    (out, t.elapsed().as_secs_f64())
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: codec_probe LOG.kmt");
    let log = Log::open(std::path::Path::new(&path)).expect("a readable log");
    let (raw, events) = subbufs(&log);
    let total: usize = raw.iter().map(Vec::len).sum();
    let mut xored = raw.clone();
    struct Xor<'a>(&'a SubBufLayout, &'a mut Vec<Vec<u8>>);
    impl WithEndian for Xor<'_> {
        type Output = f64;
        fn run<E: Endian>(self, e: E) -> f64 {
            let t = Instant::now();
            for bytes in self.1.iter_mut() {
                transform(e, self.0, bytes);
            }
            t.elapsed().as_secs_f64()
        }
    }
    let layout = log.layout;
    let xor_s = with_endian(log.endian, Xor(&layout, &mut xored));
    println!(
        "{path}: {events} events, {:.1} MB of sub-buffers ({:.1} bytes/event)",
        total as f64 / 1e6,
        total as f64 / events as f64
    );
    println!(
        "transform: {:.0} ns/event ({:.0} MB/s)",
        xor_s * 1e9 / events as f64,
        total as f64 / xor_s / 1e6
    );
    // Zero suppression alone (a bitmap of the non-zero bytes, then those
    // bytes): what the transform leaves for an entropy stage to do.
    let suppressed = |cpus: &[Vec<u8>]| -> f64 {
        let n: usize = cpus
            .iter()
            .map(|b| b.len().div_ceil(8) + b.iter().filter(|&&x| x != 0).count())
            .sum();
        n as f64 / events as f64
    };
    println!(
        "zero suppression alone: raw {:.2} bytes/event, transformed {:.2}",
        suppressed(&raw),
        suppressed(&xored)
    );
    println!("| level | raw bytes/event | raw ns/event | transformed bytes/event | transformed ns/event (+ transform) |");
    println!("|---:|---:|---:|---:|---:|");
    for level in [1, -1, -3, -5, -10] {
        let (a, ta) = zstd_blocks(&raw, layout.subbuf_size, level);
        let (b, tb) = zstd_blocks(&xored, layout.subbuf_size, level);
        let per = |bytes: usize| bytes as f64 / events as f64;
        let ns = |s: f64| s * 1e9 / events as f64;
        println!(
            "| {level} | {:.2} | {:.0} | {:.2} | {:.0} ({:.0}) |",
            per(a),
            ns(ta),
            per(b),
            ns(tb),
            ns(tb + xor_s)
        );
    }
}
