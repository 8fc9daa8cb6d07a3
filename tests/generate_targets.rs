//! `generate --target torchtitan|megatron-bridge|deepspeed`: what each
//! writes for the 70B main job and other plans (values worked out by hand),
//! what each refuses, that Megatron-Bridge's overrides carry every layout
//! flag of the Megatron-LM script (the script Megatron-LM's own parser
//! accepts, `tests/megatron_flags.rs`) with the same value, and the
//! targets' own parsers through `scripts/check-launch-target` where their
//! packages are installed (skipped with a message otherwise).

mod common;

use std::process::Command;

use common::{Setup, meshplan, temp_dir};
use meshplan::generate::{self, Bundle, GenerateError, Target, megatron, megatron_bridge};
use meshplan::layout::{CpComm, Layout, RankOrder, Recompute};
use meshplan::rules::Policy;
use meshplan::spec::{Fp8Recipe, Precision};
use serde_json::Value;

/// Render `l` for `target` as `generate` does (the job priced as the
/// target runs it).
fn render(s: &mut Setup, l: &Layout, target: Target) -> Result<Bundle, GenerateError> {
    target.engine_job(&mut s.job);
    generate::generate_for(&s.problem(), &Policy::default(), l, target)
}

/// The refusal codes of `l` for `target`.
fn refused(s: &mut Setup, l: &Layout, target: Target) -> Vec<String> {
    match render(s, l, target) {
        Ok(_) => Vec::new(),
        Err(GenerateError::Refused { refusals, .. }) => {
            refusals.into_iter().map(|r| r.code).collect()
        }
        Err(e) => panic!("{e}"),
    }
}

/// D = 64 ZeRO-3, b = 2, full recompute: the layout `generate --target
/// deepspeed` picks for the 70B main job.
fn zero3_dp64() -> Layout {
    Layout {
        micro_batch: 2,
        recompute: Recompute::Full,
        zero: 3,
        ..Layout::dense(64, 1, 1, 1)
    }
}

/// The Megatron flags of the 70B main job's winner: D8 T4 p2, SP, ZeRO-2,
/// split 41/39 (the search's uneven split of 80 layers).
fn main_job_winner() -> Layout {
    Layout {
        zero: 2,
        split: Some(vec![41, 39]),
        ..Layout::dense(8, 4, 2, 1)
    }
}

#[test]
fn deepspeed_config_for_the_main_job() {
    // DeepSpeed's ZeRO-3 keeps its own gradient bytes: the deepspeed recipe.
    let mut s = Setup::new("70b", "dgx64", None);
    s.job.recipe_name = meshplan::spec::RecipeName::Deepspeed;
    s.job.recipe = meshplan::spec::Recipe::DEEPSPEED;
    let b = render(&mut s, &zero3_dp64(), Target::Deepspeed).expect("DeepSpeed runs pure ZeRO-3");
    let names: Vec<_> = b.files.iter().map(|f| f.name).collect();
    assert_eq!(names, Target::Deepspeed.files());
    let c: Value = serde_json::from_str(b.file(generate::DEEPSPEED_CONFIG).unwrap()).unwrap();
    // Global batch 2048 = b · m · D = 2 · 16 · 64, DeepSpeed's
    // _batch_assertion with the data-parallel world size 64.
    assert_eq!(c["train_batch_size"], 2048);
    assert_eq!(c["train_micro_batch_size_per_gpu"], 2);
    assert_eq!(c["gradient_accumulation_steps"], 16);
    assert_eq!(2 * 16 * 64, 2048);
    assert_eq!(c["zero_optimization"]["stage"], 3);
    assert_eq!(c["zero_optimization"]["overlap_comm"], true);
    assert_eq!(
        c["zero_optimization"]["stage3_max_live_parameters"],
        1_000_000_000u64
    );
    assert_eq!(
        c["zero_optimization"]["stage3_prefetch_bucket_size"],
        50_000_000u64
    );
    // bf16 training; DeepSpeed's own ZeRO-3 gradients (no dtype overrides).
    assert_eq!(c["bf16"]["enabled"], true);
    assert!(c.get("data_types").is_none());
    assert!(c.get("fp16").is_none());
    // Megatron's recipe is ZeRO-1 only: fp32 accumulation and reduction.
    let mut z1 = Setup::new("llama3-8b", "dgx-h100-64", None);
    let l1 = Layout {
        zero: 1,
        recompute: Recompute::Full,
        ..Layout::dense(64, 1, 1, 1)
    };
    let b1 = render(&mut z1, &l1, Target::Deepspeed).expect("ZeRO-1 with the megatron recipe");
    let c1: Value = serde_json::from_str(b1.file(generate::DEEPSPEED_CONFIG).unwrap()).unwrap();
    assert_eq!(c1["data_types"]["grad_accum_dtype"], "fp32");
    assert_eq!(c1["communication_data_type"], "fp32");
    assert_eq!(
        refused(&mut z1, &Layout { zero: 3, ..l1 }, Target::Deepspeed),
        ["deepspeed-recipe"]
    );
    let sh = b.file(generate::DEEPSPEED_SCRIPT).unwrap();
    assert!(sh.contains("--num_nodes 8 --num_gpus 8"), "{sh}");
}

#[test]
fn deepspeed_refuses_what_it_cannot_run() {
    let mut s = Setup::new("70b", "dgx64", None);
    // The overall winner has T = 4 and p = 2: two mesh refusals.
    let codes = refused(&mut s, &main_job_winner(), Target::Deepspeed);
    let mesh: Vec<_> = codes.iter().filter(|c| *c == "deepspeed-mesh").collect();
    assert_eq!(mesh.len(), 2, "{codes:?}");
    let selective = Layout {
        recompute: Recompute::Selective,
        ..zero3_dp64()
    };
    // (It also breaks the memory limit at b = 2; the target's refusal is
    // listed after meshplan's rules.)
    assert!(
        refused(&mut s, &selective, Target::Deepspeed).contains(&"deepspeed-recompute".to_string())
    );
    let mut m = Setup::new("mixtral-8x7b", "dgx64", None);
    let moe = Layout {
        zero: 3,
        micro_batch: 1,
        recompute: Recompute::Full,
        ..Layout::dense(64, 1, 1, 1)
    };
    assert!(refused(&mut m, &moe, Target::Deepspeed).contains(&"deepspeed-moe".to_string()));
    let mut f = Setup::new("70b", "dgx-h100-64", None);
    f.job.precision = Precision::Fp8;
    assert!(
        refused(&mut f, &zero3_dp64(), Target::Deepspeed)
            .contains(&"deepspeed-precision".to_string())
    );
}

#[test]
fn torchtitan_config_for_the_main_job() {
    let mut s = Setup::new("70b", "dgx64", None);
    let b = render(&mut s, &main_job_winner(), Target::Torchtitan).expect("torchtitan runs it");
    let py = b.file(generate::TORCHTITAN_CONFIG).unwrap();
    assert!(py.contains("from torchtitan.models.llama3.config_registry import llama3_70b"));
    assert!(py.contains("config = llama3_70b()"));
    for line in [
        "config.parallelism.data_parallel_shard_degree = 8",
        "config.parallelism.data_parallel_replicate_degree = 1",
        "config.parallelism.fsdp_reshard_after_forward = \"never\"",
        "config.parallelism.tensor_parallel_degree = 4",
        "config.parallelism.enable_sequence_parallel = True",
        "config.parallelism.pipeline_parallel_degree = 2",
        "config.parallelism.pipeline_parallel_schedule = \"1F1B\"",
        // B / (D·b) = 2048 / (8·1) = 256 micro-batches in one round.
        "config.parallelism.num_pp_microbatches = 256",
        // b·s = 1 · 8192 and B·s = 2048 · 8192 = 16,777,216.
        "config.training.num_tokens_per_microbatch_per_dp_rank = 8192",
        "config.training.num_tokens_per_train_step = 16777216",
        "config.activation_checkpoint = None",
    ] {
        assert!(py.contains(line), "missing `{line}` in\n{py}");
    }
    // Stage 0: the embedding and layers 0–40 (41 layers); stage 1: layers
    // 41–79 (39) and the final norm and output layer.
    let stages = generate::torchtitan::stage_modules(&b.plan);
    assert_eq!(stages.len(), 2);
    assert_eq!(stages[0].len(), 1 + 41);
    assert_eq!(stages[0][0], "tok_embeddings");
    assert_eq!(stages[0][41], "layers.40");
    assert_eq!(stages[1].len(), 39 + 2);
    assert_eq!(stages[1][0], "layers.41");
    assert_eq!(stages[1][38..], ["layers.79", "norm", "lm_head"]);
    let sh = b.file(generate::TORCHTITAN_SCRIPT).unwrap();
    assert!(sh.contains("--module torchtitan_plan"), "{sh}");
    assert!(sh.contains("--config meshplan_plan"), "{sh}");
}

#[test]
fn torchtitan_interleaved_stages_and_float8() {
    // p = 2, v = 2 on 80 layers: four chunks of 20, stage k on rank k mod 2.
    let mut s = Setup::new("70b", "dgx-h100-64", None);
    s.job.precision = Precision::Fp8;
    s.job.fp8_recipe = Fp8Recipe::Rowwise;
    let l = Layout {
        vpp: 2,
        zero: 3,
        recompute: Recompute::Full,
        ..Layout::dense(4, 8, 2, 1)
    };
    let b = render(&mut s, &l, Target::Torchtitan).expect("torchtitan runs it");
    let stages = generate::torchtitan::stage_modules(&b.plan);
    assert_eq!(
        stages.iter().map(Vec::len).collect::<Vec<_>>(),
        [21, 20, 20, 22]
    );
    assert_eq!(stages[2][0], "layers.40");
    let py = b.file(generate::TORCHTITAN_CONFIG).unwrap();
    assert!(py.contains("\"Interleaved1F1B\""));
    assert!(py.contains("FullAC.Config()"));
    // The output layer stays bf16, as priced.
    assert!(py.contains(
        "model_registry(\"70B\", converters=[Float8LinearConverter.Config(recipe_name=\"rowwise\", filter_fqns=[\"lm_head\"], model_compile_enabled=True)])"
    ), "{py}");
    // ZeRO-3 under PP: "always", since torchtitan's "default" keeps the
    // parameters gathered after forward when p > 1.
    assert!(py.contains("config.parallelism.fsdp_reshard_after_forward = \"always\""));
    assert!(py.contains("config.training.disable_cuda_graphs = True"));
}

#[test]
fn torchtitan_refusals() {
    let mut s = Setup::new("70b", "dgx64", None);
    let zero1 = Layout {
        zero: 1,
        ..main_job_winner()
    };
    // (ZeRO-1 also leaves the fp32 states unsharded enough to break the
    // memory limit; both are listed.)
    assert!(refused(&mut s, &zero1, Target::Torchtitan).contains(&"torchtitan-zero".to_string()));
    let mut g = Setup::new("gpt3-175b", "dgx-a100-3072", Some(1024));
    let l = Layout::dense(16, 8, 8, 1);
    assert!(refused(&mut g, &l, Target::Torchtitan).contains(&"torchtitan-model".to_string()));
    let mut f = Setup::new("70b", "dgx-h100-64", None);
    f.job.precision = Precision::Fp8;
    f.job.fp8_recipe = Fp8Recipe::Current;
    let l = Layout {
        zero: 3,
        ..Layout::dense(8, 8, 1, 1)
    };
    assert!(refused(&mut f, &l, Target::Torchtitan).contains(&"torchtitan-precision".to_string()));
    // The other rank order, and E = 8 under DDP with T = 2, C = 1: E must
    // divide dp_shard·C·T = 1·1·2.
    let other_order = Layout {
        order: RankOrder::TpCpEpPpDp,
        ..main_job_winner()
    };
    assert!(
        refused(&mut s, &other_order, Target::Torchtitan).contains(&"torchtitan-order".to_string())
    );
    let mut q = Setup::new("qwen3-30b-a3b", "dgx-h100-64", None);
    let ddp_ep = Layout {
        zero: 0,
        ep: 8,
        ..Layout::dense(32, 2, 1, 1)
    };
    assert!(refused(&mut q, &ddp_ep, Target::Torchtitan).contains(&"torchtitan-ep".to_string()));
}

#[test]
fn torchtitan_bf16_rebuilds_the_model_without_converters() {
    // torchtitan's own llama3_405b() converts linears to float8; a bf16
    // plan must rebuild the model spec without converters.
    let mut s = Setup::new("405b", "dgx-h100-1024", None);
    let l = Layout {
        zero: 3,
        recompute: Recompute::Full,
        ..Layout::dense(64, 8, 2, 1)
    };
    let b = render(&mut s, &l, Target::Torchtitan).expect("torchtitan runs it");
    let py = b.file(generate::TORCHTITAN_CONFIG).unwrap();
    assert!(
        py.contains("config.model_spec = model_registry(\"405B\")"),
        "{py}"
    );
    assert!(!py.contains("Float8"));
}

#[test]
fn bridge_refuses_what_its_presets_override() {
    let l = main_job_winner();
    // Current scaling keeps the first and last layers in bf16 and gathers
    // FP8 parameters; adam-16b's bf16 reduction is undone by bf16_mixed.
    let mut f = Setup::new("70b", "dgx-h100-64", None);
    f.job.precision = Precision::Fp8;
    f.job.fp8_recipe = Fp8Recipe::Current;
    let codes = refused(&mut f, &l, Target::MegatronBridge);
    let bridge: Vec<_> = codes.iter().filter(|c| c.starts_with("bridge")).collect();
    assert_eq!(bridge, ["bridge-precision", "bridge-precision"]);
    let mut r = Setup::new("70b", "dgx64", None);
    r.job.recipe_name = meshplan::spec::RecipeName::Adam16b;
    r.job.recipe = meshplan::spec::Recipe::ADAM_16B;
    assert!(refused(&mut r, &l, Target::MegatronBridge).contains(&"bridge-precision".to_string()));
}

/// Which recipe DeepSpeed runs at which ZeRO stage, as its engine picks the
/// optimizer (`engine.py` `_do_optimizer_sanity_check` at edaa722): bf16
/// with bf16 gradients (the default `grad_accum_dtype`) runs at every stage
/// and copies the gradients to fp32 for the step (the deepspeed recipe);
/// fp32 accumulation runs `BF16_Optimizer` at ZeRO-1 only (the megatron
/// recipe); no DeepSpeed optimizer keeps bf16 gradients without that fp32
/// copy (adam-16b).
#[test]
fn deepspeed_runs_each_recipe_at_its_zero_stages() {
    let with = |name: meshplan::spec::RecipeName| {
        let mut s = Setup::new("gpt-1.7b", "dgx-h100-64", None);
        s.job.recipe_name = name;
        s.job.recipe = name.recipe();
        s
    };
    use meshplan::spec::RecipeName::{Adam16b, Deepspeed, Megatron};
    for zero in 0..=3u8 {
        let l = Layout {
            zero,
            ..Layout::dense(64, 1, 1, 1)
        };
        let b = render(&mut with(Deepspeed), &l, Target::Deepspeed)
            .unwrap_or_else(|e| panic!("deepspeed recipe at ZeRO-{zero}: {e}"));
        let c: Value = serde_json::from_str(b.file(generate::DEEPSPEED_CONFIG).unwrap()).unwrap();
        assert_eq!(c["zero_optimization"]["stage"], zero);
        assert!(c.get("data_types").is_none(), "ZeRO-{zero}: {c}");
        assert_eq!(
            refused(&mut with(Adam16b), &l, Target::Deepspeed),
            ["deepspeed-recipe"],
            "adam-16b at ZeRO-{zero}"
        );
        let megatron = refused(&mut with(Megatron), &l, Target::Deepspeed);
        if zero == 1 {
            assert!(megatron.is_empty(), "{megatron:?}");
        } else {
            assert_eq!(megatron, ["deepspeed-recipe"], "megatron at ZeRO-{zero}");
        }
    }
}

#[test]
fn deepspeed_refuses_zero0_with_fp32_accumulation() {
    let mut s = Setup::new("gpt-1.7b", "dgx-h100-64", None);
    let l = Layout {
        zero: 0,
        ..Layout::dense(64, 1, 1, 1)
    };
    assert_eq!(refused(&mut s, &l, Target::Deepspeed), ["deepspeed-recipe"]);
}

/// Layouts of several kinds for the Megatron-Bridge oracle.
fn bridge_cases() -> Vec<(&'static str, &'static str, Layout, Option<Precision>)> {
    vec![
        ("70b", "dgx64", main_job_winner(), None),
        (
            "70b",
            "dgx-h100-64",
            Layout {
                vpp: 5,
                recompute: Recompute::Selective,
                cp: 2,
                cp_comm: CpComm::Ring,
                ..Layout::dense(2, 4, 4, 2)
            },
            Some(Precision::Fp8),
        ),
        (
            "70b",
            "dgx-h100-64",
            Layout {
                cp: 2,
                cp_comm: CpComm::AllGather,
                recompute: Recompute::Full,
                ..Layout::dense(2, 2, 8, 2)
            },
            None,
        ),
        (
            "llama3-8b",
            "dgx-h100-64",
            Layout {
                zero: 0,
                order: RankOrder::TpCpEpPpDp,
                recompute: Recompute::Full,
                split: Some(vec![3, 10, 10, 9]),
                ..Layout::dense(16, 1, 4, 1)
            },
            None,
        ),
        (
            "qwen3-30b-a3b",
            "dgx-h100-64",
            Layout {
                ep: 8,
                zero: 1,
                ..Layout::dense(8, 1, 8, 1)
            },
            None,
        ),
    ]
}

#[test]
fn bridge_overrides_carry_every_megatron_layout_flag() {
    // Each Megatron flag of the translated groups that has a Bridge field
    // appears as that field with the same value.
    let pairs = [
        (
            "--tensor-model-parallel-size",
            "model.tensor_model_parallel_size",
        ),
        (
            "--pipeline-model-parallel-size",
            "model.pipeline_model_parallel_size",
        ),
        ("--context-parallel-size", "model.context_parallel_size"),
        (
            "--num-virtual-stages-per-pipeline-rank",
            "model.virtual_pipeline_model_parallel_size",
        ),
        (
            "--decoder-first-pipeline-num-layers",
            "model.num_layers_in_first_pipeline_stage",
        ),
        (
            "--decoder-last-pipeline-num-layers",
            "model.num_layers_in_last_pipeline_stage",
        ),
        ("--micro-batch-size", "train.micro_batch_size"),
        ("--global-batch-size", "train.global_batch_size"),
        (
            "--expert-model-parallel-size",
            "model.expert_model_parallel_size",
        ),
        ("--recompute-granularity", "model.recompute_granularity"),
        (
            "--data-parallel-sharding-strategy",
            "ddp.data_parallel_sharding_strategy",
        ),
    ];
    for (model, cluster, l, precision) in bridge_cases() {
        let mut s = Setup::new(model, cluster, None);
        if let Some(p) = precision {
            // Delayed scaling with FP8 parameter gathers: what Bridge's
            // delayed-scaling preset does (current scaling is refused).
            s.job.precision = p;
            s.job.fp8_recipe = Fp8Recipe::Delayed;
            s.job.fp8_param_gather = true;
        }
        let b = render(&mut s, &l, Target::MegatronBridge)
            .unwrap_or_else(|e| panic!("{model} {}: {e}", l.short()));
        let m = megatron::megatron(&b.plan);
        assert!(megatron_bridge::untranslated(&m).is_empty());
        let ov = megatron_bridge::overrides(&b.plan);
        let get = |k: &str| {
            ov.iter()
                .rev()
                .find(|o| o.key == k)
                .map(|o| o.value.clone())
        };
        for g in &m.groups {
            for a in &g.args {
                let (flag, value) = a.text.split_once(' ').unwrap_or((&a.text, ""));
                if let Some((_, key)) = pairs.iter().find(|(f, _)| *f == flag) {
                    assert_eq!(get(key).as_deref(), Some(value), "{model}: {flag} → {key}");
                }
            }
        }
        // Every override is one Hydra `key=value` with a plain value.
        let plain = regex_lite(&ov);
        assert!(plain.is_empty(), "{model}: not plain: {plain:?}");
        // No interleaving means the recipe's own v is cleared.
        if l.vpp == 1 {
            assert_eq!(
                get("model.virtual_pipeline_model_parallel_size").as_deref(),
                Some("null")
            );
        }
        // Worked values per case: 3, 10, 10, 9 has equal middle stages, so
        // Megatron's first/last flags carry it (3 and 9 layers), with the
        // tp-cp-ep-pp-dp mapping and ZeRO-0; the FP8 case takes Bridge's
        // delayed-scaling preset, selective recompute of the attention core
        // and the ring (p2p) K/V exchange.
        let expected: &[(&str, &str)] = if l.split.as_ref().is_some_and(|s| s[0] == 3) {
            &[
                ("model.num_layers_in_first_pipeline_stage", "3"),
                ("model.num_layers_in_last_pipeline_stage", "9"),
                ("dist.use_tp_pp_dp_mapping", "true"),
                ("ddp.use_distributed_optimizer", "false"),
            ]
        } else if l.cp_comm == CpComm::AllGather && l.cp > 1 {
            // Transformer Engine's spelling (it rejects `allgather`).
            &[("model.cp_comm_type", "all_gather")]
        } else if precision == Some(Precision::Fp8) {
            &[
                ("mixed_precision", "bf16_with_fp8_delayed_scaling_mixed"),
                ("model.recompute_modules", "[core_attn]"),
                ("model.cp_comm_type", "p2p"),
            ]
        } else {
            &[]
        };
        for (key, value) in expected {
            assert_eq!(get(key).as_deref(), Some(*value), "{model}: {key}");
        }
    }
}

#[test]
fn bridge_layout_split_states_its_v() {
    // The interleaved split `generate --model 70b --cluster dgx-b200-64
    // --precision mxfp8 --fp8-param-gather --target megatron-bridge` picks:
    // D8 T2 p4 v4, 16 chunks in model order 4,6,6,5, 5×12, 4 (4 + 6 + 6 +
    // 5·12 + 4 = 80 layers). Rank 0 holds 4 then 5 layers, so it is no
    // first/last split: Megatron's layout string carries it, and Megatron-LM
    // derives v from the layout, so its script has no v flag. Bridge starts
    // from the llama3_70b recipe, which sets v = 5; Megatron-Core's
    // TransformerConfig asserts v == the layout's 16 stages / p = 4 = 4
    // (Bridge 0.6.2 failed the script without the override: "(v=5,
    // detected_vpp_size=4)"). So the overrides state v = 4.
    let mut s = Setup::new("70b", "dgx-b200-64", None);
    let l = Layout {
        vpp: 4,
        split: Some(vec![4, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 4]),
        ..Layout::dense(8, 2, 4, 1)
    };
    let b = render(&mut s, &l, Target::MegatronBridge).unwrap_or_else(|e| panic!("{e}"));
    let ov = megatron_bridge::overrides(&b.plan);
    let get = |k: &str| -> Vec<&str> {
        ov.iter()
            .filter(|o| o.key == k)
            .map(|o| o.value.as_str())
            .collect()
    };
    assert_eq!(
        get("model.pipeline_model_parallel_layout"),
        [format!("\"E,t*4|t*6|t*6|{}t*4,L\"", "t*5|".repeat(12))]
    );
    assert_eq!(get("model.virtual_pipeline_model_parallel_size"), ["4"]);
    let m = megatron::megatron(&b.plan);
    assert!(
        !m.groups
            .iter()
            .flat_map(|g| &g.args)
            .any(|a| a.text.starts_with("--num-virtual-stages-per-pipeline-rank")),
        "the Megatron script leaves v to the layout"
    );
}

/// Overrides whose value is not a bare word, number, `[list]` or a
/// double-quoted string (Hydra's override grammar for the values written).
fn regex_lite(ov: &[megatron_bridge::Override]) -> Vec<String> {
    ov.iter()
        .filter(|o| {
            let v = o.value.as_str();
            let word = !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
            let list = v.starts_with('[') && v.ends_with(']');
            let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
            let key_ok = o
                .key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
            !(key_ok && (word || list || quoted))
        })
        .map(|o| format!("{}={}", o.key, o.value))
        .collect()
}

#[test]
fn bridge_refuses_cards_without_a_recipe() {
    let mut s = Setup::new("gpt-22b", "dgx64", None);
    let codes = refused(&mut s, &Layout::dense(8, 8, 1, 1), Target::MegatronBridge);
    assert!(codes.contains(&"bridge-model".to_string()), "{codes:?}");
}

#[test]
fn cli_target_limits_the_search() {
    // Without layout flags, `--target deepspeed` takes the best layout
    // DeepSpeed can run: T = p = C = 1.
    let dir = temp_dir("target-ds");
    let out = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--target",
        "deepspeed",
        "--recipe",
        "deepspeed",
        "--format",
        "json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["mesh"]["tp"], 1);
    assert_eq!(plan["mesh"]["pp"], 1);
    assert_eq!(plan["mesh"]["dp"], 64);
    assert!(dir.join(generate::DEEPSPEED_CONFIG).exists());
    // Without `--recipe deepspeed` the search keeps ZeRO-1 only (DeepSpeed
    // keeps Megatron's fp32 gradients at ZeRO-1 only, `BF16_Optimizer`), and at T = p = 1 with
    // D = 64 llama3-70b does not fit: its bf16 weights and fp32 gradients
    // stay whole on every GPU at ZeRO-1, 70.6e9 × (2 + 4) B = 424 GB > 80
    // GB. The error says which flag widens the search.
    let narrow = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--target",
        "deepspeed",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(narrow.status.code(), Some(1));
    let err = String::from_utf8_lossy(&narrow.stderr);
    assert!(
        err.contains("0 of the search's 0 ranked layout(s)")
            && err.contains("--recipe deepspeed (DeepSpeed's bf16 gradients with an fp32 copy for the step) lets the search try ZeRO-0, ZeRO-2 and ZeRO-3"),
        "{err}"
    );
    // An unknown target is one clear error naming the choices.
    let bad = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--target",
        "nemo",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("megatron-bridge") && err.contains("deepspeed"),
        "{err}"
    );
}

/// The targets' own parsers, where installed (`scripts/check-launch-target`
/// exits 2 when the package is missing: skipped with its message). Run
/// with deepspeed 0.19.8, torchao and torch 2.15 (`MESHPLAN_CHECK_PYTHON`)
/// and torchtitan at b5bcd76 on `PYTHONPATH`, both pass: DeepSpeed's
/// `DeepSpeedConfig` (pydantic, unknown keys rejected, the batch identity
/// checked against the data-parallel size; it fails a config edited to
/// B = 2049), and torchtitan's `Trainer.Config` checks, CUDA-graph rules
/// and `ParallelDims` (it fails the file edited to keep CUDA graphs with
/// p = 2). Megatron-Bridge runs in a Python 3.12 environment of its own
/// (`MESHPLAN_BRIDGE_PYTHON`; `scripts/setup-launch-checks` builds it:
/// Bridge 0.6.2, Megatron-Core 0.19.2, Transformer Engine 2.17.1, torch
/// 2.13): the library recipe built offline (its Hugging Face config.json
/// from tests/data/hf), the script's overrides applied by Bridge's
/// `process_config_with_overrides` and its `runtime_config_update` run
/// (`cfg.validate()`), which passes; it fails the script edited to
/// B = 2049 or with an unknown key.
#[test]
fn targets_own_parsers_accept_the_files() {
    let mut ran = 0;
    for (target, layout) in [
        (Target::Deepspeed, zero3_dp64()),
        (Target::Torchtitan, main_job_winner()),
        (Target::MegatronBridge, main_job_winner()),
    ] {
        let mut s = Setup::new("70b", "dgx64", None);
        if target == Target::Deepspeed {
            s.job.recipe_name = meshplan::spec::RecipeName::Deepspeed;
            s.job.recipe = meshplan::spec::Recipe::DEEPSPEED;
        }
        let b = render(&mut s, &layout, target).unwrap();
        let dir = temp_dir(&format!("parse-{target}"));
        generate::write(&b.files, &dir).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/check-launch-target");
        // MESHPLAN_CHECK_PYTHON names an interpreter with the packages
        // (e.g. a virtual environment's python), MESHPLAN_BRIDGE_PYTHON
        // Megatron-Bridge's (Python 3.12); python3 otherwise.
        let var = |name: &str| std::env::var(name).ok();
        let python = if target == Target::MegatronBridge {
            var("MESHPLAN_BRIDGE_PYTHON").or_else(|| var("MESHPLAN_CHECK_PYTHON"))
        } else {
            var("MESHPLAN_CHECK_PYTHON")
        }
        .unwrap_or_else(|| "python3".into());
        let out = match Command::new(&python)
            .args([script, &target.to_string(), dir.to_str().unwrap()])
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("skipped: python3 not found ({e})");
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        match out.status.code() {
            Some(0) => ran += 1,
            Some(2) => eprintln!("skipped {target}: {}", text.trim()),
            _ => panic!("{target}: {text}{}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    eprintln!("{ran} of 3 targets checked with their own parsers");
}

#[test]
fn search_target_lists_what_generate_target_takes() {
    // `search --target torchtitan` ranks only what torchtitan runs, and
    // row K is the layout `generate --target torchtitan --rank K` writes
    // (Qwen3-30B-A3B: torchtitan refuses DeepSeek-V3's MTP layer).
    let base = [
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "dgx-h100-1024",
        "--target",
        "torchtitan",
    ];
    let out = meshplan(&[&["search"], &base[..], &["--format", "json", "--top", "3"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (k, row) in rows.iter().enumerate().take(2) {
        assert_eq!(row["rank"], k as u64 + 1);
        // Every listed layout is one torchtitan can express.
        assert_ne!(row["layout"]["zero"], 1);
        assert_eq!(row["layout"]["order"], "tp-cp-ep-dp-pp");
        let dir = temp_dir(&format!("search-target-{k}"));
        let rank = (k + 1).to_string();
        let g = meshplan(
            &[
                &["generate"],
                &base[..],
                &[
                    "--rank",
                    &rank,
                    "--format",
                    "json",
                    "--out",
                    dir.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
        let plan: Value = serde_json::from_slice(&g.stdout).unwrap();
        assert_eq!(plan["layout"], row["layout"], "row {}", k + 1);
    }
}

/// `search --target torchtitan` fixes the CP exchange to all-gather (what
/// PyTorch's context_parallel does); that fix must not drop the C = 1
/// layouts, which have no exchange. Before the fix every C = 1 layout was
/// filtered out: `--no-cp` considered 0 layouts, and without it only C = 2
/// rows were ranked.
#[test]
fn torchtitan_search_keeps_layouts_without_cp() {
    let rows = |extra: &[&str]| -> Vec<Value> {
        let mut a = vec![
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            "dgx64",
            "--target",
            "torchtitan",
            "--format",
            "json",
        ];
        a.extend_from_slice(extra);
        let o = meshplan(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["rows"].as_array().unwrap().clone()
    };
    let no_cp = rows(&["--no-cp"]);
    assert!(!no_cp.is_empty());
    assert!(no_cp.iter().all(|r| r["layout"]["cp"] == 1));
    let all = rows(&["--top", "1000"]);
    assert!(all.iter().any(|r| r["layout"]["cp"] == 1));
    // C > 1 rows still exchange K/V by all-gather only.
    assert!(
        all.iter()
            .filter(|r| r["layout"]["cp"].as_u64().unwrap() > 1)
            .all(|r| r["layout"]["cp_comm"] == "all-gather")
    );
}

/// `--target torchtitan` prices the interleaved schedule's sends as
/// PyTorch's `_PipelineScheduleRuntime` runs them: posted asynchronously
/// and waited for at the end of the step, in both directions
/// ([ref:pytorch-pipelining]), where today's Megatron-LM waits for each
/// forward send. Same layout, same job but for that flag: the PP part's
/// exposed time drops, its total stays, and so do the other parts but the
/// bubble (its slots last a chunk's time, exposed sends included) and the
/// contention on what the sends now hide.
#[test]
fn torchtitan_interleaved_sends_hide_in_both_directions() {
    use meshplan::cost::{self, TimePart};
    let mut s = Setup::new("70b", "dgx-h100-64", None);
    Target::Torchtitan.engine_job(&mut s.job);
    assert!(s.job.overlap_p2p_comm && !s.job.p2p_forward_send_waits);
    let l = Layout {
        vpp: 2,
        zero: 3,
        recompute: Recompute::Full,
        ..Layout::dense(4, 8, 2, 1)
    };
    let torchtitan = cost::evaluate(&s.problem(), &l);
    s.job.p2p_forward_send_waits = true;
    let waiting = cost::evaluate(&s.problem(), &l);
    let pp = |e: &cost::Evaluation| e.time.parts[TimePart::PpComm];
    assert!(pp(&torchtitan).exposed < pp(&waiting).exposed);
    assert!((pp(&torchtitan).total - pp(&waiting).total).abs() <= 1e-12 * pp(&waiting).total);
    assert!(torchtitan.time.step < waiting.time.step);
    for p in TimePart::ALL {
        if ![TimePart::PpComm, TimePart::Contention, TimePart::Bubble].contains(&p) {
            assert_eq!(
                torchtitan.time.parts[p].total, waiting.time.parts[p].total,
                "{p:?}"
            );
        }
    }
}

/// DeepSpeed refuses mixtures of experts; the remedy names torchtitan only
/// for a card torchtitan has a configuration for (qwen3-30b-a3b), not for
/// mixtral-8x7b, which `--target torchtitan` refuses in turn.
#[test]
fn deepspeed_moe_remedy_names_only_targets_that_run_the_card() {
    let remedy = |card: &str| {
        let s = Setup::new(card, "dgx64", None);
        let r = Target::Deepspeed.model_refusals(&s.model, &s.job);
        assert_eq!(r[0].code, "deepspeed-moe");
        r[0].remedy.clone()
    };
    assert_eq!(remedy("mixtral-8x7b"), "use --target megatron");
    assert_eq!(
        remedy("qwen3-30b-a3b"),
        "use --target megatron or torchtitan"
    );
    let s = Setup::new("mixtral-8x7b", "dgx64", None);
    assert!(
        !Target::Torchtitan
            .model_refusals(&s.model, &s.job)
            .is_empty()
    );
}

/// DeepSpeed without ZeRO hooks reduces after the last backward: at ZeRO-1
/// with fp32 accumulation (`BF16_Optimizer`, the megatron recipe) and at
/// ZeRO-0 (`FP16_Optimizer`), `engine.allreduce_gradients` all-reduces the
/// gradients (`buffered_allreduce_fallback`), exposed, and
/// `BF16_Optimizer.step` gathers the parameters, exposed. GPT 1.7B, D = 64
/// on dgx-h100-64, b = 8: Megatron's distributed optimizer reduce-scatters
/// under the backward (a ring all-reduce moves twice a reduce-scatter's
/// bytes, so DeepSpeed's gradient term is twice Megatron's, to the
/// per-step latency terms) and hides most of its gather. DeepSpeed's own
/// ZeRO optimizer (the deepspeed recipe at ZeRO-1) reduces from its hooks,
/// priced as before.
#[test]
fn deepspeed_without_zero_hooks_reduces_after_backward() {
    use meshplan::cost::{self, TimePart};
    let l = |zero: u8| Layout {
        zero,
        micro_batch: 8,
        ..Layout::dense(64, 1, 1, 1)
    };
    let priced = |target: Target, recipe: meshplan::spec::RecipeName, zero: u8| {
        let mut s = Setup::new("gpt-1.7b", "dgx-h100-64", None);
        s.job.recipe_name = recipe;
        s.job.recipe = recipe.recipe();
        target.engine_job(&mut s.job);
        cost::evaluate(&s.problem(), &l(zero))
    };
    use meshplan::spec::RecipeName::{Deepspeed, Megatron};
    let mg = priced(Target::Megatron, Megatron, 1);
    let ds = priced(Target::Deepspeed, Megatron, 1);
    let (g_mg, g_ds) = (mg.time[TimePart::DpGrad], ds.time[TimePart::DpGrad]);
    assert!(
        (g_ds.total / g_mg.total - 2.0).abs() < 0.02,
        "{g_ds:?} {g_mg:?}"
    );
    assert_eq!(g_ds.exposed, g_ds.total);
    assert!(g_mg.exposed < 0.1 * g_mg.total, "{g_mg:?}");
    let (a_mg, a_ds) = (
        mg.time[TimePart::ParamGather],
        ds.time[TimePart::ParamGather],
    );
    assert_eq!(a_ds.total, a_mg.total);
    assert_eq!(a_ds.exposed, a_ds.total);
    assert!(ds.time.step > mg.time.step);
    // ZeRO-0: the same all-reduce, exposed instead of bucketed under the
    // backward.
    let z0 = priced(Target::Deepspeed, Deepspeed, 0).time[TimePart::DpGrad];
    let z0_mg = priced(Target::Megatron, Deepspeed, 0).time[TimePart::DpGrad];
    assert_eq!(z0.total, z0_mg.total);
    assert_eq!(z0.exposed, z0.total);
    assert!(z0_mg.exposed < z0_mg.total);
    // DeepSpeed's ZeRO optimizer at ZeRO-1 keeps its hooks' overlap.
    let hooks = priced(Target::Deepspeed, Deepspeed, 1).time[TimePart::DpGrad];
    let hooks_mg = priced(Target::Megatron, Deepspeed, 1).time[TimePart::DpGrad];
    assert_eq!(hooks, hooks_mg);
}
