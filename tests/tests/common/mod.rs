//! Shared by the end-to-end tests: where the programs are, whether the real
//! kernel can be traced here, where the foreign captures are.
#![allow(dead_code)]

use kmemtrace_import::log::Log;
use kmemtrace_kernel::KmemKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

#[path = "../../skip.rs"]
mod skip_kit;
#[allow(unused_imports)]
pub use skip_kit::{log_skip, skip, Missing};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Path of one of the workspace's programs, built once (same profile as the
/// tests) so that `cargo test -p kmemtrace-tests` works on its own.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = !cfg!(debug_assertions);
        let mut c = Command::new(cargo);
        c.current_dir(workspace())
            .args(["build", "--bins", "--quiet"]);
        if release {
            c.arg("--release");
        }
        let st = c.status().expect("run cargo build --bins");
        assert!(st.success(), "cargo build --bins failed");
        // target/<profile>/deps/<test-exe> -> target/<profile>
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().to_path_buf()
    });
    let p = dir.join(name);
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// The recorder, to be given arguments.
pub fn kmemtraced() -> Command {
    Command::new(bin("kmemtraced"))
}

/// Runs the recorder as `cmd` says, printing its standard error (shown
/// where the test fails).
pub fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run kmemtraced");
    eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs `cmd`, asserting success (its stderr in the message); its
/// standard output.
pub fn stdout_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run the program");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs `cmd`, asserting success (its stderr in the message), and parses
/// its standard output as JSON.
pub fn json_stdout(cmd: &mut Command) -> serde_json::Value {
    serde_json::from_str(&stdout_ok(cmd)).expect("valid JSON")
}

/// The mounted tracefs, mounting it if we are root and it is not mounted.
/// `None` (after printing why the caller skips) where tracing cannot be had.
pub fn tracefs() -> Option<PathBuf> {
    static T: OnceLock<Option<PathBuf>> = OnceLock::new();
    T.get_or_init(|| {
        for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
            if Path::new(p).join("instances").is_dir() {
                return Some(PathBuf::from(p));
            }
        }
        let root = std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false);
        if root {
            let _ = Command::new("mount")
                .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
                .status();
            if Path::new("/sys/kernel/tracing/instances").is_dir() {
                return Some(PathBuf::from("/sys/kernel/tracing"));
            }
        }
        None
    })
    .clone()
}

/// Like [`tracefs`], printing the reason a test is skipped.
pub fn tracefs_or_skip(test: &str) -> Option<PathBuf> {
    let t = tracefs();
    if t.is_none() {
        skip(
            test,
            Missing::Tracefs,
            "tracefs is not available (needs root and a kernel with tracefs)",
        );
    }
    t
}

/// `../shared/data` beside the repository, if present.
pub fn shared_data() -> Option<PathBuf> {
    let p = workspace().parent()?.join("shared/data");
    p.is_dir().then_some(p)
}

/// Like [`shared_data`], printing the reason a test is skipped.
pub fn shared_data_or_skip(test: &str) -> Option<PathBuf> {
    let p = shared_data();
    if p.is_none() {
        skip(
            test,
            Missing::SharedData,
            "../shared/data (foreign-kernel captures) is not beside the repository",
        );
    }
    p
}

/// Instances under tracefs whose name starts with `prefix`.
pub fn instances_with_prefix(prefix: &str) -> Vec<String> {
    let Some(t) = tracefs() else { return vec![] };
    std::fs::read_dir(t.join("instances"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// One decoded kmem event.
#[derive(Debug, Clone)]
pub struct KmemEv {
    pub cpu: u32,
    pub ts: u64,
    pub kind: KmemKind,
    pub pid: i32,
    pub cache: Option<String>,
    pub order: u32,
    pub bytes_alloc: u64,
}

/// Decodes every kmem event of a log (panicking on any problem).
pub fn decode_kmem(path: &Path) -> (Log, Vec<KmemEv>) {
    let log = Log::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        log.problems.is_empty(),
        "{}: problems {:?}",
        path.display(),
        log.problems
    );
    let dec = log.kmem_decoder();
    let mut evs = Vec::new();
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
            |v| {
                let sb = v.subbuf.unwrap_or_else(|e| panic!("cpu {cpu}: {e}"));
                for r in sb.data_events(log.endian) {
                    let (_, ts, payload) = r.unwrap_or_else(|e| panic!("cpu {cpu}: {e}"));
                    if let Some(k) = dec.decode(log.endian, payload).expect("kmem record") {
                        evs.push(KmemEv {
                            cpu,
                            ts,
                            kind: k.kind,
                            pid: k.pid,
                            cache: k.cache_name.map(str::to_string),
                            order: k.order,
                            bytes_alloc: k.bytes_alloc,
                        });
                    }
                }
            },
            |p| panic!("{p}"),
        );
    }
    (log, evs)
}

/// Waits until `f` holds or `secs` pass; the last check's answer.
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    f()
}
