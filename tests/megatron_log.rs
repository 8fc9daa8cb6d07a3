//! `import-log` and `calibrate --megatron-log`: a Megatron-LM log
//! (`examples/megatron-logs/`, synthetic, in Megatron-LM's own format) read
//! into a measurement row, checked by hand.

mod common;

use common::meshplan;
use meshplan::validate;
use std::path::Path;

const LOG: &str = "examples/megatron-logs/llama3-8b-dgx-h100-tp2dp4.log";

#[test]
fn a_log_becomes_the_row_its_run_was() {
    let o = meshplan(&["import-log", LOG, "--gpu", "h100-sxm"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = validate::read_csv(&String::from_utf8_lossy(&o.stdout), Path::new("x.csv")).unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    // From the arguments block: Llama 3 8B (GQA 8), T2 D4 with SP, b 1,
    // B 128, s 8192, world 8; the tokenizer's padded vocabulary.
    assert_eq!(
        (r.layers, r.hidden, r.heads, r.kv_heads, r.ffn),
        (Some(32), Some(4096), Some(32), Some(8), Some(14336))
    );
    assert_eq!(
        (r.tp, r.pp, r.dp, r.num_gpus, r.mbs, r.gbs, r.seq),
        (2, 1, 4, 8, Some(1), 128, 8192)
    );
    assert_eq!(r.sp.as_deref(), Some("yes"));
    assert_eq!(r.vocab.as_deref(), Some("128256"));
    assert_eq!(r.run.zero, Some(1));
    // Step time: the median of the nine intervals after the first (16.8 s,
    // warm-up): sorted 13844.8 13851.3 13875.8 13878.8 [13912.4] 13932.2
    // 13941.5 13952.5 13953.4 ms.
    assert_eq!(r.measured_step_s, Some(13.9124));
    // TFLOP/s: the same intervals' median, 484.8 (483.3 … 487.1).
    assert_eq!(r.measured_tflops_per_gpu, Some(484.8));
    // Memory: max reserved 60314.00 MB = 60314 / 1024 = 58.900390625 GiB.
    assert_eq!(r.measured_mem_gb, Some(58.900390625));
    assert_eq!(r.run.mem_kind, Some(validate::MemKind::TorchReserved));
}

#[test]
fn calibrate_reads_logs() {
    let dir = common::temp_dir("mlog");
    let out = dir.join("cal.toml");
    let o = meshplan(&[
        "calibrate",
        "--megatron-log",
        LOG,
        "--gpu",
        "h100-sxm",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    // The run is priced 8.1% fast with the shipped h100-sxm profile (6.4%
    // before issue 14's GEMM depth curve and the refitted `gemm` 0.69: this
    // TP-2 Llama-3-8B's GEMMs are 4096 deep or deeper); the fit closes most
    // of it.
    let line = text
        .lines()
        .find(|l| l.starts_with("llama3-8b-dgx-h100-tp2dp4"))
        .unwrap();
    let errs: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.trim_end_matches('%').parse().unwrap())
        .collect();
    assert!((errs[0] + 8.1).abs() < 0.3 && errs[1].abs() < 2.0, "{line}");
}

#[test]
fn logs_without_arguments_or_iterations_are_refused() {
    let dir = common::temp_dir("mlog-bad");
    let text = std::fs::read_to_string(LOG).unwrap();
    let cut = dir.join("no-args.log");
    let start = text.find("-------------------- end of arguments").unwrap();
    std::fs::write(&cut, &text[start..]).unwrap();
    let o = meshplan(&["import-log", cut.to_str().unwrap(), "--gpu", "h100-sxm"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("field `arguments`: no `------------------------ arguments"),
        "{err}"
    );
    let one = dir.join("one.log");
    let end = text.find(" iteration       20/").unwrap();
    std::fs::write(&one, &text[..end]).unwrap();
    let o = meshplan(&["import-log", one.to_str().unwrap(), "--gpu", "h100-sxm"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("field `iterations`: 1 iteration line(s)"),
        "{err}"
    );
    // No tokenizer line and no --vocab: the vocabulary is asked for.
    let nov = dir.join("novocab.log");
    std::fs::write(&nov, text.replace("(new size: 128256)", "")).unwrap();
    let o = meshplan(&["import-log", nov.to_str().unwrap(), "--gpu", "h100-sxm"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("field `vocab`: the log has no"), "{err}");
    let o = meshplan(&[
        "import-log",
        nov.to_str().unwrap(),
        "--gpu",
        "h100-sxm",
        "--vocab",
        "128256",
    ]);
    assert!(o.status.success());
}
