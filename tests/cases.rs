//! Small cases distilled from public bug reports and pull requests, each a
//! test of its whole kind; `docs/references.md` lists their threads under
//! the keys `case-m1` … `case-f1`. M3 (measured peaks) lives with the
//! fidelity tests.

mod common;

use common::{Fixture, gpt_card};
use meshplan::cost::Problem;
use meshplan::cost::comm::{self, Links};
use meshplan::cost::layer::layer_costs;
use meshplan::cost::memory::{self, dense_layer_terms, layer_activation_bytes};
use meshplan::layout::{Layout, Placement, Recompute};
use meshplan::rules::{self, Policy, Rule};
use meshplan::spec::{Job, Recipe};

/// M1 (Megatron-LM #654, #589): the distributed optimizer shards only the 12
/// bytes of fp32 master weights and Adam moments of the 18 per parameter.
#[test]
fn m1_distributed_optimizer_bytes() {
    let r = Recipe::MEGATRON_BF16;
    let p = 7e9;
    // DP8 without it: 18·7e9 = 126 GB.
    assert_eq!(memory::model_states(p, &r, 0, 8.0, 0.0).total(), 126e9);
    // DP8 with it: 6·7 + 12·7/8 = 52.5 GB.
    assert_eq!(memory::model_states(p, &r, 1, 8.0, 0.0).total(), 52.5e9);
    // DP2 with it: 6·7 + 12·7/2 = 84 GB.
    assert_eq!(memory::model_states(p, &r, 1, 2.0, 0.0).total(), 84e9);
    // The whole kind: with DO, states = (b_w + b_g)·P + b_o·P/D for any D.
    for d in [1.0, 3.0, 16.0, 1024.0] {
        let s = memory::model_states(p, &r, 1, d, 0.0);
        assert_eq!(s.weights + s.grads, 6.0 * p);
        assert_eq!(s.optimizer, 12.0 * p / d);
    }
}

/// M2 (DeepSpeed #5099, #4076, #5102): ZeRO-2 replicates fp16 weights and
/// partitions the rest: 2P + 18P/N (not the older 4P + 16P/N).
#[test]
fn m2_zero2_model_states() {
    let r = Recipe::DEEPSPEED;
    // P = 7e9, N = 8: 14 + 15.75 = 29.75 GB at the optimizer step, when the
    // fp32 gradient partition (4P/N of the 18P/N) exists; 14 + 12.25 = 26.25
    // GB held through backward.
    let s = memory::model_states(7e9, &r, 2, 8.0, 0.0);
    assert_eq!(s.at_step(), 29.75e9);
    assert_eq!(s.total(), 26.25e9);
    for n in [2.0, 64.0] {
        assert_eq!(
            memory::model_states(1e9, &r, 2, n, 0.0).at_step(),
            2e9 + 18e9 / n
        );
    }
}

/// M4 (Megatron-LM #1225, #464): with flash attention the score, softmax
/// and dropout tensors are never stored, so selective recompute saves
/// nothing; without it selective saves 5·a·s²·b/t per layer. Never subtract
/// the score term twice.
#[test]
fn m4_selective_recompute_with_and_without_flash() {
    let f = Fixture::new("gpt3-175b", "dgx64");
    let terms = dense_layer_terms(&f.model, true);
    let (s, b, h, a, t) = (2048.0, 2.0, 12288.0, 96.0, 4.0);
    for sp in [false, true] {
        let none_flash = layer_activation_bytes(&terms, h, s * b, s, t, sp, Recompute::None, true);
        let sel_flash =
            layer_activation_bytes(&terms, h, s * b, s, t, sp, Recompute::Selective, true);
        assert_eq!(none_flash, sel_flash, "flash: selective saves nothing");
        let none = layer_activation_bytes(&terms, h, s * b, s, t, sp, Recompute::None, false);
        let sel = layer_activation_bytes(&terms, h, s * b, s, t, sp, Recompute::Selective, false);
        assert_eq!(none - sel, 5.0 * a * s * s * b / t);
        // Selective without flash equals flash without recompute: the score
        // term is removed once.
        assert_eq!(sel, none_flash);
    }
}

/// M5 (llm-analysis #19, #27): norm weights are replicated across TP, and a
/// pre-norm layer has two of them.
#[test]
fn m5_layer_norms_replicated_across_tp() {
    for (name, norm_width) in [("gpt3-175b", 2.0), ("llama3-70b", 1.0)] {
        let f = Fixture::new(name, "dgx64");
        let pr = f.problem();
        let h = f.model.architecture.hidden as f64;
        for t in [1u32, 2, 8] {
            let l = Layout::dense(64 / t, t, 1, 1);
            let lc = layer_costs(&pr, &l, &Placement::new(&l, 8));
            // Matrices ÷ T (K/V too while T ≤ kv heads); 2 norms of width
            // h (RMSNorm) or 2h (LayerNorm) stay whole.
            let norms = 2.0 * norm_width * h;
            let sharded = f.model.attention_params() + f.model.mlp_params(f.model.architecture.ffn);
            let expect = sharded / t as f64 + norms;
            assert!(
                (lc.dense.params - expect).abs() < 1.0,
                "{name} T={t}: {} vs {}",
                lc.dense.params,
                expect
            );
        }
    }
}

/// P1 (llm-analysis #27): the link a DP collective uses follows from where
/// the group's ranks sit, not from the DP size.
#[test]
fn p1_dp_link_follows_placement() {
    let f = Fixture::new("70b", "dgx64");
    let links = Links::of(&f.cluster);
    // DP = 8 twice. With T = 1 (D8 T1 p1 C1 on 8 GPUs) the DP ranks are
    // adjacent: one node, NVLink. With T = 8 (D8 T8 on 64 GPUs) they are
    // 8 apart: eight nodes, NICs.
    let a = Layout::dense(8, 1, 1, 1);
    let b = Layout::dense(8, 8, 1, 1);
    let pa = Placement::new(&a, 8);
    let pb = Placement::new(&b, 8);
    assert_eq!(pa.dp.domains, 1);
    assert_eq!(pb.dp.domains, 8);
    let bytes = 1e9;
    let ta = comm::all_reduce(bytes, pa.dp, &links);
    let tb = comm::all_reduce(bytes, pb.dp, &links);
    assert!(tb > 5.0 * ta, "{ta} {tb}");
    // And the rank order moves DP across the node boundary: T = 4, p = 2,
    // D = 8 on 64 GPUs: tp-cp-ep-dp-pp puts DP at stride 4 (2 per node,
    // 4 nodes); tp-cp-ep-pp-dp at stride 8 (1 per node).
    let mut c = Layout::dense(8, 4, 2, 1);
    let pc = Placement::new(&c, 8);
    assert_eq!((pc.dp.per_domain, pc.dp.domains), (2, 4));
    c.order = meshplan::layout::RankOrder::TpCpEpPpDp;
    let pc = Placement::new(&c, 8);
    assert_eq!((pc.dp.per_domain, pc.dp.domains), (1, 8));
}

fn problem_for<'a>(f: &'a Fixture, job: &'a Job, world: u64) -> Problem<'a> {
    Problem::new(&f.model, &f.gpu, &f.cluster, job, world)
}

/// R1 (Megatron-LM #468): 80 layers, PP16, 2 layers per virtual stage →
/// reject (5 layers per stage is not divisible by 2); 80 layers, PP8, 5
/// virtual stages → accept.
#[test]
fn r1_virtual_stages_divide_stage_layers() {
    let f = Fixture::new("llama2-70b", "dgx64"); // 80 layers
    let job = Job::new(1024, 4096);
    let pr = problem_for(&f, &job, 64);
    let mut l = Layout::dense(4, 1, 16, 1);
    l.sp = false;
    l.vpp = 2; // 2 chunks per rank of 80/16 = 5 layers
    let v = rules::violations(&pr, &Policy::default(), &l);
    assert!(v.contains(Rule::LayersPp));
    let text = rules::explain(&pr, &Policy::default(), &l, None);
    let msg = &text
        .iter()
        .find(|x| x.rule == Rule::LayersPp)
        .unwrap()
        .message;
    assert!(
        msg.contains("5 per stage") && msg.contains("v = 2"),
        "{msg}"
    );
    let mut ok = Layout::dense(8, 1, 8, 1);
    ok.sp = false;
    ok.vpp = 5;
    let v = rules::violations(&pr, &Policy::default(), &ok);
    assert!(
        !v.contains(Rule::LayersPp) && !v.contains(Rule::Interleave),
        "{v:?}"
    );
}

/// R2 (Megatron-LM #1304, #2718, #1778): 30 layers on PP4 → reject unless
/// the stage counts add up (8 + 7 + 7 + 8); 48 layers on PP2 as 11 + 13 →
/// reject.
#[test]
fn r2_uneven_layers() {
    let mut f = Fixture::new("gpt-1.7b", "dgx64");
    f.model.architecture.layers = 30;
    let job = Job::new(512, 2048);
    let pr = problem_for(&f, &job, 64);
    let mut l = Layout::dense(16, 1, 4, 1);
    assert!(rules::violations(&pr, &Policy::default(), &l).contains(Rule::LayersPp));
    l.split = Some(vec![8, 7, 7, 8]);
    let v = rules::violations(&pr, &Policy::default(), &l);
    assert!(
        !v.contains(Rule::LayersPp) && !v.contains(Rule::Split),
        "{v:?}"
    );
    f.model.architecture.layers = 48;
    let pr = problem_for(&f, &job, 64);
    let mut l = Layout::dense(32, 1, 2, 1);
    l.split = Some(vec![11, 13]);
    let v = rules::violations(&pr, &Policy::default(), &l);
    assert!(v.contains(Rule::Split));
    let msg = rules::explain(&pr, &Policy::default(), &l, None)
        .into_iter()
        .find(|x| x.rule == Rule::Split)
        .unwrap()
        .message;
    assert!(msg.contains("24") && msg.contains("48"), "{msg}");
}

/// R3 (NeMo-RL #3563): with CP and SP the sequence must divide by
/// C·lcm(2, T). CP2 TP8: 8200 rejected (4100 not divisible by 8), 8208
/// accepted; CP2 TP4 needs a factor 8, not 16.
#[test]
fn r3_cp_with_sequence_parallel() {
    let f = Fixture::new("llama3-8b", "dgx64");
    let check = |seq: u64, tp: u32| {
        let job = Job::new(64, seq);
        let pr = problem_for(&f, &job, 64);
        let mut l = Layout::dense(64 / (2 * tp), tp, 1, 2);
        l.sp = true;
        rules::violations(&pr, &Policy::default(), &l)
    };
    assert!(check(8200, 8).contains(Rule::SpSeq));
    assert!(!check(8208, 8).contains(Rule::SpSeq));
    assert!(!check(8208, 8).contains(Rule::CpSeq));
    // 8200 = 8·1025: divisible by 8 (CP2·lcm(2,4)) but not by 16.
    assert!(!check(8200, 4).contains(Rule::SpSeq));
    // s % 2C for the causal load balancing alone.
    assert!(check(8202, 4).contains(Rule::CpSeq));
}

/// R4 (DeepSpeed #3634): 52 heads → valid T inside an 8-GPU node are 1, 2,
/// 4; 28 query heads with 4 KV heads → 1, 2, 4 (7 divides 28 but not as a
/// multiple or divisor of 4). The message names the head count and values.
#[test]
fn r4_heads_and_tp() {
    for (heads, kv, bad_tp) in [(52u32, 52u32, 8u32), (28, 4, 8)] {
        let mut fx = Fixture::new("gpt-1.7b", "dgx64");
        fx.model = gpt_card(24, 128 * heads as u64, heads, kv);
        let job = Job::new(512, 2048);
        let pr = problem_for(&fx, &job, 64);
        let l = Layout::dense(64 / bad_tp, bad_tp, 1, 1);
        let v = rules::explain(&pr, &Policy::default(), &l, None);
        let heads_rule = v
            .iter()
            .find(|x| x.rule == Rule::HeadsTp)
            .expect("heads rule fires");
        assert!(
            heads_rule.message.contains(&heads.to_string()),
            "{}",
            heads_rule.message
        );
        assert!(
            heads_rule.remedy.ends_with("1, 2, 4"),
            "{}",
            heads_rule.remedy
        );
        for t in [1, 2, 4] {
            let l = Layout::dense(64 / t, t, 1, 1);
            let v = rules::violations(&pr, &Policy::default(), &l);
            assert!(
                !v.contains(Rule::HeadsTp) && !v.contains(Rule::KvHeadsTp),
                "T={t}"
            );
        }
    }
}

/// F1 (Megatron-LM #1565): dense bf16 peaks; 1979 is the sparse H100
/// figure. 420 TFLOP/s on an H200 is MFU 0.425.
#[test]
fn f1_dense_peaks_and_mfu() {
    let c = common::catalog();
    assert_eq!(c.gpu("a100-80g").unwrap().peak_tflops_bf16, 312.0);
    assert_eq!(c.gpu("a100-40g").unwrap().peak_tflops_bf16, 312.0);
    assert_eq!(c.gpu("h100-sxm").unwrap().peak_tflops_bf16, 989.0);
    assert_eq!(c.gpu("h200").unwrap().peak_tflops_bf16, 989.0);
    let mfu = 420.0 / c.gpu("h200").unwrap().peak_tflops_bf16;
    assert!((mfu - 0.425).abs() < 0.001);
    // The evaluation reports MFU against the same dense peak.
    let f = Fixture::new("llama3-8b", "h200-64");
    let pr = f.problem();
    let e = meshplan::cost::evaluate(&pr, &Layout::dense(64, 1, 1, 1));
    assert!((e.mfu - e.tflops_per_gpu / 989.0).abs() < 1e-12);
}
