//! Scale-out tiers in cluster profiles (issue 17): a group that spans two
//! pods of an oversubscribed fabric is priced at the uplink rate, the
//! profile's errors name the tier and field, and the NVL72 profile keeps
//! a 72-GPU scale-up domain over 4-GPU hosts.

mod common;

use common::{hardware_dir_with, meshplan};
use meshplan::cost::{self, Problem, TimePart};
use meshplan::layout::{Layout, Placement};
use meshplan::spec::{Catalog, Job};

/// Llama 3 405B on h100-16k with D = 128 over all 16,384 GPUs (T = 8,
/// p = 16, rank order tp-cp-ep-pp-dp so DP members are T·p = 128 ranks
/// apart): every DP group spans the whole cluster, so its gradient
/// reduce-scatter crosses the 1:7 aggregation layer above the 3,072-GPU
/// pods; without the tier it runs at the NIC rate. (In the default order a
/// DP group covers 1,024 consecutive ranks, which never straddle a pod
/// boundary at multiples of 3,072: tier 0, and only PP crosses pods.) The reduce-scatter's
/// cross-node phase is 127/128·(S/8) over 45 GB/s or over 45/7 GB/s, so
/// its wire time grows by nearly 7× (the NVLink phase is unchanged).
#[test]
fn dp_across_pods_pays_the_oversubscription() {
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("llama3-405b").unwrap();
    let cluster = cat.cluster("h100-16k").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(2048, 8192);
    let mut l = Layout {
        sp: true,
        ..Layout::dense(128, 8, 16, 1)
    };
    assert_eq!(Placement::of(&l, cluster).dp.tier, 0);
    l.order = meshplan::layout::RankOrder::TpCpEpPpDp;
    let pl = Placement::of(&l, cluster);
    assert_eq!((pl.tp.tier, pl.dp.tier, pl.pp.tier), (0, 1, 0));
    let pr = Problem::new(model, gpu, cluster, &job, 16384);
    let with = cost::evaluate(&pr, &l);
    let mut flat = cluster.clone();
    flat.tiers.clear();
    let pr_flat = Problem::new(model, gpu, &flat, &job, 16384);
    let without = cost::evaluate(&pr_flat, &l);
    let (a, b) = (
        with.time[TimePart::DpGrad].total,
        without.time[TimePart::DpGrad].total,
    );
    assert!(a > 5.0 * b && a < 7.0 * b, "{a} vs {b}");
    assert!(with.time.step > without.time.step);
}

#[test]
fn bad_tiers_name_the_field() {
    for (edit, needle) in [
        (
            "[[tiers]]\nname = \"pod\"\ngpus = 3004\noversubscription = 7.0\n",
            "tiers[0].gpus",
        ),
        (
            "[[tiers]]\nname = \"pod\"\ngpus = 3072\noversubscription = 0.5\n",
            "tiers[0].oversubscription",
        ),
        (
            "[[tiers]]\nname = \"pod\"\ngpus = 3072\noversubscription = 1e12\n",
            "tiers[0].oversubscription",
        ),
        (
            "[[tiers]]\nname = \"\"\ngpus = 3072\noversubscription = 2.0\n",
            "tiers[0].name",
        ),
        (
            "[[tiers]]\nname = \"pod\"\ngpus = 4294967288\noversubscription = 2.0\n",
            "tiers[0].gpus",
        ),
    ] {
        let d = hardware_dir_with("tiers", "clusters/h100-16k.toml", |t| {
            let cut = t.find("[[tiers]]").unwrap();
            format!("{}{edit}", &t[..cut])
        });
        let o = meshplan(&[
            "search",
            "--model",
            "8b",
            "--cluster",
            "h100-16k",
            "--hardware-dir",
            d.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("h100-16k.toml") && err.contains(needle),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// GB200 NVL72: 4-GPU trays, 72-GPU NVLink domains, of which a job takes
/// 16 trays (64 GPUs: the profile's `segment`). D = 8, T = 8, E = 8,
/// p = 8 on the job's 512 GPUs: a TP group, an EP group and a DP group
/// (ranks 0, 8, …, 56) stay in one rack on NVLink although they span up to
/// 16 trays; the PP group (64 ranks apart) crosses racks on the NICs.
#[test]
fn nvl72_groups_of_64_stay_on_nvlink() {
    let cat = Catalog::shipped().unwrap();
    let c = cat.cluster("gb200-nvl72-576").unwrap();
    assert_eq!(
        (
            c.gpus_per_node,
            c.scale_up_domain,
            c.fast_domain(),
            c.total_gpus(),
            c.job_gpus()
        ),
        (4, 72, 64, 576, 512)
    );
    let mut l = Layout::dense(8, 8, 8, 1);
    l.ep = 8;
    let pl = Placement::of(&l, c);
    assert!(!pl.tp.crosses_domains() && !pl.ep.crosses_domains());
    assert!(!pl.dp.crosses_domains());
    assert!(pl.pp.crosses_domains() && pl.pp.domains == 8);
}

/// Links of a two-level rail-optimized fat tree, by hand, efficiencies 1
/// and latencies 0: NVLink 450 GB/s and one 400 Gb/s (50 GB/s) NIC per GPU;
/// leaves per rail, a spine above at 2:1.
fn rail_links() -> meshplan::cost::comm::Links {
    meshplan::cost::comm::Links {
        intra_bw: 450e9,
        inter_bw: 50e9,
        intra_lat: 0.0,
        inter_lat: 0.0,
        base_lat: 0.0,
        oversub: [1.0, 2.0, 2.0, 2.0],
        tier_lat: [0.0; meshplan::spec::hardware::MAX_TIERS + 1],
    }
}

/// Issue 17's hand-worked case: 4 nodes of 8 GPUs under one rail-optimized
/// scalable unit (tier of 32 GPUs, `rails`), spine 2:1.
///
/// - D = 4 after T = 8 (tp-cp-ep-dp-pp): DP members 8 ranks apart, one
///   per node at the same local rank: rail-aligned. Its all-reduce of
///   S = 1 GB stays on the rail's leaf: 2·(3/4)·S / 50 GB/s = 0.03 s, as
///   on a full-bisection fabric; bytes per GPU 1.5 GB on the leaf, 0 on
///   the spine.
/// - E = 32 across the 4 nodes (T = 1, D = 32): each rank keeps 8/32 of its
///   buffer on the node; 24/32 leaves it, of which 3/32 goes to the three
///   same-rail peers and 21/32 crosses the spine. NIC: 24/32·S / 50 GB/s =
///   0.015 s; spine: 21/32·S / (50/2 GB/s) = 0.02625 s, which decides;
///   NVLink 7/32·S / 450 GB/s = 0.49 ms is hidden. Without rails the same
///   all-to-all takes the NIC's 0.015 s: 1.75× slower on the 2:1 spine.
/// - PP neighbours 4 ranks apart (T = 4, p = 8): the send from local rank
///   4 of node 0 to local rank 0 of node 1 changes rail: S / 25 GB/s.
#[test]
fn rail_aligned_dp_stays_on_the_leaf_all_to_all_pays_the_spine() {
    use meshplan::cost::comm::{all_reduce, all_to_all, p2p};
    use meshplan::cost::levels::{Collective, level_bytes};
    let links = rail_links();
    let s = 1e9;
    let rails = |l: &Layout| Placement::with_levels(l, 8, &[32], true);

    let dp = rails(&Layout::dense(4, 8, 1, 1)).dp;
    assert!(dp.on_rails && dp.rail_aligned, "{dp:?}");
    assert!((all_reduce(s, dp, &links) - 0.03).abs() < 1e-12);
    let b = level_bytes(Collective::AllReduce, s, dp);
    assert_eq!((b[0], b[1], b[2]), (0.0, 1.5e9, 0.0));

    let mut l = Layout::dense(32, 1, 1, 1);
    l.ep = 32;
    let ep = rails(&l).ep;
    assert_eq!((ep.per_domain, ep.domains, ep.on_rails), (8, 4, true));
    let t = all_to_all(s, ep, &links);
    assert!((t - 21.0 / 32.0 * s / 25e9).abs() < 1e-12, "{t}");
    assert!((t - 0.02625).abs() < 1e-12);
    let flat = all_to_all(s, Placement::new(&l, 8).ep, &links);
    assert!((flat - 0.015).abs() < 1e-12, "{flat}");
    assert!((t / flat - 1.75).abs() < 1e-12);
    let b = level_bytes(Collective::AllToAll, s, ep);
    let want = [7.0 / 32.0 * s, 24.0 / 32.0 * s, 21.0 / 32.0 * s];
    for (got, want) in b.iter().zip(want) {
        assert!((got - want).abs() < 1e-3, "{b:?}");
    }

    let pp = rails(&Layout::dense(1, 4, 8, 1)).pp;
    assert!(pp.on_rails && pp.per_domain == 2, "{pp:?}");
    assert!((p2p(s, pp, &links) - s / 25e9).abs() < 1e-12);
    // D = 4 after T = 8 again, its neighbours a node apart on one rail:
    // the PP send of T = 8, p = 4 stays on the leaf, S / 50 GB/s.
    let pp = rails(&Layout::dense(1, 8, 4, 1)).pp;
    assert!(pp.rail_aligned && pp.per_domain == 1);
    assert!((p2p(s, pp, &links) - s / 50e9).abs() < 1e-12);
}

/// The shipped rail-optimized profile: on h100-rail-32k's first 256 GPUs
/// (one scalable unit) a rail-aligned DP gradient reduction costs what it
/// costs with the rails switched off, and DeepSeek-V3's E = 32 all-to-all
/// over 4 nodes costs more (its cross-rail share climbs to the 2:1 spine).
#[test]
fn shipped_rail_profile_prices_rails() {
    let cat = Catalog::shipped().unwrap();
    let rail = cat.cluster("h100-rail-32k").unwrap();
    assert!(rail.tiers[0].rails && rail.tiers[0].oversubscription == 2.0);
    let mut flat = rail.clone();
    flat.tiers[0].rails = false;
    let model = cat.model("deepseek-v3").unwrap();
    let gpu = cat.gpu(&rail.gpu).unwrap();
    let job = Job::new(1024, 4096);
    let mut l = Layout::dense(32, 1, 8, 1);
    l.ep = 32;
    l.split = None;
    let pr = Problem::new(model, gpu, rail, &job, 256);
    let pr_flat = Problem::new(model, gpu, &flat, &job, 256);
    let (a, b) = (cost::evaluate(&pr, &l), cost::evaluate(&pr_flat, &l));
    let pl = Placement::of(&l, rail);
    assert!(pl.dp.on_rails && pl.dp.rail_aligned);
    assert!(pl.ep.on_rails && pl.ep.domains == 4);
    let (ea, eb) = (
        a.time[TimePart::EpComm].total,
        b.time[TimePart::EpComm].total,
    );
    assert!(ea > 1.5 * eb, "{ea} vs {eb}");
    // E = 32 of D = 32 leaves expert DP at 1; the dense DP·CP group (32
    // consecutive ranks, 8 per node on 4 nodes) holds the same local ranks
    // on every node, so its ring stays on the rails: unchanged.
    assert_eq!(
        a.time[TimePart::DpGrad].total,
        b.time[TimePart::DpGrad].total
    );
}

/// DeepSeek-V3's search winner on gb200-nvl72-576 (D = 128, T = 1,
/// p = 4, E = 64 on the job's 512 GPUs) keeps each EP group of 64 in one
/// rack's 16 trays: the all-to-all runs on NVLink only. On DGX H100
/// (dgx-h100-1024, 512 GPUs) the same EP group spans 8 nodes of 8, and
/// 56/64 of each rank's buffer S crosses InfiniBand.
///
/// One all-to-all, hand-worked with the profiles' links (NVLink 900 GB/s
/// × 0.82 = 738 GB/s, latency 3.4 µs; NIC 400 Gb/s = 50 GB/s × 0.9 =
/// 45 GB/s, latency 14 µs: NCCL's Ring/Simple step latencies, one per
/// message here):
///   NVL72:    63/64 · S / 738 GB/s + 3.4 µs
///   DGX H100: 56/64 · S / 45 GB/s + 14 µs (the NVLink share 7/64 · S /
///             369 GB/s is hidden under it)
/// With S = 477.2 MB (455.1 MiB: `moe::all_to_all_bytes`, b = 1,
/// s = 4,096, k = 8, h = 7,168, λ from the routing floor) that is 0.6399 ms
/// against 9.293 ms: 14.5× slower. A stage's EP time has the same ratio
/// (same count of all-to-alls of the same size).
#[test]
fn nvl72_ep64_on_nvlink_dgx_h100_on_infiniband() {
    use meshplan::cost::comm::{Links, all_to_all};
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("deepseek-v3").unwrap();
    let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
    let mut l = Layout::dense(128, 1, 4, 1);
    l.ep = 64;
    l.split = Some(vec![14, 16, 16, 15]);
    let nvl = cat.cluster("gb200-nvl72-576").unwrap();
    let dgx = cat.cluster("dgx-h100-1024").unwrap();
    let (g_nvl, g_dgx) = (Placement::of(&l, nvl).ep, Placement::of(&l, dgx).ep);
    assert_eq!((g_nvl.per_domain, g_nvl.domains), (64, 1));
    assert_eq!((g_dgx.per_domain, g_dgx.domains), (8, 8));
    let gb200 = cat.gpu("gb200").unwrap();
    let h100 = cat.gpu("h100-sxm").unwrap();
    let pr_nvl = Problem::new(model, gb200, nvl, &job, 512);
    let pr_dgx = Problem::new(model, h100, dgx, &job, 512);
    let load = cost::layer::moe_load(&pr_nvl, &l);
    let s = cost::moe::all_to_all_bytes(model, 4096.0, 1.0, load);
    assert!((s / 1e6 - 477.2).abs() < 0.1, "{s}");
    let hand_nvl = 63.0 / 64.0 * s / 738e9 + 3.4e-6;
    let hand_dgx = 56.0 / 64.0 * s / 45e9 + 14e-6;
    let (t_nvl, t_dgx) = (
        all_to_all(s, g_nvl, &Links::of(nvl)),
        all_to_all(s, g_dgx, &Links::of(dgx)),
    );
    assert!(
        (t_nvl / hand_nvl - 1.0).abs() < 1e-9,
        "{t_nvl} vs {hand_nvl}"
    );
    assert!(
        (t_dgx / hand_dgx - 1.0).abs() < 1e-9,
        "{t_dgx} vs {hand_dgx}"
    );
    let ratio = hand_dgx / hand_nvl;
    assert!((ratio - 14.52).abs() < 0.01, "{ratio}");
    // Stage 1 (16 MoE layers) on both: its EP time per micro-batch has
    // the ratio of one all-to-all. (The step's EP part is the critical
    // stage's, which is stage 1 on DGX H100 but stage 3, 15 MoE layers, on
    // NVL72: 16/15 apart.)
    let ep_of = |pr: &Problem| cost::rank_costs(pr, &l)[1].items.time[TimePart::EpComm].total;
    let stage_ratio = ep_of(&pr_dgx) / ep_of(&pr_nvl);
    assert!(
        (stage_ratio / ratio - 1.0).abs() < 1e-9,
        "{stage_ratio} vs {ratio}"
    );
    let (e_nvl, e_dgx) = (cost::evaluate(&pr_nvl, &l), cost::evaluate(&pr_dgx, &l));
    assert!(e_dgx.time.step > e_nvl.time.step);
}

/// `search` on gb200-nvl72-576 ranks DeepSeek-V3 plans with E > 8 first,
/// their EP groups inside one NVLink domain; `explain --format json` lists
/// the EP all-to-all on the NVLink level only, and on DGX H100 nodes on
/// NVLink and the NIC.
#[test]
fn search_and_explain_show_ep_inside_the_nvl72_domain() {
    let o = meshplan(&[
        "search",
        "--model",
        "deepseek-v3",
        "--cluster",
        "gb200-nvl72-576",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cat = Catalog::shipped().unwrap();
    let c = cat.cluster("gb200-nvl72-576").unwrap();
    for row in v["rows"].as_array().unwrap() {
        let l: Layout = serde_json::from_value(row["layout"].clone()).unwrap();
        assert!(l.ep > 8 || l.tp > 8, "{}", l.short());
        let pl = Placement::of(&l, c);
        assert!(
            !pl.ep.crosses_domains() && !pl.tp.crosses_domains(),
            "{}",
            l.short()
        );
    }
    let explain = |cluster: &str| -> serde_json::Value {
        let o = meshplan(&[
            "explain",
            "--model",
            "deepseek-v3",
            "--cluster",
            cluster,
            "--gpus",
            "512",
            "--dp",
            "128",
            "--tp",
            "1",
            "--pp",
            "4",
            "--ep",
            "64",
            "--recompute",
            "none",
            "--zero",
            "1",
            "--split",
            "14,16,16,15",
            "--format",
            "json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let levels_of = |v: &serde_json::Value, axis: &str| -> Vec<String> {
        let g = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["axis"] == axis)
            .unwrap_or_else(|| panic!("no {axis} group"));
        serde_json::from_value(g["levels"].clone()).unwrap()
    };
    let nvl = explain("gb200-nvl72-576");
    assert_eq!(levels_of(&nvl, "ep"), ["NVLink"]);
    assert_eq!(levels_of(&nvl, "pp"), ["NIC"]);
    assert_eq!(nvl["levels"][0]["gpus"], 64);
    let dgx = explain("dgx-h100-1024");
    assert_eq!(levels_of(&dgx, "ep"), ["NVLink", "NIC"]);
    // The table names the levels and, on the EP row, NVLink only.
    let o = meshplan(&[
        "explain",
        "--model",
        "deepseek-v3",
        "--cluster",
        "gb200-nvl72-576",
        "--dp",
        "128",
        "--tp",
        "1",
        "--pp",
        "4",
        "--ep",
        "64",
        "--recompute",
        "none",
        "--zero",
        "1",
        "--split",
        "14,16,16,15",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Network levels: NVLink (64 GPUs"), "{text}");
    let ep_row = text
        .lines()
        .find(|l| l.contains("one token dispatch"))
        .expect("EP row");
    assert!(
        ep_row.contains("NVLink:") && !ep_row.contains("NIC:"),
        "{ep_row}"
    );
}

#[test]
fn inconsistent_levels_name_the_field() {
    for (file, edit, needle) in [
        // A second tier that is not a multiple of the first.
        (
            "clusters/h100-100k.toml",
            ("gpus = 24576", "gpus = 4608"),
            "tiers[1].gpus",
        ),
        // Rails above the first tier.
        (
            "clusters/h100-100k.toml",
            (
                "above = \"inter-hall\"",
                "above = \"inter-hall\"\nrails = true",
            ),
            "tiers[1].rails",
        ),
        // A scale-up domain larger than the cluster.
        (
            "clusters/dgx-b200-64.toml",
            ("scale_up_domain = 8 ", "scale_up_domain = 128 "),
            "scale_up_domain",
        ),
        // A segment larger than the domain's 18 trays.
        (
            "clusters/gb200-nvl72-576.toml",
            ("segment = 16", "segment = 19"),
            "segment",
        ),
    ] {
        let name = file
            .trim_start_matches("clusters/")
            .trim_end_matches(".toml");
        let d = hardware_dir_with("levels", file, |t| {
            assert!(t.contains(edit.0), "{file}: {}", edit.0);
            t.replacen(edit.0, edit.1, 1)
        });
        let o = meshplan(&[
            "search",
            "--model",
            "8b",
            "--cluster",
            name,
            "--hardware-dir",
            d.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{file}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(file.trim_start_matches("clusters/")) && err.contains(needle),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--max-tier 0` on the rail-optimized profile rejects layouts whose EP
/// (or TP, CP, ETP) traffic climbs to the spine, naming the group and the
/// level; every plan it lists keeps those groups below the spine. Without
/// the flag such layouts are priced (and counted valid).
#[test]
fn max_tier_forbids_model_parallel_groups_above_a_tier() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "search",
            "--model",
            "deepseek-v3",
            "--cluster",
            "h100-rail-32k",
            "--gpus",
            "1024",
            "--top",
            "5",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = meshplan(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let cat = Catalog::shipped().unwrap();
    let c = cat.cluster("h100-rail-32k").unwrap();
    let bounded = run(&["--max-tier", "0"]);
    let policy = bounded["rejections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["code"] == "policy")
        .expect("policy rejections");
    assert!(policy["count"].as_u64().unwrap() > 0);
    let miss = policy["near_miss"].as_str().unwrap();
    assert!(
        miss.contains("spine") && miss.contains("--max-tier 0"),
        "{miss}"
    );
    for row in bounded["rows"].as_array().unwrap() {
        let l: Layout = serde_json::from_value(row["layout"].clone()).unwrap();
        let pl = Placement::of(&l, c);
        assert_eq!(meshplan::rules::outermost_tier(&pl).1, 0, "{}", l.short());
    }
    let free = run(&[]);
    assert!(free["valid"].as_u64().unwrap() > bounded["valid"].as_u64().unwrap());
}

/// The TP group's row in the process-group table: one all-reduce of a
/// layer's activations without SP, its all-gather and reduce-scatter with
/// SP (the same traffic; the table had said all-reduce either way). Llama
/// 3 70B at T = 8, b = 1, s = 8192: S = 8192·8192·2 B = 128 MiB; a ring
/// all-reduce puts 2·(7/8)·S = 224 MiB on NVLink per GPU, an all-gather or
/// a reduce-scatter 7/8·S = 112 MiB.
#[test]
fn the_tp_group_row_names_the_sp_collectives() {
    use meshplan::cost::levels::{Collective, group_traffic};
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("llama3-70b").unwrap();
    let cluster = cat.cluster("dgx64").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(2048, 8192);
    let pr = Problem::new(model, gpu, cluster, &job, 64);
    const MIB: f64 = 1024.0 * 1024.0;
    let tp_rows = |sp: bool| -> Vec<(Collective, f64, Vec<f64>)> {
        let l = Layout {
            sp,
            ..Layout::dense(4, 8, 2, 1)
        };
        group_traffic(&pr, &l)
            .into_iter()
            .filter(|g| g.axis == "tp")
            .map(|g| {
                (
                    g.collective,
                    g.buffer_bytes / MIB,
                    g.level_bytes.iter().map(|b| b / MIB).collect(),
                )
            })
            .collect()
    };
    assert_eq!(
        tp_rows(false),
        vec![(Collective::AllReduce, 128.0, vec![224.0])]
    );
    assert_eq!(
        tp_rows(true),
        vec![
            (Collective::AllGather, 128.0, vec![112.0]),
            (Collective::ReduceScatter, 128.0, vec![112.0])
        ]
    );
}

/// A profile with a `segment` runs its jobs on fewer GPUs than it has
/// (gb200-nvl72-576: 8 racks × 16 of 18 trays × 4 = 512 of 576), and the
/// search's first line says so; a profile without one does not.
#[test]
fn the_header_names_the_gpus_a_segment_leaves_out() {
    let first_line = |cluster: &str| {
        let o = meshplan(&[
            "search",
            "--model",
            "llama3-8b",
            "--cluster",
            cluster,
            "--top",
            "1",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    let gb = first_line("gb200-nvl72-576");
    assert!(
        gb.starts_with("llama3-8b on 512 × gb200 (gb200-nvl72-576: 512 of its 576 GPUs, 16 hosts of each NVLink domain as its `segment` says),"),
        "{gb}"
    );
    let dgx = first_line("dgx64");
    assert!(
        dgx.starts_with("llama3-8b on 64 × a100-80g (dgx64), "),
        "{dgx}"
    );
}
