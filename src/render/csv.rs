//! CSV exporter: one line per layout with the table's columns and the time
//! and memory breakdowns.

use std::io::Write;

use serde::Serialize;

use super::Exporter;
use crate::report::{ExplainReport, Row, SearchReport};
use crate::spec::GIB;

/// CSV exporter.
pub struct Csv;

/// One cell of a line.
#[derive(Serialize)]
#[serde(untagged)]
enum Cell {
    Text(String),
    Count(u64),
    Flag(bool),
    Number(f64),
}

/// The columns of one line, `(name, value)` in order: the layout, the
/// summary, then every time part (`{key}_s` exposed, `{key}_total_s`), every
/// memory part and every memory share (`{key}_gib`), from the cost model's
/// part lists.
fn columns(r: &Row) -> Vec<(String, Cell)> {
    let l = &r.layout;
    let e = &r.eval;
    let split = l
        .split
        .as_ref()
        .map(|s| {
            s.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let count = |k: &str, v: u64| (k.to_string(), Cell::Count(v));
    let text = |k: &str, v: &str| (k.to_string(), Cell::Text(v.to_string()));
    let number = |k: &str, v: f64| (k.to_string(), Cell::Number(v));
    let mut out = vec![
        count("rank", r.rank as u64),
        count("dp", l.dp as u64),
        count("tp", l.tp as u64),
        count("pp", l.pp as u64),
        count("cp", l.cp as u64),
        text("cp_comm", l.cp_comm.as_str()),
        count("ep", l.ep as u64),
        count("etp", l.etp as u64),
        count("vpp", l.vpp as u64),
        count("mbs", l.micro_batch as u64),
        count("m", r.micro_batches),
        text("recompute", l.recompute.as_str()),
        count("zero", l.zero as u64),
        ("sp".to_string(), Cell::Flag(l.sp)),
        text("order", l.order.as_str()),
        text("split", &split),
        number("peak_gib", r.peak_gib),
        number("step_s", r.step_s),
        number("tokens_per_s", r.tokens_per_s),
        number("tflops_per_gpu", r.tflops_per_gpu),
        number("mfu", r.mfu),
        number("hfu", r.hfu),
        number("bubble", r.bubble),
    ];
    for (p, t) in e.time.iter() {
        out.push(number(&format!("{}_s", p.key()), t.exposed));
        out.push(number(&format!("{}_total_s", p.key()), t.total));
    }
    for (p, b) in e.memory.iter() {
        out.push(number(&format!("{}_gib", p.key()), b / GIB));
    }
    for (d, b) in e.memory.details() {
        out.push(number(&format!("{}_gib", d.key()), b / GIB));
    }
    out
}

/// Write `rows` with a header (the header alone when there are none).
fn write_rows(w: &mut dyn Write, rows: &[Row]) -> anyhow::Result<()> {
    let mut out = csv::Writer::from_writer(w);
    let header_of = rows.first().cloned().unwrap_or_else(|| {
        Row::of(
            0,
            &crate::search::Candidate {
                layout: crate::layout::Layout::dense(1, 1, 1, 1),
                eval: crate::cost::Evaluation::default(),
            },
        )
    });
    out.write_record(columns(&header_of).iter().map(|(k, _)| k))?;
    for row in rows {
        let cells: Vec<Cell> = columns(row).into_iter().map(|(_, v)| v).collect();
        out.serialize(cells)?;
    }
    out.flush()?;
    Ok(())
}

impl Exporter for Csv {
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()> {
        write_rows(w, &r.rows)
    }

    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()> {
        let row = Row::of(
            1,
            &crate::search::Candidate {
                layout: r.layout.clone(),
                eval: r.eval,
            },
        );
        write_rows(w, &[row])
    }
}
