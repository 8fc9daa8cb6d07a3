//! Use meshplan as a library: rank layouts for Llama-3 70B on 64 A100s and
//! print the best three with their memory and step time.
//!
//! Run with `cargo run --release --example plan_70b`.

use meshplan::cost::Problem;
use meshplan::search::{Space, search};
use meshplan::spec::{Catalog, GIB, Job};

fn main() -> anyhow::Result<()> {
    let catalog = Catalog::shipped()?;
    let model = catalog.model("70b")?;
    let cluster = catalog.cluster("dgx64")?;
    let gpu = catalog.gpu(&cluster.gpu)?;
    let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
    let problem = Problem::new(model, gpu, cluster, &job, cluster.total_gpus());
    let result = search(
        &problem,
        &Space {
            top_k: 3,
            ..Space::default()
        },
    );
    for (i, c) in result.top.iter().enumerate() {
        println!(
            "{}. {}  peak {:.1} GiB, step {:.2} s, MFU {:.1}%",
            i + 1,
            c.layout.short(),
            c.eval.peak_bytes / GIB,
            c.eval.time.step,
            100.0 * c.eval.mfu
        );
    }
    println!(
        "{} layouts considered, {} valid",
        result.stats.considered, result.stats.valid
    );
    Ok(())
}
