//! The files of a rotated capture (FORMAT.md §13) read as one log.
//!
//! The recorder numbers each CPU's blocks and sub-buffers across the whole
//! capture, and each file's SEGMENT block says where its own begin. So a
//! file read alone, or several read together, keep the capture's numbers;
//! what no file read holds (files removed by the size budget, or not
//! given) is a [`DroppedSpan`] of each CPU's sequence, which the one loss
//! tracker names [`kmemtrace_kernel::losses::Cause::Rotated`] rather than
//! missing: a loss window, not damage.

use crate::log::{Backing, Log, LogError, Problem};
use kmemtrace_format::records::{MetaKind, NoteRecord, SegmentRecord};
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

/// One file of a rotated capture, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatedFile {
    pub name: String,
    /// Its place in the capture (the SEGMENT's index).
    pub index: u32,
    /// Where its bytes begin in the offsets of the log read (0 for a file
    /// read alone).
    pub offset: u64,
    pub len: u64,
    pub segment: SegmentRecord,
}

/// A stretch of one CPU's sequence no file read holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedSpan {
    pub seq: Range<u64>,
    pub subbufs: Range<u64>,
}

/// Where the files read lie in their rotated capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub capture_id: u64,
    /// The files read, in capture order.
    pub files: Vec<RotatedFile>,
    /// Per CPU, the spans of its sequence that rotation removed.
    dropped: BTreeMap<u32, Vec<DroppedSpan>>,
    /// The last file's SEGMENT starts by CPU (its last entry for a CPU
    /// wins): looked up for every CPU END lists, which a damaged END makes
    /// millions, where [`SegmentRecord::start_of`] scans the list.
    last_starts: BTreeMap<u32, (u64, u64)>,
    /// Files given but left out, and why: begun and cut before their
    /// SEGMENT (the recorder stopped as it began them).
    pub left_out: Vec<String>,
}

impl Rotation {
    /// A file read alone: what came before it in the capture is dropped.
    pub(crate) fn of_file(name: &str, len: u64, g: &SegmentRecord) -> Rotation {
        let mut r = Rotation {
            capture_id: g.capture_id,
            files: vec![RotatedFile {
                name: name.to_string(),
                index: g.index,
                offset: 0,
                len,
                segment: g.clone(),
            }],
            dropped: BTreeMap::new(),
            last_starts: starts_by_cpu(g),
            left_out: Vec::new(),
        };
        r.drop_before(g, &BTreeMap::new(), 0);
        r
    }

    /// Each CPU's span from `from` (its next block and sub-buffer after
    /// the files before; none: the capture's start) to where `g`'s file
    /// begins, when the files `first..g.index` are not read.
    fn drop_before(&mut self, g: &SegmentRecord, from: &BTreeMap<u32, (u64, u64)>, first: u32) {
        if g.index <= first {
            return;
        }
        // One span per CPU: a damaged SEGMENT naming a CPU many times would
        // otherwise give it as many spans, each searched for every block.
        let mut seen = std::collections::BTreeSet::new();
        for s in g.starts.iter().filter(|s| seen.insert(s.cpu)) {
            let (seq, subbuf) = from.get(&s.cpu).copied().unwrap_or((0, 0));
            if s.first_subbuf > subbuf || s.block_seq > seq {
                self.dropped.entry(s.cpu).or_default().push(DroppedSpan {
                    seq: seq..s.block_seq.max(seq),
                    subbufs: subbuf..s.first_subbuf.max(subbuf),
                });
            }
        }
    }

    /// The spans of `cpu`'s sequence that rotation removed.
    pub fn dropped_of(&self, cpu: u32) -> &[DroppedSpan] {
        self.dropped.get(&cpu).map_or(&[], Vec::as_slice)
    }

    /// The capture's files no file read stands for: before the first, and
    /// between two whose indexes do not follow.
    pub fn files_missing(&self) -> Vec<Range<u32>> {
        let mut v = Vec::new();
        let mut next = 0;
        for f in &self.files {
            if f.index > next {
                v.push(next..f.index);
            }
            next = f.index.saturating_add(1);
        }
        v
    }

    /// Where `cpu`'s data in the last file read begins: END's totals there
    /// count from it.
    pub fn last_start_of(&self, cpu: u32) -> (u64, u64) {
        self.last_starts.get(&cpu).copied().unwrap_or((0, 0))
    }
}

/// [`SegmentRecord::start_of`] of every CPU `g` lists, as a map.
fn starts_by_cpu(g: &SegmentRecord) -> BTreeMap<u32, (u64, u64)> {
    let mut by_cpu = BTreeMap::new();
    for s in &g.starts {
        by_cpu.insert(s.cpu, (s.block_seq, s.first_subbuf));
    }
    by_cpu
}

/// Whether `p` (opened as `opened`) is a file of a rotated capture that
/// the recorder was stopped (SIGKILL, power loss) in beginning: shorter
/// than a file header, or a rotated file's header (format 1.4 on) with no
/// SEGMENT, CPU data or END after it. Such a file holds nothing, and the
/// capture is read without it.
pub(crate) fn begun_only(p: &std::path::Path, opened: &Result<Log, LogError>) -> bool {
    use kmemtrace_format::block::{parse_file_header, FILE_HEADER_LEN, VERSION_MINOR_SEGMENT};
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut header = Vec::with_capacity(FILE_HEADER_LEN);
    if (&mut f)
        .take(FILE_HEADER_LEN as u64)
        .read_to_end(&mut header)
        .is_err()
    {
        return false;
    }
    if header.len() < FILE_HEADER_LEN {
        return true;
    }
    let rotated = parse_file_header(&header).is_ok_and(|(_, minor)| minor >= VERSION_MINOR_SEGMENT);
    rotated
        && match opened {
            Ok(log) => log.segment().is_none() && log.blocks.is_empty() && log.end.is_none(),
            Err(LogError::NoArch(_)) => true,
            Err(_) => false,
        }
}

/// An input refused as (part of) a capture.
pub(crate) fn refused(what: String) -> LogError {
    LogError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, what))
}

/// Each CPU's next block and sub-buffer after the blocks of `log` (and
/// what its END says was written).
fn next_of(log: &Log) -> BTreeMap<u32, (u64, u64)> {
    let mut next: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    if let Some(f) = log.rotation.as_ref().and_then(|r| r.files.last()) {
        for s in &f.segment.starts {
            next.insert(s.cpu, (s.block_seq, s.first_subbuf));
        }
    }
    for b in &log.blocks {
        let e = next.entry(b.cpu).or_default();
        e.0 = e.0.max(b.block_seq.saturating_add(1));
        e.1 = e.1.max(b.first_subbuf.saturating_add(u64::from(b.count)));
    }
    for cpu in log.end.iter().flat_map(|e| e.cpus.iter().map(|t| t.cpu)) {
        if let Some(t) = log.end_total(cpu) {
            let e = next.entry(cpu).or_default();
            *e = (e.0.max(t.blocks), e.1.max(t.subbufs));
        }
    }
    next
}

/// Reads the files of one rotated capture, opened each as a log, as one
/// log: in capture order (whatever order they come in), its blocks,
/// statistics and problems at offsets counted through the files one after
/// another, its metadata the first file's with the later ones' task
/// names merged in, its END the last file's. Refused: a file that is not
/// of a rotated capture, files of two captures, the same file twice.
pub fn join(mut logs: Vec<Log>) -> Result<Log, LogError> {
    for l in &logs {
        if l.segment().is_none() {
            return Err(refused(format!(
                "{}: not a file of a rotated capture (no SEGMENT block): give it alone",
                l.name
            )));
        }
    }
    let index = |l: &Log| l.segment().map_or(0, |g| g.index);
    logs.sort_by_key(index);
    let mut it = logs.into_iter();
    let Some(mut joined) = it.next() else {
        return Err(refused("no files given".into()));
    };
    let id = joined.rotation.as_ref().map_or(0, |r| r.capture_id);
    let count = it.len() + 1;
    let first_name = joined.name.clone();
    let Backing::File(f) = std::mem::replace(&mut joined.backing, Backing::Files(Vec::new()))
    else {
        return Err(refused(format!("{first_name}: not a kmemtrace log")));
    };
    let mut files = vec![(0, f)];
    for next in it {
        append(&mut joined, next, id, &mut files)?;
    }
    joined.backing = Backing::Files(files);
    if count > 1 {
        joined.name = format!("{first_name} (+{} files of its capture)", count - 1);
    }
    Ok(joined)
}

/// A META's kind, name and part: a later META with the same replaces it.
type MetaKey = (MetaKind, String, Option<(u32, u32)>);

/// Adds `notes` to `joined`'s, each one not there already.
fn merge_notes(joined: &mut Log, notes: Vec<NoteRecord>) {
    let mut seen: HashSet<(bool, String)> = joined
        .notes
        .iter()
        .map(|n| (n.warning, n.text.clone()))
        .collect();
    for n in notes {
        if seen.insert((n.warning, n.text.clone())) {
            joined.notes.push(n);
        }
    }
}

/// Adds the next file of the capture to `joined`.
fn append(
    joined: &mut Log,
    mut next: Log,
    id: u64,
    files: &mut Vec<(u64, std::fs::File)>,
) -> Result<(), LogError> {
    let g = next.segment().cloned().unwrap_or_default();
    let last = joined.rotation.as_ref().and_then(|r| r.files.last());
    let last_index = last.map_or(0, |f| f.index);
    if g.capture_id != id {
        return Err(refused(format!(
            "{} is a file of another capture than {} (capture {:016x}, not {id:016x})",
            next.name, joined.name, g.capture_id
        )));
    }
    if g.index == last_index {
        return Err(refused(format!(
            "{} is file {} of its capture, given twice",
            next.name, g.index
        )));
    }
    let a = (&joined.arch, &next.arch);
    if (
        a.0.byte_order,
        a.0.long_size,
        a.0.subbuf_size,
        a.0.data_offset,
    ) != (
        a.1.byte_order,
        a.1.long_size,
        a.1.subbuf_size,
        a.1.data_offset,
    ) {
        return Err(refused(format!(
            "{}: its arch tag differs from {}'s: not one capture",
            next.name, joined.name
        )));
    }
    let base = joined.len;
    let before = next_of(joined);
    let name = next.name.clone();
    let Backing::File(f) = std::mem::replace(&mut next.backing, Backing::Files(Vec::new())) else {
        return Err(refused(format!("{name}: not a kmemtrace log")));
    };
    files.push((base, f));
    if let Some(r) = &mut joined.rotation {
        r.drop_before(&g, &before, last_index.saturating_add(1));
        r.last_starts = starts_by_cpu(&g);
        r.files.push(RotatedFile {
            name: name.clone(),
            index: g.index,
            offset: base,
            len: next.len,
            segment: g,
        });
    }
    // A file before the last cut short lost its end, which no later file
    // holds: said, as its reader said it.
    if let Some(t) = joined.truncated.take() {
        joined.problems.push(Problem {
            offset: t.offset,
            kind: crate::log::ProblemKind::Structure,
            what: format!("not the last file read, yet cut short: {t}"),
        });
    }
    for mut p in next.problems {
        p.offset += base;
        p.what = format!("{name}: {}", p.what);
        joined.problems.push(p);
    }
    for mut b in next.blocks {
        b.offset += base;
        joined.blocks.push(b);
    }
    for mut s in next.stats {
        s.offset += base;
        joined.stats.push(s);
    }
    merge_notes(joined, next.notes);
    // Where each META of the files before lies, by what a later one
    // replaces: a search per META was metas x metas.
    let mut at: HashMap<MetaKey, usize> = HashMap::new();
    for (i, m) in joined.metas.iter().enumerate() {
        at.entry((m.kind, m.name.clone(), m.part)).or_insert(i);
    }
    for m in next.metas {
        let text = || match std::str::from_utf8(&m.content) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(&m.content),
        };
        // Parsed when the file was opened: a problem there is listed.
        let _ = match m.kind {
            MetaKind::SavedCmdlines => joined.pids.merge_cmdlines(&text()),
            MetaKind::SavedTgids => joined.pids.merge_tgids(&text()),
            _ => Ok(()),
        };
        match at.entry((m.kind, m.name.clone(), m.part)) {
            Entry::Occupied(i) => joined.metas[*i.get()] = m,
            Entry::Vacant(i) => {
                i.insert(joined.metas.len());
                joined.metas.push(m);
            }
        }
    }
    joined.end = next.end;
    joined.end_offset = next.end_offset.map(|o| o + base);
    joined.truncated = next.truncated.map(|mut t| {
        t.offset += base;
        t
    });
    joined.unknown_blocks += next.unknown_blocks;
    joined.blocks_before_end = next.blocks_before_end;
    joined.version = joined.version.max(next.version);
    joined.len = base + next.len;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_format::records::CpuStart;

    #[test]
    fn last_start_of_is_the_segments_last_entry_for_the_cpu() {
        // CPUs named several times (a damaged SEGMENT), out of order.
        let starts = (0..300u64)
            .map(|i| CpuStart {
                cpu: ((i * 37) % 101) as u32,
                block_seq: i,
                first_subbuf: 1000 + i,
            })
            .collect();
        let g = SegmentRecord {
            capture_id: 1,
            index: 2,
            wall_ns: None,
            starts,
        };
        let r = Rotation::of_file("f", 0, &g);
        for cpu in 0..110 {
            assert_eq!(r.last_start_of(cpu), g.start_of(cpu), "CPU {cpu}");
        }
        assert_eq!(r.last_starts.len(), 101);
    }

    #[test]
    fn joined_files_replace_metas_by_kind_name_and_part_and_add_only_new_notes() {
        use kmemtrace_format::arch::ArchTag;
        use kmemtrace_format::block::Compression;
        use kmemtrace_format::records::Meta;
        use kmemtrace_format::writer::LogWriter;
        let dir = tempfile::tempdir().unwrap();
        let arch = ArchTag::new(kmemtrace_kernel::RunTimeEndian::Little, 8, 4096, 16);
        let meta = |name: &str, text: &str| Meta {
            name: name.into(),
            ..Meta::new(MetaKind::Other, text)
        };
        let note = |text: &str| NoteRecord {
            warning: false,
            text: text.into(),
        };
        let mut paths = Vec::new();
        for (index, names, notes) in [
            (0u32, ["a", "b", "c"], ["x", "y", "x"]),
            (1, ["c", "d", "a"], ["y", "z", "z"]),
        ] {
            let g = SegmentRecord {
                capture_id: 7,
                index,
                ..Default::default()
            };
            let mut w = LogWriter::with_segment(
                Vec::new(),
                &arch,
                Compression::None,
                Compression::None,
                &g,
            )
            .unwrap();
            for n in names {
                w.write_meta(&meta(n, &format!("{n}{index}"))).unwrap();
            }
            for n in notes {
                w.write_note(&note(n)).unwrap();
            }
            let p = dir.path().join(format!("f{index}"));
            std::fs::write(&p, w.finish(None, "test", None).unwrap()).unwrap();
            paths.push(p);
        }
        let log = crate::open_capture(&paths).unwrap();
        let metas: Vec<(&str, &[u8])> = log
            .metas
            .iter()
            .filter(|m| m.kind == MetaKind::Other)
            .map(|m| (m.name.as_str(), m.content.as_slice()))
            .collect();
        let want: [(&str, &[u8]); 4] = [("a", b"a1"), ("b", b"b0"), ("c", b"c1"), ("d", b"d1")];
        assert_eq!(metas, want);
        let notes: Vec<&str> = log.notes.iter().map(|n| n.text.as_str()).collect();
        // The first file's as read; a later file's only those not there.
        assert_eq!(notes, ["x", "y", "x", "z"]);
    }
}
