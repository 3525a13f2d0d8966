//! What a log carries besides the ring-buffer pages: the arch tag, the META
//! files (header_page, header_event, formats, kallsyms, pid→comm, CPU→node
//! map, printk formats, modules) and the per-CPU statistics.
//!
//! pid→comm: the kernel's `saved_cmdlines` is a small ring that forgets
//! (and knows only tasks that were switched while tracing), so the recorder
//! also walks /proc at the start and at the end and writes every live
//! thread as `tid comm` lines (and `tid tgid` lines) in META blocks of the
//! same kinds, which readers merge (FORMAT.md §7.2). The kernel's tables
//! are written every 10 s when they changed and at the end, after the
//! final /proc walk, so for a pid both know, the comm the kernel saw while
//! tracing wins over the one it has now.

use crate::events::Event;
use crate::failure::{Failure, Result};
use crate::sys;
use crate::tracefs::TraceDir;
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::records::{Meta, MetaKind, StatsPhase, StatsRecord};
use kmemtrace_kernel::human::parse_cpu_list;
use kmemtrace_kernel::{CpuStats, HeaderPage, RunTimeEndian};
use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// CLOCK_REALTIME in ns since the epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The sub-buffer layout, from `events/header_page` of the buffer read.
#[derive(Debug, Clone)]
pub struct Layout {
    pub header_page: Vec<u8>,
    pub long_size: u8,
    pub data_offset: u32,
    pub subbuf_size: u32,
}

pub fn layout(dir: &TraceDir) -> Result<Layout> {
    let header_page = dir.read_bytes("events/header_page").map_err(|e| {
        Failure::input(format!(
            "reading {}: {e}",
            dir.file("events/header_page").display()
        ))
    })?;
    let hp = HeaderPage::parse(&String::from_utf8_lossy(&header_page)).map_err(|e| {
        Failure::runtime(format!(
            "this kernel's events/header_page is not understood: {e}"
        ))
    })?;
    Ok(Layout {
        long_size: hp.long_size() as u8,
        data_offset: hp.data_offset() as u32,
        subbuf_size: hp.subbuf_size() as u32,
        header_page,
    })
}

/// CPUs that have a `per_cpu/cpuN` directory (possible CPUs), sorted.
pub fn per_cpu_dirs(dir: &TraceDir) -> Vec<u32> {
    let mut v: Vec<u32> = fs::read_dir(dir.file("per_cpu"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// What the kernel says when, at late_initcall, it finds the scheduler
/// clock unstable and switches the default trace clock to `global`:
/// switching clocks empties the ring buffer, so boot-time events before it
/// are gone (kernel/trace/trace.c `tracing_set_default_clock`).
const CLOCK_SWITCH: &str = "switching default tracing clock";

/// Seconds after boot at which the kernel switched its trace clock (and so
/// emptied the boot-time buffer), from the kernel log (`/dev/kmsg`, read
/// without blocking); `None` if it did not, or the log cannot be read.
pub fn boot_trace_clock_switch() -> Option<f64> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut buf = vec![0u8; 8192];
    // One record per read; EAGAIN at the end. Bounded, whatever happens.
    for _ in 0..1_000_000 {
        match f.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => {
                if let Some(t) = kmsg_clock_switch(&String::from_utf8_lossy(&buf[..n])) {
                    return Some(t);
                }
            }
            // A record overwritten while reading: go on with the next.
            Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    None
}

/// The time of a `/dev/kmsg` record (`prio,seq,usecs,flags;message`) if it
/// is the trace clock switch.
fn kmsg_clock_switch(record: &str) -> Option<f64> {
    let (head, msg) = record.split_once(';')?;
    if !msg.contains(CLOCK_SWITCH) {
        return None;
    }
    let usecs: u64 = head.split(',').nth(2)?.parse().ok()?;
    Some(usecs as f64 / 1e6)
}

pub fn online_cpus_text() -> Option<String> {
    fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .map(|s| s.trim().to_string())
}

/// The CPUs online now (empty if sysfs does not say).
pub fn online_cpus() -> Vec<u32> {
    online_cpus_text()
        .and_then(|t| parse_cpu_list(&t).ok())
        .unwrap_or_default()
}

/// `cpu node` lines from /sys/devices/system/node/node*/cpulist.
pub fn cpu_node_map() -> Vec<u8> {
    let lists = fs::read_dir("/sys/devices/system/node")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let node = name.strip_prefix("node")?.parse::<u32>().ok()?;
            Some((node, fs::read_to_string(e.path().join("cpulist")).ok()?))
        });
    kmemtrace_format::records::cpu_node_map(lists)
}

/// Reads `per_cpu/cpuN/stats` as a STATS record.
pub fn stats_record(dir: &TraceDir, cpu: u32, phase: StatsPhase) -> Option<StatsRecord> {
    let text = dir.read_bytes(&format!("per_cpu/cpu{cpu}/stats")).ok()?;
    Some(StatsRecord {
        cpu,
        phase,
        wall_ns: Some(wall_ns()),
        text,
    })
}

/// Everything the arch tag needs that the caller does not know.
pub struct ArchInput<'a> {
    pub dir: &'a TraceDir,
    pub layout: &'a Layout,
    pub instance: &'a str,
    pub events: &'a [Event],
    pub buffer_size_kb: Option<u32>,
    pub command_line: String,
}

pub fn arch_tag(a: &ArchInput<'_>) -> ArchTag {
    let order = if cfg!(target_endian = "big") {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    };
    let mut t = ArchTag::new(
        order,
        a.layout.long_size,
        a.layout.subbuf_size,
        a.layout.data_offset,
    );
    t.byte_order_source = Some("recording host".into());
    t.page_size = sys::page_size();
    let cpus = per_cpu_dirs(a.dir);
    t.nr_cpus = cpus.last().map(|c| c + 1);
    if let Some([sysname, node, release, version, machine]) = sys::uname() {
        t.sysname = Some(sysname);
        t.hostname = Some(node);
        t.release = Some(release);
        t.version = Some(version);
        t.machine = Some(machine);
    }
    t.trace_clock = a.dir.selected("trace_clock");
    t.start_wall_ns = Some(wall_ns());
    t.start_trace_ns = cpus.first().and_then(|c| {
        let text = a.dir.read_string(&format!("per_cpu/cpu{c}/stats")).ok()?;
        CpuStats::parse(&text).ok()?.now_ts?.ns()
    });
    t.recorder = Some(format!("kmemtraced {}", env!("CARGO_PKG_VERSION")));
    t.command_line = Some(a.command_line.clone());
    t.instance = Some(a.instance.to_string());
    t.buffer_size_kb = a.buffer_size_kb;
    t.events = Some(
        a.events
            .iter()
            .map(|e| e.colon())
            .collect::<Vec<_>>()
            .join(","),
    );
    t.online_cpus = online_cpus_text();
    t
}

/// Shell-quotes a command line for the arch tag.
pub fn shell_quote(args: impl IntoIterator<Item = String>) -> String {
    args.into_iter()
        .map(|a| {
            let safe = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if safe {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The META blocks written once at the start, before any CPU data: the
/// layout files, each event's format, printk formats, the CPU→node map,
/// modules and kallsyms. Files the kernel does not offer are skipped, and
/// named in the returned notes.
pub fn static_metas(
    dir: &TraceDir,
    top: &TraceDir,
    layout: &Layout,
    events: &[Event],
) -> (Vec<Meta>, Vec<String>) {
    let mut metas = Vec::new();
    let mut notes = Vec::new();
    metas.push(Meta::new(MetaKind::HeaderPage, layout.header_page.clone()));
    match dir.read_bytes("events/header_event") {
        Ok(b) => metas.push(Meta::new(MetaKind::HeaderEvent, b)),
        Err(e) => notes.push(format!("events/header_event unreadable: {e}")),
    }
    for ev in events {
        let base = format!("events/{}", ev.path());
        match dir.read_bytes(&format!("{base}/format")) {
            Ok(content) => {
                let id = dir
                    .read_string(&format!("{base}/id"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .or_else(|| kmemtrace_kernel::format_id(&content));
                let mut m = Meta::new(MetaKind::EventFormat, content);
                m.name = ev.path();
                m.id = id;
                metas.push(m);
            }
            Err(e) => notes.push(format!("{base}/format unreadable: {e}")),
        }
    }
    match top.read_bytes("printk_formats") {
        Ok(b) => metas.push(Meta::new(MetaKind::PrintkFormats, b)),
        Err(e) => notes.push(format!("printk_formats unreadable: {e}")),
    }
    metas.push(Meta::new(MetaKind::CpuNodeMap, cpu_node_map()));
    if let Ok(b) = fs::read("/proc/modules") {
        metas.push(Meta::new(MetaKind::Modules, b));
    }
    // The recorded kernel's migratetype names, in enum order, and its
    // pageblock order: they differ between kernels and configurations.
    if let Ok(b) = crate::tracefs::read_whole(Path::new("/proc/pagetypeinfo")) {
        let mut m = Meta::new(MetaKind::Other, b);
        m.name = kmemtrace_import::pagetypes::PAGETYPEINFO_META.into();
        metas.push(m);
    }
    // The reserve the fragmentation advice raises, to put the current
    // value in it.
    if let Ok(b) = fs::read("/proc/sys/vm/min_free_kbytes") {
        let mut m = Meta::new(MetaKind::Other, b);
        m.name = kmemtrace_import::pagetypes::MIN_FREE_KBYTES_META.into();
        metas.push(m);
    }
    // Read with large reads, and trimmed: /proc reports size 0, so the
    // buffer grows by doubling; the slack would only raise the peak RSS.
    match crate::tracefs::read_whole(Path::new("/proc/kallsyms")) {
        Ok(mut b) => {
            b.shrink_to_fit();
            if looks_hidden(&b) {
                notes.push(
                    "kallsyms addresses are hidden (kptr_restrict): call sites will not resolve"
                        .into(),
                );
            }
            metas.extend(kmemtrace_format::records::kallsyms_metas(&b));
        }
        Err(e) => notes.push(format!("/proc/kallsyms unreadable: {e}")),
    }
    (metas, notes)
}

/// Whether every address in a kallsyms text is zero.
fn looks_hidden(k: &[u8]) -> bool {
    k.split(|&b| b == b'\n')
        .take(100)
        .filter(|l| !l.is_empty())
        .all(|l| l.iter().take_while(|&&b| b != b' ').all(|&b| b == b'0'))
}

/// The kernel's `saved_cmdlines` and `saved_tgids`.
pub fn kernel_cmdlines(top: &TraceDir) -> Vec<Meta> {
    let mut v = Vec::new();
    if let Ok(b) = top.read_bytes("saved_cmdlines") {
        v.push(Meta::new(MetaKind::SavedCmdlines, b));
    }
    if let Ok(b) = top.read_bytes("saved_tgids") {
        if !b.is_empty() {
            v.push(Meta::new(MetaKind::SavedTgids, b));
        }
    }
    v
}

/// Every live thread from /proc, as `saved_cmdlines` (`tid comm`) and
/// `saved_tgids` (`tid tgid`) texts.
pub fn proc_cmdlines() -> Vec<Meta> {
    let mut cmd = String::new();
    let mut tgids = String::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    for p in rd.flatten() {
        let Some(tgid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(tasks) = fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(comm) = fs::read_to_string(t.path().join("comm")) {
                cmd.push_str(&format!("{tid} {}\n", comm.trim_end_matches('\n')));
                tgids.push_str(&format!("{tid} {tgid}\n"));
            }
        }
    }
    vec![
        Meta::new(MetaKind::SavedCmdlines, cmd.into_bytes()),
        Meta::new(MetaKind::SavedTgids, tgids.into_bytes()),
    ]
}

#[cfg(test)]
mod tests {

    #[test]
    fn kmsg_trace_clock_switch() {
        let rec = "4,612,2524710,-;Unstable clock detected, switching default tracing clock to \"global\"\n";
        assert_eq!(kmsg_clock_switch(rec), Some(2.52471));
        assert_eq!(
            kmsg_clock_switch("6,1,100,-;clocksource: Switched to clocksource hpet\n"),
            None
        );
        assert_eq!(
            kmsg_clock_switch("garbage switching default tracing clock"),
            None
        );
        // Reading the real kernel log never fails the recorder.
        let _ = boot_trace_clock_switch();
    }

    use super::*;

    #[test]
    fn stats_text() {
        let t = "entries: 5\noverrun: 2\ncommit overrun: 1\nbytes: 0\n\
                 oldest event ts:     0.000000\nnow ts:   877.885123\n\
                 dropped events: 3\nread events: 7\n";
        let s = CpuStats::parse(t).unwrap();
        assert_eq!(s.entries, Some(5));
        assert_eq!(s.lost_events(), 6);
        assert_eq!(s.read_events, Some(7));
        assert_eq!(s.now_ts.and_then(|t| t.ns()), Some(877_885_123_000));
    }

    #[test]
    fn quoting() {
        let q = shell_quote(["kmemtraced", "-o", "a b", "it's"].map(String::from));
        assert_eq!(q, r"kmemtraced -o 'a b' 'it'\''s'");
    }

    #[test]
    fn hidden_kallsyms() {
        assert!(looks_hidden(b"0000000000000000 T _text\n"));
        assert!(!looks_hidden(b"ffffffff81000000 T _text\n"));
    }
}
