//! The rules that reject a layout. Each rule has a stable code, a sentence
//! with the actual numbers and a remedy. Megatron-LM's own argument checks
//! are the reference ([ref:megatron-arguments],
//! [ref:megatron-transformer-config], [ref:megatron-parallel-state]); each
//! code in brackets names one of those checks, listed by file and condition
//! in `docs/references.md` ("Rule codes").
//!
//! The search calls [`violations`], which returns a bit set and allocates
//! nothing; `explain` calls [`explain`] for the sentences.

use std::fmt;

use serde::Serialize;

use crate::cost::Problem;
use crate::layout::Layout;

/// A rule that can reject a layout. The `code()` strings are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
    /// TP > 1 with EP > 1 needs sequence parallelism (Megatron parallelism guide).
    EpNeedsSp,
    /// ZeRO-3 (FSDP) with pipeline parallelism [D2].
    Zero3Pp,
    /// A user bound (`--max-tp`, fixed values) excludes it.
    Policy,
    /// Peak memory of the worst rank exceeds usable memory.
    Memory,
}

impl Rule {
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
        Rule::EpNeedsSp,
        Rule::Zero3Pp,
        Rule::Policy,
        Rule::Memory,
    ];

    /// Stable code, as printed and in JSON.
    pub fn code(self) -> &'static str {
        match self {
            Rule::MeshSize => "mesh-size",
            Rule::TpDomain => "tp-domain",
            Rule::HeadsTp => "heads-tp",
            Rule::KvHeadsTp => "kv-heads-tp",
            Rule::FfnTp => "ffn-tp",
            Rule::LayersPp => "layers-pp",
            Rule::Split => "split",
            Rule::Interleave => "interleave",
            Rule::Batch => "batch",
            Rule::CpSeq => "cp-seq",
            Rule::SpSeq => "sp-seq",
            Rule::CpAttention => "cp-attention",
            Rule::MaxSeq => "max-seq",
            Rule::Experts => "experts",
            Rule::EpNeedsSp => "ep-needs-sp",
            Rule::Zero3Pp => "zero3-pp",
            Rule::Policy => "policy",
            Rule::Memory => "memory",
        }
    }

    /// Bit of this rule in a [`RuleSet`].
    pub fn bit(self) -> u32 {
        1 << (self as u8)
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
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// The rules `l` breaks, memory excepted (which needs the cost model).
/// Allocates nothing.
pub fn violations(pr: &Problem, policy: &Policy, l: &Layout) -> RuleSet {
    let mut v = RuleSet::default();
    let model = pr.model;
    let a = &model.architecture;
    let job = pr.job;
    let (t, c) = (l.tp as u64, l.cp as u64);
    if l.world() != pr.world {
        v.insert(Rule::MeshSize);
    }
    if l.tp.max(l.etp) > pr.cluster.fast_domain() && !policy.allow_tp_across_domains {
        v.insert(Rule::TpDomain);
    }
    if a.heads % l.tp != 0 {
        v.insert(Rule::HeadsTp);
    }
    if model.mla.is_none() && a.kv_heads % l.tp != 0 && l.tp % a.kv_heads != 0 {
        v.insert(Rule::KvHeadsTp);
    }
    let ffn_bad = if model.moe_layers() < a.layers {
        a.ffn % t != 0
    } else {
        false
    } || model
        .moe
        .as_ref()
        .is_some_and(|m| m.expert_ffn % l.etp as u64 != 0);
    if ffn_bad {
        v.insert(Rule::FfnTp);
    }
    let chunks = l.pp * l.vpp;
    match &l.split {
        None => {
            if a.layers % chunks != 0 {
                v.insert(Rule::LayersPp);
            }
        }
        Some(s) => {
            let sum: u32 = s.iter().sum();
            if s.len() != chunks as usize || sum != a.layers || s.contains(&0) {
                v.insert(Rule::Split);
            }
        }
    }
    let per = l.dp as u64 * l.micro_batch as u64;
    let m = if per > 0 && job.global_batch % per == 0 {
        Some(job.global_batch / per)
    } else {
        v.insert(Rule::Batch);
        None
    };
    if l.vpp > 1 {
        let bad = l.pp <= 1 || m.is_some_and(|m| m < l.pp as u64 || m % l.pp as u64 != 0);
        if bad {
            v.insert(Rule::Interleave);
        }
    }
    if c > 1 && job.seq_len % (2 * c) != 0 {
        v.insert(Rule::CpSeq);
    }
    // SP scatters the local sequence s/C over T; with CP the halves of the
    // load-balanced split must each divide too: C·lcm(2, T) (Megatron's
    // [C1] and [T6] together, [ref:case-r3]).
    let sp_factor = if c > 1 { c * lcm(2, t) } else { t };
    if l.sp && t > 1 && job.seq_len % sp_factor != 0 {
        v.insert(Rule::SpSeq);
    }
    if c > 1 && !job.flash_attention {
        v.insert(Rule::CpAttention);
    }
    if a.position_embedding == crate::spec::model::PositionEmbedding::Learned
        && job.seq_len > a.max_seq
    {
        v.insert(Rule::MaxSeq);
    }
    match &model.moe {
        None => {
            if l.ep > 1 || l.etp > 1 {
                v.insert(Rule::Experts);
            }
        }
        Some(moe) => {
            let ranks = t * c * l.dp as u64;
            let block = l.ep as u64 * l.etp as u64;
            let pp_groups_differ =
                l.order == crate::layout::RankOrder::TpCpEpPpDp && l.pp > 1 && block != t * c;
            let bias = a.linear_bias && l.etp != 1;
            if moe.experts % l.ep != 0 || ranks % block != 0 || pp_groups_differ || bias {
                v.insert(Rule::Experts);
            }
            if l.tp > 1 && l.ep > 1 && !l.sp {
                v.insert(Rule::EpNeedsSp);
            }
        }
    }
    if l.zero >= 3 && l.pp > 1 {
        v.insert(Rule::Zero3Pp);
    }
    let over = |x: u32, bound: Option<u32>| bound.is_some_and(|b| x > b);
    if over(l.tp, policy.max_tp) || over(l.pp, policy.max_pp) || over(l.cp, policy.max_cp) {
        v.insert(Rule::Policy);
    }
    v
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

fn divisors(n: u64, upto: u64) -> Vec<u64> {
    (1..=upto.min(n)).filter(|d| n % d == 0).collect()
}

fn list(v: &[u64]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sentences for every rule `l` breaks. `memory` is `(peak, usable,
/// dominant component name, its bytes)` when the memory rule is broken.
pub fn explain(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    memory: Option<(f64, f64, &str, f64)>,
) -> Vec<Violation> {
    let set = violations(pr, policy, l);
    let model = pr.model;
    let a = &model.architecture;
    let job = pr.job;
    let dom = pr.cluster.fast_domain() as u64;
    let mut out = Vec::new();
    let mut push = |rule: Rule, message: String, remedy: String| {
        out.push(Violation {
            rule,
            code: rule.code(),
            message,
            remedy,
        })
    };
    for rule in set.iter() {
        match rule {
            Rule::MeshSize => push(
                rule,
                format!(
                    "D·T·p·C = {}·{}·{}·{} = {} but the job has {} GPUs",
                    l.dp,
                    l.tp,
                    l.pp,
                    l.cp,
                    l.world(),
                    pr.world
                ),
                format!("choose sizes whose product is {}", pr.world),
            ),
            Rule::TpDomain => push(
                rule,
                format!(
                    "T = {} (ETP = {}) spans more than the {} GPUs of one NVLink domain; its all-reduces would cross the NICs",
                    l.tp, l.etp, dom
                ),
                format!(
                    "use T ≤ {dom}, or pass --allow-tp-across-nodes to cost it on the slower tier"
                ),
            ),
            Rule::HeadsTp => {
                let ok: Vec<u64> = divisors(a.heads as u64, dom)
                    .into_iter()
                    .filter(|t| {
                        model.mla.is_some()
                            || (a.kv_heads as u64 % t == 0 || t % a.kv_heads as u64 == 0)
                    })
                    .collect();
                push(
                    rule,
                    format!(
                        "{} attention heads are not divisible by T = {}",
                        a.heads, l.tp
                    ),
                    format!("valid T inside a {}-GPU node: {}", dom, list(&ok)),
                )
            }
            Rule::KvHeadsTp => {
                let ok: Vec<u64> = divisors(a.heads as u64, dom)
                    .into_iter()
                    .filter(|t| a.kv_heads as u64 % t == 0 || t % a.kv_heads as u64 == 0)
                    .collect();
                push(
                    rule,
                    format!(
                        "{} KV heads are neither a multiple nor a divisor of T = {} ({} query heads)",
                        a.kv_heads, l.tp, a.heads
                    ),
                    format!("valid T inside a {}-GPU node: {}", dom, list(&ok)),
                )
            }
            Rule::FfnTp => push(
                rule,
                format!(
                    "FFN width {} (or expert FFN over ETP = {}) is not divisible by T = {}",
                    a.ffn, l.etp, l.tp
                ),
                "choose T (and ETP) dividing the FFN width".into(),
            ),
            Rule::LayersPp => {
                let chunks = l.pp * l.vpp;
                let msg = if l.vpp > 1 && a.layers % l.pp == 0 {
                    format!(
                        "{} layers on p = {} give {} per stage, not divisible by v = {}",
                        a.layers,
                        l.pp,
                        a.layers / l.pp,
                        l.vpp
                    )
                } else {
                    format!(
                        "{} layers do not split evenly over p·v = {} stages",
                        a.layers, chunks
                    )
                };
                let ok: Vec<u64> = divisors(a.layers as u64, a.layers as u64)
                    .into_iter()
                    .filter(|d| *d > 1 && *d <= 128)
                    .collect();
                push(
                    rule,
                    msg,
                    format!(
                        "use p·v among {}, or an uneven split (first/last stage layer counts)",
                        list(&ok)
                    ),
                )
            }
            Rule::Split => {
                let s = l.split.clone().unwrap_or_default();
                let sum: u32 = s.iter().sum();
                push(
                    rule,
                    format!(
                        "split {:?} has {} stages summing to {} layers; the layout needs {} stages summing to {}, none empty",
                        s,
                        s.len(),
                        sum,
                        l.pp * l.vpp,
                        a.layers
                    ),
                    "give p·v positive layer counts that add up to the model's layers".into(),
                )
            }
            Rule::Interleave => {
                let m = l.micro_batches(job.global_batch);
                let msg = if l.pp <= 1 {
                    format!("v = {} interleaving needs p > 1", l.vpp)
                } else {
                    format!(
                        "interleaving needs m ≥ p and m % p = 0 (Megatron's micro-batch groups of p), but m = {} and p = {}",
                        m.map(|x| x.to_string()).unwrap_or_else(|| "?".into()),
                        l.pp
                    )
                };
                push(
                    rule,
                    msg,
                    "use v = 1, or a global batch / micro-batch giving m a multiple of p".into(),
                )
            }
            Rule::Batch => push(
                rule,
                format!(
                    "global batch {} is not divisible by D·b = {}·{} = {}",
                    job.global_batch,
                    l.dp,
                    l.micro_batch,
                    l.dp as u64 * l.micro_batch as u64
                ),
                "choose D and b whose product divides the global batch".into(),
            ),
            Rule::CpSeq => push(
                rule,
                format!(
                    "sequence {} is not divisible by 2·C = {} (causal load balancing)",
                    job.seq_len,
                    2 * l.cp
                ),
                "choose C with s % 2C = 0".into(),
            ),
            Rule::SpSeq => {
                let f = if l.cp > 1 {
                    l.cp as u64 * lcm(2, l.tp as u64)
                } else {
                    l.tp as u64
                };
                push(
                    rule,
                    format!(
                        "with SP the sequence must be divisible by {} (C·lcm(2, T) with C = {}, T = {}), but s = {} ({} / {} leaves {})",
                        f,
                        l.cp,
                        l.tp,
                        job.seq_len,
                        job.seq_len,
                        f,
                        job.seq_len % f
                    ),
                    format!(
                        "use s = {} or {}",
                        job.seq_len / f * f,
                        (job.seq_len / f + 1) * f
                    ),
                )
            }
            Rule::MaxSeq => push(
                rule,
                format!(
                    "sequence {} exceeds the learned position table of {}",
                    job.seq_len, a.max_seq
                ),
                format!("use s ≤ {}", a.max_seq),
            ),
            Rule::Experts => match &model.moe {
                None => push(
                    rule,
                    format!("E = {} / ETP = {} on a dense model", l.ep, l.etp),
                    "use E = 1 and ETP = 1".into(),
                ),
                Some(m) => {
                    let tcd = l.tp * l.cp * l.dp;
                    let block = l.ep * l.etp;
                    if m.experts % l.ep != 0 || tcd % block != 0 {
                        let ok: Vec<u64> = divisors(m.experts as u64, m.experts as u64)
                            .into_iter()
                            .filter(|e| tcd as u64 % (e * l.etp as u64) == 0)
                            .collect();
                        push(
                            rule,
                            format!(
                                "{} experts over E = {} (remainder {}), and T·C·D = {} over E·ETP = {} (remainder {}): both must divide [Megatron E2, W3]",
                                m.experts,
                                l.ep,
                                m.experts % l.ep,
                                tcd,
                                block,
                                tcd % block
                            ),
                            format!("with ETP = {}, use E among {}", l.etp, list(&ok)),
                        );
                    }
                    if l.order == crate::layout::RankOrder::TpCpEpPpDp
                        && l.pp > 1
                        && block != l.tp * l.cp
                    {
                        push(
                            rule,
                            format!(
                                "with order tp-cp-ep-pp-dp and p = {} the expert block E·ETP = {}·{} = {} must equal T·C = {}, or the expert and dense pipeline groups differ [Megatron W4, W5]",
                                l.pp,
                                l.ep,
                                l.etp,
                                block,
                                l.tp * l.cp
                            ),
                            "use order tp-cp-ep-dp-pp, or E·ETP = T·C".into(),
                        );
                    }
                    if a.linear_bias && l.etp != 1 {
                        push(
                            rule,
                            format!(
                                "experts with biases need ETP = 1, but ETP = {} [Megatron E4]",
                                l.etp
                            ),
                            "use ETP = 1 (or a bias-free model, --disable-bias-linear)".into(),
                        );
                    }
                }
            },
            Rule::CpAttention => push(
                rule,
                format!(
                    "C = {} needs fused (flash) attention: Megatron runs context parallelism only in Transformer Engine's fused attention, and this job turns flash attention off",
                    l.cp
                ),
                "use C = 1, or drop --no-flash-attention".into(),
            ),
            Rule::EpNeedsSp => push(
                rule,
                format!("T = {} with E = {} needs sequence parallelism", l.tp, l.ep),
                "turn SP on".into(),
            ),
            Rule::Zero3Pp => push(
                rule,
                format!(
                    "ZeRO-3 (FSDP) with p = {} pipeline stages is not supported by Megatron's FSDP2 path",
                    l.pp
                ),
                "use ZeRO-1 with pipeline parallelism, or p = 1".into(),
            ),
            Rule::Policy => push(
                rule,
                format!(
                    "T = {}, p = {}, C = {} exceeds the bounds (max T {:?}, max p {:?}, max C {:?})",
                    l.tp, l.pp, l.cp, policy.max_tp, policy.max_pp, policy.max_cp
                ),
                "relax the bound flags".into(),
            ),
            Rule::Memory => {}
        }
    }
    if let Some((peak, usable, comp, bytes)) = memory {
        const GIB: f64 = crate::spec::GIB;
        out.push(Violation {
            rule: Rule::Memory,
            code: Rule::Memory.code(),
            message: format!(
                "peak {:.2} GiB exceeds usable {:.2} GiB by {}; largest part: {} {:.1} GiB{}",
                peak / GIB,
                usable / GIB,
                if peak - usable < 0.1 * GIB {
                    format!("{:.0} MiB", (peak - usable) / (1024.0 * 1024.0))
                } else {
                    format!("{:.2} GiB", (peak - usable) / GIB)
                },
                comp,
                bytes / GIB,
                if bytes > usable { ", more than the usable memory on its own" } else { "" }
            ),
            remedy: "raise T or p, turn on SP, use selective or full recompute, a higher ZeRO stage, or a smaller micro-batch (explain shows which works)".into(),
        });
    }
    out
}
