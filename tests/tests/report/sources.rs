//! `--vmlinux`: call sites' source lines from DWARF, checked against GNU
//! addr2line (what the kernel's `scripts/faddr2line` runs) on an ELF built
//! here from C with `-g -O2` and two functions inlined at the call.

use crate::synthetic::Synth;
use crate::{common, report, report_json, temp_log};
use kmemtrace_format::records::{Meta, MetaKind};
use std::path::Path;
use std::process::Command;

/// `sink` is called from `leaf`, inlined into `middle`, inlined into
/// `outer`: the call's chain is leaf, middle, outer.
const C: &str = r#"
__attribute__((noinline)) void *sink(unsigned long n)
{
	__asm__ volatile("" ::: "memory");
	return (void *)n;
}

static inline __attribute__((always_inline)) void *leaf(unsigned long n)
{
	return sink(n * 2);
}

static inline __attribute__((always_inline)) void *middle(unsigned long n)
{
	void *p = leaf(n + 1);
	__asm__ volatile("" ::: "memory");
	return p;
}

unsigned long calls;

void *outer(unsigned long n)
{
	void *p = middle(n);
	calls++;
	return p;
}

void _start(void)
{
	outer(1);
	for (;;)
		;
}
"#;

/// Where the test kernel's text runs: far from the synthetic log's other
/// functions, as KASLR would move it.
const RUN_TEXT: u64 = 0xffff_ffff_8200_0000;

fn tool(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn have(t: &str) -> bool {
    Command::new(t)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Symbol `name`'s address in `elf` (nm).
fn symbol(elf: &Path, name: &str) -> u64 {
    let nm = tool(Command::new("nm").arg(elf));
    nm.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("no {name} in {nm}"))
}

/// The return address of `outer`'s call to `sink` (objdump).
fn return_address(elf: &Path) -> u64 {
    let d = tool(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(elf),
    );
    let body: Vec<&str> = d
        .split("\n\n")
        .find(|b| b.contains("<outer>:"))
        .expect("outer in the disassembly")
        .lines()
        .collect();
    let call = body
        .iter()
        .position(|l| l.contains("call") && l.contains("<sink>"))
        .expect("a call to sink in outer");
    let next = body[call + 1].trim_start();
    u64::from_str_radix(next.split(':').next().unwrap(), 16).unwrap()
}

/// GNU addr2line's chain at `addr`: (function, file, line), innermost first.
fn gnu_chain(elf: &Path, addr: u64) -> Vec<(String, String, u64)> {
    gnu_chain_with(&[], elf, addr)
}

/// GNU addr2line's chain at `addr` with more options (`-j SECTION`: an
/// offset into a relocatable object's section). Line 0 where it says `?`.
pub(crate) fn gnu_chain_with(args: &[&str], elf: &Path, addr: u64) -> Vec<(String, String, u64)> {
    let out = tool(
        Command::new("addr2line")
            .args(["-f", "-i"])
            .args(args)
            .arg("-e")
            .arg(elf)
            .arg(format!("0x{addr:x}")),
    );
    let lines: Vec<&str> = out.lines().collect();
    lines
        .chunks(2)
        .map(|c| {
            let (file, line) = c[1].rsplit_once(':').unwrap();
            // "file.c:12 (discriminator 1)"
            let line = line.split_whitespace().next().unwrap().parse().unwrap_or(0);
            (c[0].to_string(), file.to_string(), line)
        })
        .collect()
}

/// Whether gcc and binutils' `tools` are here; a visible skip if not.
fn tools_or_skip(test: &str, tools: &[&str]) -> bool {
    let missing = tools.iter().find(|t| !have(t));
    if let Some(t) = missing {
        common::skip(
            test,
            common::Missing::Tool,
            &format!("no {t} (gcc, binutils)"),
        );
    }
    missing.is_none()
}

#[test]
fn vmlinux_gives_each_call_site_its_inlined_chain_as_addr2line_does() {
    const TEST: &str = "vmlinux_gives_each_call_site_its_inlined_chain_as_addr2line_does";
    if !tools_or_skip(TEST, &["gcc", "nm", "objdump", "addr2line"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.c");
    std::fs::write(&src, C).unwrap();
    let elf = dir.path().join("vmlinux");
    tool(
        Command::new("gcc")
            .args([
                "-g",
                "-O2",
                "-fno-optimize-sibling-calls",
                "-fno-pie",
                "-no-pie",
            ])
            .args(["-nostdlib", "-static", "-Wl,--defsym=_text=outer", "-o"])
            .arg(&elf)
            .arg(&src),
    );
    let link_text = symbol(&elf, "_text");
    let slide = RUN_TEXT.wrapping_sub(link_text);
    let ret = return_address(&elf);
    let want = gnu_chain(&elf, ret - 1);
    let names: Vec<&str> = want.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(
        names,
        ["leaf", "middle", "outer"],
        "gcc inlined otherwise: {want:?}"
    );

    // A log whose kallsyms has the kernel moved by `slide`, and one
    // allocation from that call.
    let mut s = Synth::new("6.18.44");
    // `_text` is `outer`'s alias here: named after it (aliases resolve
    // to the first in file order).
    let ks: String = ["outer", "_text", "sink"]
        .iter()
        .map(|n| format!("{:016x} T {n}\n", symbol(&elf, n).wrapping_add(slide)))
        .collect();
    s.b.meta(Meta::new(MetaKind::Kallsyms, ks));
    let site = ret.wrapping_add(slide);
    s.kmalloc_at(0, 1_000_000, 100, site, 0xffff_8880_0100_0000, 100, 128, -1);
    let log = temp_log(&s.build());

    let r = report_json(log.path(), &["--vmlinux", elf.to_str().unwrap()]);
    let src = &r["sources"];
    assert!(
        src["debug_info"]
            .as_str()
            .unwrap()
            .contains(&format!("KASLR offset 0x{slide:x} from _text")),
        "{src}"
    );
    let row = &src["callsites"][0];
    assert_eq!(row["addr"], format!("0x{site:x}"));
    assert!(
        row["callsite"].as_str().unwrap().starts_with("outer+0x"),
        "{row}"
    );
    let got: Vec<(String, String, u64)> = row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["file"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);

    // The text report prints the chain as faddr2line does.
    let o = report(&[
        log.path().to_str().unwrap(),
        "--vmlinux",
        elf.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    let (leaf, middle) = (&want[0], &want[1]);
    for line in [
        format!("  leaf at {}:{}", leaf.1, leaf.2),
        format!("  (inlined by) middle at {}:{}", middle.1, middle.2),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    // The Parquet export carries the chain in callsites.parquet.
    parquet_has_the_chain(log.path(), &elf, dir.path(), &want);
    // Without --vmlinux: no sources at all.
    assert!(report_json(log.path(), &[]).get("sources").is_none());
    // A file without DWARF is unusable input.
    let o = report(&[
        log.path().to_str().unwrap(),
        "--vmlinux",
        src_path(dir.path()).to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn src_path(dir: &Path) -> std::path::PathBuf {
    dir.join("k.c")
}

/// `kmemtrace-export --to parquet --vmlinux`: the call site's row has the
/// innermost frame and the whole chain (read back by DuckDB).
fn parquet_has_the_chain(log: &Path, elf: &Path, dir: &Path, want: &[(String, String, u64)]) {
    const TEST: &str = "vmlinux_gives_each_call_site_its_inlined_chain_as_addr2line_does";
    let out = dir.join("dataset");
    tool(
        Command::new(common::bin("kmemtrace-export"))
            .arg(log)
            .args(["--to", "parquet", "-q", "--vmlinux"])
            .arg(elf)
            .arg("-o")
            .arg(&out),
    );
    let has_duckdb = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_duckdb {
        return common::skip(
            TEST,
            common::Missing::Tool,
            "python3 with duckdb (pip install duckdb)",
        );
    }
    let q = format!(
        "import duckdb, json; print(json.dumps(duckdb.sql(\"select source_function, source_file, \
         source_line, source_chain from read_parquet('{}')\").fetchall()))",
        out.join("callsites.parquet").display()
    );
    let rows: serde_json::Value =
        serde_json::from_str(&tool(Command::new("python3").args(["-c", &q]))).unwrap();
    let row = &rows[0];
    assert_eq!(row[0], want[0].0.as_str(), "{rows}");
    assert_eq!(row[1], want[0].1.as_str(), "{rows}");
    assert_eq!(row[2], want[0].2, "{rows}");
    let chain = row[3].as_str().unwrap();
    let expect: Vec<String> = want
        .iter()
        .enumerate()
        .map(|(i, (f, file, line))| {
            let at = format!("{f} at {file}:{line}");
            if i == 0 {
                at
            } else {
                format!("(inlined by) {at}")
            }
        })
        .collect();
    assert_eq!(chain, expect.join("; "));
    // A trace.dat has no place for them.
    let o = Command::new(common::bin("kmemtrace-export"))
        .arg(log)
        .args(["--to", "trace-dat", "--vmlinux"])
        .arg(elf)
        .arg("-o")
        .arg(dir.join("t.dat"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// The stall capture's episodes: each call site in the report's `sources`,
/// and each Perfetto slice with a `source` argument (here `??`: the file
/// given is not that kernel's, and says so).
#[test]
fn stall_call_sites_have_sources_in_the_report_and_perfetto() {
    let log = common::workspace().join("tests/data/stalls-6.1-x86_64.kmt");
    // A file with DWARF, but not the recorded kernel's.
    let elf = common::bin("kmemtrace-report");
    let r = report_json(&log, &["--vmlinux", elf.to_str().unwrap()]);
    let stalled: std::collections::BTreeSet<&str> = r["stalls"]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["callsite"].as_str())
        .collect();
    assert!(!stalled.is_empty());
    let named: std::collections::BTreeSet<&str> = r["sources"]["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["callsite"].as_str().unwrap())
        .collect();
    assert!(
        stalled.is_subset(&named),
        "{stalled:?} not all in {named:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.pftrace");
    tool(
        Command::new(common::bin("kmemtrace-export"))
            .arg(&log)
            .args(["--to", "perfetto", "--perfetto-compression", "none", "-q"])
            .arg("--vmlinux")
            .arg(&elf)
            .arg("-o")
            .arg(&out),
    );
    let trace = std::fs::read(&out).unwrap();
    let count = |needle: &[u8]| trace.windows(needle.len()).filter(|w| *w == needle).count();
    let episodes = r["stalls"]["episodes"].as_u64().unwrap() as usize;
    // A debug annotation's name, `source`, then its string value, `??`.
    assert_eq!(count(b"\x52\x06source\x32\x02??"), episodes);
}

/// A module's code: `C`'s chain again, and a second caller in
/// `.text.unlikely`, a section that starts at address 0 in the `.ko` as
/// `.text` does.
const MODULE_C: &str = r#"
__attribute__((section(".text.unlikely"), noinline)) void *cold_outer(unsigned long n)
{
	void *p = middle(n + 7);
	calls += 2;
	return p;
}
"#;

/// Where the test module's sections run, as the module loader placed them.
const RUN_MODULE_TEXT: u64 = 0xffff_ffff_c0a0_0000;
const RUN_MODULE_UNLIKELY: u64 = 0xffff_ffff_c0a2_0000;

/// The return address of `caller`'s call to `sink` in a relocatable
/// object, as an offset into its section (the call's target is a
/// relocation there: `objdump -dr`).
fn return_offset(obj: &Path, section: &str, caller: &str) -> u64 {
    let d = tool(
        Command::new("objdump")
            .args(["-dr", "--no-show-raw-insn", "-j", section])
            .arg(obj),
    );
    let body: Vec<&str> = d
        .split("\n\n")
        .find(|b| b.contains(&format!("<{caller}>:")))
        .unwrap_or_else(|| panic!("{caller} in {d}"))
        .lines()
        .collect();
    let reloc = body
        .iter()
        .position(|l| l.contains("R_") && l.contains("sink"))
        .unwrap_or_else(|| panic!("a call to sink in {caller}: {body:?}"));
    let next = body[reloc + 1..]
        .iter()
        .find(|l| !l.contains("R_"))
        .unwrap()
        .trim_start();
    u64::from_str_radix(next.split(':').next().unwrap(), 16).unwrap()
}

/// A `sources` row's chain as GNU addr2line's is written: `??` and line 0
/// where unknown.
pub(crate) fn frames_of(row: &serde_json::Value) -> Vec<(String, String, u64)> {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("??").to_string(),
                f["file"].as_str().unwrap_or("??").to_string(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn modules_give_call_sites_in_each_section_their_chain_as_addr2line_does() {
    const TEST: &str = "modules_give_call_sites_in_each_section_their_chain_as_addr2line_does";
    if !tools_or_skip(TEST, &["gcc", "nm", "objdump", "addr2line", "objcopy"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.c");
    std::fs::write(&src, format!("{C}{MODULE_C}")).unwrap();
    let mods = dir.path().join("lib/modules/6.18.44/kernel/drivers/misc");
    std::fs::create_dir_all(&mods).unwrap();
    // The module as kbuild leaves it: a relocatable object, its name with
    // `-` where the kernel says `_`.
    let ko = mods.join("kmt-test.ko");
    tool(
        Command::new("gcc")
            .args(["-c", "-g", "-O2", "-fno-optimize-sibling-calls", "-o"])
            .arg(&ko)
            .arg(&src),
    );
    let sites = [
        (".text", "outer", RUN_MODULE_TEXT),
        (".text.unlikely", "cold_outer", RUN_MODULE_UNLIKELY),
    ];
    let mut s = Synth::new("6.18.44");
    let mut ks = String::from("ffffffff81000000 T _text\nffffffff81000100 T kernel_fn\n");
    for name in ["outer", "sink", "calls", "cold_outer"] {
        let at = symbol(&ko, name);
        let base = if name == "cold_outer" {
            RUN_MODULE_UNLIKELY
        } else {
            RUN_MODULE_TEXT
        };
        let ty = if name == "calls" { 'b' } else { 't' };
        ks += &format!("{:016x} {ty} {name}\t[kmt_test]\n", base + at);
    }
    s.b.meta(Meta::new(MetaKind::Kallsyms, ks));
    let mut want = Vec::new();
    for (i, (section, caller, base)) in sites.iter().enumerate() {
        let ret = return_offset(&ko, section, caller);
        let chain = gnu_chain_with(&["-j", section], &ko, ret - 1);
        let names: Vec<&str> = chain.iter().map(|w| w.0.as_str()).collect();
        assert_eq!(names, ["leaf", "middle", *caller], "gcc inlined otherwise");
        let site = base + ret;
        let ptr = 0xffff_8880_0100_0000 + 0x100 * i as u64;
        s.kmalloc_at(0, 1_000_000 + i as u64, 100, site, ptr, 100, 128, -1);
        want.push((site, chain));
    }
    let log = temp_log(&s.build());

    let root = dir.path().join("lib/modules/6.18.44");
    let r = report_json(log.path(), &["--modules", root.to_str().unwrap()]);
    let src = &r["sources"];
    let said = src["debug_info"].as_str().unwrap();
    assert!(
        said.ends_with("1 .ko files, for 1 of the log's 1 loaded modules"),
        "{said}"
    );
    for (site, chain) in &want {
        let row = src["callsites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["addr"] == format!("0x{site:x}"))
            .unwrap_or_else(|| panic!("no row for 0x{site:x} in {src}"));
        assert!(
            row["callsite"].as_str().unwrap().ends_with(" [kmt_test]"),
            "{row}"
        );
        assert_eq!(&frames_of(row), chain);
    }
    // Another module's directory: the module's call sites have no chain.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(&ko, other.join("not-it.ko")).unwrap();
    let r = report_json(log.path(), &["--modules", other.to_str().unwrap()]);
    let said = r["sources"]["debug_info"].as_str().unwrap();
    assert!(
        said.ends_with("1 .ko files, for 0 of the log's 1 loaded modules"),
        "{said}"
    );
    for row in r["sources"]["callsites"].as_array().unwrap() {
        assert_eq!(row["frames"], serde_json::json!([]), "{row}");
    }
    // The loaded module's file without DWARF: said, and no chain.
    let stripped = dir.path().join("stripped");
    std::fs::create_dir(&stripped).unwrap();
    tool(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&ko)
            .arg(stripped.join("kmt_test.ko")),
    );
    let r = report_json(log.path(), &["--modules", stripped.to_str().unwrap()]);
    let said = r["sources"]["debug_info"].as_str().unwrap();
    assert!(
        said.ends_with("for 1 of the log's 1 loaded modules (1 of those with call sites without DWARF or unreadable)"),
        "{said}"
    );
    // A directory without a .ko file is unusable input.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = report(&[
        log.path().to_str().unwrap(),
        "--modules",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
