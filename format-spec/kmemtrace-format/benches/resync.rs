//! Resynchronisation after damage, on hostile input: `cargo bench -p
//! kmemtrace-format --bench resync`.
//!
//! [`sync_word_storm`] files of 1, 4, 16 and 64 MB (a sync word every 100
//! bytes, each claiming a payload that reaches across the rest of the file,
//! every CRC wrong, one intact block at the end). Prints the reader's time
//! per MB beside that of a per-candidate check (what the reader did before:
//! each candidate's CRC computed over its whole claimed length), which is
//! quadratic and run only up to 16 MB. Timing lives here, never in tests.

use kmemtrace_format::block::{BlockHeader, BLOCK_HEADER_LEN, SYNC};
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_testkit::synth::sync_word_storm;
use std::time::Instant;

/// The old scan: the first candidate whose CRC over its claimed block
/// matches, each checked on its own.
fn per_candidate(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(k) = bytes[at..].windows(4).position(|w| w == SYNC) {
        let c = at + k;
        if let Some(h) = bytes.get(c..c + BLOCK_HEADER_LEN) {
            let h: [u8; BLOCK_HEADER_LEN] = h.try_into().unwrap();
            if let Ok(hdr) = BlockHeader::parse(&h) {
                let end = c + BLOCK_HEADER_LEN + hdr.stored_len as usize;
                if let Some(p) = bytes.get(c + BLOCK_HEADER_LEN..end) {
                    if BlockHeader::compute_crc(&h, p) == hdr.crc {
                        return Some(c);
                    }
                }
            }
        }
        at = c + 1;
    }
    None
}

fn main() {
    println!(
        "{:>6} | {:>14} {:>12} | {:>22} {:>12}",
        "size", "reader s/MB", "checksummed", "per-candidate s/MB", "slower by"
    );
    for mb in [1usize, 4, 16, 64] {
        let bytes = sync_word_storm(mb << 20);
        let t = Instant::now();
        let mut r = LogReader::new(&bytes[..]).unwrap();
        let mut found = false;
        while let Some(i) = r.next_item().unwrap() {
            found |= matches!(i, Item::Block(b) if b.header.block_type.name() == "NOTE");
        }
        let reader = t.elapsed().as_secs_f64();
        assert!(found);
        let crc = r.resync_crc_bytes();
        let old = (mb <= 16).then(|| {
            let t = Instant::now();
            // The storm starts after the file header and the ARCH block.
            let start = bytes.windows(4).position(|w| w == SYNC).unwrap() + 1;
            assert!(per_candidate(&bytes, start).is_some());
            t.elapsed().as_secs_f64()
        });
        let (old_col, ratio) = match old {
            Some(o) => (
                format!("{:.4}", o / mb as f64),
                format!("{:.0}x", o / reader),
            ),
            None => ("(quadratic: not run)".into(), "-".into()),
        };
        println!(
            "{:>4}MB | {:>14.5} {:>9.2} MB | {:>22} {:>12}",
            mb,
            reader / mb as f64,
            crc as f64 / (1 << 20) as f64,
            old_col,
            ratio
        );
    }
}
