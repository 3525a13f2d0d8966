//! Block framing (FORMAT.md §4, §5): file header, block header, CRC-32 and
//! zstd compression. Knows nothing of what payloads mean.

use std::borrow::Cow;
use std::fmt;

/// First 8 bytes of every log.
pub const MAGIC: [u8; 8] = *b"\x8aKMT\r\n\x1a\n";
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// The format version this library writes.
pub const VERSION_MAJOR: u16 = 1;
/// The newest minor version this library reads and writes: 1.1 added
/// ARCH_COPY blocks and kallsyms in parts, 1.2 kpack, 1.3 kpack's second
/// version, columns, 1.4 the SEGMENT block of a rotated capture's files
/// (FORMAT.md §4.2).
pub const VERSION_MINOR: u16 = 4;
/// The minor version of a log that packs CPU data (and is not one file of
/// a rotated capture).
pub const VERSION_MINOR_KPACK: u16 = 3;
/// The minor version of a file of a rotated capture (a SEGMENT block).
pub const VERSION_MINOR_SEGMENT: u16 = 4;
/// The minor version of logs without kpack blocks (a writer writes the
/// lowest minor version whose features it uses).
pub const VERSION_MINOR_WITHOUT_KPACK: u16 = 1;

/// The log versions this library reads, as `--version` names them: every
/// minor version of its major one (a later minor's blocks it does not know
/// are passed over), those up to [`VERSION_MINOR`] known.
pub fn versions_read() -> String {
    format!("kmemtrace log {VERSION_MAJOR}.0-{VERSION_MAJOR}.{VERSION_MINOR} (and later {VERSION_MAJOR}.x)")
}

/// The log versions a writer writes, as `--version` names them.
pub fn versions_written() -> String {
    format!("kmemtrace log {VERSION_MAJOR}.{VERSION_MINOR_KPACK} ({VERSION_MAJOR}.{VERSION_MINOR_WITHOUT_KPACK} where no block is packed, {VERSION_MAJOR}.{VERSION_MINOR_SEGMENT} for the files of a rotated capture)")
}

/// Sync word at the start of every block header.
pub const SYNC: [u8; 4] = *b"KMTB";
/// Size of a block header.
pub const BLOCK_HEADER_LEN: usize = 20;
/// Upper bound of `stored_len` and `raw_len`.
pub const MAX_BLOCK_LEN: u32 = 64 << 20;

/// Block header flag: the payload is one zstd frame.
pub const FLAG_ZSTD: u16 = 1;
/// Block header flag (1.2): the payload (after zstd, when `FLAG_ZSTD` is
/// set too) is the kpack form of a CPU_DATA payload (FORMAT.md §8.2, §8.3).
pub const FLAG_KPACK: u16 = 2;
/// Flags this version knows.
pub const KNOWN_FLAGS: u16 = FLAG_ZSTD | FLAG_KPACK;

/// Block types (FORMAT.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockType {
    Arch,
    Meta,
    CpuData,
    Stats,
    End,
    Note,
    /// A copy of the ARCH block (1.1).
    ArchCopy,
    /// Where a file of a rotated capture lies in it (1.4).
    Segment,
    Unknown(u16),
}

impl BlockType {
    pub fn from_u16(v: u16) -> Self {
        match v {
            1 => Self::Arch,
            2 => Self::Meta,
            3 => Self::CpuData,
            4 => Self::Stats,
            5 => Self::End,
            6 => Self::Note,
            7 => Self::ArchCopy,
            8 => Self::Segment,
            x => Self::Unknown(x),
        }
    }
    pub fn to_u16(self) -> u16 {
        match self {
            Self::Arch => 1,
            Self::Meta => 2,
            Self::CpuData => 3,
            Self::Stats => 4,
            Self::End => 5,
            Self::Note => 6,
            Self::ArchCopy => 7,
            Self::Segment => 8,
            Self::Unknown(x) => x,
        }
    }
    pub fn name(self) -> Cow<'static, str> {
        match self {
            Self::Arch => "ARCH".into(),
            Self::Meta => "META".into(),
            Self::CpuData => "CPU_DATA".into(),
            Self::Stats => "STATS".into(),
            Self::End => "END".into(),
            Self::Note => "NOTE".into(),
            Self::ArchCopy => "ARCH_COPY".into(),
            Self::Segment => "SEGMENT".into(),
            Self::Unknown(x) => format!("type {x}").into(),
        }
    }
}

/// Whether and how hard to compress payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    /// zstd at this level (1..=22; negative levels are zstd's fast modes).
    Zstd(i32),
    /// CPU_DATA payloads through kpack, then zstd at this level (1.3);
    /// other blocks as `Zstd`.
    Kpack(i32),
}

impl Compression {
    /// The zstd level, if zstd is used at all.
    pub fn zstd_level(self) -> Option<i32> {
        match self {
            Compression::None => None,
            Compression::Zstd(l) | Compression::Kpack(l) => Some(l),
        }
    }

    /// The minor format version a log whose blocks are compressed so
    /// needs.
    pub fn minor_version(self) -> u16 {
        match self {
            Compression::Kpack(_) => VERSION_MINOR_KPACK,
            _ => VERSION_MINOR_WITHOUT_KPACK,
        }
    }
}

/// The file header (FORMAT.md §4) of a log without kpack blocks.
pub fn encode_file_header() -> [u8; FILE_HEADER_LEN] {
    encode_file_header_minor(VERSION_MINOR_WITHOUT_KPACK)
}

/// The file header of a log of minor version `minor`.
pub fn encode_file_header_minor(minor: u16) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&minor.to_le_bytes());
    let crc = crc32fast::hash(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a file header is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileHeaderError {
    /// Fewer than 16 bytes.
    Short { len: usize },
    /// Not a kmemtrace log at all.
    BadMagic { found: [u8; 8] },
    /// A kmemtrace log whose header is damaged.
    BadCrc { stored: u32, computed: u32 },
    /// A major version this reader does not know.
    UnsupportedMajor { major: u16, minor: u16 },
}

impl fmt::Display for FileHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short { len } => write!(
                f,
                "offset 0: file is {len} bytes, shorter than the 16-byte kmemtrace file header"
            ),
            Self::BadMagic { found } => write!(
                f,
                "offset 0: not a kmemtrace log (magic {})",
                found.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            Self::BadCrc { stored, computed } => write!(
                f,
                "offset 12: file header CRC mismatch (stored {stored:08x}, computed {computed:08x})"
            ),
            Self::UnsupportedMajor { major, minor } => write!(
                f,
                "offset 8: log format version {major}.{minor} is not supported by this reader (format {VERSION_MAJOR}.x)"
            ),
        }
    }
}
impl std::error::Error for FileHeaderError {}

/// Checks a file header, returning (major, minor).
pub fn parse_file_header(h: &[u8]) -> Result<(u16, u16), FileHeaderError> {
    if h.len() < FILE_HEADER_LEN {
        if h.len() >= 8 && h[..8] != MAGIC {
            let mut found = [0; 8];
            found.copy_from_slice(&h[..8]);
            return Err(FileHeaderError::BadMagic { found });
        }
        return Err(FileHeaderError::Short { len: h.len() });
    }
    if h[..8] != MAGIC {
        let mut found = [0; 8];
        found.copy_from_slice(&h[..8]);
        return Err(FileHeaderError::BadMagic { found });
    }
    let major = u16::from_le_bytes([h[8], h[9]]);
    let minor = u16::from_le_bytes([h[10], h[11]]);
    let stored = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    let computed = crc32fast::hash(&h[..12]);
    if stored != computed {
        return Err(FileHeaderError::BadCrc { stored, computed });
    }
    if major != VERSION_MAJOR {
        return Err(FileHeaderError::UnsupportedMajor { major, minor });
    }
    Ok((major, minor))
}

/// A parsed block header (its CRC not yet checked against the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    pub block_type: BlockType,
    pub flags: u16,
    pub stored_len: u32,
    pub raw_len: u32,
    pub crc: u32,
}

/// Why a block header cannot start a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    BadSync([u8; 4]),
    TooLong { stored_len: u32, raw_len: u32 },
    InconsistentLengths { stored_len: u32, raw_len: u32 },
}

impl fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSync(s) => write!(
                f,
                "no block sync word (found {:02x} {:02x} {:02x} {:02x})",
                s[0], s[1], s[2], s[3]
            ),
            Self::TooLong {
                stored_len,
                raw_len,
            } => write!(
                f,
                "block length beyond the 64 MiB limit (stored {stored_len}, raw {raw_len})"
            ),
            Self::InconsistentLengths {
                stored_len,
                raw_len,
            } => write!(
                f,
                "uncompressed block with stored length {stored_len} != raw length {raw_len}"
            ),
        }
    }
}

impl BlockHeader {
    /// Parses the 20 header bytes. Checks what can be checked without the
    /// payload: sync word and length bounds.
    pub fn parse(h: &[u8; BLOCK_HEADER_LEN]) -> Result<Self, HeaderProblem> {
        let sync = [h[0], h[1], h[2], h[3]];
        if sync != SYNC {
            return Err(HeaderProblem::BadSync(sync));
        }
        let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let hdr = BlockHeader {
            block_type: BlockType::from_u16(u16::from_le_bytes([h[4], h[5]])),
            flags: u16::from_le_bytes([h[6], h[7]]),
            stored_len: le32(8),
            raw_len: le32(12),
            crc: le32(16),
        };
        if hdr.stored_len > MAX_BLOCK_LEN || hdr.raw_len > MAX_BLOCK_LEN {
            return Err(HeaderProblem::TooLong {
                stored_len: hdr.stored_len,
                raw_len: hdr.raw_len,
            });
        }
        if hdr.flags & (FLAG_ZSTD | FLAG_KPACK) == 0 && hdr.stored_len != hdr.raw_len {
            return Err(HeaderProblem::InconsistentLengths {
                stored_len: hdr.stored_len,
                raw_len: hdr.raw_len,
            });
        }
        Ok(hdr)
    }

    /// A header of type `t` with no payload, lengths and CRC 0: for a block
    /// described in memory (a test's, or one whose bytes come from
    /// elsewhere).
    pub fn empty(block_type: BlockType) -> Self {
        BlockHeader {
            block_type,
            flags: 0,
            stored_len: 0,
            raw_len: 0,
            crc: 0,
        }
    }

    /// The CRC the header and `stored` payload should carry.
    pub fn compute_crc(h: &[u8; BLOCK_HEADER_LEN], stored: &[u8]) -> u32 {
        let mut c = crc32fast::Hasher::new();
        c.update(&h[..16]);
        c.update(stored);
        c.finalize()
    }
}

/// Encodes one block (header + possibly compressed payload) onto `out`.
///
/// Falls back to storing the payload uncompressed when compression does not
/// make it smaller. Returns an error only when `payload` exceeds the limit.
pub fn encode_block(
    block_type: BlockType,
    payload: &[u8],
    compression: Compression,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    BlockCompressor::new(compression).encode(block_type, payload, out)
}

/// Encodes blocks with one compression setting, keeping the zstd context
/// and its output buffer from block to block (creating a context costs as
/// much as compressing a small block). [`encode_block`] is this with a
/// fresh context.
pub struct BlockCompressor {
    compression: Compression,
    cctx: Option<zstd::zstd_safe::CCtx<'static>>,
    scratch: Vec<u8>,
    /// For `Compression::Kpack`: the packer and the packed payload.
    packer: Option<Box<crate::kpack::Packer>>,
    packed: Vec<u8>,
}

impl fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCompressor")
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl BlockCompressor {
    pub fn new(compression: Compression) -> Self {
        BlockCompressor {
            compression,
            cctx: None,
            scratch: Vec::new(),
            packer: None,
            packed: Vec::new(),
        }
    }

    /// Lets go of the zstd context and the buffers (made again on the next
    /// block): a writer done with one of many CPUs need not hold them.
    pub fn release(&mut self) {
        *self = BlockCompressor::new(self.compression);
    }

    /// Compresses `payload` into the scratch buffer as one zstd frame;
    /// `false` when the block is to be stored plain (no compression, empty,
    /// not smaller, or zstd failed). With `head` > 0 the frame's first zstd
    /// block holds exactly the first `head` bytes (a flush after them), so
    /// that a reader can decompress those alone.
    fn compress(&mut self, payload: &[u8], head: usize) -> bool {
        use zstd::zstd_safe::{
            zstd_sys::ZSTD_EndDirective, CCtx, CParameter, InBuffer, OutBuffer, ResetDirective,
        };
        let Some(level) = self.compression.zstd_level() else {
            return false;
        };
        if payload.is_empty() {
            return false;
        }
        let cctx = match &mut self.cctx {
            Some(c) => c,
            None => {
                let Some(mut c) = CCtx::try_create() else {
                    return false;
                };
                // The payload stays where it is for the whole frame: zstd
                // then matches in it directly instead of first copying the
                // two parts below into its own window, a copy of every
                // block the recorder writes.
                if c.set_parameter(CParameter::CompressionLevel(level))
                    .is_err()
                    || c.set_parameter(CParameter::StableInBuffer(true)).is_err()
                {
                    return false;
                }
                self.cctx.insert(c)
            }
        };
        // A window as long as the payload: with the level's own (512 KiB
        // at level 1) a 1 MiB CPU_DATA block fed in two parts wrapped
        // zstd's buffer and went through its slower external-dictionary
        // matcher, for no better ratio (docs/benchmarks.md, "Recording":
        // zstd's window).
        // Readers' limits are not reached: a block is at most 64 MiB.
        let window = payload
            .len()
            .next_power_of_two()
            .trailing_zeros()
            .clamp(10, 26);
        if cctx.set_parameter(CParameter::WindowLog(window)).is_err() {
            return false;
        }
        self.scratch.clear();
        self.scratch
            .reserve(zstd::zstd_safe::compress_bound(payload.len()) + 64);
        if head == 0 || head >= payload.len() {
            return match cctx.compress2(&mut self.scratch, payload) {
                Ok(n) => n < payload.len(),
                Err(_) => false,
            };
        }
        if cctx.reset(ResetDirective::SessionOnly).is_err()
            || cctx
                .set_pledged_src_size(Some(payload.len() as u64))
                .is_err()
        {
            return false;
        }
        let mut out = OutBuffer::around(&mut self.scratch);
        // A stable input keeps its start and may only grow: the head, then
        // the whole payload from where zstd stopped.
        for (end, op) in [
            (head, ZSTD_EndDirective::ZSTD_e_flush),
            (payload.len(), ZSTD_EndDirective::ZSTD_e_end),
        ] {
            let mut input = InBuffer::around(&payload[..end]);
            input.set_pos(if end == head { 0 } else { head });
            // The output has room for the whole frame: one call ends it.
            match cctx.compress_stream2(&mut out, &mut input, op) {
                Ok(0) if input.pos() == end => {}
                _ => {
                    let _ = cctx.reset(ResetDirective::SessionOnly);
                    return false;
                }
            }
        }
        let n = out.pos();
        n < payload.len()
    }

    /// Packs CPU data with `packer` from now on (an older version's, for
    /// comparisons; see `Packer::version1`).
    pub fn set_packer(&mut self, packer: crate::kpack::Packer) {
        self.packer = Some(Box::new(packer));
    }

    /// Appends one block (header + possibly compressed payload) to `out`.
    pub fn encode(
        &mut self,
        block_type: BlockType,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        self.encode_with_head(block_type, payload, 0, out)
    }

    /// Like [`encode`](Self::encode); a compressed payload's first zstd
    /// block holds exactly its first `head` bytes (FORMAT.md §5: CPU_DATA
    /// headers are written so).
    pub fn encode_with_head(
        &mut self,
        block_type: BlockType,
        payload: &[u8],
        head: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        if payload.len() > MAX_BLOCK_LEN as usize {
            return Err(EncodeError::TooLarge(payload.len()));
        }
        let mut flags = 0u16;
        let stored: &[u8] = if self.compress(payload, head) {
            flags |= FLAG_ZSTD;
            &self.scratch
        } else {
            payload
        };
        put_block(block_type, flags, stored, payload.len(), out);
        Ok(())
    }

    /// Appends a CPU_DATA block of `payload` (its CPU_DATA header, then
    /// whole sub-buffers of the `shape` given). With `Compression::Kpack`
    /// and a shape kpack walks, the payload goes through kpack, then zstd
    /// (FORMAT.md §8.3); whatever kpack does not make smaller is encoded
    /// as [`encode_with_head`](Self::encode_with_head) does.
    pub fn encode_cpu_data(
        &mut self,
        payload: &[u8],
        shape: Option<crate::kpack::Shape>,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        use crate::kpack::{Packer, HEAD_LEN};
        let (Compression::Kpack(_), Some(shape)) = (self.compression, shape) else {
            return self.encode_with_head(BlockType::CpuData, payload, HEAD_LEN, out);
        };
        if payload.len() > MAX_BLOCK_LEN as usize {
            return Err(EncodeError::TooLarge(payload.len()));
        }
        let mut packed = std::mem::take(&mut self.packed);
        packed.clear();
        let packer = self.packer.get_or_insert_with(|| Box::new(Packer::new()));
        packer.pack(shape, payload, HEAD_LEN, &mut packed);
        let r = if packed.len() >= payload.len() {
            // Readers never decompress more than raw_len bytes.
            self.encode_with_head(BlockType::CpuData, payload, HEAD_LEN, out)
        } else {
            let (flags, stored) = if self.compress(&packed, HEAD_LEN) {
                (FLAG_KPACK | FLAG_ZSTD, &self.scratch[..])
            } else {
                (FLAG_KPACK, &packed[..])
            };
            put_block(BlockType::CpuData, flags, stored, payload.len(), out);
            Ok(())
        };
        self.packed = packed;
        r
    }
}

/// Appends a block: its header for `stored` (whose decoded form is
/// `raw_len` bytes), then `stored`.
pub fn put_block(
    block_type: BlockType,
    flags: u16,
    stored: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) {
    let mut h = [0u8; BLOCK_HEADER_LEN];
    h[..4].copy_from_slice(&SYNC);
    h[4..6].copy_from_slice(&block_type.to_u16().to_le_bytes());
    h[6..8].copy_from_slice(&flags.to_le_bytes());
    h[8..12].copy_from_slice(&(stored.len() as u32).to_le_bytes());
    h[12..16].copy_from_slice(&(raw_len as u32).to_le_bytes());
    let crc = BlockHeader::compute_crc(&h, stored);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    out.reserve(BLOCK_HEADER_LEN + stored.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(stored);
}

/// A block payload that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    TooLarge(usize),
}
impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge(n) => write!(f, "block payload of {n} bytes exceeds the 64 MiB limit"),
        }
    }
}
impl std::error::Error for EncodeError {}

/// Decodes (zstd, kpack) a stored payload whose CRC was checked.
pub fn decode_payload<'a>(hdr: &BlockHeader, stored: &'a [u8]) -> Result<Cow<'a, [u8]>, String> {
    let mut out = Vec::new();
    match decode_payload_into(hdr, stored, &mut PayloadDecoder::default(), &mut out)? {
        None => Ok(Cow::Borrowed(stored)),
        Some(n) => {
            out.truncate(n);
            Ok(Cow::Owned(out))
        }
    }
}

/// What decoding payloads keeps from block to block: a zstd context and,
/// for kpack, the packed form and the unpacker's tables.
#[derive(Default)]
pub struct PayloadDecoder {
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    packed: Vec<u8>,
    unpacker: Option<Box<crate::kpack::Unpacker>>,
}

impl fmt::Debug for PayloadDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadDecoder")
            .field("dctx", &self.dctx.is_some())
            .finish_non_exhaustive()
    }
}

/// `out`'s first `n` bytes, grown to them if it is shorter (never shrunk,
/// so that reuse costs no zeroing).
fn first_bytes(out: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if out.len() < n {
        out.resize(n, 0);
    }
    &mut out[..n]
}

/// Decompresses the zstd frame `stored` into `out`'s room for `max`
/// bytes (not zeroed first: `out` is set to what was written; a frame that
/// would decompress to more fails) and returns its length.
fn unzstd(
    dctx: &mut Option<zstd::bulk::Decompressor<'static>>,
    stored: &[u8],
    max: usize,
    out: &mut Vec<u8>,
) -> Result<usize, String> {
    let d = match dctx {
        Some(d) => d,
        None => dctx.insert(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?),
    };
    out.clear();
    out.reserve(max);
    match d.decompress_to_buffer(stored, out) {
        // A reused buffer may have more room than `max`.
        Ok(n) if n > max => Err(format!(
            "zstd payload does not decompress to {max} bytes: Destination buffer is too small"
        )),
        Ok(n) => Ok(n),
        Err(e) => Err(format!(
            "zstd payload does not decompress to {max} bytes: {e}"
        )),
    }
}

/// Like [`decode_payload`] (same checks, same messages), reusing what
/// `dec` keeps and an output buffer: a compressed payload is decoded into
/// `out[..n]` and `Some(n)` returned (`out` may be longer; zstd writes into
/// its room, which is never zeroed first, so neither reuse nor a new
/// buffer costs zeroing); a plain one is `stored` itself (`None`).
pub fn decode_payload_into(
    hdr: &BlockHeader,
    stored: &[u8],
    dec: &mut PayloadDecoder,
    out: &mut Vec<u8>,
) -> Result<Option<usize>, String> {
    if hdr.flags & !KNOWN_FLAGS != 0 {
        return Err(format!(
            "unknown block flags {:#06x} (written by a newer version?)",
            hdr.flags & !KNOWN_FLAGS
        ));
    }
    let raw_len = hdr.raw_len as usize;
    let PayloadDecoder {
        dctx,
        packed,
        unpacker,
    } = dec;
    if hdr.flags & FLAG_KPACK == 0 {
        if hdr.flags & FLAG_ZSTD == 0 {
            return Ok(None);
        }
        let n = unzstd(dctx, stored, raw_len, out)?;
        if n != raw_len {
            return Err(format!(
                "zstd payload decompressed to {n} bytes, header says {raw_len}"
            ));
        }
        return Ok(Some(n));
    }
    if hdr.block_type != BlockType::CpuData {
        return Err(format!(
            "kpack flag on a {} block (only CPU_DATA payloads are packed)",
            hdr.block_type.name()
        ));
    }
    let packed: &[u8] = if hdr.flags & FLAG_ZSTD != 0 {
        // The packed form is never longer than the payload.
        let n = unzstd(dctx, stored, raw_len, packed)?;
        &packed[..n]
    } else {
        stored
    };
    unpacker
        .get_or_insert_with(Default::default)
        .unpack(packed, crate::kpack::HEAD_LEN, first_bytes(out, raw_len))
        .map_err(|e| e.to_string())?;
    Ok(Some(raw_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_header_round_trip() {
        let h = encode_file_header();
        assert_eq!(parse_file_header(&h), Ok((1, VERSION_MINOR_WITHOUT_KPACK)));
        let h2 = encode_file_header_minor(VERSION_MINOR);
        assert_eq!(parse_file_header(&h2), Ok((1, VERSION_MINOR)));
        let mut bad = h;
        bad[13] ^= 1;
        assert!(matches!(
            parse_file_header(&bad),
            Err(FileHeaderError::BadCrc { .. })
        ));
        let mut v2 = h;
        v2[8] = 2;
        let crc = crc32fast::hash(&v2[..12]);
        v2[12..16].copy_from_slice(&crc.to_le_bytes());
        let e = parse_file_header(&v2).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("2.{VERSION_MINOR_WITHOUT_KPACK} is not supported")),
            "{e}"
        );
        assert!(matches!(
            parse_file_header(b"PK\x03\x04 not a log"),
            Err(FileHeaderError::BadMagic { .. })
        ));
    }

    #[test]
    fn block_round_trip_compressed_and_not() {
        let payload: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 7).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Zstd(3)] {
            let mut out = Vec::new();
            encode_block(BlockType::CpuData, &payload, c, &mut out).unwrap();
            let h: [u8; BLOCK_HEADER_LEN] = out[..BLOCK_HEADER_LEN].try_into().unwrap();
            let hdr = BlockHeader::parse(&h).unwrap();
            let stored = &out[BLOCK_HEADER_LEN..];
            assert_eq!(hdr.stored_len as usize, stored.len());
            assert_eq!(BlockHeader::compute_crc(&h, stored), hdr.crc);
            assert_eq!(decode_payload(&hdr, stored).unwrap().as_ref(), &payload[..]);
            assert_eq!(c == Compression::None, hdr.flags == 0);
        }
    }

    #[test]
    fn incompressible_payload_is_stored_plain() {
        let payload = [1u8, 2, 3];
        let mut out = Vec::new();
        encode_block(BlockType::Note, &payload, Compression::Zstd(19), &mut out).unwrap();
        assert_eq!(out[6], 0, "flags");
        assert_eq!(&out[BLOCK_HEADER_LEN..], &payload);
    }

    #[test]
    fn reused_context_decodes_like_a_fresh_one() {
        let mut d = PayloadDecoder::default();
        let mut out = Vec::new();
        for (i, len) in [5000usize, 100, 9000, 0].into_iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|j| ((j / 7 + i) % 251) as u8).collect();
            for c in [Compression::None, Compression::Zstd(3)] {
                let mut blk = Vec::new();
                encode_block(BlockType::Note, &payload, c, &mut blk).unwrap();
                let hdr = BlockHeader::parse(blk[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
                let stored = &blk[BLOCK_HEADER_LEN..];
                let want = decode_payload(&hdr, stored).unwrap();
                let got = match decode_payload_into(&hdr, stored, &mut d, &mut out).unwrap() {
                    None => stored,
                    Some(n) => &out[..n],
                };
                assert_eq!(got, want.as_ref());
            }
        }
        // A lying raw_len fails with decode_payload's message.
        let payload = vec![7u8; 4096];
        let mut blk = Vec::new();
        encode_block(BlockType::Note, &payload, Compression::Zstd(3), &mut blk).unwrap();
        let mut hdr = BlockHeader::parse(blk[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
        for lie in [4095, 4097] {
            hdr.raw_len = lie;
            let stored = &blk[BLOCK_HEADER_LEN..];
            assert_eq!(
                decode_payload_into(&hdr, stored, &mut d, &mut out).unwrap_err(),
                decode_payload(&hdr, stored).unwrap_err()
            );
        }
        blk.truncate(blk.len() - 1);
        hdr.raw_len = 4096;
        let stored = &blk[BLOCK_HEADER_LEN..];
        assert_eq!(
            decode_payload_into(&hdr, stored, &mut d, &mut out).unwrap_err(),
            decode_payload(&hdr, stored).unwrap_err()
        );
    }

    #[test]
    fn lying_raw_len_is_caught() {
        let payload = vec![0u8; 4096];
        let mut out = Vec::new();
        encode_block(BlockType::CpuData, &payload, Compression::Zstd(1), &mut out).unwrap();
        let mut h: [u8; BLOCK_HEADER_LEN] = out[..BLOCK_HEADER_LEN].try_into().unwrap();
        h[12..16].copy_from_slice(&100u32.to_le_bytes());
        let hdr = BlockHeader::parse(&h).unwrap();
        assert!(decode_payload(&hdr, &out[BLOCK_HEADER_LEN..]).is_err());
    }
}
