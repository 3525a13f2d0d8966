//! Modules' debug info (`--modules DIR`): the `.ko` files under a
//! directory (a build tree, `/lib/modules/VERSION`, or Debian's
//! `/usr/lib/debug/lib/modules/VERSION` of a linux-image-*-dbg package),
//! by module name. A module's code runs wherever the loader put it; the
//! log's kallsyms names each of its symbols with its run-time address and
//! module, so an address is found in the `.ko` as the same symbol's
//! address there plus the offset into it.
//!
//! Only the modules the log's kallsyms lists are considered, and a
//! module's DWARF is read when an address in it is first looked up: a
//! distribution's debug tree holds thousands of files, and a GPU driver's
//! alone hundreds of megabytes.

use super::dwarf::{self, Reader};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One module's DWARF and where its functions are in it.
pub struct Module {
    pub ctx: addr2line::Context<Reader>,
    pub functions: HashMap<String, u64>,
}

/// The loaded modules' files under a directory, read as they are needed.
pub struct Modules {
    /// `.ko` files under the directory.
    pub files: usize,
    /// Each loaded module's files (sorted: a build tree's copy before an
    /// install's), by module name.
    candidates: HashMap<String, Vec<PathBuf>>,
    /// Modules looked up so far: their DWARF, or `None` (no file of theirs
    /// had DWARF).
    read: RefCell<HashMap<String, Option<Rc<Module>>>>,
}

impl Modules {
    /// The `.ko` files under `dir` of the modules named `loaded` (the log's
    /// kallsyms); nothing is read yet.
    pub fn scan(dir: &Path, loaded: &HashSet<&str>) -> Result<Modules, String> {
        let mut files = Vec::new();
        walk(dir, &mut files).map_err(|e| format!("{}: {e}", dir.display()))?;
        files.sort();
        let mut candidates: HashMap<String, Vec<PathBuf>> = HashMap::new();
        let count = files.len();
        for path in files {
            let name = file_module_name(&path);
            if loaded.contains(name.as_str()) {
                candidates.entry(name).or_default().push(path);
            }
        }
        Ok(Modules {
            files: count,
            candidates,
            read: RefCell::new(HashMap::new()),
        })
    }

    /// Loaded modules with a file under the directory.
    pub fn present(&self) -> usize {
        self.candidates.len()
    }

    /// Of the modules looked up, those none of whose files had DWARF.
    pub fn without_dwarf(&self) -> usize {
        self.read.borrow().values().filter(|m| m.is_none()).count()
    }

    /// Module `name`'s DWARF, read on first use: its first file with DWARF.
    pub fn get(&self, name: &str) -> Option<Rc<Module>> {
        if let Some(m) = self.read.borrow().get(name) {
            return m.clone();
        }
        let paths = self.candidates.get(name)?;
        let module = paths.iter().find_map(|p| open(p).ok()).map(Rc::new);
        self.read
            .borrow_mut()
            .insert(name.to_string(), module.clone());
        module
    }
}

/// The `.ko` files under `dir`, following no symbolic link to a directory
/// (a build tree's `source` link leads back up).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "ko") {
            out.push(path);
        }
    }
    Ok(())
}

fn open(path: &Path) -> Result<Module, String> {
    let name = path.display().to_string();
    let data = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{name}: {e}"))?;
    let (ctx, layout) = dwarf::load(&file, &name)?;
    let functions = dwarf::function_addresses(&file, &layout);
    Ok(Module { ctx, functions })
}

/// The module a file is of by its name, with `-` as `_` (kbuild's
/// KBUILD_MODNAME, which names the module in kallsyms).
fn file_module_name(path: &Path) -> String {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    stem.replace('-', "_")
}
