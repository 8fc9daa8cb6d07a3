//! The scenario sweep: every model card on every cluster profile, each with
//! its card's default job on all of the cluster's GPUs, and how trustworthy
//! each winner is (issue 16). `examples/sweep.rs` prints it for the whole
//! catalog; `tests/sweep.rs` checks a few.

use crate::cost::Problem;
use crate::report::ranked_rows;
use crate::search::{Space, search};
use crate::spec::{Catalog, Cluster, Job, Model};
use crate::trust::Trust;

/// The winner of one scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Model card name.
    pub model: String,
    /// Cluster profile name.
    pub cluster: String,
    /// The winner: its short layout, predicted MFU and trust, or `None`
    /// when no layout is valid.
    pub winner: Option<(String, f64, Trust)>,
}

impl Scenario {
    /// Whether the winner is above the measured envelope.
    pub fn implausible(&self) -> bool {
        self.winner
            .as_ref()
            .is_some_and(|(_, _, t)| t.envelope.as_ref().is_some_and(|e| e.implausible))
    }

    /// Whether the winner's regime has no measured run.
    pub fn extrapolated(&self) -> bool {
        self.winner
            .as_ref()
            .is_some_and(|(_, _, t)| t.extrapolated.is_some())
    }
}

/// Search `model` on all of `cluster`'s GPUs with the card's default job and
/// rank the plans as `search` does by default.
pub fn scenario(cat: &Catalog, model: &Model, cluster: &Cluster) -> Scenario {
    let winner = cat.gpu(&cluster.gpu).ok().and_then(|gpu| {
        let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
        let pr = Problem::new(model, gpu, cluster, &job, cluster.job_gpus());
        let r = search(
            &pr,
            &Space {
                keep_all: true,
                ..Space::default()
            },
        );
        let row = ranked_rows(&pr, r.pool(), Default::default(), 1)
            .into_iter()
            .next()?;
        Some((row.layout.short(), row.mfu, row.trust?))
    });
    Scenario {
        model: model.name.clone(),
        cluster: cluster.name.clone(),
        winner,
    }
}
