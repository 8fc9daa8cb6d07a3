//! `meshplan validate` on `published-dev-v2.csv` (tests/data, see its
//! README): every row predicted as the run was configured or skipped with
//! its reason, bad rows never stopping the file, and every v2 column read.

use std::path::Path;

use meshplan::spec::Catalog;
use meshplan::validate::{self, Table, ValidationReport};

const V2: &str = include_str!("data/published-dev-v2.csv");
const FILE: &str = "tests/data/published-dev-v2.csv";

fn table(text: &str) -> Table {
    validate::read_table(text, Path::new(FILE)).expect("the header is complete")
}

fn run(text: &str) -> ValidationReport {
    validate::validate_table(&table(text), &Catalog::shipped().unwrap(), None)
}

/// The CSV records of `text`: header and rows as strings.
fn records(text: &str) -> (csv::StringRecord, Vec<csv::StringRecord>) {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header = r.headers().unwrap().clone();
    let rows = r.records().map(|x| x.unwrap()).collect();
    (header, rows)
}

/// A CSV with `header` and `rows`.
fn csv_text(header: &csv::StringRecord, rows: &[csv::StringRecord]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header).unwrap();
    for r in rows {
        w.write_record(r).unwrap();
    }
    String::from_utf8(w.into_inner().unwrap()).unwrap()
}

/// The v2 row `id` with `changes` (column, value) applied.
fn row_with(id: &str, changes: &[(&str, &str)]) -> String {
    let (header, rows) = records(V2);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let mut row: Vec<String> = rows
        .iter()
        .find(|r| &r[0] == id)
        .unwrap_or_else(|| panic!("no row {id}"))
        .iter()
        .map(str::to_string)
        .collect();
    for (c, v) in changes {
        row[col(c)] = v.to_string();
    }
    csv_text(&header, &[csv::StringRecord::from(row)])
}

/// Throughput error, predicted step, memory error, out of memory.
type Priced = (Option<f64>, Option<f64>, Option<f64>, bool);

/// The only row of `text`, priced: (throughput error, step error, memory
/// error, out of memory), or the skip reason.
fn priced(text: &str) -> Result<Priced, String> {
    let r = run(text);
    match (r.rows.first(), r.skipped.first()) {
        (Some(x), _) => Ok((
            x.throughput_error,
            x.step_s.map(|m| m.predicted),
            x.memory_gib.map(|m| m.predicted - m.measured),
            x.out_of_memory,
        )),
        (None, Some(s)) => Err(s.reason.clone()),
        (None, None) => panic!("nothing reported"),
    }
}

/// dev-v2 (177 rows): 171 predicted. The 38 low-precision rows are priced
/// with their recipe (issue 14) unless they lack what every row needs: the
/// four NeMo rows without shape or card (GPT3-5B/20B, Nemotron-8B/22B) skip
/// for their empty `hidden`; the two Qwen3-235B rows (no card cell) are
/// priced with the `qwen3-235b-a22b` card their model column names (issue
/// 15). The one bf16 MoE row with neither card nor shape skips
/// (`MBRIDGE-25.11-DGX-H100-GPT-BF16-64`, gpt-oss); DeepSeek-V3's own run
/// states nothing measurable. No row is skipped for its precision. The FP8
/// count is read from the file independently.
#[test]
fn dev_v2_rows_are_predicted_or_skipped_with_their_reason() {
    let r = run(V2);
    assert_eq!(r.counts.rows, 177);
    let (header, rows) = records(V2);
    let prec = header.iter().position(|h| h == "precision").unwrap();
    let fp8: Vec<String> = rows
        .iter()
        .filter(|x| ["fp8", "mxfp8", "nvfp4"].contains(&&x[prec]))
        .map(|x| x[0].to_string())
        .collect();
    assert_eq!(fp8.len(), 38);
    assert_eq!(r.counts.predicted, 177 - 6);
    assert_eq!(r.rows.len() + r.skipped.len(), 177);
    let priced_fp8 = r.rows.iter().filter(|x| fp8.contains(&x.id)).count();
    assert_eq!(priced_fp8, 33);
    // The summary groups rows by their id's source prefix, as the regime
    // table does (it lumped every row outside the four 2021–22 families as
    // `OTHER`): the throughput lines count, per source, the rows whose id
    // starts with it.
    for line in r
        .summary
        .iter()
        .filter(|l| l.metric == "throughput" && l.source != "all")
    {
        let prefix = format!("{}-", line.source);
        let n = r
            .rows
            .iter()
            .filter(|x| {
                x.id.to_ascii_uppercase().starts_with(&prefix) && x.throughput_error.is_some()
            })
            .count();
        assert_eq!(line.count, n, "{}", line.source);
    }
    let sources: Vec<&str> = r.summary.iter().map(|l| l.source.as_str()).collect();
    assert!(sources.contains(&"MBRIDGE") && sources.contains(&"TT") && !sources.contains(&"OTHER"));
    for s in &r.skipped {
        assert!(
            !s.kind.contains("fp8") && !s.kind.contains("precision"),
            "{} skipped for its precision: {}",
            s.id,
            s.reason
        );
    }
    let no_shape: Vec<&str> = r
        .skipped
        .iter()
        .filter(|s| s.kind == "hidden: empty")
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(no_shape.len(), 5);
    assert!(no_shape.contains(&"MBRIDGE-25.11-DGX-H100-GPT-BF16-64"));
    // The summary counts every reason.
    assert_eq!(
        r.counts.skipped,
        vec![
            ("hidden: empty".to_string(), 5),
            ("nothing measured".to_string(), 1)
        ]
    );
    // MoE rows go through the cost model with their E (Mixtral, E = 8).
    let mixtral = r
        .rows
        .iter()
        .find(|x| x.id == "MCORE-MOE-MIXTRAL8x7B")
        .unwrap();
    assert!(
        mixtral.regime.moe && mixtral.layout.contains("ep=8"),
        "{}",
        mixtral.layout
    );
    // Regimes cover ZeRO-3 (DeepSpeed, FSDP2) and the 4-GPU H200 nodes.
    let zero3 = r
        .regimes
        .iter()
        .find(|g| g.dimension == "zero" && g.value == "3")
        .unwrap();
    // 23 bf16/fp16 runs and 15 FP8 ones (torchtitan FSDP2, Megatron-FSDP).
    assert_eq!(zero3.count, 38);
    // The regime line's signed median is the median of its rows' signed
    // errors, counted here from the rows (an independent pass).
    let signed: Vec<f64> = r
        .rows
        .iter()
        .filter(|x| x.regime.zero == 3)
        .filter_map(|x| x.speed_error)
        .collect();
    assert_eq!(signed.len(), 38);
    assert_eq!(zero3.median_signed, validate::median(&signed));
    assert!(zero3.median_signed.abs() <= zero3.median_abs);
    assert!(
        r.regimes
            .iter()
            .any(|g| g.dimension == "gpu" && g.value == "h200")
    );
}

/// A row missing `tp`, a row with `sp = maybe` and a row with `gpu_type =
/// tpu-v9`: the other rows are predicted and those three named with the
/// file, line, field and value.
#[test]
fn bad_rows_are_named_and_the_rest_predicted() {
    let (header, rows) = records(V2);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let pick = |id: &str| rows.iter().find(|r| &r[0] == id).unwrap().clone();
    let set = |r: &csv::StringRecord, c: &str, v: &str| {
        let mut x: Vec<String> = r.iter().map(str::to_string).collect();
        x[col(c)] = v.to_string();
        csv::StringRecord::from(x)
    };
    let good = [
        "MEG24-01",
        "KOR22-1a",
        "KF-WS-13B-8",
        "MCORE-MOE-MIXTRAL8x7B",
    ];
    let mut table_rows: Vec<csv::StringRecord> = good.iter().map(|id| pick(id)).collect();
    table_rows.push(set(&pick("MEG24-02"), "tp", ""));
    table_rows.push(set(&pick("MEG24-03"), "sp", "maybe"));
    table_rows.push(set(&pick("MEG24-04"), "gpu_type", "tpu-v9"));
    let r = run(&csv_text(&header, &table_rows));
    let ids: Vec<&str> = r.rows.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, good);
    let skipped: Vec<(&str, &str)> = r
        .skipped
        .iter()
        .map(|s| (s.id.as_str(), s.kind.as_str()))
        .collect();
    assert_eq!(
        skipped,
        [
            ("MEG24-02", "tp: empty"),
            ("MEG24-03", "sp: malformed"),
            ("MEG24-04", "gpu_type: no GPU profile")
        ]
    );
    // Line 6 = header + five rows before it; the value is named.
    assert!(
        r.skipped[0].reason.contains(FILE) && r.skipped[0].reason.contains("line 6"),
        "{}",
        r.skipped[0].reason
    );
    assert!(
        r.skipped[1].reason.contains("`maybe`"),
        "{}",
        r.skipped[1].reason
    );
    assert!(
        r.skipped[2].reason.contains("`tpu-v9`"),
        "{}",
        r.skipped[2].reason
    );
    // The same table with CRLF line ends (as the shipped one has): still
    // line 6 (the csv crate's own count said 5).
    let crlf = csv_text(&header, &table_rows).replace('\n', "\r\n");
    let r = run(&crlf);
    assert!(
        r.skipped[0].reason.contains("line 6"),
        "{}",
        r.skipped[0].reason
    );
    // A duplicate id is skipped, not counted twice; a header-only table is
    // an error.
    let dup = csv_text(&header, &[pick("MEG24-01"), pick("MEG24-01")]);
    let r = run(&dup);
    assert_eq!(
        (r.rows.len(), r.skipped[0].kind.as_str()),
        (1, "id: duplicate id")
    );
    let e = validate::read_table(&csv_text(&header, &[]), Path::new(FILE)).unwrap_err();
    assert!(e.to_string().contains("no rows"), "{e}");
}

/// Every new column changes the prediction of a row when it changes (so no
/// column is read and then ignored), `precision` and `fp8_recipe`
/// included.
#[test]
fn every_v2_column_changes_the_prediction() {
    let base = priced(&row_with("KF-WS-13B-8", &[])).unwrap();
    let differs = |changes: &[(&str, &str)]| {
        let other = priced(&row_with("KF-WS-13B-8", changes)).unwrap();
        assert_ne!(other, base, "{changes:?} changed nothing");
    };
    differs(&[("arch", "gpt")]);
    differs(&[("zero", "1")]);
    differs(&[("engine", "deepspeed")]);
    differs(&[("gpu_type", "h100-sxm")]);
    // T = 4 on 2-GPU hosts: the TP groups cross the network.
    differs(&[("gpus_per_node", "2"), ("scaleup_gpus", "2")]);
    differs(&[("scaleup_gpus", "2")]);
    differs(&[("flops_convention", "hardware")]);
    differs(&[("oom", "yes")]);
    // kempnerforge's `logged` figure is its max_memory_allocated, so the
    // kind that differs from it is nvidia-smi (allocated + reserve).
    differs(&[("mem_kind", "nvidia-smi")]);
    differs(&[("mem_unit", "GB")]);
    differs(&[("tp_comm_overlap", "yes")]);
    differs(&[("async_tp", "yes")]);
    differs(&[("precision", "fp16"), ("engine", "megatron-deepspeed")]);
    // precision and fp8_recipe: FP8 linears are faster than bf16 on H200,
    // and current scaling (one more read per cast) slower than delayed.
    let fp8 = |recipe: &str| {
        priced(&row_with(
            "KF-WS-13B-8",
            &[("precision", "fp8"), ("fp8_recipe", recipe)],
        ))
        .unwrap()
        .1
        .unwrap()
    };
    assert!(fp8("delayed") < base.1.unwrap());
    assert!(fp8("delayed") < fp8("current"));
    assert_eq!(fp8("current"), fp8("tensorwise"));
    // FP8 on a GPU without FP8 tensor cores is skipped naming the GPU.
    let e = priced(&row_with(
        "KF-WS-13B-8",
        &[("precision", "fp8"), ("gpu_type", "a100-80g")],
    ))
    .unwrap_err();
    assert!(
        e.contains("a100-80g") && e.contains("FP8 tensor cores"),
        "{e}"
    );
    // card: another card is another model.
    differs(&[("card", "llama2-13b")]);
    // MoE columns on the Mixtral row: ETP and a mismatched expert count.
    let mix = priced(&row_with("MCORE-MOE-MIXTRAL8x7B", &[])).unwrap();
    let etp = priced(&row_with(
        "MCORE-MOE-MIXTRAL8x7B",
        &[("etp", "2"), ("tp", "2"), ("dp", "8"), ("sp", "yes")],
    ))
    .unwrap();
    assert_ne!(mix, etp);
    let e = priced(&row_with("MCORE-MOE-MIXTRAL8x7B", &[("experts", "16")])).unwrap_err();
    assert!(
        e.contains("experts 16") && e.contains("mixtral-8x7b"),
        "{e}"
    );
    // Without a card the MoE columns build the experts: top-1 routes half
    // the tokens of top-2, so the step is shorter.
    let moe = |topk: &str| {
        priced(&row_with(
            "MCORE-MOE-MIXTRAL8x7B",
            &[("card", ""), ("topk", topk)],
        ))
        .unwrap()
        .1
        .unwrap()
    };
    assert!(moe("1") < moe("2"), "{} vs {}", moe("1"), moe("2"));
}

/// Parameter counts: a Llama-3-70B-shaped row without a card is priced with
/// a gated MLP, RMSNorm and untied embeddings: 80·(2·8192² + 2·8192·1024 +
/// 3·8192·28672 + 2·8192) + 2·128256·8192 = 70,553,706,496 (the card's
/// count); and every predicted dev-v2 row with a card has the card's count.
#[test]
fn parameter_counts_follow_the_card_or_the_block_family() {
    let cat = Catalog::shipped().unwrap();
    let text = row_with(
        "MBRIDGE-25.09-DGX-H100-LLAMA3_70B-FP8(default)-64",
        &[("card", ""), ("precision", "bf16")],
    );
    let t = table(&text);
    let case = validate::build_case(&t.rows[0], &cat, None).unwrap();
    let p = case.model.total_params();
    assert!(
        (p / 70.55e9 - 1.0).abs() < 0.005,
        "{p} parameters; gated MLP {}",
        case.model.architecture.gated_mlp
    );
    assert_eq!(p, cat.model("llama3-70b").unwrap().total_params());
    let all = table(V2);
    let mut with_card = 0;
    for row in &all.rows {
        let (Some(card), Ok(case)) = (&row.run.card, validate::build_case(row, &cat, None)) else {
            continue;
        };
        assert_eq!(
            case.model.total_params(),
            cat.model(card).unwrap().total_params(),
            "{}",
            row.id
        );
        with_card += 1;
    }
    // Every row with a card is built, the FP8 ones included (70 of 70).
    let expected = all.rows.iter().filter(|r| r.run.card.is_some()).count();
    assert_eq!((with_card, expected), (70, 70));
}

/// `validate --plan` re-splits a published layout whose layers do not
/// divide over its stages before rejecting it, as the search does:
/// BLOOMPQ-007 with 79 layers stated (p = 4) runs with an ILP split of 79
/// layers whose stages differ by at most one layer. (Until issue 15 the row
/// derived 79 from its 200B size; it now derives 80, a multiple of its 4
/// stages, as its TFLOP/s and step time say:
/// `bloom_pre_0221_rows_compare_in_their_own_convention`.)
#[test]
fn plan_check_re_splits_layers_that_do_not_divide() {
    let cat = Catalog::shipped().unwrap();
    let t = table(&row_with("BLOOMPQ-007", &[("layers", "79")]));
    let row = &t.rows[0];
    let case = validate::build_case(row, &cat, None).unwrap();
    assert_eq!(case.model.architecture.layers % case.layout.pp, 3);
    let p = validate::plan_check(&case);
    let split = p.split.expect("re-split by the ILP");
    assert_eq!(split.iter().sum::<u32>(), 79);
    assert_eq!(split.len(), 4);
    assert!(
        split.iter().max().unwrap() - split.iter().min().unwrap() <= 1,
        "{split:?}"
    );
    assert!(p.rejected_by.is_empty() && p.rank.is_some());
    // Re-split outside the search's split budget, the published layout is
    // still one of the valid layouts its rank counts in.
    assert!(
        p.rank.unwrap() as u64 <= p.valid,
        "{} of {}",
        p.rank.unwrap(),
        p.valid
    );
}

/// The trust record (issue 16): the main job's former winner — ZeRO-3, no
/// recompute, m = 128 on A100 — is extrapolated while no dev row runs ZeRO-3
/// with CP, and since issue 15 priced below the measured A100 envelope; a Megatron PTD-P layout of GPT-3 175B on 1,024 A100 (full
/// recompute, m = 192) is validated by the measured runs of its regime, and
/// its band is the median and max |error| of exactly those runs as
/// `validate` prices them.
#[test]
fn plans_say_how_well_their_regime_is_validated() {
    use meshplan::cost::{self, Problem};
    use meshplan::layout::{Layout, Recompute};
    use meshplan::report::trust_of;
    use meshplan::spec::Job;
    let cat = Catalog::shipped().unwrap();
    let model = cat.model("70b").unwrap();
    let cluster = cat.cluster("dgx64").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(2048, 8192);
    let pr = Problem::new(model, gpu, cluster, &job, 64);
    let mut winner = Layout::dense(16, 2, 1, 2);
    winner.zero = 3;
    winner.sp = true;
    let e = cost::evaluate(&pr, &winner);
    assert_eq!(e.micro_batches, 128);
    let t = trust_of(&pr, &winner, &e);
    assert_eq!((t.runs, t.median_abs), (0, None));
    assert!(
        t.extrapolated.as_deref().unwrap().contains("ZeRO 3"),
        "{t:?}"
    );
    // Priced per wrapped unit with contention (issue 15) it is no longer
    // above the envelope: 593 s and 63.7% MFU before, now every micro-batch
    // gathers each of the 82 units twice and reduce-scatters it once over
    // the 32 DP·CP ranks on 4 nodes, and what overlap hides still slows the
    // GEMMs. The best measured A100 MFU in model FLOPs is KOR22-4b's 56.3%
    // (Korthikanti et al. 2022); the envelope allows 3 points above it.
    let env = t.envelope.clone().unwrap();
    assert_eq!(env.record_id, "KOR22-4b");
    assert!((env.record_mfu - 0.563).abs() < 1e-9, "{env:?}");
    assert!(e.mfu < 0.59 && e.mfu > 0.5, "{}", e.mfu);
    assert!(!env.implausible && (env.predicted_mfu - e.mfu).abs() < 1e-15);
    assert_eq!(t.short(), "extrap.");
    // Per unit and micro-batch: two all-gathers of bf16 parameters (2 B
    // each) and one reduce-scatter of fp32 gradients (4 B), the same bytes
    // on the same group, so the two totals agree; overlap hides most of
    // both and the contention part carries what the hiding costs.
    use meshplan::cost::TimePart;
    let (ag, rs, c) = (
        e.time[TimePart::ParamGather],
        e.time[TimePart::DpGrad],
        e.time[TimePart::Contention],
    );
    assert!((ag.total / rs.total - 1.0).abs() < 0.01, "{ag:?} {rs:?}");
    assert!(ag.exposed < 0.05 * ag.total && rs.exposed < 0.05 * rs.total);
    assert!(c.exposed > 0.05 * ag.total, "{c:?}");

    let model = cat.model("gpt3-175b").unwrap();
    let cluster = cat.cluster("dgx-a100-3072").unwrap();
    let gpu = cat.gpu(&cluster.gpu).unwrap();
    let job = Job::new(1536, 2048);
    let pr = Problem::new(model, gpu, cluster, &job, 1024);
    let mut ptd = Layout::dense(8, 8, 16, 1);
    ptd.recompute = Recompute::Full;
    ptd.zero = 1;
    let e = cost::evaluate(&pr, &ptd);
    let t = trust_of(&pr, &ptd, &e);
    assert!(t.runs >= 5 && t.extrapolated.is_none(), "{t:?}");
    // Inside the envelope: a validated band, not "implausible".
    assert!(!t.envelope.as_ref().unwrap().implausible);
    assert!(t.short().starts_with('±'), "{}", t.short());
    // The band from the report's own per-row errors of those runs.
    let r = run(V2);
    let abs: Vec<f64> = t
        .nearest
        .iter()
        .map(|id| {
            r.rows
                .iter()
                .find(|x| &x.id == id)
                .unwrap()
                .speed_error
                .unwrap()
                .abs()
        })
        .collect();
    assert_eq!(abs.len(), t.runs);
    assert_eq!(t.median_abs, Some(validate::median(&abs)));
    assert_eq!(t.max_abs, Some(abs.iter().copied().fold(0.0, f64::max)));
}

/// Context parallelism (issue 15): every CP > 1 row of the table, priced
/// with the ring schedule step by step (`cost::cp`), the fused-attention
/// curve of the kernel each engine runs (`cost::compute`) and PyTorch's
/// `context_parallel` for torchtitan. Speed error = predicted / measured
/// throughput − 1. `cp::RING_STEP_RATE` was fitted on TT-8B-CP-2 and
/// NEMO2407-LLAMA3-8B-8 only; the other six are checks.
#[test]
fn context_parallel_rows_by_the_step_by_step_ring() {
    let r = run(V2);
    let err = |id: &str| -> f64 {
        r.speed_error_of(id)
            .unwrap_or_else(|| panic!("{id} has no throughput comparison"))
    };
    // (row, error, tolerance). Before issue 15: +15.9%, +75.0%, +98.0%,
    // +5.9%, -0.7%, +0.8%, +4.3%, +2.1%. Issue 14's GEMM depth curve
    // (`compute::contraction_factor`, with `gemm`, `gemm_fp8` refitted on
    // their named rows) and Megatron-Bridge's FP8 parameter gathers moved
    // them from -0.1%, +1.4%, +46.1%, +61.7%, -3.2%, -0.9%, +2.6%, +0.9%:
    // the deep GEMMs of TP 1–4 gain on the 4096-deep reference, and the
    // Blackwell row keeps Hopper's refitted `gemm_fp8` (a check, +5.4%).
    // NCCL's collective latency count (src/cost/comm.rs: base 8.4 µs, a
    // flat ring's 3.4 / 14 µs steps, the tree for cross-node all-reduce)
    // moved the four multi-node checks by −0.2 points each (more
    // latency, slower): −1.2% → −1.4%, +2.6% → +2.4%, +6.2% → +6.0%,
    // +5.4% → +5.3%; the four others moved by under 0.01 points.
    // torchtitan's per-op SAC rerunning its matmuls
    // (`compute::op_sac_recompute`) refitted h100-96g's `gemm` on its two
    // selective eager rows, 0.32 → 0.365; the CP rows run full recompute,
    // which that term does not touch, so the faster GEMMs move them
    // optimistic: TT-8B-CP-2 −1.1% → +2.9%, CP-3 +45.3% → +48.8%, CP-4
    // +61.1% → +63.3%. `cp::RING_STEP_RATE` is not refitted: its other
    // calibration row is NeMo's, which this change must not move.
    let pins = [
        // Calibration rows.
        ("TT-8B-CP-2", 0.022, 0.01),
        // +2.6% before the refit of h100-sxm `gemm_fp8` (0.5075 → 0.495)
        // that came with the interleaved schedule's p2p overlap.
        ("NEMO2407-LLAMA3-8B-8", 0.013, 0.01),
        // Checks. TT-8B-CP-3 and -4 (C = 4 and 8) stay far too fast: their
        // later ring steps cost about twice what C = 2 shows per step, which
        // no priced mechanism (kernel curve, exchange, fp32 merges) explains
        // (docs/fidelity.md); pinned so that a fix shows up here.
        ("TT-8B-CP-3", 0.482, 0.02),
        ("TT-8B-CP-4", 0.630, 0.02),
        // The interleaved rows (v = 5, 8) since their p2p overlap was
        // priced and `gemm_fp8` refitted: −1.4% → −1.1%, +2.4% → +2.8%,
        // +6.0% → +6.4%, +5.3% → +7.8% (B200 takes Hopper's `gemm_fp8` and
        // hides its p2p too).
        ("NEMO2407-LLAMA3-70B-64", -0.011, 0.01),
        (
            "MBRIDGE-25.09-DGX-H100-LLAMA3.1_405B-FP8(default)-1024",
            0.028,
            0.01,
        ),
        (
            "MBRIDGE-25.11-DGX-H100-LLAMA3.1_405B-FP8-CS-1024",
            0.064,
            0.01,
        ),
        (
            "MBRIDGE-25.11-DGX-B200-LLAMA3.1_405B-FP8-CS-128",
            0.078,
            0.01,
        ),
    ];
    for (id, want, tol) in pins {
        let e = err(id);
        assert!((e - want).abs() < tol, "{id}: {e:+.3}, pinned {want:+.3}");
    }
    // Every CP > 1 row is pinned; median |error| ≤ 10%, signed median
    // within ±5% (issue 15's bounds).
    let cp_rows: Vec<f64> = r
        .rows
        .iter()
        .filter(|x| x.regime.context_parallel)
        .filter_map(|x| x.speed_error)
        .collect();
    assert_eq!(cp_rows.len(), pins.len());
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    let abs = median(cp_rows.iter().map(|e| e.abs()).collect());
    let signed = median(cp_rows.clone());
    assert!(abs <= 0.10, "median |error| {abs:.3}");
    assert!(signed.abs() <= 0.05, "signed median {signed:+.3}");
}

/// Per-engine memory (issues 15 and 16): the torchtitan and KempnerForge
/// rows' measured peaks (torchtitan's logged `max_reserved_gib`,
/// KempnerForge's `max_memory_allocated`, both GiB) against the predicted
/// allocated peak. Before the engine terms (main at d338a4d) these were
/// +37% to +111% (torchtitan) and −33% to −69% (KempnerForge at D ≥ 8),
/// and seven of these runs were predicted not to fit. Pins: the signed
/// error of each row, ±1.5 points around today's value.
#[test]
fn fsdp2_engine_memory_rows() {
    let r = run(V2);
    let pins: [(&str, f64); 23] = [
        // torchtitan, Dec 2024 (eager fp32 loss). A reserved peak is at
        // least the allocated one, so under-prediction is expected; the
        // eager rows (a) most, as the uncompiled blocks' temporaries also
        // pass through the pool.
        ("TT-8B-8-a", -6.0),
        ("TT-8B-8-b", 0.5),
        ("TT-8B-8-c", 1.3),
        // With C > 1, PyTorch context_parallel's gathered K/V (after
        // repeat_kv) and fp32 dK/dV buffers (`cost::cp`) come on top.
        ("TT-8B-CP-1", -3.9),
        ("TT-8B-CP-2", -0.7),
        ("TT-8B-CP-3", 0.7),
        ("TT-8B-CP-4", 2.5),
        ("TT-8B-128-a", -5.4),
        ("TT-8B-128-b", 2.3),
        ("TT-8B-128-c", 3.2),
        // torchtitan, June 2025 (compiled loss).
        ("TT-8B-H200-32", 6.2),
        ("TT-8B-H200-64", 4.5),
        // KempnerForge: bf16 states, unsharded fp32 gradients across the
        // four accumulated micro-batches.
        ("KF-WS-13B-8", -3.9),
        ("KF-WS-13B-32", -2.0),
        ("KF-WS-13B-64", -1.7),
        ("KF-WS-13B-128", -1.3),
        ("KF-WS-13B-160", -1.4),
        ("KF-WS-70B-8", -0.5),
        ("KF-WS-70B-32", -2.5),
        ("KF-WS-70B-64", -2.4),
        ("KF-WS-70B-96", -2.3),
        ("KF-WS-70B-128", -2.4),
        ("KF-WS-70B-160", -2.3),
    ];
    for (id, pin) in pins {
        let row = r.rows.iter().find(|x| x.id == id).expect(id);
        let m = row.memory_gib.expect("memory measured");
        let err = 100.0 * m.error;
        assert!(
            (err - pin).abs() <= 1.5,
            "{id}: memory error {err:+.1}% (pin {pin:+.1}%)"
        );
        assert!(row.predicted_fits, "{id} ran but is predicted not to fit");
    }
}

/// Issue 15: the MoE rows as their runs were configured.
/// - The Qwen3-235B-A22B rows (no `card` cell) are priced with the
///   `qwen3-235b-a22b` card that their model column names, and say so.
/// - `(tokendrop)` in the model column is a capacity factor of 1.0:
///   dropping the marker from the 25.09 Qwen3-30B-A3B row prices it
///   dropless at the random-routing floor, slower but by less than the
///   floor λ₀ = 1 + √(2·ln 8·(7/8)/65,536) = 1.00745 (only the routed part
///   scales).
/// - Megatron-Bridge 25.09 DeepSeek-V3 on H100 overlaps the all-to-all with
///   1F1B ([ref:megatron-bridge-moe-recipes]): its EP time is partly hidden,
///   and the 25.09 Qwen3 rows (no such switch) expose all of theirs.
#[test]
fn moe_rows_follow_their_recipes() {
    let r = run(V2);
    let row = |id: &str| {
        r.rows
            .iter()
            .find(|x| x.id == id)
            .unwrap_or_else(|| panic!("{id} not predicted"))
    };
    for id in [
        "MBRIDGE-25.09-DGX-H100-Qwen3_235B_a22B-FP8(default)-256",
        "MBRIDGE-25.11-DGX-H100-Qwen3_235B_a22B-FP8-CS-256",
    ] {
        let x = row(id);
        assert!(
            x.assumptions
                .iter()
                .any(|a| a.starts_with("card: `qwen3-235b-a22b` (not stated")),
            "{id}: {:?}",
            x.assumptions
        );
    }
    let td = "MBRIDGE-25.09-DGX-H100-Qwen3_30B_a3B-FP8(default)-16";
    let (_, drop_step, _, _) = priced(&row_with(td, &[])).unwrap();
    let (_, dropless_step, _, _) = priced(&row_with(td, &[("model", "Qwen3_30B_a3B")])).unwrap();
    let (drop_step, dropless_step) = (drop_step.unwrap(), dropless_step.unwrap());
    let l0 = 1.0 + (2.0 * 8f64.ln() * 7.0 / 8.0 / 65_536.0).sqrt();
    assert!(
        dropless_step > drop_step && dropless_step < l0 * drop_step,
        "{dropless_step} vs {drop_step}"
    );
    use meshplan::cost::TimePart;
    let dsv3 = row("MBRIDGE-25.09-DGX-H100-DeepSeekV3-FP8(default)-1024");
    let ep = dsv3.time.parts[TimePart::EpComm];
    assert!(ep.exposed < 0.9 * ep.total, "{ep:?}");
    let q = row(td).time.parts[TimePart::EpComm];
    assert!(q.total > 0.0 && q.exposed == q.total, "{q:?}");
}

/// Issue 15: every MoE row of the table, speed error = predicted /
/// measured throughput − 1, pinned. Before this change (QK norms unpriced,
/// a grouped expert GEMM's inputs cast as one tensor): Mixtral −3.6%,
/// DeepSeek-V3 −2.5%, Qwen3-30B-A3B 25.09 +9.4% and 25.11 +159.6%,
/// Qwen3-235B-A22B 25.09 +9.8% and 25.11 +18.9%. Two mechanisms moved
/// them, neither fitted to a row:
/// - the QK norms (Qwen3's per-head `q_norm`/`k_norm`, DeepSeek-V3's latent
///   norms) as two element-wise kernels (`compute::qk_norm_bytes_per_token`);
/// - Transformer Engine's `GroupedLinear` quantizes each local expert's
///   split on its own except under FP8 delayed scaling
///   (`precision::grouped_linear_cast`): 15 more amax-and-cast pairs per
///   operand at 16 local experts (Qwen3-30B-A3B at EP 8), 3 at 4.
///
/// Mixtral (bf16, one local expert) does not move. The 25.11 Qwen3-30B-A3B
/// row stays far too fast: its dropless run measured half the token-drop
/// run on the same layout, which no priced mechanism explains
/// (docs/fidelity.md, "Issue 15 follow-up: MoE kernels …"); pinned so that
/// a fix shows here.
#[test]
fn moe_rows_pinned() {
    let r = run(V2);
    // Since the interleaved schedule's p2p overlap was priced (every MoE
    // row runs v > 1) and `grouped_gemm_half_tokens` refitted on the first
    // and third and fourth rows (2048 → 3072): −3.6% → −5.9%, −2.9% →
    // −1.4%, +4.7% → +8.8%, +8.5% → +6.1%, +146.3% → +157.9%, +17.8% →
    // +19.1%.
    let pins = [
        ("MCORE-MOE-MIXTRAL8x7B", -0.0586),
        (
            "MBRIDGE-25.09-DGX-H100-DeepSeekV3-FP8(default)-1024",
            -0.0144,
        ),
        (
            "MBRIDGE-25.09-DGX-H100-Qwen3_30B_a3B-FP8(default)-16",
            0.088,
        ),
        (
            "MBRIDGE-25.09-DGX-H100-Qwen3_235B_a22B-FP8(default)-256",
            0.0605,
        ),
        ("MBRIDGE-25.11-DGX-H100-Qwen3_30B_a3B-FP8-CS-16", 1.579),
        ("MBRIDGE-25.11-DGX-H100-Qwen3_235B_a22B-FP8-CS-256", 0.1915),
    ];
    let moe: Vec<&str> = r
        .rows
        .iter()
        .filter(|x| x.regime.moe)
        .map(|x| x.id.as_str())
        .collect();
    assert_eq!(moe.len(), pins.len(), "{moe:?}");
    for (id, pin) in pins {
        let e = r
            .rows
            .iter()
            .find(|x| x.id == id)
            .and_then(|x| x.speed_error)
            .unwrap_or_else(|| panic!("{id} has no throughput comparison"));
        assert!((e - pin).abs() < 0.005, "{id}: {e:+.4} (pin {pin:+.3})");
    }
}

/// Megatron-Bridge 25.09 DeepSeek-V3 on 1024 H100 trains the recipe's MTP
/// layer (its layout `Et|(tt|)*30mL` gives it the last virtual stage), now
/// priced from the card's `mtp_layers = 1` (`cost::mtp`). The row's model
/// FLOPs then equal Bridge's own (338 TFLOP/s · 1024 · 25.264 s =
/// 8.744e18; without MTP meshplan counted 3.9% fewer), so the TFLOP/s error
/// is the step-time error inverted. Before MTP was priced: TFLOP/s +2.2%,
/// step −5.9% (23.77 s). With MTP priced: TFLOP/s −7.1%, step +7.6%
/// (27.19 s), pessimistic: the last rank carries six MoE layers, the MTP
/// MoE layer and two passes through the 129,280-wide head, more than the
/// middle ranks' eight MoE layers, and sets the pipeline's pace. Since the
/// loss is timed as TE's fused in-place cross-entropy (10 bytes per logit,
/// was Megatron's unfused 60, `cost::layer::cross_entropy_bytes_per_logit`):
/// TFLOP/s −2.5%, step +2.6% (25.92 s). With its QK norms (MLA's latent
/// norms) and the experts' inputs quantized split by split under current
/// scaling (4 local experts, `precision::grouped_linear_cast`): TFLOP/s
/// −2.9%, step +3.0% (26.02 s). With the interleaved schedule's p2p
/// overlap (v = 4) and the refits it brought (h100-sxm `gemm_fp8` 0.495,
/// `grouped_gemm_half_tokens` 3072, on other rows): TFLOP/s −1.4%, step
/// +1.5% (25.64 s). Nothing was refitted to this row.
#[test]
fn deepseek_v3_bridge_row_prices_its_mtp_layer() {
    let r = run(V2);
    let x = r
        .rows
        .iter()
        .find(|x| x.id == "MBRIDGE-25.09-DGX-H100-DeepSeekV3-FP8(default)-1024")
        .unwrap();
    let (tf, st) = (x.tflops.unwrap(), x.step_s.unwrap());
    assert!((tf.error - -0.014).abs() < 0.01, "{:+.3}", tf.error);
    assert!((st.error - 0.015).abs() < 0.01, "{:+.3}", st.error);
    let flops = |tflops: f64, step: f64| tflops * 1e12 * 1024.0 * step;
    let (ours, bridge) = (
        flops(tf.predicted, st.predicted),
        flops(tf.measured, st.measured),
    );
    assert!(
        (ours / bridge - 1.0).abs() < 0.002,
        "{ours:e} vs {bridge:e}"
    );
    assert!(
        x.assumptions
            .iter()
            .any(|a| a.contains("the MTP block, priced from the card's mtp_layers = 1")),
        "{:?}",
        x.assumptions
    );
}

/// Megatron-DeepSpeed's TFLOP/s estimator before PR #251 (the BLOOM log's
/// rows before 02-21), `8·B·s·P_ne`, by hand against the log's own pairs of
/// step time and TFLOP/s (`chronicles-prequel.md`):
/// - BLOOMPQ-001 (02-17: L 8, h 14400, f 4h, 8 GPUs, 769.99 s, 108.47):
///   per layer 12·14400² + 13·14400 = 2,488,507,200; P_ne = 8 × that +
///   2·14400 = 19,908,086,400; 8·2048·2048·P_ne = 6.6799e17 FLOPs; over
///   769.99 s and 8 GPUs 108.45 TFLOP/s.
/// - BLOOMPQ-013 (02-20: L 80, h 14400, 320 GPUs, 221.21 s, 94.39): P_ne =
///   80 × 2,488,507,200 + 28,800 = 199,080,604,800; 6.6800e18 FLOPs; 94.37.
/// - BLOOMPQ-029 (02-20: L 80, h 13824, 320 GPUs, 147.43 s, 130.53): per
///   layer 12·13824² + 13·13824 = 2,293,415,424; P_ne = 183,473,261,568;
///   6.1562e18 FLOPs; 130.49.
///
/// Narayanan's Eq. 3 gives 125.8, 97.9 and 135.6 for the same three steps:
/// the log's "under-reports ~3%" is the missing `s/6h + V/16Lh`.
#[test]
fn bloom_pre_pr251_estimator_by_hand() {
    let s = 2048.0;
    let b = 2048.0;
    for (l, h, gpus, step, logged, flops_by_hand) in [
        (8.0, 14400.0, 8.0, 769.99, 108.47, 6.6799e17),
        (80.0, 14400.0, 320.0, 221.21, 94.39, 6.6800e18),
        (80.0, 13824.0, 320.0, 147.43, 130.53, 6.1562e18),
    ] {
        let f = validate::mds_pre251_flops(l, h, 4.0 * h, b, s, true);
        assert!(
            (f / flops_by_hand - 1.0).abs() < 2e-4,
            "L {l} h {h}: {f:e} FLOPs, by hand {flops_by_hand:e}"
        );
        let tflops = f / step / gpus / 1e12;
        assert!(
            (tflops / logged - 1.0).abs() < 1e-3,
            "L {l} h {h}: {tflops:.2} TFLOP/s against the log's {logged}"
        );
    }
    // Without checkpointing the estimator counts 3 passes, not 4.
    let (ck, no) = (
        validate::mds_pre251_flops(8.0, 14400.0, 57600.0, b, s, true),
        validate::mds_pre251_flops(8.0, 14400.0, 57600.0, b, s, false),
    );
    assert!((ck / no - 4.0 / 3.0).abs() < 1e-12);
}

/// Every BLOOMPQ row logged before 02-21 is read with the old estimator:
/// where it gives both a step time and TFLOP/s the two now agree through the
/// FLOP count (within 0.1%; under Eq. 3 they were 3.7-16% apart and
/// BLOOMPQ-001's step time was set aside), so the TFLOP/s error is the
/// inverse of the step-time error.
#[test]
fn bloom_pre_0221_rows_compare_in_their_own_convention() {
    let r = run(V2);
    let old: Vec<_> = r
        .rows
        .iter()
        .filter(|x| x.source == "BLOOMPQ" && x.convention.contains("PR #251"))
        .collect();
    // BLOOMPQ-001 … -029: 15 rows dated 02-17 and 02-20.
    assert_eq!(old.len(), 15, "rows in the pre-02-21 convention");
    for x in old {
        let (tf, st) = (
            x.tflops.unwrap(),
            x.step_s
                .unwrap_or_else(|| panic!("{}: step set aside", x.id)),
        );
        let product = (1.0 + tf.error) * (1.0 + st.error);
        assert!(
            (product - 1.0).abs() < 0.001,
            "{}: TFLOP/s error {:+.1}% and step error {:+.1}% disagree",
            x.id,
            100.0 * tf.error,
            100.0 * st.error
        );
    }
}

/// `[collective] inter` of jean-zay-a100, by hand: BigScience's
/// all_reduce_bench on 4 A100 nodes (32 GPUs, 4 GB fp32, 2022-01-28,
/// experiments/bandwidth/all_reduce_bench-a100-n4.txt) logs a median 41.9
/// Gbps "algo throughput" (2·S·8 bits / t), i.e. t = 1.53 s. The model's
/// hierarchical all-reduce at inter 0.18: NVLink reduce-scatter 7/8 · 4e9
/// / (300e9 · 0.82) + 7 · 3 µs = 14.249 ms; NIC reduce-scatter of the 1/8
/// shard over 4 nodes 3/4 · 5e8 / (50e9/8 · 0.18) + 3 · 5 µs = 333.348 ms;
/// doubled for the all-gather: 0.6952 s. The fitted efficiency (from the
/// 02-25 sweep rows) is 2.2× the January benchmark's network, which at
/// this model's formula is efficiency 0.08; the DGX A100 value 0.82 would
/// be 10× faster than the benchmark.
#[test]
fn jean_zay_all_reduce_bench() {
    use meshplan::cost::comm::{Links, all_reduce};
    use meshplan::layout::GroupSpan;
    let cat = Catalog::shipped().unwrap();
    let links = Links::of(cat.cluster("jean-zay-a100").unwrap());
    let g = GroupSpan {
        size: 32,
        per_domain: 8,
        domains: 4,
        tier: 0,
        ..GroupSpan::SINGLE
    };
    let t = all_reduce(4e9, g, &links);
    assert!(
        (t - 0.6952).abs() < 5e-4,
        "all-reduce {t:.4} s, by hand 0.6952 s"
    );
    let bench: f64 = 2.0 * 4e9 * 8.0 / 41.85e9;
    assert!((bench - 1.529).abs() < 1e-3);
    assert!(
        t < bench && t > bench / 3.0,
        "the profile must stay between the benchmark and 3x it"
    );
}

/// Issue 15: no regime's signed median speed error beyond ±5% for the
/// regimes the 65 BLOOMPQ rows dominate (before the Omni-Path efficiency
/// and the pre-02-21 convention: BLOOMPQ +14.1%, megatron-deepspeed +13.8%,
/// a100-80g +10.4%, fp16 +9.7%, zero 1 +9.5%; after: +2.5, +2.4, +2.4,
/// +1.8, +1.5). The micro-batch-1 rows are the known remainder (+16% signed
/// median over 14 rows, docs/fidelity.md).
#[test]
fn bloom_dominated_regimes_within_5_percent_signed() {
    let r = run(V2);
    let signed = |f: &dyn Fn(&validate::RowResult) -> bool| {
        let v: Vec<f64> = r
            .rows
            .iter()
            .filter(|x| f(x))
            .filter_map(|x| x.speed_error)
            .collect();
        (v.len(), validate::median(&v))
    };
    for (name, (n, med), rows) in [
        ("BLOOMPQ", signed(&|x| x.source == "BLOOMPQ"), 65),
        (
            "megatron-deepspeed",
            signed(&|x| x.regime.engine == "megatron-deepspeed"),
            68,
        ),
        ("a100-80g", signed(&|x| x.regime.gpu == "a100-80g"), 108),
        ("fp16", signed(&|x| x.regime.precision == "fp16"), 88),
        ("zero 1", signed(&|x| x.regime.zero == 1), 104),
    ] {
        assert_eq!(n, rows, "{name}: rows with a throughput comparison");
        assert!(
            med.abs() <= 0.05,
            "{name}: signed median {:+.1}%",
            100.0 * med
        );
    }
    // Micro-batch 1 stays optimistic: the per-micro-batch cost of the
    // pipeline engine is not modelled; this fails once it is, to be updated.
    let mbs1 = signed(&|x| x.source == "BLOOMPQ" && x.layout.contains("mbs=1 "));
    assert_eq!(mbs1.0, 14);
    assert!(
        mbs1.1 > 0.10 && mbs1.1 < 0.25,
        "mbs 1 signed median {:+.1}%",
        100.0 * mbs1.1
    );
}

/// Issue 16: the Megatron-Bridge MoE rows that ran on 80 GB H100s (and the
/// GB200 Llama3-70B and NeMo Nemotron-340B rows) are
/// predicted to fit, their published layouts pass the rules (the
/// recipes' pipeline splits), and their peaks sit where the terms put
/// them. The pins are this model's own peaks (GiB, ±1), no measurement:
/// the rows report none. Before the Megatron-Core 0.14 routed set (FP8
/// grouped-GEMM inputs, probabilities in the activation) and TE's in-place
/// cross-entropy they were 95.7, 95.9 (Qwen3-30B-A3B), 78.5, 79.2
/// (Qwen3-235B-A22B) and 96.5 GiB (DeepSeek-V3, also rejected by
/// layers-pp). Qwen3-30B-A3B by hand: the routed part falls from
/// 881,852,416 to 429,129,728 bytes per layer and micro-batch
/// (`cost::moe` test), times the 47 one-layer chunk micro-batches the
/// last stage holds (2·0 + 23·2 + 1) = 19.8 GiB less; the loss from 10 to
/// 2 bytes per logit over 8192 · 151,936 logits = 9.3 GiB less. The rows
/// that overlap the expert all-to-all across micro-batches (25.11 Qwen3,
/// 25.09 DeepSeek-V3) warm up one chunk micro-batch more
/// (`memory::in_flight`): +0.6, +0.9 and +1.4 GiB. Their FP8 parameters
/// (`fp8_param_gather`, ZeRO-1) hold no bf16 copy of the linears
/// (`precision::narrow_param_weight_saving`): the weights part falls by
/// twice the rank's linear parameters, 66.2 → 62.0 and 67.0 → 62.7
/// (Qwen3-30B-A3B), 50.4 → 47.9 and 51.7 → 49.2 (Qwen3-235B-A22B), 71.9 →
/// 67.5 GiB (DeepSeek-V3); Megatron-FSDP (ZeRO-3) and NeMo's delayed
/// scaling without it are unchanged.
#[test]
fn megatron_bridge_moe_rows_fit_as_they_ran() {
    let r = run(V2);
    let pins = [
        ("MBRIDGE-25.09-DGX-H100-Qwen3_30B_a3B-FP8(default)-16", 62.0),
        ("MBRIDGE-25.11-DGX-H100-Qwen3_30B_a3B-FP8-CS-16", 62.7),
        (
            "MBRIDGE-25.09-DGX-H100-Qwen3_235B_a22B-FP8(default)-256",
            47.9,
        ),
        ("MBRIDGE-25.11-DGX-H100-Qwen3_235B_a22B-FP8-CS-256", 49.2),
        ("MBRIDGE-25.09-DGX-H100-DeepSeekV3-FP8(default)-1024", 67.5),
        // Megatron-FSDP, 40 of 80 layers' activations offloaded to the
        // Grace CPU (`cpu_offloading_num_layers = 40`): 303.3 GiB without
        // the offload, less 40 layers × 3.62e9 bytes = 135 GiB; GB200
        // usable 173.4 − 2.5 = 170.9 GiB.
        ("MBRIDGE-25.11-DGX-GB200-LLAMA3_70B-FP8-CS-64", 168.3),
        // NeMo 24.07's nemotron_340b.yaml keeps Apex DistributedFusedAdam's
        // states in bf16 (optim.dtype): the optimizer falls from 12 to 6
        // bytes per parameter, 34.63e9 → 17.32e9 bytes, 83.2 → 67.1 GiB
        // (usable 77.2).
        ("NEMO2407-Nemotron-340B-128", 67.1),
    ];
    for (id, pin) in pins {
        let row = r.rows.iter().find(|x| x.id == id).expect(id);
        let gib = row.memory.total() / (1u64 << 30) as f64;
        assert!((gib - pin).abs() <= 1.0, "{id}: {gib:.1} GiB (pin {pin})");
        assert!(row.predicted_fits, "{id} ran but is predicted not to fit");
    }
    let ds = r
        .rows
        .iter()
        .find(|x| x.id.starts_with("MBRIDGE-25.09-DGX-H100-DeepSeekV3"))
        .unwrap();
    assert!(
        ds.assumptions.iter().any(|a| a.contains("Et|(tt|)*30mL")),
        "{:?}",
        ds.assumptions
    );
}

/// Rows that cannot have run as stated are skipped with the rule's
/// sentence, not priced into the medians (issue 19.3): MEG24-01 (48 GPUs,
/// D = 48, b = 1) with gbs = 1 breaks the batch rule (1 % 48 ≠ 0; the
/// reviewer saw −97.6 % / +4086.7 %), with vpp = 2 on p = 1 the interleave
/// rule, with num_gpus = 40 the mesh rule (D·T·p·C = 48 ≠ 40); a measured 1e30 TFLOP/s is above the H100's dense
/// bf16 peak and refused naming the field, while the peak itself is
/// accepted (the bound is the peak, not below it).
#[test]
fn impossible_rows_are_skipped_with_the_rule() {
    let err = |changes: &[(&str, &str)]| {
        let r = run(&row_with("MEG24-01", changes));
        assert!(r.rows.is_empty(), "{changes:?} was priced");
        (r.skipped[0].kind.clone(), r.skipped[0].reason.clone())
    };
    let (kind, why) = err(&[("gbs", "1")]);
    assert_eq!(kind, "batch: layout cannot run");
    assert!(why.starts_with(&format!("{FILE}, line 2: ")), "{why}");
    assert!(why.contains("dp 48") && why.contains("gbs 1"), "{why}");
    // (The mesh was refused when the case was built already.)
    let (kind, _) = err(&[("num_gpus", "40")]);
    assert_eq!(kind, "dp·tp·pp·cp = N differs from num_gpus N");
    // Interleaving without a pipeline (p = 1, v = 2).
    let (kind, why) = err(&[("vpp", "2")]);
    assert_eq!(kind, "interleave: layout cannot run", "{why}");
    let (kind, why) = err(&[("measured_tflops_per_gpu", "1e30")]);
    assert_eq!(kind, "measured_tflops_per_gpu: above peak");
    assert!(
        why.contains("field measured_tflops_per_gpu") && why.contains("989 TFLOP/s"),
        "{why}"
    );
    let peak = Catalog::shipped()
        .unwrap()
        .gpu("h100-sxm")
        .unwrap()
        .peak_tflops_bf16;
    assert_eq!(peak, 989.0);
    let r = run(&row_with("MEG24-01", &[("measured_tflops_per_gpu", "989")]));
    assert_eq!((r.rows.len(), r.skipped.len()), (1, 0));
    // MFU above 1 was already refused when the row is read.
    let r = run(&row_with("MEG24-01", &[("measured_mfu", "1.5")]));
    assert_eq!(r.skipped[0].kind, "measured_mfu: malformed");
}

/// DeepSpeed 0.3 ZeRO-3 (Narayanan et al. 2021 Table 2, NAR21-T2-01…06):
/// tensor by tensor and synchronous (`cost::data_parallel::
/// deepspeed_2021_collectives`). The per-rank list cost was fitted on
/// NAR21-T2-02 and NAR21-T2-05 only; the other four are checks. Speed
/// error = predicted / measured throughput − 1.
#[test]
fn deepspeed_2021_zero3_rows_tensor_by_tensor() {
    let r = run(V2);
    let row = |id: &str| r.rows.iter().find(|x| x.id == id).unwrap();
    // (row, error). Before (one collective per unit, overlapped, NCCL's
    // peak): +37.5%, +117.6%, +304.8%, +48.1%, +101.9%, +285.6%.
    // NAR21-T2-03 (1,536 ranks) is now too slow: 1,536 · 10.7 µs per
    // tensor-list collective, fitted at 768 and 1,120 ranks, over-counts
    // there (the host cost may grow less than linearly, or overlap the
    // NCCL kernels it follows; not modelled).
    let pins = [
        ("NAR21-T2-01", -0.040),
        ("NAR21-T2-02", -0.038),
        ("NAR21-T2-03", -0.179),
        ("NAR21-T2-04", 0.089),
        ("NAR21-T2-05", 0.064),
        ("NAR21-T2-06", 0.085),
    ];
    let mut errs = Vec::new();
    for (id, want) in pins {
        let x = row(id);
        let e = x.speed_error.unwrap();
        assert!((e - want).abs() < 0.01, "{id}: {e:+.3}, pinned {want:+.3}");
        errs.push(e);
        // Nothing overlaps: the gathers and reduce-scatters are exposed
        // whole, and no contention is charged for them.
        let t = &x.time;
        for p in [
            meshplan::cost::breakdown::TimePart::ParamGather,
            meshplan::cost::breakdown::TimePart::DpGrad,
        ] {
            assert!(
                t[p].total > 0.0 && (t[p].exposed - t[p].total).abs() < 1e-9 * t[p].total,
                "{id} {p:?}"
            );
        }
        assert_eq!(
            t[meshplan::cost::breakdown::TimePart::Contention].exposed,
            0.0,
            "{id}"
        );
    }
    // Issue 15's bounds on these rows: median |error| ≤ 10% (here 7.4%),
    // none beyond 25%, signed median within ±5% (+1.3%).
    let mut abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
    abs.sort_by(f64::total_cmp);
    assert!((abs[2] + abs[3]) / 2.0 <= 0.10);
    assert!(abs[5] <= 0.25);
    let mut s = errs.clone();
    s.sort_by(f64::total_cmp);
    assert!(((s[2] + s[3]) / 2.0).abs() <= 0.05);
}

/// Issue 16's acceptance on the whole shipped table, as `validate --plan`
/// runs it: every published layout of a row that was priced (the runs did
/// run) is a valid layout here — NAR21-T2-04, the last one rejected, fits
/// since DeepSpeed's fp32 gradient partition is counted in its optimizer
/// step only (`tests/deepspeed_2021.rs`) — and the plan `search` lists first
/// is predicted at most 1.15× the published layout's tokens/s at the median.
#[test]
fn published_layouts_are_valid_and_first_choices_stay_near_them() {
    let cat = Catalog::shipped().unwrap();
    let t = table(V2);
    let report = validate::validate_table(&t, &cat, None);
    let plans: Vec<validate::PlanCheck> = t
        .rows
        .iter()
        .filter(|r| {
            report
                .rows
                .iter()
                .any(|x| x.id == r.id && (x.tflops.is_some() || x.step_s.is_some()))
        })
        .filter_map(|r| validate::build_case(r, &cat, None).ok())
        .map(|c| validate::plan_check(&c))
        .collect();
    assert!(plans.len() >= 160, "{} rows checked", plans.len());
    let rejected: Vec<(&str, &Vec<String>)> = plans
        .iter()
        .filter(|p| !p.rejected_by.is_empty())
        .map(|p| (p.id.as_str(), &p.rejected_by))
        .collect();
    assert!(rejected.is_empty(), "{rejected:?}");
    let (rows, median, _, _) = validate::ranked_plan_ratios(&plans).unwrap();
    assert_eq!(rows, plans.len());
    assert!(median <= 1.15, "median {median:.3} over {rows} rows");
}

/// Megatron overlaps the interleaved schedule's pipeline sends in steady
/// state (`overlap_p2p_comm`, since f9283c5a, 2023-05-31; Megatron-Bridge
/// and NeMo turn it on with VPP), so only the warm-up and cool-down sends
/// block. NEMO2407-LLAMA2-13B-16 runs D4 p4 v10 with global batch 128 and
/// b = 1: m = 128/4 = 32, so m·v = 320 chunk micro-batches per direction;
/// rank 0 warms up 2·(4 − 1) + (10 − 1)·4 = 42 of them and the last rank
/// (10 − 1)·4 = 36. One layer per chunk computes for milliseconds against
/// a sub-millisecond send, so the steady state hides all of it: exposed
/// 42/320 and 36/320 of the total. Rows whose code predates the option
/// (Megatron-LM 2022, the MegaScale baseline at 285068c8) keep every send
/// exposed.
#[test]
fn interleaved_pipeline_sends_overlap_where_megatron_does() {
    use meshplan::cost::{self, TimePart};
    let t = table(V2);
    let cat = Catalog::shipped().unwrap();
    let case = |id: &str| {
        let row = t.rows.iter().find(|x| x.id == id).unwrap();
        validate::build_case(row, &cat, None).unwrap()
    };
    let nemo = case("NEMO2407-LLAMA2-13B-16");
    assert!(nemo.job.overlap_p2p_comm);
    assert_eq!((nemo.layout.pp, nemo.layout.vpp), (4, 10));
    let ranks = cost::rank_costs(&nemo.problem(), &nemo.layout);
    for (r, warm) in [(0, 42.0), (3, 36.0)] {
        let p2p = ranks[r].items.time[TimePart::PpComm];
        assert!(p2p.total > 0.0);
        assert!(
            (p2p.exposed / p2p.total - warm / 320.0).abs() < 1e-12,
            "rank {r}: {} of {}",
            p2p.exposed,
            p2p.total
        );
    }
    for id in ["KOR22-2a", "MEGASCALE-175B-MLM-256"] {
        let c = case(id);
        assert!(!c.job.overlap_p2p_comm, "{id}");
        assert!(c.layout.vpp > 1, "{id}");
        let ranks = cost::rank_costs(&c.problem(), &c.layout);
        let p2p = ranks[0].items.time[TimePart::PpComm];
        assert!(p2p.total > 0.0 && p2p.exposed == p2p.total, "{id}");
    }
}

/// MT-NLG's published TFLOP/s (Smith et al. 2022: 126, 121, 113 on 2,240,
/// 2,800 and 3,360 GPUs) count Narayanan et al. 2021 Eq. 3, recompute
/// included: only under it do they agree with the published step times.
/// By hand for MTNLG-1 (L 105, h 20480, vocabulary 50272 padded to 51200
/// for T = 8, B 1920, s 2048, 60.1 s): Eq. 3 = 96·B·s·L·h²·(1 + s/6h +
/// V/16Lh) = 1.66245e19 × 1.018155 = 1.69263e19 FLOPs per step, over 2,240
/// GPUs and 60.1 s 125.7 TFLOP/s; Megatron's model FLOPs give 93.6. Before,
/// the row was read in model FLOPs and its step time set aside, which
/// showed the model 9.5% slow where it is 21.6% fast.
#[test]
fn mtnlg_tflops_are_read_in_the_convention_their_step_times_agree_with() {
    let t = table(V2);
    let cat = Catalog::shipped().unwrap();
    let row = t.rows.iter().find(|x| x.id == "MTNLG-1").unwrap();
    let case = validate::build_case(row, &cat, None).unwrap();
    assert_eq!(case.convention, validate::FlopConvention::NarayananEq3);
    assert_eq!(case.vocab_padded, 51200.0);
    let implied = case.flops() / 60.1 / 2240.0 / 1e12;
    assert!((implied - 125.73).abs() < 0.01, "{implied}");
    let (result, _) = validate::compare(&case);
    let step = result.step_s.expect("the step time is compared");
    let tflops = result.tflops.unwrap();
    // Both metrics now say the same thing: predicted faster than measured.
    assert!(step.predicted < step.measured && tflops.predicted > tflops.measured);
    assert!(
        ((tflops.predicted / tflops.measured) * (step.predicted / step.measured) - 1.0).abs()
            < 0.01
    );
    // A row that states its convention keeps it, agreeing or not: its
    // step time is then set aside, as before.
    let stated = table(&row_with("MTNLG-1", &[("flops_convention", "model")]));
    let stated = validate::build_case(&stated.rows[0], &cat, None).unwrap();
    assert_eq!(stated.convention, validate::FlopConvention::Megatron);
    assert!(validate::compare(&stated).0.step_s.is_none());
    // A row whose two figures agree in its own convention keeps it.
    let nemo = t
        .rows
        .iter()
        .find(|x| x.id == "NEMO2407-LLAMA2-7B-8")
        .unwrap();
    let nemo = validate::build_case(nemo, &cat, None).unwrap();
    assert_eq!(nemo.convention, validate::FlopConvention::NemoFullAttention);
}

/// Of a row's three throughput figures, two that agree outvote the third.
/// MEGASCALE-175B-MLM-1024 (Jiang et al. 2024, 1,024 A100): MFU 44.7%
/// at the 312 TFLOP/s bf16 peak is 139.5 TFLOP/s, and the 11.9 s step
/// implies 137.2 through Megatron's model FLOPs (1.6% apart); the row's
/// TFLOP/s, derived from an aggregate, says 128.8 (7.6% below the MFU's).
/// The MFU's figure is compared. MEGASCALE-175B-MLM-768, whose three agree
/// (145.7 both ways), keeps its TFLOP/s.
#[test]
fn a_tflops_figure_its_mfu_and_step_outvote_is_set_aside() {
    let t = table(V2);
    let cat = Catalog::shipped().unwrap();
    let case = |id: &str| {
        let row = t.rows.iter().find(|x| x.id == id).unwrap();
        validate::build_case(row, &cat, None).unwrap()
    };
    let c = case("MEGASCALE-175B-MLM-1024");
    let (m, derived) = c.measured_tflops().unwrap();
    assert!(derived);
    assert!((m - 0.447 * 312.0).abs() < 1e-9, "{m}");
    let implied = c.flops() / 11.9 / 1024.0 / 1e12;
    assert!((implied - 137.2).abs() < 0.1, "{implied}");
    let kept = case("MEGASCALE-175B-MLM-768");
    assert_eq!(kept.measured_tflops(), Some((145.7, false)));
}

/// A row whose three throughput figures all disagree keeps its TFLOP/s
/// and says the MFU was not compared (a review's crafted row: it was
/// dropped without a word). MEGASCALE-175B-MLM-1024 with MFU 0.6: 0.6 ×
/// 312 = 187.2 TFLOP/s, the step's 137.2 and the row's 128.8 (model
/// FLOPs, its stated convention) are all more than 2% apart. The shipped
/// row 768 (145.7 TFLOP/s, 0.467 × 312 = 145.7) gets no such note.
#[test]
fn an_mfu_that_is_not_compared_is_named() {
    let r = run(&row_with(
        "MEGASCALE-175B-MLM-1024",
        &[("measured_mfu", "0.6")],
    ));
    let row = &r.rows[0];
    let tf = row.tflops.as_ref().unwrap();
    assert_eq!(tf.measured, 128.8);
    assert!(
        row.assumptions.iter().any(|a| a
            == "MFU: the row's 0.6 × 312 = 187.2 TFLOP/s disagrees with its 128.8 TFLOP/s (128.8 as model FLOPs); the TFLOP/s is compared, the MFU is not"),
        "{:?}",
        row.assumptions
    );
    let kept = run(&row_with("MEGASCALE-175B-MLM-768", &[]));
    assert!(
        !kept.rows[0]
            .assumptions
            .iter()
            .any(|a| a.starts_with("MFU:")),
        "{:?}",
        kept.rows[0].assumptions
    );
}

/// A step time, a row's only throughput figure, that would run the step's
/// model FLOPs faster than the GPU's peak is refused with the field and the
/// peak (a review's crafted row, MEGASCALE-175B-MLM-1024 with only
/// `measured_step_s = 1`, compared at 1632.7 TFLOP/s on a 312 TFLOP/s A100
/// and fitted `calibrate` to efficiency 1.0). With a TFLOP/s figure beside
/// it, a disagreeing step is set aside instead, as before.
#[test]
fn a_step_faster_than_the_peak_is_refused() {
    let text = row_with(
        "MEGASCALE-175B-MLM-1024",
        &[
            ("measured_tflops_per_gpu", ""),
            ("measured_mfu", ""),
            ("measured_step_s", "1"),
        ],
    );
    let r = run(&text);
    assert!(r.rows.is_empty());
    let s = &r.skipped[0];
    assert_eq!(s.kind, "measured_step_s: above peak");
    assert!(
        s.reason
            .contains("above the a100-80g dense bf16 peak, 312 TFLOP/s"),
        "{}",
        s.reason
    );
    let kept = run(&row_with(
        "MEGASCALE-175B-MLM-1024",
        &[("measured_step_s", "1")],
    ));
    assert_eq!(kept.rows.len(), 1);
    assert!(kept.rows[0].step_s.is_none());
}
