//! Format 1.1's graceful degradation: one damaged byte costs a slice of the
//! log, not the whole of it. A damaged ARCH block is replaced by its copy
//! (ARCH_COPY); a damaged kallsyms part costs that part's symbols only.

use kmemtrace_format::block::BlockType;
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::records::{kallsyms_metas, MetaKind, Record};
use kmemtrace_import::log::Log;
use kmemtrace_kernel::RunTimeEndian;
use kmemtrace_testkit::synth::LogBuilder;

/// A kallsyms text of `n` functions, 0x100 bytes apart from `base`.
fn kallsyms(n: u64, base: u64) -> String {
    (0..n)
        .map(|i| format!("{:016x} T func_{i}\n", base + 0x100 * i))
        .collect()
}

const BASE: u64 = 0xffff_ffff_8100_0000;

fn sample(symbols: u64) -> Vec<u8> {
    let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
    b.arch.machine = Some("x86_64".into());
    for m in kallsyms_metas(kallsyms(symbols, BASE).as_bytes()) {
        b.meta(m);
    }
    b.build().unwrap()
}

/// (offset, end, block type, kallsyms part index) of every block.
fn blocks(bytes: &[u8]) -> Vec<(u64, u64, BlockType, Option<u32>)> {
    LogReader::new(bytes)
        .unwrap()
        .map(|i| match i.unwrap() {
            Item::Block(b) => {
                let p = b.payload().unwrap();
                let part = match Record::decode(b.header.block_type, &p, Some(4096)) {
                    Ok(Record::Meta(m)) if m.kind == MetaKind::KallsymsPart => m.part.map(|x| x.0),
                    _ => None,
                };
                (
                    b.offset,
                    b.offset + b.len_on_disk(),
                    b.header.block_type,
                    part,
                )
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn every_byte_of_the_arch_block_can_be_lost() {
    let bytes = sample(10);
    let good = Log::from_bytes("good", &bytes).unwrap();
    assert!(good.problems.is_empty(), "{:?}", good.problems);
    let all = blocks(&bytes);
    let (start, end, t, _) = all[0];
    assert_eq!(t, BlockType::Arch);
    let copy = all.iter().position(|b| b.2 == BlockType::ArchCopy).unwrap();
    assert!(copy > 1, "the copy lies after the metadata");
    for pos in start..end {
        let mut b = bytes.clone();
        b[pos as usize] ^= 0x20;
        let log = Log::from_bytes("flipped", &b)
            .unwrap_or_else(|e| panic!("flip at {pos}: the log became unusable: {e}"));
        assert_eq!(log.arch, good.arch, "flip at {pos}");
        assert!(
            log.problems
                .iter()
                .any(|p| p.what.contains("decoded with this ARCH_COPY")),
            "flip at {pos}: {:?}",
            log.problems
        );
        assert_eq!(log.kallsyms.as_ref().unwrap().len(), 10);
    }
}

#[test]
fn a_damaged_kallsyms_part_costs_its_own_symbols_only() {
    // About 5 parts of at most 256 KiB.
    let n = 40_000;
    let bytes = sample(n);
    let all = blocks(&bytes);
    let parts: Vec<_> = all.iter().filter(|b| b.3.is_some()).collect();
    assert!(parts.len() >= 4, "{} parts", parts.len());
    let good = Log::from_bytes("good", &bytes).unwrap();
    let k = good.kallsyms.as_ref().unwrap();
    assert_eq!(k.len() as u64, n);
    assert_eq!(k.resolve(BASE + 0x100 * 123 + 8).unwrap().name, "func_123");

    // Damage the second part's block.
    let (start, end, _, _) = *parts[1];
    let mut b = bytes.clone();
    b[((start + end) / 2) as usize] ^= 0xff;
    let log = Log::from_bytes("flipped", &b).unwrap();
    let k = log.kallsyms.as_ref().unwrap();
    let lost = n - k.len() as u64;
    assert!(lost > 0 && lost < n / 3, "{lost} symbols lost");
    assert!(
        log.problems.iter().any(|p| p
            .what
            .contains(&format!("kallsyms part 2 of {}", parts.len()))),
        "{:?}",
        log.problems
    );
    // Symbols of the first and last parts resolve; none in the lost
    // stretch is attributed to the function before it.
    assert_eq!(k.resolve(BASE + 0x10).unwrap().name, "func_0");
    let last = n - 1;
    assert_eq!(
        k.resolve(BASE + 0x100 * last + 0x10).unwrap().name,
        format!("func_{last}")
    );
    let mut unresolved = 0;
    for i in 0..n {
        match k.resolve(BASE + 0x100 * i + 0x10) {
            Some(s) => assert_eq!(s.name, format!("func_{i}")),
            None => unresolved += 1,
        }
    }
    // The lost part's functions, and the one before the gap (whose end is
    // unknown).
    assert_eq!(unresolved, lost + 1);
}

/// A log cut inside its kallsyms: the parts past the cut are said once,
/// as lost with the rest of the file, not each as damage of its own.
#[test]
fn kallsyms_parts_past_a_cut_are_one_problem() {
    let bytes = sample(40_000);
    let all = blocks(&bytes);
    let parts: Vec<_> = all.iter().filter(|b| b.3.is_some()).collect();
    assert!(parts.len() >= 4, "{} parts", parts.len());
    // Cut in the middle of the third part's block.
    let (start, end, _, _) = *parts[2];
    let log = Log::from_bytes("cut", &bytes[..((start + end) / 2) as usize]).unwrap();
    assert!(log.truncated.is_some());
    let about: Vec<_> = log
        .problems
        .iter()
        .filter(|p| p.what.contains("kallsyms"))
        .collect();
    assert_eq!(about.len(), 1, "{:?}", log.problems);
    let want = format!(
        "kallsyms parts 3 to {} of {} lie past",
        parts.len(),
        parts.len()
    );
    assert!(about[0].what.contains(&want), "{:?}", about[0]);
    assert_eq!(about[0].offset, start);
    // The parts before the cut still resolve.
    let k = log.kallsyms.as_ref().unwrap();
    assert_eq!(k.resolve(BASE + 0x10).unwrap().name, "func_0");
}
