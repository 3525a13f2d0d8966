//! Tracepoints other than kmem's in the ordered stream: a pass asks for
//! them by `system:name` with the fields it reads ([`Request`]); the
//! requests are resolved once against the log's own formats
//! ([`Tracepoints::resolve`]), so that the decoder reads an event of a
//! requested id through accessors found once for that id, with the log's
//! byte order (never the host's), and hands it on as a compact
//! [`Tracepoint`] body.
//!
//! Nothing is asked, nothing is decoded: with no request the decoder does
//! not even read a non-kmem event's id.

pub use crate::event::ShardKey;
use crate::event::{Tracepoint, TP_FIELDS};
use kmemtrace_kernel::event_format::{trace_flags, EventFormat, Field, FieldKind};
use kmemtrace_kernel::Endian;

/// A pass's ask for one tracepoint's events.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// `system:name`, as in `kmemtraced -e` (`vmscan:mm_vmscan_direct_reclaim_begin`).
    pub tracepoint: &'static str,
    /// The payload fields read, at most [`TP_FIELDS`]; the pass reads them
    /// by their place here ([`Tracepoint::get`]). Scalar fields only: a
    /// field the format lacks, or that is not an integer of 1, 2, 4 or 8
    /// bytes, reads as `None`.
    pub fields: &'static [&'static str],
    pub shard: ShardKey,
}

/// One requested event id's accessors.
#[derive(Clone, Debug)]
struct Resolved {
    id: u32,
    /// Index into the requests.
    request: u16,
    shard: ShardKey,
    fields: Vec<Option<Field>>,
}

/// The requests, resolved against one log's formats.
#[derive(Clone, Debug, Default)]
pub struct Tracepoints {
    requests: Vec<Request>,
    /// Sorted by id.
    resolved: Vec<Resolved>,
    /// The common fields every format shares.
    common_type: Option<Field>,
    common_pid: Option<Field>,
    common_flags: Option<Field>,
}

/// A non-kmem event read through its id's accessors.
pub struct Read {
    pub tp: Tracepoint,
    pub pid: i32,
    pub in_interrupt: bool,
}

impl Tracepoints {
    /// Resolves `requests` (in order: a [`Tracepoint::request`] indexes
    /// them) against a log's formats; a tracepoint the log did not record
    /// has no events.
    ///
    /// # Panics
    /// If a request names more than [`TP_FIELDS`] fields, or a tracepoint
    /// is asked for twice (an event goes to one request): a pass's
    /// mistake, not the log's.
    pub fn resolve(formats: &[EventFormat], requests: Vec<Request>) -> Self {
        let common = |name: &str| {
            formats
                .iter()
                .find_map(|f| f.common_fields.iter().find(|c| c.name == name).cloned())
                .filter(is_scalar)
        };
        let mut resolved = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            assert!(
                r.fields.len() <= TP_FIELDS,
                "{}: at most {TP_FIELDS} fields",
                r.tracepoint
            );
            assert!(
                !requests[..i].iter().any(|o| o.tracepoint == r.tracepoint),
                "{} is asked for twice",
                r.tracepoint
            );
            let (system, name) = r.tracepoint.split_once(':').unwrap_or(("", r.tracepoint));
            for f in formats
                .iter()
                .filter(|f| f.system == system && f.name == name)
            {
                resolved.push(Resolved {
                    id: f.id,
                    request: i as u16,
                    shard: r.shard,
                    fields: r
                        .fields
                        .iter()
                        .map(|n| f.field(n).cloned().filter(is_scalar))
                        .collect(),
                });
            }
        }
        resolved.sort_by_key(|r| r.id);
        resolved.dedup_by_key(|r| r.id);
        Tracepoints {
            requests,
            resolved,
            common_type: common("common_type"),
            common_pid: common("common_pid"),
            common_flags: common("common_flags"),
        }
    }

    /// No requested tracepoint is in the log.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.resolved.is_empty()
    }

    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Reads `payload` if its id is a requested one.
    pub fn read<E: Endian>(&self, e: E, payload: &[u8]) -> Option<Read> {
        let id = self.common_type.as_ref()?.read_u64(e, payload)?;
        let r = self
            .resolved
            .binary_search_by_key(&id, |r| u64::from(r.id))
            .ok()
            .map(|i| &self.resolved[i])?;
        let mut tp = Tracepoint {
            request: r.request,
            shard: r.shard,
            present: 0,
            values: [0; TP_FIELDS],
        };
        for (i, f) in r.fields.iter().enumerate() {
            if let Some(v) = f.as_ref().and_then(|f| f.read_i64(e, payload)) {
                tp.values[i] = v as u64;
                tp.present |= 1 << i;
            }
        }
        let pid = self
            .common_pid
            .as_ref()
            .and_then(|f| f.read_i64(e, payload))
            .unwrap_or(0) as i32;
        let flags = self
            .common_flags
            .as_ref()
            .and_then(|f| f.read_u64(e, payload))
            .unwrap_or(0);
        Some(Read {
            tp,
            pid,
            in_interrupt: flags & u64::from(trace_flags::INTERRUPT) != 0,
        })
    }
}

fn is_scalar(f: &Field) -> bool {
    f.kind == FieldKind::Scalar && matches!(f.size, 1 | 2 | 4 | 8)
}
