//! The cost model: plain data in, plain data out, no I/O.
//!
//! [`evaluate`] takes a [`Problem`] (model, GPU, cluster, job) and a
//! [`Layout`] and returns an [`Evaluation`]: the peak memory of the worst
//! rank with its breakdown, and the step time with its breakdown. The parts
//! live in one module per idea: [`memory`], [`compute`], [`comm`],
//! [`schedule`], and [`layer`] which prices one model item for a layout.

pub mod comm;
pub mod compute;
pub mod cp;
pub mod layer;
pub mod memory;
pub mod moe;
pub mod schedule;

use serde::Serialize;

use crate::layout::{Layout, Placement};
use crate::spec::{Cluster, Gpu, Job, Model};
use comm::Links;
use compute::Rates;
use layer::{ItemCost, LayerCosts};
use memory::{ExpertMemory, MemoryBreakdown};

/// Everything fixed while layouts vary: the model, the hardware and the job,
/// with derived rates.
#[derive(Debug, Clone)]
pub struct Problem<'a> {
    /// Model card.
    pub model: &'a Model,
    /// GPU profile.
    pub gpu: &'a Gpu,
    /// Cluster profile.
    pub cluster: &'a Cluster,
    /// Training job.
    pub job: &'a Job,
    /// GPUs used by every layout, N.
    pub world: u64,
    /// Compute rates of the GPU.
    pub rates: Rates,
    /// Link rates of the cluster.
    pub links: Links,
    /// Model FLOPs of one step (Megatron convention), FLOPs.
    pub model_flops: f64,
}

impl<'a> Problem<'a> {
    /// Build a problem for `world` GPUs of `cluster`.
    pub fn new(
        model: &'a Model,
        gpu: &'a Gpu,
        cluster: &'a Cluster,
        job: &'a Job,
        world: u64,
    ) -> Problem<'a> {
        Problem {
            model,
            gpu,
            cluster,
            job,
            world,
            rates: Rates::of(gpu),
            links: Links::of(cluster),
            model_flops: compute::model_flops_per_step(
                model,
                job.global_batch as f64,
                job.seq_len as f64,
            ),
        }
    }

    /// Usable device memory per GPU, bytes.
    pub fn usable_bytes(&self) -> f64 {
        self.gpu.usable_bytes()
    }
}

/// Where one step's time goes, seconds. The parts add up to `step`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct TimeBreakdown {
    /// Forward and backward compute of the slowest stage.
    pub compute: f64,
    /// Recomputed forward of the slowest stage.
    pub recompute: f64,
    /// Pipeline bubble: idle time of the slowest stage during fill and drain.
    pub bubble: f64,
    /// Exposed tensor-parallel communication.
    pub tp_comm: f64,
    /// Exposed context-parallel communication.
    pub cp_comm: f64,
    /// Expert all-to-all.
    pub ep_comm: f64,
    /// Pipeline point-to-point.
    pub pp_comm: f64,
    /// Exposed data-parallel gradient and parameter communication.
    pub dp_comm: f64,
    /// Optimizer step.
    pub optimizer: f64,
    /// Whole step.
    pub step: f64,
}

/// Result of pricing one layout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Evaluation {
    /// Micro-batches per step per replica, m.
    pub micro_batches: u64,
    /// Pipeline rank with the highest peak memory.
    pub worst_rank: u32,
    /// Memory of that rank.
    pub memory: MemoryBreakdown,
    /// Peak allocated bytes of that rank.
    pub peak_bytes: f64,
    /// Usable bytes per GPU (capacity minus reserve).
    pub usable_bytes: f64,
    /// Step time breakdown.
    pub time: TimeBreakdown,
    /// Tokens per second of the whole job.
    pub tokens_per_s: f64,
    /// Model TFLOP/s per GPU (Megatron convention, recompute not counted).
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilisation against the dense bf16 peak (Chowdhery et al. 2022).
    pub mfu: f64,
    /// Hardware FLOPs utilisation (recompute counted).
    pub hfu: f64,
    /// Bubble share of the step.
    pub bubble_fraction: f64,
}

impl Evaluation {
    /// Whether the worst rank fits in usable memory.
    pub fn fits(&self) -> bool {
        self.peak_bytes <= self.usable_bytes
    }
}

/// Transformer layers of pipeline chunk `c` of `chunks` (uniform split:
/// the first `L mod chunks` chunks take one more), or from `l.split`.
pub fn chunk_layers(l: &Layout, layers: u32, c: u32, chunks: u32) -> (u32, u32) {
    match &l.split {
        Some(split) if split.len() == chunks as usize => {
            let start: u32 = split[..c as usize].iter().sum();
            (start, start + split[c as usize])
        }
        _ => {
            let base = layers / chunks;
            let rem = layers % chunks;
            let start = c * base + c.min(rem);
            (start, start + base + u32::from(c < rem))
        }
    }
}

/// Cost of one pipeline rank: its time per micro-batch and its memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RankCost {
    /// Pipeline rank.
    pub rank: u32,
    /// Transformer layers held (all chunks).
    pub layers: u32,
    /// Time per micro-batch (all chunks, forward + backward + exposed
    /// communication + p2p), seconds.
    pub time: f64,
    /// Sum of the items' costs.
    pub items: ItemCost,
    /// Memory at the peak.
    pub memory: MemoryBreakdown,
    /// Parameters that shard over DP·CP.
    pub params: f64,
    /// Expert parameters (shard over expert DP).
    pub expert_params: f64,
}

fn add(a: &mut ItemCost, b: &ItemCost, n: f64) {
    a.fwd_compute += n * b.fwd_compute;
    a.bwd_compute += n * b.bwd_compute;
    a.recompute += n * b.recompute;
    a.tp_comm += n * b.tp_comm;
    a.cp_comm += n * b.cp_comm;
    a.ep_comm += n * b.ep_comm;
    a.params += n * b.params;
    a.expert_params += n * b.expert_params;
    a.activation += n * b.activation;
    a.working_set = a.working_set.max(if n > 0.0 { b.working_set } else { 0.0 });
}

/// Largest backward working set a rank's temporaries count, bytes: one
/// transformer layer's (dense or MoE, whichever is larger). A rank's
/// temporaries take the largest working set of its items capped at this.
pub fn working_set_cap(lc: &LayerCosts) -> f64 {
    lc.dense.working_set.max(lc.moe.working_set)
}

/// Temporaries every rank holds on top of one item's working set, bytes:
/// the SP all-gather buffer `t·h·2`, the CP K/V exchange buffers (ring or
/// all-gather, [`LayerCosts::cp_buffers`]), and without flash attention
/// one layer's score matrix ([`memory::score_matrix_bytes`]); t = local
/// tokens per micro-batch. Ranks holding MoE layers add the EP dispatch
/// buffers ([`LayerCosts::ep_buffers`]).
pub fn temporary_buffers(pr: &Problem, l: &Layout, lc: &LayerCosts) -> f64 {
    let model = pr.model;
    let mut bytes = 0.0;
    if l.sp && l.tp > 1 {
        bytes += lc.tokens * model.architecture.hidden as f64 * 2.0;
    }
    bytes += lc.cp_buffers;
    if !pr.job.flash_attention {
        bytes += memory::score_matrix_bytes(
            lc.tokens,
            pr.job.seq_len as f64,
            model.architecture.heads as f64,
            l.tp as f64,
        );
    }
    bytes
}

/// ZeRO-3's gathered unit, parameters: two layers (current + prefetch) of
/// the larger layer kind.
pub fn zero3_unit(lc: &LayerCosts) -> f64 {
    2.0 * lc.dense.params.max(lc.moe.params)
}

/// Price pipeline rank `rank` of layout `l` with `m` micro-batches.
///
/// Temporaries: one layer's backward working set ([`working_set_cap`]),
/// plus [`temporary_buffers`]; ZeRO-3 adds its gathered unit
/// ([`zero3_unit`]) to the weights.
pub fn rank_cost(pr: &Problem, l: &Layout, lc: &LayerCosts, rank: u32, m: u64) -> RankCost {
    let model = pr.model;
    let layers = model.architecture.layers;
    let chunks = l.pp * l.vpp;
    let mut items = ItemCost::default();
    let mut n_layers = 0;
    let mut moe_layers = 0;
    for j in 0..l.vpp {
        let c = j * l.pp + rank;
        let (s, e) = chunk_layers(l, layers, c, chunks);
        let first_moe = model
            .moe
            .as_ref()
            .map(|x| x.first_k_dense)
            .unwrap_or(u32::MAX);
        let n_moe = e.saturating_sub(s.max(first_moe));
        let n_dense = (e - s) - n_moe;
        n_layers += e - s;
        moe_layers += n_moe;
        add(&mut items, &lc.dense, n_dense as f64);
        add(&mut items, &lc.moe, n_moe as f64);
        if c == 0 {
            add(&mut items, &lc.embedding, 1.0);
        }
        if c == chunks - 1 {
            add(&mut items, &lc.output, 1.0);
        }
    }
    let p2p = if l.pp > 1 { lc.p2p * l.vpp as f64 } else { 0.0 };
    // Activations: the rank's items times the micro-batches in flight. For
    // interleaving the in-flight count is in chunk micro-batches, so divide
    // by v to get whole-rank micro-batches.
    let in_flight = memory::in_flight(rank, l.pp, l.vpp, m) / l.vpp as f64;
    let activations = items.activation * in_flight;
    let is_last = rank == l.pp - 1;
    let logits = if is_last { lc.output.working_set } else { 0.0 };
    // Temporaries: one layer's backward working set; SP all-gather, CP K/V
    // and unfused-score buffers (`temporary_buffers`); and the EP dispatch
    // buffers of the MoE layer running (`moe::dispatch_buffer_bytes`).
    let dispatch = if moe_layers > 0 { lc.ep_buffers } else { 0.0 };
    let temporaries =
        items.working_set.min(working_set_cap(lc)) + temporary_buffers(pr, l, lc) + dispatch;
    let unit = zero3_unit(lc);
    let shard = (l.dp * l.cp) as f64;
    let dense_states = memory::model_states(items.params, &pr.job.recipe, l.zero, shard, unit);
    // Expert states shard over the expert data-parallel group (Megatron's
    // distributed optimizer shards expert parameters over expert-DP,
    // [ref:megatron-parallel-state]); ZeRO-3 gathers one MoE layer's local
    // experts plus a prefetch.
    let expert_states = memory::model_states(
        items.expert_params,
        &pr.job.recipe,
        l.zero,
        l.edp() as f64,
        2.0 * lc.moe.expert_params,
    );
    let mem = MemoryBreakdown {
        weights: dense_states.weights + expert_states.weights,
        grads: dense_states.grads + expert_states.grads,
        optimizer: dense_states.optimizer + expert_states.optimizer,
        activations,
        logits,
        temporaries,
        experts: ExpertMemory {
            weights: expert_states.weights,
            grads: expert_states.grads,
            optimizer: expert_states.optimizer,
            routed_activations: moe_layers as f64 * lc.routed_activation * in_flight,
            dispatch_buffers: dispatch,
        },
        cp_buffers: lc.cp_buffers,
    };
    RankCost {
        rank,
        layers: n_layers,
        time: items.time() + p2p,
        items,
        memory: mem,
        params: items.params,
        expert_params: items.expert_params,
    }
}

/// Data-parallel communication of one rank that the step exposes, seconds,
/// and its optimizer time, seconds.
///
/// ZeRO 0: all-reduce of the gradients over DP·CP. ZeRO 1 (distributed
/// optimizer): reduce-scatter of gradients and all-gather of bf16
/// parameters. With `overlap_grad_reduce` the reduction hides under the
/// rank's last backward and the backward of the earlier stages still
/// draining (`rank·t_b`), except the last bucket; with
/// `overlap_param_gather` the gather hides under the next forward. ZeRO 2
/// and 3 reduce-scatter every micro-batch (and ZeRO 3 gathers parameters
/// for forward and backward): their exposure is added per micro-batch.
/// Optimizer: Adam reads and writes ~34 bytes per parameter of the rank's
/// shard on HBM.
fn data_parallel(pr: &Problem, l: &Layout, rc: &RankCost, drain: f64) -> (f64, f64, f64) {
    let recipe = &pr.job.recipe;
    let pl = Placement::new(l, pr.cluster.fast_domain());
    let grads = rc.params * recipe.grad_reduce_bytes;
    let egrads = rc.expert_params * recipe.grad_reduce_bytes;
    let params = rc.params * recipe.weight_bytes;
    let eparams = rc.expert_params * recipe.weight_bytes;
    let links = &pr.links;
    let bwd_mb = rc.items.bwd_compute + rc.items.recompute;
    let fwd_mb = rc.items.fwd_compute;
    // Megatron bucket: max(40M, 1M·DP) parameters; the last one is exposed.
    let bucket = (40e6f64).max(1e6 * l.dp as f64);
    let last_bucket = (bucket / rc.params.max(1.0)).min(1.0);
    let shard = (l.dp * l.cp) as f64;
    let mut per_mb = 0.0;
    let exposed = match l.zero {
        0 | 1 => {
            let (reduce, gather) = if l.zero == 0 {
                (
                    comm::all_reduce(grads, pl.dp_cp, links)
                        + comm::all_reduce(egrads, pl.edp, links),
                    0.0,
                )
            } else {
                (
                    comm::reduce_scatter(grads, pl.dp_cp, links)
                        + comm::reduce_scatter(egrads, pl.edp, links),
                    comm::all_gather(params, pl.dp_cp, links)
                        + comm::all_gather(eparams, pl.edp, links),
                )
            };
            let reduce_exposed = if pr.job.overlap_grad_reduce {
                (reduce - bwd_mb - drain).max(reduce * last_bucket)
            } else {
                reduce
            };
            let gather_exposed = if pr.job.overlap_param_gather {
                (gather - fwd_mb).max(gather * last_bucket)
            } else {
                gather
            };
            reduce_exposed + gather_exposed
        }
        z => {
            let rs = comm::reduce_scatter(grads, pl.dp_cp, links)
                + comm::reduce_scatter(egrads, pl.edp, links);
            let ag = comm::all_gather(params, pl.dp_cp, links)
                + comm::all_gather(eparams, pl.edp, links);
            per_mb = if z == 2 {
                (rs - bwd_mb).max(0.0)
            } else {
                (ag - fwd_mb).max(0.0) + (ag + rs - bwd_mb).max(0.0)
            };
            // ZeRO-2 still gathers updated parameters once per step.
            if z == 2 { ag } else { 0.0 }
        }
    };
    let opt_params = if l.zero == 0 {
        rc.params + rc.expert_params
    } else {
        rc.params / shard + rc.expert_params / l.edp().max(1) as f64
    };
    let optimizer = opt_params * 34.0 / pr.rates.hbm;
    (exposed, per_mb, optimizer)
}

/// Price layout `l`. `l` need not be valid: [`crate::rules`] decides that;
/// this only needs D·b to divide B (otherwise m is rounded down, at least 1).
///
/// Under a uniform split of a dense model the middle pipeline ranks are
/// alike except for their in-flight micro-batches (fewer further down) and
/// their data-parallel drain window (longer further down), so rank 1 stands
/// for all of them and only ranks 0, 1 and p−1 are priced.
pub fn evaluate(pr: &Problem, l: &Layout) -> Evaluation {
    let pl = Placement::new(l, pr.cluster.fast_domain());
    let lc = layer::layer_costs(pr, l, &pl);
    evaluate_with(pr, l, &lc)
}

/// [`evaluate`] with the item costs already computed
/// ([`layer::layer_costs`] of `l` and its placement).
pub fn evaluate_with(pr: &Problem, l: &Layout, lc: &LayerCosts) -> Evaluation {
    let lc = *lc;
    let m = micro_batches_or_floor(pr, l);
    let mut worst = RankCost::default();
    let mut worst_peak = f64::MIN;
    let mut slowest = RankCost::default();
    let mut t_max = f64::MIN;
    let mut t_sum = 0.0;
    let mut dp_exposed: f64 = 0.0;
    let mut opt: f64 = 0.0;
    let mut per_mb_max: f64 = 0.0;
    let uniform_middle = l.pp > 3 && l.split.is_none() && model_is_uniform_middle(pr, l);
    let mut rank = 0;
    while rank < l.pp {
        let rc = rank_cost(pr, l, &lc, rank, m);
        // Ranks this one stands for.
        let weight = if uniform_middle && rank == 1 {
            (l.pp - 2) as f64
        } else {
            1.0
        };
        let peak = rc.memory.total();
        if peak > worst_peak {
            worst_peak = peak;
            worst = rc;
        }
        if rc.time > t_max {
            t_max = rc.time;
            slowest = rc;
        }
        t_sum += weight * rc.time;
        // Stage `rank` finishes its last backward `rank` backward-steps
        // before stage 0 does; its gradient reduction can use that drain.
        let drain = rank as f64 * (rc.items.bwd_compute + rc.items.recompute);
        let (exposed, per_mb, o) = data_parallel(pr, l, &rc, drain);
        dp_exposed = dp_exposed.max(exposed);
        per_mb_max = per_mb_max.max(per_mb);
        opt = opt.max(o);
        rank = if uniform_middle && rank == 1 {
            l.pp - 1
        } else {
            rank + 1
        };
    }
    let t_max = t_max + per_mb_max;
    let t_sum = t_sum + per_mb_max * l.pp as f64;
    let pipe = schedule_time(t_max, t_sum, m, l.vpp);
    let bubble = pipe - m as f64 * t_max;
    let step = pipe + dp_exposed + opt;
    // Split the slowest stage's busy time into its parts.
    let it = &slowest.items;
    let mf = m as f64;
    let p2p = if l.pp > 1 { lc.p2p * l.vpp as f64 } else { 0.0 };
    let time = TimeBreakdown {
        compute: mf * (it.fwd_compute + it.bwd_compute),
        recompute: mf * it.recompute,
        bubble,
        tp_comm: mf * it.tp_comm,
        cp_comm: mf * it.cp_comm,
        ep_comm: mf * it.ep_comm,
        pp_comm: mf * p2p,
        dp_comm: dp_exposed + mf * per_mb_max,
        optimizer: opt,
        step,
    };
    let n = pr.world as f64;
    let peak_flops = pr.gpu.peak_tflops_bf16 * 1e12;
    let recompute_flops = compute::recompute_flops_per_step(
        pr.model,
        pr.job.global_batch as f64,
        pr.job.seq_len as f64,
        l.recompute,
        pr.job.flash_attention,
    );
    Evaluation {
        micro_batches: m,
        worst_rank: worst.rank,
        memory: worst.memory,
        peak_bytes: worst_peak,
        usable_bytes: pr.usable_bytes(),
        time,
        tokens_per_s: pr.job.tokens_per_step() / step,
        tflops_per_gpu: pr.model_flops / step / n / 1e12,
        mfu: pr.model_flops / step / n / peak_flops,
        hfu: (pr.model_flops + recompute_flops) / step / n / peak_flops,
        bubble_fraction: bubble / step,
    }
}

/// Pipeline time from the slowest stage's time and the sum over stages
/// ([`schedule::pipeline_time`] without the per-stage slice).
fn schedule_time(t_max: f64, t_sum: f64, m: u64, vpp: u32) -> f64 {
    m as f64 * t_max + (t_sum - t_max) / vpp.max(1) as f64
}

/// m = B/(D·b), or its floor (at least 1) when D·b does not divide B.
pub fn micro_batches_or_floor(pr: &Problem, l: &Layout) -> u64 {
    l.micro_batches(pr.job.global_batch).unwrap_or_else(|| {
        (pr.job.global_batch / (l.dp as u64 * l.micro_batch as u64).max(1)).max(1)
    })
}

/// Whether middle pipeline ranks of a uniform split all carry the same
/// kind of layers (dense model, or MoE whose dense prefix sits in rank 0).
fn model_is_uniform_middle(pr: &Problem, l: &Layout) -> bool {
    let layers = pr.model.architecture.layers;
    let chunks = l.pp * l.vpp;
    if layers % chunks != 0 {
        return false;
    }
    match &pr.model.moe {
        None => true,
        Some(m) => m.first_k_dense <= layers / chunks && l.vpp == 1,
    }
}

/// Per-rank costs of layout `l` (for `explain`, the ILP and pictures).
pub fn rank_costs(pr: &Problem, l: &Layout) -> Vec<RankCost> {
    let pl = Placement::new(l, pr.cluster.fast_domain());
    let lc = layer::layer_costs(pr, l, &pl);
    let m = micro_batches_or_floor(pr, l);
    (0..l.pp).map(|r| rank_cost(pr, l, &lc, r, m)).collect()
}
