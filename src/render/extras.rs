//! Text of the expert sections of the table format: smallest fixes, the gap
//! to the winner, why-not answers, checkpointing and time-to-train.

use std::io::Write;

use comfy_table::CellAlignment;

use super::{in_units, rejection_lines, right_align, table};
use crate::checkpoint::{CheckpointPlan, Outlook, TimeToTrain};
use crate::explain::{Fixes, Gap, WhyNot};
use crate::spec::GIB;

fn signed_pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

fn duration(s: f64) -> String {
    let units = [
        (86400.0, 86400.0, 1, " days"),
        (3600.0, 3600.0, 2, " h"),
        (60.0, 60.0, 1, " min"),
    ];
    in_units(s, &units, (1, " s"))
}

fn bytes(b: f64) -> String {
    if b >= 1024.0 * GIB {
        format!("{:.2} TiB", b / GIB / 1024.0)
    } else if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.1} MiB", b / 1048576.0)
    }
}

/// The smallest fixes of a rejected layout.
///
/// # Errors
/// I/O errors of `w`.
pub fn fixes(w: &mut dyn Write, f: &Fixes) -> std::io::Result<()> {
    if f.fixes.is_empty() {
        writeln!(
            w,
            "No single change nor pair of changes makes it valid ({} changed layouts priced).",
            f.tried
        )?;
        return Ok(());
    }
    writeln!(
        w,
        "Smallest {} that make it valid, each priced by the cost model ({} changed layouts tried; original: peak {:.1} GiB, step {:.2} s):",
        if f.pairs {
            "pairs of changes (no single change works)"
        } else {
            "changes"
        },
        f.tried,
        f.original_peak_gib,
        f.original_step_s
    )?;
    let mut t = table();
    t.set_header(vec![
        "",
        "change",
        "peak GiB",
        "step s",
        "Δ step",
        "tokens/s",
        "memory relieved",
    ]);
    for (i, x) in f.fixes.iter().enumerate() {
        t.add_row(vec![
            if i == 0 {
                "cheapest".to_string()
            } else {
                String::new()
            },
            x.changes.join(" + "),
            format!("{:.1}", x.peak_gib),
            format!("{:.2}", x.eval.time.step),
            signed_pct(x.step_delta),
            format!("{:.0}", x.eval.tokens_per_s),
            x.relief
                .as_ref()
                .map(|(n, b, a)| format!("{n} {b:.1} → {a:.1} GiB"))
                .unwrap_or_default(),
        ]);
    }
    right_align(&mut t, 2);
    if let Some(c) = t.column_mut(6) {
        c.set_cell_alignment(CellAlignment::Left);
    }
    writeln!(w, "{t}")?;
    if let Some(best) = f.cheapest() {
        let flags: String = best.flags.iter().map(|f| format!(" {f}")).collect();
        match &best.layout.split {
            Some(_) => writeln!(
                w,
                "  cheapest fix: {} split {} (--split {}{flags})",
                best.layout.short(),
                crate::render::table::split_text(&best.layout.split),
                best.layout
                    .split
                    .iter()
                    .flatten()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )?,
            None if flags.is_empty() => writeln!(w, "  cheapest fix: {}", best.layout.short())?,
            None => writeln!(
                w,
                "  cheapest fix: {} ({})",
                best.layout.short(),
                flags.trim()
            )?,
        }
    }
    Ok(())
}

/// Where the time goes against the winner.
///
/// # Errors
/// I/O errors of `w`.
pub fn gap(w: &mut dyn Write, g: &Gap) -> std::io::Result<()> {
    // A plan ranked behind a better-validated winner in its tie group can
    // be predicted faster than it: say "slower", never "-4.5% faster".
    // Both read in tokens/s (this step over the winner's, minus 1), as the
    // rank line's "predicted X% slower" does.
    let (pct, word) = if g.winner_faster < 0.0 {
        (-100.0 * g.winner_faster, "slower")
    } else {
        (100.0 * g.winner_faster, "faster")
    };
    // Under 1% two decimals, so the line and the small-gap note below
    // agree (0.98% is not "1.0%").
    let pct_text = if pct < 1.0 {
        format!("{pct:.2}")
    } else {
        format!("{pct:.1}")
    };
    writeln!(
        w,
        "Gap to the winner: step {:.3} s vs {:.3} s ({:+.3} s, the winner is {pct_text}% {word}), part by part:",
        g.this_step_s, g.winner_step_s, g.delta_s
    )?;
    let mut t = table();
    t.set_header(vec!["part", "winner s", "this s", "Δ s", "share of gap"]);
    // Below 1% of the winner's step the parts' changes mostly cancel, and
    // a share of so small a gap reads as ±1000%: none is shown.
    let small = g.delta_s.abs() < SMALL_GAP * g.winner_step_s;
    for p in &g.parts {
        if p.winner_s.abs() < 1e-9 && p.this_s.abs() < 1e-9 {
            continue;
        }
        let share = if !small && g.delta_s.abs() > 1e-12 {
            format!("{:.1}%", 100.0 * p.delta_s / g.delta_s)
        } else {
            "-".into()
        };
        t.add_row(vec![
            p.part.label().to_string(),
            format!("{:.3}", p.winner_s),
            format!("{:.3}", p.this_s),
            format!("{:+.3}", p.delta_s),
            share,
        ]);
    }
    right_align(&mut t, 1);
    writeln!(w, "{t}")?;
    if small {
        writeln!(
            w,
            "  The steps differ by {:.2}% of the winner's, under {:.0}%: the parts' changes mostly cancel, so no share of the gap is shown.",
            100.0 * g.delta_s.abs() / g.winner_step_s,
            100.0 * SMALL_GAP
        )?;
    }
    Ok(())
}

/// A step-time gap under this share of the winner's step has its parts'
/// shares left out ([`gap`]).
const SMALL_GAP: f64 = 0.01;

/// The answer to `--why-not`.
///
/// # Errors
/// I/O errors of `w`.
pub fn why_not(w: &mut dyn Write, q: &WhyNot) -> std::io::Result<()> {
    writeln!(w)?;
    writeln!(
        w,
        "Why not {}? With it fixed the search enumerates {} matching layouts, {} of them valid (of {} valid in the full search).",
        q.query, q.matching_considered, q.matching_valid, q.valid_total
    )?;
    if let Some(n) = &q.note {
        writeln!(w, "  {n}")?;
    }
    match (&q.best, &q.winner) {
        (Some(b), Some(win)) => {
            writeln!(
                w,
                "Best matching layout: {} — row {} of the ranking ({} ranked), tie group {}, {:.0} tokens/s, peak {:.1} GiB",
                b.layout.short_with_split(),
                b.rank,
                q.ranked_total,
                b.group,
                b.tokens_per_s,
                b.peak_gib
            )?;
            if let Some(f) = &q.faster {
                writeln!(
                    w,
                    "A faster matching layout ranks behind it: row {}, {} at {:.0} tokens/s ({:.1}% faster, trust {}).",
                    f.rank,
                    f.layout.short_with_split(),
                    f.tokens_per_s,
                    100.0 * (f.tokens_per_s / b.tokens_per_s - 1.0),
                    f.trust.as_ref().map(|t| t.standing()).unwrap_or_default()
                )?;
            }
            if win.layout == b.layout {
                writeln!(w, "It is the winner.")?;
            } else {
                writeln!(
                    w,
                    "Winner: {} at {:.0} tokens/s",
                    win.layout.short_with_split(),
                    win.tokens_per_s
                )?;
                if b.tokens_per_s > win.tokens_per_s {
                    let short = |r: &crate::report::Row| {
                        r.trust.as_ref().map(|t| t.standing()).unwrap_or_default()
                    };
                    writeln!(
                        w,
                        "It is predicted {:.1}% faster than the winner but ranked behind it: {} (trust {}) against the winner's {} — inside a tie group the better-validated plan comes first: plausible, validated, then, within the model's resolution, nearer a measured run (src/ranking.rs).",
                        100.0 * (b.tokens_per_s / win.tokens_per_s - 1.0),
                        if b.group == win.group {
                            "in the same tie group"
                        } else {
                            "in a later tie group"
                        },
                        short(b),
                        short(win)
                    )?;
                }
                if let Some(g) = &q.gap {
                    gap(w, g)?;
                }
            }
        }
        (None, Some(win)) if q.unranked.is_some() => {
            let u = q.unranked.as_ref().expect("checked");
            let why = match q.unranked_reason {
                Some(crate::explain::UnrankedReason::OutsideSpace) => {
                    q.outside_space.clone().unwrap_or_default()
                }
                Some(crate::explain::UnrankedReason::SplitNotSolved) => format!(
                    "it reaches the ranking only with an uneven stage split (split {}), which the full search did not solve for it: for its ranking it re-splits only layouts the uniform split rejects, at most {} of them, best bound first, and only when every layer is alike (a valid layout below the floor with the uniform split is not re-split)",
                    crate::render::table::split_text(&u.layout.split),
                    crate::search::MAX_RANKED_SPLITS
                ),
                _ => format!(
                    "the ranking takes the layouts predicted at least {:.0}% of the fastest's tokens/s",
                    100.0 * crate::search::RANKED_FLOOR
                ),
            };
            writeln!(
                w,
                "Best matching layout: {} — valid, {:.0} tokens/s ({:.0}% of the winner's {:.0}), peak {:.1} GiB; it has no row: {why} ({} of the ranked ones are predicted faster).",
                u.layout.short_with_split(),
                u.tokens_per_s,
                100.0 * u.tokens_per_s / win.tokens_per_s,
                win.tokens_per_s,
                u.peak_gib,
                u.rank.saturating_sub(1)
            )?;
        }
        _ => {
            rejection_lines(
                w,
                if q.matching_valid == 0 {
                    "No matching layout is valid. Matching layouts rejected (first broken rule):"
                } else {
                    "Matching layouts rejected (first broken rule):"
                },
                &q.rejections,
                false,
            )?;
            if let Some(n) = &q.near_miss {
                if n.priced {
                    writeln!(
                        w,
                        "Best near-miss: {} — {:.0} tokens/s, peak {:.1} GiB; if it were valid, {} of the ranked layouts would be predicted faster",
                        n.layout.short(),
                        n.eval.tokens_per_s,
                        n.eval.peak_bytes / GIB,
                        n.rank_if_allowed.saturating_sub(1)
                    )?;
                } else {
                    writeln!(
                        w,
                        "Near-miss: {} — not priced: it cannot run as laid out",
                        n.layout.short()
                    )?;
                }
                for v in &n.violations {
                    writeln!(w, "  [{}] {}", v.code, v.message)?;
                }
                fixes(w, &n.fixes)?;
            }
        }
    }
    Ok(())
}

/// Checkpoint size, write time and interval ([`checkpoint`]; `brief` gives
/// two lines), then the time to train the `--tokens` budget when given.
///
/// # Errors
/// I/O errors of `w`.
pub fn outlook(w: &mut dyn Write, o: &Outlook, brief: bool, who: &str) -> std::io::Result<()> {
    checkpoint(w, &o.checkpoint, brief, who)?;
    if let Some(t) = &o.time_to_train {
        time_to_train(w, t, who)?;
    }
    Ok(())
}

/// Checkpoint size, write time and interval; `brief` gives two lines.
///
/// # Errors
/// I/O errors of `w`.
pub fn checkpoint(
    w: &mut dyn Write,
    c: &CheckpointPlan,
    brief: bool,
    who: &str,
) -> std::io::Result<()> {
    let per_param = (c.weights_bytes + c.master_bytes + c.moments_bytes) / c.params;
    // No working-precision copy: the engine saves its fp32 model
    // (torchtitan), which is the master copy.
    let fp32_model = c.weights_bytes == 0.0;
    if brief {
        writeln!(
            w,
            "Checkpoint of {who}: {} ({:.0} B/param: {}; + scaler/RNG), {} per rank at most, written in {} at {} GB/s.",
            bytes(c.total_bytes),
            per_param,
            if fp32_model {
                "fp32 parameters, Adam moments"
            } else {
                "weights, fp32 master, Adam moments"
            },
            bytes(c.per_rank_bytes),
            duration(c.write_s),
            gbs(c.storage_bandwidth_gbs)
        )?;
        writeln!(
            w,
            "Daly interval τ* = √(2CM) = {} ({}) with M = {} ({:.0} h node MTBF / {} nodes); expected waste W = 1 − τ*/(M·(e^((τ*+C)/M) − 1)) = {:.2}%{}.",
            duration(c.interval_s),
            every(c),
            duration(c.job_mtbf_s),
            c.node_mtbf_hours,
            c.nodes,
            100.0 * c.waste_fraction,
            slow_note(c)
        )?;
        return Ok(());
    }
    writeln!(
        w,
        "{}",
        if fp32_model {
            "Checkpoint (the fp32 model, which is the optimizer's master copy, and the Adam moments; no bf16 copy, no gradients):"
        } else {
            "Checkpoint (Megatron saves bf16 weights and the optimizer's fp32 master and Adam moments, not gradients):"
        }
    )?;
    let mut t = table();
    t.set_header(vec!["part", "bytes per parameter", "size"]);
    if !fp32_model {
        t.add_row(vec![
            "bf16 weights".to_string(),
            format!("{:.0}", c.weights_bytes / c.params),
            bytes(c.weights_bytes),
        ]);
    }
    t.add_row(vec![
        if fp32_model {
            "fp32 parameters"
        } else {
            "fp32 master weights"
        }
        .to_string(),
        format!("{:.0}", c.master_bytes / c.params),
        bytes(c.master_bytes),
    ]);
    t.add_row(vec![
        "Adam moments (m, v)".to_string(),
        format!("{:.0}", c.moments_bytes / c.params),
        bytes(c.moments_bytes),
    ]);
    t.add_row(vec![
        "scaler, step, RNG (16 KiB/rank)".to_string(),
        "-".to_string(),
        bytes(c.small_state_bytes),
    ]);
    if c.scaling_state_bytes > 0.0 {
        t.add_row(vec![
            "FP8/FP4 scaling state (scales, amax histories)".to_string(),
            "-".to_string(),
            bytes(c.scaling_state_bytes),
        ]);
    }
    t.add_row(vec![
        "total".to_string(),
        format!("{per_param:.0}"),
        bytes(c.total_bytes),
    ]);
    right_align(&mut t, 1);
    writeln!(w, "{t}")?;
    writeln!(
        w,
        "  per rank: {} at most (pipeline stage {}; its weight shard and, with the distributed optimizer, its optimizer shard)",
        bytes(c.per_rank_bytes),
        c.per_rank_stage
    )?;
    writeln!(
        w,
        "  write time C = {:.0} GB ÷ {} GB/s storage = {}",
        c.total_bytes / 1e9,
        gbs(c.storage_bandwidth_gbs),
        duration(c.write_s)
    )?;
    writeln!(
        w,
        "  job MTBF M = {:.0} h node MTBF / {} nodes = {}",
        c.node_mtbf_hours,
        c.nodes,
        duration(c.job_mtbf_s)
    )?;
    writeln!(
        w,
        "  Daly interval τ* = √(2·C·M) = {} ({}; Daly's higher-order estimate {})",
        duration(c.interval_s),
        every(c),
        duration(c.interval_daly_s)
    )?;
    writeln!(
        w,
        "  expected waste W(τ*) = 1 − τ*/(M·(e^((τ*+C)/M) − 1)) = {:.3}% of wall time (Daly's complete model; restart time not included){}",
        100.0 * c.waste_fraction,
        slow_note(c)
    )
}

/// A warning when checkpoints are slow against the failures (C more than
/// a tenth of M), where no interval keeps the waste small: at C = M/10 the
/// first-order waste at τ*, √(2C/M), is already √0.2 = 45%.
fn slow_note(c: &CheckpointPlan) -> String {
    if c.write_s > 0.1 * c.job_mtbf_s {
        format!(
            " — the checkpoint write ({}) is {:.0}% of the job's mean time between failures: storage cannot keep up; more storage bandwidth or fewer nodes per job",
            duration(c.write_s),
            100.0 * c.write_s / c.job_mtbf_s
        )
    } else {
        String::new()
    }
}

/// A bandwidth in GB/s with the digits it needs (0.5, 12, 690).
fn gbs(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{}", (x * 100.0).round() / 100.0)
    }
}

fn tokens(t: f64) -> String {
    let (v, suffix) = if t >= 1e12 {
        (t / 1e12, "T")
    } else if t >= 1e9 {
        (t / 1e9, "B")
    } else if t >= 1e6 {
        (t / 1e6, "M")
    } else {
        (t, "")
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

/// Days and GPU-hours for a token budget.
///
/// # Errors
/// I/O errors of `w`.
pub fn time_to_train(w: &mut dyn Write, t: &TimeToTrain, who: &str) -> std::io::Result<()> {
    writeln!(
        w,
        "Time to train {} tokens ({:.0} steps) with {who} on {} GPUs: {:.1} days, {:.3}M GPU-hours at {:.0} tokens/s; {:.1} days, {:.3}M GPU-hours at goodput {:.0} tokens/s (× (1 − W)).",
        tokens(t.tokens),
        t.steps,
        t.gpus,
        t.days,
        t.gpu_hours / 1e6,
        t.tokens_per_s,
        t.days_goodput,
        t.gpu_hours_goodput / 1e6,
        t.goodput_tokens_per_s
    )
}

/// How often to checkpoint in steps, or a warning when τ* is shorter than
/// one step (then every step is the best one can do).
fn every(c: &crate::checkpoint::CheckpointPlan) -> String {
    if c.interval_s < c.step_s {
        "shorter than one step: checkpoint every step".to_string()
    } else {
        format!("≈ every {:.0} steps", c.steps_between)
    }
}

/// The network levels and, per process group, the levels it crosses and
/// the bytes one GPU puts on each for one of its collectives
/// ([`crate::cost::levels`]).
///
/// # Errors
/// I/O errors of `w`.
pub fn group_levels(
    w: &mut dyn Write,
    levels: &[crate::cost::levels::Level],
    groups: &[crate::cost::levels::GroupTraffic],
) -> std::io::Result<()> {
    let names: Vec<String> = levels
        .iter()
        .map(|l| {
            let over = if l.oversubscription > 1.0 {
                format!(", {}:1", l.oversubscription)
            } else {
                String::new()
            };
            format!(
                "{} ({} GPUs, {:.1} GB/s per GPU{over}, {} µs)",
                l.name, l.gpus, l.gbs_per_gpu, l.latency_us
            )
        })
        .collect();
    writeln!(w, "Network levels: {}", names.join(" < "))?;
    writeln!(
        w,
        "Process groups (worst group of each axis; bytes per GPU for one collective, on each level it crosses):"
    )?;
    let mut t = table();
    t.set_header(vec![
        "group",
        "size",
        "per domain × domains",
        "collective",
        "buffer",
        "levels crossed: bytes",
        "ms",
    ]);
    for g in groups {
        let per: Vec<String> = g
            .levels
            .iter()
            .zip(&g.level_bytes)
            .map(|(n, b)| format!("{n}: {}", bytes(*b)))
            .collect();
        t.add_row(vec![
            g.axis.to_string(),
            g.span.size.to_string(),
            format!("{} × {}", g.span.per_domain, g.span.domains),
            serde_json::to_value(g.collective)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            format!("{} ({})", bytes(g.buffer_bytes), g.buffer),
            per.join(", "),
            format!("{:.3}", g.time_s * 1e3),
        ]);
    }
    writeln!(w, "{t}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_in_their_unit() {
        // 2 days = 172,800 s; 5400 s = 1.50 h; 90 s = 1.5 min; 59.94 s
        // stays in seconds.
        for (s, want) in [
            (172_800.0, "2.0 days"),
            (5400.0, "1.50 h"),
            (90.0, "1.5 min"),
            (59.94, "59.9 s"),
        ] {
            assert_eq!(super::duration(s), want);
        }
    }

    #[test]
    fn a_slower_winner_is_called_slower() {
        // (winner s, this s, the line's words). A plan ranked behind a
        // better-validated winner of its tie group can be the faster one:
        // winner 10 s, this 9.5 s, so the winner takes 10/9.5 − 1 = 5.3%
        // longer (the old line said "-5.0% faster"). The usual case: winner
        // 8 s, this 10 s: 10/8 − 1 = 25.0% faster.
        for (winner, this, want) in [
            (
                10.0,
                9.5,
                "step 9.500 s vs 10.000 s (-0.500 s, the winner is 5.0% slower)",
            ),
            (
                8.0,
                10.0,
                "step 10.000 s vs 8.000 s (+2.000 s, the winner is 25.0% faster)",
            ),
        ] {
            let g = crate::explain::Gap {
                winner_step_s: winner,
                this_step_s: this,
                delta_s: this - winner,
                winner_faster: this / winner - 1.0,
                parts: Vec::new(),
            };
            let mut out = Vec::new();
            super::gap(&mut out, &g).unwrap();
            let line = String::from_utf8(out).unwrap();
            assert!(line.contains(want), "{line}");
        }
    }

    #[test]
    fn shares_of_a_gap_under_one_percent_are_left_out() {
        use crate::cost::TimePart;
        use crate::explain::{Gap, GapPart};
        // Two parts: bubble 0.155 → 0.133 s, PP 0.122 → 0.142 s (the
        // Mixtral-8x22B v 7 against v 6 explain). Steps 10.280 s and
        // 10.282 s: the gap, 0.002 s, is 0.02% of the step, so the shares
        // (−1100%, +1000%) are not printed. Steps 10 s and 10.2 s: 2%,
        // shares −0.022/0.2 = −11.0% and 0.02/0.2 = 10.0%.
        let gap = |winner: f64, this: f64| Gap {
            winner_step_s: winner,
            this_step_s: this,
            delta_s: this - winner,
            winner_faster: this / winner - 1.0,
            parts: vec![
                GapPart {
                    part: TimePart::Bubble,
                    winner_s: 0.155,
                    this_s: 0.133,
                    delta_s: -0.022,
                },
                GapPart {
                    part: TimePart::PpComm,
                    winner_s: 0.122,
                    this_s: 0.142,
                    delta_s: 0.020,
                },
            ],
        };
        let text = |g: &Gap| {
            let mut out = Vec::new();
            super::gap(&mut out, g).unwrap();
            String::from_utf8(out).unwrap()
        };
        let small = text(&gap(10.280, 10.282));
        assert!(
            !small.contains("1100.0%") && !small.contains("1000.0%"),
            "{small}"
        );
        assert!(
            small.contains("The steps differ by 0.02% of the winner's, under 1%"),
            "{small}"
        );
        let large = text(&gap(10.0, 10.2));
        assert!(
            large.contains("-11.0%") && large.contains("10.0%"),
            "{large}"
        );
        assert!(!large.contains("The steps differ"), "{large}");
    }
}
