//! The plan file's ranks and process groups follow Megatron-LM's rank order
//! ([ref:megatron-parallel-state]): checked against the worked example computed
//! with Megatron's own code, and on many layouts against an independent
//! description: a rank's coordinates come from the order string's strides
//! (written out here), and an axis' group is exactly the set of ranks that
//! share every other coordinate, listed in that axis' coordinate order.

mod common;

use std::collections::BTreeSet;

use common::Setup;
use meshplan::cost;
use meshplan::generate::Plan;
use meshplan::layout::{Layout, RankOrder};
use serde_json::Value;

fn plan_json(s: &Setup, l: &Layout) -> Value {
    let pr = s.problem();
    let e = cost::evaluate(&pr, l);
    // Through the file format: what an engine would read.
    let text = serde_json::to_string(&Plan::new(&pr, l, &e)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn groups(v: &Value, name: &str) -> Vec<Vec<u64>> {
    v["groups"][name]
        .as_array()
        .unwrap_or_else(|| panic!("groups.{name} missing"))
        .iter()
        .map(|g| {
            g.as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_u64().unwrap())
                .collect()
        })
        .collect()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Check every group of `v` (the plan of `l`).
fn check_plan(v: &Value, l: &Layout, moe: bool) {
    let (t, c, d, p) = (l.tp as u64, l.cp as u64, l.dp as u64, l.pp as u64);
    let world = t * c * d * p;
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len() as u64, world);
    let ppn = u(&v["hardware"]["processes_per_node"]);
    // Coordinates: rank = Σ coordinate·stride, order string fastest first.
    for (i, r) in ranks.iter().enumerate() {
        let i = i as u64;
        assert_eq!(u(&r["rank"]), i);
        assert_eq!(u(&r["node"]), i / ppn);
        assert_eq!(u(&r["local_rank"]), i % ppn);
        let (tp, cp, dp, pp) = (u(&r["tp"]), u(&r["cp"]), u(&r["dp"]), u(&r["pp"]));
        let expect = match l.order {
            RankOrder::TpCpEpDpPp => tp + t * cp + t * c * dp + t * c * d * pp,
            RankOrder::TpCpEpPpDp => tp + t * cp + t * c * pp + t * c * p * dp,
        };
        assert_eq!(expect, i, "rank {i} coordinates {r}");
        assert!(tp < t && cp < c && dp < d && pp < p);
        // meshplan's own coords_of agrees.
        let k = meshplan::layout::coords_of(l, i);
        assert_eq!(
            (k.tp as u64, k.cp as u64, k.dp as u64, k.pp as u64),
            (tp, cp, dp, pp)
        );
        if moe {
            let (et, e, ed) = (l.etp as u64, l.ep as u64, l.edp() as u64);
            let (xt, xe, xd) = (u(&r["expert_tp"]), u(&r["ep"]), u(&r["expert_dp"]));
            let expect = match l.order {
                RankOrder::TpCpEpDpPp => xt + et * xe + et * e * xd + et * e * ed * pp,
                RankOrder::TpCpEpPpDp => xt + et * xe + et * e * pp + et * e * p * xd,
            };
            assert_eq!(
                expect,
                i,
                "rank {i} expert coordinates {r} layout {} order {:?}",
                l.short(),
                v["rank_order"]
            );
        }
    }
    // Groups: (plan name, coordinate keys it spans, in order fastest first).
    let mut kinds: Vec<(&str, Vec<&str>)> = vec![
        ("tp", vec!["tp"]),
        ("cp", vec!["cp"]),
        ("dp", vec!["dp"]),
        ("dp_cp", vec!["cp", "dp"]),
        ("pp", vec!["pp"]),
    ];
    let dense_keys = ["tp", "cp", "dp", "pp"];
    let expert_keys = ["expert_tp", "ep", "expert_dp", "pp"];
    if moe {
        kinds.push(("ep", vec!["ep"]));
        kinds.push(("expert_tp", vec!["expert_tp"]));
        kinds.push(("expert_dp", vec!["expert_dp"]));
    } else {
        for g in ["ep", "expert_tp", "expert_dp"] {
            assert!(v["groups"][g].is_null(), "dense model with groups.{g}");
        }
    }
    let size_of = |key: &str| -> u64 {
        match key {
            "tp" => t,
            "cp" => c,
            "dp" => d,
            "pp" => p,
            "ep" => l.ep as u64,
            "expert_tp" => l.etp as u64,
            "expert_dp" => l.edp() as u64,
            _ => unreachable!(),
        }
    };
    for (name, keys) in &kinds {
        let gs = groups(v, name);
        let size: u64 = keys.iter().map(|k| size_of(k)).product();
        assert_eq!(gs.len() as u64, world / size, "{name}: number of groups");
        let mut seen = BTreeSet::new();
        let grid: &[&str] = if keys.iter().all(|k| dense_keys.contains(k)) {
            &dense_keys
        } else {
            &expert_keys
        };
        for g in &gs {
            assert_eq!(g.len() as u64, size, "{name}: group size");
            for &r in g {
                assert!(seen.insert(r), "{name}: rank {r} in two groups");
            }
            // Members share every other coordinate of their grid…
            let other: Vec<&&str> = grid.iter().filter(|k| !keys.contains(k)).collect();
            let first = &ranks[g[0] as usize];
            for &r in g {
                for k in &other {
                    assert_eq!(
                        ranks[r as usize][**k], first[**k],
                        "{name}: group {g:?} differs in {k}"
                    );
                }
            }
            // …and are listed in order of the spanned coordinates, fastest first.
            for (idx, &r) in g.iter().enumerate() {
                let mut rest = idx as u64;
                for k in keys {
                    let s = size_of(k);
                    assert_eq!(
                        u(&ranks[r as usize][*k]),
                        rest % s,
                        "{name}: member {idx} of {g:?}, {k}"
                    );
                    rest /= s;
                }
            }
        }
        assert_eq!(
            seen.len() as u64,
            world,
            "{name}: every rank in exactly one group"
        );
    }
    // Embedding groups as `pretrain_gpt.py`'s `get_embedding_ranks`: the
    // first stage of each pipeline group, and the last too when the
    // embeddings are tied (untie_embeddings_and_output_weights unset).
    let tied = v["model"]["tied_embeddings"].as_bool().unwrap();
    let pps = groups(v, "pp");
    let emb = groups(v, "embedding");
    assert_eq!(emb.len(), pps.len());
    for (e, g) in emb.iter().zip(&pps) {
        let want: Vec<u64> = if g.len() > 1 && tied {
            vec![g[0], g[g.len() - 1]]
        } else {
            vec![g[0]]
        };
        assert_eq!(e, &want);
    }
}

#[test]
fn megatron_worked_example() {
    // [ref:megatron-parallel-state], computed with Megatron's code: world
    // 16, TP2 CP2 DP2 PP2, order tp-cp-ep-dp-pp.
    let s = Setup::new("llama3-8b", "dgx64", Some(16));
    let l = Layout::dense(2, 2, 2, 2);
    let v = plan_json(&s, &l);
    assert_eq!(&groups(&v, "tp")[..2], &[vec![0, 1], vec![2, 3]]);
    assert_eq!(
        &groups(&v, "cp")[..3],
        &[vec![0, 2], vec![1, 3], vec![4, 6]]
    );
    assert_eq!(&groups(&v, "dp")[..2], &[vec![0, 4], vec![1, 5]]);
    assert_eq!(&groups(&v, "pp")[..2], &[vec![0, 8], vec![1, 9]]);
    assert_eq!(groups(&v, "dp_cp")[0], vec![0, 2, 4, 6]);
    // Llama 3 unties its embeddings: `get_embedding_ranks` of
    // pretrain_gpt.py keeps only the first stage, [0] and [1].
    assert_eq!(&groups(&v, "embedding")[..2], &[vec![0], vec![1]]);
    check_plan(&v, &l, false);
    // GPT-3 ties them: first and last stage, [0, 8] and [1, 9].
    let s = Setup::new("gpt3-175b", "dgx64", Some(16));
    let v = plan_json(&s, &l);
    assert_eq!(&groups(&v, "embedding")[..2], &[vec![0, 8], vec![1, 9]]);
    check_plan(&v, &l, false);
    // Expert grid of the same example (ETP=1, EP=4, EDP=2, PP=2):
    // ep [0,1,2,3],[4,5,6,7]; expert-dp [0,4]; pp unchanged.
    let s = Setup::new("mixtral-8x7b", "dgx64", Some(16));
    let mut l = Layout::dense(2, 2, 2, 2);
    l.ep = 4;
    let v = plan_json(&s, &l);
    assert_eq!(
        &groups(&v, "ep")[..2],
        &[vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    assert_eq!(groups(&v, "expert_dp")[0], vec![0, 4]);
    assert_eq!(&groups(&v, "pp")[..2], &[vec![0, 8], vec![1, 9]]);
    check_plan(&v, &l, true);
}

#[test]
fn every_rank_in_one_group_per_axis_on_many_layouts() {
    let dense = Setup::new("llama3-8b", "dgx64", None);
    let moe = Setup::new("mixtral-8x7b", "dgx64", None);
    let mut n = 0;
    for order in RankOrder::ALL {
        for (t, c, p) in [
            (1, 1, 1),
            (8, 1, 1),
            (2, 2, 2),
            (4, 1, 4),
            (1, 4, 2),
            (2, 1, 8),
            (8, 2, 4),
        ] {
            let d = 64 / (t * c * p);
            let mut l = Layout::dense(d, t, p, c);
            l.order = order;
            check_plan(&plan_json(&dense, &l), &l, false);
            n += 1;
            // MoE: every (E, ETP) whose product divides T·C·D and E the 8 experts.
            for (e, et) in [(1, 1), (2, 1), (8, 1), (4, 2), (2, 4)] {
                if (t * c * d) % (e * et) != 0 {
                    continue;
                }
                // Megatron rejects tp-cp-ep-pp-dp with p > 1 unless the expert
                // grid's DP equals the dense DP (W4, W5: the two grids' PP
                // groups would differ); `generate` refuses those too.
                if order == RankOrder::TpCpEpPpDp && p > 1 && e * et != t * c {
                    continue;
                }
                let mut l = l.clone();
                l.ep = e;
                l.etp = et;
                check_plan(&plan_json(&moe, &l), &l, true);
                n += 1;
            }
        }
    }
    assert!(n > 40, "only {n} layouts checked");
}

#[test]
fn stages_cover_the_layers_in_model_order() {
    let s = Setup::new("70b", "dgx64", None);
    let mut l = Layout::dense(4, 8, 2, 1);
    l.vpp = 2;
    l.split = Some(vec![19, 21, 20, 20]);
    let v = plan_json(&s, &l);
    // Model chunk c sits on pipeline rank c mod p as chunk c / p; chunks tile 0..80.
    let mut ranges = vec![];
    for st in v["stages"].as_array().unwrap() {
        for ch in st["chunks"].as_array().unwrap() {
            let (r, j) = (u(&st["pp_rank"]), u(&ch["vpp_chunk"]));
            assert_eq!(u(&ch["model_chunk"]), j * 2 + r);
            ranges.push((
                u(&ch["model_chunk"]),
                u(&ch["first_layer"]),
                u(&ch["end_layer"]),
            ));
        }
    }
    ranges.sort();
    assert_eq!(
        ranges,
        vec![(0, 0, 19), (1, 19, 40), (2, 40, 60), (3, 60, 80)]
    );
    assert_eq!(v["stages"][0]["layers"], 39);
    assert_eq!(v["stages"][1]["layers"], 41);
    assert_eq!(v["stages"][0]["chunks"][0]["embedding"], true);
    assert_eq!(v["stages"][1]["chunks"][1]["output"], true);
    assert_eq!(v["pipeline"]["schedule"], "interleaved-1f1b");
}
