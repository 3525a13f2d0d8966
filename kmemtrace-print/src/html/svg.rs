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

/// Writes `v` as `{:.1}` does. A chart's points are most of a page's
/// numbers, and the standard formatting rounds each through an exact
/// decimal expansion; a coordinate below 2^20 tenths whose tenths are not
/// within a millionth of a tie rounds the same from its product with ten,
/// as an integer.
fn one_decimal(out: &mut String, v: f64) {
    let tenths = v.abs() * 10.0;
    // Below 2^20, the product is within 2^-33 of the exact one, so a
    // fraction 10^-6 away from a half rounds as the exact value does.
    if tenths < f64::from(1u32 << 20) && (tenths.fract() - 0.5).abs() > 1e-6 {
        let r = tenths.round() as u32;
        if v.is_sign_negative() {
            out.push('-');
        }
        let _ = write!(out, "{}.{}", r / 10, r % 10);
    } else {
        let _ = write!(out, "{v:.1}");
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
                if i > 0 {
                    out.push(' ');
                }
                one_decimal(out, sx(x));
                out.push(',');
                one_decimal(out, sy(y));
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

/// A drawing layer of a [`Lanes`] chart: what its stretches are and how
/// they look. Layers are drawn in order, so a later one shows on top.
pub struct Layer<'a> {
    /// What one stretch is, and many (`episode`, `episodes`), and what
    /// their time is (`stalled`): the title of stretches drawn as one.
    pub one: &'a str,
    pub many: &'a str,
    pub ns_is: &'a str,
    pub color: &'static str,
    /// The share of the lane's height it fills, centred.
    pub height: f64,
}

/// A stretch of time on a lane, in seconds on the chart's axis.
pub struct Stretch {
    pub a: f64,
    pub b: f64,
    /// Its duration in ns, added up where stretches are drawn as one.
    pub ns: u64,
    pub title: String,
}

/// One row of a [`Lanes`] chart.
pub struct Lane {
    pub label: String,
    /// Per layer (the chart's order), its stretches in any order.
    pub stretches: Vec<Vec<Stretch>>,
    /// Instants marked across the lane (seconds), with what they say.
    pub marks: Vec<(f64, String)>,
}

/// Rows of stretches over the capture's time (a row per task, a bar per
/// wait), with instants marked. Stretches closer than a pixel on the same
/// lane and layer are drawn as one bar, at least a pixel and a half wide,
/// whose title counts them: the plot stays light, and a microsecond wait in
/// a minute's capture still shows.
pub struct Lanes<'a> {
    pub title: &'a str,
    /// Seconds after the capture's first event.
    pub x_max: f64,
    pub layers: Vec<Layer<'a>>,
    pub lanes: Vec<Lane>,
    /// The marks' colour and what one is, for the legend.
    pub mark: (&'static str, &'a str),
}

const LANE_H: f64 = 18.0;
const LANE_GAP: f64 = 4.0;
/// The narrowest bar drawn, px.
const MIN_BAR: f64 = 1.5;

impl Lanes<'_> {
    pub fn render(&self, out: &mut String) {
        let longest = self.lanes.iter().map(|l| l.label.chars().count());
        let x0 = (12.0 + 6.5 * longest.max().unwrap_or(4) as f64).clamp(LEFT, 300.0);
        let x1 = WIDTH - RIGHT;
        let h = TOP + (LANE_H + LANE_GAP) * self.lanes.len() as f64 + BOTTOM;
        let x_max = if self.x_max > 0.0 { self.x_max } else { 1.0 };
        let sx = |x: f64| x0 + (x.clamp(0.0, x_max) / x_max) * (x1 - x0);
        let y0 = h - BOTTOM;
        let _ = write!(
            out,
            r#"<figure class="chart"><figcaption>{}</figcaption><svg viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img" aria-label="{}">"#,
            esc(self.title),
            esc(self.title)
        );
        let xt = ticks(x_max, 8);
        // As many decimals as the step needs: stalls often fill a capture of
        // a few milliseconds.
        let step = xt.get(1).copied().unwrap_or(1.0);
        let decimals = (-step.log10()).ceil().clamp(0.0, 9.0) as usize;
        for t in xt {
            let x = sx(t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{y0}"/><line class="tick" x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{:.1}"/><text class="xl" x="{x:.1}" y="{:.1}">{t:.decimals$}s</text>"#,
                y0 + 4.0,
                y0 + 16.0,
            );
        }
        for (i, lane) in self.lanes.iter().enumerate() {
            let top = TOP + (LANE_H + LANE_GAP) * i as f64;
            let _ = write!(
                out,
                r#"<text class="rowlabel" x="{:.1}" y="{:.1}">{}</text>"#,
                x0 - 4.0,
                top + LANE_H / 2.0 + 4.0,
                esc(&lane.label)
            );
            for (layer, stretches) in self.layers.iter().zip(&lane.stretches) {
                let bh = LANE_H * layer.height;
                let y = top + (LANE_H - bh) / 2.0;
                for bar in merged(stretches, &sx) {
                    let title = match bar.n {
                        1 => bar.title.to_string(),
                        n => format!(
                            "{n} {} between {:.6} s and {:.6} s: {} {}",
                            layer.many,
                            bar.a,
                            bar.b,
                            crate::text::age(bar.ns),
                            layer.ns_is
                        ),
                    };
                    let _ = write!(
                        out,
                        r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{}</title></rect>"#,
                        bar.x,
                        bar.w,
                        layer.color,
                        esc(&title)
                    );
                }
            }
            for (t, what) in &lane.marks {
                let x = sx(*t);
                let _ = write!(
                    out,
                    r#"<path d="M{x:.1} {:.1}v{LANE_H}M{:.1} {:.1}h8l-4 5z" stroke="{c}" fill="{c}" stroke-width="2"><title>{}</title></path>"#,
                    top,
                    x - 4.0,
                    top - 1.0,
                    esc(what),
                    c = self.mark.0
                );
            }
        }
        let _ = write!(
            out,
            r#"<line class="axis" x1="{x0:.1}" x2="{x1}" y1="{y0}" y2="{y0}"/><line class="axis" x1="{x0:.1}" x2="{x0:.1}" y1="{y0}" y2="{TOP}"/></svg><div class="legend">"#
        );
        for l in &self.layers {
            let _ = write!(
                out,
                r#"<span><i style="background:{};height:10px"></i>{}</span>"#,
                l.color,
                esc(l.one)
            );
        }
        let _ = write!(
            out,
            r#"<span><i style="background:{};height:10px;width:3px"></i>{}</span></div></figure>"#,
            self.mark.0,
            esc(self.mark.1)
        );
    }
}

/// Stretches drawn as one bar: its pixels, how many, their seconds and
/// time, and the first one's title.
struct Bar<'s> {
    x: f64,
    w: f64,
    n: usize,
    a: f64,
    b: f64,
    ns: u64,
    title: &'s str,
}

/// `stretches` as bars on the axis `sx`: by start, each at least
/// [`MIN_BAR`] wide, those that would touch or overlap merged.
fn merged<'s>(stretches: &'s [Stretch], sx: &dyn Fn(f64) -> f64) -> Vec<Bar<'s>> {
    let mut order: Vec<&Stretch> = stretches.iter().collect();
    order.sort_by(|p, q| p.a.total_cmp(&q.a));
    let mut bars: Vec<Bar<'s>> = Vec::new();
    for s in order {
        let (xa, xb) = (sx(s.a), sx(s.b));
        let w = (xb - xa).max(MIN_BAR);
        match bars.last_mut() {
            Some(last) if xa <= last.x + last.w + 1.0 => {
                last.w = last.w.max(xa + w - last.x);
                last.n += 1;
                last.b = last.b.max(s.b);
                last.ns = last.ns.saturating_add(s.ns);
            }
            _ => bars.push(Bar {
                x: xa,
                w,
                n: 1,
                a: s.a,
                b: s.b,
                ns: s.ns,
                title: &s.title,
            }),
        }
    }
    bars
}

/// A small bar chart of counts over labelled bins (a histogram).
pub struct Bars<'a> {
    pub title: &'a str,
    pub color: &'static str,
    /// Each bin: its label under the axis, its count, its title.
    pub bins: Vec<(String, u64, String)>,
}

impl Bars<'_> {
    pub fn render(&self, out: &mut String) {
        const BIN: f64 = 26.0;
        const H: f64 = 150.0;
        const LEFT: f64 = 40.0;
        const BOTTOM: f64 = 40.0;
        let w = LEFT + BIN * self.bins.len().max(1) as f64 + 10.0;
        let (y0, y1) = (H - BOTTOM, TOP);
        let max = self.bins.iter().map(|b| b.1).max().unwrap_or(0);
        let yt = ticks(max as f64, 3);
        let hi = yt.last().copied().unwrap_or(1.0).max(max as f64).max(1.0);
        let sy = |v: f64| y0 - v / hi * (y0 - y1);
        let _ = write!(
            out,
            r#"<figure class="bars"><figcaption>{}</figcaption><svg viewBox="0 0 {w:.0} {H}" width="{w:.0}" height="{H}" role="img" aria-label="{}">"#,
            esc(self.title),
            esc(self.title)
        );
        for t in &yt {
            let y = sy(*t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="yl" x="{:.1}" y="{:.1}">{}</text>"#,
                w - 10.0,
                LEFT - 4.0,
                y + 4.0,
                short_number(*t)
            );
        }
        for (i, (label, n, title)) in self.bins.iter().enumerate() {
            let x = LEFT + BIN * i as f64;
            let y = sy(*n as f64);
            if *n > 0 {
                let _ = write!(
                    out,
                    r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                    x + 2.0,
                    BIN - 4.0,
                    y0 - y,
                    self.color,
                    esc(title),
                );
            }
            let _ = write!(
                out,
                r#"<text text-anchor="end" transform="translate({:.1},{:.1}) rotate(-45)">{}</text>"#,
                x + BIN / 2.0 + 3.0,
                y0 + 12.0,
                esc(label)
            );
        }
        let _ = write!(
            out,
            r#"<line class="axis" x1="{LEFT}" x2="{:.1}" y1="{y0}" y2="{y0}"/></svg></figure>"#,
            w - 10.0
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
    fn one_decimal_writes_what_the_standard_formatting_does() {
        let mut values = vec![
            0.0,
            -0.0,
            0.05,
            0.15,
            0.25,
            0.35,
            -0.04,
            -0.05,
            -0.25,
            1.45,
            2.5,
            99.95,
            123.456,
            1e5,
            104857.55,
            104857.6,
            2e6,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            1e-300,
        ];
        // Ties and near-ties at every scale, and a deterministic spread.
        for k in 0..20_000u32 {
            let base = f64::from(k) / 20.0;
            values.extend([base, -base, base + 1e-9, base - 1e-9, base * 1.37]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push((x >> 11) as f64 / (1u64 << 53) as f64 * 2e5 - 1e5);
        }
        for v in values {
            let mut got = String::new();
            one_decimal(&mut got, v);
            assert_eq!(got, format!("{v:.1}"), "{v:e}");
        }
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(0.7, 4), vec![0.0, 0.2, 0.4, 0.6000000000000001]);
        assert_eq!(ticks(0.0, 4), vec![0.0]);
        let b = byte_ticks(0.0, 3.0 * 1024.0 * 1024.0);
        assert!(b.iter().all(|t| (t / 524288.0).fract() == 0.0), "{b:?}");
        assert!(b.len() >= 3 && b.len() <= 8, "{b:?}");
    }

    /// Stretches a pixel apart or overlapping are one bar that counts
    /// them; a microsecond one is still a pixel and a half wide.
    #[test]
    fn lanes_draw_close_stretches_as_one_bar() {
        let st = |a: f64, b: f64| Stretch {
            a,
            b,
            ns: ((b - a) * 1e9).round() as u64,
            title: format!("at {a}"),
        };
        let v = [
            st(5.0, 6.0),
            st(1.0, 1.000001),
            st(1.0005, 1.001),
            st(5.5, 5.6),
        ];
        let sx = |x: f64| x * 100.0;
        let bars = merged(&v, &sx);
        assert_eq!(bars.len(), 2);
        assert_eq!((bars[0].n, bars[0].title), (2, "at 1"));
        // The second, 0.05 px after the first, is drawn 1.5 px wide too.
        assert!((bars[0].w - 1.55).abs() < 1e-9, "{}", bars[0].w);
        assert_eq!(bars[0].ns, 1000 + 500_000);
        assert_eq!((bars[1].n, bars[1].x, bars[1].w), (2, 500.0, 100.0));
        let mut out = String::new();
        Lanes {
            title: "t",
            x_max: 10.0,
            layers: vec![Layer {
                one: "wait",
                many: "waits",
                ns_is: "waited",
                color: "#000",
                height: 1.0,
            }],
            lanes: vec![Lane {
                label: "a <b>".into(),
                stretches: vec![v.into_iter().collect()],
                marks: vec![(2.0, "kill".into())],
            }],
            mark: ("#f00", "kill"),
        }
        .render(&mut out);
        assert_eq!(out.matches("<rect").count(), 2);
        assert!(out.contains(
            "<title>2 waits between 1.000000 s and 1.001000 s: 501.000 us waited</title>"
        ));
        assert!(out.contains(">a &lt;b&gt;</text>"));
        assert!(out.contains("<title>kill</title></path>"));
    }

    #[test]
    fn heat_colours_run_from_pale_to_dark() {
        assert_eq!(heat_colour(0.0), "#ffeda0");
        assert_eq!(heat_colour(1.0), "#a50f15");
    }
}
