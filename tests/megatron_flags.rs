//! The Megatron-LM launch scripts that `generate` writes, checked by an
//! oracle that does not use meshplan's rules.
//!
//! Each script is run under bash with a stub `torchrun` that records its
//! argv and `CUDA_DEVICE_MAX_CONNECTIONS`, so quoting, arrays and variable
//! expansion are checked as bash does them. The recorded command line is
//! then checked: (1) every option is an option string of Megatron-LM's
//! parser (`tests/data/megatron_flags.txt`, dumped from
//! `add_megatron_arguments()`, [ref:megatron-arguments]), none repeated;
//! (2) every Megatron argument check that applies to these flags holds,
//! implemented here from the conditions listed in `docs/references.md`
//! ("Rule codes": W1, W3, W4, B1, B3, B4, T1–T7, T9, T11, C1, E1, E2, E4,
//! P1–P16, R1–R3, D1–D5, D8, D12), and so do the renderer rules of
//! [ref:megatron-arguments] (no dead or ignored flags);
//! (3) the layer ranges Megatron would build from the flags equal the
//! plan file's stages, and the sizes equal the plan's mesh.

mod common;

use std::collections::{BTreeMap, HashSet};

use common::Setup;
use meshplan::generate::{self, Bundle};
use meshplan::layout::{Layout, RankOrder, Recompute};

/// Megatron's option strings ([ref:megatron-arguments]).
fn known_flags() -> HashSet<&'static str> {
    include_str!("data/megatron_flags.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}

/// A parsed Megatron command line: option → values.
#[derive(Debug, Clone, Default)]
struct Flags {
    map: BTreeMap<String, Vec<String>>,
}

impl Flags {
    fn parse(args: &[String]) -> Result<Flags, String> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut cur: Option<String> = None;
        for a in args {
            if a.starts_with("--") {
                if map.contains_key(a) {
                    return Err(format!("{a} given twice"));
                }
                map.insert(a.clone(), Vec::new());
                cur = Some(a.clone());
            } else {
                match &cur {
                    Some(f) => map.get_mut(f).unwrap().push(a.clone()),
                    None => return Err(format!("value `{a}` before any option")),
                }
            }
        }
        Ok(Flags { map })
    }

    fn has(&self, f: &str) -> bool {
        self.map.contains_key(f)
    }

    fn str(&self, f: &str) -> Option<&str> {
        self.map.get(f).and_then(|v| v.first()).map(String::as_str)
    }

    fn int(&self, f: &str) -> Option<i64> {
        self.str(f).map(|v| {
            v.parse::<i64>()
                .unwrap_or_else(|_| panic!("{f} {v}: not an integer"))
        })
    }
}

/// Megatron's `ffn_hidden_size` default (`validate_args`,
/// [ref:megatron-arguments]).
fn default_ffn(h: i64, swiglu: bool) -> i64 {
    if swiglu {
        (4 * h * 2 / 3) / 64 * 64
    } else {
        4 * h
    }
}

/// Parse a `--pipeline-model-parallel-layout` string as Megatron's
/// `parse_str_to_list` does ([ref:megatron-pp-layout]): commas dropped, `(…)*n`
/// and `x*n` unrolled, `|` separates stages.
fn parse_layout(s: &str) -> Result<Vec<Vec<char>>, String> {
    let mut s: String = s.replace(',', "");
    // (group)*n
    while let Some(open) = s.find('(') {
        let close = s[open..].find(')').ok_or("unbalanced (")? + open;
        let rest = &s[close + 1..];
        let digits: String = rest
            .strip_prefix('*')
            .ok_or("( ) without *n")?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let n: usize = digits.parse().map_err(|_| "bad repeat count")?;
        let unrolled = s[open + 1..close].repeat(n);
        s = format!("{}{}{}", &s[..open], unrolled, &rest[1 + digits.len()..]);
    }
    // x*n
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if i + 1 < chars.len() && chars[i + 1] == '*' {
            let digits: String = chars[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let n: usize = digits.parse().map_err(|_| "bad repeat count")?;
            out.extend(std::iter::repeat_n(chars[i], n));
            i += 2 + digits.len();
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out.split('|')
        .map(|st| {
            st.chars()
                .map(|c| {
                    if "EtmL".contains(c) {
                        Ok(c)
                    } else {
                        Err(format!("bad layer symbol {c}"))
                    }
                })
                .collect()
        })
        .collect()
}

/// The launch environment and machine the command runs on.
struct Env<'a> {
    world: i64,
    max_connections: Option<&'a str>,
    compute_capability: u32,
}

/// What the oracle derives from the flags.
#[derive(Debug, Default)]
struct Derived {
    dp: i64,
    vpp: i64,
    microbatches: i64,
    /// Layers of (pp_rank, vpp_chunk) as (first, end).
    chunks: BTreeMap<(i64, i64), (i64, i64)>,
}

/// Check `f` against Megatron's argument checks and the renderer rules
/// ([ref:megatron-arguments]). Returns the broken rules (empty when
/// Megatron would accept the command) and the derived layout.
fn megatron_rules(f: &Flags, env: &Env) -> (Vec<String>, Derived) {
    let mut d = Derived::default();
    // D12, B1: required arguments.
    let missing: Vec<String> = [
        "--num-layers",
        "--hidden-size",
        "--num-attention-heads",
        "--max-position-embeddings",
        "--micro-batch-size",
        "--seq-length",
    ]
    .iter()
    .filter(|r| !f.has(r))
    .map(|r| format!("D12: {r} missing"))
    .collect();
    if !missing.is_empty() {
        return (missing, d);
    }
    let mut bad = Vec::new();
    let mut check = |ok: bool, rule: &str| {
        if !ok {
            bad.push(rule.to_string());
        }
    };
    let tp = f.int("--tensor-model-parallel-size").unwrap_or(1);
    let pp = f.int("--pipeline-model-parallel-size").unwrap_or(1);
    let cp = f.int("--context-parallel-size").unwrap_or(1);
    let ep = f.int("--expert-model-parallel-size").unwrap_or(1);
    let etp = f.int("--expert-tensor-parallel-size").unwrap_or(tp);
    let layers = f.int("--num-layers").unwrap();
    let h = f.int("--hidden-size").unwrap();
    let n = f.int("--num-attention-heads").unwrap();
    let seq = f.int("--seq-length").unwrap();
    let max_pos = f.int("--max-position-embeddings").unwrap();
    let mbs = f.int("--micro-batch-size").unwrap();
    let sp = f.has("--sequence-parallel") && tp > 1;
    let world = env.world;
    let fsdp = f.has("--use-megatron-fsdp");
    let do_ = f.has("--use-distributed-optimizer");
    let experts = f.int("--num-experts");
    let swiglu = f.has("--swiglu");

    // Renderer rules and asserted-unset flags.
    for dead in [
        "--use-flash-attn",
        "--use-custom-fsdp",
        "--model-parallel-size",
        "--batch-size",
        "--warmup",
        "--checkpoint-activations",
        "--use-mcore-models",
    ] {
        check(!f.has(dead), &format!("renderer: {dead} must not be used"));
    }
    check(
        !f.has("--num-query-groups") || f.has("--group-query-attention"),
        "renderer: --num-query-groups without --group-query-attention is ignored",
    );
    check(
        f.int("--num-layers-per-virtual-pipeline-stage").is_none(),
        "renderer: use --num-virtual-stages-per-pipeline-rank",
    );
    // Enumerated values (the parser's choices, [ref:megatron-arguments]).
    let one_of = |flag: &str, allowed: &[&str]| f.str(flag).is_none_or(|v| allowed.contains(&v));
    check(
        one_of(
            "--attention-backend",
            &["flash", "fused", "unfused", "local", "auto"],
        ),
        "--attention-backend value",
    );
    check(
        one_of(
            "--position-embedding-type",
            &[
                "learned_absolute",
                "rope",
                "yarn",
                "mrope",
                "relative",
                "none",
            ],
        ),
        "--position-embedding-type value",
    );
    check(
        one_of("--normalization", &["LayerNorm", "RMSNorm"]),
        "--normalization value",
    );
    check(
        one_of("--recompute-granularity", &["full", "selective"]),
        "--recompute-granularity value",
    );
    check(
        one_of("--recompute-method", &["uniform", "block"]),
        "--recompute-method value",
    );
    check(
        one_of(
            "--data-parallel-sharding-strategy",
            &["no_shard", "optim", "optim_grads", "optim_grads_params"],
        ),
        "--data-parallel-sharding-strategy value",
    );
    check(
        one_of(
            "--ckpt-format",
            &["torch", "torch_dist", "torch_dcp", "fsdp_dtensor"],
        ),
        "--ckpt-format value",
    );
    check(
        one_of(
            "--moe-token-dispatcher-type",
            &["allgather", "alltoall", "flex"],
        ),
        "--moe-token-dispatcher-type value",
    );
    check(
        f.str("--attention-backend") != Some("local") || f.str("--spec") == Some("local"),
        "T9: local backend needs --spec local",
    );

    // W1: world divisible by the model-parallel size; DP = world/(T·p·C).
    check(world % (tp * pp * cp) == 0, "W1: world % (TP·PP·CP) != 0");
    let dp = world / (tp * pp * cp);
    d.dp = dp;
    // W3, W4: expert grid.
    check(world % (etp * ep * pp) == 0, "W3: world % (ETP·EP·PP) != 0");
    if f.has("--use-tp-pp-dp-mapping") && pp > 1 {
        check(
            world / (etp * ep * pp) == dp,
            "W4: tp-pp-dp mapping needs expert DP == DP",
        );
    }
    // B1, B3, B4.
    check(mbs > 0, "B1: micro-batch-size must be > 0");
    let gbs = f.int("--global-batch-size").unwrap_or(mbs * dp);
    check(gbs % (mbs * dp) == 0, "B3: GBS % (MBS·DP) != 0");
    let m = gbs / (mbs * dp);
    check(m >= 1, "B4: fewer than one micro-batch");
    d.microbatches = m;
    // T1–T4.
    check(n % tp == 0, "T1: heads % TP != 0");
    let g = if f.has("--group-query-attention") {
        f.int("--num-query-groups").unwrap_or(1)
    } else {
        n
    };
    check(
        g % tp == 0 || tp % g == 0,
        "T2: query groups neither a multiple nor a divisor of TP",
    );
    check(
        f.has("--kv-channels") || h % n == 0,
        "T3: h % heads != 0 without --kv-channels",
    );
    let ffn = f.int("--ffn-hidden-size").unwrap_or(default_ffn(h, swiglu));
    check(ffn % tp == 0, "T4: ffn % TP != 0");
    if let Some(e_ffn) = f.int("--moe-ffn-hidden-size") {
        check(e_ffn % etp == 0, "T4: expert ffn % ETP != 0");
    }
    // T5, T6, T7, T11.
    check(
        !f.has("--tp-comm-overlap") || f.has("--sequence-parallel"),
        "T5: --tp-comm-overlap needs --sequence-parallel",
    );
    if sp {
        check(
            (seq / cp) % tp == 0 && seq % cp == 0,
            "T6: local sequence not divisible by TP under SP",
        );
    }
    if (tp > 1 || cp > 1) && env.compute_capability < 100 && !fsdp {
        check(
            env.max_connections == Some("1"),
            "T7: CUDA_DEVICE_MAX_CONNECTIONS must be 1",
        );
    }
    check(seq <= max_pos, "T11: seq-length > max-position-embeddings");
    // C1.
    if cp > 1 {
        check(seq % (2 * cp) == 0, "C1: seq % (2·CP) != 0");
    }
    // E1, E2, E4, TP+EP needs SP ([ref:megatron-parallelism-guide]).
    if ep > 1 {
        check(experts.is_some(), "E1: EP > 1 without --num-experts");
        check(
            experts.is_some_and(|e| e % ep == 0),
            "E2: experts % EP != 0",
        );
        check(tp == 1 || sp, "TP + EP needs --sequence-parallel");
    }
    if experts.is_some() {
        check(
            f.has("--disable-bias-linear") || etp == 1,
            "E4: MoE bias needs ETP == 1",
        );
        // Token drop (Megatron-LM `transformer_config.py`, the checks under
        // `moe_expert_capacity_factor is not None`): a positive factor, the
        // alltoall dispatcher and a load-balancing type among aux_loss,
        // seq_aux_loss, global_aux_loss and none.
        if let Some(c) = f.str("--moe-expert-capacity-factor") {
            check(
                c.parse::<f64>().is_ok_and(|c| c > 0.0),
                "capacity factor not a positive number",
            );
            check(
                matches!(
                    f.str("--moe-token-dispatcher-type"),
                    Some("alltoall" | "alltoall_seq")
                ),
                "capacity factor needs the alltoall dispatcher",
            );
            check(
                f.str("--moe-router-load-balancing-type").is_none_or(|t| {
                    ["aux_loss", "seq_aux_loss", "global_aux_loss", "none"].contains(&t)
                }),
                "capacity factor needs aux_loss, seq_aux_loss, global_aux_loss or none balancing",
            );
        }
        if f.int("--moe-router-topk") == Some(1)
            && f.str("--moe-router-score-function")
                .is_none_or(|s| s == "softmax")
        {
            check(
                f.has("--moe-router-pre-softmax"),
                "E5: top-1 routing needs --moe-router-pre-softmax",
            );
        }
    }

    // Pipeline: P1–P16.
    let nlpvs = f.int("--num-layers-per-virtual-pipeline-stage");
    let nvspr = f.int("--num-virtual-stages-per-pipeline-rank");
    let layout_str = f.str("--pipeline-model-parallel-layout");
    let first = f.int("--decoder-first-pipeline-num-layers");
    let last = f.int("--decoder-last-pipeline-num-layers");
    let acc_e = f.has("--account-for-embedding-in-pipeline-split");
    let acc_l = f.has("--account-for-loss-in-pipeline-split");
    let uneven = first.is_some() || last.is_some();
    check(
        [nlpvs.is_some(), nvspr.is_some(), layout_str.is_some()]
            .iter()
            .filter(|x| **x)
            .count()
            <= 1,
        "P1: more than one VPP input",
    );
    check(
        !(nlpvs.is_some() && uneven),
        "P3: --num-layers-per-virtual-pipeline-stage with uneven stages",
    );
    check(
        !(uneven && (acc_e || acc_l)),
        "P10: first/last with account-for-*",
    );
    check(
        !(layout_str.is_some() && (uneven || acc_e || acc_l)),
        "P12: layout with other pipeline layout arguments",
    );
    let l_eff = layers + acc_e as i64 + acc_l as i64;
    let mut vpp: Option<i64> = None;
    let mut layout_stages: Option<Vec<Vec<char>>> = None;
    if let Some(s) = layout_str {
        match parse_layout(s) {
            Err(e) => check(false, &format!("P13: {e}")),
            Ok(st) => {
                check(st.len() as i64 % pp == 0, "P2: layout stages % PP != 0");
                let flat: Vec<char> = st.concat();
                check(flat.first() == Some(&'E'), "P13: first layer must be E");
                check(flat.last() == Some(&'L'), "P13: last layer must be L");
                check(
                    flat.iter().filter(|c| **c == 'E').count() == 1,
                    "P13: one E",
                );
                check(
                    flat.iter().filter(|c| **c == 'L').count() == 1,
                    "P13: one L",
                );
                check(
                    flat.iter().filter(|c| **c == 't').count() as i64 == layers,
                    "P13: t count != num-layers",
                );
                check(
                    !flat.contains(&'m') || f.has("--mtp-num-layers"),
                    "P13: m without MTP",
                );
                // `validate_layer_layout`: as many m as --mtp-num-layers,
                // after every decoder layer, all in the last stage of a rank.
                let mtp = f.int("--mtp-num-layers").unwrap_or(0) as usize;
                let ms = flat.iter().filter(|c| **c == 'm').count();
                check(ms == mtp, "P13: m count != --mtp-num-layers");
                if let Some(i) = flat.iter().position(|c| *c == 'm') {
                    check(
                        !flat[i..].contains(&'t'),
                        "P13: decoder layers after MTP layers",
                    );
                    // Stage c is virtual stage c / p of rank c mod p.
                    let v = st.len() / pp as usize;
                    let holds: Vec<usize> =
                        (0..st.len()).filter(|&c| st[c].contains(&'m')).collect();
                    check(
                        holds.len() == 1 && holds[0] / pp as usize == v - 1,
                        "P13: MTP layers not all in one rank's last virtual stage",
                    );
                }
                let v = st.len() as i64 / pp;
                if v > 1 {
                    vpp = Some(v);
                }
                layout_stages = Some(st);
            }
        }
    } else if let Some(v) = nvspr {
        if v > 1 {
            vpp = Some(v);
        }
    } else if let Some(k) = nlpvs {
        // P4
        check(
            l_eff % pp == 0 && (l_eff / pp) % k == 0,
            "P4: layers per stage % layers per virtual stage",
        );
        let v = l_eff / pp / k.max(1);
        if v > 1 {
            vpp = Some(v);
        }
    }
    // P6 / W7.
    if vpp.is_some() {
        let min_pp = if f.has("--no-overlap-p2p-communication") {
            3
        } else {
            2
        };
        check(pp >= min_pp, "P6: interleaving needs a larger PP");
    }
    let v = vpp.unwrap_or(1);
    d.vpp = v;
    if layout_str.is_none() && !uneven {
        // P5 and P14 (even split).
        check(l_eff % pp == 0, "P5: layers % PP != 0");
        check((l_eff / pp) % v == 0, "P14: layers per PP rank % VPP != 0");
        let per = layers / (pp * v);
        for r in 0..pp {
            for j in 0..v {
                let s = (j * pp + r) * per;
                d.chunks.insert((r, j), (s, s + per));
            }
        }
    }
    if uneven {
        let (fi, la) = (first.unwrap_or(0), last.unwrap_or(0));
        // P7
        check(
            first.is_none_or(|x| x > 0) && last.is_none_or(|x| x > 0),
            "P7: first/last must be > 0",
        );
        // P8
        if v > 1 {
            check(fi % v == 0 && la % v == 0, "P8: first/last % VPP != 0");
        }
        // P9
        let mid_stages = pp - first.is_some() as i64 - last.is_some() as i64;
        let mid_layers = layers - fi - la;
        check(
            (mid_layers == 0) == (mid_stages == 0),
            "P9: middle layers vs middle stages mismatch",
        );
        if mid_stages > 0 {
            check(
                mid_layers % mid_stages == 0,
                "P9: middle layers % middle stages != 0",
            );
            check(
                (mid_layers / mid_stages.max(1)) % v == 0,
                "P9: middle layers per stage % VPP != 0",
            );
        }
        // Megatron's get_transformer_layer_offset with uneven stages.
        let (fc, lc) = (fi / v, la / v);
        let mc = if mid_stages > 0 {
            mid_layers / mid_stages / v
        } else {
            0
        };
        let row = fc + mc * mid_stages + lc;
        for r in 0..pp {
            for j in 0..v {
                let (off, cnt) = if r == 0 && first.is_some() {
                    (j * row, fc)
                } else {
                    let base = j * row + fc + (r - first.is_some() as i64) * mc;
                    (
                        base,
                        if r == pp - 1 && last.is_some() {
                            lc
                        } else {
                            mc
                        },
                    )
                };
                d.chunks.insert((r, j), (off, off + cnt));
            }
        }
    }
    if let Some(st) = &layout_stages {
        // PipelineParallelLayerLayout.get_layer_offset: stage i → (pp_rank i % PP, chunk i / PP).
        let mut off = 0;
        for (i, stage) in st.iter().enumerate() {
            let cnt = stage.iter().filter(|c| **c == 't').count() as i64;
            d.chunks
                .insert((i as i64 % pp, i as i64 / pp), (off, off + cnt));
            off += cnt;
        }
    }
    // P15, P16: interleaved micro-batch groups.
    if v > 1 {
        let gsize = f
            .int("--microbatch-group-size-per-virtual-pipeline-stage")
            .unwrap_or(pp);
        check(
            gsize >= pp && gsize <= m,
            "P15: micro-batch group not in [PP, M]",
        );
        let rem = m % gsize.max(1);
        check(!(rem > 0 && rem < pp), "P16: 0 < M % G < PP");
    }
    // R1–R3.
    match f.str("--recompute-granularity") {
        Some("selective") => {
            check(!f.has("--recompute-method"), "R1: selective with a method");
            check(
                !f.has("--recompute-num-layers"),
                "R3: selective with recompute-num-layers",
            );
        }
        Some("full") => {
            check(
                matches!(f.str("--recompute-method"), Some("uniform" | "block")),
                "R2: full needs a method",
            );
            let per_rank = layers / pp;
            check(
                f.int("--recompute-num-layers")
                    .is_some_and(|k| k >= 1 && k <= per_rank),
                "R3: recompute-num-layers out of range",
            );
        }
        _ => {
            check(
                !f.has("--recompute-method") && !f.has("--recompute-num-layers"),
                "recompute method without granularity",
            );
        }
    }
    // D1, D2, D3, D5, D8.
    if f.has("--overlap-param-gather") {
        check(
            do_ || fsdp,
            "D1: --overlap-param-gather needs DO or Megatron-FSDP",
        );
        check(
            f.has("--overlap-grad-reduce"),
            "D1: --overlap-param-gather needs --overlap-grad-reduce",
        );
    }
    if fsdp {
        check(
            f.str("--ckpt-format") == Some("fsdp_dtensor"),
            "D3: Megatron-FSDP needs --ckpt-format fsdp_dtensor",
        );
        check(
            env.max_connections != Some("1"),
            "D3: Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1",
        );
        check(
            !(do_ && f.int("--megatron-fsdp-version") == Some(2)),
            "D3: FSDP v2 with DO",
        );
    }
    check(
        f.str("--ckpt-format") != Some("fsdp_dtensor") || fsdp,
        "D8: fsdp_dtensor without Megatron-FSDP",
    );
    // D2: only torch FSDP2 refuses pipeline parallelism; Megatron-FSDP
    // (any sharding strategy) has no such check.
    if f.has("--use-torch-fsdp2") {
        check(
            f.int("--pipeline-model-parallel-size").unwrap_or(1) == 1,
            "D2: --use-torch-fsdp2 with pipeline parallelism",
        );
        check(!do_, "D2: --use-torch-fsdp2 with the distributed optimizer");
    }
    // D3: optim_grads_params refuses the cross-replica weight hash check.
    if f.str("--data-parallel-sharding-strategy") == Some("optim_grads_params") {
        check(
            !f.has("--check-weight-hash-across-dp-replicas-interval"),
            "D3: optim_grads_params with the weight hash check",
        );
    }
    check(!(f.has("--fp16") && f.has("--bf16")), "D5: fp16 and bf16");
    // Low precision (choices and checks of [ref:megatron-arguments] and
    // `TransformerConfig`): FP4 and FP8 exclude each other [D5]; a recipe
    // or an amax setting without its format is dead; narrow parameter
    // gathers need the distributed optimizer or FSDP [D4] and their format.
    check(
        one_of("--fp8-format", &["e4m3", "hybrid"]),
        "--fp8-format value",
    );
    check(
        one_of(
            "--fp8-recipe",
            &["tensorwise", "delayed", "mxfp8", "blockwise", "custom"],
        ),
        "--fp8-recipe value",
    );
    check(
        one_of("--fp8-amax-compute-algo", &["most_recent", "max"]),
        "--fp8-amax-compute-algo value",
    );
    check(one_of("--fp4-format", &["e2m1"]), "--fp4-format value");
    check(
        one_of("--fp4-recipe", &["nvfp4", "custom"]),
        "--fp4-recipe value",
    );
    check(
        !(f.has("--fp8-format") && f.has("--fp4-format")),
        "D5: fp4 together with fp8",
    );
    for (dep, format) in [
        ("--fp8-recipe", "--fp8-format"),
        ("--fp8-amax-history-len", "--fp8-format"),
        ("--fp8-amax-compute-algo", "--fp8-format"),
        ("--fp8-param-gather", "--fp8-format"),
        ("--fp4-recipe", "--fp4-format"),
        ("--fp4-param-gather", "--fp4-format"),
    ] {
        check(
            !f.has(dep) || f.has(format),
            &format!("renderer: {dep} without {format} is dead"),
        );
    }
    if f.has("--fp8-param-gather") || f.has("--fp4-param-gather") {
        check(
            do_ || fsdp,
            "D4: narrow parameter gathers need the distributed optimizer or FSDP",
        );
    }
    check(
        f.int("--fp8-amax-history-len").is_none()
            || f.str("--fp8-recipe").unwrap_or("delayed") == "delayed",
        "renderer: --fp8-amax-history-len outside delayed scaling is dead",
    );
    (bad, d)
}

/// Run the bundle's script and check it all.
fn check_bundle(name: &str, b: &Bundle) {
    let known = known_flags();
    let plan: serde_json::Value =
        serde_json::from_str(b.file(generate::PLAN_FILE).unwrap()).unwrap();
    let launch = common::launch(b, 0);
    // torchrun: processes per node × nodes = world.
    let tr = Flags::parse(&launch.torchrun).expect("torchrun args");
    let nproc = tr.int("--nproc_per_node").expect("--nproc_per_node");
    let nnodes = tr.int("--nnodes").expect("--nnodes");
    assert_eq!(tr.str("--node_rank"), Some("0"), "{name}");
    assert_eq!(tr.str("--master_addr"), Some("node001"), "{name}");
    assert_eq!(
        nproc * nnodes,
        plan["hardware"]["world"].as_i64().unwrap(),
        "{name}: nproc·nnodes"
    );
    assert_eq!(launch.script, "/opt/Megatron-LM/pretrain_gpt.py", "{name}");

    let f = Flags::parse(&launch.megatron).unwrap_or_else(|e| panic!("{name}: {e}"));
    let unknown: Vec<&String> = f
        .map
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "{name}: not Megatron-LM options: {unknown:?}"
    );

    let env = Env {
        world: nproc * nnodes,
        max_connections: launch.max_connections.as_deref(),
        compute_capability: plan["hardware"]["compute_capability"].as_u64().unwrap_or(0) as u32,
    };
    let (bad, d) = megatron_rules(&f, &env);
    assert!(
        bad.is_empty(),
        "{name}: Megatron would reject it: {bad:?}\n{}",
        b.file(generate::MEGATRON_SCRIPT).unwrap()
    );

    // The command implements the plan.
    let mesh = &plan["mesh"];
    let int = |v: &serde_json::Value| v.as_i64().unwrap();
    assert_eq!(
        f.int("--tensor-model-parallel-size"),
        Some(int(&mesh["tp"])),
        "{name}: T"
    );
    assert_eq!(
        f.int("--pipeline-model-parallel-size"),
        Some(int(&mesh["pp"])),
        "{name}: p"
    );
    assert_eq!(
        f.int("--context-parallel-size").unwrap_or(1),
        int(&mesh["cp"]),
        "{name}: C"
    );
    assert_eq!(
        f.int("--expert-model-parallel-size").unwrap_or(1),
        int(&mesh["ep"]),
        "{name}: E"
    );
    assert_eq!(d.dp, int(&mesh["dp"]), "{name}: D");
    assert_eq!(d.vpp, int(&mesh["vpp"]), "{name}: v");
    assert_eq!(
        f.has("--sequence-parallel"),
        mesh["sp"].as_bool().unwrap(),
        "{name}: SP"
    );
    assert_eq!(
        f.int("--micro-batch-size"),
        Some(int(&plan["job"]["micro_batch"])),
        "{name}: b"
    );
    assert_eq!(
        f.int("--global-batch-size"),
        Some(int(&plan["job"]["global_batch"])),
        "{name}: B"
    );
    assert_eq!(
        d.microbatches,
        int(&plan["job"]["micro_batches"]),
        "{name}: m"
    );
    assert_eq!(
        f.int("--seq-length"),
        Some(int(&plan["job"]["seq_len"])),
        "{name}: s"
    );
    assert_eq!(
        f.has("--use-tp-pp-dp-mapping"),
        plan["rank_order"]["order"] == "tp-cp-ep-pp-dp",
        "{name}: rank order"
    );
    let zero = int(&plan["sharding"]["zero"]);
    let strategy = f.str("--data-parallel-sharding-strategy");
    match zero {
        0 => assert!(
            !f.has("--use-distributed-optimizer") && !f.has("--use-megatron-fsdp"),
            "{name}: ZeRO-0"
        ),
        1 => assert!(
            f.has("--use-distributed-optimizer") && !f.has("--use-megatron-fsdp"),
            "{name}: ZeRO-1"
        ),
        2 => assert_eq!(strategy, Some("optim_grads"), "{name}: ZeRO-2"),
        _ => assert_eq!(strategy, Some("optim_grads_params"), "{name}: ZeRO-3"),
    }
    let recompute = plan["recompute"]["mode"].as_str().unwrap();
    assert_eq!(
        f.str("--recompute-granularity").unwrap_or("none"),
        recompute,
        "{name}: recompute"
    );
    // Layer ranges: what Megatron builds from the flags = the plan's stages.
    for stage in plan["stages"].as_array().unwrap() {
        let r = int(&stage["pp_rank"]);
        for c in stage["chunks"].as_array().unwrap() {
            let j = int(&c["vpp_chunk"]);
            let got = d.chunks.get(&(r, j)).copied();
            assert_eq!(
                got,
                Some((int(&c["first_layer"]), int(&c["end_layer"]))),
                "{name}: layers of pipeline rank {r} chunk {j}"
            );
        }
    }
    assert_eq!(
        d.chunks.len() as i64,
        int(&plan["pipeline"]["chunks"]),
        "{name}: chunk count"
    );
}

fn with(mut l: Layout, f: impl FnOnce(&mut Layout)) -> Layout {
    f(&mut l);
    l
}

#[test]
fn every_flag_is_a_megatron_option_and_every_rule_holds() {
    let s70 = Setup::new("70b", "dgx64", None);
    let base = with(Layout::dense(4, 8, 2, 1), |l| {
        l.recompute = Recompute::Selective
    });
    let mut cases: Vec<(String, &Setup, Layout)> = vec![
        ("70b best".into(), &s70, s70.best().expect("a valid layout")),
        (
            "70b T8 p2 v2 selective".into(),
            &s70,
            with(base.clone(), |l| l.vpp = 2),
        ),
        (
            "70b T8 p4 ZeRO-0".into(),
            &s70,
            with(Layout::dense(2, 8, 4, 1), |l| {
                l.zero = 0;
                l.recompute = Recompute::Selective;
            }),
        ),
        (
            "70b T8 p2 ZeRO-2".into(),
            &s70,
            with(base.clone(), |l| l.zero = 2),
        ),
        (
            // Megatron-FSDP optim_grads_params with a pipeline (the rule
            // that refused ZeRO-3 with p > 1 was torch FSDP2's, D2).
            "70b T8 p2 ZeRO-3".into(),
            &s70,
            with(base.clone(), |l| l.zero = 3),
        ),
        (
            "70b T2 C2 p2 v2 ZeRO-3".into(),
            &s70,
            with(Layout::dense(8, 2, 2, 2), |l| {
                l.zero = 3;
                l.vpp = 2;
            }),
        ),
        (
            "70b T8 p2 full recompute, tp-pp-dp".into(),
            &s70,
            with(base.clone(), |l| {
                l.recompute = Recompute::Full;
                l.order = RankOrder::TpCpEpPpDp;
            }),
        ),
        (
            "70b T8 p4 first/last".into(),
            &s70,
            with(Layout::dense(2, 8, 4, 1), |l| {
                l.recompute = Recompute::Selective;
                l.split = Some(vec![19, 21, 21, 19]);
            }),
        ),
        (
            "70b T8 p4 v2 first/last".into(),
            &s70,
            with(Layout::dense(2, 8, 4, 1), |l| {
                l.recompute = Recompute::Selective;
                l.vpp = 2;
                l.split = Some(vec![9, 10, 10, 11, 9, 10, 10, 11]);
            }),
        ),
        (
            "70b T8 p4 layout string".into(),
            &s70,
            with(Layout::dense(2, 8, 4, 1), |l| {
                l.recompute = Recompute::Selective;
                l.split = Some(vec![19, 21, 22, 18]);
            }),
        ),
        (
            "70b T8 p2 v2 layout string".into(),
            &s70,
            with(base.clone(), |l| {
                l.vpp = 2;
                l.split = Some(vec![19, 21, 20, 20]);
            }),
        ),
        (
            "70b T4 C2 p2".into(),
            &s70,
            with(Layout::dense(4, 4, 2, 2), |l| l.recompute = Recompute::Full),
        ),
    ];
    let s8 = Setup::new("llama3-8b", "dgx64", Some(8));
    cases.push((
        "8b T1 D8".into(),
        &s8,
        with(Layout::dense(8, 1, 1, 1), |l| l.recompute = Recompute::Full),
    ));
    let s8x = Setup::new("mixtral-8x7b", "dgx64", None);
    cases.push((
        "mixtral T2 E8 p2 SP".into(),
        &s8x,
        with(Layout::dense(16, 2, 2, 1), |l| {
            l.ep = 8;
            l.recompute = Recompute::Full;
        }),
    ));
    // Low-precision recipes (issue 14): FP8 delayed, current with FP8
    // parameter gathers, block-wise on H100; MXFP8 and NVFP4 on B200.
    let fp8 = |cluster: &str, f: &dyn Fn(&mut Setup)| {
        let mut s = Setup::new("70b", cluster, None);
        s.job.precision = meshplan::spec::Precision::Fp8;
        f(&mut s);
        s
    };
    use meshplan::spec::{Fp8Recipe, Precision};
    let low = [
        ("70b fp8 delayed T4 p4 SP", fp8("dgx-h100-64", &|_| {})),
        (
            "70b fp8 current, fp8 param gather",
            fp8("dgx-h100-64", &|s| {
                s.job.fp8_recipe = Fp8Recipe::Current;
                s.job.fp8_param_gather = true;
            }),
        ),
        (
            "70b fp8 blockwise",
            fp8("dgx-h100-64", &|s| s.job.fp8_recipe = Fp8Recipe::Blockwise),
        ),
        (
            "70b mxfp8 on B200",
            fp8("dgx-b200-64", &|s| s.job.precision = Precision::Mxfp8),
        ),
        (
            "70b nvfp4 on B200, fp4 param gather",
            fp8("dgx-b200-64", &|s| {
                s.job.precision = Precision::Nvfp4;
                s.job.fp8_param_gather = true;
            }),
        ),
    ];
    let low_layout = with(Layout::dense(4, 4, 4, 1), |l| {
        l.sp = true;
        l.recompute = Recompute::Selective;
        l.zero = 2;
    });
    for (name, s) in &low {
        cases.push((name.to_string(), s, low_layout.clone()));
    }
    // Best layouts of other catalog entries, when a search finds one.
    let extra = [
        Setup::new("mixtral-8x7b", "dgx64", None),
        Setup::new("gpt3-175b", "dgx-h100-1024", None),
        Setup::new("qwen3-30b-a3b", "h200-64", None),
        Setup::new("deepseek-v3", "h800-2048", None),
        // Token drop: generate writes --moe-expert-capacity-factor.
        {
            let mut s = Setup::new("qwen3-30b-a3b", "h200-64", None);
            s.job.moe_capacity_factor = Some(1.25);
            s
        },
    ];
    // DeepSeek-V3 with Megatron-Bridge's interleaved H100 split (1, 2×30, 0
    // over p 8 · v 4): a layout string, whose last stage holds the MTP
    // layer and the loss (`…|m,L`).
    let ds_h100 = Setup::new("deepseek-v3", "dgx-h100-1024", None);
    let mut bridge_split = vec![2u32; 32];
    bridge_split[0] = 1;
    bridge_split[31] = 0;
    let ds_layout = Layout {
        ep: 64,
        vpp: 4,
        sp: true,
        recompute: Recompute::Full,
        split: Some(bridge_split),
        ..Layout::dense(64, 2, 8, 1)
    };
    let ds_script = ds_h100
        .bundle(&ds_layout)
        .file(generate::MEGATRON_SCRIPT)
        .unwrap()
        .to_string();
    assert!(ds_script.contains("|t*2|m,L'"), "{ds_script}");
    cases.push(("deepseek-v3 bridge split".to_string(), &ds_h100, ds_layout));
    let mut found = 0;
    for s in &extra {
        if let Some(l) = s.best() {
            found += 1;
            cases.push((format!("{} best", s.model.name), s, l));
        }
    }
    assert!(
        found >= 2,
        "searches found valid layouts for only {found} of {} extra setups",
        extra.len()
    );
    for (name, s, l) in &cases {
        check_bundle(name, &s.bundle(l));
    }
}

/// The oracle itself rejects what Megatron rejects: start from a generated
/// command and break one rule at a time.
#[test]
fn oracle_catches_broken_commands() {
    let s = Setup::new("70b", "dgx64", None);
    let l = with(Layout::dense(4, 8, 2, 1), |l| {
        l.vpp = 2;
        l.recompute = Recompute::Selective;
    });
    let launch = common::launch(&s.bundle(&l), 0);
    let env = Env {
        world: 64,
        max_connections: Some("1"),
        compute_capability: 80,
    };
    let good = Flags::parse(&launch.megatron).unwrap();
    assert!(megatron_rules(&good, &env).0.is_empty());
    let set = |f: &Flags, k: &str, v: &[&str]| {
        let mut g = f.clone();
        g.map
            .insert(k.to_string(), v.iter().map(|x| x.to_string()).collect());
        g
    };
    let del = |f: &Flags, k: &str| {
        let mut g = f.clone();
        g.map.remove(k);
        g
    };
    let expect = |f: Flags, env: &Env, rule: &str| {
        let (bad, _) = megatron_rules(&f, env);
        assert!(
            bad.iter().any(|b| b.starts_with(rule)),
            "expected {rule}, got {bad:?}"
        );
    };
    expect(
        set(&good, "--tensor-model-parallel-size", &["3"]),
        &env,
        "W1",
    );
    expect(set(&good, "--global-batch-size", &["2047"]), &env, "B3");
    expect(set(&good, "--num-query-groups", &["3"]), &env, "T2");
    expect(
        set(
            &set(&good, "--tensor-model-parallel-size", &["16"]),
            "--num-attention-heads",
            &["72"],
        ),
        &Env { world: 128, ..env },
        "T1",
    );
    expect(
        set(&del(&good, "--sequence-parallel"), "--tp-comm-overlap", &[]),
        &env,
        "T5",
    );
    expect(
        set(
            &set(&good, "--context-parallel-size", &["2"]),
            "--seq-length",
            &["8190"],
        ),
        &Env { world: 128, ..env },
        "C1",
    );
    expect(set(&good, "--seq-length", &["8196"]), &env, "T6");
    // Low precision: narrow gathers without the distributed optimizer [D4],
    // FP4 with FP8 [D5], a recipe Megatron does not know.
    let fp8 = set(
        &set(&good, "--fp8-format", &["hybrid"]),
        "--fp8-recipe",
        &["tensorwise"],
    );
    assert!(megatron_rules(&fp8, &env).0.is_empty());
    expect(
        set(
            &del(&fp8, "--use-distributed-optimizer"),
            "--fp8-param-gather",
            &[],
        ),
        &env,
        "D4",
    );
    expect(set(&fp8, "--fp4-format", &["e2m1"]), &env, "D5");
    expect(
        set(&fp8, "--fp8-recipe", &["rowwise"]),
        &env,
        "--fp8-recipe",
    );
    expect(
        set(&good, "--num-virtual-stages-per-pipeline-rank", &["3"]),
        &env,
        "P14",
    );
    expect(set(&good, "--global-batch-size", &["12"]), &env, "P16");
    expect(set(&good, "--global-batch-size", &["4"]), &env, "P15");
    expect(
        set(&good, "--pipeline-model-parallel-size", &["1"]),
        &Env { world: 32, ..env },
        "P6",
    );
    expect(
        set(&good, "--decoder-first-pipeline-num-layers", &["41"]),
        &env,
        "P8",
    );
    let uneven = set(
        &set(
            &del(&good, "--num-virtual-stages-per-pipeline-rank"),
            "--decoder-first-pipeline-num-layers",
            &["30"],
        ),
        "--decoder-last-pipeline-num-layers",
        &["30"],
    );
    expect(uneven.clone(), &env, "P9");
    expect(
        set(&uneven, "--decoder-last-pipeline-num-layers", &["0"]),
        &env,
        "P7",
    );
    expect(
        set(
            &good,
            "--pipeline-model-parallel-layout",
            &["E,t*40|t*41,L"],
        ),
        &env,
        "P1",
    );
    let lay = del(&good, "--num-virtual-stages-per-pipeline-rank");
    expect(
        set(&lay, "--pipeline-model-parallel-layout", &["E,t*40|t*39,L"]),
        &env,
        "P13",
    );
    expect(
        set(
            &lay,
            "--pipeline-model-parallel-layout",
            &["t*40|t*40|t*0,L"],
        ),
        &env,
        "P2",
    );
    expect(set(&good, "--recompute-method", &["uniform"]), &env, "R1");
    expect(set(&good, "--recompute-granularity", &["full"]), &env, "R2");
    expect(del(&good, "--overlap-grad-reduce"), &env, "D1");
    expect(del(&good, "--use-distributed-optimizer"), &env, "D1");
    expect(
        good.clone(),
        &Env {
            max_connections: None,
            ..env
        },
        "T7",
    );
    let fsdp = set(
        &del(&good, "--use-distributed-optimizer"),
        "--use-megatron-fsdp",
        &[],
    );
    expect(
        fsdp.clone(),
        &Env {
            max_connections: None,
            ..env
        },
        "D3",
    );
    expect(set(&good, "--ckpt-format", &["fsdp_dtensor"]), &env, "D8");
    // A ZeRO-3 script with p = 2 passes; the same under torch FSDP2 is D2.
    let z3 = Flags::parse(
        &common::launch(
            &s.bundle(&with(l.clone(), |l| {
                l.zero = 3;
                l.vpp = 1;
            })),
            0,
        )
        .megatron,
    )
    .unwrap();
    let fsdp_env = Env {
        max_connections: None,
        ..env
    };
    assert_eq!(megatron_rules(&z3, &fsdp_env).0, Vec::<String>::new());
    assert_eq!(
        z3.str("--data-parallel-sharding-strategy"),
        Some("optim_grads_params")
    );
    expect(
        set(&del(&z3, "--use-megatron-fsdp"), "--use-torch-fsdp2", &[]),
        &fsdp_env,
        "D2",
    );
    expect(
        set(&good, "--expert-model-parallel-size", &["8"]),
        &env,
        "E1",
    );
    expect(
        set(
            &set(&good, "--expert-model-parallel-size", &["8"]),
            "--num-experts",
            &["12"],
        ),
        &env,
        "E2",
    );
    expect(set(&good, "--seq-length", &["16384"]), &env, "T11");
    expect(set(&good, "--use-flash-attn", &[]), &env, "renderer");
    expect(del(&good, "--num-layers"), &env, "D12");
    // The layer-range derivation agrees with Megatron's on the parser's
    // worked example ([ref:megatron-pp-layout]).
    let st = parse_layout("Et*3|(tt|)*29,m|L").unwrap();
    assert_eq!(st.len(), 32);
    assert_eq!(st[0], vec!['E', 't', 't', 't']);
    assert_eq!(st[30], vec!['m']);
    assert_eq!(st[31], vec!['L']);
}

#[test]
fn a_missing_parameter_stops_the_script_before_torchrun() {
    let s = Setup::new("70b", "dgx64", None);
    let b = s.bundle(&with(Layout::dense(4, 8, 2, 1), |l| {
        l.recompute = Recompute::Selective
    }));
    let dir = common::temp_dir("missing");
    generate::write(&b.files, &dir).unwrap();
    let script = dir.join(generate::MEGATRON_SCRIPT);
    let (mut cmd, out) = common::launch_command(
        &dir,
        &script,
        &[("NODE_RANK", "0"), ("MASTER_ADDR", "node001")],
    );
    cmd.env_remove("DATA_PATH");
    let res = cmd.output().unwrap();
    assert!(!res.status.success());
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains("DATA_PATH") && err.contains("set DATA_PATH"),
        "{err}"
    );
    assert!(!out.exists(), "torchrun ran although DATA_PATH was unset");
    // A multi-node plan also needs NODE_RANK and MASTER_ADDR.
    let (mut cmd, out) = common::launch_command(&dir, &script, &[("MASTER_ADDR", "node001")]);
    let res = cmd.output().unwrap();
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("NODE_RANK"));
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slurm_script_starts_one_launch_per_node_with_the_first_node_as_rendezvous() {
    let s = Setup::new("70b", "dgx64", None);
    let b = s.bundle(&with(Layout::dense(4, 8, 2, 1), |l| {
        l.recompute = Recompute::Selective
    }));
    let dir = common::temp_dir("slurm");
    generate::write(&b.files, &dir).unwrap();
    let sbatch = b.file(generate::SLURM_SCRIPT).unwrap();
    for line in [
        "#SBATCH --nodes=8",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
    ] {
        assert!(sbatch.lines().any(|l| l == line), "missing `{line}`");
    }
    let (mut cmd, out) = common::launch_command(&dir, &dir.join(generate::SLURM_SCRIPT), &[]);
    let bin = dir.join("bin");
    common::stub(
        &bin,
        "scontrol",
        "[ \"$1 $2\" = \"show hostnames\" ] || exit 9\nprintf 'gpu-a01\\ngpu-a02\\ngpu-a03\\n'",
    );
    // srun: record its options, then run the task as node 5 of the allocation.
    common::stub(
        &bin,
        "srun",
        &format!(
            "printf '%s\\n' \"$@\" > '{}'\nwhile [ \"${{1#--}}\" != \"$1\" ]; do shift; done\nSLURM_NODEID=5 exec \"$@\"",
            dir.join("srun.out").display()
        ),
    );
    cmd.env("SLURM_SUBMIT_DIR", &dir)
        .env("SLURM_JOB_NUM_NODES", "8")
        .env("SLURM_JOB_NODELIST", "gpu-a[01-08]");
    let res = cmd.output().unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let srun = std::fs::read_to_string(dir.join("srun.out")).unwrap();
    assert!(
        srun.lines().any(|l| l == "--nodes=8") && srun.lines().any(|l| l == "--ntasks-per-node=1"),
        "{srun}"
    );
    let launch = common::read_launch(&out);
    let tr = Flags::parse(&launch.torchrun).unwrap();
    assert_eq!(tr.str("--nnodes"), Some("8"));
    assert_eq!(tr.str("--nproc_per_node"), Some("8"));
    assert_eq!(tr.str("--node_rank"), Some("5"));
    assert_eq!(tr.str("--master_addr"), Some("gpu-a01"));
    assert_eq!(tr.str("--master_port"), Some("29500"));
    // A wrong allocation size is refused before srun.
    let (mut cmd, _) = common::launch_command(&dir, &dir.join(generate::SLURM_SCRIPT), &[]);
    cmd.env("SLURM_SUBMIT_DIR", &dir)
        .env("SLURM_JOB_NUM_NODES", "4")
        .env("SLURM_JOB_NODELIST", "x");
    let _ = std::fs::remove_file(dir.join("srun.out"));
    let res = cmd.output().unwrap();
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("needs 8 nodes"));
    assert!(!dir.join("srun.out").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A token-drop job's plan launches with its capacity factor
/// (`--moe-expert-capacity-factor 1.25`, Megatron's flag) and a dropless one
/// without the flag.
#[test]
fn capacity_factor_is_written() {
    let mut s = Setup::new("qwen3-30b-a3b", "h200-64", None);
    let l = s.best().expect("a valid layout");
    let dropless = s.bundle(&l);
    let script = dropless.file(generate::MEGATRON_SCRIPT).unwrap();
    assert!(!script.contains("--moe-expert-capacity-factor"), "{script}");
    s.job.moe_capacity_factor = Some(1.25);
    let drop = s.bundle(&l);
    let script = drop.file(generate::MEGATRON_SCRIPT).unwrap();
    assert!(
        script.contains("--moe-expert-capacity-factor 1.25"),
        "{script}"
    );
    check_bundle("qwen3-30b-a3b token drop", &drop);
}
