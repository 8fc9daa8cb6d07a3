//! The levels of a cluster's network and the bytes each process group of a
//! layout puts on them (issue 17: `explain` names, for each group, the
//! levels it crosses and the bytes per level; the plan file records them).
//!
//! Levels, innermost first: 0 the scale-up domain (NVLink, as the job fills
//! it: [`crate::spec::Cluster::fast_domain`]); 1 the NICs and the first
//! switch level (the rail leaves on a rail-optimized fabric); `1 + k` the
//! uplinks above `[[tiers]]` entry k (a pod's aggregation, a scalable
//! unit's spine). Bytes are per GPU, for one collective of the group, at
//! its busiest hop: a ring's cross-domain phase runs at its slowest hop's
//! rate ([`super::comm`]), so every byte of that phase is counted on the
//! outermost level the ring climbs to, as it is priced.

use serde::Serialize;

use super::Problem;
use super::comm::{self, MAX_LEVELS};
use super::data_parallel::DpVolumes;
use super::moe;
use crate::layout::{GroupSpan, Layout, Placement};
use crate::spec::Cluster;

/// One level of the network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    /// Level name (`NVLink`, `NIC`, `rail leaf`, `spine`, `pod uplinks`).
    pub name: String,
    /// GPUs under one switch group of this level, in job ranks.
    pub gpus: u64,
    /// Link rate per GPU per direction before collective efficiency, GB/s:
    /// NVLink's, the NIC's, or the NIC's over the oversubscription
    /// product up to this level.
    pub gbs_per_gpu: f64,
    /// Product of the uplink oversubscriptions up to this level (1 inside
    /// the scale-up domain and on the leaves).
    pub oversubscription: f64,
    /// Latency of one message that reaches this level, microseconds:
    /// NVLink's, the NIC's, or the NIC's plus the tiers' `latency_us` up to
    /// this level.
    pub latency_us: f64,
}

/// The levels of `cluster`, innermost first (at most [`MAX_LEVELS`]).
pub fn levels(cluster: &Cluster) -> Vec<Level> {
    let oversub = comm::tier_oversubscription(cluster);
    let lat = comm::tier_latency(cluster);
    let inter_us = cluster.inter_node.latency_us;
    let nic = cluster.nic_bytes_per_s_per_gpu() / 1e9;
    let tiers: Vec<u32> = cluster.job_tier_sizes().collect();
    let rails = cluster.tiers.first().is_some_and(|t| t.rails);
    let mut out = vec![
        Level {
            name: "NVLink".into(),
            gpus: cluster.fast_domain() as u64,
            gbs_per_gpu: cluster.intra_node.bandwidth_gbs,
            oversubscription: 1.0,
            latency_us: cluster.intra_node.latency_us,
        },
        Level {
            name: if rails { "rail leaf" } else { "NIC" }.into(),
            gpus: tiers.first().map_or(cluster.job_gpus(), |&t| t as u64),
            gbs_per_gpu: nic,
            oversubscription: 1.0,
            latency_us: inter_us,
        },
    ];
    for (k, t) in cluster.tiers.iter().enumerate() {
        out.push(Level {
            name: t.above_name(),
            gpus: tiers.get(k + 1).map_or(cluster.job_gpus(), |&t| t as u64),
            gbs_per_gpu: nic / oversub[k + 1],
            oversubscription: oversub[k + 1],
            latency_us: inter_us + lat[k + 1] * 1e6,
        });
    }
    out
}

/// The collective a group runs, for [`level_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Hierarchical ring all-reduce ([`comm::all_reduce`]).
    AllReduce,
    /// Hierarchical ring reduce-scatter ([`comm::reduce_scatter`]).
    ReduceScatter,
    /// Hierarchical ring all-gather ([`comm::all_gather`]).
    AllGather,
    /// All-to-all ([`comm::all_to_all`]).
    AllToAll,
    /// Send to a pipeline neighbour ([`comm::p2p`]).
    P2p,
}

/// Bytes one GPU puts on each level for one collective of `bytes` per rank
/// over `g` (index = level, see the module doc), as [`comm`] prices it:
///
/// - reduce-scatter / all-gather: `(k−1)/k·S` on NVLink, the shard phase
///   `(d−1)/d·S/k` on the NIC and on every uplink level up to
///   [`comm::ring_tier`]; all-reduce twice that;
/// - all-to-all: `(k−1)/n·S` on NVLink, `(n−k)/n·S` on the NIC, and above
///   it the cross-rail share [`comm::all_to_all_spine_share`] on rails, or
///   all of `(n−k)/n·S` up to [`GroupSpan::tier`];
/// - p2p: `S` on NVLink inside a domain, else on the NIC and every uplink
///   level up to [`comm::p2p_tier`].
///
/// Example (hand-worked): DP all-reduce of 1 GB over 32 ranks, 8 per node
/// on 4 nodes: NVLink `2·7/8 = 1.75` GB, NIC `2·3/4·1/8 = 0.1875` GB.
pub fn level_bytes(kind: Collective, bytes: f64, g: GroupSpan) -> [f64; MAX_LEVELS] {
    let mut out = [0.0; MAX_LEVELS];
    if g.size <= 1 || bytes <= 0.0 {
        return out;
    }
    let (n, k, d) = (g.size as f64, g.per_domain as f64, g.domains as f64);
    let up_to = |out: &mut [f64; MAX_LEVELS], tier: u8, v: f64| {
        for slot in out.iter_mut().take(2 + tier as usize).skip(1) {
            *slot = v;
        }
    };
    match kind {
        Collective::AllReduce | Collective::ReduceScatter | Collective::AllGather => {
            let times = if kind == Collective::AllReduce {
                2.0
            } else {
                1.0
            };
            out[0] = times * (k - 1.0) / k * bytes;
            if g.domains > 1 {
                up_to(
                    &mut out,
                    comm::ring_tier(g),
                    times * (d - 1.0) / d * bytes / k,
                );
            }
        }
        Collective::AllToAll => {
            out[0] = (k - 1.0) / n * bytes;
            if g.domains > 1 {
                let off = (n - k) / n * bytes;
                if g.on_rails {
                    out[1] = off;
                    out[2] = comm::all_to_all_spine_share(g) * bytes;
                } else {
                    up_to(&mut out, g.tier, off);
                }
            }
        }
        Collective::P2p => {
            if g.crosses_domains() {
                up_to(&mut out, comm::p2p_tier(g), bytes);
            } else {
                out[0] = bytes;
            }
        }
    }
    out
}

/// One process group of a layout and what one of its collectives moves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupTraffic {
    /// Axis (`tp`, `cp`, `ep`, `etp`, `dp-cp`, `expert-dp`, `pp`).
    pub axis: &'static str,
    /// Where its worst group sits.
    pub span: GroupSpan,
    /// The collective priced here.
    pub collective: Collective,
    /// What one collective carries per rank, and of what, bytes.
    pub buffer_bytes: f64,
    /// What the buffer is.
    pub buffer: &'static str,
    /// Names of the levels it crosses, innermost first.
    pub levels: Vec<String>,
    /// Bytes per GPU on each crossed level, in the order of `levels`.
    pub level_bytes: Vec<f64>,
    /// Time of one such collective, seconds.
    pub time_s: f64,
}

/// Names of the levels a group crosses for `kind` (those with bytes), for
/// the plan file.
pub fn crossed(cluster: &Cluster, kind: Collective, g: GroupSpan) -> Vec<String> {
    let names = levels(cluster);
    level_bytes(kind, 1.0, g)
        .iter()
        .zip(&names)
        .filter(|(b, _)| **b > 0.0)
        .map(|(_, l)| l.name.clone())
        .collect()
}

/// Every process group of `l` with more than one rank, with one of its
/// collectives: TP the all-reduce of one layer's activations
/// (`b·s/C·h·2`; under SP its all-gather and its reduce-scatter, two rows
/// of the same buffer), CP one K/V chunk (`kv_bytes_per_step`), EP one dispatch
/// (`moe::all_to_all_bytes`), ETP one all-reduce of the routed pairs,
/// DP·CP and expert DP the gradient reduction of the rank with the most
/// parameters (all-reduce under ZeRO-0, reduce-scatter otherwise), PP one
/// activation send (`b·s/C·h·2/T`).
pub fn group_traffic(pr: &Problem, l: &Layout) -> Vec<GroupTraffic> {
    let pl = Placement::of(l, pr.cluster);
    let names = levels(pr.cluster);
    let a = &pr.model.architecture;
    let tokens = l.micro_batch as f64 * pr.job.seq_len as f64 / l.cp as f64;
    let act = tokens * a.hidden as f64 * 2.0;
    let load = super::layer::moe_load(pr, l);
    let ranks = super::rank_costs(pr, l);
    let (params, expert) = ranks.iter().fold((0.0f64, 0.0f64), |(p, e), r| {
        (p.max(r.params), e.max(r.expert_params))
    });
    let vol = DpVolumes::of(params, expert, &pr.job.recipe);
    let grad_kind = if l.zero == 0 {
        Collective::AllReduce
    } else {
        Collective::ReduceScatter
    };
    let pairs = moe::routed_pairs_per_rank(pr.model, tokens, l.tp as f64, l.etp as f64, load);
    let cp_kind = match l.cp_comm {
        crate::layout::CpComm::Ring => Collective::P2p,
        crate::layout::CpComm::AllGather => Collective::AllGather,
    };
    let kv = super::cp::kv_bytes_per_step(pr.model, tokens, l.tp as f64, pr.job.cp_impl);
    let cp_bytes = if cp_kind == Collective::P2p {
        kv
    } else {
        kv * l.cp as f64
    };
    let moe = pr.model.moe.is_some();
    // TP: one all-reduce of a layer's activations; under SP the same
    // traffic as an all-gather before and a reduce-scatter after each
    // parallel block ([ref:korthikanti-2022] §4.2.2).
    let mut rows: Vec<(&'static str, GroupSpan, Collective, f64, &'static str)> = if l.sp {
        vec![
            (
                "tp",
                pl.tp,
                Collective::AllGather,
                act,
                "one layer's activations, SP",
            ),
            (
                "tp",
                pl.tp,
                Collective::ReduceScatter,
                act,
                "one layer's activations, SP",
            ),
        ]
    } else {
        vec![(
            "tp",
            pl.tp,
            Collective::AllReduce,
            act,
            "one layer's activations",
        )]
    };
    rows.push(("cp", pl.cp, cp_kind, cp_bytes, "one K/V exchange"));
    if moe {
        rows.push((
            "ep",
            pl.ep,
            Collective::AllToAll,
            moe::all_to_all_bytes(pr.model, tokens, l.tp as f64, load),
            "one token dispatch",
        ));
        rows.push((
            "etp",
            pl.etp,
            Collective::AllReduce,
            pairs * a.hidden as f64 * 2.0,
            "one routed-pair all-reduce",
        ));
    }
    rows.push(("dp-cp", pl.dp_cp, grad_kind, vol.grads, "dense gradients"));
    if moe {
        rows.push((
            "expert-dp",
            pl.edp,
            grad_kind,
            vol.expert_grads,
            "expert gradients",
        ));
    }
    rows.push((
        "pp",
        pl.pp,
        Collective::P2p,
        act / l.tp as f64,
        "one activation send",
    ));
    rows.into_iter()
        .filter(|r| r.1.size > 1 && r.3 > 0.0)
        .map(|(axis, span, collective, bytes, buffer)| {
            let per = level_bytes(collective, bytes, span);
            let (levels, level_bytes) = per
                .iter()
                .zip(&names)
                .filter(|(b, _)| **b > 0.0)
                .map(|(b, n)| (n.name.clone(), *b))
                .unzip();
            let links = &pr.links;
            let time_s = match collective {
                Collective::AllReduce => comm::all_reduce(bytes, span, links),
                Collective::ReduceScatter => comm::reduce_scatter(bytes, span, links),
                Collective::AllGather => comm::all_gather(bytes, span, links),
                Collective::AllToAll => comm::all_to_all(bytes, span, links),
                Collective::P2p => comm::p2p(bytes, span, links),
            };
            GroupTraffic {
                axis,
                span,
                collective,
                buffer_bytes: bytes,
                buffer,
                levels,
                level_bytes,
                time_s,
            }
        })
        .collect()
}
