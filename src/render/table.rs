//! Human-readable tables (comfy-table).

use std::io::Write;

use comfy_table::{CellAlignment, Table as CTable};

use super::{Exporter, in_units, rejection_lines, right_align, table};
use crate::cost::breakdown::Source;
use crate::cost::{MemoryBreakdown, MemoryPart, TimeBreakdown};
use crate::report::{Context, ExplainReport, SearchReport};
use crate::spec::GIB;

/// Table exporter.
pub struct Table;

fn header(w: &mut dyn Write, c: &Context) -> std::io::Result<()> {
    writeln!(
        w,
        "{} on {} × {} ({}{}), global batch {} × seq {} = {} tokens/step, recipe {}{}, usable {:.1} GiB/GPU{}",
        c.model,
        c.gpus,
        c.gpu,
        c.cluster,
        match c.segment_of {
            Some(seg) => format!(
                ": {} of its {} GPUs, {} hosts of each NVLink domain as its `segment` says",
                c.gpus, seg.cluster_gpus, seg.hosts_per_domain
            ),
            None => String::new(),
        },
        c.global_batch,
        c.seq_len,
        tokens_text((c.global_batch * c.seq_len) as f64),
        c.recipe,
        if c.precision_note.is_empty() {
            String::new()
        } else {
            format!(", {}", c.precision_note)
        },
        c.usable_gib,
        match c.zero3_pricing {
            Some(p) => format!(", ZeRO-3 priced as {p}"),
            None => String::new(),
        }
    )?;
    if let Some(r) = &c.moe_routing {
        writeln!(w, "{r}")?;
    }
    Ok(())
}

/// What one layer's forward compute is made of, per micro-batch on one
/// rank, in milliseconds: the compute part by kind (explain).
fn layer_forward_lines(w: &mut dyn Write, f: &crate::report::LayerForward) -> std::io::Result<()> {
    let ms = |x: f64| format!("{:.2}", 1e3 * x);
    let kinds = |t: &crate::cost::compute::LayerTime| {
        let mut s = format!(
            "{} ms: GEMMs {}, attention {}, element-wise {}",
            ms(t.total()),
            ms(t.gemm),
            ms(t.attention),
            ms(t.elementwise)
        );
        if t.expert_gemm > 0.0 {
            s.push_str(&format!(", routed experts {}", ms(t.expert_gemm)));
        }
        s
    };
    writeln!(
        w,
        "Forward compute of one layer per micro-batch on one rank (the backward takes about twice its GEMMs):"
    )?;
    if let Some(d) = &f.dense {
        writeln!(w, "  dense layer {}", kinds(d))?;
    }
    if let Some(m) = &f.moe {
        writeln!(w, "  MoE layer {}", kinds(m))?;
        if let (Some(rows), Some(eff)) = (f.expert_rows, f.grouped_gemm_efficiency) {
            writeln!(
                w,
                "  the routed experts run as one grouped GEMM of {rows:.0} rows per local expert, at {:.0}% of the dense GEMM rate: m/(m + m½) with the GPU profile's efficiency.grouped_gemm_half_tokens m½ (an assumed form, fitted on three MoE runs; src/cost/moe.rs grouped_gemm_efficiency)",
                100.0 * eff
            )?;
        }
    }
    Ok(())
}

/// Share of the ranked plans above the measured envelope past which the
/// search footer asks to check the GPU profile (a judgement: most plans
/// above every measured run points at the profile, not at the layouts).
const IMPLAUSIBLE_MAJORITY: f64 = 0.5;

/// The footer line naming the FLOP convention and the peaks: MFU against
/// the dense bf16 peak (the convention), and with low-precision linears
/// the utilisation of that precision's own dense peak beside it.
fn peak_line(c: &Context) -> String {
    let mut line = format!(
        "TFLOP/s and MFU: {}; peak {} TFLOP/s.",
        c.flop_convention, c.peak_tflops
    );
    if !c.precision_note.is_empty() {
        line.push_str(&format!(
            " MFU is against the dense bf16 peak; `MFU {p} %` against the dense {p} peak of {} TFLOP/s.",
            c.precision_peak_tflops,
            p = c.precision
        ));
    }
    line
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

pub(crate) use crate::layout::split_text;

impl Exporter for Table {
    fn search(&self, w: &mut dyn Write, r: &SearchReport) -> anyhow::Result<()> {
        header(w, &r.context)?;
        let moe = r.rows.iter().any(|x| x.layout.ep > 1 || x.layout.etp > 1);
        let cp = r.rows.iter().any(|x| x.layout.cp > 1);
        let split = r.rows.iter().any(|x| x.layout.split.is_some());
        let mut t = table();
        let mut head = vec!["#", "tie", "D", "T", "p", "C"];
        if cp {
            head.push("KV");
        }
        if moe {
            head.extend(["E", "ETP"]);
        }
        head.extend([
            "v",
            "b",
            "m",
            "recompute",
            "ZeRO",
            "SP",
            "order",
            "peak GiB",
            "step s",
            "tokens/s",
            "TFLOP/s/GPU",
            "MFU %",
        ]);
        let own = format!("MFU {} %", r.context.precision);
        let low = !r.context.precision_note.is_empty();
        if low {
            head.push(&own);
        }
        head.extend(["bubble %", "trust"]);
        if split {
            head.push("split");
        }
        t.set_header(head);
        for row in &r.rows {
            let l = &row.layout;
            let mut cells = vec![
                row.rank.to_string(),
                row.group.to_string(),
                l.dp.to_string(),
                l.tp.to_string(),
                l.pp.to_string(),
                l.cp.to_string(),
            ];
            if cp {
                cells.push(if l.cp > 1 {
                    l.cp_comm.to_string()
                } else {
                    "-".into()
                });
            }
            if moe {
                cells.push(l.ep.to_string());
                cells.push(l.etp.to_string());
            }
            cells.extend([
                l.vpp.to_string(),
                l.micro_batch.to_string(),
                row.micro_batches.to_string(),
                l.recompute.to_string(),
                l.zero.to_string(),
                if l.sp { "on" } else { "off" }.to_string(),
                l.order.to_string(),
                format!("{:.1}", row.peak_gib),
                // Three significant digits at least, so that step ×
                // tokens/s gives the tokens per step back (0.164, not 0.16).
                if row.step_s < 1.0 {
                    format!("{:.3}", row.step_s)
                } else {
                    format!("{:.2}", row.step_s)
                },
                format!("{:.0}", row.tokens_per_s),
                format!("{:.0}", row.tflops_per_gpu),
                pct(row.mfu),
            ]);
            if low {
                cells.push(pct(row.eval.mfu_own_peak));
            }
            cells.extend([
                pct(row.bubble),
                row.trust.as_ref().map(|t| t.short()).unwrap_or_default(),
            ]);
            if split {
                cells.push(split_text(&l.split));
            }
            t.add_row(cells);
        }
        right_align(&mut t, 1);
        writeln!(w, "{t}")?;
        writeln!(w, "{}", peak_line(&r.context))?;
        writeln!(w, "{}", counters_line(&r.stats))?;
        if let Some(t) = r.rows.first().and_then(|x| x.trust.as_ref()) {
            writeln!(
                w,
                "trust: the cost model's |error| on the measured runs of a plan's regime (median, runs), or extrap. when none is measured. #1: {}.",
                t.sentence()
            )?;
            writeln!(
                w,
                "tie: plans in one tie group have overlapping error bands (predicted tokens/s ± the band; extrap. plans take the 90th-percentile |error| of all measured runs), better-validated first (--rank-by predicted|robust, src/ranking.rs)."
            )?;
            if let Some(n) = r.within_winner_band {
                writeln!(
                    w,
                    "{n} valid plans (listed or not) are predicted at or above the lower edge of #1's error band: the model cannot say #1 is faster than any of them."
                )?;
            }
            // The `implausible` mark compares with the best measured MFU
            // of the plan's GEMM precision: with none measured, say so.
            if t.envelope.is_none() {
                writeln!(
                    w,
                    "plausibility: no measured run in {} GEMMs to compare the MFU with, so no plan is marked implausible; read these rows as extrapolations.",
                    r.context.precision
                )?;
            }
            // A footer row: its rank, layout and split, and its tokens/s.
            let named = |f: &crate::report::Row| {
                format!(
                    "row {}, {}{} at {:.0} tokens/s",
                    f.rank,
                    f.layout.short(),
                    match &f.layout.split {
                        Some(_) => format!(" split {}", split_text(&f.layout.split)),
                        None => String::new(),
                    },
                    f.tokens_per_s
                )
            };
            if let Some(f) = &r.fastest_predicted {
                let trust = f.trust.as_ref().map(|t| t.short()).unwrap_or_default();
                writeln!(
                    w,
                    "Fastest predicted: {} ({:.1}% MFU, {trust}); plans whose bands overlap its band rank first when better validated (plausible, validated, or, within the model's resolution, nearer a measured run; --rank-by, src/ranking.rs).",
                    named(f),
                    100.0 * f.mfu
                )?;
            }
            if let (Some(f), Some(first)) = (&r.fastest_plausible, r.rows.first()) {
                let trust = f.trust.as_ref().map(|t| t.short()).unwrap_or_default();
                writeln!(
                    w,
                    "Fastest within the measured envelope: {} ({:+.1}% over #1, {:.1}% MFU, {trust}), behind #1 in the ranking because #1 is better validated or the model cannot tell them apart.",
                    named(f),
                    100.0 * (f.tokens_per_s / first.tokens_per_s - 1.0),
                    100.0 * f.mfu
                )?;
            }
            // Most plans above every measured run of their GPU: the
            // ranking then puts first whatever is priced just under the
            // envelope, and the GPU profile is the likelier culprit.
            let ranked = r.stats.ranked as usize;
            if ranked > 0 && r.implausible_ranked as f64 > IMPLAUSIBLE_MAJORITY * ranked as f64 {
                writeln!(
                    w,
                    "check the GPU profile: {} of the {ranked} ranked plans are predicted above the best MFU measured on this GPU and precision (+3 points); #1 is then whatever is priced just under that envelope. A new or calibrated profile (its peak, efficiencies) that runs hot does this.",
                    r.implausible_ranked
                )?;
            }
        }
        if r.stats.splits_solved > 0 {
            writeln!(
                w,
                "Stage splits: {} layouts re-split ({} split programs solved: exact by layer counts when every layer is alike, else a DP for v = 1 and the ILP for interleaved); split = transformer layers per stage (p·v chunks, model order).",
                r.stats.resplit, r.stats.splits_solved
            )?;
        }
        if r.stats.split_skipped > 0 {
            writeln!(
                w,
                "  {} more layouts might beat row {} with an uneven split but were not re-split (solve budget spent).",
                r.stats.split_skipped,
                crate::search::Space::default().top_k
            )?;
        }
        if r.stats.ranked_unsplit > 0 {
            writeln!(
                w,
                "  {} layouts rejected under the uniform split might reach the ranking with an uneven one but were not re-split (the {}-layout budget spent); they stay rejected.",
                r.stats.ranked_unsplit,
                crate::search::MAX_RANKED_SPLITS
            )?;
        }
        if r.stats.two_layer_kinds {
            writeln!(
                w,
                "  With two layer kinds (dense and MoE) only layouts that may reach row {} are re-split: one that only an uneven split makes valid may be missing from the ranking (`--fix` or `explain --auto-split` prices it).",
                crate::search::Space::default().top_k
            )?;
        }
        if cp {
            writeln!(
                w,
                "KV: context-parallel key/value exchange (ring = Megatron --cp-comm-type p2p, all-gather = all_gather)."
            )?;
        }
        if r.rows.is_empty() && r.stats.considered == 0 {
            writeln!(
                w,
                "No layout of {} GPUs matches the fixed values and bounds: {}.",
                r.context.gpus,
                r.empty_reason
                    .as_deref()
                    .unwrap_or("every mesh size must divide the GPU count")
            )?;
        } else if r.rows.is_empty()
            && let Some(why) = &r.empty_reason
        {
            writeln!(w, "No layout to list: {why}.")?;
        } else if r.rows.is_empty() {
            writeln!(
                w,
                "No valid layout: every one breaks a rule below. Try another GPU count (--gpus), global batch or sequence length, relax --fix, or explain the best near-miss."
            )?;
        }
        rejection_lines(
            w,
            "Rejected (first broken rule), with the best near-miss of each:",
            &r.rejections,
            true,
        )?;
        if let Some(o) = &r.outlook {
            super::extras::outlook(w, o, true, "#1")?;
        }
        if let Some(f) = &r.fewer_gpus {
            fewer_gpus(w, f)?;
        }
        if let Some(d) = &r.scale_down {
            scale_down(w, d)?;
        }
        if let Some(q) = &r.why_not {
            super::extras::why_not(w, q)?;
        }
        Ok(())
    }

    fn explain(&self, w: &mut dyn Write, r: &ExplainReport) -> anyhow::Result<()> {
        header(w, &r.context)?;
        let l = &r.layout;
        let e = &r.eval;
        writeln!(
            w,
            "Layout: {}  (m = {} micro-batches, split {})",
            l.short(),
            e.micro_batches,
            split_text(&l.split)
        )?;
        if r.is_valid() {
            writeln!(
                w,
                "Verdict: VALID — fits with {:.1} GiB to spare.",
                (e.usable_bytes - e.peak_bytes) / GIB
            )?;
        } else {
            writeln!(
                w,
                "Verdict: REJECTED — breaks {} rule(s):",
                r.violations.len()
            )?;
            for v in &r.violations {
                writeln!(w, "  [{}] {}\n      fix: {}", v.code, v.message, v.remedy)?;
            }
            if let Some(f) = &r.fixes {
                super::extras::fixes(w, f)?;
            }
        }
        if let (Some(rank), Some(best)) = (r.rank_among_valid, &r.best) {
            let ratio = best.tokens_per_s / e.tokens_per_s - 1.0;
            let ranking = match &r.ranking_target {
                Some(t) => format!("`search --target {t}`'s ranking"),
                None => "the default search's ranking".to_string(),
            };
            if !r.rank_is_row {
                let why = r.outside_space.clone().unwrap_or_else(|| {
                    format!(
                        "priced with another split or ZeRO stage there, or predicted below {:.0}% of the fastest's tokens/s",
                        100.0 * crate::search::RANKED_FLOOR
                    )
                });
                writeln!(
                    w,
                    "Rank among valid layouts: not a row of {ranking} as given ({why}); {} of its ranked layouts are predicted faster (#1: {} at {:.0} tokens/s)",
                    rank - 1,
                    best.layout.short(),
                    best.tokens_per_s
                )?;
            } else if rank == 1 {
                writeln!(w, "Rank among valid layouts: 1 — row 1 of {ranking}.")?;
            } else if ratio > 0.0 {
                writeln!(
                    w,
                    "Rank among valid layouts: {rank} — row {rank} of {ranking} (#1: {} at {:.0} tokens/s, predicted {:.1}% faster)",
                    best.layout.short(),
                    best.tokens_per_s,
                    100.0 * ratio
                )?;
            } else {
                writeln!(
                    w,
                    "Rank among valid layouts: {rank} — row {rank} of {ranking} (#1: {} at {:.0} tokens/s, predicted {:.1}% slower but in the same tie group and better validated: plausible, validated, then, within the model's resolution, nearer a measured run; src/ranking.rs)",
                    best.layout.short(),
                    best.tokens_per_s,
                    -100.0 * ratio
                )?;
            }
            if let Some(g) = r.gap_to_best.as_ref().filter(|_| rank > 1) {
                super::extras::gap(w, g)?;
            }
        }
        writeln!(w, "Trust: {}.", r.trust.sentence())?;
        writeln!(w)?;
        // Over by less than the printed digits show: say it as the memory
        // rule does (`rules::memory_gap_words`).
        let over = e.peak_bytes - e.usable_bytes;
        let margin = if over > 0.0 && over < 0.01 * GIB {
            let (_, _, gap) = crate::rules::memory_gap_words(e.peak_bytes, e.usable_bytes);
            format!(" (over by {gap})")
        } else {
            String::new()
        };
        writeln!(
            w,
            "Memory of the worst rank (pipeline stage {}): {:.2} GiB of {:.2} GiB usable{margin}",
            e.worst_rank,
            e.peak_bytes / GIB,
            e.usable_bytes / GIB
        )?;
        let mut sources = Sources::default();
        writeln!(w, "{}", memory_table(&e.memory, e.peak_bytes, &mut sources))?;
        let shares = |p| {
            e.memory
                .details()
                .filter(|(d, b)| d.parent() == p && *b > 0.0)
                .count()
        };
        if MemoryPart::ALL.into_iter().any(|p| shares(p) > 1) {
            writeln!(
                w,
                "Shares of one part can overlap (routed-token activations are also in flight)."
            )?;
        }
        let headroom = r.context.headroom_gib.unwrap_or(0.0);
        writeln!(
            w,
            "Usable {:.2} GiB = {:.2} GiB of HBM minus a {:.2} GiB reserve (CUDA context, NCCL, allocator){}.",
            r.context.usable_gib,
            r.context.memory_gib,
            r.context.memory_gib - r.context.usable_gib - headroom,
            if headroom > 0.0 {
                format!(" and the {headroom:.2} GiB of --headroom-gib")
            } else {
                String::new()
            }
        )?;
        writeln!(w)?;
        let tm = &e.time;
        writeln!(
            w,
            "Step time {:.3} s: {:.0} tokens/s, {:.0} TFLOP/s per GPU, MFU {:.1}%, HFU {:.1}%{}",
            tm.step,
            e.tokens_per_s,
            e.tflops_per_gpu,
            100.0 * e.mfu,
            100.0 * e.hfu,
            if r.context.precision_note.is_empty() {
                String::new()
            } else {
                format!(
                    " (of the bf16 peak); {:.1}% of the {} peak",
                    100.0 * e.mfu_own_peak,
                    r.context.precision
                )
            }
        )?;
        writeln!(w, "{}", time_table(tm, &mut sources))?;
        writeln!(
            w,
            "exposed: on the step's critical path (the exposed parts add up to the step); total: the work itself; hidden = total − exposed, what overlap hid."
        )?;
        sources.write(w)?;
        writeln!(w, "{}", peak_line(&r.context))?;
        layer_forward_lines(w, &r.layer_forward)?;
        writeln!(w)?;
        writeln!(w, "Per pipeline stage:")?;
        let mut t = table();
        t.set_header(vec![
            "stage",
            "layers",
            "ms / micro-batch",
            "peak GiB",
            "states GiB",
            "activations GiB",
        ]);
        for rc in &r.ranks {
            let m = &rc.memory;
            t.add_row(vec![
                rc.rank.to_string(),
                rc.layers.to_string(),
                format!("{:.2}", rc.time * 1e3),
                format!("{:.2}", m.total() / GIB),
                format!("{:.2}", m.model_states() / GIB),
                format!("{:.2}", m[MemoryPart::Activations] / GIB),
            ]);
        }
        writeln!(w, "{t}")?;
        if !r.groups.is_empty() {
            writeln!(w)?;
            super::extras::group_levels(w, &r.levels, &r.groups)?;
            if let Some(t) = &r.tensor_collectives {
                writeln!(
                    w,
                    "Under --deepspeed-2021 the ZeRO-3 collectives are per tensor, not the one dp reduce-scatter above: {:.0} all-gathers and {:.0} reduce-scatters per micro-batch ({:.0} per step), {:.1} ms per micro-batch ({:.2} s per step), all exposed.",
                    t.gathers,
                    t.reduce_scatters,
                    (t.gathers + t.reduce_scatters) * t.micro_batches as f64,
                    t.seconds * 1e3,
                    t.seconds * t.micro_batches as f64
                )?;
            }
        }
        if let Some(o) = &r.outlook {
            writeln!(w)?;
            super::extras::outlook(w, o, false, "this layout")?;
        }
        Ok(())
    }
}

/// Footnotes naming where each part is priced: one number per distinct
/// source, in order of first use.
#[derive(Default)]
struct Sources(Vec<Source>);

impl Sources {
    /// The footnote mark of `s`, `[n]`.
    fn mark(&mut self, s: Source) -> String {
        let n = match self.0.iter().position(|x| *x == s) {
            Some(i) => i + 1,
            None => {
                self.0.push(s);
                self.0.len()
            }
        };
        format!("[{n}]")
    }

    /// One line per source: `[n] function (reference key)`.
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(w, "Priced by (references in docs/references.md):")?;
        for (i, s) in self.0.iter().enumerate() {
            writeln!(w, "  [{}] {} [ref {}]", i + 1, s.function, s.reference)?;
        }
        Ok(())
    }
}

/// The memory parts of one rank with their shares of the peak and the
/// "of which" shares indented under them (shares of one part may overlap:
/// routed-token activations are also in flight).
fn memory_table(m: &MemoryBreakdown, peak: f64, src: &mut Sources) -> CTable {
    let mut t = table();
    t.set_header(vec!["component", "GiB", "share %", "src"]);
    let mut row = |t: &mut CTable, name: String, bytes: f64, s: Source| {
        t.add_row(vec![
            name,
            format!("{:.2}", bytes / GIB),
            pct(bytes / peak.max(1.0)),
            src.mark(s),
        ]);
    };
    for (p, bytes) in m.iter() {
        row(&mut t, p.label().to_string(), bytes, p.source());
        for (d, b) in m.details().filter(|(d, b)| d.parent() == p && *b > 0.0) {
            row(
                &mut t,
                format!("  {} (part of {})", d.label(), p.label()),
                b,
                d.source(),
            );
        }
    }
    t
}

/// Every time part: exposed, total and hidden seconds and share of the
/// step.
fn time_table(tm: &TimeBreakdown, src: &mut Sources) -> CTable {
    let mut t = table();
    t.set_header(vec![
        "part",
        "exposed s",
        "total s",
        "hidden s",
        "share %",
        "src",
    ]);
    for (p, term) in tm.iter() {
        t.add_row(vec![
            p.label().to_string(),
            format!("{:.4}", term.exposed),
            format!("{:.4}", term.total),
            format!("{:.4}", term.hidden()),
            pct(term.exposed / tm.step),
            src.mark(p.source()),
        ]);
    }
    for c in 1..=4 {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Tokens with a readable unit: `16.8M`, `524K`, `512`.
fn tokens_text(t: f64) -> String {
    let units = [(1e9, 1e9, 2, "B"), (1e6, 1e6, 1, "M"), (1e4, 1e3, 0, "K")];
    in_units(t, &units, (0, ""))
}

/// The note of [`crate::gpu_count::fewer_gpus`].
fn fewer_gpus(w: &mut dyn Write, f: &crate::gpu_count::FewerGpus) -> anyhow::Result<()> {
    let (a, b) = (&f.requested, &f.better);
    let probed: Vec<String> = f.probed.iter().map(|c| c.to_string()).collect();
    let total = if a.layout.is_some() {
        format!("{:.2}× in total", f.total_ratio)
    } else {
        "no valid layout on all of them".into()
    };
    writeln!(
        w,
        "Note: fewer GPUs do better. {} of {} GPUs ({}) reach {:.0} tokens/s ({:.1} per GPU, MFU {:.1}%) with {}; all {} ({}) reach {:.0} tokens/s ({:.1} per GPU, MFU {:.1}%): {:.2}× per GPU, {}. Both are the fastest predicted plans of their GPU count, not the #1 of a ranking with tie groups (search --gpus N ranks that count's plans). Probed {}.",
        b.gpus,
        a.gpus,
        b.factors,
        b.tokens_per_s,
        b.tokens_per_s_per_gpu,
        b.mfu * 100.0,
        b.layout.as_deref().unwrap_or("-"),
        a.gpus,
        a.factors,
        a.tokens_per_s,
        a.tokens_per_s_per_gpu,
        a.mfu * 100.0,
        f.per_gpu_ratio,
        total,
        probed.join(", ")
    )?;
    Ok(())
}

/// The note of [`crate::gpu_count::scale_down`].
fn scale_down(w: &mut dyn Write, d: &crate::gpu_count::ScaleDown) -> anyhow::Result<()> {
    let a = &d.requested;
    let each: Vec<String> = d
        .counts
        .iter()
        .map(|c| {
            format!(
                "on {} GPUs ({}) it keeps {:.0}% of the tokens/s ({:.1}× per GPU, MFU {:.1}%)",
                c.gpus,
                c.layout.as_deref().unwrap_or("-"),
                100.0 * c.tokens_per_s / a.tokens_per_s,
                c.tokens_per_s_per_gpu / a.tokens_per_s_per_gpu,
                100.0 * c.mfu
            )
        })
        .collect();
    writeln!(
        w,
        "Note: MFU {:.1}% on {} GPUs, {:.0} tokens per GPU per step: the global batch is small for this many GPUs. #1 on fewer data-parallel replicas, all else kept: {}. A lower bound on those counts (search --gpus N ranks their own plans); a larger --global-batch also uses the {} GPUs better.",
        100.0 * a.mfu,
        a.gpus,
        d.tokens_per_gpu_per_step,
        each.join("; "),
        a.gpus
    )?;
    Ok(())
}

/// The footer's counters: what was considered, split into priced, pruned,
/// rejected unpriced, unpriceable and near-miss bounded (they add up), and the valid layouts with their
/// rank-order twins (listed once).
pub fn counters_line(st: &crate::search::Stats) -> String {
    // A ` + N what` term of the sum, left out when N is 0.
    let plus = |n: u64, what: &str| {
        if n > 0 {
            format!(" + {n} {what}")
        } else {
            String::new()
        }
    };
    let unpriced = plus(st.unpriced, "rejected unpriced (two or more rules broken)");
    let unpriceable = plus(
        st.unpriceable,
        "unpriceable (one rule broken under which no price holds: batch, interleave, mesh size)",
    );
    let bounded = plus(
        st.near_miss_bounded,
        "bounded (one rule broken; their tokens/s bound under that rule's near-miss)",
    );
    let distinct = st.valid - st.twins;
    let twins = if st.twins > 0 {
        format!(
            " ({distinct} distinct; {} rank-order twins, same layout and predictions in another rank order, listed once)",
            st.twins
        )
    } else {
        String::new()
    };
    let ranked = if st.ranked > 0 && st.ranked < distinct {
        format!(
            "; the {} predicted at least {:.0}% of the fastest's tokens/s are ranked",
            st.ranked,
            100.0 * crate::search::RANKED_FLOOR
        )
    } else {
        String::new()
    };
    format!(
        "Considered {} layouts = {} priced + {} pruned by exact memory bounds{unpriced}{unpriceable}{bounded}; {} valid{twins}{ranked} ({:.0} ms).",
        st.considered,
        st.evaluated,
        st.pruned,
        st.valid,
        st.seconds * 1e3
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_runs_fold() {
        assert_eq!(super::split_text(&Some(vec![7, 8, 8, 8, 7])), "7/8×3/7");
        assert_eq!(super::split_text(&Some(vec![1, 2, 2, 1])), "1/2/2/1");
        assert_eq!(super::split_text(&None), "uniform");
    }

    #[test]
    fn tokens_in_their_unit() {
        // 2048 · 8192 = 16,777,216 → 16.8M; 1024 · 512 = 524,288 → 524K
        // (thousands from 10^4 on); 2.5e9 → 2.50B; 512 and 9999 as they are.
        for (t, want) in [
            (16_777_216.0, "16.8M"),
            (524_288.0, "524K"),
            (2.5e9, "2.50B"),
            (512.0, "512"),
            (9999.0, "9999"),
        ] {
            assert_eq!(super::tokens_text(t), want);
        }
    }
}
