//! The stage split as an integer linear program (good_lp with HiGHS).
//!
//! # Formulation
//!
//! Items (see [`super`]) are grouped into runs of identical consecutive
//! items: run k holds `n_k` items of per-item attributes `x_k` (time,
//! states, activations, layer count). A model with one layer kind has
//! three runs (embedding, layers, output), so the program stays small
//! however many layers there are; with every item different it is the
//! plain item-by-item program.
//!
//! Variables, for each interior boundary `c = 1 … S−1` (S = p·v chunks),
//! in the incremental (fill) form of a piecewise-linear function:
//!
//! - `f_{c,k}` integer in `[0, n_k]`: items of run k before boundary c;
//! - `δ_{c,k}` binary for every run but the last: run k is complete before
//!   the boundary, with `f_{c,k} ≥ n_k·δ_{c,k}` and
//!   `f_{c,k+1} ≤ n_{k+1}·δ_{c,k}` (runs fill in order, so the fills
//!   describe one position `B_c = Σ_k f_{c,k}`).
//!
//! The sum of any attribute over the items before the boundary is the
//! linear expression `A(B_c) = Σ_k x_k·f_{c,k}`; `B_0 = 0`, `B_S = n`;
//! chunk c's attribute is `A(B_{c+1}) − A(B_c)`. Fills never decrease from
//! one boundary to the next (`f_{c,k} ≤ f_{c+1,k}`; implied by the layer
//! counts below, stated because it tightens the LP relaxation).
//!
//! Cost: with the catalog's models (at most four runs) one solve at
//! L = 128, S = 32 takes milliseconds (`benches/ilp.rs`). With every layer
//! different (130 runs) HiGHS finds the optimum quickly but needs about
//! 12 s to prove it at L = 128, S = 32 (the LP relaxation of min-max
//! partitioning is weak); the [`Options::time_limit_s`] then returns the
//! best split found, marked not optimal.
//!
//! Constraints, with time in units of the mean rank time and bytes in units
//! of usable memory U:
//!
//! - every chunk holds a transformer layer: `Λ(B_{c+1}) − Λ(B_c) ≥ 1`
//!   (Λ the layer count; this also orders the boundaries), and
//!   `c ≤ Λ(B_c) ≤ L − S + c`;
//! - time of rank r: `τ_r + Σ_{c ≡ r (mod p)} (A_t(B_{c+1}) − A_t(B_c)) ≤ T`;
//! - memory of rank r: `κ_r + Σ_{c ≡ r} (A_s + φ_r·A_a)(chunk c) + W_r ≤ U`,
//!   where W_r is the rank's largest working set: `W_r ≥ w_min` (the least
//!   working set of a layer: every rank holds one), and for each run k with
//!   a larger working set `w_k`, `W_r ≥ w_k·h_{c,k}` with binary `h_{c,k} ≥
//!   (f_{c+1,k} − f_{c,k})/n_k` (so `h_{c,k} = 1` whenever chunk c holds an
//!   item of run k); likewise the EP dispatch
//!   buffers ε, `E_r ≥ ε·h_{c,k}` for runs of MoE layers, add `E_r` to the
//!   rank's bytes. Dense models need no `h`.
//!
//! Objective: minimise T. Then (v > 1 only), with the rank times bounded
//! by the optimum found, minimise the slowest chunk C, `C ≥ A_t(B_{c+1}) −
//! A_t(B_c)`. Then, with the rank times and chunk times bounded by those
//! optima, minimise Z subject to `Z ≥ mem_r/U` (the tie-break on memory
//! headroom). When the first program is infeasible, the second is solved
//! without the memory limit to name the stage that overflows and by how
//! much under the split that minimises the largest stage memory.
//!
//! HiGHS runs with a zero relative MIP gap (absolute 1e-7 of the mean
//! rank time or of usable memory), its default feasibility tolerances
//! (tightening `mip_feasibility_tolerance` to 1e-9 made HiGHS 1.16 cut off
//! optimal splits in the property tests),
//! one thread and without its feasibility-jump heuristic; the split it
//! returns is re-priced exactly with [`SplitProblem::price`].

use good_lp::solvers::highs::highs;
use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution, SolverModel, Variable, constraint,
    variable,
};

use super::{Split, SplitError, SplitProblem};

/// Solver settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// HiGHS time limit per program, seconds. A program stopped at the limit
    /// with a feasible split returns it with `optimal = false`.
    pub time_limit_s: f64,
    /// Break ties between fastest splits: with v > 1 by the slowest chunk,
    /// then by the least largest memory share (module docs). Without it the
    /// first optimal split HiGHS finds is returned.
    pub tie_break: bool,
    /// When no split fits, solve a second program for the split that
    /// minimises the largest stage memory, to name the stage that
    /// overflows and by how much; without it an infeasible problem returns
    /// [`SplitError::Infeasible`] with an empty split and zero bytes.
    pub diagnose_infeasible: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            time_limit_s: 10.0,
            tie_break: true,
            diagnose_infeasible: true,
        }
    }
}

/// A run of identical consecutive items.
#[derive(Debug, Clone, Copy)]
struct Run {
    len: usize,
    /// Per-item attributes: time (normalised), states, activation (bytes
    /// normalised), layer count.
    x: [f64; 4],
    /// Working set (normalised).
    ws: f64,
    /// MoE items (the rank then holds the EP dispatch buffers).
    expert: bool,
}

fn runs(p: &SplitProblem, tu: f64) -> Vec<Run> {
    let u = p.usable;
    let mut out: Vec<Run> = Vec::new();
    for it in &p.items {
        let x = [
            it.time / tu,
            it.states / u,
            it.activation / u,
            f64::from(u8::from(it.layer)),
        ];
        let ws = it.working_set / u;
        match out.last_mut() {
            Some(r) if r.x == x && r.ws == ws && r.expert == it.expert => r.len += 1,
            _ => out.push(Run {
                len: 1,
                x,
                ws,
                expert: it.expert,
            }),
        }
    }
    out
}

/// What the program optimises (bounds in normalised units).
#[derive(Clone, Copy, PartialEq)]
enum Goal {
    /// Least slowest rank time.
    Time,
    /// Least slowest chunk time with every rank time ≤ the bound.
    Chunk(f64),
    /// Least largest memory share with every rank time ≤ the first bound
    /// and every chunk time ≤ the second.
    Memory(f64, f64),
    /// Least largest memory share, no memory limit.
    MemoryOnly,
}

/// Outcome of one program.
enum Outcome {
    Found(Vec<usize>, bool),
    Infeasible,
}

fn solve_goal(
    p: &SplitProblem,
    opts: &Options,
    goal: Goal,
    tu: f64,
) -> Result<Outcome, SplitError> {
    match solve_program(p, opts, goal, tu, true) {
        // HiGHS's presolve gets some of these programs wrong: it reduced a
        // feasible tie-break program to an empty one whose point broke a
        // constraint ("Solve error"), and declared a feasible 5-stage MoE
        // time program infeasible (both pinned in `tests/split_solvers.rs`).
        // Without presolve both solve correctly, but every program takes
        // about 1.5 times as long, so only these two verdicts are checked
        // again without it.
        Err(SplitError::Solver { .. }) | Ok(Outcome::Infeasible) => {
            solve_program(p, opts, goal, tu, false)
        }
        found => found,
    }
}

/// One program of [`solve_goal`], with HiGHS's presolve on or off.
#[allow(clippy::needless_range_loop)] // chunk c's constraints read boundaries c and c + 1
fn solve_program(
    p: &SplitProblem,
    opts: &Options,
    goal: Goal,
    tu: f64,
    presolve: bool,
) -> Result<Outcome, SplitError> {
    let runs = runs(p, tu);
    let s = p.chunks();
    let pp = p.pp as usize;
    let n = p.items.len();
    let total_layers = f64::from(p.layers());
    let u = p.usable;
    let mut vars = ProblemVariables::new();
    // Boundary variables for c = 1..S−1 (rows 0 and S stay empty): how
    // many items of each run lie before the boundary, and whether each run
    // but the last is complete there.
    let kk = runs.len();
    let mut fill: Vec<Vec<Variable>> = vec![Vec::new(); s + 1];
    let mut full: Vec<Vec<Variable>> = vec![Vec::new(); s + 1];
    for c in 1..s {
        fill[c] = runs
            .iter()
            .map(|r| vars.add(variable().integer().min(0).max(r.len as f64)))
            .collect();
        full[c] = (0..kk.saturating_sub(1))
            .map(|_| vars.add(variable().binary()))
            .collect();
    }
    let total: [f64; 4] = {
        let mut t = [0.0; 4];
        for r in &runs {
            for (a, ta) in t.iter_mut().enumerate() {
                *ta += r.x[a] * r.len as f64;
            }
        }
        t
    };
    // Prefix of attribute `a` at boundary c.
    let prefix = |c: usize, a: usize| -> Expression {
        if c == 0 {
            return Expression::from(0.0);
        }
        if c == s {
            return Expression::from(total[a]);
        }
        let mut e = Expression::with_capacity(kk);
        for (k, &f) in fill[c].iter().enumerate() {
            e.add_mul(runs[k].x[a], f);
        }
        e
    };
    // Items of run k before boundary c.
    let count = |c: usize, k: usize| -> Expression {
        if c == 0 {
            return Expression::from(0.0);
        }
        if c == s {
            return Expression::from(runs[k].len as f64);
        }
        Expression::from(fill[c][k])
    };
    let t_var = vars.add(variable().min(0.0));
    let z_var = vars.add(variable().min(0.0));
    let c_var = vars.add(variable().min(0.0));
    let w_min = p
        .items
        .iter()
        .filter(|i| i.layer)
        .map(|i| i.working_set / u)
        .fold(f64::INFINITY, f64::min);
    let dispatch = p.expert_bytes / u;
    // Runs whose presence on a rank costs bytes beyond their sums: a
    // working set above the least layer's, or the EP dispatch buffers.
    let high: Vec<usize> = (0..runs.len())
        .filter(|&k| runs[k].ws > w_min || (runs[k].expert && dispatch > 0.0))
        .collect();
    // h[c][j] for chunk c and high run high[j].
    let h: Vec<Vec<Variable>> = (0..s)
        .map(|_| high.iter().map(|_| vars.add(variable().binary())).collect())
        .collect();
    let w: Vec<Option<Variable>> = (0..pp)
        .map(|_| {
            high.iter()
                .any(|&k| runs[k].ws > w_min)
                .then(|| vars.add(variable().min(w_min)))
        })
        .collect();
    let e: Vec<Option<Variable>> = (0..pp)
        .map(|_| {
            high.iter()
                .any(|&k| runs[k].expert && dispatch > 0.0)
                .then(|| vars.add(variable().min(0.0)))
        })
        .collect();
    let objective = match goal {
        Goal::Time => Expression::from(t_var),
        Goal::Chunk(_) => Expression::from(c_var),
        _ => Expression::from(z_var),
    };
    let mut model = vars.minimise(objective).using(highs);
    model = model
        .set_mip_rel_gap(0.0)
        .and_then(|m| m.set_mip_abs_gap(1e-7))
        .map_err(|e| SplitError::Solver {
            status: e.to_string(),
        })?
        .set_time_limit(opts.time_limit_s)
        // One thread, and no feasibility-jump heuristic: on these small
        // programs both cost more than the branch and bound (measured
        // 25 ms → 3 ms for 70B on 16 stages).
        .set_option("threads", 1)
        .set_option("mip_heuristic_run_feasibility_jump", false);
    if !presolve {
        model = model.set_option("presolve", "off");
    }
    for c in 1..s {
        // Runs fill in order: run k+1 starts only once run k is complete.
        for k in 0..kk.saturating_sub(1) {
            let (f0, f1, d) = (fill[c][k], fill[c][k + 1], full[c][k]);
            model.add_constraint(constraint!(f0 - runs[k].len as f64 * d >= 0.0));
            model.add_constraint(constraint!(f1 - runs[k + 1].len as f64 * d <= 0.0));
        }
        // Boundaries are ordered (implied by the layer counts; stated for a
        // tighter relaxation).
        if c + 1 < s {
            for (&now, &next) in fill[c].iter().zip(&fill[c + 1]) {
                model.add_constraint(constraint!(now - next <= 0.0));
            }
        }
        let lam = prefix(c, 3);
        model.add_constraint(constraint!(lam.clone() >= c as f64));
        model.add_constraint(constraint!(lam <= total_layers - (s - c) as f64));
    }
    for c in 0..s {
        model.add_constraint(constraint!(prefix(c + 1, 3) - prefix(c, 3) >= 1.0));
        match goal {
            Goal::Chunk(_) => {
                model.add_constraint(constraint!(prefix(c + 1, 0) - prefix(c, 0) - c_var <= 0.0));
            }
            Goal::Memory(_, cb) => {
                model.add_constraint(constraint!(prefix(c + 1, 0) - prefix(c, 0) <= cb));
            }
            _ => {}
        }
        for (j, &k) in high.iter().enumerate() {
            let held = count(c + 1, k) - count(c, k);
            model.add_constraint(constraint!(runs[k].len as f64 * h[c][j] - held >= 0.0));
        }
    }
    for r in 0..pp {
        let mut time = Expression::from(p.rank_time[r] / tu);
        let mut bytes = Expression::from(p.rank_bytes[r] / u);
        for c in (r..s).step_by(pp) {
            time += prefix(c + 1, 0) - prefix(c, 0);
            bytes += prefix(c + 1, 1) - prefix(c, 1);
            bytes += p.in_flight[r] * (prefix(c + 1, 2) - prefix(c, 2));
        }
        match w[r] {
            Some(wv) => {
                bytes += wv;
                for c in (r..s).step_by(pp) {
                    for (j, &k) in high
                        .iter()
                        .enumerate()
                        .filter(|(_, k)| runs[**k].ws > w_min)
                    {
                        model.add_constraint(constraint!(wv - runs[k].ws * h[c][j] >= 0.0));
                    }
                }
            }
            None => bytes += w_min,
        }
        if let Some(ev) = e[r] {
            bytes += ev;
            for c in (r..s).step_by(pp) {
                for (j, _) in high.iter().enumerate().filter(|(_, k)| runs[**k].expert) {
                    model.add_constraint(constraint!(ev - dispatch * h[c][j] >= 0.0));
                }
            }
        }
        match goal {
            Goal::Time => {
                model.add_constraint(constraint!(time - t_var <= 0.0));
                model.add_constraint(constraint!(bytes <= 1.0));
            }
            Goal::Chunk(bound) => {
                model.add_constraint(constraint!(time <= bound));
                model.add_constraint(constraint!(bytes <= 1.0));
            }
            Goal::Memory(bound, _) => {
                model.add_constraint(constraint!(time <= bound));
                model.add_constraint(constraint!(bytes.clone() <= 1.0));
                model.add_constraint(constraint!(bytes - z_var <= 0.0));
            }
            Goal::MemoryOnly => {
                model.add_constraint(constraint!(bytes - z_var <= 0.0));
            }
        }
    }
    let solved = match model.solve() {
        Ok(sol) => sol,
        Err(ResolutionError::Infeasible) => return Ok(Outcome::Infeasible),
        Err(e) => {
            return Err(SplitError::Solver {
                status: e.to_string(),
            });
        }
    };
    // good_lp reports a proven optimum with any positive remaining gap
    // (within HiGHS's absolute gap tolerance) as `GapLimit`.
    let optimal = !matches!(solved.status(), good_lp::SolutionStatus::TimeLimit);
    let mut bounds = vec![0usize];
    for row in fill.iter().take(s).skip(1) {
        bounds.push(
            row.iter()
                .map(|&f| solved.value(f).round().max(0.0) as usize)
                .sum(),
        );
    }
    bounds.push(n);
    if bounds.windows(2).any(|x| x[0] >= x[1]) {
        return Err(SplitError::Solver {
            status: format!(
                "HiGHS returned unordered boundaries {}",
                bounds
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        });
    }
    Ok(Outcome::Found(bounds, optimal))
}

/// Least slowest-rank time split of `p` (any v), ties broken by the
/// slowest chunk (v > 1) and then the least largest memory share when
/// `opts.tie_break`.
///
/// # Errors
/// [`SplitError::TooManyStages`]; [`SplitError::Infeasible`] naming the
/// pipeline stage that overflows and by how much under the split that
/// minimises the largest stage memory; [`SplitError::Solver`] with HiGHS's
/// status when it fails (error, time limit without a split).
pub fn solve(p: &SplitProblem, opts: &Options) -> Result<Split, SplitError> {
    p.check()?;
    let total: f64 = p.items.iter().map(|i| i.time).sum::<f64>() + p.rank_time.iter().sum::<f64>();
    let tu = if total > 0.0 {
        total / p.pp as f64
    } else {
        1.0
    };
    match solve_goal(p, opts, Goal::Time, tu)? {
        Outcome::Found(bounds, optimal) => {
            let mut best = p.split_of(bounds, optimal);
            if !opts.tie_break {
                return Ok(best);
            }
            // Exact values of the optimum; the bounds given to the later
            // programs get a hair of slack for the solver's tolerances and
            // the exact checks decide.
            let t1 = best.priced.max_time();
            let slack = 1.0 + 1e-9;
            let keeps =
                |s: &Split, t: f64| s.priced.max_time() <= t * (1.0 + 1e-12) && p.fits(&s.priced);
            if p.vpp > 1
                && let Outcome::Found(b, opt) =
                    solve_goal(p, opts, Goal::Chunk(t1 / tu * slack), tu)?
            {
                let s = p.split_of(b, best.optimal && opt);
                if keeps(&s, t1) && s.priced.max_chunk_time() < best.priced.max_chunk_time() {
                    best = s;
                }
            }
            let c1 = best.priced.max_chunk_time();
            if let Outcome::Found(b, opt) =
                solve_goal(p, opts, Goal::Memory(t1 / tu * slack, c1 / tu * slack), tu)?
            {
                let s = p.split_of(b, best.optimal && opt);
                if keeps(&s, t1)
                    && s.priced.max_chunk_time() <= c1 * (1.0 + 1e-12)
                    && s.priced.max_bytes() < best.priced.max_bytes()
                {
                    best = s;
                }
            }
            Ok(best)
        }
        Outcome::Infeasible if !opts.diagnose_infeasible => Err(SplitError::Infeasible {
            split: Vec::new(),
            stage: 0,
            peak: 0.0,
            usable: p.usable,
        }),
        Outcome::Infeasible => match solve_goal(p, opts, Goal::MemoryOnly, tu)? {
            Outcome::Found(bounds, optimal) => Err(p.infeasible(&p.split_of(bounds, optimal))),
            Outcome::Infeasible => Err(SplitError::Solver {
                status: "HiGHS found no split even without the memory limit".into(),
            }),
        },
    }
}
