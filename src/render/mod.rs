//! Output formats. One exporter per format behind one trait, as hyperfine
//! does: the command builds a report, the exporter writes it.

mod csv;
pub mod extras;
mod json;
mod table;

use std::io::Write;

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{CellAlignment, Table as CTable};

use crate::report::{ExplainReport, RejectionLine, SearchReport};

/// An empty table in the preset every text table uses.
fn table() -> CTable {
    let mut t = CTable::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t
}

/// Right-align the columns of `t` from column `from` on.
fn right_align(t: &mut CTable, from: usize) {
    for i in from..t.column_count() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// `x` in the largest of `units` it reaches, each `(at least, divided by,
/// decimals, unit)`, largest first; below them all, `x` itself with
/// `below`'s decimals and unit.
fn in_units(x: f64, units: &[(f64, f64, usize, &str)], below: (usize, &str)) -> String {
    let (scale, decimals, unit) = units
        .iter()
        .find(|u| x >= u.0)
        .map_or((1.0, below.0, below.1), |u| (u.1, u.2, u.3));
    format!("{:.*}{unit}", decimals, x / scale)
}

/// Nothing when no rule rejected a layout; else `heading`, then one line
/// per rule (code, count) with its best near-miss where there is one, and
/// that near-miss's tokens/s when `speed`.
fn rejection_lines(
    w: &mut dyn Write,
    heading: &str,
    rejections: &[RejectionLine],
    speed: bool,
) -> std::io::Result<()> {
    if !rejections.is_empty() {
        writeln!(w, "{heading}")?;
    }
    for r in rejections {
        match (&r.near_miss, r.near_miss_tokens_per_s) {
            (Some(n), Some(t)) if speed => writeln!(
                w,
                "  {:<12} {:>8}  best: {} ({:.0} tokens/s)",
                r.code, r.count, n, t
            )?,
            (Some(n), None) if speed => writeln!(
                w,
                "  {:<12} {:>8}  e.g.: {} (not priced: it cannot run as laid out)",
                r.code, r.count, n
            )?,
            (Some(n), Some(_)) => writeln!(w, "  {:<12} {:>8}  best: {}", r.code, r.count, n)?,
            (Some(n), None) => writeln!(
                w,
                "  {:<12} {:>8}  e.g.: {} (not priced)",
                r.code, r.count, n
            )?,
            (None, _) if r.near_miss_rescued => writeln!(
                w,
                "  {:<12} {:>8}  (its best near-miss is valid with an uneven split and ranked; the next best is not kept)",
                r.code, r.count
            )?,
            (None, _) => writeln!(w, "  {:<12} {:>8}", r.code, r.count)?,
        }
    }
    Ok(())
}

/// Output format of `search` and `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A human table (default).
    Table,
    /// JSON with every field.
    Json,
    /// CSV, one row per layout (for `explain`, one row).
    Csv,
}

/// Writes reports in one format.
pub trait Exporter {
    /// Write a search report.
    ///
    /// # Errors
    /// I/O errors of `w`, or serialisation errors.
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()>;

    /// Write an explain report.
    ///
    /// # Errors
    /// I/O errors of `w`, or serialisation errors.
    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()>;
}

/// The exporter of `format`.
pub fn exporter(format: Format) -> Box<dyn Exporter> {
    match format {
        Format::Table => Box::new(table::Table),
        Format::Json => Box::new(json::Json),
        Format::Csv => Box::new(csv::Csv),
    }
}
