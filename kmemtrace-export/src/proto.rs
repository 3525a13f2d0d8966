//! A protobuf writer for the few messages the Perfetto export builds: the
//! wire format (varints, length-delimited fields) and nothing more, so the
//! export needs no code generator. Field numbers live with the messages
//! that use them (`perfetto.rs`).

/// One message being built.
#[derive(Default, Clone)]
pub struct Msg {
    buf: Vec<u8>,
}

const VARINT: u32 = 0;
const LEN: u32 = 2;

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl Msg {
    pub fn new() -> Self {
        Self::default()
    }

    fn key(&mut self, field: u32, wire: u32) {
        put_varint(&mut self.buf, u64::from(field << 3 | wire));
    }

    /// `uint32`, `uint64`, `bool` and enum fields.
    pub fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        self.key(field, VARINT);
        put_varint(&mut self.buf, v);
        self
    }

    /// `int32` and `int64` fields: negative values as ten-byte varints of
    /// their two's complement, as protobuf writes them.
    pub fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }

    pub fn string(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }

    pub fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        self.key(field, LEN);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    /// An embedded message.
    pub fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.buf)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_wire_format() {
        // Examples from the protobuf encoding guide: field 1 = 150 is
        // 08 96 01; field 2 = "testing" is 12 07 74 65 73 74 69 6e 67.
        let mut m = Msg::new();
        m.uint(1, 150).string(2, "testing");
        assert_eq!(
            m.as_bytes(),
            [0x08, 0x96, 0x01, 0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']
        );
        // int32 -1: ten bytes; an embedded message: length-delimited.
        let mut n = Msg::new();
        n.int(3, -1);
        assert_eq!(n.as_bytes().len(), 11);
        let mut outer = Msg::new();
        outer.msg(4, &n);
        assert_eq!(outer.as_bytes()[..2], [0x22, 11]);
    }
}
