//! A small streaming reader of tar archives (POSIX ustar, GNU and pax
//! headers), enough to read the dumps `kmemtrace-capture.sh` writes with
//! busybox `tar` and whatever GNU tar makes of a copied tracefs directory.
//!
//! Members are visited in order from any `Read` (a gzip decoder included),
//! never seeking. Every length comes from the archive and is checked: a
//! damaged header (bad checksum, a size that is not a number) or an archive
//! that ends inside a member is an error naming the offset, never a panic
//! or an unbounded allocation.

use std::fmt;
use std::io::{self, Read};

const BLOCK: usize = 512;
/// Longest GNU long name / pax header accepted.
const MAX_EXT_HEADER: u64 = 1 << 20;

/// What a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// Symlinks, hard links, devices, FIFOs: never followed or read.
    Other(u8),
}

/// One member's header.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The member's path as stored (long names resolved).
    pub path: String,
    pub kind: Kind,
    pub size: u64,
    /// Archive offset of the member's header.
    pub offset: u64,
}

/// Why an archive cannot be read.
#[derive(Debug)]
pub enum TarError {
    Io(io::Error),
    Bad { offset: u64, what: String },
}

impl fmt::Display for TarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TarError::Io(e) => write!(f, "reading the archive: {e}"),
            TarError::Bad { offset, what } => write!(f, "tar offset {offset}: {what}"),
        }
    }
}

impl From<io::Error> for TarError {
    fn from(e: io::Error) -> Self {
        TarError::Io(e)
    }
}

/// True if `block` (the first 512 bytes of a file) is a tar header with a
/// valid checksum.
pub fn looks_like_tar(block: &[u8]) -> bool {
    block.len() >= BLOCK && header_checksum_ok(&block[..BLOCK]).unwrap_or(false)
}

fn header_checksum_ok(h: &[u8]) -> Option<bool> {
    let stored = parse_octal(&h[148..156])?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in h.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    Some(stored == unsigned || stored as i64 == signed)
}

/// An octal number field (NUL/space padded), or a GNU base-256 number.
fn parse_octal(f: &[u8]) -> Option<u64> {
    if let Some(&first) = f.first() {
        if first & 0x80 != 0 {
            // GNU base-256: big-endian, first byte's top bit is the marker.
            let mut v: u64 = u64::from(first & 0x7f);
            for &b in &f[1..] {
                v = v.checked_mul(256)?.checked_add(u64::from(b))?;
            }
            return Some(v);
        }
    }
    let s: Vec<u8> = f
        .iter()
        .copied()
        .skip_while(|&b| b == b' ')
        .take_while(|&b| b != 0 && b != b' ')
        .collect();
    if s.is_empty() {
        return Some(0);
    }
    let mut v: u64 = 0;
    for b in s {
        if !(b'0'..=b'7').contains(&b) {
            return None;
        }
        v = v.checked_mul(8)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

fn cstr(f: &[u8]) -> String {
    let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
    String::from_utf8_lossy(&f[..end]).into_owned()
}

/// Reads members one after another.
pub struct Archive<R: Read> {
    src: R,
    /// Offset of the next unread byte.
    pos: u64,
    /// Bytes of the current member's data (plus padding) not yet consumed.
    pending: u64,
    done: bool,
}

impl<R: Read> Archive<R> {
    pub fn new(src: R) -> Self {
        Archive {
            src,
            pos: 0,
            pending: 0,
            done: false,
        }
    }

    fn read_exact_at(
        &mut self,
        buf: &mut [u8],
        what: &dyn std::fmt::Display,
    ) -> Result<bool, TarError> {
        let mut got = 0;
        while got < buf.len() {
            match self.src.read(&mut buf[got..]) {
                Ok(0) => {
                    if got == 0 {
                        return Ok(false);
                    }
                    return Err(TarError::Bad {
                        offset: self.pos + got as u64,
                        what: format!("archive ends inside {what}"),
                    });
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.pos += buf.len() as u64;
        Ok(true)
    }

    fn skip(&mut self, mut n: u64, what: &str) -> Result<(), TarError> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let k = n.min(buf.len() as u64) as usize;
            if !self.read_exact_at(&mut buf[..k], &what)? {
                return Err(TarError::Bad {
                    offset: self.pos,
                    what: format!("archive ends inside {what}"),
                });
            }
            n -= k as u64;
        }
        Ok(())
    }

    /// `size` rounded up to whole blocks; a base-256 size near 2^64 (no
    /// archive's) saturates, and the skip then meets the archive's end.
    fn padded(size: u64) -> u64 {
        size.div_ceil(BLOCK as u64).saturating_mul(BLOCK as u64)
    }

    /// Reads a whole (small) extension member's data.
    fn read_ext(&mut self, size: u64, what: &str) -> Result<Vec<u8>, TarError> {
        if size > MAX_EXT_HEADER {
            return Err(TarError::Bad {
                offset: self.pos,
                what: format!("{what} of {size} bytes is implausibly large"),
            });
        }
        let mut v = vec![0u8; size as usize];
        if !self.read_exact_at(&mut v, &what)? && size > 0 {
            return Err(TarError::Bad {
                offset: self.pos,
                what: format!("archive ends inside {what}"),
            });
        }
        self.skip(Self::padded(size) - size, what)?;
        Ok(v)
    }

    /// The next member, skipping whatever of the previous one's data was
    /// not read. `None` at the end of the archive.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, TarError> {
        if self.done {
            return Ok(None);
        }
        if self.pending > 0 {
            let p = self.pending;
            self.pending = 0;
            self.skip(p, "a member's data")?;
        }
        let mut long_name: Option<String> = None;
        let mut long_size: Option<u64> = None;
        loop {
            let offset = self.pos;
            let mut h = [0u8; BLOCK];
            if !self.read_exact_at(&mut h, &"a header")? {
                // No end-of-archive blocks: accept (some writers omit them).
                self.done = true;
                return Ok(None);
            }
            if h.iter().all(|&b| b == 0) {
                self.done = true;
                return Ok(None);
            }
            match header_checksum_ok(&h) {
                Some(true) => {}
                _ => return Err(TarError::Bad {
                    offset,
                    what:
                        "damaged header (checksum mismatch): not a tar archive, or a corrupted one"
                            .into(),
                }),
            }
            let size = parse_octal(&h[124..136]).ok_or_else(|| TarError::Bad {
                offset,
                what: "member size is not a number".into(),
            })?;
            let typeflag = h[156];
            match typeflag {
                b'L' => {
                    let v = self.read_ext(size, "a GNU long name")?;
                    long_name = Some(cstr(&v));
                    continue;
                }
                b'x' => {
                    let v = self.read_ext(size, "a pax header")?;
                    if let Some(p) = pax_path(&v) {
                        long_name = Some(p);
                    }
                    if let Some(n) = pax_size(&v) {
                        long_size = Some(n);
                    }
                    continue;
                }
                b'g' | b'K' => {
                    self.read_ext(size, "an extended header")?;
                    continue;
                }
                _ => {}
            }
            let size = long_size.take().unwrap_or(size);
            let path = match long_name.take() {
                Some(p) => p,
                None => {
                    let name = cstr(&h[0..100]);
                    let ustar = &h[257..262] == b"ustar";
                    let prefix = if ustar {
                        cstr(&h[345..500])
                    } else {
                        String::new()
                    };
                    if prefix.is_empty() {
                        name
                    } else {
                        format!("{prefix}/{name}")
                    }
                }
            };
            let kind = match typeflag {
                b'0' | 0 | b'7' => {
                    if path.ends_with('/') {
                        Kind::Dir
                    } else {
                        Kind::File
                    }
                }
                b'5' => Kind::Dir,
                x => Kind::Other(x),
            };
            // Links, devices and directories carry no data in practice,
            // but honour a stated size.
            self.pending = Self::padded(size);
            return Ok(Some(Entry {
                path,
                kind,
                size,
                offset,
            }));
        }
    }

    /// Reads the current member's data into `out` (appending), at most
    /// `limit` bytes; the rest, if any, is skipped by the next
    /// [`next_entry`](Self::next_entry).
    pub fn read_data(&mut self, e: &Entry, limit: u64, out: &mut Vec<u8>) -> Result<(), TarError> {
        let n = e.size.min(limit);
        self.read_data_with(e, n, |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })
    }

    /// Feeds the first `n` bytes (at most the member's size) of the current
    /// member's data to `f` in chunks.
    pub fn read_data_with(
        &mut self,
        e: &Entry,
        n: u64,
        mut f: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), TarError> {
        let n = n.min(e.size);
        let mut left = n;
        // Sized to the data (an empty member reserves nothing); the
        // member's name (up to 1 MiB) is written out only for an error.
        let mut buf = vec![0u8; n.min(1 << 16) as usize];
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            if !self.read_exact_at(&mut buf[..k], &format_args!("member {}", e.path))? {
                return Err(TarError::Bad {
                    offset: self.pos,
                    what: format!("archive ends inside member {}", e.path),
                });
            }
            f(&buf[..k])?;
            left -= k as u64;
        }
        self.pending = self.pending.saturating_sub(n);
        Ok(())
    }
}

/// The `path` record of a pax extended header (`<len> path=<value>\n`).
fn pax_path(v: &[u8]) -> Option<String> {
    pax_value(v, b"path=").map(|p| String::from_utf8_lossy(p).into_owned())
}

/// A pax header's `size` (a member over 8 GiB, which a pax writer such as
/// Python's tarfile does not put in the ustar field).
fn pax_size(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(pax_value(v, b"size=")?)
        .ok()?
        .parse()
        .ok()
}

/// The value of the first of a pax header's `len key=value\n` records
/// that starts with `key`, read up to the first malformed record.
fn pax_value<'a>(v: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut rest = v;
    while !rest.is_empty() {
        let sp = rest.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..sp]).ok()?.parse().ok()?;
        if len <= sp || len > rest.len() {
            return None;
        }
        let rec = &rest[sp + 1..len];
        let rec = rec.strip_suffix(b"\n").unwrap_or(rec);
        if let Some(p) = rec.strip_prefix(key) {
            return Some(p);
        }
        rest = &rest[len..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_testkit::tar::files as tar;

    fn all(a: &[u8]) -> Result<Vec<(String, Vec<u8>)>, TarError> {
        let mut ar = Archive::new(a);
        let mut out = Vec::new();
        while let Some(e) = ar.next_entry()? {
            let mut d = Vec::new();
            if e.kind == Kind::File {
                ar.read_data(&e, u64::MAX, &mut d)?;
            }
            out.push((e.path, d));
        }
        Ok(out)
    }

    #[test]
    fn reads_members_and_long_names() {
        let long = format!("{}/trace_pipe_raw", "d".repeat(120));
        let big = vec![7u8; 1000];
        let a = tar(&[("./a", b"hello"), (&long, &big), ("b", b"")]);
        assert!(looks_like_tar(&a));
        let m = all(&a).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], ("./a".to_string(), b"hello".to_vec()));
        assert_eq!(m[1].0, long);
        assert_eq!(m[1].1, big);
        assert_eq!(m[2].1, b"");
    }

    #[test]
    fn partial_reads_skip_the_rest() {
        let a = tar(&[("a", &[1u8; 3000]), ("b", b"xyz")]);
        let mut ar = Archive::new(&a[..]);
        let e = ar.next_entry().unwrap().unwrap();
        let mut d = Vec::new();
        ar.read_data(&e, 10, &mut d).unwrap();
        assert_eq!(d.len(), 10);
        let e = ar.next_entry().unwrap().unwrap();
        assert_eq!(e.path, "b");
        let mut d = Vec::new();
        ar.read_data(&e, u64::MAX, &mut d).unwrap();
        assert_eq!(d, b"xyz");
        assert!(ar.next_entry().unwrap().is_none());
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let a = tar(&[("a", &[1u8; 3000])]);
        // Cut inside the data.
        let e = all(&a[..1200]).unwrap_err();
        assert!(e.to_string().contains("ends inside member a"), "{e}");
        // Flipped byte in the header.
        let mut b = a.clone();
        b[10] ^= 1;
        let e = all(&b).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        // Not a tar at all.
        assert!(!looks_like_tar(&[0x42; 600]));
        assert!(all(&[0x42; 600]).is_err());
        // Every cut and every flipped byte of a small archive: no panic.
        for i in 0..a.len().min(2048) {
            let _ = all(&a[..i]);
            let mut c = a.clone();
            c[i] ^= 0xff;
            let _ = all(&c);
        }
    }

    #[test]
    fn a_size_near_2_pow_64_is_an_error_not_an_overflow() {
        let mut a = tar(&[("a", &[1u8; 10])]);
        // GNU base-256 in the 12-byte size field: 2^64 - 10.
        a[124] = 0x80;
        a[125..128].fill(0);
        a[128..136].copy_from_slice(&(u64::MAX - 9).to_be_bytes());
        a[148..156].fill(b' ');
        let sum: u32 = a[..BLOCK].iter().map(|&b| u32::from(b)).sum();
        a[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let e = all(&a).unwrap_err();
        assert!(e.to_string().contains("ends inside"), "{e}");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_octal(b"0000644\0"), Some(0o644));
        assert_eq!(parse_octal(b"  12 \0"), Some(0o12));
        assert_eq!(parse_octal(b"\0\0\0"), Some(0));
        assert_eq!(parse_octal(b"0009"), None);
        assert_eq!(parse_octal(&[0x80, 0, 0, 0, 0, 0, 0, 1, 0]), Some(256));
        assert_eq!(parse_octal(&[0xff; 12]), None);
        assert_eq!(
            pax_path(b"29 path=a/b/c/trace_pipe_raw\n"),
            Some("a/b/c/trace_pipe_raw".into())
        );
        assert_eq!(pax_path(b"99 path=x\n"), None);
        assert_eq!(pax_size(b"11 path=ab\n11 size=17\n"), Some(17));
    }

    #[test]
    fn a_pax_size_is_the_members_size() {
        use kmemtrace_testkit::tar::{archive, header, Entry, BLOCK};
        // The pax header's size over the ustar field's 0 (Python's tarfile
        // for a member past 8 GiB), then a plain member after it.
        let mut a = archive(&[Entry {
            name: "pax".into(),
            typeflag: b'x',
            data: b"10 size=5\n".to_vec(),
        }]);
        a.truncate(a.len() - 2 * BLOCK);
        a.extend_from_slice(&header("big", 0, b'0'));
        a.extend_from_slice(b"hello");
        a.resize(a.len().next_multiple_of(BLOCK), 0);
        a.extend_from_slice(&tar(&[("next", b"x")]));
        let got = all(&a).unwrap();
        assert_eq!(got[0], ("big".into(), b"hello".to_vec()));
        assert_eq!(got[1], ("next".into(), b"x".to_vec()));
    }
}
