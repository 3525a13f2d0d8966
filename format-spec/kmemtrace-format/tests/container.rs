//! The container's promises (FORMAT.md §5.2): every complete block before a
//! cut reads; every flipped byte is detected inside its block; the reader
//! resynchronises after damage; hostile bytes never panic.

use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::{
    encode_block, encode_file_header, BlockType, Compression, FileHeaderError, BLOCK_HEADER_LEN,
    FILE_HEADER_LEN, VERSION_MINOR_WITHOUT_KPACK,
};
use kmemtrace_format::reader::{Item, LogReader, OpenError};
use kmemtrace_format::records::{Meta, MetaKind, NoteRecord, Record, StatsPhase, StatsRecord};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::RunTimeEndian;
use proptest::prelude::*;

fn arch() -> ArchTag {
    let mut a = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
    a.machine = Some("x86_64".into());
    a
}

/// A small log: ARCH, META, STATS, 3 CPU_DATA, NOTE, END. Returns the bytes
/// and the offset of each block.
fn sample_log(c: Compression) -> (Vec<u8>, Vec<u64>) {
    let mut w = LogWriter::new(Vec::new(), &arch(), c).unwrap();
    let mut offsets = vec![FILE_HEADER_LEN as u64, w.bytes_written()];
    w.write_meta(&Meta::new(
        MetaKind::HeaderPage,
        b"field: u64 timestamp;".to_vec(),
    ))
    .unwrap();
    offsets.push(w.bytes_written());
    w.write_stats(&StatsRecord {
        cpu: 0,
        phase: StatsPhase::Start,
        wall_ns: Some(1),
        text: b"entries: 0\n".to_vec(),
    })
    .unwrap();
    offsets.push(w.bytes_written());
    w.write_arch_copy().unwrap();
    for i in 0..3u8 {
        offsets.push(w.bytes_written());
        let page: Vec<u8> = (0..4096u32)
            .map(|x| (x as u8).wrapping_mul(i + 1))
            .collect();
        w.write_cpu_data(u32::from(i % 2), &page).unwrap();
    }
    offsets.push(w.bytes_written());
    w.write_note(&NoteRecord {
        warning: false,
        text: "hello".into(),
    })
    .unwrap();
    offsets.push(w.bytes_written());
    let out = w.finish(Some(2), "test", None).unwrap();
    (out, offsets)
}

fn read_all(bytes: &[u8]) -> Result<Vec<Item>, OpenError> {
    let r = LogReader::new(bytes)?;
    Ok(r.map(|i| i.unwrap()).collect())
}

fn blocks(items: &[Item]) -> Vec<(u64, BlockType)> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Block(b) => Some((b.offset, b.header.block_type)),
            _ => None,
        })
        .collect()
}

fn block_end(bytes: &[u8], off: u64) -> u64 {
    let o = off as usize;
    let stored = u32::from_le_bytes(bytes[o + 8..o + 12].try_into().unwrap());
    off + BLOCK_HEADER_LEN as u64 + u64::from(stored)
}

#[test]
fn round_trip_plain_and_compressed() {
    for c in [Compression::None, Compression::Zstd(3)] {
        let (bytes, offsets) = sample_log(c);
        let items = read_all(&bytes).unwrap();
        let got = blocks(&items);
        use BlockType::*;
        let types: Vec<_> = got.iter().map(|b| b.1).collect();
        assert_eq!(
            types,
            [Arch, Meta, Stats, ArchCopy, CpuData, CpuData, CpuData, Note, End]
        );
        let offs: Vec<_> = got.iter().map(|b| b.0).collect();
        assert_eq!(offs, offsets);
        let mut seqs = Vec::new();
        let mut arch_seen = None;
        for i in &items {
            let Item::Block(b) = i else {
                panic!("unexpected {i:?}")
            };
            let p = b.payload().unwrap();
            match Record::decode(b.header.block_type, &p, Some(4096)).unwrap() {
                Record::Arch(a) => arch_seen = Some(*a),
                Record::ArchCopy(a) => assert_eq!(*a, arch()),
                Record::CpuData(d) => seqs.push((d.cpu, d.block_seq, d.first_subbuf, d.count)),
                Record::End(e) => {
                    assert_eq!(e.blocks, 8);
                    assert_eq!(e.cpus.len(), 2);
                    assert_eq!(e.cpus[0].subbufs, 2);
                    assert_eq!(e.reason, "test");
                }
                _ => {}
            }
        }
        assert_eq!(arch_seen.unwrap(), arch());
        assert_eq!(seqs, [(0, 0, 0, 1), (1, 0, 0, 1), (0, 1, 1, 1)]);
    }
}

#[test]
fn cut_at_every_byte_keeps_every_complete_block() {
    let (bytes, _) = sample_log(Compression::Zstd(1));
    let full = blocks(&read_all(&bytes).unwrap());
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        match read_all(prefix) {
            Err(OpenError::Header(e)) => {
                assert!(cut < FILE_HEADER_LEN, "cut {cut}");
                assert_eq!(e, FileHeaderError::Short { len: cut }, "cut {cut}");
            }
            Err(e) => panic!("cut {cut}: {e}"),
            Ok(items) => {
                let got = blocks(&items);
                let complete: Vec<_> = full
                    .iter()
                    .copied()
                    .filter(|(off, _)| block_end(&bytes, *off) <= cut as u64)
                    .collect();
                assert_eq!(got, complete, "cut at {cut}");
                let last = items.last();
                let at_boundary = cut == FILE_HEADER_LEN
                    || full
                        .iter()
                        .any(|(off, _)| block_end(&bytes, *off) == cut as u64);
                if at_boundary {
                    assert!(
                        !matches!(last, Some(Item::Truncated(_)) | Some(Item::Damage(_))),
                        "cut {cut}"
                    );
                } else {
                    let Some(Item::Truncated(t)) = last else {
                        panic!("cut {cut}: expected truncation, got {last:?}")
                    };
                    assert_eq!(t.offset + t.available, cut as u64);
                }
            }
        }
    }
}

#[test]
fn every_single_byte_flip_is_detected_in_its_block_and_the_rest_survives() {
    let (bytes, _) = sample_log(Compression::Zstd(1));
    let full = blocks(&read_all(&bytes).unwrap());
    for pos in FILE_HEADER_LEN..bytes.len() {
        for mask in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[pos] ^= mask;
            let items = read_all(&b).unwrap();
            let (damaged_off, _) = *full
                .iter()
                .rev()
                .find(|(off, _)| *off <= pos as u64)
                .unwrap();
            let first_problem = items.iter().find_map(|i| match i {
                Item::Damage(d) => Some(d.offset),
                Item::Truncated(t) => Some(t.offset),
                Item::Block(_) => None,
            });
            assert_eq!(first_problem, Some(damaged_off), "flip at {pos}");
            // Every other block is still read.
            let got = blocks(&items);
            let expect: Vec<_> = full
                .iter()
                .copied()
                .filter(|b| b.0 != damaged_off)
                .collect();
            assert_eq!(got, expect, "flip at {pos} mask {mask:#x}");
        }
    }
}

#[test]
fn a_damaged_file_header_before_an_intact_arch_block_is_read_past() {
    let (bytes, _) = sample_log(Compression::Zstd(1));
    let full = blocks(&read_all(&bytes).unwrap());
    for pos in 0..FILE_HEADER_LEN {
        let mut b = bytes.clone();
        b[pos] ^= 0x04;
        let r = LogReader::new(&b[..]).unwrap_or_else(|e| panic!("flip at {pos}: {e}"));
        assert!(r.header_damage().is_some(), "flip at {pos}");
        assert_eq!(r.version(), (1, 0));
        let items: Vec<_> = r.map(|i| i.unwrap()).collect();
        assert_eq!(blocks(&items), full, "flip at {pos}");
    }
    // Without an intact ARCH block after it, a bad header is not a log.
    let mut b = bytes.clone();
    b[3] ^= 1;
    b[FILE_HEADER_LEN + 25] ^= 1;
    assert!(matches!(
        LogReader::new(&b[..]).err(),
        Some(OpenError::Header(_))
    ));
}

#[test]
fn garbage_between_blocks_is_skipped_and_reported() {
    let (bytes, offsets) = sample_log(Compression::None);
    let at = offsets[4] as usize; // the first CPU_DATA block
    let junk = b"KMTB garbage that looks like a sync word KMTBKMTB";
    let mut b = bytes[..at].to_vec();
    b.extend_from_slice(junk);
    b.extend_from_slice(&bytes[at..]);
    let items = read_all(&b).unwrap();
    let d: Vec<_> = items
        .iter()
        .filter_map(|i| {
            if let Item::Damage(d) = i {
                Some(d)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].offset, at as u64);
    assert_eq!(d[0].skipped, junk.len() as u64);
    assert_eq!(d[0].resumed_at, Some((at + junk.len()) as u64));
    assert_eq!(blocks(&items).len(), 9);
}

#[test]
fn trailing_junk_is_damage_not_truncation() {
    let (mut bytes, _) = sample_log(Compression::None);
    bytes.extend_from_slice(b"xyz");
    let items = read_all(&bytes).unwrap();
    assert!(matches!(items.last(), Some(Item::Damage(d)) if d.skipped == 3));
}

#[test]
fn not_a_log_and_future_major_are_clear_errors() {
    let e = read_all(b"not a log at all, just text").err().unwrap();
    assert!(e.to_string().contains("not a kmemtrace log"), "{e}");
    let (mut bytes, _) = sample_log(Compression::None);
    bytes[8] = 9;
    let crc = crc32fast::hash(&bytes[..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    let e = read_all(&bytes).err().unwrap();
    assert!(
        e.to_string()
            .contains(&format!("9.{VERSION_MINOR_WITHOUT_KPACK} is not supported")),
        "{e}"
    );
}

#[test]
fn unknown_block_types_are_skipped() {
    let (bytes, offsets) = sample_log(Compression::None);
    let at = offsets[2] as usize;
    let mut extra = Vec::new();
    encode_block(
        BlockType::Unknown(4242),
        b"future",
        Compression::None,
        &mut extra,
    )
    .unwrap();
    let mut b = bytes[..at].to_vec();
    b.extend_from_slice(&extra);
    b.extend_from_slice(&bytes[at..]);
    let items = read_all(&b).unwrap();
    let mut unknown = 0;
    for i in &items {
        if let Item::Block(bl) = i {
            let p = bl.payload().unwrap();
            if let Ok(Record::Unknown(4242)) = Record::decode(bl.header.block_type, &p, Some(4096))
            {
                unknown += 1;
            }
        }
    }
    assert_eq!(unknown, 1);
    assert_eq!(blocks(&items).len(), 10);
}

/// Reads byte by byte, as a slow pipe would deliver them.
struct Trickle<'a>(&'a [u8]);
impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() || buf.is_empty() {
            return Ok(0);
        }
        buf[0] = self.0[0];
        self.0 = &self.0[1..];
        Ok(1)
    }
}

#[test]
fn short_reads_from_a_pipe_give_the_same_blocks() {
    let (bytes, _) = sample_log(Compression::Zstd(1));
    let a = blocks(&read_all(&bytes).unwrap());
    let b: Vec<_> = LogReader::new(Trickle(&bytes))
        .unwrap()
        .map(|i| i.unwrap())
        .collect();
    assert_eq!(a, blocks(&b));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut b = encode_file_header().to_vec();
        b.extend_from_slice(&tail);
        let r = LogReader::new(&b[..]).unwrap();
        for item in r {
            if let Item::Block(bl) = item.unwrap() {
                if let Ok(p) = bl.payload() {
                    let _ = Record::decode(bl.header.block_type, &p, Some(4096));
                }
            }
        }
    }

    #[test]
    fn mutated_logs_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let (mut b, _) = sample_log(Compression::Zstd(1));
        for (i, v) in flips {
            let n = b.len();
            b[i % n] = v;
        }
        // A problem carries its offset once: its text never repeats it.
        if let Ok(log) = kmemtrace_import::log::Log::from_bytes("m", &b) {
            for p in &log.problems {
                prop_assert!(!p.what.starts_with("offset "), "{}", p);
            }
        }
        if let Ok(r) = LogReader::new(&b[..]) {
            for item in r {
                if let Ok(Item::Block(bl)) = item {
                    if let Ok(p) = bl.payload() {
                        let _ = Record::decode(bl.header.block_type, &p, Some(4096));
                    }
                }
            }
        }
    }
}

/// One block to write in the round-trip property.
#[derive(Debug, Clone)]
enum Op {
    Meta(u16, String, Vec<u8>),
    Stats(u32, u8, Vec<u8>),
    Cpu(u32, u8),
    Note(bool, String),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            1u16..10,
            "[a-z/_]{0,20}",
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(k, n, c)| Op::Meta(k, n, c)),
        (
            0u32..4,
            0u8..3,
            proptest::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(c, p, t)| Op::Stats(c, p, t)),
        (0u32..4, 1u8..4).prop_map(|(c, n)| Op::Cpu(c, n)),
        (any::<bool>(), "\\PC{0,40}").prop_map(|(w, t)| Op::Note(w, t)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Whatever is written is read back, block for block, in order, with
    /// per-CPU sequence numbers and END totals that add up.
    #[test]
    fn write_read_round_trip(ops in proptest::collection::vec(op(), 0..24), level in prop_oneof![Just(None), (1i32..6).prop_map(Some)]) {
        let c = level.map_or(Compression::None, Compression::Zstd);
        let a = ArchTag::new(RunTimeEndian::Big, 4, 4096, 12);
        let mut w = LogWriter::new(Vec::new(), &a, c).unwrap();
        let mut seq = std::collections::BTreeMap::<u32, (u64, u64)>::new();
        for o in &ops {
            match o {
                Op::Meta(k, n, content) => w.write_meta(&Meta {
                    kind: MetaKind::from_u16(*k),
                    name: n.clone(),
                    id: None,
                    content: content.clone(),
                    part: None,
                }).unwrap(),
                Op::Stats(cpu, p, t) => w.write_stats(&StatsRecord {
                    cpu: *cpu,
                    phase: match p { 0 => StatsPhase::Start, 1 => StatsPhase::Periodic, _ => StatsPhase::End },
                    wall_ns: Some(u64::from(*cpu)),
                    text: t.clone(),
                }).unwrap(),
                Op::Cpu(cpu, n) => {
                    let data: Vec<u8> = (0..usize::from(*n) * 4096).map(|i| (i as u8) ^ (*cpu as u8)).collect();
                    w.write_cpu_data(*cpu, &data).unwrap();
                }
                Op::Note(warn, t) => w.write_note(&NoteRecord { warning: *warn, text: t.clone() }).unwrap(),
            }
        }
        let bytes = w.finish(Some(7), "prop", Some(3)).unwrap();
        let mut items = read_all(&bytes).unwrap();
        prop_assert_eq!(items.len(), ops.len() + 3);
        // One ARCH_COPY, the arch tag again, before any CPU data (or END).
        let copy = items
            .iter()
            .position(|i| matches!(i, Item::Block(b) if b.header.block_type == BlockType::ArchCopy))
            .unwrap();
        let first_cpu = items
            .iter()
            .position(|i| matches!(i, Item::Block(b) if matches!(b.header.block_type, BlockType::CpuData | BlockType::End)))
            .unwrap();
        prop_assert_eq!(copy + 1, first_cpu);
        let Item::Block(c) = items.remove(copy) else { panic!() };
        let cp = c.payload().unwrap();
        prop_assert_eq!(Record::decode(c.header.block_type, &cp, None).unwrap(), Record::ArchCopy(Box::new(a.clone())));
        let mut it = items.iter();
        let Some(Item::Block(first)) = it.next() else { panic!() };
        let p = first.payload().unwrap();
        prop_assert_eq!(Record::decode(first.header.block_type, &p, None).unwrap(), Record::Arch(Box::new(a.clone())));
        for (o, item) in ops.iter().zip(&mut it) {
            let Item::Block(b) = item else { panic!("{item:?}") };
            let p = b.payload().unwrap();
            let r = Record::decode(b.header.block_type, &p, Some(4096)).unwrap();
            match (o, r) {
                (Op::Meta(k, n, content), Record::Meta(m)) => {
                    prop_assert_eq!(m.kind.to_u16(), *k);
                    prop_assert_eq!(&m.name, n);
                    prop_assert_eq!(&m.content, content);
                }
                (Op::Stats(cpu, _, t), Record::Stats(s)) => {
                    prop_assert_eq!(s.cpu, *cpu);
                    prop_assert_eq!(&s.text, t);
                }
                (Op::Cpu(cpu, n), Record::CpuData(d)) => {
                    let e = seq.entry(*cpu).or_default();
                    prop_assert_eq!((d.cpu, d.count, d.block_seq, d.first_subbuf), (*cpu, u32::from(*n), e.0, e.1));
                    prop_assert!(d.data.iter().enumerate().all(|(i, &x)| x == (i as u8) ^ (*cpu as u8)));
                    e.0 += 1;
                    e.1 += u64::from(*n);
                }
                (Op::Note(warn, t), Record::Note(n)) => {
                    prop_assert_eq!(n.warning, *warn);
                    prop_assert_eq!(&n.text, t);
                }
                (o, r) => panic!("wrote {o:?}, read {r:?}"),
            }
        }
        let Some(Item::Block(end)) = it.next() else { panic!() };
        let p = end.payload().unwrap();
        let Record::End(e) = Record::decode(end.header.block_type, &p, None).unwrap() else { panic!() };
        prop_assert_eq!(e.blocks, ops.len() as u64 + 2); // ARCH and ARCH_COPY
        prop_assert_eq!(e.exit_status, Some(3));
        for t in &e.cpus {
            prop_assert_eq!((t.blocks, t.subbufs), seq[&t.cpu]);
        }
    }
}

#[test]
fn resynchronisation_reads_each_byte_a_bounded_number_of_times() {
    // Sync words every 100 bytes whose lengths reach across the rest of
    // the file: checking each over its claimed length was quadratic.
    for size in [1 << 20, 4 << 20] {
        let bytes = kmemtrace_testkit::synth::sync_word_storm(size);
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let mut items = Vec::new();
        while let Some(i) = r.next_item().unwrap() {
            items.push(i);
        }
        let damage: Vec<&Item> = items
            .iter()
            .filter(|i| matches!(i, Item::Damage(_)))
            .collect();
        assert_eq!(damage.len(), 1, "one damaged stretch");
        let last = items.last().unwrap();
        assert!(
            matches!(last, Item::Block(b) if b.header.block_type == BlockType::Note),
            "the intact block after the storm is found: {last:?}"
        );
        // Every byte of the storm checksummed about once, not once per
        // candidate (the old scan: ~size^2 / 400 bytes).
        let crc = r.resync_crc_bytes();
        assert!(
            crc <= 2 * size as u64,
            "{crc} bytes checksummed for a {size}-byte storm"
        );
    }
}

#[test]
fn damaged_headers_claiming_the_rest_of_the_file_cost_a_bounded_amount() {
    // Headers without a CRC of their own, each claiming the rest of the
    // file (up to 64 MiB) and each followed by an intact empty block: each
    // check ran to the end of the file, about 8e11 bytes for these 8 MiB.
    let (mut bytes, _) = sample_log(Compression::None);
    let size = 8 << 20;
    let mut intact = Vec::new();
    encode_block(BlockType::Note, &[], Compression::None, &mut intact).unwrap();
    assert_eq!(intact.len(), 20);
    let end = bytes.len() + (size - bytes.len()) / 40 * 40;
    while bytes.len() < end {
        let rest = (end - bytes.len() - 20).min(64 << 20) as u32;
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"KMTB");
        h[4..6].copy_from_slice(&6u16.to_le_bytes());
        h[8..12].copy_from_slice(&rest.to_le_bytes());
        h[12..16].copy_from_slice(&rest.to_le_bytes());
        bytes.extend_from_slice(&h);
        bytes.extend_from_slice(&intact);
    }
    let mut r = LogReader::new(&bytes[..]).unwrap();
    let mut last = None;
    while let Some(i) = r.next_item().unwrap() {
        last = Some(i);
    }
    match last {
        Some(Item::Damage(d)) => {
            assert!(
                d.resumed_at.is_none() && d.reason.contains("left unread"),
                "{d:?}"
            );
            assert_eq!(d.offset + d.skipped, bytes.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    // The allowance, four bytes for each byte read past, and the one
    // check that went over.
    let spent = r.damage_crc_bytes();
    assert!(
        spent <= (256 << 20) + 4 * size as u64 + size as u64,
        "{spent}"
    );
}

#[test]
fn a_block_claiming_more_than_is_there_costs_what_is_there() {
    // A header claiming 64 MiB with 1 KB after it: truncation, read with
    // room for what arrives.
    let (mut bytes, _) = sample_log(Compression::None);
    let at = bytes.len();
    let mut h = [0u8; 20];
    h[..4].copy_from_slice(b"KMTB");
    h[4..6].copy_from_slice(&6u16.to_le_bytes());
    h[8..12].copy_from_slice(&(64u32 << 20).to_le_bytes());
    h[12..16].copy_from_slice(&(64u32 << 20).to_le_bytes());
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(&[0x5a; 1024]);
    let items = read_all(&bytes).unwrap();
    match items.last().unwrap() {
        Item::Truncated(t) => {
            assert_eq!(t.offset, at as u64);
            assert_eq!(t.available, 20 + 1024);
        }
        other => panic!("{other:?}"),
    }
}
