//! Metadata that analysis needs besides the ring-buffer data (FORMAT.md §7):
//! kallsyms to resolve call sites, `header_page` / `header_event`, and the
//! event formats (their ids are checked against the events in
//! [`super::subbufs`]).

use super::Sink;
use crate::findings::{Finding, Kind, Location};
use kmemtrace_format::records::MetaKind;
use kmemtrace_import::log::Log;

fn anywhere() -> Location {
    Location {
        exact: false,
        ..Location::at(0)
    }
}

pub fn check(log: &Log, sink: &mut Sink) {
    match &log.kallsyms {
        None if log.meta(MetaKind::Kallsyms, "").is_none()
            && log.meta(MetaKind::KallsymsPart, "").is_none() =>
        {
            sink.push(Finding::error(
                Kind::Metadata,
                anywhere(),
                "missing metadata: no kallsyms, so call sites cannot be resolved to functions",
            ))
        }
        None => {} // present but unparsable: Log::open reported it.
        Some(k) if k.is_restricted() => sink.push(Finding::warning(
            Kind::Metadata,
            anywhere(),
            "kallsyms addresses are all zero (kptr_restrict): call sites cannot be resolved",
        )),
        Some(_) => {}
    }
    for (kind, what) in [
        (MetaKind::HeaderPage, "header_page"),
        (MetaKind::HeaderEvent, "header_event"),
    ] {
        if log.meta(kind, "").is_none() {
            sink.push(Finding::warning(
                Kind::Metadata,
                anywhere(),
                format!("no {what}: sub-buffers are decoded with the arch tag's layout alone"),
            ));
        }
    }
    if log.formats.is_empty() && !log.blocks.is_empty() {
        sink.push(Finding::warning(
            Kind::Metadata,
            anywhere(),
            "no event formats: no event can be decoded",
        ));
    }
}
