//! JSON exporter: the reports as they are, every field.

use std::io::Write;

use super::Exporter;
use crate::report::{ExplainReport, SearchReport};

/// JSON exporter.
pub struct Json;

impl Exporter for Json {
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()> {
        serde_json::to_writer_pretty(&mut *w, r)?;
        writeln!(w)?;
        Ok(())
    }

    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()> {
        serde_json::to_writer_pretty(&mut *w, r)?;
        writeln!(w)?;
        Ok(())
    }
}
