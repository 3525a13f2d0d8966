//! Writes a log's CPU data again with another codec, every other block as
//! it is: the same capture in two codecs, for comparing readers on the
//! very same events.
//!
//!   cargo run --release -p kmemtrace-format --example repack -- IN.kmt OUT.kmt kpack|kpack1|zstd|none

use kmemtrace_format::block::{
    encode_file_header_minor, BlockCompressor, BlockType, Compression, FILE_HEADER_LEN,
};
use kmemtrace_format::kpack::{Packer, Shape};
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_import::log::Log;
use std::io::Write;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output, codec] = &args[..] else {
        eprintln!("usage: repack IN.kmt OUT.kmt kpack|kpack1|zstd|none");
        std::process::exit(2);
    };
    let log = Log::open(Path::new(input)).expect("a readable log");
    let shape = Shape::of(&log.arch);
    let compression = match codec.as_str() {
        "kpack" | "kpack1" => Compression::Kpack(1),
        "zstd" => Compression::Zstd(1),
        "none" => Compression::None,
        other => panic!("unknown codec {other}"),
    };
    let file = std::fs::read(input).expect("the log's bytes");
    let mut reader = LogReader::new(&file[..]).expect("a log");
    let mut c = BlockCompressor::new(compression);
    if codec == "kpack1" {
        c.set_packer(Packer::version1());
    }
    let mut out = encode_file_header_minor(compression.minor_version()).to_vec();
    assert_eq!(out.len(), FILE_HEADER_LEN);
    while let Some(item) = reader.next_item().expect("readable") {
        let Item::Block(b) = item else {
            panic!("{input} is damaged or cut short: repack takes whole logs");
        };
        if b.header.block_type == BlockType::CpuData {
            let payload = b.payload().expect("a CPU data payload");
            c.encode_cpu_data(&payload, shape, &mut out)
                .expect("a block");
        } else {
            let at = b.offset as usize;
            out.extend_from_slice(&file[at..at + b.len_on_disk() as usize]);
        }
    }
    std::fs::File::create(output)
        .and_then(|mut f| f.write_all(&out))
        .expect("the output written");
    println!(
        "{output}: {} bytes ({:.1}% of {input})",
        out.len(),
        100.0 * out.len() as f64 / file.len() as f64
    );
}
