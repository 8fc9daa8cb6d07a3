//! How far to trust a plan: the measured runs of its regime and the cost
//! model's errors on them.
//!
//! The measured runs are the rows of `tests/data/published-dev-v2.csv`
//! (sources in `tests/data/README.md`), built into the binary and priced
//! once with the shipped profiles by [`crate::validate`]. A plan's regime is
//! the tuple of [`Regime`]: GPU class, precision class, ZeRO band, CP,
//! MoE, recompute, micro-batch band, scale band, sequence band and pricing (DeepSpeed 0.3's
//! per-tensor ZeRO-3, [`deepspeed_2021`], or today's engines). The rule:
//!
//! 1. The rows whose regime equals the plan's on every dimension are its
//!    validation: the plan's error band is their median and largest
//!    |error| of throughput, with their count.
//! 2. Without such a row the plan is *extrapolated*; the nearest rows are
//!    those that share the most dimensions with it (ties: all of them), and
//!    the note names the dimensions in which every nearest row differs
//!    (e.g. "the nearest differ from it in ZeRO 3, m ≥ 64"; when each
//!    nearest row misses another one, "no measured run with ZeRO 3 and
//!    m ≥ 64 together").
//! 3. Both draw only on rows priced as the plan is: a plan priced as
//!    DeepSpeed 0.3's ZeRO-3 (`--deepspeed-2021`, the `engine = deepspeed`
//!    rows at ZeRO-3) on those rows alone, any other plan never on them
//!    (their errors hold under that pricing only). With no such row at
//!    all the plan is extrapolated with no nearest run.

use std::sync::OnceLock;

use serde::Serialize;

use crate::layout::{Layout, Recompute};
use crate::spec::{Catalog, Gpu};
use crate::validate;

/// The shipped measurement table.
const TABLE: &str = include_str!("../tests/data/published-dev-v2.csv");

/// How many dimensions a regime is matched on ([`Regime::dims`]).
const DIMS: usize = 10;

/// The dimensions a regime is matched on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Regime {
    /// GPU class: the profile name up to its first `-` (`a100`, `h100`).
    pub gpu: String,
    /// `16-bit` (bf16 or fp16 GEMMs), `fp8`, `mxfp8` or `nvfp4`
    /// ([`precision_class`]).
    pub precision: &'static str,
    /// ZeRO band: `0–1`, `2` or `3`.
    pub zero: &'static str,
    /// Context parallel in use.
    pub cp: bool,
    /// Mixture of experts.
    pub moe: bool,
    /// Recompute mode.
    pub recompute: Recompute,
    /// Micro-batches per step: `m < 8`, `8 ≤ m < 64`, `m ≥ 64`.
    pub micro_batches: &'static str,
    /// GPUs: `≤64`, `65–512`, `513–4096`, `>4096`.
    pub scale: &'static str,
    /// Sequence length: `s ≤ 8k`, `8k < s ≤ 32k`, `s > 32k` ([`seq_band`]).
    pub seq: &'static str,
    /// ZeRO-3 priced as DeepSpeed 0.3 ran it ([`deepspeed_2021`]): its
    /// rows' errors say nothing of today's pricing, nor the reverse.
    pub deepspeed_2021: bool,
    /// Dense linears priced from torchao's measured row-wise FP8 table
    /// (`cost::precision::torchao_rowwise_measured`) instead of the
    /// roofline: likewise a pricing of its own.
    pub rowwise_table: bool,
}

impl Regime {
    /// The regime of layout `l` with `m` micro-batches on `gpus` GPUs of
    /// `gpu` for a model with or without experts.
    pub fn of(gpu: &Gpu, l: &Layout, m: u64, gpus: u64, moe: bool, seq: u64) -> Regime {
        Regime {
            gpu: gpu.measured_class(),
            precision: "16-bit",
            zero: zero_band(l.zero),
            cp: l.cp > 1,
            moe,
            recompute: l.recompute,
            micro_batches: micro_batch_band(m),
            scale: scale_band(gpus),
            seq: seq_band(seq),
            deepspeed_2021: false,
            rowwise_table: false,
        }
    }

    /// The pricing dimension's phrase: how the plan's time is priced where
    /// engines differ in kind ([`Regime::deepspeed_2021`],
    /// [`Regime::rowwise_table`]).
    fn pricing(&self) -> &'static str {
        match (self.deepspeed_2021, self.rowwise_table) {
            (true, _) => "DeepSpeed 0.3 ZeRO-3 pricing",
            (false, true) => "torchao row-wise FP8 table pricing",
            (false, false) => "today's pricing",
        }
    }

    /// `(dimension, value)` in a fixed order, as the notes name them.
    fn dims(&self) -> [(&'static str, String); DIMS] {
        [
            ("gpu", self.gpu.clone()),
            ("precision", self.precision.to_string()),
            ("zero", self.zero.to_string()),
            ("cp", if self.cp { "CP > 1" } else { "no CP" }.to_string()),
            ("moe", if self.moe { "MoE" } else { "dense" }.to_string()),
            ("recompute", self.recompute.to_string()),
            ("m", self.micro_batches.to_string()),
            ("scale", self.scale.to_string()),
            ("seq", self.seq.to_string()),
            ("pricing", self.pricing().to_string()),
        ]
    }

    /// How many dimensions ([`Regime::dims`]) `self` and `other` share,
    /// compared as values (each dimension's phrase is one value's); the
    /// test `shared_counts_the_dims_alike` checks it against the phrases.
    fn shared(&self, other: &Regime) -> usize {
        [
            self.gpu == other.gpu,
            self.precision == other.precision,
            self.zero == other.zero,
            self.cp == other.cp,
            self.moe == other.moe,
            self.recompute == other.recompute,
            self.micro_batches == other.micro_batches,
            self.scale == other.scale,
            self.seq == other.seq,
            self.pricing() == other.pricing(),
        ]
        .into_iter()
        .filter(|&same| same)
        .count()
    }

    /// A dimension as a note names it after "no measured run with": `ZeRO
    /// 3`, `m ≥ 64`, `a100 GPUs`.
    fn phrase(dim: &str, value: &str) -> String {
        match dim {
            "gpu" => format!("{value} GPUs"),
            "zero" => format!("ZeRO {value}"),
            "recompute" => format!("recompute {value}"),
            "scale" => format!("{value} GPUs"),
            "precision" => format!("{value} GEMMs"),
            _ => value.to_string(),
        }
    }
}

/// Whether `job` at layout `l` is priced as DeepSpeed 0.3's ZeRO-3 (one
/// synchronous collective per tensor, [`crate::spec::DeepSpeedZero3::per_tensor_sync`]):
/// ZeRO-3 under the flag; at ZeRO 0-2 the flag changes no price.
pub fn deepspeed_2021(job: &crate::spec::Job, l: &Layout) -> bool {
    l.zero >= 3
        && job
            .engine_memory
            .deepspeed_zero3
            .is_some_and(|d| d.per_tensor_sync)
}

/// Precision class of a job: `16-bit` (bf16 or fp16 GEMMs) or the
/// low-precision format of its linears (`fp8`, `mxfp8`, `nvfp4`).
pub fn precision_class(p: crate::spec::Precision) -> &'static str {
    if p.is_low() { p.as_str() } else { "16-bit" }
}

/// GPU class of a profile name: up to its first `-` (`a100-80g` → `a100`).
pub fn gpu_class(name: &str) -> String {
    name.split('-').next().unwrap_or(name).to_string()
}

/// ZeRO band: stages 0 and 1 keep whole parameters, 2 shards gradients,
/// 3 gathers parameters per micro-batch.
pub fn zero_band(zero: u8) -> &'static str {
    match zero {
        0 | 1 => "0–1",
        2 => "2",
        _ => "3",
    }
}

/// Micro-batch band: the pipeline bubble and the per-micro-batch
/// collectives of ZeRO-2/3 scale with m.
pub fn micro_batch_band(m: u64) -> &'static str {
    match m {
        0..=7 => "m < 8",
        8..=63 => "8 ≤ m < 64",
        _ => "m ≥ 64",
    }
}

/// Sequence band of a sequence length: attention's share of the step and
/// the long-context kernels and CP exchanges grow with it, and the
/// published runs cluster at 2–8K, with torchtitan's CP runs at 32–256K.
pub fn seq_band(s: u64) -> &'static str {
    match s {
        0..=8192 => "s ≤ 8k",
        8193..=32768 => "8k < s ≤ 32k",
        _ => "s > 32k",
    }
}

/// Scale band of a GPU count.
pub fn scale_band(n: u64) -> &'static str {
    match n {
        0..=64 => "≤64",
        65..=512 => "65–512",
        513..=4096 => "513–4096",
        _ => ">4096",
    }
}

/// One measured run: its regime and the signed throughput error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// Row id.
    pub id: String,
    /// Its regime.
    pub regime: Regime,
    /// Predicted / measured throughput − 1.
    pub error: f64,
}

/// The best measured MFU of a GPU class and precision: the envelope no
/// plan should exceed by more than [`ENVELOPE_MARGIN`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Best {
    /// GPU class.
    pub gpu: String,
    /// Precision class.
    pub precision: &'static str,
    /// Measured model-FLOPs MFU against the dense bf16 peak.
    pub mfu: f64,
    /// The run that measured it.
    pub id: String,
    /// The best measured hardware-FLOPs utilisation (HFU: recomputed
    /// forward passes counted), against the same peak: a run's measured
    /// MFU times its priced HFU/MFU ratio, which is FLOP accounting only
    /// (1 without recompute, about 4/3 with full recompute).
    pub hfu: f64,
    /// The run that measured it.
    pub hfu_id: String,
}

/// How far above the best measured MFU of its class a plan may be
/// predicted before it is called implausible: 3 points.
pub const ENVELOPE_MARGIN: f64 = 0.03;

/// The measured runs, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// Every predicted row with a throughput comparison.
    pub runs: Vec<Measured>,
    /// The best measured MFU per GPU class and precision (rows counted in
    /// model FLOPs only: hardware-FLOPs figures include the recompute).
    pub best: Vec<Best>,
}

/// A plan's predicted MFU and HFU against the measured envelope of its
/// class.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Envelope {
    /// The best measured MFU of the plan's GPU class and precision.
    pub record_mfu: f64,
    /// The run that measured it.
    pub record_id: String,
    /// The plan's predicted MFU.
    pub predicted_mfu: f64,
    /// The best measured HFU of the same runs ([`Best::hfu`]); 0 in a
    /// plan file written before it was recorded.
    #[serde(default)]
    pub record_hfu: f64,
    /// The run that measured it.
    #[serde(default)]
    pub record_hfu_id: String,
    /// The plan's predicted HFU.
    #[serde(default)]
    pub predicted_hfu: f64,
    /// Predicted above the record by more than [`ENVELOPE_MARGIN`], in MFU
    /// or in HFU (a recompute plan keeps the GPU busier than its MFU says:
    /// no measured run kept it busier than the HFU record).
    pub implausible: bool,
    /// The record is of the plan's own GPU architecture (`false`: no run
    /// of the architecture is measured in the precision, so the best of any
    /// GPU).
    #[serde(default = "yes")]
    pub same_class: bool,
}

impl Envelope {
    /// The envelope of the same record for a plan predicted at `mfu` and
    /// `hfu`.
    pub fn set_predicted(&mut self, mfu: f64, hfu: f64) {
        self.predicted_mfu = mfu;
        self.predicted_hfu = hfu;
        self.implausible =
            mfu > self.record_mfu + ENVELOPE_MARGIN || hfu > self.record_hfu + ENVELOPE_MARGIN;
    }
}

fn yes() -> bool {
    true
}

/// How well a plan's regime is validated.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Trust {
    /// Measured runs of exactly this regime.
    pub runs: usize,
    /// Their median |error| (`None` when there are none).
    pub median_abs: Option<f64>,
    /// Their largest |error|.
    pub max_abs: Option<f64>,
    /// The runs of the regime, or (extrapolated) the nearest ones.
    pub nearest: Vec<String>,
    /// When extrapolated: the dimensions no nearest run shares.
    pub extrapolated: Option<String>,
    /// How many regime dimensions ([`Regime::dims`], nine) the nearest
    /// measured run differs in: 0 when a run of exactly this regime is
    /// measured. Inside a tie group the ranking puts the plan nearer to a
    /// measurement first ([`crate::ranking`]).
    #[serde(default)]
    pub distance: usize,
    /// The predicted MFU against the best measured one of its class, when
    /// one is measured.
    pub envelope: Option<Envelope>,
}

impl Trust {
    /// Short form for a table column: `±4% (31)`, `extrap.`, or
    /// `implausible` above the measured envelope.
    pub fn short(&self) -> String {
        if self.envelope.as_ref().is_some_and(|e| e.implausible) {
            return "implausible".into();
        }
        match self.median_abs {
            Some(m) if self.extrapolated.is_none() => {
                format!("±{:.0}% ({})", 100.0 * m, self.runs)
            }
            _ => "extrap.".into(),
        }
    }

    /// [`Trust::short`] with, for an extrapolated plan, how many regime
    /// dimensions the nearest measured run differs in: what the ranking
    /// orders extrapolated plans of one tie group by.
    pub fn standing(&self) -> String {
        let short = self.short();
        if short == "extrap." {
            let n = self.distance;
            format!(
                "extrap., {n} dimension{} from the nearest measured run",
                if n == 1 { "" } else { "s" }
            )
        } else {
            short
        }
    }

    /// A sentence: the band and its runs, or what no run covers, and the
    /// envelope when the plan is above it.
    pub fn sentence(&self) -> String {
        let band = self.band_sentence();
        match &self.envelope {
            Some(e) if e.implausible => {
                // Name the utilisation that is over its record by more
                // (MFU, or HFU for a recompute plan that keeps the GPU
                // busier than its MFU shows).
                let (what, predicted, record, id) =
                    if e.predicted_hfu - e.record_hfu > e.predicted_mfu - e.record_mfu {
                        ("HFU", e.predicted_hfu, e.record_hfu, &e.record_hfu_id)
                    } else {
                        ("MFU", e.predicted_mfu, e.record_mfu, &e.record_id)
                    };
                format!(
                    "{band}; implausible: predicted {what} {:.1}% is {:.1} points above the best measured on {}, {:.1}% ({})",
                    100.0 * predicted,
                    100.0 * (predicted - record),
                    if e.same_class {
                        "this GPU architecture"
                    } else {
                        "any GPU (none of this architecture is measured in this precision)"
                    },
                    100.0 * record,
                    id
                )
            }
            _ => band,
        }
    }

    fn band_sentence(&self) -> String {
        let list = |ids: &[String]| {
            let shown: Vec<&str> = ids.iter().take(6).map(String::as_str).collect();
            let more = ids.len().saturating_sub(6);
            if more > 0 {
                format!("{} and {more} more", shown.join(", "))
            } else {
                shown.join(", ")
            }
        };
        match (&self.extrapolated, self.median_abs, self.max_abs) {
            (None, Some(m), Some(x)) => format!(
                "validated: {} measured run(s) of this regime, |error| median {:.1}%, max {:.1}% ({})",
                self.runs,
                100.0 * m,
                100.0 * x,
                list(&self.nearest)
            ),
            // "… together": each nearest run misses another of these, so
            // no run has them all; else every nearest run differs in each
            // named dimension (runs with any one of them may exist).
            (Some(why), _, _) if why.ends_with(" together") => format!(
                "extrapolated: no measured run with {why}; nearest: {}",
                list(&self.nearest)
            ),
            (Some(why), _, _) => format!(
                "extrapolated: no measured run of this regime; the nearest, {} dimension{} away, all differ from it in {why}{}: {}",
                self.distance,
                if self.distance == 1 { "" } else { "s" },
                // Each also differs in others, not the same for all.
                if why.matches(", ").count() + 1 < self.distance {
                    " (and each in others)"
                } else {
                    ""
                },
                list(&self.nearest)
            ),
            _ => "extrapolated: no measured run".into(),
        }
    }
}

impl Record {
    /// The shipped table priced with the shipped profiles (once per
    /// process).
    pub fn shipped() -> &'static Record {
        static RECORD: OnceLock<Record> = OnceLock::new();
        RECORD.get_or_init(|| {
            Catalog::shipped()
                .ok()
                .and_then(|cat| {
                    let t =
                        validate::read_table(TABLE, std::path::Path::new("published-dev-v2.csv"))
                            .ok()?;
                    Some(Record::of(&t, &cat))
                })
                .unwrap_or(Record {
                    runs: Vec::new(),
                    best: Vec::new(),
                })
        })
    }

    /// The rows of `table` priced against `cat`.
    pub fn of(table: &validate::Table, cat: &Catalog) -> Record {
        let mut runs = Vec::new();
        let mut best: Vec<Best> = Vec::new();
        for row in &table.rows {
            let Ok(case) = validate::build_case(row, cat, None) else {
                continue;
            };
            let (r, e) = validate::compare(&case);
            let Some(error) = r.speed_error else {
                continue;
            };
            let precision = precision_class(case.job.precision);
            let model_flops = matches!(
                case.convention,
                validate::FlopConvention::Megatron | validate::FlopConvention::Korthikanti
            );
            if let (true, Some((tf, _))) = (model_flops, case.measured_tflops()) {
                let mfu = tf / case.gpu.peak_tflops_bf16;
                let hfu = if e.mfu > 0.0 {
                    mfu * e.hfu / e.mfu
                } else {
                    mfu
                };
                let gpu = case.gpu.measured_class();
                match best
                    .iter_mut()
                    .find(|b| b.gpu == gpu && b.precision == precision)
                {
                    Some(b) => {
                        if mfu > b.mfu {
                            b.mfu = mfu;
                            b.id = row.id.clone();
                        }
                        if hfu > b.hfu {
                            b.hfu = hfu;
                            b.hfu_id = row.id.clone();
                        }
                    }
                    None => best.push(Best {
                        gpu,
                        precision,
                        mfu,
                        id: row.id.clone(),
                        hfu,
                        hfu_id: row.id.clone(),
                    }),
                }
            }
            let regime = Regime {
                precision,
                deepspeed_2021: deepspeed_2021(&case.job, &case.layout),
                rowwise_table: crate::cost::precision::torchao_rowwise_measured(
                    &case.gpu, &case.job,
                ),
                ..Regime::of(
                    &case.gpu,
                    &case.layout,
                    e.micro_batches,
                    row.num_gpus,
                    case.model.moe.is_some(),
                    case.job.seq_len,
                )
            };
            runs.push(Measured {
                id: row.id.clone(),
                regime,
                error,
            });
        }
        Record { runs, best }
    }

    /// The envelope of a plan in `regime` predicted at `mfu` and `hfu`: the best
    /// measured MFU in the precision on GPUs of its architecture (compute
    /// capability: H100, H200 and H800 are one, sm_90; the share of peak a
    /// kernel reaches is the SM's, and H200's larger, faster HBM only
    /// raises it), or, when no GPU of the architecture has a measured run
    /// in the precision (bf16 on Blackwell today), the best of any GPU in
    /// the precision: no measured run anywhere has reached a higher share
    /// of its GPU's peak.
    pub fn envelope(&self, regime: &Regime, mfu: f64, hfu: f64) -> Option<Envelope> {
        let arch = |gpu: &str| crate::generate::plan_file::compute_capability(gpu);
        let same_arch = |b: &&Best| match (arch(&b.gpu), arch(&regime.gpu)) {
            (Some(x), Some(y)) => x == y,
            _ => b.gpu == regime.gpu,
        };
        self.best
            .iter()
            .filter(|b| b.precision == regime.precision)
            .filter(same_arch)
            .max_by(|a, b| a.mfu.total_cmp(&b.mfu))
            .map(|b| (b, true))
            .or_else(|| {
                self.best
                    .iter()
                    .filter(|b| b.precision == regime.precision)
                    .max_by(|a, b| a.mfu.total_cmp(&b.mfu))
                    .map(|b| (b, false))
            })
            .map(|(b, same_class)| {
                let mut e = Envelope {
                    record_mfu: b.mfu,
                    record_id: b.id.clone(),
                    predicted_mfu: mfu,
                    record_hfu: b.hfu,
                    record_hfu_id: b.hfu_id.clone(),
                    predicted_hfu: hfu,
                    implausible: false,
                    same_class,
                };
                e.set_predicted(mfu, hfu);
                e
            })
    }

    /// The trust of a plan in `regime` (the rule in the module docs).
    pub fn trust(&self, regime: &Regime) -> Trust {
        // Only rows priced as the plan is (rule 3 of the module docs).
        let priced_alike = || {
            self.runs
                .iter()
                .filter(|m| m.regime.pricing() == regime.pricing())
        };
        let exact: Vec<&Measured> = priced_alike().filter(|m| m.regime == *regime).collect();
        if !exact.is_empty() {
            let abs: Vec<f64> = exact.iter().map(|m| m.error.abs()).collect();
            return Trust {
                runs: exact.len(),
                median_abs: Some(validate::median(&abs)),
                max_abs: Some(abs.iter().copied().fold(0.0, f64::max)),
                nearest: exact.iter().map(|m| m.id.clone()).collect(),
                extrapolated: None,
                distance: 0,
                envelope: None,
            };
        }
        let best = priced_alike()
            .map(|m| m.regime.shared(regime))
            .max()
            .unwrap_or(0);
        let nearest: Vec<&Measured> = priced_alike()
            .filter(|m| m.regime.shared(regime) == best)
            .collect();
        // The plan's dimensions, phrased, in which every nearest run
        // differs from it (`every`), or some nearest run does.
        let differing = |every: bool| -> Vec<String> {
            regime
                .dims()
                .iter()
                .enumerate()
                .filter(|(i, d)| {
                    let mut differs = nearest.iter().map(|m| m.regime.dims()[*i].1 != d.1);
                    if every {
                        differs.all(|x| x)
                    } else {
                        differs.any(|x| x)
                    }
                })
                .map(|(_, (dim, value))| Regime::phrase(dim, value))
                .collect()
        };
        // The plan's dimensions that no nearest run shares.
        let missing = differing(true);
        Trust {
            runs: 0,
            median_abs: None,
            max_abs: None,
            nearest: nearest.iter().map(|m| m.id.clone()).collect(),
            envelope: None,
            distance: DIMS - best,
            extrapolated: Some(if missing.is_empty() {
                // Each nearest run misses a different dimension: name them.
                format!("{} together", differing(false).join(" and "))
            } else {
                missing.join(", ")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense 16-bit regime on ≤ 64 GPUs of `gpu` with ZeRO 0–1, no CP,
    /// m ≥ 64 and today's pricing.
    fn plain(gpu: &str, recompute: Recompute) -> Regime {
        Regime {
            gpu: gpu.into(),
            precision: "16-bit",
            zero: "0–1",
            cp: false,
            moe: false,
            recompute,
            micro_batches: "m ≥ 64",
            scale: "≤64",
            seq: "s ≤ 8k",
            deepspeed_2021: false,
            rowwise_table: false,
        }
    }

    #[test]
    fn bands() {
        assert_eq!(zero_band(1), "0–1");
        assert_eq!(zero_band(3), "3");
        assert_eq!(micro_batch_band(128), "m ≥ 64");
        assert_eq!(micro_batch_band(8), "8 ≤ m < 64");
        assert_eq!(scale_band(64), "≤64");
        assert_eq!(seq_band(8192), "s ≤ 8k");
        assert_eq!(seq_band(8193), "8k < s ≤ 32k");
        assert_eq!(seq_band(32768), "8k < s ≤ 32k");
        assert_eq!(seq_band(262_144), "s > 32k");
        assert_eq!(gpu_class("a100-80g"), "a100");
    }

    /// The envelope is the best run of the plan's architecture: an H200
    /// plan (sm_90) is held to the best Hopper record even when the H200
    /// runs measured less; A100 (sm_80) keeps its own; with no run of the
    /// architecture in the precision (Blackwell bf16) the best of any GPU,
    /// flagged as borrowed.
    #[test]
    fn the_envelope_is_the_architectures_best() {
        let best = |gpu: &str, precision: &'static str, mfu: f64, id: &str| Best {
            gpu: gpu.into(),
            precision,
            mfu,
            id: id.into(),
            hfu: mfu,
            hfu_id: id.into(),
        };
        let record = Record {
            runs: vec![],
            best: vec![
                best("h100", "16-bit", 0.494, "H100-RUN"),
                best("h200", "16-bit", 0.359, "H200-RUN"),
                best("a100", "16-bit", 0.563, "A100-RUN"),
                best("b200", "fp8", 0.70, "B200-FP8"),
            ],
        };
        let regime = |gpu: &str| plain(gpu, Recompute::None);
        // H200 at 45%: under the Hopper record 49.4% + 3 (it was over the
        // H200 runs' 35.9% + 3).
        let h200 = record.envelope(&regime("h200"), 0.45, 0.45).unwrap();
        assert_eq!(
            (h200.record_id.as_str(), h200.implausible, h200.same_class),
            ("H100-RUN", false, true)
        );
        let a100 = record.envelope(&regime("a100"), 0.60, 0.60).unwrap();
        assert_eq!(
            (a100.record_id.as_str(), a100.implausible, a100.same_class),
            ("A100-RUN", true, true)
        );
        // B200 bf16: no sm_100 16-bit run; the best of any GPU, borrowed.
        let b200 = record.envelope(&regime("b200"), 0.60, 0.60).unwrap();
        assert_eq!(
            (b200.record_id.as_str(), b200.implausible, b200.same_class),
            ("A100-RUN", true, false)
        );
    }

    /// A full-recompute plan keeps the GPU busier than its MFU says: on
    /// the shipped A100 record, a plan at 47.0% MFU and 62.5% HFU is under
    /// the MFU record plus 3 points but over the HFU record plus 3, so it
    /// is implausible and the sentence names HFU. The A100 HFU record is
    /// Korthikanti et al. 2022's 1T run with selective recompute (KOR22-4b:
    /// MFU 56.3%, the paper's HFU 57.0%; priced with its FLOP ratio,
    /// 56.3% · 1.0022 = 56.4%); their full-recompute rows give step times,
    /// not TFLOP/s, so they set no record.
    #[test]
    fn a_recompute_plan_over_the_hfu_record_is_implausible() {
        let record = Record::shipped();
        let a100 = record
            .best
            .iter()
            .find(|b| b.gpu == "a100" && b.precision == "16-bit")
            .unwrap();
        assert_eq!(
            (a100.id.as_str(), a100.hfu_id.as_str()),
            ("KOR22-4b", "KOR22-4b")
        );
        assert!(a100.hfu > 0.563 && a100.hfu < 0.570, "{}", a100.hfu);
        let regime = plain("a100", Recompute::Full);
        let e = record.envelope(&regime, 0.470, 0.625).unwrap();
        assert!(e.implausible && 0.470 < e.record_mfu + ENVELOPE_MARGIN);
        let t = Trust {
            envelope: Some(e),
            ..record.trust(&regime)
        };
        assert!(
            t.sentence().contains("implausible: predicted HFU 62.5%"),
            "{}",
            t.sentence()
        );
        // The same MFU without recompute (HFU = MFU) is plausible.
        assert!(!record.envelope(&regime, 0.470, 0.470).unwrap().implausible);
    }

    /// `distance` counts the dimensions the nearest run differs in: a
    /// record with one run (a100, 16-bit, ZeRO 0–1, no CP, dense, no
    /// recompute, m ≥ 64, ≤64 GPUs): that regime is 0 away (validated), the
    /// same with ZeRO 3 is 1, with ZeRO 3, CP and full recompute 3.
    #[test]
    fn distance_counts_the_dimensions_the_nearest_run_differs_in() {
        let base = plain("a100", Recompute::None);
        let record = Record {
            runs: vec![Measured {
                id: "RUN".into(),
                regime: base.clone(),
                error: 0.04,
            }],
            best: vec![],
        };
        assert_eq!(record.trust(&base).distance, 0);
        let zero3 = Regime {
            zero: "3",
            ..base.clone()
        };
        assert_eq!(record.trust(&zero3).distance, 1);
        let far = Regime {
            cp: true,
            recompute: Recompute::Full,
            ..zero3
        };
        let t = record.trust(&far);
        assert_eq!((t.distance, t.nearest), (3, vec!["RUN".to_string()]));
    }

    /// `shared` compares values; the phrases of `dims` are what the notes
    /// print. Over every pair of the shipped measured runs' regimes (and
    /// each with a copy differing in every dimension) both count alike.
    #[test]
    fn shared_counts_the_dims_alike() {
        let by_phrase = |a: &Regime, b: &Regime| {
            a.dims()
                .iter()
                .zip(b.dims().iter())
                .filter(|(x, y)| x.1 == y.1)
                .count()
        };
        let runs = &Record::shipped().runs;
        assert!(runs.len() > 100, "{} runs", runs.len());
        let mut regimes: Vec<Regime> = runs.iter().map(|m| m.regime.clone()).collect();
        regimes.push(Regime {
            gpu: "x".into(),
            precision: "nvfp4",
            zero: "2",
            cp: !regimes[0].cp,
            moe: !regimes[0].moe,
            recompute: Recompute::Selective,
            micro_batches: "m < 8",
            scale: ">4096",
            seq: if regimes[0].seq == "s > 32k" {
                "s ≤ 8k"
            } else {
                "s > 32k"
            },
            deepspeed_2021: !regimes[0].deepspeed_2021,
            rowwise_table: !regimes[0].rowwise_table,
        });
        let mut differing = 0;
        for a in &regimes {
            for b in &regimes {
                let n = a.shared(b);
                assert_eq!(n, by_phrase(a, b), "{a:?} / {b:?}");
                differing += usize::from(n < 9);
            }
        }
        assert!(differing > 1000);
    }
}
