//! zstd alone against kpack + zstd (FORMAT.md §8.2) on a real log:
//!
//!   cargo run --release -p kmemtrace-format --example codec_probe -- LOG.kmt
//!   KPACK_ONLY=1 ...   # kpack's own cost (best of 5) and its streams
//!   ZSTD_TUNE=1 ...    # zstd alone with parameters beside level 1's
//!   LEVELS=1,-7 ...    # these zstd levels (default 1,-1,-3)
//!   KPACK_V1=1 ...     # kpack's first version (§8.2) instead of columns (§8.3)
//!
//! The log's sub-buffers are cut into CPU_DATA-sized blocks (1 MiB, as the
//! recorder writes them) and encoded two ways at zstd levels 1, -1 and -3:
//! zstd alone; and `kpack` (`kmemtrace_format::kpack`: each record's
//! words XORed with those of a predicted earlier record of the same kind,
//! only the XORs' significant bytes kept) with zstd behind it
//! as the entropy stage. It prints bytes per event and the nanoseconds per
//! event of each stage on one core: packing, zstd over the packed stream,
//! and decoding (zstd, unpacking), and checks that every block comes back
//! bit for bit.

use kmemtrace_format::kpack::{Packer, Shape, Unpacker};
use kmemtrace_import::log::Log;
use kmemtrace_import::walk::{walk_cpu, with_endian, WithEndian};
use kmemtrace_kernel::Endian;
use std::time::Instant;

/// Room for the CPU_DATA header the recorder puts before the sub-buffers.
const HEAD: usize = kmemtrace_format::records::CPU_DATA_HEADER_LEN;

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

/// Seconds `f` takes.
fn timed(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: codec_probe LOG.kmt");
    let log = Log::open(std::path::Path::new(&path)).expect("a readable log");
    let (raw, events) = subbufs(&log);
    let ev = events as f64;
    let total: usize = raw.iter().map(Vec::len).sum();
    println!(
        "{path}: {events} events, {:.1} MB of sub-buffers ({:.1} bytes/event)",
        total as f64 / 1e6,
        total as f64 / ev
    );
    let l = log.layout;
    let shape = Shape::new(
        log.endian.is_big_endian(),
        l.long_size as u8,
        l.data_offset as u32,
        l.subbuf_size as u32,
    )
    .expect("a sub-buffer geometry kpack walks");
    let per_block = (1 << 20) / l.subbuf_size * l.subbuf_size;
    let blocks: Vec<Vec<u8>> = raw
        .iter()
        .flat_map(|b| b.chunks(per_block))
        .map(|c| [&[0u8; HEAD][..], c].concat())
        .collect();
    let packer = if std::env::var_os("KPACK_V1").is_some() {
        Packer::version1()
    } else {
        Packer::new()
    };
    let (mut packer, mut unpacker) = (packer, Unpacker::new());
    let mut packed: Vec<Vec<u8>> = vec![Vec::new(); blocks.len()];
    let mut pack = |packed: &mut Vec<Vec<u8>>| {
        timed(|| {
            for (b, p) in blocks.iter().zip(packed.iter_mut()) {
                p.clear();
                packer.pack(shape, b, HEAD, p);
            }
        })
    };
    // The first pass also faults the output's pages in; the second is what
    // a recorder reusing its buffers pays.
    pack(&mut packed);
    let pack_s = pack(&mut packed);
    let packed_len: usize = packed.iter().map(Vec::len).sum();
    let ns = |s: f64| s * 1e9 / ev;
    let per = |n: usize| n as f64 / ev;
    println!(
        "kpack: {:.1} bytes/event before the entropy stage, {:.0} ns/event to pack",
        per(packed_len),
        ns(pack_s)
    );
    if std::env::var_os("ZSTD_TUNE").is_some() {
        zstd_tune(&blocks, ev);
        return;
    }
    if std::env::var_os("UNPACK_LOOP").is_some() {
        // Only unpacking, over and over (for a profiler).
        let mut out = Vec::new();
        for _ in 0..10 {
            for (b, p) in blocks.iter().zip(&packed) {
                out.resize(b.len(), 0);
                unpacker.unpack(p, HEAD, &mut out).expect("unpacks");
            }
        }
        return;
    }
    if std::env::var_os("KPACK_ONLY").is_some() {
        // Only kpack: each way the fastest of five passes (what the
        // transform costs without the machine's noise), and what zstd
        // makes of each stream on its own.
        let mut out = Vec::new();
        let (mut best_pack, mut best_unpack) = (f64::MAX, f64::MAX);
        let mut c = zstd::bulk::Compressor::new(1).expect("zstd");
        let names: &[&str] = match packed.first().map(|p| p[HEAD]) {
            Some(kmemtrace_format::kpack::VERSION_1) => &kmemtrace_format::kpack::STREAM_NAMES,
            _ => &kmemtrace_format::kpack::COLUMN_STREAM_NAMES,
        };
        let n = names.len();
        let (mut raw_b, mut z_b, mut z_t) = (vec![0usize; n], vec![0usize; n], vec![0f64; n]);
        let mut d_t = vec![0f64; n];
        for p in &packed {
            // After the head and kpack's header: the streams.
            let mut at = HEAD + kmemtrace_format::kpack::HEADER_LEN;
            for i in 0..n {
                let n = u32::from_le_bytes(p[at..at + 4].try_into().unwrap()) as usize;
                let st = &p[at + 4..at + 4 + n];
                at += 4 + n;
                raw_b[i] += n;
                let mut z = Vec::new();
                z_t[i] += timed(|| z = c.compress(st).unwrap());
                z_b[i] += z.len();
                let mut back = vec![0u8; st.len()];
                let mut d = zstd::bulk::Decompressor::new().expect("zstd");
                d_t[i] += timed(|| {
                    d.decompress_to_buffer(&z, &mut back).expect("zstd");
                });
            }
        }
        for i in 0..n {
            println!(
                "stream {:6} {:.2} bytes/event, {:.2} after zstd 1 alone, in {:.1} ns/event, back in {:.1}",
                names[i],
                per(raw_b[i]),
                per(z_b[i]),
                ns(z_t[i]),
                ns(d_t[i])
            );
        }
        for _ in 0..5 {
            best_pack = best_pack.min(pack(&mut packed));
            best_unpack = best_unpack.min(timed(|| {
                for (b, p) in blocks.iter().zip(&packed) {
                    out.resize(b.len(), 0);
                    unpacker.unpack(p, HEAD, &mut out).ok();
                }
            }));
        }
        println!(
            "kpack only, best of 5: pack {:.1} ns/event, unpack {:.1} ns/event",
            ns(best_pack),
            ns(best_unpack)
        );
        return;
    }
    println!("| zstd level | zstd alone: bytes/event | ns/event | decode ns/event | kpack + zstd: bytes/event | zstd over packed ns/event | pack + zstd ns/event | decode ns/event |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let levels: Vec<i32> = std::env::var("LEVELS")
        .map(|s| {
            s.split(',')
                .map(|x| x.parse().expect("LEVELS: zstd levels"))
                .collect()
        })
        .unwrap_or(vec![1, -1, -3]);
    for level in levels {
        let mut c = zstd::bulk::Compressor::new(level).expect("a zstd context");
        // Every buffer compressed, and the time that took.
        let mut zstd_all = |bufs: &[Vec<u8>]| {
            let mut z: Vec<Vec<u8>> = Vec::new();
            let t = timed(|| z = bufs.iter().map(|b| c.compress(b).expect("zstd")).collect());
            (z, t)
        };
        let (z_raw, t_raw) = zstd_all(&blocks);
        let (z_packed, t_packed) = zstd_all(&packed);
        let d_raw = timed(|| {
            for (b, z) in blocks.iter().zip(&z_raw) {
                let d = zstd::bulk::decompress(z, b.len()).expect("zstd");
                assert!(d == *b);
            }
        });
        let mut out = Vec::new();
        let d_packed = timed(|| {
            for ((b, p), z) in blocks.iter().zip(&packed).zip(&z_packed) {
                let d = zstd::bulk::decompress(z, p.len()).expect("zstd");
                out.resize(b.len(), 0);
                unpacker.unpack(&d, HEAD, &mut out).ok();
                assert!(out == *b, "kpack did not give the block back");
            }
        });
        let size = |zs: &[Vec<u8>]| per(zs.iter().map(Vec::len).sum());
        println!(
            "| {level} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} |",
            size(&z_raw),
            ns(t_raw),
            ns(d_raw),
            size(&z_packed),
            ns(t_packed),
            ns(pack_s + t_packed),
            ns(d_packed)
        );
    }
}

/// zstd alone with parameters beside its levels' own: bytes and the
/// fastest of three passes, per event.
fn zstd_tune(blocks: &[Vec<u8>], ev: f64) {
    use zstd::zstd_safe::{CParameter as P, ParamSwitch};
    let variants: Vec<(&str, i32, Vec<P>)> = vec![
        ("level 1", 1, vec![]),
        (
            "level 1, literals raw",
            1,
            vec![P::LiteralCompressionMode(ParamSwitch::Disable)],
        ),
        ("level 1, min match 7", 1, vec![P::MinMatch(7)]),
        ("level 1, min match 5", 1, vec![P::MinMatch(5)]),
        ("level 1, min match 6", 1, vec![P::MinMatch(6)]),
        ("level 1, hash log 12", 1, vec![P::HashLog(12)]),
        ("level 1, hash log 15", 1, vec![P::HashLog(15)]),
        ("level 1, window log 17", 1, vec![P::WindowLog(17)]),
        ("level -1", -1, vec![]),
        ("level -2", -2, vec![]),
        ("level -3", -3, vec![]),
        (
            "level -1, literals raw",
            -1,
            vec![P::LiteralCompressionMode(ParamSwitch::Disable)],
        ),
        (
            "level 1, mm 7, literals raw",
            1,
            vec![
                P::MinMatch(7),
                P::LiteralCompressionMode(ParamSwitch::Disable),
            ],
        ),
    ];
    println!("| zstd | bytes/event | ns/event (best of 3) |");
    println!("|---|---:|---:|");
    // One row: every block compressed by `compress` (its output's length),
    // the fastest of three passes.
    let row = |name: &str, compress: &mut dyn FnMut(&[u8]) -> usize| {
        let (mut best, mut bytes) = (f64::MAX, 0);
        for _ in 0..3 {
            let mut n = 0;
            best = best.min(timed(|| n = blocks.iter().map(|b| compress(b)).sum()));
            bytes = n;
        }
        println!(
            "| {name} | {:.2} | {:.0} |",
            bytes as f64 / ev,
            best * 1e9 / ev
        );
    };
    for (name, level, params) in variants {
        let mut c = zstd::bulk::Compressor::new(level).expect("a zstd context");
        for p in params {
            c.set_parameter(p).expect("a zstd parameter");
        }
        row(name, &mut |b| c.compress(b).expect("zstd").len());
    }
    // As the recorder compresses a CPU_DATA block: its header in a zstd
    // block of its own, a window as long as the payload.
    use kmemtrace_format::block::{BlockCompressor, BlockType, Compression};
    let mut c = BlockCompressor::new(Compression::Zstd(1));
    let mut out = Vec::new();
    row("level 1 as the recorder", &mut |b| {
        out.clear();
        c.encode_with_head(BlockType::CpuData, b, HEAD, &mut out)
            .expect("a block");
        out.len()
    });
}
