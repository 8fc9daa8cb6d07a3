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

use crate::layout::Recompute;
use crate::spec::{Model, Recipe};

/// Persistent model states of one rank, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ModelStates {
    /// Working weights (`b_w` per held parameter, plus ZeRO-3's gathered unit).
    pub weights: f64,
    /// Gradients (`b_g` per held gradient).
    pub grads: f64,
    /// Optimizer state (`b_o` per held parameter: fp32 master, Adam m and v).
    pub optimizer: f64,
}

impl ModelStates {
    /// Sum of the three, bytes.
    pub fn total(&self) -> f64 {
        self.weights + self.grads + self.optimizer
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
pub fn model_states(
    params: f64,
    recipe: &Recipe,
    zero: u8,
    shard: f64,
    unit_params: f64,
) -> ModelStates {
    let (w, g, o) = (
        recipe.weight_bytes,
        recipe.grad_bytes,
        recipe.optimizer_bytes,
    );
    let d = shard.max(1.0);
    match zero {
        0 => ModelStates {
            weights: w * params,
            grads: g * params,
            optimizer: o * params,
        },
        1 => ModelStates {
            weights: w * params,
            grads: g * params,
            optimizer: o * params / d,
        },
        2 => ModelStates {
            weights: w * params,
            grads: g * params / d,
            optimizer: o * params / d,
        },
        _ => ModelStates {
            weights: w * params / d + w * unit_params,
            grads: g * params / d,
            optimizer: o * params / d,
        },
    }
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

/// Micro-batches (1F1B) or chunk micro-batches (interleaved) whose
/// activations pipeline rank `rank` (0-based) holds at its peak.
///
/// 1F1B: `min(m, p − rank)` (Narayanan et al. 2021 [ref:narayanan-2021]).
/// Interleaved with v chunks: `min(m·v, 2·(p − rank − 1) + (v − 1)·p + 1)`
/// chunk micro-batches, Megatron's warm-up count plus one. GPipe would hold m.
pub fn in_flight(rank: u32, pp: u32, vpp: u32, m: u64) -> f64 {
    let p = pp as u64;
    let i = rank as u64;
    if vpp <= 1 {
        m.min(p - i) as f64
    } else {
        let v = vpp as u64;
        (m * v).min(2 * (p - i - 1) + (v - 1) * p + 1) as f64
    }
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
    fn in_flight_counts() {
        // 1F1B p = 4, m = 8: stage 0 holds 4, stage 3 holds 1.
        assert_eq!(in_flight(0, 4, 1, 8), 4.0);
        assert_eq!(in_flight(3, 4, 1, 8), 1.0);
        // m < p: never more than m.
        assert_eq!(in_flight(0, 8, 1, 2), 2.0);
        // Interleaved p = 4, v = 2, stage 0: 2·3 + 4 + 1 = 11 chunk
        // micro-batches of L/8 layers = (L/4)·4·(1 + 3/8) as Megatron's factor.
        assert_eq!(in_flight(0, 4, 2, 64), 11.0);
        assert_eq!(11.0 / 2.0, 4.0 * (1.0 + 3.0 / 8.0));
    }
}
