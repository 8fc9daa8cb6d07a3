//! `calibrate-network` on the shipped nccl-tests samples
//! (`examples/nccl-tests/`, synthetic: see their README): the fitted links
//! reproduce each run's large-message bus bandwidth, and a search priced
//! with the overlay moves its communication by the fitted ratio.

mod common;

use std::path::Path;

use meshplan::calibrate_network;
use meshplan::nccl_tests::{self, Collective};
use meshplan::spec::Catalog;

const SAMPLES: [&str; 3] = [
    "examples/nccl-tests/all_reduce_perf-1node.txt",
    "examples/nccl-tests/all_reduce_perf-4nodes.txt",
    "examples/nccl-tests/all_gather_perf-4nodes.json",
];

fn runs() -> Vec<nccl_tests::Run> {
    SAMPLES
        .iter()
        .map(|f| nccl_tests::parse(&std::fs::read_to_string(f).unwrap(), Path::new(f)).unwrap())
        .collect()
}

#[test]
fn samples_read_as_written() {
    let r = runs();
    // 8 ranks on one host; 32 on four (8 per host); the JSON names its
    // program in args[0].
    assert_eq!(
        (r[0].collective, r[0].ranks, r[0].hosts),
        (Collective::AllReduce, 8, 1)
    );
    assert_eq!(
        (r[1].collective, r[1].ranks, r[1].hosts),
        (Collective::AllReduce, 32, 4)
    );
    assert_eq!(
        (r[2].collective, r[2].ranks, r[2].hosts),
        (Collective::AllGather, 32, 4)
    );
    // 8 B … 8 GiB in powers of two: 31 sizes (all-gather from 128 B: 27).
    assert_eq!(r[0].samples.len(), 31);
    assert_eq!(r[2].samples.len(), 27);
    // The table's busbw is algbw · 2(n−1)/n (nccl-tests doc/PERFORMANCE.md).
    for s in &r[0].samples {
        let bus = s.bytes / s.time_s * 1.75;
        assert!((bus / s.busbw - 1.0).abs() < 0.02 || s.busbw < 1e9, "{s:?}");
    }
}

#[test]
fn fitted_links_reproduce_the_large_message_bus_bandwidth() {
    let cat = Catalog::shipped().unwrap();
    let cluster = cat.cluster("dgx-h100-64").unwrap();
    let fit = calibrate_network::fit(&runs(), cluster).unwrap();
    assert_eq!(fit.levels.len(), 2);
    for c in &fit.checks {
        let err = c.fitted_busbw / c.measured_busbw - 1.0;
        assert!(err.abs() < 0.05, "{}: {:+.1}%", c.file, 100.0 * err);
    }
    // The profile's links, unfitted, price the 4-node runs 20%+ fast
    // (217 GB/s against 172–179 measured): the fit has something to do.
    let four = &fit.checks[1];
    assert!(four.profile_busbw / four.measured_busbw > 1.2, "{four:?}");
    // NVLink level: 363 GB/s of 450, the 0.80–0.82 that nccl-tests shows on
    // DGX H100 (hardware/clusters/dgx-h100-64.toml cross-check).
    let intra = &fit.levels[0];
    assert!((0.78..0.83).contains(&intra.efficiency), "{intra:?}");
}

#[test]
fn overlay_reprices_a_search_by_the_fitted_ratio() {
    let dir = std::env::temp_dir().join(format!("meshplan-net-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let overlay = dir.join("net.toml");
    let mut args = vec!["calibrate-network", "--cluster", "dgx-h100-64", "--out"];
    let o = overlay.to_str().unwrap();
    args.push(o);
    args.extend(SAMPLES);
    let out = common::meshplan(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&overlay).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let inter = table["collective"]["inter"].as_float().unwrap();

    // T8 P4 D2 on 8 nodes: each DP group is 2 GPUs on 2 nodes, so the
    // gradient reduce-scatter is one NIC phase, ½·S/β_inter + α_inter,
    // with S the gradient buckets (GBs): the latency is negligible and the
    // DP time scales as β_before/β_after = 0.9/inter.
    let explain = |profile: Option<&str>| {
        let mut a = vec![
            "explain",
            "--model",
            "70b",
            "--cluster",
            "dgx-h100-64",
            "--tp",
            "8",
            "--pp",
            "4",
            "--dp",
            "2",
            "--format",
            "json",
        ];
        if let Some(p) = profile {
            a.extend(["--profile", p]);
        }
        let out = common::meshplan(&a);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let part = |k: &str| {
            v["parts"]["time"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["part"] == k)
                .unwrap()["total_s"]
                .as_f64()
                .unwrap()
        };
        (part("dp_grad"), part("param_gather"))
    };
    let (dp0, pg0) = explain(None);
    let (dp1, pg1) = explain(Some(o));
    let want = 0.9 / inter;
    assert!((dp1 / dp0 / want - 1.0).abs() < 0.005, "{dp0} {dp1} {want}");
    assert!((pg1 / pg0 / want - 1.0).abs() < 0.005, "{pg0} {pg1} {want}");

    // The overlay names its cluster: another cluster is refused.
    let out = common::meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--profile",
        o,
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "field `cluster`: the overlay was fitted on cluster `dgx-h100-64`, not `dgx64`"
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bandwidth_above_the_link_is_refused() {
    // In-network reduction (NVLink SHARP) reports busbw above NVLink's
    // 450 GB/s; the cost model has no such path, so the fit says so.
    let text = std::fs::read_to_string(SAMPLES[0]).unwrap();
    let mut run = nccl_tests::parse(&text, Path::new(SAMPLES[0])).unwrap();
    for s in &mut run.samples {
        s.time_s /= 1.5;
    }
    let cat = Catalog::shipped().unwrap();
    let e = calibrate_network::fit(&[run], cat.cluster("dgx-h100-64").unwrap()).unwrap_err();
    assert!(
        e.contains("above intra_node.bandwidth_gbs (450.0 GB/s)"),
        "{e}"
    );
}

/// Break-test regressions: an in-place `#wrong`, a size twice, more hosts
/// than the cluster has nodes, one file given twice, and the NIC latency
/// a multi-node run alone cannot determine.
#[test]
fn broken_runs_are_named() {
    let text = std::fs::read_to_string(SAMPLES[0]).unwrap();
    let p = Path::new("x.txt");
    // The in-place #wrong is the row's last column.
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("1048576 "))
        .unwrap();
    let bad = row.trim_end().strip_suffix('0').unwrap().to_string() + "5";
    let e = nccl_tests::parse(&text.replace(row, &bad), p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("#wrong = 5: the collective returned wrong values"),
        "{e}"
    );
    let twice = text.replace(row, &format!("{row}\n{row}"));
    let e = nccl_tests::parse(&twice, p).unwrap_err().to_string();
    assert!(e.contains("size 1048576 bytes appears twice"), "{e}");

    let cat = Catalog::shipped().unwrap();
    let small = cat.cluster("dgx64").unwrap();
    let mut r = runs();
    r[1].hosts = 16;
    r[1].ranks = 128;
    let e = calibrate_network::fit(&r[1..2], small).unwrap_err();
    assert_eq!(
        e,
        "examples/nccl-tests/all_reduce_perf-4nodes.txt: 16 hosts, but cluster dgx64 has 8 nodes"
    );
    let r = runs();
    let e = calibrate_network::fit(
        &[r[0].clone(), r[0].clone()],
        cat.cluster("dgx-h100-64").unwrap(),
    )
    .unwrap_err();
    assert!(e.ends_with("given twice"), "{e}");
    // The 4-node run alone: the profile's 3 µs NVLink steps already cover
    // its small messages, so the NIC latency fits to 0 and the fit says so.
    let fit = calibrate_network::fit(&r[1..2], cat.cluster("dgx-h100-64").unwrap()).unwrap();
    assert_eq!(fit.levels[0].latency_s, 0.0);
    assert!(
        fit.notes
            .iter()
            .any(|n| n.contains("give a single-node run too")),
        "{:?}",
        fit.notes
    );
}

/// Runs priced by the cost model itself, with NCCL's latency count (base
/// 8.4 µs; a flat ring inside one node, the tree across nodes for
/// all-reduce), are fitted back to the links they were made with: the base
/// latency is known, so the four unknowns stay linear. Chosen links on
/// dgx-h100-64: NVLink 360 GB/s and 2.5 µs a step, NIC 35 GB/s and 9 µs.
#[test]
fn runs_priced_by_the_model_are_fitted_back_to_their_links() {
    use meshplan::cost::comm::Links;
    use meshplan::nccl_tests::{Run, Sample};
    let cat = Catalog::shipped().unwrap();
    let cluster = cat.cluster("dgx-h100-64").unwrap();
    let truth = Links {
        intra_bw: 360e9,
        inter_bw: 35e9,
        intra_lat: 2.5e-6,
        inter_lat: 9e-6,
        ..Links::of(cluster)
    };
    let run = |c: Collective, ranks: u32, hosts: u32, name: &str| {
        let mut r = Run {
            file: name.into(),
            collective: c,
            ranks,
            hosts,
            samples: Vec::new(),
        };
        let g = calibrate_network::group_of(&r, cluster);
        r.samples = (3..34)
            .map(|k| {
                let bytes = 2f64.powi(k);
                let t = calibrate_network::priced(c, bytes, g, &truth, &truth);
                Sample {
                    bytes,
                    time_s: t,
                    busbw: bytes / t * c.bus_factor(ranks),
                }
            })
            .collect();
        r
    };
    let runs = [
        run(Collective::AllReduce, 8, 1, "ar-1node"),
        run(Collective::AllReduce, 32, 4, "ar-4nodes"),
        run(Collective::AllGather, 32, 4, "ag-4nodes"),
    ];
    let fit = calibrate_network::fit(&runs, cluster).unwrap();
    let (intra, inter) = (&fit.levels[0], &fit.levels[1]);
    // Bandwidths from the 512 MiB–8 GiB samples, latencies from the
    // 8 B–8 KiB ones, each with the other held: within 1%.
    let near = |got: f64, want: f64| (got / want - 1.0).abs() < 0.01;
    assert!(near(intra.bandwidth, 360e9), "{intra:?}");
    assert!(near(intra.latency_s, 2.5e-6), "{intra:?}");
    assert!(near(inter.bandwidth, 35e9), "{inter:?}");
    assert!(near(inter.latency_s, 9e-6), "{inter:?}");
    for c in &fit.checks {
        assert!(c.max_time_error < 0.01, "{c:?}");
    }
}
