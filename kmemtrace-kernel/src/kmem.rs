//! Typed views of the kernel's kmem events, located through the recorded
//! `format` files.
//!
//! Field offsets and sizes differ between kernels and architectures (6.1
//! armhf: 4-byte longs, no `name` in `kmem_cache_alloc`; 6.18 x86_64: 8-byte
//! longs, `name` as `__data_loc`; s390x: big-endian), so nothing here is
//! hard-coded: [`KmemDecoder::new`] builds, for each kmem event id of a log,
//! a plan of where each field sits, and [`KmemDecoder::decode`] reads a
//! record's payload with the recorded kernel's byte order ([`Endian`]),
//! without allocating.
//!
//! # Which fields mean something, per kind
//!
//! A field the recorded kernel's format does not have reads as 0 / `None`.
//!
//! | kind | fields |
//! |---|---|
//! | `Kmalloc`, `KmallocNode` | `call_site`, `ptr`, `bytes_req`, `bytes_alloc`, `gfp_flags`, `node`, `accounted` (see below) |
//! | `KmemCacheAlloc`, `KmemCacheAllocNode` | the same, plus `cache_name` (6.2+ kernels only) |
//! | `Kfree` | `call_site`, `ptr` |
//! | `KmemCacheFree` | `call_site`, `ptr`, `cache_name` (5.12+) |
//! | `MmPageAlloc` | `pfn`, `order`, `gfp_flags`, `migratetype` |
//! | `MmPageFree` | `pfn`, `order` |
//! | `MmPageFreeBatched` | `pfn` (`order` is always 0) |
//! | `MmPageAllocZoneLocked` | `pfn`, `order`, `migratetype`, `percpu_refill` (5.13+) |
//! | `MmPagePcpuDrain` | `pfn`, `order`, `migratetype` |
//! | `MmPageAllocExtfrag` | `pfn`, `extfrag` |
//!
//! `pid` (`common_pid`) is there for every kind. `pfn` is `None` when the
//! kernel recorded `-1UL` ("no page", e.g. a failed `mm_page_alloc`).
//! `accounted` comes from the `accounted` field where the format has one
//! (`kmem_cache_alloc`); for `kmalloc`, whose format computes it in the print
//! fmt (`(1 && (REC->gfp_flags & __GFP_ACCOUNT)) ? "true" : "false"`), that
//! expression is evaluated, so the value is what the kernel itself prints.

use core::fmt;

use crate::endian::Endian;
use crate::event_format::{EventFormat, Field, FieldKind};
use crate::print_flags::{arg_after_label, parse_string_literal, split_ternary, CExpr, FlagTable};
use std::collections::BTreeMap;

/// The tracefs system of every kmem event (`events/kmem/`).
pub const SYSTEM: &str = "kmem";

/// The kmem events kmemtrace understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KmemKind {
    Kmalloc,
    /// Kernels before 6.0 (merged into `kmalloc` since).
    KmallocNode,
    Kfree,
    KmemCacheAlloc,
    /// Kernels before 6.0 (merged into `kmem_cache_alloc` since).
    KmemCacheAllocNode,
    KmemCacheFree,
    MmPageAlloc,
    /// Also `mm_page_free_direct` (kernels before 3.3).
    MmPageFree,
    /// Also `mm_pagevec_free` (kernels before 3.3).
    MmPageFreeBatched,
    MmPageAllocZoneLocked,
    MmPagePcpuDrain,
    MmPageAllocExtfrag,
}

impl KmemKind {
    /// Every kind.
    pub const ALL: [KmemKind; 12] = [
        KmemKind::Kmalloc,
        KmemKind::KmallocNode,
        KmemKind::Kfree,
        KmemKind::KmemCacheAlloc,
        KmemKind::KmemCacheAllocNode,
        KmemKind::KmemCacheFree,
        KmemKind::MmPageAlloc,
        KmemKind::MmPageFree,
        KmemKind::MmPageFreeBatched,
        KmemKind::MmPageAllocZoneLocked,
        KmemKind::MmPagePcpuDrain,
        KmemKind::MmPageAllocExtfrag,
    ];

    /// The kind of the kmem event called `name`, including legacy names.
    pub fn from_event_name(name: &str) -> Option<Self> {
        Some(match name {
            "kmalloc" => KmemKind::Kmalloc,
            "kmalloc_node" => KmemKind::KmallocNode,
            "kfree" => KmemKind::Kfree,
            "kmem_cache_alloc" => KmemKind::KmemCacheAlloc,
            "kmem_cache_alloc_node" => KmemKind::KmemCacheAllocNode,
            "kmem_cache_free" => KmemKind::KmemCacheFree,
            "mm_page_alloc" => KmemKind::MmPageAlloc,
            "mm_page_free" | "mm_page_free_direct" => KmemKind::MmPageFree,
            "mm_page_free_batched" | "mm_pagevec_free" => KmemKind::MmPageFreeBatched,
            "mm_page_alloc_zone_locked" => KmemKind::MmPageAllocZoneLocked,
            "mm_page_pcpu_drain" => KmemKind::MmPagePcpuDrain,
            "mm_page_alloc_extfrag" => KmemKind::MmPageAllocExtfrag,
            _ => return None,
        })
    }

    /// The current kernel's event name.
    pub fn name(self) -> &'static str {
        match self {
            KmemKind::Kmalloc => "kmalloc",
            KmemKind::KmallocNode => "kmalloc_node",
            KmemKind::Kfree => "kfree",
            KmemKind::KmemCacheAlloc => "kmem_cache_alloc",
            KmemKind::KmemCacheAllocNode => "kmem_cache_alloc_node",
            KmemKind::KmemCacheFree => "kmem_cache_free",
            KmemKind::MmPageAlloc => "mm_page_alloc",
            KmemKind::MmPageFree => "mm_page_free",
            KmemKind::MmPageFreeBatched => "mm_page_free_batched",
            KmemKind::MmPageAllocZoneLocked => "mm_page_alloc_zone_locked",
            KmemKind::MmPagePcpuDrain => "mm_page_pcpu_drain",
            KmemKind::MmPageAllocExtfrag => "mm_page_alloc_extfrag",
        }
    }

    /// A slab allocation (`kmalloc*`, `kmem_cache_alloc*`).
    pub fn is_slab_alloc(self) -> bool {
        matches!(
            self,
            KmemKind::Kmalloc
                | KmemKind::KmallocNode
                | KmemKind::KmemCacheAlloc
                | KmemKind::KmemCacheAllocNode
        )
    }

    /// A slab free (`kfree`, `kmem_cache_free`).
    pub fn is_slab_free(self) -> bool {
        matches!(self, KmemKind::Kfree | KmemKind::KmemCacheFree)
    }

    /// A page-allocator event (`mm_page_*`).
    pub fn is_page_event(self) -> bool {
        !self.is_slab_alloc() && !self.is_slab_free()
    }
}

impl fmt::Display for KmemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `mm_page_alloc_extfrag`'s own fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extfrag {
    pub alloc_order: i32,
    pub fallback_order: i32,
    pub alloc_migratetype: i32,
    pub fallback_migratetype: i32,
    /// Kernels since 3.17 (before, a `fragmenting` field stood here).
    pub change_ownership: Option<i32>,
}

/// One decoded kmem event; see the [module docs](self) for which fields a
/// kind fills. Borrows the cache name from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmemEvent<'a> {
    pub kind: KmemKind,
    /// The event id (`common_type`).
    pub id: u32,
    /// `common_pid` (0 if the format has none).
    pub pid: i32,
    /// Recorded in hard or soft interrupt or NMI context (`common_flags`'
    /// TRACE_FLAG_HARDIRQ, _SOFTIRQ, _NMI bits; false if the format has no
    /// `common_flags`): the work of whatever task `pid` was current, not
    /// the task's own.
    pub in_interrupt: bool,
    pub call_site: u64,
    pub ptr: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    /// Raw GFP bits; name them with [`KmemDecoder::gfp_table`].
    pub gfp_flags: u64,
    /// NUMA node asked for (-1: any), where the format has `node`.
    pub node: Option<i32>,
    /// The slab cache (`kmem_cache_*`, where the format has `name`).
    pub cache_name: Option<&'a str>,
    /// Charged to a memory cgroup (see the module docs).
    pub accounted: Option<bool>,
    /// Page frame number; `None` for `-1UL` or no such field.
    pub pfn: Option<u64>,
    pub order: u32,
    pub migratetype: Option<i32>,
    pub percpu_refill: Option<i32>,
    /// `mm_page_alloc_extfrag` only.
    pub extfrag: Option<Extfrag>,
}

/// A cache name as recorded (up to its NUL), not yet checked to be UTF-8;
/// see [`KmemDecoder::decode_raw_name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawName<'a> {
    pub bytes: &'a [u8],
    /// The error [`KmemDecoder::decode`] gives if it is not UTF-8.
    not_utf8: KmemError,
}

impl<'a> RawName<'a> {
    /// The name, or the error [`KmemDecoder::decode`] gives for it.
    #[inline]
    pub fn to_str(&self) -> Result<&'a str, KmemError> {
        core::str::from_utf8(self.bytes).map_err(|_| self.not_utf8)
    }
}

/// What went wrong decoding one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KmemErrorKind {
    /// The payload ends before the field does.
    Truncated,
    /// A `__data_loc` string points outside the payload.
    StringOutOfBounds,
    /// A cache name that is not UTF-8.
    StringNotUtf8,
}

/// A record that does not fit its event's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmemError {
    /// The event id, if it could be read.
    pub id: Option<u32>,
    /// The event, if the id is a kmem one.
    pub kind: Option<KmemKind>,
    /// The field that could not be read.
    pub field: &'static str,
    /// Its offset in the record.
    pub offset: usize,
    /// Its size.
    pub size: usize,
    /// The record's length.
    pub payload_len: usize,
    pub error: KmemErrorKind,
}

impl fmt::Display for KmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.id) {
            (Some(k), Some(id)) => write!(f, "kmem/{k} (id {id})")?,
            (None, Some(id)) => write!(f, "event id {id}")?,
            _ => f.write_str("event")?,
        }
        let what = match self.error {
            KmemErrorKind::Truncated => "is past the end of the",
            KmemErrorKind::StringOutOfBounds => "locates its string outside the",
            KmemErrorKind::StringNotUtf8 => "is not UTF-8 in the",
        };
        write!(
            f,
            ": field {} at offset {}..{} {what} {}-byte record",
            self.field,
            self.offset,
            self.offset.saturating_add(self.size),
            self.payload_len
        )
    }
}

impl std::error::Error for KmemError {}

/// Where a scalar field sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    name: &'static str,
    offset: usize,
    size: usize,
    signed: bool,
    /// Every bit of the field set (for `-1UL` checks), as a mask.
    all_ones: u64,
    /// 64 less the field's bits.
    shift: u32,
}

impl Loc {
    /// A field of 1, 2, 4 or 8 bytes.
    fn new(name: &'static str, offset: usize, size: usize, signed: bool) -> Loc {
        let bits = (size * 8) as u32;
        Loc {
            name,
            offset,
            size,
            signed,
            all_ones: u64::MAX >> (64 - bits),
            shift: 64 - bits,
        }
    }

    // Always inlined: it runs for every field of every event. Where 8
    // bytes are there, one 8-byte load and a mask (or a shift, big-endian)
    // whatever the size: a branch on the size, which changes from one
    // field and one event kind to the next, is mispredicted often.
    #[inline(always)]
    fn u64<E: Endian>(&self, e: E, p: &[u8]) -> u64 {
        match p.get(self.offset..self.offset.saturating_add(8)) {
            Some(w) => {
                let w: [u8; 8] = w.try_into().unwrap_or([0; 8]);
                if e.is_big_endian() {
                    u64::from_be_bytes(w) >> self.shift
                } else {
                    u64::from_le_bytes(w) & self.all_ones
                }
            }
            None => e.read_uint(p, self.offset, self.size).unwrap_or(0),
        }
    }
    #[inline(always)]
    fn i64<E: Endian>(&self, e: E, p: &[u8]) -> i64 {
        let v = self.u64(e, p);
        if self.signed {
            ((v << self.shift) as i64) >> self.shift
        } else {
            v as i64
        }
    }
    fn end(&self) -> usize {
        self.offset + self.size
    }
}

#[derive(Clone, Debug)]
enum Accounted {
    None,
    Field(Loc),
    /// The print fmt's condition, with the fields it reads.
    Expr(CExpr, Vec<(String, Loc)>),
    /// A print fmt condition that is true when `field & mask != 0`
    /// ([`CExpr::as_mask_test`]): the common shape, tested without walking
    /// the expression.
    Mask(Loc, u64),
}

/// `common_flags` bits of interrupt context.
const INTERRUPT_FLAGS: u64 = crate::event_format::trace_flags::INTERRUPT as u64;

#[derive(Clone, Debug)]
struct Plan {
    id: u32,
    kind: KmemKind,
    pid: Option<Loc>,
    flags: Option<Loc>,
    call_site: Option<Loc>,
    ptr: Option<Loc>,
    bytes_req: Option<Loc>,
    bytes_alloc: Option<Loc>,
    gfp_flags: Option<Loc>,
    node: Option<Loc>,
    name: Option<Field>,
    pfn: Option<Loc>,
    order: Option<Loc>,
    migratetype: Option<Loc>,
    percpu_refill: Option<Loc>,
    alloc_order: Option<Loc>,
    fallback_order: Option<Loc>,
    alloc_migratetype: Option<Loc>,
    fallback_migratetype: Option<Loc>,
    change_ownership: Option<Loc>,
    accounted: Accounted,
    /// The smallest record holding every located scalar.
    min_len: usize,
}

impl Plan {
    fn locs(&self) -> impl Iterator<Item = &Loc> {
        [
            &self.pid,
            &self.flags,
            &self.call_site,
            &self.ptr,
            &self.bytes_req,
            &self.bytes_alloc,
            &self.gfp_flags,
            &self.node,
            &self.pfn,
            &self.order,
            &self.migratetype,
            &self.percpu_refill,
            &self.alloc_order,
            &self.fallback_order,
            &self.alloc_migratetype,
            &self.fallback_migratetype,
            &self.change_ownership,
        ]
        .into_iter()
        .flatten()
        .chain(match &self.accounted {
            Accounted::Field(l) | Accounted::Mask(l, _) => Some(l),
            _ => None,
        })
        .chain(
            match &self.accounted {
                Accounted::Expr(_, v) => v.as_slice(),
                _ => &[],
            }
            .iter()
            .map(|(_, l)| l),
        )
    }
}

/// Ids below this are looked up in a table rather than searched.
const MAX_DIRECT_ID: usize = 1 << 16;

/// Decodes the kmem events of one log; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct KmemDecoder {
    /// Sorted by id.
    plans: Vec<Plan>,
    /// Index into `plans` + 1 (0: none) by id, for ids below
    /// [`MAX_DIRECT_ID`]; larger ids are binary-searched.
    by_id: Vec<u16>,
    common_type: Loc,
    gfp: Option<FlagTable>,
    warnings: Vec<String>,
}

fn scalar_loc(f: &EventFormat, name: &'static str, warnings: &mut Vec<String>) -> Option<Loc> {
    let fl = f.field(name)?;
    if fl.kind != FieldKind::Scalar || !matches!(fl.size, 1 | 2 | 4 | 8) {
        warnings.push(format!(
            "{}/{} (id {}): field {name} is `{}` of {} bytes, not an integer; ignored",
            f.system, f.name, f.id, fl.type_decl, fl.size
        ));
        return None;
    }
    Some(Loc::new(name, fl.offset, fl.size, fl.signed))
}

/// Field names the accounted expression may read, with `'static` names.
const EXPR_FIELDS: &[&str] = &["gfp_flags", "accounted", "bytes_req", "bytes_alloc", "node"];

fn accounted_source(f: &EventFormat, warnings: &mut Vec<String>) -> Accounted {
    if f.field("accounted").is_some() {
        return match scalar_loc(f, "accounted", warnings) {
            Some(l) => Accounted::Field(l),
            None => Accounted::None,
        };
    }
    let Some(arg) = arg_after_label(&f.print_fmt, "accounted=") else {
        return Accounted::None;
    };
    let parsed = split_ternary(arg).and_then(|(cond, yes, no)| {
        let yes = parse_string_literal(yes)?;
        let no = parse_string_literal(no)?;
        (yes == "true" && no == "false").then_some(cond)
    });
    let why = match parsed.map(CExpr::parse) {
        None => "not `cond ? \"true\" : \"false\"`".to_string(),
        Some(Err(e)) => e.to_string(),
        Some(Ok(expr)) => {
            let mut vars = Vec::new();
            let mut missing = None;
            for name in expr.fields() {
                match EXPR_FIELDS
                    .iter()
                    .find(|n| **n == name.as_str())
                    .and_then(|n| scalar_loc(f, n, warnings))
                {
                    Some(l) => vars.push((name.clone(), l)),
                    None => missing = Some(name.clone()),
                }
            }
            match missing {
                None => {
                    let mask = expr.as_mask_test().and_then(|(name, mask)| {
                        let l = vars.iter().find(|(n, _)| n == name)?.1;
                        (vars.len() == 1).then_some((l, mask))
                    });
                    return match mask {
                        Some((l, mask)) => Accounted::Mask(l, mask),
                        None => Accounted::Expr(expr, vars),
                    };
                }
                Some(m) => format!("it reads REC->{m}, which cannot be located"),
            }
        }
    };
    warnings.push(format!(
        "{}/{} (id {}): cannot compute `accounted` from the print fmt: {why}",
        f.system, f.name, f.id
    ));
    Accounted::None
}

impl KmemDecoder {
    /// Builds the plans from a log's formats; events that are not kmem ones
    /// (system other than `kmem`, unknown names) are ignored. Problems that
    /// make a field unreadable are listed by [`KmemDecoder::warnings`].
    pub fn new(formats: &[EventFormat]) -> Self {
        let mut warnings = Vec::new();
        // By id: a log may hold any number of formats, in any order.
        let mut plans: BTreeMap<u32, Plan> = BTreeMap::new();
        let mut common_type: Option<Loc> = None;
        let mut gfp: Option<(usize, FlagTable)> = None;

        for f in formats {
            if !(f.system == SYSTEM || f.system.is_empty()) {
                continue;
            }
            let Some(kind) = KmemKind::from_event_name(&f.name) else {
                continue;
            };
            let w = &mut warnings;
            if common_type.is_none() {
                common_type = scalar_loc(f, "common_type", w);
            }
            let name = match f.field("name") {
                Some(fl) if fl.is_bytes() => Some(fl.clone()),
                Some(fl) => {
                    w.push(format!(
                        "{}/{} (id {}): field name is `{}`, not a string; ignored",
                        f.system, f.name, f.id, fl.type_decl
                    ));
                    None
                }
                None => None,
            };
            let mut plan = Plan {
                id: f.id,
                kind,
                pid: scalar_loc(f, "common_pid", w),
                flags: scalar_loc(f, "common_flags", w),
                call_site: scalar_loc(f, "call_site", w),
                ptr: scalar_loc(f, "ptr", w),
                bytes_req: scalar_loc(f, "bytes_req", w),
                bytes_alloc: scalar_loc(f, "bytes_alloc", w),
                gfp_flags: scalar_loc(f, "gfp_flags", w),
                node: scalar_loc(f, "node", w),
                name,
                pfn: scalar_loc(f, "pfn", w),
                order: scalar_loc(f, "order", w),
                migratetype: scalar_loc(f, "migratetype", w),
                percpu_refill: scalar_loc(f, "percpu_refill", w),
                alloc_order: scalar_loc(f, "alloc_order", w),
                fallback_order: scalar_loc(f, "fallback_order", w),
                alloc_migratetype: scalar_loc(f, "alloc_migratetype", w),
                fallback_migratetype: scalar_loc(f, "fallback_migratetype", w),
                change_ownership: scalar_loc(f, "change_ownership", w),
                accounted: if kind.is_slab_alloc() {
                    accounted_source(f, w)
                } else {
                    Accounted::None
                },
                min_len: 0,
            };
            plan.min_len = plan.locs().map(Loc::end).max().unwrap_or(0);

            if plan.gfp_flags.is_some() {
                // Prefer kmalloc's table, then the slab ones, then pages'.
                let rank = match kind {
                    KmemKind::Kmalloc => 0,
                    KmemKind::KmemCacheAlloc => 1,
                    k if k.is_slab_alloc() => 2,
                    _ => 3,
                };
                if gfp.as_ref().is_none_or(|(r, _)| rank < *r) {
                    match FlagTable::for_field(&f.print_fmt, "gfp_flags") {
                        Ok(Some(t)) => gfp = Some((rank, t)),
                        Ok(None) => {}
                        Err(e) => w.push(format!(
                            "{}/{} (id {}): GFP flag names unreadable: {e}",
                            f.system, f.name, f.id
                        )),
                    }
                }
            }

            if plans.insert(f.id, plan).is_some() {
                w.push(format!(
                    "{}/{}: id {} given twice; the later format is used",
                    f.system, f.name, f.id
                ));
            }
        }
        let plans: Vec<Plan> = plans.into_values().collect();

        let mut by_id = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            let id = p.id as usize;
            if id < MAX_DIRECT_ID && i < usize::from(u16::MAX) {
                if by_id.len() <= id {
                    by_id.resize(id + 1, 0);
                }
                by_id[id] = (i + 1) as u16;
            }
        }
        KmemDecoder {
            plans,
            by_id,
            common_type: common_type.unwrap_or(Loc::new("common_type", 0, 2, false)),
            gfp: gfp.map(|(_, t)| t),
            warnings,
        }
    }

    #[inline]
    fn plan(&self, id: u32) -> Option<&Plan> {
        if let Some(&i) = self.by_id.get(id as usize) {
            return if i == 0 {
                None
            } else {
                self.plans.get(usize::from(i) - 1)
            };
        }
        if self
            .plans
            .last()
            .is_none_or(|p| (p.id as usize) < MAX_DIRECT_ID)
        {
            return None;
        }
        self.plans
            .binary_search_by_key(&id, |p| p.id)
            .ok()
            .map(|i| &self.plans[i])
    }

    /// The kind of event `id`, if it is a kmem event of this log.
    pub fn kind_of(&self, id: u32) -> Option<KmemKind> {
        self.plan(id).map(|p| p.kind)
    }

    /// The kmem event ids of this log with their kinds, by id.
    pub fn ids(&self) -> impl Iterator<Item = (u32, KmemKind)> + '_ {
        self.plans.iter().map(|p| (p.id, p.kind))
    }

    /// True if this log's format of `kind` records the slab cache name.
    pub fn has_cache_name(&self, kind: KmemKind) -> bool {
        self.plans
            .iter()
            .any(|p| p.kind == kind && p.name.is_some())
    }

    /// The GFP flag names of this log's kernel (from `kmalloc`'s print fmt,
    /// or another kmem event's).
    pub fn gfp_table(&self) -> Option<&FlagTable> {
        self.gfp.as_ref()
    }

    /// Problems found in the formats (fields that cannot be read).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Reads `common_type` from a record.
    pub fn event_id<E: Endian>(&self, e: E, payload: &[u8]) -> Result<u32, KmemError> {
        let l = &self.common_type;
        e.read_uint(payload, l.offset, l.size)
            .map(|v| v as u32)
            .ok_or(KmemError {
                id: None,
                kind: None,
                field: l.name,
                offset: l.offset,
                size: l.size,
                payload_len: payload.len(),
                error: KmemErrorKind::Truncated,
            })
    }

    /// Decodes a record (the event payload, starting with `common_type`).
    /// `Ok(None)` for events that are not kmem events.
    pub fn decode<'a, E: Endian>(
        &self,
        e: E,
        payload: &'a [u8],
    ) -> Result<Option<KmemEvent<'a>>, KmemError> {
        let id = self.event_id(e, payload)?;
        self.decode_id(e, id, payload)
    }

    /// Like [`KmemDecoder::decode`] when the caller has already read the id.
    #[inline]
    pub fn decode_id<'a, E: Endian>(
        &self,
        e: E,
        id: u32,
        p: &'a [u8],
    ) -> Result<Option<KmemEvent<'a>>, KmemError> {
        match self.decode_id_raw_name(e, id, p)? {
            None => Ok(None),
            Some((mut ev, name)) => {
                if let Some(n) = name {
                    ev.cache_name = Some(n.to_str()?);
                }
                Ok(Some(ev))
            }
        }
    }

    /// Like [`KmemDecoder::decode`], except that the cache name is not
    /// checked to be UTF-8: the event's `cache_name` is `None` and the
    /// name's bytes come beside it, for callers that recognise names they
    /// have already seen by their bytes and check only new ones
    /// ([`RawName::to_str`] gives `decode`'s result, error included).
    #[inline]
    pub fn decode_raw_name<'a, E: Endian>(
        &self,
        e: E,
        payload: &'a [u8],
    ) -> Result<Option<(KmemEvent<'a>, Option<RawName<'a>>)>, KmemError> {
        let id = self.event_id(e, payload)?;
        self.decode_id_raw_name(e, id, payload)
    }

    /// [`KmemDecoder::decode_raw_name`] when the caller has already read
    /// the id.
    #[inline]
    pub fn decode_id_raw_name<'a, E: Endian>(
        &self,
        e: E,
        id: u32,
        p: &'a [u8],
    ) -> Result<Option<(KmemEvent<'a>, Option<RawName<'a>>)>, KmemError> {
        let Some(plan) = self.plan(id) else {
            return Ok(None);
        };
        let fail = |l_name: &'static str, offset: usize, size: usize, error| KmemError {
            id: Some(id),
            kind: Some(plan.kind),
            field: l_name,
            offset,
            size,
            payload_len: p.len(),
            error,
        };
        if p.len() < plan.min_len {
            // Name the first field that does not fit.
            let l = plan
                .locs()
                .filter(|l| l.end() > p.len())
                .min_by_key(|l| l.offset)
                .copied()
                .unwrap_or(self.common_type);
            return Err(fail(l.name, l.offset, l.size, KmemErrorKind::Truncated));
        }
        let u = |l: &Option<Loc>| l.as_ref().map_or(0, |l| l.u64(e, p));
        let i32_of = |l: &Option<Loc>| l.as_ref().map(|l| l.i64(e, p) as i32);

        let cache_name = match &plan.name {
            None => None,
            Some(f) => {
                let bytes = f.read_bytes(e, p).ok_or_else(|| {
                    fail("name", f.offset, f.size, KmemErrorKind::StringOutOfBounds)
                })?;
                Some(RawName {
                    bytes,
                    not_utf8: fail("name", f.offset, f.size, KmemErrorKind::StringNotUtf8),
                })
            }
        };
        let accounted = match &plan.accounted {
            Accounted::None => None,
            Accounted::Field(l) => Some(l.u64(e, p) != 0),
            Accounted::Mask(l, mask) => Some(l.i64(e, p) as u64 & mask != 0),
            Accounted::Expr(expr, vars) => expr
                .eval(&|name| {
                    vars.iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, l)| l.i64(e, p) as u64)
                })
                .ok()
                .map(|v| v != 0),
        };
        let pfn = plan
            .pfn
            .as_ref()
            .map(|l| (l.u64(e, p), l.all_ones))
            .and_then(|(v, ones)| (v != ones).then_some(v));
        let extfrag = (plan.kind == KmemKind::MmPageAllocExtfrag).then(|| Extfrag {
            alloc_order: i32_of(&plan.alloc_order).unwrap_or(0),
            fallback_order: i32_of(&plan.fallback_order).unwrap_or(0),
            alloc_migratetype: i32_of(&plan.alloc_migratetype).unwrap_or(0),
            fallback_migratetype: i32_of(&plan.fallback_migratetype).unwrap_or(0),
            change_ownership: i32_of(&plan.change_ownership),
        });

        let ev = KmemEvent {
            kind: plan.kind,
            id,
            pid: i32_of(&plan.pid).unwrap_or(0),
            in_interrupt: u(&plan.flags) & INTERRUPT_FLAGS != 0,
            call_site: u(&plan.call_site),
            ptr: u(&plan.ptr),
            bytes_req: u(&plan.bytes_req),
            bytes_alloc: u(&plan.bytes_alloc),
            gfp_flags: u(&plan.gfp_flags),
            node: i32_of(&plan.node),
            cache_name: None,
            accounted,
            pfn,
            order: u(&plan.order) as u32,
            migratetype: i32_of(&plan.migratetype),
            percpu_refill: i32_of(&plan.percpu_refill),
            extfrag,
        };
        Ok(Some((ev, cache_name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endian::{BigEndian, LittleEndian, RunTimeEndian};

    const COMMON: &str = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
";

    const GFP_TABLE_5X: &str = r#"(REC->gfp_flags) ? __print_flags(REC->gfp_flags, "|", {(unsigned long)(((( gfp_t)(0x400u|0x800u)) | (( gfp_t)0x40u) | (( gfp_t)0x80u)) | (( gfp_t)0x400000u)), "GFP_KERNEL_ACCOUNT"}, {(unsigned long)((( gfp_t)(0x400u|0x800u)) | (( gfp_t)0x40u) | (( gfp_t)0x80u)), "GFP_KERNEL"}, {(unsigned long)(( gfp_t)0x100u), "__GFP_ZERO"}, {(unsigned long)(( gfp_t)0x200000u), "__GFP_THISNODE"}) : "none""#;

    /// Modelled on Linux 5.10's kmalloc_node (x86_64): `gfp_t` of 4 bytes.
    fn kmalloc_node_5x(id: u32) -> String {
        format!(
            "name: kmalloc_node\nID: {id}\nformat:\n{COMMON}\n\
\tfield:unsigned long call_site;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * ptr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:size_t bytes_req;\toffset:24;\tsize:8;\tsigned:0;
\tfield:size_t bytes_alloc;\toffset:32;\tsize:8;\tsigned:0;
\tfield:gfp_t gfp_flags;\toffset:40;\tsize:4;\tsigned:0;
\tfield:int node;\toffset:44;\tsize:4;\tsigned:1;

print fmt: \"call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d\", (void *)REC->call_site, REC->ptr, REC->bytes_req, REC->bytes_alloc, {GFP_TABLE_5X}, REC->node\n"
        )
    }

    fn kmem_cache_alloc_node_5x(id: u32) -> String {
        kmalloc_node_5x(id).replace("name: kmalloc_node", "name: kmem_cache_alloc_node")
    }

    /// 6.18 x86_64 kmem_cache_alloc (with `name` and `accounted`).
    fn kmem_cache_alloc_618(id: u32) -> String {
        format!(
            "name: kmem_cache_alloc\nID: {id}\nformat:\n{COMMON}\n\
\tfield:unsigned long call_site;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * ptr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;
\tfield:size_t bytes_req;\toffset:32;\tsize:8;\tsigned:0;
\tfield:size_t bytes_alloc;\toffset:40;\tsize:8;\tsigned:0;
\tfield:unsigned long gfp_flags;\toffset:48;\tsize:8;\tsigned:0;
\tfield:int node;\toffset:56;\tsize:4;\tsigned:1;
\tfield:bool accounted;\toffset:60;\tsize:1;\tsigned:0;

print fmt: \"call_site=%pS ptr=%p name=%s bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d accounted=%s\", (void *)REC->call_site, REC->ptr, __get_str(name), REC->bytes_req, REC->bytes_alloc, {GFP_TABLE_5X}, REC->node, REC->accounted ? \"true\" : \"false\"\n"
        )
    }

    /// 6.1 armhf kmalloc: 4-byte longs, accounted computed in the print fmt.
    fn kmalloc_61_armhf(id: u32) -> String {
        format!(
            "name: kmalloc\nID: {id}\nformat:\n{COMMON}\n\
\tfield:unsigned long call_site;\toffset:8;\tsize:4;\tsigned:0;
\tfield:const void * ptr;\toffset:12;\tsize:4;\tsigned:0;
\tfield:size_t bytes_req;\toffset:16;\tsize:4;\tsigned:0;
\tfield:size_t bytes_alloc;\toffset:20;\tsize:4;\tsigned:0;
\tfield:unsigned long gfp_flags;\toffset:24;\tsize:4;\tsigned:0;
\tfield:int node;\toffset:28;\tsize:4;\tsigned:1;

print fmt: \"call_site=%pS ptr=%p bytes_req=%zu bytes_alloc=%zu gfp_flags=%s node=%d accounted=%s\", (void *)REC->call_site, REC->ptr, REC->bytes_req, REC->bytes_alloc, {GFP_TABLE_5X}, REC->node, (1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u))) ? \"true\" : \"false\"\n"
        )
    }

    fn mm_page_alloc_s390x(id: u32) -> String {
        format!(
            "name: mm_page_alloc\nID: {id}\nformat:\n{COMMON}\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int order;\toffset:16;\tsize:4;\tsigned:0;
\tfield:unsigned long gfp_flags;\toffset:24;\tsize:8;\tsigned:0;
\tfield:int migratetype;\toffset:32;\tsize:4;\tsigned:1;

print fmt: \"page=%p pfn=0x%lx order=%d migratetype=%d gfp_flags=%s\", REC->pfn != -1UL ? (vmemmap + (REC->pfn)) : ((void *)0), REC->pfn != -1UL ? REC->pfn : 0, REC->order, REC->migratetype, {GFP_TABLE_5X}\n"
        )
    }

    fn extfrag_armhf(id: u32) -> String {
        format!(
            "name: mm_page_alloc_extfrag\nID: {id}\nformat:\n{COMMON}\n\
\tfield:unsigned long pfn;\toffset:8;\tsize:4;\tsigned:0;
\tfield:int alloc_order;\toffset:12;\tsize:4;\tsigned:1;
\tfield:int fallback_order;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int alloc_migratetype;\toffset:20;\tsize:4;\tsigned:1;
\tfield:int fallback_migratetype;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int change_ownership;\toffset:28;\tsize:4;\tsigned:1;

print fmt: \"page=%p pfn=0x%lx\", REC->pfn, REC->pfn\n"
        )
    }

    fn fmt(text: &str, system: &str) -> EventFormat {
        EventFormat::parse(text, Some(system)).unwrap()
    }

    fn rec<E: Endian>(e: E, id: u16, pid: i32, fields: &[(u64, usize)]) -> Vec<u8> {
        let mut v = Vec::new();
        e.write_uint(&mut v, u64::from(id), 2);
        v.extend_from_slice(&[0, 0]);
        e.write_uint(&mut v, pid as u32 as u64, 4);
        for &(val, size) in fields {
            e.write_uint(&mut v, val, size);
        }
        v
    }

    #[test]
    fn kinds_round_trip() {
        for k in KmemKind::ALL {
            assert_eq!(KmemKind::from_event_name(k.name()), Some(k));
            assert_eq!(k.to_string(), k.name());
            assert_eq!(
                [k.is_slab_alloc(), k.is_slab_free(), k.is_page_event()]
                    .iter()
                    .filter(|b| **b)
                    .count(),
                1
            );
        }
        assert_eq!(
            KmemKind::from_event_name("mm_pagevec_free"),
            Some(KmemKind::MmPageFreeBatched)
        );
        assert_eq!(KmemKind::from_event_name("sched_switch"), None);
    }

    #[test]
    fn formats_in_any_order_and_given_twice_keep_the_later() {
        // Descending ids, each id twice: kmalloc_node first, then
        // kmem_cache_alloc_node under the same id.
        let mut formats = Vec::new();
        for id in (300..340).rev() {
            formats.push(fmt(&kmalloc_node_5x(id), "kmem"));
            formats.push(fmt(&kmem_cache_alloc_node_5x(id), "kmem"));
        }
        let d = KmemDecoder::new(&formats);
        let ids: Vec<(u32, KmemKind)> = d.ids().collect();
        let want: Vec<(u32, KmemKind)> = (300..340)
            .map(|id| (id, KmemKind::KmemCacheAllocNode))
            .collect();
        assert_eq!(ids, want);
        assert_eq!(d.warnings().len(), 40, "{:?}", d.warnings());
        assert!(d.warnings()[0].contains("id 339 given twice"));
        assert_eq!(d.kind_of(317), Some(KmemKind::KmemCacheAllocNode));
    }

    #[test]
    fn legacy_node_events_and_non_kmem_ignored() {
        let formats = vec![
            fmt(&kmalloc_node_5x(300), "kmem"),
            fmt(&kmem_cache_alloc_node_5x(301), "kmem"),
            // Same name in another system: ignored.
            fmt(&kmalloc_node_5x(302), "other"),
        ];
        let d = KmemDecoder::new(&formats);
        assert!(d.warnings().is_empty(), "{:?}", d.warnings());
        assert_eq!(d.kind_of(300), Some(KmemKind::KmallocNode));
        assert_eq!(d.kind_of(301), Some(KmemKind::KmemCacheAllocNode));
        assert_eq!(d.kind_of(302), None);
        assert_eq!(d.ids().count(), 2);
        assert!(!d.has_cache_name(KmemKind::KmemCacheAllocNode));

        let p = rec(
            LittleEndian,
            300,
            42,
            &[
                (0xffff_ffff_8123_4567, 8),
                (0xffff_8880_0000_1000, 8),
                (100, 8),
                (128, 8),
                (0xdc0, 4),
                (1, 4),
            ],
        );
        let ev = d.decode(LittleEndian, &p).unwrap().unwrap();
        assert_eq!(ev.kind, KmemKind::KmallocNode);
        assert_eq!(ev.pid, 42);
        assert_eq!(ev.call_site, 0xffff_ffff_8123_4567);
        assert_eq!(ev.ptr, 0xffff_8880_0000_1000);
        assert_eq!((ev.bytes_req, ev.bytes_alloc), (100, 128));
        assert_eq!(ev.gfp_flags, 0xdc0);
        assert_eq!(ev.node, Some(1));
        assert_eq!(ev.cache_name, None);
        assert_eq!(ev.accounted, None); // the 5.x print fmt has no accounted=
        assert_eq!(ev.pfn, None);
        assert_eq!(
            d.gfp_table().unwrap().decode(ev.gfp_flags).to_string(),
            "GFP_KERNEL|__GFP_ZERO"
        );

        // An unknown id, a truncated record.
        let other = rec(LittleEndian, 7, 1, &[]);
        assert_eq!(d.decode(LittleEndian, &other), Ok(None));
        let e = d.decode(LittleEndian, &p[..44]).unwrap_err();
        assert_eq!(
            (e.field, e.offset, e.size, e.payload_len),
            ("node", 44, 4, 44)
        );
        assert_eq!(e.error, KmemErrorKind::Truncated);
        assert!(
            e.to_string()
                .contains("kmem/kmalloc_node (id 300): field node at offset 44..48"),
            "{e}"
        );
        let e = d.decode(LittleEndian, &p[..1]).unwrap_err();
        assert_eq!(e.field, "common_type");
    }

    #[test]
    fn kmem_cache_alloc_618_with_name() {
        let d = KmemDecoder::new(&[fmt(&kmem_cache_alloc_618(659), "kmem")]);
        assert!(d.has_cache_name(KmemKind::KmemCacheAlloc));
        let mut p = rec(
            LittleEndian,
            659,
            7,
            &[(0xffff_ffff_8100_0000, 8), (0xffff_8880_1234_5678, 8)],
        );
        // name: __data_loc at 24 -> 8 bytes at offset 64.
        LittleEndian.write_uint(&mut p, (8 << 16) | 64, 4);
        p.extend_from_slice(&[0; 4]);
        for (v, s) in [
            (200u64, 8),
            (256, 8),
            (0xcc0, 8),
            ((-1i64) as u64, 4),
            (1, 1),
        ] {
            LittleEndian.write_uint(&mut p, v, s);
        }
        p.extend_from_slice(&[0; 3]);
        assert_eq!(p.len(), 64);
        p.extend_from_slice(b"dentry\0\0");
        let ev = d.decode(LittleEndian, &p).unwrap().unwrap();
        assert_eq!(ev.cache_name, Some("dentry"));
        assert_eq!(ev.node, Some(-1));
        assert_eq!(ev.accounted, Some(true));
        assert_eq!(
            (ev.bytes_req, ev.bytes_alloc, ev.gfp_flags),
            (200, 256, 0xcc0)
        );

        // The locator pointing outside the record; a name that is not UTF-8.
        let mut bad = p.clone();
        bad[24..28].copy_from_slice(&((8u32 << 16) | 70).to_le_bytes());
        let e = d.decode(LittleEndian, &bad).unwrap_err();
        assert_eq!(
            (e.field, e.error),
            ("name", KmemErrorKind::StringOutOfBounds)
        );
        let mut bad = p.clone();
        bad[64] = 0xff;
        let e = d.decode(LittleEndian, &bad).unwrap_err();
        assert_eq!(e.error, KmemErrorKind::StringNotUtf8);

        // decode_raw_name: the same event, the name's bytes beside it, and
        // decode's error from to_str.
        let (raw_ev, name) = d.decode_raw_name(LittleEndian, &p).unwrap().unwrap();
        let name = name.unwrap();
        assert_eq!(name.bytes, b"dentry");
        assert_eq!(
            KmemEvent {
                cache_name: Some(name.to_str().unwrap()),
                ..raw_ev
            },
            ev
        );
        let (_, name) = d.decode_raw_name(LittleEndian, &bad).unwrap().unwrap();
        assert_eq!(name.unwrap().to_str(), Err(e));
    }

    #[test]
    fn kmalloc_61_accounted_from_print_fmt() {
        let d = KmemDecoder::new(&[fmt(&kmalloc_61_armhf(509), "kmem")]);
        assert!(d.warnings().is_empty(), "{:?}", d.warnings());
        for (gfp, want) in [(0x400cc0u64, true), (0xcc0, false)] {
            let p = rec(
                LittleEndian,
                509,
                1,
                &[
                    (0xc040_0000, 4),
                    (0xc22c_c1f0, 4),
                    (8, 4),
                    (64, 4),
                    (gfp, 4),
                    (u64::from(u32::MAX), 4),
                ],
            );
            let ev = d.decode(LittleEndian, &p).unwrap().unwrap();
            assert_eq!(ev.accounted, Some(want));
            assert_eq!(ev.node, Some(-1));
            assert_eq!(ev.ptr, 0xc22c_c1f0);
        }
        let t = d.gfp_table().unwrap();
        assert_eq!(
            t.decode(0x400dc0).to_string(),
            "GFP_KERNEL_ACCOUNT|__GFP_ZERO"
        );
        // The common shape is tested as a mask, not walked per event.
        assert!(matches!(d.plans[0].accounted, Accounted::Mask(_, 0x400000)));

        // Another shape is walked, with the same fields located.
        let text = kmalloc_61_armhf(509).replace(
            "(1 && (REC->gfp_flags & ( unsigned long)(( gfp_t)0x400000u)))",
            "((REC->gfp_flags & 0x400000u) && REC->bytes_req > 8)",
        );
        let d = KmemDecoder::new(&[fmt(&text, "kmem")]);
        assert!(d.warnings().is_empty(), "{:?}", d.warnings());
        assert!(matches!(d.plans[0].accounted, Accounted::Expr(..)));
        for (gfp, req, want) in [
            (0x400cc0u64, 9, true),
            (0x400cc0, 8, false),
            (0xcc0, 9, false),
        ] {
            let p = rec(
                LittleEndian,
                509,
                1,
                &[(0, 4), (0, 4), (req, 4), (64, 4), (gfp, 4), (0, 4)],
            );
            assert_eq!(
                d.decode(LittleEndian, &p).unwrap().unwrap().accounted,
                Some(want)
            );
        }
    }

    #[test]
    fn ids_past_the_direct_table_are_found() {
        let d = KmemDecoder::new(&[
            fmt(&kmalloc_61_armhf(70_000), "kmem"),
            fmt(&extfrag_armhf(3), "kmem"),
        ]);
        assert_eq!(d.kind_of(70_000), Some(KmemKind::Kmalloc));
        assert_eq!(d.kind_of(3), Some(KmemKind::MmPageAllocExtfrag));
        assert_eq!(d.kind_of(2), None);
        assert_eq!(d.kind_of(4), None);
        assert_eq!(d.kind_of(69_999), None);
    }

    #[test]
    fn mm_page_alloc_big_endian_and_no_pfn() {
        let d = KmemDecoder::new(&[fmt(&mm_page_alloc_s390x(504), "kmem")]);
        let p = rec(
            BigEndian,
            504,
            113,
            &[(0x7e9d5, 8), (2, 4), (0, 4), (0x100cca, 8), (1, 4)],
        );
        let ev = d.decode(BigEndian, &p).unwrap().unwrap();
        assert_eq!(ev.kind, KmemKind::MmPageAlloc);
        assert_eq!(
            (ev.pid, ev.pfn, ev.order, ev.migratetype),
            (113, Some(0x7e9d5), 2, Some(1))
        );
        assert_eq!(ev.gfp_flags, 0x100cca);
        let ev = d.decode(RunTimeEndian::Big, &p).unwrap().unwrap();
        assert_eq!(ev.pfn, Some(0x7e9d5));
        let p = rec(
            BigEndian,
            504,
            113,
            &[(u64::MAX, 8), (2, 4), (0, 4), (0, 8), (1, 4)],
        );
        assert_eq!(d.decode(BigEndian, &p).unwrap().unwrap().pfn, None);
        // Read with the wrong byte order, the id is not a kmem one.
        assert_eq!(d.decode(LittleEndian, &p), Ok(None));
    }

    #[test]
    fn extfrag_and_missing_fields() {
        let d = KmemDecoder::new(&[fmt(&extfrag_armhf(501), "kmem")]);
        let p = rec(
            LittleEndian,
            501,
            5,
            &[(0xffff_ffff, 4), (0, 4), (3, 4), (1, 4), (0, 4), (1, 4)],
        );
        let ev = d.decode(LittleEndian, &p).unwrap().unwrap();
        assert_eq!(ev.pfn, None); // 32-bit -1UL
        assert_eq!(
            ev.extfrag,
            Some(Extfrag {
                alloc_order: 0,
                fallback_order: 3,
                alloc_migratetype: 1,
                fallback_migratetype: 0,
                change_ownership: Some(1)
            })
        );
        assert_eq!(
            (ev.call_site, ev.gfp_flags, ev.node, ev.migratetype),
            (0, 0, None, None)
        );
        assert!(d.gfp_table().is_none());
    }

    #[test]
    fn odd_formats_warn_not_panic() {
        let text = format!(
            "name: kfree\nID: 9\nformat:\n{COMMON}\n\
\tfield:char call_site[3];\toffset:8;\tsize:3;\tsigned:0;
\tfield:const void * ptr;\toffset:12;\tsize:16;\tsigned:0;

print fmt: \"\"\n"
        );
        let d = KmemDecoder::new(&[fmt(&text, "kmem")]);
        assert_eq!(d.warnings().len(), 2, "{:?}", d.warnings());
        let p = rec(LittleEndian, 9, 1, &[]);
        let ev = d.decode(LittleEndian, &p).unwrap().unwrap();
        assert_eq!((ev.call_site, ev.ptr), (0, 0));

        // An accounted= argument that cannot be evaluated.
        let text =
            kmalloc_61_armhf(5).replace("(1 && (REC->gfp_flags", "(CONFIG_X && (REC->gfp_flags");
        let d = KmemDecoder::new(&[fmt(&text, "kmem")]);
        assert_eq!(d.warnings().len(), 1, "{:?}", d.warnings());
        assert!(d.warnings()[0].contains("CONFIG_X"));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..80),
            id in 0u16..4,
        ) {
            let d = KmemDecoder::new(&[
                fmt(&kmalloc_node_5x(0), "kmem"),
                fmt(&kmem_cache_alloc_618(1), "kmem"),
                fmt(&mm_page_alloc_s390x(2), "kmem"),
                fmt(&extfrag_armhf(3), "kmem"),
            ]);
            let mut p = payload.clone();
            if p.len() >= 2 {
                p[0..2].copy_from_slice(&id.to_le_bytes());
            }
            let _ = d.decode(LittleEndian, &p);
            let _ = d.decode(BigEndian, &payload);
        }
    }
}
