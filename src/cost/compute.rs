//! Compute time of one transformer layer on one rank, and the FLOP counts
//! used for MFU/HFU.
//!
//! Kernel time is a roofline (Williams, Waterman & Patterson 2009):
//! `max(flops / (peak · eff_gemm), bytes / (hbm · eff_mem)) + overhead`.
//! A GEMM of shape `M×K · K×N` does `2·M·N·K` FLOPs and moves
//! `2·(M·K + K·N + M·N)` bytes in bf16, so thin shards (high TP, small
//! micro-batches) become bandwidth- and launch-bound on their own. Fused
//! attention (Dao et al. 2022) runs at `eff_attention` scaled by its kernel's
//! published curve over key length and mask ([`attention_length_factor`];
//! under CP per ring step, `cp::ring_step_times`); its backward is 2.5×
//! the forward (five matmuls against two). Element-wise work (norms,
//! residuals, activation functions, dropout, rotary) is bytes over HBM.
//! A GEMM's rate also depends on its depth, the contraction length
//! ([`contraction_factor`]); the two backward GEMMs of a linear layer (input
//! and weight gradients) have the forward's FLOPs but contract over its
//! output width and over the tokens, so each is priced at its own shape
//! ([`linear_backward_time`]).

use crate::cost::cp;
use crate::cost::precision::{self, LowPrecision};
use crate::layout::Recompute;
use crate::spec::{AttnKernel, Gpu, Job, Model};

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
    /// Contraction length at which a bf16 GEMM runs at half its asymptotic
    /// rate (`efficiency.gemm_half_k`), elements; 0 = no depth curve.
    pub gemm_half_k: f64,
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
            gemm_half_k: gpu.efficiency.gemm_half_k,
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

    /// Test rates: 1e15 FLOP/s for every GEMM and attention kernel (bf16,
    /// no depth or grouping curve), `hbm` bytes/s of HBM and `overhead`
    /// seconds per kernel launch.
    #[cfg(test)]
    pub(crate) fn flat(hbm: f64, overhead: f64) -> Rates {
        Rates {
            gemm_flops: 1e15,
            attn_flops: 1e15,
            hbm,
            overhead,
            attn_flops_misaligned: 1e15,
            low: None,
            grouped_half_tokens: 0.0,
            gemm_half_k: 0.0,
        }
    }
}

/// Contraction length at which a GPU profile's GEMM efficiency holds
/// exactly ([`contraction_factor`] = 1), elements: the depth of a typical
/// transformer GEMM (hidden 4096) and the deepest point of the kernel sweeps
/// the half-saturation depths were fitted on (`hardware/gpus/h100-sxm.toml`).
pub const GEMM_REFERENCE_K: f64 = 4096.0;

/// Rate of a GEMM contracting over `k` elements relative to one of depth
/// [`GEMM_REFERENCE_K`], dimensionless: `(k/(k + k½)) / (K_ref/(K_ref + k½))`.
///
/// Each output tile runs a main loop over the contraction (time ∝ `k`) and a
/// fixed prologue and epilogue (pipeline fill, the output tile written to
/// HBM) worth `k½` elements of main loop, so the sustained fraction of peak
/// is `k/(k + k½)`: the output traffic adds to the main loop instead of
/// hiding under it as a roofline's `max` assumes. `k½` grows with the
/// machine balance (peak over bandwidth) and is larger in FP8, whose main
/// loop is twice as fast against the same bf16 epilogue: shallow GEMMs gain
/// less from FP8. Fitted per GPU on published kernel sweeps over `k` (see
/// the profiles' `gemm_half_k`); `k½ = 0` gives 1.
///
/// Example: H100 FP8, `k½` = 460, the attention output projection of
/// Llama-3-8B at TP 8 (`k` = 4096/8 = 512): (512/972)·(4556/4096) = 0.586;
/// its FC1 (`k` = 4096): 1.
pub fn contraction_factor(k: f64, half_k: f64) -> f64 {
    if half_k <= 0.0 {
        return 1.0;
    }
    (k / (k + half_k)) * ((GEMM_REFERENCE_K + half_k) / GEMM_REFERENCE_K)
}

/// Time of one bf16 GEMM `[m×k]·[k×n]`, seconds: roofline plus launch, the
/// FLOP rate at the GEMM's depth `k` ([`contraction_factor`]).
pub fn gemm_time(m: f64, n: f64, k: f64, r: &Rates) -> f64 {
    gemm_pass_times(m, n, k, r).0
}

/// Backward time of the bf16 GEMM `[m×k]·[k×n]`, seconds: the input
/// gradient `[m×n]·[n×k]` (contraction `n`) and the weight gradient
/// `[k×m]·[m×n]` (contraction `m`), each a [`gemm_time`] of its own shape.
/// Without a depth curve (`k½` = 0) it is twice the forward.
pub fn gemm_backward_time(m: f64, n: f64, k: f64, r: &Rates) -> f64 {
    gemm_pass_times(m, n, k, r).1
}

/// [`gemm_time`] and [`gemm_backward_time`] of one bf16 GEMM together,
/// seconds: the three GEMMs share their FLOPs and bytes, so only the depth
/// term differs (`1/contraction_factor` = `(1 + k½/k)/(1 + k½/K_ref)`);
/// the hot path computes them once.
pub fn gemm_pass_times(m: f64, n: f64, k: f64, r: &Rates) -> (f64, f64) {
    if m <= 0.0 || n <= 0.0 || k <= 0.0 {
        return (0.0, 0.0);
    }
    let flops = 2.0 * m * n * k;
    let bytes = 2.0 * (m * k + k * n + m * n);
    let h = r.gemm_half_k.max(0.0);
    let t0 = flops / (r.gemm_flops * (1.0 + h / GEMM_REFERENCE_K));
    let tm = bytes / r.hbm;
    let pass = |depth: f64| (t0 * (1.0 + h / depth)).max(tm) + r.overhead;
    (pass(k), pass(n) + pass(m))
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
    /// Output widths on this rank of the separate projections this GEMM
    /// stands for where the model's reference code keeps them apart (Llama:
    /// `wq`, `wk`, `wv`; gate and up, `w1`, `w3`), summing to `n`; all zero
    /// for one projection. Only the per-shape pricing of torchao's row-wise
    /// float8 reads them ([`precision::rowwise_table_pass_times`]); the
    /// roofline prices the fused `n`. Single precision keeps the struct
    /// small on the hot path (widths are integers well below 2²⁴).
    pub parts: [f32; 3],
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
        push(Linear {
            parts: [(q / t) as f32, kv_local as f32, kv_local as f32],
            ..col(tok, q / t + 2.0 * kv_local, h)
        });
        push(row(tok, h, q / t));
    }
    // MLP (dense) or shared experts (MoE).
    let mats = if a.gated_mlp { 2.0 } else { 1.0 };
    let ffn = dense_mlp_width(model, moe);
    if ffn > 0.0 {
        let parts = if a.gated_mlp {
            [(ffn / t) as f32, (ffn / t) as f32, 0.0]
        } else {
            [0.0; 3]
        };
        push(Linear {
            parts,
            ..col(tok, mats * ffn / t, h)
        });
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
/// in bf16, [`precision::gemm_time`] when the recipe narrows it, and
/// torchao's measured row-wise speed-up over the bf16 time on Hopper
/// ([`precision::rowwise_table_pass_times`]).
pub fn linear_time(lin: &Linear, r: &Rates) -> f64 {
    linear_pass_times(lin, r).0
}

/// Backward time of one linear GEMM in the job's precision, seconds: the
/// input gradient (contraction over the output width `n`) and the weight
/// gradient (contraction over the rows `m`), each at its own depth
/// ([`gemm_backward_time`], [`precision::gemm_backward_time`]).
pub fn linear_backward_time(lin: &Linear, r: &Rates) -> f64 {
    linear_pass_times(lin, r).1
}

/// [`linear_time`] and [`linear_backward_time`] together, seconds.
pub fn linear_pass_times(lin: &Linear, r: &Rates) -> (f64, f64) {
    match &r.low {
        None => gemm_pass_times(lin.m, lin.n, lin.k, r),
        Some(lp) if lp.rowwise_table && !lin.expert => precision::rowwise_table_pass_times(lin, r),
        Some(lp) => (
            precision::gemm_time(lin.m, lin.n, lin.k, lp, r),
            precision::gemm_backward_time(lin.m, lin.n, lin.k, lp, r),
        ),
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
    /// The fused-attention kernel ([`attention_length_factor`]).
    pub kernel: AttnKernel,
}

/// Forward time of one layer split into parts, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct LayerTime {
    /// Dense GEMMs (QKV, output projection, MLP or shared experts).
    pub gemm: f64,
    /// Attention core (scores and weighted sum).
    pub attention: f64,
    /// Memory-bound element-wise kernels.
    pub elementwise: f64,
    /// Routed-expert GEMMs (MoE layers).
    pub expert_gemm: f64,
    /// Backward of `gemm` (input and weight gradients at their own depths,
    /// [`linear_backward_time`]); not part of [`LayerTime::total`].
    pub gemm_backward: f64,
    /// Backward of `expert_gemm`; not part of [`LayerTime::total`].
    pub expert_gemm_backward: f64,
}

impl LayerTime {
    /// Sum of the forward parts.
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

/// Sequence lengths of the published kernel benchmarks below, tokens.
pub const KERNEL_BENCH_SEQ: [f64; 6] = [512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];

/// Published forward throughput of the fused-attention kernels on one H100
/// SXM5 80GB in BF16, head dimension 128, TFLOP/s at
/// [`KERNEL_BENCH_SEQ`] (Shah et al. 2024, FlashAttention-3,
/// arXiv:2407.08608, Figure 5: batch·seqlen = 16k tokens, 16 heads of 128;
/// causal FLOPs counted at half). Rows: (kernel, causal) → six values.
/// Without the mask the paper's 512-token bars are not used (the two
/// transcriptions of that figure disagree on them): the 1k value stands in.
#[rustfmt::skip]
pub const KERNEL_BENCH_TFLOPS: [(AttnKernel, bool, [f64; 6]); 6] = [
    //                          512    1k     2k     4k     8k     16k
    (AttnKernel::Fa2,   true,  [191.0, 260.0, 298.0, 319.0, 333.0, 335.0]),
    (AttnKernel::Fa2,   false, [350.0, 350.0, 362.0, 368.0, 370.0, 370.0]),
    (AttnKernel::Fa3,   true,  [292.0, 423.0, 521.0, 579.0, 602.0, 616.0]),
    (AttnKernel::Fa3,   false, [565.0, 565.0, 625.0, 638.0, 646.0, 648.0]),
    (AttnKernel::Cudnn, true,  [315.0, 410.0, 484.0, 518.0, 529.0, 539.0]),
    (AttnKernel::Cudnn, false, [574.0, 574.0, 617.0, 609.0, 600.0, 595.0]),
];

/// Key length at which the GPU profiles' `efficiency.attention` holds,
/// tokens: the profiles were fitted on causal runs of 2k–8k tokens (see
/// `hardware/gpus/*.toml`), so a causal kernel over 8192 keys runs at exactly
/// `peak · efficiency.attention` ([`attention_length_factor`] = 1).
pub const ATTENTION_REFERENCE_SEQ: f64 = 8192.0;

/// Published throughput of `kernel` over `kv_len` keys, TFLOP/s
/// ([`KERNEL_BENCH_TFLOPS`]), linear in log₂ of the length between the
/// benchmarked lengths and flat outside them (the kernels plateau by 16k;
/// below 512 keys the 512 value is kept, an optimistic bound).
///
/// Example: FlashAttention-2, causal, 3072 keys: log₂ 3072 = 11.585, between
/// 2k (298) and 4k (319): 298 + 0.585·21 = 310.3 TFLOP/s.
pub fn attention_kernel_tflops(kernel: AttnKernel, causal: bool, kv_len: f64) -> f64 {
    let row = kernel_bench_row(kernel, causal);
    // Flat outside the benchmarked range; the profiles' reference length
    // and the plateau answered without a logarithm (the hot path).
    if kv_len >= 16384.0 {
        return row[5];
    }
    if kv_len <= 512.0 {
        return row[0];
    }
    let x = kv_len.log2() - 9.0; // log₂ 512 = 9
    let i = (x.floor() as usize).min(4);
    let f = x - i as f64;
    row[i] + f * (row[i + 1] - row[i])
}

/// The row of [`KERNEL_BENCH_TFLOPS`] for `kernel` with or without the mask.
fn kernel_bench_row(kernel: AttnKernel, causal: bool) -> &'static [f64; 6] {
    let i = match kernel {
        AttnKernel::Fa2 => 0,
        AttnKernel::Fa3 => 2,
        AttnKernel::Cudnn => 4,
    } + usize::from(!causal);
    &KERNEL_BENCH_TFLOPS[i].2
}

/// Throughput of one fused-attention call over `kv_len` keys relative to the
/// profile's rate: [`attention_kernel_tflops`] over the same kernel's causal
/// value at [`ATTENTION_REFERENCE_SEQ`] (dimensionless). Short key ranges
/// underfill the pipeline (the softmax rescale and the epilogue are
/// amortised over fewer tiles); a call without the causal mask has no
/// partially masked diagonal tiles and runs faster.
///
/// Example: cuDNN, causal, 2048 keys: 484 / 529 = 0.915; FlashAttention-2
/// without the mask at 16k: 370 / 333 = 1.111.
pub fn attention_length_factor(kernel: AttnKernel, causal: bool, kv_len: f64) -> f64 {
    // The reference, 8192 keys, is the table's fifth point.
    attention_kernel_tflops(kernel, causal, kv_len) / kernel_bench_row(kernel, true)[4]
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
        let (dt, db) = linear_pass_times(lin, r);
        if lin.expert {
            lt.expert_gemm += dt;
            lt.expert_gemm_backward += db;
        } else {
            lt.gemm += dt;
            lt.gemm_backward += db;
        }
    }
    // Router: [tok × h]·[h × experts], in bf16 whatever the recipe.
    if moe && let Some(m) = &model.moe {
        let rows = tok / if sh.sp { t } else { 1.0 };
        let (f, b) = gemm_pass_times(rows, m.experts as f64, h, r);
        lt.gemm += f;
        lt.gemm_backward += b;
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
    lt.attention = if sh.flash {
        // Fused: the kernel's rate at its key length; under CP the ring's
        // steps, each its own kernel ([`cp::ring_step_times`]).
        let steps = cp::ring_step_times(model, sh, r.attn_flops);
        steps.diag + (sh.cp - 1.0).max(0.0) * steps.off
    } else {
        core / attn_rate
    } + r.overhead;
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
    let qk_norm = qk_norm_bytes_per_token(model, t);
    let mut local_bytes = tok * (act + rope + qk_norm);
    if moe && let Some(m) = &model.moe {
        // Expert activation function on routed pairs, plus permute/unpermute
        // copies of the routed tokens (read+write, both directions).
        let f = m.expert_ffn as f64 / expert_etp;
        local_bytes += moe_pairs_per_rank * (if a.gated_mlp { 6.0 } else { 4.0 } * f + 8.0 * h);
    }
    // Four kernels of the hidden state (two norms, two fused
    // bias-dropout-add), one or two of the local tensors, and the two QK
    // norms where the model has them.
    let qk_norm_kernels = if a.qk_layernorm { 2.0 } else { 0.0 };
    lt.elementwise =
        elementwise_time(hidden_bytes + local_bytes, r) + (5.0 + qk_norm_kernels) * r.overhead;
    lt
}

/// HBM bytes per local token of a layer's QK norms in forward (Megatron
/// `--qk-layernorm`: `q_layernorm` and `k_layernorm`, one RMSNorm kernel
/// each, `megatron/core/transformer/attention.py`), bytes: each reads its
/// tensor and writes the normalised one in bf16, `2·2` bytes per element.
///
/// - GQA/MHA (Qwen3's per-head `q_norm`/`k_norm`): the rank's query and key
///   heads, `4·(q_width + kv_width)/T`.
/// - MLA (DeepSeek-V3): the compressed query and key/value latents before
///   their up-projections (`q_a_layernorm`, `kv_a_layernorm`), which every TP
///   rank computes whole: `4·(q_lora_rank + kv_lora_rank)`.
///
/// Zero without QK norms. Backward reads the input, the output gradient and
/// writes the input gradient: the element-wise backward's 2× (see
/// [`layer_backward`]) covers it.
///
/// Example: Qwen3-30B-A3B (32 query heads and 4 KV heads of 128), T = 1:
/// 4·(4096 + 512) = 18,432 bytes per token; DeepSeek-V3 (1536 + 512):
/// 8,192 at any T.
pub fn qk_norm_bytes_per_token(model: &Model, tp: f64) -> f64 {
    if !model.architecture.qk_layernorm {
        return 0.0;
    }
    match &model.mla {
        Some(m) => 4.0 * (m.q_lora_rank + m.kv_lora_rank) as f64,
        None => 4.0 * (model.q_width() + model.kv_width()) as f64 / tp,
    }
}

/// Backward time of one layer from its forward parts, seconds: the GEMMs'
/// input and weight gradients as priced with the forward (`gemm_backward`,
/// `expert_gemm_backward`: twice the forward's FLOPs, each GEMM at its own
/// depth), fused attention 2.5× (Dao et al. 2022), element-wise 2×.
pub fn layer_backward(f: &LayerTime) -> LayerTime {
    LayerTime {
        gemm: f.gemm_backward,
        attention: FLASH_BACKWARD_FACTOR * f.attention,
        elementwise: 2.0 * f.elementwise,
        expert_gemm: f.expert_gemm_backward,
        gemm_backward: 0.0,
        expert_gemm_backward: 0.0,
    }
}

/// Fused attention's backward over its forward time: five matmuls against
/// two (Dao et al. 2022 §3.1), dimensionless.
pub const FLASH_BACKWARD_FACTOR: f64 = 2.5;

/// What a recompute policy reruns in backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// Nothing.
    Nothing,
    /// The attention core's forward (selective recompute): the score,
    /// softmax and value GEMMs without flash attention, the fused kernel's
    /// forward with it.
    AttentionCore,
    /// The whole forward of every transformer layer.
    Forward,
}

/// What `recompute` reruns ([ref:korthikanti-2022] §5).
///
/// Selective recompute reruns the attention core's forward in backward
/// with or without flash attention: Megatron-Core checkpoints the core
/// attention call whenever `recompute_granularity == 'selective'` and
/// `core_attn` is among `--recompute-modules` (its default), whatever the
/// backend (`Attention.checkpoint_core_attention` and
/// `_checkpointed_attention_forward` in
/// `megatron/core/transformer/attention.py`, [ref:megatron-core-attention]).
/// With flash attention this saves almost nothing (the kernel keeps only
/// Q, K, V, its output and the row log-sum-exp, which the checkpoint keeps
/// too), so the rerun is time without memory; the search then prefers no
/// recompute, as it should. (The legacy `megatron/legacy/model/transformer.py`,
/// removed in 8de8238844, skipped the checkpoint when flash attention was
/// on; meshplan prices Megatron-Core, which every engine it targets runs.)
pub fn rerun(recompute: Recompute) -> Rerun {
    match recompute {
        Recompute::None => Rerun::Nothing,
        Recompute::Selective => Rerun::AttentionCore,
        Recompute::Full => Rerun::Forward,
    }
}

/// Forward time recomputed in backward, seconds ([`rerun`]).
pub fn layer_recompute(f: &LayerTime, recompute: Recompute) -> f64 {
    match rerun(recompute) {
        Rerun::Nothing => 0.0,
        Rerun::AttentionCore => f.attention,
        Rerun::Forward => f.total(),
    }
}

/// Forward time of one linear projection `[m×k]·[k×n]` in the job's
/// precision, seconds: the forward of [`linear_pass_times`] for `lin` with
/// output width `n` (one of its [`Linear::parts`], priced on its own).
fn projection_forward_time(lin: &Linear, n: f64, r: &Rates) -> f64 {
    let one = Linear {
        n,
        parts: [0.0; 3],
        ..*lin
    };
    linear_pass_times(&one, r).0
}

/// Forward time that torchtitan's per-op selective activation checkpointing
/// reruns in backward for one layer, seconds ([ref:torchtitan-op-sac]):
/// every second matmul of the block and every element-wise op.
///
/// Source: `_custom_policy` in torchtitan
/// `torchtitan/parallelisms/parallelize_llama.py` at 9dec370 and
/// `torchtitan/models/llama3/parallelize_llama.py` at 820504e and e7c0cae
/// (the commits of the December 2024, async-TP and H200 benchmarks) marks
/// the outputs of `_save_list` (`aten.mm`, the SDPA kernels,
/// `reduce_scatter_tensor`, `aten.max`) `MUST_SAVE` except every second
/// `aten.mm` of the block (a per-block counter), and every other op
/// `PREFER_RECOMPUTE`; the block is a non-reentrant `checkpoint_wrapper`,
/// which reruns the forward in backward. What [`crate::cost::memory::op_sac_terms`]
/// does not save is what this reruns: the 2nd, 4th and 6th matmul in the
/// order the block runs them (`wq, wk, wv, wo`, then `w1, w3, w2`:
/// `wk`, `wo`, `w3` for Llama), each at its own shape, and the forward's
/// element-wise work (norms, RoPE, SwiGLU, residual adds, `f.elementwise`).
/// The attention kernel's output is saved, so attention is not rerun.
/// `lins` are the layer's non-expert linears in the block's order
/// ([`linear_gemms`]); their [`Linear::parts`] are the separate projections.
/// Not priced: the float8 re-casts of the recomputed matmuls' inputs (their
/// amax is saved; 3 bytes per input element, under 0.5% of the H200 rows'
/// step), and the TP all-gathers a recomputed matmul needs again.
///
/// Example (bf16, the roofline without launch): Llama 3.1 8B at TP 1,
/// m = 16,384 tokens: `wk` 2·16384·1024·4096, `wo` 2·16384·4096·4096 and
/// `w3` 2·16384·14336·4096 FLOPs, 2.61e12 in all, 36.5% of the layer's
/// 7.14e12 forward linear FLOPs.
pub fn op_sac_recompute(lins: &[Linear], f: &LayerTime, r: &Rates) -> f64 {
    let mut mm = 0u32;
    let mut rerun = f.elementwise;
    for lin in lins.iter().filter(|l| !l.expert) {
        let mut one = |n: f64| {
            mm += 1;
            if mm % 2 == 0 {
                rerun += projection_forward_time(lin, n, r);
            }
        };
        if lin.parts.iter().any(|&w| w > 0.0) {
            for &w in lin.parts.iter().filter(|&&w| w > 0.0) {
                one(f64::from(w));
            }
        } else {
            one(lin.n);
        }
    }
    rerun
}

/// Parameters of one transformer layer a token's GEMMs meet, for the
/// model FLOPs (`6·` this per token): attention plus the dense MLP, or for
/// an MoE layer attention, shared experts, router and the top-k routed
/// experts; norms are not counted (Megatron-LM `num_floating_point_operations`).
pub fn layer_flop_params(model: &Model, moe: bool) -> f64 {
    if moe {
        model.attention_params()
            + model.moe_shared_and_router_params()
            + model.moe.as_ref().map(|m| m.top_k as f64).unwrap_or(0.0) * model.one_expert_params()
    } else {
        model.attention_params() + model.mlp_params(model.architecture.ffn)
    }
}

/// Model FLOPs of one optimizer step (Megatron-LM
/// `num_floating_point_operations` [ref:megatron-flops]): `6·B·s·[…]` for every
/// GEMM (forward, input gradient, weight gradient) plus the causal attention
/// core `6·B·s²·q` per layer (halved for the mask), logits included; routed
/// experts count top-k only. Recompute is not counted (MFU convention).
/// Multi-token-prediction layers count as Megatron counts them
/// ([`crate::cost::mtp::model_flops_per_step`]).
pub fn model_flops_per_step(model: &Model, global_batch: f64, seq: f64) -> f64 {
    let tokens = global_batch * seq;
    let per_token_params = model.dense_layers() as f64 * layer_flop_params(model, false)
        + model.moe_layers() as f64 * layer_flop_params(model, true)
        + (model.architecture.vocab * model.architecture.hidden) as f64;
    let gemm = 6.0 * tokens * per_token_params;
    let core = attention_core_flops(model, seq, seq);
    let attn = 3.0 * model.architecture.layers as f64 * global_batch * core;
    let mtp = crate::cost::mtp::model_flops_per_step(
        model,
        global_batch,
        seq,
        layer_flop_params(model, model.mtp_is_moe()),
        core,
    );
    gemm + attn + mtp
}

/// Forward FLOPs recomputed per step ([`rerun`]).
pub fn recompute_flops_per_step(
    model: &Model,
    global_batch: f64,
    seq: f64,
    recompute: Recompute,
) -> f64 {
    match rerun(recompute) {
        Rerun::Nothing => 0.0,
        Rerun::AttentionCore => {
            (model.architecture.layers + model.architecture.mtp_layers) as f64
                * global_batch
                * attention_core_flops(model, seq, seq)
        }
        Rerun::Forward => {
            // One more forward of every transformer layer (the MTP layers'
            // too): a third of the layers' model FLOPs (the logits, the main
            // model's and each MTP layer's, are not recomputed).
            let logits = 6.0
                * global_batch
                * seq
                * (1 + model.architecture.mtp_layers) as f64
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Catalog;

    #[test]
    fn attention_curve_reproduces_the_published_kernel_numbers() {
        // FlashAttention-3 paper (arXiv:2407.08608) Figure 5, H100 SXM5,
        // BF16, head dimension 128, forward, TFLOP/s at 512 … 16k tokens.
        let causal: [(AttnKernel, [f64; 6]); 3] = [
            (AttnKernel::Fa2, [191.0, 260.0, 298.0, 319.0, 333.0, 335.0]),
            (AttnKernel::Fa3, [292.0, 423.0, 521.0, 579.0, 602.0, 616.0]),
            (
                AttnKernel::Cudnn,
                [315.0, 410.0, 484.0, 518.0, 529.0, 539.0],
            ),
        ];
        for (k, v) in causal {
            for (len, want) in KERNEL_BENCH_SEQ.iter().zip(v) {
                assert_eq!(attention_kernel_tflops(k, true, *len), want, "{k:?} {len}");
            }
        }
        // Without the mask, 1k … 16k.
        let full: [(AttnKernel, [f64; 5]); 3] = [
            (AttnKernel::Fa2, [350.0, 362.0, 368.0, 370.0, 370.0]),
            (AttnKernel::Fa3, [565.0, 625.0, 638.0, 646.0, 648.0]),
            (AttnKernel::Cudnn, [574.0, 617.0, 609.0, 600.0, 595.0]),
        ];
        for (k, v) in full {
            for (len, want) in KERNEL_BENCH_SEQ[1..].iter().zip(v) {
                assert_eq!(attention_kernel_tflops(k, false, *len), want, "{k:?} {len}");
            }
        }
        // Between points, linear in log₂ length: FlashAttention-2 causal at
        // 3072 keys: 298 + (log₂ 3072 − 11)·(319 − 298) = 310.28.
        let x = attention_kernel_tflops(AttnKernel::Fa2, true, 3072.0);
        assert!(
            (x - (298.0 + (3072f64.log2() - 11.0) * 21.0)).abs() < 1e-9,
            "{x}"
        );
        assert!((x - 310.28).abs() < 0.01, "{x}");
        // Flat beyond the benchmarked range: 262144 keys as 16k, 64 as 512.
        assert_eq!(
            attention_kernel_tflops(AttnKernel::Fa2, true, 262144.0),
            335.0
        );
        assert_eq!(
            attention_kernel_tflops(AttnKernel::Cudnn, true, 64.0),
            315.0
        );
    }

    #[test]
    fn qk_norm_bytes_by_hand() {
        // Worked in `qk_norm_bytes_per_token`'s doc comment.
        let q30 = &Catalog::shipped_model("qwen3-30b-a3b");
        // Qwen3-30B-A3B: q 32·128 = 4096, kv 4·128 = 512, 4 bytes each
        // (bf16 read + write): 18,432 per token at T = 1, 9,216 at T = 2.
        assert_eq!(qk_norm_bytes_per_token(q30, 1.0), 18_432.0);
        assert_eq!(qk_norm_bytes_per_token(q30, 2.0), 9_216.0);
        // DeepSeek-V3: the latents q 1536 and kv 512, not split by TP.
        let ds = &Catalog::shipped_model("deepseek-v3");
        assert_eq!(qk_norm_bytes_per_token(ds, 1.0), 8_192.0);
        assert_eq!(qk_norm_bytes_per_token(ds, 8.0), 8_192.0);
        // Llama 3 8B has none.
        let l8 = &Catalog::shipped_model("llama3-8b");
        assert_eq!(qk_norm_bytes_per_token(l8, 1.0), 0.0);
    }

    #[test]
    fn contraction_factor_by_hand() {
        // H100 FP8, k½ = 460, k = 512 (Llama-3-8B's output projection at
        // TP 8): (512/972)·(4556/4096) = 0.58591.
        let f = contraction_factor(512.0, 460.0);
        assert!((f - 512.0 / 972.0 * 4556.0 / 4096.0).abs() < 1e-12, "{f}");
        assert!((f - 0.58591).abs() < 1e-5, "{f}");
        // The reference depth is 1; no curve is 1 at any depth.
        assert_eq!(contraction_factor(GEMM_REFERENCE_K, 160.0), 1.0);
        assert_eq!(contraction_factor(64.0, 0.0), 1.0);
    }

    #[test]
    fn contraction_curve_reproduces_the_published_kernel_sweeps() {
        /// Asserts that the depth curve of `half_k` gives each (k, TFLOP/s)
        /// of the `what` sweep relative to `reference` TFLOP/s (its k =
        /// 4096 value) within `tolerance`.
        fn within(what: &str, sweep: &[(f64, f64)], reference: f64, half_k: f64, tolerance: f64) {
            for &(k, tf) in sweep {
                let (want, got) = (tf / reference, contraction_factor(k, half_k));
                assert!(
                    (got / want - 1.0).abs() < tolerance,
                    "{what} k={k}: {got} vs {want}"
                );
            }
        }
        // bf16, OpenXLA's default matmul table for sm_90 (cuBLAS, batch 4,
        // m = n = 4096), TFLOP/s at k = 256 … 4096, against the profile's
        // k½ = 160 (hardware/gpus/h100-sxm.toml): throughput relative to
        // k = 4096 within 2.5%.
        let bf16 = [
            (256.0, 505.2),
            (512.0, 620.4),
            (1024.0, 722.3),
            (2048.0, 759.5),
        ];
        within("bf16", &bf16, 788.7, 160.0, 0.025);
        // FP8, TileLang's H800 benchmark (m = n = 8192), relative to
        // k = 4096 (1467 TFLOP/s), against k½ = 460: within 3.5%.
        let fp8 = [
            (256.0, 569.0),
            (512.0, 858.0),
            (1024.0, 1129.0),
            (2048.0, 1343.0),
            (8192.0, 1507.0),
            (16384.0, 1541.0),
        ];
        within("fp8", &fp8, 1467.0, 460.0, 0.035);
        // bf16 on B200: OpenXLA's table for sm_100 (cuBLAS, batch 4,
        // m = n = 4096), relative to k = 4096 (1670.5 TFLOP/s), against
        // the shipped b200 profile's k½ (hardware/gpus/b200.toml, 325):
        // within 1.5%.
        let cat = Catalog::shipped().unwrap();
        let half_k = |name: &str| {
            cat.gpus
                .iter()
                .find(|g| g.name == name)
                .unwrap()
                .efficiency
                .gemm_half_k
        };
        let b200_half_k = half_k("b200");
        let b200 = [
            (256.0, 791.8),
            (512.0, 1090.6),
            (1024.0, 1350.5),
            (2048.0, 1539.9),
        ];
        within("b200 bf16", &b200, 1670.5, b200_half_k, 0.015);
        // The machine-balance estimate it replaced (152) misses k = 256 by
        // more than a fifth: (256/408)·(4248/4096) = 0.651 against 0.474.
        assert!(contraction_factor(256.0, 152.0) / (791.8 / 1670.5) > 1.2);
        // GB200 and GB300 carry the same die's curve.
        assert_eq!(half_k("gb200"), b200_half_k);
        assert_eq!(half_k("gb300"), b200_half_k);
    }

    /// Rates of a compute-bound GPU at 1e15 FLOP/s (no launch cost,
    /// unlimited bandwidth, bf16) with depth curve `gemm_half_k`.
    fn compute_bound(gemm_half_k: f64) -> Rates {
        Rates {
            gemm_half_k,
            ..Rates::flat(1e30, 0.0)
        }
    }

    #[test]
    fn backward_gemms_at_their_own_depths() {
        // A compute-bound GEMM (no launch cost, unlimited bandwidth) at
        // 1e15 FLOP/s, k½ = 400: [8192 × 512]·[512 × 4096], 2·8192·4096·512
        // = 3.436e10 FLOPs each pass. Forward contracts over 512, the input
        // gradient over 4096 (factor 1), the weight gradient over 8192.
        let r = compute_bound(400.0);
        let flops = 2.0 * 8192.0 * 4096.0 * 512.0;
        let g = |k: f64| (k / (k + 400.0)) * (4496.0 / 4096.0);
        let fwd = gemm_time(8192.0, 4096.0, 512.0, &r);
        assert!((fwd - flops / (1e15 * g(512.0))).abs() < 1e-15, "{fwd}");
        let bwd = gemm_backward_time(8192.0, 4096.0, 512.0, &r);
        let want = flops / 1e15 + flops / (1e15 * g(8192.0));
        assert!((bwd - want).abs() < 1e-15, "{bwd} vs {want}");
        // g(512) = (512/912)·(4496/4096) = 0.61624, g(8192) = 1.04656:
        // the backward is (1 + 1/1.04656)·0.61624 = 1.2051 forwards, not 2
        // (the shallow forward is the slow pass).
        assert!((bwd / fwd - 1.2051).abs() < 1e-3, "{}", bwd / fwd);
        // Without the curve the backward is twice the forward.
        let flat = Rates {
            gemm_half_k: 0.0,
            ..r
        };
        let (f0, b0) = (
            gemm_time(8192.0, 4096.0, 512.0, &flat),
            gemm_backward_time(8192.0, 4096.0, 512.0, &flat),
        );
        assert!((b0 - 2.0 * f0).abs() < 1e-15);
    }

    #[test]
    fn op_sac_reruns_every_second_matmul_of_the_block() {
        // Llama 3.1 8B at TP 1, one micro-batch of 2 × 8192 tokens, bf16 at
        // 1e15 FLOP/s, no depth curve, no launch cost, unlimited bandwidth.
        // The block runs wq, wk, wv, wo, w1, w3, w2; torchtitan's op SAC
        // reruns the 2nd, 4th and 6th: wk [16384×4096]·[4096×1024], wo
        // [16384×4096]·[4096×4096], w3 [16384×4096]·[4096×14336]:
        // 2·16384·4096·(1024 + 4096 + 14336) = 2.6113e12 FLOPs, 2.6113 ms,
        // plus the forward's element-wise time (here 1 ms).
        let l8 = &Catalog::shipped_model("llama3-8b");
        let r = compute_bound(0.0);
        let sh = LayerShape {
            tokens: 16384.0,
            seq: 8192.0,
            tp: 1.0,
            sp: false,
            cp: 1.0,
            flash: true,
            kernel: AttnKernel::Fa2,
        };
        let (lins, count) = linear_gemms(l8, &sh, false, 0.0, 1.0);
        let f = LayerTime {
            elementwise: 1e-3,
            ..LayerTime::default()
        };
        let rerun = op_sac_recompute(&lins[..count], &f, &r);
        let want = 2.0 * 16384.0 * 4096.0 * (1024.0 + 4096.0 + 14336.0) / 1e15 + 1e-3;
        assert!((rerun - want).abs() < 1e-12, "{rerun} vs {want}");
        assert!((rerun - 3.6113e-3).abs() < 1e-7, "{rerun}");
        // 36.5% of the block's forward linear FLOPs
        // (2·16384·4096·(4096 + 2·1024 + 4096 + 2·14336 + 14336)).
        let all = 2.0 * 16384.0 * 4096.0 * (4096.0 + 2048.0 + 4096.0 + 28672.0 + 14336.0);
        let share = (want - 1e-3) * 1e15 / all;
        assert!((share - 0.365).abs() < 1e-3, "{share}");
        // At TP 8 the shapes shrink by 8 and the same three are rerun:
        // wk's 1024/8 = 128 columns, wo's 4096/8 contraction, w3's 1792.
        let sh8 = LayerShape { tp: 8.0, ..sh };
        let (l8s, c8) = linear_gemms(l8, &sh8, false, 0.0, 1.0);
        let rerun8 = op_sac_recompute(&l8s[..c8], &LayerTime::default(), &r);
        let want8 = 2.0 * 16384.0 * 4096.0 * (128.0 + 512.0 + 1792.0) / 1e15;
        assert!((rerun8 - want8).abs() < 1e-12, "{rerun8} vs {want8}");
    }

    #[test]
    fn attention_length_factor_against_the_8k_causal_kernel() {
        // cuDNN, causal, 2048 keys: 484 / 529; FlashAttention-2 unmasked
        // 16k: 370 / 333; the reference point itself: 1.
        let f = attention_length_factor(AttnKernel::Cudnn, true, 2048.0);
        assert!((f - 484.0 / 529.0).abs() < 1e-12, "{f}");
        let f = attention_length_factor(AttnKernel::Fa2, false, 16384.0);
        assert!((f - 370.0 / 333.0).abs() < 1e-12, "{f}");
        // The reference is the table's fifth point (read directly there).
        assert_eq!(KERNEL_BENCH_SEQ[4], ATTENTION_REFERENCE_SEQ);
        for k in AttnKernel::ALL {
            assert_eq!(
                attention_length_factor(k, true, ATTENTION_REFERENCE_SEQ),
                1.0
            );
        }
    }
}
