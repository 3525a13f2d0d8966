//! Byte order of the *recorded* kernel, never the host's.
//!
//! Modelled on `gimli::Endianity`: decoders are generic over [`Endian`], so
//! the common cases ([`LittleEndian`], [`BigEndian`]) compile to plain loads,
//! and [`RunTimeEndian`] serves when the order is only known from a log's
//! arch tag. Every read is bounds-checked and returns `None` past the end of
//! the slice: callers turn that into an error naming the offset.

use core::fmt::Debug;

/// A byte order for reading kernel data.
pub trait Endian: Copy + Debug + Send + Sync + 'static {
    /// True for big-endian kernels (s390x, ppc64, mips, ...).
    fn is_big_endian(self) -> bool;

    #[inline]
    fn u16_from(self, b: [u8; 2]) -> u16 {
        if self.is_big_endian() {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }
    #[inline]
    fn u32_from(self, b: [u8; 4]) -> u32 {
        if self.is_big_endian() {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }
    #[inline]
    fn u64_from(self, b: [u8; 8]) -> u64 {
        if self.is_big_endian() {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    }

    /// `u16` at `off`, or `None` if it does not fit in `buf`.
    #[inline]
    fn read_u16(self, buf: &[u8], off: usize) -> Option<u16> {
        let b = buf.get(off..off.checked_add(2)?)?;
        Some(self.u16_from([b[0], b[1]]))
    }
    /// `u32` at `off`, or `None` if it does not fit in `buf`.
    #[inline]
    fn read_u32(self, buf: &[u8], off: usize) -> Option<u32> {
        let b = buf.get(off..off.checked_add(4)?)?;
        Some(self.u32_from([b[0], b[1], b[2], b[3]]))
    }
    /// `u64` at `off`, or `None` if it does not fit in `buf`.
    #[inline]
    fn read_u64(self, buf: &[u8], off: usize) -> Option<u64> {
        let b = buf.get(off..off.checked_add(8)?)?;
        Some(self.u64_from([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    /// An unsigned integer of `size` bytes (1, 2, 4 or 8) at `off`,
    /// zero-extended. `None` for other sizes or out of bounds.
    #[inline]
    fn read_uint(self, buf: &[u8], off: usize, size: usize) -> Option<u64> {
        match size {
            1 => buf.get(off).map(|&b| u64::from(b)),
            2 => self.read_u16(buf, off).map(u64::from),
            4 => self.read_u32(buf, off).map(u64::from),
            8 => self.read_u64(buf, off),
            _ => None,
        }
    }
    /// A signed integer of `size` bytes (1, 2, 4 or 8) at `off`, sign-extended.
    #[inline]
    fn read_int(self, buf: &[u8], off: usize, size: usize) -> Option<i64> {
        let v = self.read_uint(buf, off, size)?;
        let bits = (size * 8) as u32;
        if bits == 64 {
            Some(v as i64)
        } else {
            let shift = 64 - bits;
            Some(((v << shift) as i64) >> shift)
        }
    }

    /// Writes `v` as `size` bytes (1, 2, 4, 8) into `out` (used by encoders
    /// of test vectors; truncates `v` to `size`).
    fn write_uint(self, out: &mut Vec<u8>, v: u64, size: usize) {
        let le = v.to_le_bytes();
        let be = v.to_be_bytes();
        if self.is_big_endian() {
            out.extend_from_slice(&be[8 - size..]);
        } else {
            out.extend_from_slice(&le[..size]);
        }
    }
}

/// Little-endian kernels (x86, arm, arm64, riscv, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LittleEndian;
impl Endian for LittleEndian {
    #[inline(always)]
    fn is_big_endian(self) -> bool {
        false
    }
}

/// Big-endian kernels (s390x, ppc64 BE, sparc64, mips BE, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BigEndian;
impl Endian for BigEndian {
    #[inline(always)]
    fn is_big_endian(self) -> bool {
        true
    }
}

/// A byte order known only at run time (from a log's arch tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunTimeEndian {
    Little,
    Big,
}
impl Endian for RunTimeEndian {
    #[inline]
    fn is_big_endian(self) -> bool {
        matches!(self, RunTimeEndian::Big)
    }
}

impl RunTimeEndian {
    /// The name used in the log and in reports: `"little"` or `"big"`.
    pub fn name(self) -> &'static str {
        match self {
            RunTimeEndian::Little => "little",
            RunTimeEndian::Big => "big",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_orders_and_bounds() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        assert_eq!(LittleEndian.read_u32(&b, 0), Some(0x0403_0201));
        assert_eq!(BigEndian.read_u32(&b, 0), Some(0x0102_0304));
        assert_eq!(
            RunTimeEndian::Big.read_u64(&b, 0),
            Some(0x0102_0304_0506_0708)
        );
        assert_eq!(LittleEndian.read_u32(&b, 5), None);
        assert_eq!(LittleEndian.read_u32(&b, usize::MAX), None);
        assert_eq!(LittleEndian.read_int(&[0xff, 0xff], 0, 2), Some(-1));
        assert_eq!(
            BigEndian.read_int(&[0x80, 0, 0, 0], 0, 4),
            Some(i32::MIN as i64)
        );
        assert_eq!(LittleEndian.read_uint(&b, 0, 3), None);
        let mut out = Vec::new();
        BigEndian.write_uint(&mut out, 0x0102, 4);
        LittleEndian.write_uint(&mut out, 0x0102, 2);
        assert_eq!(out, [0, 0, 1, 2, 2, 1]);
    }
}
