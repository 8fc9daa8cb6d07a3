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
//!
//! The schedule is priced step by step ([`ring_step_times`]): step 0 is the
//! local (diagonal) chunk pair under the causal mask, every later step one
//! unmasked half-pair (t queries over t/2 keys, or t/2 over t), each its own
//! kernel at its own key length (`compute::attention_length_factor`). Each
//! transfer overlaps the step that runs while it is in flight; what it
//! outlasts that step by is exposed.
//!
//! PyTorch's experimental `context_parallel` (torchtitan, [`CpImpl::Torch`];
//! `torch/distributed/tensor/experimental/_attention.py`, Dec 2024) differs:
//! SDPA receives K/V after torchtitan's `repeat_kv` (every query head, so
//! `q/kv` times the bytes under GQA); the default rotate method all-gathers
//! every chunk at once under the first sub-attention (`_AllGatherRotater`);
//! backward rotates dK/dV by all-to-all in fp32 (`convert_to_f32`) after
//! every step; partial outputs are merged in fp32 by eager kernels
//! (`_SDPAMerger`).

use crate::cost::breakdown::Term;
use crate::cost::comm::{self, Links};
use crate::cost::compute::{self, LayerShape, Rates};
use crate::layout::{CpComm, GroupSpan};
use crate::spec::{CpImpl, Model};

/// Width of K plus V per token held by one TP rank, elements.
///
/// GQA/MHA: `2·kv_width/T`, at least two heads' worth (`2·head_dim`) when
/// T exceeds the KV heads (they are replicated). MLA: K and V are
/// decompressed per head before attention, so K has `heads·(d_nope + d_rope)`
/// and V `heads·d_v` elements, both ÷T.
///
/// `expanded`: K/V already repeated to every query head before attention
/// (torchtitan's `repeat_kv`, [`CpImpl::Torch`]): `2·q_width/T`.
pub fn kv_width_per_rank(model: &Model, tp: f64, expanded: bool) -> f64 {
    if expanded && model.mla.is_none() {
        return 2.0 * model.q_width() as f64 / tp;
    }
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
/// With PyTorch's CP ([`CpImpl::Torch`]) K/V carry all 64 heads: 8× that.
pub fn kv_bytes_per_step(model: &Model, tokens: f64, tp: f64, imp: CpImpl) -> f64 {
    tokens * kv_width_per_rank(model, tp, imp == CpImpl::Torch) * 2.0
}

/// Forward time of one ring step of the attention core on one rank,
/// seconds (no launch): `diag` the local chunk pair, `off` one later step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RingSteps {
    /// Step 0: the rank's own two chunks against themselves, causal.
    pub diag: f64,
    /// Each of the C − 1 later steps: one unmasked half-pair.
    pub off: f64,
}

/// Time of each ring step in forward ([`RingSteps`]) for the layer shape
/// `sh` at the profile's fused-attention rate `rate` (FLOP/s).
///
/// With causal load balancing (2C chunks, rank i holds i and 2C−1−i) every
/// step does the same FLOPs, `attention_core_flops(t, s/C)/T`: step 0 the
/// local `s/C × s/C` block under the mask (half of it), each later step
/// either all local queries over the earlier of the sender's chunks or the
/// later local chunk over all the sender's keys, `s/C × s/2C`, unmasked
/// (TE `context_parallel.py` `AttnFuncWithCPAndKVP2P`; PyTorch
/// `_templated_ring_attention`). The kernels differ: causal over `s/C` keys
/// against unmasked over `s/2C` ([`compute::attention_length_factor`]).
/// With C = 1 `diag` is the whole causal attention over s keys and `off` 0.
///
/// Under CP every step runs at [`RING_STEP_RATE`] of that kernel's rate.
///
/// Example: Llama 3.1 8B, s = 131072, C = 4, b = 1, T = 1, FlashAttention-2
/// at 1e15 FLOP/s: t = 32768, one step 2·32768·32768·8192/2 = 8.796e12
/// FLOPs; `diag` at 0.78·335/333 of the rate: 11.21 ms; `off` over 16k keys
/// unmasked at 0.78·370/333: 10.15 ms.
pub fn ring_step_times(model: &Model, sh: &LayerShape, rate: f64) -> RingSteps {
    let c = sh.cp.max(1.0);
    let local = sh.seq / c;
    let step = compute::attention_core_flops(model, sh.tokens, local) / sh.tp;
    if c <= 1.0 {
        let diag = step / (rate * compute::attention_length_factor(sh.kernel, true, local));
        return RingSteps { diag, off: 0.0 };
    }
    let rate = rate * RING_STEP_RATE;
    RingSteps {
        diag: step / (rate * compute::attention_length_factor(sh.kernel, true, local)),
        off: step / (rate * compute::attention_length_factor(sh.kernel, false, local / 2.0)),
    }
}

/// Rate of the attention kernels of a ring step relative to one kernel of
/// the same key length outside CP (dimensionless; [`ring_step_times`]).
///
/// Empirical: it stands for the per-step losses this module does not price
/// one by one (each step's kernels start a fresh tile pipeline and end on a
/// partial wave, the p2p or all-gather kernels share the SMs with attention
/// while in flight, the streams wait on each other between steps). Fitted by
/// least squares of ln(predicted/measured throughput), every other constant
/// fixed, on two named rows of tests/data/published-dev-v2.csv only:
/// TT-8B-CP-2 (torchtitan, C = 2, 65k) and NEMO2407-LLAMA3-8B-8 (NeMo, C = 2,
/// 8k); each alone gives 0.78 and 0.74. Every other CP row is a check
/// (docs/fidelity.md).
pub const RING_STEP_RATE: f64 = 0.78;

/// Exposed time of a transfer of `send` seconds under a step of `compute`
/// seconds: `max(0, send − compute)` (Liu et al. 2023 §3: a ring step is
/// hidden when its compute outlasts its transfer).
pub fn step_exposed(send: f64, compute: f64) -> f64 {
    (send - compute).max(0.0)
}

/// K/V exchange time of one layer per micro-batch, seconds: `total` the
/// transfers themselves, `exposed` what attention does not hide.
///
/// `kv` = [`kv_bytes_per_step`], `cp` = C, `steps` the forward time of each
/// ring step ([`ring_step_times`]; backward steps take
/// [`compute::FLASH_BACKWARD_FACTOR`] times as long), `full_recompute` adds
/// the forward exchange again. Ring steps cross the NICs when the CP group
/// spans fast domains (every step waits for the slowest link); the
/// all-gather is [`comm::all_gather`] / [`comm::reduce_scatter`] of `C·kv`
/// bytes.
///
/// Transformer Engine ([`CpImpl::Te`]):
/// - ring: C − 1 transfers in each direction, the first under step 0 (the
///   diagonal), the others under later steps: forward
///   `exposed(p2p(kv), diag) + (C−2)·exposed(p2p(kv), off)`; backward the
///   same with K/V plus dK/dV (`2·kv`) against the backward steps.
/// - all-gather: exposed (forward gather; backward gather and
///   reduce-scatter).
///
/// PyTorch ([`CpImpl::Torch`]), K/V expanded to every head (`kv` already
/// counts them), dK/dV in fp32 (`2·kv` bytes):
/// - all-gather rotater (torchtitan's default): forward one all-gather of
///   `C·kv` under step 0; backward the same gather under the backward
///   step 0, then after every step a dK/dV all-to-all to the next rank
///   under the following step, the last one exposed.
/// - all-to-all rotater: forward as the TE ring; backward per step K/V
///   (steps 0..C−2) and the previous step's dK/dV (steps 1..C−1) together,
///   the last dK/dV exposed.
#[allow(clippy::too_many_arguments)]
pub fn exchange_time(
    kind: CpComm,
    imp: CpImpl,
    kv: f64,
    cp: u32,
    steps: RingSteps,
    full_recompute: bool,
    group: GroupSpan,
    links: &Links,
) -> Term {
    if cp <= 1 {
        return Term::default();
    }
    let c = cp as f64;
    let bf = compute::FLASH_BACKWARD_FACTOR;
    let (diag_b, off_b) = (bf * steps.diag, bf * steps.off);
    let later = c - 2.0;
    // (exposed, total) of forward and backward.
    let (fwd, bwd) = match (imp, kind) {
        (CpImpl::Te, CpComm::Ring) => {
            let (send_f, send_b) = (
                comm::p2p(kv, group, links),
                comm::p2p(2.0 * kv, group, links),
            );
            let f = step_exposed(send_f, steps.diag) + later * step_exposed(send_f, steps.off);
            let b = step_exposed(send_b, diag_b) + later * step_exposed(send_b, off_b);
            (
                Term::overlapped(f, (c - 1.0) * send_f),
                Term::overlapped(b, (c - 1.0) * send_b),
            )
        }
        (CpImpl::Te, CpComm::AllGather) => {
            let gathered = c * kv;
            let f = comm::all_gather(gathered, group, links);
            let b = comm::all_gather(gathered, group, links)
                + comm::reduce_scatter(gathered, group, links);
            (Term::serial(f), Term::serial(b))
        }
        (CpImpl::Torch, CpComm::AllGather) => {
            let gather = comm::all_gather(c * kv, group, links);
            let dkv = comm::p2p(2.0 * kv, group, links);
            let f = step_exposed(gather, steps.diag);
            let b = step_exposed(gather, diag_b) + (c - 1.0) * step_exposed(dkv, off_b) + dkv;
            (
                Term::overlapped(f, gather),
                Term::overlapped(b, gather + c * dkv),
            )
        }
        (CpImpl::Torch, CpComm::Ring) => {
            let send = comm::p2p(kv, group, links);
            let dkv = comm::p2p(2.0 * kv, group, links);
            let both = comm::p2p(3.0 * kv, group, links);
            let f = step_exposed(send, steps.diag) + later * step_exposed(send, steps.off);
            let b = step_exposed(send, diag_b)
                + later * step_exposed(both, off_b)
                + step_exposed(dkv, off_b)
                + dkv;
            (
                Term::overlapped(f, (c - 1.0) * send),
                Term::overlapped(b, (c - 1.0) * send + c * dkv),
            )
        }
    };
    let again = if full_recompute { fwd } else { Term::default() };
    Term::overlapped(
        fwd.exposed + bwd.exposed + again.exposed,
        fwd.total + bwd.total + again.total,
    )
}

/// Bytes per output element that PyTorch's fp32 merge of one later step
/// moves in forward (`_SDPAMerger._merge_one`, `convert_to_f32 = True`):
/// the step's bf16 output cast to fp32 (2 read, 4 written), `out −
/// block_out` (8, 4), the product with the log-sum-exp weight (4, 4),
/// `out − …` (8, 4) and the partial update's `torch.cat` copy of the
/// running fp32 output (4, 4): 46.
pub const TORCH_MERGE_FWD_BYTES: f64 = 46.0;
/// Bytes per dQ element that PyTorch's backward accumulation moves per
/// step: the step's bf16 gradient (2) and the fp32 running sum (4) read, the
/// sum written (4), the partial update's `torch.cat` copy (4, 4): 18.
pub const TORCH_MERGE_BWD_Q_BYTES: f64 = 18.0;
/// Bytes per dK/dV element per step: as dQ (18) plus the `torch.cat` that
/// packs them for the next rank (4 read, 4 written): 26.
pub const TORCH_MERGE_BWD_KV_BYTES: f64 = 26.0;

/// Extra local work of context parallelism in one layer per micro-batch,
/// forward and backward seconds: what splitting attention into steps costs
/// beyond the exchange.
///
/// Transformer Engine ring: after each of the C − 1 later steps the partial
/// output is merged into the running one, rescaled by the log-sum-exp (TE
/// `flash_attn_fwd_out_correction`: read the step's output and the running
/// output, write it back, `6` bytes per element of the `t·v/T` output); in
/// backward dQ and dK/dV are accumulated per step the same way (`6` bytes per
/// element of `t·(q + k + v)/T`). Each step also launches its own attention
/// and merge kernels (two extra launches per step and direction).
/// All-gather: two attention kernels (one per load-balanced half) instead of
/// one and no merge.
///
/// PyTorch ([`CpImpl::Torch`], either rotater): eager fp32 merges,
/// [`TORCH_MERGE_FWD_BYTES`] per output element and
/// [`TORCH_MERGE_BWD_Q_BYTES`] / [`TORCH_MERGE_BWD_KV_BYTES`] per dQ and
/// (expanded) dK/dV element, per later step; ten kernels per step forward
/// (casts, sigmoid, log-sigmoid, products, differences, two copies), seven
/// backward, plus the attention kernel.
#[allow(clippy::too_many_arguments)]
pub fn split_overhead(
    model: &Model,
    kind: CpComm,
    imp: CpImpl,
    tokens: f64,
    tp: f64,
    cp: u32,
    rates: &Rates,
) -> (f64, f64) {
    if cp <= 1 {
        return (0.0, 0.0);
    }
    let steps = cp as f64 - 1.0;
    let out = tokens * model.attn_out_width() as f64 / tp;
    let q = tokens * model.q_width() as f64 / tp;
    match (imp, kind) {
        (CpImpl::Te, CpComm::Ring) => {
            let grads = q + tokens * kv_width_per_rank(model, tp, false);
            let launches = 2.0 * steps * rates.overhead;
            (
                steps * 6.0 * out / rates.hbm + launches,
                steps * 6.0 * grads / rates.hbm + launches,
            )
        }
        (CpImpl::Te, CpComm::AllGather) => (rates.overhead, rates.overhead),
        (CpImpl::Torch, _) => {
            let kv = tokens * kv_width_per_rank(model, tp, true);
            (
                steps * (TORCH_MERGE_FWD_BYTES * out / rates.hbm + 11.0 * rates.overhead),
                steps
                    * ((TORCH_MERGE_BWD_Q_BYTES * q + TORCH_MERGE_BWD_KV_BYTES * kv) / rates.hbm
                        + 8.0 * rates.overhead),
            )
        }
    }
}

/// K/V exchange buffers of one layer in flight, bytes (peak in backward).
///
/// TE ring: K/V send and receive chunks plus dK/dV send and receive chunks,
/// `4·kv`. TE all-gather: the gathered K/V of the whole sequence and the
/// full-length dK/dV before the reduce-scatter, `2·C·kv`. PyTorch: the
/// gathered K/V (`C·kv`, all-gather rotater) or its send and receive chunks
/// (`2·kv`), plus fp32 dK/dV send and receive chunks (`2·2·kv`). Zero when
/// C = 1.
pub fn buffer_bytes(kind: CpComm, imp: CpImpl, kv: f64, cp: u32) -> f64 {
    if cp <= 1 {
        return 0.0;
    }
    match (imp, kind) {
        (CpImpl::Te, CpComm::Ring) => 4.0 * kv,
        (CpImpl::Te, CpComm::AllGather) => 2.0 * cp as f64 * kv,
        (CpImpl::Torch, CpComm::AllGather) => cp as f64 * kv + 4.0 * kv,
        (CpImpl::Torch, CpComm::Ring) => 6.0 * kv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{AttnKernel, Catalog};

    fn links() -> Links {
        Links::bandwidths(100e9, 10e9)
    }

    /// [`exchange_time`] of K/V of 1e8 bytes per step over C = 4 on
    /// [`links`]: a forward step moves in 1 ms on NVLink, 10 ms on the NIC.
    fn exchange(
        kind: CpComm,
        imp: CpImpl,
        steps: RingSteps,
        full_recompute: bool,
        g: GroupSpan,
    ) -> Term {
        exchange_time(kind, imp, 1e8, 4, steps, full_recompute, g, &links())
    }

    /// Asserts that `t` shows `exposed` of `total` seconds (to 1e-12).
    fn assert_term(t: Term, exposed: f64, total: f64) {
        assert!(
            (t.exposed - exposed).abs() < 1e-12 && (t.total - total).abs() < 1e-12,
            "{t:?}, want {exposed} of {total}"
        );
    }

    /// Uniform steps of `t` seconds each (the old one-number pricing).
    fn even(t: f64) -> RingSteps {
        RingSteps { diag: t, off: t }
    }

    #[test]
    fn ring_hides_under_attention_all_gather_does_not() {
        // kv = 1e8 bytes, C = 4 inside one node (100 GB/s): one ring step
        // takes 1 ms forward, 2 ms backward. With 1 ms of forward attention
        // per step (2.5 ms backward) nothing is exposed.
        let g = GroupSpan::of(4, 1, 8);
        let te = CpImpl::Te;
        // The transfers themselves: 3 steps of 1 ms and 3 of 2 ms, 9 ms.
        let t = exchange(CpComm::Ring, te, even(1e-3), false, g);
        assert_eq!(t.exposed, 0.0);
        assert_term(t, 0.0, 9e-3);
        // With 0.5 ms forward steps (1.25 ms backward): 3·0.5 ms forward
        // and 3·0.75 ms backward: 3.75 ms.
        let t = exchange(CpComm::Ring, te, even(0.5e-3), false, g).exposed;
        assert!((t - 3.75e-3).abs() < 1e-12, "{t}");
        // All-gather of 4e8 bytes over 4: 3/4·4e8/100e9 = 3 ms forward, and
        // 6 ms backward (gather + reduce-scatter): 9 ms whatever the compute.
        let t = exchange(CpComm::AllGather, te, even(1e-3), false, g);
        assert_term(t, 9e-3, 9e-3);
        assert_eq!(t.exposed, t.total);
        // Full recompute repeats the forward exchange: 12 ms.
        let t = exchange(CpComm::AllGather, te, even(1e-3), true, g).exposed;
        assert!((t - 12e-3).abs() < 1e-12, "{t}");
    }

    #[test]
    fn ring_schedule_step_by_step_c4() {
        // C = 4, kv = 1e8 bytes on 100 GB/s: a forward transfer (K/V) takes
        // 1 ms, a backward one (K/V + dK/dV) 2 ms. Step compute: the diagonal
        // 0.5 ms, each later step 0.8 ms forward; backward 2.5× that,
        // 1.25 ms and 2.0 ms.
        //
        // Transformer Engine ring, three transfers each way:
        //   forward  step 0: max(0, 1 − 0.5)  = 0.5 ms
        //            step 1: max(0, 1 − 0.8)  = 0.2 ms
        //            step 2: max(0, 1 − 0.8)  = 0.2 ms   → 0.9 ms
        //   backward step 0: max(0, 2 − 1.25) = 0.75 ms
        //            steps 1, 2: max(0, 2 − 2) = 0       → 0.75 ms
        //   exposed 1.65 ms of 3·1 + 3·2 = 9 ms on the wire; full recompute
        //   repeats the forward: 2.55 ms.
        let g = GroupSpan::of(4, 1, 8);
        let steps = RingSteps {
            diag: 0.5e-3,
            off: 0.8e-3,
        };
        assert_term(
            exchange(CpComm::Ring, CpImpl::Te, steps, false, g),
            1.65e-3,
            9e-3,
        );
        let t = exchange(CpComm::Ring, CpImpl::Te, steps, true, g);
        assert!((t.exposed - 2.55e-3).abs() < 1e-12, "{t:?}");
        // PyTorch, all-gather rotater: forward gathers 4·1e8 bytes once,
        // 3/4·4e8/100e9 = 3 ms, under the diagonal: max(0, 3 − 0.5) = 2.5 ms.
        // Backward gathers again under the backward diagonal,
        // max(0, 3 − 1.25) = 1.75 ms; after each of the 4 steps the fp32
        // dK/dV (2e8 bytes, 2 ms) goes to the next rank: the first three
        // under the next step, max(0, 2 − 2.0) = 0 each, the last exposed,
        // 2 ms → 3.75 ms. Exposed 6.25 ms of 3 + 3 + 4·2 = 14 ms.
        let t = exchange(CpComm::AllGather, CpImpl::Torch, steps, false, g);
        assert_term(t, 6.25e-3, 14e-3);
    }

    #[test]
    fn ring_steps_split_the_causal_work_evenly() {
        // Llama 3.1 8B (32 heads of 128), s = 131072, C = 4, b = 1, T = 1,
        // FlashAttention-2 at 1e15 FLOP/s. One step: t = 32768 queries over
        // 32768 keys, causal-halved: 2·32768·32768·(4096+4096)/2 =
        // 8.796e12 FLOPs; the four steps make the rank's 1/C of the causal
        // attention over s.
        let m = &Catalog::shipped_model("llama3-8b");
        let sh = LayerShape {
            tokens: 32768.0,
            seq: 131072.0,
            tp: 1.0,
            sp: false,
            cp: 4.0,
            flash: true,
            kernel: AttnKernel::Fa2,
        };
        let step = 2.0 * 32768.0 * 32768.0 * 8192.0 / 2.0;
        assert!(
            (4.0 * step - compute::attention_core_flops(m, 32768.0, 131072.0)).abs() < 1.0,
            "{step}"
        );
        let r = ring_step_times(m, &sh, 1e15);
        // Diagonal: causal over 32k keys, FlashAttention-2 plateau 335 of
        // the 333 at 8k; later steps unmasked over 16k keys, 370 of 333.
        let diag = step / (1e15 * RING_STEP_RATE * 335.0 / 333.0);
        let off = step / (1e15 * RING_STEP_RATE * 370.0 / 333.0);
        assert!((r.diag - diag).abs() < 1e-12, "{r:?}");
        assert!((r.off - off).abs() < 1e-12, "{r:?}");
        assert!((r.diag - 11.21e-3).abs() < 0.01e-3, "{r:?}");
        assert!((r.off - 10.15e-3).abs() < 0.01e-3, "{r:?}");
        // Without CP: one causal kernel over s, no later steps, no CP rate.
        let one = LayerShape {
            tokens: 131072.0,
            cp: 1.0,
            ..sh
        };
        let r = ring_step_times(m, &one, 1e15);
        assert_eq!(r.off, 0.0);
        let all = compute::attention_core_flops(m, 131072.0, 131072.0);
        assert!(
            (r.diag - all / (1e15 * 335.0 / 333.0)).abs() < 1e-9,
            "{r:?}"
        );
    }

    #[test]
    fn torchtitan_cp_rows_run_the_same_kernels_at_every_c() {
        // TT-8B-CP-2, -3, -4 (tests/data/published-dev-v2.csv): s = 65536,
        // 131072, 262144 at C = 2, 4, 8, so every rank holds t = s/C =
        // 32768 tokens in all three. Step 0 is then 32768 queries over
        // 32768 keys under the mask, each later step 32768 over 16384 (or
        // 16384 over 32768) unmasked: one step 2·32768·32768·8192/2 =
        // 8.796e12 FLOPs whatever C. So a per-step kernel rate cannot tell
        // C = 2 (measured 4.5 s per later step of the whole model beyond
        // TT-8B-CP-1) from C = 4 and 8 (7.4 and 7.3 s): what the model
        // misses there grows with C some other way (docs/fidelity.md,
        // "Issue 15: long context").
        let m = &Catalog::shipped_model("llama3-8b");
        let steps = |seq: f64, c: f64| {
            let sh = LayerShape {
                tokens: seq / c,
                seq,
                tp: 1.0,
                sp: false,
                cp: c,
                flash: true,
                kernel: AttnKernel::Fa2,
            };
            ring_step_times(m, &sh, 1e15)
        };
        let c2 = steps(65536.0, 2.0);
        let step: f64 = 2.0 * 32768.0 * 32768.0 * 8192.0 / 2.0;
        assert!((step - 8.796e12).abs() < 1e9);
        assert!(
            (c2.diag - step / (1e15 * RING_STEP_RATE * 335.0 / 333.0)).abs() < 1e-12,
            "{c2:?}"
        );
        assert!(
            (c2.off - step / (1e15 * RING_STEP_RATE * 370.0 / 333.0)).abs() < 1e-12,
            "{c2:?}"
        );
        assert_eq!(steps(131072.0, 4.0), c2);
        assert_eq!(steps(262144.0, 8.0), c2);
    }

    #[test]
    fn torch_cp_exchanges_every_query_head() {
        // Llama 3.1 8B: 8 KV heads of 128 but 32 query heads. TE sends
        // K+V of the KV heads, 2·1024 = 2048 elements per token; PyTorch's CP
        // gets them after torchtitan's repeat_kv, 2·4096 = 8192: t = 32768,
        // T = 1: 32768·2048·2 = 134,217,728 bytes against 536,870,912.
        let m = &Catalog::shipped_model("llama3-8b");
        assert_eq!(
            kv_bytes_per_step(m, 32768.0, 1.0, CpImpl::Te),
            134_217_728.0
        );
        assert_eq!(
            kv_bytes_per_step(m, 32768.0, 1.0, CpImpl::Torch),
            536_870_912.0
        );
        // Buffers with C = 8: TE ring 4·kv; PyTorch all-gather the gathered
        // 8·kv plus fp32 dK/dV send and receive, 4·kv: 12·kv.
        assert_eq!(buffer_bytes(CpComm::Ring, CpImpl::Te, 1.0, 8), 4.0);
        assert_eq!(buffer_bytes(CpComm::AllGather, CpImpl::Torch, 1.0, 8), 12.0);
    }

    #[test]
    fn ring_across_nodes_uses_the_nic() {
        // C = 4 with stride 8: every member on its own node; a step of
        // 1e8 bytes takes 10 ms on the 10 GB/s NIC; 3 steps, 1 ms hidden
        // each: 27 ms forward. Backward 3 transfers of 20 ms under steps of
        // 2.5 ms: 3·17.5 = 52.5 ms. Exposed 79.5 ms.
        let g = GroupSpan::of(4, 8, 8);
        // Forward 3 × 10 ms plus backward 3 × 20 ms on the wire, 90 ms.
        let t = exchange(CpComm::Ring, CpImpl::Te, even(1e-3), false, g);
        assert_term(t, 79.5e-3, 90e-3);
    }

    #[test]
    fn ring_split_overhead_by_hand() {
        // Llama 3 70B (64 heads of 128, 8 KV heads), t = 8192, T = 8, C = 4,
        // HBM 1e12 B/s, 1 µs per launch. Output per rank 8192·1024 elements:
        // forward 3·6·8,388,608 B = 151 µs + 6 launches; backward
        // dQ 8192·1024 + dK/dV 8192·256 elements: 3·6·10,485,760 B = 189 µs
        // + 6 launches.
        let m = &Catalog::shipped_model("llama3-70b");
        let r = Rates::flat(1e12, 1e-6);
        let te = CpImpl::Te;
        let (f, b) = split_overhead(m, CpComm::Ring, te, 8192.0, 8.0, 4, &r);
        assert!(
            (f - (3.0 * 6.0 * 8_388_608.0 / 1e12 + 6e-6)).abs() < 1e-15,
            "{f}"
        );
        assert!(
            (b - (3.0 * 6.0 * 10_485_760.0 / 1e12 + 6e-6)).abs() < 1e-15,
            "{b}"
        );
        assert_eq!(
            split_overhead(m, CpComm::AllGather, te, 8192.0, 8.0, 4, &r),
            (1e-6, 1e-6)
        );
        assert_eq!(
            split_overhead(m, CpComm::Ring, te, 8192.0, 8.0, 1, &r),
            (0.0, 0.0)
        );
        // PyTorch's fp32 merges: forward 3·(46·8,388,608 B + 11 launches) =
        // 1157.6 µs + 33 µs; backward dQ 8,388,608 elements at 18 B and the
        // expanded dK/dV 8192·2·1024 = 16,777,216 at 26 B, plus 8 launches,
        // per step: 3·(150.99 + 436.21 + 8) µs.
        let (f, b) = split_overhead(m, CpComm::AllGather, CpImpl::Torch, 8192.0, 8.0, 4, &r);
        assert!(
            (f - 3.0 * (46.0 * 8_388_608.0 / 1e12 + 11e-6)).abs() < 1e-15,
            "{f}"
        );
        let per = (18.0 * 8_388_608.0 + 26.0 * 16_777_216.0) / 1e12 + 8e-6;
        assert!((b - 3.0 * per).abs() < 1e-15, "{b}");
    }

    #[test]
    fn mla_kv_width() {
        // DeepSeek-V3: K = 128·(128+64) = 24576, V = 128·128 = 16384 per
        // token, ÷T = 4: 10240 elements (expanded or not: MLA decompresses
        // per head already).
        let m = &Catalog::shipped_model("deepseek-v3");
        assert_eq!(kv_width_per_rank(m, 4.0, false), 10240.0);
        assert_eq!(kv_width_per_rank(m, 4.0, true), 10240.0);
        assert_eq!(buffer_bytes(CpComm::Ring, CpImpl::Te, 10.0, 1), 0.0);
        assert_eq!(buffer_bytes(CpComm::AllGather, CpImpl::Te, 10.0, 8), 160.0);
    }
}
