//! The whole checker (`kmemtrace_check::check_bytes`) over arbitrary
//! bytes: no panic, no hang, bounded memory, and a report consistent with
//! its verdict.
//!
//! The first byte chooses how the rest is used: odd, as a raw log file;
//! even, as a list of blocks `type:u8, flags:u8, len:u16 LE, payload` that
//! are framed with correct CRCs behind a valid file header and a valid ARCH
//! block (random framing almost never passes a CRC, so this mode is what
//! reaches the checks behind it: metadata, CPU data, sub-buffers, losses).
#![no_main]

use kmemtrace_check::{check_bytes, Verdict};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::{encode_block, encode_file_header, BlockType, Compression};
use kmemtrace_format::records::encode_cpu_data_header;
use kmemtrace_kernel::RunTimeEndian;
use libfuzzer_sys::fuzz_target;

fn framed(mut rest: &[u8], big: bool) -> Vec<u8> {
    let mut out = encode_file_header().to_vec();
    let arch = ArchTag::new(
        if big {
            RunTimeEndian::Big
        } else {
            RunTimeEndian::Little
        },
        8,
        4096,
        16,
    );
    encode_block(BlockType::Arch, &arch.encode(), Compression::None, &mut out).unwrap();
    let mut seq = [0u64; 4];
    while rest.len() >= 4 {
        let (t, flags) = (rest[0], rest[1]);
        let len = usize::from(u16::from_le_bytes([rest[2], rest[3]])).min(rest.len() - 4);
        let payload = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let c = if flags & 1 != 0 {
            Compression::Zstd(1)
        } else {
            Compression::None
        };
        let bt = BlockType::from_u16(u16::from(t % 8));
        if bt == BlockType::CpuData && flags & 2 != 0 {
            // A well-formed CPU_DATA block: whole sub-buffers.
            let cpu = u32::from(flags >> 6);
            let n = payload.len() / 4096;
            let mut p = encode_cpu_data_header(cpu, n as u32, seq[cpu as usize], seq[cpu as usize])
                .to_vec();
            p.extend_from_slice(&payload[..n * 4096]);
            seq[cpu as usize] += 1;
            encode_block(bt, &p, c, &mut out).unwrap();
        } else {
            encode_block(bt, payload, c, &mut out).unwrap();
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 1 == 1 {
        rest.to_vec()
    } else {
        framed(rest, mode & 2 != 0)
    };
    let r = check_bytes("fuzz", &bytes);
    assert_eq!(r.exit_code, r.verdict.exit_code());
    match r.verdict {
        Verdict::Damaged => assert!(r.problems_total > 0),
        Verdict::Unusable => assert!(r.error.is_some()),
        _ => assert_eq!(r.problems_total, 0),
    }
    assert!(r.problems.len() <= 10_000);
    // The printers cope with whatever the report holds.
    let _ = kmemtrace_check::human::render(&r, &Default::default());
    let _ = kmemtrace_check::json::document(std::slice::from_ref(&r), r.exit_code);
});
