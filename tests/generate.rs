//! `meshplan generate`: golden files for llama3-70b on dgx64 (the best
//! layout of the search, and a fixed layout whose predictions are frozen so
//! its snapshots only change when the rendering changes), the command line,
//! and refusals.
//!
//! Predicted numbers in plan.json are rounded to 4 decimals.
//!
//! The best layout, and every predicted number in its files, follow the
//! cost model: when a calibration changes them, review the new snapshots
//! (`cargo insta review`, or `INSTA_UPDATE=always cargo test --release
//! --test generate` and read the diff).

mod common;

use std::path::Path;

use common::{Setup, meshplan};
use meshplan::generate::{self, GenerateError, Plan};
use meshplan::layout::{Layout, RankOrder, Recompute};
use meshplan::rules::Policy;
use serde_json::Value;

/// The fixed layout of the second golden set: T8 p2 v2 with SP, selective
/// recompute, ZeRO-1 (D = 4).
fn fixed_layout() -> Layout {
    let mut l = Layout::dense(4, 8, 2, 1);
    l.vpp = 2;
    l.recompute = Recompute::Selective;
    l
}

/// Replace every prediction that depends on the cost model's calibration by
/// a constant: floats under `predicted` become 1.0, the checkpoint interval
/// 1 step and the worst rank 0. Structure (stage count, group spans) stays.
fn freeze_predictions(plan: &Plan) -> Plan {
    fn walk(v: &mut Value) {
        match v {
            Value::Number(n) if n.is_f64() => *v = Value::from(1.0),
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(o) => o.values_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(plan).unwrap();
    walk(&mut v["predicted"]);
    v["predicted"]["checkpoint"]["interval_steps"] = Value::from(1);
    v["predicted"]["worst_pp_rank"] = Value::from(0);
    serde_json::from_value(v).unwrap()
}

fn snapshot_all(prefix: &str, files: &[generate::GeneratedFile]) {
    for f in files {
        let name = format!("{prefix}__{}", f.name.replace('.', "_"));
        insta::assert_snapshot!(name, f.contents);
    }
}

#[test]
fn golden_best_70b_dgx64() {
    let s = Setup::new("70b", "dgx64", None);
    let best = s.best().expect("a valid layout");
    let b = s.bundle(&best);
    assert_eq!(
        b.files.iter().map(|f| f.name).collect::<Vec<_>>(),
        generate::FILES
    );
    snapshot_all("best_70b_dgx64", &b.files);
}

#[test]
fn golden_fixed_layout_70b_dgx64() {
    let s = Setup::new("70b", "dgx64", None);
    let b = s.bundle(&fixed_layout());
    let frozen = freeze_predictions(&b.plan);
    let files = generate::render(&frozen).unwrap();
    snapshot_all("fixed_70b_dgx64_t8p2v2", &files);
    // Freezing touched only predictions.
    let (mut a, mut z) = (
        serde_json::to_value(&b.plan).unwrap(),
        serde_json::to_value(&frozen).unwrap(),
    );
    a["predicted"] = Value::Null;
    z["predicted"] = Value::Null;
    assert_eq!(a, z);
}

/// The numbers printed in the files are the cost model's (to 4 decimals in
/// plan.json), and the header of the script quotes them.
#[test]
fn predictions_in_the_files_are_the_cost_models() {
    let s = Setup::new("70b", "dgx64", None);
    let l = fixed_layout();
    let pr = s.problem();
    let e = meshplan::cost::evaluate(&pr, &l);
    let b = s.bundle(&l);
    let v: Value = serde_json::from_str(b.file(generate::PLAN_FILE).unwrap()).unwrap();
    let p = &v["predicted"];
    // Rounded to 4 decimals in the file.
    let close = |key: &str, want: f64| {
        let got = p[key].as_f64().unwrap();
        assert!((got - want).abs() <= 0.5e-4, "{key}: {got} vs {want}");
    };
    close("step_s", e.time.step);
    close("tokens_per_s", e.tokens_per_s);
    close("peak_gib", e.peak_bytes / meshplan::spec::GIB);
    close("mfu", e.mfu);
    assert_eq!(p["worst_pp_rank"].as_u64().unwrap(), e.worst_rank as u64);
    assert_eq!(p["stages"].as_array().unwrap().len(), 2);
    // The checkpoint is `explain`'s: the fullest rank's shard (stage 1 holds
    // the output layer), not the average bytes / N.
    let c = meshplan::checkpoint::plan(&pr, &l, &e);
    let ck = &p["checkpoint"];
    assert_eq!(ck["bytes"].as_f64().unwrap(), c.total_bytes);
    assert_eq!(ck["bytes_per_rank"].as_f64().unwrap(), c.per_rank_bytes);
    assert!(c.per_rank_bytes > c.total_bytes / 64.0 * 1.2);
    let script = b.file(generate::MEGATRON_SCRIPT).unwrap();
    assert!(
        script.contains(&format!("step {:.2} s", e.time.step)),
        "{script}"
    );
    assert!(script.contains(&format!(
        "peak {:.1} GiB",
        e.peak_bytes / meshplan::spec::GIB
    )));
    // m = B/(D·b) = 2048/(4·1) = 512, and the script says B = D·m·b.
    assert_eq!(v["job"]["micro_batches"], 512);
    assert!(script.contains("--global-batch-size 2048   # B = D·m·b = 4·512·1"));
    // The checklist gives the per-stage peaks of plan.json.
    let check = b.file(generate::CHECKLIST).unwrap();
    for st in p["stages"].as_array().unwrap() {
        let peak = st["memory_gib"]["total"].as_f64().unwrap();
        assert!(
            check.contains(&format!("| {:.1} |", peak)),
            "stage peak {peak:.1} missing"
        );
    }
}

fn refusal_codes(s: &Setup, l: &Layout) -> Vec<String> {
    let pr = s.problem();
    match generate::generate(&pr, &Policy::default(), l) {
        Err(GenerateError::Refused { refusals, .. }) => {
            refusals.into_iter().map(|r| r.code).collect()
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => vec![],
    }
}

#[test]
fn generate_refuses_layouts_that_break_a_rule() {
    let s = Setup::new("70b", "dgx64", None);
    // Memory: T8 with plain DDP holds 206 GiB.
    let mut l = Layout::dense(8, 8, 1, 1);
    l.zero = 0;
    l.sp = false;
    assert_eq!(refusal_codes(&s, &l), ["memory"]);
    // Structure: 64 heads over T = 16 cross the 8-GPU node; 80 layers over p·v = 2·3.
    let mut l = fixed_layout();
    l.vpp = 3;
    assert_eq!(refusal_codes(&s, &l), ["layers-pp"]);
    let l = Layout::dense(2, 16, 2, 1);
    assert_eq!(refusal_codes(&s, &l), ["tp-domain"]);
    // tp-pp-dp mapping with C > 1 and p > 1 on a dense model [W4:
    // N/(ETP·E·p) = 64/(4·1·2) = 8 ≠ D = 4]: a rule since the search ranked
    // such layouts first that generate then refused.
    let mut l = Layout::dense(4, 4, 2, 2);
    l.recompute = Recompute::Full;
    l.order = RankOrder::TpCpEpPpDp;
    assert_eq!(refusal_codes(&s, &l), ["rank-mapping"]);
    l.order = RankOrder::TpCpEpDpPp;
    assert!(refusal_codes(&s, &l).is_empty());
    // Launch: 12 GPUs do not fill whole 8-GPU nodes.
    let mut s12 = Setup::new("llama3-8b", "dgx64", Some(12));
    s12.job.global_batch = 1536; // divisible by D = 3
    let mut l = Layout::dense(3, 4, 1, 1);
    l.recompute = Recompute::Full;
    assert_eq!(refusal_codes(&s12, &l), ["launch-nodes"]);
    // The message lists each rule with its numbers and fix.
    let pr = s.problem();
    let err = generate::generate(&pr, &Policy::default(), &Layout::dense(2, 16, 2, 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[tp-domain] T = 16") && err.contains("spans more than the 8 GPUs"),
        "{err}"
    );
}

// ---- The command line (runs the built binary). ----

fn read_plan(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(generate::PLAN_FILE)).unwrap()).unwrap()
}

#[test]
fn cli_writes_the_files_of_the_best_layout_and_prints_the_checklist() {
    let dir = common::temp_dir("cli-best");
    let out = dir.join("plan");
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    for f in generate::FILES {
        assert!(out.join(f).is_file(), "{f} not written");
    }
    let stdout = String::from_utf8_lossy(&res.stdout);
    assert!(
        stdout.contains("# Before the long run: validate the layout"),
        "{stdout}"
    );
    let s = Setup::new("70b", "dgx64", None);
    let best = s.best().unwrap();
    let plan = read_plan(&out);
    assert_eq!(
        serde_json::from_value::<Layout>(plan["layout"].clone()).unwrap(),
        best
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join(generate::MEGATRON_SCRIPT))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111, "launch script not executable");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_takes_a_row_of_a_search_json_or_a_plan_file() {
    let dir = common::temp_dir("cli-plan");
    let res = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--top",
        "5",
        "--format",
        "json",
    ]);
    assert!(res.status.success());
    let search = dir.join("search.json");
    std::fs::write(&search, &res.stdout).unwrap();
    let rows: Value = serde_json::from_slice(&res.stdout).unwrap();
    let out = dir.join("p3");
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--plan",
        search.to_str().unwrap(),
        "--rank",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(read_plan(&out)["layout"], rows["rows"][2]["layout"]);
    // The plan file written can be fed back.
    let again = dir.join("again");
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--plan",
        out.join("plan.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    assert_eq!(read_plan(&again)["layout"], rows["rows"][2]["layout"]);
    // A different job than the one searched is an error naming the field and flag.
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--global-batch",
        "1024",
        "--plan",
        search.to_str().unwrap(),
        "--out",
        dir.join("x").to_str().unwrap(),
    ]);
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains("global_batch") && err.contains("--global-batch 2048"),
        "{err}"
    );
    assert!(!dir.join("x").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_refuses_an_invalid_layout_and_writes_nothing() {
    let dir = common::temp_dir("cli-refuse");
    let out = dir.join("plan");
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--tp",
        "8",
        "--zero",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(res.status.code(), Some(1));
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains("refusing to write launch files") && err.contains("[memory]"),
        "{err}"
    );
    assert!(!out.exists(), "files written for a refused layout");
    // Layout flags and --rank cannot be mixed.
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--tp",
        "8",
        "--rank",
        "2",
    ]);
    assert!(!res.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// MoE scripts balance the router as the model card says, field by field
/// (Megatron's `--moe-aux-loss-coeff` defaults to 0.0, which would switch
/// an `aux_loss` router's balancing off); a card that states neither gets
/// `none` with a note, never an unbalanced `aux_loss`.
#[test]
fn moe_scripts_carry_the_cards_load_balancing() {
    for (name, cluster) in [
        ("mixtral-8x7b", "dgx64"),
        ("qwen3-30b-a3b", "dgx64"),
        ("deepseek-v3", "h800-2048"),
    ] {
        let s = Setup::new(name, cluster, None);
        let moe = s.model.moe.clone().unwrap();
        let best = s.best().expect("a valid layout");
        let script = s
            .bundle(&best)
            .file(generate::MEGATRON_SCRIPT)
            .unwrap()
            .to_string();
        let kind = moe.load_balancing.unwrap();
        let coeff = moe.aux_loss_coeff.unwrap();
        assert!(
            script.contains(&format!("--moe-router-load-balancing-type {kind}\n")),
            "{name}: {kind}"
        );
        assert!(
            script.contains(&format!("--moe-aux-loss-coeff {coeff}   #")),
            "{name}: {coeff}"
        );
    }
    // A card without the coefficient: `none`, with the reason.
    let mut s = Setup::new("mixtral-8x7b", "dgx64", None);
    s.model.moe.as_mut().unwrap().aux_loss_coeff = None;
    let best = s.best().unwrap();
    let script = s
        .bundle(&best)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    assert!(
        script.contains("--moe-router-load-balancing-type none   # the model card states no"),
        "{script}"
    );
    assert!(!script.contains("--moe-aux-loss-coeff"));
    // DeepSeek-V3: sequence-wise loss at 1e-4 (its report, §4.2).
    let s = Setup::new("deepseek-v3", "h800-2048", None);
    let moe = s.model.moe.as_ref().unwrap();
    assert_eq!(
        (moe.load_balancing.as_deref(), moe.aux_loss_coeff),
        (Some("seq_aux_loss"), Some(1e-4))
    );
}

/// What torchrun hands `pretrain_gpt.py`, as flag → value (`None` for a
/// switch).
fn megatron_args(args: &[String]) -> std::collections::BTreeMap<String, Option<String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let f = args[i].clone();
        let v = args.get(i + 1).filter(|v| !v.starts_with("--")).cloned();
        i += if v.is_some() { 2 } else { 1 };
        out.insert(f, v);
    }
    out
}

/// DeepSeek-V3's script builds the router and norms its card describes,
/// field by field, as torchrun passes them to `pretrain_gpt.py`: sigmoid
/// scores with the expert bias, 8 groups of which 4 per token, top-k
/// weights × 2.5, the sequence-wise loss at 1e-4, QK layernorm, ε = 1e-6
/// (DeepSeek-V3 report §2.1.2, §4.2; config.json). Mixtral's script sets
/// none of the DeepSeek-only flags, and Llama 3.1 405B's carries its RoPE
/// scaling.
#[test]
fn router_norm_and_rope_flags_match_the_card_field_by_field() {
    let s = Setup::new("deepseek-v3", "h800-2048", None);
    let best = s.best().expect("a valid layout");
    let args = megatron_args(&common::launch(&s.bundle(&best), 0).megatron);
    let moe = s.model.moe.clone().unwrap();
    let a = &s.model.architecture;
    let get = |f: &str| args.get(f).cloned().flatten();
    assert_eq!(get("--num-experts"), Some(moe.experts.to_string()));
    assert_eq!(get("--moe-router-topk"), Some(moe.top_k.to_string()));
    assert_eq!(
        get("--moe-ffn-hidden-size"),
        Some(moe.expert_ffn.to_string())
    );
    assert_eq!(
        get("--moe-router-score-function"),
        moe.score_function.clone()
    );
    assert_eq!(
        args.contains_key("--moe-router-enable-expert-bias"),
        moe.expert_bias
    );
    assert_eq!(
        get("--moe-router-num-groups"),
        moe.groups.map(|g| g.to_string())
    );
    assert_eq!(
        get("--moe-router-group-topk"),
        moe.group_top_k.map(|g| g.to_string())
    );
    assert_eq!(
        get("--moe-router-topk-scaling-factor"),
        moe.topk_scaling_factor.map(|f| f.to_string())
    );
    assert_eq!(
        get("--moe-router-load-balancing-type"),
        moe.load_balancing.clone()
    );
    assert_eq!(
        get("--moe-aux-loss-coeff"),
        moe.aux_loss_coeff.map(|c| c.to_string())
    );
    assert_eq!(args.contains_key("--qk-layernorm"), a.qk_layernorm);
    assert_eq!(get("--norm-epsilon"), a.norm_epsilon.map(|e| e.to_string()));
    // MLA: the backend is left to Megatron-Core, as its MLA examples and
    // Megatron-Bridge's DeepSeek recipes do, not forced to flash.
    assert_eq!(get("--attention-backend").as_deref(), Some("auto"));
    // The card's values themselves (so the comparison above is not empty).
    assert_eq!(
        (
            get("--moe-router-score-function").as_deref(),
            get("--moe-router-num-groups").as_deref(),
            get("--moe-router-group-topk").as_deref(),
            get("--moe-router-topk-scaling-factor").as_deref(),
            get("--norm-epsilon").as_deref(),
        ),
        (
            Some("sigmoid"),
            Some("8"),
            Some("4"),
            Some("2.5"),
            Some("0.000001")
        )
    );
    assert!(
        args.contains_key("--moe-router-enable-expert-bias") && args.contains_key("--qk-layernorm")
    );

    let s = Setup::new("mixtral-8x7b", "dgx64", None);
    let best = s.best().unwrap();
    let script = s
        .bundle(&best)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    for f in [
        "--moe-router-score-function",
        "--moe-router-enable-expert-bias",
        "--moe-router-num-groups",
        "--qk-layernorm",
        "--use-rope-scaling",
    ] {
        assert!(!script.contains(f), "mixtral: {f}");
    }

    let s = Setup::new("llama3-405b", "h100-16k", None);
    let best = s.best().unwrap();
    let script = s
        .bundle(&best)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    assert!(
        script.contains("--use-rope-scaling   # Llama 3.1 scaling"),
        "{script}"
    );
    assert!(script.contains("--rope-scaling-factor 8\n"), "{script}");
}

/// The SLURM script's head-node lookup survives `set -o pipefail` on large
/// allocations: a stand-in `scontrol` prints 200,000 host names and the
/// script's own line takes the first, 20 times out of 20 (with `head -n 1`
/// the writer could die of SIGPIPE, exit 141).
#[test]
fn slurm_head_node_lookup_cannot_die_of_sigpipe() {
    let s = Setup::new("70b", "dgx64", None);
    let best = s.best().unwrap();
    let b = s.bundle(&best);
    let sbatch = b.file(generate::SLURM_SCRIPT).unwrap();
    let line = sbatch
        .lines()
        .find(|l| l.starts_with("MASTER_ADDR="))
        .expect("a MASTER_ADDR line");
    let script = format!(
        "set -euo pipefail\nscontrol() {{ for i in $(seq 1 200000); do echo node$i; done; }}\nSLURM_JOB_NODELIST=x\n{line}\necho \"$MASTER_ADDR\"\n"
    );
    for _ in 0..20 {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "exit {:?}", out.status.code());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "node1");
    }
}

/// The GPT cards carry the padded 51,200 of their papers and the GPT-2
/// tokenizer's 50,257: the divisor makes Megatron-LM pad one to the other
/// (`_vocab_size_with_padding` rounds up to a multiple of X·T; checked
/// with Megatron's own code by megatron-check on the T = 4 script: "padded
/// 51200").
#[test]
fn vocabulary_divisor_reproduces_the_priced_vocabulary() {
    use meshplan::generate::megatron::vocab_divisor;
    // T = 8: 128·8 = 1024, ⌈50257/1024⌉ = 50 → 51,200 with Megatron's 128.
    assert_eq!(vocab_divisor(50257, 51200, 8), Some(128));
    // T = 4: 128 gives ⌈50257/512⌉·512 = 50,688; 256 gives 50·1024 = 51,200.
    assert_eq!(vocab_divisor(50257, 51200, 4), Some(256));
    // T = 3: the plan pads 51,200 to 51,456 = 134·384; X must divide
    // 51456/3 = 17,152 = 2^8·67: 128 → 50,304, 256 → 50,688, 268 → 50,652,
    // 536 → ⌈50257/1608⌉·1608 = 32·1608 = 51,456.
    assert_eq!(vocab_divisor(50257, 51456, 3), Some(536));
    let s = Setup::new("gpt3-175b", "dgx-a100-3072", Some(1024));
    let l = meshplan::layout::Layout {
        dp: 16,
        tp: 4,
        pp: 16,
        ..fixed_layout()
    };
    let script = s
        .bundle(&l)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    assert!(
        script.contains(
            "--make-vocab-size-divisible-by 256   # the tokenizer's 50257 padded to 51200"
        ),
        "{script}"
    );
}

/// Writing into a folder that already holds a plan says, per file, whether
/// it was new, replaced or already so, and names the launch files another
/// target left there (they describe the earlier plan).
#[test]
fn writing_over_an_earlier_plan_says_what_it_replaced() {
    use generate::{Target, WriteStatus};
    let s = Setup::new("70b", "dgx64", None);
    let dir = common::temp_dir("rewrite");
    let statuses = |r: &generate::WriteReport| -> Vec<(String, WriteStatus)> {
        r.files
            .iter()
            .map(|f| {
                let name = f.path.file_name().unwrap().to_string_lossy().into_owned();
                (name, f.status)
            })
            .collect()
    };
    let best = s.bundle(&s.best().unwrap());
    let first = generate::write(&best.files, &dir).unwrap();
    assert!(first.files.iter().all(|f| f.status == WriteStatus::Created));
    assert!(first.other_targets.is_empty());
    // The same plan again: nothing changes on disk.
    let again = generate::write(&best.files, &dir).unwrap();
    assert!(
        again
            .files
            .iter()
            .all(|f| f.status == WriteStatus::Unchanged)
    );
    // Another layout: its plan file differs from the best's.
    let other = s.bundle(&fixed_layout());
    let replaced = statuses(&generate::write(&other.files, &dir).unwrap());
    assert!(
        replaced.contains(&(generate::PLAN_FILE.to_string(), WriteStatus::Replaced)),
        "{replaced:?}"
    );
    // torchtitan's files beside Megatron-LM's: the two Megatron scripts
    // are named, the shared plan.json and CHECKLIST.md are not.
    // (ZeRO-2 and full recompute: torchtitan has no ZeRO-1 and prices
    // selective recompute per op.)
    let mut l = fixed_layout();
    l.zero = 2;
    l.recompute = Recompute::Full;
    let pr = s.problem();
    let titan = generate::generate_for(&pr, &Policy::default(), &l, Target::Torchtitan).unwrap();
    let report = generate::write(&titan.files, &dir).unwrap();
    assert_eq!(
        report.other_targets,
        vec![
            dir.join(generate::MEGATRON_SCRIPT),
            dir.join(generate::SLURM_SCRIPT)
        ]
    );
    // The command line prints the same.
    let res = meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--target",
        "torchtitan",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&res.stdout);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let plan = dir.join(generate::PLAN_FILE);
    assert!(
        stdout.contains(&format!("replaced {}", plan.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "note: {}, {} are another target's launch files",
            dir.join(generate::MEGATRON_SCRIPT).display(),
            dir.join(generate::SLURM_SCRIPT).display()
        )),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A destination that cannot be replaced (a directory named CHECKLIST.md)
/// is found before anything is written: the earlier plan stays whole.
#[test]
fn a_folder_that_cannot_take_every_file_keeps_the_earlier_plan() {
    let s = Setup::new("70b", "dgx64", None);
    let dir = common::temp_dir("preflight");
    let first = s.bundle(&s.best().unwrap());
    generate::write(&first.files, &dir).unwrap();
    let plan_before = std::fs::read_to_string(dir.join(generate::PLAN_FILE)).unwrap();
    std::fs::remove_file(dir.join(generate::CHECKLIST)).unwrap();
    std::fs::create_dir(dir.join(generate::CHECKLIST)).unwrap();
    let other = s.bundle(&fixed_layout());
    let err = generate::write(&other.files, &dir).unwrap_err();
    assert!(
        err.to_string().contains("CHECKLIST.md: cannot write"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(generate::PLAN_FILE)).unwrap(),
        plan_before
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The checklist's doubled micro-batch is offered only when doubling b
/// breaks no rule the plan keeps: llama3-8b at B = 96, D = 8 (T2 p4 on 64
/// GPUs), v = 2: b = 1 gives m = 96/8 = 12 micro-batches, a multiple of
/// p = 4 as interleaving needs; b = 2 gives m = 6, which is not.
#[test]
fn no_doubled_micro_batch_where_doubling_breaks_interleaving() {
    let dir = common::temp_dir("doubled");
    let res = meshplan(&[
        "generate",
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx64",
        "--global-batch",
        "96",
        "--tp",
        "2",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--mbs",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let plan = read_plan(&dir);
    assert_eq!(plan["mesh"]["dp"], 8);
    assert!(plan["predicted"]["doubled_micro_batch_peak_gib"].is_null());
    let checklist = std::fs::read_to_string(dir.join(generate::CHECKLIST)).unwrap();
    assert!(
        checklist.contains("No doubled micro-batch run"),
        "{checklist}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The checklist's tiny run keeps an uneven interleaved plan's schedule:
/// the 70B main job's row 6 (D2 T4 p8 v2, split by a layout string, which
/// excludes the VPP flags) drops the layout string for 16 layers and adds
/// `--num-virtual-stages-per-pipeline-rank 2`; it ran plain 1F1B before.
#[test]
fn tiny_run_keeps_the_interleaving_of_a_layout_string() {
    let dir = common::temp_dir("tiny-vpp");
    let d = dir.to_string_lossy().to_string();
    let o = common::meshplan(&[
        "generate",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--rank",
        "6",
        "--out",
        &d,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["layout"]["pp"].as_u64(), Some(8));
    assert_eq!(plan["layout"]["vpp"].as_u64(), Some(2));
    assert!(plan["layout"]["split"].is_array());
    let script = std::fs::read_to_string(dir.join("megatron_pretrain_gpt.sh")).unwrap();
    assert!(script.contains("--pipeline-model-parallel-layout"));
    assert!(!script.contains("--num-virtual-stages-per-pipeline-rank"));
    let checklist = std::fs::read_to_string(dir.join("CHECKLIST.md")).unwrap();
    let tiny = checklist
        .lines()
        .find(|l| l.contains("Cut the model to"))
        .unwrap();
    assert!(tiny.contains("`--num-layers 16`"), "{tiny}");
    assert!(
        tiny.contains("drop `--pipeline-model-parallel-layout"),
        "{tiny}"
    );
    assert!(
        tiny.contains("add `--num-virtual-stages-per-pipeline-rank 2`"),
        "{tiny}"
    );
}
