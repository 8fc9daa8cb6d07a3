//! Mixture-of-experts costs of one MoE layer on one rank for one micro-batch:
//! routed pairs, the expert all-to-all, expert-TP collectives, routed-token
//! activations and dispatch buffers.
//!
//! Model: Megatron-Core MoE with the all-to-all token dispatcher
//! (`--moe-token-dispatcher-type alltoall`, `token_dispatcher.py`), dropless
//! unless a capacity factor is given. The T·C·D ranks of a pipeline stage are
//! re-sliced as ETP × E × EDP for the MoE block (Megatron's expert grid
//! [ref:megatron-parallel-state]); E never
//! multiplies N. A rank enters the MoE block with its sequence-parallel share
//! `t/T` of the local tokens `t = b·s/C`; every token picks its top-k experts
//! (Lepikhin et al. 2020, GShard §2). Dispatch sends each (token, expert)
//! pair's hidden state to the EP rank that holds the expert (all-to-all over
//! the EP group), the ETP group all-gathers what it received, the experts run
//! with FFN width `f/ETP`, and combine reverses both (reduce-scatter over
//! ETP, all-to-all back).
//!
//! Counting (per rank, per micro-batch, per MoE layer):
//! - pairs a rank sends: `t/T · k`;
//! - pairs the busiest expert rank computes: `λ · t/T · k · ETP`, because the
//!   stage's `D·b·s·k` pairs land on `E·EDP` expert ranks, each split ETP ways,
//!   and `E·EDP·ETP = T·C·D`; λ is the load factor ([`crate::spec::Job::moe_load`]);
//! - bytes of one all-to-all per rank: `λ · t/T · k · h · 2` (bf16);
//! - all-to-alls: dispatch and combine, in forward and in backward (four), and
//!   two more when full recompute reruns the forward.
//!
//! The all-to-all is costed exposed unless the job overlaps it with another
//! micro-batch's compute (`--overlap-moe-expert-parallel-comm`,
//! [`a2a_overlap`]); DeepEP's per-node deduplication of the NIC traffic is
//! not modelled. λ is the job's skew, at least the random-routing floor
//! ([`random_routing_skew`]), capped by a capacity factor ([`expert_load`]);
//! the routed GEMMs run at the grouped-GEMM efficiency of their tokens per
//! local expert ([`grouped_gemm_efficiency`]).

use crate::cost::comm::{self, Links};
use crate::layout::{GroupSpan, Recompute};
use crate::spec::Model;

/// Routed token-expert pairs the busiest expert rank computes per
/// micro-batch: `λ · t/T · k · ETP`, with `tokens` = t = `b·s/C`, `tp` = T,
/// `etp` = ETP and `load` = λ ≥ 1. Zero for a dense model.
///
/// Example: Mixtral 8x7B (k = 2), b = 1, s = 4096, C = 1, T = 2, ETP = 1,
/// λ = 1: `4096/2 · 2 = 4096` pairs.
pub fn routed_pairs_per_rank(model: &Model, tokens: f64, tp: f64, etp: f64, load: f64) -> f64 {
    match &model.moe {
        Some(m) => load * tokens / tp * m.top_k as f64 * etp,
        None => 0.0,
    }
}

/// Bytes one rank moves in one expert all-to-all (dispatch or combine) per
/// micro-batch and MoE layer: `λ · t/T · k · h · 2` (bf16 hidden states of
/// its routed pairs, scaled to the busiest receiver). Of these, `(E−1)/E`
/// leave the rank ([`comm::all_to_all`]).
///
/// Example: Mixtral 8x7B, b = 1, s = 4096, C = 1, T = 1, λ = 1:
/// `4096 · 2 · 4096 · 2 = 67,108,864` bytes (64 MiB).
pub fn all_to_all_bytes(model: &Model, tokens: f64, tp: f64, load: f64) -> f64 {
    match &model.moe {
        Some(m) => load * tokens / tp * m.top_k as f64 * model.architecture.hidden as f64 * 2.0,
        None => 0.0,
    }
}

/// Expert all-to-alls per MoE layer per micro-batch: dispatch and combine
/// in forward and in backward (4), plus the forward's two again under full
/// recompute (6).
pub fn all_to_alls_per_layer(recompute: Recompute) -> f64 {
    if recompute == Recompute::Full {
        6.0
    } else {
        4.0
    }
}

/// Exposed expert all-to-all time of one MoE layer per micro-batch, seconds:
/// [`all_to_alls_per_layer`] × [`comm::all_to_all`] of
/// [`all_to_all_bytes`] over the EP group `ep` (its off-node share on the
/// NICs). Zero when E = 1.
pub fn ep_comm_time(
    model: &Model,
    tokens: f64,
    tp: f64,
    load: f64,
    recompute: Recompute,
    ep: GroupSpan,
    links: &Links,
) -> f64 {
    if ep.size <= 1 {
        return 0.0;
    }
    all_to_alls_per_layer(recompute)
        * comm::all_to_all(all_to_all_bytes(model, tokens, tp, load), ep, links)
}

/// Expert tensor-parallel collectives of one MoE layer per micro-batch,
/// seconds: per pass (forward, backward, and the recomputed forward under
/// full recompute) an all-gather of the received pairs' hidden states over
/// the ETP group after dispatch and a reduce-scatter before combine, i.e.
/// one all-reduce of `pairs · h · 2` bytes (`gather_from_sequence_parallel_region`
/// / `reduce_scatter_to_sequence_parallel_region` in Megatron's dispatcher).
/// Zero when ETP = 1.
pub fn etp_comm_time(model: &Model, pairs: f64, passes: f64, etp: GroupSpan, links: &Links) -> f64 {
    if etp.size <= 1 {
        return 0.0;
    }
    passes * comm::all_reduce(pairs * model.architecture.hidden as f64 * 2.0, etp, links)
}

/// Bytes per element at which the routed part saves its tensors: the
/// inputs of the two expert GEMMs (fc1 input of width h, fc2 input of width
/// f' = f/ETP) and whether the routing probabilities are applied inside the
/// expert activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutedSaved {
    /// Bytes per element of the saved fc1 input (2 = bf16; Transformer
    /// Engine's FP8 saves its narrow copy, `precision::saved_input_element_bytes`).
    pub fc1_input: f64,
    /// Bytes per element of the saved fc2 input (the activation output).
    pub fc2_input: f64,
    /// Megatron-Core ≥ 0.13 multiplies the routing probabilities into the
    /// gated activation (`weighted_bias_swiglu_impl` in `experts.py`,
    /// `TEGroupedMLP.forward`), and the unpermute of the combine takes no
    /// probabilities (`token_dispatcher.py` `unpermute(...)` at
    /// core_v0.14.0), so the combined expert output `t/T·k·2h` is not
    /// saved; the activation saves the probabilities instead (counted fp32,
    /// 4 bytes per pair). Earlier releases apply them in the unpermute and
    /// save its input.
    pub probs_in_expert: bool,
}

impl RoutedSaved {
    /// bf16 inputs, probabilities applied in the unpermute (Megatron-Core
    /// before 0.13): the bytes of [`routed_activation_bytes`] as first written.
    pub const BF16: RoutedSaved = RoutedSaved {
        fc1_input: 2.0,
        fc2_input: 2.0,
        probs_in_expert: false,
    };
}

/// Saved bytes of the routed part of one MoE layer for one rank and one
/// micro-batch (bf16 tensors unless `saved` narrows the GEMM inputs, fp32
/// router state):
///
/// - per computed pair (`pairs`, see [`routed_pairs_per_rank`]): the expert
///   input `b_1·h` (gathered over ETP), fc1 output `2·2f'` (gated) or `2f'`,
///   and the activation output `b_2·f'`, with `f' = f/ETP` (`b_1 = b_2 = 2`
///   for bf16);
/// - per pair the rank sent (`t/T · k`): the combined expert output `2h`,
///   kept for the routing-probability gradient of the unpermute — or, when
///   the probabilities are applied in the expert activation
///   ([`RoutedSaved::probs_in_expert`]), 4 bytes of probability per computed
///   pair instead;
/// - per local token (`t/T`): the MoE block input `2h` (router, shared
///   experts and permutation read it) and the router state: fp32 logits and
///   probabilities over all experts plus a one-byte routing map, `9·experts`;
/// - shared experts: their MLP intermediates (`2·2f_s + b_2·f_s` gated) per
///   local token, `f_s` = all shared experts' width (TP-sharded like a dense
///   MLP, so `t·f_s/T = (t/T)·f_s`).
///
/// Worked example, Qwen3-30B-A3B (h = 2048, f = 768, 128 experts, k = 8,
/// no shared expert), t = 8192, T = ETP = 1, λ = 1 (65,536 pairs), FP8
/// tensor-wise inputs (1 byte, one scale per tensor), probs in
/// the expert: pairs · (2048 + 4·768 + 768 + 4) = 65,536 · 5,892 =
/// 386,138,112; block input 8192 · 4096 = 33,554,432; router 8192 · 9 · 128 =
/// 9,437,184; total 429,129,728 bytes, against 881,852,416 with
/// [`RoutedSaved::BF16`] (65,536 · 8,704 + 65,536 · 4,096 + 33,554,432 +
/// 9,437,184).
pub fn routed_activation_bytes(
    model: &Model,
    pairs: f64,
    etp: f64,
    tokens: f64,
    tp: f64,
    saved: &RoutedSaved,
) -> f64 {
    let Some(m) = &model.moe else { return 0.0 };
    let a = &model.architecture;
    let h = a.hidden as f64;
    let f = m.expert_ffn as f64 / etp;
    let fc1_out = if a.gated_mlp { 4.0 } else { 2.0 };
    let per_pair = saved.fc1_input * h + fc1_out * f + saved.fc2_input * f;
    let local = tokens / tp;
    let sent = local * m.top_k as f64;
    let combine = if saved.probs_in_expert {
        4.0 * pairs
    } else {
        sent * 2.0 * h
    };
    let shared_f = m.shared_experts as f64 * m.shared_expert_ffn.unwrap_or(m.expert_ffn) as f64;
    let shared = local * (fc1_out + saved.fc2_input) * shared_f;
    let router = local * 9.0 * m.experts as f64;
    pairs * per_pair + combine + local * 2.0 * h + router + shared
}

/// Dispatch buffers of one MoE layer in flight, bytes: the permuted send
/// buffer of the rank's own pairs (`t/T · k · 2h`) and the receive buffer of
/// the busiest rank (`λ · t/T · k · 2h`), alive while the all-to-all runs.
/// With a capacity factor the load λ is capped by it
/// ([`crate::spec::Job::moe_load`]).
pub fn dispatch_buffer_bytes(model: &Model, tokens: f64, tp: f64, load: f64) -> f64 {
    let sent = all_to_all_bytes(model, tokens, tp, 1.0);
    sent + load * sent
}

/// Load of the busiest EP rank over the mean under balanced random routing
/// (Megatron's `--moe-router-force-load-balancing`, which replaces the
/// router logits by random ones, `apply_random_logits` in
/// `megatron/core/transformer/moe/router.py`): the floor of the routing
/// skew, dimensionless.
///
/// Each of the stage's pairs lands on a given one of the `E` EP ranks with
/// probability `1/E`, so a rank's pair count is binomial with mean `μ` (=
/// `mean_pairs`, [`routed_pairs_per_rank`] at λ = 1) and variance
/// `μ·(1 − 1/E)`. The expected maximum of `E` such counts is, to first
/// order, `μ + σ·√(2 ln E)` (the Gaussian extreme-value bound; Cramér 1946,
/// *Mathematical Methods of Statistics* §28.6), so
/// `λ₀ = 1 + √(2 ln E · (1 − 1/E) / μ)`. One for E ≤ 1 or no pairs.
///
/// Example: Qwen3-30B-A3B at b = 2, s = 4096, T = 1, k = 8, E = 8:
/// μ = 65,536; `√(2 ln 8 · 0.875 / 65,536)` = `√(3.6389 / 65,536)` =
/// 0.007452, λ₀ = 1.00745.
pub fn random_routing_skew(mean_pairs: f64, ep: f64) -> f64 {
    if ep <= 1.0 || mean_pairs <= 0.0 {
        return 1.0;
    }
    1.0 + (2.0 * ep.ln() * (1.0 - 1.0 / ep) / mean_pairs).sqrt()
}

/// Load the busiest expert rank computes over the mean, dimensionless:
/// dropless routing runs at the larger of the stated skew `imbalance` and
/// the random-routing floor `floor` ([`random_routing_skew`]); with a
/// capacity factor `c` (Megatron `--moe-expert-capacity-factor`) the
/// busiest expert is cut at `c` times the mean, `min(·, c)`. Megatron-Bridge
/// pads every expert to capacity in its token-drop benchmarks
/// (`apply_moe_token_drop`, `moe_pad_expert_input_to_capacity = True`), so
/// at c = 1 every rank computes exactly the mean.
///
/// Example: imbalance 1.0, floor 1.0075, dropless: 1.0075; with c = 1.0:
/// 1.0.
pub fn expert_load(imbalance: f64, floor: f64, capacity_factor: Option<f64>) -> f64 {
    let l = imbalance.max(floor);
    match capacity_factor {
        Some(c) => l.min(c),
        None => l,
    }
}

/// Efficiency of a grouped expert GEMM relative to one dense GEMM of the
/// same total rows, as a function of the rows each local expert receives
/// `m` (tokens per local expert): `m / (m + m½)`, with `m½` the GPU
/// profile's `efficiency.grouped_gemm_half_tokens`. A grouped GEMM runs one
/// tile grid per expert; each expert's last row tile is partly empty and
/// the per-expert problem setup and wave tail are paid per expert, so the
/// loss falls as `1/m`. The half-saturation form is meshplan's assumption
/// (no published grouped-GEMM curve was read for it); `m½` is fitted on
/// named validation rows, see the GPU profile.
/// One for `m½` = 0; zero rows give zero.
///
/// Example: m = 4096, m½ = 256: 4096 / 4352 = 0.941.
pub fn grouped_gemm_efficiency(tokens_per_expert: f64, half_tokens: f64) -> f64 {
    if half_tokens <= 0.0 {
        return 1.0;
    }
    if tokens_per_expert <= 0.0 {
        return 0.0;
    }
    tokens_per_expert / (tokens_per_expert + half_tokens)
}

/// The expert all-to-alls of one MoE layer and micro-batch overlapped with
/// another micro-batch's compute (Megatron
/// `--overlap-moe-expert-parallel-comm`: in the steady state of the
/// interleaved 1F1B schedule one micro-batch's forward runs next to
/// another's backward, and each one's dispatch and combine run under the
/// other's attention and expert GEMMs; DeepSeek-V3 §3.2.1 describes the same
/// pairing for DualPipe). Under the overlap rule of
/// [`crate::cost::contention`], `comm` seconds next to `compute` seconds
/// expose `overlapped_step(compute, comm, σ) − compute − σ·hidden` seconds
/// of link time, and the hidden part costs `σ·hidden` of slower compute.
/// Returns `(exposed, hidden)`, seconds.
///
/// Example: 18 ms of all-to-all next to 12 ms of compute: 6 ms exposed,
/// 12 ms hidden (σ·12 ms of contention).
pub fn a2a_overlap(comm: f64, compute: f64) -> (f64, f64) {
    let hidden = comm.min(compute.max(0.0));
    (comm - hidden, hidden)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Catalog;

    #[test]
    fn routed_saved_fp8_probs_in_expert() {
        // Worked in `routed_activation_bytes`'s doc comment: Qwen3-30B-A3B,
        // t = 8192, k = 8 → 65,536 pairs at λ = 1.
        let m = &Catalog::shipped_model("qwen3-30b-a3b");
        let fp8 = RoutedSaved {
            fc1_input: 1.0,
            fc2_input: 1.0,
            probs_in_expert: true,
        };
        // 65,536·(2048 + 4·768 + 768 + 4) + 8192·4096 + 8192·9·128.
        assert_eq!(
            routed_activation_bytes(m, 65_536.0, 1.0, 8192.0, 1.0, &fp8),
            429_129_728.0
        );
        // bf16, probabilities in the unpermute: 65,536·(4096 + 6·768)
        // + 65,536·4096 (combined output) + 33,554,432 + 9,437,184.
        assert_eq!(
            routed_activation_bytes(m, 65_536.0, 1.0, 8192.0, 1.0, &RoutedSaved::BF16),
            881_852_416.0
        );
    }

    #[test]
    fn deepseek_v3_pairs_and_bytes_by_hand() {
        // DeepSeek-V3: h = 7168, k = 8. b = 1, s = 4096, C = 1, T = 2,
        // ETP = 1, λ = 1.2: pairs = 1.2·4096/2·8 = 19,660.8; one all-to-all
        // = 19,660.8·7168·2 = 281,857,228.8 bytes.
        let m = &Catalog::shipped_model("deepseek-v3");
        let pairs = routed_pairs_per_rank(m, 4096.0, 2.0, 1.0, 1.2);
        assert!((pairs - 19_660.8).abs() < 1e-9);
        let bytes = all_to_all_bytes(m, 4096.0, 2.0, 1.2);
        assert!((bytes - 281_857_228.8).abs() < 1e-3);
        // ETP = 2 doubles the pairs a rank computes but not the bytes it sends.
        assert!((routed_pairs_per_rank(m, 4096.0, 2.0, 2.0, 1.0) - 32_768.0).abs() < 1e-9);
    }

    #[test]
    fn routed_activations_by_hand() {
        // Mixtral 8x7B: h = 4096, f = 14336, k = 2, 8 experts, gated, no
        // shared expert. t = 4096, T = 1, ETP = 1, pairs = 8192:
        // pairs·(2h + 6f) = 8192·(8192 + 86016) = 771,751,936
        // sent pairs 8192·2h = 67,108,864; block input 4096·2h = 33,554,432;
        // router 4096·9·8 = 294,912; total 872,710,144.
        let m = &Catalog::shipped_model("mixtral-8x7b");
        let b = routed_activation_bytes(m, 8192.0, 1.0, 4096.0, 1.0, &RoutedSaved::BF16);
        assert_eq!(b, 872_710_144.0);
        // Dispatch buffers: send 64 MiB + receive 64 MiB at λ = 1.
        assert_eq!(
            dispatch_buffer_bytes(m, 4096.0, 1.0, 1.0),
            2.0 * 67_108_864.0
        );
    }
    #[test]
    fn random_routing_skew_by_hand() {
        // Qwen3-30B-A3B, b = 2, s = 4096, T = 1, k = 8: μ = 65,536 pairs
        // over E = 8 ranks. 2·ln 8 = 4.158883; ·(1 − 1/8) = 3.639023;
        // /65,536 = 5.55271e-5; √ = 0.0074517 → λ₀ = 1.0074517.
        let l = random_routing_skew(65_536.0, 8.0);
        assert!((l - 1.007_451_7).abs() < 1e-6, "{l}");
        // One EP rank: no skew.
        assert_eq!(random_routing_skew(65_536.0, 1.0), 1.0);
        // Few pairs skew more: μ = 64, E = 64: 2·ln 64 = 8.317766,
        // ·63/64 = 8.187801, /64 = 0.127934, √ = 0.357679 → 1.357679.
        assert!((random_routing_skew(64.0, 64.0) - 1.357_679).abs() < 1e-6);
    }

    #[test]
    fn expert_load_caps_and_floors() {
        assert_eq!(expert_load(1.0, 1.0075, None), 1.0075);
        assert_eq!(expert_load(1.3, 1.0075, None), 1.3);
        assert_eq!(expert_load(1.3, 1.0075, Some(1.0)), 1.0);
        assert_eq!(expert_load(1.3, 1.0075, Some(1.25)), 1.25);
    }

    #[test]
    fn grouped_gemm_efficiency_by_hand() {
        // 4096 / (4096 + 256) = 0.9411765.
        assert!((grouped_gemm_efficiency(4096.0, 256.0) - 0.941_176_5).abs() < 1e-7);
        // At m = m½ half the rate.
        assert_eq!(grouped_gemm_efficiency(256.0, 256.0), 0.5);
        assert_eq!(grouped_gemm_efficiency(4096.0, 0.0), 1.0);
        assert_eq!(grouped_gemm_efficiency(0.0, 256.0), 0.0);
    }

    #[test]
    fn a2a_overlap_by_hand() {
        // 18 ms next to 12 ms: 6 ms exposed, 12 ms hidden.
        let (e, h) = a2a_overlap(18e-3, 12e-3);
        assert!((e - 6e-3).abs() < 1e-15 && (h - 12e-3).abs() < 1e-15);
        // Fully hidden under more compute.
        assert_eq!(a2a_overlap(5e-3, 12e-3), (0.0, 5e-3));
    }
}
