//! Collective communication times with an α–β model on the links a group
//! really crosses.
//!
//! Bandwidth: inside one fast domain a ring uses NVLink at
//! `intra_node.bandwidth_gbs` per GPU per direction. A group that spans
//! domains moves its bytes hierarchically: the ranks of one domain reduce-
//! scatter the whole buffer among themselves on NVLink, the `1/k` shards
//! travel between domains on the NICs, each GPU using its share of the
//! node's NIC bandwidth, and the domain all-gathers again. Bandwidth terms
//! (ring, Patarasuk & Yuan 2009; Thakur et al. 2005):
//! - all-reduce: `2·(n−1)/n · S/β`
//! - reduce-scatter / all-gather: `(n−1)/n · S/β`
//! - all-to-all: `(n−1)/n · S` leaves each rank; the off-domain part
//!   `(n−k)/n · S` goes through the NIC, the rest on NVLink, in parallel.
//! - point-to-point: `S/β + α`.
//!
//! Latency of reduce-scatter, all-gather and all-reduce: as NCCL's own cost
//! model counts it [nccl-tuning] (`ncclTopoTuneModel`, Simple protocol): one
//! flat ring of `n` ranks, a base latency per collective, and one step
//! latency per ring step, the steps that cross domains at the NIC's
//! ([`ring_latency`]); an all-reduce takes the smaller of that and the
//! tree's ([`tree_latency`]), as NCCL picks the faster algorithm. A
//! reduce-scatter or all-gather over one rank per domain may also run
//! NCCL's PAT (Parallel Aggregated Trees, NCCL ≥ 2.23, [`pat_latency`],
//! [`pat_bandwidth_time`]); it takes whichever of ring and PAT NCCL's
//! model predicts faster for the bytes moved ([`gather_algorithm`]).
//!
//! `S` is the full buffer size per rank in bytes (for all-gather the
//! gathered size); times are seconds.

use crate::layout::GroupSpan;
use crate::spec::Cluster;
use crate::spec::hardware::MAX_TIERS;

/// Levels of a network ([`crate::cost::levels`]): the scale-up domain, the
/// NICs with the first switch level, and the uplinks above each tier.
pub const MAX_LEVELS: usize = MAX_TIERS + 2;

/// Link figures for one cluster, in SI units, with collective efficiencies
/// already applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Links {
    /// Effective NVLink bandwidth per GPU per direction, bytes/s.
    pub intra_bw: f64,
    /// Effective NIC bandwidth per GPU per direction, bytes/s.
    pub inter_bw: f64,
    /// Latency of one NVLink ring step (`intra_node.latency_us`), seconds.
    pub intra_lat: f64,
    /// Latency of one ring step that crosses domains
    /// (`inter_node.latency_us`), seconds.
    pub inter_lat: f64,
    /// Base latency of one reduce-scatter, all-gather or all-reduce,
    /// seconds: [`NCCL_BASE_LATENCY_US`].
    pub base_lat: f64,
    /// Uplink oversubscription by tier (`[[tiers]]` of the cluster): entry
    /// 0 is 1 (no tier crossed), entry `k` the product of the
    /// oversubscriptions of tiers 1…k ([`tier_oversubscription`]).
    pub oversub: [f64; MAX_TIERS + 1],
    /// Extra latency of one message by tier, seconds: entry 0 is 0 (no
    /// tier climbed), entry `k` the sum of `[[tiers]]` 1…k's
    /// `latency_us` ([`tier_latency`]), added to `inter_lat`.
    pub tier_lat: [f64; MAX_TIERS + 1],
}

impl Links {
    /// Links of `cluster` with its collective efficiencies applied.
    pub fn of(cluster: &Cluster) -> Links {
        Links {
            intra_bw: cluster.intra_bytes_per_s() * cluster.collective.intra,
            inter_bw: cluster.nic_bytes_per_s_per_gpu() * cluster.collective.inter,
            intra_lat: cluster.intra_node.latency_us * 1e-6,
            inter_lat: cluster.inter_node.latency_us * 1e-6,
            base_lat: NCCL_BASE_LATENCY_US * 1e-6,
            oversub: tier_oversubscription(cluster),
            tier_lat: tier_latency(cluster),
        }
    }

    /// Links of these bandwidths (bytes/s) and nothing else: no latency
    /// (ring steps, base, tiers) and no oversubscription above the NICs.
    pub const fn bandwidths(intra_bw: f64, inter_bw: f64) -> Links {
        Links {
            intra_bw,
            inter_bw,
            intra_lat: 0.0,
            inter_lat: 0.0,
            base_lat: 0.0,
            oversub: [1.0; MAX_TIERS + 1],
            tier_lat: [0.0; MAX_TIERS + 1],
        }
    }

    /// NIC bandwidth per GPU for the cross-domain phase of group `g`,
    /// bytes/s: `inter_bw` over the oversubscription up to the outermost
    /// tier it crosses. A ring's throughput is its slowest hop's, and with every
    /// GPU of a crossing group sending at once the uplinks of that tier are
    /// the slowest hop.
    pub fn inter_bw_of(&self, g: GroupSpan) -> f64 {
        self.uplink_bw(ring_tier(g))
    }

    /// Latency of one cross-domain message that climbs above tier `tier`,
    /// seconds: `inter_lat + tier_lat[tier]`.
    pub fn inter_lat_of(&self, tier: u8) -> f64 {
        self.inter_lat + self.tier_lat[(tier as usize).min(MAX_TIERS)]
    }

    /// NIC bandwidth per GPU for traffic that climbs above tier `tier`,
    /// bytes/s: `inter_bw / oversub[tier]`.
    pub fn uplink_bw(&self, tier: u8) -> f64 {
        self.inter_bw / self.oversub[(tier as usize).min(MAX_TIERS)]
    }
}

/// The outermost tier a hierarchical ring (reduce-scatter, all-gather,
/// all-reduce) of `g` climbs above: [`GroupSpan::tier`], or the first
/// tier's uplinks (the spine) for a group on a rail-optimized first tier
/// whose cross-domain hops join different rails
/// ([`GroupSpan::rail_aligned`] false). A rail-aligned group's ring runs
/// on one leaf per rail.
pub fn ring_tier(g: GroupSpan) -> u8 {
    if g.on_rails && !g.rail_aligned {
        g.tier.max(1)
    } else {
        g.tier
    }
}

/// The outermost tier a stage-to-stage send of group `g` climbs above: as
/// [`ring_tier`], and on rails also when neighbours are less than a
/// domain apart (`per_domain > 1`: the send that leaves a domain joins
/// different local ranks).
pub fn p2p_tier(g: GroupSpan) -> u8 {
    if g.on_rails && (g.per_domain > 1 || !g.rail_aligned) {
        g.tier.max(1)
    } else {
        g.tier
    }
}

/// Share of each rank's all-to-all buffer that goes to other domains over
/// the spine of a rail-optimized first tier (same-rail peers stay on their
/// leaf), dimensionless: `(n − k)/n` off the domain, less `(d − 1)/n` for
/// the one peer at this rank's offset in each of the `d − 1` other domains
/// when the group is [`GroupSpan::rail_aligned`]. 0 off rails.
///
/// Example: EP 32 over 4 nodes of 8 (aligned): 24/32 leaves the node,
/// 3/32 to the three same-rail peers, 21/32 over the spine.
pub fn all_to_all_spine_share(g: GroupSpan) -> f64 {
    if !g.on_rails || g.domains <= 1 {
        return 0.0;
    }
    let (n, k, d) = (g.size as f64, g.per_domain as f64, g.domains as f64);
    let rail = if g.rail_aligned { (d - 1.0) / n } else { 0.0 };
    ((n - k) / n - rail).max(0.0)
}

/// [`Links::oversub`] of `cluster`: 1 for no tier, then the running
/// product of the tiers' oversubscriptions: traffic that leaves a building
/// first shares its pod's uplinks (1/o₁ of the NIC rate per GPU) and then
/// the building's (1/o₂ of what reached it), `1/(o₁·o₂)` in all.
pub fn tier_oversubscription(cluster: &Cluster) -> [f64; MAX_TIERS + 1] {
    let mut out = [1.0; MAX_TIERS + 1];
    let mut product: f64 = 1.0;
    for (slot, t) in out[1..].iter_mut().zip(&cluster.tiers) {
        product *= t.oversubscription;
        *slot = product;
    }
    out
}

/// [`Links::tier_lat`] of `cluster`: 0 for no tier, then the running sum
/// of the tiers' `latency_us` in seconds (a message that leaves a building
/// also climbs the pod's switches).
pub fn tier_latency(cluster: &Cluster) -> [f64; MAX_TIERS + 1] {
    let mut out = [0.0; MAX_TIERS + 1];
    let mut sum = 0.0;
    for (slot, t) in out[1..].iter_mut().zip(&cluster.tiers) {
        sum += t.latency_us.unwrap_or(0.0) * 1e-6;
        *slot = sum;
    }
    out
}

/// NCCL's base latency of one ring or tree collective with the Simple
/// protocol (the one NCCL uses for large messages), µs: `baseLatencies`
/// Ring/Simple = Tree/Simple = 8.4 in [nccl-tuning]. Charged once per
/// reduce-scatter, all-gather or all-reduce ([`ring_latency`],
/// [`tree_latency`]); all-to-all and p2p, which NCCL's tuning model does not
/// price, do not pay it.
pub const NCCL_BASE_LATENCY_US: f64 = 8.4;

/// NCCL's latency of one ring step on NVLink with the Simple protocol, µs:
/// `hwLatencies` NVLINK Ring/Simple [nccl-tuning]. The shipped profiles'
/// `intra_node.latency_us`.
pub const NCCL_RING_NVLINK_US: f64 = 3.4;

/// NCCL's latency of one tree step on NVLink (Simple), µs: `hwLatencies`
/// NVLINK Tree/Simple [nccl-tuning].
pub const NCCL_TREE_NVLINK_US: f64 = 4.0;

/// NCCL's latency of one ring step across nodes (Simple), µs:
/// `hwLatencies` NET Ring/Simple [nccl-tuning]. The shipped profiles'
/// `inter_node.latency_us`.
pub const NCCL_RING_NET_US: f64 = 14.0;

/// NCCL's latency of one tree step across nodes (Simple), µs:
/// `hwLatencies` NET Tree/Simple [nccl-tuning].
pub const NCCL_TREE_NET_US: f64 = 14.0;

/// Tree step latency over ring step latency on NVLink, dimensionless:
/// `4.0 / 3.4 = 1.176`. [`tree_latency`] scales `intra_node.latency_us` (a
/// ring step) by it, so an edited or fitted profile moves both algorithms.
pub const NCCL_TREE_OVER_RING_INTRA: f64 = NCCL_TREE_NVLINK_US / NCCL_RING_NVLINK_US;

/// Tree step latency over ring step latency across nodes, dimensionless:
/// `14 / 14 = 1`.
pub const NCCL_TREE_OVER_RING_INTER: f64 = NCCL_TREE_NET_US / NCCL_RING_NET_US;

/// Bandwidth term of one ring phase, seconds: `(n−1)/n · bytes / bw`
/// (Patarasuk & Yuan 2009), 0 for `n ≤ 1`.
fn ring_phase_bw(n: u32, bytes: f64, bw: f64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let n = n as f64;
    (n - 1.0) / n * bytes / bw
}

/// Bandwidth term of a reduce-scatter (or all-gather) of `bytes` per rank
/// over `g`, seconds: the intra-domain phase over `k = per_domain` ranks on
/// the whole buffer, then the inter-domain phase over `domains` ranks on
/// the `bytes/k` shard at the NIC rate of the outermost tier crossed.
///
/// Example: 16 ranks, 8 per node on 2 nodes, S = 1 GB, 300 GB/s NVLink,
/// 25 GB/s NIC: `7/8·1e9/300e9 + 1/2·(1e9/8)/25e9 = 2.917 + 2.5 = 5.417` ms.
pub fn ring_bandwidth_time(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    let k = g.per_domain;
    ring_phase_bw(k, bytes, links.intra_bw)
        + ring_phase_bw(g.domains, bytes / k as f64, links.inter_bw_of(g))
}

/// Latency of a flat NCCL ring over `g`, seconds, with `passes` = 1 for a
/// reduce-scatter or all-gather and 2 for an all-reduce [nccl-tuning,
/// `ncclTopoTuneModel`, `a == NCCL_ALGO_RING`]:
/// `base + (nsteps − nInterSteps)·α_intra + nInterSteps·α_inter` with
/// `nsteps = passes·(n − 1)` ring steps of which `nInterSteps =
/// passes·(domains − 1)` cross domains. A ring step completes when its
/// slowest hop does, so every crossing step pays the latency of the
/// outermost tier the ring climbs ([`Links::inter_lat_of`] of
/// [`ring_tier`]). Not modelled: NCCL's floor of `α_intra` at 3× its
/// network overhead (3 µs on Intel hosts, below the shipped 3.4 µs; 6 µs
/// on AMD hosts) and its ×1.4 "plateau" on multi-node ring all-reduce.
///
/// Example (NCCL's Simple constants, base 8.4, α_intra 3.4, α_inter 14
/// µs): all-gather over 16 ranks on 2 nodes of 8: 15 steps, 1 crossing:
/// `8.4 + 14·3.4 + 1·14 = 70.0` µs. Over 1,536 ranks on 192 nodes: 1,535
/// steps, 191 crossing: `8.4 + 1344·3.4 + 191·14 = 7252.0` µs.
pub fn ring_latency(passes: u32, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 {
        return 0.0;
    }
    let steps = (passes * (g.size - 1)) as f64;
    let inter_steps = (passes * (g.domains - 1)) as f64;
    links.base_lat
        + (steps - inter_steps) * links.intra_lat
        + inter_steps * links.inter_lat_of(ring_tier(g))
}

/// Latency of an NCCL tree all-reduce over `g`, seconds [nccl-tuning,
/// `ncclTopoTuneModel`, `a == NCCL_ALGO_TREE`]: `base + 2·((n/N − 1)·
/// α_intra,tree + log2i(N)·α_inter,tree)` with `n/N = per_domain` ranks
/// chained in each of the `N = domains` domains and `log2i` NCCL's floor of
/// the base-2 logarithm; the tree step latencies are the ring's scaled by
/// [`NCCL_TREE_OVER_RING_INTRA`] and [`NCCL_TREE_OVER_RING_INTER`].
/// Crossing steps pay the outermost tier's latency as in
/// [`ring_latency`].
///
/// Example (base 8.4, tree steps 4.0 µs NVLink and 14 µs NET): 16 ranks
/// on 2 nodes of 8: `8.4 + 2·(7·4.0 + 1·14) = 92.4` µs, below the ring's
/// `8.4 + 2·(14·3.4 + 1·14) = 131.6` µs; 1,536 ranks on 192 nodes
/// (`log2i(192) = 7`): `8.4 + 2·(28 + 98) = 260.4` µs.
pub fn tree_latency(g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 {
        return 0.0;
    }
    let chain = (g.per_domain - 1) as f64;
    let depth = g.domains.max(1).ilog2() as f64;
    links.base_lat
        + 2.0
            * (chain * links.intra_lat * NCCL_TREE_OVER_RING_INTRA
                + depth * links.inter_lat_of(ring_tier(g)) * NCCL_TREE_OVER_RING_INTER)
}

/// The algorithm NCCL would run an all-reduce with, as priced here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllReduceAlgorithm {
    /// Flat ring: [`ring_latency`] with 2 passes.
    Ring,
    /// Double binary tree: [`tree_latency`].
    Tree,
}

/// The all-reduce algorithm of `g` on `links`: the one of smaller latency,
/// the ring on a tie. NCCL picks by predicted time, latency plus bandwidth;
/// the tree's bandwidth is taken equal to the ring's here (an
/// approximation: NCCL's tree runs at most at its `perChMaxTreeBw` per
/// channel and a size-dependent correction), so the choice depends on the
/// group's shape only, not on the buffer size: the ring inside one domain
/// (`3.4 < 4.0` µs per step), the tree across domains of the shipped
/// profiles.
pub fn all_reduce_algorithm(g: GroupSpan, links: &Links) -> AllReduceAlgorithm {
    if tree_latency(g, links) < ring_latency(2, g, links) {
        AllReduceAlgorithm::Tree
    } else {
        AllReduceAlgorithm::Ring
    }
}

/// NCCL's base latency of one PAT all-gather or reduce-scatter (Simple),
/// µs: `baseLatencies` PAT/Simple = 8.0 in [nccl-tuning].
pub const NCCL_PAT_BASE_LATENCY_US: f64 = 8.0;

/// PAT's base latency over the ring's, dimensionless: `8.0 / 8.4 = 0.952`.
/// [`pat_latency`] scales [`Links::base_lat`] by it, as [`tree_latency`]
/// scales the ring's step latencies.
pub const NCCL_PAT_OVER_RING_BASE: f64 = NCCL_PAT_BASE_LATENCY_US / NCCL_BASE_LATENCY_US;

/// Divisor of PAT's per-level network latency, dimensionless: the
/// `interLat / 3.5` of [nccl-tuning] (`ncclTopoTuneModel`, `a ==
/// NCCL_ALGO_PAT`): each of PAT's `log2i(nNodes)` levels is charged 1/3.5
/// of a (tree) network step.
pub const NCCL_PAT_LEVEL_DIVISOR: f64 = 3.5;

/// PAT's latency per rank, µs: the `nRanks * 2.8` of [nccl-tuning] (the
/// linear part NCCL's source says it hopes to remove). A constant of
/// NCCL's model, not of a link, so no profile moves it.
pub const NCCL_PAT_PER_RANK_US: f64 = 2.8;

/// Share of the bus bandwidth PAT reaches, dimensionless: `busBw *= .75`
/// for `a == NCCL_ALGO_PAT` in [nccl-tuning].
pub const NCCL_PAT_BUS_BW_FACTOR: f64 = 0.75;

/// Whether NCCL may run PAT for an all-gather or reduce-scatter over `g`:
/// one rank per domain and more than one domain, NCCL's `ncclPatEnable`
/// [nccl-tuning] (`comm->nNodes != comm->nRanks` → off; on by default,
/// `NCCL_PAT_ENABLE` = 2, Simple protocol only, SM 6.0 or newer, host
/// network (no device offload)). A straddling group (`size` ranks on
/// fewer than `size` domains, e.g. 3 ranks on 2 nodes) does not qualify.
/// Not modelled: NCCL also skips PAT for a reduce-scatter with a
/// pre-multiplied or post-divided sum (`ncclAvg`; `enqueue.cc`
/// `updateCollCostTable`); Megatron's default (`average_in_collective`
/// false) reduces with a plain sum.
pub fn pat_eligible(g: GroupSpan) -> bool {
    g.size > 1 && g.per_domain == 1 && g.domains == g.size
}

/// Latency of an NCCL PAT all-gather or reduce-scatter over `g`, seconds
/// [nccl-tuning, `ncclTopoTuneModel`, `a == NCCL_ALGO_PAT`]: `base_PAT +
/// log2i(nNodes)·α_inter,tree / 3.5 + nRanks·2.8 µs`, with `base_PAT` the
/// ring's base scaled by [`NCCL_PAT_OVER_RING_BASE`], `α_inter,tree` the
/// network step latency NCCL takes with one rank per node (the tree's,
/// [`NCCL_TREE_OVER_RING_INTER`] times the ring's) at the outermost tier
/// crossed ([`Links::inter_lat_of`] of [`ring_tier`]). Meaningful where
/// [`pat_eligible`].
///
/// Example (base 8.4 → 8.0, α_inter 14 µs): 16 ranks on 16 nodes:
/// `8.0 + 4·14/3.5 + 16·2.8 = 8.0 + 16.0 + 44.8 = 68.8` µs (the ring:
/// `8.4 + 15·14 = 218.4` µs); 1,024 on 1,024: `8.0 + 10·4.0 + 2867.2 =
/// 2915.2` µs (ring `8.4 + 1023·14 = 14330.4` µs).
pub fn pat_latency(g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 {
        return 0.0;
    }
    let levels = g.domains.max(1).ilog2() as f64;
    let step = links.inter_lat_of(ring_tier(g)) * NCCL_TREE_OVER_RING_INTER;
    links.base_lat * NCCL_PAT_OVER_RING_BASE
        + levels * step / NCCL_PAT_LEVEL_DIVISOR
        + g.size as f64 * NCCL_PAT_PER_RANK_US * 1e-6
}

/// Bandwidth term of a PAT all-gather or reduce-scatter of `bytes` per
/// rank (the gathered size, NCCL's `nBytes = nRanks·count·size`) over `g`,
/// seconds: `bytes / (0.75 · β_inter)` [nccl-tuning]: PAT's bus bandwidth
/// is 0.75 of the NICs' ([`NCCL_PAT_BUS_BW_FACTOR`]), and NCCL does not
/// convert it to an algorithm bandwidth (the `nRanks/nsteps` ratio applies
/// to the ring only: `!(a != NCCL_ALGO_RING && (AllGather ||
/// ReduceScatter))`), so there is no `(n−1)/n`. `β_inter` is the NIC rate
/// at the outermost tier crossed ([`Links::inter_bw_of`]), the ring's:
/// NCCL's PAT runs on its tree graph, taken here to reach the ring graph's
/// bandwidth with one GPU per node (both end at that GPU's NIC).
///
/// Example: 16 ranks on 16 nodes, S = 16 MB, 50 GB/s: `16e6 / 37.5e9 =
/// 426.7` µs (the ring's `15/16 · 16e6 / 50e9 = 300.0` µs).
pub fn pat_bandwidth_time(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    bytes / (NCCL_PAT_BUS_BW_FACTOR * links.inter_bw_of(g))
}

/// The algorithm NCCL would run an all-gather or reduce-scatter with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatherAlgorithm {
    /// Flat ring: [`ring_bandwidth_time`] + [`ring_latency`] of one pass.
    Ring,
    /// Parallel Aggregated Trees: [`pat_bandwidth_time`] + [`pat_latency`].
    Pat,
}

/// The all-gather / reduce-scatter algorithm of `bytes` per rank over `g`:
/// PAT where [`pat_eligible`] and its predicted time is below the ring's,
/// else the ring (the ring on a tie, and for an empty buffer, which costs
/// nothing either way). NCCL's tuner picks the algorithm of
/// least `latency + nBytes/bandwidth` ([nccl-tuning] `ncclTopoGetAlgoTime`,
/// `enqueue.cc` `topoGetAlgoInfo`), Ring before PAT in its loop.
///
/// Example (base 8.4, α_inter 14 µs, 50 GB/s NICs), 16 ranks on 16 nodes:
/// PAT saves `218.4 − 68.8 = 149.6` µs of latency and costs `S·(1/0.75 −
/// 15/16)/50e9 = S·7.917e-12` s of bandwidth, so it wins below
/// `S = 18.9` MB: 1 MB → PAT, 64 MB → ring.
pub fn gather_algorithm(bytes: f64, g: GroupSpan, links: &Links) -> GatherAlgorithm {
    if !pat_eligible(g) || bytes <= 0.0 {
        return GatherAlgorithm::Ring;
    }
    let ring = ring_bandwidth_time(bytes, g, links) + ring_latency(1, g, links);
    let pat = pat_bandwidth_time(bytes, g, links) + pat_latency(g, links);
    if pat < ring {
        GatherAlgorithm::Pat
    } else {
        GatherAlgorithm::Ring
    }
}

/// Reduce-scatter of `bytes` per rank over `g` with algorithm `algo`,
/// seconds: that algorithm's bandwidth term plus its latency.
pub fn reduce_scatter_with(algo: GatherAlgorithm, bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    match algo {
        GatherAlgorithm::Ring => ring_bandwidth_time(bytes, g, links) + ring_latency(1, g, links),
        GatherAlgorithm::Pat => pat_bandwidth_time(bytes, g, links) + pat_latency(g, links),
    }
}

/// Reduce-scatter of `bytes` per rank over `g`, seconds:
/// [`reduce_scatter_with`] the algorithm of [`gather_algorithm`]: the
/// ring's [`ring_bandwidth_time`] plus one pass's [`ring_latency`], or
/// PAT's where one rank per domain makes it eligible and faster.
pub fn reduce_scatter(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    // The same choice as `gather_algorithm`, each time computed once (this
    // runs millions of times per search).
    let ring = ring_bandwidth_time(bytes, g, links) + ring_latency(1, g, links);
    if !pat_eligible(g) {
        return ring;
    }
    let pat = pat_bandwidth_time(bytes, g, links) + pat_latency(g, links);
    if pat < ring { pat } else { ring }
}

/// All-gather producing `bytes` per rank over `g`, seconds (mirror of
/// [`reduce_scatter`]: NCCL's tuning model prices both alike).
pub fn all_gather(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    reduce_scatter(bytes, g, links)
}

/// All-gather producing `bytes` per rank over `g` with algorithm `algo`,
/// seconds (mirror of [`reduce_scatter_with`]).
pub fn all_gather_with(algo: GatherAlgorithm, bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    reduce_scatter_with(algo, bytes, g, links)
}

/// All-reduce of `bytes` per rank over `g` with algorithm `algo`, seconds:
/// twice the ring's bandwidth term (reduce-scatter then all-gather,
/// `2·(n−1)/n·S/β` on one tier; the tree's taken equal, see
/// [`all_reduce_algorithm`]) plus that algorithm's latency.
pub fn all_reduce_with(algo: AllReduceAlgorithm, bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let lat = match algo {
        AllReduceAlgorithm::Ring => ring_latency(2, g, links),
        AllReduceAlgorithm::Tree => tree_latency(g, links),
    };
    2.0 * ring_bandwidth_time(bytes, g, links) + lat
}

/// All-reduce of `bytes` per rank over `g`, seconds: [`all_reduce_with`]
/// the algorithm of [`all_reduce_algorithm`], i.e. the ring's bandwidth
/// term twice plus `min(ring, tree)` latency.
///
/// Example: 16 ranks on 2 nodes of 8, S = 1 GB, 300 / 25 GB/s, NCCL's
/// latencies: `2·5.417 ms + 92.4 µs = 10.926` ms (tree latency).
pub fn all_reduce(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    all_reduce_with(all_reduce_algorithm(g, links), bytes, g, links)
}

/// All-to-all where each rank holds `bytes` and sends `(n−1)/n` of them,
/// seconds. The share bound for other domains, `(n−k)/n`, crosses the NICs;
/// the rest stays on NVLink; both proceed in parallel (GShard-style expert
/// dispatch, Lepikhin et al. 2020). On a rail-optimized first tier the
/// cross-rail share ([`all_to_all_spine_share`]) also crosses the spine,
/// at the NIC rate over the first tier's oversubscription. (NCCL's PXN,
/// which forwards a cross-rail message over NVLink to the GPU on the
/// destination's rail first, is not modelled: priced as crossing the
/// spine.) Latency: NCCL runs an all-to-all as `n − 1` concurrent
/// send/receive pairs, outside its tuning model; each side pays one step
/// latency (`intra_node.latency_us` on NVLink, `inter_node.latency_us`
/// plus the tiers' off the domain), no base latency.
pub fn all_to_all(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = g.size as f64;
    let k = g.per_domain as f64;
    let on_node = (k - 1.0) / n * bytes / links.intra_bw + (k - 1.0).min(1.0) * links.intra_lat;
    let off_node = if g.domains <= 1 {
        0.0
    } else if g.on_rails {
        // Every off-domain byte leaves through the NIC at its rate; the
        // cross-rail share also shares the leaves' uplinks to the spine.
        let nic = (n - k) / n * bytes / links.inter_bw;
        let share = all_to_all_spine_share(g);
        let spine = share * bytes / links.uplink_bw(1);
        nic.max(spine) + links.inter_lat_of(if share > 0.0 { 1 } else { 0 })
    } else {
        (n - k) / n * bytes / links.inter_bw_of(g) + links.inter_lat_of(g.tier)
    };
    on_node.max(off_node)
}

/// Point-to-point send of `bytes` to a neighbour in group `g`, seconds: on
/// the NIC (over the oversubscription of the outermost tier the group
/// crosses) when the group spans domains, else on NVLink; one step latency
/// of that link (as [`all_to_all`]; NCCL's tuning model does not price
/// send/receive).
pub fn p2p(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if bytes <= 0.0 {
        return 0.0;
    }
    if g.crosses_domains() {
        bytes / links.uplink_bw(p2p_tier(g)) + links.inter_lat_of(p2p_tier(g))
    } else {
        bytes / links.intra_bw + links.intra_lat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DGX A100 links as in `hardware/clusters/dgx64.toml`, with efficiency 1
    /// so the numbers can be checked by hand.
    fn dgx_a100() -> Links {
        // NVLink3: 300 GB/s per GPU per direction; one 200 Gb/s HDR NIC per
        // GPU = 25 GB/s.
        Links::bandwidths(300e9, 200e9 / 8.0)
    }

    /// [`dgx_a100`] with NCCL's Simple-protocol latencies [nccl-tuning]:
    /// base 8.4 µs, ring steps 3.4 µs on NVLink and 14 µs across nodes.
    fn dgx_a100_nccl() -> Links {
        Links {
            intra_lat: 3.4e-6,
            inter_lat: 14e-6,
            base_lat: 8.4e-6,
            ..dgx_a100()
        }
    }

    #[test]
    fn all_gather_on_two_nodes_counts_fifteen_flat_ring_steps() {
        // 16 ranks, 8 per node on 2 nodes: NCCL's flat ring has 15 steps,
        // 1 of them crossing nodes: 8.4 + 14·3.4 + 1·14 = 70.0 µs. The
        // hierarchical count before was 7·3 + 1·5 = 26 µs.
        let links = dgx_a100_nccl();
        let g = GroupSpan::of(16, 1, 8);
        let lat = ring_latency(1, g, &links);
        assert!((lat - 70.0e-6).abs() < 1e-12, "{lat}");
        // Plus the bandwidth terms, unchanged: S = 1 GB,
        // 7/8·S/300 GB/s + 1/2·(S/8)/25 GB/s = 2.9167 + 2.5 ms.
        let s = 1e9;
        let hand = 7.0 / 8.0 * s / 300e9 + 0.5 * s / 8.0 / 25e9 + 70.0e-6;
        assert!((all_gather(s, g, &links) - hand).abs() < 1e-12);
        assert!((reduce_scatter(s, g, &links) - hand).abs() < 1e-12);
        assert!((hand - 5.4867e-3).abs() < 1e-7, "{hand}");
    }

    #[test]
    fn all_gather_over_1536_ranks_on_192_nodes() {
        // 1,535 ring steps, 191 crossing: 8.4 + 1344·3.4 + 191·14 =
        // 8.4 + 4569.6 + 2674 = 7252.0 µs (the hierarchical rings before:
        // 7·3 + 191·5 = 976 µs).
        let links = dgx_a100_nccl();
        let g = GroupSpan::of(1536, 1, 8);
        assert_eq!((g.per_domain, g.domains), (8, 192));
        let lat = ring_latency(1, g, &links);
        assert!((lat - 7252.0e-6).abs() < 1e-9, "{lat}");
        // 100 MB gathered: 7/8·1e8/300e9 + 191/192·(1e8/8)/25e9 + 7.252 ms
        // = 0.2917 + 0.4974 + 7.252 = 8.0411 ms: latency dominates.
        let t = all_gather(1e8, g, &links);
        let hand = 7.0 / 8.0 * 1e8 / 300e9 + 191.0 / 192.0 * 1e8 / 8.0 / 25e9 + 7252.0e-6;
        assert!((t - hand).abs() < 1e-12, "{t} vs {hand}");
        assert!((t - 8.0411e-3).abs() < 1e-7, "{t}");
        // Its all-reduce takes the tree: log2i(192) = 7 levels, 8.4 +
        // 2·(7·4.0 + 7·14) = 260.4 µs against the ring's 8.4 + 2·(1344·3.4
        // + 191·14) = 14495.6 µs.
        let tree = tree_latency(g, &links);
        assert!((tree - 260.4e-6).abs() < 1e-9, "{tree}");
        assert!((ring_latency(2, g, &links) - 14495.6e-6).abs() < 1e-9);
        assert_eq!(all_reduce_algorithm(g, &links), AllReduceAlgorithm::Tree);
    }

    #[test]
    fn all_reduce_takes_the_ring_in_a_node_and_the_tree_across_nodes() {
        let links = dgx_a100_nccl();
        let bw = |s: f64, g: GroupSpan| 2.0 * ring_bandwidth_time(s, g, &links);
        // 8 ranks in one node: ring 8.4 + 14·3.4 = 56.0 µs, tree 8.4 +
        // 2·7·4.0 = 64.4 µs: the ring, for a 4 KiB buffer and a 1 GiB one
        // alike (the tree's bandwidth is taken equal to the ring's, so the
        // choice does not depend on size).
        let node = GroupSpan::of(8, 1, 8);
        assert!((ring_latency(2, node, &links) - 56.0e-6).abs() < 1e-12);
        assert!((tree_latency(node, &links) - 64.4e-6).abs() < 1e-12);
        assert_eq!(all_reduce_algorithm(node, &links), AllReduceAlgorithm::Ring);
        for s in [4096.0, 1073741824.0] {
            let t = all_reduce(s, node, &links);
            assert!((t - bw(s, node) - 56.0e-6).abs() < 1e-12, "{s}: {t}");
        }
        // 16 ranks on 2 nodes of 8: ring 8.4 + 2·(14·3.4 + 14) = 131.6 µs,
        // tree 8.4 + 2·(7·4.0 + 1·14) = 92.4 µs: the tree.
        let two = GroupSpan::of(16, 1, 8);
        assert!((ring_latency(2, two, &links) - 131.6e-6).abs() < 1e-12);
        assert!((tree_latency(two, &links) - 92.4e-6).abs() < 1e-12);
        assert_eq!(all_reduce_algorithm(two, &links), AllReduceAlgorithm::Tree);
        // 4 KiB: 2·(7/8·4096/300e9 + 1/2·512/25e9) = 0.0443 µs of
        // bandwidth under 92.4 µs of latency; 1 GB: 10.8333 ms + 92.4 µs =
        // 10.9257 ms (the module's example).
        let small = all_reduce(4096.0, two, &links);
        assert!((small - bw(4096.0, two) - 92.4e-6).abs() < 1e-12);
        assert!((small - 92.444e-6).abs() < 1e-9, "{small}");
        let large = all_reduce(1e9, two, &links);
        assert!((large - 10.9257e-3).abs() < 1e-7, "{large}");
        // The ring, when asked for: 131.6 µs instead.
        let ring = all_reduce_with(AllReduceAlgorithm::Ring, 1e9, two, &links);
        assert!((ring - large - (131.6e-6 - 92.4e-6)).abs() < 1e-12);
    }

    #[test]
    fn tree_and_ring_steps_across_a_pod_pay_its_latency() {
        // 32 ranks, 8 per node on 4 nodes across two pods (tier 1, 2 µs
        // more per crossing step): cross-node steps cost 14 + 2 = 16 µs.
        // Ring all-reduce: 62 steps, 6 crossing: 8.4 + 56·3.4 + 6·16 =
        // 294.8 µs; tree: 8.4 + 2·(7·4.0 + log2(4)·16) = 128.4 µs.
        let mut links = dgx_a100_nccl();
        links.tier_lat = [0.0, 2e-6, 2e-6, 2e-6];
        let g = GroupSpan {
            tier: 1,
            ..GroupSpan::of(32, 1, 8)
        };
        assert!((ring_latency(2, g, &links) - 294.8e-6).abs() < 1e-12);
        assert!((tree_latency(g, &links) - 128.4e-6).abs() < 1e-12);
        // A reduce-scatter's ring: 8.4 + 28·3.4 + 3·16 = 151.6 µs.
        assert!((ring_latency(1, g, &links) - 151.6e-6).abs() < 1e-12);
    }

    /// One GPU per node on 400 Gb/s NICs (50 GB/s per GPU), NCCL's
    /// Simple latencies: the shape of a CP or DP group at 10⁴–10⁵ GPUs.
    fn h100_nccl() -> Links {
        Links {
            inter_bw: 50e9,
            ..dgx_a100_nccl()
        }
    }

    #[test]
    fn pat_latency_by_hand_on_16_and_1024_nodes() {
        let links = h100_nccl();
        // 16 ranks on 16 nodes: log2i(16) = 4 levels of 14/3.5 = 4.0 µs:
        // 8.0 + 16.0 + 16·2.8 = 68.8 µs; the flat ring 8.4 + 15·14 = 218.4.
        let g = GroupSpan::of(16, 8, 8);
        assert_eq!((g.size, g.per_domain, g.domains), (16, 1, 16));
        assert!(pat_eligible(g));
        assert!((pat_latency(g, &links) - 68.8e-6).abs() < 1e-12);
        assert!((ring_latency(1, g, &links) - 218.4e-6).abs() < 1e-12);
        // 1,024 on 1,024: 8.0 + 10·4.0 + 1024·2.8 = 8 + 40 + 2867.2 =
        // 2915.2 µs; the ring 8.4 + 1023·14 = 14330.4 µs.
        let big = GroupSpan::of(1024, 8, 8);
        assert_eq!((big.per_domain, big.domains), (1, 1024));
        assert!((pat_latency(big, &links) - 2915.2e-6).abs() < 1e-9);
        assert!((ring_latency(1, big, &links) - 14330.4e-6).abs() < 1e-9);
        // Across a pod (tier 1, 2 µs more per network step): 8.0 +
        // 4·16/3.5 + 44.8 = 71.086 µs.
        let mut pods = links;
        pods.tier_lat = [0.0, 2e-6, 2e-6, 2e-6];
        let across = GroupSpan { tier: 1, ..g };
        let lat = pat_latency(across, &pods);
        assert!((lat - (52.8e-6 + 64e-6 / 3.5)).abs() < 1e-12, "{lat}");
        assert!((lat - 71.0857e-6).abs() < 1e-10, "{lat}");
    }

    #[test]
    fn pat_bandwidth_has_no_n_minus_one_over_n_and_three_quarters_of_the_nic() {
        let links = h100_nccl();
        let g = GroupSpan::of(16, 8, 8);
        // 16 MB gathered: 16e6 / (0.75·50e9) = 426.667 µs; the ring's
        // 15/16·16e6/50e9 = 300.0 µs.
        let pat = pat_bandwidth_time(16e6, g, &links);
        assert!((pat - 426.6667e-6).abs() < 1e-10, "{pat}");
        assert!((ring_bandwidth_time(16e6, g, &links) - 300e-6).abs() < 1e-12);
        // At 1,024 ranks the same: 16e6/37.5e9, independent of n.
        let big = GroupSpan::of(1024, 8, 8);
        assert!((pat_bandwidth_time(16e6, big, &links) - pat).abs() < 1e-15);
    }

    #[test]
    fn pat_wins_small_gathers_and_the_ring_large_ones() {
        let links = h100_nccl();
        let g = GroupSpan::of(16, 8, 8);
        // 1 MB: PAT 1e6/37.5e9 + 68.8 µs = 26.667 + 68.8 = 95.467 µs,
        // ring 15/16·1e6/50e9 + 218.4 = 18.75 + 218.4 = 237.15 µs.
        assert_eq!(gather_algorithm(1e6, g, &links), GatherAlgorithm::Pat);
        let t = all_gather(1e6, g, &links);
        assert!((t - 95.4667e-6).abs() < 1e-10, "{t}");
        assert!((reduce_scatter(1e6, g, &links) - t).abs() < 1e-15);
        let ring = all_gather_with(GatherAlgorithm::Ring, 1e6, g, &links);
        assert!((ring - 237.15e-6).abs() < 1e-12, "{ring}");
        // Crossover: 149.6 µs of latency saved against S·(1/0.75 −
        // 15/16)/50e9 = S·7.9167e-12 s: S* = 18.897 MB.
        assert_eq!(gather_algorithm(18.8e6, g, &links), GatherAlgorithm::Pat);
        assert_eq!(gather_algorithm(19.0e6, g, &links), GatherAlgorithm::Ring);
        // 64 MB: ring 1.2 ms + 218.4 µs = 1418.4 µs, PAT 1706.67 + 68.8 =
        // 1775.47 µs: the ring.
        assert_eq!(gather_algorithm(64e6, g, &links), GatherAlgorithm::Ring);
        assert!((all_gather(64e6, g, &links) - 1418.4e-6).abs() < 1e-12);
        // 1,024 nodes, 100 MB: ring 1023/1024·1e8/50e9 + 14330.4 µs =
        // 1998.05 + 14330.4 = 16328.45 µs; PAT 2666.67 + 2915.2 =
        // 5581.87 µs: PAT, three times faster.
        let big = GroupSpan::of(1024, 8, 8);
        assert_eq!(gather_algorithm(1e8, big, &links), GatherAlgorithm::Pat);
        let t = all_gather(1e8, big, &links);
        assert!((t - 5581.867e-6).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_cp_exchange_on_the_100k_profile_takes_pat() {
        // h100-100k: 400 Gb/s per GPU = 50 GB/s × collective.inter 0.9 =
        // 45 GB/s, NCCL's latencies. The 405B winner's 4 MiB K/V
        // all-gather over C = 16 on 16 nodes (T = 8 fills each node):
        // PAT 4194304/(0.75·45e9) + 68.8 µs = 124.27 + 68.8 = 193.07 µs;
        // ring 15/16·4194304/45e9 + 218.4 = 87.38 + 218.4 = 305.78 µs.
        let c = crate::spec::Catalog::shipped()
            .unwrap()
            .cluster("h100-100k")
            .unwrap()
            .clone();
        let links = Links::of(&c);
        assert!((links.inter_bw - 45e9).abs() < 1.0, "{}", links.inter_bw);
        let g = GroupSpan::of(16, 8, 8);
        let s = 4.0 * 1024.0 * 1024.0;
        assert_eq!(gather_algorithm(s, g, &links), GatherAlgorithm::Pat);
        let t = all_gather(s, g, &links);
        assert!((t - 193.07e-6).abs() < 1e-8, "{t}");
        let ring = all_gather_with(GatherAlgorithm::Ring, s, g, &links);
        assert!((ring - 305.78e-6).abs() < 1e-8, "{ring}");
    }

    #[test]
    fn groups_with_more_than_one_rank_per_node_never_take_pat() {
        let links = h100_nccl();
        // 16 on 2 nodes of 8, 1,024 at 2 per node, 8 inside one node, and a
        // straddling 3 ranks on 2 nodes (per_domain 1 but 3 ≠ 2 domains):
        // the ring at every size, as NCCL's `nNodes != nRanks` rule says.
        let straddle = GroupSpan {
            size: 3,
            per_domain: 1,
            domains: 2,
            ..GroupSpan::SINGLE
        };
        for g in [
            GroupSpan::of(16, 1, 8),
            GroupSpan::of(1024, 4, 8),
            GroupSpan::of(8, 1, 8),
            straddle,
        ] {
            assert!(!pat_eligible(g), "{g:?}");
            for s in [1e3, 1e6, 1e9] {
                assert_eq!(gather_algorithm(s, g, &links), GatherAlgorithm::Ring);
                let ring = ring_bandwidth_time(s, g, &links) + ring_latency(1, g, &links);
                assert!((all_gather(s, g, &links) - ring).abs() < 1e-15);
            }
        }
        assert_eq!(GroupSpan::of(1024, 4, 8).per_domain, 2);
        // A single rank is no group at all.
        assert!(!pat_eligible(GroupSpan::SINGLE));
    }

    #[test]
    fn a_group_of_one_rank_costs_nothing() {
        let links = dgx_a100_nccl();
        assert_eq!(ring_latency(2, GroupSpan::SINGLE, &links), 0.0);
        assert_eq!(tree_latency(GroupSpan::SINGLE, &links), 0.0);
        assert_eq!(all_reduce(1e9, GroupSpan::SINGLE, &links), 0.0);
    }

    #[test]
    fn ring_all_reduce_1gib_inside_vs_across_nodes() {
        let s = 1073741824.0; // 1 GiB
        let links = dgx_a100();
        // 8 GPUs in one node: 2·7/8·S / 300 GB/s = 6.2634e-3 s.
        let inside = all_reduce(s, GroupSpan::of(8, 1, 8), &links);
        assert!((inside - 2.0 * 7.0 / 8.0 * s / 300e9).abs() < 1e-12);
        assert!((inside - 6.2634e-3).abs() < 1e-6, "{inside}");
        // 8 GPUs on 8 nodes (one per node): 2·7/8·S / 25 GB/s = 75.16e-3 s,
        // twelve times slower: the NIC is 12× slower than NVLink.
        let across = all_reduce(s, GroupSpan::of(8, 8, 8), &links);
        assert!((across - 2.0 * 7.0 / 8.0 * s / 25e9).abs() < 1e-12);
        assert!((across / inside - 12.0).abs() < 1e-9);
    }

    #[test]
    fn hierarchical_all_reduce_two_nodes() {
        // 16 ranks, 8 per node on 2 nodes: intra RS+AG over 8 on S plus
        // inter RS+AG over 2 on S/8: 2·(7/8·S/300e9 + 1/2·S/8/25e9).
        let s = 1e9;
        let t = all_reduce(s, GroupSpan::of(16, 1, 8), &dgx_a100());
        let hand = 2.0 * (7.0 / 8.0 * s / 300e9 + 0.5 * s / 8.0 / 25e9);
        assert!((t - hand).abs() < 1e-12);
    }

    #[test]
    fn all_to_all_off_node_share_on_nic() {
        // EP16 over 2 nodes (8 per node): half the data leaves the node.
        // off-node: 8/16·S / 25 GB/s dominates the NVLink share 7/16·S/300 GB/s.
        let s = 1e8;
        let t = all_to_all(s, GroupSpan::of(16, 1, 8), &dgx_a100());
        assert!((t - 0.5 * s / 25e9).abs() < 1e-12);
        // EP8 inside a node: 7/8·S / 300 GB/s.
        let t = all_to_all(s, GroupSpan::of(8, 1, 8), &dgx_a100());
        assert!((t - 7.0 / 8.0 * s / 300e9).abs() < 1e-12);
    }
    #[test]
    fn straddling_tp_group_is_priced_on_the_nics() {
        // T = 3, D = 8 on 8-GPU nodes: TP group {6, 7, 8} keeps ranks 6, 7
        // on node 0 and rank 8 alone on node 1, so the worst TP group is
        // (per_domain 1, domains 2). All-reduce of S = 1 GB:
        //   worst group: 2·[ring(1) + (2−1)/2 · S/1 / 25 GB/s] = 2·0.02 s
        //   = 0.04 s (rank 8's NIC carries the whole shard);
        //   first group {0, 1, 2} on NVLink: 2·(3−1)/3 · S / 300 GB/s
        //   = 4.44 ms, what every group was priced at before.
        use crate::layout::{Layout, Placement};
        let l = Layout::dense(8, 3, 1, 1);
        let pl = Placement::new(&l, 8);
        let s = 1e9;
        let t = all_reduce(s, pl.tp, &dgx_a100());
        assert!((t - 0.04).abs() < 1e-12, "{t}");
        let first = all_reduce(s, GroupSpan::of(3, 1, 8), &dgx_a100());
        assert!((first - 4.0 / 3.0 * 1e9 / 300e9).abs() < 1e-12, "{first}");
    }

    #[test]
    fn a_group_across_pods_runs_its_cross_node_phase_at_the_uplink_rate() {
        // 32 ranks, 8 per node on 4 nodes, the group spanning two pods
        // whose uplinks are oversubscribed 4:1 (tier 1). All-reduce of S:
        // 2·(7/8·S/300 GB/s + 3/4·(S/8)/(25 GB/s / 4)).
        let mut links = dgx_a100();
        links.oversub = [1.0, 4.0, 4.0, 4.0];
        let s = 1e9;
        let g = GroupSpan {
            tier: 1,
            ..GroupSpan::of(32, 1, 8)
        };
        let t = all_reduce(s, g, &links);
        let hand = 2.0 * (7.0 / 8.0 * s / 300e9 + 0.75 * s / 8.0 / (25e9 / 4.0));
        assert!((t - hand).abs() < 1e-12, "{t} vs {hand}");
        // The same group inside one pod: the NIC rate.
        let inside = all_reduce(s, GroupSpan::of(32, 1, 8), &links);
        let hand = 2.0 * (7.0 / 8.0 * s / 300e9 + 0.75 * s / 8.0 / 25e9);
        assert!((inside - hand).abs() < 1e-12);
        // A stage neighbour across pods: S / (25 GB/s / 4).
        let pp = GroupSpan {
            tier: 1,
            ..GroupSpan::of(2, 8, 8)
        };
        assert!((p2p(s, pp, &links) - s / (25e9 / 4.0)).abs() < 1e-12);
    }

    #[test]
    fn a_message_above_a_tier_pays_its_latency() {
        // 32 ranks, 8 per node on 4 nodes across two pods (tier 1), NIC
        // latency 5 µs, 2 µs more above the pod, NVLink steps and base
        // latency 0, bandwidth infinite-ish: a reduce-scatter's 3
        // cross-node ring steps cost 3·(5 + 2) µs.
        let mut links = dgx_a100();
        links.intra_bw = 1e30;
        links.inter_bw = 1e30;
        links.inter_lat = 5e-6;
        links.tier_lat = [0.0, 2e-6, 2e-6, 2e-6];
        let g = GroupSpan {
            tier: 1,
            ..GroupSpan::of(32, 1, 8)
        };
        let t = reduce_scatter(1.0, g, &links);
        assert!((t - 21e-6).abs() < 1e-12, "{t}");
        // Inside one pod: 3·5 µs.
        let t = reduce_scatter(1.0, GroupSpan::of(32, 1, 8), &links);
        assert!((t - 15e-6).abs() < 1e-12, "{t}");
        assert!(
            (p2p(
                1.0,
                GroupSpan {
                    tier: 1,
                    ..GroupSpan::of(2, 8, 8)
                },
                &links
            ) - 7e-6)
                .abs()
                < 1e-12
        );
    }

    #[test]
    fn tiers_multiply_their_oversubscriptions() {
        use crate::spec::hardware::Tier;
        let mut c = crate::spec::Catalog::shipped()
            .unwrap()
            .cluster("h100-16k")
            .unwrap()
            .clone();
        // Llama 3's pods: 3,072 GPUs at full bisection, 1:7 above.
        assert_eq!(tier_oversubscription(&c), [1.0, 7.0, 1.0, 1.0]);
        c.tiers.push(Tier {
            name: "building".into(),
            gpus: 12288,
            oversubscription: 2.0,
            rails: false,
            above: None,
            latency_us: None,
        });
        // Crossing buildings crosses pods too: 1/7 of the NIC rate leaves
        // the pod, half of that the building, 1/14.
        assert_eq!(tier_oversubscription(&c), [1.0, 7.0, 14.0, 1.0]);
    }
}
