//! Reports: the plain data that renderers print. Built from the search and
//! the cost model; serialisable as JSON with every field.

use serde::Serialize;

use crate::checkpoint::Outlook;
use crate::cost::breakdown::Source;
use crate::cost::{self, Evaluation, Problem, RankCost};
use crate::explain::{Fixes, Gap, WhyNot};
use crate::layout::Layout;
use crate::ranking::{self, Bands, RankBy, Ranked};
use crate::rules::{self, Policy, Violation};
use crate::search::{Candidate, SearchResult};
use crate::spec::GIB;
use crate::trust::{Record, Regime, Trust};

/// [`Context::zero3_pricing`] under `--deepspeed-2021`.
pub const DEEPSPEED_2021_PRICING: &str =
    "DeepSpeed 0.3 (2021): one synchronous collective per tensor (--deepspeed-2021)";

/// What was planned: names and the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Context {
    /// Model name.
    pub model: String,
    /// Cluster name.
    pub cluster: String,
    /// GPU name.
    pub gpu: String,
    /// GPUs used, N.
    pub gpus: u64,
    /// When the job takes fewer GPUs than the cluster has because of the
    /// profile's `segment` (GB200 NVL72: 16 of each rack's 18 trays,
    /// [`crate::spec::Cluster::job_gpus`]): the cluster's GPUs and the
    /// segment; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment_of: Option<SegmentOf>,
    /// Global batch, sequences.
    pub global_batch: u64,
    /// Sequence length, tokens.
    pub seq_len: u64,
    /// Precision recipe.
    pub recipe: String,
    /// Usable memory per GPU, GiB.
    pub usable_gib: f64,
    /// HBM per GPU, GiB (usable plus the profile's reserve and the
    /// headroom).
    pub memory_gib: f64,
    /// Memory kept free beyond the profile's reserve (`--headroom-gib`),
    /// GiB; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom_gib: Option<f64>,
    /// Dense bf16 peak used for MFU, TFLOP/s per GPU.
    pub peak_tflops: f64,
    /// Precision of the linear GEMMs (`bf16`, `fp8`, `mxfp8`, `nvfp4`).
    pub precision: String,
    /// The precision recipe in words, e.g. `fp8 linears (delayed scaling,
    /// te kernels)`; empty for bf16.
    pub precision_note: String,
    /// Dense peak of that precision, TFLOP/s per GPU (the denominator of
    /// `mfu_own_peak`; the bf16 peak for bf16).
    pub precision_peak_tflops: f64,
    /// FLOP convention of the reported TFLOP/s and MFU.
    pub flop_convention: &'static str,
    /// How ZeRO-3 is priced when not as today's engines run it: DeepSpeed
    /// 0.3's per-tensor collectives under `--deepspeed-2021`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero3_pricing: Option<&'static str>,
    /// MoE: the expert routing priced, in words ([`moe_routing_note`]);
    /// absent for a dense model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_routing: Option<String>,
}

/// A job on fewer GPUs than its cluster because of the profile's
/// `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SegmentOf {
    /// GPUs of the cluster.
    pub cluster_gpus: u64,
    /// Hosts a job takes from each NVLink domain.
    pub hosts_per_domain: u32,
}

impl Context {
    /// Context of a problem.
    pub fn of(pr: &Problem) -> Context {
        Context {
            model: pr.model.name.clone(),
            cluster: pr.cluster.name.clone(),
            gpu: pr.gpu.name.clone(),
            gpus: pr.world,
            segment_of: pr
                .cluster
                .segment
                .filter(|_| pr.world == pr.cluster.job_gpus() && pr.world < pr.cluster.total_gpus())
                .map(|hosts| SegmentOf {
                    cluster_gpus: pr.cluster.total_gpus(),
                    hosts_per_domain: hosts,
                }),
            global_batch: pr.job.global_batch,
            seq_len: pr.job.seq_len,
            recipe: pr.job.recipe_name.to_string(),
            usable_gib: pr.usable_bytes() / GIB,
            memory_gib: pr.gpu.memory_gib,
            headroom_gib: (pr.job.headroom_gib > 0.0).then_some(pr.job.headroom_gib),
            peak_tflops: pr.gpu.peak_tflops_bf16,
            precision: pr.job.precision.to_string(),
            precision_note: precision_note(pr.job),
            precision_peak_tflops: crate::cost::precision::dense_peak_tflops(
                pr.gpu,
                pr.job.precision,
            ),
            flop_convention: if pr.model.moe.is_some() {
                "model FLOPs (Megatron num_floating_point_operations; MoE counts active parameters only; recompute not counted)"
            } else {
                "model FLOPs (Megatron num_floating_point_operations; recompute not counted)"
            },
            zero3_pricing: pr
                .job
                .engine_memory
                .deepspeed_zero3
                .is_some_and(|d| d.per_tensor_sync)
                .then_some(DEEPSPEED_2021_PRICING),
            moe_routing: pr.model.moe.as_ref().map(|_| moe_routing_note(pr.job)),
        }
    }
}

/// The expert routing an MoE job is priced with, in words: the busiest
/// expert rank's load over the mean (`--moe-imbalance`, 1 by default: the
/// balance that published MoE benchmarks force; the random-routing floor of
/// each layout's EP group is added, `cost::layer::moe_load`), and the
/// capacity factor when tokens are dropped.
pub fn moe_routing_note(job: &crate::spec::Job) -> String {
    let skew = if job.moe_imbalance == 1.0 {
        "MoE routing balanced (--moe-imbalance 1, as benchmarks that force balance, plus the random-routing floor of each EP group; set it for real routing)".to_string()
    } else {
        format!(
            "MoE routing skew {:.2} (--moe-imbalance: the busiest expert rank's load over the mean)",
            job.moe_imbalance
        )
    };
    match job.moe_capacity_factor {
        Some(c) => format!("{skew}, capacity factor {c} (tokens beyond it dropped)"),
        None => skew,
    }
}

/// The low-precision recipe of `job` in words (empty for bf16):
/// `fp8 linears (delayed scaling, te kernels)`.
pub fn precision_note(job: &crate::spec::Job) -> String {
    use crate::spec::Precision;
    match job.precision {
        Precision::Bf16 => String::new(),
        Precision::Fp8 => format!(
            "fp8 linears ({} scaling, {} kernels{}{})",
            job.fp8_recipe,
            job.fp8_kernels,
            if job.fp8_param_gather {
                ", fp8 parameter gathers"
            } else {
                ""
            },
            if job.fp8_dispatch {
                ", fp8 MoE dispatch"
            } else {
                ""
            }
        ),
        p => format!(
            "{p} linears ({} kernels{}{})",
            job.fp8_kernels,
            if job.fp8_param_gather {
                ", narrow parameter gathers"
            } else {
                ""
            },
            if job.fp8_dispatch {
                ", narrow MoE dispatch"
            } else {
                ""
            }
        ),
    }
}

/// One row of the ranked table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// 1-based rank.
    pub rank: usize,
    /// Tie group (1-based): plans whose error bands overlap share one
    /// ([`crate::ranking`]); 0 where no ranking was made.
    pub group: usize,
    /// The layout.
    pub layout: Layout,
    /// Micro-batches per step, m.
    pub micro_batches: u64,
    /// Peak memory of the worst rank, GiB.
    pub peak_gib: f64,
    /// Step time, seconds.
    pub step_s: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Model TFLOP/s per GPU.
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilisation.
    pub mfu: f64,
    /// Hardware FLOPs utilisation.
    pub hfu: f64,
    /// Bubble share of the step.
    pub bubble: f64,
    /// Full prices.
    pub eval: Evaluation,
    /// How well its regime is validated ([`crate::trust`]); set by the
    /// reports that know the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust: Option<Trust>,
}

impl Row {
    /// Row for candidate `c` at 1-based `rank`.
    pub fn of(rank: usize, c: &Candidate) -> Row {
        let e = &c.eval;
        Row {
            rank,
            group: 0,
            layout: c.layout.clone(),
            micro_batches: e.micro_batches,
            peak_gib: e.peak_bytes / GIB,
            step_s: e.time.step,
            tokens_per_s: e.tokens_per_s,
            tflops_per_gpu: e.tflops_per_gpu,
            mfu: e.mfu,
            hfu: e.hfu,
            bubble: e.bubble_fraction,
            eval: *e,
            trust: None,
        }
    }

    /// The row with its trust record for problem `pr`.
    pub fn with_trust(mut self, pr: &Problem) -> Row {
        self.trust = Some(trust_of(pr, &self.layout, &self.eval));
        self
    }
}

/// The rows of `top` (the search's best, in its order) with their trust,
/// ranked `by` with tie groups ([`crate::ranking::order`]).
pub fn ranked_rows(pr: &Problem, pool: &[Candidate], by: RankBy, limit: usize) -> Vec<Row> {
    ranking_of(pr, pool, by, limit).rows
}

/// The first `limit` plans of `pool` in the ranking ([`ranking::order`])
/// and how many plans of the whole pool are within the first one's band.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// The first `limit` rows, ranked.
    pub rows: Vec<Row>,
    /// Plans of the pool within the first row's error band
    /// ([`within_band`]).
    pub within_winner_band: Option<usize>,
    /// The plan predicted fastest, with its row in the ranking, when the
    /// ranking puts another plan first.
    pub fastest: Option<Row>,
    /// The fastest plan not above the measured envelope, with its row,
    /// when the ranking puts another plan first and it is not `fastest`.
    pub fastest_plausible: Option<Row>,
    /// Plans of the pool predicted above the measured envelope of their
    /// GPU and precision ([`crate::trust::Envelope::implausible`]).
    pub implausible: usize,
}

/// The pool's plans as the ranking sees them ([`Ranked`]), with the trust
/// record of each regime, for ranking the pool again after some of its
/// plans change ([`RankedPool::replace`]).
pub struct RankedPool {
    plans: Vec<Ranked>,
    /// Each regime of the pool with its trust record.
    regimes: Vec<(Regime, Trust)>,
    /// The regime of each plan, an index into `regimes`.
    regime_at: Vec<usize>,
    bands: Bands,
}

impl RankedPool {
    /// The plans of `pool`.
    pub fn of(pr: &Problem, pool: &[Candidate]) -> RankedPool {
        let bands = Bands::of(Record::shipped());
        let record = Record::shipped();
        // One trust record per regime (a search holds a handful of regimes and
        // thousands of plans); the envelope depends on each plan's MFU.
        // A plan's trust is its regime's with its own envelope; it is put
        // together in place for the ranking and cloned only for the rows
        // printed (cloning it for every plan cost milliseconds).
        let mut regimes: Vec<(Regime, Trust)> = Vec::new();
        let mut regime_at: Vec<usize> = Vec::with_capacity(pool.len());
        // A plan's regime depends on its layout and prices only through
        // `RegimeKey` (`regime_of`): the regime is built once per key, not once
        // per plan (its GPU class is a string).
        type RegimeKey = (u8, bool, crate::layout::Recompute, u64);
        let mut keys: Vec<(RegimeKey, usize)> = Vec::new();
        let plans: Vec<Ranked> = pool
            .iter()
            .map(|c| {
                let l = &c.layout;
                let key = (l.zero, l.cp > 1, l.recompute, c.eval.micro_batches);
                let i = match keys.iter().find(|(k, _)| *k == key) {
                    Some(&(_, i)) => i,
                    None => {
                        let regime = regime_of(pr, l, &c.eval);
                        let i = match regimes.iter().position(|(r, _)| *r == regime) {
                            Some(i) => i,
                            None => {
                                let t = record.trust(&regime);
                                regimes.push((regime, t));
                                regimes.len() - 1
                            }
                        };
                        keys.push((key, i));
                        i
                    }
                };
                regime_at.push(i);
                let (regime, trust) = &mut regimes[i];
                // The envelope's record depends on the regime alone: once set,
                // only the plan's MFU and HFU are refreshed in place (as
                // `Record::envelope` would set them, without a new record id).
                match &mut trust.envelope {
                    Some(e) => e.set_predicted(c.eval.mfu, c.eval.hfu),
                    None => trust.envelope = record.envelope(regime, c.eval.mfu, c.eval.hfu),
                }
                Ranked::of(c.eval.tokens_per_s, trust, &bands)
            })
            .collect();
        RankedPool {
            plans,
            regimes,
            regime_at,
            bands,
        }
    }

    /// Plan `j` is now `c`, the same layout with another stage split: its
    /// regime (which the split does not enter, `regime_of`) stays, its
    /// speed and envelope follow `c`.
    pub fn replace(&mut self, j: usize, c: &Candidate) {
        let (regime, trust) = &mut self.regimes[self.regime_at[j]];
        match &mut trust.envelope {
            Some(e) => e.set_predicted(c.eval.mfu, c.eval.hfu),
            None => {
                trust.envelope = Record::shipped().envelope(regime, c.eval.mfu, c.eval.hfu);
            }
        }
        self.plans[j] = Ranked::of(c.eval.tokens_per_s, trust, &self.bands);
    }

    /// The pool's indices in the ranking's order `by` ([`ranking_of`]'s
    /// rows without building them).
    pub fn order(&self, by: RankBy) -> Vec<usize> {
        ranking::order(&self.plans, by, usize::MAX)
            .into_iter()
            .map(|(j, _)| j)
            .collect()
    }
}

/// Rank every plan of `pool` (the search's valid layouts,
/// [`crate::search::SearchResult::pool`]) and keep the first `limit`: the
/// ranking is the same whatever `limit` is, so row K of `--top N` is row K
/// for every N ≥ K.
pub fn ranking_of(pr: &Problem, pool: &[Candidate], by: RankBy, limit: usize) -> Ranking {
    let record = Record::shipped();
    let RankedPool {
        plans,
        regimes,
        regime_at,
        ..
    } = RankedPool::of(pr, pool);
    let trust_of = |j: usize| {
        let (regime, base) = &regimes[regime_at[j]];
        Trust {
            envelope: record.envelope(regime, pool[j].eval.mfu, pool[j].eval.hfu),
            ..base.clone()
        }
    };
    let order = ranking::order(&plans, by, usize::MAX);
    let row = |i: usize, j: usize, group: usize| Row {
        group,
        trust: Some(trust_of(j)),
        ..Row::of(i + 1, &pool[j])
    };
    let rows: Vec<Row> = order
        .iter()
        .take(limit)
        .enumerate()
        .map(|(i, &(j, group))| row(i, j, group))
        .collect();
    let fastest = (0..pool.len())
        .min_by(|&a, &b| crate::search::better(&pool[a], &pool[b]).then(a.cmp(&b)))
        .and_then(|f| {
            let i = order.iter().position(|&(j, _)| j == f)?;
            (i > 0).then(|| row(i, f, order[i].1))
        });
    let plausible = (0..pool.len())
        .filter(|&j| !plans[j].implausible)
        .min_by(|&a, &b| crate::search::better(&pool[a], &pool[b]).then(a.cmp(&b)));
    let first_tokens = order.first().map(|&(j, _)| pool[j].eval.tokens_per_s);
    let fastest_plausible = plausible.and_then(|f| {
        let i = order.iter().position(|&(j, _)| j == f)?;
        (i > 0
            && first_tokens.is_some_and(|t| pool[f].eval.tokens_per_s > t)
            && fastest.as_ref().is_none_or(|x| x.rank != i + 1))
        .then(|| row(i, f, order[i].1))
    });
    let within_winner_band = rows
        .first()
        .and_then(band_floor)
        .map(|floor| pool.iter().filter(|c| c.eval.tokens_per_s >= floor).count());
    Ranking {
        rows,
        within_winner_band,
        fastest,
        fastest_plausible,
        implausible: plans.iter().filter(|p| p.implausible).count(),
    }
}

/// How many of `rows` (ranked, best first) are within the first row's
/// error band: predicted at least `(1 − b)` of its tokens/s with `b` its
/// regime's median |error|. `None` when the first row has no band.
pub fn within_band(rows: &[Row]) -> Option<usize> {
    let floor = band_floor(rows.first()?)?;
    Some(rows.iter().filter(|r| r.tokens_per_s >= floor).count())
}

/// The lower edge of `first`'s error band, `t·(1 − b)`, when its regime is
/// validated (`None` when extrapolated).
fn band_floor(first: &Row) -> Option<f64> {
    let band = first
        .trust
        .as_ref()
        .filter(|t| t.extrapolated.is_none())?
        .median_abs?;
    Some(first.tokens_per_s * (1.0 - band))
}

/// The trust record of layout `l`, priced as `e`, on problem `pr`: its
/// regime's band and its MFU against the measured envelope.
pub fn trust_of(pr: &Problem, l: &Layout, e: &Evaluation) -> Trust {
    let regime = regime_of(pr, l, e);
    let record = Record::shipped();
    Trust {
        envelope: record.envelope(&regime, e.mfu, e.hfu),
        ..record.trust(&regime)
    }
}

/// The regime of layout `l`, priced as `e`, on problem `pr`.
///
/// It reads the layout and prices only through the ZeRO stage, whether C >
/// 1, the recompute mode and the micro-batch count (`ranking_of` keys its
/// regimes on these).
fn regime_of(pr: &Problem, l: &Layout, e: &Evaluation) -> Regime {
    Regime {
        precision: crate::trust::precision_class(pr.job.precision),
        deepspeed_2021: crate::trust::deepspeed_2021(pr.job, l),
        rowwise_table: cost::precision::torchao_rowwise_measured(pr.gpu, pr.job),
        ..Regime::of(
            pr.gpu,
            l,
            e.micro_batches,
            pr.world,
            pr.model.moe.is_some(),
            pr.job.seq_len,
        )
    }
}

/// Summary line of one rejection reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RejectionLine {
    /// Rule code.
    pub code: &'static str,
    /// Layouts rejected (first broken rule).
    pub count: u64,
    /// Best near-miss, described.
    pub near_miss: Option<String>,
    /// Its predicted tokens/s.
    pub near_miss_tokens_per_s: Option<f64>,
    /// No near-miss is named because an uneven stage split made it valid.
    pub near_miss_rescued: bool,
}

/// Everything `search` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchReport {
    /// What was planned.
    pub context: Context,
    /// Ranked rows.
    pub rows: Vec<Row>,
    /// Rejections per reason.
    pub rejections: Vec<RejectionLine>,
    /// Search counters (layouts considered, pruned, priced, valid, splits,
    /// wall time), flattened into the JSON object.
    #[serde(flatten)]
    pub stats: crate::search::Stats,
    /// Checkpoint size and interval of the winner, and its time to train
    /// the `--tokens` budget (the keys `checkpoint` and `time_to_train`).
    #[serde(flatten)]
    pub outlook: Option<Outlook>,
    /// Answer to `--why-not`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<WhyNot>,
    /// A nearby smaller GPU count that does better
    /// ([`crate::gpu_count::fewer_gpus`]); absent when none was found or
    /// none was probed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fewer_gpus: Option<crate::gpu_count::FewerGpus>,
    /// Halved GPU counts and what they keep, for a winner below 20% MFU
    /// with no better-factored neighbour ([`crate::gpu_count::scale_down`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_down: Option<crate::gpu_count::ScaleDown>,
    /// Why no layout was enumerated at all, when none was; or why none of
    /// the valid ones is listed, when `--target` runs none of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty_reason: Option<String>,
    /// Valid plans (all of them, listed or not) whose predicted throughput
    /// is within the winner's error band (at least `(1 − median |error|)`
    /// of the winner's), the winner included; `None` when the winner has
    /// no band (extrapolated).
    pub within_winner_band: Option<usize>,
    /// The plan predicted fastest, with its row in the ranking, when the
    /// ranking (tie groups, better-validated first) puts another plan
    /// first; absent when the fastest is row 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastest_predicted: Option<Row>,
    /// The fastest plan within the measured envelope (not implausible),
    /// with its row, when the ranking puts another plan first and it is
    /// not `fastest_predicted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastest_plausible: Option<Row>,
    /// Ranked plans predicted above the measured envelope of their GPU and
    /// precision (the `implausible` mark).
    pub implausible_ranked: usize,
}

impl SearchReport {
    /// Build the report of a finished search, its plans ranked by the
    /// default [`RankBy`].
    pub fn new(pr: &Problem, policy: &Policy, r: &SearchResult) -> SearchReport {
        SearchReport::ranked(pr, policy, r, RankBy::default(), usize::MAX)
    }

    /// Build the report of a finished search, its plans ranked `by`
    /// ([`ranking_of`] over [`SearchResult::pool`]), the first `limit`
    /// kept.
    pub fn ranked(
        pr: &Problem,
        policy: &Policy,
        r: &SearchResult,
        by: RankBy,
        limit: usize,
    ) -> SearchReport {
        let Ranking {
            rows,
            within_winner_band,
            fastest,
            fastest_plausible,
            implausible,
        } = ranking_of(pr, r.pool(), by, limit);
        let rejections = r
            .rejections
            .iter()
            .map(|rj| {
                let near = rj.near_miss.as_ref().map(|c| {
                    let why = rules::explain(pr, policy, &c.layout, memory_note(&c.eval))
                        .into_iter()
                        .find(|v| v.rule == rj.rule)
                        .map(|v| v.message)
                        .unwrap_or_default();
                    format!("{} — {}", c.layout.short(), why)
                });
                RejectionLine {
                    code: rj.rule.code(),
                    count: rj.count,
                    near_miss: near,
                    near_miss_tokens_per_s: rj
                        .near_miss
                        .as_ref()
                        .filter(|_| rj.rule.price_holds())
                        .map(|c| c.eval.tokens_per_s),
                    near_miss_rescued: rj.near_miss_rescued,
                }
            })
            .collect();
        SearchReport {
            context: Context::of(pr),
            rows,
            rejections,
            stats: r.stats,
            outlook: None,
            why_not: None,
            fewer_gpus: None,
            scale_down: None,
            empty_reason: r.empty_reason.clone(),
            within_winner_band,
            fastest_predicted: fastest,
            fastest_plausible,
            implausible_ranked: implausible,
        }
    }
}

/// Memory facts for [`rules::explain`] when the evaluation does not fit.
pub fn memory_note(e: &Evaluation) -> Option<(f64, f64, &'static str, f64)> {
    if e.fits() {
        None
    } else {
        let (part, bytes) = e.memory.dominant();
        Some((e.peak_bytes, e.usable_bytes, part.label(), bytes))
    }
}

/// One time part as `explain` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeLine {
    /// [`cost::TimePart::key`].
    pub part: &'static str,
    /// [`cost::TimePart::label`].
    pub label: &'static str,
    /// Seconds on the step's critical path.
    pub exposed_s: f64,
    /// Seconds the work takes, overlapped or not.
    pub total_s: f64,
    /// `total_s − exposed_s`: what overlap hid, seconds.
    pub hidden_s: f64,
    /// Where it is priced.
    pub source: Source,
}

/// One memory part, or a share inside one, as `explain` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryLine {
    /// [`cost::MemoryPart::key`] or [`cost::MemoryDetail::key`].
    pub part: &'static str,
    /// Its label.
    pub label: &'static str,
    /// For a share: the key of the part it is inside (not added again).
    pub within: Option<&'static str>,
    /// Bytes.
    pub bytes: f64,
    /// The same in GiB.
    pub gib: f64,
    /// Where it is priced.
    pub source: Source,
}

/// Every part of one evaluation with its source: the exposed time parts add
/// up to `step_s`, the memory parts (not the shares) to `peak_bytes`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parts {
    /// Time parts in report order.
    pub time: Vec<TimeLine>,
    /// Step, seconds.
    pub step_s: f64,
    /// Memory parts of the worst rank, each followed by its shares.
    pub memory: Vec<MemoryLine>,
    /// Peak of the worst rank, bytes.
    pub peak_bytes: f64,
}

impl Parts {
    /// The parts of `e`.
    pub fn of(e: &Evaluation) -> Parts {
        let time = e
            .time
            .iter()
            .map(|(p, t)| TimeLine {
                part: p.key(),
                label: p.label(),
                exposed_s: t.exposed,
                total_s: t.total,
                hidden_s: t.hidden(),
                source: p.source(),
            })
            .collect();
        let mut memory = Vec::new();
        for (p, bytes) in e.memory.iter() {
            memory.push(MemoryLine {
                part: p.key(),
                label: p.label(),
                within: None,
                bytes,
                gib: bytes / GIB,
                source: p.source(),
            });
            for (d, b) in e.memory.details().filter(|(d, _)| d.parent() == p) {
                memory.push(MemoryLine {
                    part: d.key(),
                    label: d.label(),
                    within: Some(p.key()),
                    bytes: b,
                    gib: b / GIB,
                    source: d.source(),
                });
            }
        }
        Parts {
            time,
            step_s: e.time.step,
            memory,
            peak_bytes: e.peak_bytes,
        }
    }
}

/// Forward compute of one transformer layer per micro-batch on one rank,
/// seconds, by kind ([`cost::compute::LayerTime`]: dense GEMMs, attention
/// core, element-wise kernels, routed-expert GEMMs); the backward is about
/// twice the GEMMs. For an MoE model also the MoE layer's, with the rows
/// per local expert of its grouped GEMM and the share of the dense GEMM
/// rate it runs at (the profile's `efficiency.grouped_gemm_half_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayerForward {
    /// A dense layer (absent when every layer is MoE).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dense: Option<cost::compute::LayerTime>,
    /// An MoE layer (absent for a dense model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe: Option<cost::compute::LayerTime>,
    /// Token-expert pairs per local expert of the MoE layer's grouped GEMM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_rows: Option<f64>,
    /// The grouped GEMM's share of the dense GEMM rate at those rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grouped_gemm_efficiency: Option<f64>,
}

impl LayerForward {
    /// The layers of `l` under `pr`.
    pub fn of(pr: &Problem, l: &Layout) -> LayerForward {
        let lc = cost::layer::layer_costs(pr, l, &crate::layout::Placement::of(l, pr.cluster));
        let moe = pr.model.moe.is_some();
        LayerForward {
            dense: (pr.model.dense_layers() > 0).then_some(lc.dense_forward),
            moe: moe.then_some(lc.moe_forward),
            expert_rows: moe.then_some(lc.expert_rows.0),
            grouped_gemm_efficiency: moe.then_some(lc.expert_rows.1),
        }
    }
}

/// Everything `explain` prints for one layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainReport {
    /// What was planned.
    pub context: Context,
    /// The layout.
    pub layout: Layout,
    /// Its prices.
    pub eval: Evaluation,
    /// Every time and memory part of `eval` with its source.
    pub parts: Parts,
    /// How well its regime is validated.
    pub trust: Trust,
    /// Per pipeline rank: layers, time per micro-batch, memory.
    pub ranks: Vec<RankCost>,
    /// The cluster's network levels, innermost first.
    pub levels: Vec<cost::levels::Level>,
    /// Every process group: the levels it crosses and the bytes per level.
    pub groups: Vec<cost::levels::GroupTraffic>,
    /// Forward compute of one layer per micro-batch on one rank, by kind:
    /// what the compute part is made of.
    pub layer_forward: LayerForward,
    /// Under `--deepspeed-2021` at ZeRO-3: the per-tensor collectives
    /// that the groups' one reduce-scatter stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_collectives: Option<cost::TensorCollectives>,
    /// Every rule it breaks.
    pub violations: Vec<Violation>,
    /// Where it ranks among the valid layouts (1-based), if valid and a
    /// search was run: its row in the search's ranking when
    /// `rank_is_row`, else 1 + the ranked layouts predicted faster (a plan
    /// the search did not price as given, or below the ranked share of the
    /// fastest's tokens/s).
    pub rank_among_valid: Option<usize>,
    /// Whether `rank_among_valid` is a row of the search's ranking.
    pub rank_is_row: bool,
    /// The `--target` whose search the rank is in (`search --target T`
    /// lists only what T runs); absent for the default (Megatron) search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranking_target: Option<String>,
    /// Why the search never enumerates this layout, when it does not
    /// ([`crate::search::outside_space`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_space: Option<String>,
    /// The best layout of the search, if one was run.
    pub best: Option<Row>,
    /// For a valid layout: its gap to the best, part by part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap_to_best: Option<Gap>,
    /// For a rejected layout: the smallest changes that make it valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes: Option<Fixes>,
    /// Checkpoint size and interval, and the time to train the `--tokens`
    /// budget (the keys `checkpoint` and `time_to_train`).
    #[serde(flatten)]
    pub outlook: Option<Outlook>,
}

impl ExplainReport {
    /// Explain `l` for `pr`.
    pub fn new(pr: &Problem, policy: &Policy, l: &Layout) -> ExplainReport {
        let eval = cost::evaluate(pr, l);
        let violations = rules::explain(pr, policy, l, memory_note(&eval));
        ExplainReport {
            context: Context::of(pr),
            layout: l.clone(),
            eval,
            parts: Parts::of(&eval),
            trust: trust_of(pr, l, &eval),
            ranks: cost::rank_costs(pr, l),
            levels: cost::levels::levels(pr.cluster),
            groups: cost::levels::group_traffic(pr, l),
            tensor_collectives: cost::deepspeed_2021_tensor_collectives(pr, l),
            layer_forward: LayerForward::of(pr, l),
            violations,
            rank_among_valid: None,
            rank_is_row: false,
            ranking_target: None,
            outside_space: None,
            best: None,
            gap_to_best: None,
            fixes: None,
            outlook: None,
        }
    }

    /// Whether the layout is valid.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Evaluation;
    use crate::search::Candidate;

    fn row(tokens_per_s: f64, trust: Option<Trust>) -> Row {
        let mut r = Row::of(
            1,
            &Candidate {
                layout: Layout::dense(1, 1, 1, 1),
                eval: Evaluation {
                    tokens_per_s,
                    ..Evaluation::default()
                },
            },
        );
        r.trust = trust;
        r
    }

    fn band(median: f64, extrapolated: Option<&str>) -> Trust {
        Trust {
            runs: 3,
            median_abs: Some(median),
            max_abs: Some(median),
            nearest: vec![],
            extrapolated: extrapolated.map(str::to_string),
            distance: usize::from(extrapolated.is_some()),
            envelope: None,
        }
    }

    /// `ranking_of` builds a regime once per key and refreshes the
    /// envelope in place: the ranking is the one each plan's own trust
    /// ([`trust_of`]) gives.
    #[test]
    fn keyed_regimes_rank_as_each_plans_own_trust() {
        let cat = crate::spec::Catalog::shipped().unwrap();
        for (model, cluster) in [("70b", "dgx64"), ("mixtral-8x7b", "dgx64")] {
            let m = cat.model(model).unwrap();
            let c = cat.cluster(cluster).unwrap();
            let g = cat.gpu(&c.gpu).unwrap();
            let job = crate::spec::Job::new(m.defaults.global_batch, m.defaults.seq_len);
            let pr = Problem::new(m, g, c, &job, c.job_gpus());
            let space = crate::search::Space {
                keep_all: true,
                ..Default::default()
            };
            let r = crate::search::search(&pr, &space);
            let pool = r.pool();
            let bands = Bands::of(Record::shipped());
            let plans: Vec<Ranked> = pool
                .iter()
                .map(|c| {
                    let t = trust_of(&pr, &c.layout, &c.eval);
                    Ranked::of(c.eval.tokens_per_s, &t, &bands)
                })
                .collect();
            let want = crate::ranking::order(&plans, RankBy::Predicted, usize::MAX);
            let got = ranking_of(&pr, pool, RankBy::Predicted, usize::MAX);
            assert_eq!(got.rows.len(), want.len());
            for (row, &(j, group)) in got.rows.iter().zip(&want) {
                assert_eq!((&row.layout, row.group), (&pool[j].layout, group));
                assert_eq!(
                    row.trust.as_ref(),
                    Some(&trust_of(&pr, &row.layout, &row.eval))
                );
            }
        }
    }

    #[test]
    fn plans_within_the_winners_band() {
        // Winner 100 tokens/s with a 10% band: the floor is 90, so 95 and
        // 90 count with it and 89 does not: 3.
        let rows = [
            row(100.0, Some(band(0.10, None))),
            row(95.0, None),
            row(90.0, None),
            row(89.0, None),
        ];
        assert_eq!(within_band(&rows), Some(3));
        // An extrapolated winner has no band.
        let rows = [
            row(100.0, Some(band(0.10, Some("ZeRO 3")))),
            row(99.0, None),
        ];
        assert_eq!(within_band(&rows), None);
        assert_eq!(within_band(&[]), None);
    }
}
