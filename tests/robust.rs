//! Regression tests for issue 19: inputs that panicked, hung, aborted or
//! were silently accepted. Each runs the binary and asserts the exit status
//! and the one-line message (or a correct answer), and that it returns fast:
//! the limits of `src/limits.rs` bound the work, not the raw value.

use std::process::Output;
use std::time::{Duration, Instant};

mod common;

use common::{hardware_dir_with, meshplan, temp_dir};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs meshplan with `args`, asserting it finishes within ten seconds
/// (the hangs took minutes or ran out of memory).
fn run(args: &[&str]) -> Output {
    let t = Instant::now();
    let o = meshplan(args);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "{args:?} took {:?}",
        t.elapsed()
    );
    o
}

/// Exit status `code`, no panic, and `needle` on one stderr line.
fn fails(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.lines().any(|l| l.contains(needle)),
        "`{needle}` not in: {err}"
    );
}

const JOB: [&str; 4] = ["--model", "70b", "--cluster", "dgx64"];

fn with(cmd: &str, job: &[&str], extra: &[&str]) -> Vec<String> {
    std::iter::once(cmd)
        .chain(job.iter().copied())
        .chain(extra.iter().copied())
        .map(str::to_string)
        .collect()
}

fn run_v(v: &[String]) -> Output {
    run(&v.iter().map(String::as_str).collect::<Vec<_>>())
}

const TOO_BIG: &str = "exceeds meshplan's limit of 1048576 for a parallel size, micro-batch or v";

/// p·v = 2·2^31 wrapped a u32 to 0 and divided by it (exit 101); now the
/// flag is refused as beyond the 2^20 limit, exit 2 (usage).
#[test]
fn wrapping_pipeline_chunks_are_refused() {
    for cmd in ["explain", "generate"] {
        let o = run_v(&with(cmd, &JOB, &["--pp", "2", "--vpp", "2147483648"]));
        fails(&o, 2, &format!("`2147483648` {TOO_BIG}"));
    }
    let o = run_v(&with("search", &JOB, &["--why-not", "pp=2,vpp=2147483648"]));
    fails(
        &o,
        1,
        &format!("error: --why-not: `vpp=2147483648`: `2147483648` {TOO_BIG}"),
    );
    // Within the size limit but more chunks than the 80 layers.
    let o = run_v(&with("explain", &JOB, &["--pp", "2", "--vpp", "41"]));
    fails(
        &o,
        1,
        "error: p·v = 2·41 = 82 pipeline stages, but the model has only 80 transformer layers: every stage needs at least one layer",
    );
}

/// A plan.json edited to vpp = 2^31 reaches the same check.
#[test]
fn edited_plan_file_is_checked() {
    let dir = temp_dir("robust-plan");
    let o = run_v(&with(
        "generate",
        &JOB,
        &["--out", dir.to_str().unwrap(), "--format", "json"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    let plan = dir.join("plan.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["layout"]["vpp"] = serde_json::json!(2147483648u64);
    std::fs::write(&plan, serde_json::to_string(&v).unwrap()).unwrap();
    let out = dir.join("again");
    let o = run_v(&with(
        "generate",
        &JOB,
        &[
            "--plan",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    fails(
        &o,
        1,
        "field `layout`: v = 2147483648 exceeds meshplan's limit of 1048576",
    );
}

/// E·ETP = 2^16·2^16 = 2^32 wrapped to 0.
#[test]
fn wrapping_expert_block_is_refused() {
    let o = run(&[
        "explain",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "dgx64",
        "--ep",
        "65536",
        "--etp",
        "65536",
    ]);
    fails(
        &o,
        1,
        "error: the expert block E·ETP = 4294967296 exceeds meshplan's limit of 1048576 (see src/limits.rs)",
    );
}

/// `1u32 << i` wrapped and the micro-batch list grew until the OOM killer;
/// now the answer is the default search's (micro-batches above the
/// per-replica batch are never valid, so the winner is the same).
#[test]
fn huge_max_micro_batch_gives_the_default_answer() {
    let top = |extra: &[&str]| {
        let o = run_v(&with(
            "search",
            &JOB,
            &[&["--format", "json", "--top", "1"], extra].concat(),
        ));
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["rows"][0]["layout"].clone()
    };
    let huge = top(&["--max-micro-batch", "4294967295"]);
    // The same winner as the default search, with a micro-batch the
    // per-replica batch allows.
    assert_eq!(huge, top(&[]));
    let per_replica = 2048 / huge["dp"].as_u64().unwrap();
    assert!(huge["micro_batch"].as_u64().unwrap() <= per_replica);
}

/// Work linear in the value (12.5 s at p = 10^6) or an allocation abort
/// (exit 134) at p = 2^32 − 1; now refused at parse time.
#[test]
fn huge_pipeline_and_virtual_sizes_are_refused_fast() {
    for extra in [
        &["--vpp", "4294967295"][..],
        &["--dp", "1", "--pp", "100000000"],
        &["--dp", "1", "--pp", "4294967295"],
    ] {
        let o = run_v(&with("explain", &JOB, extra));
        fails(&o, 2, TOO_BIG);
    }
}

/// A model card edited by `edit`, in a fresh `--models-dir`.
fn card(edit: impl Fn(String) -> String) -> std::path::PathBuf {
    let dir = temp_dir("robust-card");
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/llama3-8b.toml"),
    )
    .unwrap();
    std::fs::write(dir.join("llama3-8b.toml"), edit(text)).unwrap();
    dir
}

fn search_card(dir: &std::path::Path) -> Output {
    run(&[
        "search",
        "--model",
        "8b",
        "--cluster",
        "dgx64",
        "--models-dir",
        dir.to_str().unwrap(),
    ])
}

#[test]
fn absurd_vocabulary_is_refused() {
    let dir = card(|t| t.replace("vocab = 128256", "vocab = 18446744073709551615"));
    fails(
        &search_card(&dir),
        1,
        "field `architecture.vocab`: 18446744073709551615 exceeds meshplan's limit of 16777216 (see src/limits.rs)",
    );
}

#[test]
fn zero_head_dim_is_refused() {
    let dir = card(|t| t.replace("ffn = 14336", "head_dim = 0\nffn = 14336"));
    fails(
        &search_card(&dir),
        1,
        "field `architecture.head_dim`: must be positive, found 0",
    );
}

/// B·s = 2^32·2^32 wrapped to "0 tokens/step".
#[test]
fn absurd_tokens_per_step_are_refused() {
    let o = run_v(&with(
        "search",
        &JOB,
        &["--global-batch", "4294967296", "--seq-len", "4294967296"],
    ));
    fails(
        &o,
        1,
        "error: impossible job: --global-batch = 4294967296 exceeds meshplan's limit of 16777216",
    );
    // Each within its own limit, the product beyond 2^40.
    let o = run_v(&with(
        "search",
        &JOB,
        &["--global-batch", "16777216", "--seq-len", "16777216"],
    ));
    fails(
        &o,
        1,
        "tokens per step B·s = 281474976710656 exceeds meshplan's limit of 1099511627776",
    );
}

/// 1431655766 + 2·1431655765 + 80 = 2^32 + 80 wrapped to 80 and passed the
/// split rule; entries above the model's 80 layers are now refused.
#[test]
fn wrapping_split_is_refused() {
    let o = run_v(&with(
        "explain",
        &JOB,
        &[
            "--pp",
            "4",
            "--split",
            "1431655766,1431655765,1431655765,80",
        ],
    ));
    fails(
        &o,
        1,
        "error: split entry 1431655766 exceeds the model's 80 layers",
    );
    // Entries within the layers, the sum wrong: the split rule, unwrapped.
    let o = run_v(&with(
        "explain",
        &JOB,
        &["--pp", "4", "--split", "80,80,80,80"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[split] split 80,80,80,80 has 4 stages summing to 320 layers; the layout needs 4 stages summing to 80, none empty"),
        "{out}"
    );
}

#[test]
fn sequence_above_max_seq_warns() {
    let o = run_v(&with(
        "search",
        &JOB,
        &["--seq-len", "65536", "--global-batch", "64", "--top", "1"],
    ));
    let err = stderr(&o);
    assert!(
        err.contains("warning: --seq-len 65536 exceeds llama3-70b's architecture.max_seq 8192"),
        "{err}"
    );
    let o = run_v(&with("search", &JOB, &["--top", "1"]));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}

#[test]
fn zero_and_negative_bounds_are_refused() {
    for flag in ["--max-tp", "--max-pp", "--max-cp"] {
        let o = run_v(&with("search", &JOB, &[flag, "0"]));
        fails(&o, 2, "`0` is not a positive integer");
    }
    let o = run_v(&with("explain", &JOB, &["--pp", "-8"]));
    fails(
        &o,
        2,
        "error: invalid value '-8' for '--pp <PP>': `-8` is negative; sizes are positive integers",
    );
    let o = run_v(&with("explain", &JOB, &["--split", "-1,2"]));
    fails(
        &o,
        2,
        "error: invalid value '-1' for '--split <SPLIT>': `-1` is negative; a split lists the layers of each stage",
    );
    let o = run_v(&with("search", &JOB, &["--top", "-1"]));
    fails(
        &o,
        2,
        "error: invalid value '-1' for '--top <TOP>': `-1` is negative; give a positive integer",
    );
    let o = run_v(&with("search", &JOB, &["--gpus", "-8"]));
    fails(
        &o,
        2,
        "error: invalid value '-8' for '--gpus <GPUS>': `-8` is negative; give a positive integer",
    );
}

/// A cluster beyond 2^20 GPUs is refused; 262,144 GPUs (hundreds of
/// thousands) still plan.
#[test]
fn cluster_sizes_up_to_the_limit_plan() {
    let dir = temp_dir("robust-hw");
    std::fs::create_dir_all(dir.join("clusters")).unwrap();
    let base = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("hardware/clusters/dgx64.toml"),
    )
    .unwrap();
    let write = |nodes: &str| {
        let t = base
            .replace("name = \"dgx64\"", "name = \"huge\"")
            .lines()
            .map(|l| {
                if l.starts_with("nodes") {
                    format!("nodes = {nodes}")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("clusters/huge.toml"), t).unwrap();
    };
    let hw = dir.to_str().unwrap();
    write("32768");
    let o = run(&[
        "search",
        "--model",
        "8b",
        "--cluster",
        "huge",
        "--hardware-dir",
        hw,
        "--gpus",
        "262144",
        "--global-batch",
        "262144",
        "--seq-len",
        "8192",
        "--fix",
        "tp=8,pp=1,cp=1,mbs=1",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // D = 262144 / 8 = 32768.
    assert_eq!(v["rows"][0]["layout"]["dp"], 32768);
    write("1048577");
    let o = run(&[
        "search",
        "--model",
        "8b",
        "--cluster",
        "huge",
        "--hardware-dir",
        hw,
    ]);
    fails(
        &o,
        1,
        "field `nodes`: 1048577 nodes × 8 GPUs = 8388616 GPUs exceed meshplan's limit of 1048576",
    );
}

/// `meshplan … | head -1`: the reader goes away after one line; every
/// format exits 0 without a word (JSON and CSV said "error: Broken pipe").
#[test]
fn closed_pipe_is_quiet_for_every_format() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    for format in ["table", "json", "csv"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshplan"))
            .args(with("search", &JOB, &["--top", "3000", "--format", format]))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{format}");
    }
}

/// An empty search says which fixed value cannot be met (it said "every
/// mesh size must divide the GPU count" for all of these).
#[test]
fn empty_search_names_its_reason() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--fix", "ep=3"],
            "No layout of 64 GPUs matches the fixed values and bounds: ep=3: llama3-70b is a dense model (no experts), so E is 1.",
        ),
        (
            &["--no-cp", "--fix", "cp=4"],
            "No layout of 64 GPUs matches the fixed values and bounds: cp=4 contradicts --no-cp (C = 1).",
        ),
        (
            &["--fix", "tp=3"],
            "No layout of 64 GPUs matches the fixed values and bounds: tp=3 does not divide the 64 GPUs.",
        ),
        (
            // 8·8·2 = 128 does not divide 64.
            &["--fix", "tp=8,cp=8,pp=2"],
            "No layout of 64 GPUs matches the fixed values and bounds: the fixed sizes multiply to 128, which does not divide the 64 GPUs.",
        ),
    ];
    for (extra, line) in cases {
        let o = run_v(&with("search", &JOB, extra));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.lines().any(|l| l == line), "{extra:?}: {out}");
    }
    let o = run(&[
        "search",
        "--model",
        "mixtral",
        "--cluster",
        "dgx64",
        "--fix",
        "ep=3",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("bounds: ep=3 does not divide the 8 experts."),
        "{out}"
    );
}

/// T = 128 on 64 GPUs cannot be built even across domains: no promise of
/// a layout "below", the broken rules instead.
#[test]
fn why_not_without_any_layout_says_why() {
    let o = run_v(&with("search", &JOB, &["--why-not", "tp=128,pp=1"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("below"), "{out}");
    assert!(
        out.contains("no layout matching `tp=128,pp=1` can be built for 64 GPUs: [mesh-size] D·T·p·C = 1·128·1·1 = 128 but the job has 64 GPUs"),
        "{out}"
    );
}

#[test]
fn calibrate_into_a_missing_folder_says_so() {
    let dir = temp_dir("robust-cal");
    let out = dir.join("missing/overlay.toml");
    let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/published-dev.csv");
    let o = run(&[
        "calibrate",
        csv.to_str().unwrap(),
        "--gpu",
        "a100-80g",
        "--out",
        out.to_str().unwrap(),
    ]);
    fails(
        &o,
        1,
        &format!(
            "{}: cannot write the file (folder {} does not exist)",
            out.display(),
            dir.join("missing").display()
        ),
    );
    assert!(!stderr(&o).contains("cannot read"), "{}", stderr(&o));
}

#[test]
fn typos_get_did_you_mean_and_long_names_are_cut() {
    let o = run(&["search", "--model", "lama3-70b", "--cluster", "dgx64"]);
    fails(
        &o,
        1,
        "error: unknown model `lama3-70b`; did you mean `llama3-70b`? known models:",
    );
    let o = run(&["search", "--model", "70b", "--cluster", "dgx46"]);
    fails(
        &o,
        1,
        "error: unknown cluster `dgx46`; did you mean `dgx64`? known clusters:",
    );
    let o = run(&["search", "--model", "70b", "--cluster", "zzzzzzzz"]);
    fails(
        &o,
        1,
        "error: unknown cluster `zzzzzzzz`; known clusters: dgx-a100-3072,",
    );
    let long = "q".repeat(100_000);
    let o = run(&["search", "--model", &long, "--cluster", "dgx64"]);
    fails(
        &o,
        1,
        &format!(
            "error: unknown model `{}… (100000 characters)`;",
            "q".repeat(64)
        ),
    );
    assert!(stderr(&o).len() < 1_000, "{}", stderr(&o).len());
}

/// The search's counters add up: considered = priced + pruned + rejected
/// unpriced, and `--top` large enough lists valid − twins rows, the number
/// `generate --rank` accepts and the footer prints. (It printed "36490
/// layouts: 6644 valid, 25531 priced, 11010 pruned", 36,541 > 36,490, and
/// listed 5,292 rows.)
#[test]
fn counters_add_up_in_every_output() {
    // Every valid layout listed (re-split by the ILP): not timed.
    let o = meshplan(
        &with("search", &JOB, &["--top", "100000", "--format", "json"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap();
    // 12295 + 21184 + 0 + 3191 = 36670 (with the zero3-pp rule gone no
    // layout breaks two structural rules here, so none is left unpriced).
    // Of the 21184 pruned, 10919 fall to their mesh's model-states bound
    // and 10265 to the peak of a pipeline rank above usable memory, once
    // memory's near-miss is priced; 3183 of the rank-mapping and
    // layers-pp rejections have a balanced-split bound below a near-miss
    // already priced on their mesh or an earlier chunk of meshes, so are
    // not priced (3199 before the interleaved schedule's p2p overlap was
    // priced: the bound of an interleaved layout counts only the sends
    // its pipeline exposes, so 16 more reach their near-miss and are
    // priced). 180 of the 36670 are p = 32 at v = 2 (32·2 = 64 chunks of
    // 80 layers): no v above 1 splits 80 layers evenly over 32 stages, so
    // the uneven interleavings are tried there (`search::interleavings`;
    // 36490, 12123 priced and 3183 bounded before). 15337 + 22884 + 1524
    // + 5753 = 45498: 8828 more are uneven v (v = 3, 6, 7 on p = 2; 3, 6,
    // 7, 8 on p = 4; 3, 4, 6, 7, 8 on p = 8; 2, 3, 4 on p = 16 over 80
    // layers) where the
    // largest even v below leaves a bubble of at least 1%
    // (`search::interleaving_kept`; 36670 = 12295 + 21184 + 0 + 3191
    // before); 1524 of them break two rules (the split and another) and
    // are left unpriced.
    assert_eq!(
        (
            n("considered"),
            n("evaluated"),
            n("pruned"),
            n("unpriced"),
            n("near_miss_bounded")
        ),
        (45498, 15337, 22884, 1524, 5753)
    );
    assert_counters_add_up(&v);
    // One row per ranked layout: the distinct valid layouts (valid less
    // rank-order twins) predicted at least half the fastest's tokens/s
    // (at the time of writing 8336 − 284 = 8052 distinct, 7249 ranked).
    let (valid, twins, ranked) = (n("valid"), n("twins"), n("ranked"));
    assert!(valid > twins && twins > 0);
    assert!(ranked > 0 && ranked <= valid - twins);
    assert_eq!(v["rows"].as_array().unwrap().len() as u64, ranked);
    let rows = ranked;

    // --top 2^63: 2·K wrapped to 0 and listed nothing.
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--top",
        "9223372036854775808",
        "--format",
        "csv",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        csv::Reader::from_reader(o.stdout.as_slice())
            .records()
            .count() as u64,
        rows
    );

    // How many layouts the ILP rescues (uneven splits of layouts a uniform
    // split does not fit) depends on the K best it must beat, so each run's
    // valid count is read from that run and checked against its own
    // identity: valid = distinct + twins.
    let numbers = |text: &str, head: &str, sep: &str| -> (u64, u64, u64) {
        let at = text
            .find(head)
            .unwrap_or_else(|| panic!("{head} in {text}"));
        let rest = &text[at + head.len()..];
        let num = |s: &str| -> (u64, usize) {
            let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            (s[..end].parse().unwrap(), end)
        };
        let (valid, e) = num(rest);
        let rest = &rest[e..];
        let rest = &rest[rest.find('(').unwrap() + 1..];
        let (distinct, e) = num(rest);
        let rest = &rest[e..];
        let rest = &rest[rest.find(sep).unwrap() + sep.len()..];
        let (twins, _) = num(rest);
        (valid, distinct, twins)
    };
    let o = run_v(&with("search", &JOB, &[]));
    let out = String::from_utf8_lossy(&o.stdout);
    let head = "Considered 45498 layouts = 15337 priced + 22884 pruned by exact memory bounds + 1524 rejected unpriced (two or more rules broken) + 5753 bounded (one rule broken; their tokens/s bound under that rule's near-miss); ";
    let (v0, d0, t0) = numbers(&out, head, "distinct; ");
    assert_eq!(v0, d0 + t0, "{out}");
    assert!(out.contains(
        "rank-order twins, same layout and predictions in another rank order, listed once)"
    ));
    let o = run_v(&with("search", &JOB, &["--top", "1", "--stats"]));
    let err = stderr(&o);
    let head = "stats: considered 45498 layouts = priced 15337 + pruned 22884 + rejected unpriced 1524 + unpriceable 0 + near-miss bounded 5753; valid ";
    let (v1, d1, t1) = numbers(&err, head, "distinct, ");
    assert_eq!(v1, d1 + t1, "{err}");

    // `generate --rank` accepts exactly the distinct layouts a search that
    // lists them all ranks (the `--top 100000` run above).
    let dir = temp_dir("robust-rank");
    let d = dir.to_str().unwrap();
    let generate = |rank: &str| {
        meshplan(&[
            "generate",
            "--model",
            "70b",
            "--cluster",
            "dgx64",
            "--rank",
            rank,
            "--out",
            d,
        ])
    };
    let o = generate(&rows.to_string());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = generate(&(rows + 1).to_string());
    fails(
        &o,
        1,
        &format!(
            "error: --rank {}: the search ranks {rows} layout(s) for llama3-70b on 64 GPUs: the distinct valid ones ({valid} valid, {twins} of them rank-order twins listed once) predicted at least 50% of the fastest's tokens/s",
            rows + 1
        ),
    );
}

/// The same identities on a MoE model (E and ETP enumerated too).
#[test]
fn counters_add_up_on_moe() {
    let o = meshplan(&[
        "search",
        "--model",
        "mixtral",
        "--cluster",
        "dgx64",
        "--gpus",
        "16",
        "--top",
        "100000",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap();
    assert!(n("considered") > 0 && n("valid") > 0);
    assert_counters_add_up(&v);
    assert!(n("ranked") <= n("valid") - n("twins"));
    assert_eq!(v["rows"].as_array().unwrap().len() as u64, n("ranked"));
}

/// A 10^300 imbalance priced NaN tokens/s; a 10^30-token budget printed
/// 4 × 10^20 days; a capacity factor below 1 drops tokens silently.
#[test]
fn absurd_moe_load_and_token_budget() {
    let mixtral = ["--model", "mixtral", "--cluster", "dgx64", "--top", "1"];
    let o = run_v(&with("search", &mixtral, &["--moe-imbalance", "1e300"]));
    fails(
        &o,
        1,
        "error: impossible job: --moe-imbalance 1e300 exceeds meshplan's limit of 1024 (see src/limits.rs)",
    );
    let o = run_v(&with("search", &JOB, &["--top", "1", "--tokens", "1e30"]));
    fails(
        &o,
        1,
        "error: --tokens: `1e30`: too large a number of tokens; meshplan's limit is 1e18 (see src/limits.rs)",
    );
    // Text that is not a token count is a usage error, as any bad number
    // is (README, exit codes); a count beyond the limit is a job error.
    let o = run_v(&with("search", &JOB, &["--top", "1", "--tokens", "abc"]));
    fails(
        &o,
        2,
        "error: invalid value 'abc' for '--tokens <TOKENS>': `abc`: unknown suffix `c`; use K, M, B or T (e.g. 15T)",
    );
    let o = run_v(&with("search", &JOB, &["--top", "1", "--tokens", "0"]));
    fails(&o, 2, "`0`: the token budget must be at least 1 token");
    let o = run_v(&with("search", &mixtral, &["--moe-capacity-factor", "0.5"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: --moe-capacity-factor 0.5 is below 1: every expert drops tokens even with perfectly balanced routing"),
        "{}",
        stderr(&o)
    );
}

/// A GPU profile with 10^300 GiB of memory is refused naming the field.
#[test]
fn absurd_profile_numbers_are_refused() {
    let dir = hardware_dir_with("robust-gpu", "gpus/a100-80g.toml", |t| {
        t.replace("memory_gib = 80.0", "memory_gib = 1e300")
    });
    let o = run(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--hardware-dir",
        dir.to_str().unwrap(),
    ]);
    fails(
        &o,
        1,
        "gpus/a100-80g.toml: field `memory_gib`: 1e300 exceeds meshplan's limit of 1e9 (see src/limits.rs)",
    );
}

/// A negative GEMM half-saturation depth is refused naming the field.
#[test]
fn negative_gemm_half_k_is_refused() {
    let dir = hardware_dir_with("robust-halfk", "gpus/a100-80g.toml", |t| {
        t.replace("gemm_half_k = 83.0", "gemm_half_k = -83.0")
    });
    let o = run(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--hardware-dir",
        dir.to_str().unwrap(),
    ]);
    fails(
        &o,
        1,
        "gpus/a100-80g.toml: field `efficiency.gemm_half_k`: must be zero or positive, found -83",
    );
}

/// A plan file edited to `"zero": 4` is refused naming the file and field
/// (it panicked slicing the sharded-state names by the stage).
#[test]
fn a_plan_file_with_zero_4_is_refused() {
    let dir = temp_dir("robust-zero4");
    let out = dir.join("plan");
    let o = run_v(&with("generate", &JOB, &["--out", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(out.join("plan.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["layout"]["zero"] = serde_json::json!(4);
    let edited = dir.join("edited.json");
    std::fs::write(&edited, serde_json::to_string(&v).unwrap()).unwrap();
    let o = run_v(&with(
        "generate",
        &JOB,
        &[
            "--plan",
            edited.to_str().unwrap(),
            "--out",
            dir.join("again").to_str().unwrap(),
        ],
    ));
    fails(&o, 1, "ZeRO stage 4");
    assert!(stderr(&o).contains("edited.json"), "{}", stderr(&o));
}

/// With a global batch of 1, the layouts the batch and interleave rules
/// reject cannot run at all (half a micro-batch per replica; one
/// micro-batch through an interleaved schedule): their near-misses are
/// named without a price (they were listed at 7,601 and 12,667 tokens/s,
/// above the best valid plan).
#[test]
fn impossible_near_misses_carry_no_price() {
    let o = run_v(&with("search", &JOB, &["--global-batch", "1"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for code in ["batch", "interleave"] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(code))
            .unwrap_or_else(|| panic!("no {code} line: {out}"));
        assert!(
            line.contains("not priced") && !line.contains("tokens/s"),
            "{line}"
        );
    }
}

/// A search's JSON counters add up: every layout considered is priced,
/// pruned, rejected unpriced, unpriceable or bounded (near-miss or top-K).
fn assert_counters_add_up(v: &serde_json::Value) {
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(
        n("considered"),
        n("evaluated")
            + n("pruned")
            + n("unpriced")
            + n("unpriceable")
            + n("near_miss_bounded")
            + n("top_k_bounded")
    );
}
