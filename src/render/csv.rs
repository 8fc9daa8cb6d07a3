//! CSV exporter: one line per layout with the table's columns and the time
//! and memory breakdowns.

use std::io::Write;

use serde::Serialize;

use super::Exporter;
use crate::report::{ExplainReport, Row, SearchReport};
use crate::spec::GIB;

/// CSV exporter.
pub struct Csv;

#[derive(Serialize, Default)]
struct Line<'a> {
    rank: usize,
    dp: u32,
    tp: u32,
    pp: u32,
    cp: u32,
    cp_comm: &'a str,
    ep: u32,
    etp: u32,
    vpp: u32,
    mbs: u32,
    m: u64,
    recompute: &'a str,
    zero: u8,
    sp: bool,
    order: &'a str,
    split: String,
    peak_gib: f64,
    step_s: f64,
    tokens_per_s: f64,
    tflops_per_gpu: f64,
    mfu: f64,
    hfu: f64,
    bubble: f64,
    compute_s: f64,
    recompute_s: f64,
    bubble_s: f64,
    tp_comm_s: f64,
    cp_comm_s: f64,
    ep_comm_s: f64,
    pp_comm_s: f64,
    dp_comm_s: f64,
    optimizer_s: f64,
    weights_gib: f64,
    grads_gib: f64,
    optimizer_gib: f64,
    activations_gib: f64,
    logits_gib: f64,
    temporaries_gib: f64,
    expert_states_gib: f64,
    routed_activations_gib: f64,
}

fn line(r: &Row) -> Line<'_> {
    let l = &r.layout;
    let t = &r.eval.time;
    let m = &r.eval.memory;
    Line {
        rank: r.rank,
        dp: l.dp,
        tp: l.tp,
        pp: l.pp,
        cp: l.cp,
        cp_comm: l.cp_comm.as_str(),
        ep: l.ep,
        etp: l.etp,
        vpp: l.vpp,
        mbs: l.micro_batch,
        m: r.micro_batches,
        recompute: l.recompute.as_str(),
        zero: l.zero,
        sp: l.sp,
        order: l.order.as_str(),
        split: l
            .split
            .as_ref()
            .map(|s| {
                s.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
        peak_gib: r.peak_gib,
        step_s: r.step_s,
        tokens_per_s: r.tokens_per_s,
        tflops_per_gpu: r.tflops_per_gpu,
        mfu: r.mfu,
        hfu: r.hfu,
        bubble: r.bubble,
        compute_s: t.compute,
        recompute_s: t.recompute,
        bubble_s: t.bubble,
        tp_comm_s: t.tp_comm,
        cp_comm_s: t.cp_comm,
        ep_comm_s: t.ep_comm,
        pp_comm_s: t.pp_comm,
        dp_comm_s: t.dp_comm,
        optimizer_s: t.optimizer,
        weights_gib: m.weights / GIB,
        grads_gib: m.grads / GIB,
        optimizer_gib: m.optimizer / GIB,
        activations_gib: m.activations / GIB,
        logits_gib: m.logits / GIB,
        temporaries_gib: m.temporaries / GIB,
        expert_states_gib: (m.experts.weights + m.experts.grads + m.experts.optimizer) / GIB,
        routed_activations_gib: m.experts.routed_activations / GIB,
    }
}

impl Exporter for Csv {
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()> {
        if r.rows.is_empty() {
            // No valid layout: still print the header, so readers see the
            // columns and an empty table rather than nothing.
            let mut probe = csv::Writer::from_writer(Vec::new());
            probe.serialize(Line::default())?;
            let bytes = probe.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
            let header = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
            w.write_all(header)?;
            writeln!(w)?;
            return Ok(());
        }
        let mut out = csv::Writer::from_writer(w);
        for row in &r.rows {
            out.serialize(line(row))?;
        }
        out.flush()?;
        Ok(())
    }

    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()> {
        let row = Row::of(
            1,
            &crate::search::Candidate {
                layout: r.layout.clone(),
                eval: r.eval,
            },
        );
        let mut out = csv::Writer::from_writer(w);
        out.serialize(line(&row))?;
        out.flush()?;
        Ok(())
    }
}
