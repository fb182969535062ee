//! A small SVG chart writer: line/scatter charts and grouped bar charts.
//!
//! Why hand-built rather than `plotters`: the report needs four chart kinds with axes, ticks and
//! a legend, as inline SVG with no fonts, scripts or network. plotters' SVG backend measures
//! text with a font backend (or fails without one) and pulls a sizeable tree for what is here
//! about 250 lines whose output is plain, diffable text and is unit-tested below.

use std::fmt::Write as _;

/// Plot area geometry (pixels).
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 42.0;

/// A colour-blind-safe palette (Okabe & Ito, "Color Universal Design", 2008).
pub(crate) const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
];

/// One line (or set of markers) on a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: &'static str,
    pub dashed: bool,
    /// Draw markers only (a scatter plot), no connecting line.
    pub scatter: bool,
}

/// A chart with numeric x and y axes.
#[derive(Debug, Clone, Default)]
pub(crate) struct XyChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// A labelled horizontal reference line (e.g. capacity).
    pub reference: Option<(f64, String)>,
    /// Fixed upper end of the x axis (e.g. the run's length), instead of the data's maximum.
    pub x_max: Option<f64>,
}

/// Escapes text for SVG/HTML content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Up to about `n` "nice" tick values (1, 2, 5 × 10^k steps) covering `[lo, hi]`.
pub(crate) fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo || n == 0 {
        return vec![lo];
    }
    let raw = (hi - lo) / n as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() * step;
    let mut ticks = Vec::new();
    let mut v = first;
    while v <= hi + step * 1e-9 && ticks.len() <= 2 * n + 2 {
        ticks.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    ticks
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Upper bound of a `[0, max]` axis holding `values` (at least 1, with 5% headroom).
fn axis_max(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    if max <= 0.0 {
        1.0
    } else {
        max * 1.05
    }
}

struct Frame {
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        LEFT + (x / self.x_max).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }
    fn py(&self, y: f64) -> f64 {
        HEIGHT - BOTTOM - (y / self.y_max).clamp(0.0, 1.0) * (HEIGHT - TOP - BOTTOM)
    }
}

fn open(svg: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11" role="img"><title>{t}</title><text x="{tx}" y="16" font-size="13" font-weight="bold">{t}</text><text x="{xx}" y="{xy}" text-anchor="middle">{xl}</text><text transform="translate(14 {yy}) rotate(-90)" text-anchor="middle">{yl}</text>"#,
        t = escape(title),
        tx = LEFT,
        xx = (LEFT + WIDTH - RIGHT) / 2.0,
        xy = HEIGHT - 6.0,
        xl = escape(x_label),
        yy = (TOP + HEIGHT - BOTTOM) / 2.0,
        yl = escape(y_label),
    );
}

fn y_axis(svg: &mut String, f: &Frame) {
    for tick in nice_ticks(0.0, f.y_max, 5) {
        let y = f.py(tick);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{v}</text>"##,
            x2 = WIDTH - RIGHT,
            tx = LEFT - 4.0,
            ty = y + 4.0,
            v = fmt_num(tick),
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{b}" stroke="#333"/><line x1="{LEFT}" x2="{r}" y1="{b}" y2="{b}" stroke="#333"/>"##,
        b = HEIGHT - BOTTOM,
        r = WIDTH - RIGHT,
    );
}

/// A legend entry: name, colour, dashed line, marker (scatter) instead of a line.
type Entry<'a> = (&'a str, &'a str, bool, bool);

fn legend(svg: &mut String, entries: &[Entry<'_>]) {
    for (i, (name, color, dashed, marker)) in entries.iter().enumerate() {
        let y = TOP + 8.0 + 16.0 * i as f64;
        let x = WIDTH - RIGHT + 10.0;
        if *marker {
            let _ = write!(
                svg,
                r#"<circle cx="{cx}" cy="{y}" r="3" fill="{color}"/>"#,
                cx = x + 9.0
            );
        } else {
            let dash = if *dashed {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            };
            let _ = write!(
                svg,
                r#"<line x1="{x}" x2="{x2}" y1="{y}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/>"#,
                x2 = x + 18.0,
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{tx}" y="{ty}">{n}</text>"#,
            tx = x + 22.0,
            ty = y + 4.0,
            n = escape(name),
        );
    }
}

/// Renders a line (or scatter) chart with axes from 0.
pub(crate) fn xy_chart(c: &XyChart) -> String {
    let points = || c.series.iter().flat_map(|s| s.points.iter());
    let f = Frame {
        x_max: c
            .x_max
            .filter(|x| x.is_finite() && *x > 0.0)
            .unwrap_or_else(|| axis_max(points().map(|p| p.0))),
        y_max: axis_max(points().map(|p| p.1).chain(c.reference.iter().map(|r| r.0))),
    };
    let mut svg = String::new();
    open(&mut svg, &c.title, &c.x_label, &c.y_label);
    y_axis(&mut svg, &f);
    for tick in nice_ticks(0.0, f.x_max, 8) {
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{y}" text-anchor="middle">{v}</text>"#,
            x = f.px(tick),
            y = HEIGHT - BOTTOM + 14.0,
            v = fmt_num(tick),
        );
    }
    if let Some((value, label)) = &c.reference {
        let y = f.py(*value);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}" stroke="#888" stroke-dasharray="2 2"/><text x="{tx}" y="{ty:.1}" text-anchor="end" fill="#555">{l}</text>"##,
            x2 = WIDTH - RIGHT,
            tx = WIDTH - RIGHT - 2.0,
            ty = y - 3.0,
            l = escape(label),
        );
    }
    for s in &c.series {
        let pts: Vec<String> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", f.px(*x), f.py(*y)))
            .collect();
        if s.scatter {
            for p in &pts {
                let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    svg,
                    r#"<circle cx="{x}" cy="{y}" r="2.5" fill="{}" fill-opacity="0.7"/>"#,
                    s.color
                );
            }
        } else if !pts.is_empty() {
            let dash = if s.dashed {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            };
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.8"{dash} points="{}"/>"#,
                s.color,
                pts.join(" ")
            );
        }
    }
    let entries: Vec<Entry<'_>> = c
        .series
        .iter()
        .map(|s| (s.name.as_str(), s.color, s.dashed, s.scatter))
        .collect();
    legend(&mut svg, &entries);
    svg.push_str("</svg>");
    svg
}

/// Renders a grouped bar chart: one group per label, one bar per series (`None` = no bar).
pub(crate) fn bar_chart(
    title: &str,
    y_label: &str,
    series: &[(String, &'static str)],
    groups: &[(String, Vec<Option<f64>>)],
    y_max: Option<f64>,
) -> String {
    let f = Frame {
        x_max: 1.0,
        y_max: y_max
            .unwrap_or_else(|| axis_max(groups.iter().flat_map(|g| g.1.iter().flatten().copied()))),
    };
    let mut svg = String::new();
    open(&mut svg, title, "", y_label);
    y_axis(&mut svg, &f);
    let group_w = (WIDTH - LEFT - RIGHT) / groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    for (gi, (label, values)) in groups.iter().enumerate() {
        let gx = LEFT + gi as f64 * group_w;
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{y}" text-anchor="middle">{l}</text>"#,
            x = gx + group_w / 2.0,
            y = HEIGHT - BOTTOM + 14.0,
            l = escape(label),
        );
        for (si, value) in values.iter().enumerate() {
            let (Some(v), Some((_, color))) = (value, series.get(si)) else {
                continue;
            };
            let top = f.py(*v);
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{color}"><title>{v:.4}</title></rect>"#,
                x = gx + group_w * 0.1 + si as f64 * bar_w,
                w = bar_w * 0.9,
                h = (HEIGHT - BOTTOM - top).max(0.0),
            );
        }
    }
    let entries: Vec<Entry<'_>> = series
        .iter()
        .map(|(n, c)| (n.as_str(), *c, false, false))
        .collect();
    legend(&mut svg, &entries);
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 100.0, 5),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(nice_ticks(0.0, 1.0, 4), vec![0.0, 0.5, 1.0]);
        let t = nice_ticks(0.0, 1234.0, 5);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap() <= 1234.0 && *t.last().unwrap() >= 1000.0);
        assert_eq!(nice_ticks(5.0, 5.0, 5), vec![5.0]);
        assert_eq!(nice_ticks(0.0, f64::NAN, 5).len(), 1);
    }

    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            escape(r#"<a & "b">'"#),
            "&lt;a &amp; &quot;b&quot;&gt;&#39;"
        );
    }

    #[test]
    fn xy_chart_maps_points_into_the_plot_area() {
        let chart = XyChart {
            title: "t<".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "s".into(),
                points: vec![(0.0, 0.0), (10.0, 100.0)],
                color: PALETTE[0],
                dashed: false,
                scatter: false,
            }],
            reference: Some((50.0, "capacity".into())),
            x_max: None,
        };
        let svg = xy_chart(&chart);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("t&lt;"), "title escaped");
        // (0,0) is the bottom-left corner of the plot area.
        assert!(svg.contains(&format!("{:.1},{:.1}", LEFT, HEIGHT - BOTTOM)));
        assert!(svg.contains("capacity"));
        // Axis max is 105 (5% headroom): the point (10, 100) is inside, not clipped to the top.
        let top = HEIGHT - BOTTOM - 100.0 / 105.0 * (HEIGHT - TOP - BOTTOM);
        assert!(svg.contains(&format!("{top:.1}")), "{svg}");
    }

    #[test]
    fn bar_chart_draws_one_rect_per_value() {
        let svg = bar_chart(
            "b",
            "ratio",
            &[("a".into(), PALETTE[0]), ("b".into(), PALETTE[1])],
            &[
                ("X".into(), vec![Some(1.0), Some(0.5)]),
                ("Y".into(), vec![None, Some(0.0)]),
            ],
            Some(1.0),
        );
        assert_eq!(svg.matches("<rect").count(), 3);
        // A bar of value 1.0 with y_max 1.0 reaches the top of the plot area.
        assert!(svg.contains(&format!(r#"y="{TOP:.1}""#)));
    }
}
