//! Source lines from a kernel's debug info (`--vmlinux`, `--modules`):
//! for an address, its function, `file:line` and the chain of functions
//! inlined there, as the kernel's `scripts/faddr2line` prints them. The
//! DWARF is read by the `addr2line` crate (gimli underneath); the ELF's
//! sections, compressed or not, by `object`.
//!
//! The running kernel's addresses are its link-time ones moved by KASLR:
//! the slide is the log's kallsyms address of `_text` (else `_stext`)
//! less the ELF's. A module's are found through its symbols (`modules`).

mod dwarf;
mod modules;

use kmemtrace_kernel::Kallsyms;
use object::{Object, ObjectSymbol};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One frame of an address's chain: the function and where in its source.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceFrame {
    /// The function (`None` where the DWARF names none).
    pub function: Option<String>,
    /// The source file, as the compilation recorded it.
    pub file: Option<String>,
    pub line: Option<u32>,
}

impl std::fmt::Display for SourceFrame {
    /// `function at file:line`, as addr2line and faddr2line print it (`??`
    /// where unknown).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let func = self.function.as_deref().unwrap_or("??");
        let file = self.file.as_deref().unwrap_or("??");
        match self.line {
            Some(l) => write!(f, "{func} at {file}:{l}"),
            None => write!(f, "{func} at {file}:?"),
        }
    }
}

/// A chain as `scripts/faddr2line` prints it: the innermost frame, then
/// `(inlined by)` each function that inlined it; `??` for an empty chain
/// (an address the debug info does not cover).
pub fn chain_lines(frames: &[SourceFrame]) -> Vec<String> {
    if frames.is_empty() {
        return vec!["??".into()];
    }
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i == 0 {
                f.to_string()
            } else {
                format!("(inlined by) {f}")
            }
        })
        .collect()
}

/// A kernel's debug info, ready to look addresses up.
pub struct DebugInfo {
    kernel: Option<Kernel>,
    /// The vmlinux and how its addresses were matched to the log's.
    kernel_said: Option<String>,
    modules: Option<ModuleFiles>,
}

/// `--modules DIR`: its files, and the log's kallsyms, which says which
/// module and symbol an address is in (without `--modules`, every address
/// is looked up in the vmlinux and no copy of kallsyms is kept).
struct ModuleFiles {
    dir: PathBuf,
    files: modules::Modules,
    kallsyms: Option<Kallsyms>,
}

/// The kernel image's DWARF and its KASLR slide.
struct Kernel {
    ctx: addr2line::Context<dwarf::Reader>,
    /// Run-time address less link-time address.
    slide: u64,
}

/// The symbols whose run-time address (in kallsyms) and link-time one (in
/// the ELF) give the slide, in order of preference.
const ANCHORS: [&str; 2] = ["_text", "_stext"];

impl DebugInfo {
    /// Reads `vmlinux` (a vmlinux with DWARF) and the `.ko` files under
    /// `modules`, with the slide and the modules' places from `kallsyms`
    /// (the recorded kernel's). At least one of them is given.
    pub fn open(
        vmlinux: Option<&Path>,
        modules: Option<&Path>,
        kallsyms: Option<&Kallsyms>,
    ) -> Result<DebugInfo, String> {
        let (kernel, kernel_said) = match vmlinux {
            Some(p) => {
                let (k, how) = Kernel::open(p, kallsyms)?;
                (Some(k), Some(format!("{} ({how})", p.display())))
            }
            None => (None, None),
        };
        let modules = match modules {
            Some(dir) => {
                let loaded: HashSet<&str> = kallsyms
                    .map(|k| k.modules().iter().map(String::as_str).collect())
                    .unwrap_or_default();
                let m = modules::Modules::scan(dir, &loaded)?;
                if m.files == 0 {
                    return Err(format!(
                        "{}: no .ko file there (give a module build tree, /lib/modules/VERSION, \
                         or /usr/lib/debug/lib/modules/VERSION of Debian's linux-image-*-dbg)",
                        dir.display()
                    ));
                }
                Some(ModuleFiles {
                    dir: dir.to_path_buf(),
                    files: m,
                    kallsyms: kallsyms.cloned(),
                })
            }
            None => None,
        };
        Ok(DebugInfo {
            kernel,
            kernel_said,
            modules,
        })
    }

    /// The files and how addresses were matched to them, for the report:
    /// said after the lookups, which find the modules without DWARF.
    pub fn source(&self) -> String {
        let mut said: Vec<String> = self.kernel_said.iter().cloned().collect();
        if let Some(m) = &self.modules {
            said.push(modules_said(&m.dir, &m.files, m.kallsyms.as_ref()));
        }
        said.join("; ")
    }

    /// The chain at run-time address `addr`, innermost first (the function
    /// inlined deepest, then each that inlined it, then the function the
    /// code is in); empty where the DWARF does not cover it.
    pub fn frames(&self, addr: u64) -> Vec<SourceFrame> {
        let modules = self.modules.as_ref();
        let symbol = modules
            .and_then(|m| m.kallsyms.as_ref())
            .and_then(|k| k.resolve(addr));
        match (modules, symbol) {
            (Some(ms), Some(sym)) if sym.module.is_some() => {
                let found = sym
                    .module
                    .and_then(|name| ms.files.get(name))
                    .and_then(|m| {
                        let at = m.functions.get(sym.name)?;
                        Some(frames_at(&m.ctx, at.wrapping_add(sym.offset)))
                    });
                found.unwrap_or_default()
            }
            _ => match &self.kernel {
                Some(k) => frames_at(&k.ctx, addr.wrapping_sub(k.slide)),
                None => Vec::new(),
            },
        }
    }

    /// The chain of the call a return address comes back to (a call site
    /// the kernel traced, `_RET_IP_`, or a frame of a stack other than the
    /// first): looked up one byte back, inside the call instruction, as
    /// perf does, so that the line is the call's and not the next one's.
    pub fn frames_of_return_address(&self, addr: u64) -> Vec<SourceFrame> {
        self.frames(addr.wrapping_sub(1))
    }
}

/// The chain at `probe`, an address of the DWARF's own.
fn frames_at(ctx: &addr2line::Context<dwarf::Reader>, probe: u64) -> Vec<SourceFrame> {
    let mut out = Vec::new();
    let Ok(mut it) = ctx.find_frames(probe).skip_all_loads() else {
        return out;
    };
    while let Ok(Some(f)) = it.next() {
        let function = f
            .function
            .as_ref()
            .and_then(|n| n.raw_name().ok())
            .map(|n| n.into_owned());
        let (file, line) = f
            .location
            .map_or((None, None), |l| (l.file.map(str::to_string), l.line));
        out.push(SourceFrame {
            function,
            file,
            line,
        });
    }
    out
}

/// `DIR: N .ko files, for M of the log's K loaded modules`, and those of
/// them looked up whose files have no DWARF.
fn modules_said(dir: &Path, m: &modules::Modules, kallsyms: Option<&Kallsyms>) -> String {
    let dir = dir.display();
    let Some(k) = kallsyms else {
        return format!("{dir}: the log has no kallsyms, so module addresses cannot be placed");
    };
    let mut s = format!(
        "{dir}: {} .ko files, for {} of the log's {} loaded modules",
        m.files,
        m.present(),
        k.modules().len()
    );
    match m.without_dwarf() {
        0 => {}
        n => s += &format!(" ({n} of those with call sites without DWARF or unreadable)"),
    }
    s
}

impl Kernel {
    fn open(path: &Path, kallsyms: Option<&Kallsyms>) -> Result<(Kernel, String), String> {
        let name = path.display().to_string();
        let data = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
        let file = object::File::parse(&*data).map_err(|e| format!("{name}: {e}"))?;
        let (ctx, _) = dwarf::load(&file, &name)?;
        let (slide, how) = slide(&file, kallsyms);
        Ok((Kernel { ctx, slide }, how))
    }
}

/// The slide and how it was found.
fn slide(file: &object::File<'_>, kallsyms: Option<&Kallsyms>) -> (u64, String) {
    let Some(k) = kallsyms else {
        return (0, "no kallsyms: addresses taken as link-time ones".into());
    };
    for anchor in ANCHORS {
        let linked = file
            .symbols()
            .find(|s| s.name() == Ok(anchor))
            .map(|s| s.address());
        if let (Some(run), Some(linked)) = (k.address_of(anchor), linked) {
            let slide = run.wrapping_sub(linked);
            return (slide, format!("KASLR offset 0x{slide:x} from {anchor}"));
        }
    }
    (
        0,
        "_text and _stext not both in the log's kallsyms and the file: addresses taken as link-time ones"
            .into(),
    )
}

/// The source chains of the call sites `report`'s tables name: the slab
/// call sites, the leaks', the page allocations' and the allocation
/// stalls', each once.
pub fn sources(report: &crate::model::Report, debug: &DebugInfo) -> crate::model::Sources {
    use crate::model::{Addr, SourceRow};
    let named = report
        .callsites
        .iter()
        .map(|r| (&r.callsite, r.addr))
        .chain(report.leaks.groups.iter().map(|r| (&r.callsite, r.addr)))
        .chain(report.pages.callsites.iter().map(|r| (&r.callsite, r.addr)))
        .chain(
            report
                .sections
                .stalls
                .all
                .iter()
                .filter_map(|e| Some((e.callsite.as_ref()?, Addr(e.callsite_addr?)))),
        );
    let mut seen = std::collections::HashSet::new();
    let callsites = named
        .filter(|(_, a)| a.0 != 0 && seen.insert(*a))
        .map(|(c, addr)| SourceRow {
            callsite: c.clone(),
            addr,
            frames: debug.frames_of_return_address(addr.0),
        })
        .collect();
    crate::model::Sources {
        debug_info: debug.source(),
        callsites,
    }
}
