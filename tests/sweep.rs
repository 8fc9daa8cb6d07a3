//! The scenario sweep (issue 16) on a few models and clusters: a winner is
//! above the measured envelope only when every plan of its tie group is
//! (the ranking puts plausible plans first inside a tie), and an
//! extrapolated winner only when no validated plan ties with it.
//! `cargo run --release --example sweep` runs the whole catalog.

use meshplan::cost::Problem;
use meshplan::report::ranked_rows;
use meshplan::search::{Space, search};
use meshplan::spec::{Catalog, Job};
use meshplan::sweep::scenario;

#[test]
fn winners_lead_their_tie_group_on_validation() {
    let cat = Catalog::shipped().unwrap();
    for (m, c) in [
        ("llama3-8b", "dgx64"),
        ("gpt3-175b", "dgx-a100-3072"),
        ("mixtral-8x7b", "dgx-h100-64"),
        ("llama2-13b", "h200-64"),
    ] {
        let model = cat.model(m).unwrap();
        let cluster = cat.cluster(c).unwrap();
        let gpu = cat.gpu(&cluster.gpu).unwrap();
        let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
        let pr = Problem::new(model, gpu, cluster, &job, cluster.total_gpus());
        let r = search(
            &pr,
            &Space {
                keep_all: true,
                ..Space::default()
            },
        );
        let rows = ranked_rows(&pr, r.pool(), Default::default(), usize::MAX);
        let first: Vec<_> = rows.iter().filter(|x| x.group == 1).collect();
        let bad = |x: &&meshplan::report::Row| {
            x.trust
                .as_ref()
                .is_some_and(|t| t.envelope.as_ref().is_some_and(|e| e.implausible))
        };
        let unvalidated =
            |x: &&meshplan::report::Row| x.trust.as_ref().is_some_and(|t| t.extrapolated.is_some());
        if bad(&first[0]) {
            assert!(first.iter().all(bad), "{m} on {c}");
        } else if unvalidated(&first[0]) {
            assert!(
                first.iter().filter(|x| !bad(x)).all(unvalidated),
                "{m} on {c}"
            );
        }
        // The library sweep agrees with the ranking here.
        let s = scenario(&cat, model, cluster);
        assert_eq!(s.winner.as_ref().unwrap().0, rows[0].layout.short());
        assert_eq!(s.implausible(), bad(&&rows[0]));
    }
}
