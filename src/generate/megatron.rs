//! Megatron-LM: the plan as `pretrain_gpt.py` command-line flags and the
//! environment the layout needs. Every flag name is an option string of the
//! current Megatron-LM parser ([ref:megatron-arguments]; the list is
//! `tests/data/megatron_flags.txt`, and `tests/megatron_flags.rs` checks each
//! flag against it and against Megatron's argument checks, whose codes
//! `docs/references.md` lists).
//!
//! Choices follow the current parser [ref:megatron-arguments]:
//! `--attention-backend` (not the dead `--use-flash-attn`),
//! `--use-megatron-fsdp` (not `--use-custom-fsdp`),
//! `--group-query-attention` together with `--num-query-groups`,
//! `--num-virtual-stages-per-pipeline-rank` (works with uneven first/last
//! stages), `CUDA_DEVICE_MAX_CONNECTIONS=1` for T > 1 or C > 1 on
//! pre-Blackwell GPUs unless Megatron-FSDP is used.

use serde::Serialize;

use super::plan_file::Plan;
use crate::cost::{TimeBreakdown, TimePart};
use crate::layout::{RankOrder, Recompute};
use crate::spec::RecipeName;
use crate::spec::model::{Norm, PositionEmbedding};

/// How the layers are split over pipeline chunks, in Megatron's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Split {
    /// Megatron's default even split (every chunk L/(p·v) layers).
    Even,
    /// `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers`:
    /// the first and last pipeline ranks hold `first` and `last` layers (over
    /// all their chunks), the middle ranks share the rest evenly [P7–P9].
    FirstLast {
        /// Layers on pipeline rank 0.
        first: u32,
        /// Layers on the last pipeline rank.
        last: u32,
    },
    /// `--pipeline-model-parallel-layout`: one stage per model chunk, in
    /// model order ([ref:megatron-pp-layout]).
    Layout {
        /// The layout string, e.g. `E,t*19|t*21|t*21|t*19,L`.
        layout: String,
    },
}

/// The Megatron form of `plan`'s layer split.
///
/// Even when every chunk holds the same count; first/last when, for every
/// virtual chunk j, the chunks of pipeline rank 0 hold the same count, those
/// of the last rank the same count, and all middle ranks' chunks the same
/// count (Megatron's `get_transformer_layer_offset` then places the same
/// layers); otherwise the explicit layout string.
pub fn split(plan: &Plan) -> Split {
    let p = plan.mesh.pp as usize;
    let v = plan.mesh.vpp as usize;
    let s = &plan.pipeline.layers_per_chunk;
    if p <= 1 || plan.pipeline.uniform {
        return Split::Even;
    }
    let (f, la) = (s[0], s[p - 1]);
    let mid = if p > 2 { Some(s[1]) } else { None };
    let fits = (0..v).all(|j| {
        let row = &s[j * p..(j + 1) * p];
        row[0] == f && row[p - 1] == la && row[1..p - 1].iter().all(|x| Some(*x) == mid)
    });
    if fits && f > 0 && la > 0 {
        return Split::FirstLast {
            first: f * v as u32,
            last: la * v as u32,
        };
    }
    let stages: Vec<String> = plan
        .model_chunks()
        .iter()
        .map(|c| {
            let mut parts = Vec::new();
            if c.embedding {
                parts.push("E".to_string());
            }
            match c.layers {
                0 => {}
                1 => parts.push("t".to_string()),
                k => parts.push(format!("t*{k}")),
            }
            if c.output {
                // The MTP layers sit on the last stage, before the loss
                // (Megatron-LM `pipeline_parallel_layer_layout.py`: `m`;
                // `validate_layer_layout` wants all of them on the last
                // virtual stage of one rank).
                match plan.model.mtp_layers {
                    0 => {}
                    1 => parts.push("m".to_string()),
                    d => parts.push(format!("m*{d}")),
                }
                parts.push("L".to_string());
            }
            parts.join(",")
        })
        .collect();
    Split::Layout {
        layout: stages.join("|"),
    }
}

/// One command-line argument, ready to print inside a bash array.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Arg {
    /// The flag and its value as shell text (`--micro-batch-size 1`,
    /// `--save "${CHECKPOINT_DIR}"`).
    pub text: String,
    /// Why it is there (printed as a comment), if worth saying.
    pub note: Option<String>,
}

/// A named bash array of arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArgGroup {
    /// Array name, e.g. `MODEL_PARALLEL_ARGS`.
    pub name: String,
    /// One-line comment above it.
    pub comment: String,
    /// Its arguments.
    pub args: Vec<Arg>,
}

/// One line of environment setup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvLine {
    /// Shell text, e.g. `export CUDA_DEVICE_MAX_CONNECTIONS=1`.
    pub text: String,
    /// Why.
    pub note: String,
}

/// A parameter the script reads from the environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Param {
    /// Variable name.
    pub name: String,
    /// What to set it to.
    pub help: String,
    /// Default when unset; `None` means the script stops if it is unset.
    pub default: Option<String>,
}

/// Everything the Megatron and SLURM templates print.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Megatron {
    /// Environment lines.
    pub env: Vec<EnvLine>,
    /// Parameters read from the environment (required ones first).
    pub params: Vec<Param>,
    /// Argument arrays after `pretrain_gpt.py`, in order; none is empty.
    pub groups: Vec<ArgGroup>,
    /// The split in Megatron's terms.
    pub split: Split,
    /// Uses Megatron-FSDP (ZeRO-2/3).
    pub fsdp: bool,
    /// Index of the last node (nodes − 1).
    pub last_node: u64,
}

/// Shell-quote a literal: bare when it only holds safe characters, else in
/// single quotes.
pub fn sh_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=+,@%".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn flag(f: &str) -> Arg {
    Arg {
        text: f.to_string(),
        note: None,
    }
}

fn val(f: &str, v: impl ToString) -> Arg {
    Arg {
        text: format!("{f} {}", sh_quote(&v.to_string())),
        note: None,
    }
}

/// `--flag "${VAR}"`.
fn var(f: &str, name: &str) -> Arg {
    Arg {
        text: format!("{f} \"${{{name}}}\""),
        note: None,
    }
}

impl Arg {
    fn note(mut self, n: impl Into<String>) -> Arg {
        self.note = Some(n.into());
        self
    }
}

fn group(name: &str, comment: &str, args: Vec<Arg>) -> ArgGroup {
    ArgGroup {
        name: name.to_string(),
        comment: comment.to_string(),
        args,
    }
}

/// Translate `plan` into Megatron-LM flags and environment.
pub fn megatron(plan: &Plan) -> Megatron {
    let m = &plan.model;
    let mesh = &plan.mesh;
    let job = &plan.job;
    let fsdp = plan.sharding.zero >= 2;
    let moe = m.moe.is_some();

    // Environment [T7, D3].
    let mut env = Vec::new();
    let cc = plan.hardware.compute_capability;
    if fsdp {
        env.push(EnvLine {
            text: "unset CUDA_DEVICE_MAX_CONNECTIONS".into(),
            note: "Megatron-FSDP rejects CUDA_DEVICE_MAX_CONNECTIONS=1; with FSDP the CUDA_DEVICE_MAX_CONNECTIONS check only warns".into(),
        });
    } else if mesh.tp > 1 || mesh.cp > 1 {
        match cc {
            Some(c) if c >= 100 => env.push(EnvLine {
                text: "# CUDA_DEVICE_MAX_CONNECTIONS left unset".into(),
                note: format!("sm_{c} (Blackwell or newer): Megatron requires it only before Blackwell"),
            }),
            _ => env.push(EnvLine {
                text: "export CUDA_DEVICE_MAX_CONNECTIONS=1".into(),
                note: format!(
                    "T = {}, C = {} on {} ({}): Megatron's validate_args requires it before Blackwell so TP/CP communication is ordered with compute",
                    mesh.tp,
                    mesh.cp,
                    plan.hardware.gpu,
                    cc.map(|c| format!("sm_{c}")).unwrap_or_else(|| "compute capability unknown, set to be safe".into())
                ),
            }),
        }
    }

    let params = vec![
        Param {
            name: "MEGATRON_DIR".into(),
            help: "a Megatron-LM checkout (the directory holding pretrain_gpt.py)".into(),
            default: None,
        },
        Param {
            name: "DATA_PATH".into(),
            help: "the indexed dataset prefix(es) for --data-path (a weighted blend lists weights and prefixes, e.g. 0.7 /data/a_text 0.3 /data/b_text)".into(),
            default: None,
        },
        Param {
            name: "TOKENIZER_MODEL".into(),
            help: "the tokenizer for --tokenizer-model (a Hugging Face name or a local path)".into(),
            default: None,
        },
        Param {
            name: "CHECKPOINT_DIR".into(),
            help: "where checkpoints are saved and loaded from (shared storage)".into(),
            default: None,
        },
        Param {
            name: "LOG_DIR".into(),
            help: "where TensorBoard logs go".into(),
            default: None,
        },
        Param {
            name: "TRAIN_ITERS".into(),
            help: "optimizer steps to run (--train-iters)".into(),
            default: None,
        },
        Param {
            name: "LR".into(),
            help: "peak learning rate (--lr)".into(),
            default: None,
        },
        Param {
            name: "TOKENIZER_TYPE".into(),
            help: "Megatron tokenizer class (--tokenizer-type)".into(),
            default: Some("HuggingFaceTokenizer".into()),
        },
        Param {
            name: "MASTER_PORT".into(),
            help: "TCP port of the rendezvous on node 0".into(),
            default: Some("29500".into()),
        },
    ];

    // Model architecture.
    let mut model = vec![
        val("--num-layers", m.layers),
        val("--hidden-size", m.hidden),
        val("--ffn-hidden-size", m.ffn),
        val("--num-attention-heads", m.heads),
    ];
    if let Some(mla) = &m.mla {
        model.push(flag("--multi-latent-attention"));
        if mla.q_lora_rank > 0 {
            model.push(val("--q-lora-rank", mla.q_lora_rank));
        }
        model.push(val("--kv-lora-rank", mla.kv_lora_rank));
        model.push(val("--qk-head-dim", mla.qk_nope_head_dim));
        model.push(val("--qk-pos-emb-head-dim", mla.qk_rope_head_dim));
        model.push(val("--v-head-dim", mla.v_head_dim));
    } else {
        if m.kv_heads != m.heads {
            model.push(flag("--group-query-attention"));
            model.push(
                val("--num-query-groups", m.kv_heads).note(format!("{} KV heads", m.kv_heads)),
            );
        }
        model.push(val("--kv-channels", m.head_dim).note("head dimension"));
    }
    let max_pos = match m.position_embedding {
        PositionEmbedding::Learned => m.max_seq,
        _ => m.max_seq.max(job.seq_len),
    };
    model.push(val("--seq-length", job.seq_len));
    model.push(val("--max-position-embeddings", max_pos));
    match m.position_embedding {
        PositionEmbedding::Rope => {
            model.push(val("--position-embedding-type", "rope"));
            match m.rope_theta {
                Some(theta) => model.push(
                    val("--rotary-base", theta.round() as u64)
                        .note("RoPE base θ from the model card"),
                ),
                None => model.push(
                    val("--rotary-base", 10000)
                        .note("the model card gives no RoPE base; 10000 is Megatron's default"),
                ),
            }
            if let Some(r) = &m.rope_scaling {
                model.push(flag("--use-rope-scaling").note(format!(
                    "Llama 3.1 scaling: low/high frequency factors {} and {}, original context {}",
                    r.low_freq_factor, r.high_freq_factor, r.original_max_seq
                )));
                model.push(val("--rope-scaling-factor", r.factor));
            }
        }
        PositionEmbedding::Learned => {
            model.push(val("--position-embedding-type", "learned_absolute"))
        }
        // Refused before rendering (Megatron-LM has no ALiBi).
        PositionEmbedding::Alibi => {}
    }
    if m.gated_mlp {
        model.push(flag("--swiglu"));
    }
    model.push(val(
        "--normalization",
        match m.norm {
            Norm::Rmsnorm => "RMSNorm",
            Norm::Layernorm => "LayerNorm",
        },
    ));
    if let Some(e) = m.norm_epsilon {
        model.push(val("--norm-epsilon", e).note("from the model card"));
    }
    if m.qk_layernorm {
        model.push(flag("--qk-layernorm"));
    }
    if m.mtp_layers > 0 {
        model.push(val("--mtp-num-layers", m.mtp_layers).note(
            "multi-token prediction, priced on the last pipeline stage (DeepSeek-V3 report §2.2)",
        ));
        if let Some(w) = m.mtp_loss_scale {
            model.push(
                val("--mtp-loss-scaling-factor", w).note("MTP loss weight from the model card"),
            );
        }
    }
    if !m.tied_embeddings {
        model.push(flag("--untie-embeddings-and-output-weights"));
    }
    if !m.linear_bias {
        model.push(flag("--disable-bias-linear"));
    }
    if !m.dropout {
        model.push(val("--attention-dropout", 0));
        model.push(val("--hidden-dropout", 0));
    }
    model.push(match m.tokenizer_vocab {
        None => val("--make-vocab-size-divisible-by", 128).note(format!(
            "vocabulary {} padded to {} (a multiple of 128·T = {})",
            m.vocab,
            m.padded_vocab,
            128 * mesh.tp
        )),
        Some(t) => match vocab_divisor(t, m.padded_vocab, mesh.tp) {
            Some(x) => val("--make-vocab-size-divisible-by", x).note(format!(
                "the tokenizer's {t} padded to {}, the vocabulary priced (a multiple of {x}·T = {})",
                m.padded_vocab,
                x * mesh.tp as u64
            )),
            None => val("--make-vocab-size-divisible-by", 128).note(format!(
                "CHECK: no divisor makes Megatron pad the tokenizer's {t} to the {} priced; it builds {}",
                m.padded_vocab,
                crate::cost::layer::padded_vocab(t, mesh.tp)
            )),
        },
    });

    // Mixture of experts.
    let mut moe_args = Vec::new();
    if let Some(x) = &m.moe {
        moe_args.push(val("--num-experts", x.experts));
        moe_args.push(val("--moe-router-topk", x.top_k));
        if x.top_k == 1 {
            moe_args.push(
                flag("--moe-router-pre-softmax").note("top-1 routing with softmax scores needs it"),
            );
        }
        moe_args.push(val("--moe-ffn-hidden-size", x.expert_ffn));
        if x.shared_experts > 0 {
            let w = x.shared_experts as u64 * x.shared_expert_ffn.unwrap_or(x.expert_ffn);
            moe_args.push(
                val("--moe-shared-expert-intermediate-size", w).note(format!(
                    "{} shared expert{}",
                    x.shared_experts,
                    if x.shared_experts == 1 { "" } else { "s" }
                )),
            );
        }
        if x.first_k_dense > 0 {
            moe_args.push(
                val(
                    "--moe-layer-freq",
                    format!(
                        "([0]*{}+[1]*{})",
                        x.first_k_dense,
                        m.layers - x.first_k_dense
                    ),
                )
                .note(format!("the first {} layers are dense", x.first_k_dense)),
            );
        }
        // Router as the model card gives it (not priced: the cost model
        // routes tokens by `moe.top_k` alone).
        if let Some(f) = &x.score_function {
            moe_args.push(val("--moe-router-score-function", f));
        }
        if x.expert_bias {
            moe_args.push(
                flag("--moe-router-enable-expert-bias")
                    .note("auxiliary-loss-free balancing by a per-expert bias"),
            );
        }
        if let (Some(g), Some(k)) = (x.groups, x.group_top_k) {
            moe_args.push(val("--moe-router-num-groups", g));
            moe_args.push(val("--moe-router-group-topk", k).note(format!(
                "group-limited routing: each token to experts of {k} of {g} groups"
            )));
        }
        if let Some(f) = x.topk_scaling_factor {
            moe_args.push(val("--moe-router-topk-scaling-factor", f));
        }
        if x.experts >= 32 {
            moe_args.push(val("--moe-router-dtype", "fp32").note(
                "Megatron-LM warns that 32 or more experts want fp32 routing (validate_args)",
            ));
        }
        moe_args.push(
            val("--moe-token-dispatcher-type", "alltoall")
                .note("meshplan prices EP dispatch and combine as all-to-all"),
        );
        if cc.is_some_and(|c| c >= 80) {
            moe_args.push(flag("--moe-grouped-gemm"));
        }
        // Token drop: the capacity factor the plan was priced with
        // (`moe::expert_load`), without padding to capacity.
        if let Some(c) = job.moe_capacity_factor {
            moe_args.push(
                val("--moe-expert-capacity-factor", c)
                    .note("tokens beyond this multiple of the mean expert load are dropped"),
            );
        }
        // Load balancing from the card; without a coefficient Megatron's
        // 0.0 would leave an "aux_loss" router unbalanced, so say so.
        match (x.load_balancing.as_deref(), x.aux_loss_coeff) {
            (Some(kind), Some(c)) => {
                moe_args.push(val("--moe-router-load-balancing-type", kind));
                moe_args.push(val("--moe-aux-loss-coeff", c).note("from the model card"));
            }
            (Some("none"), None) => {
                moe_args.push(val("--moe-router-load-balancing-type", "none"));
            }
            _ => {
                moe_args.push(
                    val("--moe-router-load-balancing-type", "none").note(
                        "the model card states no load-balancing loss and coefficient; set both to balance the router",
                    ),
                );
            }
        }
    }

    // Training schedule.
    let training = vec![
        val("--micro-batch-size", job.micro_batch).note("b"),
        val("--global-batch-size", job.global_batch).note(format!(
            "B = D·m·b = {}·{}·{}",
            mesh.dp, job.micro_batches, job.micro_batch
        )),
        var("--train-iters", "TRAIN_ITERS"),
        var("--lr", "LR"),
        val("--lr-decay-style", "cosine"),
        val("--weight-decay", 0.1),
        val("--adam-beta1", 0.9),
        val("--adam-beta2", 0.95),
        val("--clip-grad", "1.0"),
    ];

    // Precision and attention kernel.
    let mut precision =
        vec![flag("--bf16").note("bf16 weights and activations; fp32 main grads and optimizer")];
    if job.recipe == RecipeName::Adam16b {
        precision.push(
            flag("--grad-reduce-in-bf16")
                .note("adam-16b recipe: gradients kept and reduced in bf16 (2/2/12)"),
        );
    }
    // Low-precision linears (Transformer Engine recipes, [ref:te-fp8-primer];
    // flag names and choices from [ref:megatron-arguments]). Row-wise FP8
    // and torchao kernels are refused before rendering (`refusals`).
    {
        use crate::spec::{Fp8Recipe, Precision};
        match job.precision {
            Precision::Bf16 => {}
            Precision::Fp8 => {
                let recipe = job.fp8_recipe.unwrap_or_default();
                let (format, name, note) = match recipe {
                    Fp8Recipe::Delayed => (
                        "hybrid",
                        "delayed",
                        "delayed scaling: scales from an amax history of past steps",
                    ),
                    Fp8Recipe::Current | Fp8Recipe::Rowwise => (
                        "hybrid",
                        "tensorwise",
                        "current scaling: each tensor's own amax, one scale per tensor",
                    ),
                    Fp8Recipe::Blockwise => (
                        "e4m3",
                        "blockwise",
                        "1×128 activation and gradient tiles, 128×128 weight blocks",
                    ),
                };
                precision.push(val("--fp8-format", format).note(if format == "hybrid" {
                    "FP8 linears: E4M3 forward, E5M2 gradients"
                } else {
                    "FP8 linears: E4M3 on every tensor (block scales keep gradients in range, as DeepSeek-V3)"
                }));
                precision.push(val("--fp8-recipe", name).note(note));
                if recipe == Fp8Recipe::Delayed {
                    precision.push(
                        val(
                            "--fp8-amax-history-len",
                            crate::cost::precision::AMAX_HISTORY_LEN,
                        )
                        .note("amax history priced by meshplan (scaling state in memory and checkpoints)"),
                    );
                    precision.push(val("--fp8-amax-compute-algo", "max"));
                }
            }
            Precision::Mxfp8 => {
                precision.push(
                    val("--fp8-format", "e4m3")
                        .note("MXFP8 linears: E4M3 elements with one E8M0 scale per 32"),
                );
                precision.push(val("--fp8-recipe", "mxfp8").note("Blackwell block scaling"));
            }
            Precision::Nvfp4 => {
                precision.push(val("--fp4-format", "e2m1").note(
                    "NVFP4 linears: E2M1 elements, E4M3 scales per 16 and an fp32 scale per tensor",
                ));
                precision.push(val("--fp4-recipe", "nvfp4"));
            }
        }
        if job.precision.is_low() && job.fp8_param_gather {
            precision.push(
                flag(if job.precision == Precision::Nvfp4 {
                    "--fp4-param-gather"
                } else {
                    "--fp8-param-gather"
                })
                .note("parameters kept and all-gathered in the low-precision format"),
            );
        }
    }
    precision.push(if job.flash_attention && m.mla.is_some() {
        // Megatron's own MLA examples and Megatron-Bridge's DeepSeek recipes
        // leave the backend to Megatron-Core (`attention_backend = None`,
        // `recipes/deepseek/h100/deepseek_v3.py`), which takes Transformer
        // Engine's fused kernel for MLA's unequal Q/K and V head widths.
        val("--attention-backend", "auto")
            .note("Megatron-Core picks a fused kernel for MLA: no s×s score matrix stored")
    } else if job.flash_attention {
        val("--attention-backend", "flash").note("fused attention: no s×s score matrix stored")
    } else {
        val("--attention-backend", "unfused")
            .note("meshplan priced this layout with the s×s score matrix stored")
    });

    // Parallel layout.
    let sp = mesh.sp;
    let mut par = vec![
        val("--tensor-model-parallel-size", mesh.tp),
        val("--pipeline-model-parallel-size", mesh.pp),
        val("--context-parallel-size", mesh.cp),
    ];
    if mesh.cp > 1 {
        // `CpComm::megatron`: `all_gather` as TransformerConfig documents
        // it (Transformer Engine rejects the help text's `allgather`).
        par.push(
            val("--cp-comm-type", mesh.cp_comm.megatron()).note(match mesh.cp_comm {
                crate::layout::CpComm::Ring => "ring exchange of K/V, overlapped with attention",
                crate::layout::CpComm::AllGather => "all-gather of K/V before attention",
            }),
        );
    }
    if sp {
        par.push(flag("--sequence-parallel").note("SP over the TP group"));
        if job.tp_comm_overlap {
            par.push(
                flag("--tp-comm-overlap")
                    .note("overlap TP all-gather/reduce-scatter with GEMMs (needs SP)"),
            );
        }
    }
    if moe {
        par.push(val("--expert-model-parallel-size", mesh.ep));
        par.push(val("--expert-tensor-parallel-size", mesh.etp).note(format!(
            "experts re-slice T·C·D = {} ranks as ETP·E·EDP = {}·{}·{}",
            mesh.tp * mesh.cp * mesh.dp,
            mesh.etp,
            mesh.ep,
            mesh.edp.unwrap_or(1)
        )));
    }
    let split = split(plan);
    match &split {
        Split::Even => {
            if mesh.vpp > 1 {
                par.push(
                    val("--num-virtual-stages-per-pipeline-rank", mesh.vpp).note(format!(
                        "interleaved 1F1B, {} layers per chunk",
                        plan.pipeline.layers_per_chunk[0]
                    )),
                );
            }
        }
        Split::FirstLast { first, last } => {
            if mesh.vpp > 1 {
                par.push(
                    val("--num-virtual-stages-per-pipeline-rank", mesh.vpp)
                        .note("interleaved 1F1B"),
                );
            }
            par.push(
                val("--decoder-first-pipeline-num-layers", first)
                    .note("uneven split: layers on pipeline rank 0"),
            );
            par.push(
                val("--decoder-last-pipeline-num-layers", last)
                    .note(format!("layers on pipeline rank {}", mesh.pp - 1)),
            );
        }
        Split::Layout { layout } => {
            par.push(
                val("--pipeline-model-parallel-layout", layout).note(format!(
                    "one stage per model chunk (v = {} implied)",
                    mesh.vpp
                )),
            );
        }
    }
    if plan.rank_order.order == RankOrder::TpCpEpPpDp {
        par.push(flag("--use-tp-pp-dp-mapping").note("rank order tp-cp-ep-pp-dp: PP inside DP"));
    }
    match plan.recompute.mode {
        Recompute::None => {}
        Recompute::Selective => par.push(
            val("--recompute-granularity", "selective")
                .note("recompute the attention core (core_attn)"),
        ),
        Recompute::Full => {
            par.push(val("--recompute-granularity", "full"));
            par.push(val("--recompute-method", "uniform"));
            par.push(val("--recompute-num-layers", 1).note("checkpoint every layer's input"));
        }
    }

    // Data-parallel sharding and overlap.
    let mut ddp = Vec::new();
    match plan.sharding.zero {
        0 => {}
        1 => ddp.push(flag("--use-distributed-optimizer").note(format!(
            "ZeRO-1: optimizer states sharded over DP·CP = {}",
            plan.sharding.group_size
        ))),
        z => {
            let mut note = format!("ZeRO-{z} via Megatron-FSDP");
            if !job.overlap_grad_reduce {
                // Megatron-FSDP turns the gradient overlap (and at ZeRO-3
                // the parameter overlap) on itself when gradients are
                // sharded ([ref:megatron-fsdp]); this plan priced them
                // exposed, as asked, so it is an upper bound on the step.
                note.push_str(
                    "; it overlaps its collectives whatever the flags say, so the step \
                     (priced with them exposed, --no-overlap-grad-reduce) should come out shorter",
                );
            }
            ddp.push(flag("--use-megatron-fsdp").note(note));
            ddp.push(val(
                "--data-parallel-sharding-strategy",
                if z == 2 {
                    "optim_grads"
                } else {
                    "optim_grads_params"
                },
            ));
        }
    }
    if job.overlap_grad_reduce {
        ddp.push(flag("--overlap-grad-reduce"));
        // The plan's overlap_param_gather is what was priced
        // (`Job::param_gather_overlapped`: only with the gradient overlap).
        if job.overlap_param_gather && plan.sharding.zero >= 1 {
            ddp.push(flag("--overlap-param-gather"));
        }
    }

    let data = vec![
        Arg {
            text: "--data-path ${DATA_PATH}".into(),
            note: Some("unquoted on purpose: a blend lists several weights and prefixes".into()),
        },
        val("--split", "949,50,1"),
        var("--tokenizer-type", "TOKENIZER_TYPE"),
        var("--tokenizer-model", "TOKENIZER_MODEL"),
    ];

    let ck = &plan.predicted.checkpoint;
    let logging = vec![
        var("--save", "CHECKPOINT_DIR"),
        var("--load", "CHECKPOINT_DIR"),
        val("--save-interval", ck.interval_steps).note(format!(
            "Daly τ* = √(2·C·M) = {:.0} s ≈ {} steps (C = {:.0} s write, M = {:.0} h job MTBF)",
            ck.interval_s,
            ck.interval_steps,
            ck.write_s,
            ck.job_mtbf_s / 3600.0
        )),
        val(
            "--ckpt-format",
            if fsdp { "fsdp_dtensor" } else { "torch_dist" },
        )
        .note(if fsdp {
            "Megatron-FSDP requires fsdp_dtensor"
        } else {
            "distributed checkpoint: reshardable to another layout"
        }),
        val("--eval-interval", ck.interval_steps),
        val("--eval-iters", 1).note({
            let e = eval_batch_s(&plan.predicted.time_s, plan.sharding.zero);
            // Evaluated every checkpoint interval: its share of the
            // training time, which tokens/s and goodput do not count.
            let share = e / (e + ck.interval_steps.max(1) as f64 * plan.predicted.step_s);
            format!(
                "one eval batch is forward only: about {:.0} s, {:.2} of a step; every {} steps that is {:.1}% of the run, not counted in the predicted tokens/s or goodput",
                e,
                e / plan.predicted.step_s,
                ck.interval_steps,
                100.0 * share
            )
        }),
        val("--log-interval", 1),
        flag("--log-throughput")
            .note("prints TFLOP/s/GPU with the FLOP convention meshplan predicts"),
        flag("--log-memory-to-tensorboard"),
        Arg {
            text: "--tensorboard-dir \"${LOG_DIR}/tensorboard\"".into(),
            note: None,
        },
    ];

    let mut groups = vec![
        group("GPT_MODEL_ARGS", "Architecture of the model card.", model),
        group("MOE_ARGS", "Mixture of experts.", moe_args),
        group(
            "TRAINING_ARGS",
            "Batch and optimizer (hyperparameters other than the batch are not part of the plan).",
            training,
        ),
        group(
            "PRECISION_ARGS",
            "Precision recipe and attention kernel.",
            precision,
        ),
        group("MODEL_PARALLEL_ARGS", "The parallel layout.", par),
        group(
            "DDP_ARGS",
            "Data-parallel sharding and communication overlap.",
            ddp,
        ),
        group("DATA_ARGS", "Data and tokenizer.", data),
        group(
            "EVAL_AND_LOGGING_ARGS",
            "Checkpoints, evaluation and logging.",
            logging,
        ),
    ];
    groups.retain(|g| !g.args.is_empty());
    Megatron {
        env,
        params,
        groups,
        split,
        fsdp,
        last_node: plan.hardware.nodes.saturating_sub(1),
    }
}

/// The `--make-vocab-size-divisible-by` X for which Megatron-LM pads a
/// tokenizer of `tokenizer` entries to `padded` at tensor parallelism `tp`:
/// it rounds up to a multiple of X·T (`build_tokenizer.py`,
/// `_vocab_size_with_padding`). Megatron's 128 when it works, else the
/// smallest larger X, else the largest smaller one; `None` when none does.
///
/// Example: GPT-2 BPE (50,257) to the GPT-3 papers' 51,200 at T = 4: X =
/// 128 gives ⌈50257/512⌉·512 = 50,688; X = 256 gives ⌈50257/1024⌉·1024 =
/// 51,200.
pub fn vocab_divisor(tokenizer: u64, padded: u64, tp: u32) -> Option<u64> {
    let t = tp.max(1) as u64;
    let pads = |x: u64| tokenizer.div_ceil(x * t) * x * t == padded;
    let top = (padded / t).min(1 << 20);
    (128..=top)
        .find(|&x| pads(x))
        .or_else(|| (1..128).rev().find(|&x| pads(x)))
}

/// Predicted time of one evaluation batch (`--eval-iters 1`), seconds,
/// from the training step's own parts. Megatron-LM's `evaluate` runs the
/// schedule with `forward_only=True` over one global batch
/// (`megatron/training/training.py`): no backward, no recompute, no
/// gradient reduction, no optimizer step. A backward costs about twice its
/// forward (two GEMMs per forward GEMM, Narayanan et al. 2021 §3.5's
/// 3 × forward count), so compute, casts, bubble and offload keep a third;
/// TP, CP, EP and PP communication is half forward, half backward; ZeRO-3
/// gathers the parameters for the forward and again for the backward (half
/// stays), while the distributed optimizer's gather follows the optimizer
/// step (none in evaluation).
///
/// Example: compute 600 s, bubble 30 s, TP 20 s, DP 10 s, optimizer 2 s,
/// ZeRO-1: 600/3 + 30/3 + 20/2 = 220 s, against a 662 s step.
pub fn eval_batch_s(t: &TimeBreakdown, zero: u8) -> f64 {
    let third = [
        TimePart::Compute,
        TimePart::LowPrecisionCast,
        TimePart::Bubble,
        TimePart::ActivationOffload,
    ];
    let half = [
        TimePart::TpComm,
        TimePart::CpComm,
        TimePart::EpComm,
        TimePart::PpComm,
    ];
    let gather = if zero >= 3 {
        0.5 * t.exposed(TimePart::ParamGather)
    } else {
        0.0
    };
    third.iter().map(|&p| t.exposed(p)).sum::<f64>() / 3.0
        + half.iter().map(|&p| t.exposed(p)).sum::<f64>() / 2.0
        + gather
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("E,t*19|t*21,L"), "'E,t*19|t*21,L'");
        assert_eq!(sh_quote("949,50,1"), "949,50,1");
        assert_eq!(sh_quote("([0]*3+[1]*58)"), "'([0]*3+[1]*58)'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }

    /// The doc example: compute 600 s, bubble 30 s, TP 20 s, DP 10 s,
    /// optimizer 2 s: 600/3 + 30/3 + 20/2 = 220 s under ZeRO-1; a ZeRO-3
    /// gather of 12 s exposed adds half, 226 s; the DP reduction and the
    /// optimizer step never count.
    #[test]
    fn eval_batch_is_the_forward_share_of_the_step() {
        let mut t = TimeBreakdown::default();
        t[TimePart::Compute] = crate::cost::Term::serial(600.0);
        t[TimePart::Bubble] = crate::cost::Term::serial(30.0);
        t[TimePart::TpComm] = crate::cost::Term::serial(20.0);
        t[TimePart::DpGrad] = crate::cost::Term::serial(10.0);
        t[TimePart::Optimizer] = crate::cost::Term::serial(2.0);
        t.step = 662.0;
        assert_eq!(eval_batch_s(&t, 1), 220.0);
        t[TimePart::ParamGather] = crate::cost::Term::overlapped(12.0, 40.0);
        assert_eq!(eval_batch_s(&t, 1), 220.0);
        assert_eq!(eval_batch_s(&t, 3), 226.0);
    }
}
