//! The one text-table printer: columns as wide as their widest cell
//! (counted in characters), each left- or right-aligned, in the two
//! layouts the programs print:
//!
//! - [`Layout::Ruled`] (the report's tables): a heading between rules of
//!   `-`, cells separated by ` | `, a rule at the end;
//! - [`Layout::Spaced`] (the checker's): rows of cells separated by two
//!   spaces, the heading (if any) a row like the others.
//!
//! A ruled line starts with one space, a spaced one with two; no line has
//! trailing spaces.

/// How a column's cells line up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// The two layouts (see the module's text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Ruled,
    Spaced,
}

/// A table being filled.
#[derive(Clone, Debug)]
pub struct TextTable {
    layout: Layout,
    head: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Per column; columns past its end are right-aligned.
    align: Vec<Align>,
}

/// Rules are at most this wide, however wide the table.
const MAX_RULE: usize = 200;

impl TextTable {
    /// A ruled table with this heading, every column right-aligned.
    pub fn ruled(head: &[&str]) -> Self {
        TextTable {
            layout: Layout::Ruled,
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            align: Vec::new(),
        }
    }

    /// A spaced table of the rows to come, every column right-aligned.
    pub fn spaced() -> Self {
        TextTable {
            layout: Layout::Spaced,
            head: Vec::new(),
            rows: Vec::new(),
            align: Vec::new(),
        }
    }

    /// Aligns column `col` (from 0).
    pub fn align(&mut self, col: usize, a: Align) -> &mut Self {
        if self.align.len() <= col {
            self.align.resize(col + 1, Align::Right);
        }
        self.align[col] = a;
        self
    }

    pub fn row(&mut self, r: Vec<String>) {
        self.rows.push(r);
    }

    fn align_of(&self, col: usize) -> Align {
        self.align.get(col).copied().unwrap_or(Align::Right)
    }

    /// Each column's width: its widest cell (a ruled table's columns are
    /// its heading's).
    fn widths(&self) -> Vec<usize> {
        let cols = match self.layout {
            Layout::Ruled => self.head.len(),
            Layout::Spaced => self.rows.iter().map(Vec::len).max().unwrap_or(0),
        };
        (0..cols)
            .map(|c| {
                self.head
                    .get(c)
                    .into_iter()
                    .chain(self.rows.iter().filter_map(|r| r.get(c)))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The table's text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    /// Appends the table's text to `out`.
    pub fn render_into(&self, out: &mut String) {
        let w = self.widths();
        match self.layout {
            Layout::Ruled => {
                let n = w.len();
                let total: usize = w.iter().sum::<usize>() + 3 * n.saturating_sub(1) + 1;
                let rule = "-".repeat(total.min(MAX_RULE)) + "\n";
                out.push_str(&rule);
                self.line(out, &self.head, &w, " ", " | ");
                out.push_str(&rule);
                for r in &self.rows {
                    self.line(out, r, &w, " ", " | ");
                }
                out.push_str(&rule);
            }
            Layout::Spaced => {
                for r in &self.rows {
                    self.line(out, r, &w, "  ", "  ");
                }
            }
        }
    }

    /// One line: `lead`, then the cells padded to their widths with `sep`
    /// between them.
    fn line(&self, out: &mut String, cells: &[String], w: &[usize], lead: &str, sep: &str) {
        let mut s = String::from(lead);
        for (i, c) in cells.iter().enumerate().take(w.len()) {
            if i > 0 {
                s.push_str(sep);
            }
            let pad = w[i].saturating_sub(c.chars().count());
            match self.align_of(i) {
                Align::Left => {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                }
                Align::Right => {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                }
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ruled_tables_have_a_heading_between_rules() {
        let mut t = TextTable::ruled(&["Callsite", "Hits", "Note"]);
        t.align(0, Align::Left).align(2, Align::Left);
        t.row(cells(&["kmalloc_x+0x10", "1,234", "a"]));
        t.row(cells(&["f", "5", ""]));
        assert_eq!(
            t.render(),
            "------------------------------\n \
             Callsite       |  Hits | Note\n\
             ------------------------------\n \
             kmalloc_x+0x10 | 1,234 | a\n \
             f              |     5 |\n\
             ------------------------------\n"
        );
    }

    #[test]
    fn spaced_tables_line_up_rows_of_any_length() {
        let mut t = TextTable::spaced();
        t.align(1, Align::Left);
        t.row(cells(&["CPU", "events", "lost"]));
        t.row(cells(&["0", "1,429,617", "0"]));
        t.row(cells(&["all", "x"]));
        assert_eq!(
            t.render(),
            "  CPU  events     lost\n    0  1,429,617     0\n  all  x\n"
        );
    }
}
