//! Tar archives as busybox's and GNU's `tar` write them (ustar headers, GNU
//! long names), for the dump importer's tests and fuzz inputs.

/// A tar block.
pub const BLOCK: usize = 512;

/// One member of an archive: `typeflag` as the header stores it (`b'0'` a
/// file, `b'5'` a directory, `b'2'` a symbolic link to `data`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub typeflag: u8,
    pub data: Vec<u8>,
}

/// A ustar header for `name` (its first 99 bytes: a long name goes before
/// it, whole), with a correct checksum.
pub fn header(name: &str, size: u64, typeflag: u8) -> [u8; BLOCK] {
    let mut h = [0u8; BLOCK];
    let n = name.len().min(99);
    h[..n].copy_from_slice(&name.as_bytes()[..n]);
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    let s = format!("{:011o}", size.min(0o77777777777));
    h[124..135].copy_from_slice(s.as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    rechecksum(h)
}

/// An archive of `entries`: names of 100 bytes or more go in a GNU
/// `././@LongLink` entry first, as GNU tar writes them. A symbolic link's
/// data is its target, kept in the header (its size is 0).
pub fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut v = Vec::new();
    for e in entries {
        if e.name.len() >= 100 {
            let long = format!("{}\0", e.name);
            v.extend_from_slice(&header("././@LongLink", long.len() as u64, b'L'));
            v.extend_from_slice(long.as_bytes());
            pad(&mut v);
        }
        let data: &[u8] = if e.typeflag == b'2' { &[] } else { &e.data };
        let mut h = header(&e.name, data.len() as u64, e.typeflag);
        if e.typeflag == b'2' {
            let n = e.data.len().min(100);
            h[157..157 + n].copy_from_slice(&e.data[..n]);
            h = rechecksum(h);
        }
        v.extend_from_slice(&h);
        v.extend_from_slice(data);
        pad(&mut v);
    }
    v.extend_from_slice(&[0u8; 2 * BLOCK]);
    v
}

/// An archive of plain files.
pub fn files(files: &[(&str, &[u8])]) -> Vec<u8> {
    let entries: Vec<Entry> = files
        .iter()
        .map(|(name, data)| Entry {
            name: name.to_string(),
            typeflag: b'0',
            data: data.to_vec(),
        })
        .collect();
    archive(&entries)
}

fn pad(v: &mut Vec<u8>) {
    v.resize(v.len().div_ceil(BLOCK) * BLOCK, 0);
}

fn rechecksum(mut h: [u8; BLOCK]) -> [u8; BLOCK] {
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}
