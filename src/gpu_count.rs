//! Fewer GPUs for an awkward GPU count: every layout uses all N GPUs
//! (N = D·T·p·C), so a count with a large prime factor (416 = 2⁵·13) leaves
//! only meshes that put that factor on one axis, often a poor one (p = 13,
//! or D = 13 that the batch must divide). A nearby count with a better
//! factorisation can run faster per GPU, or even faster in total.
//!
//! When it probes (cheap: a handful of extra searches, only when a probe
//! can pay off):
//! - N has a prime factor of 11 or more, or the winner's MFU is below
//!   [`POOR_MFU`], or no layout of N is valid;
//! - candidates are the counts N' in [⌈0.9·N⌉, N) that are whole nodes
//!   (multiples of the cluster's GPUs per node), 7-smooth (no prime factor
//!   above 7) and factor better than N: a smaller largest prime factor or
//!   more divisors (more mesh shapes). The [`MAX_PROBES`] largest are
//!   searched with the same space (bounds, fixed values), top 1 each.
//!
//! What it reports: the probed count whose winner has the most tokens/s per
//! GPU, when that is at least [`PER_GPU_GAIN`] times the winner's on N, or
//! when it has more tokens/s in total than N's winner (or N has none).
//! Below that margin a smaller count's edge is the ordinary strong-scaling
//! loss of N, not the factorisation.
//!
//! A well-factored N whose winner is still below [`POOR_MFU`] is usually
//! too many GPUs for the global batch: [`scale_down`] prices the winner on
//! half, a quarter and an eighth of its data-parallel replicas.

use serde::Serialize;

use crate::cost::Problem;
use crate::search::{self, SearchResult, Space};

/// Winner MFU under which a probe is worth a few searches.
pub const POOR_MFU: f64 = 0.20;

/// Nearby counts searched at most.
pub const MAX_PROBES: usize = 4;

/// Tokens/s per GPU a smaller count must beat N's by to be reported.
pub const PER_GPU_GAIN: f64 = 1.05;

/// Counts as low as this share of N are probed.
pub const LOWEST_SHARE: f64 = 0.9;

/// The best of a search on one GPU count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CountResult {
    /// GPUs.
    pub gpus: u64,
    /// Its prime factorisation, e.g. `2^5·13`.
    pub factors: String,
    /// The winning layout, described; `None` when none is valid.
    pub layout: Option<String>,
    /// Winner's tokens/s (0 when none is valid).
    pub tokens_per_s: f64,
    /// Tokens/s per GPU.
    pub tokens_per_s_per_gpu: f64,
    /// Winner's MFU.
    pub mfu: f64,
}

/// A better nearby GPU count.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FewerGpus {
    /// The searched count N.
    pub requested: CountResult,
    /// The best probed count.
    pub better: CountResult,
    /// `better` tokens/s per GPU over `requested`'s.
    pub per_gpu_ratio: f64,
    /// `better` tokens/s over `requested`'s (infinite when N has no valid
    /// layout).
    pub total_ratio: f64,
    /// Every count probed, largest first.
    pub probed: Vec<u64>,
}

/// Share of N's tokens/s under which a halved count is not listed as
/// [`ScaleDown`] (it would only say that fewer GPUs are slower).
pub const SCALE_DOWN_KEEP: f64 = 0.5;

/// Far fewer GPUs for a job too small for N: the winner's MFU is below
/// [`POOR_MFU`] on a count with no better-factored neighbour (Qwen3-30B-A3B
/// at its global batch of 1,024 sequences on 16,384 H100s: 3.6% MFU, 256
/// tokens per GPU per step). The winner's own layout on D/2, D/4 and D/8
/// data-parallel replicas (N/2, N/4, N/8 GPUs; T, p, C, E, the split and
/// the rest unchanged, each replica running 2, 4, 8 times the
/// micro-batches) is priced, and the counts where it is valid, fits and
/// keeps at least [`SCALE_DOWN_KEEP`] of N's tokens/s are listed: a lower
/// bound on what those counts reach, for the price of one evaluation each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleDown {
    /// The searched count N and its winner.
    pub requested: CountResult,
    /// The winner's layout on fewer replicas, largest count first.
    pub counts: Vec<CountResult>,
    /// Tokens per GPU per step on N (global batch × sequence over N).
    pub tokens_per_gpu_per_step: f64,
}

/// Halvings of D tried by [`scale_down`].
pub const SCALE_DOWN_STEPS: u32 = 3;

/// [`ScaleDown`] for the search `result` of `pr`, when its winner is below
/// [`POOR_MFU`] and [`fewer_gpus`] found no better neighbour (`nearby`).
pub fn scale_down(
    pr: &Problem,
    policy: &crate::rules::Policy,
    result: &SearchResult,
    nearby: Option<&FewerGpus>,
) -> Option<ScaleDown> {
    let win = result.top.first()?;
    if nearby.is_some() || win.eval.mfu >= POOR_MFU {
        return None;
    }
    let requested = count_result(pr.world, result);
    let counts: Vec<CountResult> = (1..=SCALE_DOWN_STEPS)
        .filter(|&k| win.layout.dp % (1 << k) == 0)
        .filter_map(|k| {
            let l = crate::layout::Layout {
                dp: win.layout.dp >> k,
                ..win.layout.clone()
            };
            let gpus = pr.world >> k;
            let p = Problem::new(pr.model, pr.gpu, pr.cluster, pr.job, gpus);
            let e = crate::cost::evaluate(&p, &l);
            (crate::rules::violations(&p, policy, &l).is_empty() && e.fits()).then(|| CountResult {
                gpus,
                factors: factor_string(gpus),
                layout: Some(l.short()),
                tokens_per_s: e.tokens_per_s,
                tokens_per_s_per_gpu: e.tokens_per_s / gpus as f64,
                mfu: e.mfu,
            })
        })
        .filter(|c| c.tokens_per_s >= SCALE_DOWN_KEEP * requested.tokens_per_s)
        .collect();
    if counts.is_empty() {
        return None;
    }
    Some(ScaleDown {
        tokens_per_gpu_per_step: pr.job.tokens_per_step() / pr.world as f64,
        requested,
        counts,
    })
}

/// Prime factors of `n` with multiplicity, ascending.
pub fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut f = Vec::new();
    let mut p = 2;
    while p * p <= n {
        while n % p == 0 {
            f.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        f.push(n);
    }
    f
}

/// `2^5·13`.
pub fn factor_string(n: u64) -> String {
    let f = prime_factors(n);
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < f.len() {
        let j = f[i..].iter().take_while(|&&x| x == f[i]).count();
        parts.push(if j > 1 {
            format!("{}^{}", f[i], j)
        } else {
            f[i].to_string()
        });
        i += j;
    }
    if parts.is_empty() {
        "1".into()
    } else {
        parts.join("·")
    }
}

fn largest_prime(n: u64) -> u64 {
    prime_factors(n).last().copied().unwrap_or(1)
}

fn divisor_count(n: u64) -> u64 {
    let f = prime_factors(n);
    let mut count = 1;
    let mut i = 0;
    while i < f.len() {
        let j = f[i..].iter().take_while(|&&x| x == f[i]).count();
        count *= j as u64 + 1;
        i += j;
    }
    count
}

/// Whether `n` deserves a probe given its search's winner MFU (`None`: no
/// valid layout).
pub fn worth_probing(n: u64, winner_mfu: Option<f64>) -> bool {
    largest_prime(n) >= 11 || winner_mfu.is_none_or(|m| m < POOR_MFU)
}

/// The counts to probe for `n` on nodes of `per_node` GPUs, largest first.
pub fn candidates(n: u64, per_node: u64) -> Vec<u64> {
    let per_node = per_node.max(1);
    let lowest = (n as f64 * LOWEST_SHARE).ceil() as u64;
    let (lp, dc) = (largest_prime(n), divisor_count(n));
    let mut out = Vec::new();
    let mut c = (n - 1) / per_node * per_node;
    while c >= lowest.max(1) && out.len() < MAX_PROBES {
        let p = largest_prime(c);
        if p <= 7 && (p < lp || divisor_count(c) > dc) {
            out.push(c);
        }
        if c < per_node {
            break;
        }
        c -= per_node;
    }
    out
}

fn count_result(gpus: u64, r: &SearchResult) -> CountResult {
    let w = r.top.first();
    let tps = w.map(|c| c.eval.tokens_per_s).unwrap_or(0.0);
    CountResult {
        gpus,
        factors: factor_string(gpus),
        layout: w.map(|c| c.layout.short()),
        tokens_per_s: tps,
        tokens_per_s_per_gpu: tps / gpus as f64,
        mfu: w.map(|c| c.eval.mfu).unwrap_or(0.0),
    }
}

/// Probe nearby counts for the search `result` of `pr` over `space`; the
/// best one when it beats N as described in the module docs.
pub fn fewer_gpus(pr: &Problem, space: &Space, result: &SearchResult) -> Option<FewerGpus> {
    let n = pr.world;
    let win = result.top.first();
    if !worth_probing(n, win.map(|c| c.eval.mfu)) {
        return None;
    }
    let probed = candidates(n, pr.cluster.gpus_per_node as u64);
    if probed.is_empty() {
        return None;
    }
    let probe_space = Space {
        top_k: 1,
        keep_all: false,
        best_only: true,
        ..space.clone()
    };
    let requested = count_result(n, result);
    let best = probed
        .iter()
        .map(|&c| {
            let p = Problem::new(pr.model, pr.gpu, pr.cluster, pr.job, c);
            count_result(c, &search::search(&p, &probe_space))
        })
        .filter(|c| c.layout.is_some())
        .max_by(|a, b| a.tokens_per_s_per_gpu.total_cmp(&b.tokens_per_s_per_gpu))?;
    let per_gpu_ratio = best.tokens_per_s_per_gpu / requested.tokens_per_s_per_gpu;
    let total_ratio = best.tokens_per_s / requested.tokens_per_s;
    if per_gpu_ratio >= PER_GPU_GAIN || total_ratio > 1.0 {
        Some(FewerGpus {
            requested,
            better: best,
            per_gpu_ratio,
            total_ratio,
            probed,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factorisations() {
        assert_eq!(factor_string(416), "2^5·13");
        assert_eq!(factor_string(384), "2^7·3");
        assert_eq!(divisor_count(416), 12);
        assert_eq!(divisor_count(384), 16);
        assert_eq!(largest_prime(416), 13);
    }

    #[test]
    fn candidates_near_416() {
        // Whole 8-GPU nodes in [⌈374.4⌉, 416): 408 = 2^3·3·17 (17 > 7),
        // 400 = 2^4·5^2, 392 = 2^3·7^2, 384 = 2^7·3, 376 = 2^3·47.
        assert_eq!(candidates(416, 8), vec![400, 392, 384]);
        // 64 = 2^6 is already smooth with the most divisors nearby: 8-GPU
        // multiples 64·0.9 = 57.6 → 64 > c ≥ 58: 56 < 58, none.
        assert!(candidates(64, 8).is_empty());
        // Good count, poor MFU only: 3072 = 2^10·3 (22 divisors); 7-smooth
        // counts with more divisors, largest first, four at most.
        let c = candidates(3072, 8);
        assert_eq!(c.len(), MAX_PROBES);
        assert_eq!(c[0], 3024); // 2^4·3^3·7: 40 divisors
        assert!(
            c.iter()
                .all(|&x| divisor_count(x) > 22 && x % 8 == 0 && x >= 2765)
        );
    }

    #[test]
    fn when_to_probe() {
        assert!(worth_probing(416, Some(0.5))); // prime 13
        assert!(worth_probing(64, Some(0.1))); // poor MFU
        assert!(worth_probing(64, None)); // nothing valid
        assert!(!worth_probing(64, Some(0.637)));
    }
}
