//! `parse_subbuf` and the record iterator over arbitrary bytes, with each
//! layout (long size 4 and 8) and byte order: no panic, and every record
//! stays inside the commit and advances.

use kmemtrace_kernel::{parse_subbuf, BigEndian, Endian, LittleEndian, SubBufLayout};

fn walk<E: Endian>(e: E, l: &SubBufLayout, page: &[u8]) {
    if let Ok(sb) = parse_subbuf(e, l, page) {
        let mut n = 0usize;
        let mut pos = 0usize;
        for r in sb.events(e) {
            n += 1;
            assert!(n <= l.subbuf_size / 4 + 1, "too many records");
            if let Ok(r) = r {
                assert!(r.len >= 4 && r.offset >= pos);
                assert!(r.offset + r.len <= l.data_offset + sb.commit);
                pos = r.offset + r.len;
            }
        }
    }
}

/// One run.
pub fn run(data: &[u8]) {
    // First byte: sub-buffer size (as a power of two from 64 bytes).
    let Some((&sel, page)) = data.split_first() else {
        return;
    };
    let subbuf_size = 64usize << (sel % 8);
    for long_size in [4usize, 8] {
        let l = SubBufLayout {
            long_size,
            data_offset: 8 + long_size,
            subbuf_size,
        };
        let page = &page[..page.len().min(subbuf_size)];
        walk(LittleEndian, &l, page);
        walk(BigEndian, &l, page);
    }
}
