//! A real capture of this kernel: a private tracefs instance records the
//! slab events of a small workload; the kernel's own text rendering of the
//! buffer (`trace`, read without consuming) is saved, then every CPU's
//! `trace_pipe_raw` is drained into a log. The per-callsite totals of
//! kmemtrace-report on that log, and its page figures (order x
//! migratetype, frees, per-CPU lists), must equal those read from the text.

use crate::raw::{text_totals, TextTotals};
use crate::{common, report_json, temp_log};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_import::stacks;
use kmemtrace_kernel::{HeaderPage, RunTimeEndian};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const EVENTS: [&str; 8] = [
    "kmalloc",
    "kfree",
    "kmem_cache_alloc",
    "kmem_cache_free",
    "mm_page_alloc",
    "mm_page_free",
    "mm_page_alloc_zone_locked",
    "mm_page_pcpu_drain",
];

/// Where the instance has the kernel take a stack with each page
/// allocation, as kmemtraced does.
const STACK_TRIGGER_FILE: &str = "events/kmem/mm_page_alloc/trigger";

/// Removes the instance however the test ends.
struct Instance(PathBuf);
impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("tracing_on"), "0");
        let _ = std::fs::write(self.0.join(STACK_TRIGGER_FILE), "!stacktrace");
        for e in EVENTS {
            let _ = std::fs::write(self.0.join(format!("events/kmem/{e}/enable")), "0");
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

pub(crate) fn drain(path: &Path, page: usize) -> Vec<u8> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_nonblock())
        .open(path)
        .unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; page];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // trace_pipe_raw hands out whole sub-buffers.
                buf[n..].fill(0);
                out.extend_from_slice(&buf);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("reading {}: {e}", path.display()),
        }
    }
    out
}

/// Reads a tracefs file with one large read per call: tracefs text files
/// (header_page) come out cut when read in small pieces, as
/// `read_to_string`'s first 32-byte probe does.
pub(crate) fn read_tracefs(path: &Path) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("reading {}: {e}", path.display()),
        }
    }
}

fn libc_o_nonblock() -> i32 {
    0o4000 // O_NONBLOCK on Linux (all architectures this runs on)
}

pub(crate) fn format_id(f: &[u8]) -> u32 {
    String::from_utf8_lossy(f)
        .lines()
        .find_map(|l| l.strip_prefix("ID: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Records the workload in a private instance; returns (log bytes, text).
fn capture(tracefs: &Path) -> Option<(Vec<u8>, String)> {
    let inst = tracefs.join(format!("instances/kmt-report-test-{}", std::process::id()));
    if std::fs::create_dir(&inst).is_err() {
        common::skip(
            "live capture",
            common::Missing::Tracefs,
            &format!("cannot create {}", inst.display()),
        );
        return None;
    }
    let inst = Instance(inst);
    let d = &inst.0;
    std::fs::write(d.join("tracing_on"), "0").unwrap();
    std::fs::write(d.join("buffer_size_kb"), "16384").unwrap();
    for e in EVENTS {
        std::fs::write(d.join(format!("events/kmem/{e}/enable")), "1").unwrap();
    }
    std::fs::write(d.join(STACK_TRIGGER_FILE), "stacktrace").unwrap();
    std::fs::write(d.join("tracing_on"), "1").unwrap();
    let st = std::process::Command::new("sh")
        .args([
            "-c",
            "for i in 1 2 3 4 5 6 7 8 9 10; do ls -l /proc/self/ > /dev/null; cat /proc/meminfo > /dev/null; echo x | cat > /dev/null; done",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(d.join("tracing_on"), "0").unwrap();
    let text = String::from_utf8_lossy(&read_tracefs(&d.join("trace"))).into_owned();

    let hp_text =
        String::from_utf8_lossy(&read_tracefs(&d.join("events/header_page"))).into_owned();
    let hp = HeaderPage::parse(&hp_text).unwrap();
    let long = hp.long_size();
    let sb = hp.subbuf_size();
    let mut arch = ArchTag::new(
        if cfg!(target_endian = "big") {
            RunTimeEndian::Big
        } else {
            RunTimeEndian::Little
        },
        long as u8,
        sb as u32,
        (8 + long) as u32,
    );
    let uname = |a: &str| {
        String::from_utf8_lossy(
            &std::process::Command::new("uname")
                .arg(a)
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .to_string()
    };
    arch.release = Some(uname("-r"));
    arch.machine = Some(uname("-m"));
    arch.sysname = Some("Linux".into());
    arch.page_size = Some(4096);
    let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
    w.write_meta(&Meta::new(MetaKind::HeaderPage, hp_text.clone()))
        .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::HeaderEvent,
        read_tracefs(&d.join("events/header_event")),
    ))
    .unwrap();
    for e in EVENTS {
        let f = read_tracefs(&d.join(format!("events/kmem/{e}/format")));
        w.write_meta(&Meta::event_format("kmem", e, format_id(&f), f))
            .unwrap();
    }
    let f = read_tracefs(&d.join("events/ftrace/kernel_stack/format"));
    w.write_meta(&Meta::event_format(
        "ftrace",
        "kernel_stack",
        format_id(&f),
        f,
    ))
    .unwrap();
    let mut m = Meta::new(MetaKind::Other, stacks::PAGE_STACKS_TEXT);
    m.name = stacks::PAGE_STACKS_META.into();
    w.write_meta(&m).unwrap();
    w.write_meta(&Meta::new(
        MetaKind::Kallsyms,
        read_tracefs(Path::new("/proc/kallsyms")),
    ))
    .unwrap();
    let mut cpu = 0;
    while d.join(format!("per_cpu/cpu{cpu}")).is_dir() {
        let stats =
            String::from_utf8_lossy(&read_tracefs(&d.join(format!("per_cpu/cpu{cpu}/stats"))))
                .into_owned();
        let overrun = stats
            .lines()
            .find_map(|l| l.strip_prefix("overrun: "))
            .unwrap_or("0")
            .trim();
        assert_eq!(overrun, "0", "CPU {cpu} overran: {stats}");
        let data = drain(&d.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")), sb);
        for chunk in data.chunks(64 * sb) {
            w.write_cpu_data(cpu, chunk).unwrap();
        }
        cpu += 1;
    }
    Some((w.finish(None, "test capture", None).unwrap(), text))
}

#[test]
fn live_callsite_totals_equal_the_kernels_text() {
    let Some(tracefs) = common::tracefs_or_skip("live_callsite_totals_equal_the_kernels_text")
    else {
        return;
    };
    if !tracefs.join("events/kmem/kmalloc").is_dir() {
        common::skip(
            "live_callsite_totals_equal_the_kernels_text",
            common::Missing::Tracefs,
            "no kmem events",
        );
        return;
    }
    let Some((log, text)) = capture(&tracefs) else {
        return;
    };
    let want = text_totals(&text);
    let hits: u64 = want.values().map(|t| t.hits).sum();
    assert!(hits > 100, "the workload made only {hits} allocations");
    let f = temp_log(&log);
    let r = report_json(f.path(), &[]);
    let mut got: BTreeMap<String, TextTotals> = BTreeMap::new();
    for c in r["callsites"].as_array().unwrap() {
        got.insert(
            c["callsite"].as_str().unwrap().to_string(),
            TextTotals {
                hits: c["hits"].as_u64().unwrap(),
                bytes_req: c["bytes_req"].as_u64().unwrap(),
                bytes_alloc: c["bytes_alloc"].as_u64().unwrap(),
                free_calls: c["free_calls"].as_u64().unwrap(),
            },
        );
    }
    for (k, w) in &want {
        assert_eq!(got.get(k), Some(w), "call site {k}");
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(r["kernel"]["gfp_table"], true);
    assert_eq!(r["capture"]["lost_windows_total"], 0);
    // This kernel (6.4+) makes kfree() of kmem_cache objects legal.
    let k = crate::finding(&r, "kmem_cache_alloc_freed_by_kfree");
    assert_eq!(k["severity"], "info");
    // The page half: order x migratetype, frees and per-CPU lists equal a
    // count from the kernel's own text of the same events.
    let pages = crate::pages::text_pages(&text);
    assert!(pages.frees > 0, "the workload freed no pages");
    assert_eq!(crate::pages::report_pages(&r), pages);

    // Page call sites: the stacks the kernel printed under each
    // allocation, read per CPU, give the same hits per function.
    let want = text_page_sites(&text);
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for c in r["pages"]["callsites"].as_array().unwrap() {
        let site = c["callsite"].as_str().unwrap();
        let func = site.split('+').next().unwrap().to_string();
        *got.entry(func).or_insert(0) += c["hits"].as_u64().unwrap();
    }
    assert!(want.values().sum::<u64>() > 20, "{want:?}");
    // An allocation made as tracing stopped may miss its stack (the
    // kernel takes it after the event): at most one per CPU, counted in
    // stacks.cut_at_end and shown under "-"; the text has no stack for it.
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let s = &r["pages"]["stacks"];
    let cut = n(&s["cut_at_end"]);
    let cpus = r["capture"]["cpus"].as_array().unwrap().len() as u64;
    assert!(cut <= cpus, "{s}");
    let stackless = got.remove("-").unwrap_or(0);
    assert!(stackless <= cut, "{stackless} without a stack, {s}");
    // Where this reading of the text could not place a stack, the sites
    // may differ by that many hits; else they are equal.
    let unplaced = want.get("<unmatched>").copied().unwrap_or(0);
    if unplaced == 0 {
        assert_eq!(got, want);
    } else {
        let diff: u64 = got
            .iter()
            .map(|(k, &g)| g.abs_diff(want.get(k).copied().unwrap_or(0)))
            .sum();
        assert!(diff <= 2 * unplaced, "{got:?}\n{want:?}");
    }
    // Every other allocation has its stack; a stack the kernel took for an
    // allocation it did not record (as tracing came on) has none.
    let unmatched = n(&s["records"]) - n(&s["matched"]);
    assert!(unmatched <= unplaced, "{s}");
    assert_eq!(unmatched, n(&s["cut_at_start"]), "{s}");
    let requests = n(&r["pages"]["allocations"]["requests"]);
    assert!(requests - n(&s["allocations_with_stack"]) <= cut, "{s}");
}

/// Whether the kernel's text names a frame of the tracing machinery or of
/// the page allocator (`alloc_pages*`, `__alloc_frozen_pages_noprof`,
/// `folio_alloc*`, ... with `_noprof` and leading underscores off).
fn allocator_or_tracing(f: &str) -> bool {
    let b = f.split('.').next().unwrap();
    let b = b
        .strip_suffix("_noprof")
        .unwrap_or(b)
        .trim_start_matches('_');
    f.starts_with("trace_event_raw_event_")
        || [
            "alloc_page",
            "alloc_frozen_page",
            "get_free_page",
            "get_zeroed_page",
            "folio_alloc",
            "vma_alloc_folio",
        ]
        .iter()
        .any(|p| b.starts_with(p))
}

/// Hits per call-site function from the kernel's text: each CPU's
/// `<stack trace>` belongs to its latest allocation still without one,
/// of the same task and context (the flags column's hard/soft interrupt
/// letter); its first frame outside the allocator is the call site.
fn text_page_sites(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    // Per CPU: allocations waiting, as (pid, context letter, got a page).
    let mut waiting: BTreeMap<String, Vec<(String, char, bool)>> = BTreeMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((head, rest)) = line.split_once(": ") else {
            continue;
        };
        let w: Vec<&str> = head.split_whitespace().collect();
        if w.len() < 4 || !w[w.len() - 3].starts_with('[') {
            continue;
        }
        let (task, cpu, flags) = (w[w.len() - 4], w[w.len() - 3], w[w.len() - 2]);
        let ctx = flags.chars().nth(2).unwrap_or('.');
        let pid = task.rsplit('-').next().unwrap().to_string();
        if rest.starts_with("mm_page_alloc: ") {
            // A failed allocation (no page) has its stack too.
            let ok = !rest.contains("pfn=0xffffffff");
            waiting.entry(cpu.into()).or_default().push((pid, ctx, ok));
        } else if rest.starts_with("<stack trace>") {
            let mut frames = Vec::new();
            while let Some(f) = lines.peek().and_then(|l| l.strip_prefix(" => ")) {
                frames.push(f.to_string());
                lines.next();
            }
            let q = waiting.entry(cpu.into()).or_default();
            let Some(i) = q.iter().rposition(|(p, c, _)| *p == pid && *c == ctx) else {
                // The start's mirror of the stop's cut: an event written
                // with tracing off (to the kernel's temporary buffer) whose
                // trigger took its stack after tracing came on.
                eprintln!("text: a stack without its allocation: {line}");
                *out.entry("<unmatched>".to_string()).or_insert(0) += 1;
                continue;
            };
            let ok = q[i].2;
            q.truncate(i);
            if !ok {
                continue;
            }
            let site = frames
                .iter()
                .find(|f| !allocator_or_tracing(f))
                .cloned()
                .unwrap_or_else(|| "-".into());
            *out.entry(site).or_insert(0) += 1;
        }
    }
    out
}
