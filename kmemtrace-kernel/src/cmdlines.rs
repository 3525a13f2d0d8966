//! `saved_cmdlines` (`pid comm`) and `saved_tgids` (`pid tgid`): naming the
//! pids of recorded events.
//!
//! The kernel's tables are small rings that forget, so a log may carry
//! several snapshots; they are merged, a later line for a pid replacing an
//! earlier one (format-spec/FORMAT.md §7.2).

use std::collections::HashMap;

use core::fmt;

/// The kernel's `TASK_COMM_LEN` is 16 (15 characters and a NUL); longer
/// names are cut to this many bytes.
pub const MAX_COMM_LEN: usize = 64;

/// A malformed line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmdlinesError {
    /// `saved_cmdlines` or `saved_tgids`.
    pub file: &'static str,
    /// 1-based line.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for CmdlinesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for CmdlinesError {}

/// pid → comm and pid → tgid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PidMap {
    comms: HashMap<i32, String>,
    tgids: HashMap<i32, i32>,
}

/// The non-blank lines of `file`'s `text`, each parsed by `parse_line`;
/// the first that does not parse gives the error, with its line number.
fn parse_lines<T>(
    text: &str,
    file: &'static str,
    parse_line: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, CmdlinesError> {
    let mut parsed = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        parsed.push(parse_line(line).map_err(|message| CmdlinesError {
            file,
            line: i + 1,
            message,
        })?);
    }
    Ok(parsed)
}

fn parse_pid(s: &str) -> Option<i32> {
    s.parse::<i32>().ok()
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character's boundary.
pub(crate) fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut n = max;
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

impl PidMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a map from a `saved_cmdlines` and an optional `saved_tgids`.
    pub fn parse(cmdlines: &str, tgids: Option<&str>) -> Result<Self, CmdlinesError> {
        let mut m = PidMap::new();
        m.merge_cmdlines(cmdlines)?;
        if let Some(t) = tgids {
            m.merge_tgids(t)?;
        }
        Ok(m)
    }

    /// Adds `saved_cmdlines` lines (`pid comm`, the comm possibly with
    /// spaces); a pid already known takes the new name. On error nothing
    /// from `text` is merged.
    pub fn merge_cmdlines(&mut self, text: &str) -> Result<(), CmdlinesError> {
        let new = parse_lines(text, "saved_cmdlines", |line| {
            let line = line.trim_start();
            let (pid, comm) = match line.split_once(' ') {
                Some((p, c)) => (p, c),
                None => (line, ""),
            };
            let pid = parse_pid(pid).ok_or_else(|| format!("pid {pid:?} is not a number"))?;
            Ok((pid, cut_at_char_boundary(comm, MAX_COMM_LEN).to_string()))
        })?;
        self.comms.extend(new);
        Ok(())
    }

    /// Adds `saved_tgids` lines (`pid tgid`). On error nothing from `text` is
    /// merged.
    pub fn merge_tgids(&mut self, text: &str) -> Result<(), CmdlinesError> {
        let new = parse_lines(text, "saved_tgids", |line| {
            let mut it = line.split_ascii_whitespace();
            let (Some(p), Some(t), None) = (it.next(), it.next(), it.next()) else {
                return Err(format!("expected `pid tgid`, got {line:?}"));
            };
            let pid = parse_pid(p).ok_or_else(|| format!("pid {p:?} is not a number"))?;
            let tgid = parse_pid(t).ok_or_else(|| format!("tgid {t:?} is not a number"))?;
            Ok((pid, tgid))
        })?;
        self.tgids.extend(new);
        Ok(())
    }

    /// Adds everything of `other`, its entries winning.
    pub fn merge(&mut self, other: &PidMap) {
        self.comms
            .extend(other.comms.iter().map(|(k, v)| (*k, v.clone())));
        self.tgids.extend(other.tgids.iter().map(|(k, v)| (*k, *v)));
    }

    /// The command name of `pid`. Pid 0 is the idle task, `<idle>` as the
    /// kernel prints it, when the tables do not say otherwise.
    pub fn comm(&self, pid: i32) -> Option<&str> {
        match self.comms.get(&pid) {
            Some(c) => Some(c),
            None if pid == 0 => Some("<idle>"),
            None => None,
        }
    }

    /// The thread group (process) of `pid`.
    pub fn tgid(&self, pid: i32) -> Option<i32> {
        self.tgids.get(&pid).copied()
    }

    /// Every pid with a name as `saved_cmdlines` lists them (`pid comm`
    /// lines), by ascending pid.
    pub fn cmdlines_text(&self) -> String {
        let mut pids: Vec<(&i32, &String)> = self.comms.iter().collect();
        pids.sort_unstable();
        pids.iter().map(|(p, c)| format!("{p} {c}\n")).collect()
    }

    /// Every pid the map knows (named or with a tgid), ascending.
    pub fn pids(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self
            .comms
            .keys()
            .chain(self.tgids.keys())
            .copied()
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Number of pids with a name.
    pub fn comm_count(&self) -> usize {
        self.comms.len()
    }

    /// Number of pids with a tgid.
    pub fn tgid_count(&self) -> usize {
        self.tgids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_merges() {
        let mut m = PidMap::parse(
            "1 init\n113 sh\n31 kcompactd0\n200 kworker/0:1 events\n201 \n",
            Some("113 113\n114 113\n"),
        )
        .unwrap();
        assert_eq!(m.comm(1), Some("init"));
        assert_eq!(m.comm(200), Some("kworker/0:1 events"));
        assert_eq!(m.comm(201), Some(""));
        assert_eq!(m.comm(0), Some("<idle>"));
        assert_eq!(m.comm(999), None);
        assert_eq!(m.tgid(114), Some(113));
        assert_eq!(m.tgid(1), None);
        assert_eq!((m.comm_count(), m.tgid_count()), (5, 2));

        m.merge_cmdlines("113 bash\n").unwrap();
        assert_eq!(m.comm(113), Some("bash"));
        assert_eq!(m.comm(1), Some("init"));
        let other = PidMap::parse("0 swapper/0\n", Some("7 1")).unwrap();
        m.merge(&other);
        assert_eq!(m.comm(0), Some("swapper/0"));
        assert_eq!(m.tgid(7), Some(1));
    }

    #[test]
    fn errors_and_atomic_merge() {
        let mut m = PidMap::parse("1 init\n", None).unwrap();
        let e = m.merge_cmdlines("2 a\nx b\n").unwrap_err();
        assert_eq!((e.file, e.line), ("saved_cmdlines", 2));
        assert_eq!(m.comm(2), None, "nothing merged on error");
        let e = m.merge_tgids("1 2 3\n").unwrap_err();
        assert_eq!((e.file, e.line), ("saved_tgids", 1));
        assert!(m.merge_tgids("1 x\n").unwrap_err().message.contains("tgid"));
        assert!(e.to_string().starts_with("saved_tgids line 1"));
        let long = format!("5 {}\n", "é".repeat(100));
        m.merge_cmdlines(&long).unwrap();
        assert!(m.comm(5).unwrap().len() <= MAX_COMM_LEN);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*") {
            let _ = PidMap::parse(&s, Some(&s));
        }
    }
}
