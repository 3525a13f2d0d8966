//! The block reader over arbitrary bytes: no panic, no hang, bounded
//! memory; every item's offsets stay inside the input.

use kmemtrace_format::reader::{Item, LogReader};

/// One run.
pub fn run(data: &[u8]) {
    let Ok(mut r) = LogReader::new(data) else {
        return;
    };
    let len = data.len() as u64;
    let mut last = 0u64;
    while let Ok(Some(item)) = r.next_item() {
        let off = match &item {
            Item::Block(b) => {
                let _ = b.payload();
                b.offset
            }
            Item::Damage(d) => d.offset,
            Item::Truncated(t) => t.offset,
        };
        assert!(
            off >= last && off <= len,
            "offset {off} after {last}, input {len}"
        );
        last = off;
    }
}
