//! What the fuzz targets share.
//!
//! Each target is small and fast on purpose, so that a campaign gets
//! through many inputs (each target's rate: docs/fuzzing.md): one parser,
//! its input cut to what the parser reads, no threads. The structured
//! inputs that reach past CRCs and checksums are
//! `kmemtrace_testkit::fuzz`'s, which also cuts the seed corpora from real
//! files.

pub mod targets;
