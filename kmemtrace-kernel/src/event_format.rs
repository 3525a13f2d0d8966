//! The tracefs `events/<system>/<event>/format` files.
//!
//! Each recorded event's format file says where its fields sit in the
//! record, with the recorded kernel's sizes (4 or 8 bytes for `long` and
//! pointers), so a log decodes on any machine:
//!
//! ```text
//! name: kmalloc
//! ID: 509
//! format:
//!     field:unsigned short common_type;    offset:0;    size:2;    signed:0;
//!     ...
//!     field:int common_pid;    offset:4;    size:4;    signed:1;
//!
//!     field:unsigned long call_site;    offset:8;    size:4;    signed:0;
//!     field:__data_loc char[] name;    offset:16;    size:4;    signed:0;
//!
//! print fmt: "call_site=%pS ...", (void *)REC->call_site, ...
//! ```
//!
//! The system (`kmem`) is not inside the file: the caller passes it (a log
//! stores it next to the content). Offsets are from the start of the record,
//! that is the event payload beginning with `common_type`.
//!
//! The parser takes untrusted text: it never panics, copies at most what the
//! input holds, and its errors name the line.

use core::fmt;
use std::collections::HashMap;

use crate::endian::Endian;

/// Longest `format` text accepted. Real ones are a few KiB; the biggest
/// print fmts (long symbolic tables) stay well under 1 MiB.
pub const MAX_FORMAT_LEN: usize = 4 << 20;
/// Most fields accepted in one format (common fields included).
pub const MAX_FIELDS: usize = 4096;
/// Longest event or field name accepted: C identifiers, tens of bytes in
/// any kernel. Every record of an event can repeat its names (Perfetto's
/// generic events carry each field's), so a 4 MiB name would cost 4 MiB
/// a record.
pub const MAX_NAME_LEN: usize = 1024;

/// The `ID:` line of a format file's text (the event's `common_type`),
/// without parsing the rest.
pub fn format_id(text: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(text)
        .lines()
        .find_map(|l| l.trim().strip_prefix("ID:")?.trim().parse().ok())
}

/// One event's format, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    /// The event's system (`kmem`), from the caller; empty if unknown.
    pub system: String,
    /// The `name:` line.
    pub name: String,
    /// The `ID:` line: the record's `common_type`.
    pub id: u32,
    /// Fields before the blank line (`common_type`, `common_pid`, ...).
    pub common_fields: Vec<Field>,
    /// The event's own fields.
    pub fields: Vec<Field>,
    /// The text after `print fmt: ` (the format string and its arguments).
    pub print_fmt: String,
    /// Each name's field as [`EventFormat::field`] finds it: (own field,
    /// index). A print fmt looks a field up per conversion, and a format
    /// may declare thousands.
    by_name: HashMap<String, (bool, usize)>,
}

/// One `field:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The C name (`call_site`), without any `[N]`.
    pub name: String,
    /// The declaration without the name: `unsigned long`, `const void *`,
    /// `__data_loc char[]`, `char[16]`.
    pub type_decl: String,
    /// Offset from the start of the record.
    pub offset: usize,
    /// Size in the record, in bytes (for `__data_loc`/`__rel_loc`, the size
    /// of the locator word: 4).
    pub size: usize,
    /// The `signed:` value (`false` if the line has none).
    pub signed: bool,
    /// How the bytes at `offset` are to be read.
    pub kind: FieldKind,
}

/// How a field's bytes are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A plain integer (or pointer) of `size` bytes.
    Scalar,
    /// `__data_loc`: a `u32` holding `len << 16 | offset`, the offset from
    /// the start of the record.
    DataLoc,
    /// `__rel_loc`: a `u32` holding `len << 16 | offset`, the offset from the
    /// end of this field.
    RelLoc,
    /// A fixed array (`char comm[16]`). `len` is the element count written
    /// between the brackets; when that is not a plain number
    /// (`[sizeof(...)]`) it is the field's `size`, and for `[]` it is 0.
    /// An array of size 0 (ftrace's `print`: `char buf[]; offset:16;
    /// size:0;`) is the record's tail: it runs from its offset to the end
    /// of the record ([`Field::runs_to_end`]).
    Array { len: usize },
}

/// A malformed `format` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// 1-based line of the problem; 0 when it concerns the whole text.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "event format: {}", self.message)
        } else {
            write!(f, "event format line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for FormatError {}

fn err(line: usize, message: impl Into<String>) -> FormatError {
    FormatError {
        line,
        message: message.into(),
    }
}

/// At most this many characters of hostile text are quoted in an error.
const QUOTE_MAX: usize = 60;

fn quote(s: &str) -> String {
    let mut out: String = s.chars().take(QUOTE_MAX).collect();
    if s.chars().nth(QUOTE_MAX).is_some() {
        out.push_str("...");
    }
    format!("{out:?}")
}

impl EventFormat {
    /// Parses a `format` file's text. `system_hint` is the event's system
    /// (the file does not contain it).
    pub fn parse(text: &str, system_hint: Option<&str>) -> Result<Self, FormatError> {
        if text.len() > MAX_FORMAT_LEN {
            return Err(err(
                0,
                format!(
                    "{} bytes, more than the {MAX_FORMAT_LEN} accepted",
                    text.len()
                ),
            ));
        }
        let mut name: Option<String> = None;
        let mut id: Option<u32> = None;
        let mut in_format = false;
        let mut saw_format = false;
        // Field groups, separated by blank lines inside `format:`.
        let mut groups: Vec<Vec<Field>> = Vec::new();
        let mut group_open = false;
        let mut nfields = 0usize;
        let mut print_fmt: Option<String> = None;

        let mut line_start = 0usize;
        for (i, raw_line) in text.split_inclusive('\n').enumerate() {
            let lineno = i + 1;
            let this_start = line_start;
            line_start += raw_line.len();
            let line = raw_line.trim();
            if line.is_empty() {
                group_open = false;
                continue;
            }
            if line.starts_with("print fmt:") {
                // The print fmt runs to the end of the text: its format
                // string may hold newlines (ext4's fc_stats has one).
                let at = this_start + (raw_line.len() - raw_line.trim_start().len());
                let rest = &text[at + "print fmt:".len()..];
                print_fmt = Some(rest.trim().to_string());
                break;
            }
            if let Some(rest) = line.strip_prefix("name:") {
                if name.is_some() {
                    return Err(err(lineno, "a second `name:` line"));
                }
                let n = rest.trim();
                if n.is_empty() {
                    return Err(err(lineno, "empty event name"));
                }
                if n.len() > MAX_NAME_LEN {
                    return Err(err(
                        lineno,
                        format!(
                            "an event name of {} bytes (at most {MAX_NAME_LEN})",
                            n.len()
                        ),
                    ));
                }
                name = Some(n.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("ID:") {
                if id.is_some() {
                    return Err(err(lineno, "a second `ID:` line"));
                }
                let v = rest.trim();
                id = Some(v.parse::<u32>().map_err(|_| {
                    err(
                        lineno,
                        format!("event ID {} is not a 32-bit number", quote(v)),
                    )
                })?);
                continue;
            }
            if line == "format:" {
                if saw_format {
                    return Err(err(lineno, "a second `format:` line"));
                }
                in_format = true;
                saw_format = true;
                continue;
            }
            if line.starts_with("field:") || line.starts_with("field ") {
                if !in_format {
                    return Err(err(lineno, "`field:` line outside the `format:` section"));
                }
                nfields += 1;
                if nfields > MAX_FIELDS {
                    return Err(err(lineno, format!("more than {MAX_FIELDS} fields")));
                }
                let f = parse_field_line(line).map_err(|m| err(lineno, m))?;
                if !group_open {
                    groups.push(Vec::new());
                    group_open = true;
                }
                if let Some(g) = groups.last_mut() {
                    g.push(f);
                }
                continue;
            }
            return Err(err(lineno, format!("unrecognised line {}", quote(line))));
        }

        let name = name.ok_or_else(|| err(0, "no `name:` line"))?;
        let id = id.ok_or_else(|| err(0, "no `ID:` line"))?;
        if !saw_format {
            return Err(err(0, "no `format:` line"));
        }
        let print_fmt =
            print_fmt.ok_or_else(|| err(0, "no `print fmt:` line (truncated text?)"))?;

        // The kernel separates the common fields from the event's own with a
        // blank line. Without one, fall back on the `common_` prefix.
        let (common_fields, fields) = match groups.len() {
            0 => (Vec::new(), Vec::new()),
            1 => {
                let all = groups.pop().unwrap_or_default();
                all.into_iter().partition(|f| f.name.starts_with("common_"))
            }
            _ => {
                let mut it = groups.into_iter();
                let common = it.next().unwrap_or_default();
                (common, it.flatten().collect())
            }
        };

        // The first of a name wins, the event's own before the common.
        let mut by_name = HashMap::new();
        for (i, f) in fields.iter().enumerate() {
            by_name.entry(f.name.clone()).or_insert((true, i));
        }
        for (i, f) in common_fields.iter().enumerate() {
            by_name.entry(f.name.clone()).or_insert((false, i));
        }
        Ok(EventFormat {
            system: system_hint.unwrap_or("").to_string(),
            name,
            id,
            common_fields,
            fields,
            print_fmt,
            by_name,
        })
    }

    /// The event's field `name`, or else the common field `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        match *self.by_name.get(name)? {
            (true, i) => self.fields.get(i),
            (false, i) => self.common_fields.get(i),
        }
    }

    /// All fields, common ones first.
    pub fn all_fields(&self) -> impl Iterator<Item = &Field> {
        self.common_fields.iter().chain(self.fields.iter())
    }

    /// `system/name`, as written in the log.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.system, self.name)
    }

    /// The byte ranges of the record's fixed part that no field covers:
    /// alignment holes. The kernel writes an event field by field, so
    /// these keep whatever the ring's page held before, zeros only in a
    /// fresh page.
    pub fn holes(&self) -> Vec<core::ops::Range<usize>> {
        let mut fields: Vec<(usize, usize)> = self
            .all_fields()
            .map(|x| (x.offset, x.offset + x.size))
            .collect();
        fields.sort_unstable();
        let mut out = Vec::new();
        let mut covered = 0;
        for (start, end) in fields {
            if start > covered {
                out.push(covered..start);
            }
            covered = covered.max(end);
        }
        out
    }

    /// Where the fixed part ends: the end of the furthest field.
    pub fn fixed_len(&self) -> usize {
        self.all_fields()
            .map(|x| x.offset + x.size)
            .max()
            .unwrap_or(0)
    }

    /// What bounds the bytes the kernel writes in this event's records:
    /// the fixed part and the data its locators point at
    /// ([`WrittenExtent::len`]).
    pub fn written_extent(&self) -> WrittenExtent<'_> {
        let last = self.all_fields().max_by_key(|x| x.offset);
        WrittenExtent {
            fixed_len: self.fixed_len(),
            locators: self
                .all_fields()
                .filter(|f| matches!(f.kind, FieldKind::DataLoc | FieldKind::RelLoc))
                .collect(),
            runs_on: last.is_some_and(|x| matches!(x.kind, FieldKind::Array { .. })),
        }
    }
}

/// [`EventFormat::written_extent`].
#[derive(Clone, Debug)]
pub struct WrittenExtent<'a> {
    fixed_len: usize,
    locators: Vec<&'a Field>,
    runs_on: bool,
}

impl WrittenExtent<'_> {
    /// How many bytes of one record (`payload`) the kernel wrote. What
    /// follows, up to the record's rounding to 4 bytes, is one more hole
    /// (the kernel reserves the struct's size, padding included, plus the
    /// dynamic data). `None` where a trailing array may run past its
    /// declared length (ftrace's `kernel_stack` declares `caller[8]` and
    /// stores as many as it took), or a locator points outside the payload.
    pub fn len<E: Endian>(&self, e: E, payload: &[u8]) -> Option<usize> {
        if self.runs_on {
            return None;
        }
        let mut end = self.fixed_len;
        for f in &self.locators {
            end = end.max(f.data_range(e, payload)?.end);
        }
        Some(end)
    }
}

/// Parses `field:<decl>;\toffset:N;\tsize:N;\tsigned:N;` (also the old
/// `field special:<decl>;` form).
fn parse_field_line(line: &str) -> Result<Field, String> {
    let rest = line
        .strip_prefix("field:")
        .or_else(|| {
            // `field special:char comm[16];` (kernels before 2.6.33).
            line.strip_prefix("field ")
                .and_then(|r| r.split_once(':').map(|(_, d)| d))
        })
        .ok_or_else(|| format!("bad field line {}", quote(line)))?;
    let mut parts = rest.split(';');
    let decl = parts.next().unwrap_or("").trim();
    let mut offset: Option<usize> = None;
    let mut size: Option<usize> = None;
    let mut signed = false;
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        let Some((k, v)) = p.split_once(':') else {
            return Err(format!("bad attribute {} in field line", quote(p)));
        };
        let v = v.trim();
        let num = || -> Result<usize, String> {
            v.parse::<usize>()
                .map_err(|_| format!("field {}: {k} {} is not a number", quote(decl), quote(v)))
        };
        match k.trim() {
            "offset" => offset = Some(num()?),
            "size" => size = Some(num()?),
            "signed" => signed = num()? != 0,
            _ => {} // Unknown attributes are ignored.
        }
    }
    let offset = offset.ok_or_else(|| format!("field {} has no offset", quote(decl)))?;
    let size = size.ok_or_else(|| format!("field {} has no size", quote(decl)))?;
    if offset.checked_add(size).is_none() {
        return Err(format!("field {} offset + size overflows", quote(decl)));
    }
    let (name, type_decl, array) = split_decl(decl)?;
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "a field name of {} bytes (at most {MAX_NAME_LEN})",
            name.len()
        ));
    }
    let kind = if type_decl.starts_with("__data_loc") {
        FieldKind::DataLoc
    } else if type_decl.starts_with("__rel_loc") {
        FieldKind::RelLoc
    } else if let Some(inner) = array {
        let inner = inner.trim();
        let len = if inner.is_empty() {
            0
        } else {
            inner.parse::<usize>().unwrap_or(size)
        };
        FieldKind::Array { len }
    } else {
        FieldKind::Scalar
    };
    Ok(Field {
        name,
        type_decl,
        offset,
        size,
        signed,
        kind,
    })
}

/// Splits `unsigned long caller[8]` into (`caller`, `unsigned long[8]`,
/// Some("8")) and `__data_loc char[] name` into (`name`, `__data_loc char[]`,
/// None): brackets belong to the name only when they follow it.
fn split_decl(decl: &str) -> Result<(String, String, Option<&str>), String> {
    let mut base = decl.trim_end();
    let mut array: Option<&str> = None;
    let mut suffix_start = base.len();
    // Strip trailing `[...]` groups (the first one is the outermost size).
    while base.ends_with(']') {
        let Some(open) = base.rfind('[') else {
            return Err(format!("unbalanced `]` in field {}", quote(decl)));
        };
        array = Some(&base[open + 1..base.len() - 1]);
        suffix_start = open;
        base = base[..open].trim_end();
    }
    let suffix = &decl.trim_end()[suffix_start..];
    // After the last character that cannot be in a C name (which may be
    // more than one byte long: the text is not the kernel's).
    let name_start = base
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let name = &base[name_start..];
    if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
        return Err(format!("field {} has no name", quote(decl)));
    }
    let mut ty = base[..name_start].trim().to_string();
    if ty.is_empty() {
        return Err(format!("field {} has no type", quote(decl)));
    }
    ty.push_str(suffix.trim());
    Ok((name.to_string(), ty, array))
}

impl Field {
    /// The integer at the field's place, zero-extended. `None` for arrays,
    /// sizes other than 1, 2, 4, 8, or a payload too short. For
    /// `__data_loc`/`__rel_loc` this is the raw locator word.
    pub fn read_u64<E: Endian>(&self, e: E, payload: &[u8]) -> Option<u64> {
        match self.kind {
            FieldKind::Array { .. } => None,
            _ => e.read_uint(payload, self.offset, self.size),
        }
    }

    /// The integer at the field's place, sign-extended if the field is
    /// `signed`, else zero-extended.
    pub fn read_i64<E: Endian>(&self, e: E, payload: &[u8]) -> Option<i64> {
        match self.kind {
            FieldKind::Array { .. } => None,
            _ if self.signed => e.read_int(payload, self.offset, self.size),
            _ => e
                .read_uint(payload, self.offset, self.size)
                .map(|v| v as i64),
        }
    }

    /// True if `v` (as read by [`Field::read_u64`]) has every bit of the
    /// field set: `-1UL` in the recorded kernel's `long` (e.g. "no pfn").
    pub fn is_all_ones(&self, v: u64) -> bool {
        match self.size {
            1..=7 => v == (1u64 << (self.size * 8)) - 1,
            8 => v == u64::MAX,
            _ => false,
        }
    }

    /// The bytes of a `__data_loc`/`__rel_loc` field or of a fixed array,
    /// as stored (including any NUL). `None` for scalars, or when the
    /// location falls outside the payload.
    pub fn read_raw_bytes<'a, E: Endian>(&self, e: E, payload: &'a [u8]) -> Option<&'a [u8]> {
        payload.get(self.data_range(e, payload)?)
    }

    /// Where [`Field::read_raw_bytes`] reads: the array itself (to the end
    /// of the payload for an array of size 0), or the data a locator points
    /// at. `None` for scalars, or when the location falls outside the
    /// payload.
    pub fn data_range<E: Endian>(&self, e: E, payload: &[u8]) -> Option<core::ops::Range<usize>> {
        let range = match self.kind {
            FieldKind::Scalar => return None,
            FieldKind::Array { .. } if self.runs_to_end() => {
                (self.offset <= payload.len()).then_some(self.offset..payload.len())?
            }
            FieldKind::Array { .. } => self.offset..self.offset.checked_add(self.size)?,
            FieldKind::DataLoc | FieldKind::RelLoc => {
                if self.size != 4 {
                    return None;
                }
                let w = e.read_u32(payload, self.offset)?;
                let len = (w >> 16) as usize;
                let mut off = (w & 0xffff) as usize;
                if self.kind == FieldKind::RelLoc {
                    off = off.checked_add(self.offset + self.size)?;
                }
                off..off.checked_add(len)?
            }
        };
        (range.end <= payload.len()).then_some(range)
    }

    /// Like [`Field::read_raw_bytes`], cut at the first NUL (what the
    /// kernel's `%s` prints).
    pub fn read_bytes<'a, E: Endian>(&self, e: E, payload: &'a [u8]) -> Option<&'a [u8]> {
        self.read_raw_bytes(e, payload).map(until_nul)
    }

    /// [`Field::read_bytes`] as text; `None` if it is not UTF-8.
    pub fn read_str<'a, E: Endian>(&self, e: E, payload: &'a [u8]) -> Option<&'a str> {
        core::str::from_utf8(self.read_bytes(e, payload)?).ok()
    }

    /// True for an array declared with size 0: the kernel's flexible
    /// array member at the end of an entry (`char buf[]` of ftrace's
    /// `print` and `raw_data`, `u32 buf[]` of `bprint`), whose bytes run to
    /// the end of the record, as libtraceevent reads it ("zero sized
    /// fields mean the rest of the data"). Where a record holds more than
    /// the kernel wrote (its length is rounded up to 4 bytes), a string
    /// still stops at its NUL ([`Field::read_bytes`]).
    pub fn runs_to_end(&self) -> bool {
        matches!(self.kind, FieldKind::Array { .. }) && self.size == 0
    }

    /// True for `__data_loc`, `__rel_loc` and arrays: fields read with
    /// [`Field::read_bytes`].
    pub fn is_bytes(&self) -> bool {
        !matches!(self.kind, FieldKind::Scalar)
    }
}

/// The bits of every event's `common_flags` (the kernel's `enum
/// trace_flag_type`, `include/linux/trace_events.h`): the one place the
/// decoders, the stack reader and the event listing take them from.
pub mod trace_flags {
    pub const IRQS_OFF: u8 = 0x01;
    /// `TRACE_FLAG_NEED_RESCHED_LAZY` from Linux 6.13,
    /// `TRACE_FLAG_IRQS_NOSUPPORT` before.
    pub const BIT1: u8 = 0x02;
    pub const NEED_RESCHED: u8 = 0x04;
    pub const HARDIRQ: u8 = 0x08;
    pub const SOFTIRQ: u8 = 0x10;
    pub const PREEMPT_RESCHED: u8 = 0x20;
    pub const NMI: u8 = 0x40;
    pub const BH_OFF: u8 = 0x80;
    /// Recorded in hard or soft interrupt or NMI context (these three are
    /// unchanged since they were introduced).
    pub const INTERRUPT: u8 = HARDIRQ | SOFTIRQ | NMI;
}

/// `bytes` up to its first NUL (all of it if none). Eight bytes at a time:
/// a slab event's cache name is read this way once per event, on the
/// decoder's hot path.
#[inline]
fn until_nul(bytes: &[u8]) -> &[u8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut at = 0;
    for w in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        // Non-zero exactly when a byte of `w` is zero.
        if w.wrapping_sub(ONES) & !w & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    match bytes[at..].iter().position(|&c| c == 0) {
        Some(n) => &bytes[..at + n],
        None => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endian::{BigEndian, LittleEndian, RunTimeEndian};

    #[test]
    fn names_are_at_most_max_name_len() {
        let text = |event: &str, field: &str| {
            format!(
                "name: {event}\nID: 9\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\tfield:int {field};\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"\"\n"
            )
        };
        let long = "n".repeat(MAX_NAME_LEN);
        let f = EventFormat::parse(&text(&long, &long), None).unwrap();
        assert!(f.field(&long).is_some());
        let longer = "n".repeat(MAX_NAME_LEN + 1);
        for (event, field) in [(&longer, &long), (&long, &longer)] {
            let e = EventFormat::parse(&text(event, field), None).unwrap_err();
            assert!(e.to_string().contains("1025 bytes"), "{e}");
        }
    }

    #[test]
    fn until_nul_stops_at_the_first_nul() {
        // Every length to three words, the NUL at every place or none, and
        // bytes with the high bit set (which the word test must not take
        // for zeros).
        for len in 0..24 {
            for nul in (0..len).map(Some).chain([None]) {
                for fill in [b'k', 0x80, 0xff, 0x01] {
                    let mut b = vec![fill; len];
                    if let Some(n) = nul {
                        b[n] = 0;
                        if n + 1 < len {
                            b[n + 1] = 0;
                        }
                    }
                    let want = b.iter().position(|&c| c == 0).map_or(&b[..], |n| &b[..n]);
                    assert_eq!(until_nul(&b), want, "{b:?}");
                }
            }
        }
    }

    const KMEM_CACHE_FREE_ARMHF: &str = "name: kmem_cache_free
ID: 507
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long call_site;\toffset:8;\tsize:4;\tsigned:0;
\tfield:const void * ptr;\toffset:12;\tsize:4;\tsigned:0;
\tfield:__data_loc char[] name;\toffset:16;\tsize:4;\tsigned:0;

print fmt: \"call_site=%pS ptr=%p name=%s\", (void *)REC->call_site, REC->ptr, __get_str(name)
";

    #[test]
    fn a_name_after_a_character_of_several_bytes() {
        let (name, ty, _) = split_decl("unsigned long ߜcaller[8]").unwrap();
        assert_eq!(
            (name.as_str(), ty.as_str()),
            ("caller", "unsigned long ߜ[8]")
        );
        assert!(split_decl("int ߜ").is_err());
    }

    #[test]
    fn parses_kmem_cache_free() {
        let f = EventFormat::parse(KMEM_CACHE_FREE_ARMHF, Some("kmem")).unwrap();
        assert_eq!(f.system, "kmem");
        assert_eq!(f.name, "kmem_cache_free");
        assert_eq!(f.id, 507);
        assert_eq!(f.common_fields.len(), 4);
        assert_eq!(f.fields.len(), 3);
        assert_eq!(
            f.print_fmt,
            "\"call_site=%pS ptr=%p name=%s\", (void *)REC->call_site, REC->ptr, __get_str(name)"
        );
        let ptr = f.field("ptr").unwrap();
        assert_eq!(ptr.type_decl, "const void *");
        assert_eq!((ptr.offset, ptr.size, ptr.signed), (12, 4, false));
        assert_eq!(ptr.kind, FieldKind::Scalar);
        let name = f.field("name").unwrap();
        assert_eq!(name.kind, FieldKind::DataLoc);
        assert_eq!(name.type_decl, "__data_loc char[]");
        let pid = f.field("common_pid").unwrap();
        assert!(pid.signed);
        assert_eq!(f.full_name(), "kmem/kmem_cache_free");
        assert_eq!(f.all_fields().count(), 7);
    }

    #[test]
    fn reads_fields_in_both_orders() {
        let f = EventFormat::parse(KMEM_CACHE_FREE_ARMHF, Some("kmem")).unwrap();
        // Little-endian armhf record: type 507, pid 113, call_site, ptr,
        // name at offset 20, 6 bytes "kmem\0\0" (NUL-padded).
        let mut le = Vec::new();
        LittleEndian.write_uint(&mut le, 507, 2);
        le.extend_from_slice(&[0, 0]);
        LittleEndian.write_uint(&mut le, 113, 4);
        LittleEndian.write_uint(&mut le, 0xc040_1234, 4);
        LittleEndian.write_uint(&mut le, 0xc22c_c1f0, 4);
        LittleEndian.write_uint(&mut le, (6 << 16) | 20, 4);
        le.extend_from_slice(b"kmem\0\0");
        let call_site = f.field("call_site").unwrap();
        assert_eq!(call_site.read_u64(LittleEndian, &le), Some(0xc040_1234));
        assert_eq!(
            f.field("common_pid").unwrap().read_i64(LittleEndian, &le),
            Some(113)
        );
        let name = f.field("name").unwrap();
        assert_eq!(name.read_str(LittleEndian, &le), Some("kmem"));
        assert_eq!(
            name.read_raw_bytes(LittleEndian, &le),
            Some(&b"kmem\0\0"[..])
        );

        let mut be = Vec::new();
        BigEndian.write_uint(&mut be, 507, 2);
        be.extend_from_slice(&[0, 0]);
        BigEndian.write_uint(&mut be, (-1i64) as u64, 4);
        BigEndian.write_uint(&mut be, 0x0010_1234, 4);
        BigEndian.write_uint(&mut be, 0, 4);
        BigEndian.write_uint(&mut be, (3 << 16) | 20, 4);
        be.extend_from_slice(b"abc");
        assert_eq!(call_site.read_u64(BigEndian, &be), Some(0x0010_1234));
        assert_eq!(
            f.field("common_pid").unwrap().read_i64(BigEndian, &be),
            Some(-1)
        );
        assert_eq!(name.read_str(BigEndian, &be), Some("abc"));

        // Out of bounds locator, truncated payload.
        let mut bad = be.clone();
        bad[16..20].copy_from_slice(&((200u32 << 16) | 20).to_be_bytes());
        assert_eq!(name.read_str(BigEndian, &bad), None);
        assert_eq!(call_site.read_u64(BigEndian, &be[..10]), None);
        assert_eq!(name.read_str(BigEndian, &be[..18]), None);
    }

    #[test]
    fn rel_loc_and_arrays() {
        let text = "name: ev\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
                    \tfield:char comm[16];\toffset:4;\tsize:16;\tsigned:0;\n\
                    \tfield:__rel_loc char[] msg;\toffset:20;\tsize:4;\tsigned:0;\n\
                    \tfield:unsigned long caller[8];\toffset:24;\tsize:32;\tsigned:0;\n\
                    \tfield:__u8 saddr[sizeof(struct sockaddr_in6)];\toffset:56;\tsize:28;\tsigned:0;\n\
                    \tfield:u32 buf[];\toffset:84;\tsize:0;\tsigned:0;\n\n\
                    print fmt: \"%s\", __get_rel_str(msg)\n";
        let f = EventFormat::parse(text, None).unwrap();
        assert_eq!(f.system, "");
        let comm = f.field("comm").unwrap();
        assert_eq!(comm.kind, FieldKind::Array { len: 16 });
        assert_eq!(comm.type_decl, "char[16]");
        assert_eq!(f.field("caller").unwrap().kind, FieldKind::Array { len: 8 });
        assert_eq!(f.field("saddr").unwrap().kind, FieldKind::Array { len: 28 });
        assert_eq!(f.field("buf").unwrap().kind, FieldKind::Array { len: 0 });
        let msg = f.field("msg").unwrap();
        assert_eq!(msg.kind, FieldKind::RelLoc);

        let mut p = vec![0u8; 84];
        p[4..9].copy_from_slice(b"bash\0");
        // msg: 3 bytes starting 64 bytes after the end of the field (24).
        p[20..24].copy_from_slice(&((3u32 << 16) | 60).to_le_bytes());
        p.extend_from_slice(b"xyz");
        assert_eq!(comm.read_str(LittleEndian, &p), Some("bash"));
        assert_eq!(msg.read_str(LittleEndian, &p), Some("xyz"));
        assert_eq!(comm.read_u64(LittleEndian, &p), None);
    }

    /// ftrace's `print` (what a write to `trace_marker` records) as a
    /// 64-bit and a 32-bit kernel print its format: `buf` has size 0.
    fn ftrace_print(long: usize) -> EventFormat {
        let buf = 8 + long;
        EventFormat::parse(
            &format!(
                "name: print\nID: 5\nformat:\n\
                 \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
                 \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
                 \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
                 \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
                 \tfield:unsigned long ip;\toffset:8;\tsize:{long};\tsigned:0;\n\
                 \tfield:char buf[];\toffset:{buf};\tsize:0;\tsigned:0;\n\n\
                 print fmt: \"%ps: %s\", (void *)REC->ip, REC->buf\n"
            ),
            Some("ftrace"),
        )
        .unwrap()
    }

    #[test]
    fn an_array_of_size_0_runs_to_the_end_of_the_record() {
        for long in [4, 8] {
            let f = ftrace_print(long);
            let buf = f.field("buf").unwrap();
            assert_eq!(buf.kind, FieldKind::Array { len: 0 });
            assert!(buf.runs_to_end() && buf.is_bytes());
            assert!(!f.field("ip").unwrap().runs_to_end());
            for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
                // The kernel's `trace_marker` record: the text, its newline
                // and NUL, then the record's rounding to 4 bytes.
                let mut p = Vec::new();
                e.write_uint(&mut p, 5, 2);
                p.extend_from_slice(&[1, 1]);
                e.write_uint(&mut p, 4242, 4);
                e.write_uint(&mut p, 0xc012_3456, long);
                p.extend_from_slice(b"PHASE A start\n\0");
                p.resize(p.len().next_multiple_of(4), 0xaa);
                let at = 8 + long;
                assert_eq!(buf.data_range(e, &p), Some(at..p.len()), "{e:?} {long}");
                assert_eq!(buf.read_str(e, &p), Some("PHASE A start\n"));
                assert_eq!(buf.read_raw_bytes(e, &p).unwrap().len(), p.len() - at);
                assert_eq!(f.field("ip").unwrap().read_u64(e, &p), Some(0xc012_3456));
                // No NUL: the whole tail; nothing after the fixed part: empty;
                // a record shorter than the fixed part: nothing to read.
                let mut q = p[..at].to_vec();
                q.extend_from_slice(b"abc");
                assert_eq!(buf.read_str(e, &q), Some("abc"));
                assert_eq!(buf.read_str(e, &p[..at]), Some(""));
                assert_eq!(buf.read_bytes(e, &p[..at - 1]), None);
            }
            // The record runs on past the fixed part.
            assert_eq!(f.written_extent().len(LittleEndian, &[0; 40]), None);
        }
    }

    #[test]
    fn holes_and_what_the_kernel_wrote() {
        // A cut-down record: holes after the common type and `node`, and
        // past `accounted` up to the record's rounding.
        let kmalloc = "name: kmalloc\nID: 5\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
            \tfield:unsigned long call_site;\toffset:8;\tsize:8;\tsigned:0;\n\
            \tfield:int node;\toffset:16;\tsize:4;\tsigned:1;\n\
            \tfield:unsigned long gfp_flags;\toffset:24;\tsize:8;\tsigned:0;\n\
            \tfield:bool accounted;\toffset:32;\tsize:1;\tsigned:0;\n\n\
            print fmt: \"\"\n";
        let f = EventFormat::parse(kmalloc, None).unwrap();
        assert_eq!(f.holes(), vec![2..4, 20..24]);
        assert_eq!(f.fixed_len(), 33);
        assert_eq!(f.written_extent().len(LittleEndian, &[0; 36]), Some(33));
        // A locator: its string follows the fixed part, in either order.
        let f = EventFormat::parse(KMEM_CACHE_FREE_ARMHF, None).unwrap();
        assert!(f.holes().is_empty());
        assert_eq!(f.fixed_len(), 20);
        let record = |e: RunTimeEndian, loc: u64| {
            let mut p = vec![0u8; 16];
            e.write_uint(&mut p, loc, 4);
            p.resize(28, 0);
            p
        };
        for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
            let p = record(e, (6 << 16) | 20);
            assert_eq!(f.written_extent().len(e, &p), Some(26), "{e:?}");
            let p = record(e, (6 << 16) | 24);
            assert_eq!(
                f.written_extent().len(e, &p),
                None,
                "{e:?}: past the payload"
            );
        }
        // ftrace's kernel_stack: `caller[8]` runs on.
        let stack = "name: kernel_stack\nID: 4\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
            \tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n\n\
            print fmt: \"\"\n";
        let f = EventFormat::parse(stack, None).unwrap();
        assert_eq!(f.holes(), vec![2..8, 12..16]);
        assert_eq!(f.written_extent().len(LittleEndian, &[0; 120]), None);
    }

    #[test]
    fn header_page_like_spaces_and_old_field_special() {
        let text =
            "name: old\nID: 3\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\n\
                    \tfield special:char comm[16];\toffset:2;\tsize:16;\n\
                    \tfield: u64 timestamp;\toffset:24;\tsize:8;\tsigned:0;\n\nprint fmt: \"\"\n";
        let f = EventFormat::parse(text, Some("x")).unwrap();
        // No blank line between common and own fields: split by prefix.
        assert_eq!(f.common_fields.len(), 1);
        assert_eq!(f.fields.len(), 2);
        assert_eq!(f.field("timestamp").unwrap().type_decl, "u64");
        assert!(!f.field("common_type").unwrap().signed);
    }

    #[test]
    fn errors_name_the_line() {
        let cases: &[(&str, usize, &str)] = &[
            ("name: a\nID: x\n", 2, "not a 32-bit number"),
            (
                "name: a\nID: 1\nformat:\n\tfield:int a;\toffset:z;\tsize:4;\n",
                4,
                "not a number",
            ),
            (
                "name: a\nID: 1\nformat:\n\tfield:int a;\tsize:4;\n",
                4,
                "no offset",
            ),
            (
                "name: a\nID: 1\nformat:\n\tfield:int;\toffset:0;\tsize:4;\n",
                4,
                "no type",
            ),
            (
                "name: a\nID: 1\nformat:\n\tfield:int *;\toffset:0;\tsize:4;\n",
                4,
                "no name",
            ),
            ("name: a\nID: 1\nprint fmt: \"\"\n", 0, "format:"),
            ("name: a\nID: 1\nformat:\nbogus\n", 4, "unrecognised"),
            ("name: a\nID: 1\nformat:\n", 0, "print fmt"),
            ("ID: 1\nformat:\nprint fmt: \"\"\n", 0, "name"),
            ("name: a\nformat:\nprint fmt: \"\"\n", 0, "ID"),
            (
                "name: a\nID: 1\n\tfield:int a;\toffset:0;\tsize:4;\n",
                3,
                "outside",
            ),
            (
                "name: a\nID: 1\nformat:\n\tfield:int a;\toffset:18446744073709551615;\tsize:4;\n",
                4,
                "overflows",
            ),
        ];
        for (text, line, what) in cases {
            let e = EventFormat::parse(text, None).unwrap_err();
            assert_eq!(e.line, *line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
            assert!(e.to_string().contains(what));
        }
    }

    #[test]
    fn print_fmt_with_a_newline_runs_to_the_end() {
        // Like ext4/ext4_fc_stats on 6.18: a newline inside the format.
        let text =
            "name: s\nID: 4\nformat:\n\tfield:int common_pid;\toffset:0;\tsize:4;\tsigned:1;\n\n\
                    print fmt: \"a:\nb=%d\", REC->common_pid\n";
        let f = EventFormat::parse(text, None).unwrap();
        assert_eq!(f.print_fmt, "\"a:\nb=%d\", REC->common_pid");
    }

    #[test]
    fn is_all_ones_per_size() {
        let mut f = Field {
            name: "pfn".into(),
            type_decl: "unsigned long".into(),
            offset: 8,
            size: 4,
            signed: false,
            kind: FieldKind::Scalar,
        };
        assert!(f.is_all_ones(0xffff_ffff));
        assert!(!f.is_all_ones(0x7fff_ffff));
        f.size = 8;
        assert!(f.is_all_ones(u64::MAX));
        assert!(!f.is_all_ones(0xffff_ffff));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*") {
            let _ = EventFormat::parse(&s, Some("kmem"));
        }

        #[test]
        fn format_like_text_never_panics(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("name: x".to_string()),
                    proptest::strategy::Just("ID: 12".to_string()),
                    proptest::strategy::Just("format:".to_string()),
                    proptest::strategy::Just(String::new()),
                    "\tfield:[a-z _\\[\\]0-9*]{0,20};\toffset:[0-9]{1,3};\tsize:[0-9]{1,2};\tsigned:[01];",
                    "print fmt: .{0,20}",
                ],
                0..12,
            ),
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let text = lines.join("\n");
            if let Ok(f) = EventFormat::parse(&text, None) {
                for fld in f.all_fields() {
                    let _ = fld.read_u64(LittleEndian, &payload);
                    let _ = fld.read_i64(BigEndian, &payload);
                    let _ = fld.read_str(LittleEndian, &payload);
                    let _ = fld.read_bytes(BigEndian, &payload);
                }
            }
        }
    }
}
