//! Time stamps per CPU: never backwards, inside a sub-buffer or from one
//! sub-buffer to the next. The tracker is fed every data event's time in
//! stream order; the caller turns a violation into a finding with its
//! location.

/// The last time stamp seen on one CPU.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ordering {
    last: Option<u64>,
    /// Violations seen.
    pub violations: u64,
}

impl Ordering {
    /// Takes the next event's time; returns the previous time if `ts` is
    /// earlier. The next event is compared with `ts` either way, so one
    /// outlier costs one violation, not one per event after it.
    #[inline(always)]
    pub fn next(&mut self, ts: u64) -> Option<u64> {
        let prev = self.last.replace(ts);
        match prev {
            Some(p) if ts < p => {
                self.violations += 1;
                Some(p)
            }
            _ => None,
        }
    }

    /// The last time stamp seen.
    pub fn last(&self) -> Option<u64> {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_violation_per_step_back() {
        let mut o = Ordering::default();
        let got: Vec<_> = [1, 2, 2, 10, 3, 4, 5, 1]
            .into_iter()
            .map(|t| o.next(t))
            .collect();
        assert_eq!(got, [None, None, None, None, Some(10), None, None, Some(5)]);
        assert_eq!(o.violations, 2);
        assert_eq!(o.last(), Some(1));
    }
}
