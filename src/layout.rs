//! One parallel layout and the placement of its ranks.
//!
//! A layout fixes the mesh sizes (D, T, p, C, with E and ETP carved out of
//! T·C·D for MoE layers), the micro-batch size b, virtual stages v,
//! recompute, ZeRO stage, sequence parallelism and the rank order. Rank
//! placement follows Megatron-LM's `RankGenerator`: in the order string the
//! first token varies fastest (`tp-cp-ep-dp-pp`: TP ranks are adjacent).

use serde::{Deserialize, Serialize};

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Keep every activation.
    None,
    /// Recompute the attention core (score, softmax, dropout) in backward.
    Selective,
    /// Keep only each layer's input; recompute the whole layer in backward.
    Full,
}

crate::names::named!(Recompute, "recompute mode", [None => "none", Selective => "selective", Full => "full"]);

/// Rank order: which axis varies fastest over consecutive global ranks.
/// Megatron's default is `tp-cp-ep-dp-pp`; `--use-tp-pp-dp-mapping` switches
/// to `tp-cp-ep-pp-dp` ([ref:megatron-parallel-state]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RankOrder {
    /// `tp-cp-ep-dp-pp` (Megatron default): DP inside PP.
    #[serde(rename = "tp-cp-ep-dp-pp")]
    TpCpEpDpPp,
    /// `tp-cp-ep-pp-dp` (`--use-tp-pp-dp-mapping`): PP inside DP.
    #[serde(rename = "tp-cp-ep-pp-dp")]
    TpCpEpPpDp,
}

crate::names::named!(RankOrder, "rank order", [TpCpEpDpPp => "tp-cp-ep-dp-pp", TpCpEpPpDp => "tp-cp-ep-pp-dp"]);

/// How context-parallel ranks exchange keys and values inside attention
/// (Megatron `--cp-comm-type`, implemented by Transformer Engine's
/// `context_parallel.py`).
///
/// - `Ring` (`p2p`, Liu et al. 2023 Ring Attention): C − 1 steps, each
///   sending this rank's K/V chunk to the next CP rank while attention runs
///   on the chunk received before; backward sends K/V and dK/dV the same way.
/// - `AllGather` (`all_gather`, Llama 3 report §3.3.2): one all-gather of K/V
///   before attention, exposed; backward gathers again and reduce-scatters
///   dK/dV. Same bytes as the ring, fewer and larger messages, not overlapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CpComm {
    /// Ring of point-to-point sends overlapped with attention (`p2p`).
    #[default]
    #[serde(rename = "ring")]
    Ring,
    /// All-gather of K/V before attention, exposed (`all_gather`).
    #[serde(rename = "all-gather")]
    AllGather,
}

crate::names::named!(CpComm, "context-parallel K/V exchange", [Ring => "ring" | "p2p", AllGather => "all-gather" | "allgather" | "all_gather"]);

impl CpComm {
    /// Value of Megatron's `--cp-comm-type` ([ref:megatron-arguments]).
    pub fn megatron(self) -> &'static str {
        match self {
            CpComm::Ring => "p2p",
            // Transformer Engine's spelling, which Megatron passes on (TE
            // rejects the `allgather` of the flag's help text).
            CpComm::AllGather => "all_gather",
        }
    }
}

/// A parallel layout: everything the search chooses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// Data-parallel size D.
    pub dp: u32,
    /// Tensor-parallel size T.
    pub tp: u32,
    /// Pipeline-parallel size p.
    pub pp: u32,
    /// Context-parallel size C.
    pub cp: u32,
    /// Expert-parallel size E (carved out of T·C·D; 1 for dense models).
    pub ep: u32,
    /// Expert tensor-parallel size ETP (1 for dense models).
    pub etp: u32,
    /// Virtual pipeline stages per rank v (1 = plain 1F1B).
    pub vpp: u32,
    /// Micro-batch size b, sequences.
    pub micro_batch: u32,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// ZeRO stage 0–3 (1 = Megatron's distributed optimizer).
    pub zero: u8,
    /// Megatron sequence parallelism (reuses the TP group).
    pub sp: bool,
    /// Rank order.
    pub order: RankOrder,
    /// Transformer layers per pipeline stage (p·v entries, in model order);
    /// `None` means a uniform split.
    pub split: Option<Vec<u32>>,
    /// Context-parallel K/V exchange (only matters when C > 1; ring when
    /// absent from a serialized layout).
    #[serde(default)]
    pub cp_comm: CpComm,
}

impl Layout {
    /// A dense layout of sizes D, T, p, C with every other choice at its
    /// plain default: no expert parallelism (E = ETP = 1), no interleaving
    /// (v = 1), micro-batch 1, no recompute, ZeRO-1 (distributed optimizer),
    /// sequence parallelism whenever T > 1, Megatron's default rank order,
    /// a uniform split and ring CP. Change fields with struct update syntax,
    /// e.g. `Layout { micro_batch: 2, ..Layout::dense(8, 8, 1, 1) }`.
    pub fn dense(dp: u32, tp: u32, pp: u32, cp: u32) -> Layout {
        Layout {
            dp,
            tp,
            pp,
            cp,
            ep: 1,
            etp: 1,
            vpp: 1,
            micro_batch: 1,
            recompute: Recompute::None,
            zero: 1,
            sp: tp > 1,
            order: RankOrder::TpCpEpDpPp,
            split: None,
            cp_comm: CpComm::Ring,
        }
    }

    /// World size N = D·T·p·C.
    pub fn world(&self) -> u64 {
        self.dp as u64 * self.tp as u64 * self.pp as u64 * self.cp as u64
    }

    /// Micro-batches per step per replica, m = B / (D·b); `None` if B is not
    /// divisible by D·b.
    pub fn micro_batches(&self, global_batch: u64) -> Option<u64> {
        let per = self.dp as u64 * self.micro_batch as u64;
        if per == 0 || global_batch % per != 0 {
            None
        } else {
            Some(global_batch / per)
        }
    }

    /// Expert data-parallel size EDP = T·C·D / (E·ETP).
    pub fn edp(&self) -> u32 {
        (self.tp * self.cp * self.dp) / (self.ep * self.etp).max(1)
    }

    /// A compact one-line description (`D8 T8 p1 C1 v1 b1 none Z1 SP`).
    pub fn short(&self) -> String {
        let mut s = format!(
            "dp={} tp={} pp={} cp={}",
            self.dp, self.tp, self.pp, self.cp
        );
        if self.cp > 1 {
            s.push_str(&format!(" cp-comm={}", self.cp_comm));
        }
        if self.ep > 1 || self.etp > 1 {
            s.push_str(&format!(" ep={} etp={}", self.ep, self.etp));
        }
        s.push_str(&format!(
            " vpp={} mbs={} recompute={} zero={} sp={} order={}",
            self.vpp,
            self.micro_batch,
            self.recompute,
            self.zero,
            if self.sp { "on" } else { "off" },
            self.order
        ));
        s
    }

    /// [`Layout::short`] and, when the split is uneven, ` split 41/39`
    /// ([`split_text`]): two layouts that print alike in `short` differ
    /// there when their splits do.
    pub fn short_with_split(&self) -> String {
        match &self.split {
            Some(_) => format!("{} split {}", self.short(), split_text(&self.split)),
            None => self.short(),
        }
    }
}

/// Axis of the dense mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// Tensor parallel.
    Tp,
    /// Context parallel.
    Cp,
    /// Expert parallel (expert grid only).
    Ep,
    /// Data parallel.
    Dp,
    /// Pipeline parallel.
    Pp,
}

/// Where the ranks of one process group sit: how many nodes it spans and how
/// many of its ranks share a node. This is what decides which link a
/// collective uses (placement, not the group size, decides: [ref:case-p1]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpan {
    /// Ranks in the group.
    pub size: u32,
    /// Ranks of the group inside one fast (NVLink) domain; the fewest of
    /// its domains holds when they differ (a group split 2 + 1 has 1).
    pub per_domain: u32,
    /// Fast domains (nodes) the group spans.
    pub domains: u32,
    /// The outermost scale-out tier (`[[tiers]]` of the cluster, 1-based)
    /// whose switch groups the worst group of the axis spans more than one
    /// of; 0 when it stays under one group of every tier (or the cluster
    /// lists none). Its cross-node phase runs at the NIC bandwidth over the
    /// product of the oversubscriptions up to that tier
    /// ([`crate::cost::comm::Links`]).
    pub tier: u8,
    /// The group crosses domains inside one switch group of a
    /// rail-optimized first tier (`rails = true` on `[[tiers]]` 0): its
    /// cross-domain traffic stays on one leaf only between GPUs of one
    /// rail (local rank); see [`GroupSpan::rail_aligned`].
    #[serde(default)]
    pub on_rails: bool,
    /// Every group of the axis holds the same offsets in each domain it
    /// touches, so the member pairs a hierarchical ring joins across
    /// domains share a local rank: one rail. False when some group
    /// straddles unevenly (T = 3 on 8-GPU nodes). Meaningful only with
    /// [`GroupSpan::on_rails`].
    #[serde(default)]
    pub rail_aligned: bool,
}

impl GroupSpan {
    /// A group of one rank.
    pub const SINGLE: GroupSpan = GroupSpan {
        size: 1,
        per_domain: 1,
        domains: 1,
        tier: 0,
        on_rails: false,
        rail_aligned: false,
    };

    /// A group of `size` ranks over `domains` fast domains, `per_domain`
    /// of them in the domain holding the fewest; under one switch group of
    /// every scale-out tier (tier 0), not on rails. E.g. DP = 16 after
    /// T = 2 on 8-GPU nodes: `spread(16, 4, 4)`.
    pub const fn spread(size: u32, per_domain: u32, domains: u32) -> GroupSpan {
        GroupSpan {
            size,
            per_domain,
            domains,
            ..GroupSpan::SINGLE
        }
    }

    /// The span of the group of `size` ranks `0, stride, 2·stride, …` on
    /// domains of `domain` GPUs aligned to multiples of `domain` ranks: the
    /// first group of an axis. Other groups of the same axis can sit
    /// differently when the sizes are not powers of two (T = 3 on 8-GPU
    /// nodes); [`GroupSpan::worst`] prices the worst of them.
    pub fn of(size: u32, stride: u64, domain: u32) -> GroupSpan {
        let (g, s) = (domain.max(1) as u64, stride.max(1));
        if size <= 1 || s >= g {
            return GroupSpan::worst(size, stride, 1, domain);
        }
        let (k, d) = progression_shape(0, s, size as u64, g);
        GroupSpan::spread(size, k as u32, d as u32)
    }

    /// The worst group of one axis of a mixed-radix rank grid
    /// ([ref:megatron-parallel-state]): the axis has `size` members `stride`
    /// ranks apart (stride = product of the faster axes' sizes) and `outer`
    /// = world / (stride·size) slower combinations, so its groups are
    /// `b + i·stride` (i < size) for every base `b = a + h·stride·size`,
    /// a < stride, h < outer.
    ///
    /// Returns the most domains any group spans and the fewest of a group's
    /// ranks that share one of its domains (a group split 2 + 1 over two
    /// nodes has `per_domain` 1: that node's single rank carries the whole
    /// shard over its NIC). Both bound every group's hierarchical collective
    /// time from above ([`crate::cost::comm`] is increasing in `domains` and
    /// decreasing in `per_domain`), and each is met by some group (not
    /// always the same one: the bound is then a little pessimistic); for
    /// groups that all sit alike (sizes that divide or are multiples of the
    /// domain) it is the span of each group.
    ///
    /// Computed from residues, not by listing ranks: a group's shape depends
    /// only on `o = b mod domain`; with `stride < domain` the members fill
    /// the range `o … o + (size−1)·stride` with gaps below a domain, so the
    /// group spans `⌊(o + (size−1)·stride)/domain⌋ + 1` domains, and the
    /// count in each inner domain repeats with period `stride / gcd`.
    pub fn worst(size: u32, stride: u64, outer: u64, domain: u32) -> GroupSpan {
        if size <= 1 {
            return GroupSpan::SINGLE;
        }
        let g = domain.max(1) as u64;
        let s = stride.max(1);
        let n = size as u64;
        if s >= g {
            // Consecutive members at least a domain apart: one per domain.
            return GroupSpan::spread(size, 1, size);
        }
        // s < g from here. Powers of two (the common case) without
        // divisions: the two uniform cases below.
        if s.is_power_of_two() && g.is_power_of_two() && n.is_power_of_two() {
            let sn = s * n;
            return if sn >= g {
                GroupSpan::spread(
                    size,
                    (g >> s.trailing_zeros()) as u32,
                    (sn >> g.trailing_zeros()) as u32,
                )
            } else {
                GroupSpan::spread(size, size, 1)
            };
        }
        if g % s == 0 && (s * n) % g == 0 {
            // Every base has o < s: each group fills s·n/g whole domains
            // with g/s members each.
            return GroupSpan::spread(size, (g / s) as u32, ((s * n) / g) as u32);
        }
        if g % (s * n) == 0 {
            // o + (n−1)·s ≤ g − s·n + s − 1 + (n−1)·s < g: one domain.
            return GroupSpan::spread(size, size, 1);
        }
        // General case: the residues o of the bases, `(a + h·q) mod g` for
        // a < s and h < min(outer, cycle of h·q mod g), q = s·n mod g.
        let q = (s * n) % g;
        let cycle = if q == 0 { 1 } else { g / gcd(q, g) };
        let hs = outer.max(1).min(cycle);
        let mut seen = vec![false; g as usize];
        let mut worst = GroupSpan::spread(size, size, 1);
        for h in 0..hs {
            let r = (h * q) % g;
            for a in 0..s {
                let o = (r + a) % g;
                if std::mem::replace(&mut seen[o as usize], true) {
                    continue;
                }
                let (k, d) = progression_shape(o, s, n, g);
                worst.domains = worst.domains.max(d as u32);
                worst.per_domain = worst.per_domain.min(k as u32);
            }
        }
        worst
    }
    /// Whether the group crosses a fast-domain boundary.
    pub fn crosses_domains(&self) -> bool {
        self.domains > 1
    }
}

/// Whether some group of an axis (`size` members `stride` ranks apart,
/// `outer` slower combinations, bases `a + h·stride·size` for a < stride,
/// h < outer, as in [`GroupSpan::worst`]) spans more than one block of `t`
/// consecutive ranks: `GroupSpan::worst(size, stride, outer, t).domains >
/// 1`, without listing residues. A group with base residue `o` crosses iff
/// `o + (size−1)·stride ≥ t`; the largest residue is `t − 1` when some
/// `h·q mod t + stride − 1` wraps (q = stride·size mod t), else the largest
/// `h·q mod t` (which is `t − gcd(q, t)` once h covers its cycle) plus
/// `stride − 1`. O(1) for the usual sizes, O(outer) at worst, no
/// allocation (the tiers of 3,072 and 24,576 GPUs made the residue walk the
/// search's hot spot).
///
/// Example: DP = 16 after T = 8 (stride 8), p = 4, pods of 96 ranks:
/// (16−1)·8 = 120 ≥ 96: crosses. T = 8 groups in pods of 96: span 7,
/// residues h·8 mod 96 reach 88, 88 + 7 = 95 < 96: never crosses.
pub fn crosses_blocks(size: u32, stride: u64, outer: u64, t: u64) -> bool {
    if size <= 1 {
        return false;
    }
    let (n, s, t) = (size as u64, stride.max(1), t.max(1));
    let span = (n - 1) * s;
    if span >= t {
        return true;
    }
    let hs = outer.max(1);
    if s * n * hs <= t {
        return false;
    }
    let q = (s * n) % t;
    let g = gcd(q, t);
    let cycle = t / g;
    let max_r = if hs >= cycle {
        t - g
    } else {
        (0..hs).map(|h| (h * q) % t).max().unwrap_or(0)
    };
    // A wrap (max_r + s − 1 ≥ t, residue t − 1 reached) crosses too: it
    // implies this bound.
    max_r + s + span > t
}

/// Greatest common divisor.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Members `o + i·s` (i < n, `s < g`, `o < g`) on domains `[j·g, (j+1)·g)`:
/// (fewest members in one of the domains they touch, domains touched).
fn progression_shape(o: u64, s: u64, n: u64, g: u64) -> (u64, u64) {
    let last = o + (n - 1) * s;
    let d = last / g + 1;
    if d == 1 {
        return (n, 1);
    }
    // Members below position x: ⌈(x − o)/s⌉ clamped to [0, n].
    let below = |x: u64| {
        if x <= o {
            0
        } else {
            (x - o).div_ceil(s).min(n)
        }
    };
    let count = |j: u64| below((j + 1) * g) - below(j * g);
    let mut k = count(0).min(count(d - 1));
    // Inner domains: the first member's offset in domain j is periodic in j
    // with period s / gcd(g, s), so one period holds every inner count.
    let period = s / gcd(g % s, s).max(1);
    for j in 1..(d - 1).min(1 + period) {
        k = k.min(count(j));
    }
    (k, d)
}

/// Sizes and strides of every axis for one layout, and the span of each
/// axis' groups on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// TP group.
    pub tp: GroupSpan,
    /// CP group.
    pub cp: GroupSpan,
    /// DP group (dense parameters).
    pub dp: GroupSpan,
    /// The gradient-sharding group DP·CP (Megatron shards over `dp-cp`).
    pub dp_cp: GroupSpan,
    /// PP group (stage neighbours).
    pub pp: GroupSpan,
    /// EP group (expert grid).
    pub ep: GroupSpan,
    /// Expert tensor-parallel group (expert grid).
    pub etp: GroupSpan,
    /// Expert data-parallel group (expert grid).
    pub edp: GroupSpan,
}

/// Strides of the expert grid: ETP, EP, EDP, PP.
///
/// Megatron builds the expert grid as `RankGenerator(tp=ETP, ep=E, dp=EDP,
/// pp=p, cp=1)` over the same world and the same order string
/// ([ref:megatron-parallel-state]), so
/// with `tp-cp-ep-dp-pp` the strides are `1, ETP, ETP·E, ETP·E·EDP` and with
/// `tp-cp-ep-pp-dp` they are `1, ETP, ETP·E·p, ETP·E`. In effect the dense
/// T×C×D block of a stage is re-sliced as ETP×E×EDP. (With the second order
/// and p > 1 Megatron requires ETP·E = T·C so that the PP groups of both grids
/// agree, assert W4/W5; [`crate::rules`] checks it.)
pub fn expert_strides(l: &Layout) -> (u64, u64, u64, u64) {
    let etp = 1u64;
    let ep = l.etp.max(1) as u64;
    let block = ep * l.ep.max(1) as u64;
    match l.order {
        RankOrder::TpCpEpDpPp => (etp, ep, block, block * l.edp().max(1) as u64),
        RankOrder::TpCpEpPpDp => (etp, ep, block * l.pp as u64, block),
    }
}

/// Stride of each axis of the dense grid under `order`: TP, CP, DP, PP.
pub fn dense_strides(l: &Layout) -> (u64, u64, u64, u64) {
    let tp = 1u64;
    let cp = l.tp as u64;
    let inner = cp * l.cp as u64;
    match l.order {
        RankOrder::TpCpEpDpPp => {
            let dp = inner;
            let pp = dp * l.dp as u64;
            (tp, cp, dp, pp)
        }
        RankOrder::TpCpEpPpDp => {
            let pp = inner;
            let dp = pp * l.pp as u64;
            (tp, cp, dp, pp)
        }
    }
}

impl Placement {
    /// [`Placement::new`] on `cluster`'s scale-up domain as the job fills
    /// it ([`crate::spec::Cluster::fast_domain`]), with each group's
    /// outermost scale-out tier ([`GroupSpan::tier`]) from the cluster's
    /// `[[tiers]]` and, on a rail-optimized first tier, its rail facts
    /// ([`GroupSpan::on_rails`], [`GroupSpan::rail_aligned`]).
    pub fn of(l: &Layout, cluster: &crate::spec::Cluster) -> Placement {
        let mut sizes = [0u32; crate::spec::hardware::MAX_TIERS];
        let mut n = 0;
        for (slot, t) in sizes.iter_mut().zip(cluster.job_tier_sizes()) {
            *slot = t;
            n += 1;
        }
        let rails = cluster.tiers.first().is_some_and(|t| t.rails);
        Placement::with_levels(l, cluster.fast_domain(), &sizes[..n], rails)
    }

    /// [`Placement::new`] with the tiers of `tiers` (GPUs per switch group,
    /// innermost first): a group's tier is the outermost one whose switch
    /// groups its worst member group spans more than one of
    /// ([`GroupSpan::worst`] with the tier's size as the domain).
    pub fn with_tiers(l: &Layout, domain: u32, tiers: &[u32]) -> Placement {
        Placement::with_levels(l, domain, tiers, false)
    }

    /// [`Placement::with_tiers`], the first tier rail-optimized when
    /// `rails`: a group that crosses domains but stays under one switch
    /// group of tier 1 is [`GroupSpan::on_rails`], and
    /// [`GroupSpan::rail_aligned`] when every domain it touches holds the
    /// same offsets ([`rail_aligned`]).
    pub fn with_levels(l: &Layout, domain: u32, tiers: &[u32], rails: bool) -> Placement {
        let mut pl = Placement::new(l, domain);
        if tiers.is_empty() {
            return pl;
        }
        let world = l.world().max(1);
        let tier_of = |size: u32, stride: u64| -> u8 {
            if size <= 1 {
                return 0;
            }
            let outer = (world / (stride.max(1) * size as u64)).max(1);
            tiers
                .iter()
                .rposition(|&t| crosses_blocks(size, stride, outer, t as u64))
                .map_or(0, |i| (i + 1) as u8)
        };
        let set = |g: &mut GroupSpan, tier: u8, aligned: bool| {
            g.tier = tier;
            g.on_rails = rails && tier == 0 && g.domains > 1;
            g.rail_aligned = g.on_rails && aligned;
        };
        let (s_tp, s_cp, s_dp, s_pp) = dense_strides(l);
        let (e_tp, e_ep, e_dp, _) = expert_strides(l);
        for (g, size, stride) in [
            (&mut pl.tp, l.tp, s_tp),
            (&mut pl.cp, l.cp, s_cp),
            (&mut pl.dp, l.dp, s_dp),
            (&mut pl.pp, l.pp, s_pp),
            (&mut pl.ep, l.ep.max(1), e_ep),
            (&mut pl.etp, l.etp.max(1), e_tp),
            (&mut pl.edp, l.edp().max(1), e_dp),
        ] {
            set(g, tier_of(size, stride), rail_aligned(size, stride, domain));
        }
        // DP·CP: one progression of stride s_cp under tp-cp-ep-dp-pp; a CP
        // block repeated every s_dp otherwise, which spans what its DP and
        // its CP members span, and sits alike in every domain when the
        // blocks start a whole number of domains apart.
        let (tier, aligned) = if l.cp > 1 && l.dp > 1 && s_dp == s_cp * l.cp as u64 {
            (
                tier_of(l.cp * l.dp, s_cp),
                rail_aligned(l.cp * l.dp, s_cp, domain),
            )
        } else if l.cp > 1 && l.dp > 1 {
            let cp_ok = pl.cp.domains == 1 || rail_aligned(l.cp, s_cp, domain);
            (
                pl.dp.tier.max(pl.cp.tier),
                cp_ok && s_dp % domain.max(1) as u64 == 0,
            )
        } else if l.cp > 1 {
            (pl.cp.tier, rail_aligned(l.cp, s_cp, domain))
        } else {
            (pl.dp.tier, rail_aligned(l.dp, s_dp, domain))
        };
        set(&mut pl.dp_cp, tier, aligned);
        pl
    }

    /// Place `layout` on domains of `domain` GPUs (the cluster's NVLink
    /// domain; Megatron places consecutive ranks on one node). Each axis is
    /// priced by its worst group ([`GroupSpan::worst`]): the slowest group
    /// of an axis decides the step.
    pub fn new(l: &Layout, domain: u32) -> Placement {
        let world = l.world().max(1);
        let (s_tp, s_cp, s_dp, s_pp) = dense_strides(l);
        // Outer combinations world / (stride·size) only matter off the
        // power-of-two fast path; `worst` clamps them to a residue cycle.
        let axis = |size: u32, stride: u64| {
            let outer = if size <= 1 || stride >= domain as u64 {
                1
            } else {
                world / (stride * size as u64)
            };
            GroupSpan::worst(size, stride, outer, domain)
        };
        // dp-cp: CP members are s_cp apart, DP members s_dp apart. With
        // tp-cp-ep-dp-pp (s_dp = s_cp·C) the union is one progression of
        // stride s_cp; with tp-cp-ep-pp-dp it is a CP block repeated every
        // s_dp = T·C·p ranks.
        let dp_cp = if l.cp == 1 {
            axis(l.dp, s_dp)
        } else if l.dp == 1 {
            axis(l.cp, s_cp)
        } else if s_dp == s_cp * l.cp as u64 {
            axis(l.cp * l.dp, s_cp)
        } else {
            blocks_worst(l.cp, s_cp, l.dp, s_dp, l.pp, domain)
        };
        // Expert grid: TP×CP×DP re-sliced as ETP×EP×EDP, ETP fastest
        // ([ref:megatron-parallel-state]): each axis is an arithmetic
        // progression of ranks.
        let (e_tp, e_ep, e_dp, _) = expert_strides(l);
        Placement {
            tp: axis(l.tp, s_tp),
            cp: axis(l.cp, s_cp),
            dp: axis(l.dp, s_dp),
            dp_cp,
            pp: axis(l.pp, s_pp),
            ep: axis(l.ep.max(1), e_ep),
            etp: axis(l.etp.max(1), e_tp),
            edp: axis(l.edp().max(1), e_dp),
        }
    }
}

/// Whether every group of an axis of `size` members `stride` ranks apart
/// holds the same offsets in each domain of `domain` GPUs it touches, so a
/// hierarchical ring's cross-domain hops join GPUs of one local rank (one
/// rail): members a whole number of domains apart (`stride` a multiple of
/// the domain: one per domain, all at the base's offset), or groups that
/// fill whole domains alike (`stride` divides the domain and `size·stride`
/// is a multiple of it, every base below `stride`). Otherwise some group
/// straddles a domain boundary unevenly (T = 3 on 8-GPU nodes: {6, 7 | 8}).
///
/// Example: DP = 16 after T = 2 on 8-GPU nodes (stride 2): 2 | 8 and 32 is
/// a multiple of 8, so each node holds offsets {a, a+2, a+4, a+6}: aligned.
pub fn rail_aligned(size: u32, stride: u64, domain: u32) -> bool {
    let (n, s, g) = (size as u64, stride.max(1), domain.max(1) as u64);
    n <= 1 || s % g == 0 || (g % s == 0 && (s * n) % g == 0)
}

/// Worst dp-cp group under `tp-cp-ep-pp-dp` (C, D, p > 1): a CP block of
/// `c` ranks `s_c` = T apart, repeated `d` times every `s_d` = T·C·p ranks;
/// bases `a + k·T·C`, a < T, k < p.
///
/// When `s_d` is a multiple of the domain every block sits at the same
/// offset in its own domains (a block's last rank is below the next
/// block's domain, see the bound in the code), so the group spans `d` times
/// the CP block's domains with the CP block's share. Otherwise (T·C·p not a
/// multiple of the domain: rare) the blocks are walked domain by domain for
/// each distinct base residue, `d` blocks each.
fn blocks_worst(c: u32, s_c: u64, d: u32, s_d: u64, p: u32, domain: u32) -> GroupSpan {
    let g = domain.max(1) as u64;
    let size = c * d;
    let t = s_c;
    let cp = GroupSpan::worst(c, s_c, p as u64 * d as u64, domain);
    if s_d % g == 0 {
        // Base offsets o ≤ T−1 + (p−1)·T·C, so a block's last rank
        // o + (C−1)·T ≤ T·C·p − 1 < s_d: blocks never share a domain.
        return GroupSpan::spread(size, cp.per_domain, cp.domains * d);
    }
    let mut worst = GroupSpan::spread(size, size, 1);
    let mut seen = vec![false; g as usize];
    for k in 0..p as u64 {
        for a in 0..t {
            let o = (a + k * t * c as u64) % g;
            if std::mem::replace(&mut seen[o as usize], true) {
                continue;
            }
            // Walk the blocks in rank order, domain by domain (a block's
            // count in a domain from its progression, not rank by rank).
            let (mut cur, mut in_cur, mut doms, mut fewest) = (u64::MAX, 0u64, 0u64, u64::MAX);
            for j in 0..d as u64 {
                let start = o + j * s_d;
                let end = start + (c as u64 - 1) * t;
                // Members of this block below position x.
                let below = |x: u64| {
                    if x <= start {
                        0
                    } else {
                        (x - start).div_ceil(t).min(c as u64)
                    }
                };
                for dom in start / g..=end / g {
                    let here = below((dom + 1) * g) - below(dom * g);
                    if here == 0 {
                        continue;
                    }
                    if dom != cur {
                        if cur != u64::MAX {
                            fewest = fewest.min(in_cur);
                        }
                        cur = dom;
                        in_cur = 0;
                        doms += 1;
                    }
                    in_cur += here;
                }
            }
            fewest = fewest.min(in_cur);
            worst.domains = worst.domains.max(doms as u32);
            worst.per_domain = worst.per_domain.min(fewest as u32);
        }
    }
    worst
}

/// Coordinates of a global rank in the dense grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coords {
    /// Data-parallel index.
    pub dp: u32,
    /// Tensor-parallel index.
    pub tp: u32,
    /// Pipeline stage.
    pub pp: u32,
    /// Context-parallel index.
    pub cp: u32,
    /// Expert-parallel index (expert grid).
    pub ep: u32,
}

/// Coordinates of global `rank` (Megatron's `RankGenerator`: rank = Σ
/// index·stride with strides from the order string).
pub fn coords_of(l: &Layout, rank: u64) -> Coords {
    let (s_tp, s_cp, s_dp, s_pp) = dense_strides(l);
    let idx = |stride: u64, size: u32| ((rank / stride) % size as u64) as u32;
    // Expert grid (both orders start with ETP then EP).
    let (_, e_ep, _, _) = expert_strides(l);
    Coords {
        tp: idx(s_tp, l.tp),
        cp: idx(s_cp, l.cp),
        dp: idx(s_dp, l.dp),
        pp: idx(s_pp, l.pp),
        ep: idx(e_ep, l.ep.max(1)),
    }
}

/// The axes of a rank-order string, fastest-varying first
/// (`tp-cp-ep-dp-pp` → `[Tp, Cp, Ep, Dp, Pp]`).
pub fn order_axes(order: RankOrder) -> [Axis; 5] {
    match order {
        RankOrder::TpCpEpDpPp => [Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp, Axis::Pp],
        RankOrder::TpCpEpPpDp => [Axis::Tp, Axis::Cp, Axis::Ep, Axis::Pp, Axis::Dp],
    }
}

/// Process groups of a rank grid, as Megatron-LM builds them
/// (`megatron/core/parallel_state.py`, `generate_masked_orthogonal_rank_groups`,
/// [ref:megatron-parallel-state]).
///
/// `sizes[k]` is the size of the k-th axis of the order string (fastest
/// first; global rank = Σ index_k · stride_k with stride_k the product of
/// the sizes before k). `mask[k]` selects the axes a group spans: a group is
/// the set of ranks that differ only in the masked coordinates. Groups are
/// listed in order of the unmasked coordinates (fastest first); inside a
/// group ranks are listed in order of the masked coordinates (fastest first).
/// Returns `world / Π masked sizes` groups of `Π masked sizes` ranks each,
/// world = Π sizes.
///
/// Example (Megatron's worked example [ref:megatron-parallel-state], world
/// 16, order tp-cp-ep-dp-pp, TP2 CP2 DP2 PP2): the
/// `dp-cp` mask gives `[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], …`.
pub fn orthogonal_groups(sizes: &[u32], mask: &[bool]) -> Vec<Vec<u64>> {
    let mut strides = Vec::with_capacity(sizes.len());
    let mut acc = 1u64;
    for &s in sizes {
        strides.push(acc);
        acc *= s.max(1) as u64;
    }
    let pick = |m: bool| -> (Vec<u64>, Vec<u64>) {
        sizes
            .iter()
            .zip(&strides)
            .zip(mask)
            .filter(|(_, k)| **k == m)
            .map(|((s, d), _)| ((*s).max(1) as u64, *d))
            .unzip()
    };
    let (in_shape, in_stride) = pick(true);
    let (out_shape, out_stride) = pick(false);
    // Decompose `index` over `shape` (fastest first) and dot with `stride`.
    let place = |mut index: u64, shape: &[u64], stride: &[u64]| -> u64 {
        let mut r = 0;
        for (s, d) in shape.iter().zip(stride) {
            r += (index % s) * d;
            index /= s;
        }
        r
    };
    let group_size: u64 = in_shape.iter().product();
    let groups: u64 = out_shape.iter().product();
    (0..groups)
        .map(|g| {
            let base = place(g, &out_shape, &out_stride);
            (0..group_size)
                .map(|i| base + place(i, &in_shape, &in_stride))
                .collect()
        })
        .collect()
}

/// Layers per pipeline chunk, runs of equal counts folded: `7/8×14/7`.
pub fn split_text(split: &Option<Vec<u32>>) -> String {
    let Some(s) = split else {
        return "uniform".into();
    };
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let run = s[i..].iter().take_while(|x| **x == s[i]).count();
        parts.push(if run > 2 {
            format!("{}×{}", s[i], run)
        } else {
            vec![s[i].to_string(); run].join("/")
        });
        i += run;
    }
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dp: u32, tp: u32, pp: u32, cp: u32, order: RankOrder) -> Layout {
        Layout {
            sp: false,
            order,
            ..Layout::dense(dp, tp, pp, cp)
        }
    }

    /// Megatron's `RankGenerator` written out independently: `sizes` in
    /// order-string order (fastest first); returns each rank's coordinates.
    fn generator_coords(sizes: &[u32], rank: u64) -> Vec<u32> {
        let mut r = rank;
        sizes
            .iter()
            .map(|&n| {
                let i = (r % n as u64) as u32;
                r /= n as u64;
                i
            })
            .collect()
    }

    /// The groups of axis `axis` (ranks equal in every other coordinate), by
    /// brute force over the world, as sorted rank lists.
    fn generator_groups(sizes: &[u32], axes: &[usize]) -> Vec<Vec<u64>> {
        let world: u64 = sizes.iter().map(|&x| x as u64).product();
        let mut groups: std::collections::BTreeMap<Vec<u32>, Vec<u64>> = Default::default();
        for r in 0..world {
            let mut key = generator_coords(sizes, r);
            for &a in axes {
                key[a] = 0;
            }
            groups.entry(key).or_default().push(r);
        }
        let mut v: Vec<Vec<u64>> = groups.into_values().collect();
        v.sort();
        v
    }

    /// Span of a group by counting its ranks per domain.
    fn span_of(group: &[u64], domain: u64) -> GroupSpan {
        let mut per: std::collections::BTreeMap<u64, u32> = Default::default();
        for r in group {
            *per.entry(r / domain).or_default() += 1;
        }
        GroupSpan::spread(
            group.len() as u32,
            *per.values().max().unwrap_or(&1),
            per.len() as u32,
        )
    }

    /// The expert grid's sizes in order-string order, with the expert grid's
    /// cp = 1: `tp-cp-ep-dp-pp` → [ETP, 1, E, EDP, p]; `tp-cp-ep-pp-dp` →
    /// [ETP, 1, E, p, EDP].
    fn expert_sizes(l: &Layout) -> Vec<u32> {
        match l.order {
            RankOrder::TpCpEpDpPp => vec![l.etp, 1, l.ep, l.edp(), l.pp],
            RankOrder::TpCpEpPpDp => vec![l.etp, 1, l.ep, l.pp, l.edp()],
        }
    }

    #[test]
    fn megatron_worked_example_expert_grid() {
        // [ref:megatron-parallel-state] worked example: world 16, TP2 CP2
        // DP2 PP2; expert grid ETP1 EP4 EDP2
        // PP2: ep [0,1,2,3],[4,5,6,7],…; expert-dp [0,4],…; pp unchanged.
        let mut l = layout(2, 2, 2, 2, RankOrder::TpCpEpDpPp);
        l.ep = 4;
        assert_eq!(l.edp(), 2);
        let sizes = expert_sizes(&l);
        let ep = generator_groups(&sizes, &[2]);
        assert_eq!(ep[0], vec![0, 1, 2, 3]);
        assert_eq!(ep[1], vec![4, 5, 6, 7]);
        let edp = generator_groups(&sizes, &[3]);
        assert_eq!(edp[0], vec![0, 4]);
        // Our strides and coordinates agree: EP members 1 apart, expert-DP
        // members 4 apart, expert PP stride 8 = dense PP stride.
        assert_eq!(expert_strides(&l), (1, 1, 4, 8));
        assert_eq!(dense_strides(&l).3, 8);
        for r in 0..16 {
            assert_eq!(
                coords_of(&l, r).ep,
                generator_coords(&sizes, r)[2],
                "rank {r}"
            );
        }
        // On 8-GPU nodes the EP group stays inside a node; on 2-GPU domains
        // it spans two.
        let pl = Placement::new(&l, 8);
        assert_eq!(pl.ep, GroupSpan::spread(4, 4, 1));
        assert_eq!(pl.edp, GroupSpan::spread(2, 2, 1));
        let pl = Placement::new(&l, 2);
        assert_eq!(pl.ep, GroupSpan::spread(4, 2, 2));
        assert_eq!(pl.edp, GroupSpan::spread(2, 1, 2));
    }

    /// Every layout of the `(dp, tp, pp, cp)` grids with each `etp`/`ep`
    /// that Megatron's expert grid accepts (E·ETP divides T·C·D, ETP
    /// divides T; W4: with tp-cp-ep-pp-dp and p > 1 the expert block is
    /// T·C), in both rank orders.
    fn expert_grids(grids: &[(u32, u32, u32, u32)], etps: &[u32], eps: &[u32]) -> Vec<Layout> {
        let mut out = Vec::new();
        for &(dp, tp, pp, cp) in grids {
            for order in RankOrder::ALL {
                for &etp in etps {
                    for &ep in eps {
                        let tcd = tp * cp * dp;
                        if tcd % (etp * ep) != 0 || etp > tp || tp % etp != 0 {
                            continue;
                        }
                        if order == RankOrder::TpCpEpPpDp && pp > 1 && etp * ep != tp * cp {
                            continue;
                        }
                        let mut l = layout(dp, tp, pp, cp, order);
                        l.ep = ep;
                        l.etp = etp;
                        out.push(l);
                    }
                }
            }
        }
        out
    }

    /// Each axis' span from [`Placement`] next to the groups an independent
    /// RankGenerator builds for that axis: dense grid
    /// [T, C, 1, D, p] or [T, C, 1, p, D] by rank order, expert grid from
    /// [`expert_sizes`].
    fn axis_cases(l: &Layout, domain: u32) -> Vec<(&'static str, GroupSpan, Vec<Vec<u64>>)> {
        let (dense, i_dp, i_pp) = match l.order {
            RankOrder::TpCpEpDpPp => (vec![l.tp, l.cp, 1, l.dp, l.pp], 3, 4),
            RankOrder::TpCpEpPpDp => (vec![l.tp, l.cp, 1, l.pp, l.dp], 4, 3),
        };
        let expert = expert_sizes(l);
        let pl = Placement::new(l, domain);
        vec![
            ("tp", pl.tp, generator_groups(&dense, &[0])),
            ("cp", pl.cp, generator_groups(&dense, &[1])),
            ("dp", pl.dp, generator_groups(&dense, &[i_dp])),
            ("dp_cp", pl.dp_cp, generator_groups(&dense, &[1, i_dp])),
            ("pp", pl.pp, generator_groups(&dense, &[i_pp])),
            ("etp", pl.etp, generator_groups(&expert, &[0])),
            ("ep", pl.ep, generator_groups(&expert, &[2])),
            ("edp", pl.edp, generator_groups(&expert, &[i_dp])),
        ]
    }

    /// The worst span over `groups`: most domains of any group, fewest
    /// ranks a group keeps in one of its domains (what
    /// [`GroupSpan::worst`] promises), by counting ranks.
    fn worst_of(groups: &[Vec<u64>], domain: u64) -> GroupSpan {
        let mut w = GroupSpan::spread(groups[0].len() as u32, u32::MAX, 0);
        for g in groups {
            let mut per: std::collections::BTreeMap<u64, u32> = Default::default();
            for r in g {
                *per.entry(r / domain).or_default() += 1;
            }
            w.domains = w.domains.max(per.len() as u32);
            w.per_domain = w.per_domain.min(*per.values().min().unwrap());
        }
        w
    }

    /// Checks every axis of every layout on every domain size against the
    /// oracle: Placement's span is the worst group's, counted over the
    /// groups an independent RankGenerator builds. Returns (axes checked,
    /// axes whose groups do not all sit alike).
    fn check_placement(layouts: &[Layout], domains: &[u32]) -> (usize, usize) {
        let (mut checked, mut uneven) = (0, 0);
        for l in layouts {
            for &domain in domains {
                let d = domain as u64;
                for (name, span, groups) in axis_cases(l, domain) {
                    let want = worst_of(&groups, d);
                    assert_eq!(span, want, "{name} of {} on domain {domain}", l.short());
                    if groups.iter().any(|g| span_of(g, d) != want) {
                        uneven += 1;
                    }
                    checked += 1;
                }
            }
        }
        (checked, uneven)
    }

    #[test]
    fn placement_matches_brute_force_rank_generator() {
        // Powers of two: every group of an axis sits alike, and Placement
        // gives that span, for dense and expert grids, both orders. Every
        // grid (D, T, p, C) of powers of two on 16 or 32 GPUs: 4-part
        // compositions of the exponents 4 and 5, C(7, 3) + C(8, 3) = 35 +
        // 56 = 91 grids.
        let p2 = [1u32, 2, 4, 8, 16, 32];
        let mut grids = Vec::new();
        for d in p2 {
            for t in p2 {
                for p in p2 {
                    for c in p2 {
                        if [16, 32].contains(&(d * t * p * c)) {
                            grids.push((d, t, p, c));
                        }
                    }
                }
            }
        }
        assert_eq!(grids.len(), 91);
        let layouts = expert_grids(&grids, &[1, 2, 4, 8], &[1, 2, 4, 8, 16]);
        let (checked, uneven) = check_placement(&layouts, &[2, 4, 8]);
        // At least the dense layouts (ETP = E = 1): 91 grids, 2 orders,
        // 3 domains, 8 axes = 4,368 checks.
        assert!(checked > 4368, "{checked}");
        assert_eq!(uneven, 0);
        for l in &layouts {
            // Dense and expert PP groups coincide (W5); EP coordinates
            // match the expert grid's.
            let i_pp = if l.order == RankOrder::TpCpEpDpPp {
                4
            } else {
                3
            };
            let dense_pp = axis_cases(l, 8).swap_remove(4).2;
            let expert = expert_sizes(l);
            assert_eq!(dense_pp, generator_groups(&expert, &[i_pp]));
            for r in 0..l.world() {
                assert_eq!(coords_of(l, r).ep, generator_coords(&expert, r)[2]);
            }
        }
    }

    #[test]
    fn placement_is_the_worst_group_on_awkward_sizes() {
        // Sizes that are not powers of two, so groups of one axis sit
        // differently; both orders; several domains.
        let grids = [
            (8, 3, 1, 1),
            (4, 3, 2, 1),
            (2, 3, 2, 3),
            (5, 1, 3, 2),
            (3, 2, 2, 3),
            (6, 1, 2, 2),
            (2, 5, 3, 1),
            (7, 3, 1, 2),
            (4, 1, 2, 3),
            (3, 6, 2, 1),
        ];
        let layouts = expert_grids(&grids, &[1, 2, 3], &[1, 2, 3, 4, 5, 6]);
        let (checked, uneven) = check_placement(&layouts, &[2, 4, 6, 8]);
        assert!(checked > 400, "{checked}");
        // The oracle really sees groups of one axis that sit differently.
        assert!(uneven > 50, "{uneven}");
    }

    #[test]
    fn straddling_groups_priced_on_the_network() {
        // T = 3 on 8-GPU nodes, D = 8, 24 GPUs: TP groups {0,1,2} {3,4,5}
        // {6,7,8} {9,10,11} … Group {6,7,8} has ranks 6, 7 on node 0 and
        // rank 8 on node 1; {21,22,23} fits node 2; of the 8 groups, those
        // starting at 6 and 15 straddle (2 of 8). The first group {0,1,2}
        // fits one node, so the old first-group rule priced every TP group
        // on NVLink; the worst group spans 2 nodes and keeps 1 rank on one.
        let l = layout(8, 3, 1, 1, RankOrder::TpCpEpDpPp);
        assert_eq!(GroupSpan::of(3, 1, 8), GroupSpan::spread(3, 3, 1));
        let pl = Placement::new(&l, 8);
        assert_eq!(pl.tp, GroupSpan::spread(3, 1, 2));
        // CP = 3 after T = 2 (stride 2), D = 4, 24 GPUs, 8-GPU nodes: CP
        // groups {a + 2i + 6h}: base 6 → {6, 8, 10} straddles nodes 0/1
        // (1 rank on node 0); base 7 → {7, 9, 11}, same.
        let l = layout(4, 2, 1, 3, RankOrder::TpCpEpDpPp);
        let pl = Placement::new(&l, 8);
        assert_eq!(pl.cp, GroupSpan::spread(3, 1, 2));
        // EP = 3 (ETP 1) on a dense T = 1, D = 12 grid: EP groups {0,1,2},
        // {3,4,5}, {6,7,8}, … like the TP case: {6,7,8} straddles.
        let mut l = layout(12, 1, 1, 1, RankOrder::TpCpEpDpPp);
        l.ep = 3;
        let pl = Placement::new(&l, 8);
        assert_eq!(pl.ep, GroupSpan::spread(3, 1, 2));
        // EDP = 4 after E = 3 (stride 3): {0,3,6,9} spans nodes 0 and 1
        // (3 + 1); {2,5,8,11} spans 0 and 1 (2 + 2); worst: 2 domains,
        // 1 rank on one of them.
        assert_eq!(pl.edp, GroupSpan::spread(4, 1, 2));
    }

    #[test]
    fn megatron_worked_example_coordinates() {
        // [ref:megatron-parallel-state] worked example: world 16, TP2 CP2
        // DP2 PP2, default order:
        // tp [0,1]; cp [0,2]; dp [0,4]; pp [0,8].
        let l = layout(2, 2, 2, 2, RankOrder::TpCpEpDpPp);
        assert_eq!(coords_of(&l, 1).tp, 1);
        assert_eq!(coords_of(&l, 2).cp, 1);
        assert_eq!(coords_of(&l, 4).dp, 1);
        assert_eq!(coords_of(&l, 8).pp, 1);
        let c = coords_of(&l, 0);
        assert_eq!((c.tp, c.cp, c.dp, c.pp), (0, 0, 0, 0));
    }

    #[test]
    fn group_span_by_stride() {
        // 8 GPUs per node. TP8 stride 1: one node.
        assert_eq!(GroupSpan::of(8, 1, 8), GroupSpan::spread(8, 8, 1));
        // DP8 with stride 8 (after TP8): one rank per node, 8 nodes.
        assert_eq!(GroupSpan::of(8, 8, 8), GroupSpan::spread(8, 1, 8));
        // DP16 with stride 2 (after TP2): 4 per node over 4 nodes.
        assert_eq!(GroupSpan::of(16, 2, 8), GroupSpan::spread(16, 4, 4));
    }

    #[test]
    fn order_moves_pp_inside_dp() {
        // D8 T8 p1 vs p2: with tp-cp-ep-pp-dp the PP neighbours are adjacent
        // nodes' worth of ranks apart (stride T = 8), DP stride 16.
        let l = layout(4, 8, 2, 1, RankOrder::TpCpEpPpDp);
        let (_, _, s_dp, s_pp) = dense_strides(&l);
        assert_eq!((s_dp, s_pp), (16, 8));
        let l = layout(4, 8, 2, 1, RankOrder::TpCpEpDpPp);
        let (_, _, s_dp, s_pp) = dense_strides(&l);
        assert_eq!((s_dp, s_pp), (8, 32));
    }

    #[test]
    fn orthogonal_groups_worked_example() {
        // [ref:megatron-parallel-state] (computed with Megatron's code): world
        // 16, order tp-cp-ep-dp-pp with TP2 CP2 EP1 DP2 PP2.
        let sizes = [2, 2, 1, 2, 2];
        let g = |m: [bool; 5]| orthogonal_groups(&sizes, &m);
        assert_eq!(
            &g([true, false, false, false, false])[..2],
            &[vec![0, 1], vec![2, 3]]
        );
        assert_eq!(
            &g([false, true, false, false, false])[..3],
            &[vec![0, 2], vec![1, 3], vec![4, 6]]
        );
        assert_eq!(
            &g([false, false, false, true, false])[..2],
            &[vec![0, 4], vec![1, 5]]
        );
        assert_eq!(
            &g([false, false, false, false, true])[..2],
            &[vec![0, 8], vec![1, 9]]
        );
        assert_eq!(g([false, true, false, true, false])[0], vec![0, 2, 4, 6]);
        // Expert grid ETP1 CP1 EP4 EDP2 PP2: ep [0..4], expert-dp [0, 4].
        let e = [1, 1, 4, 2, 2];
        assert_eq!(
            orthogonal_groups(&e, &[false, false, true, false, false])[1],
            vec![4, 5, 6, 7]
        );
        assert_eq!(
            orthogonal_groups(&e, &[false, false, false, true, false])[0],
            vec![0, 4]
        );
    }

    #[test]
    fn crosses_blocks_agrees_with_the_residue_walk() {
        let mut checked = 0;
        for size in 1..=9u32 {
            for stride in 1..=13u64 {
                for outer in 1..=7u64 {
                    for t in [2u64, 3, 6, 8, 12, 16, 24, 40, 96] {
                        let walk = GroupSpan::worst(size, stride, outer, t as u32).domains > 1;
                        assert_eq!(
                            crosses_blocks(size, stride, outer, t),
                            walk,
                            "size {size} stride {stride} outer {outer} t {t}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 7000);
        // The doc's examples.
        assert!(crosses_blocks(16, 8, 4, 96));
        assert!(!crosses_blocks(8, 1, 64, 96));
    }

    #[test]
    fn groups_know_the_outermost_tier_they_cross() {
        // D = 64, T = 8 on 8-GPU nodes (512 GPUs), pods of 256 GPUs: the TP
        // group is one node (tier 0); a DP group {0, 8, …, 504} runs over
        // 64 nodes and both pods (tier 1). With pods of 1,024 GPUs every
        // group stays in one pod.
        let l = Layout::dense(64, 8, 1, 1);
        let pl = Placement::with_tiers(&l, 8, &[256]);
        assert_eq!((pl.tp.tier, pl.dp.tier, pl.dp_cp.tier), (0, 1, 1));
        assert_eq!(pl.dp.domains, 64);
        let pl = Placement::with_tiers(&l, 8, &[1024]);
        assert_eq!((pl.tp.tier, pl.dp.tier), (0, 0));
        // D = 16, T = 8, p = 4 (512 GPUs, tp-cp-ep-dp-pp): DP spans ranks
        // 0…127, within a 256-GPU pod; the PP group {0, 128, 256, 384}
        // crosses pods; with a second tier of 512 GPUs it stays under one
        // group of tier 2, so its tier is 1. With tiers of 64 and 256 GPUs
        // the DP group crosses the first (tier 1) and PP the second (2).
        let l = Layout::dense(16, 8, 4, 1);
        let pl = Placement::with_tiers(&l, 8, &[256, 512]);
        assert_eq!((pl.dp.tier, pl.pp.tier), (0, 1));
        let pl = Placement::with_tiers(&l, 8, &[64, 256]);
        assert_eq!((pl.dp.tier, pl.pp.tier), (1, 2));
        // No tiers: as `new`.
        assert_eq!(Placement::with_tiers(&l, 8, &[]), Placement::new(&l, 8));
    }
}
