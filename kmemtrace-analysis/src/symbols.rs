//! Call-site names: the log's kallsyms, another file's, or raw addresses.

use kmemtrace_format::kallsyms::Kallsyms;

/// Call-site names.
pub struct Symbols {
    pub table: Option<Kallsyms>,
    pub raw: bool,
    /// Where the symbols came from, for the report.
    pub source: String,
}

impl Symbols {
    pub fn name(&self, addr: u64) -> String {
        match (&self.table, self.raw) {
            (Some(k), false) => match k.resolve(addr) {
                Some(s) => s.short().to_string(),
                None => format!("0x{addr:x}"),
            },
            _ => format!("0x{addr:x}"),
        }
    }
}
