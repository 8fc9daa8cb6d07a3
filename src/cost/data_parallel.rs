//! Data-parallel terms of one pipeline rank: gradient reduction, parameter
//! all-gather (distributed optimizer, ZeRO-2/3, FSDP) and the optimizer
//! step, with how much of each the step exposes.
//!
//! - ZeRO 0: all-reduce of the gradients over DP·CP, once per step.
//! - ZeRO 1 (Megatron's distributed optimizer): reduce-scatter of the
//!   gradients and all-gather of the updated bf16 parameters, once per step.
//!   With `overlap_grad_reduce` the reduction hides under the rank's last
//!   backward and the backward of the earlier stages still draining, except
//!   the last bucket; with `overlap_param_gather` the gather hides under the
//!   next forward, except the first bucket ([`exposed_after_overlap`]).
//! - ZeRO 2: gradients reduce-scattered every micro-batch under its backward
//!   (exposed whole without `overlap_grad_reduce`); the updated parameters
//!   gathered once per step, under the next forward with
//!   `overlap_param_gather` except the first bucket, as at ZeRO 1.
//! - ZeRO 3 / FSDP: priced per wrapped unit ([`zero3_per_micro_batch`],
//!   the timeline of [`crate::cost::fsdp`]): every micro-batch gathers each
//!   unit's parameters for forward and again for backward and
//!   reduce-scatters its gradients, each prefetched one unit ahead under
//!   the neighbouring unit's compute when its overlap switch is on
//!   (`overlap_param_gather` for the gathers, `overlap_grad_reduce` for the
//!   reduce-scatters) and exposed whole when it is off; the first gather
//!   and the last reduce-scatter of each pass are always exposed.
//!
//! - ZeRO 3 under DeepSpeed 0.3 (early 2021, the engine of Narayanan et
//!   al. 2021 Table 2): one collective per parameter tensor, each after a
//!   device-wide synchronize, so nothing overlaps
//!   ([`deepspeed_2021_collectives`]).
//!
//! Whatever overlap hides still slows the compute it runs under by the
//! GPU's contention share σ ([`crate::cost::contention`]), in
//! [`DpTerms::contention`].
//!
//! ZeRO [ref:rajbhandari-2020] §5 gives the volumes: ZeRO 0–2 move 2Ψ per
//! step, ZeRO 3 3Ψ; expert parameters reduce over the expert-DP group.

use crate::cost::breakdown::Term;
use crate::cost::comm::{self, Links};
use crate::cost::contention::contention;
use crate::cost::fsdp::{self, Run};
use crate::layout::{GroupSpan, Placement};
use crate::spec::{DeepSpeedZero3, Recipe};

/// Megatron-LM's smallest gradient bucket, parameters: the bucket size is
/// `max(40M, 1M·DP)` ([ref:megatron-ddp]: `bucket_size`).
pub const MEGATRON_MIN_BUCKET_PARAMS: f64 = 40e6;

/// Parameters per DP rank that Megatron-LM adds to the bucket size.
pub const MEGATRON_BUCKET_PARAMS_PER_DP_RANK: f64 = 1e6;

/// HBM traffic of one Adam step [ref:kingma-2015] per parameter of the
/// shard, bytes (an estimate of meshplan's, from what the fused kernel
/// reads and writes):
/// fp32 master weight, first and second moment read and written (3·8 = 24),
/// the fp32 gradient read (4) and zeroed (4), the bf16 working weight
/// written (2): 34.
pub const ADAM_BYTES_PER_PARAM: f64 = 34.0;

/// Whether DeepSpeed reduces the gradients of ZeRO stage `zero` under
/// `recipe` by one all-reduce after the step's last backward, exposed
/// (`engine.allreduce_gradients` → `buffered_allreduce_fallback`, for an
/// optimizer without `reduce_gradients`): ZeRO-0 (`FP16_Optimizer` in
/// bf16) and ZeRO-1 with fp32 accumulation (`BF16_Optimizer`, the megatron
/// recipe), whose updated parameters are then gathered inside its step,
/// also exposed. DeepSpeed's ZeRO optimizer (the deepspeed recipe at
/// ZeRO-1, every recipe at ZeRO-2/3) reduces from its backward hooks
/// ([ref:deepspeed-zero-optimizer]). `engine.py` and `bf16_optimizer.py`
/// at edaa722 ([ref:deepspeed-config]).
pub fn deepspeed_boundary_all_reduce(zero: u8, recipe: crate::spec::RecipeName) -> bool {
    zero == 0 || (zero == 1 && recipe == crate::spec::RecipeName::Megatron)
}

/// What the data-parallel group moves for one pipeline rank, bytes per rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpVolumes {
    /// Dense gradients reduced over DP·CP.
    pub grads: f64,
    /// Expert gradients reduced over expert DP.
    pub expert_grads: f64,
    /// Dense parameters gathered over DP·CP.
    pub params: f64,
    /// Expert parameters gathered over expert DP.
    pub expert_params: f64,
}

impl DpVolumes {
    /// Volumes of a rank holding `params` dense and `expert_params` expert
    /// parameters under `recipe` (gradients on the wire at
    /// `grad_reduce_bytes`, parameters at `weight_bytes`).
    pub fn of(params: f64, expert_params: f64, recipe: &Recipe) -> DpVolumes {
        DpVolumes {
            grads: params * recipe.grad_reduce_bytes,
            expert_grads: expert_params * recipe.grad_reduce_bytes,
            params: params * recipe.weight_bytes,
            expert_params: expert_params * recipe.weight_bytes,
        }
    }
}

/// Gradient and parameter terms of the data-parallel group, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DpTerms {
    /// Gradient all-reduce or reduce-scatter.
    pub grad: Term,
    /// Parameter all-gather.
    pub gather: Term,
    /// Compute slowed down by the hidden part of both, seconds (always
    /// exposed).
    pub contention: f64,
}

impl DpTerms {
    /// Exposed seconds of both, with their contention.
    pub fn exposed(&self) -> f64 {
        self.grad.exposed + self.gather.exposed + self.contention
    }

    /// Seconds of both on the wire.
    pub fn total(&self) -> f64 {
        self.grad.total + self.gather.total
    }

    /// Whether these terms weigh more on the step than `other`: more
    /// exposed seconds, or as many and more on the wire.
    pub fn outweighs(&self, other: &DpTerms) -> bool {
        (self.exposed(), self.total()) > (other.exposed(), other.total())
    }
}

/// Data-parallel costs of one pipeline rank.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DataParallel {
    /// Terms paid once per step (ZeRO 0, 1; ZeRO 2's parameter gather).
    pub per_step: DpTerms,
    /// Terms paid every micro-batch (ZeRO 2's reduce-scatter, ZeRO 3).
    pub per_micro_batch: DpTerms,
    /// Optimizer step, seconds ([`optimizer_step_time`]).
    pub optimizer: f64,
}

/// Megatron-LM's gradient bucket for DP size `dp`, parameters:
/// `max(40M, 1M·DP)`.
pub fn bucket_params(dp: u32) -> f64 {
    MEGATRON_MIN_BUCKET_PARAMS.max(MEGATRON_BUCKET_PARAMS_PER_DP_RANK * dp as f64)
}

/// Share of a rank's parameters in one bucket, `min(1, bucket / P)`: the
/// part of an overlapped collective that always stays exposed (the last
/// gradient bucket, the first parameter bucket).
pub fn last_bucket_share(bucket: f64, params: f64) -> f64 {
    (bucket / params.max(1.0)).min(1.0)
}

/// Gradient reduction over the DP·CP group (dense) and the expert-DP group
/// (experts), seconds: all-reduce at ZeRO 0, reduce-scatter otherwise.
pub fn gradient_reduction(v: &DpVolumes, zero: u8, pl: &Placement, links: &Links) -> f64 {
    if zero == 0 {
        comm::all_reduce(v.grads, pl.dp_cp, links) + comm::all_reduce(v.expert_grads, pl.edp, links)
    } else {
        comm::reduce_scatter(v.grads, pl.dp_cp, links)
            + comm::reduce_scatter(v.expert_grads, pl.edp, links)
    }
}

/// All-gather of the parameters over the DP·CP and expert-DP groups,
/// seconds.
pub fn parameter_gather(v: &DpVolumes, pl: &Placement, links: &Links) -> f64 {
    comm::all_gather(v.params, pl.dp_cp, links) + comm::all_gather(v.expert_params, pl.edp, links)
}

/// A collective of `time` seconds overlapped with `window` seconds of
/// compute, issued bucket by bucket: what exceeds the window, and at least
/// the one bucket (`share` of the time) that cannot overlap,
/// `max(time − window, share·time)`.
pub fn exposed_after_overlap(time: f64, window: f64, share: f64) -> f64 {
    (time - window).max(time * share)
}

/// A collective of `time` seconds hidden under `window` seconds of compute
/// with no bucket exposed (ZeRO-2/3 per micro-batch): `max(0, time − window)`.
pub fn exposed_beyond(time: f64, window: f64) -> f64 {
    (time - window).max(0.0)
}

/// Optimizer step over `shard_params` parameters, seconds: Adam is bound by
/// HBM traffic, [`ADAM_BYTES_PER_PARAM`] per parameter at `hbm` bytes/s.
pub fn optimizer_step_time(shard_params: f64, hbm: f64) -> f64 {
    shard_params * ADAM_BYTES_PER_PARAM / hbm
}

/// Compute window left to a data-parallel collective when the expert
/// all-to-all shares its links, seconds: `max(0, window − busy)`, where
/// `busy` is the all-to-all time hidden under that same compute
/// ([`crate::cost::moe::a2a_overlap`]). A link carries one collective's
/// bytes at a time, so link time the overlapped dispatch and combine take
/// under the backward (or forward) is not there for the gradient
/// reduce-scatter (or parameter gather); an exposed all-to-all runs outside
/// the compute and takes none of it.
///
/// Example: 12 ms of backward, 9 ms of it carrying hidden all-to-all: 3 ms
/// left for the reduce-scatter.
pub fn shared_link_window(window: f64, busy: f64) -> f64 {
    (window - busy.max(0.0)).max(0.0)
}

/// The window the rank offers for overlap, seconds per micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Windows {
    /// Forward compute of one micro-batch.
    pub forward: f64,
    /// Backward compute (with recompute) of one micro-batch.
    pub backward: f64,
    /// Backward of the earlier stages still draining after this rank's last
    /// backward (`rank·backward`), seconds.
    pub drain: f64,
}

/// What the data-parallel switches of the job say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overlap {
    /// Gradient reduction overlapped with backward (`--overlap-grad-reduce`).
    pub grad_reduce: bool,
    /// Parameter all-gather overlapped with forward (`--overlap-param-gather`).
    pub param_gather: bool,
    /// ZeRO 0–1 reduce by one all-reduce after the last backward, and
    /// ZeRO-1 gathers inside the step, neither overlapped
    /// ([`deepspeed_boundary_all_reduce`]).
    pub boundary_all_reduce: bool,
}

/// Where the data-parallel collectives run.
#[derive(Debug, Clone, Copy)]
pub struct Net<'a> {
    /// The layout's groups.
    pub pl: &'a Placement,
    /// The cluster's links.
    pub links: &'a Links,
    /// Contention share σ of the DP group's tier.
    pub sigma: f64,
}

/// Data-parallel terms of one rank at ZeRO stage `zero`; `dp` is D (for the
/// bucket size), `params` the rank's dense parameters, `units` the rank's
/// wrapped units in model order (read at ZeRO-3 only,
/// [`zero3_per_micro_batch`]).
pub fn data_parallel(
    v: &DpVolumes,
    zero: u8,
    dp: u32,
    params: f64,
    w: Windows,
    overlap: Overlap,
    net: Net,
    units: &[Run],
) -> DataParallel {
    let (pl, links, sigma) = (net.pl, net.links, net.sigma);
    let share = last_bucket_share(bucket_params(dp), params);
    let mut out = DataParallel::default();
    match zero {
        0 | 1 => {
            let boundary = overlap.boundary_all_reduce;
            let reduce = gradient_reduction(v, if boundary { 0 } else { zero }, pl, links);
            let gather = if zero == 0 {
                0.0
            } else {
                parameter_gather(v, pl, links)
            };
            let reduce_exposed = if overlap.grad_reduce && !boundary {
                exposed_after_overlap(reduce, w.backward + w.drain, share)
            } else {
                reduce
            };
            let gather_exposed = if overlap.param_gather && !boundary {
                exposed_after_overlap(gather, w.forward, share)
            } else {
                gather
            };
            out.per_step = DpTerms::with_contention(
                Term::overlapped(reduce_exposed, reduce),
                Term::overlapped(gather_exposed, gather),
                sigma,
            );
        }
        2 => {
            let rs = gradient_reduction(v, zero, pl, links);
            let ag = parameter_gather(v, pl, links);
            // The reduce-scatter hides under the micro-batch's backward only
            // with `--overlap-grad-reduce`; otherwise it runs after it.
            let rs_exposed = if overlap.grad_reduce {
                exposed_beyond(rs, w.backward)
            } else {
                rs
            };
            out.per_micro_batch =
                DpTerms::with_contention(Term::overlapped(rs_exposed, rs), Term::default(), sigma);
            // ZeRO-2 gathers the updated parameters once per step; with
            // `--overlap-param-gather` Megatron-FSDP issues it bucket by
            // bucket ahead of the next forward ([ref:megatron-fsdp]
            // `start_param_sync`), like the distributed optimizer's.
            let ag_exposed = if overlap.param_gather {
                exposed_after_overlap(ag, w.forward, share)
            } else {
                ag
            };
            out.per_step =
                DpTerms::with_contention(Term::default(), Term::overlapped(ag_exposed, ag), sigma);
        }
        _ => out.per_micro_batch = zero3_per_micro_batch(units, overlap, sigma),
    }
    out
}

/// ZeRO-3/FSDP terms of one micro-batch on one rank, seconds, from the
/// per-unit timeline of `units` ([`fsdp::timeline`]).
///
/// A gather whose overlap switch is off runs before its unit (exposed
/// whole), a reduce-scatter whose switch is off after it. Of the timeline's
/// exposure beyond compute, the forward's is the gathers'; the backward's
/// is split between the gathers and the reduce-scatters in proportion to
/// their times. The contention is the timeline at σ less the timeline at 0.
pub fn zero3_per_micro_batch(units: &[Run], overlap: Overlap, sigma: f64) -> DpTerms {
    // Forward and backward gathers on the wire.
    let gathers = fsdp::total(units, |u| u.gather + u.backward_gather);
    let rs = fsdp::total(units, |u| u.reduce_scatter);
    let mut overlapped = [Run::default(); MAX_UNIT_RUNS];
    let n = units.len().min(MAX_UNIT_RUNS);
    for (o, r) in overlapped.iter_mut().zip(&units[..n]) {
        *o = *r;
        if !overlap.param_gather {
            o.unit.gather = 0.0;
            o.unit.backward_gather = 0.0;
        }
        if !overlap.grad_reduce {
            o.unit.reduce_scatter = 0.0;
        }
    }
    let runs = &overlapped[..n];
    let serial_gather = if overlap.param_gather { 0.0 } else { gathers };
    let serial_rs = if overlap.grad_reduce { 0.0 } else { rs };
    let ideal = fsdp::timeline(runs, 0.0);
    let slowed = fsdp::timeline(runs, sigma);
    let fwd = (ideal.forward - fsdp::total(runs, |u| u.forward)).max(0.0);
    let bwd = (ideal.backward - fsdp::total(runs, |u| u.backward)).max(0.0);
    // The backward's share of the gathers (what shares its exposure with
    // the reduce-scatters).
    let bwd_gather = fsdp::total(units, |u| u.backward_gather);
    let hid_gather = if overlap.param_gather {
        bwd_gather
    } else {
        0.0
    };
    let hid_rs = if overlap.grad_reduce { rs } else { 0.0 };
    let gather_share = if hid_gather + hid_rs > 0.0 {
        hid_gather / (hid_gather + hid_rs)
    } else {
        0.0
    };
    // The timeline's sums round; what shows is never more than what runs.
    let grad_exposed = (bwd * (1.0 - gather_share) + serial_rs).min(rs);
    let gather_exposed = (fwd + bwd * gather_share + serial_gather).min(gathers);
    DpTerms {
        grad: Term::overlapped(grad_exposed, rs),
        gather: Term::overlapped(gather_exposed, gathers),
        contention: (slowed.forward + slowed.backward - ideal.forward - ideal.backward).max(0.0),
    }
}

/// Most runs of identical units a rank has: the embedding, dense layers, MoE
/// layers, the output layer.
pub const MAX_UNIT_RUNS: usize = 4;

/// Host seconds per rank of the group that one DeepSpeed 0.3 ZeRO-3
/// collective costs through the tensor-list form of `torch.distributed`
/// (estimated, fitted: see below).
///
/// DeepSpeed 0.3.13 (`partition_parameters.py` `_allgather_param` and
/// `_reduce_scatter_gradient`, fa87a73, 2021-03) builds a Python list of
/// `n` views, one per rank of the DP group, for every tensor it gathers or
/// reduces, and PyTorch's `ProcessGroupNCCL::allgather` /
/// `reduce_scatter` of a tensor list (1.8, 2021) copy each of the `n`
/// entries out of (or into) a flattened buffer with its own `copy_` and
/// `recordStream`: `n` host-side operations per collective, on the one
/// thread that also launches the compute, which waits because every
/// gather is preceded by `torch.cuda.synchronize()`. The same per-rank
/// cost also carries what NCCL's real ring steps cost beyond its tuning
/// model's latencies ([`comm::ring_latency`]) at these group sizes.
///
/// Fitted on two named rows only, NAR21-T2-02 (GPT-3 175B over 768
/// A100) and NAR21-T2-05 (530B over 1,120), least squares of ln(predicted
/// / measured throughput) in steps of 0.1 µs (10.5 … 11.3 tried; 10.7 and
/// 10.8 tie within 1e-6); the other four NAR21-T2 rows are the check
/// (docs/fidelity.md, "ZeRO-3 of DeepSpeed 0.3"). The
/// order of magnitude is PyTorch's: 5–10 µs of dispatch per small CUDA
/// `copy_` plus DeepSpeed's Python `narrow` per rank.
pub const DEEPSPEED_2021_LIST_COST_PER_RANK_S: f64 = 10.7e-6;

/// HBM passes over the gathered tensor that DeepSpeed 0.3's all-gather
/// adds to NCCL's, dimensionless: `torch.zeros` of the gathered tensor
/// (one write) and PyTorch's copy of the `n` flattened outputs into it
/// (one read, one write) (`_allgather_param`; `ProcessGroupNCCL::
/// allgather`, "Copy the flattened output tensors to the outputs").
pub const DEEPSPEED_2021_GATHER_COPY_PASSES: f64 = 3.0;

/// HBM passes over the gradient that a DeepSpeed 0.3 reduce-scatter adds,
/// dimensionless: PyTorch flattens the `n` input views into one buffer
/// (one read, one write) before NCCL runs (`ProcessGroupNCCL::
/// reduce_scatter`, `flatten_for_scatter_gather`).
pub const DEEPSPEED_2021_REDUCE_COPY_PASSES: f64 = 2.0;

/// Most parameter tensors of one wrapped unit that
/// [`deepspeed_2021_collectives`] reads: a Megatron GPT layer's twelve
/// (two norms with weight and bias, four linears with weight and bias).
pub const MAX_UNIT_TENSORS: usize = 12;

/// A unit's parameter tensors, elements on one rank, in the order its
/// forward uses them; the first `len` entries count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tensors {
    /// Elements of each tensor.
    pub numel: [f64; MAX_UNIT_TENSORS],
    /// Tensors in use.
    pub len: usize,
}

impl Tensors {
    /// The tensors of `numel`, in order (at most [`MAX_UNIT_TENSORS`]; the
    /// rest are folded into the last so that no element is lost).
    pub fn of(numel: &[f64]) -> Tensors {
        let mut t = Tensors::default();
        for &x in numel.iter().filter(|x| **x > 0.0) {
            if t.len < MAX_UNIT_TENSORS {
                t.numel[t.len] = x;
                t.len += 1;
            } else {
                t.numel[MAX_UNIT_TENSORS - 1] += x;
            }
        }
        t
    }

    /// The tensors in use.
    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        self.numel[..self.len].iter().copied()
    }
}

/// Host seconds of one tensor-list collective over `n` ranks:
/// `n · DEEPSPEED_2021_LIST_COST_PER_RANK_S`, 0 for one rank (no
/// collective runs).
///
/// Example: over 1,536 ranks, `1536 · 10.7 µs = 16.4` ms per tensor.
pub fn tensor_list_cost(n: u32) -> f64 {
    if n <= 1 {
        0.0
    } else {
        n as f64 * DEEPSPEED_2021_LIST_COST_PER_RANK_S
    }
}

/// Times DeepSpeed 0.3 gathers tensor `i` of `t` in one backward,
/// dimensionless: 1, or 2 under full recompute when the elements used
/// between its recomputed forward and its backward, `2·Σ_{j>i} numel_j`
/// (the later tensors of the unit recomputed, then their backward), reach
/// `stage3_max_reuse_distance`: DeepSpeed then releases it after the
/// recomputed forward and gathers it again for the backward
/// (`stage3.py` `release_sub_module` → `_keep_for_later`,
/// `get_reuse_distance_in_numel`). Reuse across units is not counted.
///
/// Example: GPT-3 175B (h = 12288) under full recompute, reuse distance
/// 1e9: after the QKV weight come 12288² + 2·4·12288² = 1.36e9 elements,
/// doubled 2.72e9 ≥ 1e9: gathered twice; the last MLP weight: once.
pub fn backward_gathers(
    t: &Tensors,
    i: usize,
    max_reuse_distance: f64,
    full_recompute: bool,
) -> f64 {
    if !full_recompute {
        return 1.0;
    }
    let later: f64 = t.numel[i + 1..t.len].iter().sum();
    if 2.0 * later >= max_reuse_distance {
        2.0
    } else {
        1.0
    }
}

/// One DeepSpeed 0.3 all-gather of a tensor of `bytes` over `g`, seconds:
/// NCCL's all-gather ([`comm::all_gather`]), the tensor-list host cost
/// ([`tensor_list_cost`]) and [`DEEPSPEED_2021_GATHER_COPY_PASSES`] over
/// the tensor at `hbm` bytes/s.
pub fn deepspeed_tensor_gather(bytes: f64, g: GroupSpan, links: &Links, hbm: f64) -> f64 {
    comm::all_gather(bytes, g, links)
        + tensor_list_cost(g.size)
        + DEEPSPEED_2021_GATHER_COPY_PASSES * bytes / hbm
}

/// One DeepSpeed 0.3 reduce-scatter of a gradient of `bytes` over `g`,
/// seconds: NCCL's ([`comm::reduce_scatter`]), the tensor-list host cost
/// and [`DEEPSPEED_2021_REDUCE_COPY_PASSES`] at `hbm` bytes/s.
pub fn deepspeed_tensor_reduce_scatter(bytes: f64, g: GroupSpan, links: &Links, hbm: f64) -> f64 {
    comm::reduce_scatter(bytes, g, links)
        + tensor_list_cost(g.size)
        + DEEPSPEED_2021_REDUCE_COPY_PASSES * bytes / hbm
}

/// ZeRO-3 collectives of one wrapped unit under DeepSpeed 0.3
/// ([`DeepSpeedZero3::per_tensor_sync`]), seconds: `(forward gather,
/// backward gather, reduce-scatter)`.
///
/// Source: DeepSpeed `deepspeed/runtime/zero/stage3.py` and
/// `partition_parameters.py` at fa87a73 (2021-03-16). `fetch_sub_module`
/// gathers each module's parameters tensor by tensor (`_allgather_param`,
/// one `torch.distributed.all_gather` over the whole DP group each),
/// except tensors under `stage3_param_persistence_threshold` elements,
/// which stay gathered all step (`persistent_parameters`). The gradients
/// leave through the reduce bucket, and `_reduce_scatter_gradients`
/// reduce-scatters them tensor by tensor, the persistent ones included
/// (with `contiguous_gradients` on, as DeepSpeedExamples' Megatron ZeRO-3
/// configs set it; off, DeepSpeed 0.3 all-reduces flattened buckets
/// instead, not priced here).
/// Every tensor pays NCCL's latency over the group, the tensor-list host
/// cost and its HBM copies ([`deepspeed_tensor_gather`],
/// [`deepspeed_tensor_reduce_scatter`]); the backward gathers some tensors
/// twice under full recompute ([`backward_gathers`]). The caller prices
/// them synchronously: `_allgather_param` calls `torch.cuda.synchronize()`
/// before each gather and `_synchronize_communication` after each
/// module's, so "the async version is not async at all" (DeepSpeed PR
/// #1188, June 2021, which batched and overlapped them).
///
/// `weight_bytes` and `grad_bytes` are the bytes per element gathered and
/// reduced; `hbm` the GPU's sustained HBM bandwidth, bytes/s.
///
/// Worked example (the test `deepspeed_2021_unit_by_hand`): tensors of
/// 1e4, 6e8 and 5e8 elements in fp16 over D = 2 ranks on NVLink at 100
/// GB/s, no NCCL latency, HBM at 1 TB/s, full recompute. The 1e4 tensor
/// stays gathered (under 1e5). Gathering 1.2 GB: `½·1.2e9/1e11` = 6 ms of
/// ring, `2·10.7` = 21.4 µs of list cost, `3·1.2e9/1e12` = 3.6 ms of
/// copies, 9.6214 ms; 1 GB: 5 + 0.0214 + 3 = 8.0214 ms; forward 17.6428
/// ms. Backward: after the 6e8 tensor come 5e8 elements, twice 1e9 ≥ 1e9,
/// so it is gathered twice: 2·9.6214 + 8.0214 = 27.2642 ms. Reduce-scatters
/// of all three: 0.0001 + 0.0214 + 0.00004 = 0.02154, 6 + 0.0214 + 2.4 =
/// 8.4214 and 5 + 0.0214 + 2 = 7.0214 ms, 15.46434 ms.
#[allow(clippy::too_many_arguments)]
pub fn deepspeed_2021_collectives(
    t: &Tensors,
    ds: &DeepSpeedZero3,
    full_recompute: bool,
    weight_bytes: f64,
    grad_bytes: f64,
    g: GroupSpan,
    links: &Links,
    hbm: f64,
) -> (f64, f64, f64) {
    if g.size <= 1 {
        return (0.0, 0.0, 0.0);
    }
    let (mut fwd, mut bwd, mut rs) = (0.0, 0.0, 0.0);
    for (i, numel) in t.iter().enumerate() {
        if numel >= ds.persistence_threshold {
            let one = deepspeed_tensor_gather(numel * weight_bytes, g, links, hbm);
            fwd += one;
            bwd += one * backward_gathers(t, i, ds.max_reuse_distance, full_recompute);
        }
        rs += deepspeed_tensor_reduce_scatter(numel * grad_bytes, g, links, hbm);
    }
    (fwd, bwd, rs)
}

impl DpTerms {
    /// Gradient and gather terms with the contention of what they hide,
    /// `σ·(hidden grad + hidden gather)`.
    pub fn with_contention(grad: Term, gather: Term, sigma: f64) -> DpTerms {
        DpTerms {
            grad,
            gather,
            contention: contention(grad.hidden() + gather.hidden(), sigma),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_is_megatrons() {
        // max(40M, 1M·D): D = 16 → 40M; D = 64 → 64M.
        assert_eq!(bucket_params(16), 40e6);
        assert_eq!(bucket_params(64), 64e6);
        // A rank with 400M parameters exposes a tenth of its reduction.
        assert_eq!(last_bucket_share(40e6, 400e6), 0.1);
        assert_eq!(last_bucket_share(40e6, 4e6), 1.0);
    }

    #[test]
    fn overlap_exposes_the_excess_or_one_bucket() {
        // 10 s under a 7 s window, one bucket 10 %: max(3, 1) = 3.
        assert_eq!(exposed_after_overlap(10.0, 7.0, 0.1), 3.0);
        // Under a 20 s window only the bucket shows: 1.
        assert_eq!(exposed_after_overlap(10.0, 20.0, 0.1), 1.0);
        assert_eq!(exposed_beyond(10.0, 20.0), 0.0);
    }

    #[test]
    fn adam_step() {
        // 1e9 parameters × 34 B at 2e12 B/s = 17 ms.
        assert!((optimizer_step_time(1e9, 2e12) - 0.017).abs() < 1e-15);
    }
    /// DP = 8 inside one 8-GPU node on a 1 GB/s link with no latency, so
    /// collective times are round: reduce-scatter of 8 GB = 7/8 · 8 = 7 s,
    /// all-gather of 4 GB = 7/8 · 4 = 3.5 s. Windows: forward 2 s,
    /// backward 8 s. 400M parameters, bucket 40M: one bucket is 10 %.
    fn zero_case(zero: u8, grad_reduce: bool, param_gather: bool) -> DataParallel {
        let links = Links::bandwidths(1e9, 1e9);
        let l = crate::layout::Layout::dense(8, 1, 1, 1);
        let pl = Placement::new(&l, 8);
        let v = DpVolumes {
            grads: 8e9,
            expert_grads: 0.0,
            params: 4e9,
            expert_params: 0.0,
        };
        let w = Windows {
            forward: 2.0,
            backward: 8.0,
            drain: 0.0,
        };
        let overlap = overlap(grad_reduce, param_gather);
        // One unit holding the whole rank: the per-unit timeline degenerates
        // to gather, compute, reduce-scatter.
        let units = [Run {
            unit: fsdp::Unit {
                forward: w.forward,
                backward: w.backward,
                gather: parameter_gather(&v, &pl, &links),
                backward_gather: parameter_gather(&v, &pl, &links),
                reduce_scatter: gradient_reduction(&v, zero, &pl, &links),
            },
            count: 1,
        }];
        let net = Net {
            pl: &pl,
            links: &links,
            sigma: 0.0,
        };
        data_parallel(&v, zero, 8, 400e6, w, overlap, net, &units)
    }

    fn overlap(grad_reduce: bool, param_gather: bool) -> Overlap {
        Overlap {
            grad_reduce,
            param_gather,
            boundary_all_reduce: false,
        }
    }

    /// Four units of 10 ms forward / 20 ms backward, gather 6 ms before the
    /// forward and `backward_gather` before the backward, reduce-scatter
    /// 8 ms: with 6 ms, the timeline of `fsdp::tests::four_units_by_hand`.
    fn four_units(backward_gather: f64) -> [Run; 1] {
        let unit = fsdp::Unit {
            forward: 10e-3,
            backward: 20e-3,
            gather: 6e-3,
            backward_gather,
            reduce_scatter: 8e-3,
        };
        [Run { unit, count: 4 }]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn zero2_reads_the_overlap_switches() {
        // Overlapped: the 7 s reduce-scatter hides under the 8 s backward;
        // the 3.5 s gather under the 2 s forward leaves max(1.5, 0.35).
        let on = zero_case(2, true, true);
        assert!(close(on.per_micro_batch.grad.total, 7.0));
        assert!(close(on.per_micro_batch.grad.exposed, 0.0));
        assert!(close(on.per_step.gather.total, 3.5));
        assert!(close(on.per_step.gather.exposed, 1.5));
        // --no-overlap-grad-reduce (which also drops the param overlap):
        // both exposed whole.
        let off = zero_case(2, false, false);
        assert!(close(off.per_micro_batch.grad.exposed, 7.0));
        assert!(close(off.per_step.gather.exposed, 3.5));
    }

    #[test]
    fn zero3_reads_the_overlap_switches() {
        // One unit: nothing to prefetch under, so the first gather and the
        // last reduce-scatter are the whole collectives. Forward: gather
        // 3.5 then 2 s of compute, 3.5 exposed. Backward: gather 3.5, 8 s
        // of compute, reduce-scatter 7: 10.5 exposed. Gather 7 exposed of
        // 7, reduce-scatter 7 of 7, on or off.
        for (g, r) in [(true, true), (true, false), (false, true), (false, false)] {
            let t = zero_case(3, g, r).per_micro_batch;
            assert!(close(t.gather.total, 7.0), "{t:?}");
            assert!(close(t.gather.exposed, 7.0), "{t:?}");
            assert!(close(t.grad.exposed, 7.0), "{t:?}");
            assert!(close(t.grad.total, 7.0), "{t:?}");
        }
    }

    #[test]
    fn zero3_four_units_against_the_hand_timeline() {
        // Four units of 10 ms forward / 20 ms backward, gather 6 ms,
        // reduce-scatter 8 ms (the timeline of `fsdp::tests::
        // four_units_by_hand`): forward exposes the first gather, 6 ms;
        // backward the first gather and the last reduce-scatter, 14 ms,
        // split 2·24 : 32 between gathers (2·4·6 = 48 ms on the wire) and
        // reduce-scatters (32 ms): the backward's gathers are 24 of the 56
        // overlapped ms. With σ = 0.1: the hidden 6·3 ms of forward gathers
        // cost 1.8 ms; backward steps k = 0..3 hide 6, 14, 14, 8 ms, 4.2 ms.
        let runs = four_units(6e-3);
        let on = overlap(true, true);
        let t = zero3_per_micro_batch(&runs, on, 0.0);
        let share = 24.0 / 56.0;
        assert!(close(t.gather.exposed, 6e-3 + 14e-3 * share), "{t:?}");
        assert!(close(t.grad.exposed, 14e-3 * (1.0 - share)), "{t:?}");
        assert!(close(t.gather.total, 48e-3) && close(t.grad.total, 32e-3));
        assert!(close(t.exposed(), 20e-3));
        let c = zero3_per_micro_batch(&runs, on, 0.1);
        assert!(close(c.contention, 1.8e-3 + 4.2e-3), "{c:?}");
        // Gathers not overlapped: 2·4·6 = 48 ms before their units; the
        // reduce-scatters alone hide under the backward but the last: 8 ms.
        let off = overlap(true, false);
        let t = zero3_per_micro_batch(&runs, off, 0.0);
        assert!(close(t.gather.exposed, 48e-3), "{t:?}");
        assert!(close(t.grad.exposed, 8e-3), "{t:?}");
    }

    #[test]
    fn zero3_backward_gathers_apart_from_the_forward() {
        // Four units, gather 6 ms forward and 9 ms backward, reduce-scatter
        // 8 ms, nothing overlapped (DeepSpeed 0.3): everything exposed,
        // gathers 4·(6 + 9) = 60 ms, reduce-scatters 32 ms, no contention.
        let runs = four_units(9e-3);
        let off = overlap(false, false);
        let t = zero3_per_micro_batch(&runs, off, 0.15);
        assert!(
            close(t.gather.exposed, 60e-3) && close(t.gather.total, 60e-3),
            "{t:?}"
        );
        assert!(
            close(t.grad.exposed, 32e-3) && close(t.grad.total, 32e-3),
            "{t:?}"
        );
        assert_eq!(t.contention, 0.0);
        // Overlapped: forward exposes the first gather (6 ms); backward
        // g_0 = 9, then max(20, 0 + 9), 2·max(20, 8 + 9), max(20, 8), then
        // r = 8: 17 ms beyond its 80 ms of compute.
        let on = overlap(true, true);
        let t = zero3_per_micro_batch(&runs, on, 0.0);
        assert!(close(t.exposed(), 6e-3 + 17e-3), "{t:?}");
        assert!(close(t.gather.total, 60e-3), "{t:?}");
    }

    /// GPT-3 175B's layer tensors at T = 1 (`layer::unit_tensors`).
    fn gpt3_layer() -> Tensors {
        let h = 12288.0;
        Tensors::of(&[
            h,
            h,
            h * 3.0 * h,
            3.0 * h,
            h * h,
            h,
            h,
            h,
            h * 4.0 * h,
            4.0 * h,
            4.0 * h * h,
            h,
        ])
    }

    #[test]
    fn deepspeed_reuse_distance_by_hand() {
        // After the QKV weight (index 2): 36864 + 150,994,944 + 3·12288 +
        // 603,979,776 + 49152 + 603,979,776 + 12288 = 1,359,126,528
        // elements, twice that ≥ 1e9: gathered twice. The first MLP weight
        // (index 8): 49152 + 603,979,776 + 12288 = 604,041,216, twice
        // 1.208e9 ≥ 1e9: twice. The last (index 10): 12288: once.
        let t = gpt3_layer();
        assert_eq!(t.len, 12);
        assert_eq!(backward_gathers(&t, 2, 1e9, true), 2.0);
        assert_eq!(backward_gathers(&t, 4, 1e9, true), 2.0);
        assert_eq!(backward_gathers(&t, 8, 1e9, true), 2.0);
        assert_eq!(backward_gathers(&t, 10, 1e9, true), 1.0);
        // A reuse distance of 1.3e9 keeps the first MLP weight (1.208e9).
        assert_eq!(backward_gathers(&t, 8, 1.3e9, true), 1.0);
        // Without full recompute the backward follows the forward: once.
        assert_eq!(backward_gathers(&t, 2, 1e9, false), 1.0);
    }

    #[test]
    fn deepspeed_2021_unit_by_hand() {
        // The worked example of `deepspeed_2021_collectives`.
        let links = Links::bandwidths(100e9, 25e9);
        let g = GroupSpan::of(2, 1, 8);
        let t = Tensors::of(&[1e4, 6e8, 5e8]);
        let ds = DeepSpeedZero3::DEFAULTS_2021;
        let (f, b, r) = deepspeed_2021_collectives(&t, &ds, true, 2.0, 2.0, g, &links, 1e12);
        let ms = 1e-3;
        assert!((f - 17.6428 * ms).abs() < 1e-9, "{f}");
        assert!((b - 27.2642 * ms).abs() < 1e-9, "{b}");
        assert!((r - 15.46434 * ms).abs() < 1e-9, "{r}");
        // One rank: no collective at all.
        let one = GroupSpan::of(1, 1, 8);
        assert_eq!(
            deepspeed_2021_collectives(&t, &ds, true, 2.0, 2.0, one, &links, 1e12),
            (0.0, 0.0, 0.0)
        );
        // The list cost grows with the group: 1,536 ranks, 16.4352 ms.
        assert!((tensor_list_cost(1536) - 16.4352e-3).abs() < 1e-12);
        assert_eq!(tensor_list_cost(1), 0.0);
    }

    #[test]
    fn tensors_fold_past_the_last_slot() {
        // Fourteen tensors: the last three fold into slot 12; nothing lost,
        // empty ones dropped.
        let v: Vec<f64> = (1..=14).map(f64::from).collect();
        let t = Tensors::of(&v);
        assert_eq!(t.len, MAX_UNIT_TENSORS);
        assert_eq!(t.numel[11], 12.0 + 13.0 + 14.0);
        assert_eq!(t.iter().sum::<f64>(), 105.0);
        assert_eq!(Tensors::of(&[0.0, 5.0]).len, 1);
    }

    #[test]
    fn shared_link_window_by_hand() {
        // 12 ms of backward, 9 ms of hidden all-to-all: 3 ms left.
        assert!((shared_link_window(12e-3, 9e-3) - 3e-3).abs() < 1e-15);
        // The all-to-all takes the whole window: nothing left, never less.
        assert_eq!(shared_link_window(12e-3, 20e-3), 0.0);
        assert_eq!(shared_link_window(12e-3, 0.0), 12e-3);
    }
}
