//! Exact stage split when every transformer layer is alike: a layer-count
//! solver that replaces the ILP ([`super::ilp`]) and the dynamic program
//! ([`super::dp`]) on the problems the search meets most (every dense
//! catalog model, and MoE models whose layers are all MoE layers).
//!
//! # When it applies ([`qualifies`])
//!
//! The L transformer-layer items of the [`SplitProblem`] are identical
//! (time t, states s, activation a, working set w, expert flag), and the
//! non-layer items (embedding, output and loss, MTP) sit only before the
//! first layer (the head) and after the last (the tail); every attribute
//! is finite and non-negative. Every chunk holds a layer, so the head is
//! always in chunk 0, which runs on rank 0, and the tail in chunk S − 1,
//! on rank `(S − 1) mod p = p − 1`.
//!
//! # Why a rank depends only on how many layers it holds
//!
//! Let rank r hold `N_r` layers over its v chunks (`N_r ≥ v`, one per
//! chunk, `Σ_r N_r = L`). Its time per micro-batch ([`SplitProblem::price`])
//! is `τ_r + [r = 0]·Σ_head t_i + N_r·t + [r = p−1]·Σ_tail t_i`, and its
//! peak `κ_r + (states) + φ_r·(activations) + max w + ε·[expert held]`,
//! where the sums over its items are `N_r` copies of the layer's plus the
//! pinned head or tail, the largest working set is the layer's or a pinned
//! item's (every rank holds a layer), and an MoE item is held whatever the
//! split. Both are non-decreasing functions of `N_r` alone, `T_r(N)` and
//! `M_r(N)`; they are computed here with the same floating-point
//! additions in the same order as `price` (head, then the layers, then
//! the tail), so the values are exactly the ones `price` gives. Only the
//! second tie-break sees the spread over chunks: chunk c holding `k_c ≥ 1`
//! layers takes `X_c(k_c)` (k layers, plus the head for chunk 0 and the
//! tail for chunk S − 1), also non-decreasing.
//!
//! # The three programs of [`super::ilp`], by greedy filling
//!
//! Each of the ILP's lexicographic programs minimises the largest of
//! non-decreasing functions of integer counts with a lower bound, an
//! upper bound (downward-closed constraints) and a fixed total. For that
//! shape, filling one unit at a time, starting at every lower bound and
//! giving each next unit to the member whose value *after* taking it is
//! least ([`fill`]), is exact. Proof: let `x*` be the optimum and `A_i`
//! the most units member i may hold with value ≤ `x*` within its caps; an
//! optimal solution fits under the `A_i`, so `Σ A_i ≥` the total. While
//! units remain, some member is below its `A_i` (else `Σ A_i` units are
//! already placed), its next value is ≤ `x*`, so the least next value is
//! ≤ `x*` and the member taking it stays within its `A_i`. At the end
//! every value is ≤ `x*`. The programs, in order:
//!
//! 1. **Slowest rank** `T* = min max_r T_r(N_r)` with every `M_r(N_r) ≤ U`:
//!    caps `N_r ≤ U_r`, the most layers whose peak fits (none below v: no
//!    split fits; nor when `Σ U_r < L`). Then `A_r` = the most layers with
//!    `T_r ≤ T*` and a fitting peak.
//! 2. **Slowest chunk** (v > 1) `C* = min max_c X_c(k_c)` with `k_c ≥ 1`
//!    and each rank's `Σ_{c on r} k_c ≤ A_r`: the same filling over chunks,
//!    a chunk taking a layer only while its rank is below `A_r`. Then `K_c`
//!    = the most layers chunk c may hold with `X_c ≤ C*`, and rank r may
//!    hold `B_r = min(A_r, Σ_{c on r} K_c)` (any count in `[v, B_r]` spreads
//!    over its chunks within the `K_c`, as every `K_c ≥ 1`). With v = 1
//!    the chunk is the rank, and like [`super::dp`] no chunk program is
//!    solved: `B_r = A_r`.
//! 3. **Largest memory** `Z* = min max_r M_r(N_r)` with `N_r ≤ B_r`; then
//!    `D_r` = the most layers in `[v, B_r]` with `M_r ≤ Z*`.
//!
//! When program 1 has no solution, the filling by memory without the caps
//! gives the split that minimises the largest peak, for
//! [`SplitError::Infeasible`].
//!
//! # Which split among ties
//!
//! Counts: fill by rank time again, within `D_r` (every tie of all three
//! programs satisfies `N_r ≤ D_r`, and every count vector within them is
//! such a tie), so the ranks' times are as even as the bounds allow; among
//! equal next times the lower rank takes the layer. Spread: each rank's
//! `N_r` layers are filled over its chunks by chunk time within the `K_c`,
//! the earlier chunk first among equals. The result is a function of the
//! problem's numbers only.
//!
//! Cost: `O(p·L)` table entries and `O(L·S·v)` filling steps: about 45 µs
//! at L = 128 over S = 32 chunks (GPT 1T, p = 32 or p = 16, v = 2), where
//! the ILP takes 4.4 and 10 ms and the DP 1.4 ms (`benches/ilp.rs`, on the
//! 2-core development machine).

use super::{Item, Split, SplitError, SplitProblem};

/// The shape [`qualifies`] checks: the common layer and the pinned items.
#[derive(Debug, Clone, Copy)]
struct Shape<'a> {
    layer: Item,
    layers: usize,
    head: &'a [Item],
    tail: &'a [Item],
}

fn shape(p: &SplitProblem) -> Option<Shape<'_>> {
    let pp = p.pp as usize;
    let first = p.items.iter().position(|i| i.layer)?;
    let last = p.items.iter().rposition(|i| i.layer)?;
    let layer = p.items[first];
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    let sound = |i: &Item| ok(i.time) && ok(i.states) && ok(i.activation) && ok(i.working_set);
    if pp == 0
        || p.vpp == 0
        || p.rank_time.len() != pp
        || p.rank_bytes.len() != pp
        || p.in_flight.len() != pp
        || !p.items[first..=last].iter().all(|i| *i == layer)
        || !p.items.iter().all(sound)
        || !p.in_flight.iter().all(|f| ok(*f))
        || !p
            .rank_time
            .iter()
            .chain(&p.rank_bytes)
            .all(|x| x.is_finite())
        || !ok(p.expert_bytes)
    {
        return None;
    }
    Some(Shape {
        layer,
        layers: last + 1 - first,
        head: &p.items[..first],
        tail: &p.items[last + 1..],
    })
}

/// Whether [`solve`] applies to `p`: identical transformer layers, the
/// non-layer items only before the first and after the last, finite
/// non-negative attributes (module docs).
pub fn qualifies(p: &SplitProblem) -> bool {
    shape(p).is_some()
}

/// Running sums of one rank's or chunk's items, added as
/// [`SplitProblem::price`] adds them.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    time: f64,
    states: f64,
    activation: f64,
    working_set: f64,
    expert: bool,
}

impl Sums {
    fn add(&mut self, it: &Item) {
        self.time += it.time;
        self.states += it.states;
        self.activation += it.activation;
        self.working_set = self.working_set.max(it.working_set);
        self.expert |= it.expert;
    }
}

/// `T_r(N)` and `M_r(N)` for N = 0 … `max` (entries below v unused), and
/// the chunk times `X_c(k)` for k = 0 … `max`.
struct Tables {
    time: Vec<Vec<f64>>,
    bytes: Vec<Vec<f64>>,
    chunk: Vec<Vec<f64>>,
}

fn tables(p: &SplitProblem, sh: &Shape, max: usize) -> Tables {
    let pp = p.pp as usize;
    let s = p.chunks();
    let mut time = Vec::with_capacity(pp);
    let mut bytes = Vec::with_capacity(pp);
    for r in 0..pp {
        let mut sums = Sums {
            time: p.rank_time[r],
            ..Sums::default()
        };
        if r == 0 {
            sh.head.iter().for_each(|it| sums.add(it));
        }
        let (mut t, mut b) = (Vec::with_capacity(max + 1), Vec::with_capacity(max + 1));
        for n in 0..=max {
            if n > 0 {
                sums.add(&sh.layer);
            }
            let mut x = sums;
            if r == pp - 1 {
                sh.tail.iter().for_each(|it| x.add(it));
            }
            let dispatch = if x.expert { p.expert_bytes } else { 0.0 };
            t.push(x.time);
            b.push(
                p.rank_bytes[r]
                    + x.states
                    + p.in_flight[r] * x.activation
                    + x.working_set
                    + dispatch,
            );
        }
        time.push(t);
        bytes.push(b);
    }
    // Chunks differ only at the ends (head on chunk 0, tail on S − 1).
    let chunk_row = |head: bool, tail: bool| {
        let mut t = 0.0;
        if head {
            sh.head.iter().for_each(|it| t += it.time);
        }
        (0..=max)
            .map(|n| {
                if n > 0 {
                    t += sh.layer.time;
                }
                let mut x = t;
                if tail {
                    sh.tail.iter().for_each(|it| x += it.time);
                }
                x
            })
            .collect::<Vec<f64>>()
    };
    let chunk = (0..s).map(|c| chunk_row(c == 0, c == s - 1)).collect();
    Tables { time, bytes, chunk }
}

/// The most units a member may hold: the largest n in `[lo, cap]` with
/// `row[n] ≤ bound` (`row` non-decreasing), or `None` when even `lo` is
/// above it.
fn most(row: &[f64], lo: usize, cap: usize, bound: f64) -> Option<usize> {
    if cap < lo || row[lo] > bound {
        return None;
    }
    Some(lo + row[lo..=cap].partition_point(|x| *x <= bound) - 1)
}

/// Greedy filling: from `held`, give each of `extra` more units to the
/// member whose value after taking it, `value(i, held_i + 1)`, is least
/// among those with `open(i, held_i)`; the lowest index first among
/// equals. `None` when no member is open while units remain. Exact for
/// the min-max of non-decreasing values (module docs).
fn fill(
    held: &mut [usize],
    extra: usize,
    value: impl Fn(usize, usize) -> f64,
    open: impl Fn(&[usize], usize) -> bool,
) -> Option<()> {
    for _ in 0..extra {
        let mut best: Option<(f64, usize)> = None;
        for i in 0..held.len() {
            if !open(held, i) {
                continue;
            }
            let x = value(i, held[i] + 1);
            if best.is_none_or(|(b, _)| x < b) {
                best = Some((x, i));
            }
        }
        held[best?.1] += 1;
    }
    Some(())
}

/// Counts per rank: from v each, filled by `value` within `caps`.
fn fill_ranks(v: usize, layers: usize, caps: &[usize], value: &[Vec<f64>]) -> Option<Vec<usize>> {
    let mut n = vec![v; caps.len()];
    fill(
        &mut n,
        layers - v * caps.len(),
        |r, k| value[r][k],
        |n, r| n[r] < caps[r],
    )?;
    Some(n)
}

/// The optimum values of the three programs, with the split.
#[derive(Debug, Clone, PartialEq)]
pub struct Solved {
    /// The chosen split (exact, `optimal` true).
    pub split: Split,
    /// Least slowest rank time per micro-batch, seconds.
    pub slowest_rank: f64,
    /// Least slowest chunk item time under that, seconds (v > 1; with
    /// v = 1 the chosen split's slowest chunk).
    pub slowest_chunk: f64,
    /// Least largest rank peak under both, bytes.
    pub largest_bytes: f64,
}

/// Least slowest-rank time split of a qualifying `p` (any v), ties broken
/// by the slowest chunk (v > 1), then the least largest memory, then the
/// documented order (module docs); the same objectives as
/// [`super::ilp::solve`] with its tie-break, solved exactly.
///
/// # Errors
/// [`SplitError::TooManyStages`]; [`SplitError::NotUniform`] when
/// [`qualifies`] is false; [`SplitError::Infeasible`] with the split that
/// minimises the largest stage memory when no split fits.
pub fn solve(p: &SplitProblem) -> Result<Split, SplitError> {
    solve_values(p).map(|s| s.split)
}

/// [`solve`] with the three optimum values.
///
/// # Errors
/// As [`solve`].
pub fn solve_values(p: &SplitProblem) -> Result<Solved, SplitError> {
    p.check()?;
    let sh = shape(p).ok_or(SplitError::NotUniform)?;
    let (pp, v, l) = (p.pp as usize, p.vpp as usize, sh.layers);
    let s = pp * v;
    // Most layers one rank can hold (every other rank holds v).
    let max = l - (pp - 1) * v;
    let tb = tables(p, &sh, max);
    let all = vec![max; pp];
    // Program 1: caps from memory, then fill by time.
    let fit: Option<Vec<usize>> = (0..pp)
        .map(|r| most(&tb.bytes[r], v, max, p.usable))
        .collect();
    let Some(fit) = fit.filter(|f| f.iter().sum::<usize>() >= l) else {
        // No split fits: the split that minimises the largest peak.
        let n = fill_ranks(v, l, &all, &tb.bytes).ok_or(SplitError::NotUniform)?;
        let z = (0..pp).map(|r| tb.bytes[r][n[r]]).fold(f64::MIN, f64::max);
        let caps: Vec<usize> = (0..pp)
            .map(|r| most(&tb.bytes[r], v, max, z).unwrap_or(v))
            .collect();
        let split = spread(p, &tb, v, l, &caps, None)?;
        return Err(p.infeasible(&split));
    };
    let n1 = fill_ranks(v, l, &fit, &tb.time).ok_or(SplitError::NotUniform)?;
    let t_star = (0..pp).map(|r| tb.time[r][n1[r]]).fold(f64::MIN, f64::max);
    let a: Vec<usize> = (0..pp)
        .map(|r| most(&tb.time[r], v, fit[r], t_star).unwrap_or(v))
        .collect();
    // Program 2: chunks, each rank within A_r.
    let (b, chunk_caps) = if v > 1 {
        let kmax = l - (s - 1);
        let mut k = vec![1usize; s];
        fill(
            &mut k,
            l - s,
            |c, n| tb.chunk[c][n],
            |k, c| {
                let r = c % pp;
                let on_rank: usize = (r..s).step_by(pp).map(|c| k[c]).sum();
                k[c] < kmax && on_rank < a[r]
            },
        )
        .ok_or(SplitError::NotUniform)?;
        let c_star = (0..s).map(|c| tb.chunk[c][k[c]]).fold(f64::MIN, f64::max);
        let caps: Vec<usize> = (0..s)
            .map(|c| most(&tb.chunk[c], 1, kmax, c_star).unwrap_or(1))
            .collect();
        let b: Vec<usize> = (0..pp)
            .map(|r| a[r].min((r..s).step_by(pp).map(|c| caps[c]).sum()))
            .collect();
        (b, Some(caps))
    } else {
        (a, None)
    };
    // Program 3: memory within B_r.
    let n3 = fill_ranks(v, l, &b, &tb.bytes).ok_or(SplitError::NotUniform)?;
    let z_star = (0..pp).map(|r| tb.bytes[r][n3[r]]).fold(f64::MIN, f64::max);
    let d: Vec<usize> = (0..pp)
        .map(|r| most(&tb.bytes[r], v, b[r], z_star).unwrap_or(v))
        .collect();
    let split = spread(p, &tb, v, l, &d, chunk_caps.as_deref())?;
    debug_assert!(p.fits(&split.priced));
    Ok(Solved {
        slowest_rank: split.priced.max_time(),
        slowest_chunk: split.priced.max_chunk_time(),
        largest_bytes: split.priced.max_bytes(),
        split,
    })
}

/// The chosen split within rank caps `caps` (and chunk caps `chunk_caps`
/// for v > 1): counts filled by rank time, each rank's count filled over
/// its chunks by chunk time (module docs, "Which split among ties").
fn spread(
    p: &SplitProblem,
    tb: &Tables,
    v: usize,
    l: usize,
    caps: &[usize],
    chunk_caps: Option<&[usize]>,
) -> Result<Split, SplitError> {
    let pp = caps.len();
    let s = pp * v;
    let n = fill_ranks(v, l, caps, &tb.time).ok_or(SplitError::NotUniform)?;
    let mut k = vec![1usize; s];
    let kmax = l - (s - 1);
    for (r, &nr) in n.iter().enumerate() {
        let chunks: Vec<usize> = (r..s).step_by(pp).collect();
        let mut held: Vec<usize> = vec![1; v];
        fill(
            &mut held,
            nr - v,
            |j, m| tb.chunk[chunks[j]][m],
            |held, j| held[j] < chunk_caps.map_or(kmax, |cc| cc[chunks[j]]),
        )
        .ok_or(SplitError::NotUniform)?;
        for (j, &c) in chunks.iter().enumerate() {
            k[c] = held[j];
        }
    }
    let layers: Vec<u32> = k.iter().map(|&x| x as u32).collect();
    let bounds = p.bounds_of(&layers).ok_or(SplitError::NotUniform)?;
    Ok(p.split_of(bounds, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer() -> Item {
        Item {
            time: 4.0,
            states: 20.0,
            activation: 5.0,
            working_set: 3.0,
            layer: true,
            expert: false,
        }
    }

    /// Six identical layers on p = 2, v = 2 (four chunks), worked by hand.
    /// Items: head (t 2, s 10), layers (t 4, s 20, a 5, w 3), tail (t 6,
    /// s 10); rank 0 holds 3 micro-batches in flight, rank 1 holds 2;
    /// usable 200; no point-to-point time or buffers.
    ///
    /// T_0(N) = 2 + 4N, M_0(N) = 10 + 20N + 3·5N + 3 = 13 + 35N;
    /// T_1(N) = 4N + 6, M_1(N) = 20N + 10 + 2·5N + 3 = 13 + 30N.
    /// Counts (N_0, N_1) with N_r ≥ 2 and N_0 + N_1 = 6: (2, 4) takes
    /// max(10, 22) = 22, (3, 3) max(14, 18) = 18, (4, 2) max(18, 14) = 18.
    /// Memory: (3, 3) peaks at 118, 103; (4, 2) at 153, 73; both fit, so
    /// T* = 18.
    /// Chunks: chunk 0 (rank 0) = 2 + 4k, chunks 1, 2 plain 4k, chunk 3
    /// (rank 1) = 4k + 6. (3, 3): rank 0 as 1 + 2 over chunks 0, 2 gives
    /// 6, 8; rank 1 as 2 + 1 over chunks 1, 3 gives 8, 10: slowest chunk
    /// 10 (1 layer on chunk 3 is its least, 10). (4, 2): rank 1 is 1 + 1,
    /// chunk 3 = 10 again, rank 0 splits 4 as 2 + 2: 10, 8. So C* = 10
    /// for both, and memory decides: Z* = max(118, 103) = 118 < 153, so
    /// N = (3, 3).
    /// Spread: rank 0's third layer goes to the chunk whose time after
    /// taking it is least: chunk 0 at 2 + 8 = 10 or chunk 2 at 8: chunk 2.
    /// Rank 1's: chunk 1 at 8 or chunk 3 at 14 (over C* = 10): chunk 1.
    /// Split [1, 2, 2, 1].
    #[test]
    fn hand_worked_interleaved() {
        let head = Item {
            time: 2.0,
            states: 10.0,
            ..Item::default()
        };
        let tail = Item {
            time: 6.0,
            states: 10.0,
            ..Item::default()
        };
        let mut items = vec![head];
        items.extend([layer(); 6]);
        items.push(tail);
        let mut p = SplitProblem {
            items,
            pp: 2,
            vpp: 2,
            rank_time: vec![0.0; 2],
            rank_bytes: vec![0.0; 2],
            in_flight: vec![3.0, 2.0],
            expert_bytes: 0.0,
            usable: 200.0,
        };
        assert!(qualifies(&p));
        let s = solve_values(&p).unwrap();
        assert_eq!(s.split.layers, vec![1, 2, 2, 1]);
        assert_eq!(s.slowest_rank, 18.0);
        assert_eq!(s.slowest_chunk, 10.0);
        assert_eq!(s.largest_bytes, 118.0);
        assert_eq!(s.split.priced.rank_time, vec![14.0, 18.0]);
        assert_eq!(s.split.priced.rank_bytes, vec![118.0, 103.0]);
        assert_eq!(s.split.priced.chunk_time, vec![6.0, 8.0, 8.0, 10.0]);
        // With 110 usable bytes rank 0 fits 2 layers at most (83; 3 need
        // 118), so N = (2, 4): T* = 22, rank 1 at 13 + 120 = 133 > 110
        // does not fit either: no split fits. The min-max-memory split is
        // (3, 3) at 118 (rank 0; (2, 4) peaks at 133, (4, 2) at 153).
        p.usable = 110.0;
        match solve(&p).unwrap_err() {
            SplitError::Infeasible {
                split,
                stage,
                peak,
                usable,
            } => {
                assert_eq!(split.iter().sum::<u32>(), 6);
                assert_eq!((stage, peak, usable), (0, 118.0, 110.0));
            }
            e => panic!("expected infeasible, got {e:?}"),
        }
    }

    #[test]
    fn mixed_layers_do_not_qualify() {
        let other = Item {
            time: 5.0,
            ..layer()
        };
        let mut p = SplitProblem {
            items: vec![Item::default(), layer(), other, layer(), Item::default()],
            pp: 1,
            vpp: 1,
            rank_time: vec![0.0],
            rank_bytes: vec![0.0],
            in_flight: vec![1.0],
            expert_bytes: 0.0,
            usable: 1e9,
        };
        assert!(!qualifies(&p));
        assert_eq!(solve(&p).unwrap_err(), SplitError::NotUniform);
        // A non-layer item between layers does not either.
        p.items[2] = Item::default();
        assert!(!qualifies(&p));
        p.items[2] = layer();
        assert!(qualifies(&p));
        // Nor a negative time.
        p.items[0].time = -1.0;
        assert!(!qualifies(&p));
    }
}
