//! chart.png: per measured phase, each column's IOPS as a ratio to the
//! ceiling (median bar, min-max whisker), and below it, when the guests
//! reported latencies, each column's p99 completion latency over the
//! ceiling's the same way. Text needs a TrueType font found at run time;
//! without one the chart is drawn without labels.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::stats::Spread;
use crate::report::summary::Summary;

/// Fonts tried, in order, for the chart's labels.
pub const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Writing the chart failed.
#[derive(Debug, thiserror::Error)]
#[error("chart {}: {why}; the results in results.json and table.md stand without it", path.display())]
pub struct ChartError {
    /// The PNG.
    pub path: PathBuf,
    /// What went wrong.
    pub why: String,
}

/// Register the first readable font as "sans-serif"; whether one was found.
pub fn load_font(candidates: &[&str]) -> bool {
    for c in candidates {
        if let Ok(bytes) = std::fs::read(c) {
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// Per phase, per column: the bar's value.
type Bars = Vec<(String, Vec<(String, Option<Spread>)>)>;

/// What one bar shows: the ratio to the ceiling, else to the baseline's median.
fn bars(s: &Summary) -> (String, Bars) {
    let use_ceiling = s.ceiling.is_some();
    let what = match &s.ceiling {
        Some(c) => format!("IOPS / {c} IOPS"),
        None => format!("IOPS / {} median IOPS", s.baseline),
    };
    let groups = s
        .groups
        .iter()
        .map(|g| {
            let base = g
                .rows
                .iter()
                .find(|r| r.column == s.baseline)
                .and_then(|r| r.iops);
            let rows = g
                .rows
                .iter()
                .filter(|r| Some(&r.column) != s.ceiling.as_ref())
                .map(|r| {
                    let v = if use_ceiling {
                        r.ratio
                    } else {
                        match (r.iops, base) {
                            (Some(i), Some(b)) if b.median > 0.0 => Some(Spread {
                                median: i.median / b.median,
                                min: i.min / b.median,
                                max: i.max / b.median,
                                n: i.n,
                            }),
                            _ => None,
                        }
                    };
                    (r.column.clone(), v)
                })
                .collect();
            (g.phase.clone(), rows)
        })
        .collect();
    (what, groups)
}

/// What the latency panel's bars show: each column's p99 over the
/// ceiling's of the same round, else over the baseline's median p99; no
/// panel when no phase reported latencies.
fn latency_bars(s: &Summary) -> Option<(String, Bars)> {
    if s.latency.is_empty() {
        return None;
    }
    let what = match &s.ceiling {
        Some(c) => format!("p99 latency / {c} p99"),
        None => format!("p99 latency / {} median p99", s.baseline),
    };
    let groups = s
        .groups
        .iter()
        .map(|g| {
            let of = |tag: &str| {
                s.latency
                    .iter()
                    .find(|l| l.phase == g.phase && l.column == tag)
            };
            let base = of(&s.baseline).and_then(|l| l.p99_us);
            let rows = g
                .rows
                .iter()
                .filter(|r| Some(&r.column) != s.ceiling.as_ref())
                .map(|r| {
                    let l = of(&r.column);
                    let v = if s.ceiling.is_some() {
                        l.and_then(|l| l.p99_ratio)
                    } else {
                        match (l.and_then(|l| l.p99_us), base) {
                            (Some(p), Some(b)) if b.median > 0.0 => Some(Spread {
                                median: p.median / b.median,
                                min: p.min / b.median,
                                max: p.max / b.median,
                                n: p.n,
                            }),
                            _ => None,
                        }
                    };
                    (r.column.clone(), v)
                })
                .collect();
            (g.phase.clone(), rows)
        })
        .collect();
    Some((what, groups))
}

/// Plot height in pixels that the legend box and the group titles take
/// (above every bar), as a share of the plot: 16 px a legend line, its
/// margins and frame, the titles' line; the plot is about 440 px high.
fn legend_share(ncols: usize, labels: bool) -> f64 {
    if !labels {
        return 0.0;
    }
    let px = 16.0 * ncols as f64 + 25.0 + 20.0;
    (px / 440.0).min(0.7)
}

/// Draw `s` into `path` (PNG); `labels` draws text (a font must be loaded).
/// The IOPS panel on top; the latency panel below it when there is one.
pub fn write_chart(s: &Summary, path: &Path, labels: bool) -> Result<(), ChartError> {
    let err = |why: String| ChartError {
        path: path.to_path_buf(),
        why,
    };
    let latency = latency_bars(s);
    let height = if latency.is_some() { 1040 } else { 520 };
    let root = BitMapBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (what, groups) = bars(s);
    let rounds = s.rounds_text();
    let mut panels = vec![(what, groups)];
    panels.extend(latency);
    let areas = root.split_evenly((panels.len(), 1));
    for (area, (what, groups)) in areas.iter().zip(&panels) {
        let caption = format!("NVMe passthrough: {what}, median and min-max over {rounds}");
        panel(area, &caption, what, groups, s.ceiling.is_some(), labels)
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// One panel: per phase, a bar per column (median, min-max whisker), a
/// line at 1 when `reference` (the ceiling's level).
fn panel(
    root: &DrawingArea<BitMapBackend, Shift>,
    caption: &str,
    what: &str,
    groups: &Bars,
    reference: bool,
    labels: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let err = |e: &dyn std::fmt::Display| -> Box<dyn std::error::Error> { e.to_string().into() };
    let n = groups.len().max(1);
    let ncols = groups.first().map_or(1, |g| g.1.len().max(1));
    let top = groups
        .iter()
        .flat_map(|g| g.1.iter().filter_map(|(_, v)| v.map(|v| v.max)))
        .fold(1.1f64, |a, b| a.max(b * 1.1));
    // Headroom for the legend (upper right, a line per column) and the
    // group titles, so that neither ever covers a bar.
    let ymax = top / (1.0 - legend_share(ncols, labels));
    let mut b = ChartBuilder::on(root);
    b.margin(12);
    if labels {
        b.caption(caption, ("sans-serif", 18))
            .x_label_area_size(10)
            .y_label_area_size(50);
    }
    let mut chart = b
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
        .map_err(|e| err(&e))?;
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh().disable_x_axis();
    if labels {
        mesh.y_desc(what).label_style(("sans-serif", 13));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| err(&e))?;
    let width = 0.8 / ncols as f64;
    for ci in 0..ncols {
        let color = Palette99::pick(ci).to_rgba();
        let mut tag = String::new();
        let mut rects = Vec::new();
        let mut whiskers = Vec::new();
        for (gi, (_, rows)) in groups.iter().enumerate() {
            let Some((t, v)) = rows.get(ci) else { continue };
            tag.clone_from(t);
            let Some(v) = v else { continue };
            let x0 = gi as f64 + 0.1 + ci as f64 * width;
            rects.push(Rectangle::new(
                [(x0, 0.0), (x0 + width * 0.9, v.median)],
                color.filled(),
            ));
            let (xm, cap) = (x0 + width * 0.45, width * 0.2);
            whiskers.push(PathElement::new(
                vec![(xm, v.min), (xm, v.max)],
                BLACK.stroke_width(1),
            ));
            whiskers.push(PathElement::new(
                vec![(xm - cap, v.min), (xm + cap, v.min)],
                BLACK.stroke_width(1),
            ));
            whiskers.push(PathElement::new(
                vec![(xm - cap, v.max), (xm + cap, v.max)],
                BLACK.stroke_width(1),
            ));
        }
        let series = chart.draw_series(rects).map_err(|e| err(&e))?;
        if labels {
            series.label(tag).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
            });
        }
        chart.draw_series(whiskers).map_err(|e| err(&e))?;
    }
    if reference {
        chart
            .draw_series([PathElement::new(
                vec![(0.0, 1.0), (n as f64, 1.0)],
                BLACK.stroke_width(1),
            )])
            .map_err(|e| err(&e))?;
    }
    if labels {
        let style =
            TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        chart
            .draw_series(groups.iter().enumerate().map(|(gi, (name, _))| {
                Text::new(name.clone(), (gi as f64 + 0.5, ymax * 0.99), style.clone())
            }))
            .map_err(|e| err(&e))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .margin(25)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
