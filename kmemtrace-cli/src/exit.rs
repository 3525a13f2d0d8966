//! The exit codes of every kmemtrace program: one table, one meaning per
//! code, so that a script reads any program's status the same way.
//!
//! | code | meaning |
//! |-----:|---------|
//! | 0 | done |
//! | 1 | done, and the answer is no: events were lost (check), a certain finding at `--fail-on` (report), a gate failed (diff) |
//! | 2 | usage error: a bad option, argument or rules file |
//! | 3 | unusable input: not something the program reads, unreadable, an unsupported version; for the recorder, tracefs unavailable or not permitted |
//! | 4 | output error: the output could not be created or written |
//! | 5 | damaged input: cut short or corrupted; the output covers what could be read, and stderr says what is unknown |
//! | 6 | the recording failed while it ran (a thread, a system call); the log is finished as far as it could be |
//! | 126 | the recorder's COMMAND was found but cannot be run (the shell's code) |
//! | 127 | the recorder's COMMAND was not found (the shell's code) |
//! | 129, 130, 143 | `kmemtrace-capture.sh` aborted by a second SIGHUP, SIGINT or SIGTERM (128 + the signal, the shell's codes) |
//!
//! Where several apply, a program exits with the highest of 1, 5 and 3
//! (unusable over damaged over "no"): a gate never passes on damage.

/// One exit code and what it means to every program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    pub code: u8,
    pub meaning: &'static str,
}

impl Code {
    const fn new(code: u8, meaning: &'static str) -> Code {
        Code { code, meaning }
    }

    /// For `main`'s return.
    pub fn exit_code(self) -> std::process::ExitCode {
        std::process::ExitCode::from(self.code)
    }
}

pub const OK: Code = Code::new(0, "done");
pub const NO: Code = Code::new(1, "done, and the answer is no");
pub const USAGE: Code = Code::new(2, "usage error");
pub const INPUT: Code = Code::new(3, "unusable input");
pub const OUTPUT: Code = Code::new(4, "the output could not be created or written");
pub const DAMAGED: Code = Code::new(5, "damaged input (cut short or corrupted): what could be read was used, stderr says what is unknown");
pub const FAILED: Code = Code::new(6, "the recording failed while it ran");
pub const NOT_EXECUTABLE: Code = Code::new(126, "COMMAND cannot be run");
pub const NOT_FOUND: Code = Code::new(127, "COMMAND not found");

/// Every code, in order.
pub const ALL: [Code; 9] = [
    OK,
    NO,
    USAGE,
    INPUT,
    OUTPUT,
    DAMAGED,
    FAILED,
    NOT_EXECUTABLE,
    NOT_FOUND,
];

/// Of two outcomes, the one to exit with: unusable input over damaged
/// input over "no" over done; other codes (usage, output, failures) stop
/// a program where they happen and win over all.
pub fn worst(a: Code, b: Code) -> Code {
    let rank = |c: Code| match c.code {
        0 => 0,
        1 => 1,
        5 => 2,
        3 => 3,
        _ => 4,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// The `Exit status:` paragraph of a program's `--help`: the codes it uses,
/// each with the table's meaning and, after a colon, what it means for
/// this program (`""` for nothing more).
pub fn help(codes: &[(Code, &str)]) -> String {
    let mut s = String::from("Exit status (the same table for every kmemtrace program):\n");
    for (c, detail) in codes {
        s += &format!("  {:>3}  {}", c.code, c.meaning);
        if !detail.is_empty() {
            s += ": ";
            s += detail;
        }
        s.push('\n');
    }
    s.pop();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_meaning_per_code() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert!(a.code < b.code, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn unusable_over_damaged_over_no() {
        assert_eq!(worst(OK, NO), NO);
        assert_eq!(worst(DAMAGED, NO), DAMAGED);
        assert_eq!(worst(NO, DAMAGED), DAMAGED);
        assert_eq!(worst(INPUT, DAMAGED), INPUT);
        assert_eq!(worst(OUTPUT, INPUT), OUTPUT);
    }

    #[test]
    fn help_lists_the_codes_given() {
        let h = help(&[(OK, ""), (DAMAGED, "the log is cut short")]);
        assert!(h.starts_with("Exit status"));
        assert!(h.contains("\n    0  done\n"));
        assert!(h.ends_with("stderr says what is unknown: the log is cut short"));
    }
}
