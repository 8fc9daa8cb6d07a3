//! `search` says when a nearby smaller GPU count does better: DeepSeek-V3
//! on 424 GPUs of h800-2048 (424 = 2^3·53), where every layout must use
//! all 424 GPUs: the best the search finds there is p = 53 with one or two
//! layers a stage (7.2% MFU since issue 18 priced the MTP layer: the last
//! of the 53 stages holds a layer, the MTP MoE layer and two passes
//! through the 129,280-wide head, and sets the pace; 14.0% before), while
//! 384 = 2^7·3 GPUs reach 21.9% (21.3% before).
//!
//! (This test was on the 416-GPU jean-zay-a100 until the search gave v = 1
//! stage splits their own DP budget: it now finds a p = 13 layout with an
//! uneven split there at 23% MFU, so no smaller count does better on that
//! cluster and the note is, rightly, not printed.)

mod common;

use common::{Setup, meshplan};
use meshplan::gpu_count;
use meshplan::search::{self, Space};

#[test]
fn deepseek_on_424_gpus_reports_a_better_count() {
    let s = Setup::new("deepseek-v3", "h800-2048", Some(424));
    let pr = s.problem();
    let space = Space::default();
    let r = search::search(&pr, &space);
    let win = r.top.first().expect("a valid layout on 424");
    assert!(
        win.eval.mfu > 0.05 && win.eval.mfu < 0.10,
        "{}",
        win.eval.mfu
    );
    let f = gpu_count::fewer_gpus(&pr, &space, &r).expect("a better count");
    // Whole 8-GPU nodes, 7-smooth, within 10 %: 400, 392, 384.
    assert_eq!(f.probed, vec![400, 392, 384]);
    assert_eq!(f.requested.gpus, 424);
    assert_eq!(f.requested.factors, "2^3·53");
    assert!((f.requested.tokens_per_s - win.eval.tokens_per_s).abs() < 1e-9);
    assert!(f.probed.contains(&f.better.gpus));
    // The reported numbers are those of a plain search on that count.
    let sb = Setup::new("deepseek-v3", "h800-2048", Some(f.better.gpus));
    let rb = search::search(&sb.problem(), &Space::default());
    let wb = rb.top.first().unwrap();
    assert_eq!(f.better.layout.as_deref(), Some(wb.layout.short().as_str()));
    assert!((f.better.tokens_per_s - wb.eval.tokens_per_s).abs() < 1e-9);
    assert!(
        (f.better.tokens_per_s_per_gpu - wb.eval.tokens_per_s / f.better.gpus as f64).abs() < 1e-9
    );
    // …and it is the best per GPU of the three probed counts.
    for c in [400u64, 392, 384] {
        let sc = Setup::new("deepseek-v3", "h800-2048", Some(c));
        if let Some(w) = search::search(&sc.problem(), &Space::default()).top.first() {
            assert!(w.eval.tokens_per_s / c as f64 <= f.better.tokens_per_s_per_gpu + 1e-9);
            if c == 384 {
                assert!(w.eval.mfu > 0.18, "384: {}", w.eval.mfu);
            }
        }
    }
    assert!(f.per_gpu_ratio > 1.0, "{}", f.per_gpu_ratio);
    assert!(f.total_ratio > 1.0, "{}", f.total_ratio);
}

#[test]
fn a_good_count_is_not_probed() {
    // 64 = 2^6 and a 60% MFU winner: no probe, no note.
    let s = Setup::new("70b", "dgx64", None);
    let pr = s.problem();
    let r = search::search(&pr, &Space::default());
    assert!(gpu_count::fewer_gpus(&pr, &Space::default(), &r).is_none());
}

#[test]
fn table_note_and_json_field() {
    let out = meshplan(&[
        "search",
        "--model",
        "deepseek-v3",
        "--cluster",
        "h800-2048",
        "--gpus",
        "424",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let note = text
        .lines()
        .find(|l| l.starts_with("Note: fewer GPUs do better."))
        .expect("the note");
    assert!(note.contains("384 of 424 GPUs (2^7·3)"), "{note}");
    assert!(
        note.contains("all 424 (2^3·53) reach ") && note.contains("MFU 6.4%)"),
        "{note}"
    );
    assert!(note.contains("Probed 400, 392, 384"), "{note}");
    let out = meshplan(&[
        "search",
        "--model",
        "deepseek-v3",
        "--cluster",
        "h800-2048",
        "--gpus",
        "424",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["fewer_gpus"];
    assert_eq!(f["requested"]["gpus"], 424);
    assert!(f["better"]["tokens_per_s_per_gpu"].as_f64().unwrap() > 100.0);
    assert!(f["per_gpu_ratio"].as_f64().unwrap() > 1.0);
    // No field where no better count exists.
    let out = meshplan(&[
        "search",
        "--model",
        "70b",
        "--cluster",
        "dgx64",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("fewer_gpus").is_none());
}

/// Qwen3-30B-A3B at its card's global batch (1,024 × 4,096 tokens) on all
/// 16,384 GPUs of h100-16k: 256 tokens per GPU per step, a winner below
/// 20% MFU, and 16,384 = 2^14 has no better-factored neighbour, so the
/// search prices its winner on half the data-parallel replicas. Oracles:
/// the listed figures are that layout's own evaluation on 8,192 GPUs, and
/// a search of 8,192 GPUs finds at least as much (the note is a lower
/// bound). Where a nearby count already does better (DeepSeek-V3 on 424),
/// nothing is added.
#[test]
fn a_job_too_small_for_its_gpus_is_priced_on_fewer_replicas() {
    use meshplan::layout::Layout;
    let s = Setup::new("qwen3-30b-a3b", "h100-16k", None);
    let pr = s.problem();
    let space = Space::default();
    let r = search::search(&pr, &space);
    let win = r.top.first().expect("a valid layout");
    assert!(win.eval.mfu < gpu_count::POOR_MFU, "{}", win.eval.mfu);
    assert!(gpu_count::fewer_gpus(&pr, &space, &r).is_none());
    let d = gpu_count::scale_down(&pr, &space.policy, &r, None).expect("a note");
    // 1024 · 4096 / 16384 = 256 tokens per GPU per step.
    assert_eq!(d.tokens_per_gpu_per_step, 256.0);
    let half = &d.counts[0];
    assert_eq!(half.gpus, 8192);
    let l = Layout {
        dp: win.layout.dp / 2,
        ..win.layout.clone()
    };
    let s8 = Setup::new("qwen3-30b-a3b", "h100-16k", Some(8192));
    let e = meshplan::cost::evaluate(&s8.problem(), &l);
    assert_eq!(half.tokens_per_s, e.tokens_per_s);
    assert_eq!(half.layout.as_deref(), Some(l.short().as_str()));
    assert!(half.tokens_per_s >= gpu_count::SCALE_DOWN_KEEP * win.eval.tokens_per_s);
    assert!(half.tokens_per_s_per_gpu > win.eval.tokens_per_s / 16384.0);
    let best8 = search::search(&s8.problem(), &Space::default());
    assert!(best8.top[0].eval.tokens_per_s >= half.tokens_per_s);
    // A nearby better count takes precedence.
    let s424 = Setup::new("deepseek-v3", "h800-2048", Some(424));
    let p424 = s424.problem();
    let r424 = search::search(&p424, &space);
    let near = gpu_count::fewer_gpus(&p424, &space, &r424);
    assert!(near.is_some());
    assert!(gpu_count::scale_down(&p424, &space.policy, &r424, near.as_ref()).is_none());
}
