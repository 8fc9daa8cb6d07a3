//! Search and cost-model speed (issues 2 and 8).
//!
//! - `evaluate/70b-dgx64`: one layout priced by the cost model (one core);
//!   layouts per second = 1 / this time.
//! - `search/70b-dgx64`: the whole main job, `search --model 70b --cluster
//!   dgx64`, as the library runs it (rayon on all cores).
//! - `search/405b-h100-16k`: Llama-3 405B on 16,384 H100 (seq 8192, global
//!   batch 2048).
//! - `search/scaling/N`: how the 70B search grows from 64 to 16,384 GPUs.
//! - `search/moe/…`: MoE searches with E and ETP (issue 5): Mixtral 8x7B on
//!   dgx64 and DeepSeek-V3 on 2,048 H800 (`h800-2048`).

use criterion::{Criterion, criterion_group, criterion_main};
use meshplan::cost::{Problem, evaluate};
use meshplan::layout::{Layout, Recompute};
use meshplan::search::{Space, search};
use meshplan::spec::{Catalog, Job};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("70b").unwrap();
    let cluster = cat.cluster("dgx64").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
    let pr = Problem::new(model, gpu, cluster, &job, 64);
    let layout = Layout {
        vpp: 5,
        recompute: Recompute::Selective,
        ..Layout::dense(2, 8, 4, 1)
    };
    c.bench_function("evaluate/70b-dgx64", |b| {
        b.iter(|| evaluate(black_box(&pr), black_box(&layout)))
    });
    // The former main-job winner: ZeRO-3 priced per wrapped unit.
    let zero3 = Layout {
        zero: 3,
        sp: true,
        ..Layout::dense(16, 2, 1, 2)
    };
    c.bench_function("evaluate/70b-dgx64-zero3", |b| {
        b.iter(|| evaluate(black_box(&pr), black_box(&zero3)))
    });
    let space = Space::default();
    c.bench_function("search/70b-dgx64", |b| {
        b.iter(|| search(black_box(&pr), &space))
    });

    let big = cat.cluster("h100-16k").unwrap();
    let h100 = cat.gpu(&big.gpu).unwrap();
    let m405 = cat.model("llama3-405b").unwrap();
    let job405 = Job::new(2048, 8192);
    let pr405 = Problem::new(m405, h100, big, &job405, 16_384);
    let mut g = c.benchmark_group("search/405b");
    g.sample_size(10);
    g.bench_function("h100-16k", |b| b.iter(|| search(black_box(&pr405), &space)));
    g.finish();

    let mut g = c.benchmark_group("search/scaling-70b-h100");
    g.sample_size(10);
    for n in [64u64, 512, 4096, 16_384] {
        let pr = Problem::new(model, h100, big, &job, n);
        g.bench_function(n.to_string(), |b| b.iter(|| search(black_box(&pr), &space)));
    }
    g.finish();

    let mut g = c.benchmark_group("search/moe");
    g.sample_size(10);
    for (name, cl) in [("mixtral-8x7b", "dgx64"), ("deepseek-v3", "h800-2048")] {
        let m = cat.model(name).unwrap();
        let cl = cat.cluster(cl).unwrap();
        let gpu = cat.gpu(&cl.gpu).unwrap();
        let job = Job::new(m.defaults.global_batch, m.defaults.seq_len);
        let pr = Problem::new(m, gpu, cl, &job, cl.total_gpus());
        g.bench_function(format!("{name}-{}", cl.name), |b| {
            b.iter(|| search(black_box(&pr), &space))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
