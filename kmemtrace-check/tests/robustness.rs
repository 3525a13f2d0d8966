//! Deterministic versions of the `check` fuzz target (see
//! `format-spec/kmemtrace-format/fuzz`), run with every `cargo test`: the
//! checker never panics on arbitrary bytes, on arbitrary blocks behind valid
//! framing, or on mutated valid logs, and its report always agrees with its
//! verdict.

use kmemtrace_check::{check_bytes, Report, Verdict};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::{encode_block, encode_file_header, BlockType, Compression};
use kmemtrace_format::records::{encode_cpu_data_header, Meta, MetaKind, StatsPhase, StatsRecord};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::{LittleEndian, RunTimeEndian, SubBufLayout};
use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, Missed, PageSpec};
use proptest::prelude::*;

fn consistent(r: &Report) {
    assert_eq!(r.exit_code, r.verdict.exit_code());
    match r.verdict {
        Verdict::Damaged => assert!(r.problems_total > 0),
        Verdict::Unusable => assert!(r.error.is_some()),
        Verdict::Lost => assert!(r.total.lost.events > 0 || r.total.lost.lower_bound),
        Verdict::Ok => assert_eq!(r.problems_total, 0),
    }
    assert!(r.problems_total >= r.problems.len() as u64);
    let _ = kmemtrace_check::human::render(r, &Default::default());
    let _ = kmemtrace_check::json::document(std::slice::from_ref(r), r.exit_code);
}

/// The fuzz target's framed mode: blocks with valid CRCs behind a valid
/// header and ARCH block.
fn framed(blocks: &[(u8, u8, Vec<u8>)], big: bool) -> Vec<u8> {
    let mut out = encode_file_header().to_vec();
    let order = if big {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    };
    let arch = ArchTag::new(order, 8, 4096, 16);
    encode_block(BlockType::Arch, &arch.encode(), Compression::None, &mut out).unwrap();
    let mut seq = [0u64; 4];
    for (t, flags, payload) in blocks {
        let c = if flags & 1 != 0 {
            Compression::Zstd(1)
        } else {
            Compression::None
        };
        let bt = BlockType::from_u16(u16::from(t % 8));
        if bt == BlockType::CpuData && flags & 2 != 0 {
            let cpu = usize::from(flags >> 6);
            let n = payload.len() / 4096;
            let mut p = encode_cpu_data_header(cpu as u32, n as u32, seq[cpu], seq[cpu]).to_vec();
            p.extend_from_slice(&payload[..n * 4096]);
            seq[cpu] += 1;
            encode_block(bt, &p, c, &mut out).unwrap();
        } else {
            encode_block(bt, payload, c, &mut out).unwrap();
        }
    }
    out
}

/// A valid log of `pages` encoded by the kernel-rule encoder.
fn valid_log(events: &[(u64, usize)], missed: Option<u64>, compress: bool) -> Vec<u8> {
    let l = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };
    let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
    let c = if compress {
        Compression::Zstd(1)
    } else {
        Compression::None
    };
    let mut w = LogWriter::new(Vec::new(), &arch, c).unwrap();
    w.write_meta(&Meta::new(MetaKind::Kallsyms, "ffffffff81000000 T _text\n"))
        .unwrap();
    w.write_meta(&Meta::event_format(
        "kmem",
        "kfree",
        1,
        "name: kfree\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\nprint fmt: \"x\"\n",
    ))
    .unwrap();
    w.write_stats(&StatsRecord {
        cpu: 0,
        phase: StatsPhase::Start,
        wall_ns: None,
        text: b"overrun: 0\n".to_vec(),
    })
    .unwrap();
    let mut ts = 1000u64;
    let mut pages = Vec::new();
    for chunk in events.chunks(20) {
        let records = chunk
            .iter()
            .map(|&(d, len)| {
                ts += d;
                let mut payload = vec![0u8; len.max(2)];
                payload[0] = 1;
                EncRecord::Event { ts, payload }
            })
            .collect();
        let spec = PageSpec {
            records,
            missed: if pages.is_empty() {
                missed.map_or(Missed::None, Missed::Count)
            } else {
                Missed::None
            },
            ..Default::default()
        };
        if let Ok(p) = encode_subbuf(LittleEndian, &l, &spec) {
            pages.extend_from_slice(&p.bytes);
        }
    }
    for block in pages.chunks(4096 * 3) {
        w.write_cpu_data(0, block).unwrap();
    }
    w.write_stats(&StatsRecord {
        cpu: 0,
        phase: StatsPhase::End,
        wall_ns: None,
        text: format!("overrun: {}\n", missed.unwrap_or(0)).into_bytes(),
    })
    .unwrap();
    w.finish(None, "test", None).unwrap()
}

#[test]
fn valid_logs_pass_and_losses_count() {
    let ev: Vec<(u64, usize)> = (0..200).map(|i| (i % 7, 8 + (i as usize % 40))).collect();
    let r = check_bytes("v", &valid_log(&ev, None, true));
    assert_eq!(r.verdict, Verdict::Ok, "{:#?}", r.problems);
    assert_eq!(r.total.counts.events, 200);
    let r = check_bytes("v", &valid_log(&ev, Some(77), false));
    assert_eq!(r.verdict, Verdict::Lost, "{:#?}", r.problems);
    assert_eq!(r.total.lost.events, 77);
    assert_eq!(r.total.lost.subbuf_stored, 77);
    assert_eq!(r.summary, "LOST 77 of 277 events (27.8%) on 1 CPU");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..3000)) {
        consistent(&check_bytes("p", &bytes));
    }

    #[test]
    fn arbitrary_blocks_behind_valid_framing(
        blocks in proptest::collection::vec(
            (any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..9000)),
            0..6,
        ),
        big in any::<bool>(),
    ) {
        consistent(&check_bytes("p", &framed(&blocks, big)));
    }

    #[test]
    fn mutated_valid_logs(
        ev in proptest::collection::vec((0u64..1 << 30, 0usize..200), 1..120),
        missed in proptest::option::of(0u64..1000),
        compress in any::<bool>(),
        muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let mut b = valid_log(&ev, missed, compress);
        let clean = check_bytes("p", &b);
        consistent(&clean);
        prop_assert!(clean.verdict <= Verdict::Lost, "{:#?}", clean.problems);
        for (i, x) in &muts {
            let n = b.len();
            b[i % n] ^= x | 1;
        }
        if let Some(c) = cut {
            let n = b.len();
            b.truncate(c % n);
        }
        let r = check_bytes("p", &b);
        consistent(&r);
        if !muts.is_empty() || cut.is_some() {
            prop_assert!(r.verdict >= Verdict::Damaged, "{}", r.summary);
        }
    }
}

/// A clean log of one event whose end statistics count `u64::MAX`
/// dropped events (`-1` as the kernel's long prints it): the summary adds
/// recorded and lost events without overflowing.
#[test]
fn a_loss_of_u64_max_events_is_summed_without_overflow() {
    use kmemtrace_testkit::synth::LogBuilder;
    let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
    b.meta(Meta::new(MetaKind::Kallsyms, "ffffffff81000000 T _text\n"));
    b.format(
        "kmem",
        "name: kfree\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\nprint fmt: \"x\"\n",
    )
    .unwrap();
    b.event(0, 1000, vec![1, 0, 0, 0]);
    b.stats(0, StatsPhase::Start, "dropped events: 0\n");
    b.stats(0, StatsPhase::End, "dropped events: -1\n");
    let r = check_bytes("max", &b.build().unwrap());
    consistent(&r);
    assert_eq!(r.verdict, Verdict::Lost, "{:#?}", r.problems);
    assert_eq!(r.total.lost.events, u64::MAX);
    assert_eq!(r.total.counts.events, 1);
    assert_eq!(
        r.summary,
        "LOST 18,446,744,073,709,551,615 of 18,446,744,073,709,551,615 events (100.0%) on 1 CPU"
    );
}
