//! A log whose CPU data is packed, with zstd and without: both index the
//! same blocks and give back the same sub-buffers.

use kmemtrace_format::block::{
    put_block, BlockHeader, BlockType, Compression, BLOCK_HEADER_LEN, FILE_HEADER_LEN, FLAG_KPACK,
    FLAG_ZSTD,
};
use kmemtrace_format::{ArchTag, LogWriter};
use kmemtrace_import::Log;
use kmemtrace_kernel::{LittleEndian, RunTimeEndian, SubBufLayout};
use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, PageSpec};

#[test]
fn packed_blocks_are_indexed_with_and_without_zstd() {
    let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
    let layout = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };
    let mut w = LogWriter::new(Vec::new(), &arch, Compression::Kpack(1)).unwrap();
    for (cpu, pages) in [(0u32, 3u64), (1, 5)] {
        let mut data = Vec::new();
        for p in 0..pages {
            let records = (0..60u64)
                .map(|i| EncRecord::Event {
                    ts: 1000 * p + i,
                    payload: [9u64, 0xffff_ffff_8100_0000 + i % 4, i * 64, 64]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                })
                .collect();
            let spec = PageSpec {
                records,
                ..PageSpec::default()
            };
            data.extend(encode_subbuf(LittleEndian, &layout, &spec).unwrap().bytes);
        }
        w.write_cpu_data(cpu, &data).unwrap();
    }
    let zstd_packed = w.finish(None, "test", None).unwrap();
    // The same log with its CPU data packed but not compressed.
    let mut packed_only = zstd_packed[..FILE_HEADER_LEN].to_vec();
    let mut at = packed_only.len();
    while at < zstd_packed.len() {
        let h: [u8; BLOCK_HEADER_LEN] = zstd_packed[at..at + BLOCK_HEADER_LEN].try_into().unwrap();
        let hdr = BlockHeader::parse(&h).unwrap();
        let end = at + BLOCK_HEADER_LEN + hdr.stored_len as usize;
        let stored = &zstd_packed[at + BLOCK_HEADER_LEN..end];
        if hdr.block_type == BlockType::CpuData {
            assert_eq!(hdr.flags, FLAG_KPACK | FLAG_ZSTD);
            let packed = zstd::bulk::decompress(stored, hdr.raw_len as usize).unwrap();
            put_block(
                BlockType::CpuData,
                FLAG_KPACK,
                &packed,
                hdr.raw_len as usize,
                &mut packed_only,
            );
        } else {
            packed_only.extend_from_slice(&zstd_packed[at..end]);
        }
        at = end;
    }
    let raw = |bytes: &[u8]| {
        let log = Log::from_bytes("t", bytes).unwrap();
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        assert_eq!(log.version, (1, 3));
        let index: Vec<_> = log
            .blocks
            .iter()
            .map(|b| (b.cpu, b.block_seq, b.first_subbuf, b.count))
            .collect();
        let mut all = Vec::new();
        for cpu in log.cpus() {
            log.visit_cpu(cpu, |v| all.extend_from_slice(v.raw), |p| panic!("{p}"));
        }
        (index, all)
    };
    let (a, b) = (raw(&zstd_packed), raw(&packed_only));
    assert_eq!(a.0, vec![(0, 0, 0, 3), (1, 0, 0, 5)]);
    assert!(a == b);
    assert_eq!(a.1.len(), 8 * 4096);
}
