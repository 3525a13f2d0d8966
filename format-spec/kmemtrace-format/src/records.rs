//! Typed block payloads (FORMAT.md §7–§11), encoded and decoded.

use crate::arch::ArchTag;
use crate::block::BlockType;
use crate::tlv::{self, TlvError, TlvWriter};
use std::fmt;

/// What a META block holds (FORMAT.md §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetaKind {
    HeaderPage,
    HeaderEvent,
    EventFormat,
    Kallsyms,
    SavedCmdlines,
    SavedTgids,
    CpuNodeMap,
    PrintkFormats,
    Modules,
    /// A slice of `/proc/kallsyms` (1.1): whole lines, in file order.
    KallsymsPart,
    Other,
    Unknown(u16),
}

impl MetaKind {
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => Self::HeaderPage,
            2 => Self::HeaderEvent,
            3 => Self::EventFormat,
            4 => Self::Kallsyms,
            5 => Self::SavedCmdlines,
            6 => Self::SavedTgids,
            7 => Self::CpuNodeMap,
            8 => Self::PrintkFormats,
            9 => Self::Modules,
            10 => Self::KallsymsPart,
            0xffff => Self::Other,
            x => Self::Unknown(x),
        }
    }
    pub fn to_u16(self) -> u16 {
        match self {
            Self::HeaderPage => 1,
            Self::HeaderEvent => 2,
            Self::EventFormat => 3,
            Self::Kallsyms => 4,
            Self::SavedCmdlines => 5,
            Self::SavedTgids => 6,
            Self::CpuNodeMap => 7,
            Self::PrintkFormats => 8,
            Self::Modules => 9,
            Self::KallsymsPart => 10,
            Self::Other => 0xffff,
            Self::Unknown(x) => x,
        }
    }
    pub fn name(self) -> String {
        match self {
            Self::HeaderPage => "header_page".into(),
            Self::HeaderEvent => "header_event".into(),
            Self::EventFormat => "event_format".into(),
            Self::Kallsyms => "kallsyms".into(),
            Self::SavedCmdlines => "saved_cmdlines".into(),
            Self::SavedTgids => "saved_tgids".into(),
            Self::CpuNodeMap => "cpu_node_map".into(),
            Self::PrintkFormats => "printk_formats".into(),
            Self::Modules => "modules".into(),
            Self::KallsymsPart => "kallsyms_part".into(),
            Self::Other => "other".into(),
            Self::Unknown(x) => format!("kind {x}"),
        }
    }
}

/// The content of META `cpu_node_map` (FORMAT.md §7.1): `cpu node` lines,
/// sorted by CPU, from each NUMA node's CPU list (`0-3,8`, as sysfs'
/// `nodeN/cpulist` says it); a list that does not parse adds nothing.
/// A CPU in two lists is in the lower-numbered node (whatever order the
/// lists come in: a directory's). The lists are read until their ranges
/// have named twice [`MAX_CPUS_LISTED`](kmemtrace_kernel::human::MAX_CPUS_LISTED)
/// CPUs, repeats and lists that do not parse included: each CPU is in one
/// node's list, and a damaged file could name billions, or one wide range
/// in every line followed by a fault that makes the line name nothing.
pub fn cpu_node_map(node_cpulists: impl IntoIterator<Item = (u32, String)>) -> Vec<u8> {
    use kmemtrace_kernel::human::{parse_cpu_list_within, MAX_CPUS_LISTED};
    let mut node_of: std::collections::BTreeMap<u32, u32> = Default::default();
    let mut budget = 2 * MAX_CPUS_LISTED;
    for (node, list) in node_cpulists {
        if budget == 0 {
            break;
        }
        let cpus = parse_cpu_list_within(&list, &mut budget).unwrap_or_default();
        for cpu in cpus {
            let n = node_of.entry(cpu).or_insert(node);
            *n = (*n).min(node);
        }
    }
    node_of
        .iter()
        .map(|(c, n)| format!("{c} {n}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Largest kallsyms part a writer makes (FORMAT.md §7.3): damage to a
/// block costs at most this much of the symbol table (about 6,000 symbols).
pub const KALLSYMS_PART_BYTES: usize = 256 << 10;

/// The META blocks that carry a kallsyms text: parts of at most
/// [`KALLSYMS_PART_BYTES`], whole lines each.
pub fn kallsyms_metas(text: &[u8]) -> Vec<Meta> {
    Meta::in_parts(MetaKind::KallsymsPart, text, KALLSYMS_PART_BYTES)
}

/// A metadata file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: MetaKind,
    /// `system/event` for formats; a tracefs-relative path for `Other`.
    pub name: String,
    /// Event id, for formats.
    pub id: Option<u32>,
    pub content: Vec<u8>,
    /// (index from 0, count) of a content written in parts (1.1).
    pub part: Option<(u32, u32)>,
}

impl Meta {
    pub fn new(kind: MetaKind, content: impl Into<Vec<u8>>) -> Self {
        Meta {
            kind,
            name: String::new(),
            id: None,
            content: content.into(),
            part: None,
        }
    }
    pub fn event_format(system: &str, event: &str, id: u32, content: impl Into<Vec<u8>>) -> Self {
        Meta {
            kind: MetaKind::EventFormat,
            name: format!("{system}/{event}"),
            id: Some(id),
            content: content.into(),
            part: None,
        }
    }
    /// `content` as parts of at most `max` bytes each, cut after a
    /// newline where there is one (so that each part of a text holds whole
    /// lines and parses on its own), numbered `(index, count)`.
    pub fn in_parts(kind: MetaKind, content: &[u8], max: usize) -> Vec<Meta> {
        let max = max.max(1);
        let mut pieces = Vec::new();
        let mut rest = content;
        while !rest.is_empty() {
            let mut cut = rest.len().min(max);
            if cut < rest.len() {
                if let Some(nl) = rest[..cut].iter().rposition(|&b| b == b'\n') {
                    cut = nl + 1;
                }
            }
            pieces.push(&rest[..cut]);
            rest = &rest[cut..];
        }
        let n = pieces.len() as u32;
        pieces
            .into_iter()
            .enumerate()
            .map(|(i, p)| Meta {
                part: Some((i as u32, n)),
                ..Meta::new(kind, p)
            })
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u16(1, self.kind.to_u16());
        if !self.name.is_empty() {
            w.str(2, &self.name);
        }
        w.opt_u32(3, self.id).bytes(4, &self.content);
        if let Some((i, n)) = self.part {
            w.u32(5, i).u32(6, n);
        }
        w.finish()
    }
    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut kind = None;
        let (mut index, mut count) = (None, None);
        let mut m = Meta::new(MetaKind::Other, Vec::new());
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                1 => kind = Some(MetaKind::from_u16(f.as_u16()?)),
                2 => m.name = f.as_string(),
                3 => m.id = Some(f.as_u32()?),
                4 => m.content = f.value.to_vec(),
                5 => index = Some(f.as_u32()?),
                6 => count = Some(f.as_u32()?),
                _ => {}
            }
        }
        m.part = match (index, count) {
            (Some(i), Some(n)) if i < n => Some((i, n)),
            (None, None) => None,
            _ => {
                return Err(TlvError {
                    offset: 0,
                    what: "META part index without a count, or not below it".into(),
                })
            }
        };
        m.kind = kind.ok_or(TlvError {
            offset: 0,
            what: "META block lacks its kind".into(),
        })?;
        Ok(m)
    }
}

/// Sub-buffer bytes a writer puts in one CPU_DATA block at most: well
/// below [`crate::block::MAX_BLOCK_LEN`] (FORMAT.md §4), so that a damaged
/// block costs little of a CPU's stream and a reader's buffers stay small.
pub const CPU_DATA_MAX_SUBBUF_BYTES: u64 = 1 << 20;

/// The sub-buffer bytes of each CPU_DATA block a writer makes for
/// sub-buffers of `subbuf_size`: as many whole ones as fit in
/// [`CPU_DATA_MAX_SUBBUF_BYTES`], at least one.
pub fn cpu_data_block_bytes(subbuf_size: u64) -> u64 {
    let sb = subbuf_size.max(1);
    (CPU_DATA_MAX_SUBBUF_BYTES / sb).max(1) * sb
}

/// Size of the fixed CPU_DATA header (FORMAT.md §8).
pub const CPU_DATA_HEADER_LEN: usize = 24;

/// A CPU_DATA payload: whole sub-buffers of one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuData<'a> {
    pub cpu: u32,
    pub count: u32,
    pub block_seq: u64,
    pub first_subbuf: u64,
    /// `count` sub-buffers of the arch tag's `subbuf_size`, back to back.
    pub data: &'a [u8],
}

/// Writes the CPU_DATA fixed header.
pub fn encode_cpu_data_header(cpu: u32, count: u32, block_seq: u64, first_subbuf: u64) -> [u8; 24] {
    let mut h = [0u8; CPU_DATA_HEADER_LEN];
    h[0..4].copy_from_slice(&cpu.to_le_bytes());
    h[4..8].copy_from_slice(&count.to_le_bytes());
    h[8..16].copy_from_slice(&block_seq.to_le_bytes());
    h[16..24].copy_from_slice(&first_subbuf.to_le_bytes());
    h
}

/// The fixed header of a CPU_DATA payload (FORMAT.md §8), parsed in one
/// place for whole payloads and for the index, which decompresses only it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuDataHeader {
    pub cpu: u32,
    pub count: u32,
    pub block_seq: u64,
    pub first_subbuf: u64,
}

impl CpuDataHeader {
    /// Parses the header of a payload of `payload_len` bytes (`head` is its
    /// first bytes), checking that it carries `count` sub-buffers of
    /// `subbuf_size` bytes.
    pub fn parse(head: &[u8], payload_len: u64, subbuf_size: u32) -> Result<Self, TlvError> {
        let Some(head) = head
            .get(..CPU_DATA_HEADER_LEN)
            .filter(|_| payload_len >= CPU_DATA_HEADER_LEN as u64)
        else {
            return Err(TlvError {
                offset: 0,
                what: format!(
                    "CPU_DATA payload of {payload_len} bytes is shorter than its 24-byte header"
                ),
            });
        };
        let le32 = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap());
        let le64 = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
        let h = CpuDataHeader {
            cpu: le32(0),
            count: le32(4),
            block_seq: le64(8),
            first_subbuf: le64(16),
        };
        let carries = payload_len - CPU_DATA_HEADER_LEN as u64;
        if u64::from(h.count) * u64::from(subbuf_size) != carries {
            return Err(TlvError {
                offset: 4,
                what: format!(
                    "CPU_DATA says {} sub-buffers of {subbuf_size} bytes but carries {carries} bytes",
                    h.count
                ),
            });
        }
        // The sub-buffers' indexes are first_subbuf + i: a block whose run
        // passes the end of the index space is damaged.
        if h.first_subbuf.checked_add(u64::from(h.count)).is_none() {
            return Err(TlvError {
                offset: 16,
                what: format!(
                    "CPU_DATA's {} sub-buffers from index {} pass the last index",
                    h.count, h.first_subbuf
                ),
            });
        }
        Ok(h)
    }
}

impl<'a> CpuData<'a> {
    /// Parses a CPU_DATA payload; `subbuf_size` comes from the arch tag.
    pub fn decode(payload: &'a [u8], subbuf_size: u32) -> Result<Self, TlvError> {
        let h = CpuDataHeader::parse(payload, payload.len() as u64, subbuf_size)?;
        Ok(CpuData {
            cpu: h.cpu,
            count: h.count,
            block_seq: h.block_seq,
            first_subbuf: h.first_subbuf,
            data: &payload[CPU_DATA_HEADER_LEN..],
        })
    }

    /// The sub-buffers, each `subbuf_size` bytes.
    pub fn subbufs(&self, subbuf_size: u32) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.data.chunks_exact(subbuf_size.max(1) as usize)
    }
}

/// When a statistics snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatsPhase {
    Start,
    Periodic,
    End,
    Unknown(u8),
}

impl StatsPhase {
    fn to_u8(self) -> u8 {
        match self {
            Self::Start => 0,
            Self::Periodic => 1,
            Self::End => 2,
            Self::Unknown(x) => x,
        }
    }
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Start,
            1 => Self::Periodic,
            2 => Self::End,
            x => Self::Unknown(x),
        }
    }
}

/// A snapshot of `per_cpu/cpuN/stats` (FORMAT.md §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsRecord {
    pub cpu: u32,
    pub phase: StatsPhase,
    pub wall_ns: Option<u64>,
    pub text: Vec<u8>,
}

impl StatsRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u32(1, self.cpu)
            .u8(2, self.phase.to_u8())
            .opt_u64(3, self.wall_ns)
            .bytes(4, &self.text);
        w.finish()
    }
    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut cpu = None;
        let mut r = StatsRecord {
            cpu: 0,
            phase: StatsPhase::Periodic,
            wall_ns: None,
            text: Vec::new(),
        };
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                1 => cpu = Some(f.as_u32()?),
                2 => r.phase = StatsPhase::from_u8(f.as_u8()?),
                3 => r.wall_ns = Some(f.as_u64()?),
                4 => r.text = f.value.to_vec(),
                _ => {}
            }
        }
        r.cpu = cpu.ok_or(TlvError {
            offset: 0,
            what: "STATS block lacks its cpu".into(),
        })?;
        Ok(r)
    }
}

/// Per-CPU totals in the END block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTotal {
    pub cpu: u32,
    pub blocks: u64,
    pub subbufs: u64,
    pub bytes: u64,
}

/// END's reason in every file of a rotated capture but its last (FORMAT.md
/// §13).
pub const END_ROTATED: &str = "rotated";

/// How END's reason begins where a write failed (a full disk) and the
/// recorder ended the log at its last whole block (FORMAT.md §10).
pub const END_OUTPUT_FAILED: &str = "output failed";

/// The END block (FORMAT.md §10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndRecord {
    pub wall_ns: Option<u64>,
    pub reason: String,
    /// Blocks before END, ARCH included.
    pub blocks: u64,
    pub cpus: Vec<CpuTotal>,
    pub exit_status: Option<i32>,
}

impl EndRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.opt_u64(1, self.wall_ns)
            .str(2, &self.reason)
            .u64(3, self.blocks);
        for c in &self.cpus {
            let mut v = Vec::with_capacity(28);
            v.extend_from_slice(&c.cpu.to_le_bytes());
            v.extend_from_slice(&c.blocks.to_le_bytes());
            v.extend_from_slice(&c.subbufs.to_le_bytes());
            v.extend_from_slice(&c.bytes.to_le_bytes());
            w.bytes(4, &v);
        }
        if let Some(s) = self.exit_status {
            w.i32(5, s);
        }
        w.finish()
    }
    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut e = EndRecord::default();
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                1 => e.wall_ns = Some(f.as_u64()?),
                2 => e.reason = f.as_string(),
                3 => e.blocks = f.as_u64()?,
                4 => {
                    let v = f.value;
                    if v.len() != 28 {
                        return Err(TlvError {
                            offset: f.offset,
                            what: format!("cpu_total must be 28 bytes, has {}", v.len()),
                        });
                    }
                    let le64 = |o: usize| u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
                    // Bounded: each entry consumed 34 bytes of the payload.
                    e.cpus.push(CpuTotal {
                        cpu: u32::from_le_bytes(v[0..4].try_into().unwrap()),
                        blocks: le64(4),
                        subbufs: le64(12),
                        bytes: le64(20),
                    });
                }
                5 => e.exit_status = Some(f.as_i32()?),
                _ => {}
            }
        }
        Ok(e)
    }
}

/// Where one CPU's data in a file of a rotated capture begins: the
/// `block_seq` and `first_subbuf` of its first block there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuStart {
    pub cpu: u32,
    pub block_seq: u64,
    pub first_subbuf: u64,
}

/// The SEGMENT block (FORMAT.md §13, 1.4): this file's place in a rotated
/// capture. Each CPU's blocks are numbered across the whole capture, so
/// a file names where its own begin; CPUs it does not list begin at 0.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentRecord {
    /// The same in every file of one capture.
    pub capture_id: u64,
    /// This file's position in the capture, from 0.
    pub index: u32,
    /// CLOCK_REALTIME when the file was begun.
    pub wall_ns: Option<u64>,
    pub starts: Vec<CpuStart>,
}

impl SegmentRecord {
    /// Where `cpu`'s data in this file begins (`block_seq`,
    /// `first_subbuf`).
    pub fn start_of(&self, cpu: u32) -> (u64, u64) {
        self.starts
            .iter()
            .rev()
            .find(|s| s.cpu == cpu)
            .map_or((0, 0), |s| (s.block_seq, s.first_subbuf))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u64(1, self.capture_id)
            .u32(2, self.index)
            .opt_u64(3, self.wall_ns);
        for c in &self.starts {
            let mut v = Vec::with_capacity(20);
            v.extend_from_slice(&c.cpu.to_le_bytes());
            v.extend_from_slice(&c.block_seq.to_le_bytes());
            v.extend_from_slice(&c.first_subbuf.to_le_bytes());
            w.bytes(4, &v);
        }
        w.finish()
    }

    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut r = SegmentRecord::default();
        let (mut id, mut index) = (None, None);
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                1 => id = Some(f.as_u64()?),
                2 => index = Some(f.as_u32()?),
                3 => r.wall_ns = Some(f.as_u64()?),
                4 => {
                    let v = f.value;
                    if v.len() != 20 {
                        return Err(TlvError {
                            offset: f.offset,
                            what: format!("cpu_start must be 20 bytes, has {}", v.len()),
                        });
                    }
                    let le64 = |o: usize| u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
                    // Bounded: each entry consumed 26 bytes of the payload.
                    r.starts.push(CpuStart {
                        cpu: u32::from_le_bytes(v[0..4].try_into().unwrap()),
                        block_seq: le64(4),
                        first_subbuf: le64(12),
                    });
                }
                _ => {}
            }
        }
        let lacks = |what: &str| TlvError {
            offset: 0,
            what: format!("SEGMENT block lacks its {what}"),
        };
        r.capture_id = id.ok_or_else(|| lacks("capture_id"))?;
        r.index = index.ok_or_else(|| lacks("index"))?;
        Ok(r)
    }
}

/// A NOTE block (FORMAT.md §11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteRecord {
    pub warning: bool,
    pub text: String,
}

impl NoteRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u8(1, u8::from(self.warning)).str(2, &self.text);
        w.finish()
    }
    pub fn decode(payload: &[u8]) -> Result<Self, TlvError> {
        let mut n = NoteRecord {
            warning: false,
            text: String::new(),
        };
        for f in tlv::fields(payload) {
            let f = f?;
            match f.tag {
                1 => n.warning = f.as_u8()? != 0,
                2 => n.text = f.as_string(),
                _ => {}
            }
        }
        Ok(n)
    }
}

/// A decoded block payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Arch(Box<ArchTag>),
    ArchCopy(Box<ArchTag>),
    Meta(Meta),
    CpuData(CpuData<'a>),
    Stats(StatsRecord),
    End(EndRecord),
    Note(NoteRecord),
    Segment(SegmentRecord),
    /// A block type this version does not know: skipped.
    Unknown(u16),
}

/// A payload that does not decode as its block type says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub block_type: BlockType,
    pub inner: TlvError,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} block: {}", self.block_type.name(), self.inner)
    }
}
impl std::error::Error for RecordError {}

impl<'a> Record<'a> {
    /// Decodes a payload. CPU_DATA needs the arch tag's sub-buffer size;
    /// pass `None` before the arch tag is known (CPU_DATA then errors).
    pub fn decode(
        block_type: BlockType,
        payload: &'a [u8],
        subbuf_size: Option<u32>,
    ) -> Result<Self, RecordError> {
        let wrap = |inner| RecordError { block_type, inner };
        Ok(match block_type {
            BlockType::Arch => Record::Arch(Box::new(ArchTag::decode(payload).map_err(wrap)?)),
            BlockType::ArchCopy => {
                Record::ArchCopy(Box::new(ArchTag::decode(payload).map_err(wrap)?))
            }
            BlockType::Meta => Record::Meta(Meta::decode(payload).map_err(wrap)?),
            BlockType::CpuData => {
                let sb = subbuf_size.ok_or_else(|| {
                    wrap(TlvError {
                        offset: 0,
                        what: "CPU_DATA before the ARCH block: sub-buffer size unknown".into(),
                    })
                })?;
                Record::CpuData(CpuData::decode(payload, sb).map_err(wrap)?)
            }
            BlockType::Stats => Record::Stats(StatsRecord::decode(payload).map_err(wrap)?),
            BlockType::End => Record::End(EndRecord::decode(payload).map_err(wrap)?),
            BlockType::Note => Record::Note(NoteRecord::decode(payload).map_err(wrap)?),
            BlockType::Segment => Record::Segment(SegmentRecord::decode(payload).map_err(wrap)?),
            BlockType::Unknown(x) => Record::Unknown(x),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_node_map_lines() {
        let m = cpu_node_map([(1, "2-3\n".to_string()), (0, "0-1".into()), (2, "x".into())]);
        assert_eq!(m, b"0 0\n1 0\n2 1\n3 1\n");
        // A CPU in two nodes' lists is in the lower node's, in either
        // order; lists past the bound on CPUs named are not read.
        let m = cpu_node_map([(0, "0-1".to_string()), (1, "1-2".into())]);
        assert_eq!(m, b"0 0\n1 0\n2 1\n");
        let m = cpu_node_map([(1, "1-2".to_string()), (0, "0-1".into())]);
        assert_eq!(m, b"0 0\n1 0\n2 1\n");
        let n = kmemtrace_kernel::human::MAX_CPUS_LISTED;
        let m = cpu_node_map((0..1000).map(|node| (node, format!("0-{}", n / 2 - 1))));
        let lines = String::from_utf8(m).unwrap();
        assert_eq!(lines.lines().count(), n / 2);
        assert!(
            lines.lines().all(|l| l.ends_with(" 0")),
            "the lowest node's"
        );
        // Lines that expand a wide range and then fail name nothing, but
        // their work counts: the lists after the budget are not read.
        let failing = (0..100_000).map(|node| (node, format!("0-{}, x", n / 4 - 1)));
        let m = cpu_node_map(failing.chain([(0, "0-3".to_string())]));
        assert!(m.is_empty());
    }

    #[test]
    fn round_trips() {
        let m = Meta::event_format("kmem", "kmalloc", 658, b"name: kmalloc\n".to_vec());
        assert_eq!(Meta::decode(&m.encode()).unwrap(), m);
        let s = StatsRecord {
            cpu: 3,
            phase: StatsPhase::End,
            wall_ns: Some(5),
            text: b"entries: 1\n".to_vec(),
        };
        assert_eq!(StatsRecord::decode(&s.encode()).unwrap(), s);
        let e = EndRecord {
            wall_ns: Some(9),
            reason: "signal SIGINT".into(),
            blocks: 12,
            cpus: vec![CpuTotal {
                cpu: 1,
                blocks: 2,
                subbufs: 3,
                bytes: 4,
            }],
            exit_status: Some(-1),
        };
        assert_eq!(EndRecord::decode(&e.encode()).unwrap(), e);
        let g = SegmentRecord {
            capture_id: 0x1234_5678_9abc_def0,
            index: 7,
            wall_ns: Some(5),
            starts: vec![CpuStart {
                cpu: 3,
                block_seq: 9,
                first_subbuf: 40,
            }],
        };
        assert_eq!(SegmentRecord::decode(&g.encode()).unwrap(), g);
        assert_eq!((g.start_of(3), g.start_of(0)), ((9, 40), (0, 0)));
        let mut w = TlvWriter::new();
        w.u64(1, 1);
        let no_index = SegmentRecord::decode(&w.finish());
        assert!(no_index.unwrap_err().what.contains("index"));
        let n = NoteRecord {
            warning: true,
            text: "x".into(),
        };
        assert_eq!(NoteRecord::decode(&n.encode()).unwrap(), n);
    }

    #[test]
    fn cpu_data_checks_its_length() {
        let mut p = encode_cpu_data_header(1, 2, 0, 0).to_vec();
        p.extend_from_slice(&[0u8; 512]);
        let d = CpuData::decode(&p, 256).unwrap();
        assert_eq!(d.subbufs(256).count(), 2);
        assert!(CpuData::decode(&p, 4096).is_err());
        assert!(CpuData::decode(&p[..10], 256).is_err());
    }

    /// A block's sub-buffer indexes stay within u64 (a reader adds them).
    #[test]
    fn cpu_data_indexes_stay_in_range() {
        let block = |first| {
            let mut p = encode_cpu_data_header(1, 2, 0, first).to_vec();
            p.extend_from_slice(&[0u8; 512]);
            CpuData::decode(&p, 256).map(|_| ())
        };
        assert!(block(u64::MAX - 2).is_ok());
        let e = block(u64::MAX - 1).unwrap_err();
        assert!(e.what.contains("pass the last index"), "{}", e.what);
    }
}
