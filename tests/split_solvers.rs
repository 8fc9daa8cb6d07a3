//! The stage-split ILP against independent oracles: the exact dynamic
//! program (v = 1) and brute-force enumeration of every contiguous split
//! (v > 1), on random instances; solver failures and bad shapes. The
//! uniform-layer solver against brute force, the ILP and the DP.

use meshplan::split::{Item, Split, SplitError, SplitProblem, dp, ilp, uniform};
use proptest::prelude::*;

/// Relative closeness.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
}

/// A random instance with integer-valued attributes, so every sum is exact
/// in f64 and distinct objective values differ by at least one unit (far
/// above the solver's tolerances). Items: a non-layer head (embedding), L
/// layers drawn from `kinds` layer kinds (so runs of equal layers form),
/// a non-layer tail (output).
fn instance() -> impl Strategy<Value = SplitProblem> {
    (1u32..=10, 1usize..=3)
        .prop_flat_map(|(layers, kinds)| {
            let item = || (1u32..=20, 0u32..=40, 0u32..=15, 0u32..=25);
            (
                Just(layers),
                proptest::collection::vec((item(), any::<bool>()), kinds),
                proptest::collection::vec(0usize..kinds, layers as usize),
                (item(), item()),
                1u32..=layers.min(5),
                0u32..=3,
                proptest::collection::vec(0u32..=10, 5),
                (0u32..=12, 60u32..=400),
            )
        })
        .prop_map(
            |(_, kinds, pick, (head, tail), pp, link, extra, (dispatch, usable))| {
                let mk = |(t, s, a, w): (u32, u32, u32, u32), layer: bool, expert: bool| Item {
                    time: t as f64,
                    states: s as f64,
                    activation: a as f64,
                    working_set: w as f64,
                    layer,
                    expert,
                };
                let mut items = vec![mk(head, false, false)];
                items.extend(pick.iter().map(|&k| mk(kinds[k].0, true, kinds[k].1)));
                items.push(mk(tail, false, false));
                SplitProblem {
                    items,
                    pp,
                    vpp: 1,
                    rank_time: vec![link as f64; pp as usize],
                    rank_bytes: (0..pp as usize).map(|r| extra[r] as f64).collect(),
                    // 1F1B: rank r holds p − r micro-batches.
                    in_flight: (0..pp).map(|r| (pp - r) as f64).collect(),
                    expert_bytes: dispatch as f64,
                    usable: usable as f64,
                }
            },
        )
}

/// The same with p ∈ {1, 2, 3} and v ∈ {2, 3} (interleaved in-flight counts
/// are taken as given numbers: the solvers treat them as data).
fn interleaved_instance() -> impl Strategy<Value = SplitProblem> {
    (instance(), 1u32..=3, 2u32..=3).prop_filter_map("S ≤ layers", |(mut p, pp, vpp)| {
        if pp * vpp > p.layers() {
            return None;
        }
        p.pp = pp;
        p.vpp = vpp;
        p.rank_time = vec![p.rank_time[0]; pp as usize];
        p.rank_bytes = (0..pp as usize).map(|r| 2.0 * r as f64).collect();
        p.in_flight = (0..pp)
            .map(|r| (2 * (pp - r - 1) + (vpp - 1) * pp + 1) as f64 / vpp as f64)
            .collect();
        Some(p)
    })
}

/// Every contiguous split with a layer per chunk: (slowest rank time,
/// slowest chunk, largest bytes, fits) for each.
fn all_splits(p: &SplitProblem) -> Vec<(f64, f64, f64, bool)> {
    let n = p.items.len();
    let s = p.chunks();
    let mut out = Vec::new();
    let mut bounds = vec![0usize; s + 1];
    bounds[s] = n;
    fn rec(
        p: &SplitProblem,
        c: usize,
        bounds: &mut Vec<usize>,
        out: &mut Vec<(f64, f64, f64, bool)>,
    ) {
        let s = bounds.len() - 1;
        if c == s {
            if bounds
                .windows(2)
                .all(|w| p.items[w[0]..w[1]].iter().any(|i| i.layer))
            {
                let pr = p.price(bounds);
                out.push((
                    pr.max_time(),
                    pr.max_chunk_time(),
                    pr.max_bytes(),
                    p.fits(&pr),
                ));
            }
            return;
        }
        for b in bounds[c - 1] + 1..bounds[s] {
            bounds[c] = b;
            rec(p, c + 1, bounds, out);
        }
    }
    if s == 1 {
        let pr = p.price(&bounds);
        out.push((
            pr.max_time(),
            pr.max_chunk_time(),
            pr.max_bytes(),
            p.fits(&pr),
        ));
    } else {
        rec(p, 1, &mut bounds, &mut out);
    }
    out
}

/// Brute-force optimum: least slowest rank time over fitting splits, then
/// least slowest chunk, then least largest bytes; or, if none fits, the
/// least largest bytes.
fn brute(p: &SplitProblem) -> Result<(f64, f64), f64> {
    brute3(p).map(|(t, _, m)| (t, m))
}

fn check_split(p: &SplitProblem, s: &Split) {
    assert_eq!(s.bounds.len(), p.chunks() + 1);
    assert_eq!(s.layers.iter().sum::<u32>(), p.layers());
    assert!(
        s.layers.iter().all(|k| *k >= 1),
        "empty chunk in {:?}",
        s.layers
    );
    assert!(
        p.fits(&s.priced),
        "split {:?} does not fit: {:?}",
        s.layers,
        s.priced
    );
    assert!(s.optimal);
}

fn compare(
    p: &SplitProblem,
    got: Result<Split, SplitError>,
    want: Result<(f64, f64), f64>,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(s), Ok((t, m))) => {
            check_split(p, &s);
            prop_assert!(
                close(s.priced.max_time(), t),
                "time {} vs oracle {} for {:?}",
                s.priced.max_time(),
                t,
                s.layers
            );
            prop_assert!(
                close(s.priced.max_bytes(), m),
                "bytes {} vs oracle {} for {:?}",
                s.priced.max_bytes(),
                m,
                s.layers
            );
        }
        (Err(SplitError::Infeasible { peak, usable, .. }), Err(m)) => {
            prop_assert!(close(peak, m), "min-max peak {} vs oracle {}", peak, m);
            prop_assert!(peak > usable);
        }
        (g, w) => prop_assert!(false, "solver {:?} but oracle {:?}", g, w),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The DP is exact: it matches brute force on small instances.
    #[test]
    fn dp_matches_brute_force(p in instance()) {
        compare(&p, dp::solve(&p), brute(&p))?;
    }

    /// The ILP reaches the DP's optimum (time, then memory), or both say
    /// no split fits with the same least largest memory.
    #[test]
    fn ilp_matches_dp(p in instance()) {
        let want = match dp::solve(&p) {
            Ok(s) => Ok((s.priced.max_time(), s.priced.max_bytes())),
            Err(SplitError::Infeasible { peak, .. }) => Err(peak),
            Err(e) => return Err(TestCaseError::fail(format!("DP failed: {e}"))),
        };
        compare(&p, ilp::solve(&p, &ilp::Options::default()), want)?;
    }

    /// The layer-count relaxation the search prunes with never exceeds the
    /// optimum, says "no split fits" only when none does, and is the
    /// optimum itself for one layer kind with v = 1 (and pinned items no
    /// larger in working set than a layer).
    #[test]
    fn relaxation_bounds_the_optimum(p in instance()) {
        let lb = p.relaxation();
        if let Ok((t, _)) = brute(&p) {
            let lb = lb.ok_or_else(|| TestCaseError::fail("relaxation says infeasible but a split fits"))?;
            prop_assert!(lb <= t * (1.0 + 1e-12), "bound {} above optimum {}", lb, t);
            let layers: Vec<_> = p.items.iter().filter(|i| i.layer).collect();
            let one_kind = layers.windows(2).all(|w| w[0] == w[1]);
            let small_pins = p.items.iter().filter(|i| !i.layer).all(|i| i.working_set <= layers[0].working_set);
            if one_kind && small_pins {
                prop_assert!(close(lb, t), "one kind: bound {} but optimum {}", lb, t);
            }
        }
    }

    /// The same for interleaved instances (lower bound only).
    #[test]
    fn relaxation_bounds_the_optimum_interleaved(p in interleaved_instance()) {
        if let Ok((t, _)) = brute(&p) {
            let lb = p.relaxation().ok_or_else(|| TestCaseError::fail("relaxation says infeasible but a split fits"))?;
            prop_assert!(lb <= t * (1.0 + 1e-12), "bound {} above optimum {}", lb, t);
        }
    }

    /// With v > 1 (ranks holding several chunks) the ILP matches brute force.
    #[test]
    fn ilp_matches_brute_force_interleaved(p in interleaved_instance()) {
        compare(&p, ilp::solve(&p, &ilp::Options::default()), brute(&p))?;
    }
}

/// Three identical layers on two stages, worked by hand. Items: head
/// (t 1, s 10), layers (t 4, s 20, a 5, w 3), tail (t 3, s 10); rank 0
/// holds 2 micro-batches, rank 1 one; usable 100.
/// Splits: [1 | 2]: times 1+4 = 5 and 8+3 = 11; [2 | 1]: 9 and 7.
/// Memory [2 | 1]: rank 0 = 10 + 40 + 2·10 + 3 = 73, rank 1 = 20 + 10 + 5 + 3 = 38.
/// So the optimum is [2, 1] with slowest time 9.
#[test]
fn hand_worked_two_stages() {
    let layer = Item {
        time: 4.0,
        states: 20.0,
        activation: 5.0,
        working_set: 3.0,
        layer: true,
        expert: false,
    };
    let head = Item {
        time: 1.0,
        states: 10.0,
        ..Item::default()
    };
    let tail = Item {
        time: 3.0,
        states: 10.0,
        ..Item::default()
    };
    let mut p = SplitProblem {
        items: vec![head, layer, layer, layer, tail],
        pp: 2,
        vpp: 1,
        rank_time: vec![0.0; 2],
        rank_bytes: vec![0.0; 2],
        in_flight: vec![2.0, 1.0],
        expert_bytes: 0.0,
        usable: 100.0,
    };
    for s in [
        dp::solve(&p).unwrap(),
        ilp::solve(&p, &ilp::Options::default()).unwrap(),
    ] {
        assert_eq!(s.layers, vec![2, 1]);
        assert_eq!(s.priced.rank_time, vec![9.0, 7.0]);
        assert_eq!(s.priced.rank_bytes, vec![73.0, 38.0]);
    }
    // With 70 usable bytes [2 | 1] overflows (73); [1 | 2]: rank 0 =
    // 10 + 20 + 2·5 + 3 = 43, rank 1 = 40 + 10 + 10 + 3 = 63 fits, slower.
    p.usable = 70.0;
    for s in [
        dp::solve(&p).unwrap(),
        ilp::solve(&p, &ilp::Options::default()).unwrap(),
    ] {
        assert_eq!(s.layers, vec![1, 2]);
        assert_eq!(s.priced.max_time(), 11.0);
    }
    // With 60 neither fits; the min-max-memory split is [1 | 2] at 63,
    // over by 3 on pipeline stage 1.
    p.usable = 60.0;
    for e in [
        dp::solve(&p).unwrap_err(),
        ilp::solve(&p, &ilp::Options::default()).unwrap_err(),
    ] {
        assert_eq!(
            e,
            SplitError::Infeasible {
                split: vec![1, 2],
                stage: 1,
                peak: 63.0,
                usable: 60.0
            }
        );
        let text = e.to_string();
        assert!(text.contains("pipeline stage 1"), "{text}");
        assert!(text.contains("over by"), "{text}");
    }
}

#[test]
fn more_stages_than_layers() {
    let layer = Item {
        time: 1.0,
        layer: true,
        ..Item::default()
    };
    let p = SplitProblem {
        items: vec![Item::default(), layer, layer, layer, Item::default()],
        pp: 4,
        vpp: 1,
        rank_time: vec![0.0; 4],
        rank_bytes: vec![0.0; 4],
        in_flight: vec![1.0; 4],
        expert_bytes: 0.0,
        usable: 1.0,
    };
    let want = SplitError::TooManyStages {
        stages: 4,
        pp: 4,
        vpp: 1,
        layers: 3,
    };
    assert_eq!(ilp::solve(&p, &ilp::Options::default()).unwrap_err(), want);
    assert_eq!(dp::solve(&p).unwrap_err(), want);
    assert!(want.to_string().contains("only 3 transformer layers"));
}

/// A solver that stops before finding any split reports HiGHS's status as
/// an error, never a panic.
#[test]
fn solver_failure_is_an_error() {
    // 40 distinct layers on 8 stages, no time to solve.
    let items: Vec<Item> = (0..40)
        .map(|i| Item {
            time: 1.0 + (i * 7 % 13) as f64,
            states: 1.0 + (i * 5 % 11) as f64,
            activation: 1.0,
            working_set: (i % 3) as f64,
            layer: true,
            expert: false,
        })
        .collect();
    let p = SplitProblem {
        items,
        pp: 8,
        vpp: 1,
        rank_time: vec![0.0; 8],
        rank_bytes: vec![0.0; 8],
        in_flight: (0..8).map(|r| (8 - r) as f64).collect(),
        expert_bytes: 0.0,
        usable: 1e9,
    };
    let e = ilp::solve(
        &p,
        &ilp::Options {
            time_limit_s: 0.0,
            ..ilp::Options::default()
        },
    )
    .unwrap_err();
    match &e {
        SplitError::Solver { status } => assert!(!status.is_empty()),
        other => panic!("expected a solver error, got {other:?}"),
    }
    assert!(e.to_string().contains("HiGHS"), "{e}");
}

/// A case CI's random search found: HiGHS's presolve reduced the memory
/// tie-break program to an empty one whose point broke a constraint, and
/// the solve returned "Solve error". The solver retries without presolve
/// and must then give the split worked out here (the DP agrees).
///
/// Head H (t 1, s 1), layers E E D E D E E E E, tail T (t 1), with
/// E = (t 11, s 24, ws 16, MoE) and D = (t 1, s 5, a 13, ws 20); stage
/// extras 5, 4, 0, 6, 0 bytes; in flight 5..1; dispatch 10; usable 109.
/// Time: 22 is impossible — H E E and E E T are 23, so the first and last
/// stages hold one E each, leaving E D E D E E E on three stages of at
/// most two E's, and E D E is 23. Split [2, 1, 2, 2, 2] reaches 23:
/// H E E | D | E D | E E | E E T = 23, 1, 12, 22, 23. Bytes per stage:
/// 5 + 1 + 48 + 16 + 10 = 80; 4 + 5 + 4·13 + 20 = 81;
/// 0 + 29 + 3·13 + 20 + 10 = 98; 6 + 48 + 16 + 10 = 80; 48 + 16 + 10 = 74.
/// That no other 23-time split has a smaller largest stage is the exact
/// DP's answer, checked here as well.
#[test]
fn presolve_fault_is_retried() {
    let item = |time: f64, states: f64, activation: f64, working_set: f64, layer, expert| Item {
        time,
        states,
        activation,
        working_set,
        layer,
        expert,
    };
    let e = || item(11.0, 24.0, 0.0, 16.0, true, true);
    let d = || item(1.0, 5.0, 13.0, 20.0, true, false);
    let p = SplitProblem {
        items: vec![
            item(1.0, 1.0, 0.0, 0.0, false, false),
            e(),
            e(),
            d(),
            e(),
            d(),
            e(),
            e(),
            e(),
            e(),
            item(1.0, 0.0, 0.0, 0.0, false, false),
        ],
        pp: 5,
        vpp: 1,
        rank_time: vec![0.0; 5],
        rank_bytes: vec![5.0, 4.0, 0.0, 6.0, 0.0],
        in_flight: vec![5.0, 4.0, 3.0, 2.0, 1.0],
        expert_bytes: 10.0,
        usable: 109.0,
    };
    let s = ilp::solve(&p, &ilp::Options::default()).expect("the retry without presolve solves");
    check_split(&p, &s);
    assert_eq!(s.layers, vec![2, 1, 2, 2, 2]);
    assert_eq!(s.priced.max_time(), 23.0);
    assert_eq!(s.priced.max_bytes(), 98.0);
    let exact = dp::solve(&p).expect("a split fits");
    assert_eq!(exact.layers, s.layers);
}

/// The second case CI's random search found the same day: with presolve,
/// HiGHS declared this feasible time program infeasible. Same shape as
/// [`presolve_fault_is_retried`] with E = (t 6, s 24, ws 14, MoE),
/// D = (t 1, s 6, a 13, ws 19), tail T = (t 2, s 5, a 9), extras
/// 1, 4, 0, 6, 5, usable 114. The exact DP's split [2, 1, 2, 2, 2],
/// H E E | D | E D | E E | E E T, priced by hand: times 13, 1, 7, 12, 14;
/// bytes 1 + 1 + 48 + 14 + 10 = 74, 4 + 6 + 4·13 + 19 = 81,
/// 0 + 30 + 3·13 + 19 + 10 = 98, 6 + 48 + 14 + 10 = 78,
/// 5 + 53 + 9 + 14 + 10 = 91. (Faster splits exist on time alone, e.g.
/// [2, 3, 2, 1, 1] at 13, but D E D with 4 micro-batches in flight needs
/// 4 + 36 + 104 + 19 + 10 = 173 > 114.)
#[test]
fn presolve_false_infeasible_is_retried() {
    let item = |time: f64, states: f64, activation: f64, working_set: f64, layer, expert| Item {
        time,
        states,
        activation,
        working_set,
        layer,
        expert,
    };
    let e = || item(6.0, 24.0, 0.0, 14.0, true, true);
    let d = || item(1.0, 6.0, 13.0, 19.0, true, false);
    let p = SplitProblem {
        items: vec![
            item(1.0, 1.0, 0.0, 0.0, false, false),
            e(),
            e(),
            d(),
            e(),
            d(),
            e(),
            e(),
            e(),
            e(),
            item(2.0, 5.0, 9.0, 0.0, false, false),
        ],
        pp: 5,
        vpp: 1,
        rank_time: vec![0.0; 5],
        rank_bytes: vec![1.0, 4.0, 0.0, 6.0, 5.0],
        in_flight: vec![5.0, 4.0, 3.0, 2.0, 1.0],
        expert_bytes: 10.0,
        usable: 114.0,
    };
    let s = ilp::solve(&p, &ilp::Options::default()).expect("a split fits");
    check_split(&p, &s);
    assert_eq!(s.layers, vec![2, 1, 2, 2, 2]);
    assert_eq!(s.priced.rank_time, vec![13.0, 1.0, 7.0, 12.0, 14.0]);
    assert_eq!(s.priced.rank_bytes, vec![74.0, 81.0, 98.0, 78.0, 91.0]);
}

/// A random problem the uniform-layer solver takes: a head, L identical
/// layers (dense or MoE), a tail, p ≤ `max_p` ranks, v ≤ `max_v`, L ≤
/// `max_l`, integer attributes (exact sums), point-to-point times that
/// differ by rank with v > 1, and usable memory drawn
/// between half and two and a half times a rough per-rank need (so many
/// instances are tight and some have no fitting split). In-flight counts
/// follow 1F1B (v = 1) or the interleaved schedule's shape.
fn uniform_instance(max_p: u32, max_v: u32, max_l: u32) -> impl Strategy<Value = SplitProblem> {
    let item = || (0u32..=20, 0u32..=40, 0u32..=15, 0u32..=25);
    (1u32..=max_p, 1u32..=max_v)
        .prop_flat_map(move |(pp, vpp)| {
            (
                Just(pp),
                Just(vpp),
                pp * vpp..=max_l.max(pp * vpp),
                ((1u32..=20, 0u32..=40, 0u32..=15, 0u32..=25), any::<bool>()),
                (item(), item(), any::<bool>()),
                (0u32..=3, proptest::collection::vec(0u32..=12, pp as usize)),
                proptest::collection::vec(0u32..=10, pp as usize),
                (0u32..=12, 50u32..=250),
            )
        })
        .prop_map(
            |(
                pp,
                vpp,
                layers,
                (lay, expert),
                (head, tail, tail_expert),
                (link, bump),
                extra,
                (dispatch, pct),
            )| {
                let mk = |(t, s, a, w): (u32, u32, u32, u32), layer: bool, expert: bool| Item {
                    time: t as f64,
                    states: s as f64,
                    activation: a as f64,
                    working_set: w as f64,
                    layer,
                    expert,
                };
                let layer = mk(lay, true, expert);
                let mut items = vec![mk(head, false, false)];
                items.extend(std::iter::repeat_n(layer, layers as usize));
                items.push(mk(tail, false, tail_expert));
                let in_flight: Vec<f64> = (0..pp)
                    .map(|r| {
                        if vpp == 1 {
                            (pp - r) as f64
                        } else {
                            (2 * (pp - r - 1) + (vpp - 1) * pp + 1) as f64 / vpp as f64
                        }
                    })
                    .collect();
                let per = (layers / pp) as f64;
                let need = (0..pp as usize)
                    .map(|r| {
                        extra[r] as f64
                            + per * (layer.states + in_flight[r] * layer.activation)
                            + layer.working_set
                            + dispatch as f64
                    })
                    .fold(0.0, f64::max);
                SplitProblem {
                    items,
                    pp,
                    vpp,
                    // Unequal point-to-point times only with v > 1: they
                    // make ties in the slowest rank that the slowest-chunk
                    // program must break (with v = 1 the ILP and the DP
                    // read a split's chunks differently when they differ).
                    rank_time: bump
                        .iter()
                        .map(|&b| (link + if vpp > 1 { b } else { 0 }) as f64)
                        .collect(),
                    rank_bytes: extra.iter().map(|&x| x as f64).collect(),
                    in_flight,
                    expert_bytes: dispatch as f64,
                    usable: (need * pct as f64 / 100.0).floor().max(1.0),
                }
            },
        )
}

/// Brute-force optimum with all three objectives: (least slowest rank,
/// then least slowest chunk, then least largest bytes) over fitting
/// splits, or the least largest bytes when none fits.
fn brute3(p: &SplitProblem) -> Result<(f64, f64, f64), f64> {
    let all = all_splits(p);
    let fit: Vec<_> = all.iter().filter(|x| x.3).collect();
    if fit.is_empty() {
        return Err(all.iter().map(|x| x.2).fold(f64::INFINITY, f64::min));
    }
    let t = fit.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    let c = fit
        .iter()
        .filter(|x| x.0 == t)
        .map(|x| x.1)
        .fold(f64::INFINITY, f64::min);
    let m = fit
        .iter()
        .filter(|x| x.0 == t && x.1 == c)
        .map(|x| x.2)
        .fold(f64::INFINITY, f64::min);
    Ok((t, c, m))
}

/// The uniform solver's answer as (T*, C*, Z*) after checking its split
/// is feasible under `price`, or its infeasible peak.
fn uniform_values(p: &SplitProblem) -> Result<Result<(f64, f64, f64), f64>, TestCaseError> {
    prop_assert!(uniform::qualifies(p));
    match uniform::solve_values(p) {
        Ok(s) => {
            check_split(p, &s.split);
            prop_assert_eq!(&s.split.priced, &p.price(&s.split.bounds));
            prop_assert_eq!(s.slowest_rank, s.split.priced.max_time());
            Ok(Ok((s.slowest_rank, s.slowest_chunk, s.largest_bytes)))
        }
        Err(SplitError::Infeasible {
            split,
            stage,
            peak,
            usable,
        }) => {
            let bounds = p
                .bounds_of(&split)
                .ok_or_else(|| TestCaseError::fail("bad split"))?;
            let priced = p.price(&bounds);
            prop_assert_eq!(priced.max_bytes(), peak);
            prop_assert_eq!(priced.rank_bytes[stage as usize], peak);
            prop_assert!(peak > usable);
            Ok(Err(peak))
        }
        Err(e) => Err(TestCaseError::fail(format!("uniform solver failed: {e}"))),
    }
}

/// The ILP's (T, C, Z) of its split, or its infeasible peak.
fn ilp_values(p: &SplitProblem) -> Result<Result<(f64, f64, f64), f64>, TestCaseError> {
    match ilp::solve(p, &ilp::Options::default()) {
        Ok(s) => {
            check_split(p, &s);
            Ok(Ok((
                s.priced.max_time(),
                s.priced.max_chunk_time(),
                s.priced.max_bytes(),
            )))
        }
        Err(SplitError::Infeasible { peak, .. }) => Ok(Err(peak)),
        Err(e) => Err(TestCaseError::fail(format!("ILP failed: {e}"))),
    }
}

fn same_values(
    got: Result<(f64, f64, f64), f64>,
    want: Result<(f64, f64, f64), f64>,
    what: &str,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(g), Ok(w)) => {
            prop_assert!(
                close(g.0, w.0) && close(g.1, w.1) && close(g.2, w.2),
                "(T, C, Z) {:?} vs {} {:?}",
                g,
                what,
                w
            );
        }
        (Err(g), Err(w)) => prop_assert!(close(g, w), "min-max peak {} vs {} {}", g, what, w),
        (g, w) => prop_assert!(false, "uniform {:?} but {} {:?}", g, what, w),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The uniform-layer solver is exact: brute force over every split
    /// (p ≤ 3, v ≤ 3, L ≤ 9) gives the same three optima.
    #[test]
    fn uniform_matches_brute_force(p in uniform_instance(3, 3, 9)) {
        same_values(uniform_values(&p)?, brute3(&p), "brute force")?;
    }

    /// On larger problems (p ≤ 6, v ≤ 4, L ≤ 48) it reaches the ILP's three
    /// optima (the ILP's tolerances are far below the integer steps), and
    /// the DP's two with v = 1.
    #[test]
    fn uniform_matches_ilp_and_dp(p in uniform_instance(6, 4, 48)) {
        let got = uniform_values(&p)?;
        same_values(got, ilp_values(&p)?, "ILP")?;
        if p.vpp == 1 {
            let dp = match dp::solve(&p) {
                Ok(s) => Ok((s.priced.max_time(), s.priced.max_chunk_time(), s.priced.max_bytes())),
                Err(SplitError::Infeasible { peak, .. }) => Err(peak),
                Err(e) => return Err(TestCaseError::fail(format!("DP failed: {e}"))),
            };
            same_values(got, dp, "DP")?;
        }
    }
}

/// A catalog problem: Llama 3 70B on dgx64 with p = 4, v = 5 (one of the
/// main job's interleaved layouts) — the uniform solver gives the ILP's
/// three optima and a split that fits.
#[test]
fn uniform_matches_ilp_on_70b() {
    use meshplan::cost::Problem;
    use meshplan::layout::{Layout, Recompute};
    use meshplan::spec::{Catalog, Job};
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("70b").unwrap();
    let cluster = cat.cluster("dgx64").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
    let pr = Problem::new(model, gpu, cluster, &job, 64);
    for (pp, vpp, tp) in [(4, 5, 2), (4, 1, 2), (8, 2, 8), (2, 8, 4)] {
        let l = Layout {
            vpp,
            recompute: Recompute::Full,
            zero: 1,
            ..Layout::dense(64 / (tp * pp), tp, pp, 1)
        };
        let sp = SplitProblem::for_layout(&pr, &l);
        assert!(uniform::qualifies(&sp), "p{pp} v{vpp}");
        let u = uniform::solve_values(&sp).expect("fits");
        let i = ilp::solve(&sp, &ilp::Options::default()).expect("fits");
        assert!(sp.fits(&u.split.priced));
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs();
        assert!(
            rel(u.slowest_rank, i.priced.max_time()) < 1e-9,
            "p{pp} v{vpp}"
        );
        assert!(u.slowest_rank <= i.priced.max_time());
        assert!(
            rel(u.slowest_chunk, i.priced.max_chunk_time()) < 1e-9,
            "p{pp} v{vpp}"
        );
        assert!(
            rel(u.largest_bytes, i.priced.max_bytes()) < 1e-9,
            "p{pp} v{vpp}"
        );
    }
}
