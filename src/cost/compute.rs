//! Compute time of one transformer layer on one rank, and the FLOP counts
//! used for MFU/HFU.
//!
//! Kernel time is a roofline (Williams, Waterman & Patterson 2009):
//! `max(flops / (peak · eff_gemm), bytes / (hbm · eff_mem)) + overhead`.
//! A GEMM of shape `M×K · K×N` does `2·M·N·K` FLOPs and moves
//! `2·(M·K + K·N + M·N)` bytes in bf16, so thin shards (high TP, small
//! micro-batches) become bandwidth- and launch-bound on their own. Fused
//! attention (Dao et al. 2022) runs at `eff_attention`; its backward is 2.5×
//! the forward (five matmuls against two). Element-wise work (norms,
//! residuals, activation functions, dropout, rotary) is bytes over HBM.
//! Backward GEMMs are 2× forward (input and weight gradients).

use crate::cost::precision::{self, LowPrecision};
use crate::layout::Recompute;
use crate::spec::{Gpu, Job, Model};

/// Rates of one GPU in SI units with efficiencies applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Sustained GEMM rate, FLOP/s.
    pub gemm_flops: f64,
    /// Sustained fused-attention rate, FLOP/s.
    pub attn_flops: f64,
    /// Sustained HBM bandwidth, bytes/s.
    pub hbm: f64,
    /// Launch overhead per kernel, seconds.
    pub overhead: f64,
    /// Sustained rate of unfused attention when the head dimension is not a
    /// multiple of 8 elements, FLOP/s (`attn_flops · misaligned_attention`).
    pub attn_flops_misaligned: f64,
    /// The linear-layer GEMMs in a narrower format than bf16 (FP8, MXFP8,
    /// NVFP4) with their rate and casts; `None` = bf16 like every other GEMM.
    pub low: Option<LowPrecision>,
    /// Tokens per local expert at which grouped expert GEMMs run at half
    /// rate (`efficiency.grouped_gemm_half_tokens`), tokens.
    pub grouped_half_tokens: f64,
}

impl Rates {
    /// Rates of `gpu` for bf16 work.
    pub fn of(gpu: &Gpu) -> Rates {
        let peak = gpu.peak_tflops_bf16 * 1e12;
        Rates {
            gemm_flops: peak * gpu.efficiency.gemm,
            attn_flops: peak * gpu.efficiency.attention,
            hbm: gpu.hbm_bandwidth_gbs * 1e9 * gpu.efficiency.memory,
            overhead: gpu.efficiency.kernel_overhead_us * 1e-6,
            attn_flops_misaligned: peak
                * gpu.efficiency.attention
                * gpu.efficiency.misaligned_attention,
            low: None,
            grouped_half_tokens: gpu.efficiency.grouped_gemm_half_tokens,
        }
    }

    /// Rates of `gpu` for `job`: [`Rates::of`] with the linear GEMMs in the
    /// job's precision ([`LowPrecision::of`]). A job whose precision the GPU
    /// cannot run is refused by [`precision::check`] before any pricing;
    /// should one reach here anyway, its linear GEMMs are priced at
    /// 1 FLOP/s (never at the bf16 rate).
    pub fn for_job(gpu: &Gpu, job: &Job) -> Rates {
        Rates {
            low: match LowPrecision::of(gpu, job) {
                Ok(low) => low,
                Err(_) => Some(LowPrecision::unusable(job)),
            },
            ..Rates::of(gpu)
        }
    }
}

/// Time of one bf16 GEMM `[m×k]·[k×n]`, seconds (roofline plus launch).
pub fn gemm_time(m: f64, n: f64, k: f64, r: &Rates) -> f64 {
    if m <= 0.0 || n <= 0.0 || k <= 0.0 {
        return 0.0;
    }
    let flops = 2.0 * m * n * k;
    let bytes = 2.0 * (m * k + k * n + m * n);
    (flops / r.gemm_flops).max(bytes / r.hbm) + r.overhead
}

/// One linear-layer GEMM of a layer on one rank and micro-batch,
/// `[m×k]·[k×n]` in forward: QKV (or MLA's projections), the attention
/// output projection, FC1, FC2, and the routed experts' FC1 and FC2. These
/// are the GEMMs a low-precision recipe narrows; the router, the attention
/// core and the output layer are not among them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Linear {
    /// Rows (tokens, or routed token-expert pairs).
    pub m: f64,
    /// Output columns on this rank.
    pub n: f64,
    /// Contraction on this rank.
    pub k: f64,
    /// A routed-expert GEMM.
    pub expert: bool,
    /// Column-parallel under SP: the input arrives by the SP all-gather (its
    /// local shard is `m/T` rows).
    pub gathered_input: bool,
    /// Row-parallel under SP: the output gradient arrives by the SP
    /// all-gather in backward.
    pub gathered_grad: bool,
}

/// The linear GEMMs of one layer on one rank (see [`layer_forward`] for the
/// shapes), at most six; the second value is how many are used.
pub fn linear_gemms(
    model: &Model,
    sh: &LayerShape,
    moe: bool,
    moe_pairs_per_rank: f64,
    expert_etp: f64,
) -> ([Linear; 6], usize) {
    let a = &model.architecture;
    let h = a.hidden as f64;
    let t = sh.tp;
    let tok = sh.tokens;
    let mut out = [Linear::default(); 6];
    let mut n = 0;
    let mut push = |lin: Linear| {
        out[n] = lin;
        n += 1;
    };
    let col = |m: f64, n: f64, k: f64| Linear {
        m,
        n,
        k,
        gathered_input: sh.sp,
        ..Linear::default()
    };
    let row = |m: f64, n: f64, k: f64| Linear {
        m,
        n,
        k,
        gathered_grad: sh.sp,
        ..Linear::default()
    };
    // Attention projections. Non-MLA: QKV [tok × h]·[h × (q+2kv)/T], output
    // [tok × q/T]·[q/T × h]. MLA: one GEMM of the same FLOPs.
    if model.mla.is_some() {
        push(col(tok, model.attention_params() / h / t, h));
    } else {
        let q = model.q_width() as f64;
        let kv_local = if (a.kv_heads as f64) < t {
            model.head_dim() as f64
        } else {
            model.kv_width() as f64 / t
        };
        push(col(tok, q / t + 2.0 * kv_local, h));
        push(row(tok, h, q / t));
    }
    // MLP (dense) or shared experts (MoE).
    let mats = if a.gated_mlp { 2.0 } else { 1.0 };
    let ffn = dense_mlp_width(model, moe);
    if ffn > 0.0 {
        push(col(tok, mats * ffn / t, h));
        push(row(tok, h, ffn / t));
    }
    // Routed experts: the rank's token-expert pairs through fc1 and fc2 of
    // width expert_ffn / ETP.
    if moe && let Some(m) = &model.moe {
        let f = m.expert_ffn as f64 / expert_etp;
        let expert = |m: f64, n: f64, k: f64| Linear {
            m,
            n,
            k,
            expert: true,
            ..Linear::default()
        };
        push(expert(moe_pairs_per_rank, mats * f, h));
        push(expert(moe_pairs_per_rank, h, f));
    }
    (out, n)
}

/// Time of one linear GEMM in the job's precision, seconds: [`gemm_time`]
/// in bf16, [`precision::gemm_time`] when the recipe narrows it.
pub fn linear_time(lin: &Linear, r: &Rates) -> f64 {
    match &r.low {
        None => gemm_time(lin.m, lin.n, lin.k, r),
        Some(lp) => precision::gemm_time(lin.m, lin.n, lin.k, lp, r),
    }
}

/// Width of a layer's dense MLP, elements: `ffn` for a dense layer, and
/// for an MoE layer its shared experts' total width (0 without shared
/// experts); the routed experts are priced apart.
pub fn dense_mlp_width(model: &Model, moe: bool) -> f64 {
    if !moe {
        return model.architecture.ffn as f64;
    }
    model
        .moe
        .as_ref()
        .map(|m| m.shared_experts as f64 * m.shared_expert_ffn.unwrap_or(m.expert_ffn) as f64)
        .unwrap_or(0.0)
}

/// Time of one memory-bound kernel moving `bytes`, seconds.
pub fn elementwise_time(bytes: f64, r: &Rates) -> f64 {
    bytes / r.hbm + r.overhead
}

/// The local shape of one layer's work on one rank for one micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerShape {
    /// Tokens of the micro-batch on this rank before SP: `b·s/C`.
    pub tokens: f64,
    /// Full sequence length s (keys each query attends to under CP).
    pub seq: f64,
    /// Tensor-parallel size T.
    pub tp: f64,
    /// Sequence parallelism on.
    pub sp: bool,
    /// Context-parallel size C.
    pub cp: f64,
    /// Fused (flash) attention.
    pub flash: bool,
}

/// Forward time of one layer split into parts, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerTime {
    /// Dense GEMMs (QKV, output projection, MLP or shared experts).
    pub gemm: f64,
    /// Attention core (scores and weighted sum).
    pub attention: f64,
    /// Memory-bound element-wise kernels.
    pub elementwise: f64,
    /// Routed-expert GEMMs (MoE layers).
    pub expert_gemm: f64,
}

impl LayerTime {
    /// Sum of the parts.
    pub fn total(&self) -> f64 {
        self.gemm + self.attention + self.elementwise + self.expert_gemm
    }
}

/// Attention-core forward FLOPs of one layer for `tokens` queries attending
/// over a causal sequence of `seq` keys, for all heads: `2·2·tokens·seq·q / 2`
/// (QKᵀ and A·V, halved by the causal mask, as Megatron's
/// `num_floating_point_operations`).
pub fn attention_core_flops(model: &Model, tokens: f64, seq: f64) -> f64 {
    let qk = model.q_width() as f64;
    let v = model.attn_out_width() as f64;
    // QKᵀ: 2·tokens·seq·qk, A·V: 2·tokens·seq·v, both halved (causal).
    (2.0 * tokens * seq * qk + 2.0 * tokens * seq * v) / 2.0
}

/// Forward time of one layer on one rank for one micro-batch.
///
/// `moe_tokens_per_rank` is the routed token-expert pairs this rank computes
/// (0 for a dense layer); `expert_ffn_local` the expert FFN width on this
/// rank (expert FFN / ETP).
pub fn layer_forward(
    model: &Model,
    sh: &LayerShape,
    moe: bool,
    moe_pairs_per_rank: f64,
    expert_etp: f64,
    r: &Rates,
) -> LayerTime {
    let a = &model.architecture;
    let h = a.hidden as f64;
    let t = sh.tp;
    let tok = sh.tokens;
    let mut lt = LayerTime::default();
    // Linear GEMMs: attention projections, MLP or shared experts, routed
    // experts ([`linear_gemms`]), in the job's precision.
    let (lins, count) = linear_gemms(model, sh, moe, moe_pairs_per_rank, expert_etp);
    for lin in &lins[..count] {
        let dt = linear_time(lin, r);
        if lin.expert {
            lt.expert_gemm += dt;
        } else {
            lt.gemm += dt;
        }
    }
    // Router: [tok × h]·[h × experts], in bf16 whatever the recipe.
    if moe && let Some(m) = &model.moe {
        lt.gemm += gemm_time(tok / if sh.sp { t } else { 1.0 }, m.experts as f64, h, r);
    }
    let ffn = dense_mlp_width(model, moe);
    // Attention core for this rank's heads (1/T) and queries (1/C of s).
    let core = attention_core_flops(model, tok, sh.seq) / t;
    // Unfused attention runs QKᵀ and A·V as cuBLAS batched GEMMs whose inner
    // (QKᵀ) and output (A·V) width is the head dimension; off the 8-element
    // tensor-core alignment they run at `attn_flops_misaligned`.
    let attn_rate = if !sh.flash && model.head_dim() % 8 != 0 {
        r.attn_flops_misaligned
    } else {
        r.attn_flops
    };
    lt.attention = core / attn_rate + r.overhead;
    if !sh.flash {
        // Unfused: scores, softmax and dropout materialise b·(a/T)·(s/C)·s
        // elements; softmax reads and writes them in bf16, dropout again.
        let scores = tok * sh.seq * a.heads as f64 / t;
        let passes = if a.dropout { 4.0 } else { 2.0 };
        lt.attention += elementwise_time(2.0 * passes * scores, r);
    }
    // Element-wise traffic per token, bytes (bf16). Norm, residual and
    // dropout act on the full hidden state, replicated across TP unless SP.
    // Two norms read and write h values each; Megatron fuses bias, dropout
    // and the residual add into one kernel (`bias_dropout_add_fused_train`,
    // megatron/core/fusions/fused_bias_dropout.py) that reads the branch
    // output and the residual and writes the sum (3·2h per use, two uses),
    // so dropout adds only its 1-byte mask (h per use), not separate passes.
    let rep = if sh.sp { tok / t } else { tok };
    let norms = 2.0 * (2.0 * h + 2.0 * h);
    let residual = 2.0 * (3.0 * 2.0 * h);
    let dropout = if a.dropout { 2.0 * h } else { 0.0 };
    let hidden_bytes = rep * (norms + residual + dropout);
    let act_width = if moe { ffn } else { a.ffn as f64 };
    let act = if a.gated_mlp { 6.0 } else { 4.0 } * act_width / t;
    let rope =
        if model.architecture.position_embedding == crate::spec::model::PositionEmbedding::Rope {
            4.0 * (model.q_width() + model.kv_width()) as f64 / t
        } else {
            0.0
        };
    let mut local_bytes = tok * (act + rope);
    if moe && let Some(m) = &model.moe {
        // Expert activation function on routed pairs, plus permute/unpermute
        // copies of the routed tokens (read+write, both directions).
        let f = m.expert_ffn as f64 / expert_etp;
        local_bytes += moe_pairs_per_rank * (if a.gated_mlp { 6.0 } else { 4.0 } * f + 8.0 * h);
    }
    // Four kernels of the hidden state (two norms, two fused
    // bias-dropout-add), one or two of the local tensors.
    lt.elementwise = elementwise_time(hidden_bytes + local_bytes, r) + 5.0 * r.overhead;
    lt
}

/// Backward time of one layer from its forward parts, seconds: GEMMs 2×
/// (activation and weight gradients), fused attention 2.5× (Dao et al.
/// 2022), element-wise 2×.
pub fn layer_backward(f: &LayerTime) -> LayerTime {
    LayerTime {
        gemm: 2.0 * f.gemm,
        attention: 2.5 * f.attention,
        elementwise: 2.0 * f.elementwise,
        expert_gemm: 2.0 * f.expert_gemm,
    }
}

/// What a recompute policy reruns in backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// Nothing.
    Nothing,
    /// The attention core (selective recompute without flash attention;
    /// flash attention already recomputes its scores, so selective adds
    /// nothing there).
    AttentionCore,
    /// The whole forward of every transformer layer.
    Forward,
}

/// What `recompute` reruns, with or without flash attention
/// ([ref:korthikanti-2022] §5).
pub fn rerun(recompute: Recompute, flash: bool) -> Rerun {
    match recompute {
        Recompute::None => Rerun::Nothing,
        Recompute::Selective if flash => Rerun::Nothing,
        Recompute::Selective => Rerun::AttentionCore,
        Recompute::Full => Rerun::Forward,
    }
}

/// Forward time recomputed in backward, seconds ([`rerun`]).
pub fn layer_recompute(f: &LayerTime, recompute: Recompute, flash: bool) -> f64 {
    match rerun(recompute, flash) {
        Rerun::Nothing => 0.0,
        Rerun::AttentionCore => f.attention,
        Rerun::Forward => f.total(),
    }
}

/// Model FLOPs of one optimizer step (Megatron-LM
/// `num_floating_point_operations` [ref:megatron-flops]): `6·B·s·[…]` for every
/// GEMM (forward, input gradient, weight gradient) plus the causal attention
/// core `6·B·s²·q` per layer (halved for the mask), logits included; routed
/// experts count top-k only. Recompute is not counted (MFU convention).
pub fn model_flops_per_step(model: &Model, global_batch: f64, seq: f64) -> f64 {
    let tokens = global_batch * seq;
    let per_token_params = model.dense_layers() as f64
        * (model.attention_params() + model.mlp_params(model.architecture.ffn))
        + model.moe_layers() as f64
            * (model.attention_params()
                + model.moe_shared_and_router_params()
                + model.moe.as_ref().map(|m| m.top_k as f64).unwrap_or(0.0)
                    * model.one_expert_params())
        + (model.architecture.vocab * model.architecture.hidden) as f64;
    let gemm = 6.0 * tokens * per_token_params;
    let attn = 3.0
        * model.architecture.layers as f64
        * global_batch
        * attention_core_flops(model, seq, seq);
    gemm + attn
}

/// Forward FLOPs recomputed per step ([`rerun`]).
pub fn recompute_flops_per_step(
    model: &Model,
    global_batch: f64,
    seq: f64,
    recompute: Recompute,
    flash: bool,
) -> f64 {
    match rerun(recompute, flash) {
        Rerun::Nothing => 0.0,
        Rerun::AttentionCore => {
            model.architecture.layers as f64 * global_batch * attention_core_flops(model, seq, seq)
        }
        Rerun::Forward => {
            // One more forward of every transformer layer: a third of the
            // layers' model FLOPs (the logits are not recomputed).
            let logits = 6.0
                * global_batch
                * seq
                * (model.architecture.vocab * model.architecture.hidden) as f64;
            (model_flops_per_step(model, global_batch, seq) - logits) / 3.0
        }
    }
}

/// FLOPs of one step by Narayanan et al. 2021, Eq. 3 (GPT, with full
/// recompute counted): `96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`.
pub fn narayanan_eq3_flops(
    layers: f64,
    hidden: f64,
    vocab: f64,
    global_batch: f64,
    seq: f64,
) -> f64 {
    96.0 * global_batch
        * seq
        * layers
        * hidden
        * hidden
        * (1.0 + seq / (6.0 * hidden) + vocab / (16.0 * layers * hidden))
}
