//! Exact dynamic program over contiguous splits for v = 1: the test oracle
//! of [`super::ilp`].
//!
//! With one chunk per rank, stage s holds items `[a, b)` and its time and
//! peak depend on that interval only (see [`super`]). Let `g[s][b]` be the
//! least slowest-stage time of the first s stages holding items `[0, b)`:
//!
//! `g[s][b] = min_{a < b} max(g[s−1][a], T_{s−1}(a, b))` over intervals with
//! at least one transformer layer whose peak fits, `g[0][0] = 0`.
//!
//! The optimum is `g[S][n]`, in O(S·n²) time (the inner loop walks `a`
//! down from `b − 1`, adding one item at a time, so the sums and the
//! running maximum of working sets cost O(1) per step). A second pass with
//! the same recursion, over intervals whose time is at most the optimum,
//! minimises the largest stage memory (as a share of usable memory), which
//! is the ILP's tie-break. When no split fits, a third pass without the
//! memory limit finds the split that minimises the largest stage memory for
//! the error message.

use super::{Split, SplitError, SplitProblem};

/// Which value the recursion minimises.
#[derive(Clone, Copy, PartialEq)]
enum Goal {
    /// Slowest stage time, with memory limit.
    Time,
    /// Largest memory share, with memory limit and time ≤ bound.
    Memory(f64),
    /// Largest memory share, no limits.
    MemoryOnly,
}

/// Run the recursion; returns the optimum and the boundaries, or `None`
/// when no split satisfies the limits.
fn run(p: &SplitProblem, goal: Goal) -> Option<(f64, Vec<usize>)> {
    let n = p.items.len();
    let stages = p.chunks();
    let inf = f64::INFINITY;
    let mut g = vec![vec![inf; n + 1]; stages + 1];
    let mut from = vec![vec![usize::MAX; n + 1]; stages + 1];
    g[0][0] = 0.0;
    for s in 1..=stages {
        let r = s - 1;
        for b in 1..=n {
            let (mut time, mut states, mut act, mut ws, mut layers) =
                (p.rank_time[r], 0.0, 0.0, 0.0f64, 0u32);
            let mut expert = false;
            let mut best = inf;
            let mut arg = usize::MAX;
            for a in (0..b).rev() {
                let it = &p.items[a];
                time += it.time;
                states += it.states;
                act += it.activation;
                ws = ws.max(it.working_set);
                layers += u32::from(it.layer);
                expert |= it.expert;
                if layers == 0 || g[s - 1][a] == inf {
                    continue;
                }
                let dispatch = if expert { p.expert_bytes } else { 0.0 };
                let bytes = p.rank_bytes[r] + states + p.in_flight[r] * act + ws + dispatch;
                let value = match goal {
                    Goal::Time => {
                        if bytes > p.usable {
                            continue;
                        }
                        time
                    }
                    Goal::Memory(bound) => {
                        if bytes > p.usable || time > bound {
                            continue;
                        }
                        bytes / p.usable
                    }
                    Goal::MemoryOnly => bytes / p.usable,
                };
                let v = g[s - 1][a].max(value);
                if v < best {
                    best = v;
                    arg = a;
                }
            }
            g[s][b] = best;
            from[s][b] = arg;
        }
    }
    if g[stages][n] == inf {
        return None;
    }
    let mut bounds = vec![n];
    let mut b = n;
    for s in (1..=stages).rev() {
        b = from[s][b];
        bounds.push(b);
    }
    bounds.reverse();
    Some((g[stages][n], bounds))
}

/// Least slowest-stage time split for v = 1, ties broken by the least
/// largest memory share.
///
/// # Errors
/// [`SplitError::Interleaved`] for v > 1, [`SplitError::TooManyStages`],
/// and [`SplitError::Infeasible`] (with the min-max-memory split) when no
/// split fits.
pub fn solve(p: &SplitProblem) -> Result<Split, SplitError> {
    if p.vpp != 1 {
        return Err(SplitError::Interleaved { vpp: p.vpp });
    }
    p.check()?;
    let Some((t, bounds)) = run(p, Goal::Time) else {
        let (_, bounds) = run(p, Goal::MemoryOnly).ok_or(SplitError::TooManyStages {
            stages: p.pp,
            pp: p.pp,
            vpp: 1,
            layers: p.layers(),
        })?;
        return Err(p.infeasible(&p.split_of(bounds, true)));
    };
    let bounds = run(p, Goal::Memory(t)).map(|x| x.1).unwrap_or(bounds);
    Ok(p.split_of(bounds, true))
}

/// Minimum over splits of the largest stage memory, bytes, ignoring time
/// (v = 1), with the split; `None` for v > 1 or more stages than layers.
pub fn min_max_memory(p: &SplitProblem) -> Option<Split> {
    if p.vpp != 1 || p.check().is_err() {
        return None;
    }
    run(p, Goal::MemoryOnly).map(|(_, b)| p.split_of(b, true))
}
