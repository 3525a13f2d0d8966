//! The recorded kernel's byte order, which `header_page` does not give.
//!
//! In this order: the dump's own `endianness` file (written by
//! `kmemtrace-capture.sh` from an ELF header on the target); else the
//! `uname -m` machine, for machines whose name settles it; else which byte
//! order makes the first sub-buffers of every CPU decode (`commit` within
//! the data area, every event header leading exactly to the end of the
//! committed data). Whatever decided, the sub-buffers are checked against
//! the answer: a dump whose data contradicts its own metadata is refused.

use kmemtrace_kernel::{parse_subbuf, RunTimeEndian, SubBufLayout};

/// How the byte order was learned: the arch tag's `byte_order_source`.
pub const SOURCE_FILE: &str = "dump endianness file";
/// A trace.dat's header byte (imported as the dump's endianness file).
pub const SOURCE_TRACEDAT: &str = "trace.dat header";
pub const SOURCE_UNAME: &str = "uname machine";
pub const SOURCE_PLAUSIBILITY: &str = "sub-buffer plausibility";
pub const SOURCE_ASSUMED: &str = "assumed (nothing to decode)";

/// Sub-buffers sampled per CPU.
const SAMPLE: usize = 64;

/// The byte order a `uname -m` machine name implies, if it does (the
/// library's one table: bi-endian names such as `mips64` give `None`).
pub fn machine_byte_order(machine: &str) -> Option<RunTimeEndian> {
    kmemtrace_kernel::machine_facts(machine)?.byte_order
}

/// How many sampled sub-buffers decode in each byte order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plausibility {
    /// Sub-buffers with data in at least one reading (empty ones tell
    /// nothing).
    pub sampled: usize,
    pub little: usize,
    pub big: usize,
    /// Sub-buffers with nothing committed in either reading. The kernel
    /// never hands out such a sub-buffer: many of them mean the layout
    /// (`header_page`) does not fit the data.
    pub empty: usize,
}

impl Plausibility {
    pub fn ok(&self, order: RunTimeEndian) -> usize {
        match order {
            RunTimeEndian::Little => self.little,
            RunTimeEndian::Big => self.big,
        }
    }
}

/// Whether `page` decodes completely in `order` (`Some(true)`), is empty
/// (`Some(false)`: nothing committed, no flags), or does not decode.
fn decodes(order: RunTimeEndian, layout: &SubBufLayout, page: &[u8]) -> Option<bool> {
    let sb = parse_subbuf(order, layout, page).ok()?;
    if sb.raw_commit == 0 {
        return Some(false);
    }
    sb.count_data_events(order).ok()?;
    Some(true)
}

/// Tries the first sub-buffers of each CPU (`heads`) both ways.
pub fn plausibility<'a>(
    heads: impl IntoIterator<Item = &'a [u8]>,
    layout: &SubBufLayout,
) -> Plausibility {
    let mut p = Plausibility::default();
    let sb = layout.subbuf_size.max(1);
    for head in heads {
        for page in head.chunks(sb).take(SAMPLE) {
            let le = decodes(RunTimeEndian::Little, layout, page);
            let be = decodes(RunTimeEndian::Big, layout, page);
            // A page empty in one reading and undecodable in the other
            // still counts: the empty reading is the one that decodes.
            let empty_le = le == Some(false);
            let empty_be = be == Some(false);
            if empty_le && empty_be {
                p.empty += 1;
                continue;
            }
            p.sampled += 1;
            if le == Some(true) || (empty_le && be.is_none()) {
                p.little += 1;
            }
            if be == Some(true) || (empty_be && le.is_none()) {
                p.big += 1;
            }
        }
    }
    p
}

/// What the dump says, gathered by the caller.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Contents of the `endianness` file, if any.
    pub endianness_file: Option<String>,
    /// That file is a trace.dat header's byte order, not a dump's file.
    pub from_tracedat: bool,
    /// `uname -m`, if known.
    pub machine: Option<String>,
}

/// The answer.
#[derive(Debug, Clone)]
pub struct ByteOrder {
    pub order: RunTimeEndian,
    /// For the arch tag.
    pub source: &'static str,
    /// One line for the NOTE block.
    pub note: String,
    /// Doubts worth a warning NOTE.
    pub warnings: Vec<String>,
}

fn parse_endianness(s: &str) -> Option<RunTimeEndian> {
    match s.trim().to_ascii_lowercase().as_str() {
        "little" | "little-endian" | "little endian" | "le" | "lsb" => Some(RunTimeEndian::Little),
        "big" | "big-endian" | "big endian" | "be" | "msb" => Some(RunTimeEndian::Big),
        _ => None,
    }
}

fn other(o: RunTimeEndian) -> RunTimeEndian {
    match o {
        RunTimeEndian::Little => RunTimeEndian::Big,
        RunTimeEndian::Big => RunTimeEndian::Little,
    }
}

/// Decides the byte order. Errors (one line) when the data contradicts the
/// metadata or nothing decides.
pub fn infer(ev: &Evidence, p: &Plausibility, layout: &SubBufLayout) -> Result<ByteOrder, String> {
    let mut warnings = Vec::new();
    let from_file = match ev.endianness_file.as_deref() {
        Some(s) => match parse_endianness(s) {
            Some(o) => Some(o),
            None => {
                warnings.push(format!(
                    "the dump's endianness file says {:?}, which is neither little nor big: ignored",
                    s.trim()
                ));
                None
            }
        },
        None => None,
    };
    let from_uname = ev.machine.as_deref().and_then(machine_byte_order);
    let data = if p.sampled == 0 {
        None
    } else if p.little > p.big {
        Some(RunTimeEndian::Little)
    } else if p.big > p.little {
        Some(RunTimeEndian::Big)
    } else {
        None
    };
    let describe_data = |o: RunTimeEndian| {
        format!(
            "{} of {} sampled sub-buffers decode {}-endian",
            p.ok(o),
            p.sampled,
            o.name()
        )
    };
    if p.sampled == 0 && p.empty > 0 {
        return Err(format!(
            "all {} sampled sub-buffers are empty under header_page's layout (long {}, data at {}, {}-byte sub-buffers), which the kernel never hands out: header_page does not describe this data",
            p.empty, layout.long_size, layout.data_offset, layout.subbuf_size
        ));
    }
    let (order, source, why) = if let Some(o) = from_file {
        let mut why = if ev.from_tracedat {
            format!("from the trace.dat header ({}-endian)", o.name())
        } else {
            format!(
                "from the dump's endianness file ({:?})",
                ev.endianness_file.as_deref().unwrap_or("").trim()
            )
        };
        match (from_uname, ev.machine.as_deref()) {
            (Some(u), Some(m)) if u == o => why.push_str(&format!("; uname machine {m} agrees")),
            (Some(u), Some(m)) => warnings.push(format!(
                "uname machine {m} suggests {}-endian but the {} says {}",
                u.name(),
                if ev.from_tracedat {
                    "trace.dat header"
                } else {
                    "dump's endianness file"
                },
                o.name()
            )),
            _ => {}
        }
        let source = if ev.from_tracedat {
            SOURCE_TRACEDAT
        } else {
            SOURCE_FILE
        };
        (o, source, why)
    } else if let Some(o) = from_uname {
        let why = format!(
            "from uname machine {}",
            ev.machine.as_deref().unwrap_or("").trim()
        );
        (o, SOURCE_UNAME, why)
    } else if let Some(o) = data {
        let why = match ev.machine.as_deref() {
            Some(m) => format!(
                "from sub-buffer plausibility (uname machine {} does not settle it)",
                m.trim()
            ),
            None => "from sub-buffer plausibility (the dump has no endianness file and no uname)"
                .to_string(),
        };
        (o, SOURCE_PLAUSIBILITY, why)
    } else if p.sampled == 0 {
        warnings.push(
            "byte order unknown (no endianness file, no telling uname machine, no data): little-endian assumed; there are no events to misread"
                .into(),
        );
        (RunTimeEndian::Little, SOURCE_ASSUMED, "assumed".to_string())
    } else {
        return Err(format!(
            "cannot tell the byte order: no endianness file, no telling uname machine, and the sampled sub-buffers decode neither way ({} little, {} big of {})",
            p.little, p.big, p.sampled
        ));
    };
    // The data must agree with what decided.
    if p.sampled > 0 {
        let good = p.ok(order);
        let alt = p.ok(other(order));
        if good == 0 && source != SOURCE_PLAUSIBILITY {
            return Err(format!(
                "byte order conflict: {source} says {}-endian, but none of the {} sampled sub-buffers decode that way ({} decode {}-endian); wrong sub-buffer size in header_page, or not this kernel's data",
                order.name(),
                p.sampled,
                alt,
                other(order).name()
            ));
        }
        if good < p.sampled {
            warnings.push(format!(
                "{} of {} sampled sub-buffers do not decode {}-endian",
                p.sampled - good,
                p.sampled,
                order.name()
            ));
        }
    }
    let mut note = format!("byte order {}-endian {why}", order.name());
    if p.sampled > 0 {
        note.push_str(&format!("; {}", describe_data(order)));
    }
    Ok(ByteOrder {
        order,
        source,
        note,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_kernel::{BigEndian, Endian, LittleEndian};

    fn layout(long: usize) -> SubBufLayout {
        SubBufLayout {
            long_size: long,
            data_offset: 8 + long,
            subbuf_size: 4096,
        }
    }

    /// A page with `n` 12-byte data events (type_len 3), in `E`'s order.
    fn page<E: Endian>(e: E, long: usize, n: usize) -> Vec<u8> {
        let mut p = Vec::new();
        e.write_uint(&mut p, 1_000_000, 8);
        e.write_uint(&mut p, (n * 16) as u64, long);
        for i in 0..n {
            let (tl, delta) = (3u32, 10u32 + i as u32);
            let h = if e.is_big_endian() {
                (tl << 27) | delta
            } else {
                (delta << 5) | tl
            };
            e.write_uint(&mut p, u64::from(h), 4);
            p.extend_from_slice(&[0x11; 12]);
        }
        p.resize(4096, 0);
        p
    }

    #[test]
    fn machines() {
        use RunTimeEndian::*;
        for (m, o) in [
            ("s390x", Some(Big)),
            ("ppc64", Some(Big)),
            ("ppc64le", Some(Little)),
            ("armv7l", Some(Little)),
            ("armv7b", Some(Big)),
            ("aarch64", Some(Little)),
            ("aarch64_be", Some(Big)),
            ("x86_64", Some(Little)),
            ("i686", Some(Little)),
            ("sparc64", Some(Big)),
            ("mips", None),
            ("mips64", None),
            ("riscv64", Some(Little)),
            ("xtensa", None),
            ("", None),
        ] {
            assert_eq!(machine_byte_order(m), o, "{m}");
        }
    }

    #[test]
    fn plausibility_tells_the_orders_apart() {
        for long in [4, 8] {
            let l = layout(long);
            let mut le = page(LittleEndian, long, 20);
            le.extend(vec![0u8; 4096]); // an empty page: ignored
            let be = page(BigEndian, long, 7);
            let p = plausibility([&le[..]], &l);
            assert_eq!(
                (p.sampled, p.little, p.big, p.empty),
                (1, 1, 0, 1),
                "long {long}"
            );
            let p = plausibility([&be[..], &be[..]], &l);
            assert_eq!((p.sampled, p.little, p.big), (2, 0, 2), "long {long}");
        }
    }

    #[test]
    fn order_of_evidence_and_conflicts() {
        let l = layout(8);
        let be = page(BigEndian, 8, 5);
        let p = plausibility([&be[..]], &l);
        // File first.
        let ev = Evidence {
            endianness_file: Some("big\n".into()),
            from_tracedat: false,
            machine: Some("s390x".into()),
        };
        let b = infer(&ev, &p, &l).unwrap();
        assert_eq!((b.order, b.source), (RunTimeEndian::Big, SOURCE_FILE));
        assert!(b.note.contains("uname machine s390x agrees"), "{}", b.note);
        assert!(b.warnings.is_empty());
        // Then uname.
        let ev = Evidence {
            endianness_file: None,
            from_tracedat: false,
            machine: Some("s390x".into()),
        };
        let b = infer(&ev, &p, &l).unwrap();
        assert_eq!((b.order, b.source), (RunTimeEndian::Big, SOURCE_UNAME));
        // Then the data.
        let ev = Evidence {
            endianness_file: None,
            from_tracedat: false,
            machine: Some("mips64".into()),
        };
        let b = infer(&ev, &p, &l).unwrap();
        assert_eq!(
            (b.order, b.source),
            (RunTimeEndian::Big, SOURCE_PLAUSIBILITY)
        );
        assert!(
            b.note
                .contains("1 of 1 sampled sub-buffers decode big-endian"),
            "{}",
            b.note
        );
        // Metadata that the data contradicts is refused.
        let ev = Evidence {
            endianness_file: Some("little".into()),
            from_tracedat: false,
            machine: None,
        };
        let e = infer(&ev, &p, &l).unwrap_err();
        assert!(e.contains("conflict"), "{e}");
        // Nothing at all.
        let b = infer(&Evidence::default(), &Plausibility::default(), &l).unwrap();
        assert_eq!(b.source, SOURCE_ASSUMED);
        assert_eq!(b.warnings.len(), 1);
        // Only empty sub-buffers: the layout is wrong.
        let zero = vec![0u8; 8192];
        let p = plausibility([&zero[..]], &l);
        let e = infer(&Evidence::default(), &p, &l).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        // Garbage that decodes neither way.
        let junk = vec![0xa5u8; 4096];
        let p = plausibility([&junk[..]], &l);
        assert_eq!((p.sampled, p.little, p.big), (1, 0, 0));
        assert!(infer(&Evidence::default(), &p, &l).is_err());
        // A nonsense endianness file is ignored with a warning.
        let p = plausibility([&be[..]], &l);
        let ev = Evidence {
            endianness_file: Some("middle".into()),
            from_tracedat: false,
            machine: None,
        };
        let b = infer(&ev, &p, &l).unwrap();
        assert_eq!(b.source, SOURCE_PLAUSIBILITY);
        assert_eq!(b.warnings.len(), 1);
    }
}
