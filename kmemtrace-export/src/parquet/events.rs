//! The event tables' rows: one per kmem event of a run of one CPU's
//! records, in the CPU's order; page allocations with the call site of the
//! stack taken with them.

use super::stacks::Held;
use super::table::V;
use super::writer::Rows;
use super::{PAGE, PCP, SLAB};
use kmemtrace_analysis::in_order::for_each_record;
use kmemtrace_analysis::intern::{fast_map, FastMap, FastSet};
use kmemtrace_analysis::page_callers::call_site_index;
use kmemtrace_analysis::Symbols;
use kmemtrace_import::log::{CpuBlockRef, Log};
use kmemtrace_import::stacks::PageStackSample;
use kmemtrace_import::stacks::{StackReader, Waiting, DEPTH};
use kmemtrace_import::walk::ChunkRun;
use kmemtrace_kernel::{KmemDecoder, KmemEvent, KmemKind, RunTimeEndian};
use std::io;

/// What every run's rows share: the capture, the tasks' names, symbols.
pub struct Names<'a> {
    log: &'a Log,
    syms: &'a Symbols,
    capture: &'a str,
    recorder: FastSet<i32>,
    stacks: Option<StackReader>,
}

impl<'a> Names<'a> {
    pub fn new(log: &'a Log, syms: &'a Symbols, capture: &'a str) -> Self {
        let recorder = kmemtrace_import::tasks::recorder_tids(log)
            .into_iter()
            .collect();
        Names {
            log,
            syms,
            capture,
            recorder,
            stacks: StackReader::new(log),
        }
    }
}

/// The columns every event table starts with.
#[derive(Clone, Copy)]
struct Common<'a> {
    ts: u64,
    cpu: u32,
    pid: i32,
    comm: Option<&'a str>,
    by_recorder: bool,
    in_interrupt: bool,
    kind: KmemKind,
}

impl<'a> Common<'a> {
    fn values(&self, capture: &'a str) -> [V<'a>; 8] {
        [
            V::Known(0, capture),
            V::I64(self.ts as i64),
            V::I32(self.cpu as i32),
            V::I32(self.pid),
            self.comm.map_or(V::Null, |c| V::Known(self.pid as u64, c)),
            V::Bool(self.by_recorder),
            V::Bool(self.in_interrupt),
            V::Known(self.kind as u64, self.kind.name()),
        ]
    }
}

/// A page event's row, held until its stack has come.
struct PageRow<'a> {
    common: Common<'a>,
    pfn: Option<u64>,
    order: u32,
    migratetype: Option<i32>,
    gfp: Option<u64>,
    site: Option<Site>,
}

/// A page allocation's call site and its stack's id in [`Stacks`].
#[derive(Clone, Copy)]
struct Site {
    addr: u64,
    stack: u32,
}

/// The run's stacks, each interned once: from the call site outward, and
/// as folded text.
struct Stacks {
    /// Each whole stack's site, so that a stack seen before is not
    /// symbolised again.
    whole: FastMap<Box<[u64]>, Option<Site>>,
    ids: FastMap<Box<[u64]>, u32>,
    /// Outermost frame first, function names `;`-separated, down to the
    /// call site: flamegraph.pl's folded form.
    folded: Vec<String>,
    frames: Vec<u64>,
}

impl Stacks {
    fn new() -> Self {
        Stacks {
            whole: fast_map(),
            ids: fast_map(),
            folded: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// The call site in a stack's frames (innermost first), as the report
    /// finds it, and the stack from there outward.
    fn site(&mut self, syms: &Symbols, frames: impl Iterator<Item = u64>) -> Option<Site> {
        self.frames.clear();
        self.frames.extend(frames);
        if let Some(&site) = self.whole.get(self.frames.as_slice()) {
            return site;
        }
        let site = self.new_site(syms);
        self.whole.insert(self.frames.as_slice().into(), site);
        site
    }

    /// [`Stacks::site`] of `self.frames`, not seen before.
    fn new_site(&mut self, syms: &Symbols) -> Option<Site> {
        let i = call_site_index(&self.frames, syms.table.as_ref())?;
        let outward = &self.frames[i..];
        let stack = match self.ids.get(outward) {
            Some(&id) => id,
            None => {
                let id = self.folded.len() as u32;
                self.folded.push(fold(syms, outward));
                self.ids.insert(outward.into(), id);
                id
            }
        };
        Some(Site {
            addr: outward[0],
            stack,
        })
    }
}

/// `frames` (innermost first) as folded text: outermost first, function
/// names (addresses where none resolves), `;` between.
fn fold(syms: &Symbols, frames: &[u64]) -> String {
    let mut out = String::new();
    for &a in frames.iter().rev() {
        if !out.is_empty() {
            out.push(';');
        }
        match syms.table.as_ref().and_then(|k| k.resolve(a)) {
            Some(s) => out.push_str(s.name),
            None => out.push_str(&format!("0x{a:x}")),
        }
    }
    out
}

/// One thread's state over a run.
struct Run<'n, 'a> {
    names: &'n Names<'a>,
    /// Per pid: its name and whether it is one of the recorder's threads.
    tasks: FastMap<i32, (Option<&'a str>, bool)>,
    /// Per call-site address: its name.
    sites: FastMap<u64, String>,
    held: Held<PageRow<'a>>,
    stacks: Stacks,
}

/// Writes the rows of the run `run`.
pub fn write_run(
    rows: &mut Rows<'_>,
    run: &ChunkRun<'_, Log>,
    names: &Names<'_>,
) -> io::Result<()> {
    let mut st = Run {
        names,
        tasks: fast_map(),
        sites: fast_map(),
        held: Held::new(),
        stacks: Stacks::new(),
    };
    let log = names.log;
    let (dec, e) = (log.kmem_decoder(), log.endian);
    // Chunk by chunk: stacks pair within a chunk, or with the previous
    // chunk's last allocations (see `stacks`).
    for chunk in &run.chunks {
        let mut result = Ok(());
        for_each_record(
            &one_chunk(run, chunk),
            |_| true,
            |r| {
                if result.is_ok() {
                    result = st.record(rows, &dec, e, r.ts, r.cpu, r.payload);
                }
            },
        );
        result?;
        st.held.end_chunk();
    }
    // The last allocations' stacks can be in the CPU's next chunk.
    if let (Some(next), true) = (run.next, st.held.is_waiting()) {
        for (pid, intr, site) in leading_stacks(&one_chunk(run, next), names, &mut st.stacks) {
            st.held.stack(pid, intr, |row| row.site = site);
        }
    }
    st.held.settle_all();
    st.flush(rows)
}

/// The chunk `chunk` of `run`'s CPU, as a source of its own.
fn one_chunk<'a>(run: &ChunkRun<'a, Log>, chunk: &'a CpuBlockRef) -> ChunkRun<'a, Log> {
    ChunkRun {
        src: run.src,
        cpu: run.cpu,
        chunks: vec![chunk],
        next: None,
    }
}

impl<'a> Run<'_, 'a> {
    fn record(
        &mut self,
        rows: &mut Rows<'_>,
        dec: &KmemDecoder,
        e: RunTimeEndian,
        ts: u64,
        cpu: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        let names = self.names;
        if let Some(stack) = names.stacks.as_ref().and_then(|s| s.read(e, payload)) {
            let site = self.stacks.site(names.syms, stack.frames());
            self.held
                .stack(stack.pid, stack.context != 0, |row| row.site = site);
            return self.flush(rows);
        }
        let Some(k) = dec.decode(e, payload).ok().flatten() else {
            return Ok(());
        };
        let log = names.log;
        let (comm, by_recorder) = *self
            .tasks
            .entry(k.pid)
            .or_insert_with(|| (log.pids.comm(k.pid), names.recorder.contains(&k.pid)));
        let common = Common {
            ts,
            cpu,
            pid: k.pid,
            comm,
            // As the report leaves them out: interrupt work run while a
            // recorder thread was current is not the recorder's.
            by_recorder: by_recorder && !k.in_interrupt,
            in_interrupt: k.in_interrupt,
            kind: k.kind,
        };
        if k.kind.is_slab_alloc() || k.kind.is_slab_free() {
            let sym = self
                .sites
                .entry(k.call_site)
                .or_insert_with(|| names.syms.name(k.call_site));
            return slab_row(rows, &common.values(names.capture), &k, sym);
        }
        let row = PageRow {
            common,
            pfn: k.pfn,
            order: k.order,
            migratetype: k.migratetype,
            gfp: (k.kind == KmemKind::MmPageAlloc).then_some(k.gfp_flags),
            site: None,
        };
        if matches!(
            k.kind,
            KmemKind::MmPageAllocZoneLocked | KmemKind::MmPagePcpuDrain
        ) {
            return self.page_row(rows, PCP, &row);
        }
        let waits = names.stacks.as_ref().is_some_and(|r| r.takes_stack(&k));
        self.held.push(row, k.pid, k.in_interrupt, waits);
        self.flush(rows)
    }

    /// Writes the page rows whose turn it is.
    fn flush(&mut self, rows: &mut Rows<'_>) -> io::Result<()> {
        while let Some(row) = self.held.pop() {
            self.page_row(rows, PAGE, &row)?;
        }
        Ok(())
    }

    fn page_row(&mut self, rows: &mut Rows<'_>, table: usize, p: &PageRow<'a>) -> io::Result<()> {
        let common = p.common.values(self.names.capture);
        let own = [
            p.pfn.map_or(V::Null, |p| V::I64(p as i64)),
            V::I32(p.order as i32),
            p.migratetype.map_or(V::Null, V::I32),
            p.gfp.map_or(V::Null, |g| V::I64(g as i64)),
        ];
        if table == PCP {
            return rows.push(table, &[&common, &own]);
        }
        let names = self.names;
        let sample = names
            .stacks
            .as_ref()
            .map_or(PageStackSample::EVERY, |r| r.sample());
        // Successful allocations only, as the report's table counts.
        let stands_for = match (p.gfp, p.pfn) {
            (Some(_), Some(pfn)) if sample.takes(pfn) => V::I64(sample.weight(p.order) as i64),
            (Some(_), Some(_)) => V::I64(0),
            _ => V::Null,
        };
        let site = match p.site {
            Some(Site { addr, stack }) => {
                let name = self
                    .sites
                    .entry(addr)
                    .or_insert_with(|| names.syms.name(addr));
                let folded = &self.stacks.folded[stack as usize];
                [
                    V::I64(addr as i64),
                    V::Known(addr, name.as_str()),
                    V::Known(u64::from(stack), folded.as_str()),
                    stands_for,
                ]
            }
            None => [V::Null, V::Null, V::Null, stands_for],
        };
        rows.push(table, &[&common, &own, &site])
    }
}

/// The stacks of a chunk that its own page allocations do not take (at
/// most [`DEPTH`], as the analysis gives the previous block): for the
/// allocations that waited at the end of the run before it.
fn leading_stacks(
    chunk: &ChunkRun<'_, Log>,
    names: &Names<'_>,
    stacks: &mut Stacks,
) -> Vec<(i32, bool, Option<Site>)> {
    let Some(reader) = names.stacks.as_ref() else {
        return Vec::new();
    };
    let log = names.log;
    let (dec, e) = (log.kmem_decoder(), log.endian);
    let mut own: Waiting<()> = Waiting::default();
    let mut leading = Vec::new();
    for_each_record(
        chunk,
        |_| true,
        |r| {
            if let Some(st) = reader.read(e, r.payload) {
                let intr = st.context != 0;
                if own.take(st.pid, intr, drop).is_none() && leading.len() < DEPTH {
                    leading.push((st.pid, intr, stacks.site(names.syms, st.frames())));
                }
            } else if let Ok(Some(k)) = dec.decode(e, r.payload) {
                if reader.takes_stack(&k) {
                    own.push(k.pid, k.in_interrupt, ());
                }
            }
        },
    );
    leading
}

fn slab_row(rows: &mut Rows<'_>, common: &[V<'_>], k: &KmemEvent<'_>, sym: &str) -> io::Result<()> {
    let alloc = k.kind.is_slab_alloc();
    let when = |v: i64| if alloc { V::I64(v) } else { V::Null };
    let own = [
        V::I64(k.call_site as i64),
        V::Known(k.call_site, sym),
        V::I64(k.ptr as i64),
        when(k.bytes_req as i64),
        when(k.bytes_alloc as i64),
        when(k.gfp_flags as i64),
        k.node.map_or(V::Null, V::I32),
        k.cache_name.map_or(V::Null, V::Str),
    ];
    rows.push(SLAB, &[common, &own])
}
