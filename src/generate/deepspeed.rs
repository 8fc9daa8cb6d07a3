//! DeepSpeed: the plan as a `ds_config.json` for a training script of the
//! user's that calls `deepspeed.initialize(..., config=...)`, and the
//! `deepspeed` launcher line that starts it on every node.
//!
//! Keys and defaults are DeepSpeed's (`deepspeed/runtime/config.py`,
//! `deepspeed/runtime/zero/config.py`, `deepspeed/runtime/precision_config.py`
//! at edaa722, 2026-08, [ref:deepspeed-config]). DeepSpeed checks `train_batch_size =
//! train_micro_batch_size_per_gpu · gradient_accumulation_steps · world size`
//! (`DeepSpeedConfig._batch_assertion`), the world size being the
//! data-parallel size; here every rank is a data-parallel rank
//! ([`super::target::Target::refusals`] refuses T, p, C, E > 1), so
//! B = b · m · D.

use serde_json::{Value, json};

use super::plan_file::Plan;
use crate::layout::Recompute;
use crate::spec::RecipeName;

/// DeepSpeed's default gradient bucket, elements (`reduce_bucket_size` and
/// `allgather_bucket_size`, 5e8, `deepspeed/runtime/zero/config.py`).
pub const BUCKET_ELEMENTS: u64 = 500_000_000;

/// DeepSpeed ZeRO-3's defaults, elements: `stage3_prefetch_bucket_size`
/// 5e7, `stage3_param_persistence_threshold` 1e5,
/// `stage3_max_live_parameters` 1e9 (`deepspeed/runtime/zero/config.py`).
pub const ZERO3_PREFETCH: u64 = 50_000_000;
/// See [`ZERO3_PREFETCH`].
pub const ZERO3_PERSISTENCE: u64 = 100_000;
/// See [`ZERO3_PREFETCH`].
pub const ZERO3_MAX_LIVE: u64 = 1_000_000_000;

/// The `zero_optimization` section for ZeRO stage `zero`.
fn zero_section(plan: &Plan) -> Value {
    let z = plan.sharding.zero;
    let mut s = json!({
        "stage": z,
        "overlap_comm": plan.job.overlap_grad_reduce,
        "contiguous_gradients": true,
        "reduce_bucket_size": BUCKET_ELEMENTS,
    });
    if z == 1 || z == 2 {
        s["allgather_bucket_size"] = json!(BUCKET_ELEMENTS);
    }
    if z == 3 {
        s["stage3_prefetch_bucket_size"] = json!(ZERO3_PREFETCH);
        s["stage3_param_persistence_threshold"] = json!(ZERO3_PERSISTENCE);
        s["stage3_max_live_parameters"] = json!(ZERO3_MAX_LIVE);
    }
    s
}

/// The DeepSpeed configuration of `plan`.
///
/// Precision: bf16 training (`bf16.enabled`); the gradients follow the
/// plan's recipe: Megatron's 2/4/12 bytes (ZeRO-1 only) accumulate and
/// reduce in fp32 (`data_types.grad_accum_dtype`,
/// `communication_data_type`: DeepSpeed's `BF16_Optimizer`), and
/// DeepSpeed's own 2/(2+4)/12 is what it keeps by default at every stage:
/// bf16 gradients and an fp32 copy for the step, whole without ZeRO
/// (`FP16_Optimizer` in bf16) and of the rank's shard with it
/// (`engine.py` `_do_optimizer_sanity_check`, [ref:deepspeed-config]).
/// adam-16b (no fp32 copy) is refused.
pub fn config(plan: &Plan) -> Value {
    let job = &plan.job;
    let mut c = json!({
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": job.micro_batch,
        "gradient_accumulation_steps": job.micro_batches,
        "gradient_clipping": 1.0,
        "zero_optimization": zero_section(plan),
        "steps_per_print": 1,
        "wall_clock_breakdown": false,
    });
    c["bf16"] = json!({ "enabled": true });
    match job.recipe {
        // Every stage: bf16 gradients (grad_accum_dtype defaults to the
        // model's dtype), an fp32 copy for the step. adam-16b is refused
        // (`deepspeed-recipe`), so nothing is written for it.
        RecipeName::Deepspeed | RecipeName::Adam16b => {}
        // ZeRO-1 (refused at the other stages): fp32 accumulation and an
        // fp32 reduction (DeepSpeed reduces in bf16 under `bf16.enabled`
        // unless `communication_data_type` says otherwise, engine.py).
        RecipeName::Megatron => {
            c["data_types"] = json!({ "grad_accum_dtype": "fp32" });
            c["communication_data_type"] = json!("fp32");
        }
    }
    if plan.recompute.mode == Recompute::Full {
        // Used by models that checkpoint through `deepspeed.checkpointing`;
        // the launch script says that others must checkpoint every layer
        // themselves (e.g. `gradient_checkpointing_enable()`).
        c["activation_checkpointing"] = json!({
            "partition_activations": false,
            "contiguous_memory_optimization": false,
            "cpu_checkpointing": false,
        });
    }
    c
}

/// The configuration as the file's text (two-space indentation, a final
/// newline).
pub fn config_text(plan: &Plan) -> String {
    let mut s = serde_json::to_string_pretty(&config(plan)).unwrap_or_default();
    s.push('\n');
    s
}
