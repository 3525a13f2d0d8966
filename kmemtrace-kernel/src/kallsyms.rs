//! `/proc/kallsyms` and `System.map`: resolving call sites to
//! `function+0xoff/0xsize [module]`, as the kernel's `%pS` prints them.
//!
//! Lines are `address type name` with, in kallsyms, an optional
//! `\t[module]`. Addresses are as wide as the recorded kernel's (8 hex digits
//! on armhf, 16 on 64-bit; s390x kernels sit low, around `0x100000`).
//!
//! All symbols with a non-zero address are kept as boundaries (a data symbol
//! ends the function before it), but only text symbols (`t T w W`) resolve a
//! call site. ARM mapping symbols (`$a`, `$d`, `$t`, `$x`...) are skipped, as
//! the kernel's own lookup does. Among aliases (several names at one
//! address) the first text one in file order wins, like the kernel's
//! `get_symbol_pos()`. A kallsyms read without privilege has every address
//! zero: the table is then empty and [`Kallsyms::is_restricted`] says why.
//!
//! Names live in one string arena; lookups are a binary search.

use core::fmt;
use std::collections::HashMap;

/// Longest symbol name accepted (the kernel's `KSYM_NAME_LEN` is 512).
pub const MAX_NAME_LEN: usize = 1024;

/// Modules a table numbers (a symbol's `module` is a u16, 0 for none).
const MAX_MODULES: usize = u16::MAX as usize - 1;

/// A malformed kallsyms / System.map line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KallsymsError {
    /// 1-based line; 0 for the whole text.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for KallsymsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kallsyms line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for KallsymsError {}

#[derive(Clone, Copy, Debug)]
struct Sym {
    addr: u64,
    name_off: u32,
    name_len: u16,
    /// 0: the kernel; i + 1: `modules[i]`.
    module: u16,
    ty: u8,
}

impl Sym {
    fn is_text(&self) -> bool {
        matches!(self.ty, b't' | b'T' | b'w' | b'W')
    }

    /// The table's order: by address, and at one address the text symbols
    /// first (each kind in file order, the sort being stable), so that
    /// [`Kallsyms::resolve`] looks at one symbol of a group, not at every
    /// symbol sharing the address (ten million data symbols at one
    /// address cost a scan of them per lookup).
    fn order(&self) -> (u64, bool) {
        (self.addr, !self.is_text())
    }
}

/// A parsed symbol table.
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    names: String,
    modules: Vec<String>,
    /// Sorted by address, file order among equal addresses.
    syms: Vec<Sym>,
    zero_addresses: usize,
    /// Addresses of the first and last symbol kept, in file order.
    file_span: Option<(u64, u64)>,
    /// Nameless boundaries in `syms` that end a lost part (see `join`).
    holes: usize,
}

/// A resolved address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    pub name: &'a str,
    /// The symbol's address.
    pub addr: u64,
    /// From the symbol's address to the resolved one.
    pub offset: u64,
    /// Up to the next symbol of the same kernel or module; `None` for the
    /// last one.
    pub size: Option<u64>,
    /// The module, `None` for the kernel itself.
    pub module: Option<&'a str>,
    /// The type letter (`t`, `T`, `w`, `W`).
    pub kind: char,
}

impl fmt::Display for Symbol<'_> {
    /// `name+0xoff/0xsize [module]`, the kernel's `%pS` (without the size
    /// when it is unknown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+0x{:x}", self.name, self.offset)?;
        if let Some(s) = self.size {
            write!(f, "/0x{s:x}")?;
        }
        if let Some(m) = self.module {
            write!(f, " [{m}]")?;
        }
        Ok(())
    }
}

impl<'a> Symbol<'a> {
    /// `name+0xoff [module]` (no size).
    pub fn short(&self) -> ShortSymbol<'a> {
        ShortSymbol(*self)
    }
}

/// See [`Symbol::short`].
#[derive(Clone, Copy, Debug)]
pub struct ShortSymbol<'a>(Symbol<'a>);

impl fmt::Display for ShortSymbol<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+0x{:x}", self.0.name, self.0.offset)?;
        if let Some(m) = self.0.module {
            write!(f, " [{m}]")?;
        }
        Ok(())
    }
}

/// An address printed like `%pS`: the symbol, or `0x...` when unresolved.
#[derive(Clone, Copy, Debug)]
pub struct SymbolOrAddr<'a> {
    pub addr: u64,
    pub symbol: Option<Symbol<'a>>,
}

impl fmt::Display for SymbolOrAddr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.symbol {
            Some(s) => s.fmt(f),
            None => write!(f, "0x{:x}", self.addr),
        }
    }
}

/// Resolving stops this far past the last symbol of a region whose end is
/// unknown (the table does not say where the last function ends).
pub const MAX_OFFSET_PAST_LAST: u64 = 1 << 20;

fn is_mapping_symbol(name: &str) -> bool {
    name.starts_with('$')
}

/// At most 40 characters of `s`, quoted and escaped, for an error message.
fn excerpt(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
        None => format!("{s:?}"),
    }
}

/// Most bytes of names one table holds: they are found by 32-bit offsets.
const MAX_NAMES: usize = u32::MAX as usize;

/// Whether `more` bytes of names fit after `have`.
fn names_fit(have: usize, more: usize) -> bool {
    have.checked_add(more).is_some_and(|n| n <= MAX_NAMES)
}

impl Kallsyms {
    /// Parses `/proc/kallsyms` or `System.map` text.
    pub fn parse(text: &str) -> Result<Self, KallsymsError> {
        if text.len() > u32::MAX as usize {
            return Err(KallsymsError {
                line: 0,
                message: "more than 4 GiB of text".into(),
            });
        }
        // Two searches of one character each (memchr): a search for either
        // of the two decodes every character.
        let bad = [text.find('\0'), text.find('\u{fffd}')];
        if let Some(at) = bad.into_iter().flatten().min() {
            let line = text[..at].matches('\n').count() + 1;
            return Err(KallsymsError {
                line,
                message: "binary data, not kallsyms text (`address type name` lines)".into(),
            });
        }
        let mut k = Kallsyms::default();
        // A module's number (1-based), by name: a search of those seen
        // would be quadratic in a hostile text of many modules.
        let mut module_numbers: HashMap<&str, u16> = HashMap::new();
        // Names are under half the text (`address type name` lines).
        k.names.reserve(text.len() / 2);
        k.syms.reserve(text.len() / 32);
        for (i, line) in text.lines().enumerate() {
            let lineno = i + 1;
            let err = |m: String| KallsymsError {
                line: lineno,
                message: m,
            };
            let line = line.trim_end();
            if line.trim().is_empty() {
                continue;
            }
            let mut it = line.split_ascii_whitespace();
            let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else {
                return Err(err(format!(
                    "expected `address type name`, got {}",
                    excerpt(line)
                )));
            };
            let module = match it.next() {
                None => None,
                Some(m) if m.len() > 2 && m.starts_with('[') && m.ends_with(']') => {
                    Some(&m[1..m.len() - 1])
                }
                Some(m) => return Err(err(format!("unexpected {} after the name", excerpt(m)))),
            };
            if it.next().is_some() {
                return Err(err("text after the module".into()));
            }
            if a.is_empty() || a.len() > 16 {
                return Err(err(format!("address {a:?} is not 1 to 16 hex digits")));
            }
            let addr = u64::from_str_radix(a, 16)
                .map_err(|_| err(format!("address {a:?} is not hexadecimal")))?;
            let ty = match t.as_bytes() {
                [c] if c.is_ascii_alphabetic() || *c == b'?' => *c,
                _ => return Err(err(format!("type {t:?} is not one letter"))),
            };
            if name.len() > MAX_NAME_LEN {
                return Err(err(format!("name longer than {MAX_NAME_LEN} bytes")));
            }
            if addr == 0 {
                k.zero_addresses += 1;
                continue;
            }
            if is_mapping_symbol(name) {
                continue;
            }
            let module = match module {
                None => 0,
                // Module lines come grouped: the last one first, no hashing.
                Some(m) if k.modules.last().is_some_and(|x| x == m) => k.modules.len() as u16,
                Some(m) => match module_numbers.get(m) {
                    Some(&n) => n,
                    None => {
                        if k.modules.len() >= MAX_MODULES {
                            return Err(err("too many modules".into()));
                        }
                        k.modules.push(m.to_string());
                        let n = k.modules.len() as u16;
                        module_numbers.insert(m, n);
                        n
                    }
                },
            };
            k.file_span = Some(k.file_span.map_or((addr, addr), |(f, _)| (f, addr)));
            let name_off = k.names.len() as u32;
            k.names.push_str(name);
            k.syms.push(Sym {
                addr,
                name_off,
                name_len: name.len() as u16,
                module,
                ty,
            });
        }
        k.syms.sort_by_key(Sym::order);
        k.names.shrink_to_fit();
        k.syms.shrink_to_fit();
        Ok(k)
    }

    /// Joins the tables of consecutive parts of one kallsyms text, in
    /// order (FORMAT.md §7.3). `None` stands for a part that is missing or
    /// did not parse: addresses after the symbol before it and below the
    /// symbol after it resolve to nothing, rather than to the symbol before
    /// the gap with an offset spanning it (that symbol itself resolves only
    /// at its own address: where it ends is unknown).
    pub fn join(parts: Vec<Option<Kallsyms>>) -> Kallsyms {
        let mut out = Kallsyms::default();
        // Room for all at once: growing by doubling copied megabytes.
        let names: usize = parts.iter().flatten().map(|k| k.names.len()).sum();
        out.names.reserve(names.min(MAX_NAMES));
        out.syms
            .reserve(parts.iter().flatten().map(|k| k.syms.len() + 1).sum());
        let mut known = HashMap::new();
        let mut prev_last: Option<u64> = None;
        let mut gap = false;
        let mut holes = Vec::new();
        for p in parts {
            // Names are found by 32-bit offsets: a part that would take
            // them past 4 GiB (a damaged log's many parts) is left out as
            // one that is missing.
            let Some(k) = p.filter(|k| names_fit(out.names.len(), k.names.len())) else {
                gap = true;
                continue;
            };
            if let (true, Some(last), Some((first, _))) = (gap, prev_last, k.file_span) {
                if last < first {
                    holes.push(last + 1);
                }
            }
            gap = false;
            if let Some((_, last)) = k.file_span {
                prev_last = Some(last);
            }
            out.append(k, &mut known);
        }
        if let (true, Some(last)) = (gap, prev_last) {
            holes.push(last.saturating_add(1));
        }
        // A nameless non-text symbol ends what is before it, like a data
        // symbol does.
        out.holes = holes.len();
        out.syms.extend(holes.into_iter().map(|addr| Sym {
            addr,
            name_off: 0,
            name_len: 0,
            module: 0,
            ty: b'?',
        }));
        out.syms.sort_by_key(Sym::order);
        out
    }

    /// Appends another table's symbols (names and modules renumbered;
    /// `known` numbers this table's modules, kept by the caller from part
    /// to part: built again for each, it would cost the modules so far
    /// per part).
    fn append(&mut self, k: Kallsyms, known: &mut HashMap<String, u16>) {
        let base = self.names.len() as u32;
        self.names.push_str(&k.names);
        let map: Vec<u16> = k
            .modules
            .iter()
            .map(|m| {
                if let Some(&n) = known.get(m) {
                    return n;
                }
                // Each part has room for its modules, the parts together
                // may not (a damaged log's): the rest count as none.
                if self.modules.len() >= MAX_MODULES {
                    return 0;
                }
                self.modules.push(m.clone());
                let n = self.modules.len() as u16;
                known.insert(m.clone(), n);
                n
            })
            .collect();
        self.syms.extend(k.syms.into_iter().map(|s| Sym {
            name_off: s.name_off + base,
            module: match s.module {
                0 => 0,
                m => map[usize::from(m) - 1],
            },
            ..s
        }));
        self.zero_addresses += k.zero_addresses;
        self.file_span = match (self.file_span, k.file_span) {
            (Some((f, _)), Some((_, l))) => Some((f, l)),
            (a, b) => a.or(b),
        };
    }

    /// Symbols kept (non-zero addresses, no mapping symbols).
    pub fn len(&self) -> usize {
        self.syms.len() - self.holes
    }

    /// True when nothing can be resolved.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the text listed symbols but all with address zero (read
    /// without privilege, `kptr_restrict`).
    pub fn is_restricted(&self) -> bool {
        self.is_empty() && self.zero_addresses > 0
    }

    fn name(&self, s: &Sym) -> &str {
        let start = s.name_off as usize;
        self.names
            .get(start..start + usize::from(s.name_len))
            .unwrap_or("")
    }

    fn module(&self, s: &Sym) -> Option<&str> {
        match s.module {
            0 => None,
            m => self.modules.get(usize::from(m) - 1).map(String::as_str),
        }
    }

    /// The text symbol containing `addr`, if any.
    pub fn resolve(&self, addr: u64) -> Option<Symbol<'_>> {
        let end = self.syms.partition_point(|s| s.addr <= addr);
        if end == 0 {
            return None;
        }
        let at = self.syms[end - 1].addr;
        let start = self.syms[..end].partition_point(|s| s.addr < at);
        let s = self.syms.get(start).filter(|s| s.is_text())?;
        let size = self
            .syms
            .get(end)
            .filter(|n| n.module == s.module)
            .map(|n| n.addr - at);
        let offset = addr - at;
        if size.is_none() && offset >= MAX_OFFSET_PAST_LAST {
            return None;
        }
        Some(Symbol {
            name: self.name(s),
            addr: at,
            offset,
            size,
            module: self.module(s),
            kind: char::from(s.ty),
        })
    }

    /// `addr` as `%pS` prints it: resolved, or `0x...`.
    pub fn format(&self, addr: u64) -> SymbolOrAddr<'_> {
        SymbolOrAddr {
            addr,
            symbol: self.resolve(addr),
        }
    }

    /// The names of every text symbol, in address order.
    pub fn text_names(&self) -> impl Iterator<Item = &str> {
        self.syms
            .iter()
            .filter(|s| s.is_text())
            .map(|s| self.name(s))
    }

    /// The address of the first symbol called `name` (linear search).
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.syms
            .iter()
            .filter(|s| self.name(s) == name)
            .map(|s| s.addr)
            .min()
    }

    /// Module names, in order of first appearance.
    pub fn modules(&self) -> &[String] {
        &self.modules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_symbol_among_many_at_its_address_resolves() {
        let mut text = String::new();
        for i in 0..100_000 {
            text.push_str(&format!("1000 d data{i}\n"));
        }
        text.push_str("1000 t first_text\n1000 T second_text\n2000 T next\n");
        for k in [
            Kallsyms::parse(&text).unwrap(),
            Kallsyms::join(vec![Kallsyms::parse(&text).ok()]),
        ] {
            let s = k.resolve(0x1010).unwrap();
            assert_eq!((s.name, s.addr, s.offset), ("first_text", 0x1000, 0x10));
            assert_eq!(k.address_of("data99999"), Some(0x1000));
            assert_eq!(
                k.text_names().collect::<Vec<_>>(),
                ["first_text", "second_text", "next"]
            );
        }
        let only_data = Kallsyms::parse("1000 d a\n1000 d b\n2000 T next\n").unwrap();
        assert!(only_data.resolve(0x1010).is_none());
    }

    #[test]
    fn names_past_four_gib_do_not_fit() {
        let max = u32::MAX as usize;
        assert!(names_fit(0, max) && names_fit(max - 10, 10));
        assert!(!names_fit(max - 10, 11) && !names_fit(usize::MAX, 1));
    }

    const ARMHF: &str = "c0400000 T _stext
c0400000 T __turn_mmu_on
c0400000 T __idmap_text_start
c0400020 t __turn_mmu_on_end
c0501000 T __fput
c0501278 T fput
c0600000 D some_data
c0600100 T after_data
bf00a000 t $a\t[virtio_blk]
bf00a000 t virtblk_done\t[virtio_blk]
bf00a100 t $d\t[virtio_blk]
bf00a200 t virtblk_probe\t[virtio_blk]
bf00c000 t loop_init\t[loop]
";

    #[test]
    fn resolves_like_percent_ps() {
        let k = Kallsyms::parse(ARMHF).unwrap();
        assert_eq!(k.len(), 11);
        assert!(!k.is_restricted());
        let s = k.resolve(0xc050_10f8).unwrap();
        assert_eq!(s.to_string(), "__fput+0xf8/0x278");
        assert_eq!(s.short().to_string(), "__fput+0xf8");
        assert_eq!(
            (s.name, s.addr, s.kind, s.module),
            ("__fput", 0xc050_1000, 'T', None)
        );
        // Aliases: the first in file order.
        assert_eq!(
            k.resolve(0xc040_0010).unwrap().to_string(),
            "_stext+0x10/0x20"
        );
        // Inside a data symbol: nothing.
        assert_eq!(k.resolve(0xc060_0010), None);
        // Below every symbol.
        assert_eq!(k.resolve(0x1000), None);
        assert_eq!(k.format(0x1000).to_string(), "0x1000");
        // Modules, skipping mapping symbols.
        assert_eq!(
            k.resolve(0xbf00_a010).unwrap().to_string(),
            "virtblk_done+0x10/0x200 [virtio_blk]"
        );
        // The last symbol of a module: size unknown.
        assert_eq!(
            k.resolve(0xbf00_a300).unwrap().to_string(),
            "virtblk_probe+0x100 [virtio_blk]"
        );
        assert_eq!(k.format(0xbf00_c004).to_string(), "loop_init+0x4 [loop]");
        assert_eq!(k.modules(), ["virtio_blk", "loop"]);
        assert_eq!(k.address_of("fput"), Some(0xc050_1278));
        // Past the last symbol by far.
        assert_eq!(k.resolve(0xc060_0100 + MAX_OFFSET_PAST_LAST), None);
        assert!(k.resolve(0xc060_0100 + 5).is_some());
    }

    #[test]
    fn system_map_s390x_and_restricted() {
        let map = "0000000000100000 T startup_continue\n0000000000100000 T _stext\n\
                   0000000000100050 T __traceiter_initcall_level\n00000000001000b0 T __traceiter_initcall_start\n";
        let k = Kallsyms::parse(map).unwrap();
        assert_eq!(
            k.resolve(0x100060).unwrap().to_string(),
            "__traceiter_initcall_level+0x10/0x60"
        );
        assert_eq!(k.resolve(0x100000).unwrap().name, "startup_continue");

        let restricted = "0000000000000000 T _stext\n0000000000000000 t foo\t[mod]\n";
        let k = Kallsyms::parse(restricted).unwrap();
        assert!(k.is_empty() && k.is_restricted());
        assert_eq!(k.resolve(0x1234), None);
        assert!(!Kallsyms::parse("").unwrap().is_restricted());
    }

    #[test]
    fn duplicates_and_weak() {
        let k = Kallsyms::parse("1000 W weak_fn\n1000 W weak_fn\n1000 T strong\n2000 t next\n")
            .unwrap();
        let s = k.resolve(0x1004).unwrap();
        assert_eq!((s.name, s.kind, s.size), ("weak_fn", 'W', Some(0x1000)));
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, what) in [
            ("1000 T a\nzzzz T b\n", 2, "hexadecimal"),
            ("1000 T\n", 1, "address type name"),
            ("1000 TT a\n", 1, "one letter"),
            ("1000 T a b\n", 1, "after the name"),
            ("1000 T a [m] x\n", 1, "after the module"),
            ("11112222333344445 T a\n", 1, "16 hex digits"),
            ("1000 T a\n\x7fELF\0\0\x02\n", 2, "binary data"),
            ("1000 T a \u{fffd}\n", 1, "binary data"),
        ] {
            let e = Kallsyms::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}");
            assert!(e.message.contains(what), "{text:?}: {e}");
        }
        // A long line is quoted in part.
        let e = Kallsyms::parse(&format!("1000 T a {}\n", "y".repeat(500))).unwrap_err();
        assert!(e.message.len() < 100, "{e}");
        let long = format!("1000 T {}\n", "x".repeat(MAX_NAME_LEN + 1));
        assert!(Kallsyms::parse(&long).is_err());
    }

    #[test]
    fn modules_are_numbered_once_grouped_or_not() {
        // Lines of one module need not be together: a module seen before
        // keeps its number.
        let k = Kallsyms::parse(
            "1000 t a\t[m1]\n2000 t b\t[m2]\n3000 t c\t[m1]\n4000 t d\t[m2]\n5000 t e\n",
        )
        .unwrap();
        assert_eq!(k.modules(), ["m1", "m2"]);
        // (A symbol followed by another module's has no known size.)
        for (addr, want) in [
            (0x1004, "a+0x4 [m1]"),
            (0x2000, "b+0x0 [m2]"),
            (0x3008, "c+0x8 [m1]"),
            (0x4000, "d+0x0 [m2]"),
        ] {
            assert_eq!(k.format(addr).to_string(), want);
        }

        // As many modules as a table numbers, each on its own line, then
        // one more: refused, not renumbered from 1.
        let mut text: String = (0..MAX_MODULES)
            .map(|i| format!("{:x} t f\t[m{i}]\n", 0x1000 + i))
            .collect();
        let k = Kallsyms::parse(&text).unwrap();
        assert_eq!(k.modules().len(), MAX_MODULES);
        assert_eq!(k.format(0x1000 + 7).to_string(), "f+0x0 [m7]");
        text.push_str("ffff0 t g\t[one_more]\n");
        let e = Kallsyms::parse(&text).unwrap_err();
        assert_eq!(
            (e.line, e.message.as_str()),
            (MAX_MODULES + 1, "too many modules")
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*", addr in proptest::num::u64::ANY) {
            if let Ok(k) = Kallsyms::parse(&s) {
                let _ = k.format(addr).to_string();
            }
        }

        #[test]
        fn resolution_matches_a_linear_scan(
            syms in proptest::collection::vec((0u64..0x400, 0u8..4), 1..40),
            addr in 0u64..0x500,
        ) {
            let text: String = syms
                .iter()
                .enumerate()
                .map(|(i, (a, t))| format!("{:x} {} s{i}\n", a + 1, ['t', 'T', 'd', 'W'][*t as usize]))
                .collect();
            let k = Kallsyms::parse(&text).unwrap();
            // Linear model: the highest address <= addr; the first text
            // symbol at it in file order.
            let best = syms.iter().map(|(a, _)| a + 1).filter(|a| *a <= addr).max();
            let want = best.and_then(|b| {
                syms.iter().enumerate().find(|(_, (a, t))| a + 1 == b && *t != 2).map(|(i, _)| format!("s{i}"))
            });
            proptest::prop_assert_eq!(k.resolve(addr).map(|s| s.name.to_string()), want);
        }
    }
}
