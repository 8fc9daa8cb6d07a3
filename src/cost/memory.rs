//! Per-rank memory, bytes. One small function per term, named after the
//! paper's terms.
//!
//! - Model states (Rajbhandari et al. 2020, Figure 1 [ref:rajbhandari-2020];
//!   the gathered unit as in PyTorch FSDP [ref:zhao-2023]): DDP
//!   `(b_w+b_g+b_o)·P`; ZeRO-1 `(b_w+b_g)·P + b_o·P/D'`;
//!   ZeRO-2 `b_w·P + (b_g+b_o)·P/D'`;
//!   ZeRO-3 `(b_w+b_g+b_o)·P/D' + P_u·b_w` (the gathered unit).
//! - Activations (Korthikanti et al. 2022, Table 2 [ref:korthikanti-2022])
//!   re-derived by counting the saved tensors, so GQA, SwiGLU, MoE and
//!   dropout-free models get their own coefficients; for GPT-3 the count gives back `s·b·h·(34 + 5·a·s/h)`.
//! - In flight: 1F1B stage i keeps `min(m, p−i)` micro-batches; interleaved
//!   keeps `min(m·v, 2·(p−i−1) + (v−1)·p + 1)` chunk micro-batches (Megatron's
//!   warm-up count plus the current one [ref:megatron-schedules]), which for
//!   stage 0 is Megatron's factor `1 + (p−1)/(p·v)`.

use serde::Serialize;

use crate::cost::breakdown::{MemoryBreakdown, MemoryDetail, MemoryPart};
use crate::layout::Recompute;
use crate::spec::{LossBuffers, Model, Recipe};

/// Persistent model states of one rank, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ModelStates {
    /// Working weights (`b_w` per held parameter, plus ZeRO-3's gathered unit).
    pub weights: f64,
    /// Gradients held while activations are (`b_g − b_step` per held
    /// gradient).
    pub grads: f64,
    /// Optimizer state (`b_o` per held parameter: fp32 master, Adam m and v).
    pub optimizer: f64,
    /// Gradients that exist only during the optimizer step (`b_step` per
    /// gradient the optimizer updates: DeepSpeed's fp32 partition,
    /// [`Recipe::step_grad_bytes`]); not in [`ModelStates::total`].
    pub step_grads: f64,
}

impl ModelStates {
    /// The states held through forward and backward, bytes: weights,
    /// gradients and optimizer state, without [`ModelStates::step_grads`].
    pub fn total(&self) -> f64 {
        self.weights + self.grads + self.optimizer
    }

    /// The states at the optimizer step, bytes: [`ModelStates::total`] plus
    /// the step-only gradients.
    pub fn at_step(&self) -> f64 {
        self.total() + self.step_grads
    }
}

/// Model states for `params` parameters held by a rank, sharded over a group
/// of `shard` ranks at ZeRO stage `zero` (the per-stage model states of
/// [ref:rajbhandari-2020], Figure 1). `unit_params` is
/// ZeRO-3's gathered unit (layers kept whole while they run, with prefetch).
///
/// Example ([ref:case-m1], [ref:megatron-dist-optimizer]): P = 7e9,
/// Megatron recipe 2/4/12, ZeRO-1, D' = 8:
/// `(2+4)·7e9 + 12·7e9/8 = 52.5e9` bytes.
///
/// The recipe's step-only gradient bytes `b_step` ([`Recipe::step_grad_bytes`])
/// leave `grads` for `step_grads`, sharded like the optimizer state it
/// feeds (DeepSpeed builds the fp32 partition of the rank's own shard,
/// [ref:deepspeed-zero-optimizer]).
pub fn model_states(
    params: f64,
    recipe: &Recipe,
    zero: u8,
    shard: f64,
    unit_params: f64,
) -> ModelStates {
    let (w, o, step) = (
        recipe.weight_bytes,
        recipe.optimizer_bytes,
        recipe.step_grad_bytes,
    );
    let g = recipe.grad_bytes - step;
    let d = shard.max(1.0);
    let step_shard = if zero == 0 { 1.0 } else { d };
    let step_grads = step * params / step_shard;
    match zero {
        0 => ModelStates {
            weights: w * params,
            grads: g * params,
            optimizer: o * params,
            step_grads,
        },
        1 => ModelStates {
            weights: w * params,
            grads: g * params,
            optimizer: o * params / d,
            step_grads,
        },
        2 => ModelStates {
            weights: w * params,
            grads: g * params / d,
            optimizer: o * params / d,
            step_grads,
        },
        _ => ModelStates {
            weights: w * params / d + w * unit_params,
            grads: g * params / d,
            optimizer: o * params / d,
            step_grads,
        },
    }
}

/// The rank's peak when the recipe keeps gradients only for the optimizer
/// step ([`ModelStates::step_grads`], DeepSpeed's fp32 gradient partition,
/// [ref:deepspeed-zero-optimizer]): two moments, bytes.
///
/// - backward: everything in `mem` (the states without the step-only
///   gradients, plus activations, logits and temporaries);
/// - optimizer step: the states (weights, gradients, optimizer, FP8/FP4
///   copies) plus `step_grads`; the activations, logits and temporaries of
///   the last backward are freed by then. The weights keep ZeRO-3's
///   gathered unit and the gradients their unsharded buckets (an upper
///   bound: DeepSpeed releases gathered parameters after backward).
///
/// `mem` becomes the larger moment, so its parts still add up to the peak;
/// `dense` and `expert` are the step-only gradients of the dense and the
/// expert parameters (the expert share also goes to its detail).
/// Example (NAR21-T2-04's layout, [`tests`]): 530B on D = 640, ZeRO-3:
/// backward 76.26 GiB against a step of 4.76 + 5.60 + 9.25 + 3.08 = 22.7 GiB.
pub fn peak_at_optimizer_step(mem: &mut MemoryBreakdown, dense: f64, expert: f64) {
    let step_grads = dense + expert;
    let states = mem.model_states() + mem[MemoryPart::LowPrecisionWeights];
    if states + step_grads <= mem.total() {
        return;
    }
    let kept = [
        MemoryPart::Weights,
        MemoryPart::Gradients,
        MemoryPart::Optimizer,
        MemoryPart::LowPrecisionWeights,
    ];
    let mut step = MemoryBreakdown::default();
    for p in kept {
        step[p] = mem[p];
    }
    for d in [
        MemoryDetail::ExpertWeights,
        MemoryDetail::ExpertGradients,
        MemoryDetail::ExpertOptimizer,
        MemoryDetail::ScalingState,
        MemoryDetail::UnshardedGradients,
    ] {
        step[d] = mem[d];
    }
    step[MemoryPart::Gradients] += step_grads;
    step[MemoryDetail::ExpertGradients] += expert;
    *mem = step;
}

/// Saved-activation bytes per token of one layer, split by how they shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ActivationTerms {
    /// Bytes per token of tensors of the full hidden width, which TP
    /// replicates unless SP is on (norm inputs, QKV and MLP inputs,
    /// dropout masks).
    pub replicated: f64,
    /// Bytes per token of tensors TP always shards (Q, K, V, attention
    /// output, MLP intermediates).
    pub sharded: f64,
    /// Bytes per token per key of the unfused attention scores over all
    /// heads: softmax output (2), dropout mask (1) and dropout output (2) per
    /// head (`5·a` per key; the `5·a·s/h` term of Korthikanti et al.).
    pub score_per_key: f64,
}

/// Saved tensors of a dense (or the attention part of an MoE) layer, bytes
/// per token, bf16 activations with 1-byte dropout masks.
///
/// Attention: two norm inputs `2·2h`, QKV input `2h`, Q `2q`, K and V `2·2kv`,
/// output-projection input `2q`, its dropout mask `h`. MLP: input `2h`,
/// fc1 output `2f` (gated: `2·2f`), activation output `2f`, dropout mask `h`.
/// For GPT (q = kv = h, f = 4h, dropout): replicated `10h`, sharded `24h`,
/// total `34h` as in Korthikanti et al. 2022 Eq. 1.
pub fn dense_layer_terms(model: &Model, include_mlp: bool) -> ActivationTerms {
    let a = &model.architecture;
    let h = a.hidden as f64;
    let mask = if a.dropout { 1.0 } else { 0.0 };
    let q = model.q_width() as f64;
    let out = model.attn_out_width() as f64;
    let kv = match &model.mla {
        // MLA keeps full per-head keys and values after up-projection.
        Some(_) => (q + out) / 2.0,
        None => model.kv_width() as f64,
    };
    let mut replicated = 2.0 * 2.0 * h + 2.0 * h + mask * h;
    if let Some(m) = &model.mla {
        // MLA latents (Megatron `MLASelfAttention`): the down-projection
        // outputs (q: q_lora; kv: kv_lora + the shared rotary key) are saved
        // as inputs of their RMSNorms, and the normed q_lora and kv_lora as
        // inputs of the up-projections. They come from the replicated
        // (SP-scattered) hidden state, so they shard like it.
        replicated += 2.0 * (2 * m.q_lora_rank + 2 * m.kv_lora_rank + m.qk_rope_head_dim) as f64;
    }
    let mut sharded = 2.0 * q + 2.0 * 2.0 * kv + 2.0 * out;
    if include_mlp {
        let f = a.ffn as f64;
        replicated += 2.0 * h + mask * h;
        sharded += if a.gated_mlp { 4.0 * f } else { 2.0 * f } + 2.0 * f;
    }
    let score_per_key = if a.dropout { 5.0 } else { 2.0 } * a.heads as f64;
    ActivationTerms {
        replicated,
        sharded,
        score_per_key,
    }
}

/// Bytes per layer per micro-batch kept for backward by one rank.
///
/// `tokens` = `b·s/C` (CP divides the sequence), `keys` = s. With SP the
/// replicated part divides by T. Selective recompute, or flash attention,
/// drops the score term, and only once: with flash attention selective
/// recompute saves nothing more ([ref:case-m4]). Full
/// recompute keeps only the layer input `2h` per token (÷T with SP).
///
/// Check (GPT-3 175B, s = 2048, b = 1): no parallelism
/// `s·b·h·(34 + 5·a·s/h) = 2,868,903,936`; T = 8 with SP and selective
/// `34·s·b·h/8 = 106,954,752`.
pub fn layer_activation_bytes(
    terms: &ActivationTerms,
    hidden: f64,
    tokens: f64,
    keys: f64,
    tp: f64,
    sp: bool,
    recompute: Recompute,
    flash: bool,
) -> f64 {
    let rep_div = if sp { tp } else { 1.0 };
    match recompute {
        Recompute::Full => tokens * 2.0 * hidden / rep_div,
        _ => {
            let score = if flash || recompute == Recompute::Selective {
                0.0
            } else {
                terms.score_per_key * keys / tp
            };
            tokens * (terms.replicated / rep_div + terms.sharded / tp + score)
        }
    }
}

/// Saved tensors of one layer under torchtitan's per-op selective
/// activation checkpointing, bytes per token (bf16 tensors), split by how
/// they shard as in [`dense_layer_terms`].
///
/// Source: torchtitan `torchtitan/parallelisms/parallelize_llama.py` at
/// 9dec370 (the commit of the December 2024 benchmarks; the same policy in
/// `torchtitan/models/llama3/parallelize_llama.py` at e7c0cae, June 2025):
/// `_save_list` holds `aten.mm`, the SDPA flash and efficient kernels,
/// `reduce_scatter_tensor` and the float8 `abs`/`max`; `_custom_policy`
/// saves the outputs of those ops except every second `mm` of the block
/// (the counter counts the block's matmuls in order) and recomputes every
/// other op. The block is a `checkpoint_wrapper`, so its input is saved too.
/// The matmuls run `wq, wk, wv, wo` then `w1, w3, w2` (gated MLP; `w1, w2`
/// without the gate), so the 1st, 3rd, 5th and 7th are saved: `wq` (2q),
/// `wv` (2kv), `w1` (2f), `w2` (2h); the attention kernel keeps its output
/// (2q) and its fp32 log-sum-exp (4 bytes per head).
///
/// Worked example, Llama 3.1 8B (h = q = 4096, kv = 1024, f = 14336, 32
/// heads): replicated = layer input 2·4096 + `w2` output 2·4096 = 16,384;
/// sharded = 2·4096 + 2·1024 + 2·4096 + 4·32 + 2·14336 = 47,232; 63,616
/// bytes per token per layer against 139,264 for [`dense_layer_terms`]
/// (no recompute). For b = 2, s = 8192 and 32 layers: 63,616 · 16,384 · 32
/// = 33,353,105,408 bytes (31.06 GiB).
pub fn op_sac_terms(model: &Model, include_mlp: bool) -> ActivationTerms {
    let a = &model.architecture;
    let h = a.hidden as f64;
    let q = model.q_width() as f64;
    let kv = model.kv_width() as f64;
    let out = model.attn_out_width() as f64;
    let f = a.ffn as f64;
    // Output widths of the block's matmuls in order, and whether each
    // output is sharded by TP (column-parallel) or full width (row-parallel).
    let mut mms = [
        (q, true),
        (kv, true),
        (kv, true),
        (h, false),
        (f, true),
        (f, true),
        (h, false),
    ];
    let count = match (include_mlp, a.gated_mlp) {
        (false, _) => 4,
        (true, true) => 7,
        (true, false) => {
            mms[5] = (h, false);
            6
        }
    };
    // Layer input, and the attention kernel's output and log-sum-exp.
    let mut replicated = 2.0 * h;
    let mut sharded = 2.0 * out + 4.0 * a.heads as f64;
    for (width, col) in mms[..count].iter().step_by(2) {
        if *col {
            sharded += 2.0 * width;
        } else {
            replicated += 2.0 * width;
        }
    }
    ActivationTerms {
        replicated,
        sharded,
        score_per_key: 0.0,
    }
}

/// Bytes the loss holds for one micro-batch at its peak (the backward of
/// the cross-entropy), `t` local tokens, `vocab` the padded vocabulary:
///
/// - [`LossBuffers::MegatronVocabParallel`] — bf16 logits `2·t·V/T` plus the
///   fp32 copy and its gradient (`2·4·t·V/T`) = 10 bytes per local logit
///   ([`logits_bytes`]).
/// - [`LossBuffers::TorchFp32Eager`] — torchtitan's
///   `cross_entropy(pred.flatten(0, 1).float(), labels)` (`train.py` at
///   9dec370; the training loop `del pred` before `backward`, and
///   `log_softmax` saves only its output): at the backward of the
///   log-softmax the saved fp32 output, the gradient from `nll_loss` and the
///   gradient it produces are live, 3·4 = 12 bytes per logit, over V/T
///   (torchtitan's loss parallel shards the logits by TP).
/// - [`LossBuffers::TorchCompiled`] — the same loss under `torch.compile`
///   (`torchtitan/components/loss.py` at e7c0cae compiles it with
///   `--training.compile`): the fused kernel saves the bf16 logits and writes
///   their bf16 gradient, 2 + 2 = 4 bytes per logit.
/// - [`LossBuffers::TorchBf16Gathered`] — KempnerForge's
///   `F.cross_entropy` on bf16 logits (`kempnerforge/training/loss.py`)
///   gathered to every TP rank (`ColwiseParallel` output to `Replicate`,
///   `kempnerforge/distributed/tensor_parallel.py`), with `logits` held by
///   the loop (`scripts/train.py`) through backward: logits, saved
///   log-softmax and two gradients, 4·2 = 8 bytes per logit of the full V.
/// - [`LossBuffers::TeFusedInPlace`] — Transformer Engine's
///   `parallel_cross_entropy` (`transformer_engine/pytorch/triton/
///   cross_entropy.py`; Megatron's `language_module.py`
///   `compute_language_model_loss` calls it under
///   `cross_entropy_loss_fusion` with `cross_entropy_fusion_impl = "te"`,
///   core_v0.14.0): the forward keeps the bf16 logits and an fp32 (max,
///   sum, target logit) triple per token, and the backward kernel writes
///   the gradient into the logits in place: `2·t·V/T + 12·t`.
///
/// Worked example, t = 16,384, V = 128,256, T = 1: Megatron 21.01e9,
/// eager fp32 25.21e9, compiled 8.40e9, bf16 gathered 16.81e9 bytes, TE
/// fused 2·2,101,346,304 + 12·16,384 = 4,202,889,216 bytes.
pub fn loss_buffer_bytes(tokens: f64, vocab: f64, tp: f64, loss: LossBuffers) -> f64 {
    match loss {
        LossBuffers::TeFusedInPlace => 2.0 * tokens * vocab / tp + 12.0 * tokens,
        LossBuffers::MegatronVocabParallel => logits_bytes(tokens, vocab, tp),
        LossBuffers::TorchFp32Eager => 12.0 * tokens * vocab / tp,
        LossBuffers::TorchCompiled => 4.0 * tokens * vocab / tp,
        LossBuffers::TorchBf16Gathered => 8.0 * tokens * vocab,
    }
}

/// Unsharded gradients an engine keeps across the micro-batches of a step
/// when it accumulates without reducing, bytes: `b · P_rank`, where P_rank
/// is every parameter the rank computes with (not divided by D).
///
/// Source: PyTorch FSDP2, `torch/distributed/fsdp/_fully_shard/
/// _fsdp_param_group.py` `post_backward`: without gradient sync
/// (`set_requires_gradient_sync(False)`, which KempnerForge's
/// `kempnerforge/training/grad.py` `maybe_no_sync` sets on every micro-batch
/// but the last) the group does not reduce-scatter; `_fsdp_param.py`
/// `to_accumulated_grad_if_needed` moves the unsharded gradient to
/// `unsharded_accumulated_grad` in the reduce dtype (fp32 under
/// `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), kept until
/// the last micro-batch reduces it.
///
/// Worked example: Llama-3 70B under TP = 4 with the embedding replicated
/// (KempnerForge keeps `tok_embeddings` whole): P_rank = (70.55e9 −
/// 1.05e9)/4 + 1.05e9 = 18.43e9, fp32: 4 · 18.43e9 = 73.7e9 bytes.
pub fn unsharded_accumulated_grads(rank_params: f64, bytes_per_param: f64) -> f64 {
    bytes_per_param * rank_params
}

/// Micro-batches (1F1B) or chunk micro-batches (interleaved) whose
/// activations pipeline rank `rank` (0-based) holds at its peak.
///
/// 1F1B: `min(m, p − rank)` (Narayanan et al. 2021 [ref:narayanan-2021]).
/// Interleaved with v chunks: `min(m·v, 2·(p − rank − 1) + (v − 1)·p + 1)`
/// chunk micro-batches, Megatron's warm-up count plus one; with the expert
/// all-to-all overlapped across micro-batches (`a2a_overlap`,
/// `--overlap-moe-expert-parallel-comm`) Megatron warms up one chunk
/// micro-batch more (`get_pp_rank_microbatches` in
/// `pipeline_parallel/schedules.py`, core_v0.14.0). GPipe would hold m.
pub fn in_flight(rank: u32, pp: u32, vpp: u32, m: u64, a2a_overlap: bool) -> f64 {
    let p = pp as u64;
    let i = rank as u64;
    if vpp <= 1 {
        m.min(p - i) as f64
    } else {
        let v = vpp as u64;
        let extra = u64::from(a2a_overlap);
        (m * v).min(2 * (p - i - 1) + (v - 1) * p + 1 + extra) as f64
    }
}

/// Transfer time of one offloaded layer's saved activations over the host
/// link, one micro-batch, seconds: `(total, exposed)`. The activations go
/// out while the next layer runs its forward and come back while the layer
/// after it in backward order runs its backward (Transformer Engine's
/// `cpu_offload.py` double-buffered group offload, which Megatron's
/// `--cpu-offloading-num-layers` drives): each way takes `A/B`, and only
/// what exceeds the compute it overlaps is exposed,
/// `max(0, A/B − t_f) + max(0, A/B − t_b)`.
///
/// Worked example: A = 3.62e9 bytes (a Llama-3 70B layer, b = 2, s = 8192,
/// FP8 inputs), B = 225 GB/s: 16.1 ms each way; against t_f = 12 ms and
/// t_b = 24 ms, 4.1 ms of the 32.2 ms is exposed.
pub fn offload_transfer_time(
    layer_bytes: f64,
    host_gbs: f64,
    fwd_time: f64,
    bwd_time: f64,
) -> (f64, f64) {
    let one_way = layer_bytes / (host_gbs * 1e9);
    (
        2.0 * one_way,
        (one_way - fwd_time).max(0.0) + (one_way - bwd_time).max(0.0),
    )
}

/// Logits and loss buffers on the last stage for one micro-batch, bytes:
/// bf16 logits `2·t·V/T` plus the fp32 copy and its gradient in the
/// cross-entropy (`2·4·t·V/T`), t = local tokens.
pub fn logits_bytes(tokens: f64, vocab: f64, tp: f64) -> f64 {
    tokens * vocab / tp * (2.0 + 4.0 + 4.0)
}

/// Unfused attention scores of one layer in flight during forward, bytes:
/// the `B·H·L²·b` of standard attention [ref:dao-2022] with b = 2 bytes,
/// for this rank's heads and queries.
pub fn score_matrix_bytes(tokens: f64, keys: f64, heads: f64, tp: f64) -> f64 {
    2.0 * tokens * keys * heads / tp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_model_states_seed_recipe() {
        let r = Recipe::ADAM_16B;
        let p = 1e9;
        // DDP: 16 bytes per parameter.
        assert_eq!(model_states(p, &r, 0, 8.0, 0.0).total(), 16e9);
        // ZeRO-1: (2+2)P + 12P/D, D = 8 → 4e9 + 1.5e9.
        assert_eq!(model_states(p, &r, 1, 8.0, 0.0).total(), 5.5e9);
        // ZeRO-2: 2P + 14P/8 = 3.75e9.
        assert_eq!(model_states(p, &r, 2, 8.0, 0.0).total(), 3.75e9);
        // ZeRO-3: 16P/8 + 2·P_u, P_u = 1e8 → 2.2e9.
        assert_eq!(model_states(p, &r, 3, 8.0, 1e8).total(), 2.2e9);
    }

    #[test]
    fn deepspeed_step_only_gradients() {
        // P = 1e9, DeepSpeed 2/(2+4)/12, D = 8.
        let r = Recipe::DEEPSPEED;
        let p = 1e9;
        // ZeRO-1: held 2P + 2P + 12P/8 = 5.5e9; the step adds 4P/8 = 0.5e9.
        let z1 = model_states(p, &r, 1, 8.0, 0.0);
        assert_eq!((z1.total(), z1.step_grads), (5.5e9, 0.5e9));
        // ZeRO-2 at the step: 2P + 18P/8 = 4.25e9 ([ref:case-m2]'s 2P + 18P/N).
        assert_eq!(model_states(p, &r, 2, 8.0, 0.0).at_step(), 4.25e9);
        // ZeRO-0 (no partition): the fp32 copy of all P, 4e9.
        assert_eq!(model_states(p, &r, 0, 8.0, 0.0).step_grads, 4e9);

        // Backward is the peak: 4 + 2 + 12 + 30 + 10 = 58 against a step of
        // 4 + 2 + 12 + 4 = 22, so nothing changes.
        let mut m = MemoryBreakdown::default();
        m[MemoryPart::Weights] = 4.0;
        m[MemoryPart::Gradients] = 2.0;
        m[MemoryPart::Optimizer] = 12.0;
        m[MemoryPart::Activations] = 30.0;
        m[MemoryPart::Temporaries] = 10.0;
        let before = m;
        peak_at_optimizer_step(&mut m, 4.0, 0.0);
        assert_eq!(m, before);
        // The step is the peak: activations 1 and temporaries 1 give a
        // backward of 20 against 22; the breakdown becomes the step's.
        m[MemoryPart::Activations] = 1.0;
        m[MemoryPart::Temporaries] = 1.0;
        // Of the 4 step-only bytes, 1 is the experts': their detail 0.5
        // held + 1.
        m[MemoryDetail::ExpertGradients] = 0.5;
        peak_at_optimizer_step(&mut m, 3.0, 1.0);
        assert_eq!(m.total(), 22.0);
        assert_eq!(m[MemoryPart::Gradients], 6.0);
        assert_eq!(m[MemoryDetail::ExpertGradients], 1.5);
        assert_eq!(m[MemoryPart::Activations], 0.0);
    }

    fn llama31_8b() -> Model {
        crate::spec::Catalog::shipped()
            .expect("shipped catalog")
            .model("llama3-8b")
            .expect("shipped card")
            .clone()
    }

    #[test]
    fn op_sac_saves_every_other_matmul() {
        let m = llama31_8b();
        let t = op_sac_terms(&m, true);
        // Worked in the doc comment: 2·4096 + 2·4096 replicated; 2·4096 (wq)
        // + 2·1024 (wv) + 2·4096 (attention output) + 4·32 (lse) + 2·14336
        // (w1) sharded.
        assert_eq!(t.replicated, 16_384.0);
        assert_eq!(t.sharded, 47_232.0);
        assert_eq!(t.score_per_key, 0.0);
        // Against Megatron's no-recompute set of the same layer: 139,264.
        let d = dense_layer_terms(&m, true);
        assert_eq!(d.replicated + d.sharded, 139_264.0);
        // b = 2, s = 8192, 32 layers, T = 1: 33,353,105,408 bytes.
        let per_layer = layer_activation_bytes(
            &t,
            4096.0,
            16_384.0,
            8192.0,
            1.0,
            false,
            Recompute::None,
            true,
        );
        assert_eq!(per_layer * 32.0, 33_353_105_408.0);
    }

    #[test]
    fn loss_buffers_per_engine() {
        let (t, v) = (16_384.0, 128_256.0);
        // 16,384 · 128,256 = 2,101,346,304 logits.
        let n = 2_101_346_304.0;
        for (tp, engine, want) in [
            (1.0, LossBuffers::MegatronVocabParallel, 10.0 * n),
            (1.0, LossBuffers::TorchFp32Eager, 12.0 * n),
            (1.0, LossBuffers::TorchCompiled, 4.0 * n),
            // Gathered over TP: T does not divide it.
            (4.0, LossBuffers::TorchBf16Gathered, 8.0 * n),
            (4.0, LossBuffers::TorchFp32Eager, 3.0 * n),
            // TE fused in place: 2 bytes per logit + 12 per token (doc comment).
            (1.0, LossBuffers::TeFusedInPlace, 4_202_889_216.0),
        ] {
            assert_eq!(
                loss_buffer_bytes(t, v, tp, engine),
                want,
                "{engine:?}, T = {tp}"
            );
        }
    }

    #[test]
    fn fsdp2_accumulated_grads() {
        // Worked in the doc comment: 4 · 18.43e9 = 73.72e9.
        assert_eq!(unsharded_accumulated_grads(18.43e9, 4.0), 73.72e9);
    }

    #[test]
    fn offload_hidden_unless_the_link_is_slower() {
        // Doc example: 3.62e9 / 225e9 = 16.09 ms each way; exposed
        // (16.09 − 12) + 0 = 4.09 ms; total 32.18 ms.
        let (total, exposed) = offload_transfer_time(3.62e9, 225.0, 0.012, 0.024);
        assert!((total - 0.032_177_8).abs() < 1e-6, "{total}");
        assert!((exposed - 0.004_088_9).abs() < 1e-6, "{exposed}");
        // Compute longer both ways: nothing exposed.
        assert_eq!(offload_transfer_time(3.62e9, 225.0, 0.02, 0.04).1, 0.0);
    }

    #[test]
    fn in_flight_counts() {
        // 1F1B p = 4, m = 8: stage 0 holds 4, stage 3 holds 1.
        assert_eq!(in_flight(0, 4, 1, 8, false), 4.0);
        assert_eq!(in_flight(3, 4, 1, 8, false), 1.0);
        // m < p: never more than m.
        assert_eq!(in_flight(0, 8, 1, 2, false), 2.0);
        // Interleaved p = 4, v = 2, stage 0: 2·3 + 4 + 1 = 11 chunk
        // micro-batches of L/8 layers = (L/4)·4·(1 + 3/8) as Megatron's factor.
        assert_eq!(in_flight(0, 4, 2, 64, false), 11.0);
        assert_eq!(11.0 / 2.0, 4.0 * (1.0 + 3.0 / 8.0));
        // With the all-to-all overlapped one more warm-up chunk: 12; 1F1B
        // unchanged. Qwen3-30B-A3B's p = 2, v = 24, last stage: 2·0 + 23·2
        // + 1 = 47, overlapped 48.
        assert_eq!(in_flight(0, 4, 2, 64, true), 12.0);
        assert_eq!(in_flight(0, 4, 1, 8, true), 4.0);
        assert_eq!(in_flight(1, 2, 24, 32, false), 47.0);
        assert_eq!(in_flight(1, 2, 24, 32, true), 48.0);
    }
}
