use kmemtrace_format::endian::Endian;
use kmemtrace_format::log::Log;
use kmemtrace_format::walk::{walk_cpu, with_endian, WithEndian};
use std::time::Instant;
use zstd::zstd_safe::{CCtx, CParameter};

fn main() {
    let path = std::env::args().nth(1).unwrap();
    let log = Log::open(std::path::Path::new(&path)).unwrap();
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
    let (raw, events) = with_endian(log.endian, Collect(&log));
    let ev = events as f64;
    let sb = log.layout.subbuf_size;
    let per_block = (1 << 20) / sb * sb;
    let blocks: Vec<&[u8]> = raw.iter().flat_map(|b| b.chunks(per_block)).collect();
    let mut out = vec![0u8; 2 << 20];
    let grid: Vec<(i32, u32, u32, u32)> = std::env::var("GRID")
        .ok()
        .map(|g| {
            g.split(',')
                .map(|t| {
                    let v: Vec<i64> = t.split(':').map(|x| x.parse().unwrap()).collect();
                    (v[0] as i32, v[1] as u32, v[2] as u32, v[3] as u32)
                })
                .collect()
        })
        .unwrap_or(vec![(1, 0, 0, 0)]);
    for (level, hash, minm, tl) in grid {
        let mut c = CCtx::create();
        c.set_parameter(CParameter::CompressionLevel(level))
            .unwrap();
        c.set_parameter(CParameter::WindowLog(20)).unwrap();
        if hash > 0 {
            c.set_parameter(CParameter::HashLog(hash)).unwrap();
        }
        if minm > 0 {
            c.set_parameter(CParameter::MinMatch(minm)).unwrap();
        }
        if tl > 0 {
            c.set_parameter(CParameter::TargetLength(tl)).unwrap();
        }
        let mut best = f64::MAX;
        let mut size = 0;
        for _ in 0..3 {
            let t = Instant::now();
            size = 0;
            for b in &blocks {
                size += c.compress2(&mut out[..], b).unwrap();
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("level {level} hashLog {hash} minMatch {minm} targetLength {tl}: {:.2} bytes/event, {:.0} ns/event", size as f64 / ev, best * 1e9 / ev);
    }
}
