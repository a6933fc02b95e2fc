//! A PNG chart of the server's RSS over a run (plotters, bitmap backend). Text needs a
//! TrueType font: DejaVu Sans from Debian's `fonts-dejavu-core` when present; without it
//! the chart is drawn without labels rather than not at all.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

fn font_available() -> bool {
    for p in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(p) {
            // plotters keeps the font for the process' life.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// Draws `samples` ((seconds, KiB)) to `path` as a line chart titled `title`.
pub fn rss_png(path: &Path, title: &str, samples: &[(f64, u64)]) -> Result<(), String> {
    if samples.is_empty() {
        return Err("no RSS samples (pass --pid)".into());
    }
    let labels = font_available();
    let mib: Vec<(f64, f64)> = samples
        .iter()
        .map(|(t, k)| (*t, *k as f64 / 1024.0))
        .collect();
    let t_max = mib.iter().map(|s| s.0).fold(0.1, f64::max);
    let y_max = mib.iter().map(|s| s.1).fold(1.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if labels {
        builder
            .caption(title, ("sans-serif", 22))
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = builder
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    let mut mesh = chart.configure_mesh();
    if labels {
        mesh.x_desc("seconds").y_desc("server RSS (MiB)");
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(mib, BLUE.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
