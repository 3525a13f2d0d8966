//! Values of command-line arguments as people write them.

/// `1.5m` → (1.5, "m"): the number a value starts with and the unit
/// after it.
fn number_and_unit(s: &str) -> Option<(f64, &str)> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.parse().ok()?, unit))
}

/// A duration: `10s`, `500ms`, `250us`, `10ns`, `1.5m`, `2min`, `1h`, or
/// plain seconds. Zero is allowed; callers that need more say so.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let (v, unit) = number_and_unit(s)
        .ok_or_else(|| format!("`{s}` is not a duration (try 10s, 500ms, 2m, 1h)"))?;
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

/// A size in bytes: `64M`, `512k`, `1.5G`, `8MiB`, or plain bytes. The
/// units are binary (`k` 1024), as trace-cmd's and perf's sizes are.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (v, unit) =
        number_and_unit(s).ok_or_else(|| format!("`{s}` is not a size (try 64M, 512k, 2G)"))?;
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("unknown unit in `{s}` (use k, M, G or T)")),
    };
    let bytes = v * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size `{s}` is out of range"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("512k").unwrap(), 512 << 10);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2 kB").unwrap(), 2048);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 furlongs").is_err());
        assert!(parse_size("1e30").is_err());
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
}
