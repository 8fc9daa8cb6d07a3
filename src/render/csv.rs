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

/// The columns of one line, `(name, value)` in order: its rank among the
/// valid layouts (empty when unknown or rejected), whether it is valid, the layout, the
/// summary with the tie group and trust, then every time part (`{key}_s` exposed, `{key}_total_s`), every
/// memory part and every memory share (`{key}_gib`), from the cost model's
/// part lists.
fn columns(r: &Row, rank: Option<usize>, valid: bool) -> Vec<(String, Cell)> {
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
        (
            "rank".to_string(),
            rank.map_or(Cell::Text(String::new()), |k| Cell::Count(k as u64)),
        ),
        ("valid".to_string(), Cell::Flag(valid)),
        count("dp", l.dp as u64),
        count("tp", l.tp as u64),
        count("pp", l.pp as u64),
        count("cp", l.cp as u64),
        // No K/V exchange without CP: `-`, as the table's KV column.
        text("cp_comm", if l.cp > 1 { l.cp_comm.as_str() } else { "-" }),
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
        number("mfu_own_peak", e.mfu_own_peak),
        number("bubble", r.bubble),
        // The ranking's tie group (empty outside a search's ranking) and the
        // trust column's short form, as the table prints them.
        (
            "group".to_string(),
            if r.group > 0 {
                Cell::Count(r.group as u64)
            } else {
                Cell::Text(String::new())
            },
        ),
        text(
            "trust",
            &r.trust.as_ref().map(|t| t.short()).unwrap_or_default(),
        ),
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

/// Write `lines` (a row, its rank among valid layouts if known, whether it
/// is valid) with a header; the header alone when there are none.
fn write_rows(w: &mut dyn Write, lines: &[(Row, Option<usize>, bool)]) -> anyhow::Result<()> {
    let mut out = csv::Writer::from_writer(w);
    let header_of = Row::of(
        0,
        &crate::search::Candidate {
            layout: crate::layout::Layout::dense(1, 1, 1, 1),
            eval: crate::cost::Evaluation::default(),
        },
    );
    out.write_record(columns(&header_of, None, true).iter().map(|(k, _)| k))?;
    for (row, rank, valid) in lines {
        let cells: Vec<Cell> = columns(row, *rank, *valid)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        out.serialize(cells)?;
    }
    out.flush()?;
    Ok(())
}

impl Exporter for Csv {
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()> {
        let lines: Vec<_> = r
            .rows
            .iter()
            .map(|row| (row.clone(), Some(row.rank), true))
            .collect();
        write_rows(w, &lines)
    }

    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()> {
        let row = Row::of(
            0,
            &crate::search::Candidate {
                layout: r.layout.clone(),
                eval: r.eval,
            },
        );
        let valid = r.is_valid();
        write_rows(w, &[(row, r.rank_among_valid.filter(|_| valid), valid)])
    }
}
