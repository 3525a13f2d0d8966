//! # kmemtrace-format
//!
//! The kmemtrace log format, as specified in `format-spec/FORMAT.md`, and the
//! decoders for what the log carries: the kernel's ftrace ring-buffer
//! sub-buffers and its kmem trace events.
//!
//! Data flows one way through the modules:
//!
//! - the **container**: [`block`] (framing, CRC, compression), [`tlv`],
//!   [`records`] (typed block payloads: [`arch`] tag, metadata, CPU data,
//!   statistics, end), [`writer`] and [`reader`];
//! - the **kernel's formats**, decoded with the recorded kernel's byte order
//!   and sizes, never the host's ([`endian`]): [`header_page`],
//!   [`subbuf`] (ring-buffer sub-buffers), [`event_format`] (tracefs
//!   `format` files), [`print_flags`] (`__print_flags` tables such as GFP
//!   flags), [`kmem`] (typed kmem events), [`kallsyms`], [`cmdlines`] and
//!   [`stats`] (per-CPU ring-buffer statistics);
//! - [`log`]: a whole log opened for analysis, tying the two together;
//! - [`walk`]: the one walker over its sub-buffers, behind a source trait
//!   that other inputs (trace-cmd's `trace.dat`) implement too;
//! - [`human`]: numbers as the programs show them to people.
//!
//! Parsers of log data never panic on hostile input: they return errors that
//! name the offset.
#![forbid(unsafe_code)]

pub mod endian;

// Container (format-spec/FORMAT.md).
pub mod arch;
pub mod block;
mod crc_shift;
pub mod kpack;
pub mod reader;
pub mod records;
pub mod tlv;
pub mod writer;

// Kernel formats.
pub mod cmdlines;
pub mod event_format;
pub mod header_page;
pub mod kallsyms;
pub mod kmem;
pub mod pagetypes;
pub mod print_flags;
pub mod print_fmt;
pub mod stacks;
pub mod stats;
pub mod subbuf;
pub mod tasks;
pub mod walk;

pub mod completeness;
pub mod human;
pub mod log;
pub mod losses;
pub mod machine;
pub mod private_file;
#[cfg(any(test, feature = "testkit"))]
pub mod synth;

pub use endian::{BigEndian, Endian, LittleEndian, RunTimeEndian};
