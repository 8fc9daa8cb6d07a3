//! Model cards: the architecture of a transformer, read from `models/*.toml`.
//!
//! A card names its public source and its published parameter count; a test
//! recomputes that count from the architecture with [`Model::total_params`].
//! Parameter formulas follow Megatron-LM's `theoretical_memory_usage.py`
//! (attention `2·h²·(1+g/n)·r`, MLP `2·h·ffn·glu`, norms, embedding `h·V`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// Normalisation layer type. RMSNorm has one weight vector of `h`; LayerNorm
/// has a weight and a bias (`2·h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// Root-mean-square norm (Llama, Mixtral, DeepSeek).
    Rmsnorm,
    /// LayerNorm with bias (GPT-2/3, BLOOM).
    Layernorm,
}

/// Position embedding type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PositionEmbedding {
    /// Rotary embedding: no parameters.
    Rope,
    /// Learned absolute positions: `max_seq · h` parameters on the first stage.
    Learned,
    /// ALiBi (BLOOM): no parameters.
    Alibi,
}

/// Mixture-of-experts block of a model card (`[moe]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpec {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Experts each token is routed to (top-k).
    pub top_k: u32,
    /// FFN width of one routed expert.
    pub expert_ffn: u64,
    /// Shared experts that every token passes through (DeepSeek); 0 for none.
    #[serde(default)]
    pub shared_experts: u32,
    /// FFN width of one shared expert; defaults to `expert_ffn`.
    #[serde(default)]
    pub shared_expert_ffn: Option<u64>,
    /// The first k layers are dense (DeepSeek-V3: 3).
    #[serde(default)]
    pub first_k_dense: u32,
    /// Router load balancing as Megatron-LM names it
    /// (`--moe-router-load-balancing-type`): `aux_loss` (GShard/Switch,
    /// per micro-batch), `seq_aux_loss` (per sequence, DeepSeek-V2/V3) or
    /// `none`. Not priced; written into the launch files.
    #[serde(default)]
    pub load_balancing: Option<String>,
    /// Coefficient of the load-balancing loss (`--moe-aux-loss-coeff`;
    /// Megatron's default 0.0 switches the loss off). Not priced; written
    /// into the launch files.
    #[serde(default)]
    pub aux_loss_coeff: Option<f64>,
    /// Router score function (`--moe-router-score-function`): `softmax`
    /// (Megatron's default; Mixtral, Qwen) or `sigmoid` (DeepSeek-V3,
    /// config.json `scoring_func`). Not priced; written into the launch files.
    #[serde(default)]
    pub score_function: Option<String>,
    /// Auxiliary-loss-free balancing by a per-expert bias added to the
    /// scores for top-k selection (DeepSeek-V3 report §2.1.2; config.json
    /// `topk_method = "noaux_tc"`; `--moe-router-enable-expert-bias`,
    /// sigmoid scores only). Not priced.
    #[serde(default)]
    pub expert_bias: bool,
    /// Group-limited routing: experts split into this many groups
    /// (`--moe-router-num-groups`; config.json `n_group`). Not priced.
    #[serde(default)]
    pub groups: Option<u32>,
    /// Groups each token may route to (`--moe-router-group-topk`;
    /// config.json `topk_group`). Not priced.
    #[serde(default)]
    pub group_top_k: Option<u32>,
    /// Factor on the routing weights of the chosen experts
    /// (`--moe-router-topk-scaling-factor`; config.json
    /// `routed_scaling_factor`, DeepSeek-V3: 2.5). Not priced.
    #[serde(default)]
    pub topk_scaling_factor: Option<f64>,
}

/// Multi-head latent attention block (`[mla]`, DeepSeek-V2/V3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlaSpec {
    /// Rank of the query down-projection (0 for none).
    pub q_lora_rank: u64,
    /// Rank of the joint key/value down-projection.
    pub kv_lora_rank: u64,
    /// Per-head query/key width without rotary part.
    pub qk_nope_head_dim: u64,
    /// Per-head rotary width (shared key part).
    pub qk_rope_head_dim: u64,
    /// Per-head value width.
    pub v_head_dim: u64,
}

/// The `[architecture]` table of a model card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Architecture {
    /// Transformer layers L.
    pub layers: u32,
    /// Hidden size h.
    pub hidden: u64,
    /// Attention (query) heads a.
    pub heads: u32,
    /// Key/value heads (query groups) g; equals `heads` for multi-head attention.
    pub kv_heads: u32,
    /// Per-head width; defaults to `hidden / heads`.
    #[serde(default)]
    pub head_dim: Option<u64>,
    /// FFN (MLP intermediate) width of a dense layer.
    pub ffn: u64,
    /// Gated MLP (SwiGLU: three matrices) instead of two.
    pub gated_mlp: bool,
    /// Vocabulary size V (before Megatron's padding).
    pub vocab: u64,
    /// The tokenizer's own vocabulary when `vocab` is already padded (the
    /// GPT-3 and Narayanan et al. 2021 models: GPT-2 BPE's 50,257 padded
    /// to 51,200). `generate` then picks the
    /// `--make-vocab-size-divisible-by` that makes Megatron-LM pad the
    /// tokenizer to the vocabulary the plan priced.
    #[serde(default)]
    pub tokenizer_vocab: Option<u64>,
    /// Input embedding and output layer share weights.
    pub tied_embeddings: bool,
    /// Normalisation type.
    pub norm: Norm,
    /// Position embedding type.
    pub position_embedding: PositionEmbedding,
    /// Longest context the model was built for (learned position table size).
    pub max_seq: u64,
    /// RoPE base θ (Llama 3: 500,000); only with rotary embeddings.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// Linear layers carry a bias (GPT, BLOOM); Llama has none.
    #[serde(default)]
    pub linear_bias: bool,
    /// Dropout is applied (GPT-3 style: adds 1-byte masks to activations).
    #[serde(default)]
    pub dropout: bool,
    /// Queries and keys are normalised per head before attention (Qwen3's
    /// `q_norm`/`k_norm`; for MLA the norms of the compressed query and
    /// key/value, DeepSeek-V3), Megatron's `--qk-layernorm`. Its weights
    /// (2·head_dim per layer, under 0.01% of a layer's parameters) are not
    /// counted; its two element-wise kernels are priced
    /// (`cost::compute::qk_norm_bytes_per_token`).
    #[serde(default)]
    pub qk_layernorm: bool,
    /// Epsilon of the norms (`--norm-epsilon`; Megatron's default 1e-5;
    /// config.json `rms_norm_eps` / `layer_norm_eps`). Not priced.
    #[serde(default)]
    pub norm_epsilon: Option<f64>,
    /// RoPE frequency scaling for long context, Llama 3.1's
    /// (`rope_scaling` of config.json with `rope_type = "llama3"`). Not
    /// priced; written into the launch files.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Multi-token-prediction modules D trained beside the main model
    /// (DeepSeek-V3 technical report, arXiv:2412.19437, §2.2; config.json
    /// `num_nextn_predict_layers`; Megatron-LM `--mtp-num-layers`); 0 for
    /// none. Each is one transformer layer of the main model's last kind,
    /// the projection `M ∈ R^{h×2h}` and three RMSNorms, with the embedding
    /// and output head shared ([`Model::mtp_layer_params`]); priced on the
    /// last pipeline stage ([`crate::cost::mtp`]). Not in
    /// [`Model::total_params`], which is the main model's count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtp_layers: u32,
    /// Weight λ of the MTP loss (Megatron-LM `--mtp-loss-scaling-factor`,
    /// default 0.1). Not priced; written into the launch files.
    #[serde(default)]
    pub mtp_loss_scale: Option<f64>,
}

/// Whether `n` is 0 (a card field left out when written).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Llama 3.1's RoPE scaling (config.json `rope_scaling`, `rope_type =
/// "llama3"`; Megatron-LM `--use-rope-scaling --rope-scaling-factor F`,
/// whose `_apply_scaling` in `rotary_pos_embedding.py` fixes the other
/// three at 1, 4 and 8192).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    /// Wavelengths beyond the low-frequency bound are stretched by this
    /// factor (Llama 3.1: 8).
    pub factor: f64,
    /// Llama 3.1: 1.
    pub low_freq_factor: f64,
    /// Llama 3.1: 4.
    pub high_freq_factor: f64,
    /// Context of the pre-scaling model (Llama 3.1: 8192).
    pub original_max_seq: u64,
}

/// The `[defaults]` table: a training job for this model when flags say nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDefaults {
    /// Sequence length s (tokens per sequence).
    pub seq_len: u64,
    /// Global batch B (sequences per optimizer step).
    pub global_batch: u64,
}

/// A model card as written in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Canonical name, e.g. `llama3-70b`.
    pub name: String,
    /// Short names accepted by `--model` (e.g. `70b`).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Public source of the architecture (paper, config.json).
    pub source: String,
    /// Published total parameter count, which [`Model::total_params`] must
    /// reproduce to 0.5%.
    pub known_params: f64,
    /// Published active parameter count per token (MoE only).
    #[serde(default)]
    pub known_active_params: Option<f64>,
    /// Architecture.
    pub architecture: Architecture,
    /// Mixture of experts, if any.
    #[serde(default)]
    pub moe: Option<MoeSpec>,
    /// Multi-head latent attention, if any.
    #[serde(default)]
    pub mla: Option<MlaSpec>,
    /// Default training job.
    pub defaults: JobDefaults,
}

impl Model {
    /// Parse and check a model card. `file` is used in error messages only.
    ///
    /// # Errors
    /// [`InputError::Syntax`] for TOML errors and missing fields,
    /// [`InputError::Field`] for impossible values (zero sizes, heads that do
    /// not divide hidden, kv heads that do not divide heads, …).
    pub fn from_toml(text: &str, file: &Path) -> Result<Model, InputError> {
        InputError::parse_checked(text, file, Model::check)
    }

    pub(crate) fn check(&self, file: &Path) -> Result<(), InputError> {
        let a = &self.architecture;
        let err = |field: &str, problem: String| Err(InputError::field(file, field, problem));
        for (field, v) in [
            ("architecture.layers", a.layers as u64),
            ("architecture.hidden", a.hidden),
            ("architecture.heads", a.heads as u64),
            ("architecture.kv_heads", a.kv_heads as u64),
            ("architecture.ffn", a.ffn),
            ("architecture.vocab", a.vocab),
            ("architecture.max_seq", a.max_seq),
            ("defaults.seq_len", self.defaults.seq_len),
            ("defaults.global_batch", self.defaults.global_batch),
        ] {
            if v == 0 {
                return err(field, "must be positive, found 0".into());
            }
        }
        if a.head_dim == Some(0) {
            return err("architecture.head_dim", "must be positive, found 0".into());
        }
        use crate::limits::{
            MAX_EXPERTS, MAX_GLOBAL_BATCH, MAX_HEADS, MAX_LAYERS, MAX_SEQ, MAX_VOCAB, MAX_WIDTH,
        };
        let mut bounded = vec![
            ("architecture.layers", a.layers as u64, MAX_LAYERS as u64),
            ("architecture.hidden", a.hidden, MAX_WIDTH),
            ("architecture.heads", a.heads as u64, MAX_HEADS as u64),
            ("architecture.kv_heads", a.kv_heads as u64, MAX_HEADS as u64),
            ("architecture.head_dim", a.head_dim.unwrap_or(0), MAX_WIDTH),
            ("architecture.ffn", a.ffn, MAX_WIDTH),
            ("architecture.vocab", a.vocab, MAX_VOCAB),
            ("architecture.max_seq", a.max_seq, MAX_SEQ),
            ("defaults.seq_len", self.defaults.seq_len, MAX_SEQ),
            (
                "defaults.global_batch",
                self.defaults.global_batch,
                MAX_GLOBAL_BATCH,
            ),
        ];
        if let Some(m) = &self.moe {
            bounded.extend([
                ("moe.experts", m.experts as u64, MAX_EXPERTS as u64),
                ("moe.top_k", m.top_k as u64, MAX_EXPERTS as u64),
                (
                    "moe.shared_experts",
                    m.shared_experts as u64,
                    MAX_EXPERTS as u64,
                ),
                ("moe.expert_ffn", m.expert_ffn, MAX_WIDTH),
                (
                    "moe.shared_expert_ffn",
                    m.shared_expert_ffn.unwrap_or(0),
                    MAX_WIDTH,
                ),
            ]);
        }
        if let Some(m) = &self.mla {
            bounded.extend([
                ("mla.q_lora_rank", m.q_lora_rank, MAX_WIDTH),
                ("mla.kv_lora_rank", m.kv_lora_rank, MAX_WIDTH),
                ("mla.qk_nope_head_dim", m.qk_nope_head_dim, MAX_WIDTH),
                ("mla.qk_rope_head_dim", m.qk_rope_head_dim, MAX_WIDTH),
                ("mla.v_head_dim", m.v_head_dim, MAX_WIDTH),
            ]);
        }
        for (field, v, max) in bounded {
            if v > max {
                return err(
                    field,
                    format!("{v} exceeds meshplan's limit of {max} (see src/limits.rs)"),
                );
            }
        }
        if a.head_dim.is_none() && a.hidden % a.heads as u64 != 0 {
            return err(
                "architecture.head_dim",
                format!(
                    "hidden {} is not divisible by heads {}; give head_dim explicitly",
                    a.hidden, a.heads
                ),
            );
        }
        if a.heads % a.kv_heads != 0 {
            return err(
                "architecture.kv_heads",
                format!(
                    "{} query heads are not a multiple of {} kv heads",
                    a.heads, a.kv_heads
                ),
            );
        }
        if !(self.known_params.is_finite() && self.known_params > 0.0) {
            return err(
                "known_params",
                format!("must be a positive number, found {}", self.known_params),
            );
        }
        if let Some(m) = &self.moe {
            if m.experts == 0 || m.top_k == 0 || m.expert_ffn == 0 {
                return err(
                    "moe",
                    "experts, top_k and expert_ffn must be positive".into(),
                );
            }
            const BALANCING: [&str; 4] = ["aux_loss", "seq_aux_loss", "global_aux_loss", "none"];
            if let Some(b) = &m.load_balancing
                && !BALANCING.contains(&b.as_str())
            {
                return err(
                    "moe.load_balancing",
                    format!("`{b}` is not one of {}", BALANCING.join(", ")),
                );
            }
            if let Some(c) = m.aux_loss_coeff
                && !(c.is_finite() && c >= 0.0)
            {
                return err(
                    "moe.aux_loss_coeff",
                    format!("must be a non-negative number, found {c}"),
                );
            }
            if m.top_k > m.experts {
                return err(
                    "moe.top_k",
                    format!(
                        "top_k {} exceeds the number of experts {}",
                        m.top_k, m.experts
                    ),
                );
            }
            const SCORES: [&str; 2] = ["softmax", "sigmoid"];
            if let Some(f) = &m.score_function
                && !SCORES.contains(&f.as_str())
            {
                return err(
                    "moe.score_function",
                    format!("`{f}` is not one of {}", SCORES.join(", ")),
                );
            }
            if m.expert_bias && m.score_function.as_deref() != Some("sigmoid") {
                return err(
                    "moe.expert_bias",
                    "needs score_function = \"sigmoid\" (Megatron-LM's expert bias works on sigmoid scores)".into(),
                );
            }
            match (m.groups, m.group_top_k) {
                (None, None) => {}
                (Some(g), Some(k)) => {
                    if g == 0 || m.experts % g != 0 {
                        return err(
                            "moe.groups",
                            format!("{g} groups do not divide {} experts", m.experts),
                        );
                    }
                    if k == 0 || k > g {
                        return err(
                            "moe.group_top_k",
                            format!("must be 1 to groups ({g}), found {k}"),
                        );
                    }
                    // Megatron's group_limited_topk takes the best
                    // top_k / group_top_k experts of each group, then the
                    // top_k among the chosen groups' experts.
                    let per_group = m.experts / g;
                    if m.top_k % k != 0 || per_group * k < m.top_k || per_group < m.top_k / k {
                        return err(
                            "moe.groups",
                            format!(
                                "{g} groups of {per_group} expert(s) with group_top_k {k} cannot route top_k {}: Megatron needs top_k divisible by group_top_k and at least top_k / group_top_k experts per group",
                                m.top_k
                            ),
                        );
                    }
                }
                (Some(_), None) => {
                    return err("moe.group_top_k", "is needed with moe.groups".into());
                }
                (None, Some(_)) => {
                    return err("moe.groups", "is needed with moe.group_top_k".into());
                }
            }
            if let Some(f) = m.topk_scaling_factor
                && !(f.is_finite() && f > 0.0 && f <= 1e3)
            {
                return err(
                    "moe.topk_scaling_factor",
                    format!("must be a positive number up to 1000, found {f}"),
                );
            }
            if m.first_k_dense >= a.layers {
                return err(
                    "moe.first_k_dense",
                    format!(
                        "{} dense layers leave no MoE layer among {}",
                        m.first_k_dense, a.layers
                    ),
                );
            }
        }
        if let Some(t) = a.tokenizer_vocab
            && (t == 0 || t > a.vocab)
        {
            return err(
                "architecture.tokenizer_vocab",
                format!("must be 1 to vocab ({}), found {t}", a.vocab),
            );
        }
        if let Some(e) = a.norm_epsilon
            && !(e.is_finite() && (1e-12..0.1).contains(&e))
        {
            return err(
                "architecture.norm_epsilon",
                format!("must be a small positive number in [1e-12, 0.1), found {e}"),
            );
        }
        if let Some(r) = &a.rope_scaling {
            if a.position_embedding != PositionEmbedding::Rope {
                return err(
                    "architecture.rope_scaling",
                    "is set but position_embedding is not \"rope\"".into(),
                );
            }
            let bad = |field: &str, problem: String| {
                err(&format!("architecture.rope_scaling.{field}"), problem)
            };
            if !(r.factor.is_finite() && (1.0..=1e3).contains(&r.factor)) {
                return bad("factor", format!("must be 1 to 1000, found {}", r.factor));
            }
            if !(r.low_freq_factor.is_finite() && r.low_freq_factor > 0.0) {
                return bad(
                    "low_freq_factor",
                    format!("must be positive, found {}", r.low_freq_factor),
                );
            }
            if !(r.high_freq_factor.is_finite() && r.high_freq_factor > r.low_freq_factor) {
                return bad(
                    "high_freq_factor",
                    format!(
                        "must exceed low_freq_factor ({}), found {}",
                        r.low_freq_factor, r.high_freq_factor
                    ),
                );
            }
            if r.original_max_seq == 0 || r.original_max_seq > a.max_seq {
                return bad(
                    "original_max_seq",
                    format!(
                        "must be 1 to max_seq ({}), found {}",
                        a.max_seq, r.original_max_seq
                    ),
                );
            }
        }
        if let Some(t) = a.rope_theta {
            if a.position_embedding != PositionEmbedding::Rope {
                return err(
                    "architecture.rope_theta",
                    "is set but position_embedding is not \"rope\"".into(),
                );
            }
            if !(t.is_finite() && t > 1.0) {
                return err(
                    "architecture.rope_theta",
                    format!("must be a number above 1, found {t}"),
                );
            }
        }
        if a.mtp_layers > crate::limits::MAX_MTP_LAYERS {
            return err(
                "architecture.mtp_layers",
                format!(
                    "{} exceeds meshplan's limit of {} (see src/limits.rs)",
                    a.mtp_layers,
                    crate::limits::MAX_MTP_LAYERS
                ),
            );
        }
        if a.mtp_layers > 0 && a.position_embedding == PositionEmbedding::Alibi {
            return err(
                "architecture.mtp_layers",
                "multi-token prediction needs position ids (rope or learned position embedding); Megatron-LM refuses it with ALiBi".into(),
            );
        }
        if let Some(w) = a.mtp_loss_scale {
            if a.mtp_layers == 0 {
                return err(
                    "architecture.mtp_loss_scale",
                    "is set but mtp_layers is 0".into(),
                );
            }
            if !(w.is_finite() && w > 0.0 && w <= 1e3) {
                return err(
                    "architecture.mtp_loss_scale",
                    format!("must be a positive number up to 1000, found {w}"),
                );
            }
        }
        if self.defaults.seq_len > a.max_seq {
            return err(
                "defaults.seq_len",
                format!(
                    "{} exceeds architecture.max_seq {}",
                    self.defaults.seq_len, a.max_seq
                ),
            );
        }
        Ok(())
    }

    /// Per-head width `hidden / heads` unless the card gives `head_dim`.
    pub fn head_dim(&self) -> u64 {
        let a = &self.architecture;
        a.head_dim.unwrap_or(a.hidden / a.heads as u64)
    }

    /// Query projection width q = heads · head_dim (for MLA: heads · v_head_dim
    /// is the output width, see [`Model::attn_out_width`]).
    pub fn q_width(&self) -> u64 {
        match &self.mla {
            Some(m) => self.architecture.heads as u64 * (m.qk_nope_head_dim + m.qk_rope_head_dim),
            None => self.architecture.heads as u64 * self.head_dim(),
        }
    }

    /// Key (and value) projection width kv = kv_heads · head_dim (GQA).
    pub fn kv_width(&self) -> u64 {
        self.architecture.kv_heads as u64 * self.head_dim()
    }

    /// Width of the attention output that enters the output projection.
    pub fn attn_out_width(&self) -> u64 {
        match &self.mla {
            Some(m) => self.architecture.heads as u64 * m.v_head_dim,
            None => self.architecture.heads as u64 * self.head_dim(),
        }
    }

    /// Whether layer `i` (0-based) is a mixture-of-experts layer.
    pub fn is_moe_layer(&self, i: u32) -> bool {
        match &self.moe {
            Some(m) => i >= m.first_k_dense,
            None => false,
        }
    }

    /// Number of MoE layers.
    pub fn moe_layers(&self) -> u32 {
        match &self.moe {
            Some(m) => self.architecture.layers - m.first_k_dense,
            None => 0,
        }
    }

    /// Number of dense layers.
    pub fn dense_layers(&self) -> u32 {
        self.architecture.layers - self.moe_layers()
    }

    /// Matmul parameters of one attention block (Q, K, V, output projection,
    /// plus biases and MLA's low-rank projections and their norms).
    pub fn attention_params(&self) -> f64 {
        let a = &self.architecture;
        let h = a.hidden as f64;
        let n = a.heads as f64;
        match &self.mla {
            Some(m) => {
                let qk = (m.qk_nope_head_dim + m.qk_rope_head_dim) as f64;
                let q = if m.q_lora_rank > 0 {
                    h * m.q_lora_rank as f64 + m.q_lora_rank as f64 + m.q_lora_rank as f64 * n * qk
                } else {
                    h * n * qk
                };
                let kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) as f64 + m.kv_lora_rank as f64;
                let kv_b = m.kv_lora_rank as f64 * n * (m.qk_nope_head_dim + m.v_head_dim) as f64;
                let o = n * m.v_head_dim as f64 * h;
                q + kv_a + kv_b + o
            }
            None => {
                let q = self.q_width() as f64;
                let kv = self.kv_width() as f64;
                let bias = if a.linear_bias { q + 2.0 * kv + h } else { 0.0 };
                h * (q + 2.0 * kv) + q * h + bias
            }
        }
    }

    /// Parameters of an MLP of width `ffn`: `2·h·ffn` (or `3·h·ffn` gated),
    /// plus biases.
    pub fn mlp_params(&self, ffn: u64) -> f64 {
        let a = &self.architecture;
        let h = a.hidden as f64;
        let f = ffn as f64;
        let mats = if a.gated_mlp { 3.0 } else { 2.0 };
        let bias = if a.linear_bias {
            f * (mats - 1.0) + h
        } else {
            0.0
        };
        mats * h * f + bias
    }

    /// Parameters of one norm: `h` (RMSNorm) or `2·h` (LayerNorm).
    pub fn norm_params(&self) -> f64 {
        let h = self.architecture.hidden as f64;
        match self.architecture.norm {
            Norm::Rmsnorm => h,
            Norm::Layernorm => 2.0 * h,
        }
    }

    /// Parameters of the routed experts of one MoE layer (all of them).
    pub fn routed_expert_params(&self) -> f64 {
        match &self.moe {
            Some(m) => m.experts as f64 * self.mlp_params(m.expert_ffn),
            None => 0.0,
        }
    }

    /// Parameters of one routed expert.
    pub fn one_expert_params(&self) -> f64 {
        match &self.moe {
            Some(m) => self.mlp_params(m.expert_ffn),
            None => 0.0,
        }
    }

    /// Parameters of the shared experts and the router of one MoE layer.
    pub fn moe_shared_and_router_params(&self) -> f64 {
        match &self.moe {
            Some(m) => {
                let shared_ffn = m.shared_expert_ffn.unwrap_or(m.expert_ffn);
                m.shared_experts as f64 * self.mlp_params(shared_ffn)
                    + self.architecture.hidden as f64 * m.experts as f64
            }
            None => 0.0,
        }
    }

    /// Parameters of a dense transformer layer: attention, MLP and two norms
    /// (norms are replicated across TP, and a pre-norm layer has two:
    /// [ref:case-m5]).
    pub fn dense_layer_params(&self) -> f64 {
        self.attention_params() + self.mlp_params(self.architecture.ffn) + 2.0 * self.norm_params()
    }

    /// Parameters of an MoE layer: attention, two norms, router, shared and
    /// all routed experts.
    pub fn moe_layer_params(&self) -> f64 {
        self.attention_params()
            + 2.0 * self.norm_params()
            + self.moe_shared_and_router_params()
            + self.routed_expert_params()
    }

    /// Input embedding parameters `V·h` (plus a learned position table).
    pub fn embedding_params(&self) -> f64 {
        let a = &self.architecture;
        let pos = if a.position_embedding == PositionEmbedding::Learned {
            (a.max_seq * a.hidden) as f64
        } else {
            0.0
        };
        (a.vocab * a.hidden) as f64 + pos
    }

    /// Output layer parameters: `V·h` when untied, 0 when tied; plus the final norm.
    pub fn output_params(&self) -> f64 {
        let a = &self.architecture;
        let out = if a.tied_embeddings {
            0.0
        } else {
            (a.vocab * a.hidden) as f64
        };
        out + self.norm_params()
    }

    /// Total parameters (all experts counted).
    pub fn total_params(&self) -> f64 {
        self.dense_layers() as f64 * self.dense_layer_params()
            + self.moe_layers() as f64 * self.moe_layer_params()
            + self.embedding_params()
            + self.output_params()
    }

    /// Whether the multi-token-prediction layers are MoE layers: they take
    /// the main model's last layer kind (Megatron-LM
    /// `get_gpt_mtp_block_spec_for_backend` builds them from the decoder's
    /// last layer spec; DeepSeek-V3's layer 61 is an MoE layer).
    pub fn mtp_is_moe(&self) -> bool {
        self.is_moe_layer(self.architecture.layers.saturating_sub(1))
    }

    /// Parameters of one MTP layer's projection `M ∈ R^{h×2h}` (DeepSeek-V3
    /// report §2.2, Eq. 21; Megatron-LM `eh_proj`, no bias): `2·h²`.
    pub fn mtp_projection_params(&self) -> f64 {
        let h = self.architecture.hidden as f64;
        2.0 * h * h
    }

    /// New parameters of one MTP layer: its transformer layer
    /// ([`Model::mtp_is_moe`]), the projection
    /// ([`Model::mtp_projection_params`]) and three norms (`enorm`,
    /// `hnorm` and the final norm before the shared head, Megatron-LM
    /// `MultiTokenPredictionLayer`); the embedding and output head are
    /// shared with the main model (report §2.2), so not counted.
    ///
    /// DeepSeek-V3: MoE layer 11,507,286,016 + 2·7168² = 102,760,448 +
    /// 3·7168 = 21,504, in all 11,610,067,968.
    pub fn mtp_layer_params(&self) -> f64 {
        let layer = if self.mtp_is_moe() {
            self.moe_layer_params()
        } else {
            self.dense_layer_params()
        };
        layer + self.mtp_projection_params() + 3.0 * self.norm_params()
    }

    /// New parameters of all MTP layers, `D ·` [`Model::mtp_layer_params`];
    /// 0 without MTP.
    pub fn mtp_params(&self) -> f64 {
        self.architecture.mtp_layers as f64 * self.mtp_layer_params()
    }

    /// Parameters a token passes through: dense model = total; MoE counts
    /// only the top-k routed experts (plus shared experts and router).
    pub fn active_params(&self) -> f64 {
        match &self.moe {
            Some(m) => {
                self.total_params()
                    - self.moe_layers() as f64
                        * (m.experts - m.top_k) as f64
                        * self.one_expert_params()
            }
            None => self.total_params(),
        }
    }
}
