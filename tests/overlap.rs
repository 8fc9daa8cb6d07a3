//! `--no-overlap-grad-reduce` does its whole job: the priced step exposes
//! the data-parallel collectives and the generated script leaves out the
//! overlap flags, at every ZeRO stage.

mod common;

use common::Setup;
use meshplan::cost::{self, TimePart};
use meshplan::layout::{Layout, Recompute};

fn layout(zero: u8) -> Layout {
    Layout {
        zero,
        recompute: Recompute::Selective,
        ..Layout::dense(4, 8, 2, 1)
    }
}

#[test]
fn no_overlap_exposes_the_gather_and_drops_both_flags() {
    let on = Setup::new("70b", "dgx64", None);
    let mut off = Setup::new("70b", "dgx64", None);
    off.job.overlap_grad_reduce = false;
    // The parameter overlap switch stays at its default (on): Megatron
    // refuses --overlap-param-gather without --overlap-grad-reduce (D1),
    // so it cannot take effect.
    assert!(off.job.overlap_param_gather);
    assert!(!off.job.param_gather_overlapped());
    for zero in [1u8, 2, 3] {
        let l = layout(zero);
        let e_on = cost::evaluate(&on.problem(), &l);
        let e_off = cost::evaluate(&off.problem(), &l);
        for part in [TimePart::DpGrad, TimePart::ParamGather] {
            let (a, b) = (e_on.time[part], e_off.time[part]);
            // All of the work exposed without overlap (the stage reported
            // may differ: the one whose DP terms weigh most).
            assert!(b.total > 0.0, "ZeRO-{zero} {part:?}");
            assert!(
                (b.exposed - b.total).abs() <= 1e-9 * b.total,
                "ZeRO-{zero} {part:?}: {b:?}"
            );
            // …while the default hides some of it.
            assert!(a.exposed < a.total, "ZeRO-{zero} {part:?}: {a:?}");
        }
        assert!(e_off.time.step > e_on.time.step, "ZeRO-{zero}");
        // The script and the plan file say what was priced.
        let b = off.bundle(&l);
        let argv = common::launch(&b, 0).megatron;
        assert!(
            !argv.iter().any(|a| a == "--overlap-grad-reduce"),
            "ZeRO-{zero}"
        );
        assert!(
            !argv.iter().any(|a| a == "--overlap-param-gather"),
            "ZeRO-{zero}"
        );
        let plan: serde_json::Value =
            serde_json::from_str(b.file(meshplan::generate::PLAN_FILE).unwrap()).unwrap();
        assert_eq!(plan["job"]["overlap_grad_reduce"], false, "ZeRO-{zero}");
        assert_eq!(plan["job"]["overlap_param_gather"], false, "ZeRO-{zero}");
        // With the defaults both flags are written.
        let argv = common::launch(&on.bundle(&l), 0).megatron;
        assert!(
            argv.iter().any(|a| a == "--overlap-grad-reduce"),
            "ZeRO-{zero}"
        );
        assert!(
            argv.iter().any(|a| a == "--overlap-param-gather"),
            "ZeRO-{zero}"
        );
    }
}
