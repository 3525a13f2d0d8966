//! Building events and whole logs the way the kernel and the recorder
//! would, for tests, test vectors and benchmarks.
//!
//! - [`encode_event`] lays out one trace record from a recorded `format`
//!   file: `common_*` fields, scalars at their offsets and sizes in the given
//!   byte order, `__data_loc` / `__rel_loc` strings appended after the fixed
//!   part, as the kernel's `trace_event_raw_event_*` functions do, and a
//!   string for an array of size 0 (`char buf[]`) as the record's tail.
//! - [`LogBuilder`] packs each CPU's records into sub-buffers with the
//!   kernel-rule encoder ([`crate::subbuf`]) and writes a complete
//!   log: ARCH, `header_page`, `header_event`, formats, CPU data, END.
//!
//! Nothing here is used to *read* logs; it exists so that readers can be
//! tested against data whose meaning is known independently of them.

use crate::subbuf::{encode_subbuf, EncRecord, EncodeError, EndPadding, Missed, PageSpec};
use kmemtrace_format::records::{NoteRecord, StatsPhase, StatsRecord};
use kmemtrace_format::{ArchTag, Compression, LogWriter, Meta, MetaKind};
use kmemtrace_kernel::{Endian, EventFormat, FieldKind, RunTimeEndian, SubBufLayout};
use std::collections::BTreeMap;

/// A field value for [`encode_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// An integer, truncated to the field's size.
    Int(i64),
    /// An unsigned integer, truncated to the field's size.
    Uint(u64),
    /// A string for a `__data_loc` / `__rel_loc` / `char[]` field (a NUL is
    /// added, as the kernel's `__assign_str` does).
    Str(&'a str),
}

/// Lays out one record of `format` with `common_pid = pid`; fields not
/// named are zero. Errors name a field that the format lacks or a value of
/// the wrong shape.
pub fn encode_event<E: Endian>(
    e: E,
    format: &EventFormat,
    pid: i32,
    values: &[(&str, Value<'_>)],
) -> Result<Vec<u8>, String> {
    let fixed_len = format
        .all_fields()
        .map(|f| f.offset + f.size)
        .max()
        .unwrap_or(0);
    let mut rec = vec![0u8; fixed_len];
    let mut dynamic = Vec::new();
    let put = |rec: &mut Vec<u8>, off: usize, size: usize, v: u64| {
        let mut tmp = Vec::with_capacity(8);
        e.write_uint(&mut tmp, v, size);
        rec[off..off + size].copy_from_slice(&tmp);
    };
    for f in &format.common_fields {
        match f.name.as_str() {
            "common_type" => put(&mut rec, f.offset, f.size, u64::from(format.id)),
            "common_pid" => put(&mut rec, f.offset, f.size, pid as i64 as u64),
            _ => {}
        }
    }
    for (name, v) in values {
        let f = format
            .fields
            .iter()
            .find(|f| f.name == *name)
            .ok_or_else(|| format!("{} has no field {name}", format.name))?;
        match (f.kind, v) {
            (FieldKind::Scalar, Value::Int(x)) => put(&mut rec, f.offset, f.size, *x as u64),
            (FieldKind::Scalar, Value::Uint(x)) => put(&mut rec, f.offset, f.size, *x),
            (FieldKind::DataLoc | FieldKind::RelLoc, Value::Str(s)) => {
                dynamic.push((f.offset, f.size, f.kind, s.as_bytes().to_vec()));
            }
            (FieldKind::Array { .. }, Value::Str(s)) if f.runs_to_end() => {
                // The entry's flexible array (`char buf[]` of ftrace's
                // `print`): the string and its NUL end the record.
                rec.resize(rec.len().max(f.offset), 0);
                rec.extend_from_slice(s.as_bytes());
                rec.push(0);
            }
            (FieldKind::Array { .. }, Value::Str(s)) => {
                let b = s.as_bytes();
                let n = b.len().min(f.size.saturating_sub(1));
                rec[f.offset..f.offset + n].copy_from_slice(&b[..n]);
            }
            (k, v) => return Err(format!("field {name} ({k:?}) cannot hold {v:?}")),
        }
    }
    for (off, size, kind, mut bytes) in dynamic {
        bytes.push(0);
        let start = rec.len();
        let loc = match kind {
            FieldKind::RelLoc => start - (off + size),
            _ => start,
        };
        if loc > 0xffff || bytes.len() > 0xffff {
            return Err("dynamic field beyond 64 KiB".into());
        }
        put(
            &mut rec,
            off,
            size,
            ((bytes.len() as u64) << 16) | loc as u64,
        );
        rec.extend_from_slice(&bytes);
    }
    Ok(rec)
}

/// `events/header_page` as a kernel with this long size and sub-buffer size
/// prints it.
pub fn header_page_text(long_size: usize, subbuf_size: usize) -> String {
    let data = 8 + long_size;
    format!(
        "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
         \tfield: local_t commit;\toffset:8;\tsize:{long_size};\tsigned:1;\n\
         \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
         \tfield: char data;\toffset:{data};\tsize:{};\tsigned:0;\n",
        subbuf_size - data
    )
}

/// `events/header_event` as every kernel since 2.6.31 prints it.
pub const HEADER_EVENT_TEXT: &str = "# compressed entry header\n\
\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\
\tarray       :   32 bits\n\
\n\
\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\
\ttime_stamp : type == 31\n\
\tdata max type_len  == 28\n";

/// One record to place in a CPU's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SynthRecord {
    /// A trace event at `ts`.
    Event { ts: u64, payload: Vec<u8> },
    /// A trace event written with an absolute time stamp before it.
    AbsEvent { ts: u64, payload: Vec<u8> },
    /// A discarded event (padding with a length) of `len` payload bytes.
    Discarded { ts: u64, len: usize },
    /// Start a new sub-buffer here, flagged as having lost events before it.
    Lost(Missed),
}

/// Builds a complete log from per-CPU records.
#[derive(Debug, Clone)]
pub struct LogBuilder {
    pub arch: ArchTag,
    pub compression: Compression,
    /// Sub-buffers per CPU_DATA block.
    pub subbufs_per_block: usize,
    metas: Vec<Meta>,
    cpus: BTreeMap<u32, Vec<SynthRecord>>,
    stats: Vec<StatsRecord>,
    notes: Vec<NoteRecord>,
    /// Leave the END block out (a truncated capture).
    pub unfinished: bool,
}

impl LogBuilder {
    /// A builder for a kernel with this byte order, long size and
    /// sub-buffer size; `header_page` and `header_event` are added.
    pub fn new(byte_order: RunTimeEndian, long_size: u8, subbuf_size: u32) -> Self {
        let mut arch = ArchTag::new(byte_order, long_size, subbuf_size, 8 + u32::from(long_size));
        arch.recorder = Some(format!(
            "kmemtrace-format synth {}",
            env!("CARGO_PKG_VERSION")
        ));
        arch.trace_clock = Some("local".into());
        let mut b = LogBuilder {
            arch,
            compression: Compression::None,
            subbufs_per_block: 4,
            metas: Vec::new(),
            cpus: BTreeMap::new(),
            stats: Vec::new(),
            notes: Vec::new(),
            unfinished: false,
        };
        b.meta(Meta::new(
            MetaKind::HeaderPage,
            header_page_text(usize::from(long_size), subbuf_size as usize),
        ));
        b.meta(Meta::new(MetaKind::HeaderEvent, HEADER_EVENT_TEXT));
        b
    }

    pub fn meta(&mut self, m: Meta) -> &mut Self {
        self.metas.push(m);
        self
    }

    /// Adds an event format (its text, as tracefs prints it).
    pub fn format(&mut self, system: &str, text: &str) -> Result<EventFormat, String> {
        let f = EventFormat::parse(text, Some(system)).map_err(|e| e.to_string())?;
        self.meta(Meta::event_format(
            system,
            &f.name,
            f.id,
            text.as_bytes().to_vec(),
        ));
        Ok(f)
    }

    pub fn stats(&mut self, cpu: u32, phase: StatsPhase, text: &str) -> &mut Self {
        self.stats.push(StatsRecord {
            cpu,
            phase,
            wall_ns: None,
            text: text.as_bytes().to_vec(),
        });
        self
    }

    pub fn note(&mut self, warning: bool, text: &str) -> &mut Self {
        self.notes.push(NoteRecord {
            warning,
            text: text.into(),
        });
        self
    }

    pub fn record(&mut self, cpu: u32, r: SynthRecord) -> &mut Self {
        self.cpus.entry(cpu).or_default().push(r);
        self
    }

    /// Adds an event to `cpu` at `ts`.
    pub fn event(&mut self, cpu: u32, ts: u64, payload: Vec<u8>) -> &mut Self {
        self.record(cpu, SynthRecord::Event { ts, payload })
    }

    pub fn layout(&self) -> SubBufLayout {
        SubBufLayout {
            long_size: usize::from(self.arch.long_size),
            data_offset: self.arch.data_offset as usize,
            subbuf_size: self.arch.subbuf_size as usize,
        }
    }

    /// Packs one CPU's records into encoded sub-buffers.
    pub fn pages(&self, cpu: u32) -> Result<Vec<Vec<u8>>, EncodeError> {
        let layout = self.layout();
        let Some(recs) = self.cpus.get(&cpu) else {
            return Ok(Vec::new());
        };
        let mut pages = Vec::new();
        let mut spec = PageSpec {
            end: EndPadding::Filler,
            ..PageSpec::default()
        };
        let flush = |spec: &mut PageSpec, pages: &mut Vec<Vec<u8>>| -> Result<(), EncodeError> {
            if spec.records.is_empty() && spec.missed == Missed::None {
                return Ok(());
            }
            let p = match self.arch.byte_order {
                RunTimeEndian::Little => {
                    encode_subbuf(kmemtrace_kernel::LittleEndian, &layout, spec)?
                }
                RunTimeEndian::Big => encode_subbuf(kmemtrace_kernel::BigEndian, &layout, spec)?,
            };
            pages.push(p.bytes);
            *spec = PageSpec {
                end: EndPadding::Filler,
                ..PageSpec::default()
            };
            Ok(())
        };
        for r in recs {
            let rec = match r {
                SynthRecord::Lost(m) => {
                    flush(&mut spec, &mut pages)?;
                    spec.missed = *m;
                    if matches!(m, Missed::Count(_)) {
                        // An end-of-page filler would leave no room for the
                        // count (the kernel then sets only the flag).
                        spec.end = EndPadding::None;
                    }
                    continue;
                }
                SynthRecord::Event { ts, payload } => EncRecord::Event {
                    ts: *ts,
                    payload: payload.clone(),
                },
                SynthRecord::AbsEvent { ts, payload } => EncRecord::AbsEvent {
                    ts: *ts,
                    payload: payload.clone(),
                },
                SynthRecord::Discarded { ts, len } => EncRecord::Discarded {
                    ts: *ts,
                    payload_len: *len,
                },
            };
            spec.records.push(rec);
            if self.fits(&layout, &spec).is_err() {
                let last = spec.records.pop().expect("just pushed");
                if spec.records.is_empty() {
                    // A record that fits no page at all.
                    spec.records.push(last);
                    return self.fits(&layout, &spec).map(|_| Vec::new());
                }
                flush(&mut spec, &mut pages)?;
                spec.records.push(last);
            }
        }
        flush(&mut spec, &mut pages)?;
        Ok(pages)
    }

    /// Whether `spec` encodes into one sub-buffer, keeping room for a
    /// stored lost-event count where one is asked for (the kernel drops the
    /// count when the page is full; a builder asked for one must keep it).
    fn fits(&self, layout: &SubBufLayout, spec: &PageSpec) -> Result<(), EncodeError> {
        let page = match self.arch.byte_order {
            RunTimeEndian::Little => encode_subbuf(kmemtrace_kernel::LittleEndian, layout, spec)?,
            RunTimeEndian::Big => encode_subbuf(kmemtrace_kernel::BigEndian, layout, spec)?,
        };
        if matches!(spec.missed, Missed::Count(_)) && page.lost_events.is_none() {
            return Err(EncodeError::PageFull {
                index: spec.records.len().saturating_sub(1),
            });
        }
        Ok(())
    }

    /// Writes the log. CPU data blocks of different CPUs are interleaved
    /// round-robin, as a recorder draining all CPUs would write them.
    pub fn build(&self) -> Result<Vec<u8>, String> {
        let mut arch = self.arch.clone();
        arch.nr_cpus
            .get_or_insert_with(|| self.cpus.keys().max().map_or(1, |c| c.saturating_add(1)));
        let mut w =
            LogWriter::new(Vec::new(), &arch, self.compression).map_err(|e| e.to_string())?;
        let io = |e: std::io::Error| e.to_string();
        for m in &self.metas {
            w.write_meta(m).map_err(io)?;
        }
        for n in &self.notes {
            w.write_note(n).map_err(io)?;
        }
        for s in self.stats.iter().filter(|s| s.phase == StatsPhase::Start) {
            w.write_stats(s).map_err(io)?;
        }
        let mut per_cpu: Vec<(u32, Vec<Vec<u8>>)> = Vec::new();
        for &cpu in self.cpus.keys() {
            per_cpu.push((cpu, self.pages(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?));
        }
        let n = self.subbufs_per_block.max(1);
        let mut round = 0;
        loop {
            let mut any = false;
            for (cpu, pages) in &per_cpu {
                let chunk: Vec<u8> = pages
                    .iter()
                    .skip(round * n)
                    .take(n)
                    .flatten()
                    .copied()
                    .collect();
                if !chunk.is_empty() {
                    w.write_cpu_data(*cpu, &chunk).map_err(io)?;
                    any = true;
                }
            }
            if !any {
                break;
            }
            round += 1;
        }
        for s in self.stats.iter().filter(|s| s.phase != StatsPhase::Start) {
            w.write_stats(s).map_err(io)?;
        }
        if self.unfinished {
            return Ok(w.into_inner_unfinished());
        }
        w.finish(None, "synthetic", None).map_err(io)
    }
}

/// A hostile log of about `size` bytes: a valid file header and ARCH
/// block, then a sync word every 100 bytes, each starting a header whose
/// lengths are plausible and stay inside the file but whose CRC is wrong,
/// then one intact NOTE block. A reader that checks each candidate over its
/// whole claimed length does quadratic work here.
pub fn sync_word_storm(size: usize) -> Vec<u8> {
    let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
    let w = LogWriter::new(Vec::new(), &arch, Compression::None).expect("in memory");
    let mut out = w.into_inner_unfinished();
    let start = out.len();
    let mut at = start;
    while at + 100 <= start + size {
        let mut h = [0u8; 100];
        h[..4].copy_from_slice(&kmemtrace_format::block::SYNC);
        h[4..6].copy_from_slice(&6u16.to_le_bytes());
        // Reaching to about the end of the storm, never past the file.
        let len = (start + size - at - 20) as u32 / 2;
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        h[16..20].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        out.extend_from_slice(&h);
        at += 100;
    }
    let note = NoteRecord {
        warning: false,
        text: "after the storm".into(),
    };
    kmemtrace_format::block::encode_block(
        kmemtrace_format::block::BlockType::Note,
        &note.encode(),
        Compression::None,
        &mut out,
    )
    .expect("in memory");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_import::Log;
    use kmemtrace_kernel::RbRecordKind;

    const KMALLOC_61_ARMHF: &str = "name: kmalloc\nID: 464\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long call_site;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:const void * ptr;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:size_t bytes_req;\toffset:16;\tsize:4;\tsigned:0;\n\
\tfield:size_t bytes_alloc;\toffset:20;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long gfp_flags;\toffset:24;\tsize:4;\tsigned:0;\n\
\tfield:int node;\toffset:28;\tsize:4;\tsigned:1;\n\
\n\
print fmt: \"call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d\", (void *)REC->call_site, REC->ptr, REC->bytes_req, REC->bytes_alloc, \"none\", REC->node\n";

    #[test]
    fn events_round_trip_through_a_whole_log_in_every_byte_order() {
        for order in [RunTimeEndian::Little, RunTimeEndian::Big] {
            let mut b = LogBuilder::new(order, 4, 4096);
            let f = b.format("kmem", KMALLOC_61_ARMHF).unwrap();
            let mut want = Vec::new();
            for i in 0..500u64 {
                let p = match order {
                    RunTimeEndian::Little => encode_event(
                        kmemtrace_kernel::LittleEndian,
                        &f,
                        42,
                        &[
                            ("ptr", Value::Uint(0xc000_0000 + i * 64)),
                            ("bytes_req", Value::Uint(i)),
                            ("node", Value::Int(-1)),
                        ],
                    ),
                    RunTimeEndian::Big => encode_event(
                        kmemtrace_kernel::BigEndian,
                        &f,
                        42,
                        &[
                            ("ptr", Value::Uint(0xc000_0000 + i * 64)),
                            ("bytes_req", Value::Uint(i)),
                            ("node", Value::Int(-1)),
                        ],
                    ),
                }
                .unwrap();
                // Gaps past 2^27 ns force time extends now and then.
                let ts = 1_000_000 + i * 1000 + if i % 97 == 0 { 1 << 28 } else { 0 } * i;
                want.push((ts, p.clone()));
                b.event((i % 2) as u32, ts, p);
            }
            let bytes = b.build().unwrap();
            let log = Log::from_bytes("synth", &bytes).unwrap();
            assert!(log.problems.is_empty(), "{:?}", log.problems);
            let dec = log.kmem_decoder();
            let mut got = Vec::new();
            for cpu in log.cpus() {
                log.visit_cpu(
                    cpu,
                    |v| {
                        let sb = v.subbuf.unwrap();
                        for r in sb.events(order) {
                            let r = r.unwrap();
                            if let RbRecordKind::Data { payload } = r.kind {
                                let ev = dec.decode(order, payload).unwrap().unwrap();
                                assert_eq!(ev.pid, 42);
                                assert_eq!(ev.node, Some(-1));
                                got.push((r.ts, ev.ptr, ev.bytes_req));
                            }
                        }
                    },
                    |p| panic!("{p}"),
                );
            }
            got.sort();
            let mut want: Vec<_> = want
                .iter()
                .enumerate()
                .map(|(i, (ts, _))| (*ts, 0xc000_0000 + i as u64 * 64, i as u64))
                .collect();
            want.sort();
            assert_eq!(got, want, "{order:?}");
        }
    }

    #[test]
    fn data_loc_strings_are_laid_out_like_the_kernel() {
        let text = "name: kmem_cache_free\nID: 7\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long call_site;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:const void * ptr;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;\n\
\n\
print fmt: \"name=%s\", __get_str(name)\n";
        let f = EventFormat::parse(text, Some("kmem")).unwrap();
        let p = encode_event(
            kmemtrace_kernel::LittleEndian,
            &f,
            1,
            &[("name", Value::Str("dentry"))],
        )
        .unwrap();
        assert_eq!(p.len(), 28 + 7);
        assert_eq!(&p[24..28], &[28, 0, 7, 0]);
        assert_eq!(
            f.field("name")
                .unwrap()
                .read_str(kmemtrace_kernel::LittleEndian, &p),
            Some("dentry")
        );
        assert!(encode_event(
            kmemtrace_kernel::LittleEndian,
            &f,
            1,
            &[("nope", Value::Int(1))]
        )
        .is_err());
    }
}

/// A small deterministic generator (xorshift64) for tests and fuzz-like
/// loops, so that a failure reproduces from its seed (not zero).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (> 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Cuts a log (its CPU data stored plain or zstd'd, as [`LogBuilder`]
/// writes it) into the files of a rotated capture, as kmemtraced's
/// `--rotate-size` would have written them (FORMAT.md §13): file `k`
/// holds the CPU data blocks from `cuts[k - 1]` (0 for the first) to
/// `cuts[k]`, in the log's block order, after the log's start metadata
/// again and a SEGMENT block; the blocks after the CPU data (statistics,
/// notes) go to the last file. Every file ends with END.
pub fn rotate(log: &[u8], cuts: &[usize], capture_id: u64) -> Result<Vec<Vec<u8>>, String> {
    use kmemtrace_format::block::BlockType;
    use kmemtrace_format::records::{CpuDataHeader, CpuStart, Record, SegmentRecord};
    use kmemtrace_format::writer::EncodedBlock;
    use kmemtrace_format::{Item, LogReader};
    let mut r = LogReader::new(log).map_err(|e| e.to_string())?;
    let (mut arch, mut start, mut data, mut after) = (None, Vec::new(), Vec::new(), Vec::new());
    while let Some(item) = r.next_item().map_err(|e| e.to_string())? {
        let Item::Block(b) = item else {
            return Err("the log is damaged".into());
        };
        let at = b.offset as usize;
        let bytes = log[at..at + 20 + b.stored.len()].to_vec();
        let payload = b.payload()?;
        match b.header.block_type {
            BlockType::Arch => match Record::decode(BlockType::Arch, &payload, None) {
                Ok(Record::Arch(a)) => arch = Some(*a),
                _ => return Err("the ARCH block does not decode".into()),
            },
            BlockType::ArchCopy | BlockType::End => {}
            BlockType::CpuData => {
                let a = arch.as_ref().ok_or("CPU data before ARCH")?;
                let h = CpuDataHeader::parse(&payload, payload.len() as u64, a.subbuf_size)
                    .map_err(|e| e.to_string())?;
                data.push(EncodedBlock {
                    cpu: h.cpu,
                    block_seq: h.block_seq,
                    first_subbuf: h.first_subbuf,
                    subbufs: u64::from(h.count),
                    data_bytes: u64::from(h.count) * u64::from(a.subbuf_size),
                    bytes,
                });
            }
            _ if data.is_empty() => start.push(bytes),
            _ => after.push(bytes),
        }
    }
    let arch = arch.ok_or("no ARCH block")?;
    let mut bounds = vec![0];
    bounds.extend(cuts.iter().map(|&c| c.min(data.len())));
    bounds.push(data.len());
    let mut next: BTreeMap<u32, CpuStart> = BTreeMap::new();
    let mut files = Vec::new();
    let io = |e: std::io::Error| e.to_string();
    for (index, w) in bounds.windows(2).enumerate() {
        let seg = SegmentRecord {
            capture_id,
            index: index as u32,
            wall_ns: None,
            starts: next.values().copied().collect(),
        };
        let none = Compression::None;
        let mut out = LogWriter::with_segment(Vec::new(), &arch, none, none, &seg).map_err(io)?;
        for b in &start {
            out.write_block_bytes(b).map_err(io)?;
        }
        for b in &data[w[0]..w[1].max(w[0])] {
            out.write_encoded(b).map_err(io)?;
            let s = CpuStart {
                cpu: b.cpu,
                block_seq: b.block_seq + 1,
                first_subbuf: b.first_subbuf + b.subbufs,
            };
            next.insert(b.cpu, s);
        }
        let last = index + 2 == bounds.len();
        if last {
            for b in &after {
                out.write_block_bytes(b).map_err(io)?;
            }
        }
        let reason = if last {
            "synthetic"
        } else {
            kmemtrace_format::records::END_ROTATED
        };
        files.push(out.finish(None, reason, None).map_err(io)?);
    }
    Ok(files)
}
