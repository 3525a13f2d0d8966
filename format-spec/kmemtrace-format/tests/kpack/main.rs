//! kpack (FORMAT.md §8.3): sub-buffers and arbitrary bytes come back bit
//! for bit; damaged streams are refused, never turned into wrong bytes.

use kmemtrace_format::kpack::*;
use kmemtrace_kernel::{BigEndian, Endian, LittleEndian, RunTimeEndian, SubBufLayout};
use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, EndPadding, Missed, PageSpec};
use kmemtrace_testkit::synth::Rng;

const HEAD: usize = 24;

/// A slab-like payload: common fields, a call site from a few, a pointer
/// near the last, sizes, flags; lengths a multiple of 4 and odd ones.
fn payload(r: &mut Rng, e: RunTimeEndian, long: usize) -> Vec<u8> {
    let ty = [7u16, 9, 11, 300][r.below(4) as usize];
    let mut p = Vec::new();
    let put = |p: &mut Vec<u8>, v: u64, n: usize| {
        let b = if e.is_big_endian() {
            v.to_be_bytes()[8 - n..].to_vec()
        } else {
            v.to_le_bytes()[..n].to_vec()
        };
        p.extend_from_slice(&b);
    };
    put(&mut p, u64::from(ty), 2);
    put(&mut p, r.below(4), 2);
    put(&mut p, 1000 + r.below(3), 4);
    // Type 300's first fields many: each takes a slot of the table by
    // first field if (wrongly) remembered there, pushing others out.
    let sites = if ty == 300 { 1 << 12 } else { 5 };
    put(&mut p, 0xffff_ffff_8100_0000 + 0x40 * r.below(sites), long);
    // Type 300 ends after its first field: a payload of exactly 8 bytes
    // and a word, with nothing after it to predict by its first field.
    if ty != 300 {
        put(&mut p, 0xffff_8880_0000_0000 + 64 * r.below(1 << 20), long);
    }
    let extra = [0usize, 4, 8, 12, 20, 3][(ty % 6) as usize];
    for _ in 0..extra {
        p.push(r.below(3) as u8);
    }
    p
}

fn pages(e: RunTimeEndian, long: usize, size: usize, seed: u64, count: usize) -> Vec<u8> {
    let layout = SubBufLayout {
        long_size: long,
        data_offset: 8 + long,
        subbuf_size: size,
    };
    let mut r = Rng(seed);
    let mut ts = 1_000_000u64;
    let mut out = Vec::new();
    for i in 0..count {
        let mut spec = PageSpec {
            end: [EndPadding::None, EndPadding::Filler, EndPadding::Null][i % 3],
            missed: if i % 5 == 4 {
                Missed::Count(7)
            } else {
                Missed::None
            },
            ..PageSpec::default()
        };
        let mut used = 0;
        while used + 200 < size - layout.data_offset - 16 {
            ts += r.below(3000) + if r.below(50) == 0 { 1 << 30 } else { 0 };
            let p = payload(&mut r, e, long);
            used += p.len() + 16;
            spec.records.push(match r.below(20) {
                0 => EncRecord::AbsEvent { ts, payload: p },
                1 => EncRecord::Discarded {
                    ts,
                    payload_len: p.len(),
                },
                _ => EncRecord::Event { ts, payload: p },
            });
        }
        let page = match e {
            RunTimeEndian::Little => encode_subbuf(LittleEndian, &layout, &spec),
            RunTimeEndian::Big => encode_subbuf(BigEndian, &layout, &spec),
        };
        out.extend_from_slice(&page.expect("a page").bytes);
    }
    out
}

fn shape(e: RunTimeEndian, long: usize, size: usize) -> Shape {
    Shape::new(e.is_big_endian(), long as u8, 8 + long as u32, size as u32).unwrap()
}

/// Packs with `packer`, checks the payload comes back; the packed form.
fn round_trip_with(mut packer: Packer, shape: Shape, payload: &[u8]) -> Vec<u8> {
    let mut packed = Vec::new();
    packer.pack(shape, payload, HEAD, &mut packed);
    let mut out = vec![0xaa; payload.len()];
    Unpacker::new()
        .unpack(&packed, HEAD, &mut out)
        .expect("unpacks");
    assert_eq!(
        out, payload,
        "kpack {} did not give the payload back",
        packed[HEAD]
    );
    packed
}

/// Round trips through both versions; the current one's packed form.
fn round_trip(shape: Shape, payload: &[u8]) -> Vec<u8> {
    round_trip_with(Packer::version1(), shape, payload);
    round_trip_with(Packer::new(), shape, payload)
}

/// For valid sub-buffers: the records were walked, their payloads went
/// through the word path (version 1) or the columns (version 2), not
/// carried raw.
fn assert_records_walked(shape: Shape, payload: &[u8]) {
    let mut packed = Vec::new();
    Packer::version1().pack(shape, payload, HEAD, &mut packed);
    let s = streams_of(&packed);
    // `lens` holds one XOR length per payload word, two to a byte.
    let (words, raw) = (8 * 2 * s[1].len(), s[3].len());
    assert!(
        words > payload.len() / 2 && raw < payload.len() / 3,
        "{shape:?}: {words} bytes of payload words, {raw} raw, of {}",
        payload.len()
    );
    let mut packed = Vec::new();
    Packer::new().pack(shape, payload, HEAD, &mut packed);
    let s = streams_of(&packed);
    let (raw, cols) = (s[5].len(), s[6].len());
    assert!(
        raw < payload.len() / 3 && cols > 0,
        "{shape:?}: {cols} bytes of columns, {raw} raw, of {}",
        payload.len()
    );
}

fn with_head(body: &[u8]) -> Vec<u8> {
    let mut p: Vec<u8> = (0..HEAD as u8).collect();
    p.extend_from_slice(body);
    p
}

#[test]
fn sub_buffers_come_back_bit_for_bit_in_every_byte_order_and_long_size() {
    for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
        for long in [4, 8] {
            for size in [4096, 8192] {
                let body = pages(e, long, size, 7 + long as u64, 12);
                let payload = with_head(&body);
                round_trip(shape(e, long, size), &payload);
                assert_records_walked(shape(e, long, size), &payload);
                // A partial sub-buffer at the end is carried as it is.
                let mut cut = payload.clone();
                cut.truncate(payload.len() - 100);
                round_trip(shape(e, long, size), &cut);
            }
        }
    }
}

#[test]
fn the_head_stays_first_and_unchanged() {
    let body = pages(RunTimeEndian::Little, 8, 4096, 3, 2);
    let payload = with_head(&body);
    let packed = round_trip(shape(RunTimeEndian::Little, 8, 4096), &payload);
    assert_eq!(packed[..HEAD], payload[..HEAD]);
    assert_eq!(packed[HEAD], VERSION);
}

#[test]
fn arbitrary_bytes_come_back_too() {
    let mut r = Rng(99);
    for round in 0..200 {
        let len = HEAD + r.below(3 * 4096) as usize;
        let mut p: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        // Some sub-buffers with plausible commits, some with zeros.
        for at in (HEAD..len).step_by(4096) {
            if round % 2 == 0 && at + 16 <= len {
                p[at + 8..at + 16].copy_from_slice(&(r.below(4200)).to_le_bytes());
            }
            if round % 3 == 0 {
                let end = (at + 4096).min(len);
                p[(at + 2000).min(end)..end].fill(0);
            }
        }
        for (e, long) in [(RunTimeEndian::Little, 8), (RunTimeEndian::Big, 4)] {
            round_trip(shape(e, long, 4096), &p);
        }
    }
}

/// The streams of a packed payload (after the head and kpack's header):
/// five in version 1, seven in version 2.
fn streams_of(packed: &[u8]) -> Vec<Vec<u8>> {
    let mut at = HEAD + HEADER_LEN;
    let n = if packed[HEAD] == VERSION_1 { 5 } else { 7 };
    (0..n)
        .map(|_| {
            let n = u32::from_le_bytes(packed[at..at + 4].try_into().unwrap()) as usize;
            at += 4 + n;
            packed[at - n..at].to_vec()
        })
        .collect()
}

/// Word `i`'s XOR length in the `lens` stream.
fn nibble(lens: &[u8], i: usize) -> usize {
    usize::from(lens[i / 2] >> (4 * (i % 2)) & 15)
}

/// `packed` with the XOR of word `j` kept in `bytes.len()` more bytes,
/// `bytes` above its own.
fn widen_xor(packed: &[u8], j: usize, bytes: &[u8]) -> Vec<u8> {
    let mut streams = streams_of(packed);
    let pos: usize = (0..j).map(|i| nibble(&streams[1], i)).sum();
    let k = nibble(&streams[1], j);
    let wider = (k + bytes.len()) as u8;
    let b = &mut streams[1][j / 2];
    *b = if j.is_multiple_of(2) {
        *b & 0xf0 | wider
    } else {
        *b & 0x0f | wider << 4
    };
    streams[2].splice(pos + k..pos + k, bytes.iter().copied());
    reframed(packed, &streams)
}

/// `packed` with its streams replaced by `streams`, their lengths right.
fn reframed(packed: &[u8], streams: &[Vec<u8>]) -> Vec<u8> {
    let mut out = packed[..HEAD + HEADER_LEN].to_vec();
    for st in streams {
        out.extend_from_slice(&(st.len() as u32).to_le_bytes());
        out.extend_from_slice(st);
    }
    out
}

/// Streams that are framed right but end early, run on, or hold other
/// bytes (XOR lengths above 8 among them) are refused or, where the
/// change does not matter, give the payload back: never wrong bytes, never
/// a panic. The cuts of the whole packed payload above stop at the
/// framing; these reach the rebuilding itself.
#[test]
fn damage_inside_the_streams_never_gives_wrong_bytes() {
    let cases = [
        (RunTimeEndian::Little, 8, VERSION_1),
        (RunTimeEndian::Big, 4, VERSION_1),
        (RunTimeEndian::Little, 8, VERSION),
        (RunTimeEndian::Big, 4, VERSION),
        (RunTimeEndian::Big, 8, VERSION),
    ];
    for (e, long, version) in cases {
        let payload = with_head(&pages(e, long, 4096, 11, 3));
        let packer = if version == VERSION_1 {
            Packer::version1()
        } else {
            Packer::new()
        };
        let packed = round_trip_with(packer, shape(e, long, 4096), &payload);
        let streams = streams_of(&packed);
        let mut u = Unpacker::new();
        let mut out = vec![0u8; payload.len()];
        let mut check = |s: &[Vec<u8>], what: &str| {
            let r = u.unpack(&reframed(&packed, s), HEAD, &mut out);
            assert!(r.is_err() || out == payload, "{e:?} {long}: {what}");
        };
        let mut r = Rng(5);
        for i in 0..streams.len() {
            let n = streams[i].len();
            for cut in [1, 2, 3, 9, n / 2, n]
                .into_iter()
                .filter(|&c| c <= n && c > 0)
            {
                let mut s = streams.clone();
                s[i].truncate(n - cut);
                check(&s, &format!("stream {i} cut by {cut}"));
            }
            for extra in [0u8, 0x11, 0xff] {
                let mut s = streams.clone();
                s[i].push(extra);
                check(&s, &format!("stream {i} with {extra:#x} after it"));
            }
            for _ in 0..200.min(4 * n) {
                let mut s = streams.clone();
                let at = r.below(n as u64) as usize;
                s[i][at] = r.below(256) as u8;
                check(&s, &format!("stream {i} byte {at}"));
            }
        }
        if version != VERSION_1 {
            continue;
        }
        // Every XOR length in turn made 9..15: more than any word holds.
        for j in 0..2 * streams[1].len() {
            let mut s = streams.clone();
            let b = &mut s[1][j / 2];
            let bad = 9 + (j % 7) as u8;
            *b = if j % 2 == 0 {
                *b & 0xf0 | bad
            } else {
                *b & 0x0f | bad << 4
            };
            let r = u.unpack(&reframed(&packed, &s), HEAD, &mut out);
            assert_eq!(
                r,
                Err(UnpackError::Damaged("xor")),
                "{e:?} {long}: length of word {j}"
            );
        }
    }
}

/// FORMAT.md §8.2: an XOR may be kept in more bytes than it needs, up to
/// 8, as long as its value fits the word; payloads rebuilt in one loop
/// and word by word (near the streams' end) read it alike.
#[test]
fn xor_lengths_beyond_the_word_are_read_by_value() {
    let kinds = [
        (RunTimeEndian::Little, 4),
        (RunTimeEndian::Big, 4),
        (RunTimeEndian::Little, 8),
    ];
    for (e, long) in kinds {
        let payload = with_head(&pages(e, long, 4096, 9, 2));
        let packed = round_trip_with(Packer::version1(), shape(e, long, 4096), &payload);
        let lens = &streams_of(&packed)[1];
        let mut u = Unpacker::new();
        let mut out = vec![0u8; payload.len()];
        let mut unpack = |p: &[u8]| u.unpack(p, HEAD, &mut out).map(|_| out == payload);
        // The first words, and the last (the low half of the last byte).
        for j in (0..40).chain([2 * lens.len() - 2]) {
            let k = nibble(lens, j);
            // Zero bytes up to 8 in all: the same value; 9 is damage.
            let same = widen_xor(&packed, j, &vec![0; 8 - k]);
            assert_eq!(unpack(&same), Ok(true), "{e:?} {long}: word {j}");
            let nine = widen_xor(&packed, j, &vec![0; 9 - k]);
            assert!(unpack(&nine).is_err(), "{e:?} {long}: word {j}");
            // A fifth byte that is not zero does not fit a 4-byte word.
            if long == 4 {
                let mut high = vec![0; 4 - k];
                high.push(1);
                let wide = widen_xor(&packed, j, &high);
                assert!(unpack(&wide).is_err(), "{e:?}: word {j}");
            }
        }
    }
}

#[test]
fn damaged_streams_never_give_wrong_bytes() {
    for (e, long) in [(RunTimeEndian::Big, 8), (RunTimeEndian::Little, 4)] {
        damaged_streams_are_noticed(Packer::version1(), e, long);
        damaged_streams_are_noticed(Packer::new(), e, long);
    }
}

fn damaged_streams_are_noticed(mut packer: Packer, e: RunTimeEndian, long: usize) {
    let body = pages(e, long, 4096, 5, 3);
    let payload = with_head(&body);
    let mut packed = Vec::new();
    packer.pack(shape(e, long, 4096), &payload, HEAD, &mut packed);
    let mut u = Unpacker::new();
    let mut out = vec![0u8; payload.len()];
    // Every cut is noticed.
    for cut in 0..packed.len() {
        assert!(
            u.unpack(&packed[..cut], HEAD, &mut out).is_err(),
            "cut at {cut}"
        );
    }
    // A wrong length is noticed.
    let mut longer = vec![0u8; payload.len() + 1];
    assert!(u.unpack(&packed, HEAD, &mut longer).is_err());
    // Every flipped bit, head included, is an error (the CRC over the
    // rebuilt payload, where the streams still parse), never a panic and
    // never wrong bytes. (In version 2 a few flips spell the same bytes
    // another way: one byte fewer walked before a padding that runs to
    // the end of the walk, that byte taken raw.)
    for at in 0..packed.len() {
        for bit in [0, 3, 7] {
            let mut bad = packed.clone();
            bad[at] ^= 1 << bit;
            let r = u.unpack(&bad, HEAD, &mut out);
            assert!(
                r.is_err() || (packed[HEAD] != VERSION_1 && out == payload),
                "bit {bit} of byte {at}"
            );
        }
    }
    // A version from the future.
    let mut future = packed.clone();
    future[HEAD] = VERSION + 1;
    assert_eq!(
        u.unpack(&future, HEAD, &mut out),
        Err(UnpackError::Version(VERSION + 1))
    );
    // And the intact stream still unpacks with the same unpacker.
    u.unpack(&packed, HEAD, &mut out).unwrap();
    assert_eq!(out, payload);
}

#[test]
fn shapes_kpack_cannot_walk_are_refused() {
    assert!(Shape::new(false, 8, 16, 4096).is_some());
    assert!(Shape::new(false, 2, 16, 4096).is_none());
    assert!(Shape::new(false, 8, 12, 4096).is_none());
    assert!(Shape::new(false, 4, 4096, 4096).is_none());
    assert!(Shape::new(false, 8, 16, 2 << 20).is_none());
}

#[test]
fn payloads_are_only_predicted_from_payloads_as_long() {
    // Lengths 100 and 65,636 of one type: alike in their low 16 bits. A
    // key that kept only those had the longer one XORed with bytes past
    // the shorter (its own), which no decoder can have.
    let size = 256 << 10;
    let layout = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: size,
    };
    let ty = |len: usize| {
        let mut p = vec![0u8; len];
        p[..2].copy_from_slice(&7u16.to_le_bytes());
        for (i, b) in p.iter_mut().enumerate().skip(8) {
            *b = (i % 251) as u8;
        }
        p
    };
    let spec = PageSpec {
        records: [100, 65_636, 100, 65_636, 200]
            .iter()
            .enumerate()
            .map(|(i, &len)| EncRecord::Event {
                ts: 1000 + i as u64,
                payload: ty(len),
            })
            .collect(),
        ..PageSpec::default()
    };
    let page = encode_subbuf(LittleEndian, &layout, &spec).unwrap().bytes;
    let payload = with_head(&page);
    round_trip(Shape::new(false, 8, 16, size as u32).unwrap(), &payload);
}

mod blocks;
mod columns;
mod log_index;
