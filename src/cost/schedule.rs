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
#[derive(Debug, Clone, Copy, PartialEq)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
