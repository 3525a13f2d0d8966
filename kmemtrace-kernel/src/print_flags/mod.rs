//! `__print_flags` / `__print_symbolic` tables inside a print fmt, and the
//! small C constant-expression evaluator they need.
//!
//! A kmem event's print fmt names its GFP bits:
//!
//! ```text
//! (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|",
//!     {( unsigned long)(( gfp_t)0x400u), "__GFP_DIRECT_RECLAIM"}, ...) : "none"
//! ```
//!
//! Linux 6.1 spells the values as hex literals; 6.18 as expressions such as
//! `( unsigned long)(( gfp_t)((((1UL))) << (22)))`. [`CExpr`] evaluates
//! those (u64 arithmetic, wrapping, C precedence), rejecting anything that
//! is not a constant (a symbol name, `sizeof`, a string).
//!
//! [`FlagTable::decode`] prints a value exactly like the kernel's
//! `trace_print_flags_seq()` (and `trace_print_symbols_seq()` for
//! symbolic tables):
//!
//! - entries are walked in order while bits remain; an entry whose every bit
//!   is set in the value prints its name and clears those bits. As in the
//!   kernel, a zero mask "matches" any non-zero value (libtraceevent skips
//!   such entries instead; real tables have none);
//! - bits left over print as `0x..` after the names;
//! - a zero value prints what the print fmt's ternary says
//!   (`(REC->gfp_flags) ? __print_flags(...) : "none"` prints `none`), or
//!   nothing when there is no such ternary.
//!
//! Inputs are untrusted: lengths, nesting and table sizes are bounded, and
//! errors give the byte offset in the text.

use core::fmt;

/// Longest expression [`CExpr::parse`] accepts, in bytes.
pub const MAX_EXPR_LEN: usize = 64 * 1024;
/// Deepest nesting of parentheses / unary operators accepted while parsing.
pub const MAX_NESTING: usize = 128;
/// Tallest expression tree accepted (bounds evaluation recursion: a chain
/// `1|1|1|...` is as tall as it is long).
pub const MAX_TREE_HEIGHT: usize = 256;
/// Longest print fmt searched for tables, in bytes.
pub const MAX_PRINT_FMT_LEN: usize = 4 << 20;
/// Most entries kept in one table.
pub const MAX_ENTRIES: usize = 4096;
/// Most tables looked at in one print fmt (real ones have a handful); bounds
/// the work hostile text can cause.
pub const MAX_TABLES: usize = 64;
/// Longest `__print_flags` delimiter accepted, in bytes. Kernels use `"|"`,
/// `" "` or `", "` (three bytes at most in a 6.18 kernel's tracefs); a
/// delimiter is printed between every two names, so its length multiplies
/// the text of every decoded value.
pub const MAX_DELIM_LEN: usize = 64;
/// Longest entry name (or zero text, `: "none"`) accepted, in bytes: eight
/// times the longest in a 6.18 kernel's tracefs (32).
pub const MAX_NAME_LEN: usize = 256;
/// Most text one flags value may decode to, in bytes, judged when the table
/// is read. The kernel prints an event's whole line into one `trace_seq` of
/// a page or two, so no kernel prints more for one table; the largest a
/// 6.18 kernel's tables can print is 538 bytes.
pub const MAX_DECODED_LEN: usize = 4096;

// ---------------------------------------------------------------------------
// Errors

/// A C expression that cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprError {
    /// Byte offset in the expression text.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "C expression, offset {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for ExprError {}

/// A print fmt whose flag/symbol table cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagsError {
    /// Byte offset in the print fmt.
    pub offset: usize,
    /// The field the table decodes (`gfp_flags`), when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FlagsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(fl) => write!(
                f,
                "print fmt offset {} (table of {fl}): {}",
                self.offset, self.message
            ),
            None => write!(f, "print fmt offset {}: {}", self.offset, self.message),
        }
    }
}

impl std::error::Error for FlagsError {}

fn quote(s: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = s.chars().take(MAX).collect();
    if s.chars().nth(MAX).is_some() {
        out.push_str("...");
    }
    format!("{out:?}")
}

mod eval;
mod expr;
mod scan;
pub use eval::*;
pub use expr::*;
pub use scan::*;

// ---------------------------------------------------------------------------
// Tables

/// `__print_flags` or `__print_symbolic`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// Bit masks, printed joined by a delimiter.
    Flags,
    /// Exact values, one name printed.
    Symbolic,
}

/// One `{ value, "NAME" }` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagEntry {
    /// The mask (flags) or value (symbolic).
    pub value: u64,
    /// The name as the kernel prints it.
    pub name: String,
    short: usize,
}

impl FlagEntry {
    /// The name without the table's common prefix (`__GFP_ZERO` and
    /// `GFP_KERNEL` become `ZERO` and `KERNEL`).
    pub fn short_name(&self) -> &str {
        self.name.get(self.short..).unwrap_or(&self.name)
    }
}

/// A `__print_flags` / `__print_symbolic` table from a print fmt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagTable {
    pub kind: TableKind,
    /// The field the table decodes, when its first argument is just
    /// `REC->field`.
    pub field: Option<String>,
    /// The first argument as written.
    pub arg: String,
    /// The delimiter between names (flags only; `""` for symbolic).
    pub delim: String,
    /// Entries in the kernel's order, up to the NULL-name terminator.
    pub entries: Vec<FlagEntry>,
    /// What a zero value prints, from `(REC->f) ? __print_flags(...) : "none"`.
    pub if_zero: Option<String>,
    /// Byte offset of the table in the print fmt.
    pub offset: usize,
}

const TABLE_FUNCS: &[(&str, TableKind)] = &[
    ("__print_flags", TableKind::Flags),
    ("__print_flags_u64", TableKind::Flags),
    ("__print_symbolic", TableKind::Symbolic),
    ("__print_symbolic_u64", TableKind::Symbolic),
];

/// Strips whitespace and outer parentheses that enclose everything.
pub fn strip_parens(mut s: &str) -> &str {
    loop {
        s = s.trim();
        if s.starts_with('(') && s.ends_with(')') {
            if let Ok(close) = find_close(s, 0, 0) {
                if close == s.len() - 1 {
                    s = &s[1..s.len() - 1];
                    continue;
                }
            }
        }
        return s;
    }
}

impl FlagTable {
    /// Every table in `print_fmt`, in order (each may have failed).
    pub fn find_all(print_fmt: &str) -> Vec<Result<FlagTable, FlagsError>> {
        let mut out = Vec::new();
        if print_fmt.len() > MAX_PRINT_FMT_LEN {
            out.push(Err(ferr(0, None, "print fmt too long")));
            return out;
        }
        let b = print_fmt.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\'' {
                match skip_literal(b, i) {
                    Some(j) => i = j,
                    None => break,
                }
                continue;
            }
            if !is_ident_start(c) || (i > 0 && is_ident_char(b[i - 1])) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && is_ident_char(b[i]) {
                i += 1;
            }
            let id = &print_fmt[start..i];
            let Some(&(_, kind)) = TABLE_FUNCS.iter().find(|(n, _)| *n == id) else {
                continue;
            };
            if out.len() >= MAX_TABLES {
                out.push(Err(ferr(
                    start,
                    None,
                    format!("more than {MAX_TABLES} tables"),
                )));
                break;
            }
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if b.get(j) != Some(&b'(') {
                continue;
            }
            match Self::parse_call(print_fmt, start, j, kind) {
                Ok((t, end)) => {
                    out.push(Ok(t));
                    i = end;
                }
                Err(e) => {
                    out.push(Err(e));
                    // Keep scanning after the name.
                }
            }
        }
        out
    }

    /// The first table decoding `REC->field`: `Ok(None)` if there is none,
    /// `Err` if the one for that field cannot be read.
    pub fn for_field(print_fmt: &str, field: &str) -> Result<Option<FlagTable>, FlagsError> {
        for t in Self::find_all(print_fmt) {
            match t {
                Ok(t) if t.field.as_deref() == Some(field) => return Ok(Some(t)),
                Err(e) if e.field.as_deref() == Some(field) => return Err(e),
                _ => {}
            }
        }
        Ok(None)
    }

    /// Parses the call whose name starts at `start` and `(` is at `open`;
    /// returns the table and the index after the `)`.
    fn parse_call(
        pf: &str,
        start: usize,
        open: usize,
        kind: TableKind,
    ) -> Result<(FlagTable, usize), FlagsError> {
        let close = find_close(pf, open, 0).map_err(|mut e| {
            // Name the field if the first argument is readable.
            let first = pf[open + 1..].split(',').next().unwrap_or("");
            e.field = CExpr::parse(first)
                .ok()
                .and_then(|x| x.as_plain_field().map(str::to_string));
            e
        })?;
        let inner = &pf[open + 1..close];
        let base = open + 1;
        let args = split_top_level(inner).map_err(|mut e| {
            e.offset += base;
            e
        })?;
        let (_, arg) = trim_off(base + args[0].0, args[0].1);
        let field = CExpr::parse(arg)
            .ok()
            .and_then(|e| e.as_plain_field().map(str::to_string));
        let fref = field.as_deref();
        let mut rest = args.iter().skip(1);
        let delim = if kind == TableKind::Flags {
            let Some((o, d)) = rest.next() else {
                return Err(ferr(close, fref, "__print_flags without a delimiter"));
            };
            let d = parse_string_literal(d)
                .ok_or_else(|| ferr(base + o, fref, "the delimiter is not a string literal"))?;
            if d.len() > MAX_DELIM_LEN {
                return Err(ferr(
                    base + o,
                    fref,
                    format!("the delimiter is longer than {MAX_DELIM_LEN} bytes"),
                ));
            }
            d
        } else {
            String::new()
        };
        let mut entries = Vec::new();
        for (o, e) in rest {
            let (eo, e) = trim_off(base + o, e);
            if e.is_empty() {
                continue; // a trailing comma
            }
            if !(e.starts_with('{') && e.ends_with('}')) {
                return Err(ferr(
                    eo,
                    fref,
                    format!("entry {} is not `{{ value, \"NAME\" }}`", quote(e)),
                ));
            }
            let body = &e[1..e.len() - 1];
            let parts = split_top_level(body).map_err(|mut x| {
                x.offset += eo + 1;
                x.field = field.clone();
                x
            })?;
            if parts.len() != 2 {
                return Err(ferr(
                    eo,
                    fref,
                    format!("entry {} does not have two parts", quote(e)),
                ));
            }
            let (vo, vtext) = trim_off(eo + 1 + parts[0].0, parts[0].1);
            let Some(name) = parse_string_literal(parts[1].1) else {
                // `{ 0, NULL }` / `{ 0, ((void *)0) }`: the kernel stops here.
                break;
            };
            let value = eval_const(vtext).map_err(|x| {
                ferr(
                    vo + x.offset,
                    fref,
                    format!("value of {}: {}", quote(&name), x.message),
                )
            })?;
            if entries.len() >= MAX_ENTRIES {
                return Err(ferr(eo, fref, format!("more than {MAX_ENTRIES} entries")));
            }
            if name.len() > MAX_NAME_LEN {
                return Err(ferr(
                    eo,
                    fref,
                    format!("an entry name is longer than {MAX_NAME_LEN} bytes"),
                ));
            }
            entries.push(FlagEntry {
                value,
                name,
                short: 0,
            });
        }
        set_short_names(&mut entries);
        if kind == TableKind::Flags && longest_decoded(&entries, &delim) > MAX_DECODED_LEN {
            return Err(ferr(
                start,
                fref,
                format!("one value could print more than {MAX_DECODED_LEN} bytes"),
            ));
        }

        let if_zero = zero_text(pf, start, close, arg, fref)?;
        Ok((
            FlagTable {
                kind,
                field,
                arg: arg.to_string(),
                delim,
                entries,
                if_zero,
                offset: start,
            },
            close + 1,
        ))
    }

    /// The first entry named `name`.
    pub fn value_of(&self, name: &str) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value)
    }

    /// `value` as the kernel prints it. Allocation-free: use with `{}` or
    /// `.to_string()`.
    pub fn decode(&self, value: u64) -> Decoded<'_> {
        Decoded {
            table: self,
            value,
            compact: false,
        }
    }

    /// Like [`FlagTable::decode`] with short names (`KERNEL|ZERO`).
    pub fn decode_compact(&self, value: u64) -> Decoded<'_> {
        Decoded {
            table: self,
            value,
            compact: true,
        }
    }

    /// Writes the decoded `value` to `out`.
    pub fn write_decoded<W: fmt::Write>(
        &self,
        value: u64,
        compact: bool,
        out: &mut W,
    ) -> fmt::Result {
        match self.kind {
            TableKind::Symbolic => match self.entries.iter().find(|e| e.value == value) {
                Some(e) => out.write_str(if compact { e.short_name() } else { &e.name }),
                None => write!(out, "0x{value:x}"),
            },
            TableKind::Flags => {
                if value == 0 {
                    return match &self.if_zero {
                        Some(z) => out.write_str(z),
                        None => Ok(()),
                    };
                }
                let mut first = true;
                let v = self.each_flag(value, |i| {
                    let e = &self.entries[i];
                    if !first {
                        out.write_str(&self.delim)?;
                    }
                    first = false;
                    out.write_str(if compact { e.short_name() } else { &e.name })
                })?;
                if v != 0 {
                    if !first {
                        out.write_str(&self.delim)?;
                    }
                    write!(out, "0x{v:x}")?;
                }
                Ok(())
            }
        }
    }
}

impl FlagTable {
    /// Calls `f` with the index of each entry a flags `value` prints, as
    /// the kernel picks them (in table order, each taking its bits off);
    /// returns the bits no entry names.
    fn each_flag<F>(&self, value: u64, mut f: F) -> Result<u64, fmt::Error>
    where
        F: FnMut(usize) -> fmt::Result,
    {
        let mut v = value;
        for (i, e) in self.entries.iter().enumerate() {
            if v == 0 {
                break;
            }
            if v & e.value != e.value {
                continue;
            }
            v &= !e.value;
            f(i)?;
        }
        Ok(v)
    }

    /// The indices in `entries` of the entries a flags `value` prints (for
    /// a legend of short names).
    pub fn flags_of(&self, value: u64) -> Vec<usize> {
        let mut out = Vec::new();
        if self.kind == TableKind::Flags {
            let _ = self.each_flag(value, |i| {
                out.push(i);
                Ok(())
            });
        }
        out
    }
}

/// The text a zero value prints, from `(arg) ? __print_flags(arg, ...) :
/// "zero text"` around the call that starts at `start` and ends at `close`.
fn zero_text(
    pf: &str,
    start: usize,
    close: usize,
    arg: &str,
    fref: Option<&str>,
) -> Result<Option<String>, FlagsError> {
    let Some(cond_end) = pf[..start].trim_end().strip_suffix('?') else {
        return Ok(None);
    };
    let cond_end = cond_end.trim_end();
    let a = strip_parens(arg);
    if !(cond_end.ends_with(a) || cond_end.ends_with(&format!("({a})"))) {
        return Ok(None);
    }
    let Some(after) = pf[close + 1..].trim_start().strip_prefix(':') else {
        return Ok(None);
    };
    let after = after.trim_start();
    if !after.starts_with('"') {
        return Ok(None);
    }
    let Some(end) = skip_literal(after.as_bytes(), 0) else {
        return Ok(None);
    };
    let z = parse_string_literal(&after[..end]);
    if z.as_ref().is_some_and(|z| z.len() > MAX_NAME_LEN) {
        return Err(ferr(
            close + 1,
            fref,
            format!("the zero text is longer than {MAX_NAME_LEN} bytes"),
        ));
    }
    Ok(z)
}

/// The most text a flags table can print for one value: every zero-mask
/// entry (the kernel prints those for any non-zero value), the 64 longest of
/// the others (each takes at least one of the 64 bits off, so no more print)
/// and the leftover `0x...`, each after a delimiter.
fn longest_decoded(entries: &[FlagEntry], delim: &str) -> usize {
    let each = |e: &FlagEntry| e.name.len() + delim.len();
    let zero: usize = entries.iter().filter(|e| e.value == 0).map(each).sum();
    let mut others: Vec<usize> = entries.iter().filter(|e| e.value != 0).map(each).collect();
    others.sort_unstable_by(|a, b| b.cmp(a));
    let others: usize = others.iter().take(64).sum();
    zero + others + delim.len() + "0x".len() + 16
}

/// Computes each entry's short-name start: the prefix common to all names
/// (after leading underscores), cut after its last `_`.
fn set_short_names(entries: &mut [FlagEntry]) {
    let stripped = |n: &str| -> usize { n.len() - n.trim_start_matches('_').len() };
    let mut common: Option<&str> = None;
    for e in entries.iter() {
        let s = &e.name[stripped(&e.name)..];
        common = Some(match common {
            None => s,
            Some(c) => {
                let n = c.bytes().zip(s.bytes()).take_while(|(a, b)| a == b).count();
                &c[..n]
            }
        });
    }
    let plen = match common.and_then(|c| c.rfind('_')) {
        Some(i) => i + 1,
        None => 0,
    };
    for e in entries.iter_mut() {
        let s = stripped(&e.name);
        e.short = if e.name.len() > s + plen { s + plen } else { 0 };
    }
}

/// A value decoded through a [`FlagTable`] (see [`FlagTable::decode`]).
#[derive(Clone, Copy, Debug)]
pub struct Decoded<'a> {
    table: &'a FlagTable,
    value: u64,
    compact: bool,
}

impl fmt::Display for Decoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.table.write_decoded(self.value, self.compact, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_precedence() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("42", 42),
            ("0x400u", 0x400),
            ("0X1fUL", 0x1f),
            ("010", 8),
            ("0b101", 5),
            ("1ULL << 63", 1 << 63),
            ("1 + 2 * 3", 7),
            ("(1 + 2) * 3", 9),
            ("1 << 2 + 1", 8),
            ("6 & 3 | 8", 10),
            ("1 | 2 ^ 3", 1),
            ("~0", u64::MAX),
            ("-1", u64::MAX),
            ("!0 + !5", 1),
            ("+7 - -3", 10),
            ("10 / 3 % 2", 1),
            ("3 < 4 ? 10 : 20", 10),
            ("1 ? 2 : 0 ? 3 : 4", 2),
            ("0 ? 1 : 0 ? 3 : 4", 4),
            ("1 && 0 || 1", 1),
            ("2 == 2 != 0", 1),
            ("5 >= 6", 0),
            ("0 && 1 / 0", 0),
            ("1 || 1 / 0", 1),
            ("( unsigned long)((( gfp_t)(0x400u|0x800u)) | (( gfp_t)0x40u) | (( gfp_t)0x80u))", 0xcc0),
            ("( unsigned long)(( gfp_t)((((1UL))) << (22)))", 0x40_0000),
            ("(((unsigned int)((21 - 12))) < ((unsigned int)(10)) ? ((unsigned int)((21 - 12))) : ((unsigned int)(10)))", 9),
            ("(unsigned int)0x1ffffffff", 0xffff_ffff),
            ("(int)0xffffffff", u64::MAX),
            ("(unsigned char)0x1ff", 0xff),
            ("(u16)0x12345", 0x2345),
            ("(bool)5", 1),
            ("(void *)0", 0),
            ("(struct page *)16", 16),
            ("(unsigned long)-1", u64::MAX),
            ("(long)-1 + 1", 0),
            ("(int)-1", u64::MAX),
            ("(gfp_t)~0", 0xffff_ffff),
            ("( gfp_t)(~0) & ~(( gfp_t)1)", 0xffff_fffe),
        ];
        for (text, want) in cases {
            assert_eq!(eval_const(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn rejects_non_constants() {
        let cases: &[(&str, &str, usize)] = &[
            ("FOO", "symbol `FOO`", 0),
            ("1 | FOO", "symbol `FOO`", 4),
            ("(FOO) - 1", "symbol `FOO`", 1),
            ("sizeof(int)", "symbol `sizeof`", 0),
            ("\"x\"", "string", 0),
            ("1 +", "ends early", 3),
            ("(1", "expected `)`", 2),
            ("1)", "unexpected text", 1),
            ("1 / 0", "division by zero", 2),
            ("1 % 0", "division by zero", 2),
            ("1 << 64", "shift by 64", 2),
            ("99999999999999999999", "does not fit", 0),
            ("0x", "without digits", 0),
            ("09", "out of range", 0),
            ("12abc", "malformed", 0),
            ("1.5", "malformed", 0),
            ("1 @ 2", "unexpected character", 2),
            ("1 ? 2", "expected `:`", 5),
            ("REC->", "without a field name", 0),
            ("1, 2", "unexpected character", 1),
        ];
        for (text, what, off) in cases {
            let e = eval_const(text).unwrap_err();
            assert!(e.message.contains(what), "{text}: {e}");
            assert_eq!(e.offset, *off, "{text}: {e}");
        }
    }

    #[test]
    fn bounds_nesting_and_length() {
        let deep = format!("{}1{}", "(".repeat(1000), ")".repeat(1000));
        assert!(eval_const(&deep).unwrap_err().message.contains("nested"));
        let unary = format!("{}1", "~".repeat(1000));
        assert!(eval_const(&unary).unwrap_err().message.contains("nested"));
        let chain = vec!["1"; 1000].join("|");
        assert!(eval_const(&chain).unwrap_err().message.contains("nested"));
        let ok_chain = vec!["1"; 100].join("|");
        assert_eq!(eval_const(&ok_chain), Ok(1));
        let long = "1".repeat(MAX_EXPR_LEN + 1);
        assert!(eval_const(&long).unwrap_err().message.contains("accepted"));
    }

    #[test]
    fn mask_tests_are_recognised() {
        let cases = [
            (
                "(1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u)))",
                Some(0x400000),
            ),
            ("REC->gfp_flags & 0x10", Some(0x10)),
            ("(0x10 & REC->gfp_flags) && 2", Some(0x10)),
            ("(bool)(REC->gfp_flags & (1UL << 22))", Some(1 << 22)),
            ("(0 && (REC->gfp_flags & 0x10))", None),
            ("(REC->gfp_flags & REC->node)", None),
            ("(REC->gfp_flags | 0x10)", None),
            ("(int)(REC->gfp_flags & 0x10)", None),
            ("((u8)REC->gfp_flags & 0x10)", None),
        ];
        for (text, want) in cases {
            let e = CExpr::parse(text).unwrap();
            let got = e.as_mask_test();
            assert_eq!(got.map(|(_, m)| m), want, "{text}");
            if let Some((name, mask)) = got {
                assert_eq!(name, "gfp_flags");
                // Same truth value as the tree walk.
                for v in [0, 0x10, 0x400000, 0x400cc0, u64::MAX, 0xcc0] {
                    let walk = e.eval(&|n| (n == "gfp_flags").then_some(v)).unwrap() != 0;
                    assert_eq!(walk, v & mask != 0, "{text} {v:#x}");
                }
            }
        }
    }

    #[test]
    fn fields_in_expressions() {
        let e =
            CExpr::parse("(1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u)))").unwrap();
        assert_eq!(e.fields(), ["gfp_flags"]);
        assert!(!e.is_const());
        let with = |v: u64| move |n: &str| (n == "gfp_flags").then_some(v);
        assert_eq!(e.eval(&with(0x400cc0)), Ok(1));
        assert_eq!(e.eval(&with(0xcc0)), Ok(0));
        assert!(e
            .eval_const()
            .unwrap_err()
            .message
            .contains("REC->gfp_flags"));
        assert_eq!(
            CExpr::parse("(REC -> x)").unwrap().as_plain_field(),
            Some("x")
        );
        assert_eq!(
            CExpr::parse("( unsigned long)REC->x")
                .unwrap()
                .as_plain_field(),
            Some("x")
        );
        assert_eq!(CExpr::parse("REC->x + 1").unwrap().as_plain_field(), None);
    }

    const GFP_61: &str = r#""gfp_flags=%s node=%d accounted=%s", (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {( unsigned long)((( gfp_t)(0x400u|0x800u)) | (( gfp_t)0x40u) | (( gfp_t)0x80u)), "GFP_KERNEL"}, {( unsigned long)((( gfp_t)(0x400u|0x800u)) | (( gfp_t)0x40u)), "GFP_NOFS"}, {( unsigned long)(( gfp_t)0x100u), "__GFP_ZERO"}, {( unsigned long)(( gfp_t)0x400000u), "__GFP_ACCOUNT"}, {( unsigned long)(( gfp_t)(0x400u|0x800u)), "__GFP_RECLAIM"}, {( unsigned long)(( gfp_t)0x400u), "__GFP_DIRECT_RECLAIM"}, {( unsigned long)(( gfp_t)0x800u), "__GFP_KSWAPD_RECLAIM"} ) : "none", REC->node, (1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u))) ? "true" : "false""#;

    #[test]
    fn gfp_table_decodes_like_the_kernel() {
        let t = FlagTable::for_field(GFP_61, "gfp_flags").unwrap().unwrap();
        assert_eq!(t.kind, TableKind::Flags);
        assert_eq!(t.delim, "|");
        assert_eq!(t.entries.len(), 7);
        assert_eq!(t.if_zero.as_deref(), Some("none"));
        assert_eq!(t.value_of("__GFP_ACCOUNT"), Some(0x40_0000));
        assert_eq!(t.decode(0xcc0).to_string(), "GFP_KERNEL");
        assert_eq!(t.decode(0xdc0).to_string(), "GFP_KERNEL|__GFP_ZERO");
        assert_eq!(t.decode(0).to_string(), "none");
        assert_eq!(t.decode(0x400).to_string(), "__GFP_DIRECT_RECLAIM");
        assert_eq!(t.decode(0xc00).to_string(), "__GFP_RECLAIM");
        assert_eq!(
            t.decode(0x1_0000_0cc0).to_string(),
            "GFP_KERNEL|0x100000000"
        );
        assert_eq!(t.decode(0x3).to_string(), "0x3");
        assert_eq!(t.decode_compact(0xdc0).to_string(), "KERNEL|ZERO");
        assert_eq!(t.entries[2].short_name(), "ZERO");
        assert!(FlagTable::for_field(GFP_61, "nope").unwrap().is_none());

        let acc = arg_after_label(GFP_61, "accounted=").unwrap();
        let (cond, yes, no) = split_ternary(acc).unwrap();
        assert_eq!((yes, no), ("\"true\"", "\"false\""));
        let e = CExpr::parse(cond).unwrap();
        assert_eq!(e.eval(&|_| Some(0x400cc0)), Ok(1));
        assert_eq!(arg_after_label(GFP_61, "node="), Some("REC->node"));
        assert_eq!(arg_after_label(GFP_61, "nope="), None);
    }

    /// Linux 6.18's spelling: `(1UL) << n` expressions, a NULL terminator.
    const GFP_618: &str = r#""gfp_flags=%s", (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {( unsigned long)(((((((( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7))) | (( gfp_t)((((1UL))) << (20)))) | (( gfp_t)((((1UL))) << (1)))) | (( gfp_t)((((1UL))) << (3))) | (( gfp_t)0)) | (( gfp_t)((((1UL))) << (18))) | (( gfp_t)((((1UL))) << (19))) | (( gfp_t)((((1UL))) << (13)))) & ~(( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11))))) | (( gfp_t)((((1UL))) << (10)))), "GFP_TRANSHUGE"}, {( unsigned long)((( gfp_t)(((((1UL))) << (10))|((((1UL))) << (11)))) | (( gfp_t)((((1UL))) << (6))) | (( gfp_t)((((1UL))) << (7)))), "GFP_KERNEL"}, {( unsigned long)(( gfp_t)((((1UL))) << (8))), "__GFP_ZERO"}, {( unsigned long)(( gfp_t)((((1UL))) << (24))), "__GFP_NO_OBJ_EXT"}, { 0, ((void *)0) } ) : "none""#;

    #[test]
    fn gfp_table_618_expressions() {
        let t = FlagTable::for_field(GFP_618, "gfp_flags").unwrap().unwrap();
        let got: Vec<(u64, &str)> = t
            .entries
            .iter()
            .map(|e| (e.value, e.name.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (0x001c_24ca, "GFP_TRANSHUGE"),
                (0xcc0, "GFP_KERNEL"),
                (0x100, "__GFP_ZERO"),
                (0x0100_0000, "__GFP_NO_OBJ_EXT"),
            ]
        );
        assert_eq!(t.if_zero.as_deref(), Some("none"));
        assert_eq!(
            t.decode(0x011c_25ca).to_string(),
            "GFP_TRANSHUGE|__GFP_ZERO|__GFP_NO_OBJ_EXT"
        );
        assert_eq!(t.decode_compact(0xdc0).to_string(), "KERNEL|ZERO");
        assert_eq!(t.decode(0x2000_0000).to_string(), "0x20000000");
    }

    #[test]
    fn table_count_is_bounded() {
        let pf = "__print_flags(REC->f, \"|\", { 1, \"A\" }) ".repeat(MAX_TABLES + 5);
        let all = FlagTable::find_all(&pf);
        assert_eq!(all.len(), MAX_TABLES + 1);
        assert!(all[MAX_TABLES]
            .as_ref()
            .unwrap_err()
            .message
            .contains("tables"));
        // Hostile: many unclosed calls stay cheap.
        let pf = "__print_flags(".repeat(100_000);
        assert!(FlagTable::find_all(&pf).len() <= MAX_TABLES + 1);
    }

    #[test]
    fn null_terminator_zero_mask_and_symbolic() {
        let pf = r#""%s %s", __print_flags(REC->f, " | ", { 1, "A" }, { 0, "ZERO" }, { 2, "B" }, { 0, ((void *)0) }, { 4, "NEVER" }), __print_symbolic(REC->member, { 0, "MM_FILEPAGES" }, { 1, "MM_ANONPAGES" }, { 2, "MM_SWAPENTS" })"#;
        let all = FlagTable::find_all(pf);
        assert_eq!(all.len(), 2);
        let f = all[0].as_ref().unwrap();
        assert_eq!(f.entries.len(), 3); // stops at the NULL name
        assert_eq!(f.if_zero, None);
        // The kernel prints a zero-mask entry while bits remain.
        assert_eq!(f.decode(3).to_string(), "A | ZERO | B");
        assert_eq!(f.decode(4).to_string(), "ZERO | 0x4");
        assert_eq!(f.decode(0).to_string(), "");
        let s = all[1].as_ref().unwrap();
        assert_eq!(s.kind, TableKind::Symbolic);
        assert_eq!(s.field.as_deref(), Some("member"));
        assert_eq!(s.decode(1).to_string(), "MM_ANONPAGES");
        assert_eq!(s.decode_compact(1).to_string(), "ANONPAGES");
        assert_eq!(s.decode(7).to_string(), "0x7");
    }

    #[test]
    fn hostile_tables_cannot_decode_to_unbounded_text() {
        let table = |delim: &str, entries: &str, zero: &str| {
            format!(r#""%s", (REC->f) ? __print_flags(REC->f, "{delim}", {entries}) : "{zero}""#)
        };
        // A 1 MiB delimiter between 4,095 zero-mask names printed once each
        // was 4 GiB of text for one value.
        let zeros = r#"{ 0, "a" },"#.repeat(MAX_ENTRIES - 1);
        let long_delim = "|".repeat(1 << 20);
        let long_name = format!(r#"{{ 1, "{}" }}"#, "N".repeat(MAX_NAME_LEN + 1));
        let long_zero = "z".repeat(MAX_NAME_LEN + 1);
        for (pf, what) in [
            (table(&long_delim, r#"{ 1, "A" }"#, "none"), "delimiter"),
            (table("|", &zeros, "none"), "could print"),
            (table("|", &long_name, "none"), "entry name"),
            (table("|", r#"{ 1, "A" }"#, &long_zero), "zero text"),
        ] {
            let e = FlagTable::for_field(&pf, "f").unwrap_err();
            assert!(e.message.contains(what), "{e}");
        }
        // Within the bounds, tables are read and print within them.
        // The zero-mask entries first, where they all print.
        let mut entries = r#"{ 0, "zero" },"#.repeat(8);
        entries.extend((0..64).map(|b| format!(r#"{{ 1ULL << {b}, "{}" }},"#, "n".repeat(40))));
        let pf = table("|", &entries, &"z".repeat(MAX_NAME_LEN));
        let t = FlagTable::for_field(&pf, "f").unwrap().unwrap();
        assert_eq!(t.decode(0).to_string().len(), MAX_NAME_LEN);
        let all = t.decode(u64::MAX).to_string();
        assert!(all.len() <= MAX_DECODED_LEN, "{}", all.len());
        assert_eq!(all.matches("zero").count(), 8);
        let pf = table(&"d".repeat(MAX_DELIM_LEN), r#"{ 1, "A" }, { 2, "B" }"#, "");
        let t = FlagTable::for_field(&pf, "f").unwrap().unwrap();
        assert_eq!(t.decode(7).to_string().len(), 1 + 64 + 1 + 64 + 3);
    }

    #[test]
    fn table_errors_name_offset_and_field() {
        let pf = r#""%s", __print_flags(REC->f, "|", { 1, "A" }, { FOO, "B" })"#;
        let e = FlagTable::for_field(pf, "f").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("f"));
        assert!(e.message.contains("FOO"), "{e}");
        assert_eq!(&pf[e.offset..e.offset + 3], "FOO");
        // Another field's broken table does not matter.
        let pf2 = format!("{pf}, __print_flags(REC->g, \"|\", {{ 2, \"X\" }})");
        assert!(FlagTable::for_field(&pf2, "g").unwrap().is_some());
        for bad in [
            r#"__print_flags(REC->f, "|", { 1, "A" }"#,
            r#"__print_flags(REC->f)"#,
            r#"__print_flags(REC->f, x, { 1, "A" })"#,
            r#"__print_flags(REC->f, "|", 1)"#,
            r#"__print_flags(REC->f, "|", { 1, "A", 2 })"#,
            r#"__print_flags(REC->f, "|", { 1, "A })"#,
        ] {
            assert!(FlagTable::for_field(bad, "f").is_err(), "{bad}");
        }
    }

    #[test]
    fn string_literals() {
        assert_eq!(
            parse_string_literal(r#""a\"b\\c\n""#).as_deref(),
            Some("a\"b\\c\n")
        );
        assert_eq!(
            parse_string_literal(r#""ab" "cd""#).as_deref(),
            Some("abcd")
        );
        assert_eq!(parse_string_literal(r#""\x41\101""#).as_deref(), Some("AA"));
        assert_eq!(parse_string_literal("x"), None);
        assert_eq!(parse_string_literal("\"abc"), None);
        assert_eq!(parse_string_literal(""), None);
        let parts =
            split_print_fmt(r#""a=%d b=%*d c=%%s %pS", REC->a, 4, REC->b, REC->c"#).unwrap();
        assert_eq!(parts.format, "a=%d b=%*d c=%%s %pS");
        assert_eq!(parts.args.len(), 4);
        assert_eq!(parts.args[3], (43, "REC->c"));
        assert_eq!(
            arg_after_label(
                r#""a=%d b=%*d c=%%s d=%pS", REC->a, 4, REC->b, REC->c"#,
                "d="
            ),
            Some("REC->c")
        );
        assert_eq!(
            arg_after_label(r#""a=%d b=%*d", REC->a, 4, REC->b"#, "b="),
            Some("REC->b")
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn arbitrary_expressions_never_panic(s in "\\PC{0,80}") {
            let _ = eval_const(&s);
            let _ = FlagTable::find_all(&s);
            let _ = split_ternary(&s);
            let _ = arg_after_label(&s, "x=");
            let _ = parse_string_literal(&s);
        }

        #[test]
        fn expression_like_text_never_panics(
            s in "([0-9]|0x[0-9a-f]|[uUlL]|[()~!+*/%<>=&|^?:-]| |REC->f|gfp_t|unsigned){0,60}"
        ) {
            if let Ok(e) = CExpr::parse(&s) {
                let _ = e.eval(&|_| Some(3));
            }
            let pf = format!("\"%s\", __print_flags(REC->f, \"|\", {{ {s}, \"A\" }}) : \"none\"");
            for t in FlagTable::find_all(&pf).into_iter().flatten() {
                let _ = t.decode(0x1234).to_string();
            }
        }
    }
}
