//! A real kernel's debug info: Debian's `linux-image-6.1.0-56-amd64-dbg`,
//! the package of the kernel the bundled 6.1 captures were recorded on
//! (`tests/data/make-boot-capture.sh`, `make-stall-capture.sh`). With its
//! vmlinux (`--vmlinux`) and module `.ko` files (`--modules`), every call
//! site of both captures gets a chain, the function the code is in is the
//! one kallsyms names, and the chains are GNU addr2line's, for the kernel
//! and for the modules (ext4, virtio_ring) alike.
//!
//! Opt-in (the package is 860 MB): `KMEMTRACE_LINUX_DBG` names the `.deb`
//! (`apt-get download linux-image-6.1.0-56-amd64-dbg`; the test unpacks
//! what it needs, a few minutes) or a directory it was unpacked into
//! (`dpkg-deb -x PKG DIR`).

use crate::sources::{frames_of, gnu_chain_with};
use crate::{common, report_json};

use std::path::{Path, PathBuf};
use std::process::Command;

const RELEASE: &str = "6.1.0-56-amd64";
const TEST: &str = "a_debian_debug_package_gives_every_call_site_addr2lines_chain";

/// The package's vmlinux and modules directory: from an unpacked tree, or
/// unpacked here from the `.deb` into `tmp` (the vmlinux and the modules
/// the captures' kallsyms name).
fn debug_files(given: &Path, tmp: &Path, logs: &[PathBuf]) -> (PathBuf, PathBuf) {
    let root = if given.is_dir() {
        given.to_path_buf()
    } else {
        let contents = common::stdout_ok(Command::new("dpkg-deb").arg("--contents").arg(given));
        let loaded = loaded_modules(logs);
        let mut wanted = vec![format!("./usr/lib/debug/boot/vmlinux-{RELEASE}")];
        for line in contents.lines() {
            let path = line.split_whitespace().last().unwrap_or("");
            let stem = Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().replace('-', "_"));
            if path.ends_with(".ko") && stem.is_some_and(|s| loaded.contains(&s)) {
                wanted.push(path.to_string());
            }
        }
        let script = format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' {}",
            given.display(),
            tmp.display(),
            wanted
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        common::stdout_ok(Command::new("sh").args(["-c", &script]));
        tmp.to_path_buf()
    };
    let debug = root.join("usr/lib/debug");
    (
        debug.join(format!("boot/vmlinux-{RELEASE}")),
        debug.join(format!("lib/modules/{RELEASE}")),
    )
}

/// The modules the logs' kallsyms name.
fn loaded_modules(logs: &[PathBuf]) -> std::collections::BTreeSet<String> {
    logs.iter()
        .flat_map(|log| {
            let log = kmemtrace_import::open_log(log).unwrap();
            log.kallsyms
                .map(|k| k.modules().to_vec())
                .unwrap_or_default()
        })
        .collect()
}

/// `name` without the compiler's suffixes (`.isra.0`, `.part.0`,
/// `.constprop.0`, `.cold`): the function DWARF names.
fn base(name: &str) -> &str {
    name.split_once('.').map_or(name, |(b, _)| b)
}

/// A module symbol's section and value in its `.ko` (objdump -t).
fn in_module(ko: &Path, symbol: &str) -> (String, u64) {
    let t = common::stdout_ok(Command::new("objdump").arg("-t").arg(ko));
    t.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.last() == Some(&symbol) && f.len() >= 5).then(|| {
                let section = f[f.len() - 3].to_string();
                (section, u64::from_str_radix(f[0], 16).unwrap())
            })
        })
        .unwrap_or_else(|| panic!("no {symbol} in {}", ko.display()))
}

fn find_ko(dir: &Path, module: &str) -> PathBuf {
    let out = common::stdout_ok(Command::new("find").arg(dir).args(["-name", "*.ko"]));
    out.lines()
        .map(PathBuf::from)
        .find(|p| p.file_stem().unwrap().to_string_lossy().replace('-', "_") == module)
        .unwrap_or_else(|| panic!("no {module}.ko under {}", dir.display()))
}

#[test]
fn a_debian_debug_package_gives_every_call_site_addr2lines_chain() {
    let Some(given) = std::env::var_os("KMEMTRACE_LINUX_DBG") else {
        return common::skip(
            TEST,
            common::Missing::OptIn,
            &format!(
                "KMEMTRACE_LINUX_DBG unset (the path of linux-image-{RELEASE}-dbg's .deb, \
                 or of a directory it was unpacked into)"
            ),
        );
    };
    let data = common::workspace().join("tests/data");
    let logs = [
        data.join("boot-6.1-x86_64.kmt"),
        data.join("stalls-6.1-x86_64.kmt"),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let (vmlinux, modules) = debug_files(Path::new(&given), tmp.path(), &logs);
    let mut module_rows = 0;
    for log in &logs {
        let r = report_json(
            log,
            &[
                "--vmlinux",
                vmlinux.to_str().unwrap(),
                "--modules",
                modules.to_str().unwrap(),
            ],
        );
        let said = r["sources"]["debug_info"].as_str().unwrap();
        let slide = said
            .split_once("KASLR offset 0x")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(|h| u64::from_str_radix(h, 16).unwrap())
            .unwrap_or_else(|| panic!("{said}"));
        let rows = r["sources"]["callsites"].as_array().unwrap();
        assert!(
            rows.len() > 100,
            "{}: {} call sites",
            log.display(),
            rows.len()
        );
        for (i, row) in rows.iter().enumerate() {
            let site = row["callsite"].as_str().unwrap();
            let chain = frames_of(row);
            let at = format!("{}: {site}", log.display());
            let outer = &chain.last().unwrap_or_else(|| panic!("{at}: no chain")).0;
            assert_eq!(outer, base(site.split('+').next().unwrap()), "{at}");
            let addr =
                u64::from_str_radix(row["addr"].as_str().unwrap().trim_start_matches("0x"), 16)
                    .unwrap();
            match site.split_once(" [") {
                Some((sym, module)) => {
                    let module = module.trim_end_matches(']');
                    let (name, off) = sym.split_once("+0x").unwrap();
                    let ko = find_ko(&modules, module);
                    let (section, value) = in_module(&ko, name);
                    let off = u64::from_str_radix(off, 16).unwrap();
                    let want = gnu_chain_with(&["-j", &section], &ko, value + off - 1);
                    assert_eq!(chain, want, "{at}");
                    module_rows += 1;
                }
                // Every 7th of the kernel's, against GNU addr2line.
                None if i % 7 == 0 => {
                    let want = gnu_chain_with(&[], &vmlinux, addr.wrapping_sub(slide) - 1);
                    assert_eq!(chain, want, "{at}");
                }
                None => {}
            }
        }
    }
    assert!(module_rows >= 10, "{module_rows} module call sites");
}
