//! The structured inputs of the fuzz targets (`fuzz/`), and the same
//! inputs cut from real files (the seed corpora, `fuzz-seeds`).
//!
//! Random bytes almost never pass a block's CRC or a tar header's
//! checksum, so a target fed raw bytes spends its runs on the first check.
//! The targets that must reach past those checks take an input that says
//! what to build, and build it correctly framed:
//!
//! - [`framed_log`]: a log from an arch byte and a list of blocks (see
//!   there), each framed with a correct CRC, with its payload stored plain,
//!   through zstd, as a well-formed CPU_DATA block (kpack or not), or with
//!   whatever flags the input names;
//! - [`tar_of`]: a tar (or tar.gz) from a list of entries, as a busybox
//!   capture dump is.
//!
//! [`frame_of_log`] and [`entries_of_dir`] go the other way, from a real
//! log or dump to such an input, so that the fuzzer starts from real
//! metadata, sub-buffers and file names.

use crate::tar;
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::{
    encode_file_header_minor, put_block, BlockCompressor, BlockType, Compression, VERSION_MINOR,
};
use kmemtrace_format::kpack::Shape;
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::records::{
    encode_cpu_data_header, CpuTotal, EndRecord, Meta, MetaKind, CPU_DATA_HEADER_LEN,
};
use kmemtrace_kernel::{parse_subbuf, Endian, RunTimeEndian, SubBufLayout};
use std::io::Write;
use std::path::Path;

/// How a framed block's payload becomes a stored block (the low two bits of
/// its control byte).
const STORE_PLAIN: u8 = 0;
const STORE_ZSTD: u8 = 1;
const STORE_CPU_DATA: u8 = 2;
const STORE_FLAGS: u8 = 3;
/// With [`STORE_CPU_DATA`]: kpack, then zstd.
const CTL_KPACK: u8 = 1 << 2;

/// The largest raw length a [`STORE_FLAGS`] block may claim: readers
/// allocate what a block claims, and a claim the file cannot back is
/// refused before that only up to the format's own limit.
const MAX_CLAIMED_RAW: u32 = 1 << 20;

/// The geometry an arch byte names: bit 0 big-endian, bit 1 4-byte longs,
/// bits 2-4 the sub-buffer size (2^(9+n) bytes), bit 5 64 KiB pages.
fn arch_of(b: u8) -> ArchTag {
    let order = if b & 1 != 0 {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    };
    let long_size = if b & 2 != 0 { 4 } else { 8 };
    let subbuf_size = 512u32 << ((b >> 2) & 7);
    let mut arch = ArchTag::new(order, long_size, subbuf_size, 8 + u32::from(long_size));
    arch.page_size = Some(if b & 0x20 != 0 { 65536 } else { 4096 });
    arch
}

/// The arch byte of a real log's geometry, where one names it.
fn arch_byte(arch: &ArchTag) -> Option<u8> {
    let shift = (9..=16).find(|s| 1u32 << s == arch.subbuf_size)? - 9;
    let mut b = (shift as u8) << 2;
    if arch.byte_order == RunTimeEndian::Big {
        b |= 1;
    }
    if arch.long_size == 4 {
        b |= 2;
    }
    if arch.page_size == Some(65536) {
        b |= 0x20;
    }
    (arch.data_offset == 8 + u32::from(arch.long_size)).then_some(b)
}

/// A log from a framed input: an arch byte, then blocks of
/// `type:u8, ctl:u8, len:u32 LE, payload` (`len` is cut to what is left).
/// The low two bits of `ctl` say how the payload is stored:
///
/// - 0: as it is;
/// - 1: through zstd;
/// - 2: as a CPU_DATA block of CPU `ctl >> 4`, its payload whole
///   sub-buffers (a short tail is dropped) behind a header with the CPU's
///   next block sequence number; bit 2 sends it through kpack;
/// - 3: with the block flags `ctl >> 2`, its payload a `u32 LE` raw length
///   (at most 1 MiB) and the stored bytes, unchecked.
///
/// The file header and the ARCH block come first, always valid; an
/// ARCH_COPY block stored plain with no payload is written as the ARCH
/// block's copy.
pub fn framed_log(input: &[u8]) -> Vec<u8> {
    let Some((&arch_b, mut rest)) = input.split_first() else {
        return Vec::new();
    };
    let arch = arch_of(arch_b);
    let shape = Shape::of(&arch);
    let subbuf = arch.subbuf_size as usize;
    let mut out = encode_file_header_minor(VERSION_MINOR).to_vec();
    let arch_payload = arch.encode();
    put_block(
        BlockType::Arch,
        0,
        &arch_payload,
        arch_payload.len(),
        &mut out,
    );
    let mut zstd = BlockCompressor::new(Compression::Zstd(1));
    let mut kpack = BlockCompressor::new(Compression::Kpack(1));
    let mut plain = BlockCompressor::new(Compression::None);
    let mut seq = [0u64; 16];
    let mut subbufs = [0u64; 16];
    while rest.len() >= 6 {
        let (t, ctl) = (BlockType::from_u16(u16::from(rest[0])), rest[1]);
        let len = u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]]) as usize;
        let len = len.min(rest.len() - 6);
        let payload = &rest[6..6 + len];
        rest = &rest[6 + len..];
        match ctl & 3 {
            STORE_PLAIN if t == BlockType::ArchCopy && payload.is_empty() => {
                put_block(t, 0, &arch_payload, arch_payload.len(), &mut out)
            }
            STORE_PLAIN => put_block(t, 0, payload, payload.len(), &mut out),
            STORE_ZSTD => zstd.encode(t, payload, &mut out).expect("under 64 MiB"),
            STORE_CPU_DATA => {
                let cpu = usize::from(ctl >> 4);
                let n = payload.len() / subbuf;
                let mut p =
                    encode_cpu_data_header(cpu as u32, n as u32, seq[cpu], subbufs[cpu]).to_vec();
                p.extend_from_slice(&payload[..n * subbuf]);
                seq[cpu] += 1;
                subbufs[cpu] += n as u64;
                let c = if ctl & CTL_KPACK != 0 {
                    &mut kpack
                } else {
                    &mut plain
                };
                c.encode_cpu_data(&p, shape, &mut out)
                    .expect("under 64 MiB");
            }
            STORE_FLAGS => {
                let Some((raw, stored)) = payload.split_first_chunk::<4>() else {
                    continue;
                };
                let raw = u32::from_le_bytes(*raw).min(MAX_CLAIMED_RAW);
                put_block(t, u16::from(ctl >> 2), stored, raw as usize, &mut out);
            }
            _ => unreachable!("two bits"),
        }
    }
    out
}

/// The log an input of the `check` and `report` targets stands for: its
/// first byte odd, the rest as it is; even, the rest as a framed input
/// ([`framed_log`]). `None` for an empty input.
pub fn log_of_input(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    Some(if mode & 1 == 1 {
        rest.to_vec()
    } else {
        framed_log(rest)
    })
}

/// A framed input being written: its bytes (the arch byte first) and the
/// blocks in it.
struct Framed {
    bytes: Vec<u8>,
    blocks: u64,
}

impl Framed {
    fn push(&mut self, t: BlockType, ctl: u8, payload: &[u8]) {
        self.bytes.push(t.to_u16() as u8);
        self.bytes.push(ctl);
        self.bytes
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(payload);
        self.blocks += 1;
    }
}

/// What [`frame_of_log`] keeps of a real log.
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    /// Sub-buffers kept per CPU, from the start.
    pub subbufs_per_cpu: usize,
    /// Bytes kept of each metadata text but the event formats (kallsyms
    /// runs to megabytes), cut at a line's end.
    pub meta_bytes: usize,
    /// Store CPU data through kpack.
    pub kpack: bool,
    /// The systems (`kmem`, `vmscan`, ...) whose event formats are kept;
    /// empty: all.
    pub systems: &'static [&'static str],
    /// Sub-buffers are cut to this size (a power of two from 512 bytes),
    /// each to the whole records that fit: `None` keeps the log's own.
    pub subbuf_size: Option<u32>,
}

/// The framed input ([`framed_log`]) of a real log, cut as `cut` says:
/// `None` where the log's geometry has no arch byte or no ARCH block comes
/// first.
pub fn frame_of_log(log: &[u8], cut: Cut) -> Option<Vec<u8>> {
    let mut r = LogReader::new(log).ok()?;
    let mut out = Framed {
        bytes: Vec::new(),
        blocks: 0,
    };
    // The framed sub-buffers' size, once the ARCH block has been read.
    let mut size: Option<usize> = None;
    let mut kept = [0usize; 16];
    // Per CPU, the CPU_DATA blocks and sub-buffers framed: what the END
    // block must count.
    let mut totals = [(0u64, 0u64); 16];
    let mut order = RunTimeEndian::Little;
    let mut layout = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };
    while let Ok(Some(item)) = r.next_item() {
        let Item::Block(b) = item else { continue };
        let Ok(payload) = b.payload() else { continue };
        match b.header.block_type {
            BlockType::Arch => {
                if size.is_some() {
                    continue;
                }
                let mut a = ArchTag::decode(&payload).ok()?;
                layout = SubBufLayout {
                    long_size: usize::from(a.long_size),
                    data_offset: a.data_offset as usize,
                    subbuf_size: a.subbuf_size as usize,
                };
                order = a.byte_order;
                a.subbuf_size = cut.subbuf_size.unwrap_or(a.subbuf_size);
                out.bytes.push(arch_byte(&a)?);
                size = Some(a.subbuf_size as usize);
            }
            _ if size.is_none() => return None,
            BlockType::CpuData => {
                let (head, data) = payload.split_at_checked(CPU_DATA_HEADER_LEN)?;
                let cpu = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
                let Some(k) = kept.get_mut(cpu) else { continue };
                let n = (data.len() / layout.subbuf_size).min(cut.subbufs_per_cpu - *k);
                *k += n;
                let mut pages = Vec::new();
                for page in data.chunks_exact(layout.subbuf_size).take(n) {
                    pages.extend(shrink_subbuf(order, &layout, page, size?)?);
                }
                if n > 0 {
                    totals[cpu].0 += 1;
                    totals[cpu].1 += n as u64;
                    let ctl = STORE_CPU_DATA | ((cpu as u8) << 4);
                    let ctl = if cut.kpack { ctl | CTL_KPACK } else { ctl };
                    out.push(BlockType::CpuData, ctl, &pages);
                }
            }
            BlockType::Meta => {
                let Ok(mut m) = Meta::decode(&payload) else {
                    continue;
                };
                // A kallsyms written in parts: the first part, cut, is
                // the whole of it here.
                if m.part.is_some_and(|(i, _)| i > 0) {
                    continue;
                }
                let system = m.name.split('/').next().unwrap_or_default();
                if m.kind == MetaKind::EventFormat
                    && !cut.systems.is_empty()
                    && !cut.systems.contains(&system)
                {
                    continue;
                }
                if m.kind == MetaKind::KallsymsPart {
                    (m.kind, m.part) = (MetaKind::Kallsyms, None);
                }
                // An event format is kept whole: cut, it would only be
                // damage.
                if m.kind != MetaKind::EventFormat {
                    m.content = cut_text(&m.content, cut.meta_bytes).to_vec();
                }
                out.push(BlockType::Meta, STORE_PLAIN, &m.encode());
            }
            BlockType::ArchCopy => out.push(BlockType::ArchCopy, STORE_PLAIN, &[]),
            BlockType::End => {
                let Ok(mut end) = EndRecord::decode(&payload) else {
                    continue;
                };
                // What the cut log holds: the blocks framed before it and
                // the ARCH block framed_log writes.
                end.blocks = out.blocks + 1;
                let size = size? as u64;
                end.cpus = (0..16u32)
                    .filter(|&c| totals[c as usize].0 > 0)
                    .map(|c| {
                        let (blocks, subbufs) = totals[c as usize];
                        CpuTotal {
                            cpu: c,
                            blocks,
                            subbufs,
                            bytes: subbufs * size,
                        }
                    })
                    .collect();
                out.push(BlockType::End, STORE_PLAIN, &end.encode());
            }
            t => out.push(t, STORE_PLAIN, &payload),
        }
    }
    size.map(|_| out.bytes)
}

/// `page` as a sub-buffer of `size` bytes: its header, then the whole
/// records that fit (the commit says so), zeros after. The records keep
/// their time deltas, so their times are unchanged. `None` where the page
/// does not parse.
fn shrink_subbuf(
    order: RunTimeEndian,
    layout: &SubBufLayout,
    page: &[u8],
    size: usize,
) -> Option<Vec<u8>> {
    if size >= layout.subbuf_size {
        return Some(page.to_vec());
    }
    let sb = parse_subbuf(order, layout, page).ok()?;
    let room = size.checked_sub(layout.data_offset)?;
    let mut commit = 0;
    for r in sb.events(order) {
        let Ok(r) = r else { break };
        let end = r.offset + r.len - layout.data_offset;
        if end > room {
            break;
        }
        commit = end;
    }
    let mut out = page[..8].to_vec();
    order.write_uint(&mut out, commit as u64, layout.long_size);
    out.extend_from_slice(&page[layout.data_offset..layout.data_offset + commit]);
    out.resize(size, 0);
    Some(out)
}

/// The first `max` bytes of `text`, ending at a line's end where one is
/// that near.
pub fn cut_text(text: &[u8], max: usize) -> &[u8] {
    if text.len() <= max {
        return text;
    }
    let head = &text[..max];
    match head.iter().rposition(|&b| b == b'\n') {
        Some(i) => &head[..=i],
        None => head,
    }
}

/// A tar archive (gzip'd where the first byte is odd: in stored blocks
/// where its second bit is set, deflated where clear) from an input of
/// entries `kind:u8, name_len:u8, name, len:u32 LE, data` (lengths cut to
/// what is left). `kind` picks the entry's type: a file, a directory, a
/// symbolic link (to its data), a GNU long name, or `kind` itself.
pub fn tar_of(input: &[u8]) -> Vec<u8> {
    let Some((&mode, mut rest)) = input.split_first() else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    while rest.len() >= 2 {
        let kind = rest[0];
        let n = usize::from(rest[1]).min(rest.len() - 2);
        let name = String::from_utf8_lossy(&rest[2..2 + n]).into_owned();
        rest = &rest[2 + n..];
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            break;
        };
        let len = (u32::from_le_bytes(*len) as usize).min(tail.len());
        let typeflag = match kind % 8 {
            0..=3 => b'0',
            4 => b'5',
            5 => b'2',
            6 => b'L',
            _ => kind,
        };
        entries.push(tar::Entry {
            name,
            typeflag,
            data: tail[..len].to_vec(),
        });
        rest = &tail[len..];
    }
    let plain = tar::archive(&entries);
    if mode & 1 == 0 {
        return plain;
    }
    // Compressing is the fuzz harness's work, not the importer's: stored
    // blocks bring the importer the same bytes, through the same gzip
    // reader. Stored on the set bit, which most of the gzip'd inputs the
    // campaigns had grown have.
    if mode & 2 != 0 {
        return gzip_stored(&plain);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).expect("in memory");
    gz.finish().expect("in memory")
}

/// `data` as a gzip member of stored deflate blocks (RFC 1951 §3.2.4,
/// RFC 1952), written here: flate2's level 0 still runs its matcher over
/// every byte.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    // Magic, deflate, no flags, no time, no extra flags, OS unknown.
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut blocks = data.chunks(usize::from(u16::MAX)).peekable();
    if blocks.peek().is_none() {
        out.extend([1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        // BFINAL on the last, BTYPE 00; LEN and its complement.
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend(crc.sum().to_le_bytes());
    out.extend((data.len() as u32).to_le_bytes());
    out
}

/// The [`tar_of`] input of a directory's files (a busybox capture dump
/// unpacked), each file cut to `max_file` bytes; sorted by name.
pub fn entries_of_dir(dir: &Path, max_file: usize) -> std::io::Result<Vec<u8>> {
    let mut files = Vec::new();
    collect(dir, "", &mut files)?;
    files.sort();
    let mut out = vec![0u8];
    for (name, path) in files {
        let data = std::fs::read(path)?;
        let data = &data[..data.len().min(max_file)];
        let name = &name.as_bytes()[..name.len().min(255)];
        out.push(0);
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    }
    Ok(out)
}

fn collect(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, std::path::PathBuf)>,
) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        if e.file_type()?.is_dir() {
            collect(&e.path(), &format!("{name}/"), out)?;
        } else {
            out.push((name, e.path()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_real_log_reads_back_with_its_sub_buffers() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../format-spec/test-vectors");
        for (name, kpack) in [("le64-x86_64.kmt", false), ("be64-s390x.kmt", true)] {
            let real = std::fs::read(dir.join(name)).unwrap();
            let cut = Cut {
                subbufs_per_cpu: 2,
                meta_bytes: 1 << 20,
                kpack,
                systems: &[],
                subbuf_size: Some(1024),
            };
            let input = frame_of_log(&real, cut).expect(name);
            let log = framed_log(&input);
            let mut r = LogReader::new(&log[..]).unwrap();
            let (mut cpu_data, mut metas) = (0, 0);
            while let Some(item) = r.next_item().unwrap() {
                let Item::Block(b) = item else {
                    panic!("{name}: damage in a framed log")
                };
                let p = b.payload().unwrap();
                match b.header.block_type {
                    BlockType::CpuData => {
                        cpu_data += 1;
                        let count = u32::from_le_bytes(p[4..8].try_into().unwrap());
                        assert!((1..=2).contains(&count), "{name}: {count} sub-buffers");
                        assert_eq!(p.len(), 24 + count as usize * 1024, "{name}");
                    }
                    BlockType::Meta => metas += 1,
                    _ => {}
                }
            }
            assert!(cpu_data >= 1 && metas >= 3, "{name}: {cpu_data} {metas}");
        }
    }

    #[test]
    fn tar_entries_keep_their_names_and_data() {
        // gzip'd deflated (1) and in stored blocks (3).
        for mode in [1u8, 3] {
            let mut input = vec![mode];
            for (name, data) in [("events/header_page", &b"abc"[..]), ("uname", b"Linux")] {
                input.extend([0, name.len() as u8]);
                input.extend_from_slice(name.as_bytes());
                input.extend_from_slice(&(data.len() as u32).to_le_bytes());
                input.extend_from_slice(data);
            }
            let gz = tar_of(&input);
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut plain)
                .unwrap();
            assert_eq!(&plain[..18], b"events/header_page");
            assert_eq!(&plain[512..515], b"abc");
            assert_eq!(&plain[1024..1029], b"uname");
            // Stored blocks hold the tar as it is; deflate shrinks its zeros.
            assert_eq!(gz.len() > plain.len(), mode == 3, "mode {mode}");
        }
    }

    #[test]
    fn stored_gzip_reads_back_at_every_block_boundary() {
        for len in [0usize, 1, 65_534, 65_535, 65_536, 200_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let gz = super::gzip_stored(&data);
            let mut back = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut back)
                .unwrap();
            assert_eq!(back, data, "{len}");
            assert_eq!(
                gz.len(),
                18 + len + 5 * len.div_ceil(65_535).max(1),
                "{len}"
            );
        }
    }
}
