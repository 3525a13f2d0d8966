//! The container (FORMAT.md §3–§10): version, arch tag, what the block
//! reader met (damage, truncation), block placement, per-CPU sequence
//! numbers and the END block's totals.

use super::Sink;
use crate::findings::{thousands, Finding, Kind, Location};
use kmemtrace_format::block::VERSION_MINOR;
use kmemtrace_format::records::CpuTotal;
use kmemtrace_import::log::{CpuBlockRef, Log, ProblemKind};
use kmemtrace_kernel::{machine_facts, SubBufSequence, LINUX_MAX_NR_CPUS};
use std::collections::BTreeMap;

/// What later checks need from this one.
#[derive(Debug, Default)]
pub struct Container {
    /// Damaged regions: (offset, bytes skipped).
    pub damaged: Vec<(u64, u64)>,
    /// Per CPU: (blocks, sub-buffers) missing from the numbering.
    pub missing: BTreeMap<u32, (u64, u64)>,
}

/// The check's kind of a problem the library's `Log::open` recorded.
fn kind_of(k: ProblemKind) -> Kind {
    match k {
        ProblemKind::Damage { .. }
        | ProblemKind::FileHeader
        | ProblemKind::BadBlock
        | ProblemKind::Data => Kind::Damage,
        ProblemKind::Structure => Kind::Structure,
        ProblemKind::Arch => Kind::Arch,
        ProblemKind::Metadata => Kind::Metadata,
    }
}

pub fn check(log: &Log, sink: &mut Sink) -> Container {
    let mut out = Container::default();

    // Version.
    if log.version.1 > VERSION_MINOR {
        sink.push(Finding::warning(
            Kind::Note,
            Location::at(10),
            format!(
                "format version {}.{} is newer than this checker's {}.{}: parts it does not know are skipped",
                log.version.0, log.version.1, log.version.0, VERSION_MINOR
            ),
        ));
    }
    if log.unknown_blocks > 0 {
        sink.push(Finding::warning(
            Kind::Note,
            Location::at(0),
            format!(
                "{} of unknown types skipped (written by a newer recorder?)",
                if log.unknown_blocks == 1 {
                    "1 block".to_string()
                } else {
                    format!("{} blocks", thousands(log.unknown_blocks))
                }
            ),
        ));
    }

    // Truncation, first: what it cut off is said after it.
    if let Some(t) = &log.truncated {
        sink.push(Finding::error(
            Kind::Truncation,
            Location::block(t.offset),
            format!(
                "truncated: the log ends inside a block ({} of its {} bytes present); the blocks before it are complete",
                thousands(t.available),
                thousands(t.needed)
            ),
        ));
    } else if log.end.is_none() {
        sink.push(Finding::error(
            Kind::Truncation,
            Location::at(log.len),
            "truncated: no END block (the recording did not finish, or the log was cut at a block boundary)",
        ));
    }

    // The recorder ended the log where its output failed (a full disk):
    // whole, but the recording stopped there.
    if let Some(e) = log.end.as_ref().filter(|e| {
        e.reason
            .starts_with(kmemtrace_format::records::END_OUTPUT_FAILED)
    }) {
        sink.push(Finding::warning(
            Kind::Truncation,
            Location::at(log.end_offset.unwrap_or(log.len)),
            format!(
                "the recording stopped early ({}): what came after was not recorded",
                e.reason
            ),
        ));
    }

    // A rotated capture's file begun and cut before its start (the
    // recorder stopped as it began it): nothing in it to read.
    for why in log.rotation.iter().flat_map(|r| &r.left_out) {
        sink.push(Finding::warning(
            Kind::Truncation,
            Location::at(log.len),
            why.clone(),
        ));
    }

    // What Log::open met.
    for p in &log.problems {
        let kind = kind_of(p.kind);
        if let ProblemKind::Damage { skipped } = p.kind {
            out.damaged.push((p.offset, skipped));
        }
        sink.push(Finding::error(
            kind,
            Location::block(p.offset),
            p.what.clone(),
        ));
    }
    for n in &log.notes {
        if n.warning {
            sink.push(Finding::warning(
                Kind::Note,
                Location {
                    exact: false,
                    ..Location::at(0)
                },
                format!("recorder's note: {}", n.text),
            ));
        }
    }

    check_arch(log, sink);
    // In file order already; sorted for damage_between's binary search.
    out.damaged.sort_unstable();
    check_sequences(log, sink, &mut out);
    check_end(log, sink);
    out
}

fn check_arch(log: &Log, sink: &mut Sink) {
    let a = &log.arch;
    // The ARCH block is the first block, right after the 16-byte header.
    let at = Location::block(16);
    if let Some(m) = a.machine.as_deref() {
        // Only what the name settles: a bi-endian name (mips64, sh4) or a
        // compat name (i686, armv8l) is no evidence either way.
        let facts = machine_facts(m);
        if let Some(order) = facts.and_then(|f| f.byte_order) {
            if order != a.byte_order {
                sink.push(Finding::error(
                    Kind::Arch,
                    at.clone(),
                    format!(
                        "arch tag says {}-endian, but machine {m} is {}-endian",
                        a.byte_order.name(),
                        order.name()
                    ),
                ));
            }
        }
        if let Some(long) = facts.and_then(|f| f.long_size) {
            if long != a.long_size {
                sink.push(Finding::error(
                    Kind::Arch,
                    at.clone(),
                    format!(
                        "arch tag says long size {}, but machine {m} has {long}-byte longs",
                        a.long_size
                    ),
                ));
            }
        }
    }
    if let Some(ps) = a.page_size {
        if ps == 0 || !ps.is_power_of_two() || !a.subbuf_size.is_multiple_of(ps) {
            sink.push(Finding::error(
                Kind::Arch,
                at.clone(),
                format!(
                    "sub-buffer size {} is not a multiple of the page size {ps}",
                    a.subbuf_size
                ),
            ));
        }
    }
    if let Some(n) = a.nr_cpus {
        for cpu in log.cpus() {
            if cpu >= n {
                sink.push(Finding::error(
                    Kind::Arch,
                    at.clone(),
                    format!("data for CPU {cpu}, but the arch tag says the machine has {n} CPUs"),
                ));
            }
        }
    }
}

/// Damaged regions to name in one finding; more are counted.
const DAMAGE_NAMED: usize = 4;

/// "; damaged region at offset A, offset B" for the damaged regions
/// (sorted by offset) that begin after `since` and before `until`; empty
/// if none. A binary search, and a few named: a log of many damaged
/// regions and many CPUs would otherwise name each region once per CPU.
fn damage_between(damaged: &[(u64, u64)], since: u64, until: u64) -> String {
    let from = damaged.partition_point(|d| d.0 <= since);
    let to = damaged.partition_point(|d| d.0 < until).max(from);
    let found = &damaged[from..to];
    if found.is_empty() {
        return String::new();
    }
    let mut named: Vec<String> = found
        .iter()
        .take(DAMAGE_NAMED)
        .map(|d| format!("offset {}", d.0))
        .collect();
    if found.len() > DAMAGE_NAMED {
        named.push(format!(
            "and {} more",
            thousands((found.len() - DAMAGE_NAMED) as u64)
        ));
    }
    format!("; damaged region at {}", named.join(", "))
}

fn check_sequences(log: &Log, sink: &mut Sink, out: &mut Container) {
    let sb = u64::from(log.arch.subbuf_size);
    let mut by_cpu: BTreeMap<u32, Vec<&CpuBlockRef>> = BTreeMap::new();
    for b in &log.blocks {
        by_cpu.entry(b.cpu).or_default().push(b);
    }
    // The CPUs END says wrote sub-buffers of which the log has none: all
    // missing (END's per-CPU finding says so), as their rows say.
    let with_data: Vec<u32> = by_cpu.keys().copied().collect();
    for t in end_only(log, &with_data).take(END_ONLY_LISTED) {
        out.missing.insert(t.cpu, missing_without_data(log, t.cpu));
    }
    for (cpu, blocks) in by_cpu {
        let mut seq = 0u64;
        let mut subbufs = SubBufSequence::with_dropped(log.dropped_subbufs(cpu));
        let mut prev: Option<u64> = None;
        let (mut miss_b, mut miss_s) = (0u64, 0u64);
        for b in blocks {
            let loc = Location {
                cpu: Some(cpu),
                ..Location::block(b.offset)
            };
            // Blocks of files rotation removed are not missing.
            if let Some(d) = log
                .dropped(cpu)
                .iter()
                .find(|d| d.seq.start <= seq && b.block_seq <= d.seq.end)
            {
                seq = seq.max(d.seq.end);
            }
            let sub = subbufs.expected;
            let ns = subbufs.block(b.first_subbuf, b.count);
            if b.block_seq > seq || (b.block_seq == seq && ns > 0) {
                let nb = b.block_seq - seq;
                let cause = damage_between(&out.damaged, prev.unwrap_or(0), b.offset);
                miss_b += nb;
                miss_s += ns;
                let what = match prev {
                    Some(p) => format!("between the block at offset {p} and this one"),
                    None => "before this, its first block".to_string(),
                };
                sink.push(Finding::error(
                    Kind::Sequence,
                    loc,
                    format!(
                        "CPU {cpu}: {} ({}, {} bytes) missing {what}: block_seq jumps from {} to {}{cause}",
                        if nb == 1 { "1 block".to_string() } else { format!("{} blocks", thousands(nb)) },
                        if ns == 1 { "1 sub-buffer".to_string() } else { format!("{} sub-buffers", thousands(ns)) },
                        thousands(ns.saturating_mul(sb)),
                        seq,
                        b.block_seq
                    ),
                ));
            } else if b.block_seq < seq {
                sink.push(Finding::error(
                    Kind::Sequence,
                    loc,
                    format!(
                        "CPU {cpu}: block_seq {} repeats or goes backwards (expected {seq})",
                        b.block_seq
                    ),
                ));
            } else if b.first_subbuf < sub {
                sink.push(Finding::error(
                    Kind::Sequence,
                    loc,
                    format!(
                        "CPU {cpu}: first_subbuf {} overlaps the previous block's sub-buffers (expected {sub})",
                        b.first_subbuf
                    ),
                ));
            }
            seq = seq.max(b.block_seq.saturating_add(1));
            prev = Some(b.offset);
        }
        // Blocks written after the last one present (END's totals; the
        // mismatch itself is reported by check_end) are missing too.
        if let Some(t) = log.end_total(cpu) {
            miss_b += t.blocks.saturating_sub(seq);
            miss_s += subbufs.after_last(Some(t.subbufs));
        }
        out.missing.insert(cpu, (miss_b, miss_s));
    }
}

/// The blocks and sub-buffers END says `cpu` wrote, for a CPU of which
/// the log has none, less those rotation removed: in a file of a rotated
/// capture END counts from the file's start, and the capture's files
/// before it were removed or not given.
fn missing_without_data(log: &Log, cpu: u32) -> (u64, u64) {
    let Some(t) = log.end_total(cpu) else {
        return (0, 0);
    };
    let rotated = log
        .dropped(cpu)
        .iter()
        .map(|d| d.seq.end.min(t.blocks).saturating_sub(d.seq.start))
        .fold(0, u64::saturating_add);
    let subbufs = SubBufSequence::with_dropped(log.dropped_subbufs(cpu)).block(t.subbufs, 0);
    (t.blocks.saturating_sub(rotated), subbufs)
}

/// CPUs without data listed one by one (a row each, with its loss window
/// and END's totals): as many as Linux has at most. A damaged END can list
/// millions in a few MB of zstd, each a row of the report, of its table
/// and of its JSON, and a finding.
pub const END_ONLY_LISTED: usize = LINUX_MAX_NR_CPUS as usize;

/// The CPUs END says wrote sub-buffers of which the log has no block
/// (`with_data`: the CPUs it has blocks of, sorted), by CPU, each once.
pub fn end_only<'a>(log: &'a Log, with_data: &'a [u32]) -> impl Iterator<Item = &'a CpuTotal> {
    let listed = log.end.as_ref().map_or(&[][..], |e| &e.cpus[..]);
    // END's CPUs are sorted: a CPU listed twice is next to itself.
    let mut last = None;
    listed.iter().filter(move |t| {
        t.subbufs > 0
            && with_data.binary_search(&t.cpu).is_err()
            && last.replace(t.cpu) != Some(t.cpu)
    })
}

/// Past the first [`END_ONLY_LISTED`] CPUs [`end_only`] gives, one
/// problem for the rest; the first CPU not listed, if any.
fn end_only_past_the_listed(log: &Log, with_data: &[u32], sink: &mut Sink) -> Option<u32> {
    let mut past = end_only(log, with_data).skip(END_ONLY_LISTED);
    let first = past.next()?;
    let (n, subbufs) = past.fold((1u64, first.subbufs), |(n, s), t| {
        (n + 1, s.saturating_add(t.subbufs))
    });
    sink.push(Finding::error(
        Kind::EndTotals,
        Location::block(log.end_offset.unwrap_or(0)),
        format!(
            "END says {} more CPUs than the {} listed wrote sub-buffers ({} in all) of which the log has none (more CPUs than Linux has): all missing, not listed CPU by CPU",
            thousands(n),
            thousands(END_ONLY_LISTED as u64),
            thousands(subbufs)
        ),
    ));
    Some(first.cpu)
}

fn check_end(log: &Log, sink: &mut Sink) {
    let (Some(end), Some(end_off)) = (&log.end, log.end_offset) else {
        return;
    };
    let at = Location::block(end_off);
    let with_data = log.cpus();
    let not_listed_from = end_only_past_the_listed(log, &with_data, sink);
    let not_listed = |t: &CpuTotal| {
        not_listed_from.is_some_and(|c| t.cpu >= c)
            && t.subbufs > 0
            && with_data.binary_search(&t.cpu).is_err()
    };
    if end.blocks != log.blocks_before_end {
        sink.push(Finding::error(
            Kind::EndTotals,
            at.clone(),
            format!(
                "END counts {} blocks before it; the log holds {} intact ones",
                thousands(end.blocks),
                thousands(log.blocks_before_end)
            ),
        ));
    }
    // END counts its own file's blocks (in a rotated capture read whole,
    // the last file's).
    let from = log
        .rotation
        .as_ref()
        .and_then(|r| r.files.last())
        .map_or(0, |f| f.offset);
    let mut seen: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    for b in &log.blocks {
        if b.offset > end_off || b.offset < from {
            continue;
        }
        let e = seen.entry(b.cpu).or_default();
        // Counts and sizes as the blocks' headers say: they saturate.
        e.0 += 1;
        e.1 = e.1.saturating_add(u64::from(b.count));
        e.2 =
            e.2.saturating_add(u64::from(b.count) * u64::from(log.arch.subbuf_size));
    }
    for t in &end.cpus {
        let s = seen.remove(&t.cpu).unwrap_or_default();
        if (t.blocks, t.subbufs, t.bytes) != s && !not_listed(t) {
            // Made only if kept: a damaged END may list millions of CPUs.
            sink.problems.push_with(|| Finding::error(
                Kind::EndTotals,
                at.clone(),
                format!(
                    "END says CPU {} wrote {} blocks, {} sub-buffers, {} bytes; the log holds {}, {}, {}",
                    t.cpu,
                    thousands(t.blocks),
                    thousands(t.subbufs),
                    thousands(t.bytes),
                    thousands(s.0),
                    thousands(s.1),
                    thousands(s.2)
                ),
            ));
        }
    }
    for (cpu, s) in seen {
        sink.problems.push_with(|| {
            Finding::error(
                Kind::EndTotals,
                at.clone(),
                format!(
                    "the log holds {} blocks of CPU {cpu}, which END does not list",
                    thousands(s.0)
                ),
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(kind_of(ProblemKind::Damage { skipped: 3 }), Kind::Damage);
        assert_eq!(kind_of(ProblemKind::Structure), Kind::Structure);
        assert_eq!(kind_of(ProblemKind::Metadata), Kind::Metadata);
        assert_eq!(kind_of(ProblemKind::Arch), Kind::Arch);
    }

    /// A log of CPUs 0 and 1, six sub-buffers each, one a block.
    fn two_cpus() -> Vec<u8> {
        let mut b = kmemtrace_testkit::synth::LogBuilder::new(
            kmemtrace_kernel::RunTimeEndian::Little,
            8,
            4096,
        );
        b.subbufs_per_block = 1;
        for i in 0..24u64 {
            for cpu in 0..2 {
                let mut payload = vec![0u8; 1000];
                payload[0] = 1;
                b.event(cpu, 1000 + i, payload);
            }
        }
        b.build().unwrap()
    }

    /// `log` with every CPU_DATA block of CPU 1 damaged (a byte of its
    /// sub-buffers flipped: its CRC fails).
    fn without_cpu_1(mut log: Vec<u8>) -> Vec<u8> {
        use kmemtrace_format::records::CpuDataHeader;
        use kmemtrace_format::{BlockType, Item, LogReader};
        let mut at = Vec::new();
        let mut r = LogReader::new(&log[..]).unwrap();
        while let Some(item) = r.next_item().unwrap() {
            let Item::Block(b) = item else { continue };
            if b.header.block_type == BlockType::CpuData {
                let p = b.payload().unwrap();
                let h = CpuDataHeader::parse(&p, p.len() as u64, 4096).unwrap();
                if h.cpu == 1 {
                    at.push(b.offset as usize + 20 + 100);
                }
            }
        }
        assert!(!at.is_empty());
        for i in at {
            log[i] ^= 0xff;
        }
        log
    }

    fn missing_of(log: &[u8], cpu: u32) -> (u64, u64) {
        let r = crate::check_bytes("l", log);
        let c = r.cpus.iter().find(|c| c.cpu == cpu).expect("a row");
        (c.missing_blocks, c.missing_subbufs)
    }

    /// A CPU END lists of which the log has no block: all it wrote is
    /// missing, but for what rotation removed.
    #[test]
    fn a_cpu_without_data_misses_what_end_says_it_wrote() {
        let log = two_cpus();
        assert_eq!(missing_of(&log, 1), (0, 0));
        assert_eq!(missing_of(&without_cpu_1(log.clone()), 1), (6, 6));
        // The second file of a rotated capture, cut after three blocks of
        // each CPU: END counts from the file's start, the first file's
        // three were removed.
        let files = kmemtrace_testkit::synth::rotate(&log, &[6], 7).unwrap();
        assert_eq!(missing_of(&files[1], 1), (0, 0));
        assert_eq!(missing_of(&without_cpu_1(files[1].clone()), 1), (3, 3));
    }

    #[test]
    fn damage_between_names_a_few_of_those_in_the_gap() {
        let d: Vec<(u64, u64)> = [10, 20, 30, 40, 50, 60, 70].map(|o| (o, 1)).to_vec();
        assert_eq!(damage_between(&d, 0, 10), "");
        assert_eq!(damage_between(&d, 10, 30), "; damaged region at offset 20");
        assert_eq!(damage_between(&d, 80, 90), "");
        assert_eq!(damage_between(&d, 40, 20), "", "a block before the last");
        assert_eq!(
            damage_between(&d, 0, 70),
            "; damaged region at offset 10, offset 20, offset 30, offset 40, and 2 more"
        );
        assert_eq!(damage_between(&[], 0, u64::MAX), "");
    }
}
