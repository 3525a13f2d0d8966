//! Version 2 (columns, FORMAT.md §8.3): the packer's groups, and payloads
//! of every length.

use super::*;

/// A little-endian 64-bit sub-buffer of 16 KiB holding `payloads`, as
/// events 100 ns apart (`force_8byte_align`: every record with an
/// `array[0]`, as on such kernels).
fn page_of(payloads: Vec<Vec<u8>>, force_8byte_align: bool) -> Vec<u8> {
    let layout = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 16384,
    };
    let spec = PageSpec {
        records: payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| EncRecord::Event {
                ts: 1000 + 100 * i as u64,
                payload,
            })
            .collect(),
        force_8byte_align,
        ..PageSpec::default()
    };
    encode_subbuf(LittleEndian, &layout, &spec).unwrap().bytes
}

/// A payload of type `ty`: the common fields, then `first` (the first
/// field), then `rest`.
fn event(ty: u16, first: u64, rest: &[u8]) -> Vec<u8> {
    let mut p = ty.to_le_bytes().to_vec();
    p.extend_from_slice(&[0, 0, 0x10, 0x27, 0, 0]);
    p.extend_from_slice(&first.to_le_bytes());
    p.extend_from_slice(rest);
    p
}

fn le64() -> Shape {
    Shape::new(false, 8, 16, 16384).unwrap()
}

/// The group count a packed payload declares, and its key stream's length.
fn groups_and_keys(packed: &[u8]) -> (u64, usize) {
    let s = streams_of(packed);
    (leading_varint(&s[4]), s[3].len())
}

/// The LEB128 varint (FORMAT.md §8.3) at the start of `b`.
fn leading_varint(b: &[u8]) -> u64 {
    let mut v = 0;
    for (i, byte) in b.iter().take(10).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return v;
        }
    }
    panic!("no varint at the start of {b:?}")
}

#[test]
fn slab_kinds_are_split_by_call_site_page_kinds_are_not() {
    let mut r = Rng(3);
    let mut payloads = Vec::new();
    for i in 0..200u64 {
        // A slab event from one of four call sites, sizes by site.
        let site = 0xffff_ffff_8100_0000 + 0x40 * (i % 4);
        let ptr = 0xffff_8880_0000_0000u64 + 64 * r.below(1 << 16);
        let rest = [ptr.to_le_bytes(), (32u64 << (i % 4)).to_le_bytes()].concat();
        payloads.push(event(7, site, &rest));
        // A page event: its first field a page frame, new each time.
        payloads.push(event(9, 0x10_0000 + i * 7, &[0, 0, 0, 0, 2, 0, 0, 0]));
    }
    let payload = with_head(&page_of(payloads, false));
    let packed = round_trip(le64(), &payload);
    // Four groups of slab events (one a call site) and one of page events.
    assert_eq!(groups_and_keys(&packed), (5, 400));
}

#[test]
fn more_than_256_groups_take_two_byte_keys() {
    let payloads: Vec<Vec<u8>> = (0..300u16).map(|t| event(t, 5, &[])).collect();
    let payload = with_head(&page_of(payloads, false));
    let packed = round_trip(le64(), &payload);
    assert_eq!(groups_and_keys(&packed), (300, 600));
}

#[test]
fn kinds_past_the_table_are_carried_raw() {
    // 1,100 types in one block, 400 a sub-buffer: the walk stops at the
    // 1,025th kind and carries the rest of its sub-buffer raw.
    let body: Vec<u8> = (0..3u16)
        .flat_map(|p| {
            page_of(
                (0..400).map(|t| event(400 * p + t, 5, &[])).collect(),
                false,
            )
        })
        .collect();
    let payload = with_head(&body);
    let packed = round_trip(le64(), &payload);
    let s = streams_of(&packed);
    assert_eq!(groups_and_keys(&packed).0, 1024);
    assert!(s[5].len() > 76 * 16, "{} bytes raw", s[5].len());
}

#[test]
fn payloads_of_every_length_come_back() {
    // Lengths that are not a multiple of 4 (only `array[0]` records have
    // them), many rows and one; payloads past 48 columns (a loop for any
    // count) and up to 112 bytes (`type_len` records).
    let mut r = Rng(8);
    for force in [true, false] {
        let mut payloads = Vec::new();
        for len in [9usize, 13, 14, 15, 17, 100, 112, 196, 400] {
            for row in 0..if len == 17 { 1 } else { 6 } {
                let mut p = event(len as u16, 0xffff_ffff_8100_0000, &[]);
                p.resize(len, 0);
                // Some bytes change from row to row, the last one included.
                for at in [len / 3, len / 2, len - 1] {
                    p[at] = if row % 2 == 0 { r.below(256) as u8 } else { 0 };
                }
                payloads.push(p);
            }
        }
        let payload = with_head(&page_of(payloads, force));
        let packed = round_trip(le64(), &payload);
        // Walked: nothing raw but the 8 bytes of the sub-buffer's end.
        assert!(streams_of(&packed)[5].len() <= 8);
    }
}
