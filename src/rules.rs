//! The rules that reject a layout. Each rule has a stable code, a sentence
//! with the actual numbers and a remedy. Megatron-LM's own argument checks
//! are the reference ([ref:megatron-arguments],
//! [ref:megatron-transformer-config], [ref:megatron-parallel-state]); each
//! code in brackets names one of those checks, listed by file and condition
//! in `docs/references.md` ("Rule codes").
//!
//! The rules are one table, `RULES`: per rule its code and its conditions,
//! each condition with its sentence and remedy, so that every condition is
//! written once. The search calls [`violations`], which walks the table for
//! a bit set and allocates nothing; `explain` calls [`explain`], which walks
//! it for the sentences.

use std::fmt;

use serde::Serialize;

use crate::cost::Problem;
use crate::layout::{Layout, RankOrder};
use crate::spec::model::{Architecture, PositionEmbedding};
use crate::spec::{Job, Model};

/// A rule that can reject a layout. The `code()` strings are stable, and
/// JSON writes a rule as its code (`"memory"`, `"mesh-size"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Rule {
    /// D·T·p·C ≠ N [W1].
    MeshSize,
    /// T larger than the fast (NVLink) domain.
    TpDomain,
    /// Attention heads not divisible by T [T1].
    HeadsTp,
    /// KV heads neither a multiple nor a divisor of T [T2].
    KvHeadsTp,
    /// FFN (or expert FFN under ETP) not divisible by T [T4].
    FfnTp,
    /// Layers do not split evenly over p·v stages (and no explicit split) [P4, P5].
    LayersPp,
    /// Explicit split does not add up or leaves a stage empty [P7, P9].
    Split,
    /// Interleaving without pipeline, or with m < p or m % p ≠ 0 [W7, P15, P16].
    Interleave,
    /// Global batch not divisible by D·b [B3].
    Batch,
    /// Sequence not divisible by 2·C for load-balanced CP [C1].
    CpSeq,
    /// With SP the local sequence s/C not divisible by T [T6].
    SpSeq,
    /// Context parallelism without fused (flash) attention: Megatron's local
    /// attention asserts C = 1 ("Context parallelism is only supported by
    /// TEDotProductAttention!") and Transformer Engine's unfused backend has
    /// no CP.
    CpAttention,
    /// Sequence longer than the learned position table [T11].
    MaxSeq,
    /// Expert parallel on a dense model, experts % E, (T·C·D) % (E·ETP)
    /// [E1, E2, W3]; with `tp-cp-ep-pp-dp` and p > 1, E·ETP ≠ T·C [W4, W5];
    /// ETP > 1 on experts with biases [E4].
    Experts,
    /// A dense model with `tp-cp-ep-pp-dp`, p > 1 and C > 1: Megatron builds
    /// its expert grid with ETP = T and E = 1, whose data-parallel size
    /// N/(T·p) = D·C differs from D [W4].
    RankMapping,
    /// TP > 1 with EP > 1 needs sequence parallelism (Megatron parallelism guide).
    EpNeedsSp,
    /// A user bound (`--max-tp`, fixed values) excludes it.
    Policy,
    /// Peak memory of the worst rank exceeds usable memory.
    Memory,
}

impl Rule {
    /// Whether the cost model's price of a layout that breaks only this
    /// rule means anything: not when the global batch does not divide into
    /// D·b-sized micro-batch rows (a fractional micro-batch count) or the
    /// interleaved schedule does not exist (m < p, where the `(p−1)/v`
    /// bubble no longer holds), nor for a mesh that is not the job's GPU
    /// count. A near-miss of these rules is named without tokens/s.
    pub fn price_holds(self) -> bool {
        !matches!(self, Rule::Batch | Rule::Interleave | Rule::MeshSize)
    }

    /// Whether the rule depends only on the mesh (D, T, p, C, E, ETP), the
    /// model, the job and the policy: a mesh that breaks it has no valid
    /// layout, whatever b, v, recompute, ZeRO stage, SP, rank order or CP
    /// exchange ([`crate::search::Space::best_only`] skips such meshes).
    pub const fn mesh_level(self) -> bool {
        matches!(
            self,
            Rule::MeshSize
                | Rule::TpDomain
                | Rule::HeadsTp
                | Rule::KvHeadsTp
                | Rule::FfnTp
                | Rule::CpSeq
                | Rule::CpAttention
                | Rule::MaxSeq
        )
    }

    /// Every rule, in check order.
    pub const ALL: [Rule; 18] = [
        Rule::MeshSize,
        Rule::TpDomain,
        Rule::HeadsTp,
        Rule::KvHeadsTp,
        Rule::FfnTp,
        Rule::LayersPp,
        Rule::Split,
        Rule::Interleave,
        Rule::Batch,
        Rule::CpSeq,
        Rule::SpSeq,
        Rule::CpAttention,
        Rule::MaxSeq,
        Rule::Experts,
        Rule::RankMapping,
        Rule::EpNeedsSp,
        Rule::Policy,
        Rule::Memory,
    ];

    /// Stable code, as printed and in JSON.
    pub fn code(self) -> &'static str {
        RULES[self as usize].code
    }

    /// Bit of this rule in a [`RuleSet`].
    pub fn bit(self) -> u32 {
        1 << (self as u8)
    }
}

/// The memory rule's peak, usable memory and gap (bytes) in words, with
/// enough digits that the peak and the usable figure differ: GiB to two
/// decimals, or MiB (to whole MiB, or three decimals for a gap under
/// one MiB) when those would read the same. The gap is in MiB under 0.1
/// GiB.
///
/// Example: 77.5 GiB + 1 MiB against 77.5 GiB both read 77.50 GiB; in MiB
/// they are 79,361 and 79,360, gap 1 MiB.
pub fn memory_gap_words(peak: f64, usable: f64) -> (String, String, String) {
    const GIB: f64 = crate::spec::GIB;
    const MIB: f64 = 1024.0 * 1024.0;
    let gap = peak - usable;
    let (p, u) = (format!("{:.2}", peak / GIB), format!("{:.2}", usable / GIB));
    if p != u {
        let g = if gap < 0.1 * GIB {
            format!("{:.0} MiB", gap / MIB)
        } else {
            format!("{:.2} GiB", gap / GIB)
        };
        return (format!("{p} GiB"), format!("{u} GiB"), g);
    }
    let digits = if format!("{:.0}", peak / MIB) != format!("{:.0}", usable / MIB) {
        0
    } else {
        3
    };
    let mib = |x: f64| format!("{:.*} MiB", digits, x / MIB);
    (mib(peak), mib(usable), mib(gap))
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A set of broken rules (bit per [`Rule`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RuleSet(pub u32);

impl RuleSet {
    /// No rule broken.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Add a rule.
    pub fn insert(&mut self, r: Rule) {
        self.0 |= r.bit();
    }

    /// Whether `r` is in the set.
    pub fn contains(self, r: Rule) -> bool {
        self.0 & r.bit() != 0
    }

    /// The first broken rule in check order.
    pub fn first(self) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| self.contains(*r))
    }

    /// Number of broken rules.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// The broken rules in check order.
    pub fn iter(self) -> impl Iterator<Item = Rule> {
        Rule::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

/// User bounds on the search (`--max-tp`, `--tp 8`, `--no-cp`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Policy {
    /// Largest T allowed.
    pub max_tp: Option<u32>,
    /// Largest p allowed.
    pub max_pp: Option<u32>,
    /// Largest C allowed (`--no-cp` sets 1).
    pub max_cp: Option<u32>,
    /// Allow T beyond the fast domain (costed on the slower tier).
    pub allow_tp_across_domains: bool,
    /// Outermost scale-out tier a TP, CP, EP or ETP group may climb above
    /// (`--max-tier`; 0 = none of their traffic leaves a tier-1 switch
    /// group nor, on rails, its rail); `None` prices every placement.
    pub max_tier: Option<u8>,
}

/// The outermost tier any model-parallel group of `pl` climbs above, with
/// the group's name: TP, CP and ETP by their rings
/// ([`crate::cost::comm::ring_tier`]), EP by its all-to-all (the spine when
/// its cross-rail share is not 0). DP and PP groups are left out: a job
/// larger than one switch group must cross it with one of them.
pub fn outermost_tier(pl: &crate::layout::Placement) -> (&'static str, u8) {
    use crate::cost::comm::{all_to_all_spine_share, ring_tier};
    let ep = if all_to_all_spine_share(pl.ep) > 0.0 {
        pl.ep.tier.max(1)
    } else {
        pl.ep.tier
    };
    [
        ("TP", ring_tier(pl.tp)),
        ("CP", ring_tier(pl.cp)),
        ("EP", ep),
        ("ETP", ring_tier(pl.etp)),
    ]
    .into_iter()
    .fold(("TP", 0), |a, b| if b.1 > a.1 { b } else { a })
}

/// One broken rule, for people.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// Stable code.
    pub code: &'static str,
    /// What is wrong, with the numbers.
    pub message: String,
    /// What would fix it.
    pub remedy: String,
}

/// The rules `l` breaks, memory excepted (which needs the cost model).
/// Allocates nothing.
pub fn violations(pr: &Problem, policy: &Policy, l: &Layout) -> RuleSet {
    let x = Ctx::new(pr, policy, l, None);
    let mut set = RuleSet::default();
    for def in &RULES {
        if def.clauses.iter().any(|c| (c.broken)(&x)) {
            set.insert(def.rule);
        }
    }
    set
}

/// Sentences for every rule `l` breaks, one per broken condition, in check
/// order. `memory` is `(peak, usable, dominant component name, its bytes)`
/// when the memory rule is broken.
pub fn explain(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    memory: Option<(f64, f64, &str, f64)>,
) -> Vec<Violation> {
    let x = Ctx::new(pr, policy, l, memory);
    let mut out = Vec::new();
    for def in &RULES {
        for c in def.clauses.iter().filter(|c| (c.broken)(&x)) {
            out.push(Violation {
                rule: def.rule,
                code: def.code,
                message: (c.message)(&x),
                remedy: (c.remedy)(&x),
            });
        }
    }
    out
}

/// What the conditions read: the problem, the bounds, the layout, and the
/// numbers several conditions and sentences share, worked out once.
struct Ctx<'a> {
    cluster: &'a crate::spec::Cluster,
    model: &'a Model,
    a: &'a Architecture,
    job: &'a Job,
    /// GPUs of the job.
    world: u64,
    /// GPUs of one fast (NVLink) domain.
    dom: u32,
    policy: &'a Policy,
    l: &'a Layout,
    /// T and C, widened.
    t: u64,
    c: u64,
    /// Pipeline chunks p·v.
    chunks: u64,
    /// Layers of the explicit split (0 without one), summed without
    /// wrapping.
    split_sum: u64,
    /// Sequences per step of one replica, D·b.
    per: u64,
    /// Micro-batches per step, B / (D·b), when it divides.
    m: Option<u64>,
    /// What the sequence must divide by under SP.
    sp_factor: u64,
    /// Ranks the experts are carved out of, T·C·D.
    tcd: u64,
    /// The expert block E·ETP.
    block: u64,
    /// `(peak, usable, dominant component, its bytes)` when memory is over
    /// (explain only).
    memory: Option<(f64, f64, &'a str, f64)>,
}

impl<'a> Ctx<'a> {
    fn new(
        pr: &'a Problem,
        policy: &'a Policy,
        l: &'a Layout,
        memory: Option<(f64, f64, &'a str, f64)>,
    ) -> Ctx<'a> {
        let (t, c) = (l.tp as u64, l.cp as u64);
        let per = l.dp as u64 * l.micro_batch as u64;
        let job = pr.job;
        Ctx {
            cluster: pr.cluster,
            model: pr.model,
            a: &pr.model.architecture,
            job,
            world: pr.world,
            dom: pr.cluster.fast_domain(),
            policy,
            l,
            t,
            c,
            chunks: l.pp as u64 * l.vpp as u64,
            split_sum: l
                .split
                .as_ref()
                .map_or(0, |s| s.iter().map(|&x| x as u64).sum()),
            per,
            m: (per > 0 && job.global_batch % per == 0).then(|| job.global_batch / per),
            // SP scatters the local sequence s/C over T; with CP the halves of the
            // load-balanced split must each divide too: C·lcm(2, T) (Megatron's [C1] and [T6] together, [ref:case-r3]).
            sp_factor: if c > 1 { c * lcm(2, t) } else { t },
            tcd: t * c * l.dp as u64,
            block: l.ep as u64 * l.etp as u64,
            memory,
        }
    }

    /// Routed experts (0 on a dense model).
    fn experts(&self) -> u32 {
        self.model.moe.as_ref().map_or(0, |m| m.experts)
    }
}

/// One condition of a rule and what to say when it breaks.
struct Clause {
    /// Whether the layout breaks it.
    broken: fn(&Ctx) -> bool,
    /// What is wrong, with the numbers (called only when broken).
    message: fn(&Ctx) -> String,
    /// What would fix it (called only when broken).
    remedy: fn(&Ctx) -> String,
}

/// A rule: its code and its conditions. The rule is broken when any
/// condition is; `explain` says one sentence per broken condition.
struct RuleDef {
    rule: Rule,
    code: &'static str,
    clauses: &'static [Clause],
}

/// The attention heads divide by T.
fn heads_divide(a: &Architecture, t: u32) -> bool {
    a.heads % t == 0
}

/// The KV heads are a multiple or a divisor of T (MLA has no shared KV
/// heads).
fn kv_heads_fit(model: &Model, t: u32) -> bool {
    let kv = model.architecture.kv_heads;
    model.mla.is_some() || kv % t == 0 || t % kv == 0
}

/// `xs` written as a split is given on the command line, `19,21,21,19`.
pub fn comma(xs: &[u32]) -> String {
    xs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Whether an explicit split leaves a stage with nothing to run: a zero
/// layer count anywhere but the last of the p·v stages of an interleaved
/// layout, which holds the output layer and the loss. Megatron's
/// `--pipeline-model-parallel-layout` (the form an interleaved uneven split
/// takes, `generate::megatron::split`) allows a last stage of no
/// transformer layer, e.g. Megatron-Bridge's DeepSeek-V3 H100 layout
/// `Et|(tt|)*30mL` (`scripts/performance/run_script.py` at v0.1.0rc4),
/// whose last stage holds only the MTP block and the loss; without
/// interleaving the split is written `--decoder-last-pipeline-num-layers`,
/// which must be positive.
fn split_leaves_stage_empty(s: &[u32], vpp: u32) -> bool {
    let n = s.len();
    s.iter()
        .enumerate()
        .any(|(i, &x)| x == 0 && !(vpp > 1 && n > 1 && i + 1 == n))
}

/// `layers` split evenly over `chunks` stages.
fn splits_evenly(layers: u32, chunks: impl Into<u64>) -> bool {
    let chunks = chunks.into();
    chunks > 0 && layers as u64 % chunks == 0
}

/// `experts` divide over E, and the expert block E·ETP divides the `tcd`
/// ranks.
fn experts_fit(experts: u32, ep: u32, etp: u32, tcd: u64) -> bool {
    experts % ep == 0 && tcd % (ep as u64 * etp as u64) == 0
}

/// T inside one fast domain that both head rules accept.
fn valid_tp(x: &Ctx) -> String {
    let ok: Vec<u32> = (1..=x.dom)
        .filter(|&t| heads_divide(x.a, t) && kv_heads_fit(x.model, t))
        .collect();
    format!("valid T inside a {}-GPU node: {}", x.dom, list(&ok))
}

fn list(v: &[u32]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

const INTERLEAVE_REMEDY: &str =
    "use v = 1, or a global batch / micro-batch giving m a multiple of p";

/// Every rule, in check order ([`Rule::ALL`]), each condition once.
const RULES: [RuleDef; 18] = [
    RuleDef {
        rule: Rule::MeshSize,
        code: "mesh-size",
        clauses: &[Clause {
            broken: |x| x.l.world() != x.world,
            message: |x| {
                let l = x.l;
                format!(
                    "D·T·p·C = {}·{}·{}·{} = {} but the job has {} GPUs",
                    l.dp,
                    l.tp,
                    l.pp,
                    l.cp,
                    l.world(),
                    x.world
                )
            },
            remedy: |x| format!("choose sizes whose product is {}", x.world),
        }],
    },
    RuleDef {
        rule: Rule::TpDomain,
        code: "tp-domain",
        clauses: &[Clause {
            broken: |x| x.l.tp.max(x.l.etp) > x.dom && !x.policy.allow_tp_across_domains,
            message: |x| {
                format!(
                    "T = {} (ETP = {}) spans more than the {} GPUs of one NVLink domain; its all-reduces would cross the NICs",
                    x.l.tp, x.l.etp, x.dom
                )
            },
            remedy: |x| {
                format!(
                    "use T ≤ {}, or pass --allow-tp-across-nodes to cost it on the slower tier",
                    x.dom
                )
            },
        }],
    },
    RuleDef {
        rule: Rule::HeadsTp,
        code: "heads-tp",
        clauses: &[Clause {
            broken: |x| !heads_divide(x.a, x.l.tp),
            message: |x| {
                format!(
                    "{} attention heads are not divisible by T = {}",
                    x.a.heads, x.l.tp
                )
            },
            remedy: valid_tp,
        }],
    },
    RuleDef {
        rule: Rule::KvHeadsTp,
        code: "kv-heads-tp",
        clauses: &[Clause {
            broken: |x| !kv_heads_fit(x.model, x.l.tp),
            message: |x| {
                format!(
                    "{} KV heads are neither a multiple nor a divisor of T = {} ({} query heads)",
                    x.a.kv_heads, x.l.tp, x.a.heads
                )
            },
            remedy: valid_tp,
        }],
    },
    RuleDef {
        rule: Rule::FfnTp,
        code: "ffn-tp",
        clauses: &[Clause {
            broken: |x| {
                (x.model.moe_layers() < x.a.layers && x.a.ffn % x.t != 0)
                    || x.model
                        .moe
                        .as_ref()
                        .is_some_and(|m| m.expert_ffn % x.l.etp as u64 != 0)
            },
            message: |x| {
                format!(
                    "FFN width {} (or expert FFN over ETP = {}) is not divisible by T = {}",
                    x.a.ffn, x.l.etp, x.l.tp
                )
            },
            remedy: |_| "choose T (and ETP) dividing the FFN width".into(),
        }],
    },
    RuleDef {
        rule: Rule::LayersPp,
        code: "layers-pp",
        clauses: &[Clause {
            broken: |x| x.l.split.is_none() && !splits_evenly(x.a.layers, x.chunks),
            message: |x| {
                let (layers, l) = (x.a.layers, x.l);
                if l.vpp > 1 && splits_evenly(layers, l.pp) {
                    format!(
                        "{} layers on p = {} give {} per stage, not divisible by v = {}",
                        layers,
                        l.pp,
                        layers / l.pp,
                        l.vpp
                    )
                } else {
                    format!(
                        "{} layers do not split evenly over p·v = {} stages",
                        layers, x.chunks
                    )
                }
            },
            remedy: |x| {
                let (layers, l) = (x.a.layers, x.l);
                // With p kept, the v whose p·v chunks split the layers evenly.
                if l.vpp > 1 && l.pp == 1 {
                    return "use v = 1 (interleaving needs a pipeline, p > 1)".to_string();
                }
                let vs: Vec<u32> = if l.vpp > 1 && splits_evenly(layers, l.pp) {
                    (1..=(layers / l.pp).min(128))
                        .filter(|&v| splits_evenly(layers, l.pp * v))
                        .collect()
                } else {
                    Vec::new()
                };
                if !vs.is_empty() {
                    return format!(
                        "use v among {} (p·v dividing {layers}), or an uneven split (first/last stage layer counts)",
                        list(&vs)
                    );
                }
                let ok: Vec<u32> = (1..=layers.min(128))
                    .filter(|&d| splits_evenly(layers, d))
                    .collect();
                format!(
                    "use p·v among {}, or an uneven split (first/last stage layer counts)",
                    list(&ok)
                )
            },
        }],
    },
    RuleDef {
        rule: Rule::Split,
        code: "split",
        clauses: &[Clause {
            broken: |x| {
                x.l.split.as_ref().is_some_and(|s| {
                    s.len() as u64 != x.chunks
                        || x.split_sum != x.a.layers as u64
                        || split_leaves_stage_empty(s, x.l.vpp)
                })
            },
            message: |x| {
                let s = x.l.split.as_deref().unwrap_or_default();
                format!(
                    "split {} has {} stages summing to {} layers; the layout needs {} stages summing to {}, none empty",
                    comma(s),
                    s.len(),
                    x.split_sum,
                    x.chunks,
                    x.a.layers
                )
            },
            remedy: |_| "give p·v positive layer counts that add up to the model's layers".into(),
        }],
    },
    RuleDef {
        rule: Rule::Interleave,
        code: "interleave",
        clauses: &[
            Clause {
                broken: |x| x.l.vpp > 1 && x.l.pp <= 1,
                message: |x| format!("v = {} interleaving needs p > 1", x.l.vpp),
                remedy: |_| INTERLEAVE_REMEDY.into(),
            },
            Clause {
                broken: |x| {
                    let p = x.l.pp as u64;
                    x.l.vpp > 1 && p > 1 && x.m.is_some_and(|m| m < p || m % p != 0)
                },
                message: |x| {
                    format!(
                        "interleaving needs m ≥ p and m % p = 0 (Megatron's micro-batch groups of p), but m = {} and p = {}",
                        x.m.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
                        x.l.pp
                    )
                },
                remedy: |_| INTERLEAVE_REMEDY.into(),
            },
        ],
    },
    RuleDef {
        rule: Rule::Batch,
        code: "batch",
        clauses: &[Clause {
            broken: |x| x.m.is_none(),
            message: |x| {
                format!(
                    "global batch {} is not divisible by D·b = {}·{} = {}",
                    x.job.global_batch, x.l.dp, x.l.micro_batch, x.per
                )
            },
            remedy: |_| "choose D and b whose product divides the global batch".into(),
        }],
    },
    RuleDef {
        rule: Rule::CpSeq,
        code: "cp-seq",
        clauses: &[Clause {
            broken: |x| x.c > 1 && x.job.seq_len % (2 * x.c) != 0,
            message: |x| {
                format!(
                    "sequence {} is not divisible by 2·C = {} (causal load balancing)",
                    x.job.seq_len,
                    2 * x.c
                )
            },
            remedy: |_| "choose C with s % 2C = 0".into(),
        }],
    },
    RuleDef {
        rule: Rule::SpSeq,
        code: "sp-seq",
        clauses: &[Clause {
            broken: |x| x.l.sp && x.t > 1 && x.job.seq_len % x.sp_factor != 0,
            message: |x| {
                let (s, f) = (x.job.seq_len, x.sp_factor);
                format!(
                    "with SP the sequence must be divisible by {} (C·lcm(2, T) with C = {}, T = {}), but s = {} ({} / {} leaves {})",
                    f,
                    x.l.cp,
                    x.l.tp,
                    s,
                    s,
                    f,
                    s % f
                )
            },
            remedy: |x| {
                let (s, f) = (x.job.seq_len, x.sp_factor);
                format!("use s = {} or {}", s / f * f, (s / f + 1) * f)
            },
        }],
    },
    RuleDef {
        rule: Rule::CpAttention,
        code: "cp-attention",
        clauses: &[Clause {
            broken: |x| x.c > 1 && !x.job.flash_attention,
            message: |x| {
                format!(
                    "C = {} needs fused (flash) attention: Megatron runs context parallelism only in Transformer Engine's fused attention, and this job turns flash attention off",
                    x.l.cp
                )
            },
            remedy: |_| "use C = 1, or drop --no-flash-attention".into(),
        }],
    },
    RuleDef {
        rule: Rule::MaxSeq,
        code: "max-seq",
        clauses: &[Clause {
            broken: |x| {
                x.a.position_embedding == PositionEmbedding::Learned && x.job.seq_len > x.a.max_seq
            },
            message: |x| {
                format!(
                    "sequence {} exceeds the learned position table of {}",
                    x.job.seq_len, x.a.max_seq
                )
            },
            remedy: |x| format!("use s ≤ {}", x.a.max_seq),
        }],
    },
    RuleDef {
        rule: Rule::Experts,
        code: "experts",
        clauses: &[
            Clause {
                broken: |x| x.model.moe.is_none() && (x.l.ep > 1 || x.l.etp > 1),
                message: |x| format!("E = {} / ETP = {} on a dense model", x.l.ep, x.l.etp),
                remedy: |_| "use E = 1 and ETP = 1".into(),
            },
            Clause {
                broken: |x| {
                    x.model.moe.is_some() && !experts_fit(x.experts(), x.l.ep, x.l.etp, x.tcd)
                },
                message: |x| {
                    let (n, l) = (x.experts(), x.l);
                    format!(
                        "{} experts over E = {} (remainder {}), and T·C·D = {} over E·ETP = {} (remainder {}): both must divide [Megatron E2, W3]",
                        n,
                        l.ep,
                        n % l.ep,
                        x.tcd,
                        x.block,
                        x.tcd % x.block
                    )
                },
                remedy: |x| {
                    let n = x.experts();
                    let ok: Vec<u32> = (1..=n)
                        .filter(|&e| experts_fit(n, e, x.l.etp, x.tcd))
                        .collect();
                    format!("with ETP = {}, use E among {}", x.l.etp, list(&ok))
                },
            },
            Clause {
                broken: |x| {
                    x.model.moe.is_some()
                        && x.l.order == RankOrder::TpCpEpPpDp
                        && x.l.pp > 1
                        && x.block != x.t * x.c
                },
                message: |x| {
                    let l = x.l;
                    format!(
                        "with order tp-cp-ep-pp-dp and p = {} the expert block E·ETP = {}·{} = {} must equal T·C = {}, or the expert and dense pipeline groups differ [Megatron W4, W5]",
                        l.pp,
                        l.ep,
                        l.etp,
                        x.block,
                        x.t * x.c
                    )
                },
                remedy: |_| "use order tp-cp-ep-dp-pp, or E·ETP = T·C".into(),
            },
            Clause {
                broken: |x| x.model.moe.is_some() && x.a.linear_bias && x.l.etp != 1,
                message: |x| {
                    format!(
                        "experts with biases need ETP = 1, but ETP = {} [Megatron E4]",
                        x.l.etp
                    )
                },
                remedy: |_| "use ETP = 1 (or a bias-free model, --disable-bias-linear)".into(),
            },
        ],
    },
    RuleDef {
        rule: Rule::RankMapping,
        code: "rank-mapping",
        clauses: &[Clause {
            broken: |x| {
                x.model.moe.is_none() && x.l.order == RankOrder::TpCpEpPpDp && x.l.pp > 1 && x.c > 1
            },
            message: |x| {
                format!(
                    "with order tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping) and p = {}, Megatron builds a dense model's expert grid with ETP = T = {} and E = 1, whose data-parallel size N/(T·p) = D·C = {} differs from D = {} when C = {} > 1 [Megatron W4]",
                    x.l.pp,
                    x.t,
                    x.l.dp as u64 * x.c,
                    x.l.dp,
                    x.c
                )
            },
            remedy: |_| "use order tp-cp-ep-dp-pp, or C = 1".into(),
        }],
    },
    RuleDef {
        rule: Rule::EpNeedsSp,
        code: "ep-needs-sp",
        clauses: &[Clause {
            broken: |x| x.model.moe.is_some() && x.l.tp > 1 && x.l.ep > 1 && !x.l.sp,
            message: |x| {
                format!(
                    "T = {} with E = {} needs sequence parallelism",
                    x.l.tp, x.l.ep
                )
            },
            remedy: |_| "turn SP on".into(),
        }],
    },
    RuleDef {
        rule: Rule::Policy,
        code: "policy",
        clauses: &[
            Clause {
                broken: |x| {
                    let (l, p) = (x.l, x.policy);
                    let over = |v: u32, bound: Option<u32>| bound.is_some_and(|b| v > b);
                    over(l.tp, p.max_tp) || over(l.pp, p.max_pp) || over(l.cp, p.max_cp)
                },
                message: |x| {
                    let (l, p) = (x.l, x.policy);
                    // Only the bounds that are set and broken, as `--max-tp 2`.
                    let broken: Vec<String> = [
                        ("T", "--max-tp", l.tp, p.max_tp),
                        ("p", "--max-pp", l.pp, p.max_pp),
                        ("C", "--max-cp", l.cp, p.max_cp),
                    ]
                    .into_iter()
                    .filter_map(|(axis, flag, v, bound)| {
                        bound
                            .filter(|b| v > *b)
                            .map(|b| format!("{axis} = {v} exceeds {flag} {b}"))
                    })
                    .collect();
                    broken.join("; ")
                },
                remedy: |_| {
                    "raise or drop the bound (`--max-tp`, `--max-pp`, `--max-cp`, `--no-cp`)".into()
                },
            },
            Clause {
                broken: |x| {
                    x.policy.max_tier.is_some_and(|m| {
                        outermost_tier(&crate::layout::Placement::of(x.l, x.cluster)).1 > m
                    })
                },
                message: |x| {
                    let (axis, tier) =
                        outermost_tier(&crate::layout::Placement::of(x.l, x.cluster));
                    let above = x
                        .cluster
                        .tiers
                        .get(tier as usize - 1)
                        .map_or_else(String::new, |t| format!(" ({})", t.above_name()));
                    format!(
                        "the {axis} group climbs above tier {tier}{above}, beyond --max-tier {}",
                        x.policy.max_tier.unwrap_or(0)
                    )
                },
                remedy: |_| {
                    "choose sizes or a rank order that keep the groups lower, or raise or drop --max-tier".into()
                },
            },
        ],
    },
    RuleDef {
        rule: Rule::Memory,
        code: "memory",
        clauses: &[Clause {
            broken: |x| x.memory.is_some(),
            message: |x| {
                const GIB: f64 = crate::spec::GIB;
                let (peak, usable, comp, bytes) = x.memory.unwrap_or_default();
                let (peak_text, usable_text, gap_text) = memory_gap_words(peak, usable);
                format!(
                    "peak {peak_text} exceeds usable {usable_text} by {gap_text}; largest part: {} {:.1} GiB{}",
                    comp,
                    bytes / GIB,
                    if bytes > usable {
                        ", more than the usable memory on its own"
                    } else {
                        ""
                    }
                )
            },
            remedy: |x| {
                // Only the levers this layout has not pulled already.
                let l = x.l;
                // T and p shard weights and activations; C shards the
                // activations over the sequence.
                let mut levers = vec!["raise T, p or C".to_string()];
                // SP shards activations over T: nothing to turn on at T = 1.
                if !l.sp && l.tp > 1 {
                    levers.push("turn on SP".into());
                }
                match l.recompute {
                    // With flash attention selective recompute saves
                    // nothing more than no recompute
                    // (`memory::layer_activation_bytes`).
                    crate::layout::Recompute::None if x.job.flash_attention => {
                        levers.push("use full recompute".into())
                    }
                    crate::layout::Recompute::None => {
                        levers.push("use selective or full recompute".into())
                    }
                    crate::layout::Recompute::Selective => levers.push("use full recompute".into()),
                    _ => {}
                }
                if l.zero < 3 {
                    levers.push("a higher ZeRO stage".into());
                }
                if l.micro_batch > 1 {
                    levers.push("a smaller micro-batch".into());
                }
                // The working-precision copy of the low-precision linears'
                // weights goes with `--fp8-param-gather` (ZeRO ≥ 1).
                if x.job.precision.is_low() && !x.job.fp8_param_gather && l.zero >= 1 {
                    levers.push("--fp8-param-gather".into());
                }
                let last = levers.pop().unwrap_or_default();
                let head = levers.join(", ");
                if head.is_empty() {
                    format!("{last} (explain shows which works)")
                } else {
                    format!("{head}, or {last} (explain shows which works)")
                }
            },
        }],
    },
];

// The table is indexed by rule and lists the rules in check order.
const _: () = {
    let mut i = 0;
    while i < RULES.len() {
        assert!(RULES[i].rule as usize == i && Rule::ALL[i] as usize == i);
        i += 1;
    }
};

#[cfg(test)]
mod memory_words_tests {
    use super::*;

    const GIB: f64 = crate::spec::GIB;
    const MIB: f64 = 1024.0 * 1024.0;

    fn words(a: &str, b: &str, c: &str) -> (String, String, String) {
        (a.into(), b.into(), c.into())
    }

    /// The reviewer's near-miss (77.5 GiB + 1 MiB against 77.5 GiB read
    /// "77.50 … 77.50 … by 1 MiB"): MiB, 79,360 + 1; a 0.3 MiB gap to three
    /// decimals; gaps that GiB shows stay in GiB (50 MiB = 0.049 GiB still
    /// named in MiB, 0.5 GiB in GiB).
    #[test]
    fn near_misses_print_figures_that_differ() {
        let u = 77.5 * GIB;
        assert_eq!(
            memory_gap_words(u + MIB, u),
            words("79361 MiB", "79360 MiB", "1 MiB")
        );
        assert_eq!(
            memory_gap_words(u + 0.3 * MIB, u),
            words("79360.300 MiB", "79360.000 MiB", "0.300 MiB")
        );
        assert_eq!(
            memory_gap_words(u + 50.0 * MIB, u),
            words("77.55 GiB", "77.50 GiB", "50 MiB")
        );
        assert_eq!(
            memory_gap_words(78.0 * GIB, u),
            words("78.00 GiB", "77.50 GiB", "0.50 GiB")
        );
    }

    /// JSON writes a rule as its code, as the tables print it.
    #[test]
    fn rules_serialize_as_their_codes() {
        assert_eq!(serde_json::to_string(&Rule::Memory).unwrap(), "\"memory\"");
        assert_eq!(
            serde_json::to_string(&Rule::MeshSize).unwrap(),
            "\"mesh-size\""
        );
    }
}
