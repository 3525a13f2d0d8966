//! kpack (FORMAT.md §8): unpacking arbitrary bytes never panics or
//! over-reads, and whatever the packer makes of an arbitrary payload
//! unpacks to that payload, for every byte order, long size and
//! sub-buffer size.
//!
//! The first byte chooses: odd, the rest is a packed body to unpack (its
//! `head` and the output length from the next bytes); even, the rest is a
//! payload to pack and unpack, its geometry from bits 1-5, bit 6 asking
//! for the version-1 packer (which old logs were written with).

use kmemtrace_format::kpack::{Packer, Shape, Unpacker};

/// The longest output an unpack is asked for: packed bodies claim their
/// length, and the reader allocates what the block header says (bounded
/// by the format); here it is bounded so a run stays fast.
const MAX_OUT: usize = 1 << 18;

/// One run.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        let Some((h, packed)) = rest.split_first_chunk::<3>() else {
            return;
        };
        let head = usize::from(h[0]);
        let out_len = (usize::from(u16::from_le_bytes([h[1], h[2]])) << 2).min(MAX_OUT);
        let mut out = vec![0u8; out_len];
        let _ = Unpacker::new().unpack(packed, head, &mut out);
        return;
    }
    let big = mode & 2 != 0;
    let long_size = if mode & 4 != 0 { 4 } else { 8 };
    let subbuf = 64u32 << ((mode >> 3) & 7);
    let Some(shape) = Shape::new(big, long_size, 8 + u32::from(long_size), subbuf) else {
        return;
    };
    let head = rest.len().min(24);
    let mut packed = Vec::new();
    let mut packer = if mode & 0x40 != 0 {
        Packer::version1()
    } else {
        Packer::new()
    };
    packer.pack(shape, rest, head, &mut packed);
    let mut back = vec![0u8; rest.len()];
    Unpacker::new()
        .unpack(&packed, head, &mut back)
        .expect("a packed payload unpacks");
    assert_eq!(back, rest, "kpack did not round-trip");
}
