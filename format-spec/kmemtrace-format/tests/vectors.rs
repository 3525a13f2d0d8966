//! The committed test vectors (format-spec/test-vectors/) decode to exactly
//! the events their generator put in, and are what the generator makes now.

#[path = "../examples/make_vectors.rs"]
#[allow(dead_code)]
mod make_vectors;

use kmemtrace_import::log::Log;
use kmemtrace_kernel::{
    BigEndian, Endian, KmemDecoder, KmemKind, LittleEndian, RbRecordKind, RunTimeEndian,
};
use std::fmt::Write as _;

/// Decodes a log into the generator's line format, CPU by CPU.
fn listing(log: &Log) -> (String, usize) {
    match log.endian {
        RunTimeEndian::Little => listing_e(log, LittleEndian),
        RunTimeEndian::Big => listing_e(log, BigEndian),
    }
}

fn listing_e<E: Endian>(log: &Log, e: E) -> (String, usize) {
    let dec: KmemDecoder = log.kmem_decoder();
    let mut out = String::new();
    let mut long_records = 0;
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
            |v| {
                let sb = v.subbuf.expect("sub-buffer decodes");
                if sb.missed_events {
                    match sb.lost_events {
                        Some(n) => writeln!(out, "cpu={cpu} missed lost={n}").unwrap(),
                        None => writeln!(out, "cpu={cpu} missed lost=unknown").unwrap(),
                    }
                }
                for r in sb.events(e) {
                    let r = r.expect("record decodes");
                    let RbRecordKind::Data { payload } = r.kind else {
                        continue;
                    };
                    if r.len > 4 + 112 {
                        long_records += 1;
                    }
                    let ev = dec.decode(e, payload).unwrap().expect("a kmem event");
                    write!(out, "cpu={cpu} ts={} {} pid={} ", r.ts, ev.kind.name(), ev.pid).unwrap();
                    let cs = ev.call_site;
                    let ptr = ev.ptr;
                    let name = ev.cache_name.map(|n| format!(" name={n}")).unwrap_or_default();
                    match ev.kind {
                        KmemKind::Kmalloc | KmemKind::KmemCacheAlloc => writeln!(
                            out,
                            "call_site={cs:#x} ptr={ptr:#x}{name} bytes_req={} bytes_alloc={} gfp_flags={:#x} node={}",
                            ev.bytes_req,
                            ev.bytes_alloc,
                            ev.gfp_flags,
                            ev.node.unwrap()
                        ),
                        KmemKind::Kfree => writeln!(out, "call_site={cs:#x} ptr={ptr:#x}"),
                        KmemKind::KmemCacheFree => writeln!(out, "call_site={cs:#x} ptr={ptr:#x}{name}"),
                        KmemKind::MmPageAlloc => writeln!(
                            out,
                            "pfn={:#x} order={} gfp_flags={:#x} migratetype={}",
                            ev.pfn.unwrap(),
                            ev.order,
                            ev.gfp_flags,
                            ev.migratetype.unwrap()
                        ),
                        KmemKind::MmPageFree => {
                            writeln!(out, "pfn={:#x} order={}", ev.pfn.unwrap(), ev.order)
                        }
                        k => panic!("the generator makes no {k:?}"),
                    }
                    .unwrap();
                }
            },
            |p| panic!("{p}"),
        );
    }
    (out, long_records)
}

fn read(name: &str) -> Vec<u8> {
    let p = make_vectors::vectors_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn intact_vectors_decode_to_their_event_listings() {
    for (name, lost_line, long_names) in [
        ("le64-x86_64", None, true),
        ("be64-s390x", Some("cpu=1 missed lost=unknown"), true),
        ("le32-armhf", Some("cpu=1 missed lost=17"), true),
        ("be32-synthetic", Some("cpu=1 missed lost=3"), true),
        ("be64-s390x-kpack", Some("cpu=1 missed lost=unknown"), true),
        ("le32-armhf-kpack", Some("cpu=1 missed lost=17"), true),
    ] {
        let log = Log::from_bytes(name, &read(&format!("{name}.kmt"))).unwrap();
        assert!(log.problems.is_empty(), "{name}: {:?}", log.problems);
        assert!(log.end.is_some() && log.truncated.is_none(), "{name}");
        let want = String::from_utf8(read(&format!("{name}.events.txt"))).unwrap();
        let (got, long_records) = listing(&log);
        if let Some((i, (g, w))) = got
            .lines()
            .zip(want.lines())
            .enumerate()
            .find(|(_, (g, w))| g != w)
        {
            panic!("{name}: line {}: decoded\n  {g}\nexpected\n  {w}", i + 1);
        }
        assert_eq!(got.lines().count(), want.lines().count(), "{name}");
        assert_eq!(
            got.lines().count(),
            240 + usize::from(lost_line.is_some()),
            "{name}"
        );
        if let Some(l) = lost_line {
            assert!(got.contains(l), "{name}");
        }
        assert_eq!(long_records > 0, long_names, "{name}: type_len 0 records");
    }
}

#[test]
fn damaged_vectors_report_what_their_description_says() {
    // truncated: every block before the cut, truncation at the cut block.
    let bytes = read("truncated.kmt");
    let md = String::from_utf8(read("truncated.md")).unwrap();
    let log = Log::from_bytes("truncated", &bytes).unwrap();
    let t = log.truncated.as_ref().expect("truncation reported");
    assert!(md.contains(&format!("at offset {}", t.offset)), "{md}");
    assert!(log.end.is_none());
    let want = String::from_utf8(read("truncated.events.txt")).unwrap();
    let (got, _) = listing(&log);
    assert!(!got.is_empty() && got.lines().count() < want.lines().count());
    assert!(got.lines().all(|l| want.lines().any(|w| w == l)));

    // damaged: one CRC mismatch at the named block, everything else read.
    let bytes = read("damaged.kmt");
    let md = String::from_utf8(read("damaged.md")).unwrap();
    let log = Log::from_bytes("damaged", &bytes).unwrap();
    assert_eq!(log.problems.len(), 1, "{:?}", log.problems);
    let p = &log.problems[0];
    assert!(p.what.contains("CRC mismatch"), "{p}");
    // The damaged block is skipped whole, to the next block's sync word.
    let damaged_len = u64::from(u32::from_le_bytes(
        bytes[p.offset as usize + 8..p.offset as usize + 12]
            .try_into()
            .unwrap(),
    )) + 20;
    assert_eq!(
        p.kind,
        kmemtrace_import::log::ProblemKind::Damage {
            skipped: damaged_len
        }
    );
    assert!(
        md.contains(&format!("CPU_DATA block at offset {}", p.offset)),
        "{md}"
    );
    assert!(log.end.is_some());
    let (got, _) = listing(&log);
    let want = String::from_utf8(read("damaged.events.txt")).unwrap();
    assert!(got.lines().all(|l| want.lines().any(|w| w == l)));
    // Exactly one CPU lost events (those of the damaged block), the other
    // CPU's listing is complete.
    let per_cpu = |s: &str, c: &str| s.lines().filter(|l| l.starts_with(c)).count();
    let short: Vec<_> = ["cpu=0", "cpu=1"]
        .iter()
        .filter(|c| per_cpu(&got, c) < per_cpu(&want, c))
        .collect();
    assert_eq!(short.len(), 1, "{short:?}");
}

#[test]
fn kpack_vectors_hold_their_siblings_sub_buffers_bit_for_bit() {
    use kmemtrace_format::block::FLAG_KPACK;
    for (packed, plain) in [
        ("be64-s390x-kpack", "be64-s390x"),
        ("le32-armhf-kpack", "le32-armhf"),
    ] {
        let a = Log::from_bytes(packed, &read(&format!("{packed}.kmt"))).unwrap();
        let b = Log::from_bytes(plain, &read(&format!("{plain}.kmt"))).unwrap();
        assert_eq!(
            a.version,
            (1, 3),
            "{packed}: kpack's columns need format 1.3"
        );
        assert_eq!(b.version, (1, 1), "{plain}: no kpack, so 1.1");
        let cpu_blocks = &a.blocks;
        assert!(!cpu_blocks.is_empty());
        assert!(
            cpu_blocks.iter().all(|r| r.header.flags & FLAG_KPACK != 0),
            "{packed}: every CPU_DATA block packed"
        );
        let raw = |log: &Log| {
            let mut all = Vec::new();
            for cpu in log.cpus() {
                log.visit_cpu(cpu, |v| all.extend_from_slice(v.raw), |p| panic!("{p}"));
            }
            all
        };
        assert!(
            raw(&a) == raw(&b),
            "{packed}: sub-buffers differ from {plain}'s"
        );
    }
}

#[test]
fn committed_vectors_are_what_the_generator_makes() {
    for f in make_vectors::generate() {
        let committed = read(&f.name);
        assert!(
            committed == f.bytes,
            "{} differs from the generator's output: run `cargo run -p kmemtrace-format --example make_vectors` and review the change",
            f.name
        );
    }
}

#[test]
fn format_1_2_kpack_logs_still_read_as_they_did() {
    // Copies of the kpack vectors as format 1.2 wrote them (kpack version
    // 1, FORMAT.md §8.2): the same events and sub-buffers as today's.
    use kmemtrace_format::block::FLAG_KPACK;
    for name in ["be64-s390x-kpack", "le32-armhf-kpack"] {
        let old = Log::from_bytes(name, &read(&format!("v1.2/{name}.kmt"))).unwrap();
        let new = Log::from_bytes(name, &read(&format!("{name}.kmt"))).unwrap();
        assert_eq!(old.version, (1, 2), "{name}");
        assert!(old.problems.is_empty(), "{name}: {:?}", old.problems);
        assert!(old.blocks.iter().all(|r| r.header.flags & FLAG_KPACK != 0));
        let want = String::from_utf8(read(&format!("{name}.events.txt"))).unwrap();
        assert_eq!(listing(&old).0, want, "{name}");
        let raw = |log: &Log| {
            let mut all = Vec::new();
            for cpu in log.cpus() {
                log.visit_cpu(cpu, |v| all.extend_from_slice(v.raw), |p| panic!("{p}"));
            }
            all
        };
        assert!(raw(&old) == raw(&new), "{name}: sub-buffers differ");
    }
}

#[test]
fn format_1_0_logs_still_read_as_they_did() {
    // Copies of the vectors as format 1.0 wrote them (no ARCH_COPY, one
    // kallsyms block): the same events as today's 1.1 vectors.
    for name in ["le64-x86_64", "be32-synthetic"] {
        let log = Log::from_bytes(name, &read(&format!("v1.0/{name}.kmt"))).unwrap();
        assert_eq!(log.version, (1, 0), "{name}");
        assert!(log.problems.is_empty(), "{name}: {:?}", log.problems);
        let want = String::from_utf8(read(&format!("{name}.events.txt"))).unwrap();
        assert_eq!(listing(&log).0, want, "{name}");
    }
}
