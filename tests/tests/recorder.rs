//! kmemtraced against the real kernel: real workloads recorded, decoded
//! with the library, and checked. Each test traces in the recorder's own
//! instance (named after its pid), so tests run in parallel with each other
//! and with everyone else's.

mod common;

use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::records::{MetaKind, Record};
use kmemtrace_import::log::Log;
use kmemtrace_kernel::KmemKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{decode_kmem as decode, kmemtraced, run, KmemEv as Ev};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Records `opener(n)` system-wide with `args` into `dir/NAME.kmt`,
/// expecting success: the log and the opener's pid.
fn record_opener(dir: &Path, name: &str, args: &[&str], n: u32) -> (PathBuf, i32) {
    let log = dir.join(format!("{name}.kmt"));
    let pidfile = dir.join(format!("{name}.pid"));
    let out = run(kmemtraced()
        .args(args)
        .arg("-o")
        .arg(&log)
        .arg("--")
        .args(opener(&pidfile, n)));
    assert_eq!(out.status.code(), Some(0), "{name}");
    (log, read_pid(&pidfile))
}

fn instance_prefix(pid: u32) -> String {
    format!("kmemtraced-{pid}-")
}

/// The `buffer_percent` of recorder `pid`'s instance, while it runs.
fn wake_mark_of(tracefs: &Path, pid: u32) -> Option<String> {
    std::fs::read_dir(tracefs.join("instances"))
        .ok()?
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&instance_prefix(pid))
        })
        .and_then(|i| std::fs::read_to_string(i.path().join("buffer_percent")).ok())
        .map(|m| m.trim().to_string())
}

/// Waits (10 s at most) until the recorder `rec` has made its one
/// instance; returns the instance names' prefix.
fn wait_for_instance(rec: &Child) -> String {
    let prefix = instance_prefix(rec.id());
    assert!(common::wait_until(10, || common::instances_with_prefix(
        &prefix
    )
    .len()
        == 1));
    prefix
}

fn signal(child: &Child, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// A shell workload that writes its pid to `pidfile`, then opens
/// /dev/null `n` times (each open allocates a `struct file` from `filp`).
fn opener(pidfile: &Path, n: u32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo $$ > {}; i=0; while [ $i -lt {n} ]; do exec 3</dev/null; i=$((i+1)); done",
            pidfile.display()
        ),
    ]
}

/// Without `-b`, 4 MiB per CPU where memory allows (a 64th of what is
/// available for all CPUs; the rules' edges are `record.rs`'s unit test).
#[test]
fn default_buffer_is_4_mib_per_cpu_where_memory_allows() {
    if common::tracefs_or_skip("default_buffer_is_4_mib_per_cpu").is_none() {
        return;
    }
    let d = tmp();
    let (log, _) = record_opener(d.path(), "default-buffer", &["-e", "kmem_cache_alloc"], 10);
    let (l, _) = decode(&log);
    let kb = l
        .arch
        .buffer_size_kb
        .expect("the buffer size in the arch tag");
    let available_kb: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    // The recorder divides by the online CPUs; the log's CPU count is never
    // fewer (an affinity mask can make available_parallelism fewer), so
    // this share is never more than the recorder's.
    let cpus = u64::from(l.arch.nr_cpus.expect("the CPU count in the arch tag"));
    if available_kb / 64 / cpus >= 2 * 4096 {
        // The kernel rounds up to whole sub-buffers.
        assert!((4096..4096 + 64 + 4).contains(&kb), "{kb} KiB per CPU");
    } else {
        eprintln!("little memory ({available_kb} KiB available, {cpus} CPUs): {kb} KiB per CPU");
    }
}

/// A kernel CPU list (`0-3,6`) as CPU numbers.
fn cpu_list(list: &str) -> Vec<u32> {
    kmemtrace_kernel::human::parse_cpu_list(list.trim()).unwrap()
}

/// The CPUs a task may run on (`Cpus_allowed_list`: possible CPUs too, not
/// only online ones).
fn allowed_cpus(task: &Path) -> Vec<u32> {
    let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(cpu_list)
        .unwrap_or_default()
}

/// Field `n` of a task's `stat`, numbered as proc(5) does.
fn stat_field(task: &Path, n: usize) -> Option<i64> {
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    // The fields after the comm (which may hold spaces) start at field 3.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(n - 3)?.parse().ok()
}

/// A task's scheduling policy and real-time priority (`stat` fields 41
/// and 40: 0 SCHED_OTHER, 1 SCHED_FIFO).
fn sched_policy(task: &Path) -> Option<(i64, i64)> {
    Some((stat_field(task, 41)?, stat_field(task, 40)?))
}

/// Whether the recorder `pid` has a reader and a compressor (`kmt-cpuN`,
/// `kmt-zN`) for each CPU N in `cpus`, each allowed on `expect(N)`, online
/// CPUs only; readers under SCHED_FIFO at priority 1 if `fifo`, else, as
/// compressors always, under SCHED_OTHER.
fn readers_placed(
    pid: u32,
    cpus: &[u32],
    expect: impl Fn(u32) -> Vec<u32>,
    fifo: bool,
) -> Result<(), String> {
    let online = cpu_list(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap());
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
    let mut seen = Vec::new();
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        let Some(n) = comm.strip_prefix("kmt-cpu").or(comm.strip_prefix("kmt-z")) else {
            continue;
        };
        let cpu: u32 = n.parse().unwrap();
        if !cpus.contains(&cpu) {
            continue;
        }
        let policy = sched_policy(&t.path());
        let want = if fifo && comm.starts_with("kmt-cpu") {
            (1, 1)
        } else {
            (0, 0)
        };
        if policy != Some(want) {
            return Err(format!("{comm} has policy {policy:?}, not {want:?}"));
        }
        let mut allowed = allowed_cpus(&t.path());
        allowed.retain(|c| online.contains(c));
        if allowed != expect(cpu) {
            return Err(format!(
                "{comm} may run on {allowed:?}, not {:?}",
                expect(cpu)
            ));
        }
        seen.push(comm);
    }
    if seen.len() == 2 * cpus.len() {
        Ok(())
    } else {
        Err(format!("found only {seen:?}"))
    }
}

/// Below 4 MiB per CPU, each reader and its compressor keep off the CPU
/// they read (a burst there can hold that CPU while the scheduler thinks
/// it idle), and below 2 MiB readers are real-time; `--reader-cpus any`
/// leaves them where the recorder may run, `--reader-realtime off` under
/// the normal policy. Real-time readers of 1 MiB wake at 50%, the others at 25%,
/// whatever the sub-buffer size (one page, as on kernels before 6.8, where
/// the kernel lets us choose).
#[test]
fn readers_keep_off_the_cpu_they_read_with_small_buffers() {
    let Some(tracefs) = common::tracefs_or_skip("readers_keep_off_the_cpu_they_read") else {
        return;
    };
    // The CPUs this test may use that are online and have a buffer.
    let online = cpu_list(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap());
    let mut mine = allowed_cpus(Path::new("/proc/thread-self"));
    mine.retain(|c| online.contains(c) && tracefs.join(format!("per_cpu/cpu{c}")).is_dir());
    if mine.len() < 2 {
        eprintln!("SKIP readers_keep_off_the_cpu_they_read: this test may use one CPU only");
        return;
    }
    let d = tmp();
    let can_size_subbufs = tracefs.join("buffer_subbuf_size_kb").exists();
    for (placement, realtime, away, want_mark) in
        [("auto", "auto", true, "50"), ("any", "off", false, "25")]
    {
        let mut child = kmemtraced()
            .args(["-q", "-b", "1024", "-e", "kmem_cache_alloc", "-d", "20s"])
            .args(if can_size_subbufs && away {
                &["--subbuf-kb", "4"][..]
            } else {
                &[]
            })
            .args([
                "--reader-cpus",
                placement,
                "--reader-realtime",
                realtime,
                "-o",
            ])
            .arg(d.path().join(format!("{placement}.kmt")))
            .spawn()
            .unwrap();
        let expect = |cpu: u32| -> Vec<u32> {
            mine.iter()
                .copied()
                .filter(|&c| !away || c != cpu)
                .collect()
        };
        // Waits out the threads' start (a reader sets its affinity just
        // after it starts, its compressor is made after that).
        let mut last = Err(String::new());
        common::wait_until(10, || {
            last = readers_placed(child.id(), &mine, expect, away);
            last.is_ok()
        });
        let mark = wake_mark_of(&tracefs, child.id());
        signal(&child, "INT");
        assert!(child.wait().unwrap().success());
        assert_eq!(last, Ok(()), "{placement}");
        assert_eq!(
            mark.as_deref(),
            Some(want_mark),
            "{placement}: the wake-up mark"
        );
    }
}

/// Readers that may not become real-time (no CAP_SYS_NICE here) still
/// record, wake at the mark of readers that are not real-time, and the log
/// says so.
#[test]
fn readers_refused_real_time_are_noted_in_the_log() {
    let Some(tracefs) = common::tracefs_or_skip("readers_refused_real_time") else {
        return;
    };
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIP readers_refused_real_time: no setpriv (util-linux)");
        return;
    }
    let d = tmp();
    let log = d.path().join("no-rt.kmt");
    let child = Command::new("setpriv")
        .args(["--bounding-set", "-sys_nice"])
        .arg(common::bin("kmemtraced"))
        .args(["-q", "-b", "1024", "-e", "kmalloc", "-d", "3s", "-o"])
        .arg(&log)
        .spawn()
        .unwrap();
    // The mark is written before the log is made (the kernel's own
    // default is 50).
    let mut mark = None;
    common::wait_until(10, || {
        mark = log
            .exists()
            .then(|| wake_mark_of(&tracefs, child.id()))
            .flatten();
        mark.is_some()
    });
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(mark.as_deref(), Some("25"), "the wake-up mark");
    let (l, _) = decode(&log);
    let refused: Vec<_> = l
        .notes
        .iter()
        .filter(|n| n.warning && n.text.contains("could not run under SCHED_FIFO"))
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", l.notes);
    assert!(
        refused[0].text.contains("Operation not permitted"),
        "{refused:?}"
    );
}

#[test]
fn file_opens_show_as_kmem_cache_alloc_with_the_pid() {
    if common::tracefs_or_skip("file_opens_show_as_kmem_cache_alloc_with_the_pid").is_none() {
        return;
    }
    let d = tmp();
    let n = 500;
    let (log, pid) = record_opener(d.path(), "opens", &[], n);
    let (l, evs) = decode(&log);
    let end = l.end.as_ref().expect("END block");
    assert_eq!(end.reason, "command exited 0");
    assert_eq!(end.exit_status, Some(0));
    // The recorder's own threads are traced like any task (excluding them
    // in the kernel would drop the interrupt work run beside them), and
    // listed in the log: its main thread, whose tid is the pid in the
    // instance's name, and a reader per CPU at least.
    let recorder: i32 = l.arch.instance.as_deref().unwrap()["kmemtraced-".len()..]
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let own = kmemtrace_import::tasks::recorder_tids(&l);
    assert!(own.contains(&recorder), "{own:?} lacks {recorder}");
    assert!(own.len() > l.cpus().len(), "{own:?}");
    let mine: Vec<&Ev> = evs
        .iter()
        .filter(|e| e.pid == pid && e.kind == KmemKind::KmemCacheAlloc)
        .collect();
    assert!(
        mine.len() >= n as usize,
        "{} kmem_cache_alloc events with pid {pid}, expected at least {n}",
        mine.len()
    );
    let filp = mine
        .iter()
        .filter(|e| e.cache.as_deref() == Some("filp"))
        .count();
    if mine.iter().any(|e| e.cache.is_some()) {
        assert!(filp >= n as usize, "{filp} filp allocations, expected {n}");
    }
    // Metadata a reader needs is there.
    assert_eq!(
        l.arch
            .instance
            .as_deref()
            .map(|s| s.starts_with("kmemtraced-")),
        Some(true)
    );
    // kallsyms in parts of at most 256 KiB (format 1.1), joined on reading.
    let parts: Vec<_> = l
        .metas
        .iter()
        .filter(|m| m.kind == MetaKind::KallsymsPart)
        .collect();
    assert!(parts.len() > 1, "{} kallsyms parts", parts.len());
    assert!(parts
        .iter()
        .all(|m| m.content.len() <= kmemtrace_format::records::KALLSYMS_PART_BYTES));
    assert!(l.kallsyms.as_ref().is_some_and(|k| k.len() > 10_000));
    // CPU data is packed by default (kpack version 2, format 1.3).
    assert_eq!(l.version, (1, 3));
    assert!(l.meta(MetaKind::HeaderEvent, "").is_some());
    assert!(l
        .meta(MetaKind::EventFormat, "kmem/kmem_cache_alloc")
        .is_some());
    assert!(
        l.pids.comm(pid).is_some(),
        "pid {pid} has no comm in the log"
    );
    for cpu in l.cpus() {
        assert!(
            l.cpu_stats(cpu, kmemtrace_format::records::StatsPhase::Start)
                .count()
                == 1
        );
        assert!(
            l.cpu_stats(cpu, kmemtrace_format::records::StatsPhase::End)
                .count()
                == 1
        );
    }
    // Instance removed.
    assert!(common::instances_with_prefix(l.arch.instance.as_deref().unwrap()).is_empty());
}

#[test]
fn touching_mapped_memory_shows_page_allocations() {
    if common::tracefs_or_skip("touching_mapped_memory_shows_page_allocations").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("pages.kmt");
    let pidfile = d.path().join("pid");
    // dd mallocs (mmaps) an 8 MiB buffer and fills it from /dev/zero:
    // every page of it is faulted in.
    let script = format!(
        "echo $$ > {}; exec dd if=/dev/zero of=/dev/null bs=8M count=3 status=none",
        pidfile.display()
    );
    let out = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .arg("-F")
        .args(["--", "sh", "-c", &script]));
    assert_eq!(out.status.code(), Some(0));
    let pid = read_pid(&pidfile);
    let (l, evs) = decode(&log);
    assert!(l.end.is_some());
    let pages: u64 = evs
        .iter()
        .filter(|e| e.pid == pid && e.kind == KmemKind::MmPageAlloc)
        .map(|e| 1u64 << e.order.min(20))
        .sum();
    assert!(
        pages >= 2048,
        "dd touched 8 MiB but only {pages} pages were allocated for pid {pid}"
    );
    // -F: nothing but the command (and what it forks) is recorded.
    let others = evs.iter().filter(|e| e.pid != pid && e.pid != 0).count();
    assert!(
        others * 20 < evs.len(),
        "{others} of {} events are from other processes despite -F",
        evs.len()
    );
    assert!(evs
        .iter()
        .any(|e| e.pid == pid
            && matches!(e.kind, KmemKind::MmPageFree | KmemKind::MmPageFreeBatched)));
}

/// The page report of a log, as JSON.
fn page_report(log: &Path) -> serde_json::Value {
    let v = common::json_stdout(
        Command::new(common::bin("kmemtrace-report"))
            .arg(log)
            .arg("--json"),
    );
    v["pages"].clone()
}

#[test]
fn every_page_allocation_comes_with_its_stack_unless_turned_off() {
    if common::tracefs_or_skip("every_page_allocation_comes_with_its_stack").is_none() {
        return;
    }
    let d = tmp();
    let script = "exec dd if=/dev/zero of=/dev/null bs=4M count=2 status=none";
    // The default: stacks for 1 in 16 page frames, the kernel's filter
    // and the report agreeing on which.
    let record = |name: &str, stacks: &[&str]| {
        let log = d.path().join(name);
        let out = run(kmemtraced()
            .arg("-o")
            .arg(&log)
            .args(stacks)
            .args(["-F", "--", "sh", "-c", script]));
        assert_eq!(out.status.code(), Some(0));
        log
    };
    let p = page_report(&record("sampled.kmt", &[]));
    let allocs = p["allocations"]["requests"].as_u64().unwrap();
    let s = &p["stacks"];
    assert_eq!(s["sample"]["one_in"], 16, "{s}");
    assert_eq!(s["records"], s["matched"], "{s}");
    let with = s["allocations_with_stack"].as_u64().unwrap();
    let outside = s["sample"]["not_sampled"].as_u64().unwrap();
    // Every allocation in the sample has its stack, but one the capture's
    // stop cut off.
    assert!(
        with + outside <= allocs && allocs - with - outside <= s["cut_at_end"].as_u64().unwrap(),
        "{allocs} allocations: {s}"
    );
    assert!(with > 0 && outside > with, "{s}");

    let with = record("stacks.kmt", &["--page-stacks", "all"]);
    let p = page_report(&with);
    let allocs = p["allocations"]["requests"].as_u64().unwrap();
    assert!(allocs >= 1024, "{allocs} page allocations");
    assert_eq!(p["stacks"]["recorded"], true);
    assert!(p["stacks"].get("sample").is_none());
    assert_eq!(p["stacks"]["records"], p["stacks"]["matched"]);
    assert_eq!(p["stacks"]["allocations_with_stack"], allocs);
    let top = p["callsites"][0]["callsite"].as_str().unwrap();
    assert!(top != "-" && !top.starts_with("0x"), "{top}");
    let fns = p["allocator_functions"].as_array().unwrap();
    assert!(fns.len() >= 3, "{fns:?}");
    // The reserve the fragmentation advice raises, as this machine has it.
    let log = kmemtrace_import::log::Log::open(&with).unwrap();
    let want: u64 = std::fs::read_to_string("/proc/sys/vm/min_free_kbytes")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        kmemtrace_import::pagetypes::min_free_kbytes(&log),
        Some(want)
    );

    let without = record("nostacks.kmt", &["--page-stacks", "off"]);
    let p = page_report(&without);
    assert_eq!(p["stacks"]["recorded"], false);
    assert_eq!(p["stacks"]["records"], 0);
    assert_eq!(p["callsites"][0]["callsite"], "-");
}

#[test]
fn streaming_to_stdout_gives_the_same_log_as_a_file_and_two_recorders_run_at_once() {
    if common::tracefs_or_skip("streaming_to_stdout").is_none() {
        return;
    }
    let d = tmp();
    let file_log = d.path().join("file.kmt");
    let pipe_log = d.path().join("pipe.kmt");
    let (pa, pb) = (d.path().join("a.pid"), d.path().join("b.pid"));
    let n = 300;
    // Two recorders at once, each following its own command: one to a
    // file, one to a pipe the test drains.
    let mut a = kmemtraced()
        .arg("-o")
        .arg(&file_log)
        .arg("-F")
        .arg("--")
        .args(opener(&pa, n))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut b = kmemtraced()
        .args(["-o", "-", "-F", "--"])
        .args(opener(&pb, n))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut streamed = Vec::new();
    std::io::Read::read_to_end(b.stdout.as_mut().unwrap(), &mut streamed).unwrap();
    let (sa, sb) = (a.wait().unwrap(), b.wait().unwrap());
    assert!(sa.success() && sb.success(), "{sa} {sb}");
    std::fs::write(&pipe_log, &streamed).unwrap();

    let (la, ea) = decode(&file_log);
    let (lb, eb) = decode(&pipe_log);
    assert_ne!(la.arch.instance, lb.arch.instance, "instances must differ");
    for (l, evs, pidfile) in [(&la, &ea, &pa), (&lb, &eb, &pb)] {
        let pid = read_pid(pidfile);
        let end = l.end.as_ref().expect("END");
        assert_eq!(end.reason, "command exited 0");
        let filp = evs
            .iter()
            .filter(|e| e.pid == pid && e.kind == KmemKind::KmemCacheAlloc)
            .count();
        assert!(filp >= n as usize, "{filp} < {n} for {}", l.name);
    }
    // Same content: the same kinds of blocks and the same metadata.
    assert_eq!(la.arch.subbuf_size, lb.arch.subbuf_size);
    assert_eq!(la.arch.events, lb.arch.events);
    let kinds = |l: &Log| {
        let mut v: Vec<(MetaKind, String)> =
            l.metas.iter().map(|m| (m.kind, m.name.clone())).collect();
        v.sort();
        v
    };
    assert_eq!(kinds(&la), kinds(&lb));
    for kind in [
        MetaKind::HeaderPage,
        MetaKind::HeaderEvent,
        MetaKind::PrintkFormats,
    ] {
        assert_eq!(
            la.meta(kind, "").map(|m| &m.content),
            lb.meta(kind, "").map(|m| &m.content),
            "{kind:?}"
        );
    }
    for f in &la.formats {
        let g = lb
            .formats
            .iter()
            .find(|g| g.id == f.id)
            .expect("same formats");
        assert_eq!(f, g);
    }
    let mode = std::fs::metadata(&file_log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn sigkill_leaves_a_readable_prefix_and_cleanup_removes_the_instance() {
    if common::tracefs_or_skip("sigkill_leaves_a_readable_prefix").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("killed.kmt");
    let mut rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["--flush-interval", "100ms", "-q"])
        .spawn()
        .unwrap();
    let prefix = instance_prefix(rec.id());
    // Wait for some CPU data on disk, making allocations meanwhile.
    let has_data = |p: &PathBuf| {
        let Ok(f) = std::fs::File::open(p) else {
            return false;
        };
        let Ok(r) = LogReader::new(f) else {
            return false;
        };
        r.filter_map(|i| i.ok())
            .any(|i| matches!(i, Item::Block(b) if b.header.block_type == kmemtrace_format::block::BlockType::CpuData))
    };
    let ok = common::wait_until(15, || {
        let _ = std::fs::read_dir("/proc").map(|d| d.count());
        has_data(&log)
    });
    assert!(ok, "no CPU data written within 15 s");
    assert_eq!(common::instances_with_prefix(&prefix).len(), 1);
    rec.kill().unwrap();
    rec.wait().unwrap();

    // Every complete block is intact; no END.
    let (l, evs) = decode(&log);
    let subbuf = l.layout.subbuf_size as u32;
    let f = std::fs::File::open(&log).unwrap();
    let mut blocks = 0;
    let mut cpu_blocks = 0;
    let mut ended = false;
    for item in LogReader::new(f).unwrap() {
        match item.unwrap() {
            Item::Block(b) => {
                let payload = b.payload().unwrap();
                let rec = Record::decode(b.header.block_type, &payload, Some(subbuf)).unwrap();
                blocks += 1;
                match rec {
                    Record::CpuData(_) => cpu_blocks += 1,
                    Record::End(_) => ended = true,
                    _ => {}
                }
            }
            Item::Damage(dmg) => panic!("damage in a killed log: {dmg}"),
            Item::Truncated(_) => {} // a block cut mid-write is allowed
        }
    }
    assert!(
        blocks > 3 && cpu_blocks > 0,
        "{blocks} blocks, {cpu_blocks} CPU data"
    );
    assert!(!ended);
    assert!(l.end.is_none());
    assert!(!evs.is_empty());

    // The recorder's guardian stopped tracing and removed its instance.
    assert!(
        common::wait_until(5, || common::instances_with_prefix(&prefix).is_empty()),
        "the killed recorder's instance is still there"
    );
    let out = run(kmemtraced().arg("--cleanup"));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_stop_signal_reaches_the_traced_command_which_starts_with_clean_signals() {
    if common::tracefs_or_skip("a_stop_signal_reaches_the_traced_command").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("cmd.kmt");
    let status = d.path().join("status");
    let pidfile = d.path().join("pid");
    // The command notes its signal mask and ignored set, then waits.
    let script = format!(
        "grep -E '^Sig(Blk|Ign)' /proc/self/status > {st}; echo $$ > {pf}; exec sleep 60",
        st = status.display(),
        pf = pidfile.display()
    );
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::wait_until(15, || pidfile.exists()
        && std::fs::metadata(&pidfile).is_ok_and(|m| m.len() > 0)));
    let cmd_pid = read_pid(&pidfile);
    let sig = std::fs::read_to_string(&status).unwrap();
    assert!(sig.contains("SigBlk:\t0000000000000000"), "{sig}");
    // SIGINT, SIGQUIT, SIGTERM and SIGHUP are not ignored.
    let ign = sig
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(ign & 0b1_0000_0111, 0, "{sig}");
    let t = Instant::now();
    signal(&rec, "TERM");
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "took {:?}",
        t.elapsed()
    );
    assert!(err.contains("passed on to the command"), "{err}");
    assert!(
        !Path::new(&format!("/proc/{cmd_pid}")).exists(),
        "the command outlived the recording"
    );
    let (l, _) = decode(&log);
    let end = l.end.unwrap();
    assert_eq!(end.reason, "signal SIGTERM");
    assert_eq!(end.exit_status, Some(128 + 15), "sleep killed by SIGTERM");
}

#[test]
fn sigint_stops_cleanly_and_the_instance_is_gone() {
    if common::tracefs_or_skip("sigint_stops_cleanly").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("int.kmt");
    // An existing world-readable file is tightened to 0600.
    std::fs::write(&log, b"old").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-e", "kmalloc,kfree", "-b", "4096"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = wait_for_instance(&rec);
    std::thread::sleep(Duration::from_millis(500));
    // The per-CPU readers (kmt-cpuN) run at nice -10 (we are root here).
    let nices: Vec<(String, i64)> = std::fs::read_dir(format!("/proc/{}/task", rec.id()))
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            // Field 19: nice.
            Some((comm.trim().to_string(), stat_field(&t.path(), 19)?))
        })
        .collect();
    let readers: Vec<_> = nices
        .iter()
        .filter(|(c, _)| c.starts_with("kmt-cpu"))
        .collect();
    assert!(!readers.is_empty(), "no reader threads: {nices:?}");
    assert!(readers.iter().all(|(_, n)| *n == -10), "{nices:?}");
    // Their compressors (kmt-zN) at half that: a reader woken by a filling
    // buffer preempts its compressor.
    let compressors: Vec<_> = nices
        .iter()
        .filter(|(c, _)| c.starts_with("kmt-z"))
        .collect();
    assert_eq!(compressors.len(), readers.len(), "{nices:?}");
    assert!(compressors.iter().all(|(_, n)| *n == -5), "{nices:?}");
    // At 4 MiB per CPU neither is real-time.
    let tasks = std::fs::read_dir(format!("/proc/{}/task", rec.id())).unwrap();
    for t in tasks.flatten() {
        assert_eq!(sched_policy(&t.path()), Some((0, 0)), "{:?}", t.path());
    }
    signal(&rec, "INT");
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("stopped: signal SIGINT"), "{err}");
    assert!(err.contains("events in"), "summary: {err}");
    assert!(common::instances_with_prefix(&prefix).is_empty());
    let (l, evs) = decode(&log);
    assert_eq!(l.end.as_ref().unwrap().reason, "signal SIGINT");
    // The summary's count (the kernel's `read events`, not counted by
    // the readers) is the log's.
    let summary: u64 = err
        .lines()
        .find_map(|line| line.strip_prefix("kmemtraced: ")?.split_once(" events in "))
        .map(|(n, _)| n.replace(',', "").parse().unwrap())
        .expect("a summary line");
    let mut in_log = 0;
    for cpu in l.cpus() {
        l.visit_cpu(
            cpu,
            |v| in_log += v.subbuf.unwrap().count_data_events(l.endian).unwrap() as u64,
            |p| panic!("{p}"),
        );
    }
    assert_eq!(summary, in_log, "{err}");
    assert!(in_log > 0);
    // What was asked, and the idle-switch probe the report uses to find
    // tasks the kernel does not record.
    assert_eq!(
        l.arch.events.as_deref(),
        Some("kmem:kmalloc,kmem:kfree,sched:sched_switch")
    );
    assert!(evs
        .iter()
        .all(|e| matches!(e.kind, KmemKind::Kmalloc | KmemKind::Kfree)));
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn duration_and_command_status() {
    if common::tracefs_or_skip("duration_and_command_status").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("dur.kmt");
    let t = Instant::now();
    let out = run(kmemtraced().arg("-o").arg(&log).args(["-d", "700ms", "-q"]));
    assert_eq!(out.status.code(), Some(0));
    assert!(t.elapsed() >= Duration::from_millis(700));
    assert!(out.stderr.is_empty(), "-q prints nothing");
    let (l, _) = decode(&log);
    assert_eq!(l.end.as_ref().unwrap().reason, "duration");

    // The command's failure is recorded, not propagated.
    let log2 = d.path().join("fail.kmt");
    let out = run(kmemtraced()
        .arg("-o")
        .arg(&log2)
        .args(["-q", "--", "sh", "-c", "exit 3"]));
    assert_eq!(out.status.code(), Some(0));
    let (l, _) = decode(&log2);
    let end = l.end.unwrap();
    assert_eq!(end.reason, "command exited 3");
    assert_eq!(end.exit_status, Some(3));
}

#[test]
fn bad_input_gets_one_line_and_a_documented_code() {
    let d = tmp();
    let log = d.path().join("x.kmt");
    let one_line = |o: &Output| {
        let s = String::from_utf8_lossy(&o.stderr);
        assert_eq!(s.trim_end().lines().count(), 1, "one line: {s}");
        assert!(!s.contains("panicked"), "{s}");
    };
    // Usage errors: exit 2.
    let o = run(kmemtraced().arg("-o").arg(&log).args(["-d", "ten"]));
    assert_eq!(o.status.code(), Some(2));
    let o = run(kmemtraced().arg("-o").arg(&log).args(["--compress", "99"]));
    assert_eq!(o.status.code(), Some(2));
    let o = run(kmemtraced().args(["-F"]).arg("-o").arg(&log));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    let o = run(kmemtraced().arg("-d").arg("1s"));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    // A negative number is a bad value, not a command to run after `--`.
    for (opt, v) in [
        ("-b", "-5"),
        ("-p", "-5"),
        ("--buffer-percent", "-1"),
        ("-d", "-5s"),
    ] {
        let o = run(kmemtraced().arg("-o").arg(&log).args([opt, v]));
        assert_eq!(o.status.code(), Some(2));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("invalid value") && !e.contains("'-- "),
            "{opt} {v}: {e}"
        );
    }
    let help = run(kmemtraced().arg("--help"));
    assert_eq!(help.status.code(), Some(0));
    let h = String::from_utf8_lossy(&help.stdout);
    assert!(h.contains("Exit status") && h.contains("Examples"), "{h}");

    if common::tracefs_or_skip("bad_input (tracefs part)").is_none() {
        return;
    }
    let o = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-e", "kmem:no_such_event"]));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    assert!(!log.exists(), "no output for a refused run");
    // Options the kernel refuses leave an existing log as it was.
    std::fs::write(&log, b"precious").unwrap();
    let o = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["--clock", "sundial"]));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    let o = run(kmemtraced().arg("-o").arg(&log).args(["-b", "999999999"]));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("per CPU") && e.contains("the buffer stays at"),
        "{e}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), b"precious");
    std::fs::remove_file(&log).unwrap();
    let o = run(kmemtraced().arg("-o").arg(&log).args(["-p", "999999999"]));
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
    let link = d.path().join("link.kmt");
    std::os::unix::fs::symlink(d.path().join("target"), &link).unwrap();
    let o = run(kmemtraced().arg("-o").arg(&link).args(["-d", "1s"]));
    assert_eq!(o.status.code(), Some(4), "an output refused: exit 4");
    one_line(&o);
    let o = run(kmemtraced().arg("-o").arg(d.path().join("c.kmt")).args([
        "-q",
        "--",
        "/nonexistent/command",
    ]));
    assert_eq!(o.status.code(), Some(127));
    one_line(&o);
    assert!(!d.path().join("c.kmt").exists());
}

#[test]
fn a_mistyped_command_keeps_the_previous_capture() {
    let d = tmp();
    let keep = d.path().join("keep.kmt");
    let precious = std::fs::read(common::workspace().join("tests/data/sample-x86_64.kmt")).unwrap();
    std::fs::write(&keep, &precious).unwrap();
    let not_exec = d.path().join("script");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    // Twice each: a second run must not push the capture out either.
    for (cmd, code) in [
        ("nosuchcmd-kmemtrace", 127),
        ("nosuchcmd-kmemtrace", 127),
        (not_exec.to_str().unwrap(), 126),
        (not_exec.to_str().unwrap(), 126),
    ] {
        let o = run(kmemtraced().arg("-o").arg(&keep).args(["--", cmd]));
        assert_eq!(o.status.code(), Some(code), "{cmd}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
        assert!(e.contains(cmd), "{e}");
        assert_eq!(std::fs::read(&keep).unwrap(), precious, "{cmd}");
        assert!(!d.path().join("keep.kmt.old").exists(), "{cmd}");
    }
}

#[test]
fn pids_are_taken_as_pidof_and_perf_give_them() {
    // Parsed before anything else: an unknown pid is a usage error that
    // names it, whichever form the list takes.
    let d = tmp();
    let log = d.path().join("p.kmt");
    for args in [
        &["-p", "999999998", "999999999"][..],
        &["-p", "999999998,999999999"],
        &["-p", "999999998", "-p", "999999999"],
    ] {
        let o = run(kmemtraced().arg("-o").arg(&log).args(args));
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            !e.contains("unexpected argument") && !e.contains("invalid digit"),
            "{args:?}: {e}"
        );
    }
}

/// Waits until recorder `rec` has turned `kmalloc` on in its instance and
/// then tracing: recording has started (after `set_event_pid`, for -p).
fn wait_until_kmalloc_is_on(rec: &Child) {
    let prefix = instance_prefix(rec.id());
    let tfs = common::tracefs().unwrap();
    // The recorder enables the events with tracing off, sets its stack
    // triggers, then turns tracing on: an event enabled is not yet one
    // recorded (a child run in between left the log without its events).
    let on = |i: &str, file: &str| {
        std::fs::read_to_string(tfs.join("instances").join(i).join(file))
            .is_ok_and(|s| s.trim() == "1")
    };
    assert!(common::wait_until(10, || {
        common::instances_with_prefix(&prefix)
            .first()
            .is_some_and(|i| on(i, "events/kmem/kmalloc/enable") && on(i, "tracing_on"))
    }));
}

#[test]
fn pid_filter_follows_forks() {
    if common::tracefs_or_skip("pid_filter_follows_forks").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("pid.kmt");
    let go = d.path().join("go");
    let kidfile = d.path().join("kid");
    // A shell that waits for `go`, then forks a child that opens files.
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; sh -c 'echo $$ > {kid}; i=0; while [ $i -lt 200 ]; do exec 3</dev/null; i=$((i+1)); done'",
        go = go.display(),
        kid = kidfile.display()
    );
    let mut target = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_kmalloc_is_on(&rec);
    std::fs::write(&go, b"").unwrap();
    target.wait().unwrap();
    // No signal: the recording stops once the process asked for exited.
    let out = rec.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kid = read_pid(&kidfile);
    let (l, evs) = decode(&log);
    assert_eq!(l.end.as_ref().unwrap().reason, "traced processes exited");
    let kid_allocs = evs
        .iter()
        .filter(|e| e.pid == kid && e.kind == KmemKind::KmemCacheAlloc)
        .count();
    assert!(kid_allocs >= 200, "forked child: {kid_allocs} allocations");
    // Everything else comes from the target's other descendants (its
    // `sleep`s), or from interrupts (pid 0).
    let allowed = [kid, target.id() as i32, 0];
    for e in evs.iter().filter(|e| !allowed.contains(&e.pid)) {
        let comm = l.pids.comm(e.pid).unwrap_or("?");
        assert!(
            comm == "sleep" || comm == "sh",
            "event of pid {} ({comm}) outside the traced process tree",
            e.pid
        );
    }
}

#[test]
fn pid_filter_takes_the_running_descendants_too() {
    if common::tracefs_or_skip("pid_filter_takes_the_running_descendants_too").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("tree.kmt");
    let go = d.path().join("go");
    let kidfile = d.path().join("kid");
    // A parent whose worker runs before the recording starts, as a
    // stress-ng or postgres parent's do; the worker works once `go` exists.
    let script = format!(
        "sh -c 'echo $$ > {kid}; while [ ! -e {go} ]; do sleep 0.05; done; i=0; while [ $i -lt 200 ]; do exec 3</dev/null; i=$((i+1)); done' & wait",
        go = go.display(),
        kid = kidfile.display()
    );
    let mut parent = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    assert!(common::wait_until(10, || kidfile.exists()
        && std::fs::read_to_string(&kidfile)
            .is_ok_and(|s| s.ends_with('\n'))));
    let kid = read_pid(&kidfile);
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-p", &parent.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_kmalloc_is_on(&rec);
    std::fs::write(&go, b"").unwrap();
    parent.wait().unwrap();
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("tracing pid {} and its ", parent.id()))
            && err.contains("running descendant"),
        "said at the start: {err}"
    );
    let (_, evs) = decode(&log);
    let kid_allocs = evs
        .iter()
        .filter(|e| e.pid == kid && e.kind == KmemKind::KmemCacheAlloc)
        .count();
    assert!(
        kid_allocs >= 200,
        "the worker running before: {kid_allocs} allocations"
    );
    // The report keeps it as one of the traced tree.
    let rep = common::json_stdout(
        Command::new(common::bin("kmemtrace-report"))
            .arg("--json")
            .arg("--pid")
            .arg(kid.to_string())
            .arg(&log),
    );
    let allocs = rep["summary"]["alloc_events"].as_u64().unwrap_or(0);
    assert!(allocs >= 200, "report of the worker: {allocs} allocations");
}

#[test]
fn boot_mode_drains_the_top_level_buffer_without_changing_it() {
    let Some(tfs) = common::tracefs_or_skip("boot_mode") else {
        return;
    };
    let read = |f: &str| std::fs::read_to_string(tfs.join(f)).unwrap_or_default();
    let before = (
        read("set_event"),
        read("tracing_on"),
        read("buffer_size_kb"),
    );
    let d = tmp();
    let log = d.path().join("boot.kmt");
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["--boot", "-q"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = instance_prefix(rec.id());
    let mut rec = rec;
    let mut saw_instance = false;
    while rec.try_wait().unwrap().is_none() {
        saw_instance |= !common::instances_with_prefix(&prefix).is_empty();
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = rec.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!saw_instance, "boot mode must not create an instance");
    assert_eq!(
        before,
        (
            read("set_event"),
            read("tracing_on"),
            read("buffer_size_kb")
        )
    );
    let (l, _) = decode(&log);
    assert_eq!(l.arch.instance.as_deref(), Some(""));
    assert_eq!(l.end.as_ref().unwrap().reason, "boot drain");
    assert!(l.header_page.is_some());
}

/// A small tmpfs, unmounted however the test ends.
struct SmallFs(PathBuf);
impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_recording_that_fails_waits_for_the_command_instead_of_orphaning_it() {
    if common::tracefs_or_skip("a_recording_that_fails_waits_for_the_command").is_none() {
        return;
    }
    let d = tmp();
    let mnt = d.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    // Room for the metadata, not for the data the command makes.
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mounting a tmpfs (root is needed, as for tracing)");
    let _fs = SmallFs(mnt.clone());
    let done = d.path().join("done");
    let script = format!(
        "i=0; while [ $i -lt 100000 ]; do exec 3</dev/null; i=$((i+1)); done; sleep 2; echo x > {}",
        done.display()
    );
    let out = run(kmemtraced().arg("-o").arg(mnt.join("x.kmt")).args([
        "--compress",
        "none",
        "--flush-interval",
        "100ms",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(4),
        "the log could not be written: {err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("waiting for the command"), "{err}");
    assert!(done.exists(), "kmemtraced exited before its command");
}

/// Of the records of events with holes, how many there are and how many
/// have only zero bytes in them.
fn zero_holes(log: &Path) -> (u64, u64) {
    use kmemtrace_import::walk::{walk_cpu, with_endian, WithEndian};
    use kmemtrace_kernel::RbRecordKind;
    let l = Log::open(log).unwrap();
    let by_id: std::collections::HashMap<u16, Vec<std::ops::Range<usize>>> = l
        .metas
        .iter()
        .filter(|m| m.kind == MetaKind::EventFormat)
        .filter_map(|m| {
            let text = std::str::from_utf8(&m.content).ok()?;
            let f = kmemtrace_kernel::EventFormat::parse(text, None).ok()?;
            let h = f.holes();
            (!h.is_empty()).then_some((f.id as u16, h))
        })
        .collect();
    struct Count<'a>(
        &'a Log,
        &'a std::collections::HashMap<u16, Vec<std::ops::Range<usize>>>,
    );
    impl WithEndian for Count<'_> {
        type Output = (u64, u64);
        fn run<E: kmemtrace_kernel::Endian>(self, e: E) -> (u64, u64) {
            let (mut all, mut zero) = (0, 0);
            for cpu in self.0.cpus() {
                walk_cpu(
                    self.0,
                    e,
                    cpu,
                    |_, item| {
                        let Ok(sb) = item.subbuf else { return };
                        for r in sb.events(e).map_while(Result::ok) {
                            let RbRecordKind::Data { payload } = r.kind else {
                                continue;
                            };
                            let Some(ty) = e.read_u16(payload, 0) else {
                                continue;
                            };
                            let Some(h) = self.1.get(&ty) else { continue };
                            all += 1;
                            zero += u64::from(h.iter().all(|r| {
                                payload
                                    .get(r.clone())
                                    .is_some_and(|b| b.iter().all(|&x| x == 0))
                            }));
                        }
                    },
                    |_| {},
                );
            }
            (all, zero)
        }
    }
    with_endian(l.endian, Count(&l, &by_id))
}

#[test]
fn spliced_sub_buffers_carry_no_stale_bytes_and_read_still_works() {
    if common::tracefs_or_skip("spliced_sub_buffers_carry_no_stale_bytes_and_read_still_works")
        .is_none()
    {
        return;
    }
    let d = tmp();
    let n = 20_000;
    let mut fractions = Vec::new();
    for (name, extra) in [("splice", None), ("read", Some("--no-splice"))] {
        let log = d.path().join(format!("{name}.kmt"));
        let pidfile = d.path().join(format!("{name}.pid"));
        // A small buffer, so that its pages go round many times: the stale
        // bytes are those of pages the ring had before.
        let out = run(kmemtraced()
            .args(["-q", "-b", "256", "-e", "kmem_cache_alloc"])
            .args(extra)
            .arg("-o")
            .arg(&log)
            .arg("--")
            .args(opener(&pidfile, n)));
        assert_eq!(out.status.code(), Some(0), "{name}");
        let (all, zero) = zero_holes(&log);
        eprintln!("{name}: {zero} of {all} records with holes have them zeroed");
        assert!(all > u64::from(n), "{name}: {all} records with holes");
        fractions.push(zero as f64 / all as f64);
    }
    // Reading with read(2) leaves whatever the kernel left in the holes,
    // zero or not; splicing leaves at most one stale ring page a batch, so
    // nearly every hole is zero.
    assert!(fractions[0] > 0.95, "splice: {fractions:?}");
}

/// Whether the page-stack trigger's filter leaves task `tid` out: by a
/// `common_pid != TID` test or within a `(common_pid < A || common_pid >
/// B)` range.
fn trigger_leaves_out(trigger: &str, tid: i32) -> bool {
    if trigger.contains(&format!("common_pid != {tid}")) {
        return true;
    }
    trigger.split("(common_pid < ").skip(1).any(|range| {
        let mut n = range
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<i32>().unwrap());
        matches!((n.next(), n.next()), (Some(a), Some(b)) if (a..=b).contains(&tid))
    })
}

#[test]
fn the_recorders_own_page_allocations_take_no_stacks_and_all_others_do() {
    if common::tracefs_or_skip("the_recorders_own_page_allocations_take_no_stacks").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("sys.kmt");
    // System-wide: the readers' splices and the writer's page cache
    // allocate pages beside the workload.
    let out = run(kmemtraced().arg("-o").arg(&log).args([
        "--",
        "sh",
        "-c",
        "exec dd if=/dev/zero of=/dev/null bs=4M count=4 status=none",
    ]));
    assert_eq!(out.status.code(), Some(0));
    let l = Log::open(&log).unwrap();
    let trigger = l
        .meta(MetaKind::Other, kmemtrace_import::stacks::PAGE_STACKS_META)
        .map(|m| String::from_utf8_lossy(&m.content).into_owned())
        .unwrap_or_default();
    let own = kmemtrace_import::tasks::recorder_tids(&l);
    assert!(!own.is_empty());
    for t in own {
        assert!(trigger_leaves_out(&trigger, t), "{t}: {trigger}");
    }
    // The report leaves the recorder's own allocations out: every other
    // one in the sample has its stack, but for one per CPU that another task made as
    // tracing stopped (the kernel takes the stack after the event), which
    // the report counts in stacks.cut_at_end. Every stack has its
    // allocation, but for one per CPU whose allocation came as tracing
    // started (counted in stacks.cut_at_start).
    let p = page_report(&log);
    let allocs = p["allocations"]["requests"].as_u64().unwrap();
    assert!(allocs >= 1024, "{allocs} page allocations");
    let s = &p["stacks"];
    let cut = s["cut_at_end"].as_u64().unwrap();
    let cpus = l
        .blocks
        .iter()
        .map(|b| b.cpu)
        .max()
        .map_or(0, |c| u64::from(c) + 1);
    assert!(cut <= cpus, "{s}");
    // Stacks are taken for 1 in 16 page frames by default: the kernel's
    // filter and the report agree on every allocation outside the sample.
    let outside = s["sample"]["not_sampled"].as_u64().unwrap();
    assert_eq!(
        s["allocations_with_stack"].as_u64().unwrap() + cut + outside,
        allocs,
        "{s}"
    );
    let cut_at_start = s["cut_at_start"].as_u64().unwrap();
    assert!(cut_at_start <= cpus, "{s}");
    assert_eq!(
        s["records"].as_u64().unwrap(),
        s["matched"].as_u64().unwrap() + cut_at_start,
        "{s}"
    );
}

#[test]
fn kpack_logs_hold_every_event_and_check_clean() {
    if common::tracefs_or_skip("kpack_logs_hold_every_event_and_check_clean").is_none() {
        return;
    }
    let d = tmp();
    let n = 2_000;
    // No -c: kpack is the default.
    let (log, pid) = record_opener(d.path(), "kpack", &["-q"], n);
    let (l, evs) = decode(&log);
    assert_eq!(l.version, (1, 3), "kpack blocks need format 1.3");
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert!(!l.blocks.is_empty());
    for b in &l.blocks {
        assert_ne!(
            b.header.flags & kmemtrace_format::block::FLAG_KPACK,
            0,
            "{b:?}"
        );
    }
    let mine = evs
        .iter()
        .filter(|e| e.pid == pid && e.kind == KmemKind::KmemCacheAlloc)
        .count();
    assert!(
        mine >= n as usize,
        "{mine} kmem_cache_alloc events of pid {pid}"
    );
    let check = run(Command::new(common::bin("kmemtrace-check")).arg(&log));
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{said}");
    // The codec is said, so that a reader older than 1.3 is explained.
    assert!(said.contains(" of CPU data: kpack + zstd)"), "{said}");
}

/// A command that ignores the stop signal passed on to it: a second
/// signal stops the recording at once, and is named as why.
#[test]
fn a_second_signal_stops_at_once_and_is_named() {
    if common::tracefs_or_skip("a_second_signal_stops_at_once_and_is_named").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("two.kmt");
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["--", "sh", "-c", "trap '' TERM; sleep 4"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_instance(&rec);
    std::thread::sleep(Duration::from_millis(500));
    signal(&rec, "TERM");
    std::thread::sleep(Duration::from_millis(500));
    signal(&rec, "INT");
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("stopped: signal SIGINT"), "{err}");
    let (l, _) = decode(&log);
    assert_eq!(l.end.as_ref().unwrap().reason, "signal SIGINT");
}

#[test]
fn cpus_and_filters_as_perf_and_trace_cmd_take_them() {
    if common::tracefs_or_skip("cpus_and_filters_as_perf_and_trace_cmd_take_them").is_none() {
        return;
    }
    let d = tmp();
    let log = d.path().join("cf.kmt");
    // -f applies to the -e before it: kmalloc only above 2048 bytes, kfree all.
    // The workload runs on CPU 0, the one recorded (where taskset exists:
    // elsewhere the scheduler decides, and a busy CPU 0 may leave it none).
    let pin: &[&str] = if Command::new("taskset").arg("--version").output().is_ok() {
        &["taskset", "-c", "0"]
    } else {
        &[]
    };
    let out = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .args([
            "-q",
            "-e",
            "kmalloc",
            "-f",
            "bytes_alloc > 2048",
            "-e",
            "kfree",
            "-C",
            "0",
            "--",
        ])
        .args(pin)
        .args([
            "sh",
            "-c",
            "i=0; while [ $i -lt 200 ]; do cat /proc/self/status >/dev/null; i=$((i+1)); done",
        ]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, evs) = decode(&log);
    let kmallocs: Vec<_> = evs.iter().filter(|e| e.kind == KmemKind::Kmalloc).collect();
    assert!(!kmallocs.is_empty(), "seq_file reads kmalloc a page");
    assert!(kmallocs.iter().all(|e| e.bytes_alloc > 2048));
    assert!(
        evs.iter().any(|e| e.kind == KmemKind::Kfree),
        "kfree unfiltered"
    );
    assert!(evs.iter().all(|e| e.cpu == 0), "CPU 0 only");
    // A filter the kernel refuses: one line, its reason, usage.
    let o = run(kmemtraced().arg("-o").arg(&log).args([
        "-e",
        "kmalloc",
        "-f",
        "no_such_field > 1",
        "-d",
        "1s",
    ]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("refused") && e.contains("kmem:kmalloc"), "{e}");
    let o = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-C", "4096", "-d", "1s"]));
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_workloads_markers_list_as_the_kernel_prints_them() {
    let Some(tfs) = common::tracefs_or_skip("a_workloads_markers_list_as_the_kernel_prints_them")
    else {
        return;
    };
    let d = tmp();
    let log = d.path().join("marks.kmt");
    // The command's parent is the recorder: its instance is kmemtraced-$PPID-*.
    let script = format!(
        "for m in {}/instances/kmemtraced-$PPID-*/trace_marker; do echo 'PHASE A start' > $m; cat /proc/self/stat > /dev/null; echo 'PHASE A end' > $m; done",
        tfs.display()
    );
    let out = run(kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-q", "--", "sh", "-c", &script]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = common::stdout_ok(
        Command::new(common::bin("kmemtrace-report"))
            .args(["--events", "--all-tasks"])
            .arg(&log),
    );
    let marks: Vec<&str> = listing
        .lines()
        .filter(|l| l.contains("tracing_mark_write"))
        .collect();
    assert_eq!(marks.len(), 2, "{marks:?}");
    assert!(
        marks[0].ends_with(": tracing_mark_write: PHASE A start"),
        "{}",
        marks[0]
    );
    assert!(
        marks[1].ends_with(": tracing_mark_write: PHASE A end"),
        "{}",
        marks[1]
    );
}

/// `--max-size` with `--rotate-time`: the files rotate each second, the
/// oldest go so that the capture stays within its budget, every file kept
/// is a complete log that checks on its own, and the tools read the kept
/// files by the name the capture was recorded under, the removed span a
/// `rotated` loss window.
#[test]
fn a_rotated_capture_keeps_its_newest_files_within_its_budget() {
    if common::tracefs_or_skip("a_rotated_capture_keeps_its_newest_files_within_its_budget")
        .is_none()
    {
        return;
    }
    let dir = tmp();
    let name = dir.path().join("r.kmt");
    let budget: u64 = 4 << 20;
    let mut load = Command::new("sh")
        .args([
            "-c",
            "while :; do cat /proc/self/stat /proc/self/maps >/dev/null; done",
        ])
        .spawn()
        .unwrap();
    let out = run(kmemtraced()
        .args(["-o", name.to_str().unwrap(), "--max-size", "4M"])
        .args(["--rotate-time", "1s", "-d", "6s"]));
    let _ = load.kill();
    let _ = load.wait();
    assert_eq!(out.status.code(), Some(0));
    let files = kmemtrace_format::rotation::files_of(&name);
    let indexes: Vec<u32> = files.iter().map(|f| f.0).collect();
    let first = indexes[0];
    let contiguous: Vec<u32> = (first..first + files.len() as u32).collect();
    assert_eq!(indexes, contiguous, "the newest files, in a row");
    assert!(first > 0, "six files of a second each exceed the budget");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("removed the capture's {first} oldest files")),
        "{stderr}"
    );
    let total: u64 = files.iter().map(|f| f.1.metadata().unwrap().len()).sum();
    assert!(total <= budget, "{total} bytes kept, budget {budget}");
    for (_, f) in &files {
        let out = Command::new(common::bin("kmemtrace-check"))
            .arg("-q")
            .arg(f)
            .output()
            .unwrap();
        // 1: the kernel lost events (a burst); never damaged or unusable.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let check = Command::new(common::bin("kmemtrace-check"))
        .arg("--json")
        .arg(&name)
        .output()
        .unwrap();
    let c: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    let f = &c["files"][0];
    assert_eq!(
        f["rotation"]["not_read"],
        serde_json::json!([[0, first - 1]]),
        "{f}"
    );
    let windows = f["loss_windows"].as_array().unwrap();
    assert!(windows.iter().any(|w| w["cause"] == "rotated"), "{f}");
    assert!(matches!(check.status.code(), Some(0 | 1)), "{f}");
    let report = Command::new(common::bin("kmemtrace-report"))
        .arg(&name)
        .output()
        .unwrap();
    assert_eq!(
        report.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
}

/// A rotated capture's name refuses standard output, a file size above
/// half the budget, and the files of an earlier capture under its name.
#[test]
fn rotation_refuses_what_it_cannot_keep() {
    let dir = tmp();
    let name = dir.path().join("r.kmt");
    let refused = |args: &[&str], says: &str| {
        let out = run(kmemtraced().args(args).args(["-d", "1s"]));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["-o", "-", "--max-size", "8M"], "give -o FILE");
    let n = name.to_str().unwrap();
    refused(
        &["-o", n, "--max-size", "8M", "--rotate-size", "5M"],
        "more than half",
    );
    std::fs::write(kmemtrace_format::rotation::file_path(&name, 3), b"x").unwrap();
    refused(
        &["-o", n, "--max-size", "8M"],
        "files of an earlier capture",
    );
    refused(&["-o", n, "--max-size", "10k"], "below 64 KiB");
}
