//! `--events` of ftrace's own entries, which the kernel prints without
//! the event's name: what a write to `trace_marker` records (`print`, whose
//! `char buf[]` of size 0 runs to the end of the record) and one to
//! `trace_marker_raw` (`raw_data`). A private instance of this kernel
//! records both beside `kmalloc`, its `trace` text is read, then its
//! buffers are drained into a log whose listing must be that text, line
//! for line; and a synthetic big-endian 32-bit log lists as such a kernel
//! prints it.

use crate::common;
use crate::live::{drain, format_id, read_tracefs};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::{BigEndian, Endian, HeaderPage, RunTimeEndian};
use kmemtrace_testkit::synth::{encode_event, LogBuilder, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn events(log: &Path) -> String {
    common::stdout_ok(
        Command::new(common::bin("kmemtrace-report"))
            .arg("--events")
            .arg(log),
    )
}

/// Removes the instance however the test ends.
struct Instance(PathBuf);
impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("tracing_on"), "0");
        let _ = std::fs::write(self.0.join("events/kmem/kmalloc/enable"), "0");
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The markers written, each in one write: a newline the kernel adds, one
/// it keeps, one inside, text that is not UTF-8, a long one.
fn markers() -> Vec<Vec<u8>> {
    vec![
        b"PHASE A start\n".to_vec(),
        b"no newline".to_vec(),
        b"two\nlines\n".to_vec(),
        b"caf\xe9 \xe2\x9c\x93\n".to_vec(),
        format!("long {}\n", "x".repeat(1500)).into_bytes(),
        b"PHASE A end".to_vec(),
    ]
}

/// `trace_marker_raw` writes: a native-endian `int` id, then the data.
fn raw_markers() -> Vec<Vec<u8>> {
    let raw = |id: u32, data: &[u8]| {
        let mut v = id.to_ne_bytes().to_vec();
        v.extend_from_slice(data);
        v
    };
    vec![
        raw(0x1234, b"\x01\x02\x03\xff\x00abc"),
        raw(7, b"abcd"),
        // Not a multiple of 4: the kernel prints the record's rounding too.
        raw(0x42, b"xyz"),
        raw(0xdead_beef, b""),
    ]
}

/// Records the markers (and this thread's `kmalloc`s) in a private
/// instance; returns the log and the kernel's `trace` text of it.
fn capture(tracefs: &Path) -> Option<(Vec<u8>, String)> {
    let test = "markers: live capture";
    let inst = tracefs.join(format!("instances/kmt-markers-test-{}", std::process::id()));
    if std::fs::create_dir(&inst).is_err() {
        common::skip(
            test,
            common::Missing::Tracefs,
            &format!("cannot create {}", inst.display()),
        );
        return None;
    }
    let inst = Instance(inst);
    let d = &inst.0;
    // This thread's events only (markers are no events: the pid filter
    // leaves them be).
    let tid = std::fs::read_link("/proc/thread-self").unwrap();
    let tid = tid
        .to_string_lossy()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    std::fs::write(d.join("tracing_on"), "0").unwrap();
    std::fs::write(d.join("buffer_size_kb"), "1024").unwrap();
    std::fs::write(d.join("set_event_pid"), &tid).unwrap();
    // `%p` raw, as a log prints it (the kernel hashes it by default).
    let _ = std::fs::write(d.join("options/hash-ptr"), "0");
    let kmalloc = d.join("events/kmem/kmalloc/enable").is_file();
    if kmalloc {
        std::fs::write(d.join("events/kmem/kmalloc/enable"), "1").unwrap();
    }
    std::fs::write(d.join("tracing_on"), "1").unwrap();
    for m in markers() {
        std::fs::write(d.join("trace_marker"), m).unwrap();
    }
    for m in raw_markers() {
        std::fs::write(d.join("trace_marker_raw"), m).unwrap();
    }
    // The kernel saves a traced task's comm (for `saved_cmdlines`) at its
    // next context switch.
    std::thread::sleep(std::time::Duration::from_millis(100));
    std::fs::write(d.join("tracing_on"), "0").unwrap();
    let text = String::from_utf8_lossy(&read_tracefs(&d.join("trace"))).into_owned();

    let hp_text =
        String::from_utf8_lossy(&read_tracefs(&d.join("events/header_page"))).into_owned();
    let hp = HeaderPage::parse(&hp_text).unwrap();
    let long = hp.long_size();
    let sb = hp.subbuf_size();
    let order = if cfg!(target_endian = "big") {
        RunTimeEndian::Big
    } else {
        RunTimeEndian::Little
    };
    let mut arch = ArchTag::new(order, long as u8, sb as u32, (8 + long) as u32);
    let uname = |a: &str| {
        let out = Command::new("uname").arg(a).output().unwrap().stdout;
        String::from_utf8_lossy(&out).trim().to_string()
    };
    arch.release = Some(uname("-r"));
    arch.machine = Some(uname("-m"));
    arch.sysname = Some("Linux".into());
    let mut cpus = 0;
    while d.join(format!("per_cpu/cpu{cpus}")).is_dir() {
        cpus += 1;
    }
    arch.nr_cpus = Some(cpus);
    let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
    w.write_meta(&Meta::new(MetaKind::HeaderPage, hp_text.clone()))
        .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::HeaderEvent,
        read_tracefs(&d.join("events/header_event")),
    ))
    .unwrap();
    let mut formats = vec![("ftrace", "print"), ("ftrace", "raw_data")];
    if kmalloc {
        formats.push(("kmem", "kmalloc"));
    }
    for (system, name) in formats {
        let f = read_tracefs(&d.join(format!("events/{system}/{name}/format")));
        w.write_meta(&Meta::event_format(system, name, format_id(&f), f))
            .unwrap();
    }
    for (kind, file) in [
        (MetaKind::Kallsyms, PathBuf::from("/proc/kallsyms")),
        (MetaKind::SavedCmdlines, tracefs.join("saved_cmdlines")),
    ] {
        w.write_meta(&Meta::new(kind, read_tracefs(&file))).unwrap();
    }
    for cpu in 0..cpus {
        let data = drain(&d.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")), sb);
        for chunk in data.chunks(64 * sb) {
            w.write_cpu_data(cpu, chunk).unwrap();
        }
    }
    Some((w.finish(None, "markers test", None).unwrap(), text))
}

#[test]
fn trace_markers_list_as_the_kernels_trace_file_prints_them() {
    let test = "trace_markers_list_as_the_kernels_trace_file_prints_them";
    let Some(tracefs) = common::tracefs_or_skip(test) else {
        return;
    };
    let Some((log, kernel)) = capture(&tracefs) else {
        return;
    };
    // The kernel's text has what was written, as written.
    assert!(kernel.contains(": tracing_mark_write: PHASE A start\n"));
    assert!(kernel.contains(": tracing_mark_write: two\nlines\n"));
    assert!(kernel.contains(": # 1234 buf: 01 02 03 ff 00 61 62 63"));
    assert!(!kernel.contains(" print: "));
    let f = crate::temp_log(&log);
    let ours = events(f.path());
    assert_eq!(
        ours.lines().count(),
        kernel.lines().count(),
        "ours:\n{ours}\nthe kernel's:\n{kernel}"
    );
    for (n, (a, b)) in ours.lines().zip(kernel.lines()).enumerate() {
        assert_eq!(a, b, "line {}", n + 1);
    }
    let marks = ours.matches(": tracing_mark_write: ").count();
    assert_eq!(marks, markers().len());
    assert_eq!(ours.matches(" buf:").count(), raw_markers().len());
}

const PRINT_32: &str = "name: print\nID: 5\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned long ip;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char buf[];\toffset:12;\tsize:0;\tsigned:0;\n\
\n\
print fmt: \"%ps: %s\", (void *)REC->ip, REC->buf\n";

const RAW_DATA: &str = "name: raw_data\nID: 19\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:unsigned int id;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char buf[];\toffset:12;\tsize:0;\tsigned:0;\n\
\n\
print fmt: \"id:%04x %08x\", REC->id, (int)REC->buf[0]\n";

/// An event of the kernel's own (`TRACE_EVENT()`), with its name.
const SIGNAL_32: &str = "name: signal_generate\nID: 180\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:int sig;\toffset:8;\tsize:4;\tsigned:1;\n\
\n\
print fmt: \"sig=%d\", REC->sig\n";

#[test]
fn a_big_endian_32_bit_kernels_markers_list_as_it_prints_them() {
    let mut b = LogBuilder::new(RunTimeEndian::Big, 4, 4096);
    b.arch.release = Some("6.1.0".into());
    let print = b.format("ftrace", PRINT_32).unwrap();
    let raw = b.format("ftrace", RAW_DATA).unwrap();
    let signal = b.format("signal", SIGNAL_32).unwrap();
    b.meta(Meta::new(
        MetaKind::Kallsyms,
        "c0300000 T tracing_mark_write\nc0300400 T tracing_mark_raw_write\nc0300800 T _etext\n",
    ));
    b.meta(Meta::new(MetaKind::SavedCmdlines, "77 sh\n"));
    let e = BigEndian;
    let marker = |text: &str| {
        let mut p = encode_event(
            e,
            &print,
            77,
            &[("ip", Value::Uint(0xc030_0042)), ("buf", Value::Str(text))],
        )
        .unwrap();
        // The ring buffer rounds a record to 4 bytes; the kernel writes
        // nothing there.
        p.resize(p.len().next_multiple_of(4), 0x5a);
        p
    };
    b.event(0, 1_000_000_000, marker("PHASE A start\n"));
    let sig = encode_event(e, &signal, 77, &[("sig", Value::Int(-9))]).unwrap();
    b.event(0, 1_000_001_000, sig);
    b.event(0, 1_000_002_000, marker("two\nlines\n"));
    // A print without a newline (trace_printk's may lack one).
    b.event(0, 1_000_003_000, marker("no newline"));
    let mut r = encode_event(e, &raw, 77, &[("id", Value::Uint(0x1234))]).unwrap();
    r.extend_from_slice(&[0x01, 0xff, 0x00, 0x61]);
    assert_eq!(e.read_uint(&r, 8, 4), Some(0x1234), "big-endian id");
    b.event(0, 1_000_004_000, r);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("be32.kmt");
    std::fs::write(&log, b.build().unwrap()).unwrap();
    let ours = events(&log);
    let lines: Vec<&str> = ours.lines().filter(|l| !l.starts_with('#')).collect();
    let at = |us: &str| format!("              sh-77      [000] .....     1.{us}: ");
    assert_eq!(
        lines,
        [
            format!("{}tracing_mark_write: PHASE A start", at("000000")),
            format!("{}signal_generate: sig=-9", at("000001")),
            format!("{}tracing_mark_write: two", at("000002")),
            "lines".to_string(),
            format!("{}tracing_mark_write: no newline", at("000003")),
            format!("{}# 1234 buf: 01 ff 00 61", at("000004")),
        ],
        "{ours}"
    );
}
