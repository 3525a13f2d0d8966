//! kmemtraced and CPU hotplug, on the real kernel: a CPU that comes online
//! while recording is recorded from then on, and one that goes offline and
//! comes back is recorded again. A test binary of its own:
//! taking a CPU offline would disturb tests running beside it.

mod common;

use kmemtrace_kernel::KmemKind;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Puts a CPU back online when dropped, whatever the test did.
struct Offlined(PathBuf);

impl Offlined {
    fn new(cpu: u32) -> Option<Offlined> {
        let p = PathBuf::from(format!("/sys/devices/system/cpu/cpu{cpu}/online"));
        std::fs::write(&p, "0").ok()?;
        Some(Offlined(p))
    }
    fn online(&self) {
        std::fs::write(&self.0, "1").expect("put the CPU back online");
    }
    fn offline(&self) {
        std::fs::write(&self.0, "0").expect("take the CPU offline again");
    }
}

impl Drop for Offlined {
    /// The kernel may refuse a hotplug for a moment (one in progress):
    /// tries again before leaving the machine a CPU short, and says so.
    fn drop(&mut self) {
        let mut last = None;
        for _ in 0..50 {
            match std::fs::write(&self.0, "1") {
                Ok(()) => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "could not put {} back online: {}",
            self.0.display(),
            last.expect("tried")
        );
    }
}

fn online_cpus() -> Vec<u32> {
    let t = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in t.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// Runs a shell on `cpu` that opens /dev/null 500 times; returns its pid.
fn open_files_on(cpu: u32, pidfile: &std::path::Path) -> i32 {
    let st = Command::new("taskset")
        .args(["-c", &cpu.to_string(), "sh", "-c"])
        .arg(format!(
            "echo $$ > {}; i=0; while [ $i -lt 500 ]; do exec 3</dev/null; i=$((i+1)); done",
            pidfile.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_cpu_coming_online_while_recording_is_recorded() {
    const TEST: &str = "a_cpu_coming_online_while_recording_is_recorded";
    if common::tracefs_or_skip(TEST).is_none() {
        return;
    }
    let online = online_cpus();
    let Some(&cpu) = online.iter().rev().find(|&&c| c != 0) else {
        common::skip(TEST, common::Missing::Machine, "only one CPU online");
        return;
    };
    let Some(guard) = Offlined::new(cpu) else {
        common::skip(
            TEST,
            common::Missing::Machine,
            &format!("CPU {cpu} cannot be taken offline here"),
        );
        return;
    };
    if Command::new("taskset").arg("--version").output().is_err() {
        common::skip(
            TEST,
            common::Missing::Tool,
            "taskset (util-linux) is missing",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("hotplug.kmt");
    let rec = Command::new(common::bin("kmemtraced"))
        .args(["-q", "-e", "kmem_cache_alloc,kmem_cache_free", "-o"])
        .arg(&log_path)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kmemtraced");
    // Recording has started once the log holds the metadata.
    assert!(
        common::wait_until(10, || std::fs::metadata(&log_path)
            .map(|m| m.len() > 4096)
            .unwrap_or(false)),
        "kmemtraced did not start"
    );
    std::thread::sleep(Duration::from_millis(300));
    guard.online();
    // The recorder looks for new CPUs once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = open_files_on(cpu, &dir.path().join("pid1"));
    // Offline and back: the CPU's reader and buffer carry on.
    guard.offline();
    std::thread::sleep(Duration::from_millis(500));
    guard.online();
    std::thread::sleep(Duration::from_millis(300));
    let pid2 = open_files_on(cpu, &dir.path().join("pid2"));
    std::thread::sleep(Duration::from_millis(300));
    let st = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = rec.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kmemtraced: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (log, evs) = common::decode_kmem(&log_path);
    assert!(log.cpus().contains(&cpu), "CPU {cpu} has no data blocks");
    let notes: Vec<&str> = log.notes.iter().map(|n| n.text.as_str()).collect();
    for p in [pid, pid2] {
        let on_cpu = evs
            .iter()
            .filter(|e| e.kind == KmemKind::KmemCacheAlloc && e.cpu == cpu && e.pid == p)
            .count();
        // Each open allocates a struct file (filp); the shell allocates more.
        assert!(
            on_cpu >= 500,
            "{on_cpu} kmem_cache_alloc events of pid {p} on CPU {cpu}, expected at least 500"
        );
    }
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("CPU {cpu} came online"))),
        "no note about CPU {cpu}: {notes:?}"
    );
    let check = Command::new(common::bin("kmemtrace-check"))
        .arg("-q")
        .arg(&log_path)
        .status()
        .unwrap();
    assert_eq!(check.code(), Some(0), "kmemtrace-check on the hotplug log");
}
