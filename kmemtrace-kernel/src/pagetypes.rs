//! The recorded kernel's migratetype names, in enum order, and its
//! pageblock order.
//!
//! Migratetype numbers differ between kernels and configurations: since
//! 4.4 (commit 016c13daa5c9) Movable is 1 and Reclaimable 2, the other way
//! round before; HighAtomic (4.4, 0aaa29a56e4f) replaced Reserve; CMA and
//! Isolate exist only with CONFIG_CMA and CONFIG_MEMORY_ISOLATION, so the
//! number of Isolate depends on the configuration. perf kmem's table is
//! the old order. `/proc/pagetypeinfo` lists the types in enum order
//! ([`parse`]); without it, [`fallback`] gives a table by kernel version,
//! and says so.

use crate::cmdlines::cut_at_char_boundary;

/// Migratetype names and where they come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageTypes {
    /// By migratetype number.
    pub names: Vec<String>,
    pub pageblock_order: Option<u32>,
    /// `(node, zone)` in the kernel's order, where known.
    pub zones: Vec<(u32, String)>,
    /// `None` when read from the recorded kernel; else why the names are
    /// a guess.
    pub fallback: Option<String>,
}

impl PageTypes {
    /// The name of migratetype `mt` (`mt N` if unknown).
    pub fn name(&self, mt: i32) -> String {
        usize::try_from(mt)
            .ok()
            .and_then(|i| self.names.get(i))
            .cloned()
            .unwrap_or_else(|| format!("mt {mt}"))
    }
}

/// Migratetype names kept from `/proc/pagetypeinfo` at most: a kernel has
/// six or fewer (`MIGRATE_TYPES`), while a damaged file can list hundreds
/// of millions, each a `String` of its own in every table that names it.
pub const MAX_NAMES: usize = 16;

/// Bytes of one migratetype name kept at most (the kernel's longest,
/// "Reclaimable", has 11).
pub const MAX_NAME_BYTES: usize = 64;

/// Parses `/proc/pagetypeinfo`.
pub fn parse(text: &str) -> Option<PageTypes> {
    let mut names = Vec::new();
    let mut pageblock_order = None;
    let mut zones = Vec::new();
    // Zones seen, so that each line is one lookup, not a scan of those
    // before it (a damaged file of millions of zones was quadratic).
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Page block order:") {
            pageblock_order = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Number of blocks type") {
            names = v
                .split_whitespace()
                .take(MAX_NAMES)
                .map(|n| cut_at_char_boundary(n, MAX_NAME_BYTES).to_string())
                .collect();
        } else if let Some(rest) = line.strip_prefix("Node ") {
            // "Node 0, zone   Normal   183 ..." (the block counts table).
            let mut it = rest.split(',');
            let node = it.next().and_then(|n| n.trim().parse().ok());
            let zone = it
                .next()
                .and_then(|z| z.trim().strip_prefix("zone"))
                .and_then(|z| z.split_whitespace().next());
            if let (Some(n), Some(z)) = (node, zone) {
                if !rest.contains("type") && seen.insert((n, z)) {
                    zones.push((n, z.to_string()));
                }
            }
        }
    }
    (!names.is_empty()).then_some(PageTypes {
        names,
        pageblock_order,
        zones,
        fallback: None,
    })
}

/// The names a kernel of `release` most likely has.
pub fn fallback(release: Option<&str>) -> PageTypes {
    let version = release.and_then(|r| {
        let mut it = r.split(|c: char| !c.is_ascii_digit());
        Some((
            it.next()?.parse::<u32>().ok()?,
            it.next()?.parse::<u32>().ok()?,
        ))
    });
    let new_order = version.is_none_or(|v| v >= (4, 4));
    let names: &[&str] = if new_order {
        &[
            "Unmovable",
            "Movable",
            "Reclaimable",
            "HighAtomic",
            "CMA/Isolate",
            "Isolate",
        ]
    } else {
        &[
            "Unmovable",
            "Reclaimable",
            "Movable",
            "Reserve",
            "CMA/Isolate",
            "Isolate",
        ]
    };
    PageTypes {
        names: names.iter().map(|s| s.to_string()).collect(),
        pageblock_order: None,
        zones: Vec::new(),
        fallback: Some(match version {
            Some(v) => format!(
                "the log has no /proc/pagetypeinfo: names for Linux {}.{} by version ({}); 4 and 5 depend on CONFIG_CMA and CONFIG_MEMORY_ISOLATION",
                v.0,
                v.1,
                if new_order { "4.4 and later" } else { "before 4.4" }
            ),
            None => "the log has no /proc/pagetypeinfo and no kernel release: names of Linux 4.4 and later".into(),
        }),
    }
}

/// The pageblock order compiled into `mm_page_alloc_extfrag`'s print fmt:
/// its `pageblock_order=%d` argument is a constant expression
/// (`min(HPAGE_SHIFT - PAGE_SHIFT, MAX_ORDER - 1)` spelled out), so logs
/// without `/proc/pagetypeinfo` (older recordings, foreign dumps) know it.
pub fn pageblock_order_in_print_fmt(print_fmt: &str) -> Option<u32> {
    let arg = crate::print_flags::arg_after_label(print_fmt, "pageblock_order=")?;
    let v = crate::print_flags::eval_const(arg).ok()?;
    u32::try_from(v).ok().filter(|&o| o < 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_are_kept_once_in_the_order_met() {
        let mut text = String::from("Number of blocks type     Unmovable  Movable\n");
        for pass in 0..2 {
            for node in 0..100_000 {
                text.push_str(&format!("Node {node}, zone Normal {pass} 1\n"));
            }
        }
        let p = parse(&text).unwrap();
        assert_eq!(p.zones.len(), 100_000);
        assert_eq!(p.zones[99_999], (99_999, "Normal".to_string()));
    }

    #[test]
    fn names_are_bounded_in_count_and_length() {
        let real = parse("Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic          CMA      Isolate \n").unwrap();
        assert_eq!(
            real.names.join(" "),
            "Unmovable Movable Reclaimable HighAtomic CMA Isolate"
        );
        // A damaged file: a million names, one of them long, with a
        // character of several bytes across the bound.
        let long = format!("{}é{}", "x".repeat(MAX_NAME_BYTES - 1), "y".repeat(1000));
        let text = format!("Number of blocks type {long} {}\n", "a ".repeat(1_000_000));
        let p = parse(&text).unwrap();
        assert_eq!(p.names.len(), MAX_NAMES);
        assert_eq!(p.names[0], "x".repeat(MAX_NAME_BYTES - 1));
        assert_eq!(p.names[1], "a");
        assert_eq!(p.name(MAX_NAMES as i32), format!("mt {MAX_NAMES}"));
    }

    #[test]
    fn the_extfrag_print_fmt_gives_the_pageblock_order() {
        let fmt = |expr: &str| {
            format!(
                "\"page=%p pfn=0x%lx alloc_order=%d fallback_order=%d pageblock_order=%d alloc_migratetype=%d\", (vmemmap + (REC->pfn)), REC->pfn, REC->alloc_order, REC->fallback_order, {expr}, REC->alloc_migratetype"
            )
        };
        // x86_64 6.18, s390x 6.1, armhf 6.1 as their format files spell it.
        for (expr, want) in [
            ("(((unsigned int)((21 - 12))) < ((unsigned int)(10)) ? ((unsigned int)((21 - 12))) : ((unsigned int)(10)))", 9),
            ("(((unsigned int)((20 - 12))) < ((unsigned int)(11 - 1)) ? ((unsigned int)((20 - 12))) : ((unsigned int)(11 - 1)))", 8),
            ("(((unsigned int)((21 - 12))) < ((unsigned int)(12 - 1)) ? ((unsigned int)((21 - 12))) : ((unsigned int)(12 - 1)))", 9),
            ("10", 10),
        ] {
            assert_eq!(pageblock_order_in_print_fmt(&fmt(expr)), Some(want), "{expr}");
        }
        // Not a constant (a kernel variable): unknown.
        assert_eq!(
            pageblock_order_in_print_fmt(&fmt("pageblock_order_var")),
            None
        );
        assert_eq!(
            pageblock_order_in_print_fmt("\"order=%d\", REC->order"),
            None
        );
    }

    const X86_618: &str = "Page block order: 9
Pages per block:  512

Free pages count per migrate type at order       0      1      2
Node    0, zone      DMA, type    Unmovable      0      0      0
Node    0, zone   Normal, type      Isolate      0      0      0

Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate 
Node 0, zone      DMA            1            7            0            0            0 
Node 0, zone   Normal          183         2475          222            0            0 
";

    #[test]
    fn names_in_enum_order_from_the_kernel() {
        let t = parse(X86_618).unwrap();
        assert_eq!(
            t.names,
            [
                "Unmovable",
                "Movable",
                "Reclaimable",
                "HighAtomic",
                "Isolate"
            ]
        );
        assert_eq!(t.pageblock_order, Some(9));
        assert_eq!(t.zones, [(0, "DMA".into()), (0, "Normal".into())]);
        assert_eq!(t.name(4), "Isolate");
        assert_eq!(t.name(9), "mt 9");
        assert!(t.fallback.is_none());
    }

    #[test]
    fn fallback_by_version() {
        assert_eq!(fallback(Some("6.1.0")).names[1], "Movable");
        assert_eq!(fallback(Some("4.3.0")).names[1], "Reclaimable");
        assert!(fallback(Some("3.10.0"))
            .fallback
            .unwrap()
            .contains("before 4.4"));
        assert!(parse("nothing").is_none());
    }
}
