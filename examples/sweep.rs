//! The scenario sweep of issue 16: every shipped model card on every
//! shipped cluster, with the card's default job on all of the cluster's
//! GPUs; prints each winner with its trust and counts the winners above the
//! measured envelope.
//!
//! Run with `cargo run --release --example sweep`.

use meshplan::spec::Catalog;
use meshplan::sweep::scenario;

fn main() -> anyhow::Result<()> {
    let cat = Catalog::shipped()?;
    let (mut total, mut fit, mut implausible, mut extrapolated) = (0, 0, 0, 0);
    for cluster in &cat.clusters {
        for model in &cat.models {
            total += 1;
            let s = scenario(&cat, model, cluster);
            let Some((layout, mfu, trust)) = &s.winner else {
                println!("{:<16} {:<16} no valid layout", s.model, s.cluster);
                continue;
            };
            fit += 1;
            implausible += usize::from(s.implausible());
            extrapolated += usize::from(s.extrapolated());
            println!(
                "{:<16} {:<16} MFU {:5.1}%  {:<12} {layout}",
                s.model,
                s.cluster,
                100.0 * mfu,
                trust.short()
            );
        }
    }
    println!(
        "{total} scenarios, {fit} with a valid layout; winners above the measured envelope: {implausible}; extrapolated: {extrapolated}"
    );
    Ok(())
}
