//! Kernel stacks recorded with events: `ftrace/kernel_stack` records.
//!
//! The recorder has the kernel take a stack with every `mm_page_alloc`
//! (the event trigger `stacktrace` in its own instance): the kernel then
//! writes a `kernel_stack` record right after the event, on the same CPU,
//! in the same context (an interrupt that comes in between writes its own
//! event and stack before the interrupted one's stack: they nest). The
//! record's format is in the log like any event's:
//!
//! ```text
//! field:int size;                offset:8;   size:4;
//! field:unsigned long caller[8]; offset:16;  size:64;   (x86_64, s390x)
//! field:unsigned long caller[8]; offset:12;  size:32;   (armhf: 4-byte longs)
//! ```
//!
//! `caller[8]` is only the format's declaration: the record holds `size`
//! entries (the kernel sizes the record to the stack it took). Kernels
//! before 5.2 filled a fixed array and ended a short stack with `ULONG_MAX`
//! (or left zeros): both end the frames here. Each entry is a return
//! address in the recorded kernel's `long` and byte order.

use crate::log::Log;
use kmemtrace_kernel::{kmem, Endian, EventFormat, Field, FieldKind, KmemKind};

mod scope;
pub use scope::StackScope;

/// The META `other` name saying that stacks were asked for (its text: a
/// line an event, its name and trigger, `kmem:mm_page_alloc stacktrace`;
/// lines for other events, such as the stall events' begins, follow that
/// one). kmemtraced writes it once the kernel took the triggers; `kmemtrace-capture.sh` leaves a
/// `page_stacks` file in its dump, which `--import` carries under this
/// name. A log without it has no stacks whatever formats it holds (tracefs
/// dumps copy every `ftrace` format).
pub const PAGE_STACKS_META: &str = "page_stacks";

/// What the recorders write into [`PAGE_STACKS_META`] for the plain
/// trigger ([`page_stacks_text`] for any).
pub const PAGE_STACKS_TEXT: &str = "kmem:mm_page_alloc stacktrace\n";

/// The [`PAGE_STACKS_META`] text for `trigger` as written to
/// `mm_page_alloc`'s `trigger` file.
pub fn page_stacks_text(trigger: &str) -> String {
    format!("kmem:mm_page_alloc {trigger}\n")
}

/// The events of a [`PAGE_STACKS_META`] text, `(system, name)` a line.
pub fn stacked_events(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next()?.split_once(':'))
}

/// The [`PAGE_STACKS_META`] line of an event other than `mm_page_alloc`
/// the kernel takes a stack with (`system:name`), its trigger `trigger`.
pub fn stacked_event_line(tracepoint: &str, trigger: &str) -> String {
    format!("{tracepoint} {trigger}\n")
}

/// `(system, name)` of the page allocation event, as [`stacked_events`]
/// yields it.
fn page_alloc_event() -> (&'static str, &'static str) {
    (kmem::SYSTEM, KmemKind::MmPageAlloc.name())
}

/// Whether the log says stacks were taken with page allocations.
pub fn page_stacks_recorded(log: &Log) -> bool {
    log.meta(kmemtrace_format::records::MetaKind::Other, PAGE_STACKS_META)
        .is_some_and(|m| {
            stacked_events(&String::from_utf8_lossy(&m.content)).any(|e| e == page_alloc_event())
        })
}

/// The lowest page-frame bit a sample of page stacks tests (see
/// [`pfn_sample_filter`]).
pub const PFN_SAMPLE_SHIFT: u32 = 8;

/// The trigger filter that takes stacks for 1 in `one_in` page frames (a
/// power of two): those whose number has the `log2(one_in)` bits from
/// [`PFN_SAMPLE_SHIFT`] up clear, 1 MiB regions of 4 KiB pages. Not the
/// lowest bits: the buddy allocator hands out the first page of each block
/// it splits, aligned, so low-bit samples favour the callers that take
/// fresh blocks (docs/benchmarks.md, "Page stacks for a sample"). Blocks
/// aligned past the tested bits (order 9 and up for 1 in 16) pass more
/// often, as [`PageStackSample::weight`] counts.
pub fn pfn_sample_filter(one_in: u32) -> String {
    let mask = u64::from(one_in.saturating_sub(1)) << PFN_SAMPLE_SHIFT;
    format!("!(pfn & {mask:#x})")
}

/// How page allocations' stacks were sampled, read back from the trigger
/// the log says the kernel took (a top-level `&&` term `!(pfn & MASK)`,
/// the mask in decimal or hex, as [`pfn_sample_filter`] writes it or any
/// other: [`StackScope`]); every allocation's where the trigger has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStackSample {
    /// The page-frame bits that must be clear (0: every allocation).
    pub mask: u64,
}

impl PageStackSample {
    pub const EVERY: PageStackSample = PageStackSample { mask: 0 };

    /// The sample of a `mm_page_alloc` trigger.
    pub fn of_trigger(trigger: &str) -> PageStackSample {
        StackScope::of_meta(&page_stacks_text(trigger)).sample
    }

    /// The sample the log's page stacks were taken with.
    pub fn of_log(log: &Log) -> PageStackSample {
        log.meta(kmemtrace_format::records::MetaKind::Other, PAGE_STACKS_META)
            .map_or(Self::EVERY, |m| {
                StackScope::of_meta(&String::from_utf8_lossy(&m.content)).sample
            })
    }

    /// Whether stacks were taken for a sample, not with every allocation.
    pub fn is_sampled(&self) -> bool {
        self.mask != 0
    }

    /// 1 in how many page frames.
    pub fn one_in(&self) -> u64 {
        1 << self.mask.count_ones()
    }

    /// Whether the kernel took a stack with a successful allocation of
    /// `pfn`.
    pub fn takes(&self, pfn: u64) -> bool {
        pfn & self.mask == 0
    }

    /// The allocations of `order` one sampled allocation stands for: an
    /// order-o block's frame number has its o low bits clear, so only the
    /// mask's bits from o up select it.
    pub fn weight(&self, order: u32) -> u64 {
        let low = 1u64.checked_shl(order).map_or(u64::MAX, |b| b - 1);
        1 << (self.mask & !low).count_ones()
    }

    /// The unit the sample takes or leaves whole: frames that differ only
    /// below the mask's lowest bit (256-frame regions for `0xf00`). Its
    /// allocations are sampled together, so the estimate's uncertainty
    /// is counted in regions.
    pub fn region(&self, pfn: u64) -> u64 {
        pfn >> self.mask.trailing_zeros().min(63)
    }

    /// The 95 % margin of an estimate of `weight` per sampled allocation
    /// whose sampled allocations fell `counts` to a region (Horvitz and
    /// Thompson's variance with each region taken with probability
    /// 1/`weight`): `weight` x 1.96 / sqrt(n) where each is alone in its
    /// region, wider as they share regions (frames reused in place).
    pub fn margin(weight: u64, counts: impl IntoIterator<Item = u64>) -> u64 {
        let w = weight as f64;
        let squares: f64 = counts.into_iter().map(|c| (c as f64) * (c as f64)).sum();
        (1.96 * (w * (w - 1.0) * squares).sqrt()).round() as u64
    }

    /// The weights by order, from order 0 to the first of weight 1.
    pub fn weights(&self) -> Vec<u64> {
        let last = 64 - self.mask.leading_zeros();
        (0..=last).map(|o| self.weight(o)).collect()
    }
}

/// The event's system and name.
pub const STACK_SYSTEM: &str = "ftrace";
pub const STACK_EVENT: &str = "kernel_stack";

/// `common_flags` bits of the context an event was recorded in (hard and
/// soft interrupt, NMI; `include/linux/trace_events.h`): an event and the
/// stack taken with it share them.
pub const CONTEXT_FLAGS: u8 = kmemtrace_kernel::event_format::trace_flags::INTERRUPT;

/// Frames of one stack read at most: the kernel's own bound since 5.6
/// (`FTRACE_KSTACK_ENTRIES`, 1,024 entries), deeper than any kernel stack
/// is. A damaged record's size field can claim a stack as long as a
/// sub-buffer, and each frame becomes a function name, some hundred bytes,
/// in every table and document that shows the stack.
pub const MAX_FRAMES: usize = 1024;

/// Reads `kernel_stack` records with the recorded kernel's layout.
#[derive(Clone, Debug)]
pub struct StackReader {
    id: u64,
    pid: Field,
    flags: Option<Field>,
    size: Field,
    caller_offset: usize,
    long: usize,
    /// The allocations the kernel takes a stack with.
    scope: StackScope,
    /// Page allocations take stacks at all: the log says so, or (older
    /// logs) says nothing of which events do.
    page_stacks: bool,
    /// The other events the kernel takes a stack with, by id, sorted.
    other_ids: Vec<u32>,
}

/// One recorded stack, its frames still in the record.
#[derive(Clone, Copy, Debug)]
pub struct KernelStack<'a, E: Endian> {
    /// `common_pid`.
    pub pid: i32,
    /// `common_flags` & [`CONTEXT_FLAGS`].
    pub context: u8,
    frames: &'a [u8],
    long: usize,
    e: E,
}

impl StackReader {
    /// The reader for the log's `kernel_stack` format; `None` if the log
    /// has none (no stacks were recorded).
    pub fn new(log: &Log) -> Option<StackReader> {
        let f = log
            .formats
            .iter()
            .find(|f| f.system == STACK_SYSTEM && f.name == STACK_EVENT)?;
        let mut reader = StackReader::from_format(f, usize::from(log.arch.long_size))?;
        if let Some(m) = log.meta(kmemtrace_format::records::MetaKind::Other, PAGE_STACKS_META) {
            let text = String::from_utf8_lossy(&m.content);
            reader.scope = StackScope::of_meta(&text);
            reader.page_stacks = stacked_events(&text).any(|e| e == page_alloc_event());
            // Each line one lookup (the first format of a name, as a
            // search would find), not a search of the formats.
            let mut ids = std::collections::HashMap::new();
            for f in &log.formats {
                ids.entry((f.system.as_str(), f.name.as_str()))
                    .or_insert(f.id);
            }
            reader.other_ids = stacked_events(&text)
                .filter(|&e| e != page_alloc_event())
                .filter_map(|e| ids.get(&e).copied())
                .collect();
            reader.other_ids.sort_unstable();
            reader.other_ids.dedup();
        }
        Some(reader)
    }

    /// The reader for `format`; `long_size` (4 or 8) is used where the
    /// `caller` field does not say its element size.
    pub fn from_format(format: &EventFormat, long_size: usize) -> Option<StackReader> {
        let caller = format.field("caller")?;
        let long = match caller.kind {
            FieldKind::Array { len } if len > 0 && caller.size % len == 0 => caller.size / len,
            _ => long_size,
        };
        if long != 4 && long != 8 {
            return None;
        }
        Some(StackReader {
            id: u64::from(format.id),
            pid: format.field("common_pid")?.clone(),
            flags: format.field("common_flags").cloned(),
            size: format.field("size")?.clone(),
            caller_offset: caller.offset,
            long,
            scope: StackScope::default(),
            page_stacks: true,
            other_ids: Vec::new(),
        })
    }

    /// Whether the kernel took a stack with an event of id `id` other than
    /// a page allocation (the log says which: [`PAGE_STACKS_META`]). The
    /// recorders set those triggers without a filter: in every context.
    #[inline]
    pub fn takes_tracepoint_stack(&self, id: u32) -> bool {
        self.other_ids.binary_search(&id).is_ok()
    }

    /// Whether the kernel took a stack with `ev`: a page allocation, of a
    /// task and context the trigger's filter leaves in. Only those wait
    /// for one.
    #[inline]
    pub fn takes_stack(&self, ev: &kmemtrace_kernel::KmemEvent<'_>) -> bool {
        ev.kind == kmemtrace_kernel::kmem::KmemKind::MmPageAlloc
            && self.page_stacks
            && self.scope.takes(ev.pid, ev.in_interrupt)
            && (!self.scope.sample.is_sampled()
                || ev.pfn.is_some_and(|p| self.scope.sample.takes(p)))
    }

    /// How page allocations' stacks were sampled.
    pub fn sample(&self) -> PageStackSample {
        self.scope.sample
    }

    /// Where the entries start in a record, and their size (the recorded
    /// kernel's `long`).
    pub fn layout(&self) -> (usize, usize) {
        (self.caller_offset, self.long)
    }

    /// The stack in `payload`, if the record is a `kernel_stack` (`None`
    /// for any other record, or one too short for its own fields).
    #[inline]
    pub fn read<'a, E: Endian>(&self, e: E, payload: &'a [u8]) -> Option<KernelStack<'a, E>> {
        if e.read_uint(payload, 0, 2)? != self.id {
            return None;
        }
        let pid = self.pid.read_i64(e, payload)? as i32;
        let context = self
            .flags
            .as_ref()
            .and_then(|f| f.read_u64(e, payload))
            .map_or(0, |v| v as u8 & CONTEXT_FLAGS);
        let room = payload.len().checked_sub(self.caller_offset)? / self.long;
        let declared = self.size.read_i64(e, payload)?.max(0) as usize;
        let n = declared.min(room).min(MAX_FRAMES);
        let frames = &payload[self.caller_offset..self.caller_offset + n * self.long];
        Some(KernelStack {
            pid,
            context,
            frames,
            long: self.long,
            e,
        })
    }
}

impl<'a, E: Endian> KernelStack<'a, E> {
    /// The return addresses, innermost first, up to the first 0 or
    /// `ULONG_MAX` (the end marker of kernels before 5.2).
    pub fn frames(&self) -> impl Iterator<Item = u64> + 'a {
        let (long, e) = (self.long, self.e);
        let all_ones = if long == 8 {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        };
        self.frames
            .chunks_exact(long)
            .map(move |c| e.read_uint(c, 0, long).unwrap_or(0))
            .take_while(move |&a| a != 0 && a != all_ones)
    }
}

/// Allocations waiting for the stack the kernel takes right after each,
/// by task and context (pid, in an interrupt): a stack belongs to the
/// latest one waiting of its task and context; one taken in an interrupt
/// that came in between nests inside, so the ones after the match lost
/// theirs. At most [`DEPTH`] wait. The analysis and the exports pair with
/// this one rule; `T` is what each keeps of an allocation.
#[derive(Clone, Debug)]
pub struct Waiting<T> {
    list: Vec<(i32, bool, T)>,
}

/// Allocations waiting at most (process, soft and hard interrupt, NMI);
/// also how many of a block's stacks its own allocations do not take are
/// offered to the previous block's.
pub const DEPTH: usize = 4;

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Waiting { list: Vec::new() }
    }
}

impl<T> Waiting<T> {
    /// Adds one; past the depth the oldest is given up and returned.
    pub fn push(&mut self, pid: i32, in_interrupt: bool, what: T) -> Option<T> {
        let old = (self.list.len() == DEPTH).then(|| self.list.remove(0).2);
        self.list.push((pid, in_interrupt, what));
        old
    }

    /// The allocation a stack of task `pid` in that context was taken
    /// with, if one waits; those after it lost their stacks and go to
    /// `lost`.
    pub fn take(&mut self, pid: i32, in_interrupt: bool, lost: impl FnMut(T)) -> Option<T> {
        let i = self
            .list
            .iter()
            .rposition(|&(p, intr, _)| p == pid && intr == in_interrupt)?;
        self.list.drain(i + 1..).map(|w| w.2).for_each(lost);
        self.list.pop().map(|w| w.2)
    }

    /// What waits, oldest first.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.list.iter().map(|w| &w.2)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Gives up every one: what they were.
    pub fn clear(&mut self) -> Vec<T> {
        self.list.drain(..).map(|w| w.2).collect()
    }

    /// Gives up the ones that are `what`; whether there was one.
    pub fn remove(&mut self, what: &T) -> bool
    where
        T: PartialEq,
    {
        let before = self.list.len();
        self.list.retain(|w| w.2 != *what);
        self.list.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_kernel::{BigEndian, LittleEndian};

    #[test]
    fn the_plain_trigger_text_is_the_constant() {
        assert_eq!(page_stacks_text("stacktrace"), PAGE_STACKS_TEXT);
    }

    #[test]
    fn the_sample_is_read_back_from_the_trigger_the_kernel_took() {
        let of = |t: &str| PageStackSample::of_trigger(t);
        assert_eq!(of("stacktrace"), PageStackSample::EVERY);
        assert_eq!(pfn_sample_filter(16), "!(pfn & 0xf00)");
        let s = of(&format!("stacktrace if {}", pfn_sample_filter(16)));
        assert_eq!((s.mask, s.one_in()), (0xf00, 16));
        // As the recorder writes it beside its own threads' filter, and as
        // the kernel lists it back (`stacktrace:unlimited`), in decimal too.
        let s = of(
            "stacktrace:unlimited if ((common_pid < 100 || common_pid > 102) \
                    || common_flags & 0x58) && !(pfn & 15)",
        );
        assert_eq!((s.mask, s.one_in()), (15, 16));
        assert_eq!(of("stacktrace if pfn & 15"), PageStackSample::EVERY);
        assert_eq!(
            of("stacktrace if !(pfn & 0xfffffffff)"),
            PageStackSample::EVERY
        );
        let s = PageStackSample { mask: 0xf00 };
        assert!(s.takes(0x1_f0ff) && !s.takes(0x1_f100));
        // Blocks of order 9 have bit 8 clear: 1 in 8 of them is taken.
        assert_eq!(
            s.weights(),
            [16, 16, 16, 16, 16, 16, 16, 16, 16, 8, 4, 2, 1]
        );
        assert_eq!(PageStackSample { mask: 15 }.weights(), [16, 8, 4, 2, 1]);
        assert_eq!(PageStackSample::EVERY.weights(), [1]);
        assert_eq!(PageStackSample::EVERY.weight(70), 1);
        assert_eq!(s.region(0x1_f0ff), 0x1_f0);
        // 100 allocations alone in their regions, 16 each: 16 x 1.96 x 10
        // x sqrt(15/16); the same 100 in 4 regions: 5 times as wide.
        let alone = PageStackSample::margin(16, std::iter::repeat_n(1, 100));
        assert_eq!(alone, 304);
        assert_eq!(PageStackSample::margin(16, [25, 25, 25, 25]), 1518);
        assert_eq!(PageStackSample::margin(1, [7]), 0);
        assert!(PageStackSample::EVERY.takes(0x1231));
    }

    #[test]
    fn stacked_events_are_looked_up_once_each() {
        use kmemtrace_format::records::{Meta, MetaKind};
        let mut b =
            kmemtrace_testkit::LogBuilder::new(kmemtrace_kernel::RunTimeEndian::Little, 8, 4096);
        b.format("ftrace", &format_text(16, 8)).unwrap();
        let named = |id: u32| {
            format!("name: kmalloc\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\nprint fmt: \"\"\n")
        };
        b.format("kmem", &named(20)).unwrap();
        let lines = "kmem:kmalloc stacktrace\n".repeat(1000) + "vmscan:absent stacktrace\n";
        b.meta(Meta {
            name: PAGE_STACKS_META.into(),
            ..Meta::new(MetaKind::Other, lines)
        });
        let log = Log::from_bytes("t", &b.build().unwrap()).unwrap();
        let r = StackReader::new(&log).unwrap();
        assert!(r.takes_tracepoint_stack(20) && !r.takes_tracepoint_stack(21));
        // A thousand lines naming it: one id.
        assert_eq!(r.other_ids, [20]);
    }

    fn format(caller_offset: usize, long: usize) -> EventFormat {
        EventFormat::parse(&format_text(caller_offset, long), Some("ftrace")).unwrap()
    }

    fn format_text(caller_offset: usize, long: usize) -> String {
        format!(
            "name: kernel_stack\nID: 4\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:unsigned long caller[8];\toffset:{caller_offset};\tsize:{};\tsigned:0;\n\n\
print fmt: \"\\t=> %ps\\n\", (void *)REC->caller[0]\n",
            8 * long
        )
    }

    fn record<E: Endian>(
        e: E,
        caller_offset: usize,
        long: usize,
        size: i32,
        frames: &[u64],
    ) -> Vec<u8> {
        let mut p = Vec::new();
        e.write_uint(&mut p, 4, 2);
        p.push(0x10 | 0x01); // softirq, irqs off
        p.push(0);
        e.write_uint(&mut p, 77, 4);
        e.write_uint(&mut p, size as u32 as u64, 4);
        p.resize(caller_offset, 0);
        for f in frames {
            e.write_uint(&mut p, *f, long);
        }
        p
    }

    #[test]
    fn every_layout() {
        let frames = [0xc012_3456u64, 0xc0ab_cdef, 0xc000_0010];
        // armhf: little-endian, 4-byte longs, entries at 12.
        let r = StackReader::from_format(&format(12, 4), 4).unwrap();
        let p = record(LittleEndian, 12, 4, 3, &frames);
        let s = r.read(LittleEndian, &p).unwrap();
        assert_eq!((s.pid, s.context), (77, 0x10));
        assert_eq!(s.frames().collect::<Vec<_>>(), frames);
        // s390x: big-endian, 8-byte longs, entries at 16.
        let r = StackReader::from_format(&format(16, 8), 8).unwrap();
        let big = [0x0010_2030u64, 0xffff_ffff_8100_0000];
        let p = record(BigEndian, 16, 8, 2, &big);
        assert_eq!(
            r.read(BigEndian, &p).unwrap().frames().collect::<Vec<_>>(),
            big
        );
    }

    #[test]
    fn a_stack_is_read_to_max_frames() {
        let r = StackReader::from_format(&format(16, 8), 8).unwrap();
        let deep: Vec<u64> = (1..=5000).collect();
        let p = record(LittleEndian, 16, 8, 5000, &deep);
        let got: Vec<u64> = r.read(LittleEndian, &p).unwrap().frames().collect();
        assert_eq!(got, deep[..MAX_FRAMES]);
    }

    #[test]
    fn ends() {
        let r = StackReader::from_format(&format(16, 8), 8).unwrap();
        // More entries than the format declares (the record is sized to
        // the stack).
        let long: Vec<u64> = (1..=12).map(|i| 0xffff_ffff_8100_0000 + i).collect();
        let p = record(LittleEndian, 16, 8, 12, &long);
        assert_eq!(r.read(LittleEndian, &p).unwrap().frames().count(), 12);
        // A size beyond the record reads what is there.
        let p = record(LittleEndian, 16, 8, 40, &long[..3]);
        assert_eq!(r.read(LittleEndian, &p).unwrap().frames().count(), 3);
        // The old fixed array: ULONG_MAX ends the stack.
        let p = record(LittleEndian, 16, 8, 8, &[5, 6, u64::MAX, 0, 0, 0, 0, 0]);
        assert_eq!(
            r.read(LittleEndian, &p)
                .unwrap()
                .frames()
                .collect::<Vec<_>>(),
            [5, 6]
        );
        let r4 = StackReader::from_format(&format(12, 4), 4).unwrap();
        let p = record(LittleEndian, 12, 4, 8, &[5, 0xffff_ffff, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            r4.read(LittleEndian, &p)
                .unwrap()
                .frames()
                .collect::<Vec<_>>(),
            [5]
        );
        // Another event's record is not a stack.
        let mut p = record(LittleEndian, 16, 8, 1, &[5]);
        p[0] = 9;
        assert!(r.read(LittleEndian, &p).is_none());
        assert!(r.read(LittleEndian, &p[..6]).is_none());
    }

    #[test]
    fn a_stack_goes_to_the_latest_waiting_of_its_task_and_context() {
        let mut w = Waiting::default();
        w.push(1, false, "outer");
        w.push(1, true, "irq");
        w.push(2, false, "other");
        let mut lost = Vec::new();
        assert_eq!(w.take(1, true, |x| lost.push(x)), Some("irq"));
        assert_eq!(lost, ["other"], "nested after the match: lost");
        assert_eq!(w.take(1, true, |_| ()), None);
        assert_eq!(w.values().copied().collect::<Vec<_>>(), ["outer"]);
        for i in 0..DEPTH {
            w.push(3, false, ["a", "b", "c", "d"][i]);
        }
        assert!(!w.values().any(|&x| x == "outer"), "the oldest given up");
    }
}
