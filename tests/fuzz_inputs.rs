//! Bounded fuzzing of the inputs (issue 19): generated command lines run
//! through the binary, generated model cards through the TOML reader and
//! the cost model, and edited plan files through the plan reader and the
//! limits. Whatever the input, meshplan answers (exit 0), reports an error
//! (exit 1) or a usage error (exit 2): never a panic (101) or an abort
//! (134). The case counts keep the whole file to seconds in CI;
//! `MESHPLAN_FUZZ_CASES=N` runs N cases of each for a longer campaign.

use std::path::Path;
use std::process::Command;

use meshplan::cost::{self, Problem};
use meshplan::layout::Layout;
use meshplan::rules::{self, Policy};
use meshplan::spec::{Catalog, Job, Model};
use proptest::prelude::*;

/// `default` cases, or `MESHPLAN_FUZZ_CASES` for a longer campaign.
fn cases(default: u32) -> u32 {
    std::env::var("MESHPLAN_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Values that have broken parsers and products before: zero, negative,
/// the u32 and u64 edges, 2^31 (wraps p·v = 2·2^31), non-numbers, empty,
/// long and non-ASCII text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..=130).prop_map(|x| x.to_string()),
        Just("0".to_string()),
        Just("-8".to_string()),
        Just("2147483648".to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1048577".to_string()),
        Just("".to_string()),
        Just("x".repeat(300)),
        Just("é∞".to_string()),
        Just("1,2,3".to_string()),
        Just("19,21,21,19".to_string()),
        Just("1431655766,1431655765,1431655765,80".to_string()),
        Just("on".to_string()),
        Just("full".to_string()),
        Just("tp-cp-ep-pp-dp".to_string()),
        Just("tp=8,pp=2".to_string()),
        Just("pp=2,vpp=2147483648".to_string()),
        Just("ep=65536,etp=65536".to_string()),
        Just("torchtitan".to_string()),
        Just("deepspeed".to_string()),
        Just("megatron-bridge".to_string()),
    ]
}

const LAYOUT_FLAGS: &[&str] = &[
    "--dp",
    "--tp",
    "--pp",
    "--cp",
    "--ep",
    "--etp",
    "--vpp",
    "--mbs",
    "--zero",
    "--recompute",
    "--order",
    "--split",
    "--sp",
    "--cp-comm",
];

const JOB_FLAGS: &[&str] = &["--gpus", "--global-batch", "--seq-len", "--moe-imbalance"];

const SEARCH_FLAGS: &[&str] = &[
    "--fix",
    "--why-not",
    "--max-tp",
    "--max-pp",
    "--max-cp",
    "--max-micro-batch",
    "--top",
    "--target",
];

/// A command line: a subcommand, a model and cluster (shipped or not),
/// and up to four flags with generated values.
fn argv() -> impl Strategy<Value = Vec<String>> {
    let model = prop_oneof![
        Just("70b".to_string()),
        Just("mixtral".to_string()),
        Just("llama2-7b".to_string()),
        Just("lama3-70b".to_string()),
    ];
    let cluster = prop_oneof![Just("dgx64".to_string()), Just("h800-8".to_string())];
    (
        prop_oneof![Just("search"), Just("explain")],
        model,
        cluster,
        proptest::collection::vec((0usize..64, value()), 0..=4),
    )
        .prop_map(|(cmd, model, cluster, flags)| {
            let pool: Vec<&str> = if cmd == "search" {
                SEARCH_FLAGS.iter().chain(JOB_FLAGS).copied().collect()
            } else {
                LAYOUT_FLAGS.iter().chain(JOB_FLAGS).copied().collect()
            };
            let mut v = vec![
                cmd.to_string(),
                "--model".into(),
                model,
                "--cluster".into(),
                cluster,
                "--format".into(),
                "json".into(),
            ];
            if cmd == "search" {
                v.extend(["--top".into(), "1".into()]);
            }
            for (i, value) in flags {
                v.push(pool[i % pool.len()].to_string());
                v.push(value);
            }
            v
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), failure_persistence: None, ..ProptestConfig::default() })]

    /// The binary never panics or aborts on a generated command line.
    #[test]
    fn command_lines_never_panic(args in argv()) {
        let o = Command::new(env!("CARGO_BIN_EXE_meshplan"))
            .args(&args)
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&o.stderr);
        prop_assert!(
            matches!(o.status.code(), Some(0..=2)),
            "{:?} -> {:?}: {}", args, o.status.code(), err
        );
        prop_assert!(!err.contains("panicked"), "{:?}: {}", args, err);
        if o.status.code() != Some(0) {
            // Notes and warnings, then one `error:` line (clap adds a
            // usage hint below it).
            let first = err.lines().position(|l| l.starts_with("error: "));
            prop_assert!(first.is_some(), "{:?}: {}", args, err);
            prop_assert!(
                err.lines()
                    .take(first.unwrap_or(0))
                    .all(|l| l.starts_with("note: ") || l.starts_with("warning: ")),
                "{:?}: {}", args, err
            );
            prop_assert!(err.len() < 4_000, "{:?}: {} bytes", args, err.len());
        }
    }
}

/// The shipped Llama 3 8B card.
fn card_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("models/llama3-8b.toml"))
        .expect("card")
}

/// Numeric fields of the card and the value to give them.
fn card_edit() -> impl Strategy<Value = Vec<(&'static str, u64)>> {
    let field = prop_oneof![
        Just("layers"),
        Just("hidden"),
        Just("heads"),
        Just("kv_heads"),
        Just("ffn"),
        Just("vocab"),
        Just("max_seq"),
        Just("seq_len"),
        Just("global_batch"),
    ];
    let v = prop_oneof![
        0u64..=4,
        1u64..=200_000,
        Just(u32::MAX as u64),
        Just(1 << 20),
        Just(1 << 24),
        Just(u64::MAX),
    ];
    proptest::collection::vec((field, v), 1..=3)
}

/// `text` with `key = …` lines set to the values (the first of each key).
fn edited(text: &str, edits: &[(&str, u64)]) -> String {
    text.lines()
        .map(|l| {
            for (k, v) in edits {
                if l.split('=').next().is_some_and(|x| x.trim() == *k) {
                    return format!("{k} = {v}");
                }
            }
            l.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    /// A card the reader accepts prices without panicking on a small
    /// layout; one it refuses names a field.
    #[test]
    fn model_cards_never_panic(edits in card_edit(), tp in 1u32..=8, pp in 1u32..=4) {
        let text = edited(&card_text(), &edits);
        match Model::from_toml(&text, Path::new("card.toml")) {
            Err(e) => prop_assert!(e.to_string().starts_with("card.toml: "), "{}", e),
            Ok(model) => {
                let cat = Catalog::shipped().unwrap();
                let cluster = cat.cluster("dgx64").unwrap();
                let gpu = cat.gpu(&cluster.gpu).unwrap();
                let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
                if job.check().is_err() {
                    return Ok(());
                }
                let pr = Problem::new(&model, gpu, cluster, &job, 64);
                let l = Layout::dense(64 / (tp * pp), tp, pp, 1);
                if meshplan::limits::check_layout(&l, model.architecture.layers).is_ok() {
                    let _ = rules::violations(&pr, &Policy::default(), &l);
                    let e = cost::evaluate(&pr, &l);
                    prop_assert!(!e.tokens_per_s.is_nan(), "{:?}", edits);
                }
            }
        }
    }

    /// Garbage after a valid card never panics the TOML reader.
    #[test]
    fn toml_garbage_never_panics(tail in "[ -~\n]{0,80}") {
        let text = format!("{}\n{tail}", card_text());
        let _ = Model::from_toml(&text, Path::new("card.toml"));
    }

    /// A plan file with generated layout values is read or refused with a
    /// field named, and the limits bound what is then priced.
    #[test]
    fn plan_files_never_panic(
        key in prop_oneof![Just("dp"), Just("tp"), Just("pp"), Just("cp"), Just("ep"), Just("etp"), Just("vpp"), Just("micro_batch")],
        v in prop_oneof![0u64..=200, Just(1u64 << 31), Just(u32::MAX as u64), Just(u64::MAX)],
    ) {
        let cat = Catalog::shipped().unwrap();
        let model = cat.model("70b").unwrap();
        let cluster = cat.cluster("dgx64").unwrap();
        let gpu = cat.gpu(&cluster.gpu).unwrap();
        let job = Job::new(2048, 8192);
        let mut layout = serde_json::to_value(Layout::dense(8, 8, 1, 1)).unwrap();
        layout[key] = serde_json::json!(v);
        let plan = serde_json::json!({
            "schema": "meshplan-plan/1",
            "layout": layout,
            "model": {"name": "llama3-70b"},
            "hardware": {"cluster": "dgx64", "world": 64},
            "job": {"global_batch": 2048, "seq_len": 8192, "recipe": "megatron"},
        });
        match meshplan::generate::PlanInput::parse(&plan.to_string(), Path::new("plan.json"), 1) {
            Err(e) => prop_assert!(e.to_string().contains("plan.json"), "{}", e),
            Ok(input) => {
                if meshplan::limits::check_layout(&input.layout, model.architecture.layers).is_ok() {
                    let pr = Problem::new(model, gpu, cluster, &job, 64);
                    let _ = rules::violations(&pr, &Policy::default(), &input.layout);
                    let _ = cost::evaluate(&pr, &input.layout);
                }
            }
        }
    }
}
