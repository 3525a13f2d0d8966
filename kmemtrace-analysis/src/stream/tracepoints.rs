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
    /// by their place here ([`Tracepoint::get`]). Integers of 1, 2, 4 or 8
    /// bytes, and strings (a `char` array or `__data_loc char[]`, handed
    /// on interned, as cache names): a field the format lacks, or of
    /// another kind, reads as `None`.
    pub fields: &'static [&'static str],
    pub shard: ShardKey,
    pub delivery: Delivery,
}

/// Which of a requested tracepoint's events reach the pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every one.
    Each,
    /// For kmem's allocation events, which every allocation writes: only
    /// those that may end what a task waited in. Of each task (outside
    /// interrupts), its first in each block of a CPU, and its first after
    /// any [`Delivery::Each`] event of the task in the block. A pass that
    /// follows what a task waits in learns that it allocated again without
    /// every allocation travelling the stream.
    TaskMarks,
}

/// One requested event id's accessors.
#[derive(Clone, Debug)]
struct Resolved {
    id: u32,
    /// Index into the requests.
    request: u16,
    shard: ShardKey,
    fields: Vec<Option<Field>>,
    marks: bool,
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
    /// Some request asks for [`Delivery::TaskMarks`].
    marks: bool,
}

/// A non-kmem event read through its id's accessors.
pub struct Read<'p> {
    /// The event's id.
    pub id: u32,
    /// Its request asks for [`Delivery::TaskMarks`].
    pub mark: bool,
    pub tp: Tracepoint,
    /// A string field's bytes (its place among the request's fields, its
    /// bytes up to the first NUL), to be interned into `tp.values`.
    pub text: Option<(usize, &'p [u8])>,
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
                        .map(|n| f.field(n).cloned().filter(readable))
                        .collect(),
                    marks: r.delivery == Delivery::TaskMarks,
                });
            }
        }
        resolved.sort_by_key(|r| r.id);
        resolved.dedup_by_key(|r| r.id);
        // Marks tell a pass what a task did after its other events: with
        // none of those in the log, they have nothing to tell.
        if resolved.iter().all(|r| r.marks) {
            resolved.clear();
        }
        Tracepoints {
            marks: resolved.iter().any(|r| r.marks),
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

    /// Some request asks for kmem events as [`Delivery::TaskMarks`].
    #[inline]
    pub fn has_marks(&self) -> bool {
        self.marks
    }

    fn find(&self, id: u64) -> Option<&Resolved> {
        self.resolved
            .binary_search_by_key(&id, |r| u64::from(r.id))
            .ok()
            .map(|i| &self.resolved[i])
    }

    /// Reads `payload` if its id is a requested one.
    pub fn read<'p, E: Endian>(&self, e: E, payload: &'p [u8]) -> Option<Read<'p>> {
        let id = self.common_type.as_ref()?.read_u64(e, payload)?;
        let r = self.find(id)?;
        let mut tp = Tracepoint {
            request: r.request,
            shard: r.shard,
            present: 0,
            stack: crate::intern::NO_STACK,
            values: [0; TP_FIELDS],
        };
        let mut text = None;
        for (i, f) in r.fields.iter().enumerate() {
            let Some(f) = f else { continue };
            if f.kind != FieldKind::Scalar {
                if let Some(b) = f.read_bytes(e, payload) {
                    text = Some((i, b));
                }
                continue;
            }
            if let Some(v) = f.read_i64(e, payload) {
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
            id: r.id,
            mark: r.marks,
            tp,
            text,
            pid,
            in_interrupt: flags & u64::from(trace_flags::INTERRUPT) != 0,
        })
    }
}

/// A field a request can read: an integer, or one string (`char` array or
/// `__data_loc char[]`) per request.
fn readable(f: &Field) -> bool {
    is_scalar(f) || f.is_bytes()
}

fn is_scalar(f: &Field) -> bool {
    f.kind == FieldKind::Scalar && matches!(f.size, 1 | 2 | 4 | 8)
}
