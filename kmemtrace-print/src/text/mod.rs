//! The human report: tables with thousands separators, in the spirit of
//! `perf kmem stat`.

mod page_tables;
mod pages;
pub(crate) mod stalls;

use crate::{Printer, Section};
use kmemtrace_analysis::model::*;
use kmemtrace_cli::table::{Align, TextTable};
use std::fmt::Write as _;

pub use kmemtrace_kernel::human::thousands;

fn signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", thousands(n.unsigned_abs()))
    } else {
        thousands(n as u64)
    }
}

/// Trace-clock seconds as the kernel's `trace` prints them (`4.449504`).
pub fn secs(ns: u64) -> String {
    kmemtrace_kernel::human::secs(ns, 6)
}

/// A short duration: `1.234 s`, `12.3 ms`.
pub fn age(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} us", ns as f64 / 1e3)
    }
}

/// The report's tables: the one text-table printer's ruled layout, the
/// first `left` columns (and the last, where `left_last`) left-aligned.
struct Table {
    t: TextTable,
    left: usize,
    left_last: bool,
    columns: usize,
}

impl Table {
    fn new(head: &[&str]) -> Self {
        Table {
            t: TextTable::ruled(head),
            left: 1,
            left_last: false,
            columns: head.len(),
        }
    }
    fn row(&mut self, mut r: Vec<String>) {
        r.iter_mut().for_each(cut_cell);
        self.t.row(r);
    }
    fn render(mut self, out: &mut String) {
        for c in 0..self.left {
            self.t.align(c, Align::Left);
        }
        if self.left_last && self.columns > 0 {
            self.t.align(self.columns - 1, Align::Left);
        }
        self.t.render_into(out);
    }
}

/// Characters of one table cell printed at most. Every cell of a column
/// is padded to its widest, so one long name (a damaged log's symbol or
/// cache name can be megabytes) would widen every row; no real one comes
/// near (function names are at most 512 bytes, `KSYM_NAME_LEN`).
const MAX_CELL_CHARS: usize = 1024;

/// `cell` cut to [`MAX_CELL_CHARS`], the last one `…` where it is cut.
fn cut_cell(cell: &mut String) {
    if cell.len() <= MAX_CELL_CHARS {
        return;
    }
    let mut ends = cell.char_indices().map(|(i, _)| i);
    if let (Some(last), Some(_)) = (ends.nth(MAX_CELL_CHARS - 1), ends.next()) {
        cell.truncate(last);
        cell.push('…');
    }
}

/// Where and when a finding occurred: `4.449504 s (+0.102030) CPU 1 pid
/// 42 (comm) ptr 0x..., allocated at f+0x1, freed at g+0x2`.
pub fn occurrence(x: &OccurrenceRow) -> String {
    let mut s = format!(
        "{} s (+{:.6}) CPU {} pid {}{} ptr {}",
        secs(x.ts_ns),
        x.rel_s,
        x.cpu,
        x.pid,
        with_comm(x.comm.as_deref()),
        x.ptr
    );
    if let Some(a) = &x.alloc_callsite {
        let _ = write!(s, ", allocated at {a}");
    }
    if let Some(fr) = &x.free_callsite {
        let _ = write!(s, ", freed at {fr}");
    }
    s
}

/// ` (comm)` after a pid, or nothing when the task's name is unknown.
pub fn with_comm(comm: Option<&str>) -> String {
    comm.map(|c| format!(" ({c})")).unwrap_or_default()
}

fn pct(x: f64) -> String {
    format!("{x:.3}%")
}

/// Which sections to print.
#[derive(Clone, Copy, Debug)]
pub struct Sections {
    pub callsites: bool,
    pub caches: bool,
    pub matrix: bool,
    pub alloc: bool,
    pub leaks: bool,
    pub misuse: bool,
    pub page: bool,
    /// Within the page section: call sites, page frames, live pages.
    pub page_callers: bool,
    pub page_alloc: bool,
    pub page_live: bool,
    /// The page section was asked for by name (--page, --live).
    pub page_asked: bool,
    /// Allocation stalls (printed where the log has stall events).
    pub stalls: bool,
    pub color: bool,
    /// Rows per table.
    pub lines: usize,
}

impl Sections {
    /// Every section, `lines` rows a table, no colour.
    pub fn all(lines: usize) -> Sections {
        Sections {
            callsites: true,
            caches: true,
            matrix: true,
            alloc: true,
            leaks: true,
            misuse: true,
            page: true,
            page_callers: true,
            page_alloc: true,
            page_live: true,
            page_asked: true,
            stalls: true,
            color: false,
            lines,
        }
    }
}

fn tag(sev: Severity, color: bool) -> String {
    use kmemtrace_cli::colour::{self, paint};
    let c = match sev {
        Severity::Error => colour::RED,
        Severity::Warning => colour::YELLOW,
        Severity::Info => colour::CYAN,
    };
    paint(&format!("[{}]", sev.name()), c, color)
}

/// The text printer: a header on the kernel and the capture, then each
/// section [`Sections`] asks for, in a fixed order (the summary always).
pub struct Text(pub Sections);

impl Printer for Text {
    /// The model's order; `shows` leaves out the series over time.
    fn order(&self) -> &'static [Section] {
        &Section::ALL
    }

    fn shows(&self, section: Section) -> bool {
        let s = &self.0;
        match section {
            Section::Header | Section::Summary => true,
            Section::Callsites => s.callsites,
            Section::Caches => s.caches,
            // Each pass section says itself whether the options ask for it.
            Section::Passes => true,
            Section::Allocs => s.alloc,
            Section::Pages => s.page,
            Section::Misuse => s.misuse,
            Section::Leaks => s.leaks,
            // Series over time are the HTML page's plots.
            Section::LiveTimeline | Section::Rates => false,
            Section::Sources => true,
        }
    }

    fn section(&self, r: &Report, section: Section, out: &mut String) {
        let s = &self.0;
        match section {
            Section::Header => header(out, r),
            Section::Callsites => callsite_table(out, r, s),
            Section::Caches => cache_tables(out, r, s),
            Section::Passes => crate::pass_sections::text(out, r, s),
            Section::Allocs => {
                if let Some(allocs) = &r.allocs {
                    object_table(out, allocs, s);
                }
            }
            Section::Summary => summary(out, r),
            Section::Pages => pages::render(out, &r.pages, s),
            Section::Misuse => misuse_section(out, r, s),
            Section::Leaks => leaks_section(out, &r.leaks, s),
            Section::Sources => sources_section(out, r, s),
            Section::LiveTimeline | Section::Rates => {}
        }
    }
}

/// The text report of `r` with the sections `s` asks for.
pub fn render(r: &Report, s: &Sections) -> String {
    crate::print(&Text(*s), r)
}

/// The header: input, kernel, capture, lost events, problems, filters.
fn header(out: &mut String, r: &Report) {
    let k = &r.kernel;
    let _ = writeln!(out, "kmemtrace-report: {}", r.input.name);
    let _ = writeln!(
        out,
        "kernel: {} {} {} ({}-endian, {}-byte long, page {}), {} CPUs, trace clock {}",
        k.sysname.as_deref().unwrap_or("Linux"),
        k.release.as_deref().unwrap_or("(release unknown)"),
        k.machine.as_deref().unwrap_or(""),
        k.byte_order,
        k.long_size,
        k.page_size.map_or("?".into(), |p| p.to_string()),
        k.nr_cpus
            .map_or(r.capture.cpus.len().to_string(), |n| n.to_string()),
        k.trace_clock.as_deref().unwrap_or("?"),
    );
    let c = &r.capture;
    let _ = writeln!(
        out,
        "capture: {} events ({} kmem, {} slab{}) over {} s on {} CPUs; {}; symbols: {}",
        thousands(c.events),
        thousands(c.kmem_events),
        thousands(c.slab_events),
        // The figures below are of the selected events; these are the
        // capture's, only the slab count cut to a time window.
        if r.filters.time_start_ns.is_some() || r.filters.time_end_ns.is_some() {
            " in the time window"
        } else {
            ""
        },
        secs(c.duration_ns),
        c.cpus.len(),
        capture_end(r),
        r.input.kallsyms
    );
    let lost = lost_per_cpu(c);
    let rotated = c.lost_windows_rotated;
    if lost.is_empty() && c.lost_windows_total == 0 {
        let _ = writeln!(out, "lost events: none");
    } else if lost.is_empty() && c.lost_windows_total == rotated {
        let _ = writeln!(
            out,
            "lost events: none; {rotated} {} where files of the rotated capture are not here (removed by its size budget, or not given; findings there are marked uncertain)",
            if rotated == 1 { "window" } else { "windows" }
        );
    } else {
        let _ = writeln!(
            out,
            "lost events: {}; {} lost-event windows (findings there are marked uncertain)",
            if lost.is_empty() {
                "see windows".to_string()
            } else {
                lost.join("; ")
            },
            c.lost_windows_total
        );
    }
    if !r.problems.is_empty() {
        let _ = writeln!(
            out,
            "problems: {} (see --json); first: {}",
            r.problems.len(),
            r.problems[0]
        );
    }
    let fl = filter_list(r);
    if !fl.is_empty() {
        let _ = writeln!(out, "filters: {}", fl.join(", "));
    }
}

/// What each CPU lost, `CPU 1: 12 by the kernel's stats, 2 sub-buffers
/// flagged`, for the CPUs that lost anything.
fn lost_per_cpu(c: &Capture) -> Vec<String> {
    let mut lost = Vec::new();
    for cpu in &c.cpus {
        let mut parts = Vec::new();
        if let Some(n) = cpu.lost_stats.filter(|&n| n > 0) {
            parts.push(format!("{} by the kernel's stats", thousands(n)));
        }
        if cpu.missed_subbufs > 0 {
            parts.push(format!(
                "{} sub-buffer{} flagged",
                thousands(cpu.missed_subbufs),
                if cpu.missed_subbufs == 1 { "" } else { "s" }
            ));
        }
        if cpu.missing_subbufs > 0 {
            parts.push(format!(
                "{} sub-buffer{} missing",
                thousands(cpu.missing_subbufs),
                if cpu.missing_subbufs == 1 { "" } else { "s" }
            ));
        }
        if cpu.bad_subbufs > 0 {
            parts.push(format!("{} undecodable", cpu.bad_subbufs));
        }
        if !parts.is_empty() {
            lost.push(format!("CPU {}: {}", cpu.cpu, parts.join(", ")));
        }
    }
    lost
}

/// The per-call-site table of slab allocations (the sites that allocated).
fn callsite_table(out: &mut String, r: &Report, s: &Sections) {
    let alloc_rows: Vec<&CallsiteRow> = r.callsites.iter().filter(|c| c.hits > 0).collect();
    let _ = writeln!(
        out,
        "\nSLAB CALL SITES (sorted by {}; -s KEYS to change, -s frag,hit,bytes for perf kmem's order; {} of {})",
        r.sort.join(","),
        alloc_rows.len().min(s.lines),
        alloc_rows.len()
    );
    let mut t = Table::new(&[
        "Callsite",
        "Hits",
        "Total_alloc/Per",
        "Total_req/Per",
        "Wasted",
        "Frag",
        "Frees",
        "X-CPU",
        "Live",
        "Live bytes",
        "Peak live",
        "GFP",
    ]);
    for c in alloc_rows.iter().take(s.lines) {
        let gfp = match c.gfp.first() {
            Some(g) if c.gfp.len() > 1 || c.gfp_other > 0 => {
                format!(
                    "{} +{}",
                    g.compact,
                    c.gfp.len() - 1 + usize::from(c.gfp_other > 0)
                )
            }
            Some(g) => g.compact.clone(),
            None => String::new(),
        };
        t.row(vec![
            c.callsite.clone(),
            thousands(c.hits),
            format!(
                "{}/{}",
                thousands(c.bytes_alloc),
                thousands(c.alloc_per_hit)
            ),
            format!("{}/{}", thousands(c.bytes_req), thousands(c.req_per_hit)),
            thousands(c.bytes_wasted),
            pct(c.fragmentation_pct),
            thousands(c.frees),
            thousands(c.cross_cpu_frees),
            thousands(c.live_objects),
            thousands(c.live_bytes),
            thousands(c.peak_live_bytes),
            gfp,
        ]);
    }
    t.left_last = true;
    t.render(out);
}

/// The per-cache and per-kmalloc-size-class tables.
fn cache_tables(out: &mut String, r: &Report, s: &Sections) {
    for (title, rows) in [
        (
            "SLAB CACHES (kmem_cache_alloc, by the cache name the kernel recorded)",
            &r.caches,
        ),
        ("KMALLOC SIZE CLASSES (by bytes_alloc)", &r.size_classes),
    ] {
        let _ = writeln!(out, "\n{title}");
        let mut t = Table::new(&[
            "Cache",
            "Hits",
            "Alloc bytes",
            "Req bytes",
            "Wasted",
            "Frag",
            "Frees",
            "X-CPU",
            "Live",
            "Live bytes",
            "Peak live",
        ]);
        for c in rows.iter().take(s.lines) {
            t.row(vec![
                c.name.clone(),
                thousands(c.hits),
                thousands(c.bytes_alloc),
                thousands(c.bytes_req),
                thousands(c.bytes_wasted),
                pct(c.fragmentation_pct),
                thousands(c.frees),
                thousands(c.cross_cpu_frees),
                thousands(c.live_objects),
                thousands(c.live_bytes),
                thousands(c.peak_live_bytes),
            ]);
        }
        t.render(out);
    }
}

/// The allocating CPU x freeing CPU matrix.
pub(crate) fn cross_cpu_matrix(out: &mut String, m: &CrossCpu) {
    let _ = writeln!(
        out,
        "\nCROSS-CPU FREES (rows: allocating CPU, columns: freeing CPU): {} same-CPU, {} cross-CPU",
        thousands(m.same_cpu_frees),
        thousands(m.cross_cpu_frees)
    );
    let heads: Vec<String> = std::iter::once("alloc\\free".to_string())
        .chain(m.cpus.iter().map(|c| format!("CPU {c}")))
        .collect();
    let hr: Vec<&str> = heads.iter().map(String::as_str).collect();
    let mut t = Table::new(&hr);
    for (cpu, row) in m.cpus.iter().zip(&m.matrix) {
        let mut cells = vec![format!("CPU {cpu}")];
        cells.extend(row.iter().map(|&n| thousands(n)));
        t.row(cells);
    }
    t.render(out);
    if m.cpus_left_out > 0 {
        let _ = writeln!(
            out,
            "{} frees involve {} less busy CPUs, left out of the table",
            thousands(m.frees_left_out),
            thousands(m.cpus_left_out)
        );
    }
}

/// The per-object (per pointer) table.
fn object_table(out: &mut String, a: &[AllocRow], s: &Sections) {
    let _ = writeln!(
        out,
        "\nOBJECTS (per pointer; {} rows)",
        a.len().min(s.lines)
    );
    let mut t = Table::new(&[
        "Alloc Ptr",
        "Callsite",
        "Hits",
        "Alloc bytes",
        "Req bytes",
        "Frag",
        "X-CPU",
        "Live",
    ]);
    for p in a.iter().take(s.lines) {
        t.row(vec![
            p.ptr.to_string(),
            p.callsite.clone(),
            thousands(p.hits),
            thousands(p.bytes_alloc),
            thousands(p.bytes_req),
            pct(p.fragmentation_pct),
            thousands(p.cross_cpu_frees),
            if p.live { "yes" } else { "" }.into(),
        ]);
    }
    t.left = 2;
    t.render(out);
}

/// The summary, as perf kmem stat prints it, plus what it cannot; the page
/// allocator's counts when it was traced.
fn summary(out: &mut String, r: &Report) {
    let m = &r.summary;
    let _ = writeln!(out, "\nSUMMARY (SLAB allocator)\n========================");
    let _ = writeln!(
        out,
        "Total bytes requested: {}",
        thousands(m.bytes_requested)
    );
    let _ = writeln!(
        out,
        "Total bytes allocated: {}",
        thousands(m.bytes_allocated)
    );
    let _ = writeln!(out, "Total bytes freed:     {}", thousands(m.bytes_freed));
    let _ = writeln!(
        out,
        "Net total bytes allocated: {}",
        signed(m.net_bytes_allocated)
    );
    let _ = writeln!(
        out,
        "Total bytes wasted on internal fragmentation: {}",
        thousands(m.bytes_wasted)
    );
    let _ = writeln!(out, "Internal fragmentation: {:.6}%", m.fragmentation_pct);
    let _ = writeln!(
        out,
        "Cross-CPU frees: {}/{} (freed on another CPU than the allocating one; perf's Ping-pong)",
        thousands(m.cross_cpu_frees),
        thousands(m.matched_frees)
    );
    let _ = writeln!(
        out,
        "Cross-NUMA-node allocations: {} (a node other than the allocating CPU's was asked for; perf kmem stat prints these as \"Cross CPU allocations: {}/{}\")",
        match m.cross_node_allocs {
            Some(n) => format!("{}/{}", thousands(n), thousands(m.alloc_events)),
            None => format!(
                "unknown: the log has no CPU->node map; {} allocations named a node",
                thousands(m.node_requests)
            ),
        },
        thousands(m.perf_cross_cpu_allocations),
        thousands(m.alloc_events)
    );
    let _ = writeln!(
        out,
        "Allocations: {} ({} failed); frees: {} ({} matched, {} of NULL)",
        thousands(m.alloc_events),
        thousands(m.failed_allocs),
        thousands(m.free_events),
        thousands(m.matched_frees),
        thousands(m.null_frees)
    );
    let _ = writeln!(
        out,
        "Live at the end: {} objects, {} bytes; peak live: {} bytes",
        thousands(m.live_objects),
        thousands(m.live_bytes),
        thousands(m.peak_live_bytes)
    );
    let p = &r.page_allocator;
    if p.allocs + p.frees + p.batched_frees > 0 {
        let _ = writeln!(
            out,
            "Page allocator: {} allocations ({} bytes, {} failed), {} frees ({} bytes; {} of them batched)",
            thousands(p.allocs),
            thousands(p.alloc_bytes),
            thousands(p.failed),
            thousands(p.frees),
            thousands(p.free_bytes),
            thousands(p.batched_frees)
        );
    }
}

/// The misuse findings, one paragraph each, those with none in one line,
/// then the trace-completeness notes.
fn misuse_section(out: &mut String, r: &Report, s: &Sections) {
    let _ = writeln!(out, "\nALLOCATOR MISUSE");
    let mut none_found = Vec::new();
    for f in &r.misuse {
        if f.count == 0 {
            none_found.push(&*f.kind);
            continue;
        }
        misuse_finding(out, f, s.color);
    }
    if !none_found.is_empty() {
        let _ = writeln!(out, "none of: {}", none_found.join(", "));
    }
    completeness(out, &r.trace_completeness, s.lines);
}

/// One misuse finding: its count, what was set apart, the reasons, the
/// first occurrence, the top call sites and cache pairs.
fn misuse_finding(out: &mut String, f: &Finding, color: bool) {
    let _ = write!(
        out,
        "{} {}: {}",
        tag(f.severity, color),
        f.title,
        thousands(f.count)
    );
    let apart: Vec<String> = [
        (f.uncertain, "in lost-event windows"),
        (f.at_capture_edges, "at the capture's edges"),
        (f.explained, "explained by untraced traffic"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", thousands(*n)))
    .collect();
    if !apart.is_empty() {
        let _ = write!(
            out,
            " ({}; {} certain)",
            apart.join(", "),
            thousands(f.certain)
        );
    }
    out.push('\n');
    if !f.judgement.is_empty() {
        let _ = writeln!(out, "    {}", f.judgement);
    }
    for reason in f.reasons.iter().take(5) {
        let _ = writeln!(
            out,
            "    {} {}{}: {}{}",
            if reason.kept { "kept" } else { "set apart" },
            reason.cache,
            reason
                .callsite
                .as_deref()
                .map(|c| format!(" at {c}"))
                .unwrap_or_default(),
            thousands(reason.count),
            if reason.kept {
                String::new()
            } else {
                format!(" ({})", reason.because)
            }
        );
    }
    if let Some(x) = f.first_certain.as_ref().or(f.first.as_ref()) {
        let label = if x.uncertain {
            "first (uncertain)"
        } else if f.first.as_ref().is_some_and(|y| y.uncertain) {
            "first certain"
        } else {
            "first"
        };
        let _ = write!(out, "    {label}: {}", occurrence(x));
        if let (Some(q), Some(b)) = (x.bytes_req, x.bytes_alloc) {
            if f.kind == "bytes_alloc_below_bytes_req" {
                let _ = write!(out, ", bytes_req {q} bytes_alloc {b}");
            }
        }
        out.push('\n');
    }
    for (label, sites) in [
        ("alloc sites", &f.top_alloc_callsites),
        ("free sites", &f.top_free_callsites),
    ] {
        if !sites.is_empty() {
            let v: Vec<String> = sites
                .iter()
                .map(|x| format!("{} ({})", x.callsite, thousands(x.count)))
                .collect();
            let _ = writeln!(out, "    top {label}: {}", v.join(", "));
        }
    }
    if !f.cache_pairs.is_empty() {
        let v: Vec<String> = f
            .cache_pairs
            .iter()
            .map(|(a, b, n)| format!("{a} -> {b} ({})", thousands(*n)))
            .collect();
        let _ = writeln!(out, "    caches (alloc -> free): {}", v.join(", "));
    }
}

/// The leak table: objects still live at the end, by call site.
fn leaks_section(out: &mut String, l: &Leaks, s: &Sections) {
    let _ = writeln!(
        out,
        "\nLEAKS (objects still live at the end{}): {} objects, {} bytes in {} call sites{}{}",
        if l.min_age_ns > 0 {
            format!(", {} old or more", age(l.min_age_ns))
        } else {
            String::new()
        },
        thousands(l.objects),
        thousands(l.bytes),
        thousands(l.groups_total as u64),
        if l.freed_untraced > 0 {
            format!(
                "; besides, {} objects ({} bytes) whose free may have been untraced",
                thousands(l.freed_untraced),
                thousands(l.freed_untraced_bytes)
            )
        } else {
            String::new()
        },
        if l.uncertain > 0 {
            format!(
                "; {} uncertain (events were lost after their allocation)",
                thousands(l.uncertain)
            )
        } else {
            String::new()
        }
    );
    if !l.groups.is_empty() {
        let mut t = Table::new(&[
            "Callsite",
            "Objects",
            "Bytes",
            "Oldest age",
            "Newest age",
            "Uncertain",
            "Missed frees",
            "Freed untraced?",
            "Oldest object",
        ]);
        t.left_last = true;
        for g in l.groups.iter().take(s.lines) {
            t.row(vec![
                g.callsite.clone(),
                thousands(g.objects),
                thousands(g.bytes),
                g.oldest_age_ns.map_or_else(|| "-".into(), age),
                g.newest_age_ns.map_or_else(|| "-".into(), age),
                thousands(g.uncertain),
                thousands(g.site_missed_frees),
                thousands(g.freed_untraced),
                g.examples
                    .first()
                    .map(|e| format!("{} (CPU {})", e.ptr, e.cpu))
                    .unwrap_or_default(),
            ]);
        }
        t.render(out);
        if l.groups.iter().any(|g| g.site_missed_frees > 0) {
            let _ = writeln!(
                out,
                " Missed frees: the site's objects whose free the trace never showed. Freed untraced?: live objects, not counted as leaks, of a site with missed frees or of a cache whose frees the trace misses (kfree_rcu's kfree_bulk, kmem_cache_free_bulk, sheaves)."
            );
        }
    }
}

/// The trace-completeness table: caches whose traffic the trace shows
/// only in part.
fn completeness(o: &mut String, c: &kmemtrace_analysis::model::TraceCompleteness, lines: usize) {
    if c.pid_filtered {
        let _ = writeln!(
            o,
            "\nTRACE COMPLETENESS: recorded with a pid filter; other tasks' events (RCU callbacks, interrupts and workers run beside the traced ones included) are not in the trace"
        );
    }
    if !c.unrecorded_tasks.is_empty() {
        let v: Vec<String> = c
            .unrecorded_tasks
            .iter()
            .map(|t| match &t.comm {
                Some(n) => format!("{n} {} ({}x)", t.pid, t.switched_in_from_idle),
                None => format!("pid {} ({}x)", t.pid, t.switched_in_from_idle),
            })
            .collect();
        let _ = writeln!(
            o,
            "\nTRACE COMPLETENESS: the kernel recorded no event of {} task(s) that ran (switched to from idle): {}; what they allocate and free is missing from the trace",
            v.len(),
            v.join(", ")
        );
    }
    if c.groups.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\nTRACE COMPLETENESS (allocations and frees the kernel did not trace, as the capture shows them; see JSON.md)"
    );
    let mut t = Table::new(&[
        "Cache",
        "Unseen frees",
        "Freed again",
        "Again twice",
        "Live returned",
        "Shows untraced",
    ]);
    t.left_last = true;
    for g in c.groups.iter().take(lines) {
        let allocs = if g.freed_again_twice > 0 {
            "allocations"
        } else {
            "allocations (or before the capture)"
        };
        let shows: Vec<&str> = [(g.untraced_allocs, allocs), (g.untraced_frees, "frees")]
            .iter()
            .filter(|(b, _)| *b)
            .map(|(_, w)| *w)
            .collect();
        t.row(vec![
            g.cache.clone(),
            thousands(g.unseen_frees),
            thousands(g.freed_again),
            thousands(g.freed_again_twice),
            thousands(g.live_returned),
            shows.join(", "),
        ]);
    }
    t.render(o);
}

/// The filters the report was made with, one phrase each (the text's
/// `filters:` line, the HTML's).
pub fn filter_list(r: &Report) -> Vec<String> {
    let f = &r.filters;
    let mut fl = Vec::new();
    if let Some(c) = &f.cpus {
        fl.push(format!(
            "cpu {}",
            c.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    match (&f.traced_tasks, &f.pids) {
        (Some(t), _) => fl.push(format!(
            "the recording's traced tasks (pid {} and {} descendants; other tasks' events left out, --all-tasks keeps them)",
            t.asked
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            t.tasks.saturating_sub(t.asked.len() as u64)
        )),
        (None, Some(p)) => fl.push(format!("{} pids", p.len())),
        (None, None) => {}
    }
    if let Some(c) = &f.comm {
        fl.push(format!("comm {c}"));
    }
    if let (Some(a), Some(b)) = (f.time_start_ns, f.time_end_ns) {
        fl.push(format!("time {}..{}", secs(a), secs(b)));
    }
    if let Some(c) = &f.callsite {
        // Slab call sites are the events' own; page call sites come from
        // stacks, and --callsite does not select pages.
        fl.push(format!("callsite {c} (slab events only)"));
    }
    fl
}

/// How the capture ended, as the log says: complete only with its END
/// block and nothing damaged before it.
pub fn capture_end(r: &Report) -> String {
    match (&r.input.end_reason, &r.input.truncated) {
        (Some(e), _) if r.problems.is_empty() => format!("complete ({e})"),
        (Some(e), _) => format!("ended ({e}) but damaged"),
        (None, Some(_)) => "cut short (no END block)".to_string(),
        (None, None) => "no END block".to_string(),
    }
}

/// The call sites' source lines (`--vmlinux`), as many as three tables'
/// rows; those the debug info does not cover counted, not listed.
fn sources_section(out: &mut String, r: &Report, s: &Sections) {
    let Some(src) = &r.sources else { return };
    let _ = writeln!(out, "\nSOURCE LINES (from {})", src.debug_info);
    let (known, unknown): (Vec<_>, Vec<_>) =
        src.callsites.iter().partition(|c| !c.frames.is_empty());
    let shown = s.lines.saturating_mul(3);
    for row in known.iter().take(shown) {
        let _ = writeln!(out, "{}:", row.callsite);
        for l in kmemtrace_analysis::debuginfo::chain_lines(&row.frames) {
            let _ = writeln!(out, "  {l}");
        }
    }
    if known.len() > shown {
        let _ = writeln!(out, "  ... {} more (see --json)", known.len() - shown);
    }
    if !unknown.is_empty() {
        let _ = writeln!(
            out,
            "{} call sites outside the debug info (a module's code, or another build of the kernel)",
            thousands(unknown.len() as u64)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(signed(-1234), "-1,234");
        assert_eq!(secs(4_449_503_360), "4.449503");
        assert_eq!(secs(4_449_503_500), "4.449504");
    }
}
