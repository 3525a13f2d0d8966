//! Parquet's integer encodings, as its format document defines them: the
//! RLE/bit-packed hybrid (definition levels, dictionary indices) and
//! DELTA_BINARY_PACKED (time stamps). Written here because the `parquet`
//! crate keeps its encoders private, and its column writer hashes every
//! value into a dictionary of its own where ours are already numbered.

/// Appends `v` as an unsigned LEB128 varint.
pub fn uleb(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bits needed for values up to `max`.
pub fn width_of(max: u64) -> u8 {
    (64 - max.leading_zeros()) as u8
}

/// Packs `values` at `width` bits each, least significant bit first, as
/// Parquet's bit-packing does; pads the last byte with zeros.
fn pack(out: &mut Vec<u8>, values: impl Iterator<Item = u64>, width: u8) {
    if width == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for v in values {
        acc |= u128::from(v) << bits;
        bits += u32::from(width);
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
}

/// A run of one value long enough to be worth an RLE run.
const MIN_REPEAT: usize = 8;

/// Appends `values` (each below `1 << width`) in the RLE/bit-packed
/// hybrid: runs of at least [`MIN_REPEAT`] equal values as RLE runs, the
/// rest bit-packed in groups of 8 (only the last group padded: a reader
/// knows the value count from the page).
pub fn hybrid(out: &mut Vec<u8>, values: &[u32], width: u8) {
    let value_bytes = usize::from(width).div_ceil(8);
    let packed = |out: &mut Vec<u8>, lits: &[u32]| {
        if lits.is_empty() {
            return;
        }
        let groups = lits.len().div_ceil(8);
        uleb(out, (groups as u64) << 1 | 1);
        let pad = groups * 8 - lits.len();
        let all = lits.iter().map(|&v| u64::from(v));
        pack(out, all.chain(std::iter::repeat_n(0, pad)), width);
    };
    let (mut i, mut literals) = (0, 0);
    while i < values.len() {
        let v = values[i];
        let run = values[i..].iter().take_while(|&&x| x == v).count();
        // The literals before must fill whole groups: the run lends them
        // its first values.
        let lend = (8 - (i - literals) % 8) % 8;
        if run >= lend + MIN_REPEAT {
            packed(out, &values[literals..i + lend]);
            uleb(out, ((run - lend) as u64) << 1);
            out.extend_from_slice(&v.to_le_bytes()[..value_bytes]);
            literals = i + run;
        }
        i += run;
    }
    packed(out, &values[literals..]);
}

/// Values per DELTA_BINARY_PACKED block, and miniblocks per block.
const BLOCK: usize = 128;
const MINIBLOCKS: usize = 4;

/// Appends `values` in DELTA_BINARY_PACKED: a header, then blocks of
/// [`BLOCK`] deltas from their block's least delta, in [`MINIBLOCKS`]
/// miniblocks of their own bit width.
pub fn delta_binary_packed(out: &mut Vec<u8>, values: &[i64]) {
    let zigzag = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
    uleb(out, BLOCK as u64);
    uleb(out, MINIBLOCKS as u64);
    uleb(out, values.len() as u64);
    uleb(out, zigzag(values.first().copied().unwrap_or(0)));
    let deltas: Vec<i64> = values.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let per_mini = BLOCK / MINIBLOCKS;
    for block in deltas.chunks(BLOCK) {
        let min = block.iter().copied().min().unwrap_or(0);
        uleb(out, zigzag(min));
        let minis: Vec<&[i64]> = block.chunks(per_mini).collect();
        let widths: Vec<u8> = (0..MINIBLOCKS)
            .map(|m| {
                minis.get(m).map_or(0, |d| {
                    width_of(
                        d.iter()
                            .map(|&x| x.wrapping_sub(min) as u64)
                            .max()
                            .unwrap_or(0),
                    )
                })
            })
            .collect();
        out.extend_from_slice(&widths);
        for (d, &w) in minis.iter().zip(&widths) {
            let pad = per_mini - d.len();
            let from_min = d.iter().map(|&x| x.wrapping_sub(min) as u64);
            pack(out, from_min.chain(std::iter::repeat_n(0, pad)), w);
        }
    }
}
