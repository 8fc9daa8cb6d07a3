//! One stage-split ILP solve at L = 128 layers and p·v = 32 stages (issue 4).
//!
//! - `ilp/gpt-1t/p32`: GPT 1T (128 layers, Narayanan et al. 2021 Table 1) on
//!   `dgx-a100-3072`, T = 8, p = 32, D = 12, full recompute: three runs of
//!   items (embedding, 128 equal layers, output), so the program has 31
//!   boundaries over three runs; the full solve (least slowest stage, then
//!   the memory tie-break).
//! - `ilp/gpt-1t/p16v2`: the same model on p = 16 ranks with v = 2 chunks
//!   each (32 chunks; adds the slowest-chunk tie-break).
//! - `dp/gpt-1t/p32`: the dynamic-program oracle on the first problem, for
//!   comparison.
//! - `uniform/gpt-1t/p32`, `uniform/gpt-1t/p16v2`: the exact uniform-layer
//!   solver the search uses on both (every layer of GPT 1T is alike), with
//!   the same three objectives.

use criterion::{Criterion, criterion_group, criterion_main};
use meshplan::cost::Problem;
use meshplan::layout::{Layout, Recompute};
use meshplan::spec::{Catalog, Job};
use meshplan::split::{SplitProblem, dp, ilp, uniform};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("gpt-1t").unwrap();
    let cluster = cat.cluster("dgx-a100-3072").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
    let pr = Problem::new(model, gpu, cluster, &job, 3072);
    assert_eq!(model.architecture.layers, 128);
    let layout = |pp: u32, vpp: u32| Layout {
        vpp,
        recompute: Recompute::Full,
        ..Layout::dense(3072 / (8 * pp), 8, pp, 1)
    };
    let p32 = SplitProblem::for_layout(&pr, &layout(32, 1));
    let p16v2 = SplitProblem::for_layout(&pr, &layout(16, 2));
    let opts = ilp::Options::default();
    // Every problem must solve: a benchmark of an error is no benchmark.
    for p in [&p32, &p16v2] {
        let i = ilp::solve(p, &opts).expect("the benchmark problem has a split");
        let u = uniform::solve(p).expect("the uniform solver takes it");
        // The same optimum, or the comparison means nothing.
        let rel = (u.priced.max_time() - i.priced.max_time()).abs() / i.priced.max_time();
        assert!(rel < 1e-9, "uniform {u:?} vs ILP {i:?}");
    }
    c.bench_function("ilp/gpt-1t/p32", |b| {
        b.iter(|| ilp::solve(black_box(&p32), &opts))
    });
    c.bench_function("ilp/gpt-1t/p16v2", |b| {
        b.iter(|| ilp::solve(black_box(&p16v2), &opts))
    });
    c.bench_function("dp/gpt-1t/p32", |b| b.iter(|| dp::solve(black_box(&p32))));
    c.bench_function("uniform/gpt-1t/p32", |b| {
        b.iter(|| uniform::solve(black_box(&p32)))
    });
    c.bench_function("uniform/gpt-1t/p16v2", |b| {
        b.iter(|| uniform::solve(black_box(&p16v2)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
