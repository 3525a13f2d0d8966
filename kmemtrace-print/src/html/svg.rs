//! Inline SVG plots: time charts (step lines over seconds, with shaded
//! windows) and heat maps. Written as text here, so the page needs no
//! script to draw and no library at view time; every mark carries a
//! `<title>`, which the browser shows on hover.

use super::esc;
use std::fmt::Write as _;

/// Tableau 10: distinct on white, and for most colour-blind readers.
pub const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// How a chart's values read.
#[derive(Clone, Copy)]
pub enum Unit {
    Bytes,
    PerSecond,
}

impl Unit {
    fn label(self, v: f64) -> String {
        match self {
            Unit::Bytes if v < 0.0 => format!("-{}", kmemtrace_kernel::human::bytes(-v)),
            Unit::Bytes => kmemtrace_kernel::human::bytes(v),
            Unit::PerSecond => short_number(v) + "/s",
        }
    }
}

/// `12345` → `12.3k`.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// One series: vertices in (seconds, value), drawn joined in order.
pub struct Line {
    pub name: String,
    pub color: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A chart over the capture's time.
pub struct TimeChart<'a> {
    pub title: &'a str,
    pub height: u32,
    /// Seconds after the capture's first event.
    pub x_max: f64,
    /// The top of the value axis (small multiples share one); else the
    /// highest value.
    pub y_max: Option<f64>,
    pub unit: Unit,
    pub lines: Vec<Line>,
    /// Windows (seconds) shaded as lost events, with what they say on hover.
    pub shaded: Vec<(f64, f64, String)>,
}

const WIDTH: f64 = 900.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 22.0;

/// About `n` round steps (1, 2 or 5 times a power of ten) covering `max`.
pub fn ticks(max: f64, n: usize) -> Vec<f64> {
    if max <= 0.0 || !max.is_finite() {
        return vec![0.0];
    }
    let raw = max / n.max(1) as f64;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|t| *t <= max * 1.0001)
        .collect()
}

/// Binary-unit steps for byte axes (so labels read 256 MiB, not 268.4 MB).
fn byte_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1.0);
    let raw = span / 5.0;
    let mut step = 1.0f64;
    while step * 2.0 <= raw {
        step *= 2.0;
    }
    if step * 4.0 <= raw * 3.0 {
        step *= 2.0;
    }
    let first = (lo / step).ceil() * step;
    (0..)
        .map(|i| first + i as f64 * step)
        .take_while(|t| *t <= hi * 1.0001 + step * 1e-9)
        .collect()
}

impl TimeChart<'_> {
    /// The chart as an `<svg>` element with its legend.
    pub fn render(&self, out: &mut String) {
        let h = f64::from(self.height);
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, h - BOTTOM, TOP);
        let x_max = if self.x_max > 0.0 { self.x_max } else { 1.0 };
        let values = self.lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        let (mut lo, mut hi) = values.fold((0f64, 0f64), |(a, b), v| (a.min(v), b.max(v)));
        if let Some(m) = self.y_max {
            hi = hi.max(m);
        }
        if hi <= lo {
            hi = lo + 1.0;
        }
        let yt = match self.unit {
            Unit::Bytes => byte_ticks(lo, hi),
            Unit::PerSecond => ticks(hi, 4),
        };
        lo = lo.min(yt.first().copied().unwrap_or(lo));
        hi = hi.max(yt.last().copied().unwrap_or(hi));
        let sx = |x: f64| x0 + (x.clamp(0.0, x_max) / x_max) * (x1 - x0);
        let sy = |y: f64| y0 - (y - lo) / (hi - lo) * (y0 - y1);
        let _ = write!(
            out,
            r#"<figure class="chart"><figcaption>{}</figcaption><svg viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img" aria-label="{}">"#,
            esc(self.title),
            esc(self.title)
        );
        for (a, b, what) in &self.shaded {
            let (xa, xb) = (sx(*a), sx(*b));
            let _ = write!(
                out,
                r#"<rect class="lost" x="{xa:.1}" y="{y1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
                (xb - xa).max(1.5),
                y0 - y1,
                esc(what)
            );
        }
        for t in &yt {
            let y = sy(*t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x0}" x2="{x1}" y1="{y:.1}" y2="{y:.1}"/><text class="yl" x="{:.1}" y="{:.1}">{}</text>"#,
                x0 - 4.0,
                y + 4.0,
                esc(&self.unit.label(*t))
            );
        }
        for t in ticks(x_max, 8) {
            let x = sx(t);
            let _ = write!(
                out,
                r#"<line class="tick" x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{:.1}"/><text class="xl" x="{x:.1}" y="{:.1}">{}s</text>"#,
                y0 + 4.0,
                y0 + 16.0,
                trim_float(t)
            );
        }
        let _ = write!(
            out,
            r#"<line class="axis" x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}"/><line class="axis" x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}"/>"#
        );
        for l in &self.lines {
            let _ = write!(
                out,
                r#"<polyline class="series" stroke="{}" points=""#,
                l.color
            );
            for (i, &(x, y)) in l.points.iter().enumerate() {
                let sep = if i == 0 { "" } else { " " };
                let _ = write!(out, "{sep}{:.1},{:.1}", sx(x), sy(y));
            }
            let _ = write!(out, r#""><title>{}</title></polyline>"#, esc(&l.name));
        }
        out.push_str("</svg>");
        if self.lines.len() > 1 || !self.shaded.is_empty() {
            out.push_str(r#"<div class="legend">"#);
            for l in &self.lines {
                let _ = write!(
                    out,
                    r#"<span><i style="background:{}"></i>{}</span>"#,
                    l.color,
                    esc(&l.name)
                );
            }
            if !self.shaded.is_empty() {
                out.push_str(r#"<span><i class="lost"></i>events lost</span>"#);
            }
            out.push_str("</div>");
        }
        out.push_str("</figure>");
    }
}

/// `2.50` → `2.5`, `3.00` → `3`.
fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A matrix of counts, coloured by the logarithm of each count.
pub struct HeatMap<'a> {
    pub title: &'a str,
    /// What rows and columns are (`allocating CPU`, `order`).
    pub row_axis: &'a str,
    pub col_axis: &'a str,
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    pub values: Vec<Vec<u64>>,
}

impl HeatMap<'_> {
    pub fn render(&self, out: &mut String) {
        let cell = match self.cols.len().max(self.rows.len()) {
            0..=16 => 36.0,
            17..=64 => 14.0,
            _ => 6.0,
        };
        // Wide enough for the row labels and the axis names above them.
        let label_w = (16.0 + 7.0 * self.rows.iter().map(|r| r.len()).max().unwrap_or(1) as f64)
            .max(8.0 * self.row_axis.chars().count() as f64);
        let head_h = 30.0 + 7.0 * self.cols.iter().map(|c| c.len()).max().unwrap_or(1) as f64;
        let w = label_w + cell * self.cols.len() as f64 + 10.0;
        let h = head_h + cell * self.rows.len() as f64 + 10.0;
        let max = self.values.iter().flatten().copied().max().unwrap_or(0);
        let scale = ((max as f64) + 1.0).ln().max(1e-9);
        let _ = write!(
            out,
            r#"<figure class="heat"><figcaption>{}</figcaption><svg viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" aria-label="{}">"#,
            esc(self.title),
            esc(self.title)
        );
        let _ = write!(
            out,
            r#"<text class="axisname" x="{label_w:.0}" y="12">{} →</text><text class="axisname" x="2" y="{:.0}">{} ↓</text>"#,
            esc(self.col_axis),
            head_h - 4.0,
            esc(self.row_axis)
        );
        let show_labels = cell >= 14.0;
        for (j, c) in self.cols.iter().enumerate() {
            if show_labels || j % 8 == 0 {
                let x = label_w + cell * (j as f64 + 0.5);
                let _ = write!(
                    out,
                    r#"<text class="collabel" transform="translate({x:.1},{:.1}) rotate(-60)">{}</text>"#,
                    head_h - 6.0,
                    esc(c)
                );
            }
        }
        for (i, r) in self.rows.iter().enumerate() {
            let y = head_h + cell * i as f64;
            if show_labels || i % 8 == 0 {
                let _ = write!(
                    out,
                    r#"<text class="rowlabel" x="{:.1}" y="{:.1}">{}</text>"#,
                    label_w - 4.0,
                    y + cell / 2.0 + 4.0,
                    esc(r)
                );
            }
            for (j, &v) in self.values.get(i).into_iter().flatten().enumerate() {
                if v == 0 {
                    continue;
                }
                let t = ((v as f64) + 1.0).ln() / scale;
                let x = label_w + cell * j as f64;
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{cell}" height="{cell}" fill="{}"><title>{} {}, {} {}: {}</title></rect>"#,
                    heat_colour(t),
                    esc(self.row_axis),
                    esc(r),
                    esc(self.col_axis),
                    esc(self.cols.get(j).map_or("", |s| s.as_str())),
                    kmemtrace_kernel::human::thousands(v)
                );
                if cell >= 36.0 {
                    let _ = write!(
                        out,
                        r#"<text class="cellv{}" x="{:.1}" y="{:.1}">{}</text>"#,
                        if t > 0.6 { " dark" } else { "" },
                        x + cell / 2.0,
                        y + cell / 2.0 + 4.0,
                        short_number(v as f64)
                    );
                }
            }
        }
        let gw = cell * self.cols.len() as f64;
        let gh = cell * self.rows.len() as f64;
        let _ = write!(
            out,
            r#"<rect class="frame" x="{label_w:.1}" y="{head_h:.1}" width="{gw:.1}" height="{gh:.1}"/></svg></figure>"#
        );
    }
}

/// From pale yellow (few) to dark red (most), `t` in 0..=1.
fn heat_colour(t: f64) -> String {
    let t = t.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(255.0, 165.0),
        lerp(237.0, 15.0),
        lerp(160.0, 21.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.7, 4), vec![0.0, 0.2, 0.4, 0.6000000000000001]);
        assert_eq!(ticks(0.0, 4), vec![0.0]);
        let b = byte_ticks(0.0, 3.0 * 1024.0 * 1024.0);
        assert!(b.iter().all(|t| (t / 524288.0).fract() == 0.0), "{b:?}");
        assert!(b.len() >= 3 && b.len() <= 8, "{b:?}");
    }

    #[test]
    fn heat_colours_run_from_pale_to_dark() {
        assert_eq!(heat_colour(0.0), "#ffeda0");
        assert_eq!(heat_colour(1.0), "#a50f15");
    }
}
