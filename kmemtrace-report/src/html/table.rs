//! HTML tables whose columns sort on a click (the page's script reads
//! each cell's `data-v`, the exact number behind the shown text).

use super::esc;
use kmemtrace_format::human::thousands;
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

    /// Text in a fixed-width font (symbols, addresses, flags).
    pub fn code(&mut self, s: &str) -> &mut Self {
        let _ = write!(self.body, "<td><code>{}</code></td>", esc(s));
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
