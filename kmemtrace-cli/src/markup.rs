//! Escaping text for the markup the programs write: HTML pages (report)
//! and JUnit XML (diff). One escaper, so that both agree on what markup is.

/// Where the escaped text goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Markup {
    /// HTML content or attribute value.
    Html,
    /// XML 1.0 character data.
    XmlText,
    /// An XML 1.0 attribute value.
    XmlAttribute,
}

/// `s` with markup escaped for `to`. For XML, characters XML forbids even
/// escaped (most controls, U+FFFE, U+FFFF) are replaced, and in attributes
/// newlines and tabs become references, which parsers would otherwise turn
/// into spaces.
pub fn escape(s: &str, to: Markup) -> String {
    let xml = to != Markup::Html;
    let attribute = to == Markup::XmlAttribute;
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' if xml => o.push_str("&apos;"),
            '\'' => o.push_str("&#39;"),
            _ if !xml => o.push(c),
            '\n' if attribute => o.push_str("&#10;"),
            '\t' if attribute => o.push_str("&#9;"),
            '\r' => o.push_str("&#13;"),
            '\n' | '\t' => o.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_and_xml_differ_only_where_they_must() {
        assert_eq!(
            escape("a<'b'>&\"\n", Markup::Html),
            "a&lt;&#39;b&#39;&gt;&amp;&quot;\n"
        );
        assert_eq!(
            escape("'\n\t\r\u{1}", Markup::XmlText),
            "&apos;\n\t&#13;\u{fffd}"
        );
        assert_eq!(escape("'\n\t", Markup::XmlAttribute), "&apos;&#10;&#9;");
    }
}
