//! Hand-checked numbers of the cost model (issue 2). The working is in the
//! comment above each assertion.

mod common;

use common::Fixture;
use meshplan::cost::MemoryPart;
use meshplan::cost::comm::{self, Links};
use meshplan::cost::memory::{self, dense_layer_terms, layer_activation_bytes};
use meshplan::cost::schedule::ideal_bubble_fraction;
use meshplan::layout::{GroupSpan, Layout, Recompute};
use meshplan::search::{self, Space};
use meshplan::spec::{GIB, Recipe};

#[test]
fn llama3_70b_parameters() {
    // 80·(2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192) + 2·128256·8192
    // = 80·855,654,400 + 2,101,346,304 = 70,553,706,496 ≈ 70.55e9.
    let f = Fixture::new("70b", "dgx64");
    assert_eq!(f.model.total_params(), 70_553_706_496.0);
}

#[test]
fn gpt3_activation_bytes_korthikanti() {
    let f = Fixture::new("gpt3-175b", "dgx64");
    let terms = dense_layer_terms(&f.model, true);
    let (s, b, h) = (2048.0, 1.0, 12288.0);
    // No parallelism, no flash: s·b·h·(34 + 5·a·s/h)
    // = 2048·12288·(34 + 5·96·2048/12288) = 25,165,824·114 = 2,868,903,936.
    let none = layer_activation_bytes(&terms, h, s * b, s, 1.0, false, Recompute::None, false);
    assert_eq!(none, 2_868_903_936.0);
    // T = 8, SP, selective: 34·s·b·h/8 = 106,954,752.
    let sel = layer_activation_bytes(&terms, h, s * b, s, 8.0, true, Recompute::Selective, false);
    assert_eq!(sel, 106_954_752.0);
    // T = 8 without SP, selective: s·b·h·(10 + 24/8) = 25,165,824·13.
    let tp = layer_activation_bytes(&terms, h, s * b, s, 8.0, false, Recompute::Selective, false);
    assert_eq!(tp, 25_165_824.0 * 13.0);
    // Full recompute keeps the layer input: 2·s·b·h, ÷T with SP.
    let full = layer_activation_bytes(&terms, h, s * b, s, 8.0, true, Recompute::Full, false);
    assert_eq!(full, 2.0 * 25_165_824.0 / 8.0);
}

#[test]
fn bubble_fraction_seed_000() {
    // p = 32, m = 32: (p−1)/(m+p−1) = 31/63.
    assert_eq!(ideal_bubble_fraction(32, 32, 1), 31.0 / 63.0);
}

#[test]
fn model_states_per_parameter() {
    // The adam-16b recipe, 2/2/12 under DDP: 16 bytes per parameter.
    let p = 1e9;
    assert_eq!(
        memory::model_states(p, &Recipe::ADAM_16B, 0, 64.0, 0.0).total(),
        16.0 * p
    );
    // ZeRO-1: (2 + 2)·P + 12·P/D with D = 64 → 4e9 + 0.1875e9.
    assert_eq!(
        memory::model_states(p, &Recipe::ADAM_16B, 1, 64.0, 0.0).total(),
        4.0 * p + 12.0 * p / 64.0
    );
}

#[test]
fn all_reduce_one_gib_inside_vs_across_dgx_nodes() {
    // dgx64 profile: 300 GB/s NVLink per GPU per direction, 8 × 200 Gb/s
    // NICs per 8-GPU node = 25 GB/s per GPU, collective efficiency `e`
    // from the profile; latency as NCCL's tuning model counts it
    // (src/cost/comm.rs): base 8.4 µs plus one step latency per ring step,
    // or per tree level when the tree is faster.
    let f = Fixture::new("70b", "dgx64");
    let links = Links::of(&f.cluster);
    let s = GIB;
    let inside = comm::all_reduce(s, GroupSpan::of(8, 1, 8), &links);
    let across = comm::all_reduce(s, GroupSpan::of(8, 8, 8), &links);
    let e_in = f.cluster.collective.intra;
    let e_out = f.cluster.collective.inter;
    let lat_in = f.cluster.intra_node.latency_us * 1e-6;
    let lat_out = f.cluster.inter_node.latency_us * 1e-6;
    let base = comm::NCCL_BASE_LATENCY_US * 1e-6;
    // The profile carries NCCL's Ring/Simple step latencies.
    assert_eq!(
        (
            f.cluster.intra_node.latency_us,
            f.cluster.inter_node.latency_us
        ),
        (3.4, 14.0)
    );
    // Inside a node the ring (3.4 µs a step) beats the tree (4.0):
    // 2·(7/8)·S/(300e9·e) + 8.4 µs + 14·3.4 µs.
    let hand_in = 2.0 * 7.0 / 8.0 * s / (300e9 * e_in) + base + 14.0 * lat_in;
    // One GPU on each of 8 nodes: the ring's 14 steps all cross nodes
    // (8.4 + 14·14 = 204.4 µs); the tree's log2(8) = 3 levels, twice
    // (8.4 + 2·3·14 = 92.4 µs) win: 2·(7/8)·S/(25e9·e) + 92.4 µs.
    let hand_out = 2.0 * 7.0 / 8.0 * s / (25e9 * e_out) + base + 6.0 * lat_out;
    assert!((inside - hand_in).abs() < 1e-9, "{inside} vs {hand_in}");
    assert!((across - hand_out).abs() < 1e-9, "{across} vs {hand_out}");
    // NVLink is 12× the NIC share per GPU, so crossing nodes is ~12× slower.
    assert!(across / inside > 8.0);
}

#[test]
fn every_printed_layout_satisfies_the_identities() {
    let f = Fixture::new("70b", "dgx64");
    let pr = f.problem();
    let r = search::search(
        &pr,
        &Space {
            top_k: 50,
            ..Space::default()
        },
    );
    assert!(!r.top.is_empty());
    for c in &r.top {
        let l = &c.layout;
        // N = D·T·p·C
        assert_eq!(l.world(), 64, "{}", l.short());
        // B = D·m·b
        assert_eq!(
            l.dp as u64 * c.eval.micro_batches * l.micro_batch as u64,
            f.job.global_batch
        );
        // Fits memory.
        assert!(c.eval.peak_bytes <= c.eval.usable_bytes);
        // The identity test of the rules agrees.
        assert!(meshplan::rules::violations(&pr, &Default::default(), l).is_empty());
    }
    // Ranked best first.
    for w in r.top.windows(2) {
        assert!(w[0].eval.tokens_per_s >= w[1].eval.tokens_per_s);
    }
}

#[test]
fn worst_rank_is_an_edge_stage() {
    // Under 1F1B stage 0 keeps p micro-batches of activations; the last
    // stage keeps one but adds the logits. With no recompute on p = 4 the
    // first stage is the worst.
    let f = Fixture::new("70b", "dgx64");
    let pr = f.problem();
    let mut l = Layout::dense(2, 8, 4, 1);
    l.recompute = Recompute::None;
    let e = meshplan::cost::evaluate(&pr, &l);
    assert_eq!(e.worst_rank, 0);
    let ranks = meshplan::cost::rank_costs(&pr, &l);
    // Activations fall with the stage index: min(m, p − i) in flight.
    // Stages 1 and 2 hold the same 20 layers with 3 and 2 in flight.
    assert!(ranks[0].memory[MemoryPart::Activations] > ranks[1].memory[MemoryPart::Activations]);
    assert!(
        (ranks[1].memory[MemoryPart::Activations] / ranks[2].memory[MemoryPart::Activations]
            - 3.0 / 2.0)
            .abs()
            < 1e-9
    );
}

#[test]
fn unfused_attention_off_the_tensor_core_alignment() {
    use meshplan::cost::compute::{LayerShape, Rates, layer_forward};
    // GPT-3 175B widened to the BLOOM-prequel shape h = 14400 with 64 heads:
    // head dimension 225, not a multiple of 8.
    let mut f = Fixture::new("gpt3-175b", "dgx64");
    f.model.architecture.hidden = 14400;
    f.model.architecture.heads = 64;
    f.model.architecture.kv_heads = 64;
    f.model.architecture.ffn = 57600;
    assert_eq!(f.model.head_dim(), 225);
    let aligned = Rates {
        gemm_flops: 1e15,
        attn_flops: 1e14,
        hbm: 1e12,
        overhead: 0.0,
        attn_flops_misaligned: 1e14,
        low: None,
        grouped_half_tokens: 0.0,
        gemm_half_k: 0.0,
    };
    let slow = Rates {
        attn_flops_misaligned: 1e12,
        ..aligned
    };
    let mut sh = LayerShape {
        tokens: 2048.0,
        seq: 2048.0,
        tp: 8.0,
        sp: false,
        cp: 1.0,
        flash: false,
        kernel: meshplan::spec::AttnKernel::Cudnn,
    };
    // Core FLOPs (2·2048·2048·14400 + 2·2048·2048·14400)/2 / 8
    // = 15,099,494,400; at 1e12 instead of 1e14 FLOP/s the attention takes
    // 15,099,494,400·(1e-12 − 1e-14) = 0.014948499456 s longer.
    let a = layer_forward(&f.model, &sh, false, 0.0, 1.0, &aligned).attention;
    let b = layer_forward(&f.model, &sh, false, 0.0, 1.0, &slow).attention;
    assert!((b - a - 0.014_948_499_456).abs() < 1e-12, "{}", b - a);
    // Flash attention pads the head dimension itself: no penalty.
    sh.flash = true;
    let a = layer_forward(&f.model, &sh, false, 0.0, 1.0, &aligned).attention;
    let b = layer_forward(&f.model, &sh, false, 0.0, 1.0, &slow).attention;
    assert_eq!(a, b);
    // Head dimension 128 (the unchanged card) is aligned: no penalty.
    let g = Fixture::new("gpt3-175b", "dgx64");
    sh.flash = false;
    let a = layer_forward(&g.model, &sh, false, 0.0, 1.0, &aligned).attention;
    let b = layer_forward(&g.model, &sh, false, 0.0, 1.0, &slow).attention;
    assert_eq!(a, b);
}

/// Selective recompute reruns the attention core's forward in backward
/// with flash attention too (Megatron-Core checkpoints the core attention
/// call whatever the backend, `megatron/core/transformer/attention.py`),
/// and with flash attention it saves no memory over no recompute.
#[test]
fn selective_recompute_with_flash_attention_reruns_the_kernel_and_saves_nothing() {
    use meshplan::cost::TimePart;
    use meshplan::cost::compute::recompute_flops_per_step;
    let f = Fixture::new("70b", "dgx64");
    // Llama 3 70B: q width = attention-output width = 64 heads · 128 = 8192.
    // Attention core per sequence and layer, causal: (2·s·s·8192 + 2·s·s·8192)/2
    // = 2·8192³ = 2^40 at s = 8192; over L = 80 and B = 2048 sequences:
    // 2^40 · 163,840 = 2^55 · 5 = 180,143,985,094,819,840 FLOPs per step.
    assert_eq!(
        recompute_flops_per_step(&f.model, 2048.0, 8192.0, Recompute::Selective),
        180_143_985_094_819_840.0
    );
    assert!(f.job.flash_attention);
    let pr = f.problem();
    let layout = |recompute| Layout {
        sp: true,
        recompute,
        ..Layout::dense(2, 8, 4, 1)
    };
    let none = meshplan::cost::evaluate(&pr, &layout(Recompute::None));
    let sel = meshplan::cost::evaluate(&pr, &layout(Recompute::Selective));
    // Same memory: flash attention keeps no scores either way.
    assert_eq!(sel.peak_bytes, none.peak_bytes);
    // The rerun is on the critical path: the step grows by the recompute
    // part over the m = 2048/(2·1) = 1024 micro-batches, and by the same
    // per micro-batch in each of the p − 1 = 3 bubble slots of 1F1B:
    // Δstep = rerun · (1 + 3/1024).
    assert_eq!(none.micro_batches, 1024);
    assert_eq!(none.time[TimePart::Recompute].exposed, 0.0);
    let rerun = sel.time[TimePart::Recompute].exposed;
    assert!(rerun > 0.0);
    let grown = sel.time.step - none.time.step;
    let expected = rerun * (1.0 + 3.0 / 1024.0);
    assert!(
        (grown - expected).abs() < 1e-9 * none.time.step,
        "{grown} vs {expected}"
    );
    // The rerun is the attention kernel's forward: with the flash backward
    // at 2.5× its forward, 1/3.5 of the attention time of forward plus
    // backward; its FLOP share of the step's compute is 1.8e17 / (model
    // FLOPs) — a few percent of the compute part, not zero and not a layer.
    let share = rerun / none.time[TimePart::Compute].exposed;
    assert!(share > 0.005 && share < 0.10, "{share}");
}
