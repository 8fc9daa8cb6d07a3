//! Hugging Face `config.json` in: the [`Model`] a shipped card would give,
//! read from the configuration a model is published with.
//!
//! `--model PATH.json` (search, explain, generate) and `meshplan
//! import-model PATH.json` read it. Each supported `model_type` maps its keys
//! to the card's fields as `transformers` builds that model:
//!
//! | card field | Llama family (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v3) | gpt2 | gpt_neox |
//! |---|---|---|---|
//! | `layers` | `num_hidden_layers` | `n_layer` | `num_hidden_layers` |
//! | `hidden` | `hidden_size` | `n_embd` | `hidden_size` |
//! | `heads` | `num_attention_heads` | `n_head` | `num_attention_heads` |
//! | `kv_heads` | `num_key_value_heads` (absent: `heads`) | `heads` | `heads` |
//! | `head_dim` | `head_dim` (absent: `hidden/heads`); DeepSeek: `qk_nope_head_dim` | — | — |
//! | `ffn` | `intermediate_size` | `n_inner` (absent: `4·n_embd`) | `intermediate_size` |
//! | `gated_mlp` | true (gate, up, down) | false | false |
//! | `vocab` | `vocab_size` | `vocab_size` | `vocab_size` |
//! | `tied_embeddings` | `tie_word_embeddings` (absent: false) | `tie_word_embeddings` (absent: true) | `tie_word_embeddings` (absent: false) |
//! | `norm`, `position_embedding` | RMSNorm, RoPE | LayerNorm, learned | LayerNorm, RoPE |
//! | `max_seq` | `max_position_embeddings` | `n_positions` | `max_position_embeddings` |
//! | `rope_theta` | `rope_theta` (or `rope_parameters.rope_theta`) | — | `rotary_emb_base` |
//! | `linear_bias` | `attention_bias` and `mlp_bias` | true | `attention_bias` (absent: true) |
//! | `dropout` | `attention_dropout` > 0 | `resid_pdrop`, `embd_pdrop`, `attn_pdrop` > 0 (absent: 0.1) | `attention_dropout`, `hidden_dropout` > 0 |
//!
//! Mixture of experts: `num_local_experts` (mixtral, width `intermediate_size`),
//! `num_experts` and `moe_intermediate_size` (qwen2_moe, qwen3_moe) or
//! `n_routed_experts` (deepseek_v3) → `moe.experts`, `moe.expert_ffn`;
//! `num_experts_per_tok` → `moe.top_k`; `shared_expert_intermediate_size`
//! (one shared expert) or `n_shared_experts` (of width
//! `moe_intermediate_size`) → `moe.shared_experts`, `moe.shared_expert_ffn`;
//! `first_k_dense_replace`, or the dense layers that `mlp_only_layers` and
//! `decoder_sparse_step` make when they lead the stack, → `moe.first_k_dense`;
//! `router_aux_loss_coef` → `moe.aux_loss_coeff` with `aux_loss` balancing,
//! DeepSeek's `aux_loss_alpha` with `seq_aux` → `seq_aux_loss`. Multi-head
//! latent attention: `q_lora_rank` (null: 0), `kv_lora_rank`,
//! `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim` → `[mla]`.
//! Multi-token prediction: `num_nextn_predict_layers` →
//! `architecture.mtp_layers`.
//!
//! A key left out takes the default of the `transformers` configuration
//! class of that `model_type` (as `transformers` would load the file) for
//! switches and optional widths; the sizes (layers, hidden, heads, FFN,
//! vocabulary, context, experts) are required, and a missing one is an
//! error naming the file and the key. What changes the cost and the card
//! cannot represent is refused (alternating sliding-window and full
//! attention layers, dense layers between MoE layers, `moe_layer_freq` ≠ 1,
//! `gpt_oss`) or priced with a stated approximation, returned as a note
//! (a uniform sliding window priced as
//! full attention, biases the card's one bias switch cannot express,
//! QK-norm weights). Keys the card does not carry that do not change the
//! cost (norm epsilon, rope scaling, router scoring) are listed in one note
//! so that a launch file can set them by hand, and keys unknown to the
//! mapping in another: nothing is dropped without saying so.
//!
//! A `config.json` holds no training job: the default job is
//! [`DEFAULT_SEQ`] tokens (or the model's context when shorter) and
//! [`DEFAULT_TOKENS_PER_STEP`] tokens per step, and the command line says
//! so when it uses it.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::InputError;
use crate::limits::{MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_SEQ, MAX_VOCAB, MAX_WIDTH};
use crate::spec::model::{
    Architecture, JobDefaults, MlaSpec, Model, MoeSpec, Norm, PositionEmbedding, RopeScaling,
};

/// The `model_type`s read.
pub const SUPPORTED: [&str; 10] = [
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
    "gpt2",
    "gpt_neox",
];

/// Default sequence length of an imported model's job (the 4k-token
/// pre-training phase the Mixtral and Qwen3 cards also assume), or its
/// context when that is shorter.
pub const DEFAULT_SEQ: u64 = 4096;

/// Default tokens per optimizer step of an imported model's job (4M tokens,
/// 1024 sequences of 4096, as the Mixtral and Qwen3 cards).
pub const DEFAULT_TOKENS_PER_STEP: u64 = 4 * 1024 * 1024;

/// What to call the model and which job to give it (`import-model` flags).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Card name; default: the folder holding `config.json` (or the file's
    /// stem), lower-case.
    pub name: Option<String>,
    /// `[defaults] seq_len`; default [`DEFAULT_SEQ`] or the context.
    pub seq_len: Option<u64>,
    /// `[defaults] global_batch`; default [`DEFAULT_TOKENS_PER_STEP`] / seq.
    pub global_batch: Option<u64>,
}

/// A model read from a `config.json`, with what the reading approximated.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The model, as a card would give it.
    pub model: Model,
    /// The file read.
    pub file: PathBuf,
    /// Its `model_type`.
    pub model_type: String,
    /// Stated approximations, one sentence each.
    pub notes: Vec<String>,
    /// Keys read but not carried by the card, as `key = value` (they do not
    /// change the cost).
    pub kept_out: Vec<String>,
    /// Keys the mapping of this `model_type` does not know.
    pub unread: Vec<String>,
    /// Whether the job ([`Model::defaults`]) is assumed rather than given.
    pub job_assumed: bool,
    /// For each card field, the key it came from (error messages, comments).
    pub origin: Vec<(&'static str, String)>,
}

impl Imported {
    /// Every note in one list: the approximations, then the keys kept out
    /// of the card, then the unknown keys.
    pub fn all_notes(&self) -> Vec<String> {
        let mut out = self.notes.clone();
        if !self.kept_out.is_empty() {
            out.push(format!(
                "kept out of the card (no effect on the cost model; set them in the launch files by hand): {}",
                self.kept_out.join(", ")
            ));
        }
        if !self.unread.is_empty() {
            out.push(format!(
                "not read (unknown to meshplan's {} mapping; check that they do not change the architecture): {}",
                self.model_type,
                self.unread.join(", ")
            ));
        }
        out
    }

    /// The note on the assumed job, when it is assumed.
    pub fn job_note(&self) -> Option<String> {
        let d = &self.model.defaults;
        self.job_assumed.then(|| {
            format!(
                "config.json carries no training job: seq {} and global batch {} ({:.1}M tokens per step) are assumed; give --seq-len and --global-batch",
                d.seq_len,
                d.global_batch,
                (d.seq_len * d.global_batch) as f64 / 1e6
            )
        })
    }
}

/// Whether a `--model` value names a `config.json` rather than a card: it
/// ends in `.json`.
pub fn looks_like_config(value: &str) -> bool {
    value.to_ascii_lowercase().ends_with(".json")
}

/// Read and map the `config.json` at `file`.
///
/// # Errors
/// [`InputError::Io`] if it cannot be read; as [`from_json`].
pub fn read(file: &Path, opts: &Options) -> Result<Imported, InputError> {
    let text = std::fs::read_to_string(file).map_err(|source| InputError::Io {
        file: file.to_path_buf(),
        source,
    })?;
    from_json(&text, file, opts)
}

/// Map the text of a `config.json` (`file` names it in messages and gives
/// the default name).
///
/// # Errors
/// [`InputError::Syntax`] for invalid JSON; [`InputError::Field`] naming
/// the key for a missing size, a value of the wrong type or an impossible
/// one, an unsupported `model_type`, or an architecture the card cannot
/// represent.
pub fn from_json(text: &str, file: &Path, opts: &Options) -> Result<Imported, InputError> {
    let value: Value = serde_json::from_str(text).map_err(|e| InputError::Syntax {
        file: file.to_path_buf(),
        detail: format!("not valid JSON: {e}"),
    })?;
    let Value::Object(map) = value else {
        return Err(InputError::field(
            file,
            "(top level)",
            "a config.json is a JSON object of keys",
        ));
    };
    let c = Cfg {
        file,
        map: &map,
        used: RefCell::new(BTreeSet::new()),
    };
    let model_type = match c.get("model_type") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(c.err("model_type", format!("must be a string, found {v}"))),
        None => {
            return Err(c.err(
                "model_type",
                format!(
                    "missing; meshplan reads the model_types {}",
                    SUPPORTED.join(", ")
                ),
            ));
        }
    };
    let family = Family::of(&c, &model_type)?;
    let mut b = Builder {
        notes: Vec::new(),
        kept_out: Vec::new(),
        origin: Vec::new(),
    };
    for key in ["is_encoder_decoder", "add_cross_attention"] {
        if c.boolean(key)? == Some(true) {
            return Err(c.err(
                key,
                "is true: meshplan plans decoder-only models".to_string(),
            ));
        }
    }
    if c.get("text_config").is_some() {
        return Err(c.err(
            "text_config",
            "nested configurations (multimodal wrappers) are not read; pass the language model's own config.json",
        ));
    }
    let (architecture, moe, mla) = match family {
        Family::Gpt2 => (gpt2(&c, &mut b)?, None, None),
        Family::GptNeox => (gpt_neox(&c, &mut b)?, None, None),
        _ => decoder(&c, family, &mut b)?,
    };
    let name = match &opts.name {
        Some(n) if n.trim().is_empty() => {
            return Err(InputError::field("--name", "--name", "is empty"));
        }
        Some(n) => n.clone(),
        None => default_name(file),
    };
    let seq_len = opts
        .seq_len
        .unwrap_or(DEFAULT_SEQ.min(architecture.max_seq));
    let global_batch = opts.global_batch.unwrap_or(
        ((DEFAULT_TOKENS_PER_STEP as f64 / seq_len.max(1) as f64).round() as u64).max(1),
    );
    let source = format!(
        "Hugging Face config.json {} (model_type {model_type}{})",
        file.display(),
        match c.map.get("_name_or_path") {
            Some(Value::String(s)) if !s.is_empty() && s != "./" => format!(", {s}"),
            _ => String::new(),
        }
    );
    let mut model = Model {
        name,
        aliases: Vec::new(),
        source,
        known_params: 1.0,
        known_active_params: None,
        architecture,
        moe,
        mla,
        defaults: JobDefaults {
            seq_len,
            global_batch,
        },
    };
    // The architecture's own count (a config.json publishes none).
    model.known_params = model.total_params();
    b.origin.push(("defaults.seq_len", "--seq-len".into()));
    b.origin
        .push(("defaults.global_batch", "--global-batch".into()));
    if let Err(e) = model.check(file) {
        return Err(translate(e, &b.origin));
    }
    let used = c.used.into_inner();
    let unread: Vec<String> = map
        .keys()
        .filter(|k| !used.contains(k.as_str()) && !IRRELEVANT.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(Imported {
        model,
        file: file.to_path_buf(),
        model_type,
        notes: b.notes,
        kept_out: b.kept_out,
        unread,
        job_assumed: opts.seq_len.is_none() || opts.global_batch.is_none(),
        origin: b.origin,
    })
}

/// Keys that describe the file, the tokenizer, inference or generation,
/// not the trained architecture: read by no mapping, and not reported.
const IRRELEVANT: &[&str] = &[
    "_name_or_path",
    "architectures",
    "auto_map",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "initializer_range",
    // Inference-time slicing of the Llama matmuls (same weights).
    "pretraining_tp",
    // Whether the forward pass returns router logits (training adds the
    // balancing loss from `router_aux_loss_coef`, read).
    "output_router_logits",
    // DeepSeek's inference-time expert-parallel hint.
    "ep_size",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "pruned_heads",
    "chunk_size_feed_forward",
    "id2label",
    "label2id",
    "task_specific_params",
    "tokenizer_class",
    "prefix",
    "problem_type",
    "finetuning_task",
    "is_decoder",
    "cross_attention_hidden_size",
    "tie_encoder_decoder",
    // GPT-2's classification/double-heads summary head (not in a causal LM).
    "summary_activation",
    "summary_first_dropout",
    "summary_proj_to_labels",
    "summary_type",
    "summary_use_proj",
    // GPT-2 numerics switches (same FLOPs and parameters).
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    // GPT-2's legacy copy of n_positions.
    "n_ctx",
    // Generation defaults.
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "num_return_sequences",
    "bad_words_ids",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "use_bfloat16",
];

/// Supported model families (one per `model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Llama,
    Mistral,
    Mixtral,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    DeepseekV3,
    Gpt2,
    GptNeox,
}

impl Family {
    fn of(c: &Cfg, model_type: &str) -> Result<Family, InputError> {
        Ok(match model_type {
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "mixtral" => Family::Mixtral,
            "qwen2" => Family::Qwen2,
            "qwen2_moe" => Family::Qwen2Moe,
            "qwen3" => Family::Qwen3,
            "qwen3_moe" => Family::Qwen3Moe,
            "deepseek_v3" => Family::DeepseekV3,
            "gpt2" => Family::Gpt2,
            "gpt_neox" => Family::GptNeox,
            "gpt_oss" => {
                return Err(c.err(
                    "model_type",
                    "gpt_oss is not supported: its layers alternate 128-token sliding-window and full attention (layer_types) and carry attention sinks, which meshplan's card, pricing every layer with full attention, cannot represent",
                ));
            }
            other => {
                return Err(c.err(
                    "model_type",
                    format!(
                        "`{}` is not supported; meshplan reads {}",
                        crate::limits::echo(other),
                        SUPPORTED.join(", ")
                    ),
                ));
            }
        })
    }

    fn is_qwen(self) -> bool {
        matches!(
            self,
            Family::Qwen2 | Family::Qwen2Moe | Family::Qwen3 | Family::Qwen3Moe
        )
    }
}

/// The notes and key origins gathered while mapping.
struct Builder {
    notes: Vec<String>,
    kept_out: Vec<String>,
    origin: Vec<(&'static str, String)>,
}

impl Builder {
    fn from(&mut self, field: &'static str, key: &str) {
        self.origin.push((field, key.to_string()));
    }
}

/// The JSON object, with the keys looked at so far.
struct Cfg<'a> {
    file: &'a Path,
    map: &'a Map<String, Value>,
    used: RefCell<BTreeSet<String>>,
}

impl Cfg<'_> {
    fn err(&self, key: &str, problem: impl Into<String>) -> InputError {
        InputError::field(self.file, key, problem)
    }

    /// The value of `key`; `null` reads as absent. Marks the key as read.
    fn get(&self, key: &str) -> Option<&Value> {
        self.used.borrow_mut().insert(key.to_string());
        match self.map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A non-negative integer (an integral float such as `4096.0` is
    /// accepted), or absent.
    fn uint(&self, key: &str) -> Result<Option<u64>, InputError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        if let Some(x) = v.as_u64() {
            return Ok(Some(x));
        }
        match v.as_f64() {
            Some(f) if f < 0.0 => {
                Err(self.err(key, format!("must be a non-negative integer, found {v}")))
            }
            // An integral float beyond u64 is refused as written, not as
            // the u64::MAX it would saturate to.
            Some(f) if f.fract() == 0.0 && f >= u64::MAX as f64 => Err(self.err(
                key,
                format!("{} is beyond any size meshplan can hold", short(v)),
            )),
            Some(f) if f.fract() == 0.0 => Ok(Some(f as u64)),
            _ => Err(self.err(key, format!("must be an integer, found {}", short(v)))),
        }
    }

    /// A positive integer of at most `max`, or absent.
    fn size(&self, key: &str, max: u64) -> Result<Option<u64>, InputError> {
        match self.uint(key)? {
            None => Ok(None),
            Some(0) => Err(self.err(key, "must be positive, found 0")),
            Some(x) if x > max => Err(self.err(
                key,
                format!("{x} exceeds meshplan's limit of {max} (see src/limits.rs)"),
            )),
            Some(x) => Ok(Some(x)),
        }
    }

    /// A required positive integer of at most `max`.
    fn req(&self, key: &str, max: u64, model_type: &str) -> Result<u64, InputError> {
        self.size(key, max)?.ok_or_else(|| {
            self.err(
                key,
                format!("missing; a {model_type} config.json must give it"),
            )
        })
    }

    fn float(&self, key: &str) -> Result<Option<f64>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(self.err(key, format!("must be a number, found {}", short(v)))),
            },
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, InputError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(key, format!("must be true or false, found {}", short(v)))),
        }
    }

    /// An integer list (`mlp_only_layers`), absent as empty.
    fn uint_list(&self, key: &str) -> Result<Vec<u64>, InputError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        self.err(
                            key,
                            format!("must list layer indices (integers), found {}", short(v)),
                        )
                    })
                })
                .collect(),
            Some(v) => Err(self.err(key, format!("must be a list, found {}", short(v)))),
        }
    }

    /// Mark `key` read and, when present, list it as kept out of the card.
    fn keep_out(&self, key: &str, b: &mut Builder) {
        if let Some(v) = self.get(key) {
            b.kept_out.push(format!("{key} = {}", short(v)));
        }
    }
}

/// Like [`Cfg::keep_out`], but silent when the value is the family's own
/// (`silu` for a Llama-family MLP, say): only a different one needs a hand
/// in the launch files.
fn keep_out_unless(c: &Cfg, key: &str, usual: &str, b: &mut Builder) {
    if c.get(key).and_then(Value::as_str) != Some(usual) {
        c.keep_out(key, b);
    }
}

/// A JSON value as one short line.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(77).collect::<String>())
    } else {
        s
    }
}

/// `u64` to `u32` (the bounds were checked: at most `MAX_LAYERS`,
/// `MAX_HEADS`, `MAX_EXPERTS`).
fn u32_of(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// Integer with thousands separators, for notes.
fn grouped(x: u64) -> String {
    let s = x.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn default_name(file: &Path) -> String {
    let stem = if file
        .file_name()
        .is_some_and(|n| n.eq_ignore_ascii_case("config.json"))
    {
        file.parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
    } else {
        file.file_stem().map(|n| n.to_string_lossy().into_owned())
    };
    let name: String = stem
        .unwrap_or_default()
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.trim_matches('-').is_empty() {
        "hf-model".to_string()
    } else {
        name
    }
}

/// An error of [`Model::check`] restated with the config.json key the
/// card field came from.
fn translate(e: InputError, origin: &[(&'static str, String)]) -> InputError {
    match e {
        InputError::Field {
            file,
            field,
            problem,
        } => match origin.iter().find(|(f, _)| *f == field) {
            Some((_, key)) if key.starts_with("--") => InputError::Field {
                file: key.into(),
                field: key.clone(),
                problem: format!("{problem} (card field {field})"),
            },
            Some((_, key)) => InputError::Field {
                file,
                field: key.clone(),
                problem: format!("{problem} (card field {field})"),
            },
            None => InputError::Field {
                file,
                field,
                problem,
            },
        },
        other => other,
    }
}

/// RoPE base θ: `rope_theta`, or `rope_parameters.rope_theta` (newer
/// `transformers`); rope scaling is kept out of the card (no parameters,
/// no cost).
fn rope_theta(c: &Cfg, b: &mut Builder) -> Result<Option<f64>, InputError> {
    let mut theta = c.float("rope_theta")?;
    if theta.is_some() {
        b.from("architecture.rope_theta", "rope_theta");
    }
    if let Some(p) = c.get("rope_parameters") {
        let Value::Object(p) = p else {
            return Err(c.err(
                "rope_parameters",
                format!("must be an object, found {}", short(p)),
            ));
        };
        if theta.is_none()
            && let Some(t) = p.get("rope_theta")
        {
            theta = Some(t.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
                c.err(
                    "rope_parameters",
                    format!("rope_theta must be a number, found {}", short(t)),
                )
            })?);
            b.from("architecture.rope_theta", "rope_parameters");
        }
        let scaled = p
            .get("rope_type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "default");
        if scaled {
            b.kept_out.push(format!(
                "rope_parameters = {}",
                short(&Value::Object(p.clone()))
            ));
        }
    }
    Ok(theta)
}

/// Which biases the attention projections carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttnBias {
    None,
    /// Q, K and V (Qwen2).
    Qkv,
    /// Q, K, V and the output projection.
    Full,
}

/// The card's one `linear_bias` switch for the biases a model has (`qkv`
/// = q + 2·kv, the q/k/v projection widths), with a note when it cannot say
/// exactly that.
fn linear_bias(
    attn: AttnBias,
    mlp: bool,
    layers: u64,
    (h, qkv): (u64, u64),
    attn_key: &str,
    b: &mut Builder,
) -> bool {
    let note = |what: String, per_layer: u64| {
        format!(
            "{what} ({} per layer, {} in all): the card's linear_bias switches the bias of every linear layer at once",
            grouped(per_layer),
            grouped(per_layer * layers)
        )
    };
    match (attn, mlp) {
        (AttnBias::Full, true) => true,
        (AttnBias::None, false) => false,
        (AttnBias::Qkv, false) => {
            b.notes.push(note(
                "the q/k/v projection biases are not counted".into(),
                qkv,
            ));
            false
        }
        (AttnBias::Full, false) => {
            b.notes.push(note(
                format!("{attn_key} = true: the attention biases are not counted"),
                qkv + h,
            ));
            false
        }
        (AttnBias::None, true) => {
            b.notes.push(note(
                "linear_bias = true also counts attention biases the model does not have".into(),
                qkv + h,
            ));
            true
        }
        (AttnBias::Qkv, true) => {
            b.notes.push(note(
                "linear_bias = true also counts an output-projection bias the model does not have"
                    .into(),
                h,
            ));
            true
        }
    }
}

/// Sliding-window attention: refused when only some layers use it (the
/// card prices every layer alike), a stated approximation when all do.
fn sliding_window(c: &Cfg, family: Family, layers: u64, b: &mut Builder) -> Result<(), InputError> {
    // Only the families whose transformers class reads `sliding_window`
    // look at it; elsewhere it stays unread and is reported as such.
    let reads_window = matches!(family, Family::Mistral | Family::Mixtral) || family.is_qwen();
    let window = if reads_window {
        c.uint("sliding_window")?
    } else {
        None
    };
    let mut sliding: Vec<bool> = match family {
        Family::Mistral | Family::Mixtral => vec![window.is_some(); layers as usize],
        f if f.is_qwen() => {
            let on = c.boolean("use_sliding_window")?.unwrap_or(false) && window.is_some();
            // transformers: sliding on layers i >= max_window_layers.
            let from = c.uint("max_window_layers")?.unwrap_or(0);
            (0..layers).map(|i| on && i >= from).collect()
        }
        _ => vec![false; layers as usize],
    };
    if let Some(v) = c.get("layer_types") {
        let Value::Array(types) = v else {
            return Err(c.err("layer_types", format!("must be a list, found {}", short(v))));
        };
        if types.len() as u64 != layers {
            return Err(c.err(
                "layer_types",
                format!(
                    "lists {} layers but num_hidden_layers is {layers}",
                    types.len()
                ),
            ));
        }
        sliding = Vec::with_capacity(types.len());
        for t in types {
            match t.as_str() {
                Some("full_attention") => sliding.push(false),
                Some("sliding_attention") => sliding.push(true),
                _ => {
                    return Err(c.err(
                        "layer_types",
                        format!(
                            "{} is not full_attention or sliding_attention, the attention kinds meshplan prices",
                            short(t)
                        ),
                    ));
                }
            }
        }
    }
    let n = sliding.iter().filter(|s| **s).count();
    if n == 0 {
        return Ok(());
    }
    let key = if c.map.contains_key("layer_types") {
        "layer_types"
    } else if family.is_qwen() {
        "max_window_layers"
    } else {
        "sliding_window"
    };
    if n < sliding.len() {
        return Err(c.err(
            key,
            format!(
                "{n} of {} layers use sliding-window attention and the others full attention; the card prices every layer alike and cannot represent the pattern",
                sliding.len()
            ),
        ));
    }
    let w = window.ok_or_else(|| {
        c.err(
            "sliding_window",
            "missing, but the layers use sliding-window attention",
        )
    })?;
    b.notes.push(format!(
        "sliding_window = {w} on every layer is priced as full causal attention: exact for sequences of at most {w} tokens, an overestimate of attention beyond"
    ));
    Ok(())
}

/// Dropout switch: any of `keys` positive (absent: `default`).
fn dropout(c: &Cfg, keys: &[&str], default: f64, b: &mut Builder) -> Result<bool, InputError> {
    let mut on = false;
    for k in keys {
        let p = c.float(k)?.unwrap_or(default);
        if !(0.0..1.0).contains(&p) {
            return Err(c.err(k, format!("must be a probability in [0, 1), found {p}")));
        }
        if p > 0.0 {
            on = true;
            b.from("architecture.dropout", k);
        }
    }
    Ok(on)
}

/// The config.json keys of the sizes every model type states.
struct SizeKeys {
    layers: &'static str,
    hidden: &'static str,
    heads: &'static str,
    max_seq: &'static str,
}

/// Hugging Face's `PretrainedConfig` names (Llama, Qwen, Mistral, NeoX …).
const PRETRAINED_KEYS: SizeKeys = SizeKeys {
    layers: "num_hidden_layers",
    hidden: "hidden_size",
    heads: "num_attention_heads",
    max_seq: "max_position_embeddings",
};

/// The sizes every model type states, each bounded and recorded with the
/// key it came from.
struct Sizes {
    layers: u64,
    hidden: u64,
    heads: u64,
    vocab: u64,
    max_seq: u64,
    tied: bool,
}

impl Sizes {
    /// The GPT-2 / GPT-NeoX block: LayerNorm, multi-head attention (KV
    /// heads = heads, head dim = hidden / heads), an ungated MLP of `ffn`.
    fn layernorm_mha(
        &self,
        ffn: u64,
        position_embedding: PositionEmbedding,
        rope_theta: Option<f64>,
        linear_bias: bool,
        dropout: bool,
        norm_epsilon: Option<f64>,
    ) -> Architecture {
        Architecture {
            layers: u32_of(self.layers),
            hidden: self.hidden,
            heads: u32_of(self.heads),
            kv_heads: u32_of(self.heads),
            head_dim: None,
            ffn,
            gated_mlp: false,
            vocab: self.vocab,
            tied_embeddings: self.tied,
            norm: Norm::Layernorm,
            position_embedding,
            max_seq: self.max_seq,
            rope_theta,
            linear_bias,
            dropout,
            qk_layernorm: false,
            norm_epsilon,
            rope_scaling: None,
            tokenizer_vocab: None,
            mtp_layers: 0,
            mtp_loss_scale: None,
        }
    }
}

/// Reads [`Sizes`] under `keys`; `tied_default` is the model type's
/// `tie_word_embeddings` default (true for GPT-2, false elsewhere).
fn sizes(
    c: &Cfg,
    b: &mut Builder,
    mt: &str,
    keys: &SizeKeys,
    tied_default: bool,
) -> Result<Sizes, InputError> {
    let mut req = |field: &'static str, key: &'static str, max: u64| {
        let v = c.req(key, max, mt)?;
        b.from(field, key);
        Ok::<u64, InputError>(v)
    };
    let layers = req("architecture.layers", keys.layers, MAX_LAYERS as u64)?;
    let hidden = req("architecture.hidden", keys.hidden, MAX_WIDTH)?;
    let heads = req("architecture.heads", keys.heads, MAX_HEADS as u64)?;
    let vocab = req("architecture.vocab", "vocab_size", MAX_VOCAB)?;
    let max_seq = req("architecture.max_seq", keys.max_seq, MAX_SEQ)?;
    let tied = c.boolean("tie_word_embeddings")?.unwrap_or(tied_default);
    b.from("architecture.tied_embeddings", "tie_word_embeddings");
    Ok(Sizes {
        layers,
        hidden,
        heads,
        vocab,
        max_seq,
        tied,
    })
}

/// The Llama family: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3,
/// qwen3_moe, deepseek_v3.
fn decoder(
    c: &Cfg,
    family: Family,
    b: &mut Builder,
) -> Result<(Architecture, Option<MoeSpec>, Option<MlaSpec>), InputError> {
    let mt = c
        .map
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let sz = sizes(c, b, mt, &PRETRAINED_KEYS, false)?;
    let Sizes {
        layers,
        hidden,
        heads,
        ..
    } = sz;
    let kv_heads = match c.size("num_key_value_heads", MAX_HEADS as u64)? {
        Some(k) => {
            b.from("architecture.kv_heads", "num_key_value_heads");
            k
        }
        None => {
            b.from("architecture.kv_heads", "num_attention_heads");
            heads
        }
    };
    let ffn = c.req("intermediate_size", MAX_WIDTH, mt)?;
    b.from("architecture.ffn", "intermediate_size");
    let rope_theta = rope_theta(c, b)?;

    let mla = if family == Family::DeepseekV3 {
        let q_lora_rank = c.uint("q_lora_rank")?.unwrap_or(0);
        if q_lora_rank > MAX_WIDTH {
            return Err(c.err(
                "q_lora_rank",
                format!("{q_lora_rank} exceeds meshplan's limit of {MAX_WIDTH}"),
            ));
        }
        let m = MlaSpec {
            q_lora_rank,
            kv_lora_rank: c.req("kv_lora_rank", MAX_WIDTH, mt)?,
            qk_nope_head_dim: c.req("qk_nope_head_dim", MAX_WIDTH, mt)?,
            qk_rope_head_dim: c.req("qk_rope_head_dim", MAX_WIDTH, mt)?,
            v_head_dim: c.req("v_head_dim", MAX_WIDTH, mt)?,
        };
        // transformers derives head_dim = qk_rope_head_dim for the rotary
        // table; the MLA widths above are what is priced.
        c.get("head_dim");
        Some(m)
    } else {
        None
    };
    // Per-head width: explicit when it is not hidden / heads. DeepSeek-V3's
    // d_h is qk_nope_head_dim (its report's per-head dimension).
    let head_dim = match &mla {
        Some(m) => {
            b.from("architecture.head_dim", "qk_nope_head_dim");
            Some(m.qk_nope_head_dim)
        }
        None => match c.size("head_dim", MAX_WIDTH)? {
            Some(d) if hidden % heads == 0 && d == hidden / heads => None,
            Some(d) => {
                b.from("architecture.head_dim", "head_dim");
                Some(d)
            }
            None => {
                // hidden / heads; the card's check says when it does not divide.
                b.from("architecture.head_dim", "head_dim");
                None
            }
        },
    };
    let head_width = head_dim.unwrap_or(hidden / heads);

    // Biases: Llama's attention_bias / mlp_bias; Qwen2 and Qwen2-MoE always
    // bias q, k and v; Qwen3's attention_bias is q, k, v and o.
    let attn_bias_key = "attention_bias";
    let attn = match family {
        Family::Qwen2 | Family::Qwen2Moe => AttnBias::Qkv,
        Family::Mistral | Family::Mixtral => AttnBias::None,
        _ => {
            if c.boolean(attn_bias_key)?.unwrap_or(false) {
                AttnBias::Full
            } else {
                AttnBias::None
            }
        }
    };
    let mlp_bias = match family {
        Family::Llama => c.boolean("mlp_bias")?.unwrap_or(false),
        _ => false,
    };
    if family == Family::DeepseekV3 && attn != AttnBias::None {
        return Err(c.err(
            attn_bias_key,
            "is true: biases on the MLA projections are not priced by meshplan's card",
        ));
    }
    let linear_bias = linear_bias(
        attn,
        mlp_bias,
        layers,
        (hidden, (heads + 2 * kv_heads) * head_width),
        attn_bias_key,
        b,
    );
    if linear_bias {
        b.from("architecture.linear_bias", "attention_bias");
    }
    let dropout = dropout(c, &["attention_dropout"], 0.0, b)?;
    if dropout {
        b.notes.push(
            "attention_dropout > 0: priced with attention and hidden dropout (the card's one dropout switch)".into(),
        );
    }
    if matches!(family, Family::Qwen3 | Family::Qwen3Moe) {
        let qk = 2 * head_width * layers;
        b.notes.push(format!(
            "the QK-norm weights (q_norm and k_norm, 2 x {head_width} per layer, {} in all) are not counted, as in the shipped qwen3-30b-a3b card",
            grouped(qk)
        ));
    }
    sliding_window(c, family, layers, b)?;

    let moe = moe(c, family, layers, ffn, b)?;
    if let Some(m) = &moe
        && m.experts > 0
        && family == Family::DeepseekV3
    {
        b.notes.push(format!(
            "the routing-bias vector (e_score_correction_bias, {} per MoE layer) is not counted, as in the shipped deepseek-v3 card",
            m.experts
        ));
    }
    // Multi-token prediction (DeepSeek-V3 report §2.2): D modules, each one
    // more layer of the last kind with its projection and norms, priced on
    // the last pipeline stage.
    let mtp_layers = match c.uint("num_nextn_predict_layers")? {
        Some(n) if n > 0 => {
            b.from("architecture.mtp_layers", "num_nextn_predict_layers");
            if n > crate::limits::MAX_MTP_LAYERS as u64 {
                return Err(c.err(
                    "num_nextn_predict_layers",
                    format!(
                        "{n} exceeds meshplan's limit of {} (see src/limits.rs)",
                        crate::limits::MAX_MTP_LAYERS
                    ),
                ));
            }
            b.notes.push(format!(
                "num_nextn_predict_layers = {n}: the multi-token-prediction module ({n} more transformer layer(s) with the h x 2h projection and three norms, embedding and output head shared) is priced on the last pipeline stage; its loss weight is not in config.json (Megatron-LM's default 0.1 is written)"
            ));
            n as u32
        }
        _ => 0,
    };
    if let Some(q) = c.get("quantization_config") {
        let method = q
            .get("quant_method")
            .and_then(Value::as_str)
            .unwrap_or("unnamed");
        b.notes.push(format!(
            "quantization_config ({method}) describes how the checkpoint is stored; the precision priced is --recipe's"
        ));
    }
    if family.is_qwen() && c.boolean("use_mrope")? == Some(true) {
        return Err(c.err(
            "use_mrope",
            "is true: multimodal rotary positions (Qwen2-VL) belong to a vision-language model, which meshplan does not plan",
        ));
    }
    keep_out_unless(c, "hidden_act", "silu", b);
    let norm_epsilon = c.float("rms_norm_eps")?;
    if norm_epsilon.is_some() {
        b.from("architecture.norm_epsilon", "rms_norm_eps");
    }
    // Qwen3's attention always normalises q and k per head (q_norm,
    // k_norm); DeepSeek-V3's MLA normalises the compressed q and kv
    // (q_a_layernorm, kv_a_layernorm). config.json has no key for either.
    let qk_layernorm = matches!(
        family,
        Family::Qwen3 | Family::Qwen3Moe | Family::DeepseekV3
    );
    if qk_layernorm {
        b.from("architecture.qk_layernorm", "model_type");
    }
    let rope_scaling = rope_scaling(c, b)?;
    let architecture = Architecture {
        layers: u32_of(layers),
        hidden,
        heads: u32_of(heads),
        kv_heads: u32_of(kv_heads),
        head_dim,
        ffn,
        gated_mlp: true,
        vocab: sz.vocab,
        tied_embeddings: sz.tied,
        norm: Norm::Rmsnorm,
        position_embedding: PositionEmbedding::Rope,
        max_seq: sz.max_seq,
        rope_theta,
        linear_bias,
        dropout,
        qk_layernorm,
        norm_epsilon,
        rope_scaling,
        tokenizer_vocab: None,
        mtp_layers,
        mtp_loss_scale: None,
    };
    Ok((architecture, moe, mla))
}

/// The `[moe]` block of a Llama-family config, or `None` for a dense one.
fn moe(
    c: &Cfg,
    family: Family,
    layers: u64,
    ffn: u64,
    b: &mut Builder,
) -> Result<Option<MoeSpec>, InputError> {
    let mt = c
        .map
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let max_e = MAX_EXPERTS as u64;
    let (experts, expert_ffn) = match family {
        Family::Mixtral => {
            let e = c.req("num_local_experts", max_e, mt)?;
            b.from("moe.experts", "num_local_experts");
            b.from("moe.expert_ffn", "intermediate_size");
            (e, ffn)
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            // transformers: num_experts = 0 builds dense MLPs only.
            match c.uint("num_experts")? {
                Some(0) => return Ok(None),
                None => {
                    return Err(c.err(
                        "num_experts",
                        format!("missing; a {mt} config.json must give it"),
                    ));
                }
                Some(_) => {}
            }
            let e = c.req("num_experts", max_e, mt)?;
            b.from("moe.experts", "num_experts");
            let f = c.req("moe_intermediate_size", MAX_WIDTH, mt)?;
            b.from("moe.expert_ffn", "moe_intermediate_size");
            (e, f)
        }
        Family::DeepseekV3 => {
            let e = c.req("n_routed_experts", max_e, mt)?;
            b.from("moe.experts", "n_routed_experts");
            let f = c.req("moe_intermediate_size", MAX_WIDTH, mt)?;
            b.from("moe.expert_ffn", "moe_intermediate_size");
            (e, f)
        }
        _ => {
            // A dense family naming experts is a file meshplan would misread.
            for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
                if c.uint(key)?.is_some_and(|e| e > 0) {
                    return Err(c.err(
                        key,
                        format!(
                            "gives experts, but model_type {mt} is a dense model in transformers"
                        ),
                    ));
                }
            }
            return Ok(None);
        }
    };
    let top_k = c.req("num_experts_per_tok", max_e, mt)?;
    b.from("moe.top_k", "num_experts_per_tok");

    // Shared experts.
    let (shared_experts, shared_expert_ffn) = match family {
        Family::Qwen2Moe => match c.uint("shared_expert_intermediate_size")? {
            Some(0) | None => (0, None),
            Some(w) => {
                if w > MAX_WIDTH {
                    return Err(c.err(
                        "shared_expert_intermediate_size",
                        format!("{w} exceeds meshplan's limit of {MAX_WIDTH}"),
                    ));
                }
                b.from("moe.shared_experts", "shared_expert_intermediate_size");
                b.from("moe.shared_expert_ffn", "shared_expert_intermediate_size");
                b.notes.push(
                    "the shared expert's sigmoid gate (shared_expert_gate, hidden_size weights per MoE layer) is not counted".into(),
                );
                (1, Some(w))
            }
        },
        Family::DeepseekV3 => {
            let n = c.uint("n_shared_experts")?.ok_or_else(|| {
                c.err(
                    "n_shared_experts",
                    format!("missing; a {mt} config.json must give it"),
                )
            })?;
            if n > max_e {
                return Err(c.err(
                    "n_shared_experts",
                    format!("{n} exceeds meshplan's limit of {max_e}"),
                ));
            }
            b.from("moe.shared_experts", "n_shared_experts");
            if n > 0 {
                b.from("moe.shared_expert_ffn", "moe_intermediate_size");
            }
            // transformers builds one MLP of n · moe_intermediate_size: the
            // same parameters and FLOPs as n experts of that width.
            (n, (n > 0).then_some(expert_ffn))
        }
        _ => (0, None),
    };

    // Which layers are dense.
    let first_k_dense = match family {
        Family::DeepseekV3 => {
            let k = c.uint("first_k_dense_replace")?.ok_or_else(|| {
                c.err(
                    "first_k_dense_replace",
                    format!("missing; a {mt} config.json must give it"),
                )
            })?;
            b.from("moe.first_k_dense", "first_k_dense_replace");
            if let Some(f) = c.uint("moe_layer_freq")?
                && f != 1
            {
                return Err(c.err(
                    "moe_layer_freq",
                    format!(
                        "{f}: MoE only on every {f}th layer after the first dense ones; the card expresses only leading dense layers (moe.first_k_dense)"
                    ),
                ));
            }
            k
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            let step = c.uint("decoder_sparse_step")?.unwrap_or(1);
            if step == 0 {
                return Err(c.err("decoder_sparse_step", "must be positive, found 0"));
            }
            let only = c.uint_list("mlp_only_layers")?;
            if let Some(i) = only.iter().find(|i| **i >= layers) {
                return Err(c.err(
                    "mlp_only_layers",
                    format!("layer {i} does not exist among {layers}"),
                ));
            }
            // transformers: layer i is MoE unless listed, when (i+1) % step == 0.
            let dense: Vec<bool> = (0..layers)
                .map(|i| only.contains(&i) || (i + 1) % step != 0)
                .collect();
            let k = dense.iter().take_while(|d| **d).count() as u64;
            if dense[k as usize..].iter().any(|d| *d) {
                let key = if step != 1 {
                    "decoder_sparse_step"
                } else {
                    "mlp_only_layers"
                };
                return Err(c.err(
                    key,
                    "makes dense layers between MoE layers; the card expresses only leading dense layers (moe.first_k_dense)",
                ));
            }
            if k > 0 {
                b.from("moe.first_k_dense", "mlp_only_layers");
            }
            k
        }
        _ => 0,
    };

    // Load balancing (not priced; written into the launch files).
    let (load_balancing, aux_loss_coeff) = match family {
        Family::DeepseekV3 => match c.float("aux_loss_alpha")? {
            Some(a) => {
                let seq = c.boolean("seq_aux")?.unwrap_or(true);
                b.from("moe.aux_loss_coeff", "aux_loss_alpha");
                (
                    Some(if seq { "seq_aux_loss" } else { "aux_loss" }.to_string()),
                    Some(a),
                )
            }
            None => (None, None),
        },
        _ => match c.float("router_aux_loss_coef")? {
            Some(a) => {
                b.from("moe.aux_loss_coeff", "router_aux_loss_coef");
                (Some("aux_loss".to_string()), Some(a))
            }
            None => (None, None),
        },
    };
    if aux_loss_coeff.is_none() {
        b.notes.push(
            "config.json gives no load-balancing loss coefficient: moe.load_balancing and moe.aux_loss_coeff stay unset (not priced; launch files need them)".into(),
        );
    }
    let router = router(c, b)?;
    for key in ["norm_topk_prob", "router_jitter_noise"] {
        c.keep_out(key, b);
    }
    Ok(Some(MoeSpec {
        experts: u32_of(experts),
        top_k: u32_of(top_k),
        expert_ffn,
        shared_experts: u32_of(shared_experts),
        shared_expert_ffn,
        first_k_dense: u32_of(first_k_dense),
        load_balancing,
        aux_loss_coeff,
        score_function: router.score_function,
        expert_bias: router.expert_bias,
        groups: router.groups,
        group_top_k: router.group_top_k,
        topk_scaling_factor: router.topk_scaling_factor,
    }))
}

/// The router fields of [`MoeSpec`] as config.json gives them.
struct Router {
    score_function: Option<String>,
    expert_bias: bool,
    groups: Option<u32>,
    group_top_k: Option<u32>,
    topk_scaling_factor: Option<f64>,
}

/// DeepSeek-V3's router keys: `scoring_func` (softmax | sigmoid),
/// `topk_method` (`noaux_tc`: the auxiliary-loss-free expert bias, with
/// group-limited routing over `n_group` groups of which `topk_group` are
/// kept; `group_limited_greedy`: the groups without the bias; `greedy`:
/// neither) and `routed_scaling_factor`. Other families leave them out
/// (softmax, no groups).
fn router(c: &Cfg, b: &mut Builder) -> Result<Router, InputError> {
    let score_function = match c.get("scoring_func") {
        None => None,
        Some(v) => match v.as_str() {
            Some(f @ ("softmax" | "sigmoid")) => {
                b.from("moe.score_function", "scoring_func");
                Some(f.to_string())
            }
            _ => {
                return Err(c.err(
                    "scoring_func",
                    format!(
                        "{} is not softmax or sigmoid, the router scores Megatron-LM has",
                        short(v)
                    ),
                ));
            }
        },
    };
    let method = c.get("topk_method").and_then(Value::as_str);
    let (expert_bias, grouped) = match method {
        None | Some("greedy") => (false, false),
        Some("noaux_tc") => (true, true),
        Some("group_limited_greedy") => (false, true),
        Some(m) => {
            return Err(c.err(
                "topk_method",
                format!("`{m}` is not greedy, group_limited_greedy or noaux_tc"),
            ));
        }
    };
    if method.is_some() {
        b.from("moe.expert_bias", "topk_method");
    }
    let (groups, group_top_k) = if grouped {
        let g = c.size("n_group", MAX_EXPERTS as u64)?;
        let k = c.size("topk_group", MAX_EXPERTS as u64)?;
        b.from("moe.groups", "n_group");
        b.from("moe.group_top_k", "topk_group");
        (g.map(u32_of), k.map(u32_of))
    } else {
        c.keep_out("n_group", b);
        c.keep_out("topk_group", b);
        (None, None)
    };
    let topk_scaling_factor = c.float("routed_scaling_factor")?;
    if topk_scaling_factor.is_some() {
        b.from("moe.topk_scaling_factor", "routed_scaling_factor");
    }
    Ok(Router {
        score_function,
        expert_bias,
        groups,
        group_top_k,
        topk_scaling_factor,
    })
}

/// `rope_scaling` (or `rope_parameters`) of `rope_type = "llama3"` as
/// [`RopeScaling`]; any other scaling (YaRN, linear, dynamic) is listed as
/// kept out of the card.
fn rope_scaling(c: &Cfg, b: &mut Builder) -> Result<Option<RopeScaling>, InputError> {
    let key = "rope_scaling";
    let Some(Value::Object(p)) = c.get(key) else {
        c.keep_out(key, b);
        return Ok(None);
    };
    let kind = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str);
    if kind != Some("llama3") {
        c.keep_out(key, b);
        return Ok(None);
    }
    let num = |k: &str| {
        p.get(k)
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite())
            .ok_or_else(|| c.err(key, format!("a llama3 rope_scaling needs a number `{k}`")))
    };
    let original = num("original_max_position_embeddings")?;
    if !(1.0..=MAX_SEQ as f64).contains(&original) || original.fract() != 0.0 {
        return Err(c.err(
            key,
            format!("original_max_position_embeddings = {original} is not a context length"),
        ));
    }
    b.from("architecture.rope_scaling", key);
    Ok(Some(RopeScaling {
        factor: num("factor")?,
        low_freq_factor: num("low_freq_factor")?,
        high_freq_factor: num("high_freq_factor")?,
        original_max_seq: original as u64,
    }))
}

/// GPT-2 (`gpt2`): LayerNorm, learned positions, biases, tied embeddings.
fn gpt2(c: &Cfg, b: &mut Builder) -> Result<Architecture, InputError> {
    let mt = "gpt2";
    let keys = SizeKeys {
        layers: "n_layer",
        hidden: "n_embd",
        heads: "n_head",
        max_seq: "n_positions",
    };
    let sz = sizes(c, b, mt, &keys, true)?;
    b.from("architecture.kv_heads", "n_head");
    b.from("architecture.head_dim", "n_head");
    let ffn = match c.size("n_inner", MAX_WIDTH)? {
        Some(f) => {
            b.from("architecture.ffn", "n_inner");
            f
        }
        None => {
            b.from("architecture.ffn", "n_embd");
            4 * sz.hidden
        }
    };
    let dropout = dropout(c, &["resid_pdrop", "embd_pdrop", "attn_pdrop"], 0.1, b)?;
    keep_out_unless(c, "activation_function", "gelu_new", b);
    let eps = c.float("layer_norm_epsilon")?;
    if eps.is_some() {
        b.from("architecture.norm_epsilon", "layer_norm_epsilon");
    }
    Ok(sz.layernorm_mha(ffn, PositionEmbedding::Learned, None, true, dropout, eps))
}

/// GPT-NeoX (`gpt_neox`, Pythia): LayerNorm, rotary, biases.
fn gpt_neox(c: &Cfg, b: &mut Builder) -> Result<Architecture, InputError> {
    let mt = "gpt_neox";
    let sz = sizes(c, b, mt, &PRETRAINED_KEYS, false)?;
    b.from("architecture.kv_heads", "num_attention_heads");
    b.from("architecture.head_dim", "num_attention_heads");
    let ffn = c.req("intermediate_size", MAX_WIDTH, mt)?;
    b.from("architecture.ffn", "intermediate_size");
    let mut rope_theta = rope_theta(c, b)?;
    if let Some(t) = c.float("rotary_emb_base")? {
        rope_theta = Some(t);
        b.from("architecture.rope_theta", "rotary_emb_base");
    }
    // The MLP always has biases; attention_bias covers query_key_value and dense.
    let attn = if c.boolean("attention_bias")?.unwrap_or(true) {
        AttnBias::Full
    } else {
        AttnBias::None
    };
    let linear_bias = linear_bias(
        attn,
        true,
        sz.layers,
        (sz.hidden, 3 * sz.hidden),
        "attention_bias",
        b,
    );
    let dropout = dropout(c, &["attention_dropout", "hidden_dropout"], 0.0, b)?;
    let pct = c.float("rotary_pct")?.unwrap_or(0.25);
    let pct = match c.float("partial_rotary_factor")? {
        Some(p) => p,
        None => pct,
    };
    if pct < 1.0 {
        b.notes.push(format!(
            "rotary_pct = {pct}: RoPE's element-wise work is priced over the full head width (it has no parameters)"
        ));
    }
    if c.boolean("use_parallel_residual")?.unwrap_or(true) {
        b.notes.push(
            "use_parallel_residual = true (attention and MLP side by side, GPT-J style): priced as the sequential block, which has the same parameters and FLOPs; Megatron-LM launch files build the sequential block".into(),
        );
    }
    keep_out_unless(c, "hidden_act", "gelu", b);
    c.keep_out("classifier_dropout", b);
    let eps = c.float("layer_norm_eps")?;
    if eps.is_some() {
        b.from("architecture.norm_epsilon", "layer_norm_eps");
    }
    if rope_scaling(c, b)?.is_some() {
        return Err(c.err(
            "rope_scaling",
            "a llama3 RoPE scaling on a GPT-NeoX model is not something Megatron-LM builds",
        ));
    }
    Ok(sz.layernorm_mha(
        ffn,
        PositionEmbedding::Rope,
        rope_theta,
        linear_bias,
        dropout,
        eps,
    ))
}

/// The model card (TOML) of an imported model, with the key each field
/// came from and the notes as comments. It parses back
/// ([`Model::from_toml`]) to the same [`Model`].
pub fn card_toml(imp: &Imported) -> String {
    let m = &imp.model;
    let a = &m.architecture;
    let key = |field: &str| -> String {
        imp.origin
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, k)| k.clone())
            .unwrap_or_default()
    };
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "# Model card written by `meshplan import-model` from {} (model_type {}).",
        imp.file.display(),
        imp.model_type
    ));
    line("# known_params is the architecture's own count (a config.json publishes none):".into());
    line("# replace it with the published total, which the formula must reproduce to 0.5%.".into());
    for n in imp.all_notes() {
        line(format!("# note: {n}"));
    }
    line(format!("name = {}", toml_str(&m.name)));
    line("aliases = []".into());
    line(format!("source = {}", toml_str(&m.source)));
    line(format!("known_params = {:?}", m.known_params));
    // Each table as serde writes it (field order of the struct), every
    // line followed by the config.json key it came from.
    let mut table = |name: &str, value: &dyn erased::Table, from: &dyn Fn(&str) -> String| {
        line(String::new());
        line(format!("[{name}]"));
        for (field, v) in value.toml() {
            let text = format!("{field} = {v}");
            let from = from(&field);
            line(if from.is_empty() {
                text
            } else {
                format!("{text:<30} # {from}")
            });
        }
    };
    table("architecture", a, &|f| key(&format!("architecture.{f}")));
    if let Some(moe) = &m.moe {
        table("moe", moe, &|f| key(&format!("moe.{f}")));
    }
    if let Some(mla) = &m.mla {
        table("mla", mla, &|f| f.to_string());
    }
    line(String::new());
    line("[defaults]".into());
    if imp.job_assumed {
        line(format!(
            "# Assumed (config.json carries no training job): {DEFAULT_SEQ} tokens or the context when shorter,"
        ));
        line(format!(
            "# {:.1}M tokens per step; pass --seq-len and --global-batch to import-model, or edit.",
            DEFAULT_TOKENS_PER_STEP as f64 / 1e6
        ));
    }
    line(format!("seq_len = {}", m.defaults.seq_len));
    line(format!("global_batch = {}", m.defaults.global_batch));
    out
}

mod erased {
    use serde::Serialize;

    /// A card table that serde writes as TOML key–value pairs, in the
    /// struct's field order (`None` fields left out).
    pub trait Table {
        fn toml(&self) -> Vec<(String, toml::Value)>;
    }

    impl<T: Serialize> Table for T {
        fn toml(&self) -> Vec<(String, toml::Value)> {
            match toml::Value::try_from(self) {
                Ok(toml::Value::Table(t)) => t.into_iter().collect(),
                _ => unreachable!("card tables are structs of scalars"),
            }
        }
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
