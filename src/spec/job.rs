//! The training job: batch, sequence length, precision recipe, optimizer and
//! the framework switches that change cost (flash attention, overlaps).

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// Bytes per parameter of the persistent model states (the terms of ZeRO's
/// model-state table, [ref:rajbhandari-2020] Figure 1:
/// `b_w` working weights, `b_g` gradients, `b_o` all optimizer state).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Recipe {
    /// Working (compute) weight bytes per parameter, `b_w`.
    pub weight_bytes: f64,
    /// Gradient bytes per parameter as kept for the optimizer, `b_g`.
    pub grad_bytes: f64,
    /// Optimizer bytes per parameter (fp32 master + Adam moments), `b_o`.
    pub optimizer_bytes: f64,
    /// Bytes per element of gradients on the wire in data-parallel reductions.
    pub grad_reduce_bytes: f64,
    /// Of `b_g`, the bytes per parameter that exist only during the
    /// optimizer step, not while activations are held: DeepSpeed's fp32
    /// gradient partition, which ZeRO-1/2 and ZeRO-3 build from the fp16
    /// gradients inside `step()` and free after it (`stage_1_and_2.py`
    /// `step`, `stage3.py` `_prepare_fp32_grad_for_sub_group` /
    /// `_release_sub_group` [ref:deepspeed-zero-optimizer]). 0 for engines whose
    /// gradient buffer persists (Megatron's fp32 `main_grad`).
    #[serde(default)]
    pub step_grad_bytes: f64,
}

impl Recipe {
    /// Megatron-LM bf16 with fp32 main grads: 2 + 4 + 12 = 18 bytes per
    /// parameter (Megatron's `docs/user-guide/features/dist_optimizer.md`
    /// [ref:megatron-dist-optimizer]; [ref:case-m1]);
    /// gradients reduced in fp32.
    pub const MEGATRON_BF16: Recipe = Recipe {
        weight_bytes: 2.0,
        grad_bytes: 4.0,
        optimizer_bytes: 12.0,
        grad_reduce_bytes: 4.0,
        step_grad_bytes: 0.0,
    };

    /// Mixed-precision Adam at 16 bytes per parameter, the ZeRO paper's
    /// recipe ([ref:rajbhandari-2020] §3.1): bf16 weights (2), bf16
    /// gradients (2), fp32 master weights and two Adam moments (12);
    /// gradients reduced in bf16.
    pub const ADAM_16B: Recipe = Recipe {
        weight_bytes: 2.0,
        grad_bytes: 2.0,
        optimizer_bytes: 12.0,
        grad_reduce_bytes: 2.0,
        step_grad_bytes: 0.0,
    };

    /// DeepSpeed mixed precision: fp16/bf16 weights (2), fp16 gradients (2)
    /// plus the fp32 gradient partition the optimizer reads (4), fp32
    /// master + Adam (12). ZeRO-2 keeps `2P + 18P/N` ([ref:case-m2]) in its
    /// optimizer step; the fp32 partition exists only there
    /// (`step_grad_bytes`), so while activations are held the states are
    /// `2P + 14P/N`.
    pub const DEEPSPEED: Recipe = Recipe {
        weight_bytes: 2.0,
        grad_bytes: 6.0,
        optimizer_bytes: 12.0,
        grad_reduce_bytes: 2.0,
        step_grad_bytes: 4.0,
    };

    /// Total bytes per parameter when nothing is sharded.
    pub fn total(&self) -> f64 {
        self.weight_bytes + self.grad_bytes + self.optimizer_bytes
    }
}

/// Name of a precision recipe (`--recipe`, the `recipe` of reports and
/// plan files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecipeName {
    /// bf16 weights, fp32 main grads, fp32 master + Adam (2/4/12), as Megatron-LM.
    Megatron,
    /// Mixed-precision Adam at 2/2/12 = 16 bytes per parameter (bf16 grads,
    /// reduced in bf16): [`Recipe::ADAM_16B`]. Plan files written before the
    /// rename say `seed`, still read.
    #[serde(rename = "adam-16b", alias = "seed")]
    Adam16b,
    /// DeepSpeed's 2/(2+4)/12 recipe (fp16 grads plus fp32 partition).
    Deepspeed,
}

crate::names::named!(RecipeName, "precision recipe", [Megatron => "megatron", Adam16b => "adam-16b" | "seed", Deepspeed => "deepspeed"]);

impl RecipeName {
    /// The byte counts of this recipe.
    pub fn recipe(self) -> Recipe {
        match self {
            RecipeName::Megatron => Recipe::MEGATRON_BF16,
            RecipeName::Adam16b => Recipe::ADAM_16B,
            RecipeName::Deepspeed => Recipe::DEEPSPEED,
        }
    }
}

/// Number format of the transformer's linear-layer GEMMs (`--precision`,
/// the `precision` column of `validate`): QKV, attention output projection,
/// FC1, FC2 and the expert GEMMs, forward and both backward GEMMs. The
/// attention core, router, embedding, output layer, norms and optimizer stay
/// in bf16/fp32 whatever this says, as DeepSeek-V3 kept them
/// ([ref:deepseek-v3] §3.3.1) and Transformer Engine does
/// ([ref:te-fp8-primer]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// bf16 operands, fp32 accumulation (the default; every GEMM as before).
    #[default]
    Bf16,
    /// FP8 operands (E4M3 forward, E5M2 gradients under the hybrid format)
    /// scaled per tensor, per row or per block ([`Fp8Recipe`])
    /// ([ref:micikevicius-2022]).
    Fp8,
    /// MXFP8: FP8 elements with one E8M0 scale per 32 consecutive elements
    /// ([ref:ocp-mx]); Blackwell tensor cores read the scales natively.
    Mxfp8,
    /// NVFP4: E2M1 elements with one E4M3 scale per 16 elements and an fp32
    /// scale per tensor ([ref:nvfp4-2025]).
    Nvfp4,
}

crate::names::named!(Precision, "GEMM precision", [Bf16 => "bf16", Fp8 => "fp8", Mxfp8 => "mxfp8", Nvfp4 => "nvfp4"]);

impl Precision {
    /// Whether the linear GEMMs run narrower than bf16.
    pub fn is_low(self) -> bool {
        self != Precision::Bf16
    }
}

/// How FP8 tensors are scaled (`--fp8-recipe`; Megatron-LM and Transformer
/// Engine names [ref:te-fp8-primer], torchtitan's `tensorwise` is an alias
/// of `current`). Ignored unless the precision is `fp8`: MXFP8 and NVFP4
/// fix their own block scaling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Recipe {
    /// Delayed scaling: each tensor's scale comes from an amax history of
    /// earlier steps, so the cast needs one pass and the amax is a by-product
    /// (Transformer Engine `DelayedScaling`; Megatron-LM's default).
    #[default]
    Delayed,
    /// Current (just-in-time) scaling per tensor: the amax of the tensor
    /// itself, one extra read before the cast (Transformer Engine
    /// `Float8CurrentScaling`, Megatron `tensorwise`, torchao `tensorwise`).
    Current,
    /// Current scaling per row (torchao `rowwise`): one scale per row of each
    /// operand along the GEMM's contraction, so every transposed copy is
    /// cast again from the high-precision tensor.
    Rowwise,
    /// Block scaling: 1×128 tiles for activations and gradients, 128×128
    /// blocks for weights, as DeepSeek-V3 trained ([ref:deepseek-v3]
    /// §3.3.2; Transformer Engine `Float8BlockScaling`).
    Blockwise,
}

crate::names::named!(Fp8Recipe, "FP8 scaling recipe", [Delayed => "delayed", Current => "current" | "tensorwise", Rowwise => "rowwise", Blockwise => "blockwise"]);

/// Which library runs the low-precision linears (`--fp8-kernels`). They
/// differ in what they keep between forward and backward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Kernels {
    /// NVIDIA Transformer Engine (Megatron-LM, NeMo, Megatron-Bridge): the
    /// FP8 weight and its transpose are cast once per step and cached for
    /// every micro-batch; the inputs of the linears are saved for backward in
    /// FP8 ([ref:te-fp8-primer]).
    #[default]
    Te,
    /// torchao float8 (torchtitan): weights cast again at every use, the
    /// linears' inputs saved in bf16 and cast again in backward
    /// ([ref:torchao-float8]).
    Torchao,
}

crate::names::named!(Fp8Kernels, "low-precision kernel library", [Te => "te", Torchao => "torchao"]);

/// Fused-attention kernel whose published throughput curve prices the
/// attention core (`compute::attention_kernel_tflops`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnKernel {
    /// FlashAttention-2 (Dao 2023), PyTorch SDPA's flash backend
    /// (torchtitan, KempnerForge).
    Fa2,
    /// FlashAttention-3 (Shah et al. 2024).
    Fa3,
    /// cuDNN fused attention, Transformer Engine's default backend on Hopper
    /// (Megatron-LM, NeMo, Megatron-Bridge).
    #[default]
    Cudnn,
}

crate::names::named!(AttnKernel, "attention kernel", [Fa2 => "fa2", Fa3 => "fa3", Cudnn => "cudnn"]);

/// Which context-parallel implementation runs the ring attention: they
/// exchange different bytes on different schedules (`cost::cp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpImpl {
    /// Transformer Engine `context_parallel.py` (Megatron-LM, NeMo,
    /// Megatron-Bridge): K/V of the KV heads only, bf16, ring of p2p sends or
    /// an exposed all-gather.
    #[default]
    Te,
    /// PyTorch `torch.distributed.tensor.experimental.context_parallel`
    /// (torchtitan, Dec 2024): K/V after `repeat_kv` (every query head),
    /// all-gathered under the first sub-attention, dK/dV rotated in fp32.
    Torch,
}

crate::names::named!(CpImpl, "context-parallel implementation", [Te => "te", Torch => "torch"]);

/// What a selective-recompute layout keeps for backward (`recompute =
/// selective`). Engines name different policies by the same word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SelectivePolicy {
    /// Megatron's selective recompute (Korthikanti et al. 2022 §4.2
    /// [ref:korthikanti-2022]): everything but the attention scores is
    /// saved; with flash attention it saves what no recompute saves.
    #[default]
    Korthikanti,
    /// torchtitan's per-op selective activation checkpointing
    /// (`selective_ac_option = "op"`): only the outputs of the matmuls
    /// (every second one recomputed) and of the attention kernel are saved,
    /// with the layer input ([`crate::cost::memory::op_sac_terms`]).
    TorchtitanOp,
}

/// How the loss holds the logits at its peak (the backward of the
/// cross-entropy), [`crate::cost::memory::loss_buffer_bytes`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossBuffers {
    /// Megatron's vocab-parallel cross-entropy over the local V/T logits:
    /// bf16 logits, their fp32 copy and its gradient, 10 bytes per logit.
    #[default]
    MegatronVocabParallel,
    /// PyTorch `cross_entropy(logits.float())` run eagerly, logits sharded
    /// by TP (torchtitan's loss parallel): the saved fp32 log-softmax and
    /// the two fp32 gradients of its backward, 12 bytes per logit.
    TorchFp32Eager,
    /// The same loss compiled by `torch.compile` (torchtitan since 2025):
    /// the bf16 logits saved by the fused kernel and their bf16 gradient,
    /// 4 bytes per logit.
    TorchCompiled,
    /// PyTorch `cross_entropy` on bf16 logits gathered over TP (the output
    /// layer's `ColwiseParallel` to `Replicate`, KempnerForge): the logits
    /// held by the training loop, the saved bf16 log-softmax and the two
    /// bf16 gradients, 8 bytes per logit of the full vocabulary.
    TorchBf16Gathered,
    /// Transformer Engine's fused `parallel_cross_entropy` (Megatron's
    /// `cross_entropy_loss_fusion` with `cross_entropy_fusion_impl = "te"`):
    /// the Triton kernel keeps the bf16 logits and writes their gradient
    /// over them in place, plus three fp32 values per token, 2 bytes per
    /// logit + 12 per token.
    TeFusedInPlace,
}

/// What the training engine keeps in memory where it differs from
/// Megatron-LM (the defaults). Set by `validate` from a row's `engine`;
/// the search and `plan` use the defaults unless a caller sets them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineMemory {
    /// What `recompute = selective` saves.
    #[serde(default)]
    pub selective: SelectivePolicy,
    /// How the loss holds the logits.
    #[serde(default)]
    pub loss: LossBuffers,
    /// Bytes per parameter of unsharded gradients kept across the
    /// micro-batches of a step under ZeRO-2/3 when the engine accumulates
    /// without reducing (PyTorch FSDP2 `set_requires_gradient_sync(False)`
    /// keeps `unsharded_accumulated_grad` in the reduce dtype); 0 = the
    /// engine reduces every micro-batch (Megatron, DeepSpeed).
    #[serde(default)]
    pub unsharded_grad_accum_bytes: f64,
    /// PyTorch FSDP2's root unit: the parameters outside the wrapped
    /// blocks (embedding, final norm, output layer) are one unit gathered
    /// for the whole forward and the whole backward, on top of the block
    /// computing and the one prefetched.
    #[serde(default)]
    pub fsdp2_root_unit: bool,
    /// Under ZeRO-3 the only persistent copy of the weights is the fp32
    /// shard that the optimizer updates (the recipe's master copy within
    /// `b_o`): torchtitan builds the model in fp32 and FSDP2 casts to
    /// bf16 only when it gathers (`MixedPrecisionPolicy(param_dtype=bf16)`),
    /// so no `b_w·P/D` bf16 shard is kept.
    #[serde(default)]
    pub fp32_shards_only: bool,
    /// DeepSpeed ZeRO-3's bounds on what is materialised at once, in
    /// parameters; `None` = gather whole units (FSDP).
    #[serde(default)]
    pub deepspeed_zero3: Option<DeepSpeedZero3>,
    /// The MoE routing probabilities are multiplied in the expert
    /// activation (Megatron-Core ≥ 0.13, `weighted_bias_swiglu_impl`), so
    /// the combine's unpermute saves no expert output
    /// (`cost::moe::RoutedSaved::probs_in_expert`).
    #[serde(default)]
    pub moe_probs_in_expert: bool,
}

/// DeepSpeed ZeRO-3's gather and reduce limits, parameters (elements).
/// DeepSpeed gathers module by module and keeps at most
/// `max_live_parameters` resident (more only while one module needs it),
/// prefetching `prefetch_bucket_size` ahead; gradients leave each module
/// through a `reduce_bucket_size` bucket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DeepSpeedZero3 {
    /// `stage3_max_live_parameters`.
    pub max_live: f64,
    /// `stage3_prefetch_bucket_size`.
    pub prefetch_bucket: f64,
    /// `reduce_bucket_size`.
    pub reduce_bucket: f64,
    /// DeepSpeed 0.3's collectives (March 2021, the engine of Narayanan et
    /// al.'s ZeRO-3 baseline): one all-gather per parameter tensor and one
    /// reduce-scatter per gradient tensor over the whole DP group, each
    /// after a device-wide `torch.cuda.synchronize()`, through the
    /// tensor-list form of `torch.distributed` (priced by
    /// `cost::data_parallel::deepspeed_2021_collectives`). `false` = the
    /// coalesced, asynchronous gathers of later DeepSpeed (from PR #1188,
    /// June 2021), priced per unit like FSDP.
    #[serde(default)]
    pub per_tensor_sync: bool,
    /// `stage3_param_persistence_threshold`: tensors with fewer elements
    /// stay gathered for the whole step (gathered once after the optimizer
    /// step, never per module).
    #[serde(default = "DeepSpeedZero3::default_persistence_threshold")]
    pub persistence_threshold: f64,
    /// `stage3_max_reuse_distance`: a module's parameters are released after
    /// it runs unless the parameters used before its next use number fewer.
    #[serde(default = "DeepSpeedZero3::default_max_reuse_distance")]
    pub max_reuse_distance: f64,
}

impl DeepSpeedZero3 {
    /// DeepSpeed's defaults of early 2021 (`deepspeed/runtime/zero/
    /// constants.py` at c814abd, 2021-03: max live 1e9, prefetch bucket
    /// 5e7, reduce bucket 5e8), the version of Narayanan et al.'s baseline.
    /// Collectives of DeepSpeed 0.3.13 (`deepspeed/runtime/zero/stage3.py`,
    /// `partition_parameters.py` at fa87a73, 2021-03-16): per tensor and
    /// synchronous ([`DeepSpeedZero3::per_tensor_sync`]); persistence
    /// threshold 1e5 and max reuse distance 1e9 elements (`constants.py`).
    pub const DEFAULTS_2021: DeepSpeedZero3 = DeepSpeedZero3 {
        max_live: 1e9,
        prefetch_bucket: 5e7,
        reduce_bucket: 5e8,
        per_tensor_sync: true,
        persistence_threshold: 1e5,
        max_reuse_distance: 1e9,
    };

    /// `stage3_param_persistence_threshold`'s default, elements (1e5 in
    /// 2021 and today, `deepspeed/runtime/zero/config.py`).
    pub fn default_persistence_threshold() -> f64 {
        1e5
    }

    /// `stage3_max_reuse_distance`'s default, elements (1e9 in 2021 and
    /// today).
    pub fn default_max_reuse_distance() -> f64 {
        1e9
    }
}

/// A training job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Global batch B, sequences per optimizer step.
    pub global_batch: u64,
    /// Sequence length s, tokens.
    pub seq_len: u64,
    /// Recipe name.
    pub recipe_name: RecipeName,
    /// Bytes per parameter of model states.
    pub recipe: Recipe,
    /// Fused (flash) attention: no `s×s` score matrix is stored
    /// ([ref:dao-2022]).
    pub flash_attention: bool,
    /// Overlap the data-parallel gradient reduction with backward
    /// (`--overlap-grad-reduce`).
    pub overlap_grad_reduce: bool,
    /// Overlap the distributed optimizer's parameter all-gather with forward
    /// (`--overlap-param-gather`).
    pub overlap_param_gather: bool,
    /// Overlap TP communication with GEMMs when SP is on (`--tp-comm-overlap`).
    pub tp_comm_overlap: bool,
    /// Overlap the interleaved schedule's pipeline sends and receives with
    /// the other chunks' compute in steady state (Megatron-LM
    /// `overlap_p2p_comm`, on unless `--no-overlap-p2p-communication`, and
    /// only with VPP; Megatron-Bridge turns it on whenever PP > 1 and
    /// VPP > 1). Added to Megatron-LM in f9283c5a (2023-05-31). Priced by
    /// [`crate::cost::schedule::p2p_exposed`].
    pub overlap_p2p_comm: bool,
    /// Under `overlap_p2p_comm`, each steady-state forward send is waited
    /// for right after it is posted, before its output is freed (Megatron-LM
    /// since 260cba71, 2026-04-16, whenever `deallocate_pipeline_outputs`,
    /// which Megatron-LM and Megatron-Bridge turn on): only the backward
    /// sends hide. `false` models the code between f9283c5a and 260cba71.
    pub p2p_forward_send_waits: bool,
    /// Backward TP collectives of column-parallel linears run asynchronously
    /// under the weight-gradient GEMM (Megatron-LM
    /// `LinearWithGradAccumulationAndAsyncCommunication`, on by default
    /// since late 2021; `false` models Megatron-LM of April 2021).
    pub async_tp_backward: bool,
    /// Load of the busiest expert rank over the mean as stated (1.0 =
    /// perfectly balanced routing); multiplies routed-expert compute and
    /// all-to-all. The cost model raises it to the random-routing floor of
    /// the layout ([`crate::cost::moe::random_routing_skew`]).
    pub moe_imbalance: f64,
    /// Expert capacity factor (Megatron `--moe-expert-capacity-factor`);
    /// `None` = dropless routing (Megatron's default). With a factor c the
    /// busiest rank's load is `min(moe_imbalance, c)` times the mean.
    #[serde(default)]
    pub moe_capacity_factor: Option<f64>,
    /// Memory kept free on every GPU beyond the profile's reserve, GiB
    /// (`--headroom-gib`): usable memory is `memory − reserve − this`
    /// ([`crate::cost::Problem::usable_bytes`]); 0 by default.
    #[serde(default)]
    pub headroom_gib: f64,
    /// Expert all-to-alls overlapped with another micro-batch's compute
    /// (Megatron `--overlap-moe-expert-parallel-comm`, the 1F1B A2A overlap
    /// of Megatron-Bridge's `moe_a2a_overlap`); off by default. Priced by
    /// [`crate::cost::moe::a2a_overlap`]; `generate` does not write the
    /// flag (its preconditions are not checked), so only `validate` sets it.
    #[serde(default)]
    pub moe_a2a_overlap: bool,
    /// Number format of the linear-layer GEMMs (bf16 by default).
    #[serde(default)]
    pub precision: Precision,
    /// FP8 scaling recipe (read only when `precision` is `fp8`).
    #[serde(default)]
    pub fp8_recipe: Fp8Recipe,
    /// Library running the low-precision linears.
    #[serde(default)]
    pub fp8_kernels: Fp8Kernels,
    /// Parameters all-gathered in the low-precision format under ZeRO-3 /
    /// FSDP and the distributed optimizer (Megatron `--fp8-param-gather`,
    /// torchtitan `enable_fsdp_float8_all_gather`); off by default.
    #[serde(default)]
    pub fp8_param_gather: bool,
    /// MoE token dispatch in the low-precision format: the activations
    /// entering the experts' up-projections and the gradients entering their
    /// down-projections cross the all-to-all narrow, the other two
    /// all-to-alls stay bf16 ([ref:deepseek-v3] §3.3.3); off by default.
    #[serde(default)]
    pub fp8_dispatch: bool,
    /// Fused-attention kernel (cuDNN, Transformer Engine's, by default).
    #[serde(default)]
    pub attention_kernel: AttnKernel,
    /// Context-parallel implementation (Transformer Engine's by default).
    #[serde(default)]
    pub cp_impl: CpImpl,
    /// What the engine keeps in memory where it differs from Megatron-LM.
    #[serde(default)]
    pub engine_memory: EngineMemory,
    /// Transformer layers whose saved activations go to host memory during
    /// forward and come back during backward (Megatron
    /// `--cpu-offloading-num-layers` with activations only, Transformer
    /// Engine's `get_cpu_offload_context`; Megatron refuses it with
    /// pipeline parallelism); 0 = none. Priced by
    /// [`crate::cost::memory::offload_transfer_time`] over the GPU's
    /// `host_link_gbs`.
    #[serde(default)]
    pub activation_offload_layers: u32,
    /// DeepSpeed's gradient reduction without ZeRO hooks: where its
    /// optimizer has no `reduce_gradients` (`FP16_Optimizer` at ZeRO-0,
    /// `BF16_Optimizer` at ZeRO-1 with fp32 accumulation, the megatron
    /// recipe), `engine.allreduce_gradients` all-reduces the gradients
    /// after the last backward of the step (`buffered_allreduce_fallback`),
    /// whatever `overlap_comm` says, and `BF16_Optimizer.step` gathers the
    /// updated parameters (`all_gather_dp_groups`) before returning
    /// ([ref:deepspeed-config]); see
    /// [`crate::cost::data_parallel::deepspeed_boundary_all_reduce`].
    /// false = Megatron's bucketed reduction.
    #[serde(default)]
    pub deepspeed_dp: bool,
}

impl Job {
    /// Whether the parameter all-gather runs overlapped: Megatron accepts
    /// `--overlap-param-gather` only together with `--overlap-grad-reduce`
    /// (D1, [ref:megatron-arguments]), so without the gradient overlap the
    /// gather is priced exposed and `generate` leaves both flags out.
    pub fn param_gather_overlapped(&self) -> bool {
        self.overlap_param_gather && self.overlap_grad_reduce
    }

    /// Run as PyTorch FSDP2 trainers do (torchtitan, KempnerForge;
    /// [ref:zhao-2023]): gathers and reductions overlapped by prefetching,
    /// flash attention through SDPA, whose flash backend is
    /// FlashAttention-2, PyTorch's own `context_parallel`, and the
    /// parameters outside the wrapped blocks (embedding, output layer) as
    /// FSDP2's root unit, since both wrap each block and then the whole
    /// model with `fully_shard`. What differs between the trainers
    /// (precision of the shards, the loss) is left to the caller.
    pub fn pytorch_fsdp2(&mut self) {
        self.overlap_grad_reduce = true;
        self.overlap_param_gather = true;
        self.flash_attention = true;
        self.attention_kernel = AttnKernel::Fa2;
        self.cp_impl = CpImpl::Torch;
        self.engine_memory.fsdp2_root_unit = true;
    }

    /// A job with Megatron's defaults for everything but batch and sequence.
    pub fn new(global_batch: u64, seq_len: u64) -> Job {
        Job {
            global_batch,
            seq_len,
            recipe_name: RecipeName::Megatron,
            recipe: Recipe::MEGATRON_BF16,
            flash_attention: true,
            overlap_grad_reduce: true,
            overlap_param_gather: true,
            tp_comm_overlap: false,
            overlap_p2p_comm: true,
            p2p_forward_send_waits: true,
            async_tp_backward: true,
            moe_imbalance: 1.0,
            moe_capacity_factor: None,
            headroom_gib: 0.0,
            moe_a2a_overlap: false,
            precision: Precision::Bf16,
            fp8_recipe: Fp8Recipe::Delayed,
            fp8_kernels: Fp8Kernels::Te,
            fp8_param_gather: false,
            fp8_dispatch: false,
            attention_kernel: AttnKernel::Cudnn,
            cp_impl: CpImpl::Te,
            engine_memory: EngineMemory::default(),
            activation_offload_layers: 0,
            deepspeed_dp: false,
        }
    }

    /// Tokens per optimizer step, `B·s`.
    pub fn tokens_per_step(&self) -> f64 {
        self.global_batch.saturating_mul(self.seq_len) as f64
    }

    /// Check the job on its own (not against a layout).
    ///
    /// # Errors
    /// [`InputError::Job`] when the batch or the sequence is zero.
    pub fn check(&self) -> Result<(), InputError> {
        if self.global_batch == 0 {
            return Err(InputError::Job(
                "--global-batch must be at least 1 sequence".into(),
            ));
        }
        if self.seq_len == 0 {
            return Err(InputError::Job("--seq-len must be at least 1 token".into()));
        }
        use crate::limits::{MAX_GLOBAL_BATCH, MAX_SEQ, MAX_TOKENS_PER_STEP, at_most};
        at_most("--global-batch", self.global_batch, MAX_GLOBAL_BATCH).map_err(InputError::Job)?;
        at_most("--seq-len", self.seq_len, MAX_SEQ).map_err(InputError::Job)?;
        at_most(
            "tokens per step B·s",
            self.global_batch.saturating_mul(self.seq_len),
            MAX_TOKENS_PER_STEP,
        )
        .map_err(InputError::Job)?;
        if self.moe_imbalance > crate::limits::MAX_MOE_IMBALANCE {
            return Err(InputError::Job(format!(
                "--moe-imbalance {:e} exceeds meshplan's limit of {} (see src/limits.rs)",
                self.moe_imbalance,
                crate::limits::MAX_MOE_IMBALANCE
            )));
        }
        if !(self.moe_imbalance.is_finite() && self.moe_imbalance >= 1.0) {
            return Err(InputError::Job(format!(
                "--moe-imbalance must be at least 1.0 (1.0 = balanced), found {}",
                self.moe_imbalance
            )));
        }
        if let Some(c) = self.moe_capacity_factor
            && !(c.is_finite() && c > 0.0)
        {
            return Err(InputError::Job(format!(
                "--moe-capacity-factor must be a positive number (e.g. 1.25), found {c}"
            )));
        }
        Ok(())
    }

    /// Routed token-expert pairs of the busiest expert rank over the mean
    /// as the job states it: `moe_imbalance` for dropless routing,
    /// `min(moe_imbalance, c)` with a capacity factor c (tokens beyond
    /// capacity are dropped). The cost model also applies the random-routing
    /// floor of the layout's EP group ([`crate::cost::layer::moe_load`]).
    pub fn moe_load(&self) -> f64 {
        crate::cost::moe::expert_load(self.moe_imbalance, 1.0, self.moe_capacity_factor)
    }
}
