//! Whether and how the programs colour what they print: only on a
//! terminal, and only where `NO_COLOR` is unset or empty, as
//! <https://no-color.org> asks.

/// Whether output that goes to a terminal (`tty`) is coloured: only if
/// `NO_COLOR` is unset or empty.
pub fn use_color(tty: bool) -> bool {
    tty && no_color_allows(std::env::var_os("NO_COLOR").as_deref())
}

/// The colours the programs use, as SGR codes for [`paint`].
pub const RED: &str = "31";
pub const GREEN: &str = "32";
pub const YELLOW: &str = "33";
pub const CYAN: &str = "36";

/// `text` in bold `colour` (one of the SGR codes above) where `color`,
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
    use std::ffi::OsStr;

    #[test]
    fn no_color_convention() {
        assert!(no_color_allows(None));
        assert!(no_color_allows(Some(OsStr::new(""))));
        assert!(!no_color_allows(Some(OsStr::new("1"))));
        assert!(!use_color(false));
    }

    #[test]
    fn painted_in_bold_only_when_asked() {
        assert_eq!(paint("OK", GREEN, true), "\x1b[1;32mOK\x1b[0m");
        assert_eq!(paint("OK", GREEN, false), "OK");
    }
}
