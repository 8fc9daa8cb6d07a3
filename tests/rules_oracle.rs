//! The rules, two ways: [`rules::violations`] (the bit set the search uses)
//! and [`rules::explain`] (the sentences) must name the same rules for
//! every layout, and both must keep the behaviour they had when the rules
//! became one table:
//!
//! - hand-checked layouts, with every sentence and remedy spelled out and
//!   the numbers worked in the comments;
//! - a broad enumeration (valid layouts, wrong mesh sizes, bad splits, v
//!   without p, E on dense models, …) over seven model/cluster/job/bounds
//!   cases, summarised as a snapshot: per case the number of layouts, how
//!   many break each rule, and FNV-1a digests of every (layout, bit set)
//!   and every sentence. The snapshot was taken before the table existed.

mod common;

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

use common::Setup;
use meshplan::layout::{CpComm, Layout, RankOrder, Recompute};
use meshplan::rules::{self, Policy, Rule, RuleSet};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

thread_local! {
    /// Allocations made by this thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting allocations per thread.
struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// `(code, message, remedy)` of every sentence for `l`.
fn said(s: &Setup, policy: &Policy, l: &Layout) -> Vec<(String, String, String)> {
    rules::explain(&s.problem(), policy, l, None)
        .into_iter()
        .map(|v| (v.code.to_string(), v.message, v.remedy))
        .collect()
}

fn codes(s: &Setup, l: &Layout) -> Vec<&'static str> {
    rules::violations(&s.problem(), &Policy::default(), l)
        .iter()
        .map(Rule::code)
        .collect()
}

fn triple(code: &str, message: &str, remedy: &str) -> (String, String, String) {
    (code.into(), message.into(), remedy.into())
}

// ------------------------------------------------------------ hand-checked

/// Llama 3 70B on dgx64 (N = 64, NVLink domain 8; 64 heads, 8 KV heads,
/// FFN 28672, 80 layers, s = 8192, B = 2048), D3 T3 p3 C1 with SP:
/// - 3·3·3·1 = 27 ≠ 64;
/// - 64 % 3 = 1; 8 % 3 = 2 and 3 % 8 = 3; valid T ≤ 8 dividing 64 with 8
///   KV heads a multiple or divisor: 1, 2, 4, 8;
/// - 28672 = 3·9557 + 1;
/// - 80 % 3 = 2; divisors of 80 in 2..=128: 2, 4, 5, 8, 10, 16, 20, 40, 80;
/// - B % (D·b) = 2048 % 3 = 2;
/// - SP: 8192 % 3 = 2, so 8190 = 3·2730 or 8193 = 3·2731.
#[test]
fn dense_sizes_that_do_not_divide() {
    let s = Setup::new("llama3-70b", "dgx64", None);
    let l = Layout::dense(3, 3, 3, 1);
    let valid_t = "valid T inside a 8-GPU node: 1, 2, 4, 8";
    assert_eq!(
        said(&s, &Policy::default(), &l),
        vec![
            triple(
                "mesh-size",
                "D·T·p·C = 3·3·3·1 = 27 but the job has 64 GPUs",
                "choose sizes whose product is 64"
            ),
            triple(
                "heads-tp",
                "64 attention heads are not divisible by T = 3",
                valid_t
            ),
            triple(
                "kv-heads-tp",
                "8 KV heads are neither a multiple nor a divisor of T = 3 (64 query heads)",
                valid_t
            ),
            triple(
                "ffn-tp",
                "FFN width 28672 (or expert FFN over ETP = 1) is not divisible by T = 3",
                "choose T (and ETP) dividing the FFN width"
            ),
            triple(
                "layers-pp",
                "80 layers do not split evenly over p·v = 3 stages",
                "use p·v among 1, 2, 4, 5, 8, 10, 16, 20, 40, 80, or an uneven split (first/last stage layer counts)"
            ),
            triple(
                "batch",
                "global batch 2048 is not divisible by D·b = 3·1 = 3",
                "choose D and b whose product divides the global batch"
            ),
            triple(
                "sp-seq",
                "with SP the sequence must be divisible by 3 (C·lcm(2, T) with C = 1, T = 3), but s = 8192 (8192 / 3 leaves 2)",
                "use s = 8190 or 8193"
            ),
        ]
    );
    assert_eq!(
        codes(&s, &l),
        [
            "mesh-size",
            "heads-tp",
            "kv-heads-tp",
            "ffn-tp",
            "layers-pp",
            "batch",
            "sp-seq"
        ]
    );
    // D2 T8 p4 C1 is valid: 64 GPUs, 80 / 4 = 20, 2048 % 2 = 0, 8192 % 8 = 0.
    assert!(codes(&s, &Layout::dense(2, 8, 4, 1)).is_empty());
}

/// Llama 3 70B on dgx64, the pipeline rules:
/// - D2 T8 p4 v3: 80 / 4 = 20 layers per stage, 20 % 3 = 2;
/// - D8 T8 p1 v2: interleaving without a pipeline (80 % 2 = 0, so only that);
/// - D8 T1 p8 v2 b128: m = 2048 / (8·128) = 2 < p = 8 (80 % 16 = 0);
/// - D16 T1 p4 with split 20 + 20 + 20 + 19 = 79 ≠ 80; with 0 + 40 + 20 + 20
///   one stage is empty; with three entries the length is wrong.
#[test]
fn pipeline_sentences() {
    let s = Setup::new("llama3-70b", "dgx64", None);
    let p = Policy::default();
    let l = Layout {
        vpp: 3,
        ..Layout::dense(2, 8, 4, 1)
    };
    assert_eq!(
        said(&s, &p, &l),
        vec![triple(
            "layers-pp",
            "80 layers on p = 4 give 20 per stage, not divisible by v = 3",
            // With p = 4 kept, v must divide 20: 1, 2, 4, 5, 10, 20.
            "use v among 1, 2, 4, 5, 10, 20 (p·v dividing 80), or an uneven split (first/last stage layer counts)"
        )]
    );
    let remedy = "use v = 1, or a global batch / micro-batch giving m a multiple of p";
    let l = Layout {
        vpp: 2,
        ..Layout::dense(8, 8, 1, 1)
    };
    assert_eq!(
        said(&s, &p, &l),
        vec![triple(
            "interleave",
            "v = 2 interleaving needs p > 1",
            remedy
        )]
    );
    // D8 T8 p1 v3: 80 % 3 ≠ 0 as well, and no v > 1 runs without a
    // pipeline, so the remedy is v = 1 (it listed v that `interleave`
    // then rejects).
    let l = Layout {
        vpp: 3,
        ..Layout::dense(8, 8, 1, 1)
    };
    assert_eq!(
        said(&s, &p, &l),
        vec![
            triple(
                "layers-pp",
                "80 layers on p = 1 give 80 per stage, not divisible by v = 3",
                "use v = 1 (interleaving needs a pipeline, p > 1)"
            ),
            triple("interleave", "v = 3 interleaving needs p > 1", remedy)
        ]
    );
    let l = Layout {
        vpp: 2,
        micro_batch: 128,
        ..Layout::dense(8, 1, 8, 1)
    };
    assert_eq!(
        said(&s, &p, &l),
        vec![triple(
            "interleave",
            "interleaving needs m ≥ p and m % p = 0 (Megatron's micro-batch groups of p), but m = 2 and p = 8",
            remedy
        )]
    );
    let split_remedy = "give p·v positive layer counts that add up to the model's layers";
    for (split, stages, sum) in [
        (vec![20, 20, 20, 19], 4, 79),
        (vec![0, 40, 20, 20], 4, 80),
        (vec![40, 20, 20], 3, 80),
    ] {
        let l = Layout {
            split: Some(split.clone()),
            ..Layout::dense(16, 1, 4, 1)
        };
        assert_eq!(
            said(&s, &p, &l),
            vec![triple(
                "split",
                &format!(
                    "split {} has {stages} stages summing to {sum} layers; the layout needs 4 stages summing to 80, none empty",
                    meshplan::rules::comma(&split)
                ),
                split_remedy
            )]
        );
    }
    // 20 + 20 + 21 + 19 = 80 over four stages is fine.
    let l = Layout {
        split: Some(vec![20, 20, 21, 19]),
        ..Layout::dense(16, 1, 4, 1)
    };
    assert!(codes(&s, &l).is_empty());
}

/// Mixtral 8x7B on dgx64 (8 experts of 14336, every layer MoE, s = 4096,
/// B = 1024) with linear biases switched on, D8 T2 p2 C2, E3 ETP2, order
/// tp-cp-ep-pp-dp, SP off:
/// - 8 % 3 = 2; T·C·D = 2·2·8 = 32, E·ETP = 6, 32 % 6 = 2; E dividing 8
///   with 32 % 2E = 0: 1, 2, 4, 8;
/// - p = 2 and E·ETP = 6 ≠ T·C = 4;
/// - biases with ETP = 2;
/// - T = 2 and E = 3 without SP.
///
/// One rule, three sentences; the bit set has the rule once.
#[test]
fn expert_sentences() {
    let mut s = Setup::new("mixtral-8x7b", "dgx64", None);
    s.model.architecture.linear_bias = true;
    let l = Layout {
        ep: 3,
        etp: 2,
        sp: false,
        order: RankOrder::TpCpEpPpDp,
        ..Layout::dense(8, 2, 2, 2)
    };
    assert_eq!(
        said(&s, &Policy::default(), &l),
        vec![
            triple(
                "experts",
                "8 experts over E = 3 (remainder 2), and T·C·D = 32 over E·ETP = 6 (remainder 2): both must divide [Megatron E2, W3]",
                "with ETP = 2, use E among 1, 2, 4, 8"
            ),
            triple(
                "experts",
                "with order tp-cp-ep-pp-dp and p = 2 the expert block E·ETP = 3·2 = 6 must equal T·C = 4, or the expert and dense pipeline groups differ [Megatron W4, W5]",
                "use order tp-cp-ep-dp-pp, or E·ETP = T·C"
            ),
            triple(
                "experts",
                "experts with biases need ETP = 1, but ETP = 2 [Megatron E4]",
                "use ETP = 1 (or a bias-free model, --disable-bias-linear)"
            ),
            triple(
                "ep-needs-sp",
                "T = 2 with E = 3 needs sequence parallelism",
                "turn SP on"
            ),
        ]
    );
    assert_eq!(codes(&s, &l), ["experts", "ep-needs-sp"]);
    // E = 2 on dense Llama 3 8B (64 GPUs as D64).
    let d = Setup::new("llama3-8b", "dgx64", None);
    let l = Layout {
        ep: 2,
        ..Layout::dense(64, 1, 1, 1)
    };
    assert_eq!(
        said(&d, &Policy::default(), &l),
        vec![triple(
            "experts",
            "E = 2 / ETP = 1 on a dense model",
            "use E = 1 and ETP = 1"
        )]
    );
}

/// Llama 3 8B on dgx64 at s = 8200 without flash attention, D4 T2 p1 C8
/// with SP: 8200 = 16·512 + 8, so both 2·C = 16 and C·lcm(2, T) = 8·2 = 16
/// leave 8 (8192 or 8208 would do); and C = 8 needs fused attention.
#[test]
fn context_parallel_sentences() {
    let mut s = Setup::with_seq("llama3-8b", "dgx64", Some(8200));
    s.job.flash_attention = false;
    let l = Layout::dense(4, 2, 1, 8);
    assert_eq!(
        said(&s, &Policy::default(), &l),
        vec![
            triple(
                "cp-seq",
                "sequence 8200 is not divisible by 2·C = 16 (causal load balancing)",
                "choose C with s % 2C = 0"
            ),
            triple(
                "sp-seq",
                "with SP the sequence must be divisible by 16 (C·lcm(2, T) with C = 8, T = 2), but s = 8200 (8200 / 16 leaves 8)",
                "use s = 8192 or 8208"
            ),
            triple(
                "cp-attention",
                "C = 8 needs fused (flash) attention: Megatron runs context parallelism only in Transformer Engine's fused attention, and this job turns flash attention off",
                "use C = 1, or drop --no-flash-attention"
            ),
        ]
    );
}

/// GPT-3 175B (learned positions up to 2048, 96 heads, B = 1536) at s =
/// 4096 on dgx64, D4 T8 p2 ZeRO-3: 96 % 8 = 0, 96 / 2 = 48 layers a stage,
/// 1536 % 4 = 0, 4096 % 8 = 0, so only the position table: ZeRO-3 with a
/// pipeline runs on Megatron-FSDP (only torch FSDP2 refuses p > 1, D2).
#[test]
fn position_table_and_zero3() {
    let s = Setup::with_seq("gpt3-175b", "dgx64", Some(4096));
    let l = Layout {
        zero: 3,
        ..Layout::dense(4, 8, 2, 1)
    };
    assert_eq!(
        said(&s, &Policy::default(), &l),
        vec![triple(
            "max-seq",
            "sequence 4096 exceeds the learned position table of 2048",
            "use s ≤ 2048"
        ),]
    );
}

/// Llama 3 70B on dgx64, D4 T16: T = 16 > 8 (64 % 16 = 0, 16 % 8 = 0,
/// 28672 = 16·1792, 8192 % 16 = 0). Allowed across domains but bounded to
/// T ≤ 8 and C ≤ 1, only the bound breaks.
#[test]
fn domain_and_bounds() {
    let s = Setup::new("llama3-70b", "dgx64", None);
    let l = Layout::dense(4, 16, 1, 1);
    assert_eq!(
        said(&s, &Policy::default(), &l),
        vec![triple(
            "tp-domain",
            "T = 16 (ETP = 1) spans more than the 8 GPUs of one NVLink domain; its all-reduces would cross the NICs",
            "use T ≤ 8, or pass --allow-tp-across-nodes to cost it on the slower tier"
        )]
    );
    let bounded = Policy {
        max_tp: Some(8),
        max_cp: Some(1),
        allow_tp_across_domains: true,
        ..Policy::default()
    };
    assert_eq!(
        said(&s, &bounded, &l),
        vec![triple(
            "policy",
            "T = 16 exceeds --max-tp 8",
            "raise or drop the bound (`--max-tp`, `--max-pp`, `--max-cp`, `--no-cp`)"
        )]
    );
    let set = rules::violations(&s.problem(), &bounded, &l);
    assert_eq!(set, RuleSet(Rule::Policy.bit()));
}

/// The memory sentence comes last, from the numbers the caller passes:
/// 90 − 76 = 14 GiB over; 76 GiB + 50 MiB is 76.05 GiB and 50 MiB over; a
/// part of 80 GiB is larger than the 76 usable on its own.
#[test]
fn memory_sentence() {
    let s = Setup::new("llama3-70b", "dgx64", None);
    let pr = s.problem();
    let p = Policy::default();
    let l = Layout::dense(2, 8, 4, 1);
    // The remedy names only the levers the layout has not pulled: this one
    // (SP on, as `dense` sets it for T > 1; no recompute, ZeRO 1,
    // micro-batch 1) leaves T or p, recompute and the ZeRO stage; with flash
    // attention (the job's default) selective recompute saves nothing, so
    // only full recompute is named.
    let remedy =
        "raise T, p or C, use full recompute, or a higher ZeRO stage (explain shows which works)";
    let cases = [
        (
            90.0 * GIB,
            "activations",
            50.0 * GIB,
            "peak 90.00 GiB exceeds usable 76.00 GiB by 14.00 GiB; largest part: activations 50.0 GiB",
        ),
        (
            76.0 * GIB + 50.0 * 1024.0 * 1024.0,
            "weights",
            30.0 * GIB,
            "peak 76.05 GiB exceeds usable 76.00 GiB by 50 MiB; largest part: weights 30.0 GiB",
        ),
        (
            120.0 * GIB,
            "optimizer",
            80.0 * GIB,
            "peak 120.00 GiB exceeds usable 76.00 GiB by 44.00 GiB; largest part: optimizer 80.0 GiB, more than the usable memory on its own",
        ),
    ];
    for (peak, part, bytes, message) in cases {
        let v = rules::explain(&pr, &p, &l, Some((peak, 76.0 * GIB, part, bytes)));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].rule, Rule::Memory);
        assert_eq!(v[0].code, "memory");
        assert_eq!(v[0].message, message);
        assert_eq!(v[0].remedy, remedy);
    }
    // Without flash attention selective recompute drops the attention
    // scores, so it is a lever too.
    let mut no_flash = Setup::new("llama3-70b", "dgx64", None);
    no_flash.job.flash_attention = false;
    let v = rules::explain(
        &no_flash.problem(),
        &p,
        &l,
        Some((90.0 * GIB, 76.0 * GIB, "activations", 50.0 * GIB)),
    );
    assert_eq!(
        v[0].remedy,
        "raise T, p or C, use selective or full recompute, or a higher ZeRO stage (explain shows which works)"
    );
    // Every other lever pulled (SP on, full recompute, ZeRO 3) but the
    // micro-batch of 2.
    let pulled = Layout {
        sp: true,
        recompute: meshplan::layout::Recompute::Full,
        zero: 3,
        micro_batch: 2,
        ..Layout::dense(2, 8, 4, 1)
    };
    let v = rules::explain(&pr, &p, &pulled, Some((90.0 * GIB, 76.0 * GIB, "x", 1.0)));
    let memory = v.iter().find(|x| x.rule == Rule::Memory).expect("memory");
    assert_eq!(
        memory.remedy,
        "raise T, p or C, or a smaller micro-batch (explain shows which works)"
    );
    // After the structural sentences, not instead of them.
    let bad = Layout::dense(3, 8, 4, 1);
    let v = rules::explain(&pr, &p, &bad, Some((90.0 * GIB, 76.0 * GIB, "x", 1.0)));
    let got: Vec<&str> = v.iter().map(|x| x.code).collect();
    assert_eq!(got, ["mesh-size", "batch", "memory"]);
    // violations never reports memory (it needs the cost model).
    assert!(!rules::violations(&pr, &p, &bad).contains(Rule::Memory));
}

// ------------------------------------------------------------- enumeration

/// FNV-1a, 64 bits: a digest that does not depend on the Rust version.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) {
        for x in b {
            self.0 ^= *x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// An explicit split for `chunks` stages of `layers` and four broken ones:
/// as even as possible, one stage too many, one layer too many, an empty
/// first stage.
fn splits(layers: u32, chunks: u32) -> Vec<Option<Vec<u32>>> {
    let even: Vec<u32> = (0..chunks)
        .map(|i| layers / chunks + u32::from(i < layers % chunks))
        .collect();
    let mut longer = even.clone();
    longer.push(1);
    let mut more = even.clone();
    *more.last_mut().unwrap() += 1;
    let mut empty = even.clone();
    if chunks > 1 {
        empty[1] += empty[0];
    }
    empty[0] = 0;
    vec![None, Some(even), Some(longer), Some(more), Some(empty)]
}

/// A broad set of layouts for `world` GPUs of a model with `layers` layers:
/// D from {1, 3, 8, N/(T·p·C)}, T, p, C, (E, ETP), v and the split over
/// small sets; micro-batch, ZeRO, SP, order, recompute and CP exchange
/// spread by a fixed hash of the index.
fn layouts(world: u64, layers: u32) -> Vec<Layout> {
    let mut out = Vec::new();
    for tp in [1u32, 2, 3, 4, 8, 16] {
        for pp in [1u32, 2, 3, 4, 5, 8] {
            for cp in [1u32, 2, 3, 4] {
                let rest = world / (tp * pp * cp) as u64;
                let mut dps = vec![1u32, 3, 8];
                if rest > 0 && !dps.contains(&(rest as u32)) {
                    dps.push(rest as u32);
                }
                for dp in dps {
                    for (ep, etp) in [
                        (1u32, 1u32),
                        (2, 1),
                        (4, 1),
                        (8, 1),
                        (16, 1),
                        (3, 1),
                        (2, 2),
                        (4, 2),
                        (8, 4),
                        (2, 3),
                    ] {
                        for vpp in [1u32, 2, 3, 5] {
                            for split in splits(layers, pp * vpp) {
                                let i = out.len() as u64;
                                let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                                out.push(Layout {
                                    dp,
                                    tp,
                                    pp,
                                    cp,
                                    ep,
                                    etp,
                                    vpp,
                                    micro_batch: [1, 2, 3, 4][(h % 4) as usize],
                                    recompute: Recompute::ALL[(h / 4 % 3) as usize],
                                    zero: (h / 12 % 4) as u8,
                                    sp: h / 48 % 2 == 0,
                                    order: RankOrder::ALL[(h / 96 % 2) as usize],
                                    split,
                                    cp_comm: CpComm::ALL[(h / 192 % 2) as usize],
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The cases: a dense GQA model, an all-MoE model, a mixed dense/MoE model
/// with MLA on a large cluster, learned positions, an odd sequence without
/// flash attention (CP), biased experts, and user bounds.
fn cases() -> Vec<(&'static str, Setup, Policy)> {
    let bounded = Policy {
        max_tp: Some(4),
        max_pp: Some(4),
        max_cp: Some(2),
        allow_tp_across_domains: true,
        max_tier: None,
    };
    let mut odd = Setup::with_seq("llama3-8b", "dgx64", Some(8200));
    odd.job.flash_attention = false;
    let mut biased = Setup::with_seq("mixtral-8x7b", "dgx64", Some(8200));
    biased.model.architecture.linear_bias = true;
    biased.job.flash_attention = false;
    vec![
        (
            "llama3-70b dgx64",
            Setup::new("llama3-70b", "dgx64", None),
            Policy::default(),
        ),
        (
            "mixtral-8x7b dgx64",
            Setup::new("mixtral-8x7b", "dgx64", None),
            Policy::default(),
        ),
        (
            "deepseek-v3 h800-2048",
            Setup::new("deepseek-v3", "h800-2048", None),
            Policy::default(),
        ),
        (
            "gpt3-175b dgx64 s4096",
            Setup::with_seq("gpt3-175b", "dgx64", Some(4096)),
            Policy::default(),
        ),
        ("llama3-8b dgx64 s8200 no-flash", odd, Policy::default()),
        (
            "mixtral-8x7b biased s8200 no-flash",
            biased,
            bounded.clone(),
        ),
        (
            "qwen3-30b-a3b dgx64 bounded",
            Setup::new("qwen3-30b-a3b", "dgx64", None),
            bounded,
        ),
    ]
}

/// For every case and layout: the rules `explain` names are the rules
/// `violations` returns; the summary matches the snapshot taken before the
/// rules became a table.
#[test]
fn violations_and_explain_agree_and_match_the_snapshot() {
    let mut summary = String::new();
    for (name, s, policy) in cases() {
        let pr = s.problem();
        let ls = layouts(s.world, s.model.architecture.layers);
        let mut per_rule = [0u64; Rule::ALL.len()];
        let (mut bits, mut text) = (Fnv::new(), Fnv::new());
        let mut valid = 0u64;
        let mut sentences = 0u64;
        for (i, l) in ls.iter().enumerate() {
            let set = rules::violations(&pr, &policy, l);
            let said = rules::explain(&pr, &policy, l, None);
            let mut from_text = RuleSet::default();
            for v in &said {
                from_text.insert(v.rule);
                assert_eq!(v.code, v.rule.code());
                text.bytes(v.code.as_bytes());
                text.bytes(b"\t");
                text.bytes(v.message.as_bytes());
                text.bytes(b"\t");
                text.bytes(v.remedy.as_bytes());
                text.bytes(b"\n");
            }
            assert_eq!(set, from_text, "{name}: {}", l.short());
            // Sentences come in check order.
            let order: Vec<Rule> = said.iter().map(|v| v.rule).collect();
            assert!(order.windows(2).all(|w| w[0] <= w[1]), "{name}: {order:?}");
            sentences += said.len() as u64;
            bits.bytes(&(i as u64).to_le_bytes());
            bits.bytes(&set.0.to_le_bytes());
            for r in set.iter() {
                per_rule[r as usize] += 1;
            }
            valid += u64::from(set.is_empty());
        }
        summary.push_str(&format!(
            "{name}: {} layouts, {valid} valid, {sentences} sentences, bits {:016x}, text {:016x}\n",
            ls.len(),
            bits.0,
            text.0
        ));
        for r in Rule::ALL {
            if per_rule[r as usize] > 0 {
                summary.push_str(&format!("  {:<12} {}\n", r.code(), per_rule[r as usize]));
            }
        }
    }
    insta::assert_snapshot!("rules_oracle_summary", summary);
}

/// `violations` allocates nothing (the search calls it for every layout),
/// splits and memory bounds included; `explain` does allocate.
#[test]
fn violations_allocates_nothing() {
    for (name, s, policy) in cases() {
        let pr = s.problem();
        let ls = layouts(s.world, s.model.architecture.layers);
        let before = ALLOCS.with(Cell::get);
        let mut broken = 0u64;
        for l in &ls {
            broken += u64::from(rules::violations(&pr, &policy, l).len());
        }
        assert_eq!(ALLOCS.with(Cell::get), before, "{name}");
        assert!(broken > 0);
        rules::explain(&pr, &policy, &ls[0], None);
        assert!(
            ALLOCS.with(Cell::get) > before,
            "{name}: the counter counts"
        );
    }
}
