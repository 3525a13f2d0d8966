//! Choosing the events to record: the default kmem allocation events this
//! kernel has, or the user's `-e` list, checked against `events/`.

use crate::failure::{Failure, Result};
use crate::tracefs::TraceDir;
use kmemtrace_kernel::{kmem, KmemKind};
use std::fs;

/// Every kmem allocation event kmemtraced knows, in the order recorded:
/// the one list, [`KmemKind::ALL`] (the `_node` variants exist on kernels
/// before 6.1 only). `kmemtrace-capture.sh` keeps a copy, which a test
/// holds to this one.
fn default_events() -> impl Iterator<Item = &'static str> {
    KmemKind::ALL.into_iter().map(KmemKind::name)
}

/// One trace event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Event {
    pub system: String,
    pub name: String,
}

impl Event {
    /// `system/name`, the path under `events/` and the META name.
    pub fn path(&self) -> String {
        format!("{}/{}", self.system, self.name)
    }
    /// `system:name`, as `set_event` and the arch tag write it.
    pub fn colon(&self) -> String {
        format!("{}:{}", self.system, self.name)
    }
    /// Whether this is the kmem event `kind`.
    pub fn is_kmem(&self, kind: KmemKind) -> bool {
        self.system == kmem::SYSTEM && self.name == kind.name()
    }
}

fn exists(dir: &TraceDir, system: &str, name: &str) -> bool {
    dir.file(&format!("events/{system}/{name}/format"))
        .is_file()
}

/// Adds `system:name` to `events` if this kernel has it (and it is not
/// there yet).
pub fn add_if_present(dir: &TraceDir, events: &mut Vec<Event>, system: &str, name: &str) {
    let e = Event {
        system: system.into(),
        name: name.into(),
    };
    if exists(dir, system, name) && !events.contains(&e) {
        events.push(e);
    }
}

/// Adds the allocation stall events this kernel has
/// ([`kmemtrace_kernel::stalls`]): the cheap ones unless only `busy`, the
/// busy ones with `busy`.
pub fn add_stall_events(dir: &TraceDir, events: &mut Vec<Event>, cheap: bool, busy: bool) {
    use kmemtrace_kernel::stalls::{split, BUSY_STALL_EVENTS, STALL_EVENTS};
    let cheap = STALL_EVENTS.iter().filter(|_| cheap);
    let busy = BUSY_STALL_EVENTS.iter().filter(|_| busy);
    for t in cheap.chain(busy) {
        let (system, name) = split(t);
        add_if_present(dir, events, system, name);
    }
}

/// The events to record in `dir` (whose `events/` lists what the kernel
/// has). `specs` empty means the defaults.
pub fn resolve(dir: &TraceDir, specs: &[String]) -> Result<Vec<Event>> {
    let mut out: Vec<Event> = Vec::new();
    let mut push = |e: Event| {
        if !out.contains(&e) {
            out.push(e);
        }
    };
    if specs.is_empty() {
        for n in default_events() {
            if exists(dir, kmem::SYSTEM, n) {
                push(Event {
                    system: kmem::SYSTEM.into(),
                    name: n.into(),
                });
            }
        }
        if out.is_empty() {
            return Err(Failure::input(format!(
                "this kernel has none of the kmem events ({}/events/kmem is missing or empty)",
                dir.path.display()
            )));
        }
        return Ok(out);
    }
    for raw in specs {
        let spec = raw.trim();
        if spec.is_empty() {
            continue;
        }
        let (system, name) = match spec.split_once([':', '/']) {
            Some((s, n)) => (s, n),
            None => (kmem::SYSTEM, spec),
        };
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        };
        if !valid(system) || !(valid(name) || name == "*") {
            return Err(Failure::usage(format!(
                "`{spec}` is not an event name (expected `event`, `system:event` or `system:*`)"
            )));
        }
        if name == "*" {
            let sysdir = dir.file(&format!("events/{system}"));
            let mut names: Vec<String> = fs::read_dir(&sysdir)
                .map_err(|_| {
                    Failure::usage(format!(
                        "unknown event system `{system}` (no {})",
                        sysdir.display()
                    ))
                })?
                .flatten()
                .filter(|e| e.path().join("format").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for n in names {
                push(Event {
                    system: system.into(),
                    name: n,
                });
            }
            continue;
        }
        if !exists(dir, system, name) {
            return Err(Failure::usage(format!(
                "unknown event `{spec}`: this kernel has no {}/events/{system}/{name} (see available_events)",
                dir.path.display()
            )));
        }
        push(Event {
            system: system.into(),
            name: name.into(),
        });
    }
    if out.is_empty() {
        return Err(Failure::usage("no events given to -e"));
    }
    Ok(out)
}

/// The ftrace entries a write to `trace_marker` (`print`),
/// `trace_marker_raw` (`raw_data`) or `trace_printk()` (`bputs`, `bprint`)
/// leaves in any instance, whose formats this kernel has: nothing enables
/// them, and the log carries their formats so that what a workload marks
/// (`echo "phase 2" > instances/NAME/trace_marker`) lists as the kernel
/// prints it.
pub fn marker_formats(dir: &TraceDir) -> Vec<Event> {
    ["print", "raw_data", "bputs", "bprint"]
        .into_iter()
        .filter(|n| exists(dir, "ftrace", n))
        .map(|n| Event {
            system: "ftrace".into(),
            name: n.into(),
        })
        .collect()
}

/// The events enabled in `set_event` (boot mode), as `system:name` lines.
pub fn enabled_in(dir: &TraceDir) -> Vec<Event> {
    dir.read_string("set_event")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (s, n) = l.trim().split_once(':')?;
            Some(Event {
                system: s.into(),
                name: n.into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> (tempfile::TempDir, TraceDir) {
        let t = tempfile::tempdir().unwrap();
        for e in ["kmem/kmalloc", "kmem/kfree", "sched/sched_switch"] {
            let d = t.path().join("events").join(e);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("format"), "name: x\n").unwrap();
        }
        let dir = TraceDir {
            path: t.path().into(),
        };
        (t, dir)
    }

    #[test]
    fn defaults_are_what_the_kernel_has() {
        let (_t, d) = fake();
        let ev = resolve(&d, &[]).unwrap();
        let names: Vec<_> = ev.iter().map(|e| e.colon()).collect();
        assert_eq!(names, ["kmem:kmalloc", "kmem:kfree"]);
    }

    #[test]
    fn specs() {
        let (_t, d) = fake();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let ev = resolve(&d, &s(&["kfree", "sched:*", "kmem:kfree"])).unwrap();
        let names: Vec<_> = ev.iter().map(|e| e.colon()).collect();
        assert_eq!(names, ["kmem:kfree", "sched:sched_switch"]);
        let e = resolve(&d, &s(&["kmem:nope"])).unwrap_err();
        assert_eq!(e.code, kmemtrace_cli::exit::USAGE.code);
        assert!(e.msg.contains("unknown event"), "{}", e.msg);
        assert!(resolve(&d, &s(&["../x"])).is_err());
        assert!(resolve(&d, &s(&["nosys:*"])).is_err());
    }
}
