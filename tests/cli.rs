//! The binary end to end: the main job, and one clear error (non-zero exit,
//! no panic) for each kind of bad input.

use std::process::Output;

mod common;

use common::{meshplan, temp_dir};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// One error line, exit status 1, and no panic message.
fn assert_clean_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

#[test]
fn main_job_prints_ranked_plans() {
    let o = meshplan(&["search", "--model", "70b", "--cluster", "dgx64"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("llama3-70b on 64 × a100-80g"));
    assert!(out.contains("tokens/s") && out.contains("MFU"));
    assert!(out.contains("Considered") && out.contains("valid"));
    assert!(out.contains("Rejected"));
}

#[test]
fn json_and_csv_formats_parse() {
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--format",
        "json",
        "--top",
        "3",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 3);
    assert_eq!(v["context"]["gpus"], 64);
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--format",
        "csv",
        "--top",
        "4",
    ]);
    assert!(o.status.success());
    let mut r = csv::Reader::from_reader(o.stdout.as_slice());
    assert!(r.headers().unwrap().iter().any(|h| h == "tokens_per_s"));
    assert_eq!(r.records().count(), 4);
}

#[test]
fn explain_valid_and_rejected_layouts() {
    let o = meshplan(&[
        "explain",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--sp",
        "--recompute",
        "selective",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("Verdict: VALID"), "{out}");
    assert!(out.contains("Per pipeline stage"));
    // T = 3 breaks the head rule: 64 heads.
    let o = meshplan(&[
        "explain",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--tp",
        "2",
        "--pp",
        "3",
        "--dp",
        "10",
    ]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(
        out.contains("REJECTED") && out.contains("[mesh-size]") && out.contains("[layers-pp]"),
        "{out}"
    );
}

#[test]
fn list_commands() {
    let o = meshplan(&["list", "models"]);
    assert!(stdout(&o).contains("llama3-70b") && stdout(&o).contains("alias 70b"));
    let o = meshplan(&["list", "clusters"]);
    assert!(stdout(&o).contains("dgx64"));
    let o = meshplan(&["list", "gpus"]);
    assert!(stdout(&o).contains("h100-sxm"));
}

#[test]
fn unknown_model_lists_known_names() {
    let o = meshplan(&["search", "--model", "gpt5", "--cluster", "dgx64"]);
    assert_clean_error(&o, &["unknown model `gpt5`", "llama3-70b (70b"]);
}

#[test]
fn unknown_cluster_lists_known_names() {
    let o = meshplan(&["search", "--model", "70b", "--cluster", "dgx9"]);
    assert_clean_error(&o, &["unknown cluster `dgx9`", "dgx64"]);
}

#[test]
fn malformed_toml_names_the_file_and_line() {
    let d = temp_dir("malformed");
    std::fs::write(d.join("bad.toml"), "name = \"bad\"\nsource = [unclosed\n").unwrap();
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--models-dir",
        d.to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["bad.toml", "line 2"]);
}

/// Search with a copy of the llama3-8b card renamed to `name` and changed
/// by `edit`, given through `--models-dir`.
fn search_with_card(name: &str, edit: impl Fn(String) -> String) -> Output {
    let d = temp_dir(name);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/llama3-8b.toml"
    ))
    .unwrap();
    let text = edit(text.replace("name = \"llama3-8b\"", &format!("name = \"{name}\"")));
    std::fs::write(d.join(format!("{name}.toml")), text).unwrap();
    meshplan(&[
        "search",
        "--model",
        name,
        "--cluster",
        "dgx64",
        "--models-dir",
        d.to_str().unwrap(),
    ])
}

#[test]
fn incomplete_toml_names_the_missing_field() {
    let o = search_with_card("mine", |text| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("hidden"))
            .collect::<Vec<_>>()
            .join("\n")
    });
    assert_clean_error(&o, &["mine.toml", "missing field `hidden`"]);
}

#[test]
fn impossible_values_name_the_field() {
    let o = search_with_card("zero", |text| text.replacen("layers = 32", "layers = 0", 1));
    assert_clean_error(
        &o,
        &["zero.toml", "architecture.layers", "must be positive"],
    );
}

#[test]
fn impossible_jobs() {
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--gpus",
        "0",
    ]);
    assert_clean_error(&o, &["impossible job", "--gpus"]);
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--global-batch",
        "0",
    ]);
    assert_clean_error(&o, &["impossible job", "--global-batch"]);
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--gpus",
        "100000",
    ]);
    assert_clean_error(&o, &["exceeds the 64 GPUs"]);
    // Global batch smaller than D for an explicit layout.
    let o = meshplan(&[
        "explain",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--global-batch",
        "4",
        "--dp",
        "64",
    ]);
    assert_clean_error(&o, &["impossible job", "global batch 4", "D = 64"]);
}

#[test]
fn bad_fix_expression() {
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--fix",
        "tq=8",
    ]);
    assert_clean_error(&o, &["--fix", "unknown key"]);
}

#[test]
fn bad_hardware_profiles_name_file_and_field() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/hardware");
    // A cluster naming an unknown GPU: the user's file is named.
    let d = temp_dir("hw-gpu");
    std::fs::create_dir_all(d.join("clusters")).unwrap();
    let text = std::fs::read_to_string(format!("{root}/clusters/dgx64.toml")).unwrap();
    let text = text
        .replace("name = \"dgx64\"", "name = \"xc\"")
        .replace("gpu = \"a100-80g\"", "gpu = \"z9\"");
    std::fs::write(d.join("clusters/xc.toml"), text).unwrap();
    let o = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "xc",
        "--hardware-dir",
        d.to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["clusters/xc.toml", "field `gpu`", "unknown GPU `z9`"]);
    // NaN and negative bandwidths in a GPU profile.
    for (bad, needle) in [("nan", "hbm_bandwidth_gbs"), ("-5.0", "hbm_bandwidth_gbs")] {
        let d = temp_dir(&format!("hw-nan-{}", bad.len()));
        std::fs::create_dir_all(d.join("gpus")).unwrap();
        let text = std::fs::read_to_string(format!("{root}/gpus/a100-80g.toml")).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("hbm_bandwidth_gbs"))
            .unwrap()
            .to_string();
        let text = text.replace(&line, &format!("hbm_bandwidth_gbs = {bad}"));
        std::fs::write(d.join("gpus/a100-80g.toml"), text).unwrap();
        let o = meshplan(&[
            "search",
            "--model",
            "70b",
            "--cluster",
            "dgx64",
            "--hardware-dir",
            d.to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["a100-80g.toml", needle, "positive"]);
    }
}
