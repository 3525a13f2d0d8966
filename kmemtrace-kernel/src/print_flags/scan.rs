//! Scanning a print fmt: its format string and arguments split at the top
//! level, string literals, ternaries, and the argument printed after a
//! label, without evaluating anything.

use super::*;

/// Skips a string or character literal starting at `i` (on its quote);
/// returns the index after the closing quote.
pub(super) fn skip_literal(b: &[u8], i: usize) -> Option<usize> {
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            c if c == q => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// Index of the bracket closing the one at `open`, skipping literals.
pub fn find_close(s: &str, open: usize, base: usize) -> Result<usize, FlagsError> {
    let b = s.as_bytes();
    let mut stack: Vec<u8> = Vec::new();
    let mut i = open;
    while i < b.len() {
        match b[i] {
            c @ (b'(' | b'[' | b'{') => {
                if stack.len() >= MAX_NESTING {
                    return Err(ferr(base + i, None, "brackets nested too deep"));
                }
                stack.push(match c {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                });
            }
            c @ (b')' | b']' | b'}') => {
                if stack.pop() != Some(c) {
                    return Err(ferr(base + i, None, format!("unbalanced `{}`", c as char)));
                }
                if stack.is_empty() {
                    return Ok(i);
                }
            }
            b'"' | b'\'' => {
                i = skip_literal(b, i)
                    .ok_or_else(|| ferr(base + i, None, "unterminated string literal"))?;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Err(ferr(base + open, None, "bracket never closed"))
}

pub(super) fn ferr(offset: usize, field: Option<&str>, m: impl Into<String>) -> FlagsError {
    FlagsError {
        offset,
        field: field.map(str::to_string),
        message: m.into(),
    }
}

/// Splits `s` at commas outside brackets and literals; each piece with its
/// byte offset in `s`, untrimmed.
pub(super) fn split_top_level(s: &str) -> Result<Vec<(usize, &str)>, FlagsError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| ferr(i, None, format!("unbalanced `{}`", b[i] as char)))?;
            }
            b'"' | b'\'' => {
                i = skip_literal(b, i)
                    .ok_or_else(|| ferr(i, None, "unterminated string literal"))?;
                continue;
            }
            b',' if depth == 0 => {
                out.push((start, &s[start..i]));
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push((start, &s[start..]));
    Ok(out)
}

/// Trimmed text with its offset adjusted.
pub(super) fn trim_off(off: usize, s: &str) -> (usize, &str) {
    let t = s.trim_start();
    (off + (s.len() - t.len()), t.trim_end())
}

/// The value of C string literal(s) (adjacent literals are concatenated),
/// or `None` if `s` is not only string literals. Invalid UTF-8 produced by
/// escapes is replaced.
pub fn parse_string_literal(s: &str) -> Option<String> {
    let b = s.trim().as_bytes();
    if b.is_empty() {
        return None;
    }
    let mut out: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i] != b'"' {
            return None;
        }
        i += 1;
        loop {
            let c = *b.get(i)?;
            i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = *b.get(i)?;
                    i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'a' => out.push(7),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'v' => out.push(11),
                        b'0'..=b'7' => {
                            let mut v = u32::from(e - b'0');
                            let mut n = 1;
                            while n < 3 && matches!(b.get(i), Some(b'0'..=b'7')) {
                                v = v * 8 + u32::from(b[i] - b'0');
                                i += 1;
                                n += 1;
                            }
                            out.push(v as u8);
                        }
                        b'x' => {
                            let mut v: u32 = 0;
                            let mut n = 0;
                            while n < 2 {
                                match b.get(i).and_then(|c| (*c as char).to_digit(16)) {
                                    Some(d) => {
                                        v = v * 16 + d;
                                        i += 1;
                                        n += 1;
                                    }
                                    None => break,
                                }
                            }
                            out.push(v as u8);
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Splits `cond ? a : b` at its top-level `?` and matching `:`.
pub fn split_ternary(s: &str) -> Option<(&str, &str, &str)> {
    let b = s.as_bytes();
    let mut depth = 0usize;
    let mut q: Option<usize> = None;
    let mut nested = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.checked_sub(1)?,
            b'"' | b'\'' => {
                i = skip_literal(b, i)?;
                continue;
            }
            b'?' if depth == 0 => {
                if q.is_none() {
                    q = Some(i);
                } else {
                    nested += 1;
                }
            }
            b':' if depth == 0 && q.is_some() => {
                if nested == 0 {
                    let qi = q?;
                    return Some((s[..qi].trim(), s[qi + 1..i].trim(), s[i + 1..].trim()));
                }
                nested -= 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// A print fmt split into its format string and arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintFmtParts<'a> {
    /// The format string, unescaped.
    pub format: String,
    /// The arguments, trimmed, each with its byte offset in the print fmt.
    pub args: Vec<(usize, &'a str)>,
}

/// Splits a print fmt into its format string and arguments.
pub fn split_print_fmt(print_fmt: &str) -> Result<PrintFmtParts<'_>, FlagsError> {
    if print_fmt.len() > MAX_PRINT_FMT_LEN {
        return Err(ferr(0, None, "print fmt too long"));
    }
    let parts = split_top_level(print_fmt)?;
    let mut it = parts.into_iter();
    let (_, first) = it.next().unwrap_or((0, ""));
    let format = parse_string_literal(first)
        .ok_or_else(|| ferr(0, None, "print fmt does not start with a string"))?;
    let args = it.map(|(o, a)| trim_off(o, a)).collect();
    Ok(PrintFmtParts { format, args })
}

/// Counts the `%` conversions of a printf format and returns, for each, the
/// argument index it consumes and the literal text just before it.
pub(super) fn conversions(format: &str) -> Vec<(usize, usize)> {
    // (byte offset of the '%', argument index)
    let b = format.as_bytes();
    let mut out = Vec::new();
    let mut arg = 0usize;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        let pct = i;
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        // flags, width, precision, length
        while i < b.len() && matches!(b[i], b'-' | b'+' | b' ' | b'#' | b'0') {
            i += 1;
        }
        let mut star = |i: &mut usize| {
            if b.get(*i) == Some(&b'*') {
                arg += 1;
                *i += 1;
            }
            while *i < b.len() && b[*i].is_ascii_digit() {
                *i += 1;
            }
        };
        star(&mut i);
        if b.get(i) == Some(&b'.') {
            i += 1;
            star(&mut i);
        }
        while i < b.len() && matches!(b[i], b'h' | b'l' | b'L' | b'q' | b'j' | b'z' | b't') {
            i += 1;
        }
        let conv = b.get(i).copied();
        i += 1;
        if conv == Some(b'p') {
            // The kernel's %pS, %pK, ...: extension letters belong to it.
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
        }
        out.push((pct, arg));
        arg += 1;
    }
    out
}

/// The argument printed right after the literal text `label` in the print
/// fmt (for `"... accounted=%s"`, `label = "accounted="`), trimmed.
pub fn arg_after_label<'a>(print_fmt: &'a str, label: &str) -> Option<&'a str> {
    let PrintFmtParts { format, args } = split_print_fmt(print_fmt).ok()?;
    let (_, idx) = conversions(&format)
        .into_iter()
        .find(|(pct, _)| format[..*pct].ends_with(label))?;
    args.get(idx).map(|a| a.1)
}
