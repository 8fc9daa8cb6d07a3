//! The checklist's words per target: where each check's setting lives in
//! the target's own files and how that program spells it
//! (`templates/checklist.md.j2` fills them in).
//!
//! The settings the launch files hold are read back from the tables the
//! file writers render ([`super::megatron::Megatron`]'s flags,
//! [`super::torchtitan::Torchtitan`]'s assignments,
//! [`super::megatron_bridge::overrides`], [`super::deepspeed::config`]), so
//! the checklist and the files cannot disagree; what the checks change (the
//! tiny run, the doubled micro-batch) is computed from the same entries.
//!
//! Sources of the names beyond the writers' own: torchtitan
//! `torchtitan/config/configs.py` (`DebugConfig.seed`/`deterministic`,
//! `TrainingConfig.steps`), `torchtitan/tools/profiler.py`
//! (`Profiler.Config`: `profile_freq`, `profiler_warmup`,
//! `profiler_active`; wait = freq − warmup − active),
//! `torchtitan/components/metrics.py` (the log line's `tps` is tokens per
//! second per GPU, `memory/max_active(GiB)`, `time_metrics/end_to_end(s)`)
//! at b5bcd76; Megatron-Bridge `megatron.training.config` (`rng.seed`,
//! `train.train_iters`, `logger.log_params_norm`,
//! `logger.log_num_zeros_in_grad`, `logger.log_throughput`,
//! `profiling.use_pytorch_profiler`/`profile_step_start`/`profile_step_end`,
//! `logger.save_config_filepath`) and `training/utils/train_utils.py`
//! (`report_memory` in GB of 10⁹ bytes); DeepSpeed
//! `deepspeed/utils/timer.py` (`ThroughputTimer`: `RunningAvgSamplesPerSec`
//! over the global batch and `MaxMemAllocated` in GiB every
//! `steps_per_print` steps), `deepspeed/runtime/engine.py`
//! (`get_global_grad_norm`, `save_checkpoint`, the "DeepSpeedEngine
//! configuration" print), `deepspeed/checkpoint/ds_to_universal.py` and
//! `checkpoint.load_universal` at edaa722.

use serde::Serialize;
use serde_json::Value;

use super::megatron::Megatron;
use super::megatron_bridge::{FLAG_KEYS, Override, Translate};
use super::plan_file::{Plan, Predicted};
use super::target::Target;
use super::torchtitan::{Assignment, Torchtitan};
use crate::layout::Recompute;

/// One setting as a launch file writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    /// The setting as the file spells it (`config.parallelism.tensor_parallel_degree`,
    /// `model.tensor_model_parallel_size`, `zero_optimization.stage`).
    pub key: String,
    /// Its value as the file writes it (a summary for a multi-line value).
    pub value: String,
    /// The writer's comment, if any.
    pub note: Option<String>,
    /// The value as a Markdown table cell: in backticks with `|` escaped,
    /// or the summary as text.
    pub cell: String,
}

/// `text` with `|` escaped for a Markdown table cell.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `value` as a Markdown table cell in code spans (`|` escaped, which
/// GitHub's tables read inside code spans too).
fn cell(value: &str) -> String {
    format!("`{}`", value.replace('|', "\\|"))
}

/// What the checklist says in the target's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Words {
    /// The program, as written in prose.
    pub program: String,
    /// The file that holds the settings (empty for Megatron-LM, whose
    /// checklist names command-line flags).
    pub file: String,
    /// The layout as the file writes it (empty for Megatron-LM).
    pub settings: Vec<Setting>,
    /// How the started job shows the settings it runs with.
    pub settings_shown: String,
    /// What the user's own training script must do (DeepSpeed only: what
    /// its configuration cannot express).
    pub script_duties: Vec<String>,
    /// How to cut the model to one layer per chunk.
    pub tiny_layers: String,
    /// How to set the tiny batch.
    pub tiny_batch: String,
    /// Seed, determinism, two steps.
    pub tiny_repro: String,
    /// How to set up the reference run, after the math (empty for
    /// Megatron-LM).
    pub reference: String,
    /// Where to read the peak memory.
    pub memory_source: String,
    /// How to double the micro-batch.
    pub double_micro_batch: String,
    /// How to profile steps 3-4.
    pub profile: String,
    /// What to log for the numerics check.
    pub numerics_log: String,
    /// How to run the same job in bf16, for the low-precision check.
    pub bf16_run: String,
    /// The checkpoint interval setting.
    pub save_interval: String,
    /// Why and how the checkpoint reshards.
    pub reshard: String,
    /// The steady-state line up to the MFU bracket.
    pub throughput: String,
}

/// The tables the file writers rendered for one plan.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The Megatron-LM script's flags (every target derives from them).
    pub megatron: &'a Megatron,
    /// torchtitan's assignments, with `--target torchtitan`.
    pub torchtitan: Option<&'a Torchtitan>,
    /// Megatron-Bridge's overrides, with `--target megatron-bridge`.
    pub bridge: Option<&'a [Override]>,
    /// The DeepSpeed configuration, with `--target deepspeed`.
    pub deepspeed: Option<&'a Value>,
}

fn code(s: &str) -> String {
    format!("`{s}`")
}

/// The value of Megatron-LM flag `flag` in the script, as written.
fn megatron_value(m: &Megatron, flag: &str) -> Result<String, String> {
    m.groups
        .iter()
        .flat_map(|g| &g.args)
        .find_map(|a| match a.text.split_once(' ') {
            Some((f, v)) if f == flag => Some(v.trim().to_string()),
            _ => None,
        })
        .ok_or_else(|| format!("the Megatron-LM script has no {flag}"))
}

/// The first Megatron-Bridge field [`FLAG_KEYS`] translates Megatron-LM
/// flag `flag` into.
fn bridge_key(flag: &str) -> Result<&'static str, String> {
    FLAG_KEYS
        .iter()
        .find(|(f, _)| *f == flag)
        .and_then(|(_, how)| match how {
            Translate::Value(keys) | Translate::Switch(keys) | Translate::SwitchOff(keys) => {
                keys.first().copied()
            }
            Translate::Quoted(k) => Some(*k),
            Translate::Recipe => None,
        })
        .ok_or_else(|| format!("Megatron-Bridge's FLAG_KEYS has no field for {flag}"))
}

fn lookup<'a>(settings: &'a [Setting], key: &str, program: &str) -> Result<&'a str, String> {
    settings
        .iter()
        .find(|s| s.key == key)
        .map(|s| s.value.as_str())
        .ok_or_else(|| format!("the {program} files set no {key}"))
}

fn number(settings: &[Setting], key: &str, program: &str) -> Result<u64, String> {
    let v = lookup(settings, key, program)?;
    v.parse()
        .map_err(|_| format!("{program}: {key} = {v} is not a whole number"))
}

/// The micro-batch count after doubling b: halved when even (B kept),
/// otherwise kept with B doubled. Returns (m', B multiplier).
fn doubled_micro_batches(m: u64) -> (u64, u64) {
    if m.is_multiple_of(2) {
        (m / 2, 1)
    } else {
        (m, 2)
    }
}

/// The stage lists of `module_fqns_per_model_part` in a line: the layer
/// count of each stage, in model order.
fn stage_summary(plan: &Plan) -> String {
    let split: Vec<String> = plan
        .pipeline
        .layers_per_chunk
        .iter()
        .map(u32::to_string)
        .collect();
    format!(
        "{} lists of {} layers (`tok_embeddings` in the first, `norm` and `lm_head` in the last)",
        split.len(),
        split.join("/")
    )
}

/// torchtitan's assignments as settings (without the `config.` prefix in
/// the key; the text is the file's line).
fn torchtitan_settings(plan: &Plan, t: &Torchtitan) -> Vec<Setting> {
    t.assignments
        .iter()
        .map(|a: &Assignment| {
            let value = if a.value.contains('\n') {
                stage_summary(plan)
            } else {
                a.value.clone()
            };
            Setting {
                cell: if a.value.contains('\n') {
                    value.clone()
                } else {
                    cell(&value)
                },
                key: a.target.clone(),
                value,
                note: a.note.as_deref().map(escape),
            }
        })
        .collect()
}

fn bridge_settings(o: &[Override]) -> Vec<Setting> {
    o.iter()
        .map(|o| Setting {
            key: o.key.clone(),
            value: o.value.clone(),
            note: o.note.as_deref().map(escape),
            cell: cell(&o.value),
        })
        .collect()
}

/// The DeepSpeed configuration's leaves as dotted keys, in file order.
pub fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

fn deepspeed_settings(c: &Value) -> Vec<Setting> {
    let mut leaves = Vec::new();
    flatten("", c, &mut leaves);
    leaves
        .into_iter()
        .map(|(key, v)| {
            let value = v.to_string();
            Setting {
                cell: cell(&value),
                key,
                value,
                note: None,
            }
        })
        .collect()
}

/// The words of `plan`'s checklist for `target`, from the writers' tables.
///
/// # Errors
/// A sentence naming the setting missing from a writer's table (a bug: the
/// writers always write them).
pub fn words(plan: &Plan, target: Target, src: Sources) -> Result<Words, String> {
    let missing = |what: &str| format!("no {what} rendered for {target}");
    match target {
        Target::Megatron => megatron_words(plan, src.megatron),
        Target::Torchtitan => torchtitan_words(
            plan,
            src.torchtitan
                .ok_or_else(|| missing("torchtitan configuration"))?,
        ),
        Target::MegatronBridge => bridge_words(
            plan,
            src.bridge
                .ok_or_else(|| missing("Megatron-Bridge overrides"))?,
        ),
        Target::Deepspeed => deepspeed_words(
            plan,
            src.deepspeed
                .ok_or_else(|| missing("DeepSpeed configuration"))?,
        ),
    }
}

/// The tiny run's numbers: layers p·v, global batch G = D·b·m, its m.
fn tiny(plan: &Plan) -> (u32, u64, u64) {
    let mesh = &plan.mesh;
    let m = if mesh.vpp > 1 { mesh.pp as u64 } else { 1 };
    (
        plan.pipeline.chunks,
        mesh.dp as u64 * plan.job.micro_batch as u64 * m,
        m,
    )
}

/// The tiny run's layer count in Megatron-LM's flags. An uneven split's
/// flags (`--decoder-first/last-pipeline-num-layers`, or an explicit
/// `--pipeline-model-parallel-layout`) name the full model's layers and
/// would contradict `--num-layers {p·v}`, so they are dropped: without them
/// Megatron splits the p·v layers one per chunk. A layout string is also
/// what carries an uneven interleaved plan's v (it excludes the VPP flags),
/// so when it is dropped with v > 1 the tiny run takes
/// `--num-virtual-stages-per-pipeline-rank v` instead, keeping the
/// planned schedule (found by review: it ran plain 1F1B).
fn megatron_tiny_layers(m: &Megatron, layers: u32, vpp: u32) -> String {
    let drop: Vec<String> = [
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--pipeline-model-parallel-layout",
    ]
    .iter()
    .filter_map(|f| megatron_value(m, f).ok().map(|v| format!("`{f} {v}`")))
    .collect();
    let cut = code(&format!("--num-layers {layers}"));
    if drop.is_empty() {
        return cut;
    }
    let keep_v = if vpp > 1 && megatron_value(m, "--pipeline-model-parallel-layout").is_ok() {
        format!(
            ", and add {} to keep the interleaved schedule the layout string set",
            code(&format!("--num-virtual-stages-per-pipeline-rank {vpp}"))
        )
    } else {
        String::new()
    };
    format!(
        "{cut}, and drop {} from the script: they split the full model's layers{keep_v}",
        drop.join(" and ")
    )
}

fn megatron_words(plan: &Plan, m: &Megatron) -> Result<Words, String> {
    let (layers, g, _) = tiny(plan);
    let pr = &plan.predicted;
    Ok(Words {
        program: "Megatron-LM".into(),
        file: String::new(),
        settings: Vec::new(),
        settings_shown: String::new(),
        script_duties: Vec::new(),
        tiny_layers: megatron_tiny_layers(m, layers, plan.mesh.vpp),
        tiny_batch: code(&format!("--global-batch-size {g}")),
        tiny_repro: "`--seed`, `--deterministic-mode`, `--train-iters 2`".into(),
        reference: String::new(),
        memory_source:
            "`max allocated` from Megatron's memory report (or `torch.cuda.max_memory_allocated()`)"
                .into(),
        double_micro_batch: code(&format!("--micro-batch-size {}", plan.job.micro_batch * 2)),
        profile: "`--profile --use-pytorch-profiler --profile-step-start 3 --profile-step-end 4`"
            .into(),
        numerics_log: "Log `--log-params-norm --log-num-zeros-in-grad`".into(),
        bf16_run: "the script without its `--fp8-*` / `--fp4-*` flags".into(),
        save_interval: code(&format!(
            "--save-interval {}",
            megatron_value(m, "--save-interval")?
        )),
        reshard: "`--ckpt-format` is reshardable".into(),
        throughput: megatron_throughput(
            pr,
            "\"elapsed time per iteration\"",
            "in `--log-throughput`",
        ),
    })
}

/// What Megatron-Core's log line shows for the plan's predictions (step
/// time in ms, labelled `step_label`, tokens/s and TFLOP/s per GPU), the
/// place of the FLOP rate said by `flops_where`: Megatron-LM and
/// Megatron-Bridge print the same line.
fn megatron_throughput(pr: &Predicted, step_label: &str, flops_where: &str) -> String {
    format!(
        "{:.0} ms per step ({step_label}), {:.0} tokens/s, {:.1} TFLOP/s/GPU {flops_where}",
        pr.step_s * 1e3,
        pr.tokens_per_s,
        pr.tflops_per_gpu
    )
}

fn torchtitan_words(plan: &Plan, t: &Torchtitan) -> Result<Words, String> {
    const P: &str = "torchtitan";
    let file = super::TORCHTITAN_CONFIG;
    let settings = torchtitan_settings(plan, t);
    let (layers, g, m_tiny) = tiny(plan);
    let mesh = &plan.mesh;
    let pr = &plan.predicted;
    let s = plan.job.seq_len;
    let per_mb = "config.training.num_tokens_per_microbatch_per_dp_rank";
    let per_step = "config.training.num_tokens_per_train_step";
    let pp_mb = "config.parallelism.num_pp_microbatches";
    let fqns = "config.parallelism.module_fqns_per_model_part";
    let pipelined = mesh.pp > 1;
    // Read back what the file sets, so the words use the file's values.
    let tokens_mb = number(&settings, per_mb, P)?;
    let tokens_step = number(&settings, per_step, P)?;
    let interval = number(&settings, "config.checkpoint.interval", P)?;
    let m_file = if pipelined {
        Some(number(&settings, pp_mb, P)?)
    } else {
        None
    };
    let tiny_layers = if pipelined {
        format!(
            "`config.model_spec.model.layers = config.model_spec.model.layers[:{layers}]` and one `layers.N` per list of `{fqns}`"
        )
    } else {
        format!("`config.model_spec.model.layers = config.model_spec.model.layers[:{layers}]`")
    };
    let tiny_batch = format!(
        "{g} sequences of {s} tokens, `{per_step} = {}`{}",
        g * s,
        if pipelined {
            format!(" with `{pp_mb} = {m_tiny}`")
        } else {
            String::new()
        }
    );
    let double = {
        let mut w = format!("`{per_mb} = {}`", tokens_mb * 2);
        match m_file {
            Some(m) => {
                let (m2, grow) = doubled_micro_batches(m);
                if grow == 1 {
                    w.push_str(&format!(" and `{pp_mb} = {m2}`"));
                } else {
                    w.push_str(&format!(" and `{per_step} = {}`", tokens_step * 2));
                }
            }
            None => {
                // torchtitan accumulates B·s / (D·b·s) micro-batches; a
                // doubled b needs that count to stay whole.
                let acc = tokens_step / (tokens_mb * mesh.dp as u64).max(1);
                if !acc.is_multiple_of(2) {
                    w.push_str(&format!(" and `{per_step} = {}`", tokens_step * 2));
                }
            }
        }
        w
    };
    let world = plan.hardware.world.max(1) as f64;
    Ok(Words {
        program: P.into(),
        file: file.into(),
        settings,
        settings_shown: format!(
            "set `config.debug.print_config = True` in {file}, and rank 0 logs \"Running with configs\" with every field"
        ),
        script_duties: Vec::new(),
        tiny_layers,
        tiny_batch,
        tiny_repro: "`config.debug.seed = 0`, `config.debug.deterministic = True`, `config.training.steps = 2`".into(),
        reference: format!(
            ": in {file}, every `config.parallelism.*_degree = 1` on one GPU{}, `{per_step}` as in the tiny run (torchtitan accumulates the micro-batches)",
            if pipelined {
                format!(", no `{fqns}`")
            } else {
                String::new()
            }
        ),
        memory_source:
            "`memory/max_active(GiB)` from torchtitan's metrics (TensorBoard; the log line's `memory:` is max reserved, which adds the allocator's cache)"
                .into(),
        double_micro_batch: double,
        profile: format!(
            "`config.profiler.enable_profiling = True`, `config.profiler.profile_freq = 4`, `config.profiler.profiler_warmup = 1`, `config.profiler.profiler_active = 2` in {file}"
        ),
        numerics_log: "Log every step (`config.metrics.log_freq = 1`): torchtitan prints `loss` and `grad_norm`, and clips at `config.training.max_norm`".into(),
        bf16_run: "the plan without its low-precision linear converter in `model.converters`".into(),
        save_interval: format!("`config.checkpoint.interval = {interval}`"),
        reshard: "torchtitan's DCP checkpoints reshard on load; its last save holds the model only unless `config.checkpoint.last_save_model_only = False`".into(),
        throughput: format!(
            "`time_metrics/end_to_end(s)` {:.2} s per step, `tps` {:.0} (tokens/s per GPU: {:.0} tokens/s over {} GPUs), `tflops` {:.1} in torchtitan's log line",
            pr.step_s,
            pr.tokens_per_s / world,
            pr.tokens_per_s,
            plan.hardware.world,
            pr.tflops_per_gpu
        ),
    })
}

fn bridge_words(plan: &Plan, o: &[Override]) -> Result<Words, String> {
    const P: &str = "Megatron-Bridge";
    let file = super::BRIDGE_SCRIPT;
    let settings = bridge_settings(o);
    let (layers, g, _) = tiny(plan);
    let pr = &plan.predicted;
    let gb = bridge_key("--global-batch-size")?;
    let mb = bridge_key("--micro-batch-size")?;
    let b = number(&settings, mb, P)?;
    let big_b = number(&settings, gb, P)?;
    let interval = number(&settings, "checkpoint.save_interval", P)?;
    let format = lookup(&settings, "checkpoint.ckpt_format", P)?.to_string();
    // The uneven split's overrides, which the tiny model must follow.
    let mut split = Vec::new();
    for flag in [
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
    ] {
        let k = bridge_key(flag)?;
        if settings.iter().any(|s| s.key == k) {
            split.push(format!("`{k}=1`"));
        }
    }
    let layout = bridge_key("--pipeline-model-parallel-layout")?;
    if settings
        .iter()
        .any(|s| s.key == layout && s.value != "null")
    {
        split.push(format!("`{layout}` one layer per stage"));
    }
    let tiny_layers = if split.is_empty() {
        format!("`model.num_layers={layers}`")
    } else {
        format!("`model.num_layers={layers}` with {}", split.join(", "))
    };
    let (_, grow) = doubled_micro_batches(plan.job.micro_batches);
    let mut double = format!("`{mb}={}`", b * 2);
    if grow > 1 {
        double.push_str(&format!(" and `{gb}={}`", big_b * 2));
    }
    let mut reference: Vec<String> = [
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
    ]
    .iter()
    .map(|f| bridge_key(f).map(|k| format!("`{k}=1`")))
    .collect::<Result<_, _>>()?;
    if plan.model.moe.is_some() {
        reference.push(format!(
            "`{}=1`",
            bridge_key("--expert-model-parallel-size")?
        ));
    }
    reference.push(format!("`{}=false`", bridge_key("--use-megatron-fsdp")?));
    reference.push(format!(
        "`{}=false`",
        bridge_key("--use-distributed-optimizer")?
    ));
    Ok(Words {
        program: P.into(),
        file: file.into(),
        settings,
        settings_shown: "add `logger.save_config_filepath=<file>` to write the full configuration, or read a checkpoint's `run_config.yaml`; the recipe's own values apply wherever an override is missing".into(),
        script_duties: Vec::new(),
        tiny_layers,
        tiny_batch: format!("`{gb}={g}`"),
        tiny_repro: "`rng.seed=1234`, `model.deterministic_mode=true`, `train.train_iters=2`".into(),
        reference: format!(
            ": on one GPU with {} (Megatron-Core accumulates to `{gb}`)",
            reference.join(" ")
        ),
        memory_source: "`peak_allocated_mem` from the memory report Megatron-Bridge prints after the first iterations (in GB of 10⁹ bytes: 1 GiB = 1.074 GB) or `torch.cuda.max_memory_allocated()`".into(),
        double_micro_batch: double,
        profile: "`profiling.use_pytorch_profiler=true profiling.profile_step_start=3 profiling.profile_step_end=4`".into(),
        numerics_log: "Log `logger.log_params_norm=true logger.log_num_zeros_in_grad=true`".into(),
        bf16_run: "`mixed_precision=bf16_mixed` in place of the recipe's low-precision preset".into(),
        save_interval: format!("`checkpoint.save_interval={interval}`"),
        reshard: format!("`checkpoint.ckpt_format={format}` is a distributed checkpoint, reshardable on load"),
        throughput: megatron_throughput(
            pr,
            "\"elapsed time per iteration (ms)\"",
            "(\"throughput per GPU (TFLOP/s/GPU)\" with `logger.log_throughput=true`)",
        ),
    })
}

fn deepspeed_words(plan: &Plan, c: &Value) -> Result<Words, String> {
    const P: &str = "DeepSpeed";
    let file = super::DEEPSPEED_CONFIG;
    let settings = deepspeed_settings(c);
    let (layers, g, _) = tiny(plan);
    let pr = &plan.predicted;
    let b = number(&settings, "train_micro_batch_size_per_gpu", P)?;
    let m = number(&settings, "gradient_accumulation_steps", P)?;
    let big_b = number(&settings, "train_batch_size", P)?;
    let every = number(&settings, "steps_per_print", P)?;
    let clip = lookup(&settings, "gradient_clipping", P)?.to_string();
    let d = plan.mesh.dp as u64;
    let (m2, grow) = doubled_micro_batches(m);
    let double = if grow == 1 {
        format!(
            "`train_micro_batch_size_per_gpu`: {} and `gradient_accumulation_steps`: {m2}",
            b * 2
        )
    } else {
        format!(
            "`train_micro_batch_size_per_gpu`: {} and `train_batch_size`: {}",
            b * 2,
            big_b * 2
        )
    };
    let interval = plan.predicted.checkpoint.interval_steps;
    let mut duties = vec![
        format!(
            "Build {} with its card's architecture and sequence length {} and pass the model and `{file}` to `deepspeed.initialize`; the launch script passes `--deepspeed_config`.",
            plan.model.name, plan.job.seq_len
        ),
        format!(
            "Feed each rank {b} sequence{} per micro-batch and call `engine.backward(loss)` and `engine.step()` on every micro-batch: DeepSpeed steps the optimizer every `gradient_accumulation_steps` = {m} micro-batches.",
            if b == 1 { "" } else { "s" }
        ),
    ];
    duties.push(match plan.recompute.mode {
        Recompute::Full => "Checkpoint every transformer layer in the model code (`deepspeed.checkpointing.checkpoint`, or `gradient_checkpointing_enable()` for a Hugging Face model): the plan recomputes every layer, and the `activation_checkpointing` section alone turns nothing on.".into(),
        _ => "Do not checkpoint activations (no `gradient_checkpointing_enable()`): the plan keeps every layer's activations.".into(),
    });
    if plan.job.flash_attention {
        duties.push(
            "Use a fused (flash) attention kernel: the plan prices attention at FlashAttention's rate and keeps no s×s score matrix."
                .into(),
        );
    }
    duties.push(format!(
        "Call `engine.save_checkpoint(dir)` every {interval} steps (DeepSpeed's configuration has no interval) and `engine.load_checkpoint(dir)` at start."
    ));
    Ok(Words {
        program: P.into(),
        file: file.into(),
        settings,
        settings_shown: format!(
            "rank 0 prints \"DeepSpeedEngine configuration:\" with every key at start; a key your script passes beside `{file}` must not change these"
        ),
        script_duties: duties,
        tiny_layers: format!("a {layers}-layer model in your training script, e.g. `num_hidden_layers = {layers}` in a Hugging Face config"),
        tiny_batch: format!("`train_batch_size`: {g} with `gradient_accumulation_steps`: 1 in {file}"),
        tiny_repro: "a fixed seed (`torch.manual_seed`) and `torch.use_deterministic_algorithms(True)` in your script, 2 steps".into(),
        reference: format!(
            ": the tiny run's {file} on one GPU with `train_batch_size`: {g} and `gradient_accumulation_steps`: {} (ZeRO over one rank shards nothing)",
            g / b.max(1)
        ),
        memory_source: format!(
            "`MaxMemAllocated` from DeepSpeed's throughput line (every `steps_per_print` = {every} steps; GiB, though it prints GB) or `torch.cuda.max_memory_allocated()` in your script"
        ),
        double_micro_batch: double,
        profile: "`torch.profiler.profile` around steps 3-4 in your script; DeepSpeed's configuration writes no trace, and `\"comms_logger\": {\"enabled\": true}` logs each collective's time".into(),
        numerics_log: format!("Log `engine.get_global_grad_norm()` and the loss every step (clipping at `gradient_clipping` = {clip})"),
        bf16_run: "your script without its low-precision linears".into(),
        save_interval: format!("`engine.save_checkpoint` every {interval} steps"),
        reshard: format!("ZeRO checkpoints are partitioned over the {d} data-parallel ranks: convert with DeepSpeed's `ds_to_universal.py` and load with `\"checkpoint\": {{\"load_universal\": true}}`"),
        throughput: format!(
            "{:.2} s per step, `RunningAvgSamplesPerSec` {:.2} ({big_b} sequences per step; {:.0} tokens/s) in DeepSpeed's throughput line, {:.1} TFLOP/s/GPU, worked out from the samples/s since DeepSpeed prints no FLOP rate outside its `flops_profiler`",
            pr.step_s,
            big_b as f64 / pr.step_s,
            pr.tokens_per_s,
            pr.tflops_per_gpu
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_b_halves_an_even_micro_batch_count() {
        // b·m·D = B: b → 2b keeps B when m is even (m/2), else B doubles.
        assert_eq!(doubled_micro_batches(16), (8, 1));
        assert_eq!(doubled_micro_batches(1), (1, 2));
        assert_eq!(doubled_micro_batches(3), (3, 2));
    }

    #[test]
    fn flatten_names_nested_keys() {
        let v = serde_json::json!({"a": 1, "z": {"stage": 3, "x": {"y": true}}});
        let mut out = Vec::new();
        flatten("", &v, &mut out);
        let keys: Vec<_> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "z.stage", "z.x.y"]);
        assert_eq!(out[1].1, 3);
    }

    #[test]
    fn bridge_keys_come_from_flag_keys() {
        assert_eq!(
            bridge_key("--tensor-model-parallel-size").unwrap(),
            "model.tensor_model_parallel_size"
        );
        assert_eq!(
            bridge_key("--use-distributed-optimizer").unwrap(),
            "ddp.use_distributed_optimizer"
        );
        assert!(bridge_key("--bf16").is_err());
    }
}
