//! An event's `print fmt`, compiled once and applied to each record: the
//! text the kernel's `trace` file prints after `event_name: `.
//!
//! The kernel's path is `trace_raw_output_<event>()` ->
//! `trace_event_printf()` -> `vsnprintf()`. Its `%p` prints the pointer
//! raw where the `hash-ptr` trace option is off or the kernel booted with
//! `no_hash_pointers` (the foreign captures did); otherwise it prints a
//! hash keyed by a secret of that boot, which no log can reproduce, so
//! this module always prints the raw value. It does the rest with the recorded
//! kernel's sizes: `%ld` and `%p` are as wide as its `long`, `-1UL` in an
//! argument is too ([`crate::print_flags::Env`]).
//!
//! What it evaluates: C integer expressions over `REC->` fields (casts,
//! ternaries, comparisons), string literals, `__print_flags` /
//! `__print_symbolic` tables, `__get_str` / `__get_dynamic_array`, and the
//! `%pS`/`%ps` symbol conversions through the log's kallsyms. An argument it
//! cannot evaluate prints as `?`: a kernel variable such as `mem_map` or
//! `vmemmap` (the `page=%p` of the page events is `mem_map + pfn`, whose
//! value the kernel knows at run time and no log records), or a helper it
//! does not know (`__print_hex`).

use crate::endian::Endian;
use crate::event_format::{EventFormat, FieldKind};
use crate::kallsyms::Kallsyms;
use crate::print_flags::{
    find_close, parse_string_literal, split_print_fmt, split_ternary, strip_parens, CExpr, CType,
    Env, FlagTable, Value,
};
use std::fmt::Write;

/// What an argument that cannot be evaluated prints as.
pub const UNKNOWN: &str = "?";

/// A compiled print fmt.
#[derive(Debug)]
pub struct PrintFmt {
    segs: Vec<Seg>,
    args: Vec<Arg>,
    /// Why the print fmt as a whole could not be read, if it could not; the
    /// event then prints its fields raw.
    pub problem: Option<String>,
}

#[derive(Debug)]
enum Seg {
    Lit(String),
    Conv(Spec),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Count {
    None,
    Fixed(usize),
    /// `*`: taken from this argument.
    Arg(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Len {
    Char,
    Short,
    Int,
    Long,
    LongLong,
    /// `z`, `t`: `size_t`, `ptrdiff_t`.
    Size,
}

#[derive(Clone, Debug)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: Count,
    precision: Count,
    len: Len,
    conv: u8,
    /// `%p`'s extension letters (`S` of `%pS`).
    ext: String,
    arg: usize,
}

#[derive(Debug)]
enum Arg {
    Expr(CExpr),
    Str(String),
    Cond(CExpr, Box<Arg>, Box<Arg>),
    Table(CExpr, FlagTable),
    /// `__get_str(f)`, `__get_dynamic_array(f)`: the field's bytes.
    FieldBytes(String),
    /// Cannot be printed; why.
    Bad(String),
}

/// What rendering reads besides the record.
pub struct Kernel<'a> {
    /// The recorded kernel's `long` width in bits.
    pub long_bits: u8,
    /// Its symbols, for `%pS`.
    pub symbols: Option<&'a Kallsyms>,
}

const MAX_ARG_DEPTH: usize = 16;

/// `FIELD_WIDTH_MAX` and `PRECISION_MAX` of the kernel's `lib/vsprintf.c`.
const FIELD_WIDTH_MAX: usize = (1 << 23) - 1;
const PRECISION_MAX: usize = (1 << 15) - 1;

/// The most text one record prints. The kernel's own `trace_seq` holds a
/// page or two, so no record's line in its `trace` file is longer; a print
/// fmt from an untrusted log must not make one record's text unbounded.
pub const RECORD_TEXT_MAX: usize = 64 << 10;

/// The most conversions one record's text runs. A kernel's print fmt has
/// tens; an untrusted one's that print nothing (`%.0s`) would never reach
/// [`RECORD_TEXT_MAX`], and 4 MiB of format holds 250,000 of them.
const RECORD_CONVERSIONS_MAX: usize = 4096;

impl Arg {
    fn parse(text: &str, depth: usize) -> Arg {
        let t = strip_parens(text);
        if let Some(s) = parse_string_literal(t) {
            return Arg::Str(s);
        }
        if depth < MAX_ARG_DEPTH {
            if let Some((c, a, b)) = split_ternary(t) {
                return match CExpr::parse_with_symbols(c) {
                    Ok(c) => Arg::Cond(
                        c,
                        Box::new(Arg::parse(a, depth + 1)),
                        Box::new(Arg::parse(b, depth + 1)),
                    ),
                    Err(e) => Arg::Bad(e.to_string()),
                };
            }
        }
        if let Some((name, inner)) = call(t) {
            return match name {
                "__print_flags"
                | "__print_flags_u64"
                | "__print_symbolic"
                | "__print_symbolic_u64" => match FlagTable::find_all(t).into_iter().next() {
                    Some(Ok(table)) => match CExpr::parse_with_symbols(&table.arg) {
                        Ok(e) => Arg::Table(e, table),
                        Err(e) => Arg::Bad(e.to_string()),
                    },
                    Some(Err(e)) => Arg::Bad(e.to_string()),
                    None => Arg::Bad(format!("`{name}` without a table")),
                },
                "__get_str"
                | "__get_dynamic_array"
                | "__get_rel_str"
                | "__get_rel_dynamic_array" => Arg::FieldBytes(inner.trim().to_string()),
                _ => Arg::Bad(format!("`{name}()` is not evaluated")),
            };
        }
        match CExpr::parse_with_symbols(t) {
            Ok(e) => Arg::Expr(e),
            Err(e) => Arg::Bad(e.to_string()),
        }
    }
}

impl Arg {
    /// Why this argument never prints a value, if it never does.
    fn unevaluated(&self) -> Option<String> {
        let symbols = |e: &CExpr| {
            (!e.symbols().is_empty()).then(|| {
                let names: Vec<String> = e.symbols().iter().map(|s| format!("`{s}`")).collect();
                let what = if names.len() == 1 {
                    "a kernel variable whose value"
                } else {
                    "kernel variables whose values"
                };
                format!("reads {}, {what} no log records", names.join(", "))
            })
        };
        match self {
            Arg::Bad(why) => Some(why.clone()),
            Arg::Expr(e) | Arg::Table(e, _) => symbols(e),
            Arg::Cond(c, t, f) => symbols(c).or_else(|| t.unevaluated().or(f.unevaluated())),
            Arg::Str(_) | Arg::FieldBytes(_) => None,
        }
    }
}

/// `name(inner)` when `s` is exactly one call of an identifier.
fn call(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    let end = b
        .iter()
        .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))?;
    if end == 0 || b[0].is_ascii_digit() {
        return None;
    }
    let open = end + s[end..].len() - s[end..].trim_start().len();
    if b.get(open) != Some(&b'(') || find_close(s, open, 0).ok()? != s.len() - 1 {
        return None;
    }
    Some((&s[..end], &s[open + 1..s.len() - 1]))
}

/// Parses a printf format into literal text and conversions.
fn parse_format(format: &str) -> Vec<Seg> {
    let b = format.as_bytes();
    let mut segs = Vec::new();
    let mut lit = String::new();
    let mut arg = 0usize;
    let mut i = 0;
    while i < b.len() {
        // A conversion whose character is not ASCII ends inside it: the
        // rest of that character goes with the conversion.
        if !format.is_char_boundary(i) {
            i += 1;
            continue;
        }
        if b[i] != b'%' {
            let next = format[i..].find('%').map_or(format.len(), |n| i + n);
            lit.push_str(&format[i..next]);
            i = next;
            continue;
        }
        i += 1;
        if b.get(i) == Some(&b'%') {
            lit.push('%');
            i += 1;
            continue;
        }
        let mut spec = Spec {
            left: false,
            zero: false,
            plus: false,
            space: false,
            alt: false,
            width: Count::None,
            precision: Count::None,
            len: Len::Int,
            conv: 0,
            ext: String::new(),
            arg: 0,
        };
        while let Some(&c) = b.get(i) {
            match c {
                b'-' => spec.left = true,
                b'0' => spec.zero = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'#' => spec.alt = true,
                _ => break,
            }
            i += 1;
        }
        let mut count = |i: &mut usize| -> Count {
            if b.get(*i) == Some(&b'*') {
                *i += 1;
                arg += 1;
                return Count::Arg(arg - 1);
            }
            let start = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            format[start..*i].parse().map_or(Count::None, Count::Fixed)
        };
        spec.width = count(&mut i);
        if b.get(i) == Some(&b'.') {
            i += 1;
            spec.precision = match count(&mut i) {
                Count::None => Count::Fixed(0),
                c => c,
            };
        }
        let mut longs = 0;
        while let Some(&c) = b.get(i) {
            match c {
                b'h' => {
                    spec.len = if spec.len == Len::Short {
                        Len::Char
                    } else {
                        Len::Short
                    }
                }
                b'l' => {
                    longs += 1;
                    spec.len = if longs >= 2 { Len::LongLong } else { Len::Long };
                }
                b'L' | b'q' | b'j' => spec.len = Len::LongLong,
                b'z' | b't' | b'Z' => spec.len = Len::Size,
                _ => break,
            }
            i += 1;
        }
        spec.conv = b.get(i).copied().unwrap_or(b'?');
        i += 1;
        if spec.conv == b'p' {
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_alphanumeric) {
                i += 1;
            }
            spec.ext = format[start..i].to_string();
        }
        spec.arg = arg;
        arg += 1;
        if !lit.is_empty() {
            segs.push(Seg::Lit(std::mem::take(&mut lit)));
        }
        segs.push(Seg::Conv(spec));
    }
    if !lit.is_empty() {
        segs.push(Seg::Lit(lit));
    }
    segs
}

/// A record being printed.
struct Rec<'a, E> {
    e: E,
    format: &'a EventFormat,
    payload: &'a [u8],
}

impl<E: Endian> Rec<'_, E> {
    fn value(&self, name: &str) -> Option<Value> {
        let f = self.format.field(name)?;
        if f.kind != FieldKind::Scalar || !matches!(f.size, 1 | 2 | 4 | 8) {
            return None;
        }
        let v = f.read_u64(self.e, self.payload)?;
        let ty = CType {
            bits: (f.size * 8) as u8,
            signed: f.signed,
        };
        Some(Value::new(v, ty))
    }

    fn bytes(&self, name: &str) -> Option<&[u8]> {
        let f = self.format.field(name)?;
        f.read_bytes(self.e, self.payload)
    }
}

/// A rendered argument.
enum Out<'a> {
    Int(u64),
    Text(std::borrow::Cow<'a, str>),
    Unknown,
}

impl PrintFmt {
    /// Compiles a print fmt (the text after `print fmt: `).
    pub fn compile(print_fmt: &str) -> PrintFmt {
        match split_print_fmt(print_fmt) {
            Ok(parts) => PrintFmt {
                segs: parse_format(&parts.format),
                args: parts.args.iter().map(|(_, a)| Arg::parse(a, 0)).collect(),
                problem: None,
            },
            Err(e) => PrintFmt {
                segs: Vec::new(),
                args: Vec::new(),
                problem: Some(e.to_string()),
            },
        }
    }

    /// The conversions that print [`UNKNOWN`] whatever the record, each
    /// with the literal text before it and why (`page=`: reads `mem_map`).
    pub fn unevaluated(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut label = "";
        for seg in &self.segs {
            let spec = match seg {
                Seg::Lit(s) => {
                    label = s.rsplit(' ').next().unwrap_or("");
                    continue;
                }
                Seg::Conv(spec) => spec,
            };
            let why = match self.args.get(spec.arg) {
                None => Some("no argument".to_string()),
                Some(a) => a.unevaluated(),
            };
            if let Some(why) = why {
                out.push(format!("`{label}`: {why}"));
            }
            label = "";
        }
        out
    }

    /// Appends the record's text to `out`, as the kernel prints it after
    /// `name: ` (no newline).
    pub fn write<E: Endian>(
        &self,
        out: &mut String,
        e: E,
        format: &EventFormat,
        payload: &[u8],
        k: &Kernel<'_>,
    ) {
        let rec = Rec { e, format, payload };
        let start = out.len();
        if self.problem.is_some() {
            return write_raw_fields(out, &rec, start);
        }
        let mut convs = 0;
        for seg in &self.segs {
            match seg {
                Seg::Lit(s) => out.push_str(s),
                Seg::Conv(_) if convs == RECORD_CONVERSIONS_MAX => return,
                Seg::Conv(spec) => {
                    convs += 1;
                    self.conv(out, spec, &rec, k);
                }
            }
            if cut_to_record_max(out, start) {
                return;
            }
        }
    }

    fn count<E: Endian>(&self, c: Count, rec: &Rec<'_, E>, k: &Kernel<'_>) -> Option<usize> {
        match c {
            Count::None => None,
            Count::Fixed(n) => Some(n),
            Count::Arg(i) => match self.eval(i, rec, k) {
                Out::Int(v) => Some((v as i32).max(0) as usize),
                _ => None,
            },
        }
    }

    fn conv<E: Endian>(&self, out: &mut String, spec: &Spec, rec: &Rec<'_, E>, k: &Kernel<'_>) {
        // The kernel's vsprintf keeps a width in 24 bits and a precision
        // in 16 (`set_field_width`, `set_precision`): larger ones are
        // clamped there, as here.
        let width = self
            .count(spec.width, rec, k)
            .map(|w| w.min(FIELD_WIDTH_MAX));
        let precision = self
            .count(spec.precision, rec, k)
            .map(|p| p.min(PRECISION_MAX));
        let arg = self.args.get(spec.arg);
        let value = match (spec.conv, arg) {
            // `%s` of a char array or string field passed as `REC->name`.
            (b's', Some(Arg::Expr(e))) => match e.as_plain_field().and_then(|f| rec.bytes(f)) {
                Some(b) => Out::Text(String::from_utf8_lossy(b)),
                None => self.eval(spec.arg, rec, k),
            },
            _ => self.eval(spec.arg, rec, k),
        };
        let text = match (spec.conv, value) {
            (_, Out::Unknown) => UNKNOWN.into(),
            (b's', Out::Text(t)) => match precision {
                Some(p) => t.chars().take(p).collect(),
                None => t.into_owned(),
            },
            (b'p', Out::Int(v)) => pointer(spec, v, width, k),
            (b'c', Out::Int(v)) => char::from(v as u8).to_string(),
            (b'd' | b'i' | b'u' | b'x' | b'X' | b'o', Out::Int(v)) => {
                return out.push_str(&number(spec, v, width, precision, k.long_bits));
            }
            _ => UNKNOWN.into(),
        };
        pad(out, &text, width, spec.left);
    }

    fn eval<'r, E: Endian>(&'r self, i: usize, rec: &'r Rec<'_, E>, k: &Kernel<'_>) -> Out<'r> {
        match self.args.get(i) {
            Some(a) => eval_arg(a, rec, k),
            None => Out::Unknown,
        }
    }
}

fn eval_arg<'r, E: Endian>(a: &'r Arg, rec: &'r Rec<'_, E>, k: &Kernel<'_>) -> Out<'r> {
    let field = |n: &str| rec.value(n);
    let env = Env {
        long_bits: k.long_bits,
        field: &field,
        // No log records the values of kernel variables.
        symbol: &|_| None,
    };
    match a {
        Arg::Expr(e) => e.eval_in(&env).map_or(Out::Unknown, |v| Out::Int(v.bits)),
        Arg::Str(s) => Out::Text(s.as_str().into()),
        Arg::Cond(c, t, f) => match c.eval_in(&env) {
            Ok(v) if v.bits != 0 => eval_arg(t, rec, k),
            Ok(_) => eval_arg(f, rec, k),
            Err(_) => Out::Unknown,
        },
        Arg::Table(e, table) => match e.eval_in(&env) {
            Ok(v) => Out::Text(table.decode(v.bits).to_string().into()),
            Err(_) => Out::Unknown,
        },
        Arg::FieldBytes(f) => match rec.bytes(f) {
            Some(b) => Out::Text(String::from_utf8_lossy(b)),
            None => Out::Unknown,
        },
        Arg::Bad(_) => Out::Unknown,
    }
}

/// Filler of `want` characters, as much of it as a record's text can
/// hold: the rest would be cut off ([`RECORD_TEXT_MAX`]) after being
/// written, megabytes of it for a width near the kernel's limit.
fn fill_of(want: usize) -> usize {
    want.min(RECORD_TEXT_MAX)
}

fn pad(out: &mut String, text: &str, width: Option<usize>, left: bool) {
    let fill = fill_of(width.unwrap_or(0).saturating_sub(text.chars().count()));
    if !left {
        out.extend(std::iter::repeat_n(' ', fill));
    }
    out.push_str(text);
    if left {
        out.extend(std::iter::repeat_n(' ', fill));
    }
}

/// `%p` and its kernel extensions.
fn pointer(spec: &Spec, v: u64, width: Option<usize>, k: &Kernel<'_>) -> String {
    let v = CType {
        bits: k.long_bits,
        signed: false,
    }
    .convert(v);
    match spec.ext.as_bytes().first() {
        Some(b'S' | b's' | b'F' | b'f' | b'B') => {
            let with_offset = matches!(spec.ext.as_bytes()[0], b'S' | b'F' | b'B');
            match k.symbols.and_then(|s| s.resolve(v)) {
                Some(sym) if with_offset => sym.to_string(),
                Some(sym) => match sym.module {
                    Some(m) => format!("{} [{m}]", sym.name),
                    None => sym.name.to_string(),
                },
                None => format!("0x{v:x}"),
            }
        }
        // `%p`, `%px`, `%pK` (raw for the root that reads the trace).
        None | Some(b'x' | b'K') => {
            let digits = usize::from(k.long_bits / 4);
            let spec = Spec {
                zero: width.is_none() || spec.zero,
                conv: b'x',
                len: Len::LongLong,
                ..spec.clone()
            };
            number(&spec, v, Some(width.unwrap_or(digits)), None, 64)
        }
        _ => UNKNOWN.to_string(),
    }
}

/// An integer conversion as the kernel's `number()` prints it (its `%#x`
/// of 0 is `0x0`, unlike C libraries).
fn number(
    spec: &Spec,
    raw: u64,
    width: Option<usize>,
    precision: Option<usize>,
    long_bits: u8,
) -> String {
    let bits = match spec.len {
        Len::Char => 8,
        Len::Short => 16,
        Len::Int => 32,
        Len::Long | Len::Size => long_bits,
        Len::LongLong => 64,
    };
    let signed = matches!(spec.conv, b'd' | b'i');
    let v = CType { bits, signed }.convert(raw);
    let negative = signed && (v as i64) < 0;
    let magnitude = if negative {
        (v as i64).unsigned_abs()
    } else {
        v
    };
    let digits = match spec.conv {
        b'x' => format!("{magnitude:x}"),
        b'X' => format!("{magnitude:X}"),
        b'o' => format!("{magnitude:o}"),
        _ => magnitude.to_string(),
    };
    let sign = if negative {
        "-"
    } else if signed && spec.plus {
        "+"
    } else if signed && spec.space {
        " "
    } else {
        ""
    };
    let prefix = match (spec.alt, spec.conv) {
        (true, b'x') => "0x",
        (true, b'X') => "0X",
        (true, b'o') if magnitude != 0 => "0",
        _ => "",
    };
    let precision = precision.unwrap_or(0).max(digits.len());
    let width = width.unwrap_or(0);
    let used = sign.len() + prefix.len() + precision;
    let fill = fill_of(width.saturating_sub(used));
    let mut s = String::with_capacity(used + fill);
    if !spec.left && !spec.zero {
        s.extend(std::iter::repeat_n(' ', fill));
    }
    s.push_str(sign);
    s.push_str(prefix);
    if !spec.left && spec.zero {
        s.extend(std::iter::repeat_n('0', fill));
    }
    s.extend(std::iter::repeat_n('0', precision - digits.len()));
    s.push_str(&digits);
    if spec.left {
        s.extend(std::iter::repeat_n(' ', fill));
    }
    s
}

/// Cuts the text written since `start` to [`RECORD_TEXT_MAX`] bytes (at a
/// character's start); whether it had to.
fn cut_to_record_max(out: &mut String, start: usize) -> bool {
    if out.len() - start <= RECORD_TEXT_MAX {
        return false;
    }
    let mut end = start + RECORD_TEXT_MAX;
    while !out.is_char_boundary(end) {
        end -= 1;
    }
    out.truncate(end);
    true
}

/// An event whose print fmt cannot be read prints its fields, as
/// libtraceevent does then: `name=value` for each (the text since `start`
/// within [`RECORD_TEXT_MAX`]).
fn write_raw_fields<E: Endian>(out: &mut String, rec: &Rec<'_, E>, start: usize) {
    for (n, f) in rec.format.fields.iter().enumerate() {
        // Each field of bytes may print the rest of the record: a format
        // that declares many is bounded as a print fmt's text is.
        if cut_to_record_max(out, start) {
            return;
        }
        if n > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{}=", f.name);
        if f.is_bytes() {
            let b = f.read_bytes(rec.e, rec.payload).unwrap_or_default();
            out.push_str(&String::from_utf8_lossy(b));
        } else {
            match rec.value(&f.name) {
                Some(v) if v.ty.signed => {
                    let _ = write!(out, "{}", v.bits as i64);
                }
                Some(v) => {
                    let _ = write!(out, "0x{:x}", v.bits);
                }
                None => out.push_str(UNKNOWN),
            }
        }
    }
    cut_to_record_max(out, start);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endian::{BigEndian, LittleEndian};

    /// A format with the fields given as (declaration, name, size, signed),
    /// laid out one after the other from offset 8.
    fn format(fields: &[(&str, &str, usize, bool)], print_fmt: &str) -> EventFormat {
        let mut text = String::from(
            "name: test\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n",
        );
        let mut off = 8;
        for (decl, name, size, signed) in fields {
            text.push_str(&format!(
                "\tfield:{decl} {name};\toffset:{off};\tsize:{size};\tsigned:{};\n",
                u8::from(*signed)
            ));
            off += size;
        }
        text.push_str(&format!("\nprint fmt: {print_fmt}\n"));
        EventFormat::parse(&text, Some("t")).unwrap()
    }

    fn render<E: Endian>(e: E, f: &EventFormat, payload: &[u8], long_bits: u8) -> String {
        let mut out = String::new();
        let k = Kernel {
            long_bits,
            symbols: None,
        };
        PrintFmt::compile(&f.print_fmt).write(&mut out, e, f, payload, &k);
        out
    }

    #[test]
    fn a_conversion_character_of_several_bytes_does_not_split_the_text() {
        let f = format(&[], r#""a=%ڊ b=%d", 1, 2"#);
        let out = render(LittleEndian, &f, &[0u8; 8], 64);
        assert!(out.starts_with("a="), "{out}");
        assert!(out.contains(" b="), "{out}");
    }

    #[test]
    fn a_record_runs_a_bounded_number_of_conversions_each_finding_its_field_at_once() {
        // Thousands of fields, the one printed declared last; conversions
        // that print nothing never reach the text bound.
        let names: Vec<String> = (0..4000).map(|i| format!("f{i}[1]")).collect();
        let mut fields: Vec<(&str, &str, usize, bool)> = names
            .iter()
            .map(|n| ("char", n.as_str(), 1, false))
            .collect();
        fields.push(("int", "last", 4, true));
        let fmt = format!(
            "\"{}%d\", {}REC->last",
            "%.0s".repeat(RECORD_CONVERSIONS_MAX - 1),
            "REC->f0, ".repeat(RECORD_CONVERSIONS_MAX - 1)
        );
        let f = format(&fields, &fmt);
        let mut p = vec![0u8; 8 + 4000 + 4];
        p[4008..].copy_from_slice(&7i32.to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 64), "7");
        // One conversion more: the last is not run.
        let over = format!(
            "\"{}%d\", {}REC->last",
            "%.0s".repeat(RECORD_CONVERSIONS_MAX),
            "REC->f0, ".repeat(RECORD_CONVERSIONS_MAX)
        );
        assert_eq!(render(LittleEndian, &format(&fields, &over), &p, 64), "");
        assert_eq!(f.field("last").unwrap().offset, 4008);
        assert_eq!(f.field("common_pid").unwrap().offset, 4);
    }

    #[test]
    fn a_print_fmt_that_does_not_parse_prints_the_fields_within_the_bound() {
        // Many fields of bytes, each the rest of a large record.
        let mut text = String::from(
            "name: t\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n",
        );
        for i in 0..40 {
            text.push_str(&format!(
                "\tfield:char b{i}[];\toffset:8;\tsize:0;\tsigned:1;\n"
            ));
        }
        text.push_str("\nprint fmt: \"unterminated\n");
        let f = EventFormat::parse(&text, Some("t")).unwrap();
        assert!(PrintFmt::compile(&f.print_fmt).problem.is_some());
        let payload = vec![b'x'; 8 << 10];
        let out = render(LittleEndian, &f, &payload, 64);
        assert_eq!(out.len(), RECORD_TEXT_MAX);
        assert!(out.starts_with("b0=xxx"), "{}", &out[..32]);
        // A small record's fields are all there.
        let out = render(LittleEndian, &f, &payload[..10], 64);
        assert!(out.ends_with(" b39=xx"), "{out}");
    }

    #[test]
    fn widths_and_precisions_are_clamped_and_a_records_text_bounded() {
        // A width past any integer (once a 5 EB allocation), a width and a
        // precision from the record, many conversions.
        let f = format(
            &[("int", "w", 4, true)],
            r#""[%5124095576030431192d] [%*d] [%.*d] %9999999d%9999999d", 1, REC->w, 2, REC->w, 3, 4, 5"#,
        );
        let mut p = vec![0u8; 12];
        p[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
        let out = render(LittleEndian, &f, &p, 64);
        assert_eq!(out.len(), RECORD_TEXT_MAX);
        assert!(out.starts_with("[ "));
        // Padding past the bound is not written: the text is what the
        // bound leaves of it, whichever way it is padded.
        for (fmt, head) in [
            (r#""[%-8000000d]", 42"#, "[42 "),
            (r#""[%08000000d]", 42"#, "[000"),
        ] {
            let out = render(LittleEndian, &format(&[], fmt), &p[..8], 64);
            assert_eq!(out.len(), RECORD_TEXT_MAX);
            assert!(out.starts_with(head), "{}", &out[..8]);
        }
        // Within the bounds, as the kernel prints it.
        let f = format(&[("int", "w", 4, true)], r#""[%*d]", REC->w, 7"#);
        p[8..12].copy_from_slice(&3i32.to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 64), "[  7]");
    }

    #[test]
    fn a_32_bit_kernels_minus_one_ul_is_its_all_ones_long() {
        // mm_page_alloc on armhf: `REC->pfn != -1UL ? ... : 0`.
        let f = format(
            &[("unsigned long", "pfn", 4, false)],
            r#""pfn=0x%lx", REC->pfn != -1UL ? REC->pfn : 0"#,
        );
        let mut p = vec![0u8; 12];
        p[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 32), "pfn=0x0");
        p[8..12].copy_from_slice(&0x432eeu32.to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 32), "pfn=0x432ee");
        // Read as a 64-bit kernel would, -1UL is 64 bits wide: no match.
        p[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 64), "pfn=0xffffffff");
    }

    #[test]
    fn integers_print_as_the_kernels_vsnprintf_prints_them() {
        let f = format(
            &[("int", "a", 4, true), ("unsigned long", "b", 8, false)],
            r#""[%d] [%5d] [%-5d|] [%05d] [%+d] [%u] [%x] [%#x] [%#x] [%#o] [%lu] [%ld] [%.3d] [%hhx] [%c]", REC->a, REC->a, REC->a, REC->a, 7, REC->a, REC->a, 0, 255, 8, REC->b, REC->b, 5, 0x1ff, 65"#,
        );
        let mut p = vec![0u8; 20];
        p[8..12].copy_from_slice(&(-42i32).to_be_bytes());
        p[12..20].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(
            render(BigEndian, &f, &p, 64),
            "[-42] [  -42] [-42  |] [-0042] [+7] [4294967254] [ffffffd6] [0x0] [0xff] [010] \
             [18446744073709551615] [-1] [005] [ff] [A]"
        );
        // `long` is 32 bits on a 32-bit kernel.
        assert!(render(BigEndian, &f, &p, 32).contains("[4294967295] [-1]"));
    }

    #[test]
    fn pointers_are_raw_and_as_wide_as_the_kernels_long() {
        let f = format(
            &[("const void *", "ptr", 8, false)],
            r#""ptr=%p sym=%pS", REC->ptr, (void *)REC->ptr"#,
        );
        let mut p = vec![0u8; 16];
        p[8..16].copy_from_slice(&0xc22cc1f0u64.to_le_bytes());
        // No symbols: %pS prints the address as `0x%lx`.
        assert_eq!(
            render(LittleEndian, &f, &p, 64),
            "ptr=00000000c22cc1f0 sym=0xc22cc1f0"
        );
        assert_eq!(
            render(LittleEndian, &f, &p, 32),
            "ptr=c22cc1f0 sym=0xc22cc1f0"
        );
    }

    #[test]
    fn strings_tables_and_ternaries() {
        let f = format(
            &[
                ("unsigned int", "gfp_flags", 4, false),
                ("char", "comm[8]", 8, false),
                ("__data_loc char[]", "name", 4, false),
                ("bool", "accounted", 1, false),
            ],
            r#""gfp=%s comm=%s name=%s acc=%s mt=%s", (REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {0x1u, "A"}, {0x2u, "B"}) : "none", REC->comm, __get_str(name), REC->accounted ? "true" : "false", __print_symbolic(REC->gfp_flags, {3, "BOTH"}, {0, "ZERO"})"#,
        );
        let mut p = vec![0u8; 8 + 4 + 8 + 4 + 1 + 3 + 8];
        p[8..12].copy_from_slice(&3u32.to_le_bytes());
        p[12..16].copy_from_slice(b"sh\0\0");
        let name_at = 28u32;
        p[20..24].copy_from_slice(&((5u32 << 16) | name_at).to_le_bytes());
        p[24] = 1;
        p[28..33].copy_from_slice(b"dent\0");
        assert_eq!(
            render(LittleEndian, &f, &p, 64),
            "gfp=A|B comm=sh name=dent acc=true mt=BOTH"
        );
        p[8..12].copy_from_slice(&0u32.to_le_bytes());
        p[24] = 0;
        assert_eq!(
            render(LittleEndian, &f, &p, 64),
            "gfp=none comm=sh name=dent acc=false mt=ZERO"
        );
    }

    #[test]
    fn what_cannot_be_evaluated_prints_as_a_question_mark_and_says_why() {
        let f = format(
            &[("unsigned long", "pfn", 8, false)],
            r#""page=%p pfn=0x%lx x=%s", REC->pfn != -1UL ? (vmemmap + (REC->pfn)) : ((void *)0), REC->pfn, __print_hex(REC->pfn, 8)"#,
        );
        let mut p = vec![0u8; 16];
        p[8..16].copy_from_slice(&0x3250u64.to_be_bytes());
        assert_eq!(render(BigEndian, &f, &p, 64), "page=? pfn=0x3250 x=?");
        let why = PrintFmt::compile(&f.print_fmt).unevaluated();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(
            why[0].starts_with("`page=`: reads `vmemmap`, a kernel variable"),
            "{why:?}"
        );
        assert!(why[1].contains("__print_hex"), "{why:?}");
    }

    #[test]
    fn an_unreadable_print_fmt_prints_the_fields() {
        let f = format(&[("int", "order", 4, true)], "not a format");
        let mut p = vec![0u8; 12];
        p[8..12].copy_from_slice(&(-3i32).to_le_bytes());
        assert_eq!(render(LittleEndian, &f, &p, 64), "order=-3");
    }
}
