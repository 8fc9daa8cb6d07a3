//! Collective communication times with an α–β model on the links a group
//! really crosses.
//!
//! Inside one fast domain a ring uses NVLink at `intra_node.bandwidth_gbs`
//! per GPU per direction. A group that spans domains runs hierarchically
//! (NCCL's tree/ring over nodes): the ranks of one domain first reduce-
//! scatter among themselves on NVLink, the `1/k` shards then travel between
//! domains on the NICs, each GPU using its share of the node's NIC bandwidth,
//! and the domain all-gathers again. Formulas (ring, Patarasuk & Yuan 2009;
//! Thakur et al. 2005):
//! - all-reduce: `2·(n−1)/n · S/β + 2·(n−1)·α`
//! - reduce-scatter / all-gather: `(n−1)/n · S/β + (n−1)·α`
//! - all-to-all: `(n−1)/n · S` leaves each rank; the off-domain part
//!   `(n−k)/n · S` goes through the NIC, the rest on NVLink, in parallel.
//! - point-to-point: `S/β + α`.
//!
//! `S` is the full buffer size per rank in bytes (for all-gather the
//! gathered size); times are seconds.

use crate::layout::GroupSpan;
use crate::spec::Cluster;

/// Link figures for one cluster, in SI units, with collective efficiencies
/// already applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Links {
    /// Effective NVLink bandwidth per GPU per direction, bytes/s.
    pub intra_bw: f64,
    /// Effective NIC bandwidth per GPU per direction, bytes/s.
    pub inter_bw: f64,
    /// Latency of one NVLink message step, seconds.
    pub intra_lat: f64,
    /// Latency of one inter-node message step, seconds.
    pub inter_lat: f64,
}

impl Links {
    /// Links of `cluster` with its collective efficiencies applied.
    pub fn of(cluster: &Cluster) -> Links {
        Links {
            intra_bw: cluster.intra_bytes_per_s() * cluster.collective.intra,
            inter_bw: cluster.nic_bytes_per_s_per_gpu() * cluster.collective.inter,
            intra_lat: cluster.intra_node.latency_us * 1e-6,
            inter_lat: cluster.inter_node.latency_us * 1e-6,
        }
    }
}

/// One phase of a ring collective: `(n−1)/n · bytes / bw + (n−1)·lat`.
fn ring_phase(n: u32, bytes: f64, bw: f64, lat: f64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let n = n as f64;
    (n - 1.0) / n * bytes / bw + (n - 1.0) * lat
}

/// Reduce-scatter of `bytes` per rank over `g`, seconds.
///
/// Hierarchical when the group crosses domains: intra-domain reduce-scatter
/// of the whole buffer over `k = per_domain` ranks, then inter-domain
/// reduce-scatter of the `bytes/k` shard over `domains` ranks on the NICs.
pub fn reduce_scatter(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let k = g.per_domain;
    let intra = ring_phase(k, bytes, links.intra_bw, links.intra_lat);
    let inter = ring_phase(g.domains, bytes / k as f64, links.inter_bw, links.inter_lat);
    intra + inter
}

/// All-gather producing `bytes` per rank over `g`, seconds (mirror of
/// [`reduce_scatter`]).
pub fn all_gather(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    reduce_scatter(bytes, g, links)
}

/// All-reduce of `bytes` per rank over `g`, seconds: reduce-scatter then
/// all-gather, `2·(n−1)/n·S/β` on one tier.
pub fn all_reduce(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    2.0 * reduce_scatter(bytes, g, links)
}

/// All-to-all where each rank holds `bytes` and sends `(n−1)/n` of them,
/// seconds. The share bound for other domains, `(n−k)/n`, crosses the NICs;
/// the rest stays on NVLink; both proceed in parallel (GShard-style expert
/// dispatch, Lepikhin et al. 2020).
pub fn all_to_all(bytes: f64, g: GroupSpan, links: &Links) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = g.size as f64;
    let k = g.per_domain as f64;
    let on_node = (k - 1.0) / n * bytes / links.intra_bw + (k - 1.0).min(1.0) * links.intra_lat;
    let off_node = if g.domains > 1 {
        (n - k) / n * bytes / links.inter_bw + links.inter_lat
    } else {
        0.0
    };
    on_node.max(off_node)
}

/// Point-to-point send of `bytes` to a neighbour, seconds; `cross` says
/// whether the neighbour is in another domain.
pub fn p2p(bytes: f64, cross: bool, links: &Links) -> f64 {
    if bytes <= 0.0 {
        return 0.0;
    }
    if cross {
        bytes / links.inter_bw + links.inter_lat
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
        Links {
            intra_bw: 300e9,       // NVLink3: 300 GB/s per GPU per direction
            inter_bw: 200e9 / 8.0, // one 200 Gb/s HDR NIC per GPU = 25 GB/s
            intra_lat: 0.0,
            inter_lat: 0.0,
        }
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
}
