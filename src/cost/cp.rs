//! Context-parallel K/V exchange of one attention layer on one rank for one
//! micro-batch: bytes, exposed time and buffers.
//!
//! With C > 1 the sequence is cut into 2C chunks and rank i keeps chunks i
//! and 2C−1−i (causal load balancing; Megatron requires s % 2C = 0, rule
//! `cp-seq`), so every rank holds `t = b·s/C` tokens and does exactly 1/C of
//! the causal attention FLOPs (`compute::attention_core_flops` with `t`
//! queries over s keys). Queries stay local; keys and values travel
//! (Transformer Engine `context_parallel.py`, used by Megatron's
//! `TEDotProductAttention`):
//!
//! - ring (`p2p`, Liu et al. 2023): C − 1 steps; in each, the rank sends its
//!   current K/V chunk (`kv` bytes) to the next CP rank while attention runs
//!   on the chunk it holds, 1/C of its attention work per step. Exposed per
//!   step: `max(0, p2p(kv) − attn_f/C)`. Backward sends K/V and dK/dV
//!   (`2·kv`) against `attn_b/C`.
//! - all-gather (`allgather`, Llama 3 report §3.3.2): forward all-gathers K/V
//!   (`C·kv` gathered bytes), exposed; backward all-gathers again and
//!   reduce-scatters dK/dV, exposed.
//!
//! Both move the same bytes; the ring hides them under attention when a step
//! of compute outlasts a step of transfer, the all-gather uses one large
//! collective (hierarchical across nodes) but hides nothing.

use crate::cost::breakdown::Term;
use crate::cost::comm::{self, Links};
use crate::cost::compute::Rates;
use crate::layout::{CpComm, GroupSpan};
use crate::spec::Model;

/// Width of K plus V per token held by one TP rank, elements.
///
/// GQA/MHA: `2·kv_width/T`, at least two heads' worth (`2·head_dim`) when
/// T exceeds the KV heads (they are replicated). MLA: K and V are
/// decompressed per head before attention, so K has `heads·(d_nope + d_rope)`
/// and V `heads·d_v` elements, both ÷T.
pub fn kv_width_per_rank(model: &Model, tp: f64) -> f64 {
    if model.mla.is_some() {
        (model.q_width() + model.attn_out_width()) as f64 / tp
    } else {
        2.0 * (model.kv_width() as f64 / tp).max(model.head_dim() as f64)
    }
}

/// Bytes of this rank's K and V chunk, which the ring sends once per step:
/// `t · (K+V width per rank) · 2` (bf16), `tokens` = t = `b·s/C`.
///
/// Example: Llama 3 70B (8 KV heads of 128), s = 131072, C = 16, T = 8,
/// b = 1: t = 8192, K+V width 2·1024/8 = 256, bytes 8192·256·2 = 4,194,304.
pub fn kv_bytes_per_step(model: &Model, tokens: f64, tp: f64) -> f64 {
    tokens * kv_width_per_rank(model, tp) * 2.0
}

/// K/V exchange time of one layer per micro-batch, seconds: `total` the
/// transfers themselves, `exposed` what attention does not hide.
///
/// `kv` = [`kv_bytes_per_step`], `cp` = C, `attn_fwd` / `attn_bwd` the rank's
/// attention-core time in forward and backward, `full_recompute` adds the
/// forward exchange again. Ring steps cross the NICs when the CP group spans
/// fast domains (every step waits for the slowest link); the all-gather is
/// [`comm::all_gather`] / [`comm::reduce_scatter`] of `C·kv` bytes.
#[allow(clippy::too_many_arguments)]
pub fn exchange_time(
    kind: CpComm,
    kv: f64,
    cp: u32,
    attn_fwd: f64,
    attn_bwd: f64,
    full_recompute: bool,
    group: GroupSpan,
    links: &Links,
) -> Term {
    if cp <= 1 {
        return Term::default();
    }
    let c = cp as f64;
    // (exposed, total) of forward and backward.
    let (fwd, bwd) = match kind {
        CpComm::Ring => {
            let steps = c - 1.0;
            let (send_f, send_b) = (
                comm::p2p(kv, group, links),
                comm::p2p(2.0 * kv, group, links),
            );
            let f = steps * (send_f - attn_fwd / c).max(0.0);
            let b = steps * (send_b - attn_bwd / c).max(0.0);
            (
                Term::overlapped(f, steps * send_f),
                Term::overlapped(b, steps * send_b),
            )
        }
        CpComm::AllGather => {
            let gathered = c * kv;
            let f = comm::all_gather(gathered, group, links);
            let b = comm::all_gather(gathered, group, links)
                + comm::reduce_scatter(gathered, group, links);
            (Term::serial(f), Term::serial(b))
        }
    };
    let again = if full_recompute { fwd } else { Term::default() };
    Term::overlapped(
        fwd.exposed + bwd.exposed + again.exposed,
        fwd.total + bwd.total + again.total,
    )
}

/// Extra local work of context parallelism in one layer per micro-batch,
/// forward and backward seconds: what splitting attention into steps costs
/// beyond the exchange.
///
/// Ring: after each of the C − 1 later steps the partial output is merged
/// into the running one, rescaled by the log-sum-exp (TE
/// `flash_attn_fwd_out_correction`: read the step's output and the running
/// output, write it back, `6` bytes per element of the `t·v/T` output); in
/// backward dQ and dK/dV are accumulated per step the same way (`6` bytes per
/// element of `t·(q + k + v)/T`). Each step also launches its own attention
/// and merge kernels (two extra launches per step and direction).
/// All-gather: two attention kernels (one per load-balanced half) instead of
/// one and no merge.
pub fn split_overhead(
    model: &Model,
    kind: CpComm,
    tokens: f64,
    tp: f64,
    cp: u32,
    rates: &Rates,
) -> (f64, f64) {
    if cp <= 1 {
        return (0.0, 0.0);
    }
    match kind {
        CpComm::Ring => {
            let steps = cp as f64 - 1.0;
            let out = tokens * model.attn_out_width() as f64 / tp;
            let grads =
                tokens * model.q_width() as f64 / tp + tokens * kv_width_per_rank(model, tp);
            let launches = 2.0 * steps * rates.overhead;
            (
                steps * 6.0 * out / rates.hbm + launches,
                steps * 6.0 * grads / rates.hbm + launches,
            )
        }
        CpComm::AllGather => (rates.overhead, rates.overhead),
    }
}

/// K/V exchange buffers of one layer in flight, bytes (peak in backward).
///
/// Ring: K/V send and receive chunks plus dK/dV send and receive chunks,
/// `4·kv`. All-gather: the gathered K/V of the whole sequence and the
/// full-length dK/dV before the reduce-scatter, `2·C·kv`. Zero when C = 1.
pub fn buffer_bytes(kind: CpComm, kv: f64, cp: u32) -> f64 {
    if cp <= 1 {
        return 0.0;
    }
    match kind {
        CpComm::Ring => 4.0 * kv,
        CpComm::AllGather => 2.0 * cp as f64 * kv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Catalog;

    fn links() -> Links {
        Links {
            intra_bw: 100e9,
            inter_bw: 10e9,
            intra_lat: 0.0,
            inter_lat: 0.0,
            oversub: [1.0; crate::spec::hardware::MAX_TIERS + 1],
        }
    }

    #[test]
    fn ring_hides_under_attention_all_gather_does_not() {
        // kv = 1e8 bytes, C = 4 inside one node (100 GB/s): one ring step
        // takes 1 ms forward, 2 ms backward. With 4 ms of forward attention
        // (1 ms per step) and 10 ms backward (2.5 ms per step) nothing is
        // exposed.
        let g = GroupSpan::of(4, 1, 8);
        // The transfers themselves: 3 steps of 1 ms and 3 of 2 ms, 9 ms.
        let t = exchange_time(CpComm::Ring, 1e8, 4, 4e-3, 10e-3, false, g, &links());
        assert_eq!(t.exposed, 0.0);
        assert!((t.total - 9e-3).abs() < 1e-12, "{t:?}");
        // With 2 ms forward attention (0.5 ms per step): 3·0.5 ms forward,
        // backward still hidden: 1.5 ms.
        let t = exchange_time(CpComm::Ring, 1e8, 4, 2e-3, 10e-3, false, g, &links()).exposed;
        assert!((t - 1.5e-3).abs() < 1e-12, "{t}");
        // All-gather of 4e8 bytes over 4: 3/4·4e8/100e9 = 3 ms forward, and
        // 6 ms backward (gather + reduce-scatter): 9 ms whatever the compute.
        let t = exchange_time(CpComm::AllGather, 1e8, 4, 4e-3, 10e-3, false, g, &links());
        assert!((t.exposed - 9e-3).abs() < 1e-12, "{t:?}");
        assert_eq!(t.exposed, t.total);
        // Full recompute repeats the forward exchange: 12 ms.
        let t = exchange_time(CpComm::AllGather, 1e8, 4, 4e-3, 10e-3, true, g, &links()).exposed;
        assert!((t - 12e-3).abs() < 1e-12, "{t}");
    }

    #[test]
    fn ring_across_nodes_uses_the_nic() {
        // C = 4 with stride 8: every member on its own node; a step of
        // 1e8 bytes takes 10 ms on the 10 GB/s NIC; 3 steps, 1 ms hidden each.
        let g = GroupSpan::of(4, 8, 8);
        let t = exchange_time(CpComm::Ring, 1e8, 4, 4e-3, 1e9, false, g, &links());
        assert!((t.exposed - 3.0 * 9e-3).abs() < 1e-12, "{t:?}");
        // Forward 3 × 10 ms plus backward 3 × 20 ms on the wire, 90 ms.
        assert!((t.total - 90e-3).abs() < 1e-12, "{t:?}");
    }

    #[test]
    fn ring_split_overhead_by_hand() {
        // Llama 3 70B (64 heads of 128, 8 KV heads), t = 8192, T = 8, C = 4,
        // HBM 1e12 B/s, 1 µs per launch. Output per rank 8192·1024 elements:
        // forward 3·6·8,388,608 B = 151 µs + 6 launches; backward
        // dQ 8192·1024 + dK/dV 8192·256 elements: 3·6·10,485,760 B = 189 µs
        // + 6 launches.
        let cat = Catalog::shipped().unwrap();
        let m = cat.model("llama3-70b").unwrap();
        let r = Rates {
            gemm_flops: 1e15,
            attn_flops: 1e15,
            hbm: 1e12,
            overhead: 1e-6,
            attn_flops_misaligned: 1e15,
            low: None,
            grouped_half_tokens: 0.0,
        };
        let (f, b) = split_overhead(m, CpComm::Ring, 8192.0, 8.0, 4, &r);
        assert!(
            (f - (3.0 * 6.0 * 8_388_608.0 / 1e12 + 6e-6)).abs() < 1e-15,
            "{f}"
        );
        assert!(
            (b - (3.0 * 6.0 * 10_485_760.0 / 1e12 + 6e-6)).abs() < 1e-15,
            "{b}"
        );
        assert_eq!(
            split_overhead(m, CpComm::AllGather, 8192.0, 8.0, 4, &r),
            (1e-6, 1e-6)
        );
        assert_eq!(
            split_overhead(m, CpComm::Ring, 8192.0, 8.0, 1, &r),
            (0.0, 0.0)
        );
    }

    #[test]
    fn mla_kv_width() {
        // DeepSeek-V3: K = 128·(128+64) = 24576, V = 128·128 = 16384 per
        // token, ÷T = 4: 10240 elements.
        let cat = Catalog::shipped().unwrap();
        let m = cat.model("deepseek-v3").unwrap();
        assert_eq!(kv_width_per_rank(m, 4.0), 10240.0);
        assert_eq!(buffer_bytes(CpComm::Ring, 10.0, 1), 0.0);
        assert_eq!(buffer_bytes(CpComm::AllGather, 10.0, 8), 160.0);
    }
}
