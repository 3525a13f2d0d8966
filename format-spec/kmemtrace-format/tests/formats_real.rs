//! The kernel-format decoders against real kernels:
//!
//! - every tracefs `format` file of this machine and of the foreign captures
//!   (`/work/shared/data/{armhf,s390x}`, Linux 6.1) parses, and every GFP
//!   table in them evaluates;
//! - the foreign captures' kmem events, decoded with [`KmemDecoder`] from the
//!   binary sub-buffers, print exactly what the foreign kernel printed in its
//!   own `trace` text: pid and comm (`saved_cmdlines`), `call_site` resolved
//!   through its kallsyms, `ptr`, sizes, GFP flag names, node, accounted,
//!   cache name, pfn, order, migratetype, percpu_refill; the per-CPU `stats`
//!   agree with the event counts;
//! - live, on this machine's kernel (root and tracefs needed): kmem events
//!   recorded in a private tracefs instance decode to what the kernel prints
//!   in that instance's `trace` (GFP names included).
//!
//! Missing data or privileges skip a test with a message on stderr.

#[path = "../../../kmemtrace-kernel/tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use kmemtrace_kernel::{
    parse_subbuf, CpuStats, Endian, EventFormat, FlagTable, HeaderPage, Kallsyms, KmemDecoder,
    KmemEvent, KmemKind, PidMap, RunTimeEndian, SubBufLayout,
};

const TRACEFS: &str = "/sys/kernel/tracing";

/// Reads a tracefs file in one large read per call: this 6.18 kernel's
/// `events/header_page` and `header_event` return only the first chunk to a
/// reader that starts with a small read (as `fs::read_to_string` does with
/// its 32-byte probe).
fn read_tracefs(path: &Path) -> String {
    let mut f = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        assert!(out.len() < 64 << 20, "{}: runaway", path.display());
    }
    String::from_utf8(out).unwrap()
}

fn read_gz(path: &Path) -> String {
    let mut s = String::new();
    flate2::read::GzDecoder::new(fs::File::open(path).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    s
}

/// `events/<system>/<event>/format` files under `events`, with their system.
fn format_files(events: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let Ok(systems) = fs::read_dir(events) else {
        return out;
    };
    for s in systems.flatten() {
        let Ok(evs) = fs::read_dir(s.path()) else {
            continue;
        };
        for e in evs.flatten() {
            let f = e.path().join("format");
            if f.is_file() {
                out.push((s.file_name().to_string_lossy().into_owned(), f));
            }
        }
    }
    out.sort();
    out
}

fn parse_formats(events: &Path) -> Vec<EventFormat> {
    format_files(events)
        .into_iter()
        .map(|(sys, f)| {
            let text = read_tracefs(&f);
            EventFormat::parse(&text, Some(&sys)).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .collect()
}

/// Parses every format under `events`; checks every table on a GFP field
/// and returns (formats, tables read, tables failed).
fn check_all_formats(events: &Path) -> (usize, usize, Vec<String>) {
    let formats = parse_formats(events);
    let mut ok = 0;
    let mut failed = Vec::new();
    for f in &formats {
        for t in FlagTable::find_all(&f.print_fmt) {
            match t {
                Ok(t) => {
                    ok += 1;
                    if t.field.as_deref() == Some("gfp_flags") {
                        assert!(t.entries.len() > 10, "{}/{}: {t:?}", f.system, f.name);
                        assert_eq!(t.value_of("__GFP_ZERO"), Some(0x100), "{}", f.name);
                    }
                }
                Err(e) => {
                    let gfp = e.field.as_deref().is_some_and(|n| n.contains("gfp"));
                    assert!(!gfp, "{}/{}: GFP table unreadable: {e}", f.system, f.name);
                    failed.push(format!("{}/{}: {e}", f.system, f.name));
                }
            }
        }
    }
    (formats.len(), ok, failed)
}

#[test]
fn every_format_parses_here_and_foreign() {
    let here = Path::new(TRACEFS).join("events");
    if here.join("kmem/kmalloc/format").is_file() {
        let (n, ok, failed) = check_all_formats(&here);
        eprintln!(
            "this machine: {n} formats parsed, {ok} flag/symbol tables read, {} not constant (e.g. {:?})",
            failed.len(),
            failed.iter().take(3).collect::<Vec<_>>()
        );
        assert!(n > 100);
    } else {
        common::skip(
            "formats_real (this machine)",
            common::Missing::Tracefs,
            &format!("{TRACEFS}/events/kmem not readable"),
        );
    }
    let Some(d) = common::data_dir("formats_real") else {
        return;
    };
    for arch in ["armhf", "s390x"] {
        for dir in ["raw", "raw_overflow"] {
            let events = d.join(arch).join(dir).join("events");
            let (n, ok, failed) = check_all_formats(&events);
            assert_eq!(n, 29, "{arch}/{dir}: 11 kmem + 18 ftrace formats");
            assert!(failed.is_empty(), "{arch}/{dir}: {failed:?}");
            assert!(ok >= 4, "{arch}/{dir}: {ok} tables");
        }
    }
}

/// The `kernel_stack` formats of the foreign kernels and of this one give
/// the stack reader its entries' offset and size: 4-byte longs at 12 on
/// armhf, 8-byte at 16 on s390x and x86_64.
#[test]
fn kernel_stack_formats() {
    use kmemtrace_import::stacks::StackReader;
    let here = Path::new(TRACEFS).join("events/ftrace/kernel_stack/format");
    let mut cases = Vec::new();
    if here.is_file() {
        cases.push(("this machine".to_string(), read_tracefs(&here), 16, 8));
    }
    if let Some(d) = common::data_dir("formats_real (kernel_stack)") {
        for (arch, off, long) in [("armhf", 12, 4), ("s390x", 16, 8)] {
            let p = d.join(arch).join("raw/events/ftrace/kernel_stack/format");
            cases.push((arch.to_string(), fs::read_to_string(p).unwrap(), off, long));
        }
    }
    for (what, text, off, long) in cases {
        let f = EventFormat::parse(&text, Some("ftrace")).unwrap();
        let r = StackReader::from_format(&f, 0).unwrap();
        assert_eq!(r.layout(), (off, long), "{what}");
    }
}

/// A line of the kernel's `trace` text: cpu, pid, comm, event, fields.
#[derive(Debug)]
struct TextEvent {
    cpu: usize,
    pid: i32,
    comm: String,
    event: String,
    fields: BTreeMap<String, String>,
}

fn parse_trace_line(line: &str) -> Option<TextEvent> {
    if line.starts_with('#') {
        return None;
    }
    // `   comm-pid   [cpu] flags  ts: event: fields`
    let b = line.as_bytes();
    let mut open = None;
    for (i, _) in line.match_indices(" [") {
        let j = i + 2;
        let digits = b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && b.get(j + digits) == Some(&b']') {
            open = Some((i, j, j + digits));
            break;
        }
    }
    let (sp, ds, de) = open?;
    let task = line[..sp].trim();
    let (comm, pid) = task.rsplit_once('-')?;
    let rest = &line[de + 1..];
    // Skip the flags and time stamp: up to the first ": ".
    let (_, after_ts) = rest.split_once(": ")?;
    let (event, body) = after_ts.split_once(": ").unwrap_or((after_ts, ""));
    let mut fields = BTreeMap::new();
    let mut last: Option<String> = None;
    for tok in body.split(' ').filter(|t| !t.is_empty()) {
        match tok.split_once('=') {
            Some((k, v)) if !tok.starts_with('[') => {
                fields.insert(k.to_string(), v.to_string());
                last = Some(k.to_string());
            }
            _ => {
                // `call_site=f+0x1/0x2 [module]`
                let k = last.clone()?;
                let v = fields.get_mut(&k)?;
                v.push(' ');
                v.push_str(tok);
            }
        }
    }
    Some(TextEvent {
        cpu: line[ds..de].parse().ok()?,
        pid: pid.parse().ok()?,
        comm: comm.to_string(),
        event: event.trim().to_string(),
        fields,
    })
}

/// How the kernel of this capture prints things.
struct Printer<'a> {
    kallsyms: Option<&'a Kallsyms>,
    gfp: Option<&'a FlagTable>,
    /// Pointer width in hex digits (`%p` with `no_hash_pointers`); `None`
    /// when pointers are hashed and cannot be compared.
    ptr_digits: Option<usize>,
}

/// The fields of `ev` as the kernel's print fmt prints them (those this
/// test can reproduce: not `page=`, which the kernel derives from its
/// memory map).
fn expected_fields(ev: &KmemEvent<'_>, p: &Printer<'_>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let (Some(k), false) = (p.kallsyms, ev.kind.is_page_event()) {
        out.push(("call_site", k.format(ev.call_site).to_string()));
    }
    let ptr = p.ptr_digits.map(|w| format!("{:0w$x}", ev.ptr, w = w));
    let gfp = || match p.gfp {
        Some(t) => t.decode(ev.gfp_flags).to_string(),
        None => format!("{:#x}", ev.gfp_flags),
    };
    let yes_no = |b: Option<bool>| match b {
        Some(true) => "true".to_string(),
        Some(false) => "false".to_string(),
        None => "?".to_string(),
    };
    let pfn = format!("0x{:x}", ev.pfn.unwrap_or(0));
    match ev.kind {
        KmemKind::Kfree | KmemKind::KmemCacheFree => {
            if let Some(ptr) = ptr {
                out.push(("ptr", ptr));
            }
            if let Some(n) = ev.cache_name {
                out.push(("name", n.to_string()));
            }
        }
        k if k.is_slab_alloc() => {
            if let Some(ptr) = ptr {
                out.push(("ptr", ptr));
            }
            if let Some(n) = ev.cache_name {
                out.push(("name", n.to_string()));
            }
            out.push(("bytes_req", ev.bytes_req.to_string()));
            out.push(("bytes_alloc", ev.bytes_alloc.to_string()));
            out.push(("gfp_flags", gfp()));
            out.push(("node", ev.node.unwrap_or(0).to_string()));
            if ev.accounted.is_some() {
                out.push(("accounted", yes_no(ev.accounted)));
            }
        }
        KmemKind::MmPageAlloc => {
            out.push(("pfn", pfn));
            out.push(("order", ev.order.to_string()));
            out.push(("migratetype", ev.migratetype.unwrap_or(0).to_string()));
            out.push(("gfp_flags", gfp()));
        }
        KmemKind::MmPageFree | KmemKind::MmPageFreeBatched => {
            out.push(("pfn", pfn));
            out.push(("order", ev.order.to_string()));
        }
        KmemKind::MmPageAllocZoneLocked => {
            out.push(("pfn", pfn));
            out.push(("order", ev.order.to_string()));
            out.push(("migratetype", ev.migratetype.unwrap_or(0).to_string()));
            out.push(("percpu_refill", ev.percpu_refill.unwrap_or(0).to_string()));
        }
        KmemKind::MmPagePcpuDrain => {
            out.push(("pfn", pfn));
            out.push(("order", ev.order.to_string()));
            out.push(("migratetype", ev.migratetype.unwrap_or(0).to_string()));
        }
        _ => {
            let x = ev.extfrag.unwrap_or_default();
            out.push(("pfn", pfn));
            out.push(("alloc_order", x.alloc_order.to_string()));
            out.push(("fallback_order", x.fallback_order.to_string()));
        }
    }
    out
}

/// A decoded event: pid, kind, and its fields as the kernel prints them.
type Decoded = (i32, KmemKind, Vec<(&'static str, String)>);

/// Per CPU, the decoded kmem events of concatenated sub-buffers, as
/// (pid, expected fields, kind).
fn decode_cpu<E: Endian>(
    e: E,
    layout: &SubBufLayout,
    raw: &[u8],
    dec: &KmemDecoder,
    p: &Printer<'_>,
) -> Vec<Decoded> {
    let mut out = Vec::new();
    for (i, page) in layout.split(raw).enumerate() {
        let sb = parse_subbuf(e, layout, page).unwrap_or_else(|err| panic!("page {i}: {err}"));
        for r in sb.data_events(e) {
            let (off, _ts, payload) = r.unwrap_or_else(|err| panic!("page {i}: {err}"));
            let ev = dec
                .decode(e, payload)
                .unwrap_or_else(|err| panic!("page {i} offset {off}: {err}"))
                .unwrap_or_else(|| panic!("page {i} offset {off}: not a kmem event"));
            out.push((ev.pid, ev.kind, expected_fields(&ev, p)));
        }
    }
    out
}

/// Compares decoded events with the text lines of one CPU, in order.
/// Returns the set of GFP texts seen.
fn compare_cpu(
    what: &str,
    decoded: &[Decoded],
    text: &[&TextEvent],
    pids: Option<&PidMap>,
    gfp_seen: &mut BTreeSet<String>,
) {
    assert_eq!(decoded.len(), text.len(), "{what}: event count");
    for (i, ((pid, kind, fields), t)) in decoded.iter().zip(text).enumerate() {
        let at = || format!("{what} event {i}: {t:?}");
        assert_eq!(kind.name(), t.event, "{}", at());
        assert_eq!(*pid, t.pid, "{}", at());
        if let Some(pm) = pids {
            let comm = pm.comm(*pid).unwrap_or("<...>");
            assert_eq!(comm, t.comm, "{}: comm of pid {pid}", at());
        }
        for (k, v) in fields {
            let got = t
                .fields
                .get(*k)
                .unwrap_or_else(|| panic!("{}: no {k}=", at()));
            assert_eq!(v, got, "{}: field {k}", at());
            if *k == "gfp_flags" {
                gfp_seen.insert(v.clone());
            }
        }
    }
}

fn endian_of(dir: &Path) -> RunTimeEndian {
    match fs::read_to_string(dir.join("endianness.txt"))
        .unwrap()
        .trim()
    {
        "big" => RunTimeEndian::Big,
        "little" => RunTimeEndian::Little,
        other => panic!("endianness {other:?}"),
    }
}

#[test]
fn foreign_kmem_events_print_like_the_foreign_kernel() {
    let Some(d) = common::data_dir("formats_real") else {
        return;
    };
    for arch in ["armhf", "s390x"] {
        for (dir, text_file) in [
            ("raw", "trace.txt.gz"),
            ("raw_overflow", "trace_overflow.txt.gz"),
        ] {
            let root = d.join(arch).join(dir);
            let what = format!("{arch}/{dir}");
            let e = endian_of(&root);
            let formats = parse_formats(&root.join("events"));
            let dec = KmemDecoder::new(&formats);
            assert!(dec.warnings().is_empty(), "{what}: {:?}", dec.warnings());
            assert_eq!(
                dec.ids().count(),
                10,
                "{what}: kmem events (rss_stat is not one)"
            );
            assert!(
                !dec.has_cache_name(KmemKind::KmemCacheAlloc),
                "6.1 has no name there"
            );
            assert!(dec.has_cache_name(KmemKind::KmemCacheFree));
            let gfp = dec.gfp_table().expect("GFP table");
            assert_eq!(
                gfp.value_of("__GFP_ATOMIC"),
                Some(0x200),
                "6.1 still has it"
            );

            let ks = Kallsyms::parse(&fs::read_to_string(root.join("kallsyms")).unwrap()).unwrap();
            assert!(
                !ks.is_restricted() && ks.len() > 30_000,
                "{what}: {}",
                ks.len()
            );
            let pids = PidMap::parse(
                &fs::read_to_string(root.join("saved_cmdlines.txt")).unwrap(),
                Some(&fs::read_to_string(root.join("saved_tgids.txt")).unwrap()),
            )
            .unwrap();
            let hp =
                HeaderPage::parse(&fs::read_to_string(root.join("events/header_page")).unwrap())
                    .unwrap();
            let layout = SubBufLayout::from_header_page(&hp);
            let printer = Printer {
                kallsyms: Some(&ks),
                gfp: Some(gfp),
                ptr_digits: Some(hp.long_size() * 2),
            };

            let text = read_gz(&d.join(arch).join(text_file));
            let lines: Vec<TextEvent> = text.lines().filter_map(parse_trace_line).collect();
            assert!(!lines.is_empty());
            let mut gfp_seen = BTreeSet::new();
            let mut total = 0;
            let ncpu = 2;
            for cpu in 0..ncpu {
                let cdir = root.join(format!("per_cpu/cpu{cpu}"));
                let raw = fs::read(cdir.join("trace_pipe_raw")).unwrap();
                let decoded = decode_cpu(e, &layout, &raw, &dec, &printer);
                let mine: Vec<&TextEvent> = lines.iter().filter(|t| t.cpu == cpu).collect();
                compare_cpu(
                    &format!("{what} cpu{cpu}"),
                    &decoded,
                    &mine,
                    Some(&pids),
                    &mut gfp_seen,
                );
                let stats =
                    CpuStats::parse(&fs::read_to_string(cdir.join("stats")).unwrap()).unwrap();
                assert_eq!(
                    stats.entries,
                    Some(decoded.len() as u64),
                    "{what} cpu{cpu} stats"
                );
                total += decoded.len();
            }
            assert_eq!(total, lines.len(), "{what}: every text line compared");
            // Every GFP text of the kernel's rendering was reproduced.
            let text_gfp: BTreeSet<String> = lines
                .iter()
                .filter_map(|t| t.fields.get("gfp_flags").cloned())
                .collect();
            assert_eq!(gfp_seen, text_gfp, "{what}");
            eprintln!(
                "{what}: {total} events match the kernel's text; {} GFP combinations: {:?}",
                gfp_seen.len(),
                gfp_seen
            );
        }
    }
}

/// A real boot-time capture of Debian's 6.1 kernel, recorded by
/// `kmemtraced --boot` in a VM beside the kernel's own `trace` text of the
/// same buffer (tests/data/make-boot-capture.sh): every event, field by
/// field, as that kernel printed it.
#[test]
fn boot_capture_of_another_kernel_prints_like_it() {
    use kmemtrace_import::log::{BlockScratch, Log};
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
    let log = Log::open(&data.join("boot-6.1-x86_64.kmt")).unwrap();
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    assert_eq!(log.end.as_ref().unwrap().reason, "boot drain");
    assert_eq!(log.arch.release.as_deref(), Some("6.1.0-56-amd64"));
    let dec = log.kmem_decoder();
    assert!(dec.warnings().is_empty(), "{:?}", dec.warnings());
    assert!(!dec.has_cache_name(KmemKind::KmemCacheAlloc), "6.1");
    let printer = Printer {
        kallsyms: log.kallsyms.as_ref(),
        gfp: dec.gfp_table(),
        // Booted with no_hash_pointers.
        ptr_digits: Some(16),
    };
    assert!(printer.kallsyms.is_some_and(|k| k.len() > 50_000));
    let text = read_gz(&data.join("boot-6.1-x86_64.trace.txt.gz"));
    let lines: Vec<TextEvent> = text.lines().filter_map(parse_trace_line).collect();
    let mut gfp_seen = BTreeSet::new();
    let mut total = 0;
    let mut scratch = BlockScratch::new();
    for cpu in log.cpus() {
        let mut raw = Vec::new();
        for b in log.cpu_blocks(cpu) {
            raw.extend_from_slice(log.read_cpu_block_into(b, &mut scratch).unwrap());
        }
        let decoded = decode_cpu(
            kmemtrace_kernel::LittleEndian,
            &log.layout,
            &raw,
            &dec,
            &printer,
        );
        let mine: Vec<&TextEvent> = lines.iter().filter(|t| t.cpu == cpu as usize).collect();
        compare_cpu(
            &format!("boot 6.1 cpu{cpu}"),
            &decoded,
            &mine,
            None,
            &mut gfp_seen,
        );
        total += decoded.len();
    }
    assert_eq!(total, lines.len(), "every text line compared");
    assert!(total > 100_000, "{total}");
    // The buffer of CPU 1 overflowed during boot: the kernel's header counts
    // the events written and those still there; the log's sub-buffers flag
    // exactly the difference.
    let header = format!("entries-in-buffer/entries-written: {total}/");
    let written: u64 = text
        .lines()
        .find_map(|l| l.split_once(&header).map(|(_, w)| w))
        .and_then(|w| w.split_whitespace().next()?.parse().ok())
        .expect("the kernel's entries header");
    let mut flagged = 0;
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
            |v| {
                let sb = v.subbuf.as_ref().unwrap();
                if sb.missed_events {
                    flagged += sb.lost_events.unwrap_or(0);
                }
            },
            |p| panic!("{p}"),
        );
    }
    assert!(flagged > 0, "the boot overflowed a buffer");
    assert_eq!(total as u64 + flagged, written, "events written");
    eprintln!(
        "boot 6.1: {total} events match the kernel's text; {} GFP combinations",
        gfp_seen.len()
    );
}

#[test]
fn foreign_gfp_names_round_trip() {
    // Independent of the binary data: every name combination in the text
    // maps to a value (OR of the masks) that decodes back to the same text.
    let Some(d) = common::data_dir("formats_real") else {
        return;
    };
    for arch in ["armhf", "s390x"] {
        let f = fs::read_to_string(d.join(arch).join("raw/events/kmem/kmalloc/format")).unwrap();
        let f = EventFormat::parse(&f, Some("kmem")).unwrap();
        let t = FlagTable::for_field(&f.print_fmt, "gfp_flags")
            .unwrap()
            .unwrap();
        let text = read_gz(&d.join(arch).join("trace.txt.gz"));
        let mut n = 0;
        for g in text
            .lines()
            .filter_map(parse_trace_line)
            .filter_map(|l| l.fields.get("gfp_flags").cloned())
        {
            let v = g
                .split('|')
                .map(|name| t.value_of(name).unwrap_or_else(|| panic!("{arch}: {name}")))
                .fold(0, |a, b| a | b);
            assert_eq!(t.decode(v).to_string(), g, "{arch}: value {v:#x}");
            n += 1;
        }
        assert!(n > 1000);
    }
}

// ---------------------------------------------------------------------------
// Live: this machine's kernel.

/// A private tracefs instance, removed (events disabled first) on drop,
/// whatever happens in the test.
struct Instance {
    dir: PathBuf,
}

impl Instance {
    fn create() -> Option<Instance> {
        let dir = Path::new(TRACEFS).join(format!("instances/kmt-fmt-test-{}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            common::skip(
                "formats_real live",
                common::Missing::Tracefs,
                &format!("cannot create {}: {e}", dir.display()),
            );
            return None;
        }
        Some(Instance { dir })
    }
    fn write(&self, rel: &str, v: &str) {
        fs::write(self.dir.join(rel), v).unwrap_or_else(|e| panic!("write {rel}: {e}"));
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("tracing_on"), "0");
        let _ = fs::write(self.dir.join("events/enable"), "0");
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

fn read_pipe_raw_nonblocking(path: &Path, subbuf: usize) -> Vec<u8> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(common::O_NONBLOCK)
        .open(path)
        .unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; subbuf];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                assert_eq!(n, subbuf, "{}: short read", path.display());
                out.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{}: {e}", path.display()),
        }
        assert!(out.len() < 256 << 20, "runaway trace_pipe_raw");
    }
    out
}

#[test]
fn live_kmem_events_print_like_this_kernel() {
    let is_root = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    if !is_root {
        common::skip("formats_real live", common::Missing::Tracefs, "not root");
        return;
    }
    if !Path::new(TRACEFS).join("instances").is_dir() {
        common::skip(
            "formats_real live",
            common::Missing::Tracefs,
            &format!("no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS})"),
        );
        return;
    }
    let Some(inst) = Instance::create() else {
        return;
    };

    let events = [
        "kmalloc",
        "kmem_cache_alloc",
        "kmem_cache_free",
        "kfree",
        "mm_page_alloc",
        "mm_page_free",
    ];
    let formats: Vec<EventFormat> = events
        .iter()
        .map(|ev| {
            let text = read_tracefs(&inst.dir.join(format!("events/kmem/{ev}/format")));
            EventFormat::parse(&text, Some("kmem")).unwrap()
        })
        .collect();
    let dec = KmemDecoder::new(&formats);
    assert!(dec.warnings().is_empty(), "{:?}", dec.warnings());
    let gfp = dec.gfp_table().expect("this kernel's GFP table");
    let hp = HeaderPage::parse(&read_tracefs(&inst.dir.join("events/header_page"))).unwrap();
    let layout = SubBufLayout::from_header_page(&hp);
    let kallsyms = Kallsyms::parse(&read_tracefs(Path::new("/proc/kallsyms"))).unwrap();
    let ks = (!kallsyms.is_restricted()).then_some(&kallsyms);
    if ks.is_none() {
        eprintln!("live: /proc/kallsyms restricted, call sites not compared");
    }

    inst.write("buffer_size_kb", "512");
    inst.write("tracing_on", "0");
    for ev in events {
        inst.write(&format!("events/kmem/{ev}/enable"), "1");
    }
    inst.write("tracing_on", "1");
    // Make the kernel allocate: processes, files, pipes.
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..20 {
        let p = tmp.path().join(format!("f{i}"));
        fs::write(&p, vec![b'x'; 4096 * (i % 4 + 1)]).unwrap();
        let _ = fs::read(&p);
        let _ = std::process::Command::new("true").status();
    }
    inst.write("tracing_on", "0");

    let text = read_tracefs(&inst.dir.join("trace"));
    let lines: Vec<TextEvent> = text.lines().filter_map(parse_trace_line).collect();
    let printer = Printer {
        kallsyms: ks,
        gfp: Some(gfp),
        ptr_digits: None, // hashed pointers (no `no_hash_pointers` here)
    };
    let ncpu = (0..)
        .take_while(|c| inst.dir.join(format!("per_cpu/cpu{c}")).is_dir())
        .count();
    let mut gfp_seen = BTreeSet::new();
    let mut total = 0;
    for cpu in 0..ncpu {
        let raw = read_pipe_raw_nonblocking(
            &inst.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")),
            layout.subbuf_size,
        );
        let decoded = decode_cpu(host_endian(), &layout, &raw, &dec, &printer);
        let mine: Vec<&TextEvent> = lines.iter().filter(|t| t.cpu == cpu).collect();
        compare_cpu(
            &format!("live cpu{cpu}"),
            &decoded,
            &mine,
            None,
            &mut gfp_seen,
        );
        total += decoded.len();
    }
    assert_eq!(total, lines.len(), "live: every text line compared");
    assert!(total > 0, "no kmem event recorded");
    assert!(!gfp_seen.is_empty());
    eprintln!(
        "live: {total} events on {ncpu} CPUs match the kernel's text; GFP texts: {gfp_seen:?}"
    );
    drop(inst);
}

/// This machine's byte order, for the live kernel.
fn host_endian() -> RunTimeEndian {
    if cfg!(target_endian = "big") {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    }
}
