//! Checkpointing, failures and time-to-train: a correct restart is part of
//! a correct plan.
//!
//! - What a resumable checkpoint holds (Megatron-LM
//!   `megatron/training/checkpointing.py`, `save_checkpoint`,
//!   [ref:megatron-checkpointing]): the bf16
//!   model parameters (`model`), the optimizer's fp32 main parameters and
//!   Adam moments (`optimizer`), the optimizer step and loss-scaler state,
//!   the scheduler, and every rank's RNG states (`rng_state`). Gradients are
//!   **not** saved: Megatron saves at an optimizer-step boundary, after the
//!   update consumed them, and zeroes the gradient buffers before the next
//!   step accumulates, so they carry nothing a resumed run needs.
//! - Write time `C = bytes / storage bandwidth` for a blocking save spread
//!   over all ranks (Megatron's `torch_dist` format with fully parallel
//!   save), so the cluster's aggregate storage bandwidth is the limit.
//! - Checkpoint interval (Daly 2006 [ref:daly-2006]): the first-order waste
//!   `W(τ) ≈ C/τ + τ/(2M)` is minimised by `τ* = √(2·C·M)`; the waste at
//!   τ* is priced with Daly's complete model ([`waste_fraction`]), which
//!   stays below 1 when checkpoints are slow against the failures. `M` is
//!   the job's mean time between interruptions: node MTBF divided by the
//!   nodes the job uses (independent fail-stop nodes). Daly's higher-order
//!   interval is given alongside. Restart time, correlated failures and
//!   storage contention are left out.
//! - Time-to-train: tokens ÷ tokens/s, and at goodput `tokens/s·(1 − W(τ*))`.

use serde::Serialize;

use crate::cost::{self, Evaluation, Problem};
use crate::layout::Layout;
use crate::spec::Model;

/// Bytes of fp32 master weights per parameter in the optimizer state.
pub const MASTER_BYTES: f64 = 4.0;

/// Per-rank bytes of the small state a checkpoint keeps besides tensors,
/// rounded up to 16 KiB: RNG states (Python `random` Mersenne Twister ≈ 2.5
/// KB pickled 625 words, NumPy MT19937 2,496 B, torch CPU generator 5,056
/// B, CUDA Philox and Megatron's `CudaRNGStatesTracker` 16 B each), the
/// optimizer step, the loss scaler (scale, growth and hysteresis trackers)
/// and the iteration counter. An estimate, not a measurement: it is 10⁻⁶ of
/// any real checkpoint.
pub const SMALL_STATE_BYTES_PER_RANK: f64 = 16384.0;

/// What one checkpoint holds and how often to write it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CheckpointPlan {
    /// Parameters saved (the whole model, once), count.
    pub params: f64,
    /// bf16 (working-precision) weights in the whole checkpoint, bytes.
    pub weights_bytes: f64,
    /// fp32 master weights, bytes.
    pub master_bytes: f64,
    /// Optimizer moments (Adam m and v), bytes.
    pub moments_bytes: f64,
    /// Loss-scaler, step and RNG state of every rank, bytes.
    pub small_state_bytes: f64,
    /// Scaling state of the low-precision linears (fp32 scales and, for
    /// delayed scaling, amax histories) on every tensor-parallel shard,
    /// bytes ([`crate::cost::precision::checkpoint_scaling_bytes`]); absent
    /// in bf16.
    #[serde(skip_serializing_if = "is_zero")]
    pub scaling_state_bytes: f64,
    /// Whole checkpoint, bytes.
    pub total_bytes: f64,
    /// Bytes of state the fullest rank owns for the checkpoint: its
    /// model-parallel weight shard (÷D' under ZeRO-3), its optimizer shard
    /// (÷D' with the distributed optimizer, ZeRO ≥ 1) and its small state.
    pub per_rank_bytes: f64,
    /// Pipeline rank of that fullest rank.
    pub per_rank_stage: u32,
    /// Aggregate storage write bandwidth, GB/s (cluster profile).
    pub storage_bandwidth_gbs: f64,
    /// Write time C, seconds.
    pub write_s: f64,
    /// Nodes the job uses.
    pub nodes: u64,
    /// MTBF of one node, hours (cluster profile).
    pub node_mtbf_hours: f64,
    /// Job mean time between interruptions M = node MTBF / nodes, seconds.
    pub job_mtbf_s: f64,
    /// First-order optimal interval τ* = √(2·C·M), seconds ([ref:daly-2006]).
    pub interval_s: f64,
    /// Daly's higher-order interval, seconds (Daly 2006, Eq. 37).
    pub interval_daly_s: f64,
    /// Expected waste W(τ*) = C/τ* + τ*/(2M), fraction of wall time.
    pub waste_fraction: f64,
    /// Optimizer steps between checkpoints at τ* (at least 1).
    pub steps_between: f64,
    /// Step time of the plan, seconds.
    pub step_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// Checkpoint bytes of `params` parameters under a recipe with `weight_bytes`
/// working weights and `optimizer_bytes` of fp32 master + moments per
/// parameter: `(weight_bytes, master, moments)`.
///
/// The master copy takes [`MASTER_BYTES`] of `optimizer_bytes` (4 of 12 for
/// Adam in fp32), the moments the rest (8 of 12).
///
/// Example: Llama-3 70B, P = 70,553,706,496, Megatron recipe (2, 12):
/// `(141,107,412,992, 282,214,825,984, 564,429,651,968)`, 14·P in all.
pub fn state_bytes(params: f64, weight_bytes: f64, optimizer_bytes: f64) -> (f64, f64, f64) {
    let master = MASTER_BYTES.min(optimizer_bytes);
    (
        params * weight_bytes,
        params * master,
        params * (optimizer_bytes - master),
    )
}

/// First-order optimal checkpoint interval `τ* = √(2·C·M)`, seconds, for a
/// write time `c` and mean time between interruptions `m`, seconds
/// (Daly 2006, Eq. 5 [ref:daly-2006]).
pub fn daly_interval(c: f64, m: f64) -> f64 {
    (2.0 * c * m).sqrt()
}

/// Daly's higher-order optimum, seconds (Daly 2006, Eq. 37):
/// `√(2CM)·[1 + ⅓·√(C/2M) + (C/2M)/9] − C` for `C < 2M`, else `M`.
pub fn daly_interval_higher_order(c: f64, m: f64) -> f64 {
    if c >= 2.0 * m {
        return m;
    }
    let x = c / (2.0 * m);
    (2.0 * c * m).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - c
}

/// Expected fraction of wall time lost to writing checkpoints and redoing
/// work after a failure, with a checkpoint taking `c` seconds after every
/// `tau` seconds of work and failures arriving at random every `m` seconds
/// on average: Daly's complete model ([ref:daly-2006] §3, wall time
/// `M·e^{R/M}·(e^{(τ+C)/M} − 1)` per `τ` of work) with the restart time R
/// left out, `W(τ) = 1 − τ / (M·(e^{(τ+C)/M} − 1))`. To first order in
/// `(τ + C)/M` it is `C/τ + τ/(2M)`, which `τ* = √(2CM)` minimises; unlike
/// that form it stays below 1 when checkpoints are slow against the
/// failures (a job that spends most of its time writing or redoing work
/// still progresses, never backwards).
///
/// Example: C = 50 s, τ = 1,000 s, M = 10,000 s: (τ + C)/M = 0.105,
/// e^0.105 − 1 = 0.1107106, W = 1 − 1000/1107.106 = 0.096744 (first order:
/// 0.1).
pub fn waste_fraction(c: f64, tau: f64, m: f64) -> f64 {
    let lost = m * ((tau + c) / m).exp_m1();
    if lost.is_finite() && lost > 0.0 {
        (1.0 - tau / lost).clamp(0.0, 1.0)
    } else {
        1.0
    }
}

/// Parameters the checkpoint holds, count: the model's, with the input
/// embedding (and the untied output layer) at Megatron's padded vocabulary
/// V' = ⌈V / 128·T⌉·128·T ([`cost::layer::padded_vocab`]). The embedding
/// tensors are allocated, trained and saved at V' rows (Megatron-LM
/// `_vocab_size_with_padding`, `megatron/training/tokenizer`), and the
/// per-rank figure ([`cost::rank_costs`]) counts them so; the total must
/// hold the same rows or the ranks would sum to more than the whole.
///
/// Example: V = 1000, h = 64, T = 2, untied: V' = 1024, so the count adds
/// 2·24·64 = 3,072 parameters to the unpadded model's.
pub fn saved_params(model: &Model, tp: u32) -> f64 {
    let a = &model.architecture;
    let extra_rows = (cost::layer::padded_vocab(a.vocab, tp) - a.vocab) as f64;
    let tables = if a.tied_embeddings { 1.0 } else { 2.0 };
    model.total_params() + tables * extra_rows * a.hidden as f64
}

/// Checkpoint plan of layout `l` (priced as `eval`) for `pr`.
///
/// Total bytes are `(b_w + b_o)·P + N·16 KiB` (plus the low-precision
/// scaling state) with P the parameters saved at the padded vocabulary
/// ([`saved_params`]; for Llama 3 the padding adds under 0.02%) plus the
/// multi-token-prediction layers' ([`crate::spec::Model::mtp_params`];
/// Megatron saves them with the model, DeepSeek-V3: +11.6e9, +1.7%). The
/// per-rank figure uses the pipeline rank with the most parameters from
/// [`cost::rank_costs`].
///
/// An engine whose model is built in fp32 (`fp32_shards_only`: torchtitan,
/// FSDP2 casting to bf16 only at the gather) has no separate bf16 weights
/// to save: its checkpoint holds the fp32 parameters, which are the
/// optimizer's master copy, and the Adam moments, 12 B/param rather than
/// 14 (torchtitan's DCP checkpointer saves `ModelWrapper(model_parts)` and
/// the optimizers' state, `torchtitan/components/checkpointer/dcp.py`).
pub fn plan(pr: &Problem, l: &Layout, eval: &Evaluation) -> CheckpointPlan {
    let recipe = &pr.job.recipe;
    let params = saved_params(pr.model, l.tp) + pr.model.mtp_params();
    let weight_bytes = if pr.job.engine_memory.fp32_shards_only {
        0.0
    } else {
        recipe.weight_bytes
    };
    let (weights, master, moments) = state_bytes(params, weight_bytes, recipe.optimizer_bytes);
    let n = pr.world as f64;
    let small = n * SMALL_STATE_BYTES_PER_RANK;
    // The low-precision recipe's scaling state is saved with the model
    // ([ref:te-fp8-primer]): every GEMM of every tensor-parallel shard.
    let scaling = pr
        .rates
        .low
        .as_ref()
        .map(|lp| cost::precision::checkpoint_scaling_bytes(lp, pr.model, l.tp))
        .unwrap_or(0.0);
    let total = weights + master + moments + small + scaling;
    let shard = (l.dp as f64 * l.cp as f64).max(1.0);
    let edp = l.edp().max(1) as f64;
    let mut per_rank: f64 = 0.0;
    let mut per_rank_stage = 0;
    for rc in cost::rank_costs(pr, l) {
        let owned = |p: f64, d: f64| -> f64 {
            let w = if l.zero >= 3 {
                p * weight_bytes / d
            } else {
                p * weight_bytes
            };
            let o = if l.zero >= 1 {
                p * recipe.optimizer_bytes / d
            } else {
                p * recipe.optimizer_bytes
            };
            w + o
        };
        let rank_scaling = pr
            .rates
            .low
            .as_ref()
            .map(|lp| cost::precision::scaling_state_bytes(lp, rc.items.low_gemms))
            .unwrap_or(0.0);
        let bytes = owned(rc.params, shard)
            + owned(rc.expert_params, edp)
            + SMALL_STATE_BYTES_PER_RANK
            + rank_scaling;
        if bytes > per_rank {
            per_rank = bytes;
            per_rank_stage = rc.rank;
        }
    }
    let rel = &pr.cluster.reliability;
    let write_s = total / (rel.storage_bandwidth_gbs * 1e9);
    let nodes = pr.world.div_ceil(pr.cluster.gpus_per_node as u64).max(1);
    let job_mtbf_s = rel.node_mtbf_hours * 3600.0 / nodes as f64;
    let interval_s = daly_interval(write_s, job_mtbf_s);
    CheckpointPlan {
        params,
        weights_bytes: weights,
        master_bytes: master,
        moments_bytes: moments,
        small_state_bytes: small,
        scaling_state_bytes: scaling,
        total_bytes: total,
        per_rank_bytes: per_rank,
        per_rank_stage,
        storage_bandwidth_gbs: rel.storage_bandwidth_gbs,
        write_s,
        nodes,
        node_mtbf_hours: rel.node_mtbf_hours,
        job_mtbf_s,
        interval_s,
        interval_daly_s: daly_interval_higher_order(write_s, job_mtbf_s),
        waste_fraction: waste_fraction(write_s, interval_s, job_mtbf_s),
        steps_between: (interval_s / eval.time.step).max(1.0),
        step_s: eval.time.step,
    }
}

/// Days and GPU-hours to train on a token budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimeToTrain {
    /// Token budget.
    pub tokens: f64,
    /// GPUs of the job.
    pub gpus: u64,
    /// Optimizer steps, tokens ÷ tokens per step (rounded up).
    pub steps: f64,
    /// Predicted throughput, tokens/s.
    pub tokens_per_s: f64,
    /// Goodput tokens/s·(1 − W(τ*)), tokens/s.
    pub goodput_tokens_per_s: f64,
    /// Days at the predicted throughput.
    pub days: f64,
    /// GPU-hours at the predicted throughput.
    pub gpu_hours: f64,
    /// Days at goodput.
    pub days_goodput: f64,
    /// GPU-hours at goodput.
    pub gpu_hours_goodput: f64,
}

/// Time to train `tokens` with throughput `eval` and checkpoint waste
/// `waste` (fraction), on `gpus` GPUs with `tokens_per_step` per step.
///
/// Example: 15e12 tokens at 30,000 tokens/s take 5e8 s = 5,787.0 days;
/// on 64 GPUs 8,888,889 GPU-hours.
pub fn time_to_train(
    tokens: f64,
    eval: &Evaluation,
    waste: f64,
    gpus: u64,
    tokens_per_step: f64,
) -> TimeToTrain {
    let tps = eval.tokens_per_s;
    let good = tps * (1.0 - waste);
    let secs = tokens / tps;
    let secs_good = tokens / good;
    TimeToTrain {
        tokens,
        gpus,
        steps: (tokens / tokens_per_step).ceil(),
        tokens_per_s: tps,
        goodput_tokens_per_s: good,
        days: secs / 86400.0,
        gpu_hours: secs / 3600.0 * gpus as f64,
        days_goodput: secs_good / 86400.0,
        gpu_hours_goodput: secs_good / 3600.0 * gpus as f64,
    }
}

/// A priced layout's checkpoint plan ([`plan`]) and, when a token budget
/// was given (`--tokens`), its time to train with that plan's checkpoint
/// waste ([`time_to_train`]): what `search` prints for its winner and
/// `explain` for its layout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outlook {
    /// Checkpoint size and interval.
    pub checkpoint: CheckpointPlan,
    /// Time to train the `--tokens` budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_train: Option<TimeToTrain>,
}

impl Outlook {
    /// The outlook of layout `l` priced `eval` for `pr`, with the time to
    /// train `tokens` when given.
    pub fn of(pr: &Problem, l: &Layout, eval: &Evaluation, tokens: Option<f64>) -> Outlook {
        let checkpoint = plan(pr, l, eval);
        let time_to_train = tokens.map(|t| {
            time_to_train(
                t,
                eval,
                checkpoint.waste_fraction,
                pr.world,
                pr.job.tokens_per_step(),
            )
        });
        Outlook {
            checkpoint,
            time_to_train,
        }
    }
}

/// Parse a token count with an optional suffix: `15T`, `2.5B`, `300M`,
/// `40K`, `1e12` (K = 10³, M = 10⁶, B or G = 10⁹, T = 10¹²; case-insensitive).
///
/// # Errors
/// A sentence naming the text when it is not a positive finite number.
pub fn parse_tokens(text: &str) -> Result<f64, String> {
    let v = parse_token_count(text)?;
    check_token_budget(v, text)
}

/// `v` tokens (as `text` gave them) if within
/// [`crate::limits::MAX_TOKEN_BUDGET`].
///
/// # Errors
/// A sentence naming the text and the limit.
pub fn check_token_budget(v: f64, text: &str) -> Result<f64, String> {
    if !v.is_finite() || v > crate::limits::MAX_TOKEN_BUDGET {
        return Err(format!(
            "`{}`: too large a number of tokens; meshplan's limit is {:e} (see src/limits.rs)",
            crate::limits::echo(text.trim()),
            crate::limits::MAX_TOKEN_BUDGET
        ));
    }
    Ok(v)
}

/// The number [`parse_tokens`] reads from `text`, without its limit (the
/// command line checks the syntax as a usage error and the limit as a job
/// error).
///
/// # Errors
/// A sentence naming the text when it is not a number of at least 1 token.
pub fn parse_token_count(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let text = &crate::limits::echo(t);
    let (num, scale) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() && !t.ends_with(['e', 'E']) => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'B' | 'G' => 1e9,
                'T' => 1e12,
                _ => {
                    return Err(format!(
                        "`{text}`: unknown suffix `{c}`; use K, M, B or T (e.g. 15T)"
                    ));
                }
            };
            (&t[..t.len() - 1], scale)
        }
        _ => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{text}`: not a number of tokens; write e.g. 15T, 300B or 2e12"))?;
    let v = v * scale;
    if v < 1.0 || v.is_nan() {
        return Err(format!(
            "`{text}`: the token budget must be at least 1 token"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tau_star_and_waste_hand_worked() {
        // C = 50 s, M = 10,000 s: τ* = √(2·50·10⁴) = √10⁶ = 1,000 s;
        // first order W = 50/1000 + 1000/20000 = 0.1 = √(2C/M); Daly's
        // complete model: 1 − 1000/(10⁴·(e^0.105 − 1)) = 1 − 1000/1107.106
        // = 0.096744.
        assert!((daly_interval(50.0, 1e4) - 1000.0).abs() < 1e-9);
        assert!((waste_fraction(50.0, 1000.0, 1e4) - 0.096744).abs() < 1e-6);
        // Near τ*: a little either side costs more.
        let w = waste_fraction(50.0, 1000.0, 1e4);
        assert!(waste_fraction(50.0, 900.0, 1e4) > w && waste_fraction(50.0, 1100.0, 1e4) > w);
        // A checkpoint as slow as the failures (C = 3.16 h, M = 3.1 h, the
        // reviewer's 0.5 GB/s storage): τ* = √(2CM) = 4.43 h,
        // (τ* + C)/M = 2.447, e^2.447 − 1 = 10.55, W = 1 − 4.43/(3.1·10.55)
        // = 0.865: most of the time is lost, but the first-order 142.9%
        // (negative goodput) is gone.
        let (c, m) = (3.16 * 3600.0, 3.1 * 3600.0);
        let w = waste_fraction(c, daly_interval(c, m), m);
        assert!((w - 0.8647).abs() < 1e-3, "{w}");
        assert_eq!(waste_fraction(1.0, 1.0, 0.0), 1.0);
        // Daly's higher order: x = C/2M = 0.0025, √x = 0.05:
        // 1000·(1 + 0.05/3 + 0.0025/9) − 50 = 1000·1.016944… − 50 = 966.944…
        let hi = daly_interval_higher_order(50.0, 1e4);
        assert!((hi - (1000.0 * (1.0 + 0.05 / 3.0 + 0.0025 / 9.0) - 50.0)).abs() < 1e-9);
        assert!((hi - 966.9444).abs() < 1e-3);
        // C ≥ 2M: checkpoint every M.
        assert_eq!(daly_interval_higher_order(3.0, 1.0), 1.0);
    }

    #[test]
    fn token_suffixes() {
        assert_eq!(parse_tokens("15T"), Ok(15e12));
        assert_eq!(parse_tokens("2.5b"), Ok(2.5e9));
        assert_eq!(parse_tokens("300M"), Ok(300e6));
        assert_eq!(parse_tokens("40K"), Ok(40e3));
        assert_eq!(parse_tokens("1e12"), Ok(1e12));
        assert_eq!(parse_tokens("7G"), Ok(7e9));
        assert!(parse_tokens("15X").unwrap_err().contains("unknown suffix"));
        assert!(parse_tokens("T").is_err());
        assert!(parse_tokens("-3T").is_err());
        assert!(parse_tokens("abc").is_err());
    }

    #[test]
    fn state_bytes_megatron_70b() {
        // 2, 4 and 8 bytes per parameter of Llama-3 70B (70,553,706,496).
        let p = 70_553_706_496.0;
        let (w, m, o) = state_bytes(p, 2.0, 12.0);
        assert_eq!(w, 141_107_412_992.0);
        assert_eq!(m, 282_214_825_984.0);
        assert_eq!(o, 564_429_651_968.0);
        assert_eq!(w + m + o, 14.0 * p);
    }
}
