//! # kmemtrace-kernel
//!
//! The Linux kernel's own formats, as the tracing subsystem writes them,
//! decoded with the recorded kernel's byte order and sizes, never the
//! host's: the bottom floor of kmemtrace. Nothing here knows the kmemtrace
//! log (that is `kmemtrace-format`, built on this crate), so any input that
//! carries these formats (a log, a trace.dat, a capture script's dump)
//! decodes them the same way.
//!
//! The modules, from the ring buffer up:
//!
//! - [`endian`]: the byte order, a run-time parameter of endian-generic
//!   readers ([`Endian`], [`RunTimeEndian`]);
//! - [`machine`]: the one table from `uname -m` to byte order and `long`
//!   size ([`machine_facts`]);
//! - [`header_page`]: `events/header_page` and `header_event`, the layout of
//!   a ring-buffer sub-buffer ([`HeaderPage`], [`HeaderEvent`]);
//! - [`subbuf`]: the one record decoder and sub-buffer walker
//!   ([`parse_subbuf`] over a [`SubBufLayout`]);
//! - [`losses`]: the one loss tracker, fed a sub-buffer at a time
//!   ([`LossTracker`]);
//! - [`event_format`]: tracefs `format` files and field accessors
//!   ([`EventFormat`], [`Field`]);
//! - [`print_flags`] and [`print_fmt`]: the C expressions of `print fmt`
//!   (`__print_flags` tables such as GFP flags, [`FlagTable`]) and the
//!   line an event prints ([`PrintFmt`]);
//! - [`kmem`]: typed kmem events ([`KmemDecoder`], [`KmemEvent`]);
//! - [`stalls`]: the one list of the reclaim, compaction and OOM
//!   tracepoints an allocation stalls in;
//! - [`pagetypes`]: migratetype names and the pageblock order
//!   ([`PageTypes`]);
//! - [`kallsyms`], [`cmdlines`] and [`stats`]: `/proc/kallsyms`,
//!   `saved_cmdlines` and the per-CPU ring-buffer statistics;
//! - [`human`]: numbers as the programs show them to people.
//!
//! Parsers of kernel data never panic on hostile input: they return errors
//! that name the offset.
#![forbid(unsafe_code)]

pub mod endian;
pub mod machine;

// The ring buffer.
pub mod header_page;
pub mod losses;
pub mod stats;
pub mod subbuf;

// Events and what they print.
pub mod event_format;
pub mod kmem;
pub mod pagetypes;
pub mod print_flags;
pub mod print_fmt;
pub mod stalls;

// The kernel's tables.
pub mod cmdlines;
pub mod kallsyms;

pub mod human;

pub use cmdlines::{CmdlinesError, PidMap};
pub use endian::{BigEndian, Endian, LittleEndian, RunTimeEndian};
pub use event_format::{format_id, EventFormat, Field, FieldKind, FormatError, WrittenExtent};
pub use header_page::{HeaderError, HeaderEvent, HeaderPage};
pub use kallsyms::{Kallsyms, KallsymsError, Symbol};
pub use kmem::{KmemDecoder, KmemError, KmemEvent, KmemKind};
pub use losses::{Loss, LossTracker, SubBufRun, SubBufRuns, SubBufSequence, Window, Windows};
pub use machine::{machine_facts, MachineFacts, LINUX_MAX_NR_CPUS};
pub use pagetypes::PageTypes;
pub use print_flags::FlagTable;
pub use print_fmt::PrintFmt;
pub use stats::{CpuCounters, CpuStats, StatsError};
pub use subbuf::{
    parse_subbuf, EventIter, RbRecord, RbRecordKind, RecordHeader, RecordShape, SubBufError,
    SubBufErrorKind, SubBufLayout, SubBuffer,
};
