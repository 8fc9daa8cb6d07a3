//! Pictures as SVG files (plotters' SVG backend; text is written as SVG
//! `<text>` elements, so no font files are needed): the pipeline schedule
//! of a plan, its memory per pipeline stage, and the Pareto front of
//! throughput against peak memory over all valid layouts.
//!
//! The schedule is simulated, not sketched: [`simulate`] plays Megatron's
//! 1F1B order (warm-up forwards, one-forward-one-backward, cool-down
//! backwards; Narayanan et al. 2021 §2.2) or its interleaved order
//! (`forward_backward_pipelining_with_interleaving`: warm-up
//! `2·(p − s − 1) + (v − 1)·p` chunk forwards, chunks taken in groups of p
//! micro-batches) with every forward waiting for the previous stage (or
//! chunk) and every backward for the next, using the per-stage forward and
//! backward times of [`cost::rank_costs`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow};
use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Serialize;

use crate::cost::{self, Evaluation, MemoryPart, Problem, TimePart};
use crate::layout::{Layout, Placement};
use crate::search::Candidate;
use crate::spec::GIB;

/// Forward or backward pass of one micro-batch through one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward (with its recompute).
    Backward,
}

/// One block of the schedule: a pass of one micro-batch through one chunk
/// on one pipeline stage, seconds from the step start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Block {
    /// Pipeline stage (rank), 0-based.
    pub stage: u32,
    /// Model chunk on that stage (0 for 1F1B).
    pub chunk: u32,
    /// Micro-batch, 0-based.
    pub micro_batch: u32,
    /// Forward or backward.
    pub pass: Pass,
    /// Start, seconds.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
}

/// The order in which stage `s` of `p` runs its passes (pass, chunk,
/// micro-batch), Megatron's 1F1B (v = 1) or interleaved schedule.
fn stage_order(p: u32, v: u32, m: u32, s: u32) -> Vec<(Pass, u32, u32)> {
    let total = m * v;
    let warm = if v == 1 {
        (p - s - 1).min(m)
    } else {
        ((p - s - 1) * 2 + (v - 1) * p).min(total)
    };
    let group = p * v;
    let fwd = |k: u32| -> (Pass, u32, u32) {
        if v == 1 {
            (Pass::Forward, 0, k)
        } else {
            (Pass::Forward, (k % group) / p, (k / group) * p + k % p)
        }
    };
    let bwd = |k: u32| -> (Pass, u32, u32) {
        if v == 1 {
            (Pass::Backward, 0, k)
        } else {
            (
                Pass::Backward,
                v - 1 - (k % group) / p,
                (k / group) * p + k % p,
            )
        }
    };
    let mut out = Vec::with_capacity(2 * total as usize);
    out.extend((0..warm).map(fwd));
    for i in 0..total - warm {
        out.push(fwd(warm + i));
        out.push(bwd(i));
    }
    out.extend((total - warm..total).map(bwd));
    out
}

/// Simulate one step's pipeline: `fwd[s]` and `bwd[s]` are stage s's
/// forward and backward times for one micro-batch through one chunk,
/// seconds (the point-to-point send included), for `m` micro-batches and
/// `v` chunks per stage. Returns every block.
///
/// For equal stages the makespan is `(m + p − 1)·(t_f + t_b)` (1F1B) and
/// `(m + (p − 1)/v)·v·(t_f + t_b)` with chunk times (interleaved), the
/// closed forms of [`cost::schedule`].
///
/// # Errors
/// When `fwd`/`bwd` are empty or of different lengths, `m` or `v` is 0, or
/// interleaving is asked with `m` not a multiple of p (Megatron's rule).
pub fn simulate(fwd: &[f64], bwd: &[f64], m: u32, v: u32) -> Result<Vec<Block>, String> {
    let p = fwd.len() as u32;
    if p == 0 || bwd.len() != fwd.len() || m == 0 || v == 0 {
        return Err("schedule needs equal, non-empty stage times and m, v ≥ 1".into());
    }
    if v > 1 && (p == 1 || m % p != 0) {
        return Err(format!(
            "interleaving needs p > 1 and m a multiple of p (p = {p}, m = {m})"
        ));
    }
    let orders: Vec<Vec<(Pass, u32, u32)>> = (0..p).map(|s| stage_order(p, v, m, s)).collect();
    let mut end: HashMap<(Pass, u32, u32, u32), f64> =
        HashMap::with_capacity((2 * p * v * m) as usize);
    let mut next = vec![0usize; p as usize];
    let mut clock = vec![0.0f64; p as usize];
    let mut blocks = Vec::with_capacity((2 * p * v * m) as usize);
    loop {
        let mut progress = false;
        let mut done = true;
        for s in 0..p {
            let su = s as usize;
            while next[su] < orders[su].len() {
                done = false;
                let (pass, c, mb) = orders[su][next[su]];
                // The pass this one waits for (None: nothing).
                let dep = match pass {
                    Pass::Forward if s > 0 => Some((Pass::Forward, s - 1, c, mb)),
                    Pass::Forward if c > 0 => Some((Pass::Forward, p - 1, c - 1, mb)),
                    Pass::Forward => None,
                    Pass::Backward if s + 1 < p => Some((Pass::Backward, s + 1, c, mb)),
                    Pass::Backward if c + 1 < v => Some((Pass::Backward, 0, c + 1, mb)),
                    Pass::Backward => Some((Pass::Forward, s, c, mb)),
                };
                let ready = match dep {
                    None => 0.0,
                    Some(k) => match end.get(&k) {
                        Some(t) => *t,
                        None => break,
                    },
                };
                let start = clock[su].max(ready);
                let dur = if pass == Pass::Forward {
                    fwd[su]
                } else {
                    bwd[su]
                };
                let stop = start + dur;
                end.insert((pass, s, c, mb), stop);
                blocks.push(Block {
                    stage: s,
                    chunk: c,
                    micro_batch: mb,
                    pass,
                    start,
                    end: stop,
                });
                clock[su] = stop;
                next[su] += 1;
                progress = true;
            }
            if next[su] < orders[su].len() {
                done = false;
            }
        }
        if done {
            return Ok(blocks);
        }
        if !progress {
            return Err("schedule deadlocked (a bug: please report the layout)".into());
        }
    }
}

/// Makespan of simulated blocks, seconds.
pub fn makespan(blocks: &[Block]) -> f64 {
    blocks.iter().map(|b| b.end).fold(0.0, f64::max)
}

/// Indices of the Pareto-optimal points of `(memory, throughput)`: no
/// other point has at most the memory and more throughput (or the same
/// throughput with less memory). Sorted by memory.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..points.len()).collect();
    idx.sort_by(|&a, &b| {
        points[a]
            .0
            .partial_cmp(&points[b].0)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(
                points[b]
                    .1
                    .partial_cmp(&points[a].1)
                    .unwrap_or(std::cmp::Ordering::Equal),
            )
    });
    let mut best = f64::NEG_INFINITY;
    let mut out = Vec::new();
    for i in idx {
        if points[i].1 > best {
            best = points[i].1;
            out.push(i);
        }
    }
    out
}

/// Per-stage forward and backward times per chunk for layout `l`,
/// seconds: forward compute with half the exposed TP/CP/EP communication,
/// backward the rest with recompute; each with half the point-to-point
/// time of a chunk boundary (as [`cost::evaluate`] counts it).
pub fn stage_times(pr: &Problem, l: &Layout) -> (Vec<f64>, Vec<f64>) {
    let pl = Placement::of(l, pr.cluster);
    let lc = cost::layer::layer_costs(pr, l, &pl);
    let p2p = if l.pp > 1 { lc.p2p } else { 0.0 };
    let v = l.vpp.max(1) as f64;
    let mut f = Vec::new();
    let mut b = Vec::new();
    for rc in cost::rank_costs(pr, l) {
        // The rank's items without its point-to-point, added per chunk below.
        let fwd = rc.items.fwd_time();
        let bwd = rc.items.time() - rc.items.time[TimePart::PpComm].exposed - fwd;
        f.push(fwd / v + p2p / 2.0);
        b.push(bwd / v + p2p / 2.0);
    }
    (f, b)
}

/// Micro-batches drawn for a schedule with `m` micro-batches on `p` stages
/// with `v` chunks: all of them up to `max(3p, 12)`, else that cap rounded
/// up to a multiple of p (interleaving needs it).
pub fn drawn_micro_batches(m: u64, p: u32, v: u32) -> u32 {
    let cap = (3 * p).max(12);
    let cap = if v > 1 { cap.div_ceil(p) * p } else { cap };
    m.min(cap as u64) as u32
}

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl FnOnce(E) -> anyhow::Error + '_ {
    move |e| anyhow!("--plot: cannot draw {}: {e}", path.display())
}

const FWD: RGBColor = RGBColor(66, 113, 196);
const BWD: RGBColor = RGBColor(237, 125, 49);

fn lighten(c: RGBColor, f: f64) -> RGBColor {
    let l = |x: u8| (x as f64 + (255.0 - x as f64) * f).round() as u8;
    RGBColor(l(c.0), l(c.1), l(c.2))
}

/// A chart of the three pictures: f64 axes on an SVG file.
type Chart<'a> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The mesh the three pictures share (label and axis fonts, light grid
/// lines); the caller adds its axes' descriptions and draws it.
fn mesh<'a, 'b>(
    chart: &'b mut Chart<'a>,
) -> MeshStyle<'a, 'b, RangedCoordf64, RangedCoordf64, SVGBackend<'a>> {
    let mut m = chart.configure_mesh();
    m.label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240));
    m
}

/// The pipeline stage (of `p`) whose axis position is `x`, `None` between
/// stages: the stage axes label whole positions only.
fn stage_at(x: f64, p: u32) -> Option<u32> {
    let r = x.round();
    ((x - r).abs() < 1e-6 && r >= 0.0 && r < p as f64).then_some(r as u32)
}

/// Draw the legend box at `at` and write the file.
fn finish(
    chart: &mut Chart<'_>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    at: SeriesLabelPosition,
    path: &Path,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err(path))?;
    root.present().map_err(plot_err(path))?;
    Ok(())
}

/// Draw the pipeline schedule of `l` to `path`.
///
/// # Errors
/// When the schedule cannot be simulated or the file cannot be written.
pub fn schedule_svg(path: &Path, pr: &Problem, l: &Layout, eval: &Evaluation) -> Result<()> {
    let (f, b) = stage_times(pr, l);
    let p = l.pp.max(1);
    let v = l.vpp.max(1);
    let m = eval.micro_batches;
    let md = drawn_micro_batches(m, p, v);
    let blocks = simulate(&f, &b, md, v).map_err(|e| anyhow!("--plot: {e}"))?;
    let span = makespan(&blocks) * 1e3;
    let busy: f64 = blocks.iter().map(|x| x.end - x.start).sum::<f64>() * 1e3;
    let idle = 1.0 - busy / (span * p as f64);
    let kind = if v > 1 {
        format!("interleaved 1F1B, v = {v}")
    } else {
        "1F1B".into()
    };
    let title = if md as u64 == m {
        format!("Pipeline schedule ({kind}): p = {p}, m = {m} micro-batches")
    } else {
        format!("Pipeline schedule ({kind}): p = {p}, first {md} of m = {m} micro-batches drawn")
    };
    let root = SVGBackend::new(
        path,
        (
            1280,
            140 + 56 * p.min(16) + if p > 16 { 16 * (p - 16) } else { 0 },
        ),
    )
    .into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let (top, rest) = root.split_vertically(64);
    top.draw(&Text::new(title, (16, 8), ("sans-serif", 22).into_font()))
        .map_err(plot_err(path))?;
    // The whole step's pipeline, simulated when small enough, against the
    // cost model's closed form.
    let full = if 2 * p as u64 * v as u64 * m <= 2_000_000 && (v == 1 || m % p as u64 == 0) {
        simulate(&f, &b, m as u32, v).ok().map(|x| makespan(&x))
    } else {
        None
    };
    let totals: Vec<f64> = f.iter().zip(&b).map(|(x, y)| (x + y) * v as f64).collect();
    let closed = cost::schedule::pipeline_time(&totals, m, v);
    let full_text = match full {
        Some(t) => format!("whole step's pipeline: simulated {t:.2} s, cost model {closed:.2} s"),
        None => format!("whole step's pipeline: cost model {closed:.2} s"),
    };
    let sub = format!(
        "{}  ·  bubble {:.1}% of stage time as drawn  ·  {full_text}  ·  blocks include p2p; numbers are micro-batches",
        l.short(),
        100.0 * idle
    );
    top.draw(&Text::new(
        sub,
        (16, 38),
        ("sans-serif", 14).into_font().color(&RGBColor(80, 80, 80)),
    ))
    .map_err(plot_err(path))?;
    // Legend in the header, clear of the blocks.
    for (k, (color, name)) in [(FWD, "forward"), (BWD, "backward (incl. recompute)")]
        .iter()
        .enumerate()
    {
        let x0 = 980 + 150 * k as i32 - if k == 1 { 40 } else { 0 };
        top.draw(&Rectangle::new([(x0, 12), (x0 + 14, 26)], color.filled()))
            .map_err(plot_err(path))?;
        top.draw(&Text::new(
            name.to_string(),
            (x0 + 20, 13),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(plot_err(path))?;
    }
    let xmax = span * 1.02;
    // Stage s is drawn as the band around y = p − 1 − s (stage 0 on top).
    let mut chart = ChartBuilder::on(&rest)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..xmax, -0.5f64..p as f64 - 0.5)
        .map_err(plot_err(path))?;
    mesh(&mut chart)
        .disable_y_mesh()
        .x_desc("time (ms)")
        .y_labels(p.min(32) as usize)
        .y_label_formatter(&|y| {
            stage_at(*y, p).map_or(String::new(), |i| format!("stage {}", p - 1 - i))
        })
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(plot_err(path))?;
    let area_px = 1280.0 - 80.0 - 24.0;
    let px_per_ms = area_px / xmax;
    let label_font = ("sans-serif", 11).into_font();
    let row = |s: u32| (p - 1 - s) as f64;
    for (pass, color) in [(Pass::Forward, FWD), (Pass::Backward, BWD)] {
        let mine: Vec<&Block> = blocks.iter().filter(|x| x.pass == pass).collect();
        chart
            .draw_series(mine.iter().map(|x| {
                let c = lighten(color, 0.45 * x.chunk as f64 / v as f64);
                let mut r = Rectangle::new(
                    [
                        (x.start * 1e3, row(x.stage) - 0.38),
                        (x.end * 1e3, row(x.stage) + 0.38),
                    ],
                    c.filled(),
                );
                r.set_margin(0, 0, 0, 1);
                r
            }))
            .map_err(plot_err(path))?;
        let labels: Vec<Text<(f64, f64), String>> = mine
            .iter()
            .filter(|x| {
                (x.end - x.start) * 1e3 * px_per_ms
                    >= 7.0 * (1 + (x.micro_batch + 1).ilog10()) as f64 + 4.0
            })
            .map(|x| {
                Text::new(
                    format!("{}", x.micro_batch + 1),
                    ((x.start + x.end) * 0.5e3, row(x.stage)),
                    label_font
                        .clone()
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Center)),
                )
            })
            .collect();
        chart.draw_series(labels).map_err(plot_err(path))?;
    }
    root.present().map_err(plot_err(path))?;
    Ok(())
}

const PART_COLORS: [RGBColor; 7] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    // The low-precision weight copies (zero in bf16), so the later parts
    // keep their colours.
    RGBColor(176, 122, 161),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
];

/// Draw the memory of every pipeline stage of `l` (stacked components)
/// against the usable capacity to `path`.
///
/// # Errors
/// When the file cannot be written.
pub fn memory_svg(path: &Path, pr: &Problem, l: &Layout) -> Result<()> {
    let ranks = cost::rank_costs(pr, l);
    let p = ranks.len().max(1) as u32;
    let usable = pr.usable_bytes() / GIB;
    let physical = pr.gpu.memory_gib;
    let top_gib = ranks
        .iter()
        .map(|r| r.memory.total() / GIB)
        .fold(physical, f64::max)
        * 1.18;
    let root = SVGBackend::new(path, (960 + 12 * p.saturating_sub(16), 640)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    // Stage s is the bar centred on x = s.
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Memory per pipeline stage: {}", l.short()),
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..p as f64 - 0.5, 0f64..top_gib)
        .map_err(plot_err(path))?;
    mesh(&mut chart)
        .disable_x_mesh()
        .x_desc("pipeline stage")
        .y_desc("GiB per GPU")
        .x_labels(p.min(32) as usize)
        .x_label_formatter(&|x| stage_at(*x, p).map_or(String::new(), |i| i.to_string()))
        .draw()
        .map_err(plot_err(path))?;
    let half = 0.36;
    for (k, part) in MemoryPart::ALL.into_iter().enumerate() {
        let color = PART_COLORS[k % PART_COLORS.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = ranks
            .iter()
            .map(|r| {
                let below: f64 = r.memory.iter().take(k).map(|x| x.1).sum::<f64>() / GIB;
                let x = r.rank as f64;
                Rectangle::new(
                    [(x - half, below), (x + half, below + r.memory[part] / GIB)],
                    color.filled(),
                )
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(plot_err(path))?
            .label(part.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    let red = RGBColor(200, 30, 30);
    let x_ends = [-0.5, p as f64 - 0.5];
    chart
        .draw_series(LineSeries::new(
            x_ends.map(|x| (x, usable)),
            red.stroke_width(2),
        ))
        .map_err(plot_err(path))?
        .label(format!("usable {usable:.1} GiB"))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], red.stroke_width(2)));
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(DashedLineSeries::new(
            x_ends.map(|x| (x, physical)),
            6,
            4,
            grey.stroke_width(1),
        ))
        .map_err(plot_err(path))?
        .label(format!("{} HBM {physical:.1} GiB", pr.gpu.name))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], grey.stroke_width(1)));
    // Totals above the bars.
    let font = ("sans-serif", 12)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    if p <= 32 {
        chart
            .draw_series(ranks.iter().map(|r| {
                Text::new(
                    format!("{:.1}", r.memory.total() / GIB),
                    (r.rank as f64, r.memory.total() / GIB + top_gib * 0.005),
                    font.clone(),
                )
            }))
            .map_err(plot_err(path))?;
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperRight, path)
}

/// A layout to mark on the Pareto plot: a label and its (peak GiB, tokens/s).
#[derive(Debug, Clone)]
pub struct Mark {
    /// Legend text.
    pub label: String,
    /// Peak memory, GiB.
    pub peak_gib: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
}

/// Draw throughput against peak memory for every valid layout in `all`,
/// the Pareto front, and `marks` (the chosen layout first) to `path`.
///
/// # Errors
/// When the file cannot be written.
pub fn pareto_svg(path: &Path, pr: &Problem, all: &[Candidate], marks: &[Mark]) -> Result<()> {
    // Identical (peak, tokens/s) pairs are drawn once.
    let mut pts: Vec<(f64, f64)> = all
        .iter()
        .map(|c| (c.eval.peak_bytes / GIB, c.eval.tokens_per_s))
        .collect();
    pts.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    pts.dedup_by(|a, b| (a.0 - b.0).abs() < 0.01 && (a.1 - b.1).abs() < 0.5);
    let front: Vec<(f64, f64)> = pareto_front(&pts).into_iter().map(|i| pts[i]).collect();
    let usable = pr.usable_bytes() / GIB;
    let xs = pts
        .iter()
        .map(|p| p.0)
        .chain(marks.iter().map(|m| m.peak_gib));
    let ys = pts
        .iter()
        .map(|p| p.1)
        .chain(marks.iter().map(|m| m.tokens_per_s));
    let xmax = xs.fold(usable, f64::max) * 1.05;
    let ymax = ys.fold(1.0, f64::max) * 1.12;
    let root = SVGBackend::new(path, (1024, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Throughput vs peak memory: {} ranked valid layouts ({} on the Pareto front)",
                all.len(),
                front.len()
            ),
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(plot_err(path))?;
    mesh(&mut chart)
        .x_desc("peak memory of the worst rank (GiB)")
        .y_desc("tokens per second")
        .y_label_formatter(&|y| {
            if *y >= 1e6 {
                format!("{:.1}M", y / 1e6)
            } else {
                format!("{:.0}k", y / 1e3)
            }
        })
        .draw()
        .map_err(plot_err(path))?;
    let grey = RGBColor(150, 150, 150);
    chart
        .draw_series(
            pts.iter()
                .map(|&(x, y)| Circle::new((x, y), 2, grey.mix(0.6).filled())),
        )
        .map_err(plot_err(path))?
        .label("valid layout")
        .legend(move |(x, y)| Circle::new((x + 7, y), 3, grey.filled()));
    let blue = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(front.iter().copied(), blue.stroke_width(2)))
        .map_err(plot_err(path))?
        .label("Pareto front")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], blue.stroke_width(2)));
    chart
        .draw_series(
            front
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 3, blue.filled())),
        )
        .map_err(plot_err(path))?;
    let red = RGBColor(200, 30, 30);
    chart
        .draw_series(DashedLineSeries::new(
            [(usable, 0.0), (usable, ymax)],
            6,
            4,
            red.stroke_width(1),
        ))
        .map_err(plot_err(path))?
        .label(format!("usable {usable:.1} GiB"))
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], red.stroke_width(1)));
    let mark_colors = [
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(44, 160, 44),
    ];
    for (i, mk) in marks.iter().enumerate() {
        let c = mark_colors[i % mark_colors.len()];
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                (mk.peak_gib, mk.tokens_per_s),
                9,
                c.filled(),
            )))
            .map_err(plot_err(path))?
            .label(mk.label.clone())
            .legend(move |(x, y)| TriangleMarker::new((x + 7, y), 6, c.filled()));
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight, path)
}

/// Write `schedule.svg`, `memory.svg` and `pareto.svg` for layout `l` into
/// `dir` (created if missing). Returns the paths written and, when the
/// schedule of `l` cannot be played (interleaving with m not a multiple of
/// p, a rejected layout), a sentence saying why `schedule.svg` is missing.
///
/// # Errors
/// When `dir` cannot be created or a file cannot be written.
pub fn write_all(
    dir: &Path,
    pr: &Problem,
    l: &Layout,
    eval: &Evaluation,
    all: &[Candidate],
    marks: &[Mark],
) -> Result<(Vec<PathBuf>, Option<String>)> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--plot: cannot create the directory {}", dir.display()))?;
    let mut files = Vec::new();
    let mut note = None;
    let schedule = dir.join("schedule.svg");
    let p = l.pp.max(1);
    let md = drawn_micro_batches(eval.micro_batches, p, l.vpp.max(1));
    if l.vpp > 1 && (p == 1 || md % p != 0) {
        note = Some(format!(
            "schedule.svg not drawn: interleaving needs p > 1 and m a multiple of p (p = {p}, m = {})",
            eval.micro_batches
        ));
    } else {
        schedule_svg(&schedule, pr, l, eval)?;
        files.push(schedule);
    }
    let memory = dir.join("memory.svg");
    memory_svg(&memory, pr, l)?;
    files.push(memory);
    let pareto = dir.join("pareto.svg");
    pareto_svg(&pareto, pr, all, marks)?;
    files.push(pareto);
    Ok((files, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_f_one_b_equal_stages_closed_form() {
        // p = 4, m = 8, t_f = 1, t_b = 2: (m + p − 1)·(t_f + t_b) = 11·3 = 33.
        let b = simulate(&[1.0; 4], &[2.0; 4], 8, 1).unwrap();
        assert_eq!(b.len(), 2 * 4 * 8);
        assert!((makespan(&b) - 33.0).abs() < 1e-12);
        // Stage 0 holds at most p = 4 micro-batches in flight (forwards
        // started minus backwards finished), the 1F1B memory bound.
        let mut ev: Vec<(f64, i32)> = b
            .iter()
            .filter(|x| x.stage == 0)
            .map(|x| {
                if x.pass == Pass::Forward {
                    (x.start, 1)
                } else {
                    (x.end, -1)
                }
            })
            .collect();
        ev.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let peak = ev.iter().scan(0, |s, e| {
            *s += e.1;
            Some(*s)
        });
        assert_eq!(peak.max(), Some(4));
    }

    #[test]
    fn unequal_stages_hand_worked() {
        // p = 3, m = 4, (t_f, t_b) = (1, 2), (2, 4), (1, 2): stage 1 is the
        // bottleneck. Worked by hand (1F1B orders: stage 1 warms up with 1
        // forward, stage 2 with none):
        //   s1: F0 [1,3] F1 [3,5] B0 [6,10] F2 [10,12] B1 [12,16] F3 [16,18]
        //       B2 [18,22] B3 [22,26]   (B0 waits for s2's B0 [4,6])
        //   s0: … B3 [26,28]            → makespan 28.
        // The closed form (m − 1)·max + Σ of cost::schedule gives
        // 3·6 + 12 = 30: an upper bound for unequal stages.
        let b = simulate(&[1.0, 2.0, 1.0], &[2.0, 4.0, 2.0], 4, 1).unwrap();
        assert!((makespan(&b) - 28.0).abs() < 1e-12, "{}", makespan(&b));
        let closed = crate::cost::schedule::pipeline_time(&[3.0, 6.0, 3.0], 4, 1);
        assert_eq!(closed, 30.0);
        let s1b0 = b
            .iter()
            .find(|x| x.stage == 1 && x.pass == Pass::Backward && x.micro_batch == 0)
            .unwrap();
        assert_eq!((s1b0.start, s1b0.end), (6.0, 10.0));
    }

    #[test]
    fn interleaved_equal_stages_closed_form() {
        // p = 4, v = 2, m = 8, chunk t_f = 0.5, t_b = 1 (whole-stage 1 + 2):
        // (m + (p − 1)/v)·3 = (8 + 1.5)·3 = 28.5, against 33 for 1F1B.
        let b = simulate(&[0.5; 4], &[1.0; 4], 8, 2).unwrap();
        assert_eq!(b.len(), 2 * 4 * 2 * 8);
        assert!((makespan(&b) - 28.5).abs() < 1e-12, "{}", makespan(&b));
        // Every (stage, chunk, micro-batch) runs once each way.
        let mut seen = std::collections::HashSet::new();
        for x in &b {
            assert!(seen.insert((x.pass, x.stage, x.chunk, x.micro_batch)));
        }
    }

    #[test]
    fn interleaving_needs_m_multiple_of_p() {
        assert!(simulate(&[1.0; 4], &[2.0; 4], 6, 2).is_err());
    }

    #[test]
    fn pareto_front_hand_made() {
        // (GiB, tokens/s): (10, 5) and (20, 8) and (30, 9) are on the front;
        // (25, 7) is dominated by (20, 8); (10, 4) by (10, 5).
        let pts = [
            (20.0, 8.0),
            (25.0, 7.0),
            (10.0, 5.0),
            (30.0, 9.0),
            (10.0, 4.0),
        ];
        assert_eq!(pareto_front(&pts), vec![2, 0, 3]);
    }

    #[test]
    fn drawn_micro_batch_cap() {
        assert_eq!(drawn_micro_batches(8, 4, 1), 8);
        assert_eq!(drawn_micro_batches(512, 2, 1), 12);
        assert_eq!(drawn_micro_batches(512, 8, 1), 24);
        // Interleaved p = 5: cap 15 is already a multiple of 5; p = 8: 24.
        assert_eq!(drawn_micro_batches(500, 5, 2), 15);
        assert_eq!(drawn_micro_batches(64, 8, 2), 24);
    }
}
