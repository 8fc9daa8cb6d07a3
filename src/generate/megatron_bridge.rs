//! Megatron-Bridge: the plan as `KEY=VALUE` overrides of one of its library
//! recipes, launched through its `scripts/training/train.sh`
//! ([ref:megatron-bridge-training]).
//!
//! Megatron-Bridge trains with Megatron-Core, so the plan's choices are the
//! ones the Megatron-LM script makes ([`super::megatron::megatron`]); this
//! module translates those flags, one table row per flag ([`FLAG_KEYS`]),
//! into the recipe's `ConfigContainer` fields (`model.*`, `train.*`,
//! `ddp.*`, `dist.*`, `checkpoint.*`, as `recipes/llama/h100/llama3.py`
//! sets them). The architecture comes from the recipe (which loads the
//! model's Hugging Face configuration), so the architecture flags are not
//! carried, and [`super::target::Target::refusals`] checks that the card
//! matches the recipe's model. A flag of the translated groups with no row
//! refuses the plan ([`untranslated`]) rather than being dropped.

use serde::Serialize;

use super::megatron::{self, Megatron};
use super::plan_file::Plan;
use crate::spec::{Fp8Recipe, Precision};

/// One `KEY=VALUE` override.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Override {
    /// The field, e.g. `model.tensor_model_parallel_size`.
    pub key: String,
    /// The value in Hydra's override grammar (`true`, `4`, `'E,t*3|t*3,L'`).
    pub value: String,
    /// Why, when the value needs a word.
    pub note: Option<String>,
}

impl Override {
    /// The override as one shell word, single-quoted.
    pub fn shell(&self) -> String {
        megatron::sh_quote(&format!("{}={}", self.key, self.value))
    }
}

/// How a Megatron-LM flag becomes overrides.
#[derive(Debug, Clone, Copy)]
pub enum Translate {
    /// Its value, as is, into these fields.
    Value(&'static [&'static str]),
    /// A switch: `true` into these fields.
    Switch(&'static [&'static str]),
    /// A switch: `false` into these fields.
    SwitchOff(&'static [&'static str]),
    /// Its value as a quoted string.
    Quoted(&'static str),
    /// Set by the recipe (architecture from the model's configuration,
    /// hyperparameters, data, logging) or by [`precision_preset`].
    Recipe,
}

use Translate::{Quoted, Recipe, Switch, SwitchOff, Value};

/// The Megatron-LM flags of the translated groups and their
/// Megatron-Bridge fields (field names of Megatron-Core's
/// `TransformerConfig`/`DistributedDataParallelConfig` and Bridge's
/// `ConfigContainer`, `src/megatron/bridge/training/config.py`).
#[rustfmt::skip]
pub const FLAG_KEYS: [(&str, Translate); 37] = [
    ("--tensor-model-parallel-size",           Value(&["model.tensor_model_parallel_size"])),
    ("--pipeline-model-parallel-size",         Value(&["model.pipeline_model_parallel_size"])),
    ("--context-parallel-size",                Value(&["model.context_parallel_size"])),
    ("--cp-comm-type",                         Value(&["model.cp_comm_type"])),
    ("--sequence-parallel",                    Switch(&["model.sequence_parallel"])),
    ("--tp-comm-overlap",                      Switch(&["model.tp_comm_overlap"])),
    ("--expert-model-parallel-size",           Value(&["model.expert_model_parallel_size"])),
    ("--expert-tensor-parallel-size",          Value(&["model.expert_tensor_parallel_size"])),
    ("--num-virtual-stages-per-pipeline-rank", Value(&["model.virtual_pipeline_model_parallel_size"])),
    ("--decoder-first-pipeline-num-layers",    Value(&["model.num_layers_in_first_pipeline_stage"])),
    ("--decoder-last-pipeline-num-layers",     Value(&["model.num_layers_in_last_pipeline_stage"])),
    ("--pipeline-model-parallel-layout",       Quoted("model.pipeline_model_parallel_layout")),
    ("--use-tp-pp-dp-mapping",                 Switch(&["dist.use_tp_pp_dp_mapping"])),
    ("--recompute-granularity",                Value(&["model.recompute_granularity"])),
    ("--recompute-method",                     Value(&["model.recompute_method"])),
    ("--recompute-num-layers",                 Value(&["model.recompute_num_layers"])),
    ("--use-distributed-optimizer",            Switch(&["ddp.use_distributed_optimizer",
                                                        "optimizer.use_distributed_optimizer"])),
    ("--use-megatron-fsdp",                    Switch(&["ddp.use_megatron_fsdp"])),
    ("--data-parallel-sharding-strategy",      Value(&["ddp.data_parallel_sharding_strategy"])),
    ("--overlap-grad-reduce",                  Switch(&["ddp.overlap_grad_reduce"])),
    ("--overlap-param-gather",                 Switch(&["ddp.overlap_param_gather"])),
    ("--micro-batch-size",                     Value(&["train.micro_batch_size"])),
    ("--global-batch-size",                    Value(&["train.global_batch_size"])),
    ("--grad-reduce-in-bf16",                  SwitchOff(&["ddp.grad_reduce_in_fp32"])),
    ("--moe-token-dispatcher-type",            Value(&["model.moe_token_dispatcher_type"])),
    ("--moe-grouped-gemm",                     Switch(&["model.moe_grouped_gemm"])),
    ("--moe-expert-capacity-factor",           Value(&["model.moe_expert_capacity_factor"])),
    ("--bf16",                                 Recipe),
    ("--fp8-format",                           Recipe),
    ("--fp8-recipe",                           Recipe),
    ("--fp8-amax-history-len",                 Recipe),
    ("--fp8-amax-compute-algo",                Recipe),
    ("--fp4-format",                           Recipe),
    ("--fp4-recipe",                           Recipe),
    ("--attention-backend",                    Recipe),
    // The preset's own choice, checked against the plan before rendering
    // (`target::bridge_precision_refusals`).
    ("--fp8-param-gather",                     Recipe),
    ("--fp4-param-gather",                     Recipe),
];

/// Flags of the translated groups that the recipe sets: hyperparameters
/// (the plan fixes none of them) and the MoE router, which comes with the
/// model's configuration.
const RECIPE_FLAGS: [&str; 17] = [
    "--train-iters",
    "--lr",
    "--lr-decay-style",
    "--weight-decay",
    "--adam-beta1",
    "--adam-beta2",
    "--clip-grad",
    "--num-experts",
    "--moe-router-topk",
    "--moe-router-pre-softmax",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--moe-router-score-function",
    "--moe-router-enable-expert-bias",
    "--moe-router-dtype",
    "--moe-router-load-balancing-type",
];

/// More router flags the recipe sets (the model's configuration).
const RECIPE_ROUTER_FLAGS: [&str; 4] = [
    "--moe-aux-loss-coeff",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--moe-router-topk-scaling-factor",
];

/// The Megatron script groups that carry the plan (the architecture, data
/// and logging groups come from the recipe and the launcher).
const TRANSLATED_GROUPS: [&str; 5] = [
    "MOE_ARGS",
    "TRAINING_ARGS",
    "PRECISION_ARGS",
    "MODEL_PARALLEL_ARGS",
    "DDP_ARGS",
];

/// A flag and its value from one script argument (`--tp 4` → (`--tp`,
/// `4`); a switch has an empty value).
fn flag_and_value(text: &str) -> (&str, &str) {
    match text.split_once(' ') {
        Some((f, v)) => (f, v.trim()),
        None => (text, ""),
    }
}

/// Megatron-Bridge's mixed-precision preset for the plan's precision
/// (`src/megatron/bridge/training/mixed_precision.py`: `bf16_mixed`,
/// `bf16_with_fp8_delayed_scaling_mixed`, `…_current_scaling_mixed`,
/// `…_subchannel_scaling_mixed` for 1×128/128×128 blocks, `…_mxfp8_mixed`,
/// `…_nvfp4_mixed`).
pub fn precision_preset(precision: Precision, recipe: Option<Fp8Recipe>) -> &'static str {
    match precision {
        Precision::Bf16 => "bf16_mixed",
        Precision::Fp8 => match recipe.unwrap_or_default() {
            Fp8Recipe::Delayed => "bf16_with_fp8_delayed_scaling_mixed",
            // Row-wise is refused for Megatron-Core targets before rendering.
            Fp8Recipe::Current | Fp8Recipe::Rowwise => "bf16_with_fp8_current_scaling_mixed",
            Fp8Recipe::Blockwise => "bf16_with_fp8_subchannel_scaling_mixed",
        },
        Precision::Mxfp8 => "bf16_with_mxfp8_mixed",
        Precision::Nvfp4 => "bf16_with_nvfp4_mixed",
    }
}

/// Flags of the translated groups with no Megatron-Bridge field in
/// [`FLAG_KEYS`] and not set by the recipe: the plan cannot be written for
/// Megatron-Bridge while any remain.
pub fn untranslated(m: &Megatron) -> Vec<String> {
    m.groups
        .iter()
        .filter(|g| TRANSLATED_GROUPS.contains(&g.name.as_str()))
        .flat_map(|g| &g.args)
        .map(|a| flag_and_value(&a.text).0)
        .filter(|f| {
            !FLAG_KEYS.iter().any(|(k, _)| k == f)
                && !RECIPE_FLAGS.contains(f)
                && !RECIPE_ROUTER_FLAGS.contains(f)
        })
        .map(str::to_string)
        .collect()
}

/// The overrides of `plan`, in the Megatron script's order, then the
/// sequence length, precision preset and checkpoint fields.
pub fn overrides(plan: &Plan) -> Vec<Override> {
    let m = megatron::megatron(plan);
    let mut out = Vec::new();
    let mut push = |key: &str, value: String, note: Option<String>| {
        out.push(Override {
            key: key.into(),
            value,
            note,
        })
    };
    for a in m
        .groups
        .iter()
        .filter(|g| TRANSLATED_GROUPS.contains(&g.name.as_str()))
        .flat_map(|g| &g.args)
    {
        let (flag, value) = flag_and_value(&a.text);
        let Some((_, how)) = FLAG_KEYS.iter().find(|(k, _)| *k == flag) else {
            continue;
        };
        match how {
            Value(keys) => {
                for k in *keys {
                    push(k, value.trim_matches('\'').to_string(), a.note.clone());
                }
            }
            Switch(keys) => {
                for k in *keys {
                    push(k, "true".into(), a.note.clone());
                }
            }
            SwitchOff(keys) => {
                for k in *keys {
                    push(k, "false".into(), a.note.clone());
                }
            }
            Quoted(k) => push(
                k,
                format!("\"{}\"", value.trim_matches('\'')),
                a.note.clone(),
            ),
            Recipe => {}
        }
        if flag == "--recompute-granularity" && value == "selective" {
            push(
                "model.recompute_modules",
                "[core_attn]".into(),
                Some("recompute the attention core only, as priced".into()),
            );
        }
    }
    // What the Megatron script's other groups set and the recipe would
    // otherwise fix differently.
    let mesh = &plan.mesh;
    if mesh.vpp == 1 {
        push(
            "model.virtual_pipeline_model_parallel_size",
            "null".into(),
            Some("no interleaving (recipes may set one)".into()),
        );
    }
    if !matches!(megatron::split(plan), megatron::Split::Layout { .. }) {
        push("model.pipeline_model_parallel_layout", "null".into(), None);
    } else if mesh.vpp > 1 {
        // The Megatron script leaves v to the layout (Megatron-LM derives
        // it), but a recipe's own v would stay beside it, and Megatron-Core's
        // TransformerConfig asserts that the two agree (the 70B recipe
        // sets 5).
        push(
            "model.virtual_pipeline_model_parallel_size",
            mesh.vpp.to_string(),
            Some(format!(
                "v = {}, as the layout's {} stages over p = {} imply",
                mesh.vpp,
                mesh.vpp * mesh.pp,
                mesh.pp
            )),
        );
    }
    if plan.recompute.mode == crate::layout::Recompute::None {
        push("model.recompute_granularity", "null".into(), None);
    }
    match plan.sharding.zero {
        0 => {
            push("ddp.use_distributed_optimizer", "false".into(), None);
            push("optimizer.use_distributed_optimizer", "false".into(), None);
            push("ddp.use_megatron_fsdp", "false".into(), None);
        }
        1 => push("ddp.use_megatron_fsdp", "false".into(), None),
        _ => {}
    }
    if plan.rank_order.order != crate::layout::RankOrder::TpCpEpPpDp {
        push("dist.use_tp_pp_dp_mapping", "false".into(), None);
    }
    push(
        "comm_overlap",
        "null".into(),
        Some("no CommOverlapConfig: its setup would switch on TP overlap with SP, which the plan does not price".into()),
    );
    // The recipe's MTP depth replaced by the card's, which the plan priced
    // (the DeepSeek-V3 recipe sets one MTP layer; a card without MTP clears
    // it).
    match plan.model.mtp_layers {
        0 => push(
            "model.mtp_num_layers",
            "null".into(),
            Some(format!(
                "the card {} has no multi-token prediction, and the plan prices none",
                plan.model.name
            )),
        ),
        d => {
            push(
                "model.mtp_num_layers",
                d.to_string(),
                Some("multi-token prediction layers from the model card, priced on the last pipeline stage".into()),
            );
            if let Some(w) = plan.model.mtp_loss_scale {
                push(
                    "model.mtp_loss_scaling_factor",
                    w.to_string(),
                    Some("MTP loss weight from the model card".into()),
                );
            }
        }
    }
    // The plan's split counts transformer layers only; the 405B and
    // Qwen3-235B recipes count the embedding and loss as stages of the
    // split, which Megatron rejects beside first/last counts or a layout.
    push(
        "model.account_for_embedding_in_pipeline_split",
        "false".into(),
        Some("the plan's split counts transformer layers only".into()),
    );
    push(
        "model.account_for_loss_in_pipeline_split",
        "false".into(),
        None,
    );
    push(
        "model.cuda_graph_impl",
        "none".into(),
        Some("meshplan prices no CUDA graphs (the Qwen3-30B recipe captures some)".into()),
    );
    // Megatron's 2/4/12 recipe, which Bridge refuses otherwise: fp32 main
    // gradients, parameters and Adam moments (the DeepSeek-V3 recipe keeps
    // them in bf16 through the precision-aware optimizer).
    push(
        "optimizer.use_precision_aware_optimizer",
        "false".into(),
        None,
    );
    for k in [
        "optimizer.main_grads_dtype",
        "optimizer.main_params_dtype",
        "optimizer.exp_avg_dtype",
        "optimizer.exp_avg_sq_dtype",
    ] {
        push(k, "torch.float32".into(), None);
    }
    push("model.seq_length", plan.job.seq_len.to_string(), None);
    push("dataset.seq_length", plan.job.seq_len.to_string(), None);
    push(
        "mixed_precision",
        precision_preset(plan.job.precision, plan.job.fp8_recipe).into(),
        Some("Megatron-Bridge's preset for the precision the plan priced".into()),
    );
    push(
        "checkpoint.save_interval",
        plan.predicted.checkpoint.interval_steps.to_string(),
        Some("Daly's interval, as in the Megatron script".into()),
    );
    push(
        "checkpoint.ckpt_format",
        if m.fsdp { "fsdp_dtensor" } else { "torch_dist" }.into(),
        None,
    );
    out
}
