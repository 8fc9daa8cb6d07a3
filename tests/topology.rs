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

/// GB200 NVL72: 4-GPU trays, 72-GPU NVLink domains. D = 9, T = 8, E = 8,
/// p = 8: a TP group, an EP group and a DP group (ranks 0, 8, …, 64) stay
/// in one rack on NVLink although they span up to 18 trays; the PP group
/// (72 ranks apart) crosses racks on the NICs.
#[test]
fn nvl72_groups_of_64_stay_on_nvlink() {
    let cat = Catalog::shipped().unwrap();
    let c = cat.cluster("gb200-nvl72-576").unwrap();
    assert_eq!(
        (c.gpus_per_node, c.fast_domain(), c.total_gpus()),
        (4, 72, 576)
    );
    let mut l = Layout::dense(9, 8, 8, 1);
    l.ep = 8;
    let pl = Placement::of(&l, c);
    assert!(!pl.tp.crosses_domains() && !pl.ep.crosses_domains());
    assert!(!pl.dp.crosses_domains());
    assert!(pl.pp.crosses_domains() && pl.pp.domains == 8);
}
