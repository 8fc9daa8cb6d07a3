//! Ranking that respects the error band: the search's best plans, ordered
//! by what the validation table says the cost model can tell apart.
//!
//! Every plan carries a band `b` ([`crate::trust`]): the median |error| of
//! the measured runs of its regime, or, when no run covers the regime
//! (extrapolated), [`Bands::extrapolated`], the 90th percentile |error| of
//! every measured run — a regime nobody measured is assumed to be as badly
//! predicted as the worst tenth of those somebody did. A plan predicted at
//! `t` tokens/s is somewhere in `[t·(1 − b), t·(1 + b)]`; a plan above the
//! measured envelope (implausible) is first clipped to it.
//!
//! - `--rank-by predicted` orders by `t`; `--rank-by robust` by the lower
//!   edge `t·(1 − b)`.
//! - Walking that order, a plan joins the tie group of the group's first
//!   plan `L` when the two bands overlap, `t·(1 + b) ≥ t_L·(1 − b_L)`; the
//!   first plan whose band does not reach starts the next group, so a
//!   group is a run of consecutive plans and a slower plan never sits in an
//!   earlier group than a faster one (a wide-band plan cannot jump a
//!   faster, narrower one).
//! - Inside a group the better-validated plan comes first: plausible before
//!   implausible, validated before extrapolated among plans within one
//!   coarse step of `(1 + r)/(1 − b_x)` of each other (`b_x` the
//!   extrapolated band; counted like the steps below), since a plan that
//!   much faster has its lower edge above a validated plan's upper edge;
//!   then, among plans of the
//!   same kind predicted within one resolution step of each other (steps of
//!   `1 + r` counted down from the group's first plan, `r` the median
//!   |error| of every measured run), the one nearer a measured run (fewer
//!   regime dimensions differing, [`crate::trust::Trust::distance`]), then
//!   the narrower band, then the order above; a plan a step or more
//!   faster stays ahead of a slower one of its kind. "Implausible" here is above the envelope of its
//!   own GPU architecture: a plan above a record borrowed from another (no
//!   run of its architecture is measured in its precision, bf16 on Blackwell
//!   today) is clipped but not moved behind the plausible ones, since
//!   there every plan may be as optimistic and moving the ones above the
//!   line would make #1 whichever plan the model happens to price just
//!   under it.
//!
//! This is the optimizer's curse answered with the data at hand: the top of
//! a list ranked by one predicted number is where the model is most
//! optimistic, so the listing says which plans it cannot separate and puts
//! first the one it has checked best.

use std::cmp::Ordering;

use crate::trust::{Record, Trust};

/// What orders the listed plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankBy {
    /// Predicted tokens/s (ties and validation reorder inside a group).
    #[default]
    Predicted,
    /// The lower edge of the band, `t·(1 − b)`.
    Robust,
}

crate::names::named!(RankBy, "ranking", [Predicted => "predicted", Robust => "robust"]);

/// The band of a plan that no measured run covers, and the speed
/// difference the model can tell apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bands {
    /// 90th percentile |error| of every measured run of the record.
    pub extrapolated: f64,
    /// Median |error| of every measured run: extrapolated plans of one tie
    /// group predicted within this fraction of each other are ordered by
    /// their distance from a measured run ([`order`]).
    pub resolution: f64,
}

impl Bands {
    /// Bands from `record`: the 90th percentile (nearest rank) and the
    /// median of its runs' |error|, or 0.5 and 0.1 when it holds no run.
    pub fn of(record: &Record) -> Bands {
        let mut e: Vec<f64> = record.runs.iter().map(|r| r.error.abs()).collect();
        if e.is_empty() {
            return Bands {
                extrapolated: 0.5,
                resolution: 0.1,
            };
        }
        e.sort_by(f64::total_cmp);
        let i = ((0.9 * e.len() as f64).ceil() as usize).clamp(1, e.len()) - 1;
        Bands {
            extrapolated: e[i].min(0.95),
            resolution: crate::validate::median(&e).max(1e-3),
        }
    }

    /// The band `b` of a plan with trust `t`.
    pub fn band(&self, t: &Trust) -> f64 {
        match (t.extrapolated.as_ref(), t.median_abs) {
            (None, Some(m)) => m,
            _ => self.extrapolated,
        }
    }
}

/// One plan as the ranking sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// Predicted tokens/s, clipped to the measured envelope when above it.
    pub tokens: f64,
    /// Predicted tokens/s as priced (breaks ties between plans clipped to
    /// the same envelope).
    pub predicted: f64,
    /// Its band `b`.
    pub band: f64,
    /// Whether a measured run covers its regime.
    pub validated: bool,
    /// Regime dimensions in which the nearest measured run differs (0 when
    /// validated; [`Trust::distance`]).
    pub distance: usize,
    /// [`Bands::resolution`].
    pub resolution: f64,
    /// [`Bands::extrapolated`].
    pub extrapolated_band: f64,
    /// Whether it is above the measured envelope.
    pub implausible: bool,
    /// Whether it goes behind the plausible plans of its tie group: above
    /// the envelope of its own GPU architecture (not one borrowed from another).
    pub demoted: bool,
}

impl Ranked {
    /// A plan predicted at `tokens_per_s` with trust `t`.
    pub fn of(tokens_per_s: f64, t: &Trust, bands: &Bands) -> Ranked {
        let implausible = t.envelope.as_ref().is_some_and(|e| e.implausible);
        let demoted = t
            .envelope
            .as_ref()
            .is_some_and(|e| e.implausible && e.same_class);
        // Clip an implausible prediction to the envelope: at most the
        // record MFU plus the margin, in the plan's own tokens/s.
        let tokens = match &t.envelope {
            Some(e) if e.implausible && e.predicted_mfu > 0.0 => {
                // tokens/s per unit of MFU is the job's own constant; round
                // it to 10 significant digits so that every plan of the job
                // clips to the same value (then the faster as priced leads).
                let unit = tokens_per_s / e.predicted_mfu;
                let q = 10f64.powi(unit.abs().log10().floor() as i32 - 9);
                let cap_mfu = e.record_mfu + crate::trust::ENVELOPE_MARGIN;
                // Over the HFU record: the MFU at which its HFU would be
                // at the record plus the margin (HFU/MFU is the plan's
                // own FLOP ratio, alike for plans of one recompute mode up
                // to rounding: 10 significant digits here too).
                let cap = if e.predicted_hfu > e.record_hfu + crate::trust::ENVELOPE_MARGIN {
                    let ratio = e.predicted_hfu / e.predicted_mfu;
                    let c = (e.record_hfu + crate::trust::ENVELOPE_MARGIN) / ratio;
                    cap_mfu.min((c * 1e10).round() / 1e10)
                } else {
                    cap_mfu
                };
                (unit / q).round() * q * cap.min(e.predicted_mfu)
            }
            _ => tokens_per_s,
        };
        Ranked {
            tokens,
            predicted: tokens_per_s,
            band: bands.band(t),
            validated: t.extrapolated.is_none() && t.median_abs.is_some(),
            distance: t.distance,
            resolution: bands.resolution,
            extrapolated_band: bands.extrapolated,
            implausible,
            demoted,
        }
    }

    /// `t·(1 − b)`.
    pub fn lower(&self) -> f64 {
        self.tokens * (1.0 - self.band)
    }

    /// `t·(1 + b)`.
    pub fn upper(&self) -> f64 {
        self.tokens * (1.0 + self.band)
    }

    /// The key `by` orders on.
    pub fn key(&self, by: RankBy) -> f64 {
        match by {
            RankBy::Predicted => self.tokens,
            RankBy::Robust => self.lower(),
        }
    }
}

/// The order of `plans` (indices into it, best first) and each one's tie
/// group (1-based), under `by`, the first `limit` of it (whole groups are
/// formed from every plan, so the first rows do not depend on `limit`).
/// `plans` come in the search's order, which breaks exact ties.
pub fn order(plans: &[Ranked], by: RankBy, limit: usize) -> Vec<(usize, usize)> {
    let mut idx: Vec<usize> = (0..plans.len()).collect();
    idx.sort_by(|&a, &b| {
        plans[b]
            .key(by)
            .total_cmp(&plans[a].key(by))
            .then(plans[b].predicted.total_cmp(&plans[a].predicted))
            .then(a.cmp(&b))
    });
    // A group is the first plan left and the plans after it, in key order,
    // whose band reaches its lower edge, `t·(1 + b) ≥ t_L·(1 − b_L)`, up to
    // the first that does not.
    let mut out = Vec::with_capacity(plans.len().min(limit));
    let mut group = 0;
    let mut start = 0;
    while out.len() < limit && start < idx.len() {
        group += 1;
        let floor = plans[idx[start]].lower();
        let end = start
            + 1
            + idx[start + 1..]
                .iter()
                .take_while(|&&j| plans[j].upper() >= floor)
                .count();
        let leader = &plans[idx[start]];
        // Plans by how far below the leader they are, in steps of the
        // model's resolution (its median |error|) on a log scale, so that a
        // plan (1 + resolution)× faster than another is always a step
        // ahead: inside a step the better-validated plan leads (validated,
        // nearer a measured run, narrower band); a plan a step or more
        // faster stays ahead of a slower one of its kind.
        let steps = |j: usize, width: f64| -> u64 {
            let below = (leader.key(by) / plans[j].key(by)).ln();
            (below / width).floor().clamp(0.0, 1e6) as u64
        };
        let step = |j: usize| steps(j, leader.resolution.ln_1p());
        // Validation orders plans only within a coarse step of
        // (1 + r)/(1 − b_x), b_x the extrapolated band: an extrapolated plan
        // that much faster than a validated one has its lower edge above
        // the validated plan's upper edge (for a validated band up to r),
        // so the model tells them apart and the faster stays ahead.
        let coarse_width =
            (leader.resolution.ln_1p() - (-leader.extrapolated_band).ln_1p()).max(1e-9);
        let coarse = |j: usize| steps(j, coarse_width);
        // The steps are computed once per plan, not once per comparison
        // (two logarithms each: milliseconds over a search's pool).
        let mut members: Vec<(usize, u64, u64)> = idx[start..end]
            .iter()
            .map(|&j| (j, coarse(j), step(j)))
            .collect();
        members.sort_by(|&(a, coarse_a, step_a), &(b, coarse_b, step_b)| {
            plans[a]
                .demoted
                .cmp(&plans[b].demoted)
                .then(coarse_a.cmp(&coarse_b))
                .then_with(|| better_validated(&plans[a], &plans[b]))
                .then(step_a.cmp(&step_b))
                .then(plans[a].distance.cmp(&plans[b].distance))
                .then(plans[a].band.total_cmp(&plans[b].band))
        });
        out.extend(members.into_iter().map(|(m, _, _)| (m, group)));
        start = end;
    }
    out.truncate(limit);
    out
}

/// Inside a tie group: plausible first (against its own class's
/// envelope), validated first; [`order`] then puts, among plans predicted
/// within one resolution step of each other, the one nearer a measured run
/// first (fewer regime dimensions differing from it), then the narrower
/// band (a stable sort keeps the order by key after that).
fn better_validated(a: &Ranked, b: &Ranked) -> Ordering {
    a.demoted
        .cmp(&b.demoted)
        .then(b.validated.cmp(&a.validated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tokens: f64, band: f64, validated: bool) -> Ranked {
        Ranked {
            tokens,
            predicted: tokens,
            band,
            validated,
            distance: if validated { 0 } else { 1 },
            resolution: 0.05,
            extrapolated_band: 0.20,
            implausible: false,
            demoted: false,
        }
    }

    /// The whole ranking of `plans` by predicted tokens/s: (index, tie
    /// group) in rank order.
    fn predicted(plans: &[Ranked]) -> Vec<(usize, usize)> {
        order(plans, RankBy::Predicted, usize::MAX)
    }

    /// The whole ranking of `plans` by the lower edge of their bands.
    fn robust(plans: &[Ranked]) -> Vec<(usize, usize)> {
        order(plans, RankBy::Robust, usize::MAX)
    }

    #[test]
    fn overlapping_bands_tie_and_the_better_validated_leads() {
        // A: 100 ± 10% (validated) → [90, 110]; B: 95 ± 30% (extrapolated)
        // → [66.5, 123.5], overlaps A; C: 80 ± 5% → [76, 84], below A's 90:
        // a new group. Group 1 is {A, B}: A validated first.
        let plans = [
            plan(95.0, 0.30, false),
            plan(100.0, 0.10, true),
            plan(80.0, 0.05, true),
        ];
        let o = predicted(&plans);
        assert_eq!(o, vec![(1, 1), (0, 1), (2, 2)]);
        // Robust: lower edges A 90, C 76, B 66.5 → A, C, B. C's upper 84
        // is below A's 90, so group 1 is A alone (B's 123.5 would reach
        // it, but a group is a run of consecutive plans); group 2 starts at
        // C (floor 76) and takes B (123.5 ≥ 76): C validated first.
        let o = robust(&plans);
        assert_eq!(o, vec![(1, 1), (2, 2), (0, 2)]);
    }

    #[test]
    fn a_wide_band_does_not_jump_a_faster_validated_plan() {
        // The reviewer's mixtral-8x7b case, in thousands of tokens/s:
        // leader L 400 ± 11.25% (lower 355), F 340.703 ± 3.6% validated
        // (upper 352.97 < 355: not tied with L), W 294.708 ± 21.6%
        // extrapolated (upper 358.36 ≥ 355). Group 1 is L alone; group 2
        // starts at F (floor 328.44) and takes W (358.36 ≥ 328.44): F before
        // W. (When a group took every plan reaching its floor, W sat in
        // group 1, ahead of the faster, validated F.)
        let plans = [
            plan(294.708, 0.216, false),
            plan(400.0, 0.1125, true),
            plan(340.703, 0.036, true),
        ];
        assert_eq!(predicted(&plans), vec![(1, 1), (2, 2), (0, 2)]);
    }

    /// The newcomer's H100 case: every top plan is extrapolated with the
    /// same band and predicted within 0.1% of the others (one resolution
    /// step), and the fastest as priced differs from the nearest
    /// measured run in two dimensions (16-bit GEMMs, ZeRO 2), the next in
    /// one (16-bit GEMMs). All three overlap (the 90th-percentile band is
    /// wide), so the plan one dimension from a measurement leads, then the
    /// faster of the two two away.
    #[test]
    fn inside_a_group_the_plan_nearer_a_measurement_leads() {
        let at = |tokens: f64, distance: usize| Ranked {
            distance,
            ..plan(tokens, 0.2, false)
        };
        let plans = [at(73890.0, 2), at(73860.0, 1), at(73826.0, 2)];
        assert_eq!(predicted(&plans), vec![(1, 1), (0, 1), (2, 1)]);
        // The 128K-token case: a CP plan two dimensions away predicted at
        // 104,194 tokens/s and a ZeRO-3 plan one away at 90,507, 13.1%
        // slower: both ± 20% overlap, but 13.1% is two 5% resolution steps
        // (floor(0.131/0.05) = 2), so the faster plan stays first; a third
        // plan one away at 101,000 (3.1% below, step 0) goes before it.
        let plans = [at(90507.0, 1), at(104194.0, 2)];
        assert_eq!(predicted(&plans), vec![(1, 1), (0, 1)]);
        let plans = [at(90507.0, 1), at(104194.0, 2), at(101000.0, 1)];
        assert_eq!(predicted(&plans), vec![(2, 1), (1, 1), (0, 1)]);
    }

    /// The reviewer's gpt3-175b on dgx-a100-3072 case, scaled: leader L
    /// extrapolated 500 ± 20% (floor 400); A validated 410 ± 3% (upper
    /// 422.3, in the group) and B validated 480 ± 9% (in the group), B's
    /// lower edge 436.8 above A's upper edge 422.3. Steps of ln 1.05 =
    /// 0.0488 below L: B ln(500/480) = 0.041 → 0, A ln(500/410) = 0.198 →
    /// 4. Validated first, then the step: B, A, L (by band alone A led, 17%
    /// slower than B and distinguishably so).
    #[test]
    fn a_distinguishably_faster_validated_plan_stays_ahead() {
        let plans = [
            plan(500.0, 0.20, false),
            plan(410.0, 0.03, true),
            plan(480.0, 0.09, true),
        ];
        assert_eq!(predicted(&plans), vec![(2, 1), (1, 1), (0, 1)]);
    }

    /// The reviewer's gpt-1.7b on dgx-a100-3072 case, in round numbers:
    /// a validated plan 100 ± 10% and an extrapolated one faster, ± 20% (the
    /// test plans' b_x), r = 5%: the coarse step is ln(1.05/0.80) = 0.272.
    /// At 128 (in the group: 110 ≥ 102.4; ln 1.28 = 0.247, the same coarse
    /// step) validation leads; at 135 (in the group: 110 ≥ 108; ln 1.35 =
    /// 0.300, a coarse step ahead) the faster leads.
    #[test]
    fn validation_orders_plans_only_within_a_coarse_step() {
        let plans = [plan(100.0, 0.10, true), plan(128.0, 0.20, false)];
        assert_eq!(predicted(&plans), vec![(0, 1), (1, 1)]);
        let plans = [plan(100.0, 0.10, true), plan(135.0, 0.20, false)];
        assert_eq!(predicted(&plans), vec![(1, 1), (0, 1)]);
    }

    #[test]
    fn robust_prefers_the_narrow_band() {
        // X: 100 ± 30% (lower 70), Y: 90 ± 5% (lower 85.5). Predicted: X
        // leads, Y ties (94.5 ≥ 70) and, validated with the narrower band,
        // goes first. Robust: Y leads (85.5 > 70), X ties (130 ≥ 85.5).
        let plans = [plan(100.0, 0.30, false), plan(90.0, 0.05, true)];
        assert_eq!(predicted(&plans), vec![(1, 1), (0, 1)]);
        assert_eq!(robust(&plans), vec![(1, 1), (0, 1)]);
        // Far apart, no tie: 100 ± 1% and 50 ± 1%.
        let plans = [plan(50.0, 0.01, true), plan(100.0, 0.01, true)];
        assert_eq!(predicted(&plans), vec![(1, 1), (0, 2)]);
    }

    #[test]
    fn implausible_is_clipped_to_the_envelope_and_goes_last_in_its_group() {
        use crate::trust::{Envelope, Trust};
        let bands = Bands {
            extrapolated: 0.35,
            resolution: 0.05,
        };
        let t = Trust {
            runs: 10,
            median_abs: Some(0.05),
            max_abs: Some(0.1),
            nearest: vec![],
            extrapolated: None,
            distance: 0,
            envelope: Some(Envelope {
                record_mfu: 0.50,
                record_id: "R".into(),
                predicted_mfu: 0.62,
                record_hfu: 0.50,
                record_hfu_id: "R".into(),
                predicted_hfu: 0.62,
                implausible: true,
                same_class: true,
            }),
        };
        // 62% predicted against a 50% record: clipped to 53/62 of its
        // tokens/s, 1000 → 854.8.
        let r = Ranked::of(1000.0, &t, &bands);
        assert!((r.tokens - 1000.0 * 0.53 / 0.62).abs() < 1e-6);
        assert!(r.implausible && r.validated && r.band == 0.05);
        let ok = plan(850.0, 0.05, true);
        assert_eq!(predicted(&[r, ok]), vec![(1, 1), (0, 1)]);
        // Two implausible plans clip to the same envelope tokens/s (1000
        // and 1001 at 62% and 62.06% MFU both → 854.8): the faster as
        // priced comes first, whatever the order they arrive in.
        let mut t2 = t.clone();
        if let Some(e) = t2.envelope.as_mut() {
            e.predicted_mfu = 0.62 * 1001.0 / 1000.0;
        }
        let faster = Ranked::of(1001.0, &t2, &bands);
        assert_eq!(faster.tokens, r.tokens);
        assert_eq!(predicted(&[r, faster]), vec![(1, 1), (0, 1)]);
    }

    /// The reviewer's B200 bf16 case: no bf16 run of the class is measured,
    /// so the envelope is the best of any class (56.3% + 3 points). Every
    /// top plan is extrapolated with the same band; one predicted at 66.9%
    /// clips to 59.3% and ties a plausible one predicted at 59.29%. It is
    /// not moved behind it (the faster as priced leads), while above its
    /// own class's record it is.
    #[test]
    fn a_borrowed_envelope_clips_without_demoting() {
        use crate::trust::{Envelope, Trust};
        let bands = Bands {
            extrapolated: 0.18,
            resolution: 0.05,
        };
        let trust = |predicted_mfu: f64, same_class: bool| Trust {
            runs: 0,
            median_abs: None,
            max_abs: None,
            nearest: vec![],
            extrapolated: Some("gpu".into()),
            distance: 1,
            envelope: Some(Envelope {
                record_mfu: 0.563,
                record_id: "KOR22-4b".into(),
                predicted_mfu,
                record_hfu: 0.57,
                record_hfu_id: "KOR22-4b".into(),
                predicted_hfu: predicted_mfu,
                implausible: predicted_mfu > 0.563 + crate::trust::ENVELOPE_MARGIN,
                same_class,
            }),
        };
        // tokens/s per MFU point: 1000 tokens/s at 66.9% and at 59.29%.
        let high = |same| Ranked::of(669.0, &trust(0.669, same), &bands);
        let under = |same| Ranked::of(592.9, &trust(0.5929, same), &bands);
        // 669 clips to 1000·0.593 = 593.0, above the plausible 592.9.
        assert!((high(false).tokens - 593.0).abs() < 1e-9);
        assert!(high(false).implausible && !high(false).demoted);
        assert_eq!(
            predicted(&[under(false), high(false)]),
            vec![(1, 1), (0, 1)]
        );
        // Against its own class's record the implausible plan goes last.
        assert!(high(true).demoted);
        assert_eq!(predicted(&[under(true), high(true)]), vec![(0, 1), (1, 1)]);
    }

    #[test]
    fn extrapolated_band_is_the_90th_percentile() {
        use crate::layout::Recompute;
        use crate::trust::{Measured, Record, Regime};
        let run = |e: f64| Measured {
            id: String::new(),
            regime: Regime {
                gpu: String::new(),
                precision: "16-bit",
                zero: "0-1",
                cp: false,
                moe: false,
                recompute: Recompute::None,
                micro_batches: "",
                scale: "",
                seq: "",
                deepspeed_2021: false,
                rowwise_table: false,
            },
            error: e,
        };
        // |errors| 0.01 … 0.10: the 9th of 10 (nearest rank) is 0.09.
        let runs = (1..=10).map(|i| run(if i % 2 == 0 { 0.01 } else { -0.01 } * i as f64));
        let record = Record {
            runs: runs.collect(),
            best: vec![],
        };
        assert!((Bands::of(&record).extrapolated - 0.09).abs() < 1e-12);
        // Median of 0.01 … 0.10: (0.05 + 0.06)/2.
        assert!((Bands::of(&record).resolution - 0.055).abs() < 1e-12);
    }
}
