//! TLV fields (FORMAT.md §6): `u16 tag, u32 len, value`, little-endian.

use std::fmt;

/// Builds a TLV payload.
#[derive(Default, Debug, Clone)]
pub struct TlvWriter {
    buf: Vec<u8>,
}

impl TlvWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn bytes(&mut self, tag: u16, value: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(&tag.to_le_bytes());
        self.buf
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(value);
        self
    }
    pub fn str(&mut self, tag: u16, value: &str) -> &mut Self {
        self.bytes(tag, value.as_bytes())
    }
    pub fn u8(&mut self, tag: u16, v: u8) -> &mut Self {
        self.bytes(tag, &[v])
    }
    pub fn u16(&mut self, tag: u16, v: u16) -> &mut Self {
        self.bytes(tag, &v.to_le_bytes())
    }
    pub fn u32(&mut self, tag: u16, v: u32) -> &mut Self {
        self.bytes(tag, &v.to_le_bytes())
    }
    pub fn i32(&mut self, tag: u16, v: i32) -> &mut Self {
        self.bytes(tag, &v.to_le_bytes())
    }
    pub fn u64(&mut self, tag: u16, v: u64) -> &mut Self {
        self.bytes(tag, &v.to_le_bytes())
    }
    pub fn opt_str(&mut self, tag: u16, v: &Option<String>) -> &mut Self {
        if let Some(s) = v {
            self.str(tag, s);
        }
        self
    }
    pub fn opt_u32(&mut self, tag: u16, v: Option<u32>) -> &mut Self {
        if let Some(x) = v {
            self.u32(tag, x);
        }
        self
    }
    pub fn opt_u64(&mut self, tag: u16, v: Option<u64>) -> &mut Self {
        if let Some(x) = v {
            self.u64(tag, x);
        }
        self
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// One field of a TLV payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub tag: u16,
    /// Offset of the field's header within the payload.
    pub offset: usize,
    pub value: &'a [u8],
}

/// A field whose value does not have the size its tag requires, or a field
/// that runs past the end of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlvError {
    /// Offset within the payload.
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for TlvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at payload offset {}: {}", self.offset, self.what)
    }
}
impl std::error::Error for TlvError {}

/// Iterates over the fields of a TLV payload.
pub fn fields(payload: &[u8]) -> TlvIter<'_> {
    TlvIter {
        buf: payload,
        pos: 0,
    }
}

pub struct TlvIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<Field<'a>, TlvError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let off = self.pos;
        let rest = &self.buf[off..];
        if rest.len() < 6 {
            self.pos = self.buf.len();
            return Some(Err(TlvError {
                offset: off,
                what: format!("{} stray bytes after the last field", rest.len()),
            }));
        }
        let tag = u16::from_le_bytes([rest[0], rest[1]]);
        let len = u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]]) as usize;
        if len > rest.len() - 6 {
            self.pos = self.buf.len();
            return Some(Err(TlvError {
                offset: off,
                what: format!(
                    "field tag {tag} claims {len} bytes but only {} remain",
                    rest.len() - 6
                ),
            }));
        }
        self.pos = off + 6 + len;
        Some(Ok(Field {
            tag,
            offset: off,
            value: &rest[6..6 + len],
        }))
    }
}

impl<'a> Field<'a> {
    fn fixed<const N: usize>(&self) -> Result<[u8; N], TlvError> {
        self.value.try_into().map_err(|_| TlvError {
            offset: self.offset,
            what: format!(
                "field tag {} must be {} bytes, has {}",
                self.tag,
                N,
                self.value.len()
            ),
        })
    }
    pub fn as_u8(&self) -> Result<u8, TlvError> {
        Ok(self.fixed::<1>()?[0])
    }
    pub fn as_u16(&self) -> Result<u16, TlvError> {
        Ok(u16::from_le_bytes(self.fixed()?))
    }
    pub fn as_u32(&self) -> Result<u32, TlvError> {
        Ok(u32::from_le_bytes(self.fixed()?))
    }
    pub fn as_i32(&self) -> Result<i32, TlvError> {
        Ok(i32::from_le_bytes(self.fixed()?))
    }
    pub fn as_u64(&self) -> Result<u64, TlvError> {
        Ok(u64::from_le_bytes(self.fixed()?))
    }
    /// The value as text; invalid UTF-8 is replaced, never an error.
    pub fn as_string(&self) -> String {
        String::from_utf8_lossy(self.value).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let mut w = TlvWriter::new();
        w.u8(1, 7).str(2, "héllo").u64(3, u64::MAX).bytes(9, &[]);
        let buf = w.finish();
        let f: Vec<_> = fields(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0].as_u8().unwrap(), 7);
        assert_eq!(f[1].as_string(), "héllo");
        assert_eq!(f[2].as_u64().unwrap(), u64::MAX);
        assert!(f[1].as_u32().is_err());
        assert!(f[3].value.is_empty());
        // Truncated field.
        let cut = &buf[..buf.len() - 7];
        let r: Vec<_> = fields(cut).collect();
        assert!(r.last().unwrap().is_err());
        // Length claiming more than there is: no panic, no huge allocation.
        let bad = [1, 0, 0xff, 0xff, 0xff, 0xff, 0];
        let e = fields(&bad).next().unwrap().unwrap_err();
        assert_eq!(e.offset, 0);
    }
}
