//! torchtitan: the plan as a Python configuration function, torchtitan's
//! configuration mechanism since its configs moved from TOML files to
//! functions returning a `Trainer.Config` ([ref:torchtitan-config]). The
//! function starts from torchtitan's own configuration of the model
//! (`torchtitan/models/<package>/config_registry.py`, e.g. `llama3_70b`)
//! and sets the fields the plan fixes; `run_train.sh` or torchrun selects
//! it with `--module` and `--config`.
//!
//! Field names and meanings (`torchtitan/config/configs.py` at b5bcd76,
//! 2026-08):
//! - data parallelism: `data_parallel_shard_degree` (FSDP2) and
//!   `data_parallel_replicate_degree` (DDP); ZeRO-3 is FSDP2, ZeRO-2 is
//!   FSDP2 with `fsdp_reshard_after_forward = "never"` (parameters stay
//!   gathered from forward to backward), ZeRO-0 is DDP;
//! - `training.num_tokens_per_microbatch_per_dp_rank` = b·s, and
//!   `training.num_tokens_per_train_step` = B·s, so the step runs
//!   B/(D·b) micro-batches: all of them in one pipeline round
//!   (`num_pp_microbatches` = m) when p > 1, by gradient accumulation
//!   otherwise;
//! - pipeline stages as explicit module lists (`module_fqns_per_model_part`:
//!   `tok_embeddings`, `layers.N`, `norm`, `lm_head`,
//!   `torchtitan/distributed/pipeline_parallel.py`), stage k on pipeline
//!   rank k mod p, with the `1F1B` or `Interleaved1F1B` schedule.

use super::plan_file::Plan;
use super::target::UpstreamModel;
use crate::layout::Recompute;
use crate::spec::Precision;

/// One assignment in the configuration function.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Assignment {
    /// Python target, e.g. `config.parallelism.tensor_parallel_degree`.
    pub target: String,
    /// Python expression.
    pub value: String,
    /// Comment, when the value needs a word.
    pub note: Option<String>,
}

/// What the configuration module holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Torchtitan {
    /// `from … import …` lines.
    pub imports: Vec<String>,
    /// The upstream configuration function the plan starts from.
    pub base: String,
    /// The assignments, in order.
    pub assignments: Vec<Assignment>,
    /// The configuration function's name (`--config`).
    pub function: String,
    /// The configuration module's name (`--module`).
    pub module: String,
}

/// Name of the generated configuration function.
pub const FUNCTION: &str = "meshplan_plan";

fn py_bool(b: bool) -> String {
    if b { "True" } else { "False" }.into()
}

/// The module lists of the pipeline stages, in model order: the embedding
/// on the first, the final norm and output layer on the last.
pub fn stage_modules(plan: &Plan) -> Vec<Vec<String>> {
    plan.model_chunks()
        .iter()
        .map(|c| {
            let mut m = Vec::new();
            if c.embedding {
                m.push("tok_embeddings".to_string());
            }
            m.extend((c.first_layer..c.end_layer).map(|i| format!("layers.{i}")));
            if c.output {
                m.push("norm".into());
                m.push("lm_head".into());
            }
            m
        })
        .collect()
}

/// The configuration of `plan`, starting from `up`'s torchtitan
/// configuration (the caller has checked that it has one).
pub fn torchtitan(plan: &Plan, up: &UpstreamModel) -> Torchtitan {
    let package = up.torchtitan_package.unwrap_or("llama3");
    let base = up.torchtitan_config.unwrap_or("llama3_8b").to_string();
    let mesh = &plan.mesh;
    let job = &plan.job;
    let mut imports = vec![
        "from torchtitan.trainer import Trainer".to_string(),
        format!("from torchtitan.models.{package}.config_registry import {base}"),
    ];
    let mut a = Vec::new();
    let mut set = |target: &str, value: String, note: Option<&str>| {
        a.push(Assignment {
            target: target.into(),
            value,
            note: note.map(str::to_string),
        })
    };
    let (shard, replicate, reshard) = match plan.sharding.zero {
        0 => (1, mesh.dp, None),
        2 => (mesh.dp, 1, Some("never")),
        // "always": torchtitan's "default" keeps the parameters gathered
        // after forward when p > 1 (`torchtitan/distributed/fsdp.py`), which
        // is ZeRO-2's memory.
        _ => (mesh.dp, 1, Some("always")),
    };
    let p = "config.parallelism";
    set(
        &format!("{p}.data_parallel_shard_degree"),
        shard.to_string(),
        Some(match plan.sharding.zero {
            0 => "ZeRO-0: parameters replicated (DDP)",
            2 => "ZeRO-2: FSDP2 shards, parameters kept gathered through backward",
            _ => "ZeRO-3: FSDP2",
        }),
    );
    set(
        &format!("{p}.data_parallel_replicate_degree"),
        replicate.to_string(),
        None,
    );
    if let Some(r) = reshard {
        set(
            &format!("{p}.fsdp_reshard_after_forward"),
            format!("\"{r}\""),
            None,
        );
    }
    set(
        &format!("{p}.tensor_parallel_degree"),
        mesh.tp.to_string(),
        None,
    );
    set(
        &format!("{p}.enable_sequence_parallel"),
        py_bool(mesh.sp),
        None,
    );
    set(
        &format!("{p}.context_parallel_degree"),
        mesh.cp.to_string(),
        None,
    );
    if plan.model.moe.is_some() {
        set(
            &format!("{p}.expert_parallel_degree"),
            mesh.ep.to_string(),
            None,
        );
    }
    set(
        &format!("{p}.pipeline_parallel_degree"),
        mesh.pp.to_string(),
        None,
    );
    if mesh.pp > 1 {
        set(
            &format!("{p}.pipeline_parallel_schedule"),
            if mesh.vpp > 1 {
                "\"Interleaved1F1B\""
            } else {
                "\"1F1B\""
            }
            .into(),
            Some(if mesh.vpp > 1 {
                "interleaved 1F1B: stage k on pipeline rank k mod p"
            } else {
                "1F1B"
            }),
        );
        let stages = stage_modules(plan)
            .iter()
            .map(|s| {
                format!(
                    "[{}]",
                    s.iter()
                        .map(|m| format!("\"{m}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join(",\n        ");
        set(
            &format!("{p}.module_fqns_per_model_part"),
            format!("[\n        {stages},\n    ]"),
            Some("the plan's layer split, one list per stage in model order"),
        );
        set(
            &format!("{p}.num_pp_microbatches"),
            job.micro_batches.to_string(),
            Some("all micro-batches of the step in one pipeline round"),
        );
    }
    let t = "config.training";
    set(
        &format!("{t}.num_tokens_per_microbatch_per_dp_rank"),
        (job.micro_batch as u64 * job.seq_len).to_string(),
        Some("b·s"),
    );
    set(
        &format!("{t}.num_tokens_per_train_step"),
        job.tokens_per_step.to_string(),
        Some("B·s"),
    );
    set(
        &format!("{t}.max_context_length"),
        job.seq_len.to_string(),
        None,
    );
    set(
        &format!("{t}.disable_cuda_graphs"),
        "True".into(),
        Some(
            "torchtitan captures CUDA graphs by default, which its trainer rejects with PP or standard EP; meshplan prices no graphs",
        ),
    );
    set(
        "config.checkpoint.enable",
        "True".into(),
        Some("torchtitan writes no checkpoints unless enabled"),
    );
    set(
        "config.checkpoint.interval",
        plan.predicted.checkpoint.interval_steps.to_string(),
        Some("Daly's interval τ* = √(2·C·M), as CHECKLIST.md derives it"),
    );
    imports.push("from torchtitan.config import CompileConfig".into());
    let async_tp = job.tp_comm_overlap && mesh.sp && mesh.tp > 1;
    set(
        "config.compile",
        format!(
            "CompileConfig(enable=True, components=[\"model\", \"loss\"]{})",
            if async_tp {
                ", enable_async_tensor_parallel=True"
            } else {
                ""
            }
        ),
        Some(if async_tp {
            "meshplan prices the compiled loss (bf16 logits) and TP communication overlapped with the GEMMs (async TP)"
        } else {
            "meshplan prices the compiled loss (bf16 logits), and the low-precision converters need the compiled model"
        }),
    );
    match plan.recompute.mode {
        Recompute::Full => {
            imports.push("from torchtitan.distributed.activation_checkpoint import FullAC".into());
            set(
                "config.activation_checkpoint",
                "FullAC.Config()".into(),
                Some("recompute every layer"),
            );
        }
        Recompute::None => set("config.activation_checkpoint", "None".into(), None),
        // Refused before rendering (`Target::refusals`).
        Recompute::Selective => {}
    }
    // The model is always rebuilt from its flavor: torchtitan's own base
    // configurations may convert linears already (`llama3_405b` builds
    // float8 with async TP), which a bf16 plan must not inherit.
    let converter = match job.precision {
        Precision::Bf16 => None,
        // The output layer stays bf16, as priced ([`crate::cost::precision`]).
        Precision::Fp8 => Some((
            "Float8LinearConverter",
            "recipe_name=\"rowwise\", filter_fqns=[\"lm_head\"], model_compile_enabled=True",
        )),
        // `fqns` selects the decoder layers' linears: an empty list would
        // convert the output layer too (`components/quantization/mx.py`).
        Precision::Mxfp8 => Some((
            "MXFP8LinearConverter",
            "fqns=[\"layers.\"], model_compile_enabled=True",
        )),
        Precision::Nvfp4 => Some((
            "NVFP4LinearConverter",
            "fqns=[\"layers.\"], model_compile_enabled=True",
        )),
    };
    if let Some(flavor) = up.torchtitan_flavor {
        imports.push(format!(
            "from torchtitan.models.{package} import model_registry"
        ));
        let converters = match converter {
            Some((class, args)) => {
                imports.push(format!(
                    "from torchtitan.components.quantization import {class}"
                ));
                format!(", converters=[{class}.Config({args})]")
            }
            None => String::new(),
        };
        set(
            "config.model_spec",
            format!("model_registry(\"{flavor}\"{converters})"),
            Some(match converter {
                None => {
                    "bf16 linears, torchtitan's default attention (FlexAttention; priced at FlashAttention-2's rate)"
                }
                Some(_) => {
                    "low-precision linears through torchao (output layer in bf16); torchtitan's default attention (FlexAttention; priced at FlashAttention-2's rate)"
                }
            }),
        );
    }
    Torchtitan {
        imports,
        base,
        assignments: a,
        function: FUNCTION.into(),
        module: super::TORCHTITAN_CONFIG.trim_end_matches(".py").to_string(),
    }
}
