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
//! - ZeRO 2: gradients reduce-scattered every micro-batch under its backward;
//!   the updated parameters gathered once per step.
//! - ZeRO 3 / FSDP: parameters gathered for forward and again for backward
//!   and gradients reduce-scattered, every micro-batch, each hidden under
//!   that micro-batch's forward or backward.
//!
//! ZeRO [ref:rajbhandari-2020] §5 gives the volumes: ZeRO 0–2 move 2Ψ per
//! step, ZeRO 3 3Ψ; expert parameters reduce over the expert-DP group.

use crate::cost::breakdown::Term;
use crate::cost::comm::{self, Links};
use crate::layout::Placement;
use crate::spec::Recipe;

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
}

impl DpTerms {
    /// Exposed seconds of both.
    pub fn exposed(&self) -> f64 {
        self.grad.exposed + self.gather.exposed
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
}

/// Data-parallel terms of one rank at ZeRO stage `zero`; `dp` is D (for the
/// bucket size), `shard_params` the parameters its optimizer updates.
pub fn data_parallel(
    v: &DpVolumes,
    zero: u8,
    dp: u32,
    params: f64,
    w: Windows,
    overlap: Overlap,
    pl: &Placement,
    links: &Links,
) -> DataParallel {
    let share = last_bucket_share(bucket_params(dp), params);
    let mut out = DataParallel::default();
    match zero {
        0 | 1 => {
            let reduce = gradient_reduction(v, zero, pl, links);
            let gather = if zero == 0 {
                0.0
            } else {
                parameter_gather(v, pl, links)
            };
            let reduce_exposed = if overlap.grad_reduce {
                exposed_after_overlap(reduce, w.backward + w.drain, share)
            } else {
                reduce
            };
            let gather_exposed = if overlap.param_gather {
                exposed_after_overlap(gather, w.forward, share)
            } else {
                gather
            };
            out.per_step = DpTerms {
                grad: Term::overlapped(reduce_exposed, reduce),
                gather: Term::overlapped(gather_exposed, gather),
            };
        }
        2 => {
            let rs = gradient_reduction(v, zero, pl, links);
            let ag = parameter_gather(v, pl, links);
            out.per_micro_batch.grad = Term::overlapped(exposed_beyond(rs, w.backward), rs);
            // ZeRO-2 gathers the updated parameters once per step.
            out.per_step.gather = Term::serial(ag);
        }
        _ => {
            let rs = gradient_reduction(v, zero, pl, links);
            let ag = parameter_gather(v, pl, links);
            // Forward: the gather under the forward. Backward: the gather
            // again and the reduce-scatter under the backward; what shows is
            // shared between them in proportion to their times.
            let fwd = exposed_beyond(ag, w.forward);
            let bwd = exposed_beyond(ag + rs, w.backward);
            let gather_share = if ag + rs > 0.0 { ag / (ag + rs) } else { 0.0 };
            out.per_micro_batch = DpTerms {
                grad: Term::overlapped(bwd * (1.0 - gather_share), rs),
                gather: Term::overlapped(fwd + bwd * gather_share, 2.0 * ag),
            };
        }
    }
    out
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
}
