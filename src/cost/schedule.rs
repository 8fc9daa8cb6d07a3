//! Pipeline schedule time and bubble.
//!
//! 1F1B with equal stages takes `(m + p − 1)·(t_f + t_b)` (Narayanan et al.
//! 2021 §2.2 [ref:narayanan-2021]); interleaved with v chunks
//! `(m + (p−1)/v)·(t_f + t_b)`. For unequal
//! stages the slowest stage paces the steady state and every stage adds its
//! own fill and drain: `(m − 1)·max_i t_i + Σ_i t_i` (the pipeline latency
//! of Alpa, Zheng et al. 2022 §5.1 Eq. 2 [ref:zheng-2022]), and with v
//! chunks the fill/drain part shrinks by v. The ideal bubble fraction is
//! `(p − 1)/(m + p − 1)` of the stage time slots (GPipe [ref:huang-2019]);
//! `(p − 1)/m` is the bubble relative to the ideal compute time
//! [ref:narayanan-2021], not a fraction of the step.

/// What the pipeline time depends on: the slowest stage's time per
/// micro-batch and the sum over stages, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageSummary {
    /// `max_i t_i`.
    pub slowest: f64,
    /// `Σ_i t_i`.
    pub sum: f64,
}

impl StageSummary {
    /// Summary of per-stage times.
    pub fn of(stage_times: &[f64]) -> StageSummary {
        StageSummary {
            slowest: stage_times.iter().copied().fold(0.0, f64::max),
            sum: stage_times.iter().sum(),
        }
    }
}

/// Time of the pipeline part of one step, seconds, from the stage summary:
/// `m·max + (Σ − max)/v`, which is `(m − 1)·max + Σ` for v = 1. The cost
/// model and the search's upper bound both price the pipeline with this.
pub fn pipeline_time_of(s: StageSummary, m: u64, vpp: u32) -> f64 {
    m as f64 * s.slowest + (s.sum - s.slowest) / vpp.max(1) as f64
}

/// Time of the pipeline part of one step, seconds.
///
/// `stage_times[i]` is pipeline rank i's time for one micro-batch, forward
/// plus backward (all its v chunks), including its point-to-point sends.
/// Returns [`pipeline_time_of`] their summary.
pub fn pipeline_time(stage_times: &[f64], m: u64, vpp: u32) -> f64 {
    pipeline_time_of(StageSummary::of(stage_times), m, vpp)
}

/// Idle time of the pipeline part, seconds: pipeline time minus the busy
/// time of the slowest stage, `pipeline_time − m·max_i t_i`.
pub fn bubble_time(stage_times: &[f64], m: u64, vpp: u32) -> f64 {
    let max = stage_times.iter().copied().fold(0.0, f64::max);
    pipeline_time(stage_times, m, vpp) - m as f64 * max
}

/// Ideal bubble fraction of 1F1B ([ref:huang-2019]): `(p − 1)/(m + p − 1)`;
/// interleaved: `((p − 1)/v)/(m + (p − 1)/v)`.
pub fn ideal_bubble_fraction(pp: u32, m: u64, vpp: u32) -> f64 {
    let fill = (pp as f64 - 1.0) / vpp.max(1) as f64;
    fill / (m as f64 + fill)
}

/// Chunk micro-batches pipeline rank `rank` (0-based) runs forward before
/// its first backward in Megatron's interleaved 1F1B, and as many backward
/// after its last forward: `min(m·v, 2·(p − rank − 1) + (v − 1)·p)`
/// (`get_pp_rank_microbatches` in `pipeline_parallel/schedules.py`).
pub fn interleaved_warmup(rank: u32, pp: u32, vpp: u32, m: u64) -> u64 {
    let (p, v, i) = (pp as u64, vpp.max(1) as u64, rank as u64);
    (m.saturating_mul(v)).min(2 * (p - i - 1) + (v - 1) * p)
}

/// Pipeline point-to-point time of rank `rank` per micro-batch, seconds,
/// exposed and total.
///
/// `per_chunk` is one chunk boundary's sends for one micro-batch, forward
/// activation plus backward gradient (`layer::p2p_per_micro_batch`);
/// `fwd_chunk` and `bwd_chunk` are one chunk's forward and backward compute
/// for one micro-batch. The rank sends at each of its v chunk boundaries,
/// `v·per_chunk` in all. Without `overlap` (or without interleaving, where
/// Megatron sends and receives in one blocking batch) all of it is on the
/// critical path. With Megatron's `overlap_p2p_comm` the steady-state
/// sends and receives are posted asynchronously and waited for only when
/// the next chunk needs them, so each direction hides under that chunk's
/// compute, `max(0, per_chunk/2 − t)` — except the forward sends when
/// `forward_waits` (Megatron-LM since 260cba71 waits for each one before
/// freeing its output: `per_chunk/2` exposed); the warm-up and cool-down
/// transfers, [`interleaved_warmup`] of the `m·v` in each direction, stay
/// blocking unless `--overlap-p2p-communication-warmup-flush`
/// (`forward_backward_pipelining_with_interleaving`, Megatron-LM
/// `pipeline_parallel/schedules.py` [ref:megatron-schedules]).
///
/// Worked example: p = 8, v = 5, m = 64, rank 0: 2·7 + 4·8 = 46 of the
/// 320 chunk micro-batches are warm-up, so with the compute larger than the
/// sends 46/320 = 14.4% of the `5·per_chunk` total is exposed; with the
/// forward sends waited for, 46/320 + (274/320)·½ = 57.2%.
#[allow(clippy::too_many_arguments)]
pub fn p2p_exposed(
    per_chunk: f64,
    fwd_chunk: f64,
    bwd_chunk: f64,
    rank: u32,
    pp: u32,
    vpp: u32,
    m: u64,
    overlap: bool,
    forward_waits: bool,
) -> crate::cost::breakdown::Term {
    use crate::cost::breakdown::Term;
    let total = per_chunk * vpp.max(1) as f64;
    if !overlap || vpp <= 1 || pp <= 1 || m == 0 {
        return Term::serial(total);
    }
    let warm = interleaved_warmup(rank, pp, vpp, m) as f64 / (m as f64 * vpp as f64);
    let one_way = per_chunk / 2.0;
    let forward = if forward_waits {
        one_way
    } else {
        (one_way - fwd_chunk).max(0.0)
    };
    let steady = forward + (one_way - bwd_chunk).max(0.0);
    let exposed = vpp as f64 * (warm * per_chunk + (1.0 - warm) * steady);
    Term::overlapped(exposed.min(total), total)
}

/// The least exposed pipeline point-to-point time of any rank per
/// micro-batch, seconds, whatever the stage split: [`p2p_exposed`] of the
/// last rank (the shortest warm-up) with the steady-state sends fully
/// hidden as far as the compute can hide them. The search's split bounds
/// price every rank's sends with it.
pub fn p2p_exposed_floor(
    per_chunk: f64,
    pp: u32,
    vpp: u32,
    m: u64,
    overlap: bool,
    forward_waits: bool,
) -> f64 {
    if pp <= 1 {
        return 0.0;
    }
    p2p_exposed(
        per_chunk,
        f64::INFINITY,
        f64::INFINITY,
        pp - 1,
        pp,
        vpp,
        m,
        overlap,
        forward_waits,
    )
    .exposed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_p2p_is_exposed_in_warm_up_and_cool_down_only() {
        // p = 8, v = 5, m = 64, rank 0: warm-up 2·7 + 4·8 = 46 chunk
        // micro-batches of 320. Sends of 1 ms per chunk under 10/20 ms of
        // compute: exposed 5·(46/320)·1 ms = 0.71875 ms of 5 ms.
        let t = p2p_exposed(1e-3, 10e-3, 20e-3, 0, 8, 5, 64, true, false);
        assert!((t.total - 5e-3).abs() < 1e-15);
        assert!((t.exposed - 5.0 * 46.0 / 320.0 * 1e-3).abs() < 1e-15);
        // The last rank warms up (v − 1)·p = 32: 5·(32/320) ms = 0.5 ms.
        let last = p2p_exposed(1e-3, 10e-3, 20e-3, 7, 8, 5, 64, true, false);
        assert!((last.exposed - 0.5e-3).abs() < 1e-15);
        // Sends of 30 ms per chunk (15 each way) over 10/20 ms of compute:
        // steady state leaves 5 + 0 ms per chunk exposed;
        // 5·(46/320·30 + 274/320·5) = 5·(4.3125 + 4.28125) = 42.96875 ms.
        let slow = p2p_exposed(30e-3, 10e-3, 20e-3, 0, 8, 5, 64, true, false);
        assert!((slow.exposed - 42.96875e-3).abs() < 1e-12);
        // Too few micro-batches to reach steady state: all blocking.
        let short = p2p_exposed(1e-3, 10e-3, 20e-3, 0, 8, 5, 2, true, false);
        assert_eq!(short.exposed, short.total);
        // No interleaving, or the overlap off: all blocking.
        assert_eq!(
            p2p_exposed(1e-3, 1.0, 1.0, 0, 8, 1, 64, true, false).exposed,
            1e-3
        );
        assert_eq!(
            p2p_exposed(1e-3, 1.0, 1.0, 0, 8, 5, 64, false, false).exposed,
            5e-3
        );
        // The floor is the last rank's warm-up share: 5·(32/320) ms.
        assert!((p2p_exposed_floor(1e-3, 8, 5, 64, true, false) - 0.5e-3).abs() < 1e-15);
        assert_eq!(p2p_exposed_floor(1e-3, 8, 1, 64, true, false), 1e-3);
        // Forward sends waited for (Megatron-LM since 260cba71): rank 0
        // exposes its warm-up share and half of the rest,
        // 5·(46/320 + 274/320·0.5) ms = 2.859375 ms.
        let waits = p2p_exposed(1e-3, 10e-3, 20e-3, 0, 8, 5, 64, true, true);
        assert!((waits.exposed - 5.0 * (46.0 + 137.0) / 320.0 * 1e-3).abs() < 1e-15);
    }

    #[test]
    fn bubble_fraction_seed_000() {
        // p = 32, m = 32: 31/63, not 31/32.
        assert!((ideal_bubble_fraction(32, 32, 1) - 31.0 / 63.0).abs() < 1e-15);
    }

    #[test]
    fn equal_stages_match_closed_form() {
        // p = 4, m = 8, t = 1: (m + p − 1)·t = 11; interleaved v = 2: 8 + 3/2.
        let t = [1.0; 4];
        assert_eq!(pipeline_time(&t, 8, 1), 11.0);
        assert_eq!(pipeline_time(&t, 8, 2), 9.5);
        assert_eq!(bubble_time(&t, 8, 1), 3.0);
        // The bubble share of the pipeline time is the ideal fraction.
        assert!(
            (bubble_time(&t, 8, 1) / pipeline_time(&t, 8, 1) - ideal_bubble_fraction(4, 8, 1))
                .abs()
                < 1e-15
        );
    }

    #[test]
    fn unequal_stages() {
        // (m − 1)·max + Σ = 3·2 + (1 + 2 + 1) = 10.
        assert_eq!(pipeline_time(&[1.0, 2.0, 1.0], 4, 1), 10.0);
    }
}
