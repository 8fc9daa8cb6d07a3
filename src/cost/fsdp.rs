//! ZeRO-3 / FSDP priced per wrapped unit: the forward and backward timeline
//! of one micro-batch on one rank when every unit's parameters are gathered
//! before it runs and its gradients reduce-scattered after.
//!
//! A unit is what the engine wraps and gathers at once: a transformer layer,
//! the embedding, the output layer with its norm (PyTorch FSDP's units,
//! [ref:zhao-2023]; Megatron-FSDP and torchtitan wrap each transformer
//! layer, [ref:megatron-fsdp]). One unit is prefetched ahead of the one
//! computing, and the
//! collectives of a rank run one after another on its links (one NCCL
//! stream for the data-parallel group).
//!
//! Forward, units `0 … n−1`, compute `c_i`, all-gather `g_i`. The gather of
//! unit `i+1` is issued when unit `i` starts, so unit `i+1` starts when both
//! unit `i` has finished and its own gather has arrived:
//!
//! ```text
//! S_0 = g_0,   S_{i+1} = S_i + step(c_i, g_{i+1}),   forward = S_{n−1} + c_{n−1}
//!                       = g_0 + Σ_{i=0}^{n−1} step(c_i, g_{i+1})   (g_n = 0)
//! ```
//!
//! Backward, units in reverse order `k = 0 … n−1` (the last layer first),
//! compute `b_k`, all-gather `g_k` again (the forward resharded it; an
//! engine may gather more, [`Unit::backward_gather`]) and
//! reduce-scatter `r_k` of its gradients, issued when its backward ends.
//! While unit `k` computes, the link carries the reduce-scatter of unit
//! `k−1` and the gather of unit `k+1`:
//!
//! ```text
//! backward = g_0 + Σ_{k=0}^{n−1} step(b_k, r_{k−1} + g_{k+1}) + r_{n−1}
//!            (r_{−1} = 0, g_n = 0)
//! ```
//!
//! so the first gather and the last reduce-scatter are always exposed, and
//! each collective's latency is paid once per unit. `step(x, y)` is the
//! time of `x` seconds of compute next to `y` seconds of communication,
//! `max(x + σ·y, y)` with the compute slowed by the share σ while NCCL runs
//! ([`crate::cost::contention`]); σ = 0 gives the ideal `max(x, y)`.

use crate::cost::contention::overlapped_step;

/// One wrapped unit's work for one micro-batch on one rank, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Unit {
    /// Forward compute (with its own exposed TP/CP/EP communication).
    pub forward: f64,
    /// Backward compute (with recompute and exposed communication).
    pub backward: f64,
    /// All-gather of the unit's parameters for its forward.
    pub gather: f64,
    /// All-gather of the unit's parameters for its backward: `gather`
    /// again, or more where the engine gathers some tensors twice in the
    /// backward (DeepSpeed 0.3 under full recompute,
    /// [`crate::cost::data_parallel::deepspeed_2021_collectives`]).
    pub backward_gather: f64,
    /// Reduce-scatter of the unit's gradients.
    pub reduce_scatter: f64,
}

/// `count` identical units in a row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Run {
    /// The unit.
    pub unit: Unit,
    /// How many in a row.
    pub count: u32,
}

/// Durations of one micro-batch's passes on one rank, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timeline {
    /// Forward, from the first gather to the end of the last unit.
    pub forward: f64,
    /// Backward, from the first gather to the end of the last
    /// reduce-scatter.
    pub backward: f64,
}

/// Sum of `f(prev, this, next)` over every unit of `runs`, in model order
/// or (`reverse`) backward order, with `Unit::default()` before the first
/// and after the last. Interior units of a run share one value, so the work
/// is per run, not per unit, and nothing is allocated (`evaluate` runs this
/// for every ZeRO-3 layout).
fn sum_over_neighbours(runs: &[Run], reverse: bool, f: impl Fn(&Unit, &Unit, &Unit) -> f64) -> f64 {
    let n = runs.len();
    let at = |j: usize| &runs[if reverse { n - 1 - j } else { j }];
    let none = Unit::default();
    let mut prev = none;
    let mut sum = 0.0;
    for j in 0..n {
        let run = at(j);
        if run.count == 0 {
            continue;
        }
        let next = (j + 1..n)
            .map(at)
            .find(|r| r.count > 0)
            .map_or(none, |r| r.unit);
        let u = &run.unit;
        if run.count == 1 {
            sum += f(&prev, u, &next);
        } else {
            sum += f(&prev, u, u) + f(u, u, &next);
            sum += (run.count - 2) as f64 * f(u, u, u);
        }
        prev = *u;
    }
    sum
}

/// The first unit of `runs` in model order or (`reverse`) backward order.
fn first_unit(runs: &[Run], reverse: bool) -> Unit {
    let live = |r: &&Run| r.count > 0;
    let first = if reverse {
        runs.iter().rev().find(live)
    } else {
        runs.iter().find(live)
    };
    first.map_or(Unit::default(), |r| r.unit)
}

/// Forward duration of `runs` (model order), seconds: `g_0 + Σ step(c_i,
/// g_{i+1})` with compute slowdown `sigma`.
pub fn forward_duration(runs: &[Run], sigma: f64) -> f64 {
    first_unit(runs, false).gather
        + sum_over_neighbours(runs, false, |_, u, next| {
            overlapped_step(u.forward, next.gather, sigma)
        })
}

/// Backward duration of `runs` (model order; the backward walks them in
/// reverse), seconds: `g_0 + Σ step(b_k, r_{k−1} + g_{k+1}) + r_{n−1}` with
/// compute slowdown `sigma`.
pub fn backward_duration(runs: &[Run], sigma: f64) -> f64 {
    first_unit(runs, true).backward_gather
        + sum_over_neighbours(runs, true, |prev, u, next| {
            overlapped_step(
                u.backward,
                prev.reduce_scatter + next.backward_gather,
                sigma,
            )
        })
        + first_unit(runs, false).reduce_scatter
}

/// Sum of `f(unit)·count` over `runs`.
pub fn total(runs: &[Run], f: impl Fn(&Unit) -> f64) -> f64 {
    runs.iter().map(|r| r.count as f64 * f(&r.unit)).sum()
}

/// Both passes of `runs`, seconds.
pub fn timeline(runs: &[Run], sigma: f64) -> Timeline {
    Timeline {
        forward: forward_duration(runs, sigma),
        backward: backward_duration(runs, sigma),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(forward: f64, backward: f64, gather: f64, reduce_scatter: f64) -> Unit {
        Unit {
            forward,
            backward,
            gather,
            backward_gather: gather,
            reduce_scatter,
        }
    }

    /// Asserts that `t` takes `forward` and `backward` seconds (to 1e-12).
    fn assert_times(t: &Timeline, forward: f64, backward: f64) {
        assert!(
            (t.forward - forward).abs() < 1e-12 && (t.backward - backward).abs() < 1e-12,
            "{t:?}, want forward {forward}, backward {backward}"
        );
    }

    /// Unit-by-unit simulation of the same schedule with an explicit link
    /// clock (collectives in issue order, compute slowed by `sigma` times
    /// the communication issued while it runs): the oracle for the closed
    /// forms and their per-run sums.
    fn simulate(units: &[Unit], sigma: f64) -> Timeline {
        let n = units.len();
        // Forward: the gather of unit i+1 is issued when unit i starts.
        let mut link = units[0].gather;
        let mut start = link;
        let mut forward = 0.0;
        for i in 0..n {
            let next_g = if i + 1 < n { units[i + 1].gather } else { 0.0 };
            link = link.max(start) + next_g;
            forward = start + units[i].forward + sigma * next_g;
            start = forward.max(link);
        }
        // Backward in reverse order: while unit k computes the link carries
        // the reduce-scatter of unit k−1 and the gather of unit k+1.
        let rev: Vec<Unit> = units.iter().rev().copied().collect();
        let mut link = rev[0].backward_gather;
        let mut start = link;
        let mut pending_rs = 0.0;
        let mut compute_end = 0.0;
        for k in 0..n {
            let next_g = if k + 1 < n {
                rev[k + 1].backward_gather
            } else {
                0.0
            };
            let busy = pending_rs + next_g;
            link = link.max(start) + busy;
            compute_end = start + rev[k].backward + sigma * busy;
            start = compute_end.max(link);
            pending_rs = rev[k].reduce_scatter;
        }
        Timeline {
            forward,
            backward: compute_end.max(link) + pending_rs,
        }
    }

    #[test]
    fn four_units_by_hand() {
        // Four units, compute 10 ms forward / 20 ms backward each, gather
        // 6 ms, reduce-scatter 8 ms, no contention.
        // Forward: g_0 + 3·max(10, 6) + max(10, 0) = 6 + 30 + 10 = 46 ms
        // (the first gather exposed, the rest hidden).
        // Backward: g_0 = 6; k=0: max(20, 0 + 6) = 20; k=1, k=2:
        // max(20, 8 + 6) = 20; k=3: max(20, 8 + 0) = 20; then the last
        // reduce-scatter 8: 6 + 80 + 8 = 94 ms.
        let u = unit(10e-3, 20e-3, 6e-3, 8e-3);
        let runs = [Run { unit: u, count: 4 }];
        let t = timeline(&runs, 0.0);
        assert_times(&t, 46e-3, 94e-3);
        // Exposed beyond compute: 6 ms forward, 14 ms backward (first gather
        // and last reduce-scatter).
        assert!((t.forward - 40e-3 - 6e-3).abs() < 1e-12);
        assert!((t.backward - 80e-3 - 14e-3).abs() < 1e-12);
        let s = simulate(&[u; 4], 0.0);
        assert_times(&t, s.forward, s.backward);
    }

    #[test]
    fn communication_bound_units() {
        // Gather 15 ms against 10 ms of forward: each step waits for the
        // link. Forward: 15 + 3·max(10, 15) + 10 = 70 ms. Backward, with
        // r = 5: 15 + max(20, 15) + 2·max(20, 5 + 15) + max(20, 5) + 5 =
        // 15 + 20 + 40 + 20 + 5 = 100 ms. With σ = 0.1 the hidden steps
        // cost 10 % of what overlaps them: forward 15 + 3·max(10 + 1.5, 15)
        // + 10 = 70 ms still (link-bound); backward 15 + (20 + 1.5) +
        // 2·(20 + 2) + (20 + 0.5) + 5 = 106 ms.
        let u = unit(10e-3, 20e-3, 15e-3, 5e-3);
        let runs = [Run { unit: u, count: 4 }];
        assert_times(&timeline(&runs, 0.0), 70e-3, 100e-3);
        assert_times(&timeline(&runs, 0.1), 70e-3, 106e-3);
    }

    #[test]
    fn runs_match_the_unit_by_unit_simulation() {
        // Embedding, 5 layers, an output layer larger than a layer (as for
        // Llama's 128K vocabulary), with and without contention.
        let emb = unit(1e-3, 2e-3, 4e-3, 4e-3);
        // The layers gather more for their backward (DeepSpeed 0.3's
        // re-gathers under full recompute).
        let layer = Unit {
            backward_gather: 10e-3,
            ..unit(10e-3, 22e-3, 7e-3, 9e-3)
        };
        let out = unit(6e-3, 12e-3, 12e-3, 12e-3);
        let runs = [
            Run {
                unit: emb,
                count: 1,
            },
            Run {
                unit: layer,
                count: 5,
            },
            Run {
                unit: out,
                count: 1,
            },
        ];
        let mut units = vec![emb];
        units.extend([layer; 5]);
        units.push(out);
        for sigma in [0.0, 0.15] {
            let s = simulate(&units, sigma);
            assert_times(&timeline(&runs, sigma), s.forward, s.backward);
        }
    }

    #[test]
    fn empty_and_single_unit() {
        assert_eq!(timeline(&[], 0.0), Timeline::default());
        // One unit: gather, compute; backward gather, compute, reduce-scatter.
        let u = unit(3.0, 5.0, 1.0, 2.0);
        let t = timeline(&[Run { unit: u, count: 1 }], 0.0);
        assert_eq!(t.forward, 4.0);
        assert_eq!(t.backward, 8.0);
    }
}
