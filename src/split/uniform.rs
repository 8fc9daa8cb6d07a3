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
/// the chunk times `X_c(k)` for k = 0 … `max`, formed on demand from a few
/// running sums.
///
/// A rank's sums run over the head (rank 0 only), then N layers, and the
/// tail (rank p − 1 only) is added on top of each ([`SplitProblem::price`]'s
/// order): so the running sums depend only on whether the head is there
/// (and, for the time, on `τ_r`), and the tail is added when a value is
/// read, with the same additions in the same order as a row per rank
/// would hold. The largest working set and the expert flag are maxima, the
/// same for every N ≥ 1. Rows per rank took `O(p·L)` entries, most of a
/// solve; these are a handful of rows. Chunks likewise: a running sum of
/// times from zero, with or without the head.
struct Tables<'a> {
    p: &'a SplitProblem,
    sh: Shape<'a>,
    width: usize,
    /// Running time sums, flat, `width` entries each; rank r's is
    /// `time_of[r]` (one per distinct `τ_r` and head).
    time: Vec<f64>,
    time_of: Vec<usize>,
    /// Running states and activation sums, with the head (`[1]`) and
    /// without (`[0]`); empty when no rank of that kind exists.
    states: [Vec<f64>; 2],
    activation: [Vec<f64>; 2],
    /// Chunk time sums from zero, without and with the head.
    chunk: [Vec<f64>; 2],
    chunks: usize,
    /// Whether no `M_r(n)` is NaN, for [`fill`]. Times never are (finite
    /// starts plus finite non-negative items); bytes only when `φ_r = 0`
    /// meets an activation sum that overflowed to +∞ (every other term is
    /// finite or +∞ added to a finite value), so they are not when the
    /// activation sums stay finite (they are non-decreasing, so the last
    /// entry with the tail tells).
    ordered: bool,
}

impl Tables<'_> {
    /// `T_r(n)`.
    fn time(&self, r: usize, n: usize) -> f64 {
        let mut x = self.time[self.time_of[r] * self.width + n];
        if r == self.p.pp as usize - 1 {
            self.sh.tail.iter().for_each(|it| x += it.time);
        }
        x
    }

    /// `M_r(n)`, as `price` adds it.
    fn bytes(&self, r: usize, n: usize) -> f64 {
        let (p, sh) = (self.p, &self.sh);
        let head = usize::from(r == 0);
        let tail = r == p.pp as usize - 1;
        let mut x = Sums {
            states: self.states[head][n],
            activation: self.activation[head][n],
            ..Sums::default()
        };
        let pinned = sh.head.iter().filter(|_| head == 1);
        for it in pinned.chain(sh.tail.iter().filter(|_| tail)) {
            x.working_set = x.working_set.max(it.working_set);
            x.expert |= it.expert;
        }
        if n > 0 {
            x.working_set = x.working_set.max(sh.layer.working_set);
            x.expert |= sh.layer.expert;
        }
        if tail {
            for it in sh.tail {
                x.states += it.states;
                x.activation += it.activation;
            }
        }
        let dispatch = if x.expert { p.expert_bytes } else { 0.0 };
        p.rank_bytes[r] + x.states + p.in_flight[r] * x.activation + x.working_set + dispatch
    }

    /// `X_c(k)`.
    fn chunk(&self, c: usize, k: usize) -> f64 {
        let mut x = self.chunk[usize::from(c == 0)][k];
        if c == self.chunks - 1 {
            self.sh.tail.iter().for_each(|it| x += it.time);
        }
        x
    }
}

/// Running sums from `start` over the head items (when `head`), then one
/// more layer per entry: entry n holds n layers.
fn running(start: Sums, sh: &Shape, head: bool, max: usize, mut f: impl FnMut(&Sums)) {
    let mut sums = start;
    if head {
        sh.head.iter().for_each(|it| sums.add(it));
    }
    f(&sums);
    for _ in 0..max {
        sums.add(&sh.layer);
        f(&sums);
    }
}

fn tables<'a>(p: &'a SplitProblem, sh: Shape<'a>, max: usize) -> Tables<'a> {
    let pp = p.pp as usize;
    let width = max + 1;
    let mut time = Vec::with_capacity(2 * width);
    let mut keys: Vec<(u64, bool)> = Vec::with_capacity(2);
    let mut time_of = Vec::with_capacity(pp);
    for r in 0..pp {
        let key = (p.rank_time[r].to_bits(), r == 0);
        let row = match keys.iter().position(|x| *x == key) {
            Some(i) => i,
            None => {
                let start = Sums {
                    time: p.rank_time[r],
                    ..Sums::default()
                };
                running(start, &sh, r == 0, max, |x| time.push(x.time));
                keys.push(key);
                keys.len() - 1
            }
        };
        time_of.push(row);
    }
    let mut states: [Vec<f64>; 2] = Default::default();
    let mut activation: [Vec<f64>; 2] = Default::default();
    // Rank 0 holds the head; ranks 1 … p − 1 do not.
    for head in [false, true] {
        if !head && pp == 1 {
            continue;
        }
        let (s, a) = (
            &mut states[usize::from(head)],
            &mut activation[usize::from(head)],
        );
        s.reserve_exact(width);
        a.reserve_exact(width);
        running(Sums::default(), &sh, head, max, |x| {
            s.push(x.states);
            a.push(x.activation);
        });
    }
    let mut chunk: [Vec<f64>; 2] = Default::default();
    for head in [false, true] {
        let row = &mut chunk[usize::from(head)];
        row.reserve_exact(width);
        running(Sums::default(), &sh, head, max, |x| row.push(x.time));
    }
    // The largest activation sum a rank can hold, tail included.
    let ordered = activation.iter().all(|row| {
        row.last().is_none_or(|&x| {
            let mut x = x;
            sh.tail.iter().for_each(|it| x += it.activation);
            x.is_finite()
        })
    });
    Tables {
        ordered,
        p,
        sh,
        width,
        time,
        time_of,
        states,
        activation,
        chunk,
        chunks: p.chunks(),
    }
}

/// The most units a member may hold: the largest n in `[lo, cap]` with
/// `row(n) ≤ bound` (`row` non-decreasing), or `None` when even `lo` is
/// above it.
fn most(lo: usize, cap: usize, bound: f64, row: impl Fn(usize) -> f64) -> Option<usize> {
    if cap < lo || row(lo) > bound {
        return None;
    }
    // Binary search for the last n with row(n) ≤ bound: row(a) ≤ bound
    // holds throughout, row(b + 1) > bound or b = cap.
    let (mut a, mut b) = (lo, cap);
    while a < b {
        let mid = a + (b - a).div_ceil(2);
        if row(mid) <= bound {
            a = mid;
        } else {
            b = mid - 1;
        }
    }
    Some(a)
}

/// The members' next values in a tournament tree, for [`fill`]: the root
/// holds the least value and, among equal values, the lowest index (a
/// right child wins only when strictly less). A closed member holds +∞.
/// Each step of a filling then costs `O(log n)` instead of a scan of every
/// member (p = 32 ranks took most of a solve in those scans).
struct Tourney {
    /// Leaves: a power of two at least the members.
    leaves: usize,
    /// Node i's (value, member); children of i at 2i and 2i + 1, leaves
    /// from `leaves` on.
    node: Vec<(f64, usize)>,
    /// Members holding a NaN (their order is not the scan's).
    nans: usize,
}

impl Tourney {
    fn new(values: impl ExactSizeIterator<Item = f64>) -> Tourney {
        let leaves = values.len().next_power_of_two();
        let mut node = vec![(f64::INFINITY, usize::MAX); 2 * leaves];
        let mut nans = 0;
        for (i, x) in values.enumerate() {
            nans += usize::from(x.is_nan());
            node[leaves + i] = (x, i);
        }
        for i in (1..leaves).rev() {
            node[i] = Self::winner(node[2 * i], node[2 * i + 1]);
        }
        Tourney { leaves, node, nans }
    }

    fn winner(l: (f64, usize), r: (f64, usize)) -> (f64, usize) {
        if r.0 < l.0 { r } else { l }
    }

    fn set(&mut self, i: usize, x: f64) {
        let mut at = self.leaves + i;
        self.nans -= usize::from(self.node[at].0.is_nan());
        self.nans += usize::from(x.is_nan());
        self.node[at].0 = x;
        while at > 1 {
            at /= 2;
            self.node[at] = Self::winner(self.node[2 * at], self.node[2 * at + 1]);
        }
    }

    /// The least finite next value's member, lowest index among equals;
    /// `None` when the least is not finite or a NaN is held, where the
    /// caller scans (an open member at +∞ is not told from a closed one).
    fn best(&self) -> Option<usize> {
        let (x, i) = self.node[1];
        (self.nans == 0 && x.is_finite()).then_some(i)
    }
}

/// Greedy filling: from `held`, give each of `extra` more units to the
/// member whose value after taking it, `value(i, held_i + 1)`, is least
/// among the open ones (`held_i < caps_i`); the lowest index first among
/// equals. `None` when no member is open while units remain. Exact for
/// the min-max of non-decreasing values (module docs).
///
/// Two shortcuts give the same counts as that definition, step by step.
///
/// First, when `ordered` (no value of any member is NaN), the units below
/// a threshold are handed out at once. The values the filling hands out
/// never decrease (a member's next value only grows when it takes), so it
/// hands out exactly the `extra` least of all open units (unit n of member
/// i valued `value(i, n)`, `held_i < n ≤ caps_i`), ties in index order. If
/// `c < extra` units are valued at most x, the `extra`-th least, x*, is
/// above x: every unit at most x is handed out, and handing them out first
/// leaves the filling of the other `extra − c` units unchanged (they are
/// the least of those left, with the same ties). x is the least value a
/// member reaches `q` units on, with `q` one short of an even share, so
/// most of the units go at once; a threshold that catches `extra` units
/// or more is not used.
///
/// Second, each member's next value is kept (+∞ once closed) and only the
/// taker's recomputed, in a [`Tourney`]; a step whose least value is not
/// finite scans the open members as the definition reads.
fn fill(
    held: &mut [usize],
    mut extra: usize,
    value: impl Fn(usize, usize) -> f64,
    caps: &[usize],
    ordered: bool,
) -> Option<()> {
    let m = held.len();
    if ordered && m > 0 && extra / m >= 2 {
        let q = extra / m - 1;
        let x = (0..m)
            .filter(|&i| held[i] + q <= caps[i])
            .map(|i| value(i, held[i] + q))
            .fold(f64::INFINITY, f64::min);
        if x.is_finite() {
            // Units at most x per member (rows are non-decreasing).
            let to: Vec<usize> = (0..m)
                .map(|i| most(held[i] + 1, caps[i], x, |n| value(i, n)).unwrap_or(held[i]))
                .collect();
            let c: usize = (0..m).map(|i| to[i] - held[i]).sum();
            if c < extra {
                held.copy_from_slice(&to);
                extra -= c;
            }
        }
    }
    let next = |held: &[usize], i: usize| {
        if held[i] < caps[i] {
            value(i, held[i] + 1)
        } else {
            f64::INFINITY
        }
    };
    let mut tree = Tourney::new((0..m).map(|i| next(held, i)));
    for _ in 0..extra {
        let i = match tree.best() {
            Some(i) => i,
            None => {
                let mut best: Option<(f64, usize)> = None;
                for i in 0..m {
                    if held[i] < caps[i] {
                        let x = value(i, held[i] + 1);
                        if best.is_none_or(|(b, _)| x < b) {
                            best = Some((x, i));
                        }
                    }
                }
                best?.1
            }
        };
        held[i] += 1;
        tree.set(i, next(held, i));
    }
    Some(())
}

/// Counts per rank: from v each, filled by `value` (rows of
/// `tables`) within `caps`.
fn fill_ranks(
    v: usize,
    layers: usize,
    caps: &[usize],
    value: impl Fn(usize, usize) -> f64,
    ordered: bool,
) -> Option<Vec<usize>> {
    let mut n = vec![v; caps.len()];
    fill(&mut n, layers - v * caps.len(), value, caps, ordered)?;
    Some(n)
}

/// Program 2's filling over the S chunks (one layer each to start): the
/// next layer to the chunk whose time after taking it is least, among
/// chunks below `kmax` whose rank holds fewer than `a_r` layers; the
/// lowest chunk first among equals. As [`fill`], with each rank's count
/// kept as it grows (a rank that reaches `a_r` closes its chunks).
fn fill_chunks(
    tb: &Tables,
    pp: usize,
    layers: usize,
    kmax: usize,
    a: &[usize],
) -> Option<Vec<usize>> {
    let s = tb.chunks;
    let v = s / pp;
    let mut k = vec![1usize; s];
    let mut on_rank = vec![v; pp];
    let open =
        |k: &[usize], on_rank: &[usize], c: usize| k[c] < kmax && on_rank[c % pp] < a[c % pp];
    let next = |k: &[usize], on_rank: &[usize], c: usize| {
        if open(k, on_rank, c) {
            tb.chunk(c, k[c] + 1)
        } else {
            f64::INFINITY
        }
    };
    let mut tree = Tourney::new((0..s).map(|c| next(&k, &on_rank, c)));
    for _ in 0..layers - s {
        let c = match tree.best() {
            Some(c) => c,
            None => {
                let mut best: Option<(f64, usize)> = None;
                for c in 0..s {
                    if open(&k, &on_rank, c) {
                        let x = tb.chunk(c, k[c] + 1);
                        if best.is_none_or(|(b, _)| x < b) {
                            best = Some((x, c));
                        }
                    }
                }
                best?.1
            }
        };
        let r = c % pp;
        k[c] += 1;
        on_rank[r] += 1;
        if on_rank[r] < a[r] {
            tree.set(c, next(&k, &on_rank, c));
        } else {
            // The rank is full: every chunk of it closes.
            for c in (r..s).step_by(pp) {
                tree.set(c, f64::INFINITY);
            }
        }
    }
    Some(k)
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
    let tb = tables(p, sh, max);
    let all = vec![max; pp];
    // Program 1: caps from memory, then fill by time.
    let fit: Option<Vec<usize>> = (0..pp)
        .map(|r| most(v, max, p.usable, |n| tb.bytes(r, n)))
        .collect();
    let Some(fit) = fit.filter(|f| f.iter().sum::<usize>() >= l) else {
        // No split fits: the split that minimises the largest peak.
        let n = fill_ranks(v, l, &all, |r, n| tb.bytes(r, n), tb.ordered)
            .ok_or(SplitError::NotUniform)?;
        let z = (0..pp).map(|r| tb.bytes(r, n[r])).fold(f64::MIN, f64::max);
        let caps: Vec<usize> = (0..pp)
            .map(|r| most(v, max, z, |n| tb.bytes(r, n)).unwrap_or(v))
            .collect();
        let split = spread(p, &tb, v, l, &caps, None)?;
        return Err(p.infeasible(&split));
    };
    let n1 = fill_ranks(v, l, &fit, |r, n| tb.time(r, n), true).ok_or(SplitError::NotUniform)?;
    let t_star = (0..pp).map(|r| tb.time(r, n1[r])).fold(f64::MIN, f64::max);
    let a: Vec<usize> = (0..pp)
        .map(|r| most(v, fit[r], t_star, |n| tb.time(r, n)).unwrap_or(v))
        .collect();
    // Program 2: chunks, each rank within A_r.
    let (b, chunk_caps) = if v > 1 {
        let kmax = l - (s - 1);
        let k = fill_chunks(&tb, pp, l, kmax, &a).ok_or(SplitError::NotUniform)?;
        let c_star = (0..s).map(|c| tb.chunk(c, k[c])).fold(f64::MIN, f64::max);
        let caps: Vec<usize> = (0..s)
            .map(|c| most(1, kmax, c_star, |n| tb.chunk(c, n)).unwrap_or(1))
            .collect();
        let b: Vec<usize> = (0..pp)
            .map(|r| a[r].min((r..s).step_by(pp).map(|c| caps[c]).sum()))
            .collect();
        (b, Some(caps))
    } else {
        (a, None)
    };
    // Program 3: memory within B_r.
    let n3 =
        fill_ranks(v, l, &b, |r, n| tb.bytes(r, n), tb.ordered).ok_or(SplitError::NotUniform)?;
    let z_star = (0..pp).map(|r| tb.bytes(r, n3[r])).fold(f64::MIN, f64::max);
    let d: Vec<usize> = (0..pp)
        .map(|r| most(v, b[r], z_star, |n| tb.bytes(r, n)).unwrap_or(v))
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
    let n = fill_ranks(v, l, caps, |r, n| tb.time(r, n), true).ok_or(SplitError::NotUniform)?;
    let mut k = vec![1usize; s];
    let kmax = l - (s - 1);
    let mut chunks: Vec<usize> = Vec::with_capacity(v);
    let mut held: Vec<usize> = Vec::with_capacity(v);
    let mut held_caps: Vec<usize> = Vec::with_capacity(v);
    for (r, &nr) in n.iter().enumerate() {
        chunks.clear();
        chunks.extend((r..s).step_by(pp));
        held.clear();
        held.resize(v, 1);
        held_caps.clear();
        held_caps.extend(chunks.iter().map(|&c| chunk_caps.map_or(kmax, |cc| cc[c])));
        fill(
            &mut held,
            nr - v,
            |j, m| tb.chunk(chunks[j], m),
            &held_caps,
            true,
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

    /// [`fill`] (threshold and tournament shortcuts) against the filling
    /// as defined, one unit at a time by a scan of every member, on random
    /// non-decreasing rows with many ties (small integer steps, some
    /// flat), random caps and a few +∞ entries.
    #[test]
    fn fill_matches_the_definition() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..20_000 {
            let m = 1 + rnd(12) as usize;
            let width = 2 + rnd(40) as usize;
            let rows: Vec<Vec<f64>> = (0..m)
                .map(|_| {
                    let mut x = rnd(5) as f64;
                    let mut row: Vec<f64> = (0..width)
                        .map(|_| {
                            x += rnd(3) as f64;
                            x
                        })
                        .collect();
                    if rnd(8) == 0 {
                        let from = rnd(width as u64) as usize;
                        row[from..].iter_mut().for_each(|x| *x = f64::INFINITY);
                    }
                    row
                })
                .collect();
            let start: Vec<usize> = (0..m).map(|_| rnd(3) as usize).collect();
            let caps: Vec<usize> = (0..m)
                .map(|i| (start[i] + rnd(width as u64) as usize).min(width - 1))
                .collect();
            let extra = rnd((m * width) as u64) as usize;
            let value = |i: usize, n: usize| rows[i][n];
            // The definition.
            let mut want = start.clone();
            let mut ok = true;
            for _ in 0..extra {
                let mut best: Option<(f64, usize)> = None;
                for i in 0..m {
                    if want[i] < caps[i] {
                        let x = value(i, want[i] + 1);
                        if best.is_none_or(|(b, _)| x < b) {
                            best = Some((x, i));
                        }
                    }
                }
                match best {
                    Some((_, i)) => want[i] += 1,
                    None => {
                        ok = false;
                        break;
                    }
                }
            }
            let mut got = start.clone();
            let r = fill(&mut got, extra, value, &caps, true);
            assert_eq!(r.is_some(), ok, "{rows:?} {start:?} {caps:?} {extra}");
            if ok {
                assert_eq!(got, want, "{rows:?} {start:?} {caps:?} {extra}");
            }
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
