//! One parallel layout and the placement of its ranks.
//!
//! A layout fixes the mesh sizes (D, T, p, C, with E and ETP carved out of
//! T·C·D for MoE layers), the micro-batch size b, virtual stages v,
//! recompute, ZeRO stage, sequence parallelism and the rank order. Rank
//! placement follows Megatron-LM's `RankGenerator`: in the order string the
//! first token varies fastest (`tp-cp-ep-dp-pp`: TP ranks are adjacent).

use serde::{Deserialize, Serialize};

use crate::names::Named;

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

impl Recompute {
    /// All variants, in search order.
    pub const ALL: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];

    /// Short name as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }
}

impl Named for Recompute {
    const KIND: &'static str = "recompute mode";
    const VALUES: &'static [Recompute] = &Recompute::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

crate::names::display_and_parse_by_name!(Recompute);

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

impl RankOrder {
    /// Both orders, in search order.
    pub const ALL: [RankOrder; 2] = [RankOrder::TpCpEpDpPp, RankOrder::TpCpEpPpDp];

    /// The order string as Megatron spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RankOrder::TpCpEpDpPp => "tp-cp-ep-dp-pp",
            RankOrder::TpCpEpPpDp => "tp-cp-ep-pp-dp",
        }
    }
}

impl Named for RankOrder {
    const KIND: &'static str = "rank order";
    const VALUES: &'static [RankOrder] = &RankOrder::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
}

crate::names::display_and_parse_by_name!(RankOrder);

/// How context-parallel ranks exchange keys and values inside attention
/// (Megatron `--cp-comm-type`, implemented by Transformer Engine's
/// `context_parallel.py`).
///
/// - `Ring` (`p2p`, Liu et al. 2023 Ring Attention): C − 1 steps, each
///   sending this rank's K/V chunk to the next CP rank while attention runs
///   on the chunk received before; backward sends K/V and dK/dV the same way.
/// - `AllGather` (`allgather`, Llama 3 report §3.3.2): one all-gather of K/V
///   before attention, exposed; backward gathers again and reduce-scatters
///   dK/dV. Same bytes as the ring, fewer and larger messages, not overlapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CpComm {
    /// Ring of point-to-point sends overlapped with attention (`p2p`).
    #[default]
    #[serde(rename = "ring")]
    Ring,
    /// All-gather of K/V before attention, exposed (`allgather`).
    #[serde(rename = "all-gather")]
    AllGather,
}

impl CpComm {
    /// Both kinds, in search order.
    pub const ALL: [CpComm; 2] = [CpComm::Ring, CpComm::AllGather];

    /// Short name as printed and accepted by `--cp-comm`.
    pub fn as_str(self) -> &'static str {
        match self {
            CpComm::Ring => "ring",
            CpComm::AllGather => "all-gather",
        }
    }

    /// Value of Megatron's `--cp-comm-type` ([ref:megatron-arguments]).
    pub fn megatron(self) -> &'static str {
        match self {
            CpComm::Ring => "p2p",
            CpComm::AllGather => "allgather",
        }
    }
}

/// Also accepts Megatron's spellings, `p2p` and `allgather`.
impl Named for CpComm {
    const KIND: &'static str = "context-parallel K/V exchange";
    const VALUES: &'static [CpComm] = &CpComm::ALL;
    fn name(self) -> &'static str {
        self.as_str()
    }
    fn aliases(self) -> &'static [&'static str] {
        match self {
            CpComm::Ring => &["p2p"],
            CpComm::AllGather => &["allgather"],
        }
    }
}

crate::names::display_and_parse_by_name!(CpComm);

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
    /// Ranks of the group inside one fast (NVLink) domain.
    pub per_domain: u32,
    /// Fast domains (nodes) the group spans.
    pub domains: u32,
}

impl GroupSpan {
    /// A group of one rank.
    pub const SINGLE: GroupSpan = GroupSpan {
        size: 1,
        per_domain: 1,
        domains: 1,
    };

    /// The span of a group of `size` ranks whose consecutive members are
    /// `stride` global ranks apart, with `domain` GPUs per fast domain and
    /// domains aligned to multiples of `domain` ranks.
    ///
    /// Ranks are `base + i·stride`; for the group starting at rank 0 the
    /// domain of member i is `⌊i·stride / domain⌋`. Every group of an axis
    /// has the same shape when sizes are products of the mesh factors, so the
    /// first group stands for all.
    pub fn of(size: u32, stride: u64, domain: u32) -> GroupSpan {
        if size <= 1 {
            return GroupSpan::SINGLE;
        }
        let domain = domain.max(1) as u64;
        if stride >= domain {
            // Every member in a different domain.
            return GroupSpan {
                size,
                per_domain: 1,
                domains: size,
            };
        }
        let span = stride * size as u64;
        if span <= domain {
            return GroupSpan {
                size,
                per_domain: size,
                domains: 1,
            };
        }
        // Members fill a domain `domain/stride` at a time.
        let per = (domain / stride).max(1) as u32;
        let per = per.min(size);
        GroupSpan {
            size,
            per_domain: per,
            domains: size.div_ceil(per),
        }
    }

    /// Whether the group crosses a fast-domain boundary.
    pub fn crosses_domains(&self) -> bool {
        self.domains > 1
    }
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
    /// Place `layout` on domains of `domain` GPUs (the cluster's NVLink
    /// domain; Megatron places consecutive ranks on one node).
    pub fn new(l: &Layout, domain: u32) -> Placement {
        let (s_tp, s_cp, s_dp, s_pp) = dense_strides(l);
        // dp-cp: CP members are s_cp apart, DP members s_dp apart. In both
        // orders CP is inside DP, so the group is CP·D ranks: when CP and DP
        // are adjacent (tp-cp-ep-dp-pp: s_dp = s_cp·C) the union is a
        // strided block of stride s_cp.
        let dp_cp = if l.cp == 1 {
            GroupSpan::of(l.dp, s_dp, domain)
        } else if s_dp == s_cp * l.cp as u64 {
            GroupSpan::of(l.cp * l.dp, s_cp, domain)
        } else {
            // CP block, then DP blocks far apart.
            let cp = GroupSpan::of(l.cp, s_cp, domain);
            let dp = GroupSpan::of(l.dp, s_dp, domain);
            GroupSpan {
                size: l.cp * l.dp,
                per_domain: cp.per_domain * if dp.domains == 1 { l.dp } else { 1 },
                domains: cp.domains * dp.domains,
            }
        };
        // Expert grid: TP×CP×DP re-sliced as ETP×EP×EDP, ETP fastest
        // ([ref:megatron-parallel-state]): each axis is an arithmetic
        // progression of ranks.
        let (e_tp, e_ep, e_dp, _) = expert_strides(l);
        Placement {
            tp: GroupSpan::of(l.tp, s_tp, domain),
            cp: GroupSpan::of(l.cp, s_cp, domain),
            dp: GroupSpan::of(l.dp, s_dp, domain),
            dp_cp,
            pp: GroupSpan::of(l.pp, s_pp, domain),
            ep: GroupSpan::of(l.ep, e_ep, domain),
            etp: GroupSpan::of(l.etp, e_tp, domain),
            edp: GroupSpan::of(l.edp(), e_dp, domain),
        }
    }
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
        GroupSpan {
            size: group.len() as u32,
            per_domain: *per.values().max().unwrap_or(&1),
            domains: per.len() as u32,
        }
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
        assert_eq!(
            pl.ep,
            GroupSpan {
                size: 4,
                per_domain: 4,
                domains: 1
            }
        );
        assert_eq!(
            pl.edp,
            GroupSpan {
                size: 2,
                per_domain: 2,
                domains: 1
            }
        );
        let pl = Placement::new(&l, 2);
        assert_eq!(
            pl.ep,
            GroupSpan {
                size: 4,
                per_domain: 2,
                domains: 2
            }
        );
        assert_eq!(
            pl.edp,
            GroupSpan {
                size: 2,
                per_domain: 1,
                domains: 2
            }
        );
    }

    #[test]
    fn placement_matches_brute_force_rank_generator() {
        // Every axis' span from Placement equals the span counted over the
        // groups that an independent RankGenerator builds, for dense and
        // expert grids, both orders, several domain sizes.
        let mut checked = 0;
        for &(dp, tp, pp, cp) in &[
            (2, 2, 2, 2),
            (4, 2, 1, 2),
            (8, 1, 2, 1),
            (2, 4, 2, 1),
            (16, 1, 1, 1),
            (2, 8, 2, 1),
            (4, 1, 4, 2),
        ] {
            for order in RankOrder::ALL {
                let tcd = tp * cp * dp;
                for etp in [1, 2, 4, 8] {
                    for ep in [1, 2, 4, 8, 16] {
                        if tcd % (etp * ep) != 0 || etp > tp {
                            continue;
                        }
                        // W4: with tp-cp-ep-pp-dp and p > 1 the expert block must equal T·C.
                        if order == RankOrder::TpCpEpPpDp && pp > 1 && etp * ep != tp * cp {
                            continue;
                        }
                        let mut l = layout(dp, tp, pp, cp, order);
                        l.ep = ep;
                        l.etp = etp;
                        let dense = match order {
                            RankOrder::TpCpEpDpPp => vec![tp, cp, 1, dp, pp],
                            RankOrder::TpCpEpPpDp => vec![tp, cp, 1, pp, dp],
                        };
                        let (i_dp, i_pp) = match order {
                            RankOrder::TpCpEpDpPp => (3, 4),
                            RankOrder::TpCpEpPpDp => (4, 3),
                        };
                        let expert = expert_sizes(&l);
                        let (e_dp, e_pp) = (i_dp, i_pp);
                        // Dense and expert PP groups coincide (W5).
                        assert_eq!(
                            generator_groups(&dense, &[i_pp]),
                            generator_groups(&expert, &[e_pp])
                        );
                        for domain in [2u32, 4, 8] {
                            let pl = Placement::new(&l, domain);
                            let d = domain as u64;
                            let cases = [
                                ("tp", pl.tp, generator_groups(&dense, &[0])),
                                ("cp", pl.cp, generator_groups(&dense, &[1])),
                                ("dp", pl.dp, generator_groups(&dense, &[i_dp])),
                                ("dp_cp", pl.dp_cp, generator_groups(&dense, &[1, i_dp])),
                                ("pp", pl.pp, generator_groups(&dense, &[i_pp])),
                                ("etp", pl.etp, generator_groups(&expert, &[0])),
                                ("ep", pl.ep, generator_groups(&expert, &[2])),
                                ("edp", pl.edp, generator_groups(&expert, &[e_dp])),
                            ];
                            for (name, span, groups) in cases {
                                for g in &groups {
                                    assert_eq!(
                                        span,
                                        span_of(g, d),
                                        "{name} of {} on domain {domain}: group {g:?}",
                                        l.short()
                                    );
                                }
                                checked += 1;
                            }
                            for r in 0..l.world() {
                                assert_eq!(coords_of(&l, r).ep, generator_coords(&expert, r)[2]);
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 300, "{checked}");
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
        assert_eq!(
            GroupSpan::of(8, 1, 8),
            GroupSpan {
                size: 8,
                per_domain: 8,
                domains: 1
            }
        );
        // DP8 with stride 8 (after TP8): one rank per node, 8 nodes.
        assert_eq!(
            GroupSpan::of(8, 8, 8),
            GroupSpan {
                size: 8,
                per_domain: 1,
                domains: 8
            }
        );
        // DP16 with stride 2 (after TP2): 4 per node over 4 nodes.
        assert_eq!(
            GroupSpan::of(16, 2, 8),
            GroupSpan {
                size: 16,
                per_domain: 4,
                domains: 4
            }
        );
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
}
