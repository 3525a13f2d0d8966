//! Modules' debug info (`--modules DIR`): the `.ko` files under a
//! directory (a build tree, `/lib/modules/VERSION`, or Debian's
//! `/usr/lib/debug/lib/modules/VERSION` of a linux-image-*-dbg package),
//! by module name. A module's code runs wherever the loader put it; the
//! log's kallsyms names each of its symbols with its run-time address and
//! module, so an address is found in the `.ko` as the same symbol's
//! address there plus the offset into it.

use super::dwarf::{self, Reader};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// One module's DWARF and where its functions are in it.
pub struct Module {
    pub ctx: addr2line::Context<Reader>,
    pub functions: HashMap<String, u64>,
}

/// What a directory held.
pub struct Found {
    /// `.ko` files under it.
    pub files: usize,
    /// Loaded modules whose files there all lack DWARF or are unreadable.
    pub passed_over: usize,
}

/// The `.ko` files under `dir` of the modules named `loaded` (the log's
/// kallsyms: a distribution's debug tree holds thousands, and only these
/// can be placed), with DWARF, by module name.
pub fn read_dir(
    dir: &Path,
    loaded: &HashSet<&str>,
) -> Result<(HashMap<String, Module>, Found), String> {
    let mut files = Vec::new();
    walk(dir, &mut files).map_err(|e| format!("{}: {e}", dir.display()))?;
    files.sort();
    let mut found = Found {
        files: files.len(),
        passed_over: 0,
    };
    let mut modules = HashMap::new();
    let mut without = HashSet::new();
    for path in files {
        let name = file_module_name(&path);
        if !loaded.contains(name.as_str()) || modules.contains_key(&name) {
            continue;
        }
        match open(&path) {
            // The first of two files of one module with DWARF (sorted
            // paths: a build tree's copy before an install's).
            Ok((name, m)) => {
                modules.entry(name).or_insert(m);
            }
            Err(_) => {
                without.insert(name);
            }
        }
    }
    // Modules none of whose files had DWARF.
    found.passed_over = without.iter().filter(|n| !modules.contains_key(*n)).count();
    Ok((modules, found))
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

fn open(path: &Path) -> Result<(String, Module), String> {
    let name = path.display().to_string();
    let data = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{name}: {e}"))?;
    let (ctx, layout) = dwarf::load(&file, &name)?;
    let functions = dwarf::function_addresses(&file, &layout);
    Ok((module_name(&file, path), Module { ctx, functions }))
}

/// The module's name as the kernel knows it: `.modinfo`'s `name=`, else
/// the file's, with `-` as `_` (kbuild's KBUILD_MODNAME).
fn module_name(file: &object::File<'_>, path: &Path) -> String {
    use object::{Object, ObjectSection};
    let from_modinfo = file
        .section_by_name(".modinfo")
        .and_then(|s| s.uncompressed_data().ok())
        .and_then(|d| {
            d.split(|&b| b == 0)
                .find_map(|f| f.strip_prefix(b"name="))
                .map(|n| String::from_utf8_lossy(n).into_owned())
        });
    from_modinfo.unwrap_or_else(|| file_module_name(path))
}

/// The module a file is of by its name, with `-` as `_` (kbuild's
/// KBUILD_MODNAME).
fn file_module_name(path: &Path) -> String {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    stem.replace('-', "_")
}
