//! The tracefs files `events/header_page` and `events/header_event`: the
//! layout of a ring-buffer sub-buffer and of its event headers, as printed by
//! the recorded kernel (`ring_buffer_print_page_header()` and
//! `ring_buffer_print_entry_header()` in `kernel/trace/ring_buffer.c`).
//!
//! `header_page` looks like this (x86_64; tabs shown as spaces):
//!
//! ```text
//!     field: u64 timestamp;   offset:0;   size:8;     signed:0;
//!     field: local_t commit;  offset:8;   size:8;     signed:1;
//!     field: int overwrite;   offset:8;   size:1;     signed:1;
//!     field: char data;       offset:16;  size:4080;  signed:0;
//! ```
//!
//! The size of `commit` is the kernel's `sizeof(long)` (4 on 32-bit kernels,
//! where `data` starts at 12), and `data.offset + data.size` is the size of a
//! sub-buffer as read from `per_cpu/cpuN/trace_pipe_raw`. The `overwrite`
//! pseudo-field does *not* locate the missed-events flags: those are bits 31
//! and 30 of the whole `commit` value (see [`crate::subbuf`]).
//!
//! Both files come from logs, i.e. from untrusted input: the parsers never
//! panic, and their errors name the line and what is wrong with it.

use core::fmt;

/// Where a field sits in the sub-buffer header: byte offset and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldLoc {
    pub offset: usize,
    pub size: usize,
}

/// The parsed `events/header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderPage {
    /// `u64 timestamp`: always offset 0, size 8.
    pub timestamp: FieldLoc,
    /// `local_t commit`: offset 8, size `sizeof(long)` (4 or 8).
    pub commit: FieldLoc,
    /// `int overwrite`: a one-byte alias of `commit` that kernels print for
    /// old tools (absent from very old kernels).
    pub overwrite: Option<FieldLoc>,
    /// `char data`: the data area, right after `commit`; its size is the
    /// sub-buffer size minus the header.
    pub data: FieldLoc,
}

/// Smallest sub-buffer accepted: the smallest page size Linux supports.
pub const MIN_SUBBUF_SIZE: usize = 4096;
/// Largest sub-buffer accepted: the data length must fit below the
/// missed-events flag bits of `commit` (libtraceevent masks it to 27 bits).
pub const MAX_SUBBUF_SIZE: usize = 1 << 27;

impl HeaderPage {
    /// Parses the text of `events/header_page`.
    pub fn parse(text: &str) -> Result<Self, HeaderError> {
        let mut timestamp = None;
        let mut commit = None;
        let mut overwrite = None;
        let mut data = None;

        for (idx, raw_line) in text.lines().enumerate() {
            let lineno = idx + 1;
            let line = raw_line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f = parse_field_line(line)
                .map_err(|reason| HeaderError::at(lineno, raw_line, reason))?;
            let slot = match f.name {
                "timestamp" => &mut timestamp,
                "commit" => &mut commit,
                "overwrite" => &mut overwrite,
                "data" => &mut data,
                // A field a future kernel may add: its presence does not
                // change the layout of the fields we rely on.
                _ => continue,
            };
            if slot.is_some() {
                return Err(HeaderError::at(
                    lineno,
                    raw_line,
                    format!("field `{}` appears twice", f.name),
                ));
            }
            *slot = Some((lineno, raw_line, f.loc));
        }

        let (ts_line, ts_raw, ts) =
            timestamp.ok_or_else(|| HeaderError::whole("no `timestamp` field".to_string()))?;
        let (c_line, c_raw, c) =
            commit.ok_or_else(|| HeaderError::whole("no `commit` field".to_string()))?;
        let (d_line, d_raw, d) =
            data.ok_or_else(|| HeaderError::whole("no `data` field".to_string()))?;

        if ts.offset != 0 || ts.size != 8 {
            return Err(HeaderError::at(
                ts_line,
                ts_raw,
                format!(
                    "`timestamp` must be at offset 0 with size 8, found offset {} size {}",
                    ts.offset, ts.size
                ),
            ));
        }
        if c.offset != 8 {
            return Err(HeaderError::at(
                c_line,
                c_raw,
                format!(
                    "`commit` must follow the 8-byte timestamp at offset 8, found offset {}",
                    c.offset
                ),
            ));
        }
        if c.size != 4 && c.size != 8 {
            return Err(HeaderError::at(
                c_line,
                c_raw,
                format!(
                    "`commit` is a kernel `long`: size must be 4 or 8, found {}",
                    c.size
                ),
            ));
        }
        let overwrite = match overwrite {
            None => None,
            Some((o_line, o_raw, o)) => {
                if o.offset != c.offset || o.size != 1 {
                    return Err(HeaderError::at(
                        o_line,
                        o_raw,
                        format!(
                            "`overwrite` must be the 1-byte alias of `commit` (offset {}), found offset {} size {}",
                            c.offset, o.offset, o.size
                        ),
                    ));
                }
                Some(o)
            }
        };
        let want_data = c.offset + c.size;
        if d.offset != want_data {
            return Err(HeaderError::at(
                d_line,
                d_raw,
                format!(
                    "`data` must start right after an {}-byte `commit`, at offset {}, found {}",
                    c.size, want_data, d.offset
                ),
            ));
        }
        let total = d.offset.saturating_add(d.size);
        if d.size == 0
            || !total.is_power_of_two()
            || !(MIN_SUBBUF_SIZE..=MAX_SUBBUF_SIZE).contains(&total)
        {
            return Err(HeaderError::at(
                d_line,
                d_raw,
                format!(
                    "implausible sub-buffer: data offset {} + size {} should be a power of two from {} to {}",
                    d.offset, d.size, MIN_SUBBUF_SIZE, MAX_SUBBUF_SIZE
                ),
            ));
        }

        Ok(HeaderPage {
            timestamp: ts,
            commit: c,
            overwrite,
            data: d,
        })
    }

    /// The recorded kernel's `sizeof(long)`: the size of `commit`, and of the
    /// lost-events count stored after the data.
    pub fn long_size(&self) -> usize {
        self.commit.size
    }

    /// Offset of the data area (the first event) in a sub-buffer.
    pub fn data_offset(&self) -> usize {
        self.data.offset
    }

    /// Size of the data area.
    pub fn data_size(&self) -> usize {
        self.data.size
    }

    /// Bytes per sub-buffer, header included, as read from `trace_pipe_raw`.
    pub fn subbuf_size(&self) -> usize {
        self.data.offset + self.data.size
    }
}

/// The parsed `events/header_event`: the event header's bit fields and the
/// special `type_len` values.
///
/// Every kernel since 2.6.31 prints the same values; [`HeaderEvent::parse`]
/// rejects others, because the decoder in [`crate::subbuf`] relies on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderEvent {
    /// Width of `type_len` (5).
    pub type_len_bits: u32,
    /// Width of `time_delta` (27).
    pub time_delta_bits: u32,
    /// Width of `array[0]` (32).
    pub array_bits: u32,
    /// `type_len` of padding (29).
    pub padding: u32,
    /// `type_len` of a time extend (30).
    pub time_extend: u32,
    /// `type_len` of an absolute time stamp (31).
    pub time_stamp: u32,
    /// Largest `type_len` of a data event (28).
    pub data_max_type_len: u32,
}

impl HeaderEvent {
    /// What every supported kernel prints.
    pub const KERNEL: HeaderEvent = HeaderEvent {
        type_len_bits: 5,
        time_delta_bits: 27,
        array_bits: 32,
        padding: 29,
        time_extend: 30,
        time_stamp: 31,
        data_max_type_len: 28,
    };

    /// Parses the text of `events/header_event`.
    pub fn parse(text: &str) -> Result<Self, HeaderError> {
        // (value, line number, raw line) for each item.
        let mut type_len_bits = None;
        let mut time_delta_bits = None;
        let mut array_bits = None;
        let mut padding = None;
        let mut time_extend = None;
        let mut time_stamp = None;
        let mut data_max = None;

        for (idx, raw_line) in text.lines().enumerate() {
            let lineno = idx + 1;
            let line = raw_line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: String| HeaderError::at(lineno, raw_line, reason);
            let (slot, value) = if let Some(rest) = line.strip_prefix("data max type_len") {
                // "data max type_len  == 28"
                let v = rest
                    .trim()
                    .strip_prefix("==")
                    .ok_or_else(|| err("expected `== <number>`".into()))?;
                (&mut data_max, parse_num(v.trim()).map_err(&err)?)
            } else {
                let (name, rest) = line.split_once(':').ok_or_else(|| {
                    err("expected `<name> : <n> bits` or `<name> : type == <n>`".into())
                })?;
                let name = name.trim();
                let rest = rest.trim();
                let value = if let Some(bits) = rest.strip_suffix("bits") {
                    parse_num(bits.trim()).map_err(&err)?
                } else if let Some(v) = rest.strip_prefix("type") {
                    let v = v
                        .trim()
                        .strip_prefix("==")
                        .ok_or_else(|| err("expected `type == <number>`".into()))?;
                    parse_num(v.trim()).map_err(&err)?
                } else {
                    return Err(err(format!(
                        "cannot read `{rest}`: expected `<n> bits` or `type == <n>`"
                    )));
                };
                let slot = match name {
                    "type_len" => &mut type_len_bits,
                    "time_delta" => &mut time_delta_bits,
                    "array" => &mut array_bits,
                    "padding" => &mut padding,
                    "time_extend" => &mut time_extend,
                    "time_stamp" => &mut time_stamp,
                    // Kernels before 2.6.31 printed `type : 2 bits` and
                    // `len : 3 bits`: a different, unsupported header.
                    "type" | "len" => {
                        return Err(err(format!(
                        "`{name}` belongs to the pre-2.6.31 event header, which is not supported"
                    )))
                    }
                    _ => return Err(err(format!("unknown item `{name}`"))),
                };
                (slot, value)
            };
            if slot.is_some() {
                return Err(err("item appears twice".into()));
            }
            *slot = Some((value, lineno, raw_line));
        }

        let k = Self::KERNEL;
        let take = |v: Option<(u32, usize, &str)>,
                    name: &str,
                    want: u32|
         -> Result<u32, HeaderError> {
            match v {
                None => Err(HeaderError::whole(format!("no `{name}` item"))),
                Some((got, _, _)) if got == want => Ok(got),
                Some((got, line, raw)) => Err(HeaderError::at(
                    line,
                    raw,
                    format!("`{name}` is {got}; only the kernel's layout ({want}) is supported"),
                )),
            }
        };
        Ok(HeaderEvent {
            type_len_bits: take(type_len_bits, "type_len", k.type_len_bits)?,
            time_delta_bits: take(time_delta_bits, "time_delta", k.time_delta_bits)?,
            array_bits: take(array_bits, "array", k.array_bits)?,
            padding: take(padding, "padding", k.padding)?,
            time_extend: take(time_extend, "time_extend", k.time_extend)?,
            time_stamp: take(time_stamp, "time_stamp", k.time_stamp)?,
            data_max_type_len: take(data_max, "data max type_len", k.data_max_type_len)?,
        })
    }
}

/// An error in `header_page` or `header_event` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderError {
    /// 1-based line number, or `None` when the problem is the text as a
    /// whole (a missing field).
    pub line: Option<usize>,
    /// The offending line (shortened if long).
    pub text: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl HeaderError {
    fn at(line: usize, text: &str, reason: String) -> Self {
        let mut t: String = text.trim().chars().take(120).collect();
        if t.len() < text.trim().len() {
            t.push('…');
        }
        HeaderError {
            line: Some(line),
            text: Some(t),
            reason,
        }
    }
    fn whole(reason: String) -> Self {
        HeaderError {
            line: None,
            text: None,
            reason,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.line, &self.text) {
            (Some(l), Some(t)) => write!(f, "line {l} (`{t}`): {}", self.reason),
            (Some(l), None) => write!(f, "line {l}: {}", self.reason),
            _ => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for HeaderError {}

struct FieldLine<'t> {
    name: &'t str,
    loc: FieldLoc,
}

/// `field: <type> <name>;<ws>offset:<n>;<ws>size:<n>;<ws>signed:<n>;`
fn parse_field_line(line: &str) -> Result<FieldLine<'_>, String> {
    let rest = line
        .strip_prefix("field:")
        .ok_or_else(|| "expected `field: <type> <name>; offset:<n>; size:<n>; ...`".to_string())?;
    let (decl, attrs) = rest
        .split_once(';')
        .ok_or_else(|| "the declaration `<type> <name>` is not ended by `;`".to_string())?;
    let name = decl
        .split_whitespace()
        .next_back()
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .ok_or_else(|| format!("cannot find a field name in `{}`", decl.trim()))?;
    let mut offset = None;
    let mut size = None;
    for attr in attrs.split(';') {
        let attr = attr.trim();
        if attr.is_empty() {
            continue;
        }
        let (k, v) = attr
            .split_once(':')
            .ok_or_else(|| format!("expected `<key>:<number>`, found `{attr}`"))?;
        let slot = match k.trim() {
            "offset" => &mut offset,
            "size" => &mut size,
            // `signed` and anything newer: not needed for the layout.
            _ => continue,
        };
        if slot.is_some() {
            return Err(format!("`{}` given twice", k.trim()));
        }
        *slot = Some(parse_num(v.trim()).map_err(|e| format!("{}: {e}", k.trim()))? as usize);
    }
    let offset = offset.ok_or_else(|| format!("field `{name}` has no `offset:`"))?;
    let size = size.ok_or_else(|| format!("field `{name}` has no `size:`"))?;
    Ok(FieldLine {
        name,
        loc: FieldLoc { offset, size },
    })
}

fn parse_num(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a decimal number"));
    }
    s.parse::<u32>().map_err(|_| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86_64: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
        \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
        \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
        \tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";
    const ARMHF: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
        \tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
        \tfield: char data;\toffset:12;\tsize:4084;\tsigned:0;\n";
    const EVENT: &str =
        "# compressed entry header\n\ttype_len    :    5 bits\n\ttime_delta  :   27 bits\n\
        \tarray       :   32 bits\n\n\tpadding     : type == 29\n\ttime_extend : type == 30\n\
        \ttime_stamp : type == 31\n\tdata max type_len  == 28\n";

    #[test]
    fn x86_64_and_armhf() {
        let h = HeaderPage::parse(X86_64).unwrap();
        assert_eq!(
            (
                h.long_size(),
                h.data_offset(),
                h.data_size(),
                h.subbuf_size()
            ),
            (8, 16, 4080, 4096)
        );
        assert_eq!(h.overwrite, Some(FieldLoc { offset: 8, size: 1 }));
        let h = HeaderPage::parse(ARMHF).unwrap();
        assert_eq!(
            (h.long_size(), h.data_offset(), h.subbuf_size()),
            (4, 12, 4096)
        );
        // Without the overwrite line (very old kernels), and with a signed char data (i386).
        let old: String = ARMHF
            .lines()
            .filter(|l| !l.contains("overwrite"))
            .map(|l| format!("{l}\n"))
            .collect();
        let h = HeaderPage::parse(&old.replace("size:4084;\tsigned:0", "size:4084;\tsigned:1"))
            .unwrap();
        assert_eq!(h.overwrite, None);
        // 16 KiB pages (arm64 / ppc64 with 64K would be 65536).
        let big = X86_64.replace("size:4080", "size:16368");
        assert_eq!(HeaderPage::parse(&big).unwrap().subbuf_size(), 16384);
    }

    #[test]
    fn header_page_errors_name_the_line() {
        let e = HeaderPage::parse(&X86_64.replace("size:8;\tsigned:1", "size:2;\tsigned:1"))
            .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.reason.contains("4 or 8"), "{e}");
        let e = HeaderPage::parse(&X86_64.replace("offset:16", "offset:12")).unwrap_err();
        assert_eq!(e.line, Some(4));
        let e = HeaderPage::parse(&X86_64.replace("size:4080", "size:4000")).unwrap_err();
        assert!(e.to_string().contains("line 4"), "{e}");
        let e = HeaderPage::parse(&X86_64.replace("offset:0", "offset:x")).unwrap_err();
        assert_eq!(e.line, Some(1));
        let e = HeaderPage::parse(&X86_64.replace("offset:0", "offset:99999999999999999999"))
            .unwrap_err();
        assert!(e.reason.contains("too large"), "{e}");
        let e = HeaderPage::parse(&format!("{X86_64}garbage\n")).unwrap_err();
        assert_eq!(e.line, Some(5));
        let e =
            HeaderPage::parse(&format!("{X86_64}{}", X86_64.lines().next().unwrap())).unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        let e = HeaderPage::parse("").unwrap_err();
        assert_eq!(e.line, None);
        let e = HeaderPage::parse(
            &X86_64.replace("field: char data;\toffset:16;\tsize:4080;\tsigned:0;", ""),
        )
        .unwrap_err();
        assert!(e.reason.contains("data"), "{e}");
        let e = HeaderPage::parse(&X86_64.replace(
            "field: int overwrite;\toffset:8",
            "field: int overwrite;\toffset:9",
        ))
        .unwrap_err();
        assert_eq!(e.line, Some(3));
        // Overflowing offset + size does not panic.
        let e = HeaderPage::parse(&X86_64.replace("size:4080", "size:4294967295")).unwrap_err();
        assert_eq!(e.line, Some(4));
    }

    #[test]
    fn header_event() {
        assert_eq!(HeaderEvent::parse(EVENT).unwrap(), HeaderEvent::KERNEL);
        let e = HeaderEvent::parse(&EVENT.replace("27 bits", "26 bits")).unwrap_err();
        assert_eq!(e.line, Some(3));
        let e = HeaderEvent::parse(&EVENT.replace("== 28", "== 27")).unwrap_err();
        assert_eq!(e.line, Some(9));
        let e = HeaderEvent::parse(&EVENT.replace("\ttime_stamp : type == 31\n", "")).unwrap_err();
        assert_eq!(e.line, None);
        let e = HeaderEvent::parse("\ttype        :    2 bits\n").unwrap_err();
        assert!(e.reason.contains("2.6.31"), "{e}");
        let e = HeaderEvent::parse(&format!("{EVENT}\tpadding     : type == 29\n")).unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        assert!(HeaderEvent::parse(&EVENT.replace("type == 30", "type = 30")).is_err());
    }

    #[test]
    fn arbitrary_text_never_panics() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&".{0,300}", |s| {
                let _ = HeaderPage::parse(&s);
                let _ = HeaderEvent::parse(&s);
                Ok(())
            })
            .unwrap();
        // Mutations of the real texts.
        runner
            .run(&(0usize..200, any::<char>()), |(i, c)| {
                for base in [X86_64, ARMHF, EVENT] {
                    let mut v: Vec<char> = base.chars().collect();
                    let i = i % v.len();
                    v[i] = c;
                    let s: String = v.into_iter().collect();
                    let _ = HeaderPage::parse(&s);
                    let _ = HeaderEvent::parse(&s);
                }
                Ok(())
            })
            .unwrap();
    }
}
