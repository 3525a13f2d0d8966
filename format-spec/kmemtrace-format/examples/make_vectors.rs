//! Writes the test vectors of `format-spec/test-vectors/`:
//!
//! ```text
//! cargo run -p kmemtrace-format --example make_vectors
//! ```
//!
//! Each vector is a log (`.kmt`), the events it holds as text
//! (`.events.txt`, written from the generator's own inputs, not by decoding
//! the log) and a description (`.md`). The library's `tests/vectors.rs`
//! decodes every committed log and compares it with its `.events.txt`, and
//! checks that running this generator again gives the same bytes.
//!
//! The events are laid out from real `format` files of three kernels
//! (`test-vectors/formats/`), packed into sub-buffers by the kernel-rule
//! encoder, with time extends, absolute time stamps, discarded events,
//! `type_len` 0 records and lost-event flags placed on purpose.

use kmemtrace_format::block::{Compression, BLOCK_HEADER_LEN, FILE_HEADER_LEN};
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::records::StatsPhase;
use kmemtrace_kernel::{BigEndian, EventFormat, LittleEndian, RunTimeEndian};
use kmemtrace_testkit::subbuf::Missed;
use kmemtrace_testkit::synth::{encode_event, LogBuilder, SynthRecord, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One generated file.
pub struct VectorFile {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The vectors directory.
pub fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../test-vectors")
}

struct Kernel {
    dir: &'static str,
    machine: &'static str,
    release: &'static str,
    long_size: u8,
}

const X86_64: Kernel = Kernel {
    dir: "linux-6.18-x86_64",
    machine: "x86_64",
    release: "6.18.44",
    long_size: 8,
};
const S390X: Kernel = Kernel {
    dir: "linux-6.1-s390x",
    machine: "s390x",
    release: "6.1.0-50-s390x",
    long_size: 8,
};
const ARMHF: Kernel = Kernel {
    dir: "linux-6.1-armhf",
    machine: "armv7l",
    release: "6.1.0-50-armmp-lpae",
    long_size: 4,
};

struct Spec {
    name: &'static str,
    title: &'static str,
    kernel: Kernel,
    order: RunTimeEndian,
    compression: Compression,
    /// Lost events to flag on CPU 1 partway through.
    missed: Missed,
    damage: Damage,
}

#[derive(Clone, Copy, PartialEq)]
enum Damage {
    None,
    /// Cut the file this many bytes before its end (END block lost too).
    CutFromEnd(usize),
    /// Flip one bit in the payload of the n-th CPU_DATA block.
    FlipInCpuBlock(usize),
}

/// A tiny deterministic generator (64-bit LCG), so vectors never change.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 16
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn load_formats(k: &Kernel) -> BTreeMap<String, (String, EventFormat)> {
    let dir = vectors_dir().join("formats").join(k.dir);
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        let f = EventFormat::parse(&text, Some("kmem")).unwrap();
        out.insert(f.name.clone(), (text, f));
    }
    out
}

/// Builds one vector's log and its expected event listing.
fn build(spec: &Spec) -> (Vec<u8>, String, String) {
    let k = &spec.kernel;
    let formats = load_formats(k);
    let mut b = LogBuilder::new(spec.order, k.long_size, 4096);
    b.compression = spec.compression;
    b.subbufs_per_block = 2;
    b.arch.machine = Some(k.machine.into());
    b.arch.release = Some(k.release.into());
    b.arch.sysname = Some("Linux".into());
    b.arch.hostname = Some("vector".into());
    b.arch.page_size = Some(4096);
    b.arch.nr_cpus = Some(2);
    b.arch.events = Some(
        formats
            .keys()
            .map(|n| format!("kmem:{n}"))
            .collect::<Vec<_>>()
            .join(","),
    );
    for (text, _) in formats.values() {
        b.format("kmem", text).unwrap();
    }
    b.meta(kmemtrace_format::records::Meta::new(
        kmemtrace_format::records::MetaKind::SavedCmdlines,
        "100 vector-cpu0\n101 vector-cpu1\n",
    ));
    for cpu in 0..2 {
        b.stats(
            cpu,
            StatsPhase::Start,
            "entries: 0\noverrun: 0\ncommit overrun: 0\ndropped events: 0\n",
        );
    }

    // A `-kpack` vector holds its sibling's events: the same seed.
    let sibling = spec.name.trim_end_matches("-kpack");
    let mut rng = Lcg(0x6b6d_656d_7472_6163 ^ sibling.len() as u64);
    let ptr_base: u64 = if k.long_size == 4 {
        0xc100_0000
    } else {
        0xffff_8880_0100_0000
    };
    let site_base: u64 = if k.long_size == 4 {
        0xc030_0000
    } else {
        0xffff_ffff_8130_0000
    };
    let long_name =
        "a-cache-name-long-enough-to-push-the-whole-record-past-112-bytes-so-the-kernel-writes-a-type-len-0-header";
    let mut expected = String::new();
    let fmt = |n: &str| &formats[n].1;
    let enc = |f: &EventFormat, pid: i32, v: &[(&str, Value<'_>)]| match spec.order {
        RunTimeEndian::Little => encode_event(LittleEndian, f, pid, v).unwrap(),
        RunTimeEndian::Big => encode_event(BigEndian, f, pid, v).unwrap(),
    };
    let has = |f: &EventFormat, field: &str| f.field(field).is_some();
    let mut counts: BTreeMap<(u32, &str), u64> = BTreeMap::new();
    let mut notes = Vec::new();

    for cpu in 0..2u32 {
        let pid = 100 + cpu as i32;
        let mut ts: u64 = 5_000_000_000 + u64::from(cpu) * 777;
        let mut live: Vec<(u64, bool, u64)> = Vec::new(); // ptr, is_cache, site
        for i in 0..120u32 {
            // Mostly small steps; a few beyond 2^27 ns need a time extend.
            ts += if i % 41 == 40 {
                (1 << 28) + rng.below(1 << 20)
            } else {
                1 + rng.below(20_000)
            };
            if cpu == 1 && i == 60 && spec.missed != Missed::None {
                b.record(cpu, SynthRecord::Lost(spec.missed));
                match spec.missed {
                    Missed::Count(n) => writeln!(expected, "cpu={cpu} missed lost={n}").unwrap(),
                    _ => writeln!(expected, "cpu={cpu} missed lost=unknown").unwrap(),
                }
            }
            if i % 53 == 7 {
                b.record(cpu, SynthRecord::Discarded { ts, len: 24 });
                ts += 1;
            }
            let site = site_base + rng.below(8) * 0x40 + 0x1c;
            let choice = rng.below(6);
            let abs = i % 37 == 11;
            let (name, payload, line) = if !live.is_empty() && choice < 2 {
                let (ptr, is_cache, asite) = live.remove(rng.below(live.len() as u64) as usize);
                let _ = asite;
                if is_cache {
                    let f = fmt("kmem_cache_free");
                    let cname = if i % 3 == 0 { long_name } else { "dentry" };
                    let mut v = vec![("call_site", Value::Uint(site)), ("ptr", Value::Uint(ptr))];
                    let mut line = format!("call_site={site:#x} ptr={ptr:#x}");
                    if has(f, "name") {
                        v.push(("name", Value::Str(cname)));
                        write!(line, " name={cname}").unwrap();
                    }
                    ("kmem_cache_free", enc(f, pid, &v), line)
                } else {
                    let f = fmt("kfree");
                    let v = [("call_site", Value::Uint(site)), ("ptr", Value::Uint(ptr))];
                    (
                        "kfree",
                        enc(f, pid, &v),
                        format!("call_site={site:#x} ptr={ptr:#x}"),
                    )
                }
            } else if choice < 4 {
                let is_cache = choice == 3;
                let ptr = ptr_base + u64::from(cpu) * 0x10_0000 + u64::from(i) * 0x100;
                let req = 1 + rng.below(700);
                let alloc = req.next_power_of_two().max(8);
                let gfp = [0xcc0u64, 0xdc0, 0x820, 0x400dc0][rng.below(4) as usize];
                let node: i64 = -1;
                let ev = if is_cache {
                    "kmem_cache_alloc"
                } else {
                    "kmalloc"
                };
                let f = fmt(ev);
                let mut v = vec![("call_site", Value::Uint(site)), ("ptr", Value::Uint(ptr))];
                let mut line = format!("call_site={site:#x} ptr={ptr:#x}");
                if is_cache && has(f, "name") {
                    v.push(("name", Value::Str("kmalloc-64")));
                    line.push_str(" name=kmalloc-64");
                }
                v.extend([
                    ("bytes_req", Value::Uint(req)),
                    ("bytes_alloc", Value::Uint(alloc)),
                    ("gfp_flags", Value::Uint(gfp)),
                    ("node", Value::Int(node)),
                ]);
                write!(
                    line,
                    " bytes_req={req} bytes_alloc={alloc} gfp_flags={gfp:#x} node={node}"
                )
                .unwrap();
                live.push((ptr, is_cache, site));
                (ev, enc(f, pid, &v), line)
            } else if choice == 4 {
                let pfn = 0x1000 + rng.below(0x10000);
                let order = rng.below(3);
                let f = fmt("mm_page_alloc");
                let v = [
                    ("pfn", Value::Uint(pfn)),
                    ("order", Value::Uint(order)),
                    ("gfp_flags", Value::Uint(0x140cca)),
                    ("migratetype", Value::Int(1)),
                ];
                let line = format!("pfn={pfn:#x} order={order} gfp_flags=0x140cca migratetype=1");
                ("mm_page_alloc", enc(f, pid, &v), line)
            } else {
                let pfn = 0x1000 + rng.below(0x10000);
                let f = fmt("mm_page_free");
                let v = [("pfn", Value::Uint(pfn)), ("order", Value::Uint(0))];
                (
                    "mm_page_free",
                    enc(f, pid, &v),
                    format!("pfn={pfn:#x} order=0"),
                )
            };
            writeln!(expected, "cpu={cpu} ts={ts} {name} pid={pid} {line}").unwrap();
            *counts.entry((cpu, name)).or_default() += 1;
            b.record(
                cpu,
                if abs {
                    SynthRecord::AbsEvent { ts, payload }
                } else {
                    SynthRecord::Event { ts, payload }
                },
            );
        }
    }
    for cpu in 0..2 {
        b.stats(
            cpu,
            StatsPhase::End,
            "entries: 120\noverrun: 0\ncommit overrun: 0\ndropped events: 0\n",
        );
    }
    let mut bytes = b.build().unwrap();

    // Damage, located with the reader on the intact bytes.
    let blocks: Vec<(u64, u16, u32)> = LogReader::new(&bytes[..])
        .unwrap()
        .filter_map(|i| match i.unwrap() {
            Item::Block(bl) => Some((
                bl.offset,
                bl.header.block_type.to_u16(),
                bl.header.stored_len,
            )),
            _ => None,
        })
        .collect();
    match spec.damage {
        Damage::None => {}
        Damage::CutFromEnd(n) => {
            let cut = bytes.len() - n;
            let (off, _, _) = *blocks
                .iter()
                .rev()
                .find(|(o, _, _)| (*o as usize) < cut)
                .unwrap();
            bytes.truncate(cut);
            notes.push(format!(
                "The file is cut {n} bytes before the end of the intact log: the END block is gone \
                 and the block at offset {off} is incomplete. A reader MUST return every block \
                 before offset {off} and report truncation at offset {off}."
            ));
        }
        Damage::FlipInCpuBlock(nth) => {
            let (off, _, stored) = *blocks.iter().filter(|(_, t, _)| *t == 3).nth(nth).unwrap();
            let at = off as usize + BLOCK_HEADER_LEN + stored as usize / 2;
            bytes[at] ^= 0x10;
            notes.push(format!(
                "Bit 4 of the byte at offset {at} is flipped, inside the CPU_DATA block at offset \
                 {off}. A reader MUST report a CRC mismatch for the block at offset {off}, skip it, \
                 resynchronise at the next block and read every other block."
            ));
        }
    }

    let mut md = String::new();
    writeln!(md, "# {}\n\n{}\n", spec.name, spec.title).unwrap();
    writeln!(md, "| arch tag | value |\n|---|---|").unwrap();
    writeln!(md, "| byte order | {} |", spec.order.name()).unwrap();
    writeln!(md, "| long size | {} |", k.long_size).unwrap();
    writeln!(
        md,
        "| sub-buffer size | 4096 (data at offset {}) |",
        8 + k.long_size
    )
    .unwrap();
    writeln!(
        md,
        "| formats | `formats/{}/` (real format files of that kernel) |",
        k.dir
    )
    .unwrap();
    writeln!(
        md,
        "| compression | {} |\n",
        match spec.compression {
            Compression::None => "none".to_string(),
            Compression::Zstd(l) => format!("zstd level {l}"),
            Compression::Kpack(l) =>
                format!("kpack, then zstd level {l} (format 1.3, FORMAT.md §8.3)"),
        }
    )
    .unwrap();
    writeln!(
        md,
        "Events per CPU (all on pid 100 for CPU 0, 101 for CPU 1):\n"
    )
    .unwrap();
    writeln!(md, "| cpu | event | count |\n|---|---|---|").unwrap();
    for ((cpu, ev), n) in &counts {
        writeln!(md, "| {cpu} | {ev} | {n} |").unwrap();
    }
    writeln!(
        md,
        "\nThe sub-buffers hold time extends (steps of more than 2^27 ns), absolute time stamps \
         (every event numbered 11 mod 37), discarded events (padding records with a length), \
         end-of-page fillers{}{}.\n",
        if formats["kmem_cache_free"].1.field("name").is_some() {
            ", and `type_len` 0 records (cache names long enough to exceed 112 bytes)"
        } else {
            ""
        },
        match spec.missed {
            Missed::None => String::new(),
            Missed::Flag =>
                "; one sub-buffer of CPU 1 carries RB_MISSED_EVENTS without a count".into(),
            Missed::Count(n) => format!(
                "; one sub-buffer of CPU 1 carries RB_MISSED_EVENTS with a stored count of {n}"
            ),
        }
    )
    .unwrap();
    writeln!(
        md,
        "`{}.events.txt` lists every event, per CPU in time order, as the generator made it.",
        spec.name
    )
    .unwrap();
    for n in notes {
        writeln!(md, "\n{n}").unwrap();
    }
    let _ = FILE_HEADER_LEN;
    (bytes, expected, md)
}

fn specs() -> Vec<Spec> {
    vec![
        Spec {
            name: "le64-x86_64",
            title: "Little-endian 64-bit kernel (x86_64, Linux 6.18 formats: `kmem_cache_alloc` has `name`, GFP tables as C expressions). Uncompressed.",
            kernel: X86_64,
            order: RunTimeEndian::Little,
            compression: Compression::None,
            missed: Missed::None,
            damage: Damage::None,
        },
        Spec {
            name: "be64-s390x",
            title: "Big-endian 64-bit kernel (s390x, Linux 6.1 formats: `kmem_cache_alloc` has no `name`). zstd-compressed; one sub-buffer flagged with lost events but no stored count.",
            kernel: S390X,
            order: RunTimeEndian::Big,
            compression: Compression::Zstd(3),
            missed: Missed::Flag,
            damage: Damage::None,
        },
        Spec {
            name: "le32-armhf",
            title: "Little-endian 32-bit kernel (armhf, Linux 6.1 formats: 4-byte longs and pointers, data at offset 12). Uncompressed; one sub-buffer with a stored lost-event count.",
            kernel: ARMHF,
            order: RunTimeEndian::Little,
            compression: Compression::None,
            missed: Missed::Count(17),
            damage: Damage::None,
        },
        Spec {
            name: "be32-synthetic",
            title: "Big-endian 32-bit kernel (as ppc32 or MIPS BE would write it; the armhf 6.1 formats, whose layout a 32-bit kernel shares). zstd-compressed.",
            kernel: ARMHF,
            order: RunTimeEndian::Big,
            compression: Compression::Zstd(3),
            missed: Missed::Count(3),
            damage: Damage::None,
        },
        Spec {
            name: "be64-s390x-kpack",
            title: "The be64-s390x scenario with its CPU data through kpack (format 1.3, columns): the same sub-buffers, bit for bit, so the same events. `v1.2/` holds it as format 1.2 wrote it (kpack version 1).",
            kernel: S390X,
            order: RunTimeEndian::Big,
            compression: Compression::Kpack(3),
            missed: Missed::Flag,
            damage: Damage::None,
        },
        Spec {
            name: "le32-armhf-kpack",
            title: "The le32-armhf scenario with its CPU data through kpack (format 1.3, columns); as format 1.2 wrote it in `v1.2/`.",
            kernel: ARMHF,
            order: RunTimeEndian::Little,
            compression: Compression::Kpack(3),
            missed: Missed::Count(17),
            damage: Damage::None,
        },
        Spec {
            name: "truncated",
            title: "The le64-x86_64 scenario, cut short as by power loss.",
            kernel: X86_64,
            order: RunTimeEndian::Little,
            compression: Compression::None,
            missed: Missed::None,
            damage: Damage::CutFromEnd(3000),
        },
        Spec {
            name: "damaged",
            title: "The le64-x86_64 scenario with one flipped bit in a CPU_DATA block.",
            kernel: X86_64,
            order: RunTimeEndian::Little,
            compression: Compression::None,
            missed: Missed::None,
            damage: Damage::FlipInCpuBlock(1),
        },
    ]
}

/// Every vector file, in memory.
pub fn generate() -> Vec<VectorFile> {
    let mut out = Vec::new();
    for s in specs() {
        let (log, events, md) = build(&s);
        out.push(VectorFile {
            name: format!("{}.kmt", s.name),
            bytes: log,
        });
        out.push(VectorFile {
            name: format!("{}.events.txt", s.name),
            bytes: events.into_bytes(),
        });
        out.push(VectorFile {
            name: format!("{}.md", s.name),
            bytes: md.into_bytes(),
        });
    }
    out
}

#[allow(dead_code)]
fn main() {
    let dir = vectors_dir();
    for f in generate() {
        let p = dir.join(&f.name);
        std::fs::write(&p, &f.bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        println!("wrote {} ({} bytes)", p.display(), f.bytes.len());
    }
}
