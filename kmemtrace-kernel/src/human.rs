//! How the three programs show numbers to people and read them from
//! people, in one place: thousands separators in tables, byte sizes, times
//! in seconds, durations (`500ms`, `2m`), the kernel's CPU lists (`0-3,6`),
//! and whether to color (a terminal, and `NO_COLOR` unset or empty, as
//! <https://no-color.org> says).

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

/// A duration as people write it: `10s`, `500ms`, `250us`, `10ns`, `1.5m`,
/// `2min`, `1h`, or plain seconds. Zero is allowed; callers that need more
/// say so.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 10s, 500ms, 2m, 1h)"))?;
    let secs_per = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{s}` (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let secs = v * secs_per;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("duration `{s}` is out of range"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The kernel's CPU list syntax (`0-3,6`, as in `cpu/online` and
/// `--cpu`), sorted and without repeats; empty text is an empty list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let bad = || {
        format!(
            "bad CPU list {:?}: expected numbers and ranges like 0-3,6",
            s.trim()
        )
    };
    let mut out = Vec::new();
    for part in s.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if b < a || b - a > 1 << 16 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether output that goes to a terminal (`tty`) is colored: only if
/// `NO_COLOR` is unset or empty.
pub fn use_color(tty: bool) -> bool {
    tty && no_color_allows(std::env::var_os("NO_COLOR").as_deref())
}

/// Colours the programs use, as SGR codes for [`paint`].
pub mod colour {
    pub const RED: &str = "31";
    pub const GREEN: &str = "32";
    pub const YELLOW: &str = "33";
    pub const CYAN: &str = "36";
}

/// `text` in bold `colour` (an SGR code of [`colour`]) where `color`,
/// else as it is.
pub fn paint(text: &str, colour: &str, color: bool) -> String {
    if color {
        format!("\x1b[1;{colour}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn no_color_allows(v: Option<&std::ffi::OsStr>) -> bool {
    v.is_none_or(|v| v.is_empty())
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
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("10ns").unwrap(), Duration::from_nanos(10));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("1y").is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("5,1-2,2").unwrap(), vec![1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
    }

    use std::ffi::OsStr;

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

    #[test]
    fn no_color_convention() {
        assert!(no_color_allows(None));
        assert!(no_color_allows(Some(OsStr::new(""))));
        assert!(!no_color_allows(Some(OsStr::new("1"))));
        assert!(!use_color(false));
    }
}
