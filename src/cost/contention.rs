//! What overlap costs: a collective that runs under compute is not free.
//!
//! NCCL's kernels run on the GPU's SMs and read and write HBM, so the GEMMs
//! they overlap slow down. meshplan prices this as a share σ of the
//! overlapped communication time added to the compute it overlaps: `x`
//! seconds of compute next to `y` seconds of communication take
//!
//! ```text
//! step(x, y) = max(x + σ·y, y)
//! ```
//!
//! (the compute runs at `1 − σ` of its speed while the collective is on the
//! wire, to first order; once the link is the bottleneck the step is the
//! communication). σ is per GPU and per tier, `[contention]` of the GPU
//! profile: a collective inside the scale-up domain (NVLink) and one across
//! domains (the NICs: reductions on the SMs plus the NIC's DMA traffic
//! through HBM, for longer) need not cost the same; the fit says which
//! costs more.
//! Calculon models the same effect as a share of the processor that
//! each network tier takes while it overlaps compute ([ref:isaev-2023]);
//! the shipped values are fitted, see the GPU profiles.
//!
//! Every overlapped term prices its contention with [`contention`]: what a
//! collective hides under compute shows again as `σ·hidden` seconds of
//! slower compute, in the step's `contention` part.

use crate::layout::GroupSpan;

/// Compute slowdown shares of one GPU while a collective overlaps it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slowdown {
    /// Share σ while a collective inside the scale-up domain (NVLink) runs.
    pub intra: f64,
    /// Share σ while a collective across domains (NICs) runs.
    pub inter: f64,
}

impl Slowdown {
    /// σ for a collective over group `g`: the inter-domain share when the
    /// group crosses domains, else the NVLink share.
    pub fn of(&self, g: GroupSpan) -> f64 {
        if g.crosses_domains() {
            self.inter
        } else {
            self.intra
        }
    }
}

/// Time of `compute` seconds next to `comm` seconds of communication
/// started with it, seconds: `max(compute + σ·comm, comm)`.
pub fn overlapped_step(compute: f64, comm: f64, sigma: f64) -> f64 {
    (compute + sigma * comm).max(comm)
}

/// Contention of a collective that hides `hidden` seconds under compute,
/// seconds of slower compute: `σ·hidden`.
pub fn contention(hidden: f64, sigma: f64) -> f64 {
    sigma * hidden.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_is_compute_plus_share_until_the_link_binds() {
        // 10 ms of GEMMs next to 4 ms of all-gather at σ = 0.2: 10 + 0.8 ms.
        assert!((overlapped_step(10e-3, 4e-3, 0.2) - 10.8e-3).abs() < 1e-15);
        // 10 ms next to 20 ms: link-bound, 20 ms.
        assert_eq!(overlapped_step(10e-3, 20e-3, 0.2), 20e-3);
        // σ = 0 is the ideal overlap.
        assert_eq!(overlapped_step(10e-3, 4e-3, 0.0), 10e-3);
        assert!((contention(4e-3, 0.2) - 0.8e-3).abs() < 1e-15);
        assert_eq!(contention(-1.0, 0.2), 0.0);
    }

    #[test]
    fn tier_follows_the_group() {
        let s = Slowdown {
            intra: 0.1,
            inter: 0.05,
        };
        assert_eq!(s.of(GroupSpan::of(8, 1, 8)), 0.1);
        assert_eq!(s.of(GroupSpan::of(16, 1, 8)), 0.05);
    }
}
