//! `meshplan calibrate-network`: fit a cluster's link parameters to
//! nccl-tests runs ([`crate::nccl_tests`]) and write a profile overlay.
//!
//! # Procedure
//! The cost model prices a collective of `S` bytes over a group with
//! [`crate::cost::comm`]: bandwidth terms `(n−1)/n·S/β` on each level the
//! group spans, hierarchically, plus NCCL's latency count (a fixed base
//! latency, and `α` per ring or tree step on the level it crosses). For a
//! fixed group and algorithm that time is the base plus a linear function
//! of the four unknowns `1/β_intra`, `α_intra`, `1/β_inter`, `α_inter`, so
//! each run gives, per sample, coefficients found by pricing the run's
//! group with unit links (one unknown 1, the others 0, base 0; the
//! all-to-all's `max(on-node, off-node)` is read as its off-node part when
//! the group spans hosts, which dominates on every shipped cluster). An
//! all-reduce's ring-or-tree choice ([`comm::all_reduce_algorithm`]) is
//! made once per run on the profile's links, so that it stays linear.
//!
//! 1. Runs on one NVLink domain fit `(1/β_intra, α_intra)`.
//! 2. Runs that span domains fit `(1/β_inter, α_inter)` the same way, with
//!    the intra-domain phases priced at step 1's values (or the profile's
//!    when no single-domain run is given).
//!
//! Each level is fitted on the two ends of the size sweep, as nccl-tests'
//! `doc/PERFORMANCE.md` reads them ("time is useful with small sizes, to
//! measure the constant overhead … on large sizes … look at the
//! bandwidth"): `1/β` by least squares of relative time error over each
//! run's large messages (at least 1/16 of its largest size), `α` over its
//! small ones (at most 1024× its smallest, i.e. 8 KiB from 8 B), each with
//! the other held, three rounds from `α = 0`. The middle of the sweep,
//! where NCCL switches between its LL, LL128 and Simple protocols, is what
//! an α–β model cannot follow; the fit says how far off it is there. A
//! negative latency is set to 0. The
//! overlay holds `collective.intra = β_intra / intra_node.bandwidth_gbs`,
//! `collective.inter = β_inter / NIC bandwidth per GPU`, and the two
//! latencies; a fitted bandwidth above the profile's link rate (NVLink
//! SHARP, in-network reduction) is refused with that reason, since the cost
//! model has no such path.

use serde::Serialize;

use crate::calibrate::{CollectiveOverlay, LinksOverlay, Overlay};
use crate::cost::comm::{self, Links};
use crate::layout::GroupSpan;
use crate::nccl_tests::{Collective, Run};
use crate::spec::Cluster;

/// One fitted level of the network.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelFit {
    /// `intra` (NVLink domain) or `inter` (NICs).
    pub level: &'static str,
    /// Runs used.
    pub runs: usize,
    /// Samples used.
    pub samples: usize,
    /// Fitted bandwidth per GPU per direction, bytes/s.
    pub bandwidth: f64,
    /// Fitted latency per ring step, seconds.
    pub latency_s: f64,
    /// The profile's collective efficiency before.
    pub efficiency_before: f64,
    /// Fitted efficiency (bandwidth over the profile's link rate).
    pub efficiency: f64,
    /// The profile's latency before, seconds.
    pub latency_before_s: f64,
}

/// How well the fitted links reproduce one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCheck {
    /// The file.
    pub file: String,
    /// Collective.
    pub collective: Collective,
    /// Ranks × hosts.
    pub ranks: u32,
    /// Hosts.
    pub hosts: u32,
    /// Largest size, bytes.
    pub largest_bytes: f64,
    /// Measured bus bandwidth at the largest size, bytes/s.
    pub measured_busbw: f64,
    /// Bus bandwidth the fitted links give at that size, bytes/s.
    pub fitted_busbw: f64,
    /// The same with the profile's links before the fit, bytes/s.
    pub profile_busbw: f64,
    /// Largest relative time error over all sizes after the fit.
    pub max_time_error: f64,
}

/// Result of the fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkFit {
    /// The overlay to write.
    pub overlay: Overlay,
    /// Fitted levels (one or two).
    pub levels: Vec<LevelFit>,
    /// Per run: measured against fitted.
    pub checks: Vec<RunCheck>,
    /// What the fit could not determine, in sentences.
    pub notes: Vec<String>,
}

/// Where a run's group sits on `cluster`: ranks contiguous on their hosts,
/// hosts packed into NVLink domains of `scale_up_domain` GPUs.
pub fn group_of(run: &Run, cluster: &Cluster) -> GroupSpan {
    let per_host = run.ranks_per_host().max(1);
    let hosts_per_domain = (cluster.scale_up_domain / cluster.gpus_per_node.max(1)).max(1);
    let hosts_together = run.hosts.min(hosts_per_domain);
    GroupSpan::spread(
        run.ranks,
        per_host * hosts_together,
        run.hosts.div_ceil(hosts_per_domain),
    )
}

/// Time of `run`'s collective on `links`, seconds; an all-reduce runs
/// the algorithm [`comm::all_reduce_algorithm`] picks on `choose`, an
/// all-gather or reduce-scatter the one [`comm::gather_algorithm`] picks
/// there (ring or PAT) for that size.
pub fn priced(c: Collective, bytes: f64, g: GroupSpan, links: &Links, choose: &Links) -> f64 {
    match c {
        Collective::AllReduce => {
            comm::all_reduce_with(comm::all_reduce_algorithm(g, choose), bytes, g, links)
        }
        Collective::AllGather => {
            comm::all_gather_with(comm::gather_algorithm(bytes, g, choose), bytes, g, links)
        }
        Collective::ReduceScatter => {
            comm::reduce_scatter_with(comm::gather_algorithm(bytes, g, choose), bytes, g, links)
        }
        Collective::AllToAll => comm::all_to_all(bytes, g, links),
        Collective::SendRecv => comm::p2p(bytes, g, links),
    }
}

/// Links with one unknown at 1 and the rest off (bandwidth ∞, latency 0,
/// base latency 0).
fn unit(which: usize) -> Links {
    let mut l = Links::bandwidths(f64::INFINITY, f64::INFINITY);
    match which {
        0 => l.intra_bw = 1.0,
        1 => l.intra_lat = 1.0,
        2 => l.inter_bw = 1.0,
        _ => l.inter_lat = 1.0,
    }
    l
}

/// One sample as the fit sees it: time `t = a·x + b·y + known`, divided
/// by `t`, so `r = 1 − known/t`; `big`/`small` mark the two ends of its
/// run's sweep.
#[derive(Debug, Clone, Copy)]
struct Row {
    a: f64,
    b: f64,
    r: f64,
    big: bool,
    small: bool,
}

/// Least squares of `Σ (a·x + b·y − r)²` for one unknown with the other
/// held: `Σ a·(r − b·y) / Σ a²`.
fn solve_one(rows: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (a, r) in rows {
        num += a * r;
        den += a * a;
    }
    if den > 0.0 { num / den } else { f64::NAN }
}

/// `(x, y)`: `x` (seconds per byte) from the large messages, `y` (seconds
/// per ring step) from the small ones, alternating three times from y = 0.
fn fit_ends(rows: &[Row]) -> Option<(f64, f64)> {
    let (mut x, mut y) = (f64::NAN, 0.0);
    for _ in 0..3 {
        x = solve_one(rows.iter().filter(|w| w.big).map(|w| (w.a, w.r - w.b * y)));
        y = solve_one(
            rows.iter()
                .filter(|w| w.small)
                .map(|w| (w.b, w.r - w.a * x)),
        )
        .max(0.0);
        if !y.is_finite() {
            y = 0.0;
        }
    }
    (x.is_finite() && x > 0.0).then_some((x, y))
}

/// Marks each sample of `run` as large (≥ 1/16 of the largest size) or
/// small (≤ 1024× the smallest).
fn ends(run: &Run) -> impl Fn(f64) -> (bool, bool) {
    let max = run.samples.iter().map(|s| s.bytes).fold(0.0, f64::max);
    let min = run
        .samples
        .iter()
        .map(|s| s.bytes)
        .fold(f64::INFINITY, f64::min);
    move |bytes| (bytes >= max / 16.0, bytes <= min * 1024.0)
}

/// Fits `cluster`'s links to `runs`.
///
/// # Errors
/// A sentence naming the file when a run does not fit the cluster (more
/// ranks than it has, more per host than a node has), when no run measures
/// a level's bandwidth, or when a fitted bandwidth exceeds the link rate.
pub fn fit(runs: &[Run], cluster: &Cluster) -> Result<NetworkFit, String> {
    if runs.is_empty() {
        return Err("no nccl-tests runs given".into());
    }
    for (i, r) in runs.iter().enumerate() {
        if runs[..i].iter().any(|q| q.file == r.file) {
            return Err(format!("{}: given twice", r.file.display()));
        }
        if r.hosts > cluster.nodes {
            return Err(format!(
                "{}: {} hosts, but cluster {} has {} nodes",
                r.file.display(),
                r.hosts,
                cluster.name,
                cluster.nodes
            ));
        }
        if r.ranks_per_host() > cluster.gpus_per_node {
            return Err(format!(
                "{}: {} ranks per host, but a {} node has {} GPUs",
                r.file.display(),
                r.ranks_per_host(),
                cluster.name,
                cluster.gpus_per_node
            ));
        }
        if r.ranks as u64 > cluster.total_gpus() || r.ranks < 2 {
            return Err(format!(
                "{}: {} ranks; a collective needs 2 to {} (cluster {})",
                r.file.display(),
                r.ranks,
                cluster.total_gpus(),
                cluster.name
            ));
        }
    }
    let before = Links::of(cluster);
    let coeffs = |r: &Run, s: f64, k: usize| {
        priced(r.collective, s, group_of(r, cluster), &unit(k), &before)
    };
    let spans = |r: &Run| group_of(r, cluster).domains > 1;
    // (bandwidth, latency, samples) of the level whose inverse bandwidth
    // and latency are unknowns `k` and `k + 1`, fitted to every sample of
    // `runs`, each time less the `known(run, bytes)` seconds already priced;
    // the profile's `profile` when no run measures the level, an error
    // saying `none` when the fit finds no positive bandwidth.
    let fit_level = |runs: &[&Run],
                     k: usize,
                     known: &dyn Fn(&Run, f64) -> f64,
                     profile: (f64, f64),
                     none: &str| {
        let mut rows = Vec::new();
        for r in runs {
            let end = ends(r);
            for s in &r.samples {
                let (big, small) = end(s.bytes);
                rows.push(Row {
                    a: coeffs(r, s.bytes, k) / s.time_s,
                    b: coeffs(r, s.bytes, k + 1) / s.time_s,
                    r: 1.0 - known(r, s.bytes) / s.time_s,
                    big,
                    small,
                });
            }
        }
        if runs.is_empty() {
            return Ok((profile.0, profile.1, 0));
        }
        let (x, y) = fit_ends(&rows).ok_or_else(|| none.to_string())?;
        Ok::<_, String>((1.0 / x, y, rows.len()))
    };

    // Step 1: single-domain runs → intra, less the base latency.
    let intra_runs: Vec<&Run> = runs.iter().filter(|r| !spans(r)).collect();
    let base_only = Links {
        base_lat: before.base_lat,
        ..Links::bandwidths(f64::INFINITY, f64::INFINITY)
    };
    // A run's time on `links`, the algorithm chosen on the profile's links.
    let priced_on = |links: &Links, r: &Run, bytes: f64| {
        priced(r.collective, bytes, group_of(r, cluster), links, &before)
    };
    let priced_base = |r: &Run, bytes: f64| priced_on(&base_only, r, bytes);
    let (intra_bw, intra_lat, intra_samples) = fit_level(
        &intra_runs,
        0,
        &priced_base,
        (before.intra_bw, before.intra_lat),
        "the single-node runs give no positive bandwidth (times do not grow with size)",
    )?;
    let mut levels = Vec::new();
    let nvlink = cluster.intra_bytes_per_s();
    if !intra_runs.is_empty() {
        levels.push(LevelFit {
            level: "intra",
            runs: intra_runs.len(),
            samples: intra_samples,
            bandwidth: intra_bw,
            latency_s: intra_lat,
            efficiency_before: cluster.collective.intra,
            efficiency: intra_bw / nvlink,
            latency_before_s: before.intra_lat,
        });
    }

    // Step 2: runs across domains → inter, intra phases at step 1's values.
    let inter_runs: Vec<&Run> = runs.iter().filter(|r| spans(r)).collect();
    let intra_only = Links {
        intra_bw,
        intra_lat,
        ..base_only
    };
    let priced_intra = |r: &Run, bytes: f64| {
        if r.collective == Collective::AllToAll {
            0.0
        } else {
            priced_on(&intra_only, r, bytes)
        }
    };
    let (inter_bw, inter_lat, inter_samples) = fit_level(
        &inter_runs,
        2,
        &priced_intra,
        (before.inter_bw, before.inter_lat),
        "the multi-node runs give no positive NIC bandwidth: their times are no longer than the NVLink phases priced alone",
    )?;
    let nic = cluster.nic_bytes_per_s_per_gpu();
    let mut notes = Vec::new();
    if !inter_runs.is_empty() && inter_lat == 0.0 {
        notes.push(format!(
            "the NIC latency fitted to 0: the small messages of the multi-node runs take no longer than their NVLink phases priced at {} ({:.2} µs per step){}; the latency is not determined",
            if intra_runs.is_empty() { "the profile's latency" } else { "the single-node runs' latency" },
            intra_lat * 1e6,
            if intra_runs.is_empty() { ": give a single-node run too" } else { "" }
        ));
    }
    if !inter_runs.is_empty() {
        levels.push(LevelFit {
            level: "inter",
            runs: inter_runs.len(),
            samples: inter_samples,
            bandwidth: inter_bw,
            latency_s: inter_lat,
            efficiency_before: cluster.collective.inter,
            efficiency: inter_bw / nic,
            latency_before_s: before.inter_lat,
        });
    }
    for l in &levels {
        if l.efficiency > 1.0 {
            let (rate, what) = if l.level == "intra" {
                (nvlink, "intra_node.bandwidth_gbs")
            } else {
                (nic, "the NIC rate per GPU")
            };
            return Err(format!(
                "the {} runs give {:.1} GB/s per GPU, above {what} ({:.1} GB/s) of cluster {}: a wrong profile, the wrong cluster, or (for reductions) in-network reduction (NVLink SHARP, SHARP), which the cost model does not price; check the profile, or run with NCCL_NVLS_ENABLE=0 / NCCL_COLLNET_ENABLE=0",
                l.level,
                l.bandwidth / 1e9,
                rate / 1e9,
                cluster.name
            ));
        }
    }

    let fitted = Links {
        intra_bw,
        inter_bw,
        intra_lat,
        inter_lat,
        base_lat: before.base_lat,
        oversub: before.oversub,
        tier_lat: before.tier_lat,
    };
    let checks: Vec<RunCheck> = runs
        .iter()
        .map(|r| {
            let g = group_of(r, cluster);
            let big = r
                .samples
                .iter()
                .max_by(|a, b| a.bytes.total_cmp(&b.bytes))
                .copied()
                .unwrap_or(r.samples[0]);
            let bus = |links: &Links| {
                big.bytes / priced(r.collective, big.bytes, g, links, &before)
                    * r.collective.bus_factor(r.ranks)
            };
            RunCheck {
                file: r.file.display().to_string(),
                collective: r.collective,
                ranks: r.ranks,
                hosts: r.hosts,
                largest_bytes: big.bytes,
                measured_busbw: big.busbw,
                fitted_busbw: bus(&fitted),
                profile_busbw: bus(&before),
                max_time_error: r
                    .samples
                    .iter()
                    .map(|s| {
                        (priced(r.collective, s.bytes, g, &fitted, &before) / s.time_s - 1.0).abs()
                    })
                    .fold(0.0, f64::max),
            }
        })
        .collect();

    let overlay = Overlay {
        gpu: cluster.gpu.clone(),
        cluster: Some(cluster.name.clone()),
        source: Some(format!(
            "meshplan calibrate-network on {}",
            runs.iter()
                .map(|r| r.file.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        collective: CollectiveOverlay {
            intra: (!intra_runs.is_empty()).then_some(round4(intra_bw / nvlink)),
            inter: (!inter_runs.is_empty()).then_some(round4(inter_bw / nic)),
        },
        links: LinksOverlay {
            intra_latency_us: (!intra_runs.is_empty()).then_some(round4(intra_lat * 1e6)),
            inter_latency_us: (!inter_runs.is_empty()).then_some(round4(inter_lat * 1e6)),
        },
        ..Overlay::default()
    };
    for c in &checks {
        let e = c.fitted_busbw / c.measured_busbw - 1.0;
        if e.abs() > 0.1 {
            notes.push(format!(
                "{}: the fitted links give {:.1} GB/s at {:.0} MB against {:.1} GB/s measured ({:+.0}%): the α–β model does not follow this run (are its times and busbw columns consistent?)",
                c.file,
                c.fitted_busbw / 1e9,
                c.largest_bytes / 1e6,
                c.measured_busbw / 1e9,
                100.0 * e
            ));
        }
    }
    Ok(NetworkFit {
        overlay,
        levels,
        checks,
        notes,
    })
}

/// Four significant decimals, so the overlay reads cleanly.
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_beta_recovered_from_the_two_ends() {
        // t = a·x + b·y exactly, x = 2, y = 3: the large rows (b small)
        // give x, the small rows (a small) give y, in three rounds.
        let rows: Vec<Row> = [
            (1.0, 0.01, true, false),
            (2.0, 0.02, true, false),
            (0.001, 1.0, false, true),
        ]
        .iter()
        .map(|&(a, b, big, small)| {
            let t: f64 = a * 2.0 + b * 3.0;
            Row {
                a: a / t,
                b: b / t,
                r: 1.0,
                big,
                small,
            }
        })
        .collect();
        let (x, y) = fit_ends(&rows).unwrap();
        assert!((x - 2.0).abs() < 1e-6 && (y - 3.0).abs() < 1e-6, "{x} {y}");
    }

    #[test]
    fn negative_latency_clamped() {
        // Small messages faster than bandwidth alone allows: y would be
        // negative, so y = 0 and x is the large rows' Σar/Σa² = 1.
        let rows = [
            Row {
                a: 1.0,
                b: 0.0,
                r: 1.0,
                big: true,
                small: false,
            },
            Row {
                a: 1.0,
                b: 1.0,
                r: 0.5,
                big: false,
                small: true,
            },
        ];
        let (x, y) = fit_ends(&rows).unwrap();
        assert_eq!(y, 0.0);
        assert!((x - 1.0).abs() < 1e-12);
    }
}
