//! Uneven pipeline stage layer splits.
//!
//! A layout with p pipeline ranks and v virtual stages cuts the model into
//! S = p·v contiguous chunks; chunk c runs on pipeline rank `c mod p`
//! (Megatron's `--pipeline-model-parallel-layout` numbering: stage i goes to
//! `pp_rank = i % PP`, `vpp_chunk = i // PP` [ref:megatron-pp-layout]). A
//! uniform split is rarely the best one: the first chunk also holds the
//! embedding, the last the output layer, logits and loss, MoE models mix
//! dense and expert layers, L need not divide by S, and under 1F1B rank i
//! keeps `p − i` micro-batches of activations, so early ranks run out of
//! memory first.
//!
//! # The problem ([`SplitProblem`])
//!
//! The model is a sequence of n items in model order: the embedding, the L
//! transformer layers, the output layer with its loss. Each [`Item`] has a
//! time per micro-batch, model-state bytes, activation bytes per micro-batch
//! in flight and a working set, all taken from [`crate::cost::layer`] for
//! the layout ([`SplitProblem::for_layout`]). A split cuts the items at
//! boundaries `0 = B_0 < B_1 < … < B_S = n`; chunk c holds items
//! `[B_c, B_{c+1})` and at least one transformer layer (so the embedding is
//! always in chunk 0 and the output in chunk S − 1). Rank r then costs
//!
//! - time per micro-batch `τ_r + Σ_{i ∈ r} t_i` (τ_r: its point-to-point
//!   sends, v per micro-batch),
//! - peak bytes `κ_r + Σ_{i ∈ r} (s_i + φ_r·a_i) + max_{i ∈ r} w_i + ε·[r
//!   holds an MoE layer]`, with κ_r the buffers every rank holds (SP and CP
//!   buffers, unfused scores, ZeRO-3's gathered units, and the logits on the
//!   last rank), s_i model states, a_i activations,
//!   φ_r = [`memory::in_flight`]`(r, p, v, m)/v` whole micro-batches in
//!   flight, w_i the item's working set capped at one layer's
//!   ([`crate::cost::working_set_cap`]) and ε the EP dispatch buffers
//!   ([`layer::LayerCosts::ep_buffers`]).
//!
//! These are exactly the sums [`crate::cost::rank_cost`] forms for a layout
//! with that split (a test checks the two agree), so a split that fits here
//! fits in [`crate::cost::evaluate`].
//!
//! The objective is the slowest rank's time per micro-batch, `max_r T_r`,
//! subject to every rank's peak fitting the usable memory. The sum of the
//! ranks' times does not depend on the split, so under the schedule
//! formula `m·max + (Σ − max)/v` ([ref:zheng-2022]), minimising the slowest
//! rank minimises the pipeline time. Ties are broken lexicographically: with
//! v > 1, first by the slowest chunk (rank times and memory do not see how
//! a rank's layers spread over its chunks, but the interleaved schedule
//! assumes equal chunks, so without this the solver may return chunks of
//! 1 and 7 layers on one rank); then by the least largest memory (as a
//! share of usable memory), as the search ranks ties by headroom. The
//! data-parallel and optimizer terms of the step also move with the split
//! (through the ranks' parameters and backward times) but are left out of
//! the objective; the search re-prices the chosen split with
//! [`crate::cost::evaluate`] and keeps it only if the step is faster.
//!
//! Three solvers: [`ilp::solve`] (good_lp with HiGHS, any v),
//! [`dp::solve`] (an exact dynamic program for v = 1 with the same
//! tie-break) and [`uniform::solve`] (exact for any v when every
//! transformer layer is alike and the other items sit at the ends: a
//! rank's time and memory then depend only on how many layers it holds,
//! and greedy filling of the counts solves the three programs). The search
//! uses the uniform solver wherever it applies (every dense catalog model,
//! tens of microseconds a problem), else the DP for v = 1 and the ILP
//! for interleaved layouts (milliseconds); they are each other's oracles in
//! `tests/split_solvers.rs`, with brute force. Per-stage recomputation
//! counts are not chosen: a layout has one recompute setting, and
//! Megatron's `--recompute-num-layers` is one number for all stages.
//!
//! # Which splits Megatron-LM can launch
//!
//! `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`
//! only allow splits whose middle stages are equal (Megatron's checks P7–P9
//! of [ref:megatron-transformer-config], and with v > 1 each count divisible
//! by v). `--pipeline-model-parallel-layout` takes any contiguous split
//! (P13: `E` first, `L` last, `t` count = L), so the splits chosen here are
//! not restricted to the first/last form: every
//! one is launchable with the layout string, and the Megatron generator
//! uses the first/last flags when they express it. meshplan additionally
//! asks for at least one transformer layer per chunk
//! ([`crate::rules::Rule::Split`]).

pub mod dp;
pub mod ilp;
pub mod uniform;

use serde::Serialize;

use crate::cost::memory;
use crate::cost::{self, Problem, layer};
use crate::layout::{Layout, Placement};
use crate::spec::GIB;

/// One item of the model for one layout, per micro-batch on its rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Item {
    /// Forward + backward + recompute + exposed TP/CP/EP communication,
    /// seconds per micro-batch ([`layer::ItemCost::time`]).
    pub time: f64,
    /// Model states (weights, gradients, optimizer state under the layout's
    /// ZeRO stage, [`memory::model_states`]), bytes.
    pub states: f64,
    /// Saved activations per micro-batch in flight, bytes.
    pub activation: f64,
    /// Working set while its backward runs, capped at one layer's, bytes.
    pub working_set: f64,
    /// Whether the item is a transformer layer (every chunk needs one).
    pub layer: bool,
    /// Whether the item is an MoE layer: a rank holding one also holds
    /// [`SplitProblem::expert_bytes`].
    pub expert: bool,
}

/// A stage split problem: items in model order, ranks and their constants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitProblem {
    /// Items in model order (embedding, layers, output).
    pub items: Vec<Item>,
    /// Pipeline ranks p.
    pub pp: u32,
    /// Virtual stages per rank v; chunks S = p·v, chunk c on rank `c mod p`.
    pub vpp: u32,
    /// Time every rank spends per micro-batch besides its items
    /// (its exposed point-to-point sends), seconds; p entries.
    pub rank_time: Vec<f64>,
    /// Bytes every rank holds besides its items (buffers, logits on the
    /// last rank, ZeRO-3 unit); p entries.
    pub rank_bytes: Vec<f64>,
    /// Whole micro-batches of activations rank r holds at its peak, φ_r;
    /// p entries.
    pub in_flight: Vec<f64>,
    /// Bytes a rank holds while it holds any MoE item (EP dispatch
    /// buffers), ε.
    pub expert_bytes: f64,
    /// Usable bytes per GPU.
    pub usable: f64,
}

/// Per-rank prices of one split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Priced {
    /// Time per micro-batch of each rank, seconds.
    pub rank_time: Vec<f64>,
    /// Peak bytes of each rank.
    pub rank_bytes: Vec<f64>,
    /// Time per micro-batch of each chunk's items (no point-to-point),
    /// seconds.
    pub chunk_time: Vec<f64>,
}

impl Priced {
    /// Slowest rank's time per micro-batch, seconds.
    pub fn max_time(&self) -> f64 {
        self.rank_time.iter().copied().fold(f64::MIN, f64::max)
    }

    /// Slowest chunk's item time per micro-batch, seconds.
    pub fn max_chunk_time(&self) -> f64 {
        self.chunk_time.iter().copied().fold(f64::MIN, f64::max)
    }

    /// Largest rank peak, bytes.
    pub fn max_bytes(&self) -> f64 {
        self.rank_bytes.iter().copied().fold(f64::MIN, f64::max)
    }

    /// The rank with the largest peak (the first of equals).
    pub fn worst_rank(&self) -> usize {
        let max = self.max_bytes();
        self.rank_bytes.iter().position(|b| *b == max).unwrap_or(0)
    }
}

/// A chosen split.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Split {
    /// Item boundaries `B_0 = 0 < … < B_S = n`.
    pub bounds: Vec<usize>,
    /// Transformer layers per chunk (S entries, model order): the value for
    /// [`Layout::split`].
    pub layers: Vec<u32>,
    /// Its per-rank prices.
    pub priced: Priced,
    /// Whether the solver proved it optimal (false when it stopped at its
    /// time limit with a feasible split).
    pub optimal: bool,
}

/// Why no split was produced.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SplitError {
    /// More chunks than transformer layers.
    #[error(
        "{stages} pipeline stages (p·v = {pp}·{vpp}) but the model has only {layers} transformer layers; every stage needs at least one"
    )]
    TooManyStages {
        /// Chunks p·v.
        stages: u32,
        /// p.
        pp: u32,
        /// v.
        vpp: u32,
        /// Transformer layers.
        layers: u32,
    },
    /// No split fits in memory. `split` is the split that minimises the
    /// largest stage memory; under it pipeline stage `stage` needs `peak`
    /// bytes of `usable`.
    #[error(
        "no stage split fits in memory: even the split {} that minimises the largest stage's memory leaves pipeline stage {stage} at {:.2} GiB of {:.2} GiB usable, over by {:.2} GiB",
        crate::rules::comma(.split), .peak / GIB, .usable / GIB, (.peak - .usable) / GIB
    )]
    Infeasible {
        /// Layers per chunk of the min-max-memory split.
        split: Vec<u32>,
        /// Pipeline rank that overflows the most.
        stage: u32,
        /// Its peak, bytes.
        peak: f64,
        /// Usable bytes per GPU.
        usable: f64,
    },
    /// The ILP solver did not return a split.
    #[error("the stage split ILP failed in HiGHS: {status}")]
    Solver {
        /// The solver's status, as good_lp reports it.
        status: String,
    },
    /// The uniform-layer solver ([`uniform`]) needs identical transformer
    /// layers with the non-layer items only at the ends.
    #[error(
        "the uniform-layer splitter needs identical transformer layers, the other items before the first or after the last, and finite non-negative costs"
    )]
    NotUniform,
    /// The dynamic program handles 1F1B (v = 1) only.
    #[error("the dynamic-program splitter handles v = 1 only, got v = {vpp}")]
    Interleaved {
        /// v.
        vpp: u32,
    },
}

impl SplitProblem {
    /// Number of chunks S = p·v.
    pub fn chunks(&self) -> usize {
        (self.pp * self.vpp) as usize
    }

    /// Transformer layers among the items.
    pub fn layers(&self) -> u32 {
        self.items.iter().filter(|i| i.layer).count() as u32
    }

    /// The split problem of layout `l` (its `split` field is ignored).
    ///
    /// Items: the embedding ([`layer::LayerCosts::embedding`]), layer i as
    /// dense or MoE by [`crate::spec::Model::is_moe_layer`], the output
    /// layer with its loss. Model states per item are
    /// [`memory::model_states`] of its dense parameters sharded over D·C
    /// plus of its expert parameters sharded over EDP (linear in the
    /// parameters for ZeRO 0–2; ZeRO-3's gathered unit goes to the rank
    /// constant). m is [`cost::micro_batches_or_floor`].
    pub fn for_layout(pr: &Problem, l: &Layout) -> SplitProblem {
        let pl = Placement::of(l, pr.cluster);
        let lc = layer::layer_costs(pr, l, &pl);
        Self::from_costs(pr, l, &lc)
    }

    /// [`SplitProblem::for_layout`] from already computed item costs.
    pub fn from_costs(pr: &Problem, l: &Layout, lc: &layer::LayerCosts) -> SplitProblem {
        let recipe = &pr.job.recipe;
        let shard = (l.dp * l.cp) as f64;
        let edp = l.edp() as f64;
        let cap = cost::working_set_cap(lc);
        let item = |ic: &layer::ItemCost, is_layer: bool, expert: bool| Item {
            time: ic.time(),
            // The states held through backward: the split is chosen for
            // the backward moment. The optimizer step's moment (states plus
            // step-only gradients, no activations,
            // `memory::peak_at_optimizer_step`) is checked by `rank_cost`
            // on the split chosen; adding the step's gradients to the
            // backward's activations here refused splits that fit.
            states: memory::model_states(ic.params, recipe, l.zero, shard, 0.0).total()
                + memory::model_states(ic.expert_params, recipe, l.zero, edp, 0.0).total()
                + low_item_bytes(pr, l, ic),
            activation: ic.activation,
            working_set: ic.working_set.min(cap),
            layer: is_layer,
            expert,
        };
        let layers = pr.model.architecture.layers;
        let mut items = Vec::with_capacity(layers as usize + 2);
        items.push(item(&lc.embedding, false, false));
        let dense = item(&lc.dense, true, false);
        let moe = item(&lc.moe, true, true);
        for i in 0..layers {
            items.push(if pr.model.is_moe_layer(i) { moe } else { dense });
        }
        items.push(item(&lc.output, false, false));
        let m = cost::micro_batches_or_floor(pr, l);
        let rank_time = (0..l.pp).map(|r| rank_p2p_time(pr, l, lc, m, r)).collect();
        let buffers = cost::temporary_buffers(pr, l, lc);
        let rank_bytes = (0..l.pp)
            .map(|r| {
                buffers
                    + zero3_units(pr, l, lc, r as usize)
                    + if r == l.pp - 1 {
                        lc.output.working_set
                    } else {
                        0.0
                    }
            })
            .collect();
        SplitProblem {
            items,
            pp: l.pp,
            vpp: l.vpp,
            rank_time,
            rank_bytes,
            in_flight: (0..l.pp)
                .map(|r| {
                    memory::in_flight(
                        r,
                        l.pp,
                        l.vpp,
                        m,
                        pr.job.moe_a2a_overlap && pr.model.moe.is_some(),
                    ) / l.vpp as f64
                })
                .collect(),
            expert_bytes: lc.ep_buffers,
            usable: pr.usable_bytes(),
        }
    }

    /// A lower bound on the slowest rank's time of every split that fits,
    /// seconds, or `None` when no split can fit ([`relax`]).
    pub fn relaxation(&self) -> Option<f64> {
        let p = self.pp as usize;
        let layers: Vec<&Item> = self.items.iter().filter(|i| i.layer).collect();
        if layers.is_empty() || p == 0 {
            return None;
        }
        let min = |f: fn(&Item) -> f64| layers.iter().map(|i| f(i)).fold(f64::INFINITY, f64::min);
        let first = self.items.iter().position(|i| i.layer).unwrap_or(0);
        let last = self.items.iter().rposition(|i| i.layer).unwrap_or(0);
        let head = &self.items[..first];
        let tail = &self.items[last + 1..];
        let cheapest = Cheapest {
            time: min(|i| i.time),
            states: min(|i| i.states),
            activation: min(|i| i.activation),
            working_set: min(|i| i.working_set),
            always: if layers.iter().all(|i| i.expert) {
                self.expert_bytes
            } else {
                0.0
            },
        };
        let mean = (self.items.iter().map(|i| i.time).sum::<f64>()
            + self.rank_time.iter().sum::<f64>())
            / p as f64;
        let rank = |r: usize| {
            let phi = self.in_flight[r];
            let mut time = self.rank_time[r];
            let mut bytes = self.rank_bytes[r];
            for it in head
                .iter()
                .filter(|_| r == 0)
                .chain(tail.iter().filter(|_| r == p - 1))
            {
                time += it.time;
                bytes += it.states + phi * it.activation;
            }
            (time, bytes, phi)
        };
        relax(
            self.pp,
            self.vpp,
            layers.len(),
            &cheapest,
            self.usable,
            rank,
        )
        .map(|t| t.max(mean))
    }

    /// Check the shape before solving.
    ///
    /// # Errors
    /// [`SplitError::TooManyStages`] when S exceeds the transformer layers.
    pub fn check(&self) -> Result<(), SplitError> {
        let stages = self.pp * self.vpp;
        let layers = self.layers();
        if stages == 0 || stages > layers {
            return Err(SplitError::TooManyStages {
                stages,
                pp: self.pp,
                vpp: self.vpp,
                layers,
            });
        }
        Ok(())
    }

    /// Per-rank prices of the split with item boundaries `bounds`
    /// (S + 1 entries from 0 to n, increasing).
    pub fn price(&self, bounds: &[usize]) -> Priced {
        let p = self.pp as usize;
        let mut time = self.rank_time.clone();
        let mut states = vec![0.0; p];
        let mut act = vec![0.0; p];
        let mut ws = vec![0.0f64; p];
        let mut expert = vec![false; p];
        let mut chunk_time = vec![0.0; bounds.len() - 1];
        for c in 0..bounds.len() - 1 {
            let r = c % p;
            for it in &self.items[bounds[c]..bounds[c + 1]] {
                chunk_time[c] += it.time;
                time[r] += it.time;
                states[r] += it.states;
                act[r] += it.activation;
                ws[r] = ws[r].max(it.working_set);
                expert[r] |= it.expert;
            }
        }
        let rank_bytes = (0..p)
            .map(|r| {
                let dispatch = if expert[r] { self.expert_bytes } else { 0.0 };
                self.rank_bytes[r] + states[r] + self.in_flight[r] * act[r] + ws[r] + dispatch
            })
            .collect();
        Priced {
            rank_time: time,
            rank_bytes,
            chunk_time,
        }
    }

    /// Item boundaries of a split given as transformer layers per chunk:
    /// chunk c ends after its last layer, and the trailing non-layer items
    /// (the output) join the last chunk. `None` when the counts do not have
    /// S positive entries adding up to the layers.
    pub fn bounds_of(&self, layers: &[u32]) -> Option<Vec<usize>> {
        if layers.len() != self.chunks()
            || layers.contains(&0)
            || layers.iter().sum::<u32>() != self.layers()
        {
            return None;
        }
        let mut bounds = vec![0];
        let mut i = 0;
        for &k in &layers[..layers.len() - 1] {
            let mut left = k;
            while left > 0 {
                if self.items[i].layer {
                    left -= 1;
                }
                i += 1;
            }
            bounds.push(i);
        }
        bounds.push(self.items.len());
        Some(bounds)
    }

    /// Transformer layers per chunk of the split with boundaries `bounds`.
    pub fn layers_of(&self, bounds: &[usize]) -> Vec<u32> {
        bounds
            .windows(2)
            .map(|w| self.items[w[0]..w[1]].iter().filter(|i| i.layer).count() as u32)
            .collect()
    }

    /// Whether every rank of `priced` fits in usable memory.
    pub fn fits(&self, priced: &Priced) -> bool {
        priced.rank_bytes.iter().all(|b| *b <= self.usable)
    }

    /// A [`Split`] from boundaries.
    pub fn split_of(&self, bounds: Vec<usize>, optimal: bool) -> Split {
        let priced = self.price(&bounds);
        Split {
            layers: self.layers_of(&bounds),
            bounds,
            priced,
            optimal,
        }
    }

    /// The [`SplitError::Infeasible`] for the min-max-memory split `best`.
    pub fn infeasible(&self, best: &Split) -> SplitError {
        let r = best.priced.worst_rank();
        SplitError::Infeasible {
            split: best.layers.clone(),
            stage: r as u32,
            peak: best.priced.rank_bytes[r],
            usable: self.usable,
        }
    }
}

/// ZeRO-3's transient bytes of pipeline rank `r` (gathered units and one
/// unit's unsharded gradients, [`cost::zero3_transients`]; zero below
/// ZeRO-3), and the low-precision copies every rank holds whatever its
/// layers (the gathered unit's; [`cost::precision::unit_bytes`]).
fn zero3_units(pr: &Problem, l: &Layout, lc: &layer::LayerCosts, r: usize) -> f64 {
    let low = pr
        .rates
        .low
        .as_ref()
        .map(|lp| cost::precision::unit_bytes(lp, l.zero, lc, pr.model.architecture.hidden))
        .unwrap_or(0.0);
    let (weights, grads) = cost::zero3_transients(pr, l, lc, r == 0, r == l.pp as usize - 1);
    weights + grads + low
}

/// The low-precision weight copies and scaling state one item adds to its
/// rank, less the working-precision weights narrow parameters replace,
/// bytes ([`cost::precision::item_bytes`],
/// [`cost::precision::narrow_param_weight_saving`]; zero in bf16), as
/// [`cost::rank_cost`] counts them.
fn low_item_bytes(pr: &Problem, l: &Layout, ic: &layer::ItemCost) -> f64 {
    pr.rates
        .low
        .as_ref()
        .map(|lp| {
            cost::precision::item_bytes(lp, l.zero, ic, pr.model.architecture.hidden)
                - cost::precision::narrow_param_weight_saving(
                    lp,
                    l.zero,
                    ic.low_params,
                    pr.job.recipe.weight_bytes,
                )
        })
        .unwrap_or(0.0)
}

/// The cheapest transformer layer of a problem, attribute by attribute.
#[derive(Debug, Clone, Copy)]
pub struct Cheapest {
    /// Least layer time, seconds.
    pub time: f64,
    /// Least layer model states, bytes.
    pub states: f64,
    /// Least layer activations per micro-batch, bytes.
    pub activation: f64,
    /// Least layer working set, bytes.
    pub working_set: f64,
    /// Bytes every rank holds for holding a layer: the EP dispatch buffers
    /// when every layer is an MoE layer, else zero.
    pub always: f64,
}

/// A lower bound on the slowest rank's time of every split that fits, or
/// `None` when no split can fit: the relaxation that keeps only how many
/// layers each rank holds.
///
/// `rank(r)` gives rank r's fixed time (point-to-point plus the non-layer
/// items pinned to it: the embedding on rank 0, the output on rank p−1),
/// its fixed bytes (buffers, logits, pinned items' states and activations)
/// and its micro-batches in flight φ_r. Rank r holds at least v layers (one
/// per chunk) and at most `N_r`, the most that fit at the cheapest per-layer
/// bytes `s_min + φ_r·a_min` next to its fixed bytes, the smallest layer
/// working set and, when every layer is an MoE layer, the EP dispatch
/// buffers; every layer costs at least `t_min`. Minimising
/// `max_r (a_r + n_r·t_min)` over `v ≤ n_r ≤ N_r`, `Σ n_r = L`, is solved
/// exactly by giving each next layer to the rank that stays fastest (a
/// heap). Each split that fits satisfies the relaxation, so its slowest
/// rank is at least the result; for a model with one layer kind, v = 1 and
/// pinned items no larger in working set than a layer, the result is the
/// optimum itself.
pub fn relax(
    pp: u32,
    vpp: u32,
    layers: usize,
    cheapest: &Cheapest,
    usable: f64,
    rank: impl Fn(usize) -> (f64, f64, f64),
) -> Option<f64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let (p, v) = (pp as usize, vpp as usize);
    if p == 0 || v == 0 || layers < p * v {
        return None;
    }
    let t = cheapest.time.max(0.0);
    let mut held = vec![v; p];
    let mut cap = vec![0usize; p];
    let mut base = vec![0.0; p];
    let mut room_total = 0usize;
    for r in 0..p {
        let (time, bytes, phi) = rank(r);
        let per = cheapest.states + phi * cheapest.activation;
        let room = usable - bytes - cheapest.working_set - cheapest.always;
        let n = if room < 0.0 {
            0
        } else if per > 0.0 {
            ((room / per).floor() as usize).min(layers)
        } else {
            layers
        };
        if n < v {
            return None;
        }
        cap[r] = n;
        base[r] = time;
        room_total += n;
    }
    if room_total < layers {
        return None;
    }
    // Warm start: a rank's times `base[r] + j·t` (j layers held) grow with
    // j, and the greedy below hands the layers out smallest time first, so
    // when the times at or below some level count at most L layers, every
    // rank may start with all of its own; the heap then places the last
    // few (at most about p instead of L − p·v), and the result is the
    // greedy's to the bit (`relax_warm_start_matches_the_greedy`). At the
    // balanced level (Σ base + L·t)/p the unrounded counts sum to exactly
    // L, so their floors to at most L, unless raising a rank to v hands
    // out more; then the level halves its way down.
    if t > 0.0 {
        let fill = |level: f64, into: &mut [usize]| -> usize {
            for r in 0..p {
                let mut j = ((level - base[r]) / t)
                    .floor()
                    .clamp(v as f64, cap[r] as f64) as usize;
                while j > v && base[r] + j as f64 * t > level {
                    j -= 1;
                }
                while j < cap[r] && base[r] + (j + 1) as f64 * t <= level {
                    j += 1;
                }
                into[r] = j;
            }
            into.iter().sum()
        };
        let mut warm = vec![v; p];
        let low = base.iter().copied().fold(f64::INFINITY, f64::min) + v as f64 * t;
        let mut level = (base.iter().sum::<f64>() + layers as f64 * t) / p as f64;
        for _ in 0..4 {
            if level <= low {
                break;
            }
            if fill(level, &mut warm) <= layers {
                held.copy_from_slice(&warm);
                break;
            }
            level = 0.5 * (low + level);
        }
    }
    // Times are non-negative, so their bit patterns order like the values.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..p)
        .filter(|&r| held[r] < cap[r])
        .map(|r| Reverse(((base[r] + (held[r] + 1) as f64 * t).to_bits(), r)))
        .collect();
    for _ in held.iter().sum::<usize>()..layers {
        let Reverse((_, r)) = heap.pop()?;
        held[r] += 1;
        if held[r] < cap[r] {
            heap.push(Reverse(((base[r] + (held[r] + 1) as f64 * t).to_bits(), r)));
        }
    }
    Some(
        (0..p)
            .map(|r| base[r] + held[r] as f64 * t)
            .fold(f64::MIN, f64::max),
    )
}

/// Upper bound on a layout's pipeline-limited throughput under any split:
/// see [`layout_bound`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayoutBound {
    /// Lower bound on the slowest rank's time per micro-batch, seconds
    /// ([`relax`], at least the mean rank time).
    pub slowest: f64,
    /// Sum of the ranks' times per micro-batch, seconds (the same for every
    /// split).
    pub sum: f64,
}

/// Time pipeline rank `r` spends on its point-to-point sends per
/// micro-batch whatever the split, seconds: the exposed part
/// ([`cost::schedule::p2p_exposed`]: its warm-up and cool-down share under
/// Megatron's p2p overlap) and the contention of the hidden rest, as
/// `cost::rank_cost` prices them. The steady-state remainder, which
/// depends on the chunks' compute and so on the split, is left out: it is
/// zero unless a chunk computes for less time than one send takes, so the
/// split programs and bounds stay exact or below the cost model.
pub fn rank_p2p_time(pr: &Problem, l: &Layout, lc: &layer::LayerCosts, m: u64, r: u32) -> f64 {
    let t = cost::schedule::p2p_exposed(
        lc.p2p,
        f64::INFINITY,
        f64::INFINITY,
        r,
        l.pp,
        l.vpp,
        m,
        pr.job.overlap_p2p_comm,
        pr.job.p2p_forward_send_waits,
    );
    t.exposed + cost::contention::contention(t.hidden(), lc.p2p_sigma)
}

/// [`SplitProblem::relaxation`] of layout `l` straight from its item costs
/// `lc` (no per-layer vector; the search calls it for thousands of
/// layouts), with the sum of rank times. `None` when no split can fit.
pub fn layout_bound(pr: &Problem, l: &Layout, lc: &layer::LayerCosts) -> Option<LayoutBound> {
    let recipe = &pr.job.recipe;
    let shard = (l.dp * l.cp) as f64;
    let edp = l.edp() as f64;
    let ws_cap = cost::working_set_cap(lc);
    let states = |ic: &layer::ItemCost| {
        memory::model_states(ic.params, recipe, l.zero, shard, 0.0).total()
            + memory::model_states(ic.expert_params, recipe, l.zero, edp, 0.0).total()
            + low_item_bytes(pr, l, ic)
    };
    let (dense, moe) = (
        pr.model.dense_layers() as usize,
        pr.model.moe_layers() as usize,
    );
    let kinds: Vec<&layer::ItemCost> = [(dense, &lc.dense), (moe, &lc.moe)]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(_, k)| k)
        .collect();
    let min = |f: &dyn Fn(&layer::ItemCost) -> f64| {
        kinds.iter().map(|k| f(k)).fold(f64::INFINITY, f64::min)
    };
    let cheapest = Cheapest {
        time: min(&|k| k.time()),
        states: min(&|k| states(k)),
        activation: min(&|k| k.activation),
        working_set: min(&|k| k.working_set.min(ws_cap)),
        always: if dense == 0 { lc.ep_buffers } else { 0.0 },
    };
    let m = cost::micro_batches_or_floor(pr, l);
    let p2p: Vec<f64> = (0..l.pp).map(|r| rank_p2p_time(pr, l, lc, m, r)).collect();
    let buffers = cost::temporary_buffers(pr, l, lc);
    let last = l.pp as usize - 1;
    // ZeRO-3 transients depend on the rank only through whether it is the
    // first or the last: priced once for each kind of rank.
    let middle_units = if l.pp > 2 {
        zero3_units(pr, l, lc, 1)
    } else {
        0.0
    };
    let units = |r: usize| {
        if r == 0 || r == last {
            zero3_units(pr, l, lc, r)
        } else {
            middle_units
        }
    };
    let rank = |r: usize| {
        let phi = memory::in_flight(
            r as u32,
            l.pp,
            l.vpp,
            m,
            pr.job.moe_a2a_overlap && pr.model.moe.is_some(),
        ) / l.vpp as f64;
        let mut time = p2p[r];
        let mut bytes = buffers + units(r);
        if r == 0 {
            time += lc.embedding.time();
            bytes += states(&lc.embedding) + phi * lc.embedding.activation;
        }
        if r == last {
            time += lc.output.time();
            bytes += states(&lc.output) + phi * lc.output.activation + lc.output.working_set;
        }
        (time, bytes, phi)
    };
    let sum = lc.embedding.time()
        + dense as f64 * lc.dense.time()
        + moe as f64 * lc.moe.time()
        + lc.output.time()
        + p2p.iter().sum::<f64>();
    let slowest = relax(l.pp, l.vpp, dense + moe, &cheapest, pr.usable_bytes(), rank)?;
    Some(LayoutBound {
        slowest: slowest.max(sum / l.pp as f64),
        sum,
    })
}

/// Solve the stage split of layout `l` with the solver the search uses for
/// the same layout, so `explain --auto-split` prints the search's split:
/// the exact uniform-layer solver when every layer is alike
/// ([`uniform::solve`]), else the exact DP for v = 1 ([`dp::solve`]), else
/// the ILP ([`ilp::solve`]). Where the objectives tie, each solver's own
/// tie rule picks among equally good splits, so a different solver could
/// print a different split with the same prices.
///
/// # Errors
/// [`SplitError`]: more stages than layers, no split fits (naming the stage
/// and its overflow), or a solver failure with HiGHS's status.
pub fn solve(pr: &Problem, l: &Layout) -> Result<Split, SplitError> {
    let sp = SplitProblem::for_layout(pr, l);
    if uniform::qualifies(&sp) {
        return uniform::solve(&sp);
    }
    if sp.vpp == 1 {
        return dp::solve(&sp);
    }
    ilp::solve(&sp, &ilp::Options::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The relaxation by its definition: layers handed out one at a time
    /// to the rank that stays fastest (a linear scan; ties to the lowest
    /// rank), each rank from v up to its cap. `None` when the caps cannot
    /// hold every layer.
    fn greedy(base: &[f64], cap: &[usize], v: usize, layers: usize, t: f64) -> Option<f64> {
        let mut held = vec![v; base.len()];
        for _ in v * base.len()..layers {
            let r = (0..base.len())
                .filter(|&r| held[r] < cap[r])
                .min_by(|&a, &b| {
                    let (x, y) = (
                        base[a] + (held[a] + 1) as f64 * t,
                        base[b] + (held[b] + 1) as f64 * t,
                    );
                    x.total_cmp(&y)
                })?;
            held[r] += 1;
        }
        Some(
            (0..base.len())
                .map(|r| base[r] + held[r] as f64 * t)
                .fold(f64::MIN, f64::max),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// [`relax`]'s warm start gives the one-at-a-time greedy's result
        /// to the bit, on random ranks (equal base times included, so ties
        /// occur) with memory caps from one layer per chunk to unbounded.
        #[test]
        fn relax_warm_start_matches_the_greedy(
            p in 1usize..=8,
            v in 1usize..=4,
            extra in 0usize..=120,
            t in prop_oneof![Just(0.0), 1e-4f64..2e-2, 1.0f64..3.0],
            bases in proptest::collection::vec(prop_oneof![Just(0.5f64), 0.0f64..0.2], 8),
            rooms in proptest::collection::vec(prop_oneof![Just(1e9f64), 1.0f64..60.0], 8),
        ) {
            let layers = p * v + extra;
            let cheapest = Cheapest { time: t, states: 1.0, activation: 0.0, working_set: 0.0, always: 0.0 };
            // One byte per layer: rank r fits floor(room_r) layers.
            let usable = 1e9;
            let rank = |r: usize| (bases[r], usable - rooms[r], 0.0);
            let cap: Vec<usize> = (0..p)
                .map(|r| ((usable - (usable - rooms[r])).floor() as usize).min(layers))
                .collect();
            let want = if cap.iter().any(|&c| c < v) || cap.iter().sum::<usize>() < layers {
                None
            } else {
                greedy(&bases[..p], &cap, v, layers, t)
            };
            let got = relax(p as u32, v as u32, layers, &cheapest, usable, rank);
            prop_assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{:?} vs {:?}", got, want);
        }
    }
}
