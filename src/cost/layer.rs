//! Costs of one item of the model (a dense layer, an MoE layer, the
//! embedding, the output layer with its loss) for one layout, per micro-batch
//! on one rank. The stage model and the ILP both add these up.

use serde::Serialize;

use crate::cost::Problem;
use crate::cost::breakdown::{PartTimes, Term, TimePart};
use crate::cost::compute::{self, LayerShape, LayerTime};
use crate::cost::contention::contention;
use crate::cost::memory::{self, ActivationTerms};
use crate::cost::precision::{self, CastWork};
use crate::cost::{comm, cp, data_parallel, moe as experts, mtp};
use crate::layout::{Layout, Placement, Recompute};
use crate::spec::{LossBuffers, SelectivePolicy};

/// Cost of one item on one rank for one micro-batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ItemCost {
    /// Time parts, seconds: compute (forward + backward), recompute, TP, CP
    /// and EP communication (forward + backward), each with its exposed and
    /// total time. The pipeline point-to-point is added per rank.
    pub time: PartTimes,
    /// Forward share of `time[Compute]`, seconds.
    pub fwd_compute: f64,
    /// Parameters the rank holds that shard over the dense DP·CP group.
    pub params: f64,
    /// Expert parameters the rank holds (shard over expert DP).
    pub expert_params: f64,
    /// Saved activation bytes per micro-batch in flight.
    pub activation: f64,
    /// Bytes of the same item if nothing were recomputed (working set while
    /// backward runs).
    pub working_set: f64,
    /// ZeRO-3/FSDP all-gather of the item's parameters (dense over DP·CP,
    /// experts over expert DP), one unit's, seconds; 0 below ZeRO-3.
    pub gather: f64,
    /// The same unit's gathers for its backward, seconds: `gather` again,
    /// more where the engine gathers tensors twice (DeepSpeed 0.3,
    /// [`data_parallel::deepspeed_2021_collectives`]).
    pub backward_gather: f64,
    /// ZeRO-3/FSDP reduce-scatter of the item's gradients, seconds; 0 below
    /// ZeRO-3.
    pub reduce_scatter: f64,
    /// Parameters of the item's low-precision linears held by the rank
    /// (dense and expert; 0 in bf16), for the narrow weight copies.
    pub low_params: f64,
    /// Low-precision GEMMs of the item on the rank (each with its own
    /// scaling state; 0 in bf16).
    pub low_gemms: f64,
}

impl ItemCost {
    /// Exposed time of all parts, seconds.
    pub fn time(&self) -> f64 {
        self.time.exposed()
    }

    /// Backward compute without recompute, seconds.
    pub fn bwd_compute(&self) -> f64 {
        self.time[TimePart::Compute].exposed - self.fwd_compute
    }

    /// Exposed communication of the item, seconds.
    pub fn comm(&self) -> f64 {
        self.time[TimePart::TpComm].exposed
            + self.time[TimePart::CpComm].exposed
            + self.time[TimePart::EpComm].exposed
    }

    /// Forward time only (compute and half its exposed communication), seconds.
    pub fn fwd_time(&self) -> f64 {
        self.fwd_compute + 0.5 * self.comm()
    }

    /// Add `n` times `other`; the working set is the larger of the two.
    /// Adding none changes nothing (and is skipped: a pipeline chunk of an
    /// all-MoE or all-dense model adds one of its two layer kinds zero times).
    pub fn add(&mut self, other: &ItemCost, n: f64) {
        if n == 0.0 {
            return;
        }
        self.time.add_scaled(&other.time, n);
        self.fwd_compute += n * other.fwd_compute;
        self.params += n * other.params;
        self.expert_params += n * other.expert_params;
        self.activation += n * other.activation;
        self.gather += n * other.gather;
        self.backward_gather += n * other.backward_gather;
        self.reduce_scatter += n * other.reduce_scatter;
        self.low_params += n * other.low_params;
        self.low_gemms += n * other.low_gemms;
        if n > 0.0 {
            self.working_set = self.working_set.max(other.working_set);
        }
    }
}

/// Costs of every kind of item for one layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LayerCosts {
    /// A dense transformer layer.
    pub dense: ItemCost,
    /// An MoE transformer layer (zero for dense models).
    pub moe: ItemCost,
    /// The input embedding (first stage).
    pub embedding: ItemCost,
    /// Final norm, output layer, logits and loss (last stage).
    pub output: ItemCost,
    /// Pipeline point-to-point time per micro-batch per chunk boundary,
    /// forward + backward, seconds.
    pub p2p: f64,
    /// Compute slowdown share σ while the pipeline sends overlap compute
    /// (the PP group's tier, [`contention::Slowdown::of`]).
    pub p2p_sigma: f64,
    /// Local tokens per micro-batch on one rank, `b·s/C`.
    pub tokens: f64,
    /// Context-parallel K/V exchange buffers of one layer in flight, bytes
    /// ([`cp::buffer_bytes`]; 0 when C = 1).
    pub cp_buffers: f64,
    /// Expert dispatch buffers of one MoE layer in flight, bytes
    /// ([`experts::dispatch_buffer_bytes`]; 0 for dense models).
    pub ep_buffers: f64,
    /// Dense parameters of the multi-token-prediction layers (and the
    /// word-embedding copy kept for them) inside `output.params`
    /// ([`mtp`]); 0 without MTP. ZeRO-3/FSDP gathers them as units of
    /// their own, not with the output layer.
    pub mtp_params: f64,
    /// Saved routed-token activations of one MoE layer per micro-batch,
    /// bytes ([`experts::routed_activation_bytes`]; part of `moe.activation`,
    /// 0 under full recompute).
    pub routed_activation: f64,
    /// Forward compute of one dense layer per micro-batch, by kind,
    /// seconds ([`compute::layer_forward`]), for `explain`.
    pub dense_forward: LayerTime,
    /// The same for an MoE layer, its expert GEMMs at the grouped-GEMM
    /// rate (zero for dense models).
    pub moe_forward: LayerTime,
    /// Token-expert pairs per local expert of an MoE layer per
    /// micro-batch (rows of the grouped GEMM), and the grouped GEMM's share
    /// of the dense GEMM rate at that count, a fraction in (0, 1]
    /// ([`experts::grouped_gemm_efficiency`], `m/(m + m½)`); (0, 1) for
    /// dense models.
    pub expert_rows: (f64, f64),
}

/// Vocabulary padded as Megatron does: up to a multiple of `128·T`.
pub fn padded_vocab(vocab: u64, tp: u32) -> u64 {
    let m = 128 * tp as u64;
    vocab.div_ceil(m) * m
}

/// Parameters of one layer's attention held by one TP rank: matrices ÷ T,
/// but K/V are replicated once T exceeds the KV heads (current Megatron).
fn attention_params_rank(pr: &Problem, tp: f64) -> f64 {
    let m = pr.model;
    let total = m.attention_params();
    if m.mla.is_some() {
        return total / tp;
    }
    let g = m.architecture.kv_heads as f64;
    let kv = 2.0 * m.architecture.hidden as f64 * m.kv_width() as f64;
    (total - kv) / tp + kv / tp.min(g)
}

/// Tensor-parallel collective time of one layer per micro-batch, seconds,
/// before any overlap ([ref:shoeybi-2019] §3: two all-reduces per layer
/// in forward, two in backward; with SP each is an all-gather plus a
/// reduce-scatter of the same volume, [ref:korthikanti-2022] §4.2.2).
///
/// `one` is one all-reduce of the layer's `t·h` bf16 activations over the
/// TP group, `passes` 2 (forward, backward) or 3 (full recompute adds the
/// forward again). A dense layer has two collectives per pass; an MoE layer
/// the attention one, one more when its shared experts are TP-sharded, plus
/// the expert-TP gather/scatter of the routed pairs (`etp`).
pub fn tp_comm_per_layer(one: f64, passes: f64, collectives_per_pass: f64, etp: f64) -> f64 {
    collectives_per_pass * passes * one + etp
}

/// Exposed part of TP communication `comm` next to GEMM time `gemm` with
/// `--tp-comm-overlap` (needs SP): the collective is split into T ring
/// steps pipelined with the GEMM chunks that depend on them
/// ([ref:wang-2022]). With chunks `c = comm/T` and `g = gemm/T` the
/// pipeline exposes the first chunk when the GEMM chunks are the longer
/// (`c ≤ g`), and otherwise all of the communication but what the last
/// T − 1 GEMM chunks hide: `max(comm/T, comm − gemm·(T − 1)/T)`, never
/// more than `comm`.
pub fn tp_comm_overlapped(comm: f64, gemm: f64, tp: f64) -> f64 {
    (comm / tp).max(comm - gemm * (tp - 1.0) / tp)
}

/// TP communication of one layer per micro-batch, seconds: `total` the
/// collectives on the wire, `exposed` what the GEMMs do not hide.
///
/// `forward_passes_total` is [`tp_comm_per_layer`]: the forward's
/// collectives once per pass (forward, backward, and the recomputed forward
/// under full recompute). With SP the backward moves half a pass more: the
/// row-parallel linears all-gather their output gradient and the
/// column-parallel linears all-gather their input again for the weight
/// gradient before reduce-scattering the input gradient
/// ([ref:korthikanti-2022] §4.2.2). With `--tp-comm-overlap` the GEMMs of
/// every pass (forward, backward 2×, recomputed forward; `fwd_gemm` each)
/// hide it ([`tp_comm_overlapped`]); otherwise the forward and recomputed
/// forward expose their collectives and the backward hides part of its own
/// ([`backward_tp_exposed`]).
pub fn tp_comm_exposed(
    forward_passes_total: f64,
    fwd_gemm: f64,
    passes: f64,
    tp: f64,
    sp: bool,
    overlap: bool,
    asynchronous: bool,
) -> Term {
    let per_pass = forward_passes_total / passes;
    let sp_regather = if sp { 0.5 * per_pass } else { 0.0 };
    let total = forward_passes_total + sp_regather;
    let exposed = if overlap {
        tp_comm_overlapped(forward_passes_total, fwd_gemm * (passes + 1.0), tp)
    } else {
        per_pass * (passes - 1.0) + backward_tp_exposed(per_pass, fwd_gemm, sp, asynchronous)
    };
    Term::overlapped(exposed, total)
}

/// Exposed TP communication of one layer's backward, seconds, given the
/// forward's collective time `per_pass` (two all-reduce equivalents for a
/// dense layer) and the forward GEMM time `fwd_gemm`.
///
/// Megatron-LM's column-parallel linears (QKV, FC1) launch the collective of
/// the input gradient asynchronously and compute the weight gradient while
/// it runs (`LinearWithGradAccumulationAndAsyncCommunication` in
/// `tensor_parallel/layers.py`; with SP the input all-gather for the weight
/// gradient also runs under the input-gradient GEMM). The weight-gradient
/// GEMMs of a layer take as long as its forward GEMMs, so:
/// - without SP: the two all-reduces hide under `fwd_gemm`; only the excess
///   is exposed;
/// - with SP: the row-parallel linears' grad-output all-gathers (half of
///   `per_pass`) are exposed; the column-parallel all-gathers and
///   reduce-scatters (`per_pass` again) hide under the column-parallel
///   input- and weight-gradient GEMMs, counted conservatively as `fwd_gemm`.
///
/// Without the asynchronous path (Megatron-LM before late 2021) the backward
/// exposes as much as the forward.
pub fn backward_tp_exposed(per_pass: f64, fwd_gemm: f64, sp: bool, asynchronous: bool) -> f64 {
    if !asynchronous {
        return per_pass;
    }
    if sp {
        0.5 * per_pass + (per_pass - fwd_gemm).max(0.0)
    } else {
        (per_pass - fwd_gemm).max(0.0)
    }
}

/// Pipeline point-to-point time per micro-batch and chunk boundary,
/// forward activations plus backward gradients, seconds; `bytes` is the
/// `b·(s/C)·h` bf16 activation. Each TP rank sends only its 1/T slice: with
/// SP the tensor is already scattered; without SP Megatron's scatter/gather
/// optimization ([ref:narayanan-2021] §4.1) splits the replicated tensor
/// over the T ranks (all NICs in parallel) and the receiver all-gathers it
/// on NVLink. Zero without pipeline parallelism.
pub fn p2p_per_micro_batch(
    bytes: f64,
    l: &Layout,
    sp: bool,
    pl: &Placement,
    links: &comm::Links,
) -> f64 {
    if l.pp <= 1 {
        return 0.0;
    }
    let slice = bytes / l.tp as f64;
    let regather = if sp || l.tp == 1 {
        0.0
    } else {
        comm::all_gather(bytes, pl.tp, links)
    };
    2.0 * (comm::p2p(slice, pl.pp, links) + regather)
}

/// ZeRO-3/FSDP collectives of one unit (item `it`), seconds: the all-gather
/// of its parameters at the recipe's weight bytes and the reduce-scatter of
/// its gradients at the recipe's reduction bytes, dense parameters over the
/// DP·CP group and expert parameters over the expert-DP group, each its own
/// collective with its own latency ([`comm::all_gather`],
/// [`comm::reduce_scatter`]).
///
/// Returns `(forward gather, backward gather, reduce-scatter)`. Under
/// DeepSpeed 0.3 ([`crate::spec::DeepSpeedZero3::per_tensor_sync`]) the
/// dense parameters move tensor by tensor instead, `tensors` of the unit
/// ([`data_parallel::deepspeed_2021_collectives`]); experts keep the
/// per-unit collectives.
pub fn fsdp_unit_collectives(
    pr: &Problem,
    it: &ItemCost,
    pl: &Placement,
    tensors: &data_parallel::Tensors,
    full_recompute: bool,
) -> (f64, f64, f64) {
    let r = &pr.job.recipe;
    // Gathered bytes: at the recipe's weight bytes, or the low-precision
    // bytes of the unit's low-precision weights under a narrow parameter
    // gather ([`precision::narrow_unit_gather_bytes`]) — the bytes narrow,
    // each collective's latency does not.
    let (dense_bytes, expert_bytes) = match pr.rates.low.as_ref().filter(|lp| lp.param_gather) {
        Some(lp) => precision::narrow_unit_gather_bytes(it, lp, r, pr.model.architecture.hidden),
        None => (
            it.params * r.weight_bytes,
            it.expert_params * r.weight_bytes,
        ),
    };
    let experts_gather = comm::all_gather(expert_bytes, pl.edp, &pr.links);
    let experts_rs =
        comm::reduce_scatter(it.expert_params * r.grad_reduce_bytes, pl.edp, &pr.links);
    if let Some(ds) = pr
        .job
        .engine_memory
        .deepspeed_zero3
        .filter(|d| d.per_tensor_sync)
    {
        let (f, b, rs) = data_parallel::deepspeed_2021_collectives(
            tensors,
            &ds,
            full_recompute,
            r.weight_bytes,
            r.grad_reduce_bytes,
            pl.dp_cp,
            &pr.links,
            pr.rates.hbm,
        );
        return (f + experts_gather, b + experts_gather, rs + experts_rs);
    }
    let gather = comm::all_gather(dense_bytes, pl.dp_cp, &pr.links) + experts_gather;
    let reduce_scatter =
        comm::reduce_scatter(it.params * r.grad_reduce_bytes, pl.dp_cp, &pr.links) + experts_rs;
    (gather, gather, reduce_scatter)
}

/// Parameter tensors of one unit on a rank, elements, in the order its
/// forward uses them, for DeepSpeed's per-tensor collectives
/// ([`data_parallel::Tensors`]): a transformer layer as Megatron builds it
/// (input norm weight and bias, fused QKV weight and bias, output
/// projection weight and bias, second norm, first MLP weight (gate and up
/// fused) and bias, second MLP weight and bias; biases and norm biases only
/// where the model has them), the embedding as word table and learned
/// position table, the output unit as final norm and output weight; an
/// MoE layer's MLP replaced by its router and shared experts; what the
/// shapes leave of `params` (MLA, MTP) as one more tensor.
///
/// Example: GPT-3 175B layer at T = 1: 12288, 12288, 12288·36864 =
/// 452,984,832, 36864, 12288² = 150,994,944, 12288, 12288, 12288,
/// 12288·49152 = 603,979,776, 49152, 603,979,776, 12288.
pub fn unit_tensors(
    model: &crate::spec::Model,
    kind: UnitKind,
    params: f64,
    tp: f64,
) -> data_parallel::Tensors {
    let a = &model.architecture;
    let h = a.hidden as f64;
    let bias = a.linear_bias;
    let ln = a.norm == crate::spec::model::Norm::Layernorm;
    let norm = |v: &mut Vec<f64>| {
        v.push(h);
        if ln {
            v.push(h);
        }
    };
    let mut v: Vec<f64> = Vec::with_capacity(data_parallel::MAX_UNIT_TENSORS + 1);
    // One MLP of width `ffn` split over TP: first weight (gate and up
    // fused) and bias, second weight and bias (replicated in Megatron,
    // counted h/T as the item counts it: see the projection's).
    let mlp = |v: &mut Vec<f64>, ffn: f64| {
        let up = if a.gated_mlp { 2.0 } else { 1.0 } * ffn;
        v.push(h * up / tp);
        if bias {
            v.push(up / tp);
        }
        v.push(ffn * h / tp);
        if bias {
            v.push(h / tp);
        }
    };
    match kind {
        UnitKind::Layer | UnitKind::MoeLayer if model.mla.is_none() => {
            let q = model.q_width() as f64;
            let kv = model.kv_width() as f64;
            norm(&mut v);
            v.push(h * (q + 2.0 * kv) / tp);
            if bias {
                v.push((q + 2.0 * kv) / tp);
            }
            v.push(q * h / tp);
            if bias {
                // Megatron replicates a row-parallel bias (h on every TP
                // rank); the item's parameters count it h/T
                // (`attention_params_rank`, `Model::mlp_params`), and the
                // tensors split no more than the item holds.
                v.push(h / tp);
            }
            norm(&mut v);
            match (kind, &model.moe) {
                // The MoE item holds no dense MLP (its `architecture.ffn` is
                // unused): the router `h·E`, then each shared expert; the
                // routed experts move over the expert-DP group
                // ([`fsdp_unit_collectives`]).
                (UnitKind::MoeLayer, Some(m)) => {
                    v.push(h * m.experts as f64);
                    let shared_ffn = m.shared_expert_ffn.unwrap_or(m.expert_ffn) as f64;
                    for _ in 0..m.shared_experts {
                        mlp(&mut v, shared_ffn);
                    }
                }
                (UnitKind::MoeLayer, None) => {}
                _ => mlp(&mut v, a.ffn as f64),
            }
        }
        UnitKind::Embedding => {
            if a.position_embedding == crate::spec::model::PositionEmbedding::Learned {
                v.push((params - a.max_seq as f64 * h).max(0.0));
                v.push(a.max_seq as f64 * h);
            }
        }
        UnitKind::Output => norm(&mut v),
        UnitKind::Layer | UnitKind::MoeLayer => {}
    }
    let named: f64 = v.iter().sum();
    // The named shapes never hold more than the item does (bias rounding
    // aside); a larger sum is a shape error here, not a price.
    debug_assert!(
        named <= params + 1e-9 * params.max(1.0) + 0.5,
        "{kind:?} of {}: named tensors {named} exceed the item's {params} parameters",
        model.name
    );
    if params - named > 0.5 {
        v.push(params - named);
    }
    data_parallel::Tensors::of(&v)
}

/// What a wrapped unit holds, for [`unit_tensors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    /// A dense transformer layer.
    Layer,
    /// An MoE transformer layer: attention, norms, router and shared
    /// experts (the routed experts are the item's `expert_params`).
    MoeLayer,
    /// The input embedding.
    Embedding,
    /// The final norm and the output layer.
    Output,
}

/// Load of the busiest expert rank over the mean for layout `l`
/// ([`experts::expert_load`]): the job's skew, at least the random-routing
/// floor of the layout's EP group ([`experts::random_routing_skew`] of the
/// mean pairs a rank computes per micro-batch), capped by the job's
/// capacity factor. 1.0 for a dense model.
pub fn moe_load(pr: &Problem, l: &Layout) -> f64 {
    let model = pr.model;
    if model.moe.is_none() {
        return 1.0;
    }
    let tokens = l.micro_batch as f64 * pr.job.seq_len as f64 / l.cp as f64;
    let mean = experts::routed_pairs_per_rank(model, tokens, l.tp as f64, l.etp as f64, 1.0);
    let floor = experts::random_routing_skew(mean, l.ep as f64);
    experts::expert_load(pr.job.moe_imbalance, floor, pr.job.moe_capacity_factor)
}

/// Costs of every item kind for layout `l` (per micro-batch on one rank).
pub fn layer_costs(pr: &Problem, l: &Layout, pl: &Placement) -> LayerCosts {
    let model = pr.model;
    let a = &model.architecture;
    let job = pr.job;
    let h = a.hidden as f64;
    let tp = l.tp as f64;
    let cp = l.cp as f64;
    let seq = job.seq_len as f64;
    let tokens = l.micro_batch as f64 * seq / cp;
    let shape = LayerShape {
        tokens,
        seq,
        tp,
        sp: l.sp && l.tp > 1,
        cp,
        flash: job.flash_attention,
        kernel: job.attention_kernel,
    };
    let overlap_tp = job.tp_comm_overlap && shape.sp;
    let rep_div = if shape.sp { tp } else { 1.0 };

    // TP: two all-reduce equivalents per layer in forward (attention and
    // MLP outputs; with SP all-gather + reduce-scatter pairs of the same
    // volume), two in backward, and forward's again under full recompute.
    let tp_bytes = tokens * h * 2.0;
    let tp_one = if l.tp > 1 {
        comm::all_reduce(tp_bytes, pl.tp, &pr.links)
    } else {
        0.0
    };
    // A transformer layer's SP collectives with low-precision linears: the
    // all-gather half of each all-reduce equivalent moves the narrow copy
    // ([`precision::sp_gather_bytes_factor`]); the reduce-scatters stay bf16.
    let tp_layer = match &pr.rates.low {
        Some(lp) if shape.sp => tp_one * (1.0 + precision::sp_gather_bytes_factor(lp)) / 2.0,
        _ => tp_one,
    };
    // Weight casts per micro-batch of the low-precision linears.
    let m = crate::cost::micro_batches_or_floor(pr, l) as f64;
    let weight_casts = pr
        .rates
        .low
        .as_ref()
        .map(|lp| precision::weight_casts(lp, l.zero, m, (l.dp * l.cp) as f64))
        .unwrap_or(0.0);
    let passes = if l.recompute == Recompute::Full {
        3.0
    } else {
        2.0
    };

    // CP: K/V exchange by ring (overlapped with attention per step) or
    // all-gather (exposed), see `cp`.
    let kv_bytes = cp::kv_bytes_per_step(model, tokens, tp, job.cp_impl);
    // Forward time of each ring step: the fused kernels' own
    // ([`cp::ring_step_times`]); unfused attention split evenly.
    let ring_steps = |attn_f: f64| -> cp::RingSteps {
        if shape.flash {
            cp::ring_step_times(model, &shape, pr.rates.attn_flops)
        } else {
            cp::RingSteps {
                diag: attn_f / cp,
                off: attn_f / cp,
            }
        }
    };
    let cp_cost = |attn_f: f64| -> Term {
        if l.cp <= 1 {
            return Term::default();
        }
        cp::exchange_time(
            l.cp_comm,
            job.cp_impl,
            kv_bytes,
            l.cp,
            ring_steps(attn_f),
            l.recompute == Recompute::Full,
            pl.cp,
            &pr.links,
        )
    };
    // MoE: load of the busiest expert rank over the mean: the stated skew,
    // at least the random-routing floor, capped by a capacity factor
    // ([`experts::expert_load`]).
    let load = moe_load(pr, l);

    let mut dense_terms: ActivationTerms = memory::dense_layer_terms(model, true);
    let mut attn_terms: ActivationTerms = memory::dense_layer_terms(model, false);
    if let Some(lp) = &pr.rates.low {
        // Inputs of the low-precision linears saved narrow.
        for (terms, mlp) in [(&mut dense_terms, true), (&mut attn_terms, false)] {
            let (rep, sh) = precision::saved_input_bytes_per_token(model, mlp, lp);
            terms.replicated -= rep;
            terms.sharded -= sh;
        }
    }
    // torchtitan's per-op selective checkpointing saves its own set
    // (`memory::op_sac_terms`) in place of Megatron's selective recompute.
    let op_sac = l.recompute == Recompute::Selective
        && job.engine_memory.selective == SelectivePolicy::TorchtitanOp;
    // What the routed experts save (`experts::routed_activation_bytes`):
    // the grouped GEMMs' inputs narrow under Transformer Engine's low
    // precision, and the routing probabilities where the engine's
    // Megatron-Core applies them in the expert activation.
    let routed_saved = match &model.moe {
        Some(m) => experts::RoutedSaved {
            fc1_input: precision::saved_input_element_bytes(
                pr.rates.low.as_ref(),
                model.architecture.hidden as f64,
            ),
            fc2_input: precision::saved_input_element_bytes(
                pr.rates.low.as_ref(),
                m.expert_ffn as f64 / l.etp as f64,
            ),
            probs_in_expert: job.engine_memory.moe_probs_in_expert,
        },
        None => experts::RoutedSaved::BF16,
    };
    let item = |moe: bool| -> (ItemCost, LayerTime, (f64, f64)) {
        let (pairs, etp) = if moe {
            let etp = l.etp as f64;
            (
                experts::routed_pairs_per_rank(model, tokens, tp, etp, load),
                etp,
            )
        } else {
            (0.0, 1.0)
        };
        let mut f: LayerTime = compute::layer_forward(model, &shape, moe, pairs, etp, &pr.rates);
        let mut rows = (0.0, 1.0);
        if moe && let Some(m) = &model.moe {
            // Grouped GEMM over the rank's local experts, each with
            // `pairs / (experts/E)` rows ([`experts::grouped_gemm_efficiency`]).
            let local = (m.experts as f64 / l.ep.max(1) as f64).max(1.0);
            let eff = experts::grouped_gemm_efficiency(pairs / local, pr.rates.grouped_half_tokens);
            if eff > 0.0 {
                f.expert_gemm /= eff;
                f.expert_gemm_backward /= eff;
            }
            rows = (pairs / local, eff);
        }
        let b = compute::layer_backward(&f);
        // torchtitan's per-op SAC reruns every second matmul and the
        // element-wise ops ([`compute::op_sac_recompute`]); Megatron's
        // selective recompute reruns what [`compute::layer_recompute`] says.
        let rc = if op_sac {
            let (lins, count) = compute::linear_gemms(model, &shape, moe, pairs, etp);
            compute::op_sac_recompute(&lins[..count], &f, &pr.rates)
        } else {
            compute::layer_recompute(&f, l.recompute)
        };
        // CP: merging the per-step partial attention results.
        let (cp_f, cp_b) =
            cp::split_overhead(model, l.cp_comm, job.cp_impl, tokens, tp, l.cp, &pr.rates);
        let rc = rc
            + if l.recompute == Recompute::Full {
                cp_f
            } else {
                0.0
            };
        let has_shared = model.moe.as_ref().is_some_and(|m| m.shared_experts > 0);
        let tp_count = if !moe || has_shared { 2.0 } else { 1.0 };
        let etp_comm = if moe {
            experts::etp_comm_time(model, pairs, passes, pl.etp, &pr.links)
        } else {
            0.0
        };
        let tp_term = tp_comm_exposed(
            tp_comm_per_layer(tp_layer, passes, tp_count, etp_comm),
            f.gemm,
            passes,
            tp,
            shape.sp,
            overlap_tp,
            job.async_tp_backward,
        );
        // Dispatch and combine all-to-alls, forward and backward (and the
        // recomputed forward), over the EP group's links.
        let ep_comm = if moe {
            experts::ep_comm_time(model, tokens, tp, load, l.recompute, pl.ep, &pr.links)
                * pr.rates
                    .low
                    .as_ref()
                    .map_or(1.0, precision::dispatch_time_factor)
        } else {
            0.0
        };
        // Saved activations of one layer under recompute policy `rc`
        // (Korthikanti et al. 2022, see `memory::layer_activation_bytes`).
        let saved_act = |terms: &memory::ActivationTerms, rc, flash| {
            memory::layer_activation_bytes(terms, h, tokens, seq, tp, shape.sp, rc, flash)
        };
        let layer_act = |terms, rc| saved_act(terms, rc, job.flash_attention);
        // Under op-level SAC: the saved set of `memory::op_sac_terms` (with
        // or without the MLP's), nothing recomputed, flash attention.
        let op_sac_act = |include_mlp| {
            saved_act(
                &memory::op_sac_terms(model, include_mlp),
                Recompute::None,
                true,
            )
        };
        let (params, expert_params, act, working) = if moe {
            let attn = attention_params_rank(pr, tp) + 2.0 * model.norm_params();
            let shared = model
                .moe
                .as_ref()
                .map(|m| {
                    m.shared_experts as f64
                        * model.mlp_params(m.shared_expert_ffn.unwrap_or(m.expert_ffn))
                        / tp
                        + h * m.experts as f64
                })
                .unwrap_or(0.0);
            let experts = model.routed_expert_params() / (l.ep * l.etp) as f64;
            let attn_act = if op_sac {
                op_sac_act(false)
            } else {
                layer_act(&attn_terms, l.recompute)
            };
            let exp_act =
                experts::routed_activation_bytes(model, pairs, etp, tokens, tp, &routed_saved);
            let full = if l.recompute == Recompute::Full {
                0.0
            } else {
                exp_act
            };
            let working = layer_act(&attn_terms, Recompute::None) + exp_act;
            (attn + shared, experts, attn_act + full, working)
        } else {
            let params = attention_params_rank(pr, tp)
                + model.mlp_params(a.ffn) / tp
                + 2.0 * model.norm_params();
            let act = if op_sac {
                op_sac_act(true)
            } else {
                layer_act(&dense_terms, l.recompute)
            };
            let working = layer_act(&dense_terms, Recompute::None);
            (params, 0.0, act, working)
        };
        // Casts of the low-precision linears, forward and backward, and the
        // forward's input casts again under full recompute.
        let (cast, low_params, low_gemms) = match &pr.rates.low {
            Some(lp) => {
                let (lins, count) = compute::linear_gemms(model, &shape, moe, pairs, etp);
                let local_experts = model
                    .moe
                    .as_ref()
                    .filter(|_| moe)
                    .map(|m| m.experts as f64 / l.ep as f64)
                    .unwrap_or(0.0);
                let mut work = CastWork::default();
                let mut low_params = 0.0;
                for lin in &lins[..count] {
                    if lin.expert {
                        // A grouped GEMM over the rank's local experts: one
                        // weight each, and its inputs quantized split by
                        // split ([`precision::grouped_linear_cast`]).
                        work.add(&precision::grouped_linear_cast(
                            lin,
                            weight_casts,
                            tp,
                            local_experts.max(1.0),
                            lp,
                        ));
                    } else {
                        work.add(&precision::linear_cast_bytes(lin, weight_casts, tp, lp));
                        low_params += lin.k * lin.n;
                    }
                }
                let (cf, cb) = precision::cast_seconds(&work, &pr.rates);
                let rerun = if l.recompute == Recompute::Full {
                    cf
                } else {
                    0.0
                };
                let dense_gemms = lins[..count].iter().filter(|x| !x.expert).count() as f64;
                (
                    cf + cb + rerun,
                    low_params + if moe { expert_params } else { 0.0 },
                    dense_gemms + 2.0 * local_experts,
                )
            }
            None => (0.0, 0.0, 0.0),
        };
        let mut time = PartTimes::default();
        time[TimePart::Compute] = Term::serial(f.total() + cp_f + b.total() + cp_b);
        time[TimePart::Recompute] = Term::serial(rc);
        let cp_term = cp_cost(f.attention);
        time[TimePart::LowPrecisionCast] = Term::serial(cast);
        time[TimePart::TpComm] = tp_term;
        time[TimePart::CpComm] = cp_term;
        // With `--overlap-moe-expert-parallel-comm` the all-to-alls run
        // under another micro-batch's compute ([`experts::a2a_overlap`]).
        let ep_term = if job.moe_a2a_overlap && moe {
            let (exposed, _) = experts::a2a_overlap(ep_comm, f.total() + b.total() + rc);
            Term::overlapped(exposed, ep_comm)
        } else {
            Term::serial(ep_comm)
        };
        time[TimePart::EpComm] = ep_term;
        time[TimePart::Contention] = Term::serial(
            contention(tp_term.hidden(), pr.slowdown.of(pl.tp))
                + contention(cp_term.hidden(), pr.slowdown.of(pl.cp))
                + contention(ep_term.hidden(), pr.slowdown.of(pl.ep)),
        );
        let cost = ItemCost {
            time,
            fwd_compute: f.total() + cp_f,
            params,
            expert_params,
            activation: act,
            working_set: working,
            low_params,
            low_gemms,
            ..ItemCost::default()
        };
        (cost, f, rows)
    };
    let (dense, dense_forward, _) = item(false);
    let (moe, moe_forward, expert_rows) = if model.moe.is_some() {
        item(true)
    } else {
        (ItemCost::default(), LayerTime::default(), (0.0, 1.0))
    };

    // Embedding: a lookup (memory-bound) and its gradient; weights V·h/T.
    let vocab = padded_vocab(a.vocab, l.tp) as f64;
    let pos = if a.position_embedding == crate::spec::model::PositionEmbedding::Learned {
        (a.max_seq * a.hidden) as f64
    } else {
        0.0
    };
    let emb_bytes = tokens * h * 2.0;
    let emb_fwd = compute::elementwise_time(2.0 * emb_bytes, &pr.rates);
    let emb_bwd = compute::elementwise_time(3.0 * emb_bytes, &pr.rates);
    let mut emb_time = PartTimes::default();
    emb_time[TimePart::Compute] = Term::serial(emb_fwd + emb_bwd);
    emb_time[TimePart::TpComm] = Term::serial(if l.tp > 1 {
        tp_one * if shape.sp { 0.5 } else { 1.0 }
    } else {
        0.0
    });
    let embedding = ItemCost {
        time: emb_time,
        fwd_compute: emb_fwd,
        params: vocab * h / tp + pos,
        activation: emb_bytes / rep_div,
        ..ItemCost::default()
    };

    // Output layer [tokens × h]·[h × V/T], fp32 cross-entropy over V/T
    // (several passes), final norm. The tied case keeps a copy of the
    // embedding on the last stage when p > 1 (Megatron).
    let (out_f, out_b) = compute::gemm_pass_times(tokens, vocab / tp, h, &pr.rates);
    // Cross-entropy: HBM bytes per logit by the engine's loss
    // implementation ([`cross_entropy_bytes_per_logit`]) over the logits it
    // computes on ([`cross_entropy_logits`]).
    let loss = job.engine_memory.loss;
    let logits = cross_entropy_logits(tokens, vocab, tp, loss);
    let (ce_f, ce_b) = cross_entropy_bytes_per_logit(loss);
    let (ce_fwd, ce_bwd) = (ce_f * logits, ce_b * logits);
    let out_params = if !a.tied_embeddings || l.pp > 1 {
        vocab * h / tp
    } else {
        0.0
    } + model.norm_params();
    let out_fwd = out_f + compute::elementwise_time(ce_fwd, &pr.rates);
    let out_bwd = out_b + compute::elementwise_time(ce_bwd, &pr.rates);
    let mut out_time = PartTimes::default();
    out_time[TimePart::Compute] = Term::serial(out_fwd + out_bwd);
    out_time[TimePart::TpComm] = Term::serial(if l.tp > 1 {
        2.0 * tp_one
            + if loss == LossBuffers::TorchBf16Gathered {
                comm::all_gather(gathered_logits_bytes(tokens, vocab), pl.tp, &pr.links)
            } else {
                0.0
            }
    } else {
        0.0
    });
    let output = ItemCost {
        time: out_time,
        fwd_compute: out_fwd,
        params: out_params,
        activation: tokens * h * 2.0 / rep_div,
        working_set: memory::loss_buffer_bytes(tokens, vocab, tp, job.engine_memory.loss),
        ..ItemCost::default()
    };

    // Multi-token prediction on the last stage ([`mtp`]): per MTP layer one
    // transformer layer of the last kind, the h×2h projection, three norms,
    // the shifted tokens' embedding lookup and one more pass through the
    // output head and loss; charged to the output item, which sits on the
    // last chunk.
    let mut output = output;
    let mut mtp_params = 0.0;
    let d = a.mtp_layers as f64;
    if d > 0.0 {
        let block = if model.mtp_is_moe() { &moe } else { &dense };
        let head_loss = output;
        let (proj_f, proj_b) = compute::gemm_pass_times(tokens, h / tp, 2.0 * h, &pr.rates);
        let elem = mtp::elementwise_bytes_per_token(model) * tokens / rep_div;
        let (elem_f, elem_b) = (
            compute::elementwise_time(elem, &pr.rates),
            compute::elementwise_time(2.0 * elem, &pr.rates),
        );
        let extra_fwd = proj_f + elem_f + emb_fwd + head_loss.fwd_compute;
        let extra = proj_b + elem_b + emb_bwd + head_loss.bwd_compute() + extra_fwd;
        let mut t = PartTimes::default();
        t[TimePart::Compute] = Term::serial(extra);
        let proj_tp = if l.tp > 1 {
            mtp::PROJECTION_TP_COLLECTIVES_PER_PASS * passes * tp_one
        } else {
            0.0
        };
        t[TimePart::TpComm] = Term::serial(
            proj_tp
                + embedding.time[TimePart::TpComm].total
                + head_loss.time[TimePart::TpComm].total,
        );
        let loss_buffers = output.working_set;
        let before = output.params;
        output.add(block, d);
        output.time.add_scaled(&t, d);
        output.fwd_compute += d * extra_fwd;
        output.params += d * (model.mtp_projection_params() / tp + 3.0 * model.norm_params())
            + mtp::embedding_copy_params(model, vocab, tp, l.pp);
        mtp_params = output.params - before;
        output.activation += d * mtp::saved_bytes_per_token(model) * tokens / rep_div;
        // Every module's logits stay saved for its loss's backward
        // (`process_mtp_loss` runs in the forward).
        output.working_set = (1.0 + d) * loss_buffers;
    }

    let (mut dense, mut moe, mut embedding, mut output) = (dense, moe, embedding, output);
    if l.zero >= 3 {
        let full = l.recompute == Recompute::Full;
        let per_tensor = pr
            .job
            .engine_memory
            .deepspeed_zero3
            .is_some_and(|d| d.per_tensor_sync);
        for (it, kind) in [
            (&mut dense, UnitKind::Layer),
            (&mut moe, UnitKind::MoeLayer),
            (&mut embedding, UnitKind::Embedding),
            (&mut output, UnitKind::Output),
        ] {
            // Only DeepSpeed 0.3 reads the tensors (kept off the search's
            // path otherwise).
            let tensors = if per_tensor {
                unit_tensors(model, kind, it.params, tp)
            } else {
                data_parallel::Tensors::default()
            };
            (it.gather, it.backward_gather, it.reduce_scatter) =
                fsdp_unit_collectives(pr, it, pl, &tensors, full);
        }
    }

    let p2p = p2p_per_micro_batch(tokens * h * 2.0, l, shape.sp, pl, &pr.links);
    let (ep_buffers, routed_activation) = match &model.moe {
        Some(_) => {
            let pairs = experts::routed_pairs_per_rank(model, tokens, tp, l.etp as f64, load);
            let routed = if l.recompute == Recompute::Full {
                0.0
            } else {
                experts::routed_activation_bytes(
                    model,
                    pairs,
                    l.etp as f64,
                    tokens,
                    tp,
                    &routed_saved,
                )
            };
            (
                experts::dispatch_buffer_bytes(model, tokens, tp, load),
                routed,
            )
        }
        None => (0.0, 0.0),
    };
    LayerCosts {
        dense,
        moe,
        embedding,
        output,
        p2p,
        p2p_sigma: pr.slowdown.of(pl.pp),
        tokens,
        cp_buffers: cp::buffer_bytes(l.cp_comm, job.cp_impl, kv_bytes, l.cp),
        ep_buffers,
        mtp_params,
        routed_activation,
        dense_forward,
        moe_forward,
        expert_rows,
    }
}

/// HBM bytes the loss moves per logit, `(forward, backward)`, by the
/// engine's loss implementation (bf16 logits in, bf16 gradient out; the
/// per-token vectors — targets, max, sum, loss — are ignored;
/// [ref:cross-entropy-kernels]):
///
/// - [`LossBuffers::MegatronVocabParallel`] — Megatron-LM's unfused
///   `_VocabParallelCrossEntropy` (`megatron/core/tensor_parallel/
///   cross_entropy.py`): forward 38 = cast to fp32 (read 2, write 4), max
///   (read 4), subtract the max (8), exp (8), sum (4), normalise to the
///   softmax kept for backward (8); backward 22 = softmax minus one-hot (8),
///   times the loss gradient (8), cast to bf16 (6).
/// - [`LossBuffers::TeFusedInPlace`] — Transformer Engine's Triton
///   `parallel_cross_entropy` (`transformer_engine/pytorch/triton/
///   cross_entropy.py` and its kernels, before TE #3193 of 2026-07-09, the
///   version whose in-place gradient [`memory::loss_buffer_bytes`] counts):
///   forward 6 = `online_softmax_kernel` reads the logits (2), then
///   `cross_entropy_kernel` reads them again (2) and writes the gradient
///   over them (2); backward 4 = `element_mul_kernel` reads and rewrites it
///   scaled by the per-token loss gradient (Megatron's loss is per token, so
///   the `grad_output == 1` shortcut does not apply).
/// - [`LossBuffers::TorchFp32Eager`] — torchtitan's
///   `cross_entropy(pred.flatten(0, 1).float(), labels)`
///   (`torchtitan/components/loss.py`) run eagerly, PyTorch's block softmax
///   (`aten/src/ATen/native/cuda/SoftMax.cu`, `cunn_SoftMaxForward` for a
///   row too long for shared memory): forward 22 = cast (read 2, write 4),
///   log-softmax reading the row three times (max, sum of exp, output) and
///   writing it (16); `nll_loss` gathers one value per token; backward
///   26 = `nll_loss_backward` fills the zero gradient (4), log-softmax
///   backward reads the gradient for its sum, then gradient and output, and
///   writes (16), cast to bf16 (read 4, write 2). An estimate from the
///   kernels' structure, not a measurement.
/// - [`LossBuffers::TorchCompiled`] — the same loss under `torch.compile`
///   (torchtitan with `--compile`): Inductor fuses cast, log-softmax and
///   `nll_loss` into one reduction over the bf16 logits; estimate: forward
///   4 = two reads of the row (max, then sum of exp; what the compiled
///   forward saves is the bf16 logits, [`memory::loss_buffer_bytes`]);
///   backward 4 = one pointwise kernel reading the logits (2) and writing
///   their bf16 gradient (2).
/// - [`LossBuffers::TorchBf16Gathered`] — KempnerForge's `F.cross_entropy`
///   on bf16 logits (`kempnerforge/training/loss.py`), the same eager
///   kernels in bf16 without the casts: forward 8 = three reads and one
///   write of 2 bytes; backward 10 = zero fill (2) and log-softmax backward
///   (8). Over the full vocabulary on every TP rank
///   ([`cross_entropy_logits`]).
///
/// Worked: Megatron 38 + 22 = 60 bytes per logit; TE 6 + 4 = 10; eager
/// fp32 22 + 26 = 48; compiled 4 + 4 = 8; bf16 gathered 8 + 10 = 18.
pub fn cross_entropy_bytes_per_logit(loss: LossBuffers) -> (f64, f64) {
    match loss {
        LossBuffers::MegatronVocabParallel => (38.0, 22.0),
        LossBuffers::TeFusedInPlace => (6.0, 4.0),
        LossBuffers::TorchFp32Eager => (22.0, 26.0),
        LossBuffers::TorchCompiled => (4.0, 4.0),
        LossBuffers::TorchBf16Gathered => (8.0, 10.0),
    }
}

/// Logits the loss computes over on one rank for `tokens` local tokens and
/// the padded vocabulary `vocab` split over `tp` ranks: `t·V/T`, except
/// [`LossBuffers::TorchBf16Gathered`], which gathers the logits to every TP
/// rank first (KempnerForge's `ColwiseParallel` output to `Replicate`,
/// `kempnerforge/distributed/tensor_parallel.py`): `t·V`.
/// Worked: t = 8192, V = 128,256, T = 4: 262,668,288 local, 1,050,673,152
/// gathered.
pub fn cross_entropy_logits(tokens: f64, vocab: f64, tp: f64, loss: LossBuffers) -> f64 {
    match loss {
        LossBuffers::TorchBf16Gathered => tokens * vocab,
        _ => tokens * vocab / tp,
    }
}

/// Bytes per rank after the all-gather of the bf16 logits that
/// [`LossBuffers::TorchBf16Gathered`] makes in the forward (DTensor's
/// `Shard(-1)` to `Replicate`; its backward takes the local slice of the
/// replicated gradient, no collective): `2·t·V`, the gathered size as
/// [`comm::all_gather`] takes it. Worked: t = 4096, V = 128,256:
/// 1,050,673,152 bytes.
pub fn gathered_logits_bytes(tokens: f64, vocab: f64) -> f64 {
    2.0 * tokens * vocab
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapped_tp_never_exceeds_the_collective() {
        // comm 8, GEMM 4, T = 4: chunks c = 2 > g = 1, so all but the last
        // three GEMM chunks' worth shows: 8 − 4·3/4 = 5 (≤ 8).
        assert_eq!(tp_comm_overlapped(8.0, 4.0, 4.0), 5.0);
        // comm 2, GEMM 8, T = 4: c = 0.5 ≤ g = 2, only the first chunk: 0.5.
        assert_eq!(tp_comm_overlapped(2.0, 8.0, 4.0), 0.5);
    }

    #[test]
    fn sp_backward_moves_half_a_pass_more() {
        // Two passes of 1 s each (forward, backward), forward GEMM 0.4 s,
        // SP, asynchronous backward: forward exposes 1; backward exposes the
        // row-parallel all-gathers 0.5 and what exceeds the GEMM, 1 − 0.4;
        // on the wire 1 + 1.5 = 2.5.
        let t = tp_comm_exposed(2.0, 0.4, 2.0, 8.0, true, false, true);
        assert!(
            (t.exposed - 2.1).abs() < 1e-12 && (t.total - 2.5).abs() < 1e-12,
            "{t:?}"
        );
        // Without SP: backward hides all but 1 − 0.4; on the wire 2.
        let t = tp_comm_exposed(2.0, 0.4, 2.0, 8.0, false, false, true);
        assert!((t.exposed - 1.6).abs() < 1e-12 && t.total == 2.0, "{t:?}");
        // Even when the collectives dwarf the GEMMs, exposed ≤ total.
        for (sp, overlap) in [(true, false), (true, true), (false, false)] {
            let t = tp_comm_exposed(3.0, 1e-6, 3.0, 2.0, sp, overlap, true);
            assert!(t.exposed <= t.total, "{sp} {overlap} {t:?}");
        }
    }

    #[test]
    fn cross_entropy_bytes_follow_the_loss_implementation() {
        // Counts worked in `cross_entropy_bytes_per_logit`'s doc comment.
        let cases = [
            (LossBuffers::MegatronVocabParallel, (38.0, 22.0)),
            (LossBuffers::TeFusedInPlace, (6.0, 4.0)),
            (LossBuffers::TorchFp32Eager, (22.0, 26.0)),
            (LossBuffers::TorchCompiled, (4.0, 4.0)),
            (LossBuffers::TorchBf16Gathered, (8.0, 10.0)),
        ];
        for (loss, want) in cases {
            assert_eq!(cross_entropy_bytes_per_logit(loss), want, "{loss:?}");
        }
        // t = 8192, V = 128,256, T = 4: 8192·128,256/4 = 262,668,288 local;
        // gathered, the full 8192·128,256 = 1,050,673,152.
        let local = cross_entropy_logits(8192.0, 128256.0, 4.0, LossBuffers::TorchFp32Eager);
        assert_eq!(local, 262_668_288.0);
        let full = cross_entropy_logits(8192.0, 128256.0, 4.0, LossBuffers::TorchBf16Gathered);
        assert_eq!(full, 1_050_673_152.0);
        assert_eq!(gathered_logits_bytes(4096.0, 128256.0), 1_050_673_152.0);
    }

    #[test]
    fn output_layer_loss_time_te_fused_vs_megatron_unfused() {
        // Llama 3 8B, t = 8192, V = 128,256, T = 1 on h100-sxm: HBM at
        // 3350e9 · 0.80 = 2.68e12 B/s, 4 µs per kernel. Logits
        // 8192·128,256 = 1,050,673,152.
        // Megatron unfused: 60 B/logit = 63.0404e9 B → 23.5225 ms + 2·4 µs
        // = 23.5305 ms. TE fused: 10 B/logit = 10.5067e9 B → 3.92042 ms
        // + 8 µs = 3.92842 ms; the difference, 19.6 ms per micro-batch.
        let cat = crate::spec::Catalog::shipped().unwrap();
        let r = compute::Rates::of(cat.gpu("h100-sxm").unwrap());
        let logits = 8192.0 * 128256.0;
        let time = |loss| {
            let (f, b) = cross_entropy_bytes_per_logit(loss);
            let n = cross_entropy_logits(8192.0, 128256.0, 1.0, loss);
            assert_eq!(n, logits);
            compute::elementwise_time(f * n, &r) + compute::elementwise_time(b * n, &r)
        };
        let meg = time(LossBuffers::MegatronVocabParallel);
        let te = time(LossBuffers::TeFusedInPlace);
        assert!((meg - 23.5305e-3).abs() < 1e-7, "{meg}");
        assert!((te - 3.92842e-3).abs() < 1e-7, "{te}");
    }
}
