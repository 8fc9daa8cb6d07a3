//! `--deepspeed-2021` (DeepSpeed 0.3's per-tensor ZeRO-3 pricing): what it
//! refuses, what it says it used, and what it leaves to today's pricing.

mod common;

use common::{Setup, meshplan};
use meshplan::cost::{self, layer};
use meshplan::layout::{Layout, Placement, Recompute};
use meshplan::spec::{Catalog, DeepSpeedZero3};

use common::NAR21_T2_03 as T2_03;

/// `base` with flag `key` set to `value` (replaced in place, or added).
fn with<'a>(base: &[&'a str], key: &'a str, value: &'a str) -> Vec<&'a str> {
    let mut a = base.to_vec();
    match a.iter().position(|x| *x == key) {
        Some(i) => a[i + 1] = value,
        None => a.extend_from_slice(&[key, value]),
    }
    a
}

fn run(base: &[&str], extra: &[&str]) -> std::process::Output {
    let mut a: Vec<&str> = base.to_vec();
    a.extend_from_slice(extra);
    meshplan(&a)
}

fn json(base: &[&str], extra: &[&str]) -> serde_json::Value {
    let o = run(base, &[extra, &["--format", "json"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The DeepSpeed 0.3 rows of the shipped table (`engine = deepspeed`,
/// ZeRO-3): NAR21-T2-01 … 06.
fn deepspeed_rows() -> Vec<String> {
    (1..=6).map(|i| format!("NAR21-T2-0{i}")).collect()
}

/// Fix 1: a plan priced one way draws only on rows priced the same way.
/// With the flag, the layout is validated by the five DeepSpeed rows whose
/// regime it shares (NAR21-T2-01, on 384 GPUs, is in another scale band); without it,
/// today's pricing of the same layout (16.5 s against the measured 66.8 s)
/// must cite none of the six.
#[test]
fn trust_draws_only_on_rows_priced_alike() {
    let ds = json(T2_03, &["--deepspeed-2021"]);
    let nearest: Vec<String> = ds["trust"]["nearest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ds["trust"]["runs"], 5);
    assert_eq!(
        nearest,
        [
            "NAR21-T2-02",
            "NAR21-T2-03",
            "NAR21-T2-04",
            "NAR21-T2-05",
            "NAR21-T2-06"
        ]
    );
    let today = json(T2_03, &["--no-flash-attention"]);
    assert_eq!(today["trust"]["runs"], 0, "{}", today["trust"]);
    let cited: Vec<&str> = today["trust"]["nearest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!cited.is_empty());
    for id in deepspeed_rows() {
        assert!(!cited.contains(&id.as_str()), "{id} cited: {cited:?}");
    }
    // The table's trust line says the same.
    let o = run(T2_03, &["--no-flash-attention"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text.lines().find(|l| l.starts_with("Trust:")).unwrap();
    assert!(line.starts_with("Trust: extrapolated"), "{line}");
    for id in deepspeed_rows() {
        assert!(!line.contains(&id), "{line}");
    }
}

/// Fix 2: `generate` refuses the flag with one error naming it.
#[test]
fn generate_refuses_the_flag() {
    let dir = std::env::temp_dir().join(format!("meshplan-ds2021-gen-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    for target in ["megatron", "deepspeed", "torchtitan", "megatron-bridge"] {
        let o = meshplan(&[
            "generate",
            "--model",
            "gpt3-175b",
            "--cluster",
            "dgx-a100-3072",
            "--gpus",
            "1536",
            "--recipe",
            "deepspeed",
            "--dp",
            "1536",
            "--zero",
            "3",
            "--deepspeed-2021",
            "--target",
            target,
            "--out",
            out,
        ]);
        assert!(!o.status.success(), "{target}");
        let e = stderr_of(&o);
        assert!(
            e.contains("--deepspeed-2021") && e.contains("today's engines"),
            "{target}: {e}"
        );
        assert!(!dir.exists(), "{target}: wrote files");
    }
}

/// Fix 5: what DeepSpeed 0.3 could not run is refused, naming the flag and
/// the reason; at ZeRO 0-2 a note says the flag changes nothing.
#[test]
fn refuses_what_deepspeed_0_3_could_not_run() {
    let dp768 = with(T2_03, "--dp", "768");
    let cases = [
        (with(&dp768, "--pp", "2"), "pipeline engine"),
        (with(&dp768, "--cp", "2"), "context parallelism"),
        (
            with(
                &with(&with(T2_03, "--tp", "8"), "--dp", "192"),
                "--sp",
                "on",
            ),
            "sequence parallelism",
        ),
        (with(T2_03, "--precision", "fp8"), "--precision fp8"),
        (with(T2_03, "--recipe", "megatron"), "--recipe megatron"),
    ];
    for (args, why) in &cases {
        let o = run(args, &["--deepspeed-2021"]);
        assert!(!o.status.success(), "{args:?}");
        let e = stderr_of(&o);
        assert!(
            e.contains("--deepspeed-2021") && e.contains(why),
            "{args:?}: {e}"
        );
    }
    let o = meshplan(&[
        "explain",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "dgx64",
        "--recipe",
        "deepspeed",
        "--dp",
        "64",
        "--zero",
        "3",
        "--deepspeed-2021",
    ]);
    assert!(!o.status.success());
    assert!(stderr_of(&o).contains("MoE model"), "{}", stderr_of(&o));
    // ZeRO 1: the flag changes only what its --no-flash-attention does and
    // says so (it said "changes nothing", though the step moved); the step
    // is the one of --no-flash-attention alone.
    let z1 = with(T2_03, "--zero", "1");
    let o = run(&z1, &["--deepspeed-2021", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    assert!(
        stderr_of(&o).contains(
            "at ZeRO 1 --deepspeed-2021 changes only what its --no-flash-attention implies"
        ),
        "{}",
        stderr_of(&o)
    );
    let with: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let without = json(&z1, &["--no-flash-attention"]);
    assert_eq!(
        with["eval"]["time"]["step"],
        without["eval"]["time"]["step"]
    );
    // The search keeps to ZeRO-3 at p = C = 1, and refuses a --fix beyond.
    let search = [
        "search",
        "--model",
        "gpt3-175b",
        "--cluster",
        "dgx-a100-3072",
        "--gpus",
        "1536",
        "--global-batch",
        "1536",
        "--seq-len",
        "2048",
        "--recipe",
        "deepspeed",
        "--deepspeed-2021",
    ];
    let o = run(&search, &["--fix", "pp=2"]);
    assert!(!o.status.success());
    assert!(stderr_of(&o).contains("--deepspeed-2021 searches ZeRO-3 at pp=1 cp=1 only"));
    let o = run(&search, &["--fix", "sp=on"]);
    assert!(!o.status.success());
    assert!(stderr_of(&o).contains("without sequence parallelism"));
    // What it does search: ZeRO-3, p = C = 1, SP off, every row.
    let o = run(&search, &["--format", "json", "--top", "5"]);
    assert!(o.status.success(), "{}", stderr_of(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for r in rows {
        let l = &r["layout"];
        assert_eq!(
            (&l["zero"], &l["pp"], &l["cp"], &l["sp"]),
            (&3.into(), &1.into(), &1.into(), &false.into()),
            "{l}"
        );
    }
    let o = run(&search, &["--target", "deepspeed"]);
    assert!(!o.status.success());
    assert!(stderr_of(&o).contains("--deepspeed-2021 with --target deepspeed"));
}

/// Fix 5, flash attention: the flag implies `--no-flash-attention`
/// (DeepSpeed 0.3 predates FlashAttention), so both spellings price alike.
#[test]
fn the_flag_implies_no_flash_attention() {
    let a = json(T2_03, &["--deepspeed-2021"]);
    let b = json(T2_03, &["--deepspeed-2021", "--no-flash-attention"]);
    assert_eq!(a["eval"]["time"]["step"], b["eval"]["time"]["step"]);
    assert_eq!(a["eval"]["peak_bytes"], b["eval"]["peak_bytes"]);
}

/// Fix 6: the outputs say the DeepSpeed 0.3 pricing was used, and explain
/// counts its per-tensor collectives. GPT-3 175B at T = 1, full recompute,
/// persistence threshold 1e5 (`cost::deepspeed_2021_tensor_collectives`'s
/// example): each of the 96 layers gathers its 4 weight matrices 1 + 2, 1 +
/// 2, 1 + 2, 1 + 1 times = 11, the embedding its word and position tables
/// once each way = 4, the output unit (two norm tensors, tied head) none:
/// 96·11 + 4 = 1060 gathers; reduce-scatters one per tensor: 96·12 + 2 + 2
/// = 1156.
#[test]
fn outputs_say_deepspeed_2021_pricing() {
    let ds = json(T2_03, &["--deepspeed-2021"]);
    let p = ds["context"]["zero3_pricing"].as_str().unwrap();
    assert!(p.contains("DeepSpeed 0.3"), "{p}");
    let t = &ds["tensor_collectives"];
    assert_eq!(t["gathers"], 1060.0);
    assert_eq!(t["reduce_scatters"], 1156.0);
    assert_eq!(t["micro_batches"], 1);
    // Synchronous: their time is the exposed ZeRO-3 time of the step
    // within rounding (the step's DP parts, experts none).
    let secs = t["seconds"].as_f64().unwrap();
    assert!(secs > 60.0 && secs < 70.0, "{secs}");
    let today = json(T2_03, &["--no-flash-attention"]);
    assert!(today["context"].get("zero3_pricing").is_none());
    assert!(today.get("tensor_collectives").is_none());
    let text = String::from_utf8_lossy(&run(T2_03, &["--deepspeed-2021"]).stdout).into_owned();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains("ZeRO-3 priced as DeepSpeed 0.3")
    );
    assert!(text.contains(
        "Under --deepspeed-2021 the ZeRO-3 collectives are per tensor, not the one dp reduce-scatter above: 1060 all-gathers and 1156 reduce-scatters per micro-batch (2216 per step)"
    ));
}

/// Fix 3: the named tensors of every catalog model's items add up to the
/// item's parameters exactly (the remainder tensor takes what the shapes
/// leave; a sum above would mean named tensors the item does not hold), at
/// T = 1 and 2.
#[test]
fn unit_tensors_add_up_to_every_item() {
    let cat = Catalog::shipped().unwrap();
    for m in &cat.models {
        for tp in [1u32, 2] {
            let s = Setup::new(&m.name, "dgx64", None);
            let pr = s.problem();
            let l = Layout {
                zero: 3,
                ..Layout::dense(64 / tp, tp, 1, 1)
            };
            let pl = Placement::of(&l, pr.cluster);
            let lc = layer::layer_costs(&pr, &l, &pl);
            for (it, kind) in [
                (&lc.dense, layer::UnitKind::Layer),
                (&lc.moe, layer::UnitKind::MoeLayer),
                (&lc.embedding, layer::UnitKind::Embedding),
                (&lc.output, layer::UnitKind::Output),
            ] {
                if it.params == 0.0 {
                    continue;
                }
                let t = layer::unit_tensors(m, kind, it.params, tp as f64);
                let sum: f64 = t.iter().sum();
                assert!(
                    (sum - it.params).abs() <= 1e-9 * it.params,
                    "{} T={tp} {kind:?}: tensors {sum} vs params {}",
                    m.name,
                    it.params
                );
            }
        }
    }
}

/// Fix 3: an all-MoE card's `architecture.ffn` is unused, so changing it
/// leaves the DeepSpeed 0.3 price unchanged. Mixtral 8x7B, ZeRO-3 over 64
/// GPUs: before the fix its MoE layer named a dense 3·4096·14336 = 176M
/// MLP on top of its 42M attention parameters, and the price moved with
/// `ffn`.
#[test]
fn unused_ffn_of_an_all_moe_card_does_not_move_the_price() {
    let price = |ffn: u64| {
        let mut s = Setup::new("mixtral-8x7b", "dgx64", None);
        s.model.architecture.ffn = ffn;
        s.job.engine_memory.deepspeed_zero3 = Some(DeepSpeedZero3::DEFAULTS_2021);
        let pr = s.problem();
        let l = Layout {
            zero: 3,
            recompute: Recompute::Full,
            ..Layout::dense(64, 1, 1, 1)
        };
        cost::evaluate(&pr, &l).time.step
    };
    let (a, b) = (price(14336), price(1024));
    assert!(a > 0.0);
    assert_eq!(a, b);
    // The tensors themselves: the MoE layer is its attention, norms,
    // router h·E = 4096·8 = 32,768 and nothing more (no shared expert):
    // q = 4096, kv = 1024, QKV 4096·6144 = 25,165,824, projection 4096² =
    // 16,777,216, two RMSNorm weights of 4096.
    let s = Setup::new("mixtral-8x7b", "dgx64", None);
    let p = 4096.0 + 25_165_824.0 + 16_777_216.0 + 4096.0 + 32_768.0;
    let t = layer::unit_tensors(&s.model, layer::UnitKind::MoeLayer, p, 1.0);
    assert_eq!(
        &t.numel[..t.len],
        &[4096.0, 25_165_824.0, 16_777_216.0, 4096.0, 32_768.0]
    );
}

/// Fix 4: a narrow (FP8) parameter gather narrows each unit's bytes, not
/// its time. Llama 3 8B on 64 H100s, ZeRO-3, FP8: the embedding (no
/// low-precision GEMM) gathers exactly what it gathers in bf16 — the old
/// rank-wide time ratio shrank it too — and a layer's gather is its bf16
/// gather's latency plus a shrunken bandwidth part, so more than the old
/// `ratio · bf16` time (latency kept) and less than the bf16 time.
#[test]
fn narrow_param_gather_scales_bytes_not_latency() {
    use meshplan::spec::Precision;
    let costs = |narrow: bool| {
        let mut s = Setup::new("llama3-8b", "dgx-h100-64", None);
        s.job.precision = Precision::Fp8;
        s.job.fp8_param_gather = narrow;
        let pr = s.problem();
        let l = Layout {
            zero: 3,
            ..Layout::dense(64, 1, 1, 1)
        };
        let pl = Placement::of(&l, pr.cluster);
        layer::layer_costs(&pr, &l, &pl)
    };
    let (wide, narrow) = (costs(false), costs(true));
    assert!(wide.embedding.gather > 0.0);
    assert_eq!(narrow.embedding.gather, wide.embedding.gather);
    assert_eq!(narrow.output.gather, wide.output.gather);
    // Layer bytes: the norms stay bf16, the GEMM weights go to 1 byte, so
    // the ratio of bytes is just above ½.
    let d = &wide.dense;
    let ratio = ((d.params - d.low_params) * 2.0 + d.low_params) / (2.0 * d.params);
    assert!(ratio > 0.5 && ratio < 0.51, "{ratio}");
    let g = narrow.dense.gather;
    assert!(
        g < wide.dense.gather && g > ratio * wide.dense.gather,
        "{g} vs {}",
        wide.dense.gather
    );
    // The reduce-scatter (gradients, never narrowed) does not move.
    assert_eq!(narrow.dense.reduce_scatter, wide.dense.reduce_scatter);
}

/// NAR21-T2-04's layout (530B, ZeRO-3, D = N, b = 4, full recompute) on
/// `gpus` A100s, explained as `validate` prices that row.
fn t2_04_on(gpus: u32) -> serde_json::Value {
    let n = gpus.to_string();
    let gbs = (4 * gpus).to_string();
    let args = [
        "explain",
        "--model",
        "gpt-529.6b",
        "--cluster",
        "dgx-a100-3072",
        "--gpus",
        &n,
        "--global-batch",
        &gbs,
        "--seq-len",
        "2048",
        "--recipe",
        "deepspeed",
        "--deepspeed-2021",
        "--dp",
        &n,
        "--tp",
        "1",
        "--pp",
        "1",
        "--mbs",
        "4",
        "--recompute",
        "full",
        "--zero",
        "3",
        "--no-flash-attention",
    ];
    json(&args, &[])
}

/// DeepSpeed builds the fp32 gradient partition inside `step()` and frees it
/// after the update, so it is not held with the activations (docs/references.md
/// [deepspeed-zero-optimizer]). Narayanan et al. 2021 (Table 2's footnote):
/// the 530B model at micro-batch 4 did not fit in ZeRO-3 on 560 GPUs and ran
/// on 640. Counting the partition through backward rejected both (79.34 GiB
/// at 640 against 77.5 usable); without it, 560 is rejected and 640 fits.
#[test]
fn fp32_gradient_partition_lives_only_in_the_step() {
    let at640 = t2_04_on(640);
    let mem = &at640["ranks"][0]["memory"];
    let optimizer = mem["optimizer"].as_f64().unwrap();
    let grads = mem["grads"].as_f64().unwrap();
    let unsharded = mem["of_which"]["unsharded_grads"].as_f64().unwrap();
    // Held through backward: the fp16 partition 2·P/D = optimizer/6
    // (12 bytes per parameter), plus the reduce buckets; not the fp32 4·P/D.
    assert!((grads - (optimizer / 6.0 + unsharded)).abs() < 1.0, "{mem}");
    let peak = at640["eval"]["peak_bytes"].as_f64().unwrap();
    // 76.26 GiB = 79.34 GiB − 4·P/D with 4·P/D = optimizer/3 = 3.31e9 B.
    assert!(((peak + optimizer / 3.0) / (1u64 << 30) as f64 - 79.34).abs() < 0.005);
    assert!((peak / (1u64 << 30) as f64 - 76.26).abs() < 0.005, "{peak}");
    assert!(at640["violations"].as_array().unwrap().is_empty());
    // The optimizer step (states plus the fp32 partition, 22.7 GiB) is not the
    // peak: the backward's activations and temporaries stay in the breakdown.
    assert!(mem["activations"].as_f64().unwrap() > 0.0);

    let at560 = t2_04_on(560);
    let rules: Vec<&str> = at560["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["rule"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(rules, ["memory"], "{}", at560["violations"]);
}
