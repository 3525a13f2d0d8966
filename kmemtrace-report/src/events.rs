//! `--events`: every recorded event, in time order across CPUs, printed
//! as the recorded kernel's own `trace` file prints it (kernel/trace/
//! trace_output.c): the context (`comm-pid [cpu] flags time:`), the event's
//! name and its print fmt applied to its fields, stacks as `<stack trace>`
//! with ` => function` lines.
//!
//! ftrace's own entries (system `ftrace`: `print`, `raw_data`, `bputs`,
//! ...) the kernel prints with functions of their own, without the name:
//! a write to `trace_marker` (`print`) is `tracing_mark_write: TEXT`, the
//! text as written with the newline the kernel ends it with; one to
//! `trace_marker_raw` (`raw_data`) is `# ID buf: xx xx ...`, every byte of
//! the record after the id. The others print their print fmt, without the
//! name (`bputs` and `bprint` point at strings in the kernel's memory: `?`).
//!
//! Losses are the loss windows `kmemtrace-check` and the report name
//! (`kmemtrace_kernel::LossTracker`, fed by the walker). Where a
//! CPU lost records before its first one in the log (the kernel's buffer
//! had overrun before it was read, the case of a `trace` file read after
//! an overflow, or the CPU's first blocks are missing from the log), every
//! CPU's first record but the listing's first has the `trace` file's
//! `##### CPU N buffer started ####` before it, and the header counts the
//! lost records as written; records lost later (while recording) are
//! marked before the first record after them as `trace_pipe` marks them,
//! `CPU:N [LOST n EVENTS]` (`CPU:N [LOST EVENTS]` where the number is not
//! known).

use kmemtrace_analysis::filter::{glob, Filter};
use kmemtrace_analysis::in_order::{for_each_record, Lost, Record};
use kmemtrace_analysis::Symbols;
use kmemtrace_cli::exit;
use kmemtrace_import::log::Log;
use kmemtrace_import::stacks::StackReader;
use kmemtrace_kernel::print_fmt::{Kernel, PrintFmt};
use kmemtrace_kernel::{Endian, EventFormat, Field, RunTimeEndian};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;

/// `--event` patterns: `name`, `system:name`, globs of either.
pub fn event_selected(patterns: &[String], f: &EventFormat) -> bool {
    patterns.is_empty()
        || patterns.iter().any(|p| {
            let full = format!("{}:{}", f.system, f.name);
            let target = if p.contains(':') { &full } else { &f.name };
            glob(p.as_bytes(), target.as_bytes())
        })
}

/// The five latency columns (`d.s.1`) for an event's flags and preempt
/// count; `lazy` says bit 1 is the lazy-resched flag (kernels from 6.13).
pub fn lat_fmt(flags: u8, preempt: u8, lazy: bool) -> [u8; 5] {
    use kmemtrace_kernel::event_format::trace_flags::*;
    let bh_off = flags & BH_OFF != 0;
    let irqs_off = flags & IRQS_OFF != 0;
    let c0 = match (irqs_off, bh_off) {
        (true, true) => b'D',
        (true, false) => b'd',
        (false, true) => b'b',
        _ if !lazy && flags & BIT1 != 0 => b'X',
        _ => b'.',
    };
    let need = flags & NEED_RESCHED != 0;
    let preempt_resched = flags & PREEMPT_RESCHED != 0;
    let lazy_bit = lazy && flags & BIT1 != 0;
    let c1 = match (need, lazy_bit, preempt_resched) {
        (true, true, true) => b'B',
        (true, false, true) => b'N',
        (false, true, true) => b'L',
        (true, true, false) => b'b',
        (true, false, false) => b'n',
        (false, false, true) => b'p',
        (false, true, false) => b'l',
        (false, false, false) => b'.',
    };
    let (nmi, hard, soft) = (flags & NMI != 0, flags & HARDIRQ != 0, flags & SOFTIRQ != 0);
    let c2 = match (nmi, hard, soft) {
        (true, true, _) => b'Z',
        (true, false, _) => b'z',
        (false, true, true) => b'H',
        (false, true, false) => b'h',
        (false, false, true) => b's',
        _ => b'.',
    };
    let hex = |n: u8| {
        if n == 0 {
            b'.'
        } else {
            b"0123456789abcdef"[usize::from(n)]
        }
    };
    [c0, c1, c2, hex(preempt & 0xf), hex(preempt >> 4)]
}

/// Whether the kernel's `common_flags` bit 1 means lazy resched: from
/// Linux 6.13 (`release` as `uname -r` prints it).
pub fn lazy_resched_bit(release: Option<&str>) -> bool {
    release
        .and_then(kmemtrace_analysis::build::kernel_version)
        .is_none_or(|v| v >= (6, 13))
}

pub use kmemtrace_format::arch::clock_in_ns;

/// The `trace` file's header, with the entry counts given.
pub fn header(out: &mut String, in_buffer: u64, written: u64, cpus: u32) {
    let _ = write!(
        out,
        "# tracer: nop\n#\n# entries-in-buffer/entries-written: {in_buffer}/{written}   #P:{cpus}\n#\n"
    );
    out.push_str(
        "#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
",
    );
}

/// An event type, ready to print.
struct Kind<'a> {
    format: &'a EventFormat,
    print: PrintFmt,
    shape: Shape,
    selected: bool,
    /// `common_pid`, `common_flags`, `common_preempt_count`, looked up
    /// once.
    common: [Option<Field>; 3],
}

/// How the kernel's `trace` file prints an event type.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    /// A trace event (`TRACE_EVENT()`): `name: ` and its print fmt.
    Named,
    /// One of ftrace's own entries (kernel/trace/trace_entries.h, system
    /// `ftrace`), printed by a function of its own without the name: here
    /// its print fmt.
    Ftrace,
    /// `print` (`trace_print_print()`): `ip: buf`, the ip as
    /// `seq_print_ip_sym()` prints it, `buf` with its own newline.
    Print { ip: Field, buf: Field },
    /// `raw_data` (`trace_raw_data()`): `# %x buf:` and ` %02x` for each
    /// byte of the record from `buf` on.
    RawData { id: Field, buf: Field },
}

impl Shape {
    fn of(f: &EventFormat) -> Shape {
        if f.system != "ftrace" {
            return Shape::Named;
        }
        let field = |n: &str| f.fields.iter().find(|x| x.name == n).cloned();
        let tail = |n: &str| field(n).filter(Field::runs_to_end);
        match f.name.as_str() {
            "print" => match (field("ip"), tail("buf")) {
                (Some(ip), Some(buf)) => Shape::Print { ip, buf },
                _ => Shape::Ftrace,
            },
            "raw_data" => match (field("id"), tail("buf")) {
                (Some(id), Some(buf)) => Shape::RawData { id, buf },
                _ => Shape::Ftrace,
            },
            _ => Shape::Ftrace,
        }
    }
}

/// What `--events` prints from.
pub struct Listing<'a> {
    pub log: &'a Log,
    pub symbols: &'a Symbols,
    pub filter: &'a Filter,
    /// `--event` patterns.
    pub events: &'a [String],
}

struct Printer<'a> {
    log: &'a Log,
    kinds: HashMap<u32, Kind<'a>>,
    stacks: Option<StackReader>,
    kernel: Kernel<'a>,
    lazy: bool,
    in_ns: bool,
    /// Per CPU: whether its last record was printed (a stack goes with the
    /// event it was taken for).
    last_printed: HashMap<u32, bool>,
    /// No `--event` given: a stack that is its CPU's first record (its
    /// event fell before the capture) is printed, as trace-cmd does.
    every_event: bool,
    /// Whether CPUs lost records before their first (see the module's
    /// comment); the CPUs whose first record was printed.
    annotate: bool,
    started: std::collections::HashSet<u32>,
    printed: u64,
    /// The event types printed.
    shown: std::collections::HashSet<u32>,
}

impl Listing<'_> {
    /// Prints the listing to `w`; returns the number of events printed and
    /// what could not be printed of them: (event, why) for each conversion
    /// that never has a value (`kmem/mm_page_alloc`, `` `page=`: reads
    /// `mem_map` ``...), for [`limits_once`].
    pub fn run(&self, w: &mut dyn Write) -> std::io::Result<(u64, Vec<(String, String)>)> {
        let log = self.log;
        let kinds = log
            .formats
            .iter()
            .map(|f| {
                let kind = Kind {
                    format: f,
                    print: PrintFmt::compile(&f.print_fmt),
                    shape: Shape::of(f),
                    selected: event_selected(self.events, f),
                    common: ["common_pid", "common_flags", "common_preempt_count"]
                        .map(|n| f.field(n).cloned()),
                };
                (f.id, kind)
            })
            .collect();
        let mut p = Printer {
            log,
            kinds,
            stacks: StackReader::new(log),
            kernel: Kernel {
                long_bits: log.arch.long_size.saturating_mul(8),
                symbols: if self.symbols.raw {
                    None
                } else {
                    self.symbols.table.as_ref()
                },
            },
            lazy: lazy_resched_bit(log.arch.release.as_deref()),
            in_ns: clock_in_ns(log.arch.trace_clock.as_deref()),
            last_printed: HashMap::new(),
            every_event: self.events.is_empty(),
            annotate: false,
            started: Default::default(),
            printed: 0,
            shown: Default::default(),
        };
        let (in_buffer, lost, lost_at_start) = totals(log);
        p.annotate = lost_at_start;
        let mut out = String::with_capacity(1 << 16);
        let cpus = log.arch.nr_cpus.unwrap_or(log.cpus().len() as u32);
        header(&mut out, in_buffer, in_buffer + lost, cpus);
        let mut result = Ok(());
        let filter = self.filter;
        for_each_record(
            log,
            |cpu| filter.cpus.as_ref().is_none_or(|s| s.contains(&cpu)),
            |r| {
                if result.is_err() {
                    return;
                }
                if p.record(&mut out, &r, filter) {
                    p.printed += 1;
                }
                if out.len() > 1 << 16 {
                    result = w.write_all(out.as_bytes());
                    out.clear();
                }
            },
        );
        result?;
        w.write_all(out.as_bytes())?;
        let mut limits = Vec::new();
        let mut ids: Vec<&u32> = p.shown.iter().collect();
        ids.sort();
        for id in ids {
            if let Some(k) = p.kinds.get(id) {
                if !matches!(k.shape, Shape::Named | Shape::Ftrace) {
                    continue; // Printed without the print fmt.
                }
                let name = k.format.full_name();
                for why in k.print.unevaluated() {
                    limits.push((name.clone(), why.to_string()));
                }
            }
        }
        Ok((p.printed, limits))
    }
}

/// The lines that say what [`Listing::run`] printed as `?`: one per
/// reason, naming the events it applies to (the page events share one).
pub fn limits_once(limits: &[(String, String)]) -> Vec<String> {
    // In the order first met; each reason found through an index, not a
    // search of those before it (one per field label: many in a format).
    let mut by_why: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (event, why) in limits {
        let i = *at.entry(why).or_insert_with(|| {
            by_why.push((why, Vec::new()));
            by_why.len() - 1
        });
        by_why[i].1.push(event);
    }
    by_why
        .into_iter()
        .map(|(why, events)| format!("{why}; printed as `?` in {}", events.join(", ")))
        .collect()
}

/// The records in the log and those it knows were lost (the kernel's
/// `entries-in-buffer` and the difference to `entries-written`), and
/// whether some CPU lost records before its first.
fn totals(log: &Log) -> (u64, u64, bool) {
    let (mut records, mut lost) = (0u64, 0u64);
    let mut seen = std::collections::HashSet::new();
    let mut lost_at_start = false;
    for_each_record(
        log,
        |_| true,
        |r| {
            records += 1;
            if let Some(Lost::Count(n)) = r.lost_before {
                lost = lost.saturating_add(n);
            }
            if seen.insert(r.cpu) && r.lost_before.is_some() {
                lost_at_start = true;
            }
        },
    );
    let ends = log.last_stats_by_cpu(kmemtrace_format::records::StatsPhase::End);
    let overruns: u64 = log
        .cpus()
        .into_iter()
        .filter_map(|c| {
            ends.get(&c)
                .and_then(|s| s.parsed.as_ref())
                .and_then(|s| s.overrun)
        })
        .sum();
    (records, lost.max(overruns), lost_at_start)
}

impl Printer<'_> {
    /// Prints one record if the filters select it; true if printed.
    fn record(&mut self, out: &mut String, r: &Record<'_>, filter: &Filter) -> bool {
        match self.log.endian {
            RunTimeEndian::Little => self.record_in(kmemtrace_kernel::LittleEndian, out, r, filter),
            RunTimeEndian::Big => self.record_in(kmemtrace_kernel::BigEndian, out, r, filter),
        }
    }

    fn record_in<E: Endian>(
        &mut self,
        e: E,
        out: &mut String,
        r: &Record<'_>,
        filter: &Filter,
    ) -> bool {
        let id = e.read_uint(r.payload, 0, 2).unwrap_or(0) as u32;
        let kind = self.kinds.get(&id);
        let [pid, flags, preempt] = kind.map_or([0; 3], |k| {
            k.common.each_ref().map(|f| {
                f.as_ref()
                    .and_then(|f| f.read_i64(e, r.payload))
                    .unwrap_or(0)
            })
        });
        let pid = pid as i32;
        let stack = self.stacks.as_ref().and_then(|s| s.read(e, r.payload));
        let in_interrupt =
            flags as u8 & kmemtrace_kernel::event_format::trace_flags::INTERRUPT != 0;
        let selected = filter.in_time(r.ts)
            && filter.cpu_pid(r.cpu, pid)
            && filter.workload(pid, in_interrupt)
            && if stack.is_some() {
                self.last_printed
                    .get(&r.cpu)
                    .copied()
                    .unwrap_or(self.every_event)
            } else {
                kind.is_none_or(|k| k.selected)
            };
        self.last_printed.insert(r.cpu, selected);
        if !selected {
            return false;
        }
        let lost_before = if self.started.insert(r.cpu) {
            if self.annotate && self.printed > 0 {
                let _ = writeln!(out, "##### CPU {} buffer started ####", r.cpu);
            }
            None
        } else {
            r.lost_before
        };
        if let Some(l) = lost_before {
            match l {
                Lost::Count(n) => {
                    let _ = writeln!(out, "CPU:{} [LOST {n} EVENTS]", r.cpu);
                }
                Lost::Unknown => {
                    let _ = writeln!(out, "CPU:{} [LOST EVENTS]", r.cpu);
                }
            }
        }
        self.context(out, r, pid, flags as u8, preempt as u8);
        match (kind, stack) {
            (_, Some(st)) => {
                out.push_str("<stack trace>\n");
                for ip in st.frames() {
                    out.push_str(" => ");
                    self.ip_sym(out, ip);
                    out.push('\n');
                }
            }
            (Some(k), None) => {
                self.shown.insert(id);
                match &k.shape {
                    Shape::Named => {
                        out.push_str(&k.format.name);
                        out.push_str(": ");
                        k.print.write(out, e, k.format, r.payload, &self.kernel);
                        out.push('\n');
                    }
                    Shape::Ftrace => {
                        k.print.write(out, e, k.format, r.payload, &self.kernel);
                        out.push('\n');
                    }
                    Shape::Print { ip, buf } => {
                        self.ip_sym(out, ip.read_u64(e, r.payload).unwrap_or(0));
                        out.push_str(": ");
                        let text = buf.read_bytes(e, r.payload).unwrap_or_default();
                        out.push_str(&String::from_utf8_lossy(text));
                        // The kernel ends a marker's text with a newline
                        // where it has none; a `print` from trace_printk()
                        // may lack one, which the kernel's text then runs on
                        // from, where this listing keeps one line an event.
                        if !out.ends_with('\n') {
                            out.push('\n');
                        }
                    }
                    Shape::RawData { id, buf } => {
                        let id = id.read_u64(e, r.payload).unwrap_or(0) as u32;
                        let _ = write!(out, "# {id:x} buf:");
                        for b in buf.read_raw_bytes(e, r.payload).unwrap_or_default() {
                            let _ = write!(out, " {b:02x}");
                        }
                        out.push('\n');
                    }
                }
            }
            (None, _) => {
                let _ = writeln!(out, "Unknown type {id}");
            }
        }
        true
    }

    /// `trace_print_context()`: `%16s-%-7d [%03d] lat %5lu.%06lu: `.
    fn context(&self, out: &mut String, r: &Record<'_>, pid: i32, flags: u8, preempt: u8) {
        let comm = match pid {
            0 => "<idle>",
            p if p < 0 => "<XXX>",
            p => self.log.pids.comm(p).unwrap_or("<...>"),
        };
        let lat = lat_fmt(flags, preempt, self.lazy);
        let _ = write!(
            out,
            "{comm:>16}-{pid:<7} [{:03}] {} ",
            r.cpu,
            std::str::from_utf8(&lat).unwrap_or(".....")
        );
        if self.in_ns {
            // ns2usecs() rounds to the nearest microsecond.
            let us = r.ts.saturating_add(500) / 1000;
            let _ = write!(out, "{:5}.{:06}: ", us / 1_000_000, us % 1_000_000);
        } else {
            let _ = write!(out, "{:12}: ", r.ts);
        }
    }

    /// `seq_print_ip_sym()` without the sym-offset option: the function's
    /// name, `0` for a zero address, `0x%08lx` without a symbol.
    fn ip_sym(&self, out: &mut String, ip: u64) {
        if ip == 0 {
            out.push('0');
            return;
        }
        match self.kernel.symbols.and_then(|s| s.resolve(ip)) {
            Some(s) => out.push_str(s.name),
            None => {
                let _ = write!(out, "0x{ip:08x}");
            }
        }
    }
}

/// `--events`: the listing instead of a report.
pub fn list_events(
    cli: &crate::cli::Cli,
    log: &Log,
    symbols: &Symbols,
    filter: &Filter,
) -> Result<exit::Code, crate::Stop> {
    for p in &cli.event {
        if !log
            .formats
            .iter()
            .any(|f| event_selected(std::slice::from_ref(p), f))
        {
            let known: Vec<&str> = log.formats.iter().map(|f| f.name.as_str()).collect();
            return Err(crate::usage(format!(
                "--event {p}: no such event in the log (it has: {})",
                known.join(", ")
            )));
        }
    }
    let listing = Listing {
        log,
        symbols,
        filter,
        events: &cli.event,
    };
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let (printed, limits) = match listing
        .run(&mut stdout)
        .and_then(|r| stdout.flush().map(|_| r))
    {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
        Err(e) => return Err((exit::OUTPUT, format!("writing the events: {e}"))),
    };
    if printed == 0 && !cli.pid.is_empty() {
        return Err(crate::usage(format!(
            "--pid: no event of the log is by these tasks ({})",
            crate::input::tasks_in(log)
        )));
    }
    if !cli.quiet {
        for l in limits_once(&limits) {
            eprintln!("kmemtrace-report: {l}");
        }
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(flags: u8, preempt: u8, lazy: bool) -> String {
        String::from_utf8(lat_fmt(flags, preempt, lazy).to_vec()).unwrap()
    }

    #[test]
    fn limits_are_grouped_by_reason_in_the_order_met() {
        let l = |e: &str, w: &str| (e.to_string(), w.to_string());
        let limits = [l("a", "x"), l("b", "y"), l("c", "x")];
        assert_eq!(
            limits_once(&limits),
            ["x; printed as `?` in a, c", "y; printed as `?` in b"]
        );
    }

    #[test]
    fn latency_columns_as_trace_print_lat_fmt() {
        assert_eq!(lat(0, 0, true), ".....");
        assert_eq!(lat(0x01, 1, true), "d..1.");
        assert_eq!(lat(0x81, 0, true), "D....");
        assert_eq!(lat(0x80, 0, true), "b....");
        assert_eq!(lat(0x04 | 0x10, 0x12, true), ".ns21");
        assert_eq!(lat(0x08 | 0x10, 0, true), "..H..");
        assert_eq!(lat(0x40 | 0x08, 0, true), "..Z..");
        assert_eq!(lat(0x04 | 0x20, 0, true), ".N...");
        // Bit 1: lazy resched from 6.13, "no irq-flags support" before.
        assert_eq!(lat(0x02 | 0x04, 0, true), ".b...");
        assert_eq!(lat(0x02 | 0x04, 0, false), "Xn...");
        assert!(lazy_resched_bit(Some("6.18.0-1-amd64")));
        assert!(!lazy_resched_bit(Some("6.1.0-50-armmp-lpae")));
        assert!(!lazy_resched_bit(Some("5.15.0")));
    }

    #[test]
    fn clocks_that_count_nanoseconds() {
        assert!(clock_in_ns(Some("local")) && clock_in_ns(Some("mono")) && clock_in_ns(None));
        assert!(!clock_in_ns(Some("counter")) && !clock_in_ns(Some("x86-tsc")));
    }
}
