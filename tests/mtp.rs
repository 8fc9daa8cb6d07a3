//! Multi-token prediction (DeepSeek-V3 report, arXiv:2412.19437, §2.2):
//! the card field, its parameters and FLOPs worked by hand, its place on
//! the last pipeline stage, and the launch files that build it.

mod common;

use common::Setup;
use meshplan::cost::{self, compute};
use meshplan::generate::{self, GenerateError, Target, megatron, megatron_bridge};
use meshplan::layout::Layout;
use meshplan::rules::Policy;
use meshplan::spec::Model;
use std::path::Path;

fn dsv3() -> Model {
    common::catalog().model("deepseek-v3").unwrap().clone()
}

fn without_mtp(m: &Model) -> Model {
    let mut m = m.clone();
    m.architecture.mtp_layers = 0;
    m.architecture.mtp_loss_scale = None;
    m
}

/// DeepSeek-V3's MTP module by hand (h = 7168, V = 129,280, MLA ranks
/// 1536/512, 128 heads of 128 + 64, 256 experts of width 2048, 1 shared):
/// - attention: q 7168·1536 + 1536 + 1536·128·192 = 48,760,320; kv_a
///   7168·576 + 512 = 4,129,280; kv_b 512·128·256 = 16,777,216; o
///   128·128·7168 = 117,440,512; in all 187,107,328;
/// - experts 257 · 3·7168·2048 = 11,318,329,344, router 7168·256 =
///   1,835,008, two norms 14,336: the MoE layer 11,507,286,016;
/// - projection 2·7168² = 102,760,448, three norms 21,504:
///   11,610,067,968 new parameters.
///
/// Published: the Hugging Face checkpoint is 685B = 671B main model + 14B
/// MTP module (README); README_WEIGHTS.md: the MTP module has "11.5B unique
/// parameters (excluding the shared 0.9B Embedding and 0.9B output Head)".
/// So the 14B is 685 − 671 of rounded totals, the unique part plus the
/// shared embedding and head 2·926,679,040. Main (671,026,404,352) + MTP +
/// shared = 684,489,830,400: −0.07% against 685B. The README's 11.5B
/// matches the transformer layer alone (+0.06%); with the projection the
/// count is 11.61B, +0.96% (the README rounds or leaves `eh_proj` out).
#[test]
fn deepseek_v3_mtp_parameters_by_hand() {
    let m = dsv3();
    assert_eq!(m.architecture.mtp_layers, 1);
    assert!(m.mtp_is_moe());
    assert_eq!(m.attention_params(), 187_107_328.0);
    assert_eq!(m.moe_layer_params(), 11_507_286_016.0);
    assert_eq!(m.mtp_projection_params(), 102_760_448.0);
    assert_eq!(m.mtp_layer_params(), 11_610_067_968.0);
    assert_eq!(m.mtp_params(), 11_610_067_968.0);
    // The card's own count stays the main model's.
    assert_eq!(m.total_params(), 671_026_404_352.0);
    let shared = 2.0 * 129_280.0 * 7168.0;
    assert_eq!(shared, 1_853_358_080.0);
    let checkpoint = m.total_params() + m.mtp_params() + shared;
    assert_eq!(checkpoint, 684_489_830_400.0);
    assert!((checkpoint / 685e9 - 1.0).abs() < 0.005, "{checkpoint}");
    assert!((m.moe_layer_params() / 11.5e9 - 1.0).abs() < 0.005);
    // 13.46B of the "14B" (685 − 671 of rounded figures).
    assert!(((m.mtp_params() + shared) / 13.46e9 - 1.0).abs() < 0.001);
}

/// Extra model FLOPs per token of DeepSeek-V3's MTP module at s = 4096, as
/// Megatron-LM's `num_floating_point_operations` counts them:
/// - one more MoE layer's GEMMs, 6 · (187,107,328 attention + 44,040,192
///   shared expert + 1,835,008 router + 8 · 44,040,192 routed) =
///   6 · 585,304,064 = 3,511,824,384;
/// - its causal attention core, 3 · s · (128·192 + 128·128) = 3 · 4096 ·
///   40,960 = 503,316,480;
/// - norms and projection 6 · (3·7168 + 2·7168²) = 616,691,712;
/// - one more pass through the output head 6 · 7168 · 129,280 =
///   5,560,074,240;
///
/// in all 10,191,906,816 FLOPs per token.
#[test]
fn deepseek_v3_mtp_flops_per_token_by_hand() {
    let m = dsv3();
    let (b, s) = (1.0, 4096.0);
    let with = compute::model_flops_per_step(&m, b, s);
    let without = compute::model_flops_per_step(&without_mtp(&m), b, s);
    assert_eq!(compute::layer_flop_params(&m, true), 585_304_064.0);
    assert_eq!((with - without) / s, 10_191_906_816.0);
    assert_eq!(
        3_511_824_384u64 + 503_316_480 + 616_691_712 + 5_560_074_240,
        10_191_906_816
    );
}

/// The model FLOPs reproduce Megatron-Bridge's own count for its published
/// DeepSeek-V3 run (25.09, 1024 H100, B = 8192, s = 4096: 338 TFLOP/s per
/// GPU at 25.264 s per step, `docs/performance-summary-archive.md`):
/// 338e12 · 1024 · 25.264 = 8.7441e18 FLOPs per step. Without the MTP
/// layer the count is 3.9% short, so Bridge counts it.
#[test]
fn model_flops_match_megatron_bridge_deepseek_v3() {
    let m = dsv3();
    let published = 338e12 * 1024.0 * 25.264;
    let ours = compute::model_flops_per_step(&m, 8192.0, 4096.0);
    assert!((ours / published - 1.0).abs() < 0.002, "{ours:e}");
    let main_only = compute::model_flops_per_step(&without_mtp(&m), 8192.0, 4096.0);
    assert!(main_only / published - 1.0 < -0.035, "{main_only:e}");
}

/// D = 128 · p 16 · EP 64, the paper's layout: the MTP layer sits on the
/// last stage only. Its dense parameters there grow by the MoE layer's
/// attention, shared expert, router and norms, the projection, three norms
/// and the word-embedding copy (untied, p > 1), T = 1: 187,107,328 +
/// 44,040,192 + 1,835,008 + 14,336 + 102,760,448 + 21,504 + 129,280·7168 =
/// 1,262,457,856; its expert parameters by 256 · 44,040,192 / 64 =
/// 176,160,768. Every other stage is priced as without MTP, and the last
/// stage takes longer.
#[test]
fn the_last_stage_carries_the_mtp_layer() {
    let mut s = Setup::new("deepseek-v3", "h800-2048", None);
    let l = Layout {
        ep: 64,
        ..Layout::dense(128, 1, 16, 1)
    };
    let with = cost::rank_costs(&s.problem(), &l);
    s.model = without_mtp(&s.model);
    let without = cost::rank_costs(&s.problem(), &l);
    for r in 0..15 {
        assert_eq!(with[r].params, without[r].params, "rank {r}");
        assert_eq!(with[r].time, without[r].time, "rank {r}");
    }
    assert_eq!(with[15].params - without[15].params, 1_262_457_856.0);
    assert_eq!(
        with[15].expert_params - without[15].expert_params,
        176_160_768.0
    );
    // More than one MoE layer's time: the layer, the head again, the rest.
    let moe_layer = with[1].time / with[1].layers as f64;
    assert!(
        with[15].time - without[15].time > moe_layer,
        "{} vs {}",
        with[15].time - without[15].time,
        moe_layer
    );
    // Two losses' logits saved through backward on the last stage.
    assert_eq!(
        with[15].memory[cost::MemoryPart::Logits],
        2.0 * without[15].memory[cost::MemoryPart::Logits]
    );
    // The stage split sees it on its last item (the output).
    s.model = dsv3();
    let sp_with = meshplan::split::SplitProblem::for_layout(&s.problem(), &l);
    s.model = without_mtp(&s.model);
    let sp_without = meshplan::split::SplitProblem::for_layout(&s.problem(), &l);
    let last = sp_with.items.len() - 1;
    assert!(sp_with.items[last].time > sp_without.items[last].time + moe_layer);
    assert_eq!(sp_with.items[1].time, sp_without.items[1].time);
}

/// The Megatron-LM script builds the MTP layer the plan priced, with the
/// card's loss weight; an explicit layout puts `m` before the loss.
#[test]
fn megatron_script_has_the_mtp_layer() {
    let s = Setup::new("deepseek-v3", "h800-2048", None);
    let best = s.best().expect("a valid layout");
    let b = s.bundle(&best);
    let script = b.file(generate::MEGATRON_SCRIPT).unwrap();
    assert!(script.contains("--mtp-num-layers 1 "), "{script}");
    assert!(
        script.contains("--mtp-loss-scaling-factor 0.1 "),
        "{script}"
    );
    // A split Megatron can only take as a layout string.
    let mut plan = b.plan.clone();
    plan.mesh.pp = 4;
    plan.mesh.vpp = 1;
    plan.pipeline.chunks = 4;
    plan.pipeline.layers_per_chunk = vec![15, 16, 17, 13];
    plan.pipeline.uniform = false;
    match megatron::split(&plan) {
        megatron::Split::Layout { layout } => {
            assert_eq!(layout, "E,t*15|t*16|t*17|t*13,m,L")
        }
        other => panic!("{other:?}"),
    }
    plan.model.mtp_layers = 0;
    match megatron::split(&plan) {
        megatron::Split::Layout { layout } => assert_eq!(layout, "E,t*15|t*16|t*17|t*13,L"),
        other => panic!("{other:?}"),
    }
    // Without MTP the script has no MTP flag.
    let mut s = Setup::new("deepseek-v3", "h800-2048", None);
    s.model = without_mtp(&s.model);
    let script = s
        .bundle(&best)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    assert!(!script.contains("--mtp-"), "{script}");
}

/// Megatron-Bridge: the recipe's MTP depth is set to the card's (one for
/// DeepSeek-V3, with its loss weight) instead of cleared; a card without
/// MTP clears it.
#[test]
fn bridge_sets_the_cards_mtp_layers() {
    let mut s = Setup::new("deepseek-v3", "h800-2048", None);
    let best = s.best().expect("a valid layout");
    Target::MegatronBridge.engine_job(&mut s.job);
    let b = generate::generate_for(
        &s.problem(),
        &Policy::default(),
        &best,
        Target::MegatronBridge,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ov = megatron_bridge::overrides(&b.plan);
    let get = |k: &str| {
        ov.iter()
            .rev()
            .find(|o| o.key == k)
            .map(|o| o.value.clone())
    };
    assert_eq!(get("model.mtp_num_layers").as_deref(), Some("1"));
    assert_eq!(get("model.mtp_loss_scaling_factor").as_deref(), Some("0.1"));
    let script = b.file(generate::BRIDGE_SCRIPT).unwrap();
    assert!(script.contains("model.mtp_num_layers=1"), "{script}");
    let mut plan = b.plan.clone();
    plan.model.mtp_layers = 0;
    plan.model.mtp_loss_scale = None;
    let ov = megatron_bridge::overrides(&plan);
    let v: Vec<_> = ov
        .iter()
        .filter(|o| o.key.starts_with("model.mtp"))
        .map(|o| (o.key.as_str(), o.value.as_str()))
        .collect();
    assert_eq!(v, [("model.mtp_num_layers", "null")]);
}

/// torchtitan's and DeepSpeed's files cannot build the MTP module: refused,
/// with a sentence that says so.
#[test]
fn torchtitan_and_deepspeed_refuse_mtp() {
    let mut s = Setup::new("deepseek-v3", "h800-2048", None);
    let l = Layout {
        ep: 64,
        zero: 3,
        order: meshplan::layout::RankOrder::TpCpEpDpPp,
        ..Layout::dense(2048, 1, 1, 1)
    };
    for (target, code) in [
        (Target::Torchtitan, "torchtitan-mtp"),
        (Target::Deepspeed, "deepspeed-mtp"),
    ] {
        target.engine_job(&mut s.job);
        match generate::generate_for(&s.problem(), &Policy::default(), &l, target) {
            Err(GenerateError::Refused { refusals, .. }) => {
                let r = refusals
                    .iter()
                    .find(|r| r.code == code)
                    .unwrap_or_else(|| panic!("{target}: {refusals:?}"));
                assert!(
                    r.message.contains("multi-token-prediction"),
                    "{}",
                    r.message
                );
            }
            other => panic!("{target}: {:?}", other.map(|_| ())),
        }
    }
    // Without MTP torchtitan's refusal is not raised.
    let mut s = Setup::new("deepseek-v3", "h800-2048", None);
    s.model = without_mtp(&s.model);
    let codes = Target::Torchtitan.model_refusals(&s.model, &s.job);
    assert!(codes.iter().all(|r| r.code != "torchtitan-mtp"));
}

/// The card field is checked with an error naming file and field.
#[test]
fn mtp_fields_are_checked() {
    let text = std::fs::read_to_string("models/deepseek-v3.toml").unwrap();
    let card = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        Model::from_toml(&text.replace(from, to), Path::new("ds.toml")).map(|_| ())
    };
    let e = card("mtp_layers = 1 ", "mtp_layers = 65 ").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `architecture.mtp_layers`: 65 exceeds meshplan's limit of 64 (see src/limits.rs)"
    );
    let e = card("mtp_layers = 1 ", "mtp_layers = 0 ").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `architecture.mtp_loss_scale`: is set but mtp_layers is 0"
    );
    let e = card("mtp_loss_scale = 0.1 ", "mtp_loss_scale = -1.0 ").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("ds.toml: field `architecture.mtp_loss_scale`: must be a positive"),
        "{e}"
    );
    // Megatron-LM refuses MTP with ALiBi (arguments.py: position ids needed).
    let alibi = text
        .replace(
            "position_embedding = \"rope\"",
            "position_embedding = \"alibi\"",
        )
        .replace("rope_theta = 10000.0", "");
    let e = Model::from_toml(&alibi, Path::new("ds.toml")).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "ds.toml: field `architecture.mtp_layers`: multi-token prediction needs position ids"
        ),
        "{e}"
    );
    // A card without the field has no MTP.
    let m = common::catalog().model("llama3-8b").unwrap().clone();
    assert_eq!(m.architecture.mtp_layers, 0);
    assert_eq!(m.mtp_params(), 0.0);
}
