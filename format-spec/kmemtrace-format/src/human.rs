//! How the three programs show numbers to people, in one place: thousands
//! separators in tables, byte sizes, and whether to color (a terminal, and
//! `NO_COLOR` unset or empty, as <https://no-color.org> says).

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
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

/// Whether output that goes to a terminal (`tty`) is colored: only if
/// `NO_COLOR` is unset or empty.
pub fn use_color(tty: bool) -> bool {
    tty && no_color_allows(std::env::var_os("NO_COLOR").as_deref())
}

fn no_color_allows(v: Option<&std::ffi::OsStr>) -> bool {
    v.map_or(true, |v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
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
