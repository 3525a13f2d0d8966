//! kpack in CPU_DATA blocks: the block codec packs what kpack shrinks and
//! falls back to zstd alone where it cannot help.

use kmemtrace_format::block::*;
use kmemtrace_format::kpack;
use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, PageSpec};

/// A CPU_DATA payload of `n` sub-buffers of kmalloc-like records.
fn cpu_data(n: usize) -> (Vec<u8>, kpack::Shape) {
    let layout = kmemtrace_kernel::SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };
    let mut p = vec![9u8; kpack::HEAD_LEN];
    let mut ts = 5000;
    for page in 0..n {
        let records = (0..70u64)
            .map(|i| {
                ts += 300 + i % 7;
                let site = 0xffff_ffff_8120_0000u64 + 0x40 * (i % 3);
                let ptr = 0xffff_8880_0400_0000u64 + 0x80 * (i + 70 * page as u64);
                let payload = [7u64 | 1234 << 32, site, ptr, 64, 64, 0xcc0]
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .collect();
                EncRecord::Event { ts, payload }
            })
            .collect();
        let spec = PageSpec {
            records,
            ..PageSpec::default()
        };
        p.extend(
            encode_subbuf(kmemtrace_kernel::LittleEndian, &layout, &spec)
                .unwrap()
                .bytes,
        );
    }
    let shape = kpack::Shape::new(false, 8, 16, 4096).unwrap();
    (p, shape)
}

fn decode_block(blk: &[u8], d: &mut PayloadDecoder) -> (u16, Vec<u8>) {
    let hdr = BlockHeader::parse(blk[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
    let stored = &blk[BLOCK_HEADER_LEN..];
    assert_eq!(
        BlockHeader::compute_crc(&blk[..BLOCK_HEADER_LEN].try_into().unwrap(), stored),
        hdr.crc
    );
    let mut out = Vec::new();
    let got = match decode_payload_into(&hdr, stored, d, &mut out).unwrap() {
        None => stored.to_vec(),
        Some(n) => out[..n].to_vec(),
    };
    assert_eq!(got, decode_payload(&hdr, stored).unwrap().as_ref());
    (hdr.flags, got)
}

#[test]
fn kpack_cpu_data_comes_back_and_falls_back_where_it_cannot_help() {
    let (payload, shape) = cpu_data(6);
    let mut d = PayloadDecoder::default();
    let mut c = BlockCompressor::new(Compression::Kpack(1));
    let mut z = BlockCompressor::new(Compression::Zstd(1));
    let (mut packed, mut zstd_only) = (Vec::new(), Vec::new());
    c.encode_cpu_data(&payload, Some(shape), &mut packed)
        .unwrap();
    z.encode_cpu_data(&payload, Some(shape), &mut zstd_only)
        .unwrap();
    assert_eq!(
        decode_block(&packed, &mut d),
        (FLAG_KPACK | FLAG_ZSTD, payload.clone())
    );
    assert_eq!(
        decode_block(&zstd_only, &mut d),
        (FLAG_ZSTD, payload.clone())
    );
    assert!(
        packed.len() < zstd_only.len(),
        "{} against {}",
        packed.len(),
        zstd_only.len()
    );
    // The CPU_DATA header is the start of the first zstd block, as in
    // a zstd-only block, for the index to read alone.
    let first = zstd::bulk::decompress(&packed[BLOCK_HEADER_LEN..], payload.len()).unwrap();
    assert_eq!(first[..kpack::HEAD_LEN], payload[..kpack::HEAD_LEN]);
    // Without a shape, zstd alone; on bytes kpack cannot shrink (no
    // sub-buffer parses), what zstd makes of them.
    let mut blk = Vec::new();
    c.encode_cpu_data(&payload, None, &mut blk).unwrap();
    assert_eq!(decode_block(&blk, &mut d), (FLAG_ZSTD, payload.clone()));
    let noise: Vec<u8> = (0..3 * 4096u32 + 24)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    blk.clear();
    c.encode_cpu_data(&noise, Some(shape), &mut blk).unwrap();
    let (flags, got) = decode_block(&blk, &mut d);
    assert_eq!(got, noise);
    assert_eq!(flags & FLAG_KPACK, 0);
    // The same context goes on packing.
    blk.clear();
    c.encode_cpu_data(&payload, Some(shape), &mut blk).unwrap();
    assert_eq!(blk, packed);
}

#[test]
fn kpack_is_only_for_cpu_data_and_never_longer_than_raw_len() {
    let (payload, shape) = cpu_data(2);
    let mut blk = Vec::new();
    BlockCompressor::new(Compression::Kpack(1))
        .encode_cpu_data(&payload, Some(shape), &mut blk)
        .unwrap();
    let mut hdr = BlockHeader::parse(blk[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
    let stored = &blk[BLOCK_HEADER_LEN..];
    hdr.block_type = BlockType::Meta;
    assert!(decode_payload(&hdr, stored)
        .unwrap_err()
        .contains("kpack flag on a META block"));
    hdr.block_type = BlockType::CpuData;
    hdr.raw_len = 100;
    assert!(decode_payload(&hdr, stored).is_err());
}
