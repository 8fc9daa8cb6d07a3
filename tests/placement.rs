//! Placement prices each axis by its worst group: checked against the plan
//! file's explicit group lists on layouts whose groups of one axis sit
//! differently (sizes that are not powers of two), and on the search that
//! used to pick T = 3 on 8-GPU nodes.

mod common;

use common::Setup;
use meshplan::cost;
use meshplan::generate::Plan;
use meshplan::layout::{Layout, Placement, RankOrder};

#[test]
fn worst_group_spans_match_the_plan_files_groups() {
    // 48 GPUs of dgx64 (6 nodes of 8); gpt-1.7b has 24 heads, so T = 3 and
    // T = 6 are legal sizes. The plan file lists every group and reports
    // the most fast domains any group spans (counted over the lists).
    let s = Setup::new("gpt-1.7b", "dgx64", Some(48));
    let pr = s.problem();
    let domain = s.cluster.fast_domain();
    let mut crossing_tp = 0;
    let mut n = 0;
    for (d, t, p, c) in [
        (16, 3, 1, 1),
        (8, 3, 2, 1),
        (4, 3, 2, 2),
        (2, 6, 2, 2),
        (4, 2, 2, 3),
        (3, 4, 2, 2),
        (6, 1, 2, 4),
        (2, 3, 8, 1),
    ] {
        for order in RankOrder::ALL {
            let l = Layout {
                order,
                ..Layout::dense(d, t, p, c)
            };
            let e = cost::evaluate(&pr, &l);
            let plan = Plan::new(&pr, &l, &e);
            let pl = Placement::new(&l, domain);
            let want = &plan.predicted.placement;
            for (name, got, listed) in [
                ("tp", pl.tp, want.tp),
                ("cp", pl.cp, want.cp),
                ("dp", pl.dp, want.dp),
                ("dp_cp", pl.dp_cp, want.dp_cp),
                ("pp", pl.pp, want.pp),
            ] {
                assert_eq!(
                    got.domains as u64,
                    listed.fast_domains,
                    "{name} of {}",
                    l.short()
                );
                assert_eq!(got.size, listed.size, "{name} of {}", l.short());
            }
            if t == 3 {
                assert!(pl.tp.crosses_domains(), "{}", l.short());
                crossing_tp += 1;
            }
            n += 1;
        }
    }
    assert_eq!(n, 16);
    assert_eq!(crossing_tp, 8);
}

#[test]
fn t3_no_longer_wins_on_8_gpu_nodes() {
    // With every TP group priced like the first ({0, 1, 2} on NVLink), the
    // search picked T = 3 for gpt-1.7b on dgx-a100-3072 (D128 T3 p4 C2,
    // 17.2M tokens/s); 256 of its 1,024 TP groups straddle two nodes.
    let s = Setup::new("gpt-1.7b", "dgx-a100-3072", None);
    let best = s.best().expect("a valid layout");
    assert_ne!(best.tp, 3, "{}", best.short());
    assert_eq!(8 % best.tp, 0, "{}", best.short());
}
