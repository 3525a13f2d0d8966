//! `print fmt` on records laid out by the test kit's event encoder.

use kmemtrace_kernel::print_fmt::Kernel;
use kmemtrace_kernel::{BigEndian, Endian, EventFormat, LittleEndian, PrintFmt, RunTimeEndian};
use kmemtrace_testkit::synth::{encode_event, Value};

fn render<E: Endian>(e: E, f: &EventFormat, payload: &[u8], long_bits: u8) -> String {
    let mut out = String::new();
    let k = Kernel {
        long_bits,
        symbols: None,
    };
    PrintFmt::compile(&f.print_fmt).write(&mut out, e, f, payload, &k);
    out
}

/// ftrace's `print` as tracefs prints its format on a kernel whose
/// `long` is `long` bytes (6.18 x86_64: `ip` at 8, size 8; `buf` at 16,
/// size 0).
fn ftrace_print_format(long: usize) -> String {
    format!(
        "name: print\nID: 5\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
         \tfield:unsigned long ip;\toffset:8;\tsize:{long};\tsigned:0;\n\
         \tfield:char buf[];\toffset:{};\tsize:0;\tsigned:0;\n\n\
         print fmt: \"%ps: %s\", (void *)REC->ip, REC->buf\n",
        8 + long
    )
}

#[test]
fn a_trace_marker_record_prints_its_buf_in_every_byte_order_and_long_size() {
    let text = |e: RunTimeEndian, long: usize, buf: &str| {
        let f = EventFormat::parse(&ftrace_print_format(long), Some("ftrace")).unwrap();
        let values = [("ip", Value::Uint(0xc0de_0042)), ("buf", Value::Str(buf))];
        let mut p = match e {
            RunTimeEndian::Little => encode_event(LittleEndian, &f, 77, &values),
            RunTimeEndian::Big => encode_event(BigEndian, &f, 77, &values),
        }
        .unwrap();
        assert_eq!(
            p.len(),
            8 + long + buf.len() + 1,
            "the text and its NUL end it"
        );
        // The ring buffer's rounding to 4 bytes: not text.
        p.resize(p.len().next_multiple_of(4), 0x55);
        match e {
            RunTimeEndian::Little => render(LittleEndian, &f, &p, (long * 8) as u8),
            RunTimeEndian::Big => render(BigEndian, &f, &p, (long * 8) as u8),
        }
    };
    for e in [RunTimeEndian::Big, RunTimeEndian::Little] {
        for long in [4, 8] {
            // No symbols here: `%ps` prints the address.
            assert_eq!(
                text(e, long, "PHASE A start\n"),
                "0xc0de0042: PHASE A start\n",
                "{e:?} {long}"
            );
            assert_eq!(text(e, long, ""), "0xc0de0042: ", "{e:?} {long}");
            assert_eq!(text(e, long, "a\nb"), "0xc0de0042: a\nb", "{e:?} {long}");
        }
    }
}
