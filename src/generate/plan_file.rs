//! The engine-neutral plan file (`plan.json`): everything an engine needs to
//! build the layout's process groups and pipeline stages, plus meshplan's
//! predictions to compare a run against. The schema is documented field by
//! field in `docs/plan-schema.md`; its version string is [`SCHEMA`].
//!
//! Ranks and groups follow Megatron-LM's `RankGenerator`
//! (`megatron/core/parallel_state.py`, [ref:megatron-parallel-state]): two
//! grids share the world,
//! the dense grid (TP, CP, DP, PP) and the expert grid (ETP, EP, EDP, PP)
//! that re-slices the same T·C·D ranks of each pipeline stage. Global rank
//! r runs on node ⌊r / g⌋ as local rank r mod g, g = processes per node
//! (torchrun's numbering).

use serde::{Deserialize, Serialize};

use crate::checkpoint;
use crate::cost::{self, Evaluation, MemoryBreakdown, Problem};
use crate::layout::{Axis, Layout, RankOrder, Recompute, order_axes, orthogonal_groups};
use crate::spec::model::{MlaSpec, MoeSpec, Norm, PositionEmbedding};
use crate::spec::{Fp8Kernels, Fp8Recipe, GIB, Precision, RecipeName};

/// Version of the plan-file schema written by this meshplan.
pub const SCHEMA: &str = "meshplan-plan/1";

/// A whole plan: the file `plan.json`, and the context every template is
/// rendered from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Schema version, [`SCHEMA`].
    pub schema: String,
    /// `meshplan <version>`.
    pub generator: String,
    /// The layout as `search --format json` prints it (feed it back with
    /// `generate --plan`).
    pub layout: Layout,
    /// The model.
    pub model: ModelInfo,
    /// Cluster and GPUs used.
    pub hardware: HardwareInfo,
    /// Batch, sequence and framework switches.
    pub job: JobInfo,
    /// Mesh sizes.
    pub mesh: MeshInfo,
    /// Rank order of both grids.
    pub rank_order: OrderInfo,
    /// Every global rank, in rank order.
    pub ranks: Vec<RankInfo>,
    /// Every process group, as lists of global ranks.
    pub groups: Groups,
    /// Pipeline ranks with the layers of each virtual chunk.
    pub stages: Vec<StageInfo>,
    /// Layers per model chunk and the schedule.
    pub pipeline: PipelineInfo,
    /// Activation recomputation.
    pub recompute: RecomputeInfo,
    /// Data-parallel sharding (ZeRO stage).
    pub sharding: ShardingInfo,
    /// meshplan's predictions for this layout.
    pub predicted: Predicted,
}

/// The model's shape, as the launch files need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Model card name.
    pub name: String,
    /// Public source of the architecture.
    pub source: String,
    /// Parameters (all experts), from the architecture.
    pub total_params: f64,
    /// Transformer layers L.
    pub layers: u32,
    /// Hidden size h.
    pub hidden: u64,
    /// FFN width of a dense layer.
    pub ffn: u64,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (query groups).
    pub kv_heads: u32,
    /// Per-head width (Megatron `kv_channels`).
    pub head_dim: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Vocabulary padded as Megatron does for this T (multiple of 128·T).
    pub padded_vocab: u64,
    /// The tokenizer's vocabulary when the card's is already padded.
    #[serde(default)]
    pub tokenizer_vocab: Option<u64>,
    /// Gated (SwiGLU) MLP.
    pub gated_mlp: bool,
    /// Normalisation.
    pub norm: Norm,
    /// Position embedding.
    pub position_embedding: PositionEmbedding,
    /// RoPE base θ, when the card gives one.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Longest context of the model (learned table size).
    pub max_seq: u64,
    /// Input embedding and output layer share weights.
    pub tied_embeddings: bool,
    /// Linear layers carry biases.
    pub linear_bias: bool,
    /// Dropout is applied.
    pub dropout: bool,
    /// Queries and keys normalised per head (`--qk-layernorm`).
    #[serde(default)]
    pub qk_layernorm: bool,
    /// Norm epsilon, when the card gives one (`--norm-epsilon`).
    #[serde(default)]
    pub norm_epsilon: Option<f64>,
    /// Llama 3.1 RoPE scaling, when the card gives one.
    #[serde(default)]
    pub rope_scaling: Option<crate::spec::model::RopeScaling>,
    /// Multi-token-prediction layers D (`--mtp-num-layers`), priced on the
    /// last pipeline stage; 0 for none.
    #[serde(default)]
    pub mtp_layers: u32,
    /// Weight of the MTP loss (`--mtp-loss-scaling-factor`), when the card
    /// gives one.
    #[serde(default)]
    pub mtp_loss_scale: Option<f64>,
    /// Mixture of experts, if any.
    pub moe: Option<MoeSpec>,
    /// Multi-head latent attention, if any.
    pub mla: Option<MlaSpec>,
}

/// Model states of the model cut to `layers` transformer layers (its first
/// ones: dense while below `first_k_dense`, then MoE), with the embedding,
/// the output layer and any MTP layers, unsharded at the recipe's weight,
/// gradient and optimizer bytes per parameter, GiB.
///
/// Example: Llama 3.1 405B cut to 64 layers (p·v = 8·8): a layer holds
/// 3,187,703,808 parameters (attention 16384·(16384 + 2·1024) + 16384² =
/// 570,425,344, gated MLP 3·16384·53248 = 2,617,245,696, two norms
/// 32,768), embedding and output 128,256·16384 = 2,101,346,304 each: 64 ·
/// 3.1877e9 + 4.2027e9 = 208.21e9 parameters, at 18 bytes (Megatron's
/// 2 + 4 + 12) 3,490 GiB, far above any GPU.
pub fn tiny_model_states_gib(pr: &Problem, layers: u32) -> f64 {
    let m = pr.model;
    let dense = m
        .moe
        .as_ref()
        .map_or(layers, |x| x.first_k_dense.min(layers));
    let params = dense as f64 * m.dense_layer_params()
        + (layers - dense) as f64 * m.moe_layer_params()
        + m.embedding_params()
        + m.output_params()
        + m.mtp_params();
    let r = &pr.job.recipe;
    params * (r.weight_bytes + r.grad_bytes + r.optimizer_bytes) / GIB
}

/// Peak bytes of the worst rank of `l` with its micro-batch doubled, when
/// doubling breaks no rule `l` keeps, memory aside (the global batch still
/// divides by D·2b, interleaving still has enough micro-batches, …; the
/// layout is otherwise the same, split included).
fn doubled_micro_batch_peak(pr: &Problem, l: &Layout) -> Option<f64> {
    use crate::rules::{self, Policy, Rule};
    let doubled = Layout {
        micro_batch: l.micro_batch.checked_mul(2)?,
        ..l.clone()
    };
    let policy = Policy::default();
    let before = rules::violations(pr, &policy, l).0;
    let after = rules::violations(pr, &policy, &doubled).0;
    if after & !before & !Rule::Memory.bit() != 0 {
        return None;
    }
    Some(cost::evaluate(pr, &doubled).peak_bytes)
}

/// Cluster and the GPUs the plan uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareInfo {
    /// Cluster profile name.
    pub cluster: String,
    /// GPU profile name.
    pub gpu: String,
    /// GPU marketing name.
    pub gpu_display: String,
    /// CUDA compute capability major·10 + minor (80 = sm_80), when meshplan
    /// knows the GPU; `null` otherwise.
    pub compute_capability: Option<u32>,
    /// GPUs used, N.
    pub world: u64,
    /// Nodes used (`world / processes_per_node`).
    pub nodes: u64,
    /// Processes (GPUs) started on each node.
    pub processes_per_node: u64,
    /// GPUs per node of the cluster.
    pub gpus_per_node: u32,
    /// GPUs sharing one fast (NVLink) domain.
    pub fast_domain: u32,
    /// Device memory per GPU, GiB.
    pub memory_gib: f64,
    /// Usable memory per GPU (capacity minus the reserve), GiB.
    pub usable_gib: f64,
    /// Dense bf16 peak per GPU, TFLOP/s.
    pub peak_tflops_bf16: f64,
}

/// Bytes per parameter of the model states.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecipeBytes {
    /// Working weights, bytes per parameter.
    pub weights: f64,
    /// Gradients kept for the optimizer, bytes per parameter.
    pub grads: f64,
    /// Optimizer state (fp32 master + Adam moments), bytes per parameter.
    pub optimizer: f64,
    /// Gradient bytes on the wire in data-parallel reductions.
    pub grad_reduce: f64,
}

/// The training job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Global batch B, sequences per step.
    pub global_batch: u64,
    /// Sequence length s, tokens.
    pub seq_len: u64,
    /// Tokens per step, B·s.
    pub tokens_per_step: u64,
    /// Micro-batch size b, sequences.
    pub micro_batch: u32,
    /// Micro-batches per step per replica, m = B / (D·b).
    pub micro_batches: u64,
    /// Precision recipe name.
    pub recipe: RecipeName,
    /// Its bytes per parameter.
    pub recipe_bytes: RecipeBytes,
    /// Fused (flash) attention.
    pub flash_attention: bool,
    /// DP gradient reduction overlapped with backward.
    pub overlap_grad_reduce: bool,
    /// Parameter all-gather overlapped with forward (only with the
    /// gradient overlap, as Megatron requires).
    pub overlap_param_gather: bool,
    /// TP communication overlapped with GEMMs (effective only with SP).
    pub tp_comm_overlap: bool,
    /// Number format of the linear GEMMs (`bf16`, `fp8`, `mxfp8`,
    /// `nvfp4`); plan files written before it read as bf16.
    #[serde(default)]
    pub precision: Precision,
    /// FP8 scaling recipe, with precision `fp8` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_recipe: Option<Fp8Recipe>,
    /// Library the low-precision linears were priced for; absent in bf16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_kernels: Option<Fp8Kernels>,
    /// Parameters all-gathered in the low-precision format.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_param_gather: bool,
    /// MoE tokens dispatched in the low-precision format.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fp8_dispatch: bool,
    /// MoE expert capacity factor (`--moe-expert-capacity-factor`); absent
    /// for dropless routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_capacity_factor: Option<f64>,
    /// MoE: the busiest expert rank's load over the mean the plan was
    /// priced with (`--moe-imbalance`; 1 = balanced routing, plus each EP
    /// group's random-routing floor); absent for a dense model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_imbalance: Option<f64>,
    /// Memory kept free beyond the GPU profile's reserve (`--headroom-gib`),
    /// GiB: `hardware.usable_gib` is already without it; absent when 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom_gib: Option<f64>,
    /// ZeRO 0–1 gradients all-reduced after the last backward, as DeepSpeed
    /// does without ZeRO hooks ([`crate::spec::Job::deepspeed_dp`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deepspeed_dp: bool,
}

/// Mesh sizes. N = D·T·p·C; E and ETP re-slice T·C·D as ETP·E·EDP.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeshInfo {
    /// World size N.
    pub world: u64,
    /// Data-parallel size D.
    pub dp: u32,
    /// Tensor-parallel size T.
    pub tp: u32,
    /// Pipeline-parallel size p.
    pub pp: u32,
    /// Context-parallel size C.
    pub cp: u32,
    /// Expert-parallel size E (1 for dense models).
    pub ep: u32,
    /// Expert tensor-parallel size ETP (1 for dense models).
    pub etp: u32,
    /// Expert data-parallel size EDP = T·C·D / (E·ETP); `null` for dense models.
    pub edp: Option<u32>,
    /// Virtual pipeline chunks per pipeline rank v.
    pub vpp: u32,
    /// Sequence parallelism in effect (requested and T > 1).
    pub sp: bool,
    /// Context-parallel K/V exchange (`ring` or `all-gather`).
    #[serde(default)]
    pub cp_comm: crate::layout::CpComm,
}

/// One axis of a rank grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AxisInfo {
    /// Axis name.
    pub axis: Axis,
    /// Its size.
    pub size: u32,
    /// Global-rank distance between neighbours along it.
    pub stride: u64,
}

/// Rank order of both grids (fastest axis first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderInfo {
    /// The order string, e.g. `tp-cp-ep-dp-pp`.
    pub order: RankOrder,
    /// Dense grid: TP, CP, EP (size 1), DP, PP in order.
    pub dense: Vec<AxisInfo>,
    /// Expert grid: ETP (as `tp`), CP (size 1), EP, EDP (as `dp`), PP in
    /// order; `null` for dense models.
    pub expert: Option<Vec<AxisInfo>>,
}

/// Coordinates and place of one global rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RankInfo {
    /// Global rank.
    pub rank: u64,
    /// Node index (torchrun node rank).
    pub node: u64,
    /// Local rank on the node (GPU index).
    pub local_rank: u64,
    /// Data-parallel coordinate.
    pub dp: u32,
    /// Tensor-parallel coordinate.
    pub tp: u32,
    /// Pipeline stage.
    pub pp: u32,
    /// Context-parallel coordinate.
    pub cp: u32,
    /// Expert-parallel coordinate (0 for dense models).
    pub ep: u32,
    /// Expert tensor-parallel coordinate (`null` for dense models).
    pub expert_tp: Option<u32>,
    /// Expert data-parallel coordinate (`null` for dense models).
    pub expert_dp: Option<u32>,
}

/// Every process group of the layout, as lists of global ranks, named as in
/// Megatron's `parallel_state` (dense grid: tp, cp, dp, dp-cp, pp, embedding;
/// expert grid: ep, expert-tp, expert-dp).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Groups {
    /// Tensor-parallel groups (T ranks each).
    pub tp: Vec<Vec<u64>>,
    /// Context-parallel groups (C ranks each).
    pub cp: Vec<Vec<u64>>,
    /// Data-parallel groups (D ranks each).
    pub dp: Vec<Vec<u64>>,
    /// Gradient-sharding groups DP×CP (D·C ranks each; Megatron `dp-cp`).
    pub dp_cp: Vec<Vec<u64>>,
    /// Pipeline groups (p ranks each, stage order).
    pub pp: Vec<Vec<u64>>,
    /// Embedding groups as `pretrain_gpt.py`'s `get_embedding_ranks` builds
    /// them ([`embedding_ranks`]): the first stage of each pipeline group,
    /// and the last too when the embeddings are tied (their gradient
    /// all-reduce).
    pub embedding: Vec<Vec<u64>>,
    /// Expert-parallel groups (E ranks each); `null` for dense models.
    pub ep: Option<Vec<Vec<u64>>>,
    /// Expert tensor-parallel groups (ETP ranks each); `null` for dense models.
    pub expert_tp: Option<Vec<Vec<u64>>>,
    /// Expert data-parallel groups (EDP ranks each); `null` for dense models.
    pub expert_dp: Option<Vec<Vec<u64>>>,
}

/// One virtual chunk of a pipeline rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkInfo {
    /// Chunk index on its pipeline rank (0..v).
    pub vpp_chunk: u32,
    /// Index in model order, `vpp_chunk·p + pp_rank`.
    pub model_chunk: u32,
    /// First transformer layer (0-based).
    pub first_layer: u32,
    /// One past the last layer.
    pub end_layer: u32,
    /// Layers held.
    pub layers: u32,
    /// Holds the input embedding (model chunk 0).
    pub embedding: bool,
    /// Holds the final norm, output layer and loss (last model chunk).
    pub output: bool,
}

/// One pipeline rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageInfo {
    /// Pipeline rank.
    pub pp_rank: u32,
    /// Transformer layers over all its chunks.
    pub layers: u32,
    /// Its chunks, in execution order.
    pub chunks: Vec<ChunkInfo>,
}

/// Layers per model chunk and the schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineInfo {
    /// Model chunks p·v.
    pub chunks: u32,
    /// Layers of each model chunk in model order (chunk c sits on pipeline
    /// rank c mod p as its chunk ⌊c / p⌋).
    pub layers_per_chunk: Vec<u32>,
    /// Every chunk holds the same number of layers.
    pub uniform: bool,
    /// `none` (p = 1), `1f1b` or `interleaved-1f1b`.
    pub schedule: String,
}

/// Activation recomputation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecomputeInfo {
    /// none, selective or full.
    pub mode: Recompute,
    /// What is recomputed, in words.
    pub what: String,
    /// Layers per checkpointed block with full recompute (1: every layer's
    /// input is kept); `null` otherwise.
    pub layers_per_checkpoint: Option<u32>,
}

/// Data-parallel sharding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardingInfo {
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// Model states sharded over the group (`optimizer`, `gradients`,
    /// `parameters`).
    pub sharded: Vec<String>,
    /// Group the dense states shard over (`dp-cp`).
    pub group: String,
    /// Its size D·C.
    pub group_size: u32,
    /// Group the expert states shard over (`expert-dp`), `null` for dense models.
    pub expert_group: Option<String>,
    /// Its size EDP.
    pub expert_group_size: Option<u32>,
}

/// A memory breakdown in GiB: the cost model's [`MemoryBreakdown`] with
/// every number divided by 2³⁰ ([`MemoryBreakdown::in_gib`]).
pub type MemoryGib = MemoryBreakdown;

/// Where one step's time goes on the slowest stage, seconds (the cost
/// model's [`crate::cost::TimeBreakdown`], field for field).
pub type TimeS = crate::cost::TimeBreakdown;

/// Predictions for one pipeline rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagePredicted {
    /// Pipeline rank.
    pub pp_rank: u32,
    /// Peak memory and its parts, GiB.
    pub memory_gib: MemoryGib,
    /// Forward + backward time of one micro-batch over all its chunks,
    /// exposed communication included, seconds.
    pub time_per_microbatch_s: f64,
}

/// Where one axis' groups sit on the cluster (measured on the group lists).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpanInfo {
    /// Ranks per group.
    pub size: u32,
    /// Number of groups.
    pub groups: u64,
    /// Most nodes one group spans.
    pub nodes: u64,
    /// Most fast (NVLink) domains one group spans; > 1 means the group's
    /// collectives cross the network.
    pub fast_domains: u64,
}

/// The network levels one axis' groups cross.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupLevels {
    /// Axis (`tp`, `cp`, `ep`, `etp`, `dp-cp`, `expert-dp`, `pp`).
    pub axis: String,
    /// The collective priced (`all-reduce`, `reduce-scatter`, `all-to-all`, …).
    pub collective: String,
    /// Levels crossed, innermost first (`NVLink`, `NIC`, `spine`, …).
    pub levels: Vec<String>,
    /// Bytes per GPU on each, for one collective.
    pub level_bytes: Vec<f64>,
}

/// Spans of every axis' groups.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// TP groups.
    pub tp: SpanInfo,
    /// CP groups.
    pub cp: SpanInfo,
    /// DP groups.
    pub dp: SpanInfo,
    /// DP×CP groups.
    pub dp_cp: SpanInfo,
    /// PP groups.
    pub pp: SpanInfo,
    /// EP groups (`null` for dense models).
    pub ep: Option<SpanInfo>,
    /// Expert-DP groups (`null` for dense models).
    pub expert_dp: Option<SpanInfo>,
}

/// Checkpoint size and interval (Daly 2006 [ref:daly-2006]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckpointPredicted {
    /// Bytes of one checkpoint: weights, fp32 master and Adam moments per
    /// parameter plus the small per-rank state ([`checkpoint::plan`]).
    pub bytes: f64,
    /// Bytes the fullest rank writes when every rank saves its shard.
    pub bytes_per_rank: f64,
    /// Write time C at the cluster's storage bandwidth, seconds.
    pub write_s: f64,
    /// Mean time between failures M of the N GPUs' nodes, seconds:
    /// node MTBF / nodes.
    pub job_mtbf_s: f64,
    /// Optimal interval τ* = √(2·C·M), seconds.
    pub interval_s: f64,
    /// τ* in steps, rounded, at least 1 (the `--save-interval` written).
    pub interval_steps: u64,
    /// Expected share of time lost to checkpoints and recomputation after
    /// failures at that interval, W(τ) = C/τ + τ/(2M), τ = steps·step time.
    pub overhead_fraction: f64,
}

/// meshplan's predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// Step time, seconds.
    pub step_s: f64,
    /// Tokens per second of the whole job (steady state).
    pub tokens_per_s: f64,
    /// Model TFLOP/s per GPU (Megatron `num_floating_point_operations`;
    /// recompute not counted).
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilisation against the dense bf16 peak.
    pub mfu: f64,
    /// Hardware FLOPs utilisation (recompute counted).
    pub hfu: f64,
    /// Bubble share of the step.
    pub bubble_fraction: f64,
    /// Peak memory of the worst rank, GiB.
    pub peak_gib: f64,
    /// Pipeline rank with that peak.
    pub worst_pp_rank: u32,
    /// Usable memory minus the peak, GiB.
    pub headroom_gib: f64,
    /// Peak memory of the worst rank with the micro-batch doubled (the
    /// checklist's activation-scaling check), GiB; `null` when doubling b
    /// breaks a rule the plan keeps (memory aside). Above the usable memory
    /// the checklist does not suggest the doubled run.
    #[serde(default)]
    pub doubled_micro_batch_peak_gib: Option<f64>,
    /// Weights, gradients and optimizer state of the checklist's cut-down
    /// model (one transformer layer per pipeline chunk, the model's first
    /// layers; embedding, output layer and MTP layers kept) at the recipe's
    /// bytes per parameter, unsharded, GiB ([`tiny_model_states_gib`]):
    /// whether its reference run fits on one GPU.
    #[serde(default)]
    pub tiny_model_states_gib: f64,
    /// The worst rank's memory, GiB.
    pub memory_gib: MemoryGib,
    /// The step's time breakdown, seconds.
    pub time_s: TimeS,
    /// Every pipeline rank.
    pub stages: Vec<StagePredicted>,
    /// Where each axis' groups sit.
    pub placement: Placement,
    /// Each process group's network levels crossed, innermost first, and
    /// the bytes per GPU one of its collectives puts on each
    /// ([`cost::levels::group_traffic`]).
    #[serde(default)]
    pub group_levels: Vec<GroupLevels>,
    /// Checkpoint size and interval.
    pub checkpoint: CheckpointPredicted,
    /// Tokens per second after checkpoint and failure losses,
    /// `tokens_per_s · (1 − overhead_fraction)`.
    pub effective_tokens_per_s: f64,
    /// How well the plan's regime is validated by published runs
    /// ([`crate::trust`]).
    pub trust: crate::trust::Trust,
}

/// CUDA compute capability of the shipped GPU profiles, by profile name
/// prefix (NVIDIA CUDA GPUs table): A100 sm_80; H100, H200, H800 sm_90;
/// B200 sm_100; B300/GB300 sm_103. `None` for a GPU meshplan does not know.
pub fn compute_capability(gpu: &str) -> Option<u32> {
    let g = gpu.to_ascii_lowercase();
    if g.starts_with("a100") || g.starts_with("a800") {
        Some(80)
    } else if g.starts_with("h100")
        || g.starts_with("h200")
        || g.starts_with("h800")
        || g.starts_with("h20")
    {
        Some(90)
    } else if g.starts_with("b200") || g.starts_with("b100") || g.starts_with("gb200") {
        Some(100)
    } else if g.starts_with("b300") || g.starts_with("gb300") {
        Some(103)
    } else {
        None
    }
}

/// Processes per node and nodes used for `world` GPUs on nodes of `gpn`
/// GPUs: one node when the job fits in one, else full nodes (`world / gpn`,
/// rounded up; [`super::refusals`] rejects a world that is not a multiple).
pub fn node_shape(world: u64, gpn: u64) -> (u64, u64) {
    let gpn = gpn.max(1);
    if world <= gpn {
        (world, 1)
    } else {
        (gpn, world.div_ceil(gpn))
    }
}

fn sizes_of(order: RankOrder, size: impl Fn(Axis) -> u32) -> Vec<AxisInfo> {
    let mut stride = 1u64;
    order_axes(order)
        .into_iter()
        .map(|axis| {
            let s = size(axis);
            let a = AxisInfo {
                axis,
                size: s,
                stride,
            };
            stride *= s as u64;
            a
        })
        .collect()
}

fn groups_of(grid: &[AxisInfo], axes: &[Axis]) -> Vec<Vec<u64>> {
    let sizes: Vec<u32> = grid.iter().map(|a| a.size).collect();
    let mask: Vec<bool> = grid.iter().map(|a| axes.contains(&a.axis)).collect();
    orthogonal_groups(&sizes, &mask)
}

fn coord(grid: &[AxisInfo], axis: Axis, rank: u64) -> u32 {
    grid.iter()
        .find(|a| a.axis == axis)
        .map(|a| ((rank / a.stride) % a.size.max(1) as u64) as u32)
        .unwrap_or(0)
}

fn span(groups: &[Vec<u64>], ppn: u64, domain: u64) -> SpanInfo {
    let distinct = |g: &Vec<u64>, unit: u64| {
        let mut v: Vec<u64> = g.iter().map(|r| r / unit.max(1)).collect();
        v.sort_unstable();
        v.dedup();
        v.len() as u64
    };
    SpanInfo {
        size: groups.first().map(|g| g.len() as u32).unwrap_or(0),
        groups: groups.len() as u64,
        nodes: groups.iter().map(|g| distinct(g, ppn)).max().unwrap_or(0),
        fast_domains: groups
            .iter()
            .map(|g| distinct(g, domain))
            .max()
            .unwrap_or(0),
    }
}

/// The embedding group of pipeline group `pp_ranks`, as Megatron-LM's
/// `pretrain_gpt.py` `get_embedding_ranks` builds it
/// ([ref:megatron-parallel-state]): the first stage, plus the last when
/// p > 1 and the input embedding and output layer are tied or the model
/// has multi-token-prediction layers (`get_mtp_ranks`: the last stage,
/// which keeps a copy of the embedding for them).
pub fn embedding_ranks(pp_ranks: &[u64], tied: bool, mtp: bool) -> Vec<u64> {
    let mut e = vec![pp_ranks[0]];
    if (tied || mtp) && pp_ranks.len() > 1 {
        e.push(pp_ranks[pp_ranks.len() - 1]);
    }
    e
}

impl CheckpointPredicted {
    /// The plan file's view of [`checkpoint::plan`]: its sizes, write time
    /// and Daly interval, the interval in whole steps (at least 1) and the
    /// expected waste at that many steps.
    pub fn of(c: &checkpoint::CheckpointPlan) -> CheckpointPredicted {
        let interval_steps = interval_in_steps(c.interval_s, c.step_s);
        let tau = interval_steps as f64 * c.step_s;
        CheckpointPredicted {
            bytes: c.total_bytes,
            bytes_per_rank: c.per_rank_bytes,
            write_s: c.write_s,
            job_mtbf_s: c.job_mtbf_s,
            interval_s: c.interval_s,
            interval_steps,
            overhead_fraction: if tau > 0.0 {
                checkpoint::waste_fraction(c.write_s, tau, c.job_mtbf_s)
            } else {
                1.0
            },
        }
    }
}

/// An interval of `interval_s` seconds in whole steps of `step_s`, rounded,
/// at least 1 (the `--save-interval` written).
pub fn interval_in_steps(interval_s: f64, step_s: f64) -> u64 {
    if step_s > 0.0 {
        ((interval_s / step_s).round() as u64).max(1)
    } else {
        1
    }
}

/// The chunks of a pipeline on `pp` ranks whose model chunks hold
/// `layers_per_chunk` layers, in model order: chunk c sits on pipeline rank
/// c mod p as its chunk ⌊c / p⌋, holds the layers after those of the chunks
/// before it, the embedding when it is the first and the output layer when
/// it is the last.
fn chunk_infos(layers_per_chunk: &[u32], pp: u32) -> Vec<ChunkInfo> {
    let last = layers_per_chunk.len().saturating_sub(1);
    let mut first_layer = 0;
    layers_per_chunk
        .iter()
        .enumerate()
        .map(|(c, &layers)| {
            let chunk = ChunkInfo {
                vpp_chunk: c as u32 / pp,
                model_chunk: c as u32,
                first_layer,
                end_layer: first_layer + layers,
                layers,
                embedding: c == 0,
                output: c == last,
            };
            first_layer += layers;
            chunk
        })
        .collect()
}

impl Plan {
    /// Every chunk of the pipeline in model order, from
    /// [`PipelineInfo::layers_per_chunk`] (as [`Plan::stages`] lists them
    /// per rank).
    pub fn model_chunks(&self) -> Vec<ChunkInfo> {
        chunk_infos(&self.pipeline.layers_per_chunk, self.mesh.pp)
    }

    /// Build the plan of layout `l` for problem `pr`, priced by `eval`
    /// (`cost::evaluate(pr, l)`). It does not check the layout:
    /// [`super::refusals`] does.
    pub fn new(pr: &Problem, l: &Layout, eval: &Evaluation) -> Plan {
        let model = pr.model;
        let a = &model.architecture;
        let moe = model.moe.is_some();
        let world = l.world();
        let (ppn, nodes) = node_shape(world, pr.cluster.gpus_per_node as u64);
        let domain = pr.cluster.fast_domain() as u64;

        let dense = sizes_of(l.order, |axis| match axis {
            Axis::Tp => l.tp,
            Axis::Cp => l.cp,
            Axis::Ep => 1,
            Axis::Dp => l.dp,
            Axis::Pp => l.pp,
        });
        let expert = moe.then(|| {
            sizes_of(l.order, |axis| match axis {
                Axis::Tp => l.etp,
                Axis::Cp => 1,
                Axis::Ep => l.ep,
                Axis::Dp => l.edp(),
                Axis::Pp => l.pp,
            })
        });

        let ranks = (0..world)
            .map(|r| RankInfo {
                rank: r,
                node: r / ppn,
                local_rank: r % ppn,
                dp: coord(&dense, Axis::Dp, r),
                tp: coord(&dense, Axis::Tp, r),
                pp: coord(&dense, Axis::Pp, r),
                cp: coord(&dense, Axis::Cp, r),
                ep: expert.as_ref().map(|e| coord(e, Axis::Ep, r)).unwrap_or(0),
                expert_tp: expert.as_ref().map(|e| coord(e, Axis::Tp, r)),
                expert_dp: expert.as_ref().map(|e| coord(e, Axis::Dp, r)),
            })
            .collect();

        let pp_groups = groups_of(&dense, &[Axis::Pp]);
        let groups = Groups {
            tp: groups_of(&dense, &[Axis::Tp]),
            cp: groups_of(&dense, &[Axis::Cp]),
            dp: groups_of(&dense, &[Axis::Dp]),
            dp_cp: groups_of(&dense, &[Axis::Dp, Axis::Cp]),
            embedding: pp_groups
                .iter()
                .map(|g| embedding_ranks(g, a.tied_embeddings, a.mtp_layers > 0))
                .collect(),
            pp: pp_groups,
            ep: expert.as_ref().map(|e| groups_of(e, &[Axis::Ep])),
            expert_tp: expert.as_ref().map(|e| groups_of(e, &[Axis::Tp])),
            expert_dp: expert.as_ref().map(|e| groups_of(e, &[Axis::Dp])),
        };

        let chunks = l.pp * l.vpp;
        let layers_per_chunk: Vec<u32> = (0..chunks)
            .map(|c| {
                let (s, e) = cost::chunk_layers(l, a.layers, c, chunks);
                e - s
            })
            .collect();
        let model_chunks = chunk_infos(&layers_per_chunk, l.pp);
        let stages = (0..l.pp)
            .map(|r| {
                let chunks_of: Vec<ChunkInfo> = (0..l.vpp)
                    .map(|j| model_chunks[(j * l.pp + r) as usize])
                    .collect();
                StageInfo {
                    pp_rank: r,
                    layers: chunks_of.iter().map(|c| c.layers).sum(),
                    chunks: chunks_of,
                }
            })
            .collect();

        let usable_gib = pr.usable_bytes() / GIB;
        let stage_costs = cost::rank_costs(pr, l);
        let t = &eval.time;
        let placement = Placement {
            tp: span(&groups.tp, ppn, domain),
            cp: span(&groups.cp, ppn, domain),
            dp: span(&groups.dp, ppn, domain),
            dp_cp: span(&groups.dp_cp, ppn, domain),
            pp: span(&groups.pp, ppn, domain),
            ep: groups.ep.as_ref().map(|g| span(g, ppn, domain)),
            expert_dp: groups.expert_dp.as_ref().map(|g| span(g, ppn, domain)),
        };
        let checkpoint = CheckpointPredicted::of(&checkpoint::plan(pr, l, eval));
        let predicted = Predicted {
            step_s: t.step,
            tokens_per_s: eval.tokens_per_s,
            tflops_per_gpu: eval.tflops_per_gpu,
            mfu: eval.mfu,
            hfu: eval.hfu,
            bubble_fraction: eval.bubble_fraction,
            peak_gib: eval.peak_bytes / GIB,
            worst_pp_rank: eval.worst_rank,
            headroom_gib: usable_gib - eval.peak_bytes / GIB,
            doubled_micro_batch_peak_gib: doubled_micro_batch_peak(pr, l).map(|b| b / GIB),
            tiny_model_states_gib: tiny_model_states_gib(pr, l.pp.saturating_mul(l.vpp)),
            memory_gib: eval.memory.in_gib(),
            time_s: *t,
            stages: stage_costs
                .iter()
                .map(|rc| StagePredicted {
                    pp_rank: rc.rank,
                    memory_gib: rc.memory.in_gib(),
                    time_per_microbatch_s: rc.time,
                })
                .collect(),
            placement,
            group_levels: cost::levels::group_traffic(pr, l)
                .into_iter()
                .map(|g| GroupLevels {
                    axis: g.axis.to_string(),
                    collective: serde_json::to_value(g.collective)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    levels: g.levels,
                    level_bytes: g.level_bytes,
                })
                .collect(),
            effective_tokens_per_s: eval.tokens_per_s
                * (1.0 - checkpoint.overhead_fraction).max(0.0),
            trust: crate::report::trust_of(pr, l, eval),
            checkpoint,
        };

        let recipe = &pr.job.recipe;
        Plan {
            schema: SCHEMA.to_string(),
            generator: format!("meshplan {}", env!("CARGO_PKG_VERSION")),
            layout: l.clone(),
            model: ModelInfo {
                name: model.name.clone(),
                source: model.source.clone(),
                total_params: model.total_params(),
                layers: a.layers,
                hidden: a.hidden,
                ffn: a.ffn,
                heads: a.heads,
                kv_heads: a.kv_heads,
                head_dim: model.head_dim(),
                vocab: a.vocab,
                padded_vocab: cost::layer::padded_vocab(a.vocab, l.tp),
                tokenizer_vocab: a.tokenizer_vocab,
                gated_mlp: a.gated_mlp,
                norm: a.norm,
                position_embedding: a.position_embedding,
                rope_theta: a.rope_theta,
                max_seq: a.max_seq,
                tied_embeddings: a.tied_embeddings,
                linear_bias: a.linear_bias,
                dropout: a.dropout,
                qk_layernorm: a.qk_layernorm,
                norm_epsilon: a.norm_epsilon,
                rope_scaling: a.rope_scaling,
                mtp_layers: a.mtp_layers,
                mtp_loss_scale: a.mtp_loss_scale,
                moe: model.moe.clone(),
                mla: model.mla.clone(),
            },
            hardware: HardwareInfo {
                cluster: pr.cluster.name.clone(),
                gpu: pr.gpu.name.clone(),
                gpu_display: pr.gpu.display.clone(),
                compute_capability: compute_capability(&pr.gpu.name),
                world,
                nodes,
                processes_per_node: ppn,
                gpus_per_node: pr.cluster.gpus_per_node,
                fast_domain: pr.cluster.fast_domain(),
                memory_gib: pr.gpu.memory_gib,
                usable_gib,
                peak_tflops_bf16: pr.gpu.peak_tflops_bf16,
            },
            job: JobInfo {
                global_batch: pr.job.global_batch,
                seq_len: pr.job.seq_len,
                tokens_per_step: pr.job.global_batch * pr.job.seq_len,
                micro_batch: l.micro_batch,
                micro_batches: eval.micro_batches,
                recipe: pr.job.recipe_name,
                recipe_bytes: RecipeBytes {
                    weights: recipe.weight_bytes,
                    grads: recipe.grad_bytes,
                    optimizer: recipe.optimizer_bytes,
                    grad_reduce: recipe.grad_reduce_bytes,
                },
                flash_attention: pr.job.flash_attention,
                overlap_grad_reduce: pr.job.overlap_grad_reduce,
                overlap_param_gather: pr.job.param_gather_overlapped(),
                tp_comm_overlap: pr.job.tp_comm_overlap,
                precision: pr.job.precision,
                fp8_recipe: (pr.job.precision == Precision::Fp8).then_some(pr.job.fp8_recipe),
                fp8_kernels: pr.job.precision.is_low().then_some(pr.job.fp8_kernels),
                fp8_param_gather: pr.job.precision.is_low() && pr.job.fp8_param_gather,
                fp8_dispatch: pr.job.precision.is_low() && pr.job.fp8_dispatch,
                moe_capacity_factor: pr.model.moe.as_ref().and(pr.job.moe_capacity_factor),
                moe_imbalance: pr.model.moe.as_ref().map(|_| pr.job.moe_imbalance),
                headroom_gib: (pr.job.headroom_gib > 0.0).then_some(pr.job.headroom_gib),
                deepspeed_dp: pr.job.deepspeed_dp,
            },
            mesh: MeshInfo {
                world,
                dp: l.dp,
                tp: l.tp,
                pp: l.pp,
                cp: l.cp,
                ep: l.ep,
                etp: l.etp,
                edp: moe.then(|| l.edp()),
                vpp: l.vpp,
                sp: l.sp && l.tp > 1,
                cp_comm: l.cp_comm,
            },
            rank_order: OrderInfo {
                order: l.order,
                dense,
                expert,
            },
            ranks,
            groups,
            stages,
            pipeline: PipelineInfo {
                chunks,
                uniform: layers_per_chunk.windows(2).all(|w| w[0] == w[1]),
                layers_per_chunk,
                schedule: if l.pp == 1 {
                    "none"
                } else if l.vpp > 1 {
                    "interleaved-1f1b"
                } else {
                    "1f1b"
                }
                .to_string(),
            },
            recompute: RecomputeInfo {
                mode: l.recompute,
                what: match l.recompute {
                    Recompute::None => "nothing: every activation is kept",
                    Recompute::Selective => {
                        "the attention core (scores, softmax, dropout) of every layer"
                    }
                    Recompute::Full => "every layer, from its saved input",
                }
                .to_string(),
                layers_per_checkpoint: (l.recompute == Recompute::Full).then_some(1),
            },
            sharding: ShardingInfo {
                zero: l.zero,
                sharded: ["optimizer", "gradients", "parameters"][..l.zero as usize]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                group: "dp-cp".to_string(),
                group_size: l.dp * l.cp,
                expert_group: moe.then(|| "expert-dp".to_string()),
                expert_group_size: moe.then(|| l.edp()),
            },
            predicted,
        }
    }

    /// A representative global rank of pipeline stage `pp_rank`: the one
    /// whose other coordinates are all 0.
    pub fn stage_rank(&self, pp_rank: u32) -> u64 {
        let stride = self
            .rank_order
            .dense
            .iter()
            .find(|a| a.axis == Axis::Pp)
            .map(|a| a.stride)
            .unwrap_or(0);
        pp_rank as u64 * stride
    }
}

/// Decimal places kept in predicted numbers: finer than any model error,
/// and coarse enough that last-bit differences of floating-point libraries
/// between platforms do not change the file.
pub const PREDICTION_DECIMALS: i32 = 4;

/// Every float under `v` rounded to [`PREDICTION_DECIMALS`] places.
fn round_floats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            let k = 10f64.powi(PREDICTION_DECIMALS);
            *v = serde_json::Value::from((x * k).round() / k);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(round_floats),
        serde_json::Value::Object(o) => o.values_mut().for_each(round_floats),
        _ => {}
    }
}

/// Longest object (in characters, indentation included) printed on one line.
const ONE_LINE_OBJECT: usize = 160;

/// `plan` as JSON text: pretty-printed, except that arrays holding only
/// numbers (process groups, splits) and short objects holding only scalars
/// (one rank, a memory breakdown) are printed on one line, so a 16,384-rank
/// plan stays a file a person can read.
///
/// # Errors
/// serde_json's, which a [`Plan`] does not produce.
pub fn to_json(plan: &Plan) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(plan)?;
    if let Some(p) = v.get_mut("predicted") {
        round_floats(p);
    }
    Ok(compact_lines(&serde_json::to_string_pretty(&v)?))
}

/// Collapse the leaf containers of serde_json's pretty output (see [`to_json`]).
fn compact_lines(pretty: &str) -> String {
    // (index in `out` of the opening line, whether it holds a container).
    let mut stack: Vec<(usize, bool)> = Vec::new();
    let mut out: Vec<String> = Vec::new();
    for line in pretty.lines() {
        let t = line.trim_start();
        let opens = t == "[" || t == "{" || line.ends_with(": [") || line.ends_with(": {");
        let closes = t.starts_with(']') || t.starts_with('}');
        if closes {
            if let Some((start, nested)) = stack.pop() {
                let inner: Vec<&str> = out[start + 1..].iter().map(|l| l.trim()).collect();
                let joined = format!("{}{}{}", out[start], inner.join(" "), t);
                let array = t.starts_with(']');
                if !nested
                    && ((array && inner.iter().all(|x| !x.starts_with('"')))
                        || (!array && joined.len() <= ONE_LINE_OBJECT))
                {
                    out.truncate(start);
                    out.push(joined);
                    continue;
                }
            }
            out.push(line.to_string());
        } else {
            if opens {
                if let Some(top) = stack.last_mut() {
                    top.1 = true;
                }
                stack.push((out.len(), false));
            }
            out.push(line.to_string());
        }
    }
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama 3.1 405B cut to 64 layers: 64 · 3,187,703,808 + 2 ·
    /// 2,101,346,304 (embedding and untied output layer) + 16,384 (final
    /// norm) = 208,215,752,704 parameters (the worked example of
    /// [`tiny_model_states_gib`]), at Megatron's 2 + 4 + 12 bytes:
    /// 3,747,883,548,672 bytes = 3490.4886 GiB, so its reference needs
    /// ⌈3490.49 / 77.15⌉ = 46 H100s just to hold it.
    #[test]
    fn tiny_model_states_by_hand() {
        let cat = crate::spec::Catalog::shipped().unwrap();
        let m = cat.model("llama3-405b").unwrap();
        let c = cat.cluster("dgx-h100-1024").unwrap();
        let g = cat.gpu(&c.gpu).unwrap();
        let job = crate::spec::Job::new(m.defaults.global_batch, m.defaults.seq_len);
        let pr = Problem::new(m, g, c, &job, c.total_gpus());
        let want = 208_215_752_704.0 * 18.0 / GIB;
        assert!((tiny_model_states_gib(&pr, 64) - want).abs() < 1e-9 * want);
        assert_eq!((want / (pr.usable_bytes() / GIB)).ceil(), 46.0);
    }

    #[test]
    fn interval_in_whole_steps() {
        // τ* = 1003.99 s with a 100 s step: 10 steps; with no step yet, 1.
        assert_eq!(interval_in_steps(1003.99, 100.0), 10);
        assert_eq!(interval_in_steps(30.0, 100.0), 1);
        assert_eq!(interval_in_steps(30.0, 0.0), 1);
    }

    #[test]
    fn nodes_for_world() {
        assert_eq!(node_shape(64, 8), (8, 8));
        assert_eq!(node_shape(4, 8), (4, 1));
        assert_eq!(node_shape(12, 8), (8, 2));
    }

    #[test]
    fn compact_json_is_the_same_json() {
        // Leaf arrays and short objects collapse; the value is unchanged.
        #[derive(Serialize)]
        struct T {
            groups: Vec<Vec<u64>>,
            rank: RankInfo,
            names: Vec<String>,
        }
        let v = T {
            groups: vec![vec![0, 1], vec![2, 3]],
            rank: RankInfo {
                rank: 1,
                node: 0,
                local_rank: 1,
                dp: 0,
                tp: 1,
                pp: 0,
                cp: 0,
                ep: 0,
                expert_tp: None,
                expert_dp: None,
            },
            names: vec!["a".into(), "b".into()],
        };
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let pl: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        // Reuse the line compaction through a Plan-free path: same algorithm.
        let text = compact_lines(&pretty);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            pl
        );
        assert!(text.contains("[0, 1],"), "{text}");
        assert!(text.contains(r#""rank": {"rank": 1, "node": 0,"#), "{text}");
        assert!(
            text.contains("\"names\": [\n"),
            "string arrays stay one per line: {text}"
        );
    }
}
