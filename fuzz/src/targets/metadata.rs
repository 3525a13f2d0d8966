//! The text files a log carries as metadata, each over arbitrary text:
//! `kallsyms` (and symbol lookups in what it parsed), `saved_cmdlines`
//! with `saved_tgids`, `header_page`, `header_event`, a CPU's `stats`
//! and `/proc/pagetypeinfo`. No panic, no hang.
//!
//! The first byte picks the file; the rest is its text.

use kmemtrace_kernel::{CpuStats, HeaderEvent, HeaderPage, Kallsyms, PidMap};

fn kallsyms(text: &str) {
    let Ok(k) = Kallsyms::parse(text) else {
        return;
    };
    let _ = k.is_restricted();
    let _ = k.modules();
    let names: Vec<&str> = k.text_names().take(64).collect();
    for name in names {
        if let Some(addr) = k.address_of(name) {
            for a in [addr, addr.wrapping_add(1), addr.wrapping_sub(1)] {
                if let Some(s) = k.resolve(a) {
                    let _ = s.short().to_string();
                }
                let _ = k.format(a).to_string();
            }
        }
    }
    let _ = k.format(u64::MAX).to_string();
}

/// One run.
pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match which % 6 {
        0 => kallsyms(&text),
        1 => {
            let (cmdlines, tgids) = text.split_once('\0').unwrap_or((&text, ""));
            if let Ok(m) = PidMap::parse(cmdlines, Some(tgids)) {
                for pid in [0, 1, -1, i32::MAX] {
                    let _ = m.comm(pid);
                    let _ = m.tgid(pid);
                }
            }
        }
        2 => {
            let _ = HeaderPage::parse(&text);
        }
        3 => {
            let _ = HeaderEvent::parse(&text);
        }
        4 => {
            if let Some(s) = CpuStats::from_kernel(rest, 4) {
                let _ = kmemtrace_kernel::CpuCounters::over(&s, [&s]);
            }
        }
        _ => {
            if let Some(p) = kmemtrace_kernel::pagetypes::parse(&text) {
                let _ = p.name(0);
                let _ = p.name(255);
            }
        }
    }
}
