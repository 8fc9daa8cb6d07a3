//! The cost model: plain data in, plain data out, no I/O.
//!
//! [`evaluate`] takes a [`Problem`] (model, GPU, cluster, job) and a
//! [`Layout`] and returns an [`Evaluation`]: the peak memory of the worst
//! rank with its breakdown, and the step time with its breakdown. The parts
//! live in one module per idea: [`memory`], [`compute`], [`comm`],
//! [`schedule`], and [`layer`] which prices one model item for a layout.

pub mod breakdown;
pub mod comm;
pub mod compute;
pub mod contention;
pub mod cp;
pub mod data_parallel;
pub mod fsdp;
pub mod layer;
pub mod levels;
pub mod memory;
pub mod moe;
pub mod mtp;
pub mod precision;
pub mod schedule;

use serde::Serialize;

use crate::layout::{Layout, Placement};
use crate::spec::{Cluster, Gpu, Job, Model};
pub use breakdown::{MemoryBreakdown, MemoryDetail, MemoryPart, Term, TimeBreakdown, TimePart};
use comm::Links;
use compute::Rates;
use data_parallel::{DataParallel, DpTerms, DpVolumes};
use layer::{ItemCost, LayerCosts};

/// Everything fixed while layouts vary: the model, the hardware and the job,
/// with derived rates.
#[derive(Debug, Clone)]
pub struct Problem<'a> {
    /// Model card.
    pub model: &'a Model,
    /// GPU profile.
    pub gpu: &'a Gpu,
    /// Cluster profile.
    pub cluster: &'a Cluster,
    /// Training job.
    pub job: &'a Job,
    /// GPUs used by every layout, N.
    pub world: u64,
    /// Compute rates of the GPU.
    pub rates: Rates,
    /// Link rates of the cluster.
    pub links: Links,
    /// Compute slowdown shares under overlapped communication.
    pub slowdown: contention::Slowdown,
    /// Model FLOPs of one step (Megatron convention), FLOPs.
    pub model_flops: f64,
}

impl<'a> Problem<'a> {
    /// Build a problem for `world` GPUs of `cluster`.
    pub fn new(
        model: &'a Model,
        gpu: &'a Gpu,
        cluster: &'a Cluster,
        job: &'a Job,
        world: u64,
    ) -> Problem<'a> {
        Problem {
            model,
            gpu,
            cluster,
            job,
            world,
            rates: Rates::for_job(gpu, job),
            links: Links::of(cluster),
            slowdown: contention::Slowdown {
                intra: gpu.contention.intra,
                inter: gpu.contention.inter,
            },
            model_flops: compute::model_flops_per_step(
                model,
                job.global_batch as f64,
                job.seq_len as f64,
            ),
        }
    }

    /// Usable device memory per GPU, bytes.
    pub fn usable_bytes(&self) -> f64 {
        self.gpu.usable_bytes() - self.job.headroom_gib * crate::spec::GIB
    }
}

/// Result of pricing one layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Evaluation {
    /// Micro-batches per step per replica, m.
    pub micro_batches: u64,
    /// Pipeline rank with the highest peak memory.
    pub worst_rank: u32,
    /// Memory of that rank.
    pub memory: MemoryBreakdown,
    /// Peak allocated bytes of that rank.
    pub peak_bytes: f64,
    /// Usable bytes per GPU (capacity minus reserve).
    pub usable_bytes: f64,
    /// Step time breakdown.
    pub time: TimeBreakdown,
    /// Tokens per second of the whole job.
    pub tokens_per_s: f64,
    /// Model TFLOP/s per GPU (Megatron convention, recompute not counted).
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilisation against the dense bf16 peak (Chowdhery et al. 2022).
    pub mfu: f64,
    /// Hardware FLOPs utilisation (recompute counted).
    pub hfu: f64,
    /// Model FLOPs utilisation against the dense peak of the linears'
    /// precision (FP8, FP4; the bf16 MFU for a bf16 job).
    pub mfu_own_peak: f64,
    /// Bubble share of the step.
    pub bubble_fraction: f64,
    /// The pipeline ranks' times per micro-batch under this layout's split
    /// (slowest and sum, seconds; without the per-micro-batch ZeRO-2/3
    /// exposure), for the search's bound on what another split can give
    /// (the sum does not depend on the split). Not reported.
    #[serde(skip)]
    pub stages: schedule::StageSummary,
}

impl Evaluation {
    /// Whether the worst rank fits in usable memory.
    pub fn fits(&self) -> bool {
        self.peak_bytes <= self.usable_bytes
    }
}

/// Transformer layers of pipeline chunk `c` of `chunks` (uniform split:
/// the first `L mod chunks` chunks take one more), or from `l.split`.
pub fn chunk_layers(l: &Layout, layers: u32, c: u32, chunks: u32) -> (u32, u32) {
    match &l.split {
        Some(split) if split.len() == chunks as usize => {
            let start: u32 = split[..c as usize].iter().sum();
            (start, start + split[c as usize])
        }
        _ => {
            let base = layers / chunks;
            let rem = layers % chunks;
            let start = c * base + c.min(rem);
            (start, start + base + u32::from(c < rem))
        }
    }
}

/// Cost of one pipeline rank: its time per micro-batch and its memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RankCost {
    /// Pipeline rank.
    pub rank: u32,
    /// Transformer layers held (all chunks).
    pub layers: u32,
    /// Time per micro-batch (all chunks, forward + backward + exposed
    /// communication + p2p), seconds.
    pub time: f64,
    /// Sum of the items' costs.
    pub items: ItemCost,
    /// Memory at the peak.
    pub memory: MemoryBreakdown,
    /// Parameters that shard over DP·CP.
    pub params: f64,
    /// Expert parameters (shard over expert DP).
    pub expert_params: f64,
    /// MoE layers held (of `layers`).
    pub moe_layers: u32,
    /// Whether the rank holds the embedding (chunk 0).
    pub has_embedding: bool,
    /// Whether the rank holds the output layer (the last chunk).
    pub has_output: bool,
}

/// Largest backward working set a rank's temporaries count, bytes: one
/// transformer layer's (dense or MoE, whichever is larger). A rank's
/// temporaries take the largest working set of its items capped at this.
pub fn working_set_cap(lc: &LayerCosts) -> f64 {
    lc.dense.working_set.max(lc.moe.working_set)
}

/// Temporaries every rank holds on top of one item's working set, bytes:
/// the SP all-gather buffer `t·h·2`, the CP K/V exchange buffers (ring or
/// all-gather, [`LayerCosts::cp_buffers`]), and without flash attention
/// one layer's score matrix ([`memory::score_matrix_bytes`]); t = local
/// tokens per micro-batch. Ranks holding MoE layers add the EP dispatch
/// buffers ([`LayerCosts::ep_buffers`]).
pub fn temporary_buffers(pr: &Problem, l: &Layout, lc: &LayerCosts) -> f64 {
    let model = pr.model;
    let mut bytes = 0.0;
    if l.sp && l.tp > 1 {
        bytes += lc.tokens * model.architecture.hidden as f64 * 2.0;
    }
    bytes += lc.cp_buffers;
    if !pr.job.flash_attention {
        bytes += memory::score_matrix_bytes(
            lc.tokens,
            pr.job.seq_len as f64,
            model.architecture.heads as f64,
            l.tp as f64,
        );
    }
    bytes
}

/// ZeRO-3/FSDP's largest unit on a rank, dense parameters: the larger
/// transformer layer kind, or the embedding or output layer when the rank
/// holds it and it is larger (for Llama 3's 128K vocabulary the output
/// layer is larger than a layer). Two are materialised at once (the unit
/// computing and the one prefetched, [`crate::cost::fsdp`]). The MTP layers
/// the output item also holds are units of their own, no larger than a
/// layer and the head ([`LayerCosts::mtp_params`]).
pub fn zero3_largest_unit(lc: &LayerCosts, has_embedding: bool, has_output: bool) -> f64 {
    let (embedding, output) = end_layer_params(lc, has_embedding, has_output);
    lc.dense
        .params
        .max(lc.moe.params)
        .max(embedding)
        .max(output)
}

/// Parameters of the embedding and of the output layer on a rank,
/// `(embedding, output)`, each 0 where the rank does not hold it; the output
/// layer's without the MTP layers its item also holds
/// ([`LayerCosts::mtp_params`]).
fn end_layer_params(lc: &LayerCosts, has_embedding: bool, has_output: bool) -> (f64, f64) {
    let embedding = if has_embedding {
        lc.embedding.params
    } else {
        0.0
    };
    let output = if has_output {
        lc.output.params - lc.mtp_params
    } else {
        0.0
    };
    (embedding, output)
}

/// ZeRO-3/FSDP bytes a rank holds beyond its shards, `(weights,
/// gradients)`: two gathered units (the one computing and the one
/// prefetched) of the largest dense unit ([`zero3_largest_unit`]) plus one
/// MoE layer's local experts, at the recipe's weight bytes; and one such
/// unit's full gradients between its backward and its reduce-scatter, at
/// the reduction's bytes. Zero below ZeRO-3. A group of one rank gathers
/// nothing (its parameters are whole, already in its model states): the
/// dense unit counts only when D·C > 1 and the experts only when the
/// expert data-parallel size T·C·D/(E·ETP) > 1 (ZeRO-3 shards over the
/// data-parallel group, [ref:rajbhandari-2020] §5.3).
///
/// Units: bytes (parameter counts times the recipe's bytes per element).
pub fn zero3_transients(
    pr: &Problem,
    l: &Layout,
    lc: &LayerCosts,
    has_embedding: bool,
    has_output: bool,
) -> (f64, f64) {
    // A parameter sharded over one rank is never gathered: it is whole on
    // that rank already, in its model states (and so are its gradients).
    // Dense parameters shard over D·C, experts over the expert-DP group,
    // each on its own (T·C·D/(E·ETP) can exceed 1 at D·C = 1).
    if l.zero < 3 {
        return (0.0, 0.0);
    }
    let dense_sharded = l.dp * l.cp > 1;
    let experts = if l.edp() > 1 {
        lc.moe.expert_params
    } else {
        0.0
    };
    let r = &pr.job.recipe;
    if pr.job.engine_memory.fsdp2_root_unit {
        return if dense_sharded {
            fsdp2_transients(r, lc, has_embedding, has_output)
        } else {
            (0.0, 0.0)
        };
    }
    if !dense_sharded && experts == 0.0 {
        return (0.0, 0.0);
    }
    let dense = if dense_sharded {
        zero3_largest_unit(lc, has_embedding, has_output)
    } else {
        0.0
    };
    let unit = dense + experts;
    if let Some(ds) = &pr.job.engine_memory.deepspeed_zero3 {
        let module = largest_module(pr, l, lc, has_embedding, has_output);
        return deepspeed_zero3_transients(r, ds, unit, module);
    }
    (2.0 * r.weight_bytes * unit, r.grad_reduce_bytes * unit)
}

/// Parameters of the largest single module a rank runs (DeepSpeed ZeRO-3
/// gathers module by module): the fused QKV projection, the first MLP
/// projection (both halves when gated), the expert MLP's, or the
/// embedding or output layer when the rank holds them; divided by T (E·ET
/// for experts).
pub fn largest_module(
    pr: &Problem,
    l: &Layout,
    lc: &LayerCosts,
    has_embedding: bool,
    has_output: bool,
) -> f64 {
    let m = pr.model;
    let a = &m.architecture;
    let (h, tp) = (a.hidden as f64, l.tp as f64);
    let gate = if a.gated_mlp { 2.0 } else { 1.0 };
    let qkv = h * (m.q_width() + 2 * m.kv_width()) as f64 / tp;
    let mut module = qkv.max(gate * h * a.ffn as f64 / tp);
    if let Some(moe) = &m.moe {
        module = module.max(gate * h * moe.expert_ffn as f64 / (l.etp as f64));
    }
    let (embedding, output) = end_layer_params(lc, has_embedding, has_output);
    module.max(embedding).max(output)
}

/// DeepSpeed ZeRO-3's bytes beyond the shards, `(weights, gradients)`.
///
/// Source: DeepSpeed `deepspeed/runtime/zero/stage3.py` and
/// `partition_parameters.py` (2021): parameters are gathered per module
/// before it runs, released after unless they fit under
/// `stage3_max_live_parameters`, with `stage3_prefetch_bucket_size` more
/// fetched ahead; each module's gradients are copied into a
/// `reduce_bucket_size` bucket and reduce-scattered. So at most
/// `max(module, max_live) + prefetch` parameters are gathered (never more
/// than two whole units), and one module's gradients plus a bucket are
/// unsharded (never more than one unit).
///
/// Worked example, the 530B model of Narayanan et al. (h = 20480, f = 4h,
/// T = 1), 2021 defaults: the largest module is the first MLP projection,
/// 20480 · 81920 = 1,677,721,600 parameters, above the 1e9 cap, so
/// `b_w·(1,677,721,600 + 5e7) = 3,455,443,200` bytes of fp16 weights
/// (against `2·b_w·P_layer = 20.1e9` for two gathered layers) and
/// `b_r·(1,677,721,600 + 5e8) = 4,355,443,200` bytes of fp16 gradients.
pub fn deepspeed_zero3_transients(
    r: &crate::spec::Recipe,
    ds: &crate::spec::DeepSpeedZero3,
    unit: f64,
    module: f64,
) -> (f64, f64) {
    let live = (module.max(ds.max_live) + ds.prefetch_bucket).min(2.0 * unit);
    let grads = (module + ds.reduce_bucket).min(unit);
    (r.weight_bytes * live, r.grad_reduce_bytes * grads)
}

/// PyTorch FSDP2's bytes beyond the shards, `(weights, gradients)`, when
/// the parameters outside the blocks form the root unit (torchtitan's and
/// KempnerForge's `fully_shard(model)` after one `fully_shard` per block).
///
/// Source: `torch/distributed/fsdp/_fully_shard/_fsdp_state.py` — the root
/// state gathers its own group in its pre-forward and reshards after its
/// forward returns, so the embedding and the output layer stay gathered
/// through every block's forward; in backward the root group's
/// post-backward (its reduce-scatter) runs last, so their unsharded
/// gradients, in the parameter dtype, stay until the whole backward ends.
/// Each block is gathered with the next one prefetched
/// (`_fsdp_param_group.py`, forward and backward prefetch of one group).
/// Weights: `b_w·(P_root + 2·P_block)`; gradients: `b_w·P_root` (the root's
/// bf16 gradients) plus one block's in the reduce dtype `b_r·P_block`
/// before its reduce-scatter.
///
/// Worked example, Llama 3.1 8B, T = 1, 2/4/12 recipe with fp32 reduction:
/// P_root = embedding + output = 2·128,256·4096 = 1,050,673,152 (without
/// the final norm), P_block = 218,112,000 (its matrices; the norms add
/// 8,192); weights 2·(1,050,673,152 + 436,224,000) = 2,973,794,304
/// bytes; gradients 2·1,050,673,152 + 4·218,112,000 = 2,973,794,304 bytes.
pub fn fsdp2_transients(
    r: &crate::spec::Recipe,
    lc: &LayerCosts,
    has_embedding: bool,
    has_output: bool,
) -> (f64, f64) {
    let block = lc.dense.params.max(lc.moe.params) + lc.moe.expert_params;
    let (embedding, output) = end_layer_params(lc, has_embedding, has_output);
    let root = embedding + output;
    (
        r.weight_bytes * (root + 2.0 * block),
        r.weight_bytes * root + r.grad_reduce_bytes * block,
    )
}

/// Price pipeline rank `rank` of layout `l` with `m` micro-batches.
///
/// Temporaries: one layer's backward working set ([`working_set_cap`]),
/// plus [`temporary_buffers`]; ZeRO-3 adds two gathered units
/// ([`zero3_largest_unit`]) to the weights and one unit's unsharded
/// gradients (before its reduce-scatter) to the gradients.
pub fn rank_cost(pr: &Problem, l: &Layout, lc: &LayerCosts, rank: u32, m: u64) -> RankCost {
    let model = pr.model;
    let layers = model.architecture.layers;
    let chunks = l.pp * l.vpp;
    let mut items = ItemCost::default();
    let mut n_layers = 0;
    let mut moe_layers = 0;
    let (mut has_embedding, mut has_output) = (false, false);
    for j in 0..l.vpp {
        let c = j * l.pp + rank;
        let (s, e) = chunk_layers(l, layers, c, chunks);
        let first_moe = model
            .moe
            .as_ref()
            .map(|x| x.first_k_dense)
            .unwrap_or(u32::MAX);
        let n_moe = e.saturating_sub(s.max(first_moe));
        let n_dense = (e - s) - n_moe;
        n_layers += e - s;
        moe_layers += n_moe;
        items.add(&lc.dense, n_dense as f64);
        items.add(&lc.moe, n_moe as f64);
        if c == 0 {
            items.add(&lc.embedding, 1.0);
            has_embedding = true;
        }
        if c == chunks - 1 {
            items.add(&lc.output, 1.0);
            has_output = true;
        }
    }
    // Point-to-point sends at each of the rank's v chunk boundaries, hidden
    // in steady state under Megatron's `overlap_p2p_comm`.
    let (p2p, p2p_contention) = rank_p2p(pr, l, lc, &items, rank, m);
    items.time[TimePart::PpComm] = p2p;
    items.time[TimePart::Contention].add_scaled(Term::serial(p2p_contention), 1.0);
    // Activations: the rank's items times the micro-batches in flight. For
    // interleaving the in-flight count is in chunk micro-batches, so divide
    // by v to get whole-rank micro-batches.
    let in_flight = memory::in_flight(
        rank,
        l.pp,
        l.vpp,
        m,
        pr.job.moe_a2a_overlap && pr.model.moe.is_some(),
    ) / l.vpp as f64;
    let mut activations = items.activation * in_flight;
    // Activation offload (Megatron `--cpu-offloading-num-layers`, no
    // pipeline): the offloaded layers' saved activations leave the GPU; their
    // transfers over the host link, less the compute they overlap, are
    // exposed (`memory::offload_transfer_time`).
    let offload = pr
        .job
        .activation_offload_layers
        .min(n_layers.saturating_sub(1));
    if offload > 0 && l.pp == 1 && pr.gpu.host_link_gbs > 0.0 {
        let it = if moe_layers == n_layers {
            &lc.moe
        } else {
            &lc.dense
        };
        let (total, exposed) = memory::offload_transfer_time(
            it.activation,
            pr.gpu.host_link_gbs,
            it.fwd_time(),
            it.time() - it.fwd_time(),
        );
        activations -= offload as f64 * it.activation * in_flight;
        items.time[TimePart::ActivationOffload] =
            Term::overlapped(offload as f64 * exposed, offload as f64 * total);
    }
    let is_last = rank == l.pp - 1;
    let logits = if is_last { lc.output.working_set } else { 0.0 };
    // Temporaries: one layer's backward working set; SP all-gather, CP K/V
    // and unfused-score buffers (`temporary_buffers`); and the EP dispatch
    // buffers of the MoE layer running (`moe::dispatch_buffer_bytes`).
    // The last stage's MTP layers are MoE layers when the main model's
    // last layer is (`mtp`).
    let mtp_moe = has_output && model.architecture.mtp_layers > 0 && model.mtp_is_moe();
    let dispatch = if moe_layers > 0 || mtp_moe {
        lc.ep_buffers
    } else {
        0.0
    };
    let temporaries =
        items.working_set.min(working_set_cap(lc)) + temporary_buffers(pr, l, lc) + dispatch;
    let shard = (l.dp * l.cp) as f64;
    let dense_states = memory::model_states(items.params, &pr.job.recipe, l.zero, shard, 0.0);
    // Expert states shard over the expert data-parallel group (Megatron's
    // distributed optimizer shards expert parameters over expert-DP,
    // [ref:megatron-parallel-state]).
    let expert_states = memory::model_states(
        items.expert_params,
        &pr.job.recipe,
        l.zero,
        l.edp() as f64,
        0.0,
    );
    let (gathered, unsharded_grads) = zero3_transients(pr, l, lc, has_embedding, has_output);
    // torchtitan's FSDP2 keeps no bf16 shard: the fp32 shard is the
    // optimizer's master copy, counted in `b_o` (`EngineMemory::fp32_shards_only`).
    let (dense_states, expert_states) = if l.zero >= 3 && pr.job.engine_memory.fp32_shards_only {
        let drop = |s: memory::ModelStates| memory::ModelStates { weights: 0.0, ..s };
        (drop(dense_states), drop(expert_states))
    } else {
        (dense_states, expert_states)
    };
    // Narrow parameters (`--fp8-param-gather` below ZeRO-3) replace the
    // working-precision copy of the low-precision linears' weights.
    let narrow_saving = |low_params: f64| {
        pr.rates.low.as_ref().map_or(0.0, |lp| {
            precision::narrow_param_weight_saving(
                lp,
                l.zero,
                low_params,
                pr.job.recipe.weight_bytes,
            )
        })
    };
    let expert_saving = narrow_saving(items.expert_params);
    let dense_saving = narrow_saving(items.low_params - items.expert_params);
    let dense_states = memory::ModelStates {
        weights: dense_states.weights - dense_saving,
        ..dense_states
    };
    let expert_states = memory::ModelStates {
        weights: expert_states.weights - expert_saving,
        ..expert_states
    };
    let mut mem = MemoryBreakdown::default();
    mem[MemoryPart::Weights] = dense_states.weights + expert_states.weights + gathered;
    mem[MemoryPart::Gradients] = dense_states.grads + expert_states.grads + unsharded_grads;
    mem[MemoryDetail::UnshardedGradients] = unsharded_grads;
    // An engine that accumulates micro-batches without reducing keeps every
    // gradient unsharded until the last one (PyTorch FSDP2 without
    // gradient sync, `memory::unsharded_accumulated_grads`).
    let accum = pr.job.engine_memory.unsharded_grad_accum_bytes;
    if accum > 0.0 && l.zero >= 2 && m > 1 {
        let full = memory::unsharded_accumulated_grads(items.params + items.expert_params, accum);
        if full > mem[MemoryPart::Gradients] {
            mem[MemoryPart::Gradients] = full;
            mem[MemoryDetail::UnshardedGradients] = full;
        }
    }
    mem[MemoryPart::Optimizer] = dense_states.optimizer + expert_states.optimizer;
    let (low, scaling) = match &pr.rates.low {
        Some(lp) => precision::rank_memory(lp, l.zero, &items, lc, model.architecture.hidden),
        None => (0.0, 0.0),
    };
    mem[MemoryPart::LowPrecisionWeights] = low;
    mem[MemoryDetail::ScalingState] = scaling;
    mem[MemoryPart::Activations] = activations;
    mem[MemoryPart::Logits] = logits;
    mem[MemoryPart::Temporaries] = temporaries;
    mem[MemoryDetail::ExpertWeights] = expert_states.weights;
    mem[MemoryDetail::ExpertGradients] = expert_states.grads;
    mem[MemoryDetail::ExpertOptimizer] = expert_states.optimizer;
    mem[MemoryDetail::InFlightActivations] = items.activation * (in_flight - 1.0).max(0.0);
    mem[MemoryDetail::RoutedActivations] = moe_layers as f64 * lc.routed_activation * in_flight;
    mem[MemoryDetail::DispatchBuffers] = dispatch;
    mem[MemoryDetail::CpBuffers] = lc.cp_buffers;
    if dense_states.step_grads + expert_states.step_grads > 0.0 {
        memory::peak_at_optimizer_step(&mut mem, dense_states.step_grads, expert_states.step_grads);
    }
    RankCost {
        rank,
        layers: n_layers,
        time: items.time(),
        items,
        memory: mem,
        params: items.params,
        expert_params: items.expert_params,
        moe_layers,
        has_embedding,
        has_output,
    }
}

/// Pipeline point-to-point sends of rank `rank` per micro-batch, with the
/// contention of their hidden part, seconds ([`schedule::p2p_exposed`]
/// over the chunks' compute of `items`, the rank's items).
fn rank_p2p(
    pr: &Problem,
    l: &Layout,
    lc: &LayerCosts,
    items: &ItemCost,
    rank: u32,
    m: u64,
) -> (Term, f64) {
    let compute = items.time[TimePart::Compute].total;
    let chunks = l.vpp.max(1) as f64;
    let t = schedule::p2p_exposed(
        lc.p2p,
        items.fwd_compute / chunks,
        (compute - items.fwd_compute) / chunks,
        rank,
        l.pp,
        l.vpp,
        m,
        pr.job.overlap_p2p_comm,
        pr.job.p2p_forward_send_waits,
    );
    (t, contention::contention(t.hidden(), lc.p2p_sigma))
}

/// The wrapped units of rank `rc` in model order, as ZeRO-3/FSDP gathers
/// them ([`fsdp`]): the embedding, the dense layers, the MoE layers, the
/// output layer. Each unit's forward is its forward time with exposed
/// communication ([`ItemCost::fwd_time`]), its backward the rest.
pub fn fsdp_units(lc: &LayerCosts, rc: &RankCost) -> [fsdp::Run; data_parallel::MAX_UNIT_RUNS] {
    let run = |it: &ItemCost, count: u32| fsdp::Run {
        unit: fsdp::Unit {
            forward: it.fwd_time(),
            backward: it.time() - it.fwd_time(),
            gather: it.gather,
            backward_gather: it.backward_gather,
            reduce_scatter: it.reduce_scatter,
        },
        count,
    };
    [
        run(&lc.embedding, u32::from(rc.has_embedding)),
        run(&lc.dense, rc.layers - rc.moe_layers),
        run(&lc.moe, rc.moe_layers),
        run(&lc.output, u32::from(rc.has_output)),
    ]
}

/// Data-parallel terms of rank `rc` ([`data_parallel::data_parallel`]);
/// `drain` is the backward of earlier stages still running after its last
/// backward, seconds.
fn rank_data_parallel(
    pr: &Problem,
    l: &Layout,
    pl: &Placement,
    lc: &LayerCosts,
    rc: &RankCost,
    drain: f64,
) -> DataParallel {
    let it = &rc.items;
    let mut windows = data_parallel::Windows {
        forward: it.fwd_compute,
        backward: it.bwd_compute() + it.time[TimePart::Recompute].exposed,
        drain,
    };
    // An overlapped expert all-to-all on the NICs takes link time from the
    // DP collectives that hide under the same compute
    // ([`data_parallel::shared_link_window`]): dispatch and combine of the
    // forward under the forward, the rest under the backward.
    let a2a_hidden = it.time[TimePart::EpComm].hidden();
    if a2a_hidden > 0.0
        && pl.ep.crosses_domains()
        && (pl.dp_cp.crosses_domains() || pl.edp.crosses_domains())
    {
        let fwd_share = 2.0 / moe::all_to_alls_per_layer(l.recompute);
        windows.forward =
            data_parallel::shared_link_window(windows.forward, fwd_share * a2a_hidden);
        windows.backward =
            data_parallel::shared_link_window(windows.backward, (1.0 - fwd_share) * a2a_hidden);
    }
    // DeepSpeed 0.3's ZeRO-3 synchronizes the device around every gather
    // ([`data_parallel::deepspeed_2021_collectives`]): nothing overlaps.
    let sync = l.zero >= 3
        && pr
            .job
            .engine_memory
            .deepspeed_zero3
            .is_some_and(|d| d.per_tensor_sync);
    let overlap = data_parallel::Overlap {
        grad_reduce: pr.job.overlap_grad_reduce && !sync,
        param_gather: pr.job.param_gather_overlapped() && !sync,
        boundary_all_reduce: pr.job.deepspeed_dp
            && data_parallel::deepspeed_boundary_all_reduce(l.zero, pr.job.recipe_name),
    };
    let mut v = DpVolumes::of(rc.params, rc.expert_params, &pr.job.recipe);
    if let Some(lp) = pr.rates.low.as_ref().filter(|lp| lp.param_gather) {
        v = precision::narrow_param_gather(v, lp, rc, &pr.job.recipe, pr.model.architecture.hidden);
    }
    let net = data_parallel::Net {
        pl,
        links: &pr.links,
        sigma: pr.slowdown.of(pl.dp_cp),
    };
    // Only ZeRO-3 reads the per-unit timeline; its gathers are priced at
    // the narrowed bytes already (`layer::fsdp_unit_collectives`).
    let units = if l.zero >= 3 {
        fsdp_units(lc, rc)
    } else {
        Default::default()
    };
    let mut dp =
        data_parallel::data_parallel(&v, l.zero, l.dp, rc.params, windows, overlap, net, &units);
    // The optimizer updates the rank's shard: everything at ZeRO 0, 1/(D·C)
    // of the dense and 1/EDP of the expert parameters otherwise.
    let shard_params = if l.zero == 0 {
        rc.params + rc.expert_params
    } else {
        rc.params / (l.dp * l.cp) as f64 + rc.expert_params / l.edp().max(1) as f64
    };
    dp.optimizer = data_parallel::optimizer_step_time(shard_params, pr.rates.hbm);
    dp
}

/// Price layout `l`. `l` need not be valid: [`crate::rules`] decides that;
/// this only needs D·b to divide B (otherwise m is rounded down, at least 1)
/// and its sizes within [`crate::limits::check_layout`] (which every
/// command applies to what a user gives), so that p·v and the other
/// products fit their integers and the work stays bounded.
///
/// Under a uniform split of a dense model the middle pipeline ranks are
/// alike except for their in-flight micro-batches (fewer further down) and
/// their data-parallel drain window (longer further down), so rank 1 stands
/// for all of them and only ranks 0, 1 and p−1 are priced.
pub fn evaluate(pr: &Problem, l: &Layout) -> Evaluation {
    let pl = Placement::of(l, pr.cluster);
    let lc = layer::layer_costs(pr, l, &pl);
    evaluate_with(pr, l, &pl, &lc)
}

/// [`evaluate`] with the placement `pl` and the item costs already computed
/// ([`Placement::new`] of `l`, [`layer::layer_costs`] of both).
pub fn evaluate_with(pr: &Problem, l: &Layout, pl: &Placement, lc: &LayerCosts) -> Evaluation {
    // No rank's peak exceeds an infinite cap, so this always prices.
    evaluate_capped(pr, l, pl, lc, f64::INFINITY).unwrap_or_default()
}

/// [`evaluate_with`], or `None` as soon as a rank's peak exceeds `cap`
/// bytes (the worst rank's peak, [`Evaluation::peak_bytes`], is then above
/// `cap` too): the search stops pricing a layout that does not fit and
/// cannot be memory's near-miss after the first rank that shows it.
pub fn evaluate_capped(
    pr: &Problem,
    l: &Layout,
    pl: &Placement,
    lc: &LayerCosts,
    cap: f64,
) -> Option<Evaluation> {
    let m = micro_batches_or_floor(pr, l);
    let mut worst = RankCost::default();
    let mut worst_peak = f64::MIN;
    let mut slowest = RankCost::default();
    let mut t_max = f64::MIN;
    let mut t_sum = 0.0;
    // The step waits for the rank whose data-parallel terms expose most.
    let mut dp_step = DpTerms::default();
    let mut dp_mb = DpTerms::default();
    let mut opt: f64 = 0.0;
    for (rank, weight) in priced_ranks(pr, l) {
        let rc = rank_cost(pr, l, lc, rank, m);
        let peak = rc.memory.total();
        if peak > cap {
            return None;
        }
        if peak > worst_peak {
            worst_peak = peak;
            worst = rc;
        }
        if rc.time > t_max {
            t_max = rc.time;
            slowest = rc;
        }
        t_sum += weight * rc.time;
        if weight > 1.0 {
            // Rank 1 stands for ranks 1 to p − 2, alike but for their
            // pipeline sends: under the p2p overlap each exposes its own
            // warm-up share.
            let stage = |r: u32| {
                let (t, c) = rank_p2p(pr, l, lc, &rc.items, r, m);
                t.exposed + c
            };
            let base = stage(1);
            for r in 2..l.pp - 1 {
                t_sum += stage(r) - base;
            }
        }
        // Stage `rank` finishes its last backward `rank` backward-steps
        // before stage 0 does; its gradient reduction can use that drain.
        let it = &rc.items;
        let drain = rank as f64 * (it.bwd_compute() + it.time[TimePart::Recompute].exposed);
        let dp = rank_data_parallel(pr, l, pl, lc, &rc, drain);
        if dp.per_step.outweighs(&dp_step) {
            dp_step = dp.per_step;
        }
        if dp.per_micro_batch.outweighs(&dp_mb) {
            dp_mb = dp.per_micro_batch;
        }
        opt = opt.max(dp.optimizer);
    }
    // Per-micro-batch data-parallel exposure (ZeRO-2/3) lengthens every
    // stage's micro-batch.
    let per_mb = dp_mb.exposed();
    let stages = schedule::StageSummary {
        slowest: t_max + per_mb,
        sum: t_sum + per_mb * l.pp as f64,
    };
    let pipe = schedule::pipeline_time_of(stages, m, l.vpp);
    let bubble = pipe - m as f64 * stages.slowest;
    let step = pipe + dp_step.exposed() + opt;
    // The slowest stage's parts over m micro-batches, then the step's own.
    let mf = m as f64;
    let mut time = TimeBreakdown {
        parts: slowest.items.time,
        step,
    };
    for p in TimePart::ALL {
        time[p] = time[p].scaled(mf);
    }
    time[TimePart::Bubble] = Term::serial(bubble);
    for (p, once, each) in [
        (TimePart::DpGrad, dp_step.grad, dp_mb.grad),
        (TimePart::ParamGather, dp_step.gather, dp_mb.gather),
    ] {
        time[p] = once;
        time[p].add_scaled(each, mf);
    }
    // Contention: the stages' own (TP/CP overlap, per micro-batch, already
    // in the slowest stage's parts) plus what the data-parallel terms hide.
    time[TimePart::Contention].add_scaled(Term::serial(dp_mb.contention), mf);
    time[TimePart::Contention].add_scaled(Term::serial(dp_step.contention), 1.0);
    time[TimePart::Optimizer] = Term::serial(opt);
    let n = pr.world as f64;
    let peak_flops = pr.gpu.peak_tflops_bf16 * 1e12;
    let recompute_flops = compute::recompute_flops_per_step(
        pr.model,
        pr.job.global_batch as f64,
        pr.job.seq_len as f64,
        l.recompute,
    );
    Some(Evaluation {
        micro_batches: m,
        worst_rank: worst.rank,
        memory: worst.memory,
        peak_bytes: worst_peak,
        usable_bytes: pr.usable_bytes(),
        time,
        tokens_per_s: pr.job.tokens_per_step() / step,
        tflops_per_gpu: pr.model_flops / step / n / 1e12,
        mfu: pr.model_flops / step / n / peak_flops,
        hfu: (pr.model_flops + recompute_flops) / step / n / peak_flops,
        mfu_own_peak: pr.model_flops
            / step
            / n
            / (precision::dense_peak_tflops(pr.gpu, pr.job.precision) * 1e12).max(1.0),
        bubble_fraction: bubble / step,
        stages: schedule::StageSummary {
            slowest: t_max,
            sum: t_sum,
        },
    })
}

/// The pipeline ranks [`evaluate`] prices, in order, each with how many
/// ranks it stands for: every rank, except that under a uniform split of a
/// model whose middle ranks are alike rank 1 stands for ranks 1 to p − 2
/// (see [`evaluate`]).
fn priced_ranks(pr: &Problem, l: &Layout) -> impl Iterator<Item = (u32, f64)> {
    let uniform_middle = l.pp > 3 && l.split.is_none() && model_is_uniform_middle(pr, l);
    let pp = l.pp;
    (0..pp)
        .filter(move |&r| !uniform_middle || r <= 1 || r == pp - 1)
        .map(move |r| {
            let weight = if uniform_middle && r == 1 {
                (pp - 2) as f64
            } else {
                1.0
            };
            (r, weight)
        })
}

/// m = B/(D·b), or its floor (at least 1) when D·b does not divide B.
pub fn micro_batches_or_floor(pr: &Problem, l: &Layout) -> u64 {
    l.micro_batches(pr.job.global_batch).unwrap_or_else(|| {
        (pr.job.global_batch / (l.dp as u64 * l.micro_batch as u64).max(1)).max(1)
    })
}

/// Whether middle pipeline ranks of a uniform split all carry the same
/// kind of layers (dense model, or MoE whose dense prefix sits in rank 0).
fn model_is_uniform_middle(pr: &Problem, l: &Layout) -> bool {
    let layers = pr.model.architecture.layers;
    let chunks = l.pp * l.vpp;
    if layers % chunks != 0 {
        return false;
    }
    match &pr.model.moe {
        None => true,
        Some(m) => m.first_k_dense <= layers / chunks && l.vpp == 1,
    }
}

/// Per-rank costs of layout `l` (for `explain`, the ILP and pictures).
pub fn rank_costs(pr: &Problem, l: &Layout) -> Vec<RankCost> {
    let pl = Placement::of(l, pr.cluster);
    let lc = layer::layer_costs(pr, l, &pl);
    let m = micro_batches_or_floor(pr, l);
    (0..l.pp).map(|r| rank_cost(pr, l, &lc, r, m)).collect()
}

/// DeepSpeed 0.3's per-tensor ZeRO-3 collectives of pipeline rank 0
/// (`--deepspeed-2021` runs at p = 1), per micro-batch: what `explain`
/// lists beside its process groups, whose one whole-rank reduce-scatter
/// stands for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TensorCollectives {
    /// Parameter all-gathers per micro-batch: each tensor above the
    /// persistence threshold once in the forward and once or twice in the
    /// backward ([`data_parallel::backward_gathers`]).
    pub gathers: f64,
    /// Gradient reduce-scatters per micro-batch: one per tensor.
    pub reduce_scatters: f64,
    /// Their seconds per micro-batch (all exposed: DeepSpeed 0.3
    /// synchronizes around each), experts excluded.
    pub seconds: f64,
    /// Micro-batches per step.
    pub micro_batches: u64,
}

/// The per-tensor collectives of layout `l` when `pr` prices ZeRO-3 as
/// DeepSpeed 0.3 ([`crate::spec::DeepSpeedZero3::per_tensor_sync`]),
/// counted over the tensors [`layer::unit_tensors`] names and timed as
/// [`layer::fsdp_unit_collectives`] prices them; `None` otherwise or with
/// one rank in the DP group (no collective runs).
///
/// Example: a GPT-3 175B layer (h = 12288, LayerNorm and biases) at T = 1
/// has 12 tensors; at the 1e5 persistence threshold only its 4 weight
/// matrices move (the largest bias is 4h = 49,152 elements), so it runs 4
/// forward gathers and 12 reduce-scatters per micro-batch, and under full
/// recompute 7 backward gathers (QKV, projection and first MLP weight
/// twice, [`data_parallel::backward_gathers`]; the last MLP weight once):
/// 11 gathers per layer.
pub fn deepspeed_2021_tensor_collectives(pr: &Problem, l: &Layout) -> Option<TensorCollectives> {
    let ds = pr
        .job
        .engine_memory
        .deepspeed_zero3
        .filter(|d| d.per_tensor_sync && l.zero >= 3)?;
    let pl = Placement::of(l, pr.cluster);
    if pl.dp_cp.size <= 1 {
        return None;
    }
    let lc = layer::layer_costs(pr, l, &pl);
    let m = micro_batches_or_floor(pr, l);
    let rc = rank_cost(pr, l, &lc, 0, m);
    let full = l.recompute == crate::layout::Recompute::Full;
    let mut out = TensorCollectives {
        gathers: 0.0,
        reduce_scatters: 0.0,
        seconds: 0.0,
        micro_batches: m,
    };
    for (it, kind, count) in [
        (
            &lc.embedding,
            layer::UnitKind::Embedding,
            u32::from(rc.has_embedding),
        ),
        (&lc.dense, layer::UnitKind::Layer, rc.layers - rc.moe_layers),
        (&lc.moe, layer::UnitKind::MoeLayer, rc.moe_layers),
        (
            &lc.output,
            layer::UnitKind::Output,
            u32::from(rc.has_output),
        ),
    ] {
        let n = count as f64;
        let t = layer::unit_tensors(pr.model, kind, it.params, l.tp as f64);
        for (i, numel) in t.iter().enumerate() {
            if numel >= ds.persistence_threshold {
                out.gathers +=
                    n * (1.0 + data_parallel::backward_gathers(&t, i, ds.max_reuse_distance, full));
            }
            out.reduce_scatters += n;
        }
        out.seconds += n * (it.gather + it.backward_gather + it.reduce_scatter);
    }
    Some(out)
}

#[cfg(test)]
mod engine_memory_tests {
    use super::*;
    use crate::spec::{DeepSpeedZero3, Recipe};

    #[test]
    fn deepspeed_live_parameters_cap() {
        // Worked in the doc comment (530B, f = 4h = 81920): module
        // 1,677,721,600 > 1e9, fp16 weights and gradient reduction.
        let module = 20_480.0 * 81_920.0;
        let unit = 5.03e9;
        let (w, g) = deepspeed_zero3_transients(
            &Recipe::DEEPSPEED,
            &DeepSpeedZero3::DEFAULTS_2021,
            unit,
            module,
        );
        assert_eq!(w, 3_455_443_200.0);
        assert_eq!(g, 4_355_443_200.0);
        // A small model: two whole units are less than the cap.
        let (w, g) = deepspeed_zero3_transients(
            &Recipe::DEEPSPEED,
            &DeepSpeedZero3::DEFAULTS_2021,
            1e8,
            4e7,
        );
        assert_eq!((w, g), (2.0 * 2.0 * 1e8, 2.0 * 1e8));
    }

    #[test]
    fn fsdp2_root_unit_worked_example() {
        // Llama 3.1 8B, T = 1 (doc comment of `fsdp2_transients`).
        let mut lc = LayerCosts::default();
        lc.dense.params = 218_112_000.0;
        lc.embedding.params = 525_336_576.0;
        lc.output.params = 525_336_576.0;
        let (w, g) = fsdp2_transients(&Recipe::MEGATRON_BF16, &lc, true, true);
        assert_eq!(w, 2_973_794_304.0);
        assert_eq!(g, 2_973_794_304.0);
        // A middle pipeline rank holds no root parameters: two blocks.
        let (w, g) = fsdp2_transients(&Recipe::MEGATRON_BF16, &lc, false, false);
        assert_eq!((w, g), (2.0 * 2.0 * 218_112_000.0, 4.0 * 218_112_000.0));
    }
}
