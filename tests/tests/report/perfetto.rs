//! `kmemtrace-export --to perfetto`: the trace, its zlib-compressed packets
//! inflated, decoded with Perfetto's own generated protobuf classes
//! (`tests/scripts/pftrace_dump.py`, PyPI `perfetto`) holds every record of
//! the log (the same uncompressed), CPU by CPU in order: each kmem
//! event as Perfetto's typed message with the values the log's decoder
//! reads, every other event as a generic one; the tasks, the kernel's
//! counters and the loss marks; and a counter track of live slab bytes
//! that ends at the report's `live_bytes`. On a 64-bit little-endian capture of this
//! kernel, a 32-bit arm board's and a big-endian s390x one's (also after an
//! overflow).

use crate::common;
use crate::foreign::import;
use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::Log;
use kmemtrace_import::stacks::StackReader;
use kmemtrace_kernel::Endian;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Replaces each `compressed_packets` packet of a trace (argv[1]) by the
/// packets it holds, inflated with zlib and parsed with Perfetto's own
/// classes (as trace_processor reads them), into argv[2]; prints how many
/// there were.
const INFLATE: &str = r#"
import sys, zlib
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
out = pb.Trace()
n = 0
for p in trace.packet:
    if p.HasField("compressed_packets"):
        assert len(p.ListFields()) == 1, p.ListFields()
        n += 1
        inner = pb.Trace()
        inner.ParseFromString(zlib.decompress(p.compressed_packets))
        assert not any(q.HasField("compressed_packets") for q in inner.packet)
        out.packet.extend(inner.packet)
    else:
        out.packet.append(p)
open(sys.argv[2], "wb").write(out.SerializeToString())
print(n)
"#;

/// The decoded trace, its compressed packets inflated first (their count
/// as `compressed_packets`), or `None` (skipped) without python3's
/// `perfetto`.
fn dump(test: &str, trace: &Path) -> Option<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pftrace_dump.py");
    let probe = Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        common::skip(
            test,
            common::Missing::Tool,
            "python3 with Perfetto's protobuf classes (pip install perfetto protobuf)",
        );
        return None;
    }
    let inflated = trace.with_extension("inflated.pftrace");
    let n = common::stdout_ok(
        Command::new("python3")
            .args(["-c", INFLATE])
            .arg(trace)
            .arg(&inflated),
    );
    let out = common::stdout_ok(Command::new("python3").arg(script).arg(&inflated));
    let mut v: Value = serde_json::from_str(&out).expect("the dump's JSON");
    v["compressed_packets"] = n.trim().parse::<u64>().unwrap().into();
    Some(v)
}

fn export(log: &Path, out: &Path) {
    export_with(log, out, &[]);
}

fn export_with(log: &Path, out: &Path, options: &[&str]) {
    common::stdout_ok(
        Command::new(common::bin("kmemtrace-export"))
            .arg(log)
            .args(["--to", "perfetto"])
            .args(options)
            .arg("-o")
            .arg(out),
    );
}

/// One record as the log's decoders read it: time stamp, pid, the kmem
/// kind's name (`None` for other events), the kmem decoder's values by
/// Perfetto's field names, and a stack's frames as the export writes them.
struct Want {
    ts: u64,
    pid: i32,
    kind: Option<&'static str>,
    vals: Vec<(&'static str, u64)>,
    stack: Option<String>,
}

/// What the log holds, CPU by CPU.
type Expected = BTreeMap<u32, Vec<Want>>;

fn expected(log: &Log) -> Expected {
    let dec = log.kmem_decoder();
    let stacks = StackReader::new(log);
    let e = log.endian;
    let mut all = Expected::new();
    for cpu in log.cpus() {
        let evs = all.entry(cpu).or_default();
        log.visit_cpu(
            cpu,
            |v| {
                let Ok(sb) = v.subbuf else { return };
                for r in sb.data_events(e) {
                    let Ok((_, ts, payload)) = r else { break };
                    let pid = e.read_uint(payload, 4, 4).unwrap_or(0) as u32 as i32;
                    let Some(k) = dec.decode(e, payload).ok().flatten() else {
                        let stack = stacks.as_ref().and_then(|r| r.read(e, payload)).map(|s| {
                            s.frames()
                                .map(|ip| format!("{ip:#x}"))
                                .collect::<Vec<_>>()
                                .join(" ")
                        });
                        evs.push(Want {
                            ts,
                            pid,
                            kind: None,
                            vals: Vec::new(),
                            stack,
                        });
                        continue;
                    };
                    let mut vals = Vec::new();
                    if k.kind.is_slab_alloc() || k.kind.is_slab_free() {
                        vals.push(("call_site", k.call_site));
                        vals.push(("ptr", k.ptr));
                    }
                    if k.kind.is_slab_alloc() {
                        vals.push(("bytes_req", k.bytes_req));
                        vals.push(("bytes_alloc", k.bytes_alloc));
                        vals.push(("gfp_flags", k.gfp_flags & 0xffff_ffff));
                    }
                    if let Some(pfn) = k.pfn {
                        vals.push(("pfn", pfn));
                    }
                    if k.kind.is_page_event() && k.kind.name() != "mm_page_free_batched" {
                        // An external-fragmentation event's order is its
                        // own field (`order` is 0 there): a recording
                        // here holds one only when the kernel fell back.
                        match &k.extfrag {
                            Some(x) => vals.push(("alloc_order", x.alloc_order as u64)),
                            None => vals.push(("order", u64::from(k.order))),
                        }
                    }
                    evs.push(Want {
                        ts,
                        pid,
                        kind: Some(k.kind.name()),
                        vals,
                        stack: None,
                    });
                }
            },
            |_| {},
        );
    }
    all
}

/// Exports `log_path` and compares; returns the dump for further checks.
fn exported_equals_the_log(test: &str, log_path: &Path, dir: &Path) -> Option<(Log, Value)> {
    let trace = dir.join(format!(
        "{}.pftrace",
        log_path.file_stem().unwrap().to_string_lossy()
    ));
    export(log_path, &trace);
    let got = dump(test, &trace)?;
    // Compressed by default (zlib, in compressed_packets), the same
    // packets as written uncompressed on request.
    let plain = trace.with_extension("plain.pftrace");
    export_with(log_path, &plain, &["--perfetto-compression", "none"]);
    let mut plain_got = dump(test, &plain)?;
    assert!(got["compressed_packets"].as_u64() > Some(0));
    assert_eq!(plain_got["compressed_packets"], 0);
    plain_got["compressed_packets"] = got["compressed_packets"].clone();
    assert!(
        plain_got == got,
        "{}: compressed and plain differ",
        log_path.display()
    );
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert!(
        size(&trace) * 2 < size(&plain),
        "{}: {} compressed, {} plain",
        log_path.display(),
        size(&trace),
        size(&plain)
    );
    let log = Log::open(log_path).unwrap();
    let want = expected(&log);
    let (mut kmem, mut stacks, mut deep) = (0, 0, 0);
    for (cpu, evs) in &want {
        let have = got["events"][cpu.to_string()]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no events for CPU {cpu}", log_path.display()));
        assert_eq!(have.len(), evs.len(), "{}: CPU {cpu}", log_path.display());
        for (i, (w, h)) in evs.iter().zip(have).enumerate() {
            let at = format!("{} CPU {cpu} event {i}: {h}", log_path.display());
            assert_eq!(h[0].as_u64(), Some(w.ts), "{at}");
            assert_eq!(h[1].as_u64(), Some(w.pid as u32 as u64), "{at}");
            let name = h[2].as_str().unwrap();
            match w.kind {
                Some(k) => {
                    kmem += 1;
                    assert_eq!(name, k, "{at}");
                    for (field, v) in &w.vals {
                        assert_eq!(h[3][field].as_u64(), Some(*v), "{at}: {field}");
                    }
                }
                None => assert!(name.starts_with("generic:"), "{at}"),
            }
            if let Some(frames) = &w.stack {
                stacks += 1;
                deep += usize::from(frames.split(' ').count() > 8);
                assert_eq!(name, "generic:kernel_stack", "{at}");
                assert_eq!(h[3]["caller"].as_str(), Some(frames.as_str()), "{at}");
            }
        }
    }
    assert!(kmem > 0, "{}: no kmem events", log_path.display());
    if kmemtrace_import::stacks::page_stacks_recorded(&log) {
        assert!(
            stacks > 0 && deep > 0,
            "{}: {stacks} stacks, {deep} deeper than caller[8]",
            log_path.display()
        );
    }
    // Every task the log names, with its name.
    for pid in log.pids.pids() {
        let t = &got["threads"][pid.to_string()];
        // (An unset name reads as "".)
        assert_eq!(
            t[0].as_str(),
            Some(log.pids.comm(pid).unwrap_or("")),
            "pid {pid}"
        );
        assert_eq!(
            t[1].as_i64(),
            Some(i64::from(log.pids.tgid(pid).unwrap_or(0))),
            "pid {pid}"
        );
    }
    assert_eq!(
        got["system"]["release"].as_str(),
        log.arch.release.as_deref()
    );
    // The kernel's counters at the end, as the log stored them.
    for cpu in log.cpus() {
        if let Some(s) = log
            .cpu_stats(cpu, StatsPhase::End)
            .last()
            .and_then(|s| s.parsed.as_ref())
        {
            let c = &got["stats"]["END_OF_TRACE"][cpu.to_string()];
            assert_eq!(c["overrun"].as_u64(), s.overrun, "CPU {cpu}");
            assert_eq!(c["entries"].as_u64(), s.entries, "CPU {cpu}");
        }
    }
    // The live slab bytes over time end at the report's figure, and never
    // pass its peak.
    let report = crate::report_json(log_path, &[]);
    let live = got["counters"]["slab live bytes"]
        .as_array()
        .expect("the live bytes track");
    assert!(!live.is_empty());
    let at = |i: usize| live[i][0].as_u64().unwrap();
    assert!(
        (1..live.len()).all(|i| at(i - 1) < at(i)),
        "counter times ascend"
    );
    let value = |p: &Value| p[1].as_i64().unwrap();
    assert_eq!(
        live.last().map(value),
        report["summary"]["live_bytes"].as_i64(),
        "{}",
        log_path.display()
    );
    let peak = report["summary"]["peak_live_bytes"].as_i64().unwrap();
    assert!(live.iter().all(|p| (0..=peak).contains(&value(p))));
    // The page allocator's bytes held end at its allocated minus freed.
    let pa = &report["page_allocator"];
    let held = pa["alloc_bytes"].as_i64().unwrap() - pa["free_bytes"].as_i64().unwrap();
    let track = &got["counters"]["page allocator: bytes allocated - freed"];
    if pa["allocs"].as_u64() > Some(0) {
        assert_eq!(
            track.as_array().and_then(|t| t.last()).map(value),
            Some(held)
        );
    }
    Some((log, got))
}

#[test]
fn a_perfetto_trace_holds_every_record_of_this_kernels_and_a_32_bit_boards_captures() {
    let test = "a_perfetto_trace_holds_every_record_of_this_kernels_and_a_32_bit_boards_captures";
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    for name in ["sample-x86_64.kmt", "board-armhf.kmt"] {
        if exported_equals_the_log(test, &data.join(name), dir.path()).is_none() {
            return;
        }
    }
}

#[test]
fn a_perfetto_trace_of_a_recording_here_holds_its_page_stacks_whole() {
    let test = "a_perfetto_trace_of_a_recording_here_holds_its_page_stacks_whole";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("here.kmt");
    crate::tracedat::record(
        &log,
        &[],
        "for i in 1 2 3; do ls -R /usr/share/doc >/dev/null; done",
    );
    assert!(kmemtrace_import::stacks::page_stacks_recorded(
        &Log::open(&log).unwrap()
    ));
    exported_equals_the_log(test, &log, dir.path());
}

#[test]
fn a_perfetto_trace_of_a_big_endian_kernel_marks_where_events_were_lost() {
    let test = "a_perfetto_trace_of_a_big_endian_kernel_marks_where_events_were_lost";
    let Some(data) = common::shared_data_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (dump_dir, lossy) in [("raw", false), ("raw_overflow", true)] {
        let log = import(&data.join("s390x").join(dump_dir), dir.path(), dump_dir);
        let Some((log, got)) = exported_equals_the_log(test, &log, dir.path()) else {
            return;
        };
        let marked: usize = got["lost"]
            .as_object()
            .map(|m| m.values().map(|v| v.as_array().unwrap().len()).sum())
            .unwrap_or(0);
        let mut lost_before = 0;
        // The records after a loss, as the event listing marks them (and
        // the kernel's own `trace` text: tests/tests/report/events.rs).
        kmemtrace_analysis::in_order::for_each_record(
            &log,
            |_| true,
            |r| {
                lost_before += usize::from(r.lost_before.is_some());
            },
        );
        assert_eq!(marked, lost_before, "{dump_dir}: bundles marked lost");
        assert_eq!(
            marked > 0,
            lossy,
            "{dump_dir}: {marked} bundles marked lost"
        );
    }
}

/// The timelines (the counter tracks' values) are the same whatever the
/// number of threads, hence shards, the analysis runs on.
#[test]
fn the_timelines_are_the_same_whatever_the_thread_count() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample-x86_64.kmt");
    let timeline = |threads: usize| {
        let mut log = Log::open(&path).unwrap();
        let syms = kmemtrace_analysis::Symbols::of_log(&mut log);
        let mut opts = kmemtrace_analysis::Options::default();
        opts.select_as_recorded(&log, true);
        opts.threads = Some(threads);
        let r = kmemtrace_analysis::analyse(&log, &syms, opts, &mut |_| {}).report;
        (r.live_timeline, r.page_timeline)
    };
    let one = timeline(1);
    assert!(one.0.points.len() > 10 && one.1.points.len() > 10);
    // One thread makes one shard; 3 and 8 make 2 and 4.
    for threads in [3, 8] {
        assert_eq!(timeline(threads), one, "{threads} threads");
    }
}

/// Exports are made owner-only (0600), as the recorder's logs: they keep
/// the kernel's addresses and symbols. A Perfetto trace also goes to
/// standard output (`-o -`), the same bytes; a trace.dat, written with
/// seeks back, does not.
#[test]
fn exports_are_owner_only_and_perfetto_streams_to_stdout() {
    use std::os::unix::fs::PermissionsExt;
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.pftrace");
    export(&sample, &file);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let out = Command::new(common::bin("kmemtrace-export"))
        .arg(&sample)
        .args(["--to", "perfetto", "-o", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, std::fs::read(&file).unwrap());
    for to in ["trace-dat", "parquet"] {
        let out = Command::new(common::bin("kmemtrace-export"))
            .arg(&sample)
            .args(["--to", to, "-o", "-"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{to}");
        assert!(out.stdout.is_empty(), "{to}");
        assert!(!dir.path().join("-").exists(), "{to}: a file named -");
    }
    let dat = dir.path().join("s.dat");
    common::stdout_ok(
        Command::new(common::bin("kmemtrace-export"))
            .arg(&sample)
            .arg("-o")
            .arg(&dat),
    );
    let mode = std::fs::metadata(&dat).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Every allocation stall episode of the synthetic stall log is a slice on
/// its task's thread track, from its start over its span, named after its
/// first wait and its call site, with the model's figures as arguments, its
/// waits nested in it as they happened; the OOM kill's episode names its
/// victim. A log without stall events has no slice.
#[test]
fn stall_episodes_are_slices_on_the_waiting_tasks_threads() {
    let test = "stall_episodes_are_slices_on_the_waiting_tasks_threads";
    let dir = tempfile::tempdir().unwrap();
    let (bytes, planted) = crate::stalls::build();
    let path = dir.path().join("stalls.kmt");
    std::fs::write(&path, bytes).unwrap();
    let trace = dir.path().join("stalls.pftrace");
    export(&path, &trace);
    let Some(got) = dump(test, &trace) else {
        return;
    };
    let log = Log::open(&path).unwrap();
    let mut eps = crate::stalls::episodes_of(&path);
    assert_eq!(eps.len() as u64, planted.episodes);
    // The slices come track by track (by pid), each in time order.
    eps.sort_by_key(|e| (e.pid, e.start_ns));
    let slices = got["slices"].as_array().unwrap();
    let mut tops = Vec::new();
    for (i, s) in slices.iter().enumerate() {
        if s["depth"] == 0 {
            tops.push(i);
        }
    }
    assert_eq!(tops.len(), eps.len());
    let (mut stall_ns, mut victims) = (0, Vec::new());
    for (k, e) in eps.iter().enumerate() {
        let s = &slices[tops[k]];
        let at = format!("episode of pid {} at {}: {s}", e.pid, e.start_ns);
        assert_eq!(s["tid"], e.pid, "{at}");
        assert_eq!(s["pid"], log.pids.tgid(e.pid).unwrap_or(e.pid), "{at}");
        assert_eq!(s["ts"], e.start_ns, "{at}");
        assert_eq!(s["dur"], e.span_ns, "{at}");
        let site = e.callsite.as_deref().unwrap();
        assert_eq!(s["name"], format!("{}: {site}", e.kind), "{at}");
        assert_eq!(s["category"], "kmemtrace.stall");
        let a = &s["args"];
        assert_eq!(a["stall_ns"], e.stall_ns, "{at}");
        assert_eq!(a["pages_reclaimed"], e.pages_reclaimed, "{at}");
        assert_eq!(a["reclaims"], e.reclaims, "{at}");
        // A charge (memcg reclaim) has no order.
        match e.order {
            Some(o) => assert_eq!(a["order"], o, "{at}"),
            None => assert!(a.get("order").is_none_or(|v| v.is_null()), "{at}"),
        }
        assert_eq!(a["gfp"], e.gfp.as_ref().unwrap().compact.as_str(), "{at}");
        assert_eq!(a["ended_by"], e.ended_by.as_str(), "{at}");
        assert_eq!(a["uncertain"], false, "{at}");
        stall_ns += a["stall_ns"].as_u64().unwrap();
        if let Some(v) = a.get("oom_victim") {
            victims.push((e.pid, v.as_i64().unwrap()));
        }
        // Its waits, nested in it, one slice each.
        let end = tops.get(k + 1).copied().unwrap_or(slices.len());
        let waits = &slices[tops[k] + 1..end];
        assert_eq!(waits.len(), e.phases.len(), "{at}");
        for (w, ph) in waits.iter().zip(&e.phases) {
            assert_eq!(w["depth"], 1, "{at}");
            assert_eq!(w["tid"], e.pid);
            assert_eq!(w["name"], ph.kind.as_str(), "{at}");
            assert_eq!(
                (&w["ts"], &w["dur"]),
                (&ph.start_ns.into(), &ph.ns.into()),
                "{at}"
            );
            assert_eq!(w["args"]["detail"], ph.detail.as_str(), "{at}");
        }
    }
    assert_eq!(stall_ns, planted.stall_ns);
    assert_eq!(victims, [(203, 4242)]);
    // The sample has no stall events: the trace has no slice.
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    let plain = dir.path().join("sample.pftrace");
    export(&sample, &plain);
    let got = dump(test, &plain).unwrap();
    assert_eq!(got["slices"], serde_json::json!([]));
}
