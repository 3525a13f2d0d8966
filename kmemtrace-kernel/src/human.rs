//! How the programs show numbers to people, in one place: thousands
//! separators in tables, byte sizes, times in seconds; and the kernel's
//! CPU list syntax (`0-3,6`, as sysfs writes it), which the log format
//! reads as well as the command lines. Colour, and durations on the
//! command line, are `kmemtrace-cli`'s.

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1536` → `1.5 KiB` (binary units; whole bytes below 1 KiB).
pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[0])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Trace-clock nanoseconds as seconds with `decimals` digits (0 to 9),
/// rounded: 6 as the kernel's `trace` prints them (`4.449504`), 9 for
/// every nanosecond.
pub fn secs(ns: u64, decimals: u32) -> String {
    let decimals = decimals.min(9);
    let unit = 10u64.pow(9 - decimals);
    let r = ns.saturating_add(unit / 2) / unit;
    let scale = 10u64.pow(decimals);
    if decimals == 0 {
        return r.to_string();
    }
    format!("{}.{:0w$}", r / scale, r % scale, w = decimals as usize)
}

/// CPUs a CPU list may name ([`parse_cpu_list`]): eight times Linux's
/// largest `NR_CPUS` (CPU numbers may have gaps); a damaged list could
/// otherwise name billions.
pub const MAX_CPUS_LISTED: usize = 8 * crate::machine::LINUX_MAX_NR_CPUS as usize;

/// The kernel's CPU list syntax (`0-3,6`, as in `cpu/online` and
/// `--cpu`), sorted and without repeats; empty text is an empty list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    parse_cpu_list_within(s, &mut (2 * MAX_CPUS_LISTED))
}

/// [`parse_cpu_list`], its work charged to `budget`: each range takes its
/// CPUs from it as it is expanded, repeats included, also in a list that
/// then fails to parse. Lists parsed in turn against one budget are
/// bounded together, as no single list's result can show: a line
/// `0 0-131070` costs 131,071 steps and then names nothing.
pub fn parse_cpu_list_within(s: &str, budget: &mut usize) -> Result<Vec<u32>, String> {
    let bad = || {
        // The start of it: a damaged list may be megabytes.
        let start: String = s.trim().chars().take(64).collect();
        let more = if start.len() < s.trim().len() {
            "..."
        } else {
            ""
        };
        format!("bad CPU list {start:?}{more}: expected numbers and ranges like 0-3,6")
    };
    let too_many =
        || format!("the CPU list names more than {MAX_CPUS_LISTED} CPUs (or repeats them)");
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if b < a {
                    return Err(bad());
                }
                (a, b)
            }
            None => {
                let a = part.parse().map_err(|_| bad())?;
                (a, a)
            }
        };
        // Repeats counted too (the kernel's lists have none; a user's may
        // have a few): the work, not only the result, stays bounded.
        let n = (b - a) as usize + 1;
        if n > *budget {
            *budget = 0;
            return Err(too_many());
        }
        *budget -= n;
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    if out.len() > MAX_CPUS_LISTED {
        return Err(too_many());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_rounded_to_the_digits_asked() {
        assert_eq!(secs(4_449_503_360, 6), "4.449503");
        assert_eq!(secs(4_449_503_500, 6), "4.449504");
        assert_eq!(secs(15_347_582_576, 9), "15.347582576");
        assert_eq!(secs(999_999_999_600, 6), "1000.000000");
        assert_eq!(secs(1_500_000_000, 0), "2");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("5,1-2,2").unwrap(), vec![1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        // At most MAX_CPUS_LISTED, however the ranges repeat or add up.
        let n = MAX_CPUS_LISTED as u32;
        assert_eq!(
            parse_cpu_list(&format!("0-{}", n - 1)).unwrap().len(),
            MAX_CPUS_LISTED
        );
        assert!(parse_cpu_list(&format!("0-{n}")).is_err());
        // Named twice: counted twice, within the bound on the work.
        let twice = format!("0-{},0-{}", n - 1, n - 2);
        assert_eq!(parse_cpu_list(&twice).unwrap().len(), MAX_CPUS_LISTED);
        let e = parse_cpu_list(&format!("{twice},0-1")).unwrap_err();
        assert!(e.contains("more than 65536 CPUs"), "{e}");
        // One budget across lists: a list that fails still pays.
        let mut budget = 2 * MAX_CPUS_LISTED;
        let wide = format!("0-{}", n - 1);
        assert!(parse_cpu_list_within(&format!("{wide},x"), &mut budget).is_err());
        assert_eq!(budget, MAX_CPUS_LISTED);
        assert!(parse_cpu_list_within(&wide, &mut budget).is_ok());
        assert!(parse_cpu_list_within("0", &mut budget).is_err());
        assert_eq!(budget, 0);
        let repeats = vec!["0-7"; 100_000].join(",");
        assert!(parse_cpu_list(&repeats).is_err(), "800,000 named");
        let apart: Vec<String> = (0..3)
            .map(|i| format!("{}-{}", i * n, i * n + n - 1))
            .collect();
        assert!(parse_cpu_list(&apart.join(",")).is_err());
    }

    #[test]
    fn separators() {
        for (n, s) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (123456, "123,456"),
            (1234567, "1,234,567"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(thousands(n), s);
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(0.0), "0 B");
        assert_eq!(bytes(1023.0), "1023 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(bytes(3.0 * 1024.0 * 1024.0), "3.0 MiB");
    }
}
