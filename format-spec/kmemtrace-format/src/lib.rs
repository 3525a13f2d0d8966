//! # kmemtrace-format
//!
//! The kmemtrace log format, as specified in `format-spec/FORMAT.md`: the
//! container around what the recorder copied out of the kernel. The
//! kernel's own formats inside it (sub-buffers, event formats, kmem
//! events, kallsyms, ...) are `kmemtrace-kernel`'s; this crate stores them
//! and finds them again; opening a log for analysis (with the other
//! inputs, a trace.dat and a capture-script dump) is `kmemtrace-import`'s.
//!
//! Data flows one way through the modules:
//!
//! - the **container**: [`block`] (framing, CRC, compression: zstd and
//!   [`kpack`], which walks sub-buffers with the kernel crate's decoder),
//!   [`tlv`], [`records`] (typed block payloads: [`arch`] tag, metadata,
//!   CPU data, statistics, end), [`writer`] and [`reader`];
//! - [`private_file`]: owner-only output files for what holds a capture's
//!   addresses and symbols.
//!
//! Parsers of log data never panic on hostile input: they return errors that
//! name the offset.
#![forbid(unsafe_code)]

// Container (format-spec/FORMAT.md).
pub mod arch;
pub mod block;
mod crc_shift;
pub mod kpack;
pub mod reader;
pub mod records;
pub mod rotation;
pub mod tlv;
pub mod writer;

pub mod private_file;

pub use arch::ArchTag;
pub use block::{BlockCompressor, BlockHeader, BlockType, Compression, PayloadDecoder};
pub use reader::{Item, LogReader, OpenError, RawBlock};
pub use records::{Meta, MetaKind, Record, RecordError};
pub use writer::LogWriter;
