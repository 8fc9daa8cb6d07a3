//! Explanations an expert would give: the smallest change that makes a
//! rejected layout valid ([`smallest_fixes`]), where a layout stands against
//! the winner and why ([`gap`]), and the answer to "why not T = 16, p = 2?"
//! ([`why_not`]).
//!
//! Every fix is checked by pricing the changed layout with the cost model and
//! the rules (the same [`search::judge`] the search uses), never guessed.

use std::cmp::Ordering;

use serde::Serialize;

use crate::cost::{Evaluation, Problem, TimeBreakdown, TimePart};
use crate::layout::{Layout, RankOrder, Recompute};
use crate::report::{RejectionLine, Row, SearchReport, memory_note};
use crate::rules::{self, Policy, Rule, Violation};
use crate::search::{self, Candidate, Filter, Space, better};
use crate::spec::GIB;

/// One change of one knob of a layout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Set T (D follows from N = D·T·p·C).
    Tp(u32),
    /// Set p (D follows).
    Pp(u32),
    /// Set C (D follows).
    Cp(u32),
    /// Set D = N/(T·p·C) (when the given D breaks the mesh).
    Dp(u32),
    /// Set E (MoE).
    Ep(u32),
    /// Set v.
    Vpp(u32),
    /// Set the micro-batch b.
    MicroBatch(u32),
    /// Set the recompute mode.
    Recompute(Recompute),
    /// Set the ZeRO stage.
    Zero(u8),
    /// Turn SP on or off.
    Sp(bool),
    /// Drop an explicit split for the uniform one.
    UniformSplit,
    /// Set the rank order.
    Order(RankOrder),
}

impl Change {
    /// Index of the knob (changes of the same knob are not combined).
    fn knob(self) -> usize {
        match self {
            Change::Tp(_) => 0,
            Change::Pp(_) => 1,
            Change::Cp(_) => 2,
            Change::Dp(_) => 3,
            Change::Ep(_) => 4,
            Change::Vpp(_) => 5,
            Change::MicroBatch(_) => 6,
            Change::Recompute(_) => 7,
            Change::Zero(_) => 8,
            Change::Sp(_) => 9,
            Change::UniformSplit => 10,
            Change::Order(_) => 11,
        }
    }

    /// Size of the change from `l`: |log2(new/old)| for sizes, the step
    /// count for recompute (none → selective → full) and ZeRO, 1 for toggles.
    fn distance(self, l: &Layout) -> f64 {
        let log = |a: u32, b: u32| ((a as f64) / (b as f64)).log2().abs();
        match self {
            Change::Tp(t) => log(t, l.tp),
            Change::Pp(p) => log(p, l.pp),
            Change::Cp(c) => log(c, l.cp),
            Change::Ep(e) => log(e, l.ep),
            Change::Vpp(v) => log(v, l.vpp),
            Change::MicroBatch(b) => log(b, l.micro_batch),
            Change::Recompute(r) => (r as i32 - l.recompute as i32).abs() as f64,
            Change::Zero(z) => (z as i32 - l.zero as i32).abs() as f64,
            Change::Dp(_) | Change::Sp(_) | Change::UniformSplit | Change::Order(_) => 1.0,
        }
    }

    /// The change in words, from `l`.
    fn describe(self, l: &Layout) -> String {
        match self {
            Change::Tp(t) => format!("T {} → {}", l.tp, t),
            Change::Pp(p) => format!("p {} → {}", l.pp, p),
            Change::Cp(c) => format!("C {} → {}", l.cp, c),
            Change::Dp(d) => format!("D {} → {}", l.dp, d),
            Change::Ep(e) => format!("E {} → {}", l.ep, e),
            Change::Vpp(v) => format!("v {} → {}", l.vpp, v),
            Change::MicroBatch(b) => format!("micro-batch {} → {}", l.micro_batch, b),
            Change::Recompute(r) => format!("recompute {} → {}", l.recompute, r),
            Change::Zero(z) => format!("ZeRO {} → {}", l.zero, z),
            Change::Sp(s) => format!("SP {}", if s { "on" } else { "off" }),
            Change::UniformSplit => "uniform layer split".into(),
            Change::Order(o) => format!("order {} → {}", l.order, o),
        }
    }
}

/// Apply `changes` to `l` for `world` GPUs; D is re-derived from N when a
/// mesh size changes. `None` when T·p·C does not divide N.
pub fn apply(l: &Layout, changes: &[Change], world: u64) -> Option<Layout> {
    let mut n = l.clone();
    let mut remesh = false;
    for c in changes {
        match *c {
            Change::Tp(t) => {
                n.tp = t;
                remesh = true;
            }
            Change::Pp(p) => {
                n.pp = p;
                remesh = true;
            }
            Change::Cp(c) => {
                n.cp = c;
                remesh = true;
            }
            Change::Dp(_) => remesh = true,
            Change::Ep(e) => n.ep = e,
            Change::Vpp(v) => n.vpp = v,
            Change::MicroBatch(b) => n.micro_batch = b,
            Change::Recompute(r) => n.recompute = r,
            Change::Zero(z) => n.zero = z,
            Change::Sp(s) => n.sp = s,
            Change::UniformSplit => n.split = None,
            Change::Order(o) => n.order = o,
        }
    }
    if remesh {
        let inner = n.tp as u64 * n.pp as u64 * n.cp as u64;
        if inner == 0 || world % inner != 0 {
            return None;
        }
        n.dp = (world / inner) as u32;
    }
    // A split for another number of chunks (p or v changed) is dropped.
    if n.split
        .as_ref()
        .is_some_and(|s| s.len() as u64 != u64::from(n.pp) * u64::from(n.vpp))
    {
        n.split = None;
    }
    if n.tp == 1 {
        n.sp = false;
    }
    Some(n)
}

fn divisors(n: u64) -> Vec<u32> {
    (1..=n.min(1 << 20))
        .filter(|d| n % d == 0)
        .map(|d| d as u32)
        .collect()
}

/// Candidate single changes of `l`: every other T, p, C dividing N (C ≤ 16,
/// p ≤ layers), D re-derived, E dividing the experts, v ≤ 8, micro-batches
/// 1…16 (powers of two), the other recompute modes and ZeRO stages, SP
/// toggled, the uniform split and the other rank order.
pub fn candidate_changes(pr: &Problem, l: &Layout) -> Vec<Change> {
    let n = pr.world;
    let layers = pr.model.architecture.layers;
    let mut out = Vec::new();
    for d in divisors(n) {
        if d != l.tp {
            out.push(Change::Tp(d));
        }
        if d != l.pp && d <= layers {
            out.push(Change::Pp(d));
        }
        if d != l.cp && d <= 16 {
            out.push(Change::Cp(d));
        }
    }
    if l.world() != n && n % (l.tp as u64 * l.pp as u64 * l.cp as u64).max(1) == 0 {
        out.push(Change::Dp(
            (n / (l.tp as u64 * l.pp as u64 * l.cp as u64)) as u32,
        ));
    }
    if let Some(m) = &pr.model.moe {
        for e in divisors(m.experts as u64) {
            if e != l.ep {
                out.push(Change::Ep(e));
            }
        }
    }
    for v in 1..=8 {
        if v != l.vpp {
            out.push(Change::Vpp(v));
        }
    }
    for b in [1, 2, 4, 8, 16] {
        if b != l.micro_batch {
            out.push(Change::MicroBatch(b));
        }
    }
    for r in Recompute::ALL {
        if r != l.recompute {
            out.push(Change::Recompute(r));
        }
    }
    for z in 0..=3 {
        if z != l.zero {
            out.push(Change::Zero(z));
        }
    }
    if l.tp > 1 {
        out.push(Change::Sp(!l.sp));
    }
    if l.split.is_some() {
        out.push(Change::UniformSplit);
    }
    for o in RankOrder::ALL {
        if o != l.order {
            out.push(Change::Order(o));
        }
    }
    out
}

/// A change (one or two knobs) that makes a layout valid, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    /// The changes in words, e.g. `["T 4 → 8 (D 16 → 8)"]`.
    pub changes: Vec<String>,
    /// The changed layout.
    pub layout: Layout,
    /// Its prices.
    pub eval: Evaluation,
    /// Peak memory of its worst rank, GiB.
    pub peak_gib: f64,
    /// Its step time minus the original's, seconds (positive = slower).
    pub step_delta_s: f64,
    /// The same as a fraction of the original step.
    pub step_delta: f64,
    /// The memory component that shrank most: name, GiB before, GiB after.
    pub relief: Option<(String, f64, f64)>,
    /// Size of the change (sum of |log2| steps), smaller is smaller.
    pub distance: f64,
    /// Job flags the fix turns on (the layout may be unchanged), e.g.
    /// `--fp8-param-gather`.
    pub flags: Vec<String>,
}

/// The smallest changes that make a layout valid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fixes {
    /// Peak memory of the original, GiB.
    pub original_peak_gib: f64,
    /// Step time of the original, seconds (priced even when rejected).
    pub original_step_s: f64,
    /// The working fixes, cheapest (shortest step) first: for each knob (or
    /// pair of knobs) the nearest value that works.
    pub fixes: Vec<Fix>,
    /// Whether no single change worked and these are pairs.
    pub pairs: bool,
    /// Changed layouts priced.
    pub tried: usize,
}

impl Fixes {
    /// The cheapest fix (shortest predicted step), if any.
    pub fn cheapest(&self) -> Option<&Fix> {
        self.fixes.first()
    }
}

fn relief(before: &Evaluation, after: &Evaluation) -> Option<(String, f64, f64)> {
    before
        .memory
        .iter()
        .zip(after.memory.iter())
        .map(|((p, b), (_, a))| (p, b, a))
        // A relief under the printed 0.1 GiB would read "0.6 → 0.6 GiB".
        .filter(|(_, b, a)| b - a >= 0.1 * GIB)
        .max_by(|x, y| {
            (x.1 - x.2)
                .partial_cmp(&(y.1 - y.2))
                .unwrap_or(Ordering::Equal)
        })
        .map(|(p, b, a)| (p.label().to_string(), b / GIB, a / GIB))
}

fn describe(l: &Layout, changes: &[Change], new: &Layout) -> Vec<String> {
    let mut out: Vec<String> = changes.iter().map(|c| c.describe(l)).collect();
    // D follows the mesh change that moved it (T, p or C).
    let mesh = changes
        .iter()
        .rposition(|c| matches!(c, Change::Tp(_) | Change::Pp(_) | Change::Cp(_)));
    if new.dp != l.dp
        && !changes.iter().any(|c| matches!(c, Change::Dp(_)))
        && let Some(at) = mesh.or(out.len().checked_sub(1))
    {
        out[at].push_str(&format!(" (D {} → {})", l.dp, new.dp));
    }
    if new.sp != l.sp && !changes.iter().any(|c| matches!(c, Change::Sp(_))) {
        out.push(format!("SP {}", if new.sp { "on" } else { "off" }));
    }
    // A split the change dropped (it no longer had p·v stages), solved
    // again, or brought in (the layers do not divide into the new p·v):
    // say so, or a change that works only with another split reads as
    // working alone.
    if new.split != l.split && !changes.iter().any(|c| matches!(c, Change::UniformSplit)) {
        out.push(match &new.split {
            None => "uniform layer split".to_string(),
            Some(_) => format!("split {}", crate::layout::split_text(&new.split)),
        });
    }
    out
}

/// The smallest changes that make `l` valid under `policy`: every single
/// change of [`candidate_changes`] is priced; for each knob the nearest value
/// that passes every rule (memory included) is kept. Every pair of changes
/// of two different knobs is priced too and, for each pair of knobs, the
/// nearest working pair kept: all of them when no single change works,
/// else those faster than the fastest single fix. Fixes are sorted by
/// predicted step time, so the first is the cheapest.
///
/// For memory the candidates include raising T or p (or C), SP, selective
/// and full recompute, higher ZeRO stages and smaller micro-batches; for
/// divisibility rules the nearest valid values of the offending size.
pub fn smallest_fixes(pr: &Problem, policy: &Policy, l: &Layout) -> Fixes {
    smallest_fixes_resplit(pr, policy, l, false)
}

/// [`smallest_fixes`], with every candidate's stage split solved again
/// ([`crate::split::solve`]) when `resplit` (the layout's split came from
/// `--auto-split`, so a change should be priced with its own best split,
/// not the old one). Without it a candidate is re-split only when its
/// split had to be dropped (p or v changed) and the uniform split does not
/// divide the layers.
pub fn smallest_fixes_resplit(pr: &Problem, policy: &Policy, l: &Layout, resplit: bool) -> Fixes {
    fixes_screened(pr, policy, l, resplit, true)
}

/// [`smallest_fixes_resplit`], with the pairs' split-free screen on or off
/// (off prices every pair whole: the tests' oracle for the screen).
fn fixes_screened(pr: &Problem, policy: &Policy, l: &Layout, resplit: bool, screen: bool) -> Fixes {
    use rayon::prelude::*;
    let original = crate::cost::evaluate(pr, l);
    let singles = candidate_changes(pr, l);
    let layers = pr.model.architecture.layers;
    // `None` when the changes give no new layout (not counted as tried),
    // else the fix when the changed layout is valid. Each is priced on its
    // own (split solves included), so they run on the rayon pool; the
    // results are kept in the candidates' order, whatever the threads.
    //
    // A fix kept only when it beats a step of `must_beat` seconds is
    // screened first by a bound that no stage split can undercut: the
    // pipeline time with every stage at the mean of the stages' summed
    // time, which does not depend on the split
    // ([`crate::cost::schedule::pipeline_time_of`]; the other terms are at
    // least zero), so the split is not solved for a fix that cannot be kept.
    let try_changes = |changes: &[Change], must_beat: f64| -> Option<Option<Fix>> {
        let mut new = apply(l, changes, pr.world)?;
        if new == *l {
            return None;
        }
        if must_beat.is_finite() {
            let e = crate::cost::evaluate(pr, &new);
            let stages = crate::cost::schedule::StageSummary {
                slowest: e.stages.sum / new.pp.max(1) as f64,
                sum: e.stages.sum,
            };
            let floor = crate::cost::schedule::pipeline_time_of(stages, e.micro_batches, new.vpp);
            if floor >= must_beat {
                return Some(None);
            }
        }
        let chunks = new.pp.saturating_mul(new.vpp).max(1);
        // A change that asks for the uniform split keeps it (re-solving it
        // would price a split the row's words do not name).
        let uniform_asked = changes.iter().any(|c| matches!(c, Change::UniformSplit));
        if !uniform_asked && (resplit || (new.split.is_none() && !layers.is_multiple_of(chunks))) {
            let plain = Layout {
                split: None,
                ..new.clone()
            };
            if let Ok(s) = crate::split::solve(pr, &plain) {
                new.split = Some(s.layers);
            }
        }
        let (set, eval) = search::judge(pr, policy, &new);
        if !set.is_empty() {
            return Some(None);
        }
        Some(Some(Fix {
            changes: describe(l, changes, &new),
            peak_gib: eval.peak_bytes / GIB,
            step_delta_s: eval.time.step - original.time.step,
            step_delta: eval.time.step / original.time.step - 1.0,
            relief: relief(&original, &eval),
            distance: changes.iter().map(|c| c.distance(l)).sum(),
            flags: Vec::new(),
            layout: new,
            eval,
        }))
    };
    let mut tried = 0;
    // Nearest working fix per knob (or knob pair).
    let mut best: std::collections::BTreeMap<(usize, usize), Fix> =
        std::collections::BTreeMap::new();
    let keep = |best: &mut std::collections::BTreeMap<(usize, usize), Fix>,
                key: (usize, usize),
                f: Fix| {
        let replace = match best.get(&key) {
            None => true,
            Some(old) => {
                f.distance < old.distance - 1e-9
                    || ((f.distance - old.distance).abs() < 1e-9
                        && f.eval.time.step < old.eval.time.step)
            }
        };
        if replace {
            best.insert(key, f);
        }
    };
    let priced: Vec<Option<Option<Fix>>> = singles
        .par_iter()
        .map(|c| try_changes(&[*c], f64::INFINITY))
        .collect();
    for (c, got) in singles.iter().zip(priced) {
        tried += usize::from(got.is_some());
        if let Some(Some(f)) = got {
            keep(&mut best, (c.knob(), usize::MAX), f);
        }
    }
    // Pairs when no single change works; when some do, the pairs that beat
    // the fastest of them too (SP with p 1 → 2 can be faster than any one
    // change that fits alone), so "cheapest" is the cheapest of both.
    // The one-step fixes outside the knobs (a job flag, the split alone)
    // count as singles: a pair is listed only when it beats them too.
    let extra: Vec<Fix> = narrow_param_gather_fix(pr, policy, l, &original, resplit)
        .into_iter()
        .chain(split_only_fix(pr, policy, l, &original))
        .collect();
    let pairs = best.is_empty() && extra.is_empty();
    let fastest_single = best
        .values()
        .chain(&extra)
        .map(|f| f.eval.time.step)
        .fold(f64::INFINITY, f64::min);
    let couples: Vec<(Change, Change)> = singles
        .iter()
        .enumerate()
        .flat_map(|(i, a)| singles[i + 1..].iter().map(move |b| (*a, *b)))
        .filter(|(a, b)| a.knob() != b.knob())
        .collect();
    let priced: Vec<Option<Option<Fix>>> = couples
        .par_iter()
        .map(|(a, b)| {
            let must_beat = if pairs || !screen {
                f64::INFINITY
            } else {
                fastest_single
            };
            try_changes(&[*a, *b], must_beat)
        })
        .collect();
    for ((a, b), got) in couples.iter().zip(priced) {
        tried += usize::from(got.is_some());
        if let Some(Some(f)) = got
            && (pairs || f.eval.time.step < fastest_single)
        {
            keep(&mut best, (a.knob(), b.knob()), f);
        }
    }
    let mut fixes: Vec<Fix> = best.into_values().collect();
    fixes.extend(extra);
    fixes.sort_by(|a, b| {
        a.eval
            .time
            .step
            .partial_cmp(&b.eval.time.step)
            .unwrap_or(Ordering::Equal)
            .then(
                a.distance
                    .partial_cmp(&b.distance)
                    .unwrap_or(Ordering::Equal),
            )
    });
    Fixes {
        original_peak_gib: original.peak_bytes / GIB,
        original_step_s: original.time.step,
        fixes,
        pairs,
        tried,
    }
}

/// The job flag that drops the working-precision copy of the
/// low-precision linears' weights: `--fp8-param-gather` (Megatron-LM; it
/// needs the distributed optimizer or FSDP, so ZeRO ≥ 1), off by default
/// as in Megatron-LM, on in Megatron-Bridge's FP8 presets. Priced on the
/// same layout with the flag on (its `--auto-split` split solved again; [`crate::cost::precision::narrow_param_weight_saving`],
/// [`crate::cost::precision::narrow_param_gather`]); `None` when the job
/// has it on already, runs bf16, the layout is at ZeRO-0, or the flag does
/// not make the layout valid.
fn narrow_param_gather_fix(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    original: &Evaluation,
    resplit: bool,
) -> Option<Fix> {
    if !pr.job.precision.is_low() || pr.job.fp8_param_gather || l.zero == 0 {
        return None;
    }
    let job = crate::spec::Job {
        fp8_param_gather: true,
        ..pr.job.clone()
    };
    let with = Problem::new(pr.model, pr.gpu, pr.cluster, &job, pr.world);
    // A split from `--auto-split` is solved again with the flag on.
    let mut l = l.clone();
    if resplit {
        let plain = Layout {
            split: None,
            ..l.clone()
        };
        if let Ok(s) = crate::split::solve(&with, &plain) {
            l.split = Some(s.layers);
        }
    }
    let (set, eval) = search::judge(&with, policy, &l);
    set.is_empty().then(|| Fix {
        changes: vec!["--fp8-param-gather (parameters all-gathered in the low-precision format, no working-precision copy)".into()],
        peak_gib: eval.peak_bytes / GIB,
        step_delta_s: eval.time.step - original.time.step,
        step_delta: eval.time.step / original.time.step - 1.0,
        relief: relief(original, &eval),
        // A flag, not a layout change: the smallest change there is.
        distance: 0.0,
        flags: vec!["--fp8-param-gather".into()],
        layout: l,
        eval,
    })
}

/// The layout itself with the stage split solved for it (`--auto-split`),
/// when it has no split of its own and that alone makes it valid (the
/// remedy the `layers-pp` rule names first: an uneven split). Its
/// distance is the smallest a layout change has (a split moves no size).
fn split_only_fix(pr: &Problem, policy: &Policy, l: &Layout, original: &Evaluation) -> Option<Fix> {
    if l.split.is_some() || l.pp <= 1 {
        return None;
    }
    let s = crate::split::solve(pr, l).ok()?;
    let new = Layout {
        split: Some(s.layers),
        ..l.clone()
    };
    let (set, eval) = search::judge(pr, policy, &new);
    set.is_empty().then(|| Fix {
        changes: vec![format!(
            "split {} (--auto-split)",
            crate::layout::split_text(&new.split)
        )],
        peak_gib: eval.peak_bytes / GIB,
        step_delta_s: eval.time.step - original.time.step,
        step_delta: eval.time.step / original.time.step - 1.0,
        relief: relief(original, &eval),
        distance: 0.0,
        flags: Vec::new(),
        layout: new,
        eval,
    })
}

/// One part of the step-time gap between a layout and the winner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapPart {
    /// Which part ([`TimePart::key`] in JSON).
    #[serde(serialize_with = "part_key")]
    pub part: TimePart,
    /// The winner's exposed seconds.
    pub winner_s: f64,
    /// This layout's exposed seconds.
    pub this_s: f64,
    /// `this_s − winner_s`, seconds.
    pub delta_s: f64,
}

fn part_key<S: serde::Serializer>(p: &TimePart, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.key())
}

/// Where a layout loses time against the winner. The exposed parts of a
/// [`TimeBreakdown`] add up to the step, so the deltas add up to the gap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gap {
    /// The winner's step, seconds.
    pub winner_step_s: f64,
    /// This layout's step, seconds.
    pub this_step_s: f64,
    /// `this − winner`, seconds.
    pub delta_s: f64,
    /// How much faster the winner is, `tokens/s ratio − 1`.
    pub winner_faster: f64,
    /// Every part, in breakdown order.
    pub parts: Vec<GapPart>,
}

/// The gap between `this` and `winner`, part by part (exposed seconds of
/// every [`TimePart`]). The FLOPs of a step are the same for every layout,
/// so a compute delta is GEMM efficiency of the shards and stage balance.
pub fn gap(winner: &TimeBreakdown, this: &TimeBreakdown) -> Gap {
    Gap {
        winner_step_s: winner.step,
        this_step_s: this.step,
        delta_s: this.step - winner.step,
        winner_faster: this.step / winner.step - 1.0,
        parts: TimePart::ALL
            .into_iter()
            .map(|part| {
                let (w, t) = (winner.exposed(part), this.exposed(part));
                GapPart {
                    part,
                    winner_s: w,
                    this_s: t,
                    delta_s: t - w,
                }
            })
            .collect(),
    }
}

/// A rejected layout close to the question, with its reasons and fixes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NearMiss {
    /// The layout.
    pub layout: Layout,
    /// Its prices.
    pub eval: Evaluation,
    /// The rules it breaks.
    pub violations: Vec<Violation>,
    /// The smallest changes that make it valid.
    pub fixes: Fixes,
    /// Where it would rank among the valid layouts if it were allowed.
    pub rank_if_allowed: usize,
    /// Whether `eval` means anything: false for the unpriced example of a
    /// rule under which no price holds ([`crate::rules::Rule::price_holds`]),
    /// named only when no priced near-miss exists.
    pub priced: bool,
}

/// The answer to "why not this partial layout?" (`search --why-not`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhyNot {
    /// The question as given.
    pub query: String,
    /// Valid layouts in the whole search.
    pub valid_total: usize,
    /// Layouts the search ranks (the rows `search` can list).
    pub ranked_total: usize,
    /// Layouts matching the question that were enumerated.
    pub matching_considered: u64,
    /// Valid layouts matching the question.
    pub matching_valid: usize,
    /// The winner of the whole search.
    pub winner: Option<Row>,
    /// The best-ranked valid layout matching the question; `rank` is its
    /// row in the search's ranking.
    pub best: Option<Row>,
    /// The fastest matching row when it ranks behind `best` (an
    /// implausible or less-validated plan of the same tie group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faster: Option<Row>,
    /// When no matching layout is ranked but one is valid (predicted below
    /// the ranked share of the fastest's tokens/s): the fastest of them;
    /// `rank` is 1 + the ranked layouts predicted faster.
    pub unranked: Option<Row>,
    /// Why `unranked` has no row: predicted below the ranked share of the
    /// fastest, or valid only with an uneven split the full search did not
    /// solve for its ranking ([`search::Stats::ranked_unsplit`]).
    pub unranked_reason: Option<UnrankedReason>,
    /// Why the search never enumerates `unranked`, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_space: Option<String>,
    /// Its gap to the winner.
    pub gap: Option<Gap>,
    /// Why matching layouts were rejected (first broken rule), with the best
    /// near-miss of each.
    pub rejections: Vec<RejectionLine>,
    /// When nothing matching is valid: the best near-miss, why, and its fixes.
    pub near_miss: Option<NearMiss>,
    /// A sentence when the question cannot match any enumerated layout.
    pub note: Option<String>,
}

/// Why a valid layout has no row in the search's ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnrankedReason {
    /// Predicted below [`search::RANKED_FLOOR`] of the fastest's tokens/s.
    BelowFloor,
    /// Above the floor only with an uneven stage split (valid only with it,
    /// or below the floor with the uniform one), which the full search
    /// solves for its ranking only for layouts the uniform split rejects,
    /// when every layer is alike and within [`search::MAX_RANKED_SPLITS`]
    /// layouts.
    SplitNotSolved,
    /// The search never enumerates it ([`search::outside_space`]: an ETP
    /// not dividing T, selective recompute with flash attention); the
    /// sentence is [`WhyNot::outside_space`].
    OutsideSpace,
}

/// A concrete layout for a question that matches nothing enumerated: the
/// fixed values, the layout grammar's defaults elsewhere
/// ([`Filter::layout_with_defaults`]), D from N when possible and 1 when not.
fn probe(pr: &Problem, f: &Filter) -> Layout {
    f.layout_with_defaults(pr.world)
        .or_else(|| {
            Filter {
                dp: Some(1),
                ..f.clone()
            }
            .layout_with_defaults(pr.world)
        })
        .unwrap_or_else(|| Layout::dense(1, 1, 1, 1))
}

/// Answer `search --why-not QUERY`: the best-ranked valid layout matching
/// the partial assignment `query` (keys of [`Filter::parse`]), its row in
/// `ranked` (the search's whole ranking, best first, as `search` lists it:
/// [`crate::report::ranked_rows`] over every valid layout of the search
/// over `space`, kept with [`Space::keep_all`]) and its gap to the winner;
/// or, when nothing matching is valid, the rejection counts of the matching
/// subset and the best near-miss with its smallest fixes (and where its
/// predictions would place it among `all`, the valid layouts, by predicted
/// tokens/s).
///
/// # Errors
/// A sentence when the query does not parse or contradicts `--fix`.
pub fn why_not(
    pr: &Problem,
    space: &Space,
    all: &[Candidate],
    ranked: &[Row],
    valid_total: u64,
    query: &str,
) -> Result<WhyNot, String> {
    let asked = Filter::parse(query)?;
    let filter = space.filter.merged(&asked, "--fix", "--why-not")?;
    let winner = ranked.first();
    let best = ranked.iter().find(|r| filter.matches(&r.layout));
    // The fastest matching row, when the ranking puts it behind `best`
    // (trust orders a tie group: an implausible or less-validated plan
    // comes after).
    let faster = ranked
        .iter()
        .filter(|r| filter.matches(&r.layout))
        .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
        .filter(|f| best.is_some_and(|b| f.tokens_per_s > b.tokens_per_s))
        .cloned();
    // Keep-all, as the full search, so the matching layouts valid only with
    // an uneven split are re-split and counted as the ranking's are.
    let sub_space = Space {
        filter: filter.clone(),
        keep_all: true,
        top_k: 1,
        ..space.clone()
    };
    let sub = search::search(pr, &sub_space);
    let rejections = SearchReport::new(pr, &space.policy, &sub).rejections;
    // Valid but not ranked: predicted below the ranked share of the
    // fastest's tokens/s.
    let unranked = if best.is_none() {
        sub.top
            .first()
            .map(|c| Row::of(search::rank_among(all, &c.eval), c))
    } else {
        None
    };
    let fastest = ranked
        .iter()
        .map(|r| r.eval.tokens_per_s)
        .fold(0.0, f64::max);
    let outside_space = unranked
        .as_ref()
        .and_then(|u| search::outside_space(pr, space.max_vpp, &u.layout));
    let unranked_reason = unranked.as_ref().map(|u| {
        if outside_space.is_some() {
            UnrankedReason::OutsideSpace
        } else if u.layout.split.is_some() && u.eval.tokens_per_s >= search::RANKED_FLOOR * fastest
        {
            UnrankedReason::SplitNotSolved
        } else {
            UnrankedReason::BelowFloor
        }
    });
    let mut out = WhyNot {
        query: query.to_string(),
        valid_total: valid_total as usize,
        ranked_total: ranked.len(),
        matching_considered: sub.stats.considered,
        matching_valid: sub.stats.valid as usize,
        winner: winner.cloned(),
        best: best.cloned(),
        faster,
        unranked,
        unranked_reason,
        outside_space,
        gap: match (winner, best) {
            (Some(w), Some(b)) => Some(gap(&w.eval.time, &b.eval.time)),
            _ => None,
        },
        rejections,
        near_miss: None,
        note: None,
    };
    if out.best.is_some() || out.unranked.is_some() {
        return Ok(out);
    }
    // Nothing matching is valid: find the best near-miss, among the rules
    // under which a price means something (the others' examples are
    // unpriced, [`crate::rules::Rule::price_holds`]; one of them is named,
    // unpriced, when nothing else is).
    let mut candidates: Vec<Candidate> = sub
        .rejections
        .iter()
        .filter(|r| r.rule.price_holds())
        .filter_map(|r| r.near_miss.clone())
        .collect();
    let unpriced = sub
        .rejections
        .iter()
        .filter(|r| !r.rule.price_holds())
        .find_map(|r| r.near_miss.clone());
    if sub.stats.considered == 0 {
        let dom = pr.cluster.fast_domain();
        // Not enumerated because T crosses the NVLink domain: price them on
        // the slower tier to show what allowing it would give (when any
        // such layout can be built at all).
        let wider = (filter.tp.is_some_and(|t| t > dom) && !space.policy.allow_tp_across_domains)
            .then(|| {
                let mut wider = sub_space.clone();
                wider.policy.allow_tp_across_domains = true;
                search::search(pr, &wider)
            })
            .filter(|r| r.stats.considered > 0);
        if let Some(r) = wider {
            out.matching_considered = r.stats.considered;
            out.note = Some(format!(
                "T = {} spans more than one {}-GPU NVLink domain, so the search skips it unless --allow-tp-across-nodes is given; below, the best such layout priced on the slower tier",
                filter.tp.unwrap_or(0),
                dom
            ));
            // Prefer layouts whose only fault is the domain rule.
            if r.top.is_empty() {
                candidates.extend(
                    r.rejections
                        .iter()
                        .filter(|x| x.rule.price_holds())
                        .filter_map(|x| x.near_miss.clone()),
                );
            } else {
                candidates.extend(r.top.iter().cloned());
            }
        } else {
            let l = probe(pr, &filter);
            // Structural rules only: the probe's other values are arbitrary.
            let v = rules::explain(pr, &space.policy, &l, None);
            let why = if v.is_empty() {
                match sub.empty_reason.as_deref() {
                    Some(r) if !r.starts_with("no D·T·p·C") => r.to_string(),
                    _ => format!(
                        "the search bounds exclude it (max C {}, max micro-batch {}, max v {})",
                        space.max_cp, space.max_micro_batch, space.max_vpp
                    ),
                }
            } else {
                v.iter()
                    .map(|x| format!("[{}] {}", x.code, x.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            out.note = Some(format!(
                "no layout matching `{query}` can be built for {} GPUs: {why}",
                pr.world
            ));
            return Ok(out);
        }
    }
    // The fastest near-miss (each breaks exactly one rule).
    let best = candidates.into_iter().min_by(better);
    let priced = best.is_some();
    if let Some(c) = best.or(unpriced) {
        let violations = rules::explain(pr, &space.policy, &c.layout, memory_note(&c.eval));
        let fixes = smallest_fixes(pr, &space.policy, &c.layout);
        out.near_miss = Some(NearMiss {
            rank_if_allowed: search::rank_among(all, &c.eval),
            layout: c.layout,
            eval: c.eval,
            violations,
            fixes,
            priced,
        });
    }
    Ok(out)
}

/// Rules a fix list is about, for headings: the codes of `v`.
pub fn codes(v: &[Violation]) -> Vec<&'static str> {
    v.iter().map(|x| x.code).collect()
}

/// Whether the only broken rule is memory.
pub fn only_memory(v: &[Violation]) -> bool {
    !v.is_empty() && v.iter().all(|x| x.rule == Rule::Memory)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Catalog, Job};

    /// The pairs' screen ([`fixes_screened`]) drops only pairs that could
    /// not be kept: with it and without it (every pair priced, its split
    /// solved) the fixes are the same. The main job's `--tp 8 --pp 1`
    /// (a pair, SP on with p 1 → 2, beats every single fix) and
    /// DeepSeek-V3 on h800-2048 at D 128 T 2 p 8 E 256 (61 layers over 8
    /// stages: every fix re-split, 836 tried, most of them pairs).
    #[test]
    fn the_pair_screen_changes_no_fix() {
        let cat = Catalog::shipped().unwrap();
        for (model, cluster, l) in [
            (
                "70b",
                "dgx64",
                Layout {
                    sp: false,
                    ..Layout::dense(8, 8, 1, 1)
                },
            ),
            (
                "deepseek-v3",
                "h800-2048",
                Layout {
                    sp: true,
                    ep: 256,
                    ..Layout::dense(128, 2, 8, 1)
                },
            ),
        ] {
            let m = cat.model(model).unwrap();
            let c = cat.cluster(cluster).unwrap();
            let g = cat.gpu(&c.gpu).unwrap();
            let job = Job::new(m.defaults.global_batch, m.defaults.seq_len);
            let pr = Problem::new(m, g, c, &job, c.total_gpus());
            let policy = Policy::default();
            let screened = fixes_screened(&pr, &policy, &l, false, true);
            let whole = fixes_screened(&pr, &policy, &l, false, false);
            assert!(!screened.fixes.is_empty(), "{model}");
            assert_eq!(screened.fixes, whole.fixes, "{model}");
            assert_eq!(screened.tried, whole.tried, "{model}");
        }
    }
}
