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

/// `--append FILE` adds the rows to a CSV instead of printing them: the
/// header only into a new file, the file's own column order otherwise, and
/// a row id already there is refused (with `>>` the header came again and
/// validate skipped it as a malformed row).
#[test]
fn append_adds_rows_once_under_one_header() {
    let dir = common::temp_dir("append");
    let runs = dir.join("runs.csv");
    let second = dir.join("second-run.log");
    std::fs::copy(LOG, &second).unwrap();
    let append = |log: &str, to: &Path| {
        meshplan(&[
            "import-log",
            log,
            "--gpu",
            "h100-sxm",
            "--append",
            to.to_str().unwrap(),
        ])
    };
    let o = append(LOG, &runs);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("appended 1 row(s) to {}\n", runs.display())
    );
    assert!(append(second.to_str().unwrap(), &runs).status.success());
    let text = std::fs::read_to_string(&runs).unwrap();
    // One header and two rows: the two logs' ids.
    assert_eq!(text.lines().filter(|l| l.starts_with("id,")).count(), 1);
    let rows = validate::read_csv(&text, &runs).unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["llama3-8b-dgx-h100-tp2dp4", "second-run"]);
    // The same log again: refused, the file unchanged.
    let again = append(LOG, &runs);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim_end(),
        format!(
            "error: {}: row id `llama3-8b-dgx-h100-tp2dp4` is already there (line 2); rename the log (the id is its file stem) or remove that row",
            runs.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), text);
    // The validation table's header (same columns, `notes` last) takes the
    // row in its own order; validate then reads 177 + 1 rows.
    let table = dir.join("table.csv");
    std::fs::copy("tests/data/published-dev-v2.csv", &table).unwrap();
    assert!(append(second.to_str().unwrap(), &table).status.success());
    let rows = validate::read_csv(&std::fs::read_to_string(&table).unwrap(), &table).unwrap();
    assert_eq!(rows.len(), 178);
    let last = rows.last().unwrap();
    assert_eq!(
        (last.id.as_str(), last.measured_step_s),
        ("second-run", Some(13.9124))
    );
    // The shipped table ends its lines with CRLF: the appended row does
    // too, and a second append names the row's own line (178 lines, the
    // row on 179).
    let again = append(second.to_str().unwrap(), &table);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("row id `second-run` is already there (line 179)"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let bytes = std::fs::read(&table).unwrap();
    assert_eq!(
        bytes.windows(2).filter(|w| w == b"\r\n").count(),
        bytes.iter().filter(|&&b| b == b'\n').count()
    );
    // Two logs of one call with the same stem: refused, nothing written.
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::copy(LOG, d.join("run.log")).unwrap();
    }
    let twice = dir.join("twice.csv");
    let o = meshplan(&[
        "import-log",
        a.join("run.log").to_str().unwrap(),
        b.join("run.log").to_str().unwrap(),
        "--gpu",
        "h100-sxm",
        "--append",
        twice.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("two of the logs give the row id `run`"));
    assert!(!twice.exists());
    // A file of blank lines counts as new: header and row, validate reads it.
    let blank = dir.join("blank.csv");
    std::fs::write(&blank, "\n\n  \n").unwrap();
    assert!(append(LOG, &blank).status.success());
    let rows = validate::read_csv(&std::fs::read_to_string(&blank).unwrap(), &blank).unwrap();
    assert_eq!(rows.len(), 1);
    // A file that is not a measurement table is refused, naming a column.
    let other = dir.join("other.csv");
    std::fs::write(&other, "a,b\n1,2\n").unwrap();
    let o = append(LOG, &other);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("lacks the column(s) id, source, model"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
