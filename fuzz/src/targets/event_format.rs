//! A tracepoint's `format` file, its `print fmt` (the C expressions and
//! the `__print_flags` tables) and the text of a record printed with it,
//! over arbitrary text and payloads: no panic, no hang, bounded output.
//!
//! Input: `format text`, a NUL, then a record payload (printed in both byte
//! orders and long sizes). Text that is not a format still compiles as a
//! print fmt, so the expression parser sees every input.

use kmemtrace_kernel::print_fmt::Kernel;
use kmemtrace_kernel::{BigEndian, Endian, EventFormat, FlagTable, LittleEndian, PrintFmt};

fn print<E: Endian>(e: E, fmt: &PrintFmt, format: &EventFormat, payload: &[u8]) {
    for long_bits in [32, 64] {
        let mut out = String::new();
        let k = Kernel {
            long_bits,
            symbols: None,
        };
        fmt.write(&mut out, e, format, payload, &k);
        // Bounded, whatever a width, a length or a count in the print fmt
        // or the record says.
        assert!(
            out.len() <= kmemtrace_kernel::print_fmt::RECORD_TEXT_MAX + 8 * payload.len() + 4096,
            "{} bytes of text from a {}-byte record",
            out.len(),
            payload.len()
        );
    }
}

/// One run.
pub fn run(data: &[u8]) {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(text) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let payload = data.get(split + 1..).unwrap_or_default();
    let _ = FlagTable::find_all(text);
    let format = match EventFormat::parse(text, Some("kmem")) {
        Ok(f) => f,
        Err(_) => {
            let _ = PrintFmt::compile(text).unevaluated();
            return;
        }
    };
    let _ = format.holes();
    let _ = format.written_extent().len(LittleEndian, payload);
    for f in format.all_fields() {
        let _ = f.read_u64(BigEndian, payload);
        let _ = f.read_str(LittleEndian, payload);
    }
    let fmt = PrintFmt::compile(&format.print_fmt);
    let _ = fmt.unevaluated();
    print(LittleEndian, &fmt, &format, payload);
    print(BigEndian, &fmt, &format, payload);
}
