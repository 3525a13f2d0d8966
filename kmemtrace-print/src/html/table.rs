//! HTML tables whose columns sort on a click (the page's script reads
//! each cell's `data-v`, the exact number behind the shown text).

use super::esc;
use kmemtrace_kernel::human::thousands;
use std::fmt::Write as _;

/// A column: its heading, and whether it holds numbers (right-aligned,
/// sorted by value, largest first on the first click).
pub type Column = (&'static str, bool);

pub struct Table {
    /// The table's id: `page.html#sort=ID.COLUMN` opens it sorted.
    id: &'static str,
    columns: Vec<Column>,
    body: String,
    rows: usize,
    /// Rows not shown, and where to find them.
    left_out: Option<String>,
}

/// `s` escaped for HTML, with a line-break opportunity (`<wbr>`) after
/// each `|`, `.`, `/` and `,` and before each `+`: where a symbol
/// (`radix_tree_node_alloc.constprop.0+0xb3`) or a flag list
/// (`NOWAIT|NORETRY|NOMEMALLOC`) may wrap in a narrow column. The text, and
/// a sort by it, are unchanged.
pub fn breakable(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 16);
    let mut buf = [0u8; 4];
    for c in s.chars() {
        if c == '+' {
            o.push_str("<wbr>");
        }
        o.push_str(&esc(c.encode_utf8(&mut buf)));
        if matches!(c, '|' | '.' | '/' | ',') {
            o.push_str("<wbr>");
        }
    }
    o
}

impl Table {
    pub fn new(id: &'static str, columns: &[Column]) -> Self {
        Table {
            id,
            columns: columns.to_vec(),
            body: String::new(),
            rows: 0,
            left_out: None,
        }
    }

    /// Starts a row.
    pub fn row(&mut self) -> &mut Self {
        if self.rows > 0 {
            self.body.push_str("</tr>");
        }
        self.body.push_str("<tr>");
        self.rows += 1;
        self
    }

    pub fn text(&mut self, s: &str) -> &mut Self {
        let _ = write!(self.body, "<td>{}</td>", esc(s));
        self
    }

    /// A severity (`info`, `warning`, `error`) as a coloured tag.
    pub fn severity(&mut self, name: &str) -> &mut Self {
        let _ = write!(
            self.body,
            r#"<td><span class="sev {0}">{0}</span></td>"#,
            esc(name)
        );
        self
    }

    /// Text in a fixed-width font (symbols, addresses, flags), free to
    /// wrap where a symbol or a flag list may ([`breakable`]).
    pub fn code(&mut self, s: &str) -> &mut Self {
        let _ = write!(self.body, "<td><code>{}</code></td>", breakable(s));
        self
    }

    /// A kernel stack, innermost first from the row's call site: folded to
    /// the call site's caller and the number of callers, unfolded (all the
    /// callers, one a line) on a click, or from the start where `open`;
    /// `-` without a stack.
    pub fn stack(&mut self, frames: &[String], open: bool) -> &mut Self {
        let callers = frames.get(1..).unwrap_or_default();
        let Some(first) = callers.first() else {
            return match frames.first() {
                Some(site) => self.code(site),
                None => self.text("-"),
            };
        };
        let _ = write!(
            self.body,
            r#"<td class="stack"><details{}><summary><code>← {}</code>"#,
            if open { " open" } else { "" },
            breakable(first)
        );
        let _ = write!(
            self.body,
            r#" <span class="depth">… {} caller{}</span></summary><ol>"#,
            callers.len(),
            if callers.len() == 1 { "" } else { "s" }
        );
        for f in callers {
            let _ = write!(self.body, "<li><code>{}</code></li>", breakable(f));
        }
        self.body.push_str("</ol></details></td>");
        self
    }

    pub fn count(&mut self, n: u64) -> &mut Self {
        let _ = write!(
            self.body,
            r#"<td class="n" data-v="{n}">{}</td>"#,
            thousands(n)
        );
        self
    }

    /// A count, or `-` where it is unknown (sorted below every count).
    pub fn maybe_count(&mut self, n: Option<u64>) -> &mut Self {
        match n {
            Some(n) => self.count(n),
            None => self.value(-1.0, "-"),
        }
    }

    /// A number shown as `shown` (a percentage, an age) and sorted by `v`.
    pub fn value(&mut self, v: f64, shown: &str) -> &mut Self {
        let _ = write!(
            self.body,
            r#"<td class="n" data-v="{v}">{}</td>"#,
            esc(shown)
        );
        self
    }

    /// Says below the table that `n` more rows are in `where_`.
    pub fn more(&mut self, n: usize, where_: &str) {
        if n > 0 {
            self.left_out = Some(format!("{} more rows: {where_}", thousands(n as u64)));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn render(&self, out: &mut String) {
        let _ = write!(
            out,
            r#"<div class="scroll"><table class="sortable" id="{}"><thead><tr>"#,
            self.id
        );
        for (name, numeric) in &self.columns {
            let _ = write!(
                out,
                r#"<th{} title="sort">{}</th>"#,
                if *numeric { r#" data-type="n""# } else { "" },
                esc(name)
            );
        }
        out.push_str("</tr></thead><tbody>");
        out.push_str(&self.body);
        if self.rows > 0 {
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></div>");
        if let Some(s) = &self.left_out {
            let _ = write!(out, r#"<p class="note">{}</p>"#, esc(s));
        }
    }
}
