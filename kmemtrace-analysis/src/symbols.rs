//! Call-site names: the log's kallsyms, another file's, or raw addresses.

use kmemtrace_kernel::Kallsyms;

/// Call-site names.
pub struct Symbols {
    pub table: Option<Kallsyms>,
    pub raw: bool,
    /// Where the symbols came from, for the report.
    pub source: String,
}

impl Symbols {
    /// The log's own kallsyms (taken out of the log), saying where the
    /// names come from or why there are none.
    pub fn of_log(log: &mut kmemtrace_import::log::Log) -> Symbols {
        let t = log.kallsyms.take();
        let restricted = t.as_ref().is_some_and(|k| k.is_restricted());
        let t = t.filter(|k| !k.is_empty());
        let source = match (&t, restricted) {
            (Some(_), _) => "the log's kallsyms".to_string(),
            (None, true) => {
                "none (the log's kallsyms has no addresses: recorded without privilege)".into()
            }
            _ => "none (the log has no kallsyms)".into(),
        };
        Symbols {
            table: t,
            raw: false,
            source,
        }
    }

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
