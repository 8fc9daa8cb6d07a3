//! Which training software the launch files are written for
//! (`generate --target`), what each can express, and the files each writes.
//!
//! Every target reads the same engine-neutral [`Plan`]; a target that cannot
//! express a plan refuses it with the reason ([`Target::refusals`]) rather
//! than writing files that would train another layout. When `generate` picks
//! the layout itself, the search is first limited to what the target can
//! run ([`Target::limit_search`]), so `--target deepspeed` gives the best
//! plan DeepSpeed can launch, not a refusal of the overall best.

use crate::layout::{Layout, Recompute};
use crate::search::Space;
use crate::spec::{Fp8Kernels, Fp8Recipe, Model, Precision};

use super::Refusal;

/// A training program `generate` writes launch files for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Target {
    /// Megatron-LM's `pretrain_gpt.py` with a torchrun script and a SLURM
    /// batch script (the default).
    #[default]
    Megatron,
    /// torchtitan: a Python configuration function returning a
    /// `Trainer.Config` (its current configuration mechanism,
    /// [ref:torchtitan-config]), started with torchrun.
    Torchtitan,
    /// Megatron-Bridge: one of its library recipes with `KEY=VALUE`
    /// overrides of the recipe's `ConfigContainer`, through its
    /// `scripts/training/train.sh` ([ref:megatron-bridge-training]).
    MegatronBridge,
    /// DeepSpeed: a `ds_config.json` and a `deepspeed` launcher script for a
    /// training script of the user's that calls `deepspeed.initialize`
    /// (data parallelism with ZeRO; no tensor, pipeline, context or expert
    /// parallelism, which need Megatron-DeepSpeed or model code).
    Deepspeed,
}

crate::names::named!(Target, "launch target", [Megatron => "megatron", Torchtitan => "torchtitan", MegatronBridge => "megatron-bridge" | "bridge", Deepspeed => "deepspeed"]);

/// A model torchtitan or Megatron-Bridge ships a configuration for: the
/// card it matches, the upstream names, and the architecture the upstream
/// configuration builds (checked against the card, so a card edited away
/// from the upstream model is refused instead of launched as another
/// model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpstreamModel {
    /// meshplan card name.
    pub card: &'static str,
    /// torchtitan model package (`torchtitan.models.<package>`), if it has one.
    pub torchtitan_package: Option<&'static str>,
    /// torchtitan configuration function in that package's
    /// `config_registry.py`.
    pub torchtitan_config: Option<&'static str>,
    /// torchtitan `model_registry` flavor.
    pub torchtitan_flavor: Option<&'static str>,
    /// Megatron-Bridge library pre-training recipe.
    pub bridge_recipe: Option<&'static str>,
    /// Transformer layers, hidden size, attention heads, KV heads,
    /// vocabulary of the upstream model.
    pub shape: (u32, u64, u32, u32, u64),
}

/// The models with upstream configurations. Shapes: torchtitan
/// `torchtitan/models/llama3/__init__.py` `_8b`/`_70b`/`_405b` and the
/// Hugging Face configurations of Llama 3/3.1 8B, 70B, 405B, DeepSeek-V3,
/// Qwen3-30B-A3B and Qwen3-235B-A22B, which Megatron-Bridge's recipes load
/// (`AutoBridge.from_hf_pretrained`, e.g. `recipes/llama/h100/llama3.py`).
pub const UPSTREAM_MODELS: [UpstreamModel; 6] = [
    UpstreamModel {
        card: "llama3-8b",
        torchtitan_package: Some("llama3"),
        torchtitan_config: Some("llama3_8b"),
        torchtitan_flavor: Some("8B"),
        bridge_recipe: Some("llama3_8b_pretrain_config"),
        shape: (32, 4096, 32, 8, 128256),
    },
    UpstreamModel {
        card: "llama3-70b",
        torchtitan_package: Some("llama3"),
        torchtitan_config: Some("llama3_70b"),
        torchtitan_flavor: Some("70B"),
        bridge_recipe: Some("llama3_70b_pretrain_config"),
        shape: (80, 8192, 64, 8, 128256),
    },
    UpstreamModel {
        card: "llama3-405b",
        torchtitan_package: Some("llama3"),
        torchtitan_config: Some("llama3_405b"),
        torchtitan_flavor: Some("405B"),
        bridge_recipe: Some("llama31_405b_pretrain_config"),
        shape: (126, 16384, 128, 8, 128256),
    },
    UpstreamModel {
        card: "deepseek-v3",
        torchtitan_package: Some("deepseek_v3"),
        torchtitan_config: Some("deepseek_v3_671b"),
        torchtitan_flavor: Some("671B"),
        bridge_recipe: Some("deepseek_v3_pretrain_config"),
        shape: (61, 7168, 128, 128, 129280),
    },
    UpstreamModel {
        card: "qwen3-30b-a3b",
        torchtitan_package: Some("qwen3"),
        torchtitan_config: Some("qwen3_30b_a3b"),
        torchtitan_flavor: Some("30B-A3B"),
        bridge_recipe: Some("qwen3_30b_a3b_pretrain_config"),
        shape: (48, 2048, 32, 4, 151936),
    },
    UpstreamModel {
        card: "qwen3-235b-a22b",
        torchtitan_package: None,
        torchtitan_config: None,
        torchtitan_flavor: None,
        bridge_recipe: Some("qwen3_235b_a22b_pretrain_config"),
        shape: (94, 4096, 64, 4, 151936),
    },
];

/// The upstream entry of `model`, if its card has one.
pub fn upstream(model: &Model) -> Option<&'static UpstreamModel> {
    UPSTREAM_MODELS.iter().find(|u| u.card == model.name)
}

fn refusal(code: &str, message: String, remedy: &str) -> Refusal {
    Refusal {
        code: code.into(),
        message,
        remedy: remedy.into(),
    }
}

/// What Megatron-Bridge's mixed-precision presets
/// ([`super::megatron_bridge::precision_preset`]) fix that the plan may
/// have priced otherwise: the recipes hold the preset by name, and its
/// `setup` copies every field onto the model, optimizer and DDP configs
/// (`training/mixed_precision.py`), so the overrides cannot change them.
fn bridge_precision_refusals(job: &crate::spec::Job) -> Vec<Refusal> {
    use crate::spec::RecipeName;
    let preset = super::megatron_bridge::precision_preset(job.precision, Some(job.fp8_recipe));
    // Low-precision parameter gathers the preset does: the FP8 delayed,
    // current and MXFP8 presets gather FP8, the NVFP4 preset FP4, the
    // sub-channel (blockwise) preset none.
    let gathers = match job.precision {
        Precision::Bf16 => false,
        Precision::Fp8 => job.fp8_recipe != Fp8Recipe::Blockwise,
        Precision::Mxfp8 | Precision::Nvfp4 => true,
    };
    let checks = [
        (
            job.recipe_name != RecipeName::Megatron,
            "bridge-precision",
            format!("the {} recipe: Megatron-Bridge's {preset} preset reduces gradients in fp32 (grad_reduce_in_fp32) whatever the overrides say", job.recipe_name),
            "plan with --recipe megatron, or use --target megatron",
        ),
        (
            job.precision.is_low() && job.fp8_param_gather != gathers,
            "bridge-precision",
            format!("Megatron-Bridge's {preset} preset {} parameters in the low-precision format, and the plan was priced {}", if gathers { "all-gathers" } else { "does not all-gather" }, if job.fp8_param_gather { "with --fp8-param-gather" } else { "without it" }),
            if gathers { "plan with --fp8-param-gather" } else { "plan without --fp8-param-gather" },
        ),
        (
            job.precision == Precision::Fp8 && job.fp8_recipe == Fp8Recipe::Current,
            "bridge-precision",
            format!("Megatron-Bridge's {preset} preset keeps the first and last transformer layers in bf16; the plan prices every layer in FP8"),
            "use --target megatron (its flags run every layer in FP8), or another FP8 recipe",
        ),
        (
            job.tp_comm_overlap,
            "bridge-tp-overlap",
            "the plan overlaps TP communication with GEMMs; Megatron-Bridge sets that up through the recipe's CommOverlapConfig (userbuffers), which these overrides do not write".to_string(),
            "plan without --tp-comm-overlap, or use --target megatron",
        ),
    ];
    let mut out = Vec::new();
    push_broken(&mut out, checks);
    out
}

/// Push a refusal for every check whose condition holds: (broken, code,
/// message, remedy).
fn push_broken<const N: usize>(out: &mut Vec<Refusal>, checks: [Check; N]) {
    for (broken, code, message, remedy) in checks {
        if broken {
            out.push(refusal(code, message, remedy));
        }
    }
}

/// A check for [`push_broken`]: (broken, code, message, remedy).
type Check = (bool, &'static str, String, &'static str);

/// The check that refuses a card with multi-token-prediction layers, which
/// the plan prices, for a target whose files cannot add them (`why_not`
/// says why).
fn mtp_check(model: &Model, code: &'static str, why_not: &str) -> Check {
    let d = model.architecture.mtp_layers;
    (
        d > 0,
        code,
        format!(
            "{} trains {d} multi-token-prediction layer(s), which the plan prices; {why_not}",
            model.name
        ),
        "use --target megatron or megatron-bridge",
    )
}

/// The check that refuses selective recompute (the attention core only,
/// as priced here) for a target that has no such policy (`message`).
fn selective_check(l: &Layout, code: &'static str, message: &str) -> Check {
    (
        l.recompute == Recompute::Selective,
        code,
        message.to_string(),
        "plan with --recompute full or none",
    )
}

/// Why the card differs from the upstream model's shape, if it does.
fn shape_mismatch(model: &Model, u: &UpstreamModel) -> Option<String> {
    let a = &model.architecture;
    let card = (a.layers, a.hidden, a.heads, a.kv_heads, a.vocab);
    (card != u.shape).then(|| {
        format!(
            "the card {} has (layers, hidden, heads, KV heads, vocabulary) = {:?}, the upstream configuration builds {:?}",
            model.name, card, u.shape
        )
    })
}

impl Target {
    /// The files this target writes, in order; `plan.json` and
    /// `CHECKLIST.md` for every target.
    pub fn files(self) -> &'static [&'static str] {
        use super::{
            BRIDGE_SCRIPT, CHECKLIST, DEEPSPEED_CONFIG, DEEPSPEED_SCRIPT, MEGATRON_SCRIPT,
            PLAN_FILE, SLURM_SCRIPT, TORCHTITAN_CONFIG, TORCHTITAN_SCRIPT,
        };
        match self {
            Target::Megatron => &[MEGATRON_SCRIPT, SLURM_SCRIPT, PLAN_FILE, CHECKLIST],
            Target::Torchtitan => &[TORCHTITAN_CONFIG, TORCHTITAN_SCRIPT, PLAN_FILE, CHECKLIST],
            Target::MegatronBridge => &[BRIDGE_SCRIPT, PLAN_FILE, CHECKLIST],
            Target::Deepspeed => &[DEEPSPEED_CONFIG, DEEPSPEED_SCRIPT, PLAN_FILE, CHECKLIST],
        }
    }

    /// Whether the target runs on Megatron-Core, so Megatron-LM's launch
    /// checks ([`super::megatron_refusals`]) apply to it.
    pub fn is_megatron_core(self) -> bool {
        matches!(self, Target::Megatron | Target::MegatronBridge)
    }

    /// Set what `job` assumes of the training program to this target's
    /// behaviour, so its plan is priced as the target will run it (the
    /// defaults are Megatron-LM's, which Megatron-Bridge shares):
    /// - torchtitan (PyTorch FSDP2, as `validate` prices its rows): gathers
    ///   and reductions overlapped, FlashAttention-2 through SDPA, PyTorch's
    ///   `context_parallel`, the embedding and output layer as FSDP2's root
    ///   unit, fp32 shards only (the model is fp32 and FSDP2 casts at the
    ///   gather), the compiled loss, and torchao's low-precision linears
    ///   (torchtitan has no Transformer Engine path), and the interleaved
    ///   schedule's sends hidden in both directions: PyTorch's
    ///   `ScheduleInterleaved1F1B` runs on `_PipelineScheduleRuntime`, whose
    ///   `_step_microbatches` posts every send asynchronously and waits for
    ///   the sends only at the end of the step, and waits for a receive just
    ///   before the compute that reads it ([ref:pytorch-pipelining]);
    /// - DeepSpeed: ZeRO-3's gather and reduce limits at the values
    ///   [`super::deepspeed::config`] writes.
    pub fn engine_job(self, job: &mut crate::spec::Job) {
        use crate::spec::{DeepSpeedZero3, LossBuffers};
        match self {
            Target::Megatron | Target::MegatronBridge => {}
            Target::Torchtitan => {
                job.pytorch_fsdp2();
                job.fp8_kernels = Fp8Kernels::Torchao;
                job.engine_memory.fp32_shards_only = true;
                job.engine_memory.loss = LossBuffers::TorchCompiled;
                job.overlap_p2p_comm = true;
                job.p2p_forward_send_waits = false;
            }
            Target::Deepspeed => {
                use super::deepspeed::{BUCKET_ELEMENTS, ZERO3_MAX_LIVE, ZERO3_PREFETCH};
                job.deepspeed_dp = true;
                job.engine_memory.deepspeed_zero3 = Some(DeepSpeedZero3 {
                    max_live: ZERO3_MAX_LIVE as f64,
                    prefetch_bucket: ZERO3_PREFETCH as f64,
                    reduce_bucket: BUCKET_ELEMENTS as f64,
                    // Today's DeepSpeed coalesces and overlaps its gathers.
                    per_tensor_sync: false,
                    persistence_threshold: DeepSpeedZero3::default_persistence_threshold(),
                    max_reuse_distance: DeepSpeedZero3::default_max_reuse_distance(),
                });
            }
        }
    }

    /// A job setting that widens what [`Target::limit_search`] leaves for
    /// this target, when the job does not use it already: DeepSpeed runs
    /// `--recipe deepspeed` at every ZeRO stage and the megatron recipe at
    /// ZeRO-1 only, and with T = p = 1 a large model fits only with its
    /// parameters or gradients sharded.
    pub fn widening_hint(self, recipe: crate::spec::RecipeName) -> Option<&'static str> {
        match (self, recipe) {
            (Target::Deepspeed, crate::spec::RecipeName::Megatron) => Some(
                "--recipe deepspeed (DeepSpeed's bf16 gradients with an fp32 copy for the step) lets the search try ZeRO-0, ZeRO-2 and ZeRO-3",
            ),
            _ => None,
        }
    }

    /// The limits [`Target::limit_search`] sets, in words.
    pub fn search_limits(self) -> &'static str {
        match self {
            Target::Megatron | Target::MegatronBridge => "every layout",
            Target::Torchtitan => {
                "ZeRO 0, 2 or 3, ETP = 1, rank order tp-cp-ep-dp-pp, all-gather K/V exchange, no selective recompute"
            }
            Target::Deepspeed => {
                "T = p = C = E = 1, no selective recompute, the ZeRO stages at which DeepSpeed keeps the recipe's gradients (megatron: 1; deepspeed: 0 to 3)"
            }
        }
    }

    /// Limit a search to the layouts this target can express (sizes, ZeRO
    /// stages, recompute modes); [`Target::refusals`] states the rest. A
    /// value the user fixed (`--fix tp=4`) is kept, and the refusals then
    /// say why no layout can be written.
    pub fn limit_search(self, space: &mut Space, recipe: crate::spec::RecipeName) {
        use crate::spec::RecipeName;
        match self {
            Target::Megatron | Target::MegatronBridge => {}
            Target::Torchtitan => {
                // FSDP2 (ZeRO-3), FSDP2 without resharding after forward
                // (ZeRO-2) and DDP (ZeRO-0); no optimizer-only sharding.
                space.zero_stages.retain(|z| *z != 1);
                space.filter.etp.get_or_insert(1);
                // torchtitan's mesh order is pp, dp_replicate, dp_shard,
                // cp, tp (`parallel_dims.py`): meshplan's tp-cp-ep-dp-pp.
                space
                    .filter
                    .order
                    .get_or_insert(crate::layout::RankOrder::TpCpEpDpPp);
                // PyTorch's context_parallel rotates K/V by all-gather
                // unless told otherwise, and torchtitan has no option for it.
                space
                    .filter
                    .cp_comm
                    .get_or_insert(crate::layout::CpComm::AllGather);
                // Its SelectiveAC is a per-op policy, not the attention-core
                // recompute priced here (the `torchtitan-recompute` refusal).
                space.recompute_modes.retain(|r| *r != Recompute::Selective);
            }
            Target::Deepspeed => {
                for size in [
                    &mut space.filter.tp,
                    &mut space.filter.pp,
                    &mut space.filter.cp,
                    &mut space.filter.ep,
                ] {
                    size.get_or_insert(1);
                }
                space.recompute_modes.retain(|r| *r != Recompute::Selective);
                // The ZeRO stages at which DeepSpeed keeps the recipe's
                // gradient bytes (see the `deepspeed-recipe` refusals;
                // adam-16b is refused whatever the stage).
                let stages: &[u8] = match recipe {
                    RecipeName::Megatron => &[1],
                    RecipeName::Adam16b | RecipeName::Deepspeed => &[0, 1, 2, 3],
                };
                space.zero_stages.retain(|z| stages.contains(z));
            }
        }
    }

    /// Why `model` under `job` cannot be written for this target whatever
    /// the layout (no upstream configuration of the card, a precision the
    /// target cannot express).
    pub fn model_refusals(self, model: &Model, job: &crate::spec::Job) -> Vec<Refusal> {
        let mut out = Vec::new();
        let (code, upstream_name, remedy) = match self {
            Target::Megatron => return out,
            Target::Deepspeed => {
                let checks = [
                    (
                        model.moe.is_some(),
                        "deepspeed-moe",
                        format!(
                            "{} is a mixture of experts; DeepSpeed-MoE layers are part of the model code, which these files do not write",
                            model.name
                        ),
                        // torchtitan refuses multi-token-prediction layers
                        // and cards it has no configuration for.
                        if model.architecture.mtp_layers == 0
                            && upstream(model).is_some_and(|u| u.torchtitan_config.is_some())
                        {
                            "use --target megatron or torchtitan"
                        } else {
                            "use --target megatron"
                        },
                    ),
                    mtp_check(
                        model,
                        "deepspeed-mtp",
                        "DeepSpeed's configuration cannot add them (they are model code, which these files do not write)",
                    ),
                    (
                        job.recipe_name == crate::spec::RecipeName::Adam16b,
                        "deepspeed-recipe",
                        "the adam-16b recipe (bf16 gradients and nothing more) is not one DeepSpeed runs: with bf16 gradients every DeepSpeed optimizer copies them to fp32 for the step (FP16_Optimizer.step without ZeRO, stage_1_and_2.py step at ZeRO-1/2, stage3.py at ZeRO-3), which is the deepspeed recipe".to_string(),
                        "plan with --recipe deepspeed",
                    ),
                    (
                        job.precision.is_low(),
                        "deepspeed-precision",
                        format!(
                            "precision {}: DeepSpeed's configuration has no low-precision GEMM recipe (its fp16/bf16 sections set the training dtype)",
                            job.precision
                        ),
                        "plan with --precision bf16",
                    ),
                ];
                push_broken(&mut out, checks);
                return out;
            }
            Target::MegatronBridge => (
                "bridge-model",
                upstream(model).and_then(|u| u.bridge_recipe.map(|_| u)),
                "use --target megatron, or one of the cards with a recipe: llama3-8b, llama3-70b, llama3-405b, deepseek-v3, qwen3-30b-a3b, qwen3-235b-a22b",
            ),
            Target::Torchtitan => (
                "torchtitan-model",
                upstream(model).and_then(|u| u.torchtitan_config.map(|_| u)),
                "use --target megatron, or one of llama3-8b, llama3-70b, llama3-405b, deepseek-v3, qwen3-30b-a3b",
            ),
        };
        match upstream_name {
            None => out.push(refusal(
                code,
                format!(
                    "{self} has no configuration meshplan maps to the card {}",
                    model.name
                ),
                remedy,
            )),
            Some(u) => {
                if let Some(why) = shape_mismatch(model, u) {
                    out.push(refusal(
                        code,
                        why,
                        "use --target megatron, which writes the card's architecture flag by flag",
                    ));
                }
            }
        }
        match self {
            Target::MegatronBridge => out.extend(bridge_precision_refusals(job)),
            Target::Torchtitan => {
                let checks = [
                    (
                        job.precision == Precision::Fp8 && job.fp8_recipe != Fp8Recipe::Rowwise,
                        "torchtitan-precision",
                        format!(
                            "FP8 with {} scaling: torchtitan's Float8LinearConverter takes only the row-wise recipes (`recipe_name: Literal[\"rowwise\", \"rowwise_with_gw_hp\"]`, torchtitan/components/quantization/float8.py; tensorwise scaling and its float8 FSDP all-gather were removed in pytorch/torchtitan#3127, the converter-on-config API meshplan writes)",
                            job.fp8_recipe
                        ),
                        "plan with --fp8-recipe rowwise",
                    ),
                    (
                        job.precision.is_low() && model.moe.is_some(),
                        "torchtitan-precision",
                        format!("precision {} on a mixture of experts: meshplan writes torchtitan's converters for dense linears only, and the experts need its grouped-experts converter", job.precision),
                        "plan with --precision bf16, or use --target megatron",
                    ),
                    (
                        job.precision.is_low() && job.fp8_param_gather,
                        "torchtitan-precision",
                        "--fp8-param-gather: torchtitan's row-wise float8 gathers FSDP parameters in bf16".to_string(),
                        "plan without --fp8-param-gather",
                    ),
                    mtp_check(
                        model,
                        "torchtitan-mtp",
                        "torchtitan's configuration for it (deepseek_v3_671b at b5bcd76) builds no MTP module: its MTP is a model_registry argument left at 0 there, and it rejects pipeline and context parallelism (torchtitan/models/deepseek_v3/MTP.md)",
                    ),
                    (
                        job.recipe_name != crate::spec::RecipeName::Megatron,
                        "torchtitan-recipe",
                        format!("the {} recipe: torchtitan keeps fp32 parameters and reduces gradients in fp32 only (`mixed_precision_reduce`, torchtitan/config/configs.py)", job.recipe_name),
                        "plan with --recipe megatron",
                    ),
                ];
                push_broken(&mut out, checks);
            }
            _ => {}
        }
        out
    }

    /// Every reason layout `l` of `model` under `job` cannot be written for
    /// this target, beyond meshplan's rules and Megatron-LM's launch checks:
    /// [`Target::model_refusals`], then the layout's own.
    pub fn refusals(self, model: &Model, job: &crate::spec::Job, l: &Layout) -> Vec<Refusal> {
        let mut out = self.model_refusals(model, job);
        match self {
            Target::Megatron | Target::MegatronBridge => {}
            Target::Torchtitan => {
                // FSDP2 shards over dp_shard·cp (DDP: dp_shard = 1), and the
                // expert mesh re-slices dp_shard·cp·tp as EP × expert FSDP
                // (`torchtitan/distributed/parallel_dims.py`).
                let shard = if l.zero == 0 { 1 } else { l.dp };
                let dense = shard as u64 * l.cp as u64 * l.tp as u64;
                let checks = [
                    (
                        l.zero == 1,
                        "torchtitan-zero",
                        "ZeRO-1 (optimizer states sharded, parameters and gradients replicated) has no torchtitan form: it shards with FSDP2 (ZeRO-3, or ZeRO-2 without resharding after forward) or replicates with DDP".to_string(),
                        "plan with --zero 0, 2 or 3",
                    ),
                    (
                        l.etp > 1,
                        "torchtitan-etp",
                        format!("ETP = {}: torchtitan has no expert tensor parallelism (its expert mesh is EP × expert FSDP, torchtitan/config/configs.py)", l.etp),
                        "plan with --etp 1",
                    ),
                    (
                        l.order != crate::layout::RankOrder::TpCpEpDpPp,
                        "torchtitan-order",
                        format!("rank order {}: torchtitan builds its mesh in one order, pp outermost, then data, context and tensor parallel (tp-cp-ep-dp-pp)", l.order),
                        "plan with --order tp-cp-ep-dp-pp",
                    ),
                    (
                        model.moe.is_some() && !dense.is_multiple_of(l.ep.max(1) as u64),
                        "torchtitan-ep",
                        format!("E = {} does not divide dp_shard·C·T = {dense}: torchtitan carves expert parallelism out of the FSDP, CP and TP ranks (torchtitan/distributed/parallel_dims.py; ZeRO-0 shards over no data-parallel rank)", l.ep),
                        "plan with ZeRO-2/3 or an E that divides D·C·T",
                    ),
                    (
                        l.cp > 1 && l.cp_comm != crate::layout::CpComm::AllGather,
                        "torchtitan-cp",
                        format!("C = {} with the {} exchange: PyTorch's context_parallel, which torchtitan runs, rotates K/V by all-gather and torchtitan has no option to change it", l.cp, l.cp_comm),
                        "plan with --cp-comm all-gather",
                    ),
                    (
                        l.zero == 0 && l.cp > 1,
                        "torchtitan-zero",
                        format!("ZeRO-0 with C = {}: torchtitan shards parameters over dp_shard·cp, so DDP with context parallelism still shards over the CP ranks", l.cp),
                        "plan with --zero 3, or C = 1",
                    ),
                    selective_check(
                        l,
                        "torchtitan-recompute",
                        "selective recompute as priced here recomputes the attention core only; torchtitan's SelectiveAC is a per-op policy that saves other tensors (torchtitan/distributed/activation_checkpoint.py)",
                    ),
                ];
                push_broken(&mut out, checks);
            }
            Target::Deepspeed => {
                for (axis, size, flag) in [
                    ("T", l.tp, "--tp 1"),
                    ("p", l.pp, "--pp 1"),
                    ("C", l.cp, "--cp 1"),
                    ("E", l.ep, "--ep 1"),
                ] {
                    if size > 1 {
                        out.push(refusal(
                            "deepspeed-mesh",
                            format!("{axis} = {size}: DeepSpeed alone parallelizes over data (ZeRO); tensor, pipeline, context and expert parallelism need Megatron-DeepSpeed or model code"),
                            flag,
                        ));
                    }
                }
                let checks = [
                    (
                        l.zero == 0 && job.recipe_name == crate::spec::RecipeName::Megatron,
                        "deepspeed-recipe",
                        format!(
                            "ZeRO-0 with the {} recipe: without ZeRO DeepSpeed accumulates gradients only in the model's dtype (engine.py `_do_optimizer_sanity_check` rejects bf16 weights with fp32 accumulation)",
                            job.recipe_name
                        ),
                        "plan with --recipe deepspeed, or ZeRO 1",
                    ),
                    (
                        l.zero >= 2 && job.recipe_name == crate::spec::RecipeName::Megatron,
                        "deepspeed-recipe",
                        format!(
                            "ZeRO-{} with the {} recipe: DeepSpeed's ZeRO-2/3 keeps the gradients in the model's dtype (2 bytes) and copies its shard to an fp32 partition for the step, which is the deepspeed recipe (2/(2+4)/12 bytes)",
                            l.zero, job.recipe_name
                        ),
                        "plan with --recipe deepspeed",
                    ),
                    selective_check(
                        l,
                        "deepspeed-recompute",
                        "selective recompute (the attention core only) is model code; DeepSpeed's activation checkpointing recomputes whole checkpointed functions",
                    ),
                ];
                push_broken(&mut out, checks);
            }
        }
        out
    }
}
