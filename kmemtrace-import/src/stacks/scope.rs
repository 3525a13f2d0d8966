//! Which page allocations the kernel takes a stack with: the trigger's
//! filter, as the log's [`PAGE_STACKS_META`](super::PAGE_STACKS_META)
//! carries it. kmemtraced leaves its own threads out outside interrupts:
//!
//! ```text
//! kmem:mm_page_alloc stacktrace if (common_pid != 812 && common_pid != 813) || common_flags & 0x58
//! kmem:mm_page_alloc stacktrace if (common_pid != 7 && (common_pid < 812 || common_pid > 819)) || common_flags & 0x58
//! ```
//!
//! (the second form, runs of consecutive task ids as ranges, since
//! kmemtraced has a compressor thread per CPU beside each reader).
//!
//! Since page stacks are sampled by frame number, the filter ends in a
//! sample clause, `... && !(pfn & 0xf00)` (or is that clause alone):
//! [`PageStackSample`].
//!
//! An allocation the filter leaves out never gets a stack, so it must not
//! wait for one: it would count as cut by the end of the capture, and take
//! a place among those that wait.

use super::{PageStackSample, CONTEXT_FLAGS};

/// The tasks whose page allocations the trigger takes no stack with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackScope {
    /// Task ids left out (none: every allocation has its stack).
    left_out: Vec<i32>,
    /// Left out in interrupts too (the filter has no `common_flags`
    /// alternative that covers every interrupt context).
    in_interrupts_too: bool,
    /// The page frames whose allocations take one.
    pub sample: PageStackSample,
}

impl StackScope {
    /// The scope of the trigger in `meta` (the meta's text: the event, then
    /// the trigger as written to the `trigger` file). A filter this reading
    /// does not know in full is taken as taking every stack: allocations
    /// then wait as they would without a filter.
    pub fn of_meta(meta: &str) -> StackScope {
        // The page allocation's line; other events' lines follow it.
        let line = meta
            .lines()
            .find(|l| l.starts_with("kmem:mm_page_alloc "))
            .unwrap_or("");
        let Some((_, filter)) = line.split_once(" if ") else {
            return StackScope::default();
        };
        // The sample clause is one of the filter's top-level `&&` terms;
        // the others are the tasks' part.
        let mut sample = PageStackSample::EVERY;
        let mut tasks = Vec::new();
        for term in split_top(filter, "&&") {
            match sample_of(term) {
                Some(s) if sample == PageStackSample::EVERY => sample = s,
                _ => tasks.push(term),
            }
        }
        let mut scope = match tasks.as_slice() {
            [] => StackScope::default(),
            // `(tasks || flags) && sample`: the tasks' part in parentheses.
            [one] => Self::of_filter(one)
                .or_else(|| Self::of_filter(unparenthesized(one)))
                .unwrap_or_default(),
            many => Self::of_filter(&many.join(" && ")).unwrap_or_default(),
        };
        scope.sample = sample;
        scope
    }

    /// `None` for a filter other than `A [|| common_flags & MASK]` where
    /// `A` is tests joined by `&&`, in parentheses or not, each
    /// `common_pid != N` or a range `(common_pid < N || common_pid > M)`
    /// (the tasks N..=M left out: kmemtraced writes runs of consecutive
    /// task ids so).
    fn of_filter(filter: &str) -> Option<StackScope> {
        let mut scope = StackScope {
            left_out: Vec::new(),
            in_interrupts_too: true,
            sample: PageStackSample::EVERY,
        };
        let mut tasks_seen = false;
        for alternative in split_top(filter, "||") {
            if let Some(mask) = alternative.strip_prefix("common_flags") {
                let mask = mask.trim_start().strip_prefix('&')?.trim();
                let mask = parse_number(mask)?;
                if mask & u64::from(CONTEXT_FLAGS) != u64::from(CONTEXT_FLAGS) {
                    return None;
                }
                scope.in_interrupts_too = false;
                continue;
            }
            if tasks_seen {
                return None;
            }
            tasks_seen = true;
            for test in split_top(unparenthesized(alternative), "&&") {
                if let Some(range) = pid_range(test) {
                    scope.left_out.extend(range);
                    continue;
                }
                let pid = test.strip_prefix("common_pid")?.trim_start();
                let pid = pid.strip_prefix("!=")?.trim();
                scope.left_out.push(pid.parse().ok()?);
            }
        }
        if !tasks_seen {
            scope.left_out.clear();
        }
        Some(scope)
    }

    /// Whether the kernel takes a stack with an allocation of task `pid`
    /// in that context.
    #[inline]
    pub fn takes(&self, pid: i32, in_interrupt: bool) -> bool {
        (in_interrupt && !self.in_interrupts_too) || !self.left_out.contains(&pid)
    }
}

/// The sample of a filter term `!(pfn & MASK)` (MASK in decimal or hex),
/// if it is one; a mask of more than 20 bits is no sample a recorder
/// writes.
fn sample_of(term: &str) -> Option<PageStackSample> {
    let test = unparenthesized(term.trim().strip_prefix('!')?);
    let mask = test
        .strip_prefix("pfn")?
        .trim_start()
        .strip_prefix('&')?
        .trim();
    let mask = parse_number(mask)?;
    (mask.count_ones() <= 20).then_some(PageStackSample { mask })
}

/// The tasks of `(common_pid < N || common_pid > M)`: N..=M (at most 65,536
/// of them: a recorder's threads, not a filter written by hand).
fn pid_range(test: &str) -> Option<std::ops::RangeInclusive<i32>> {
    let sides = split_top(unparenthesized(test), "||");
    let [low, high] = sides.as_slice() else {
        return None;
    };
    let bound = |side: &str, op: &str| -> Option<i32> {
        let v = side.strip_prefix("common_pid")?.trim_start();
        v.strip_prefix(op)?.trim().parse().ok()
    };
    let (first, last) = (bound(low, "<")?, bound(high, ">")?);
    (first <= last && last - first < 65_536).then_some(first..=last)
}

/// `(X)` → `X` (trimmed), where the first parenthesis closes at the end
/// (not `(A) || (B)`); anything else as it is.
fn unparenthesized(s: &str) -> &str {
    let s = s.trim();
    match s.strip_prefix('(').and_then(|i| i.strip_suffix(')')) {
        Some(inner) if depth_ok(inner) => inner.trim(),
        _ => s,
    }
}

/// Whether `s`'s parentheses never close more than they opened.
fn depth_ok(s: &str) -> bool {
    let mut depth = 0i32;
    s.chars().all(|c| {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        depth >= 0
    })
}

/// `s` split at `sep` outside parentheses, each part trimmed.
fn split_top<'a>(s: &'a str, sep: &str) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut i) = (0i32, 0, 0);
    let bytes = s.as_bytes();
    while i < bytes.len() {
        match bytes[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            // Bytes, not the text: `i` may be inside a character (the
            // separators are ASCII, so where one matches is a boundary).
            _ if depth == 0 && bytes[i..].starts_with(sep.as_bytes()) => {
                parts.push(s[start..i].trim());
                i += sep.len();
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(s[start..].trim());
    parts
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmemtraceds_trigger_leaves_its_threads_out_outside_interrupts() {
        let s = StackScope::of_meta(
            "kmem:mm_page_alloc stacktrace if (common_pid != 812 && common_pid != 813) || common_flags & 0x58\n",
        );
        assert!(!s.takes(812, false));
        assert!(!s.takes(813, false));
        assert!(s.takes(812, true));
        assert!(s.takes(1, false));
    }

    #[test]
    fn a_character_of_several_bytes_is_not_cut() {
        assert_eq!(split_top("a ß|| b", "||"), ["a ß", "b"]);
        assert_eq!(split_top("(\u{fffd}|) || x", "||"), ["(\u{fffd}|)", "x"]);
        assert_eq!(split_top("\u{fffd}\u{fffd}", "||"), ["\u{fffd}\u{fffd}"]);
    }

    #[test]
    fn runs_of_task_ids_are_left_out_as_ranges() {
        let s = StackScope::of_meta(
            "kmem:mm_page_alloc stacktrace if (common_pid != 7 && (common_pid < 100 || common_pid > 102) && common_pid != 104) || common_flags & 0x58\n",
        );
        for t in [7, 100, 101, 102, 104] {
            assert!(!s.takes(t, false), "{t}");
            assert!(s.takes(t, true), "{t}");
        }
        for t in [6, 99, 103, 105] {
            assert!(s.takes(t, false), "{t}");
        }
        // Only a range alone, without the outer parentheses.
        let s = StackScope::of_meta(
            "kmem:mm_page_alloc stacktrace if (common_pid < 5 || common_pid > 6)",
        );
        assert!(!s.takes(5, true) && !s.takes(6, false) && s.takes(7, false));
    }

    #[test]
    fn the_sample_clause_beside_the_tasks_part_or_alone() {
        let s = StackScope::of_meta(
            "kmem:mm_page_alloc stacktrace if ((common_pid < 100 || common_pid > 102) \
             || common_flags & 0x58) && !(pfn & 0xf00)\n",
        );
        assert_eq!(s.sample, PageStackSample { mask: 0xf00 });
        assert!(!s.takes(101, false) && s.takes(101, true) && s.takes(99, false));
        let s = StackScope::of_meta("kmem:mm_page_alloc stacktrace:unlimited if !(pfn & 15)");
        assert_eq!(s.sample, PageStackSample { mask: 15 });
        assert!(s.takes(101, false));
        // Written by hand, the other way round.
        let s =
            StackScope::of_meta("kmem:mm_page_alloc stacktrace if !(pfn & 255) && common_pid != 7");
        assert_eq!(s.sample, PageStackSample { mask: 255 });
        assert!(!s.takes(7, true) && s.takes(8, false));
        // Not a sample: a test of the frame number the kernel reads otherwise.
        for f in [
            "pfn & 15",
            "!(pfn | 15)",
            "!(order & 1)",
            "!(pfn & 0xfffffffffff)",
        ] {
            let s = StackScope::of_meta(&format!("kmem:mm_page_alloc stacktrace if {f}"));
            assert_eq!(s.sample, PageStackSample::EVERY, "{f}");
        }
    }

    #[test]
    fn a_filter_without_the_interrupt_alternative_leaves_them_out_everywhere() {
        let s = StackScope::of_meta("kmem:mm_page_alloc stacktrace if common_pid != 7");
        assert!(!s.takes(7, false));
        assert!(!s.takes(7, true));
        assert!(s.takes(8, true));
    }

    #[test]
    fn the_plain_trigger_and_filters_not_understood_take_every_stack() {
        for meta in [
            super::super::PAGE_STACKS_TEXT,
            "kmem:mm_page_alloc stacktrace if common_pid == 7",
            "kmem:mm_page_alloc stacktrace if (common_pid != 7) || common_flags & 0x08",
            "kmem:mm_page_alloc stacktrace if common_pid != 7 || common_pid != 8",
            "kmem:mm_page_alloc stacktrace if order > 0",
            "kmem:mm_page_alloc stacktrace if common_flags & 0x58",
            // Ranges other than kmemtraced's: the wrong way round, inverted,
            // too wide.
            "kmem:mm_page_alloc stacktrace if (common_pid > 5 || common_pid < 9)",
            "kmem:mm_page_alloc stacktrace if (common_pid < 9 || common_pid > 5)",
            "kmem:mm_page_alloc stacktrace if (common_pid < 0 || common_pid > 99999999)",
            "kmem:mm_page_alloc stacktrace if (common_pid < 5 || common_pid > 6 || common_pid > 7)",
        ] {
            let s = StackScope::of_meta(meta);
            assert_eq!(s, StackScope::default(), "{meta}");
            assert!(s.takes(7, false), "{meta}");
        }
    }
}
