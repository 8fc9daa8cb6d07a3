//! Output formats. One exporter per format behind one trait, as hyperfine
//! does: the command builds a report, the exporter writes it.

mod csv;
pub mod extras;
mod json;
mod table;

use std::io::Write;

use crate::report::{ExplainReport, SearchReport};

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
