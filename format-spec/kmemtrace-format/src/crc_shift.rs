//! CRC-32 arithmetic that lets the reader check many overlapping candidate
//! blocks in one pass over the bytes (zlib's `crc32_combine`, with the
//! x^(2^k) table of zlib 1.2.12): for finalised CRCs,
//! `crc(A ‖ B) = shift(crc(A), |B|) ^ crc(B)`, so the CRC of any stretch
//! follows from the running CRC at its two ends.

/// The reflected IEEE polynomial, as in [`crc32fast`].
const POLY: u32 = 0xedb8_8320;

/// `a * b mod p(x)` in the reflected representation (bit 31 is x^0).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `X2N[k]` = x^(2^k) mod p(x).
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p: u32 = 1 << 30; // x^1
    t[0] = p;
    let mut k = 1;
    while k < 32 {
        p = multmodp(p, p);
        t[k] = p;
        k += 1;
    }
    t
};

/// x^(n * 2^k) mod p(x).
fn x2nmodp(mut n: u64, mut k: usize) -> u32 {
    let mut p: u32 = 1 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC `crc` moved past `len` zero bytes, in the sense above: with
/// `shift(crc(A), |B|) ^ crc(B) = crc(A ‖ B)`.
pub fn shift(crc: u32, len: u64) -> u32 {
    multmodp(x2nmodp(len, 3), crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc(b: &[u8]) -> u32 {
        crc32fast::hash(b)
    }

    #[test]
    fn combines_like_zlib() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for cut in [0, 1, 3, 100, 4095, 5000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(
                shift(crc(a), b.len() as u64) ^ crc(b),
                crc(&data),
                "cut {cut}"
            );
        }
        // The CRC of a middle stretch from two running CRCs.
        let (s, e) = (123, 4321);
        let mid = crc(&data[..e]) ^ shift(crc(&data[..s]), (e - s) as u64);
        assert_eq!(mid, crc(&data[s..e]));
        assert_eq!(shift(0x1234_5678, 0), 0x1234_5678);
    }
}
