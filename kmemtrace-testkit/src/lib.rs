//! # kmemtrace-testkit
//!
//! Builders of synthetic inputs for tests, benchmarks, examples and fuzz
//! seeds: never a dependency of the programs (a dev-dependency only).
//!
//! - [`subbuf`]: ring-buffer sub-buffers encoded by the kernel's writer
//!   rules ([`encode_subbuf`] of a [`PageSpec`]), for the decoder of
//!   `kmemtrace-kernel` to read back;
//! - [`synth`]: whole kmemtrace logs ([`LogBuilder`]) and event payloads
//!   ([`encode_event`]) written with `kmemtrace-format`'s writer;
//! - [`tar`]: tar archives, as capture dumps are;
//! - [`fuzz`]: the structured inputs of the fuzz targets, and the same
//!   inputs cut from real logs and dumps (seed corpora).
#![forbid(unsafe_code)]

pub mod fuzz;
pub mod subbuf;
pub mod synth;
pub mod tar;

pub use subbuf::{encode_subbuf, EncRecord, EncodedPage, EndPadding, Missed, PageSpec};
pub use synth::{encode_event, LogBuilder, Rng, SynthRecord, Value};
