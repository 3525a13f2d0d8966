//! Whether a log holds the whole recording and, where it does not, what is
//! unknown: the one verdict that every program states the same way on
//! stderr (and exits 5 for) before it uses what could be read.
//!
//! A log is incomplete when it has no END block (the recorder was killed,
//! or the file was cut short, perhaps inside a block) or when opening it
//! found damage (CRC failures, skipped bytes, blocks that do not decode).
//! Lost events (ring-buffer overruns) are not damage: the kernel said it
//! dropped them, and the analyses mark their windows.

use crate::log::{CpuBlockRef, Log, Problem};
use kmemtrace_format::reader::Truncation;
use kmemtrace_kernel::{parse_subbuf, RbRecordKind, LINUX_MAX_NR_CPUS};

/// What a log lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incomplete {
    /// No END block: where the file was cut inside a block, if it was.
    pub no_end: Option<Option<Truncation>>,
    /// What opening the log found damaged.
    pub problems: Vec<Problem>,
    /// Each CPU the recorded machine had (or that has data) and the time
    /// stamp of the last event read on it (`None`: nothing read). Filled
    /// where the log has no END block: the events after these are unknown.
    pub last_read: Vec<(u32, Option<u64>)>,
}

impl Log {
    /// `None` for a whole, undamaged log; else what it lacks.
    pub fn incomplete(&self) -> Option<Incomplete> {
        let no_end = self.end.is_none().then(|| self.truncated.clone());
        if no_end.is_none() && self.problems.is_empty() {
            return None;
        }
        let last_read = if no_end.is_some() {
            let by_cpu = self.blocks_by_cpu();
            // The machine's CPUs without data too, as many as a kernel can
            // have: the arch tag's count is the log's word (2^32, damaged).
            let possible = self.arch.nr_cpus.unwrap_or(0).min(LINUX_MAX_NR_CPUS);
            let mut cpus: Vec<u32> = (0..possible).collect();
            cpus.extend(by_cpu.keys());
            cpus.sort_unstable();
            cpus.dedup();
            cpus.into_iter()
                .map(|c| {
                    let blocks = by_cpu.get(&c).map_or(&[][..], Vec::as_slice);
                    (c, self.last_event_ts(blocks))
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Incomplete {
            no_end,
            problems: self.problems.clone(),
            last_read,
        })
    }

    /// The time stamp of the last event that a CPU's last readable block
    /// holds (its `blocks` in sequence order).
    fn last_event_ts(&self, blocks: &[&CpuBlockRef]) -> Option<u64> {
        let (mut stored, mut raw) = (Vec::new(), Vec::new());
        for &block in blocks.iter().rev() {
            if self.read_cpu_block(block, &mut stored, &mut raw).is_err() {
                continue;
            }
            let mut last = None;
            for page in self.layout.split(&raw) {
                let Ok(sb) = parse_subbuf(self.endian, &self.layout, page) else {
                    continue;
                };
                for r in sb.events(self.endian).map_while(Result::ok) {
                    if let RbRecordKind::Data { .. } = r.kind {
                        last = last.max(Some(r.ts));
                    }
                }
            }
            if last.is_some() {
                return last;
            }
        }
        None
    }
}

impl Incomplete {
    /// The lines a program prints on stderr about log `name` (without the
    /// program's prefix): what is wrong, then what it costs.
    pub fn lines(&self, name: &str) -> Vec<String> {
        use kmemtrace_kernel::human::secs;
        let mut out = Vec::new();
        match &self.no_end {
            Some(Some(t)) => out.push(format!(
                "{name} is cut short: it ends inside a block at offset {} ({} of its {} bytes), with no END block",
                t.offset, t.available, t.needed
            )),
            Some(None) => out.push(format!(
                "{name} is cut short: it has no END block (the recorder was killed, or the file was cut at a block's end)"
            )),
            None => {}
        }
        if !self.problems.is_empty() {
            let n = self.problems.len();
            out.push(format!(
                "{name} is damaged: {n} problem{} (first: {}); events in the damaged parts are unknown: kmemtrace-check {name} lists each",
                if n == 1 { "" } else { "s" },
                self.problems[0]
            ));
        }
        if self.no_end.is_some() {
            let per_cpu: Vec<String> = self
                .last_read
                .iter()
                .map(|(cpu, ts)| match ts {
                    Some(ts) => format!("CPU {cpu} after {} s", secs(*ts, 6)),
                    None => format!("CPU {cpu} all (none read)"),
                })
                .collect();
            out.push(format!(
                "events unknown (the recording went on; the log does not say how long): {}",
                if per_cpu.is_empty() {
                    "every CPU's".to_string()
                } else {
                    per_cpu.join(", ")
                }
            ));
        }
        out
    }
}
