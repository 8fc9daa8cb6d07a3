//! The scenario sweep of issue 16: every shipped model card on every
//! shipped cluster, with the card's default job on all of the cluster's
//! GPUs; prints each winner with its trust and counts the winners above the
//! measured envelope, and the five slowest searches (wall time of each
//! scenario's search in this process, the speed goal of issue 19: every
//! shipped model on every shipped cluster in under a second).
//!
//! Run with `cargo run --release --example sweep`.

use meshplan::spec::Catalog;
use meshplan::sweep::scenario;

fn main() -> anyhow::Result<()> {
    let cat = Catalog::shipped()?;
    let (mut total, mut fit, mut implausible, mut extrapolated) = (0, 0, 0, 0);
    let mut times: Vec<(f64, String, String)> = Vec::new();
    for cluster in &cat.clusters {
        for model in &cat.models {
            total += 1;
            let start = std::time::Instant::now();
            let s = scenario(&cat, model, cluster);
            times.push((
                start.elapsed().as_secs_f64(),
                s.model.clone(),
                s.cluster.clone(),
            ));
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
    times.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("slowest searches (s):");
    for (t, model, cluster) in times.iter().take(5) {
        println!("  {t:7.3}  {model} on {cluster}");
    }
    Ok(())
}
