//! `meshplan validate`: predictions against measured training runs.
//!
//! The input is the CSV format of `tests/data/published-dev.csv`
//! (columns in [`COLUMNS`]; an empty cell means "not stated"). Every row is
//! turned into a model, a cluster, a job and a layout ([`build_case`]); the
//! cost model prices it; the prediction is compared with what was measured
//! in the row's own convention ([`FlopConvention`]). Everything a row leaves
//! empty is filled by a stated assumption, which is printed with the row.
//!
//! This module is pure logic (text in, report out); the command line reads
//! the file and prints the report.
//!
//! Conventions (those of the published rows, `tests/data/README.md`):
//! - TFLOP/s: Narayanan et al. 2021 count their Eq. 3,
//!   `96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`, which includes the
//!   recomputed forward (hardware FLOPs); the BLOOM log uses the same formula
//!   (Megatron-DeepSpeed PR #251: `24·4·B·s·L·h²·(…)` with checkpointing);
//!   Korthikanti et al. 2022 report model FLOPs `72·B·s·L·h²·(1 + s/(6h) +
//!   V/(12·L·h))` (their MFU of 41.5% for 22B at 1.10 s reproduces with it);
//!   the Megatron-Core README uses Megatron's `num_floating_point_operations`
//!   (causal attention halved), [`compute::model_flops_per_step`].
//! - A measured TFLOP/s and a measured step time are the same observation
//!   through the FLOP count: `t = F / (TFLOP/s · N)`. When a row gives only
//!   one, the other is derived and marked so.
//! - Memory: nvidia-smi shows the allocator's reserved pool plus the CUDA
//!   context, more than the allocated peak the cost model predicts. The
//!   comparison adds the GPU profile's `reserve_gib` (CUDA context, NCCL
//!   buffers, allocator cache) to the predicted allocated peak, and the fit
//!   test is the one `search` uses (allocated ≤ memory − reserve); for the
//!   Megatron-DeepSpeed rows of 2022 see [`ALLOCATOR_FACTOR_DS`]. The
//!   measured "GB" are read as GiB: nvidia-smi reports MiB and the log
//!   divides by 1024.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::cost::{self, Evaluation, Problem, compute};
use crate::error::InputError;
use crate::layout::{Layout, Recompute};
use crate::spec::model::{Architecture, JobDefaults, Norm, PositionEmbedding};
use crate::spec::{Catalog, Cluster, GIB, Gpu, Job, Model, Recipe, RecipeName};

/// Columns of the measurement CSV, in the order of `published-dev.csv`.
pub const COLUMNS: [&str; 27] = [
    "id",
    "source",
    "model",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "seq",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "cp",
    "ep",
    "dp",
    "vpp",
    "mbs",
    "gbs",
    "recompute",
    "sp",
    "measured_tflops_per_gpu",
    "measured_mfu",
    "measured_step_s",
    "measured_mem_gb",
    "notes",
];

/// One measured configuration as written in the CSV. `None` = empty cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredRow {
    /// Line in the file (1-based, header = 1).
    pub line: usize,
    /// Row id, e.g. `NAR21-T1-03`.
    pub id: String,
    /// Where the numbers come from.
    pub source: String,
    /// Model name as written (may carry a size such as `GPT 1.7B`).
    pub model: String,
    /// Transformer layers L.
    pub layers: Option<u32>,
    /// Hidden size h.
    pub hidden: u64,
    /// Attention heads a.
    pub heads: Option<u32>,
    /// Key/value heads.
    pub kv_heads: Option<u32>,
    /// FFN width.
    pub ffn: Option<u64>,
    /// Vocabulary as written (`51200`, `~250000`).
    pub vocab: String,
    /// Sequence length s.
    pub seq: u64,
    /// GPU description, e.g. `A100-SXM4-80GB (DGX A100, …)`.
    pub gpu: String,
    /// GPUs used N.
    pub num_gpus: u64,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Pipeline-parallel size.
    pub pp: u32,
    /// Context-parallel size.
    pub cp: Option<u32>,
    /// Expert-parallel size.
    pub ep: Option<u32>,
    /// Data-parallel size.
    pub dp: u32,
    /// Virtual stages per pipeline rank.
    pub vpp: Option<u32>,
    /// Micro-batch size.
    pub mbs: Option<u32>,
    /// Global batch, sequences.
    pub gbs: u64,
    /// `full`, `selective`, `none` or empty.
    pub recompute: Option<String>,
    /// `yes`, `no` or empty.
    pub sp: Option<String>,
    /// Measured TFLOP/s per GPU (in the row's convention).
    pub measured_tflops_per_gpu: Option<f64>,
    /// Measured MFU (fraction).
    pub measured_mfu: Option<f64>,
    /// Measured step time, seconds.
    pub measured_step_s: Option<f64>,
    /// Measured peak memory per GPU (nvidia-smi), GB as logged.
    pub measured_mem_gb: Option<f64>,
    /// How each value was obtained.
    pub notes: String,
}

impl MeasuredRow {
    /// Source family: the id up to the first `-` (`NAR21`, `KOR22`, `MEG24`,
    /// `BLOOMPQ`), or `OTHER`.
    pub fn family(&self) -> Family {
        Family::of(&self.id)
    }

    /// Whether the notes say the run did not fit (`did not fit`, or
    /// `OOM on`; a note such as "too close to OOM" is not an OOM).
    pub fn out_of_memory(&self) -> bool {
        self.notes.contains("did not fit") || self.notes.contains("OOM on")
    }
}

struct Cells<'a> {
    file: &'a Path,
    line: usize,
    id: String,
    rec: &'a csv::StringRecord,
    index: &'a BTreeMap<&'static str, usize>,
}

impl Cells<'_> {
    fn text(&self, col: &'static str) -> &str {
        self.index
            .get(col)
            .and_then(|i| self.rec.get(*i))
            .unwrap_or("")
            .trim()
    }

    fn err(&self, col: &str, problem: String) -> InputError {
        InputError::field(
            self.file,
            col,
            format!("line {} (row `{}`): {}", self.line, self.id, problem),
        )
    }

    fn opt<T: std::str::FromStr>(
        &self,
        col: &'static str,
        what: &str,
    ) -> Result<Option<T>, InputError> {
        let v = self.text(col);
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<T>()
            .map(Some)
            .map_err(|_| self.err(col, format!("`{v}` is not {what}")))
    }

    fn req<T: std::str::FromStr>(&self, col: &'static str, what: &str) -> Result<T, InputError> {
        self.opt(col, what)?
            .ok_or_else(|| self.err(col, "is empty but required".into()))
    }

    fn opt_text(&self, col: &'static str) -> Option<String> {
        let v = self.text(col);
        if v.is_empty() {
            None
        } else {
            Some(v.to_string())
        }
    }
}

/// Parse a measurement CSV.
///
/// # Errors
/// [`InputError::Syntax`] for malformed CSV; [`InputError::Field`] naming
/// the file, the column and the line for a missing column, an empty
/// required cell (`id`, `hidden`, `seq`, `num_gpus`, `tp`, `pp`, `dp`,
/// `gbs`, `gpu`, `vocab`) or a cell that is not a number.
pub fn read_csv(text: &str, file: &Path) -> Result<Vec<MeasuredRow>, InputError> {
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(false)
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| InputError::Syntax {
            file: file.to_path_buf(),
            detail: e.to_string(),
        })?
        .clone();
    let mut index = BTreeMap::new();
    for col in COLUMNS {
        match headers.iter().position(|h| h.trim() == col) {
            Some(i) => {
                index.insert(col, i);
            }
            None => {
                return Err(InputError::field(
                    file,
                    col,
                    format!(
                        "missing column; the header must name all of: {}",
                        COLUMNS.join(",")
                    ),
                ));
            }
        }
    }
    let mut rows = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| InputError::Syntax {
            file: file.to_path_buf(),
            detail: e.to_string(),
        })?;
        let line = rec.position().map(|p| p.line() as usize).unwrap_or(i + 2);
        let id = index
            .get("id")
            .and_then(|j| rec.get(*j))
            .unwrap_or("")
            .trim()
            .to_string();
        let c = Cells {
            file,
            line,
            id: id.clone(),
            rec: &rec,
            index: &index,
        };
        if id.is_empty() {
            return Err(c.err("id", "is empty but required".into()));
        }
        let text_req = |col: &'static str| -> Result<String, InputError> {
            c.opt_text(col)
                .ok_or_else(|| c.err(col, "is empty but required".into()))
        };
        let frac = "a number";
        let whole = "a whole number";
        let row = MeasuredRow {
            line,
            id: id.clone(),
            source: c.text("source").to_string(),
            model: c.text("model").to_string(),
            layers: c.opt("layers", whole)?,
            hidden: c.req("hidden", whole)?,
            heads: c.opt("heads", whole)?,
            kv_heads: c.opt("kv_heads", whole)?,
            ffn: c.opt("ffn", whole)?,
            vocab: text_req("vocab")?,
            seq: c.req("seq", whole)?,
            gpu: text_req("gpu")?,
            num_gpus: c.req("num_gpus", whole)?,
            tp: c.req("tp", whole)?,
            pp: c.req("pp", whole)?,
            cp: c.opt("cp", whole)?,
            ep: c.opt("ep", whole)?,
            dp: c.req("dp", whole)?,
            vpp: c.opt("vpp", whole)?,
            mbs: c.opt("mbs", whole)?,
            gbs: c.req("gbs", whole)?,
            recompute: c.opt_text("recompute"),
            sp: c.opt_text("sp"),
            measured_tflops_per_gpu: c.opt("measured_tflops_per_gpu", frac)?,
            measured_mfu: c.opt("measured_mfu", frac)?,
            measured_step_s: c.opt("measured_step_s", frac)?,
            measured_mem_gb: c.opt("measured_mem_gb", frac)?,
            notes: c.text("notes").to_string(),
        };
        for (col, v) in [
            ("measured_tflops_per_gpu", row.measured_tflops_per_gpu),
            ("measured_mfu", row.measured_mfu),
            ("measured_step_s", row.measured_step_s),
            ("measured_mem_gb", row.measured_mem_gb),
        ] {
            if let Some(x) = v
                && !(x.is_finite() && x > 0.0)
            {
                return Err(c.err(col, format!("must be a positive number, found {x}")));
            }
        }
        if let Some(m) = row.measured_mfu
            && m > 1.0
        {
            return Err(c.err(
                "measured_mfu",
                format!("is a fraction of peak, at most 1, found {m}"),
            ));
        }
        for (col, v) in [
            ("layers", row.layers.map(|x: u32| x as u64)),
            ("heads", row.heads.map(|x: u32| x as u64)),
            ("kv_heads", row.kv_heads.map(|x: u32| x as u64)),
            ("ffn", row.ffn),
            ("cp", row.cp.map(|x: u32| x as u64)),
            ("ep", row.ep.map(|x: u32| x as u64)),
            ("vpp", row.vpp.map(|x: u32| x as u64)),
            ("mbs", row.mbs.map(|x: u32| x as u64)),
        ] {
            if v == Some(0) {
                return Err(c.err(col, "must be positive, found 0".into()));
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Source family of a row, from its id prefix. The family fixes the
/// software of the measurement (framework version and its switches), which
/// the CSV does not spell out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Family {
    /// Narayanan et al. 2021, Table 1 (Megatron-LM, April 2021).
    Nar21,
    /// Korthikanti et al. 2022 (Megatron-LM, 2022).
    Kor22,
    /// Megatron-Core r0.8.0 README table (2024).
    Meg24,
    /// BLOOM pre-training sweeps (Megatron-DeepSpeed, Feb 2022).
    Bloom,
    /// Anything else: a user's own runs, current Megatron-LM defaults.
    Other,
}

impl Family {
    /// Family of a row id.
    pub fn of(id: &str) -> Family {
        let p = id.split('-').next().unwrap_or("").to_ascii_uppercase();
        match p.as_str() {
            "NAR21" => Family::Nar21,
            "KOR22" => Family::Kor22,
            "MEG24" => Family::Meg24,
            "BLOOMPQ" => Family::Bloom,
            _ => Family::Other,
        }
    }

    /// Short code as printed.
    pub fn code(self) -> &'static str {
        match self {
            Family::Nar21 => "NAR21",
            Family::Kor22 => "KOR22",
            Family::Meg24 => "MEG24",
            Family::Bloom => "BLOOMPQ",
            Family::Other => "OTHER",
        }
    }
}

/// How a row counts FLOPs for its TFLOP/s figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FlopConvention {
    /// Narayanan et al. 2021 Eq. 3, recompute included (NAR21, BLOOM).
    NarayananEq3,
    /// Korthikanti et al. 2022 model FLOPs `72·B·s·L·h²·(1 + s/6h + V/12Lh)`.
    Korthikanti,
    /// Megatron `num_floating_point_operations` (model FLOPs, causal halved).
    Megatron,
}

impl FlopConvention {
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            FlopConvention::NarayananEq3 => "Narayanan Eq.3 (hardware, recompute counted)",
            FlopConvention::Korthikanti => "Korthikanti model FLOPs (72·B·s·L·h²·(1+s/6h+V/12Lh))",
            FlopConvention::Megatron => "Megatron num_floating_point_operations (model FLOPs)",
        }
    }

    /// FLOPs of one step under this convention.
    pub fn flops(self, model: &Model, job: &Job, vocab_padded: f64) -> f64 {
        let a = &model.architecture;
        let (l, h, b, s) = (
            a.layers as f64,
            a.hidden as f64,
            job.global_batch as f64,
            job.seq_len as f64,
        );
        match self {
            FlopConvention::NarayananEq3 => compute::narayanan_eq3_flops(l, h, vocab_padded, b, s),
            FlopConvention::Korthikanti => {
                72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + vocab_padded / (12.0 * l * h))
            }
            FlopConvention::Megatron => compute::model_flops_per_step(model, b, s),
        }
    }
}

/// A row made ready for the cost model.
#[derive(Debug, Clone)]
pub struct Case {
    /// The row.
    pub row: MeasuredRow,
    /// Source family.
    pub family: Family,
    /// Model built from the columns.
    pub model: Model,
    /// GPU profile (with the overlay applied).
    pub gpu: Gpu,
    /// Cluster with as many nodes as the row needs.
    pub cluster: Cluster,
    /// Job.
    pub job: Job,
    /// Layout.
    pub layout: Layout,
    /// FLOP convention of the row's TFLOP/s.
    pub convention: FlopConvention,
    /// Padded vocabulary used in the FLOP formulas.
    pub vocab_padded: f64,
    /// Every assumption made for a cell the row left empty.
    pub assumptions: Vec<String>,
}

impl Case {
    /// The cost-model problem of this case.
    pub fn problem(&self) -> Problem<'_> {
        Problem::new(
            &self.model,
            &self.gpu,
            &self.cluster,
            &self.job,
            self.row.num_gpus,
        )
    }

    /// FLOPs of one step in the row's convention.
    pub fn flops(&self) -> f64 {
        self.convention
            .flops(&self.model, &self.job, self.vocab_padded)
    }

    /// Measured step time, seconds, and whether it was derived from a
    /// TFLOP/s or MFU figure through the row's FLOP convention.
    pub fn measured_step(&self) -> Option<(f64, bool)> {
        if let Some(t) = self.row.measured_step_s {
            return Some((t, false));
        }
        self.measured_tflops()
            .map(|(tf, _)| (self.flops() / (tf * 1e12 * self.row.num_gpus as f64), true))
    }

    /// Measured TFLOP/s per GPU in the row's convention, and whether it was
    /// derived (from MFU × peak, or from the step time).
    pub fn measured_tflops(&self) -> Option<(f64, bool)> {
        if let Some(t) = self.row.measured_tflops_per_gpu {
            return Some((t, false));
        }
        if let Some(m) = self.row.measured_mfu {
            return Some((m * self.gpu.peak_tflops_bf16, true));
        }
        None
    }
}

/// The optional calibration overlay: efficiencies that replace the shipped
/// GPU and cluster values (see [`crate::calibrate::Overlay`]).
pub type OverlayRef<'a> = Option<&'a crate::calibrate::Overlay>;

/// Parse a size such as `1.7B`, `530B`, `1T` in `text`, parameters.
pub fn size_in(text: &str) -> Option<f64> {
    let bytes: Vec<char> = text.chars().collect();
    let mut best = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == '.') {
                i += 1;
            }
            if i < bytes.len() {
                let unit = match bytes[i] {
                    'B' => Some(1e9),
                    'T' => Some(1e12),
                    'M' => Some(1e6),
                    _ => None,
                };
                let next_alpha = bytes.get(i + 1).is_some_and(|c| c.is_ascii_alphanumeric());
                if let (Some(u), false) = (unit, next_alpha) {
                    let num: String = bytes[start..i].iter().collect();
                    if let Ok(v) = num.parse::<f64>() {
                        best = Some(v * u);
                        break;
                    }
                }
            }
        } else {
            i += 1;
        }
    }
    best
}

/// The integer after `key` in `text` (e.g. `NHEADS=64`).
fn number_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// GPU profile named by a row's `gpu` text.
fn gpu_name(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    if t.contains("pcie") {
        return None;
    }
    if t.contains("a100") {
        return Some(if t.contains("40g") {
            "a100-40g"
        } else {
            "a100-80g"
        });
    }
    for (key, name) in [
        ("h100", "h100-sxm"),
        ("h800", "h800"),
        ("h200", "h200"),
        ("b200", "b200"),
    ] {
        if t.contains(key) {
            return Some(name);
        }
    }
    None
}

/// The shipped cluster profile whose nodes a row ran on.
fn cluster_name(row: &MeasuredRow, gpu: &str, cat: &Catalog) -> Option<String> {
    if row.gpu.contains("Jean Zay") {
        return Some("jean-zay-a100".into());
    }
    let preferred = match gpu {
        "a100-80g" => Some("dgx-a100-3072"),
        "h100-sxm" => Some("dgx-h100-6144"),
        "h800" => Some("h800-2048"),
        _ => None,
    };
    if let Some(p) = preferred
        && cat.cluster(p).is_ok()
    {
        return Some(p.into());
    }
    cat.clusters
        .iter()
        .filter(|c| c.gpu == gpu)
        .max_by_key(|c| c.total_gpus())
        .map(|c| c.name.clone())
}

/// Build the case of `row`, or say why it cannot be predicted.
///
/// # Errors
/// A sentence naming what is missing or inconsistent (the row is then
/// listed as skipped).
pub fn build_case(row: &MeasuredRow, cat: &Catalog, overlay: OverlayRef) -> Result<Case, String> {
    let fam = row.family();
    let mut assume: Vec<String> = Vec::new();
    let notes = &row.notes;

    // --- Hardware.
    let gname = gpu_name(&row.gpu)
        .ok_or_else(|| format!("GPU `{}` matches no shipped GPU profile", row.gpu))?;
    let mut gpu = cat.gpu(gname).map_err(|e| e.to_string())?.clone();
    let cname = cluster_name(row, gname, cat)
        .ok_or_else(|| format!("no shipped cluster has {gname} GPUs"))?;
    let mut cluster = cat.cluster(&cname).map_err(|e| e.to_string())?.clone();
    cluster.nodes = (row.num_gpus.div_ceil(cluster.gpus_per_node as u64)).max(1) as u32;
    assume.push(format!(
        "cluster: {} nodes of the `{}` profile ({} GPUs/node)",
        cluster.nodes, cname, cluster.gpus_per_node
    ));
    if let Some(o) = overlay {
        if o.gpu != gpu.name {
            return Err(format!(
                "the overlay is for GPU `{}`, this row runs on `{}`",
                o.gpu, gpu.name
            ));
        }
        o.apply_gpu(&mut gpu);
        o.apply_cluster(&mut cluster);
    }

    // --- Architecture.
    let h = row.hidden;
    if h == 0 || row.seq == 0 || row.gbs == 0 || row.num_gpus == 0 {
        return Err("hidden, seq, gbs and num_gpus must be positive".into());
    }
    let heads = match row.heads {
        Some(a) => a,
        None => match number_after(notes, "NHEADS=") {
            Some(a) => {
                assume.push(format!("heads: {a} (notes: NHEADS={a})"));
                a as u32
            }
            None => return Err("heads not stated".into()),
        },
    };
    if heads == 0 || !h.is_multiple_of(heads as u64) {
        return Err(format!("hidden {h} is not divisible by {heads} heads"));
    }
    let kv_heads = row.kv_heads.unwrap_or_else(|| {
        assume.push(format!("kv_heads: {heads} (multi-head attention)"));
        heads
    });
    let ffn = row.ffn.unwrap_or_else(|| {
        assume.push(format!("ffn: 4h = {} (GPT)", 4 * h));
        4 * h
    });
    let vocab: u64 = match row.vocab.trim_start_matches('~').parse::<u64>() {
        Ok(v) if row.vocab.starts_with('~') && fam == Family::Bloom => {
            // BLOOM's tokenizer has 250,680 entries, padded to 250,880
            // (bigscience/bloom config.json vocab_size).
            assume.push(format!(
                "vocab: 250880 for `{}` (BLOOM tokenizer padded, bigscience/bloom config.json)",
                row.vocab
            ));
            let _ = v;
            250_880
        }
        Ok(v) => {
            if row.vocab.starts_with('~') {
                assume.push(format!("vocab: {v} for `{}`", row.vocab));
            }
            v
        }
        Err(_) => return Err(format!("vocab `{}` is not a number", row.vocab)),
    };
    // Family conventions (architecture).
    let (position, dropout, bias) = match fam {
        // BLOOM: ALiBi, no dropout in the tr11 recipe (bigscience tr11-176B-ml).
        Family::Bloom => (PositionEmbedding::Alibi, false, true),
        // GPT in Megatron-LM: learned positions, dropout 0.1, biases (defaults).
        _ => (PositionEmbedding::Learned, true, true),
    };
    let arch = Architecture {
        layers: row.layers.unwrap_or(1),
        hidden: h,
        heads,
        kv_heads,
        head_dim: None,
        ffn,
        gated_mlp: false,
        vocab,
        tied_embeddings: true,
        norm: Norm::Layernorm,
        position_embedding: position,
        max_seq: row.seq,
        linear_bias: bias,
        dropout,
        rope_theta: None,
    };
    if heads % kv_heads.max(1) != 0 {
        return Err(format!(
            "{heads} heads are not a multiple of {kv_heads} kv heads"
        ));
    }
    let mut model = Model {
        name: row.id.clone(),
        aliases: vec![],
        source: row.source.clone(),
        known_params: 1.0,
        known_active_params: None,
        architecture: arch,
        moe: None,
        mla: None,
        defaults: JobDefaults {
            seq_len: row.seq,
            global_batch: row.gbs,
        },
    };
    let stated = number_after(notes, "Size col='")
        .map(|b| b as f64 * 1e9)
        .or_else(|| size_in(&row.model));
    match row.layers {
        Some(_) => {
            // Tied or untied: whichever matches the stated size.
            if let Some(p) = stated {
                let tied = model.total_params();
                model.architecture.tied_embeddings = false;
                let untied = model.total_params();
                let use_untied = (untied - p).abs() < (tied - p).abs();
                model.architecture.tied_embeddings = !use_untied;
                assume.push(format!(
                    "embeddings {}: {:.2}B params tied vs {:.2}B untied against the stated {:.1}B",
                    if use_untied { "untied" } else { "tied" },
                    tied / 1e9,
                    untied / 1e9,
                    p / 1e9
                ));
            } else {
                assume.push("embeddings tied (Megatron default)".into());
            }
        }
        None => {
            let p = stated.ok_or("layers not stated and no size to derive them from")?;
            // P = L·(per-layer params) + embedding, tied.
            model.architecture.layers = 1;
            let one = model.dense_layer_params();
            let rest = model.total_params() - one;
            let l = ((p - rest) / one).round().max(1.0) as u32;
            model.architecture.layers = l;
            assume.push(format!(
                "layers: {l} from the stated size {:.0}B (tied embeddings, (P − V·h)/params per layer rounded)",
                p / 1e9
            ));
        }
    }
    model.known_params = model.total_params();
    let layers = model.architecture.layers;

    // --- Job.
    let mut job = Job::new(row.gbs, row.seq);
    let has = |flag: &str| notes.contains(flag);
    match fam {
        Family::Nar21 | Family::Kor22 => {
            // Megatron-LM 2021/22: fp16 with fp16 gradients all-reduced after
            // backward (no overlap), no distributed optimizer, fused softmax
            // instead of flash attention (FlashAttention appeared May 2022).
            job.recipe = Recipe::ADAM_16B;
            job.recipe_name = RecipeName::Adam16b;
            job.flash_attention = false;
            job.overlap_grad_reduce = false;
            job.overlap_param_gather = false;
            job.tp_comm_overlap = false;
            // The asynchronous backward TP all-reduce came to Megatron-LM after
            // the April 2021 release that Table 1 of Narayanan et al. used.
            job.async_tp_backward = fam == Family::Kor22;
            assume.push(format!(
                "software: Megatron-LM {} — fp16, no flash attention, no DP overlap, no distributed optimizer, async backward TP all-reduce {}",
                if fam == Family::Kor22 { "2022" } else { "April 2021" },
                job.async_tp_backward
            ));
        }
        Family::Bloom => {
            // Megatron-DeepSpeed: ZeRO-1 over DP, fp16 (2+2 bytes + 12/D) or,
            // from 02-28, the BF16Optimizer that adds fp32 gradient
            // accumulation (+4 bytes per parameter, unsharded).
            let bf16opt = has("BF16Optimizer");
            job.recipe = Recipe {
                weight_bytes: 2.0,
                grad_bytes: if bf16opt { 6.0 } else { 2.0 },
                optimizer_bytes: 12.0,
                grad_reduce_bytes: 2.0,
            };
            job.recipe_name = RecipeName::Adam16b;
            job.flash_attention = false;
            job.overlap_grad_reduce = false;
            job.overlap_param_gather = false;
            job.tp_comm_overlap = false;
            job.async_tp_backward = false;
            assume.push(format!(
                "software: Megatron-DeepSpeed — ZeRO-1, {} bytes/param unsharded + 12/D, no flash attention, no DP overlap, no dropout",
                if bf16opt { "2+2+4 (BF16Optimizer)" } else { "2+2 (fp16)" }
            ));
        }
        Family::Meg24 | Family::Other => {
            job.overlap_grad_reduce = has("--overlap-grad-reduce") || fam == Family::Other;
            job.overlap_param_gather = has("--overlap-param-gather") || fam == Family::Other;
            job.tp_comm_overlap = has("--tp-comm-overlap");
            job.flash_attention = !has("no flash");
            assume.push(format!(
                "software: Megatron-Core — bf16 with fp32 main grads, flash attention, distributed optimizer, overlap-grad-reduce {}, overlap-param-gather {}, tp-comm-overlap {}",
                job.overlap_grad_reduce, job.overlap_param_gather, job.tp_comm_overlap
            ));
        }
    }

    // --- Layout.
    let cp = row.cp.unwrap_or(1);
    let ep = row.ep.unwrap_or(1);
    if ep != 1 {
        return Err("expert parallelism: the dense validation path does not model MoE rows".into());
    }
    if [row.tp, row.pp, row.dp, cp].contains(&0) {
        return Err("tp, pp, dp and cp must be at least 1".into());
    }
    let world = row.dp as u64 * row.tp as u64 * row.pp as u64 * cp as u64;
    if world != row.num_gpus {
        return Err(format!(
            "dp·tp·pp·cp = {world} differs from num_gpus {}",
            row.num_gpus
        ));
    }
    let vpp = row.vpp.unwrap_or_else(|| {
        if row.pp > 1 {
            assume.push("vpp: 1 (not stated; Megatron default, no interleaving)".into());
        }
        1
    });
    let mbs = row.mbs.unwrap_or_else(|| {
        assume.push("mbs: 1 (not stated)".into());
        1
    });
    let recompute = match row.recompute.as_deref() {
        Some("full") => Recompute::Full,
        Some("selective") => Recompute::Selective,
        Some("none") => Recompute::None,
        None => {
            assume.push("recompute: none (not stated; Megatron default)".into());
            Recompute::None
        }
        Some(other) => {
            return Err(format!(
                "recompute `{other}` is not full, selective or none"
            ));
        }
    };
    let sp = match row.sp.as_deref() {
        Some("yes") => true,
        Some("no") => false,
        None => {
            // --tp-comm-overlap requires sequence parallelism (Megatron).
            let on = row.tp > 1 && job.tp_comm_overlap;
            assume.push(format!(
                "sp: {} (not stated; {})",
                if on { "on" } else { "off" },
                if on {
                    "--tp-comm-overlap requires it"
                } else {
                    "Megatron default"
                }
            ));
            on
        }
        Some(other) => return Err(format!("sp `{other}` is not yes or no")),
    };
    let zero = match fam {
        Family::Nar21 | Family::Kor22 => 0,
        Family::Bloom => 1,
        _ => {
            if has("--use-distributed-optimizer")
                || job.overlap_param_gather
                || fam == Family::Other
            {
                1
            } else {
                0
            }
        }
    };
    if mbs == 0 || vpp == 0 {
        return Err("mbs and vpp must be at least 1".into());
    }
    if !row.gbs.is_multiple_of(row.dp as u64 * mbs as u64) {
        assume.push(format!(
            "gbs {} is not a multiple of dp·mbs = {}: m rounded down to {}",
            row.gbs,
            row.dp * mbs,
            row.gbs / (row.dp as u64 * mbs as u64)
        ));
    }
    // Megatron-DeepSpeed `--pp-partition-method type:transformer|embedding`:
    // the embedding takes a layer slot on the first and on the last stage.
    let split = if fam == Family::Bloom && has("type:transformer|embedding") && row.pp > 1 {
        let slots = layers + 2;
        let p = row.pp;
        let mut s: Vec<u32> = (0..p)
            .map(|i| slots / p + u32::from(i < slots % p))
            .collect();
        s[0] = s[0].saturating_sub(1);
        let last = s.len() - 1;
        s[last] = s[last].saturating_sub(1);
        if s.iter().sum::<u32>() != layers || s.contains(&0) {
            None
        } else {
            assume.push(format!(
                "split: {:?} (embedding takes a slot on the first and last stage)",
                s
            ));
            Some(s)
        }
    } else {
        None
    };
    if !layers.is_multiple_of(row.pp * vpp) && split.is_none() {
        assume.push(format!(
            "{layers} layers over {} stages: uneven, the first stages take one more",
            row.pp * vpp
        ));
    }
    let layout = Layout {
        vpp,
        micro_batch: mbs,
        recompute,
        zero,
        sp,
        split,
        ..Layout::dense(row.dp, row.tp, row.pp, cp)
    };
    let convention = if fam == Family::Nar21 || notes.contains("Eq.3") || fam == Family::Bloom {
        FlopConvention::NarayananEq3
    } else if fam == Family::Kor22 {
        FlopConvention::Korthikanti
    } else {
        FlopConvention::Megatron
    };
    if convention == FlopConvention::NarayananEq3 && recompute != Recompute::Full {
        return Err("Eq. 3 TFLOP/s assume full recompute, but the row says otherwise".into());
    }
    let vocab_padded = crate::cost::layer::padded_vocab(vocab, row.tp) as f64;
    Ok(Case {
        row: row.clone(),
        family: fam,
        model,
        gpu,
        cluster,
        job,
        layout,
        convention,
        vocab_padded,
        assumptions: assume,
    })
}

/// Measured against predicted, with the signed relative error
/// `predicted/measured − 1`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metric {
    /// Measured (or derived from another measured figure).
    pub measured: f64,
    /// Predicted.
    pub predicted: f64,
    /// `predicted / measured − 1`.
    pub error: f64,
    /// The measured figure was derived from another one (see [`Case`]).
    pub derived: bool,
}

impl Metric {
    fn new(measured: f64, predicted: f64, derived: bool) -> Metric {
        Metric {
            measured,
            predicted,
            error: predicted / measured - 1.0,
            derived,
        }
    }
}

/// The comparison of one row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    /// Row id.
    pub id: String,
    /// Source family code.
    pub source: &'static str,
    /// Layout priced (short form).
    pub layout: String,
    /// FLOP convention of the TFLOP/s columns.
    pub convention: &'static str,
    /// TFLOP/s per GPU in the row's convention.
    pub tflops: Option<Metric>,
    /// Step time, seconds.
    pub step_s: Option<Metric>,
    /// Peak memory, GiB: measured nvidia-smi vs predicted allocated peak
    /// of the worst rank plus the GPU's reserve.
    pub memory_gib: Option<Metric>,
    /// The headline throughput error: TFLOP/s when the row measured
    /// TFLOP/s or MFU, else step time.
    pub throughput_error: Option<f64>,
    /// The row says the run did not fit in memory.
    pub out_of_memory: bool,
    /// The cost model says the worst rank fits.
    pub predicted_fits: bool,
    /// Predicted allocated peak of the worst rank, GiB.
    pub predicted_peak_gib: f64,
    /// Predicted nvidia-smi figure, GiB ([`nvidia_smi_gib`]).
    pub predicted_smi_gib: f64,
    /// Predicted MFU (Megatron convention).
    pub predicted_mfu: f64,
    /// Predicted step-time breakdown, seconds.
    pub time: cost::TimeBreakdown,
    /// Predicted memory of the worst rank, bytes.
    pub memory: cost::MemoryBreakdown,
    /// Assumptions made for this row.
    pub assumptions: Vec<String>,
}

/// A row that could not be predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// Row id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// Error statistics of one metric over one source (or `all`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SummaryLine {
    /// `throughput`, `tflops`, `step` or `memory`.
    pub metric: &'static str,
    /// Source family code, or `all`.
    pub source: String,
    /// Rows compared.
    pub count: usize,
    /// Median of |error|.
    pub median_abs: f64,
    /// Largest |error|.
    pub max_abs: f64,
    /// Row with the largest |error|.
    pub worst: String,
}

/// Fit verdicts of the memory rows of one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitLine {
    /// Source family code.
    pub source: String,
    /// Rows that ran (have a step time, TFLOP/s or memory).
    pub ran: usize,
    /// Of those, predicted to fit.
    pub ran_predicted_fit: usize,
    /// Rows marked out of memory.
    pub oom: usize,
    /// Of those, predicted not to fit.
    pub oom_predicted_not_fit: usize,
}

/// Everything `validate` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport {
    /// One line per predicted row.
    pub rows: Vec<RowResult>,
    /// Per metric and source.
    pub summary: Vec<SummaryLine>,
    /// Fit verdicts per source.
    pub fit: Vec<FitLine>,
    /// Rows not predicted, with reasons.
    pub skipped: Vec<Skipped>,
    /// Conventions used for the comparison.
    pub conventions: Vec<String>,
}

/// Median of `xs` (empty → 0).
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// nvidia-smi model of the Megatron-DeepSpeed rows (BLOOMPQ, PyTorch 1.11
/// caching allocator, Feb 2022): `smi = ALLOCATOR_FACTOR_DS · allocated +
/// CONTEXT_GIB_DS`. The factor stands for the allocator's cached, fragmented
/// blocks and DeepSpeed buffers the cost model does not itemise (ZeRO-1
/// reduce and all-gather buckets, the fp32 gradient partition); the constant
/// for the CUDA context and NCCL. Both are a least-squares fit on four named
/// rows only: BLOOMPQ-005, BLOOMPQ-031, BLOOMPQ-079, BLOOMPQ-119 (27 to 79
/// GB measured); every other BLOOMPQ row is a check.
pub const ALLOCATOR_FACTOR_DS: f64 = 1.26;

/// See [`ALLOCATOR_FACTOR_DS`], GiB.
pub const CONTEXT_GIB_DS: f64 = 5.5;

/// Predicted nvidia-smi GiB for `allocated_gib` on `family`, and whether
/// the run fits on a GPU with `memory_gib` (and `reserve_gib` for current
/// software, whose test is the same as `search`'s: allocated ≤ memory −
/// reserve).
pub fn nvidia_smi_gib(
    family: Family,
    allocated_gib: f64,
    memory_gib: f64,
    reserve_gib: f64,
) -> (f64, bool) {
    match family {
        Family::Bloom => {
            let smi = ALLOCATOR_FACTOR_DS * allocated_gib + CONTEXT_GIB_DS;
            (smi, smi <= memory_gib)
        }
        _ => (
            allocated_gib + reserve_gib,
            allocated_gib <= memory_gib - reserve_gib,
        ),
    }
}

/// Largest disagreement between a row's measured TFLOP/s and its measured
/// step time (through the row's FLOP convention) before the step time is
/// set aside (15%: the BLOOM log's pre-02-21 estimator under-reports by ~3%).
pub const CONSISTENCY: f64 = 0.15;

/// Price one case and compare.
pub fn compare(case: &Case) -> (RowResult, Evaluation) {
    let pr = case.problem();
    let e = cost::evaluate(&pr, &case.layout);
    let n = case.row.num_gpus as f64;
    let flops = case.flops();
    let pred_step = e.time.step;
    let pred_tflops = flops / pred_step / n / 1e12;
    let tflops = case
        .measured_tflops()
        .map(|(m, d)| Metric::new(m, pred_tflops, d))
        .or_else(|| {
            case.row
                .measured_step_s
                .map(|t| Metric::new(flops / t / n / 1e12, pred_tflops, true))
        });
    let mut assumptions = case.assumptions.clone();
    let mut step = case
        .measured_step()
        .map(|(m, d)| Metric::new(m, pred_step, d));
    // A row that gives both TFLOP/s and step time must agree with itself
    // through its FLOP convention; if not, one of the two was logged for
    // another setting (e.g. a different batch) and the step time is not used.
    if let (Some(tf), Some(t)) = (case.row.measured_tflops_per_gpu, case.row.measured_step_s) {
        let implied = flops / t / n / 1e12;
        if (implied / tf - 1.0).abs() > CONSISTENCY {
            step = None;
            assumptions.push(format!(
                "measured step {t} s implies {implied:.1} TFLOP/s, not the measured {tf}: step time not compared"
            ));
        }
    }
    let (smi, fits) = nvidia_smi_gib(
        case.family,
        e.peak_bytes / GIB,
        case.gpu.memory_gib,
        case.gpu.reserve_gib,
    );
    let memory = case.row.measured_mem_gb.map(|m| Metric::new(m, smi, false));
    let throughput_error = if case.measured_tflops().is_some() {
        tflops.map(|m| m.error)
    } else {
        step.map(|m| m.error)
    };
    let r = RowResult {
        id: case.row.id.clone(),
        source: case.family.code(),
        layout: case.layout.short(),
        convention: case.convention.name(),
        tflops,
        step_s: step,
        memory_gib: memory,
        throughput_error,
        out_of_memory: case.row.out_of_memory(),
        predicted_fits: fits,
        predicted_peak_gib: e.peak_bytes / GIB,
        predicted_smi_gib: smi,
        predicted_mfu: e.mfu,
        time: e.time,
        memory: e.memory,
        assumptions,
    };
    (r, e)
}

/// Validate every row of `rows`.
pub fn validate(rows: &[MeasuredRow], cat: &Catalog, overlay: OverlayRef) -> ValidationReport {
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    for row in rows {
        match build_case(row, cat, overlay) {
            Ok(case) => {
                let (r, _) = compare(&case);
                if r.tflops.is_none()
                    && r.step_s.is_none()
                    && r.memory_gib.is_none()
                    && !r.out_of_memory
                {
                    skipped.push(Skipped {
                        id: row.id.clone(),
                        reason: "nothing measured (no TFLOP/s, MFU, step time or memory, not out of memory)".into(),
                    });
                    continue;
                }
                results.push(r);
            }
            Err(reason) => skipped.push(Skipped {
                id: row.id.clone(),
                reason,
            }),
        }
    }
    let summary = summarize(&results);
    let fit = fit_lines(&results);
    ValidationReport {
        rows: results,
        summary,
        fit,
        skipped,
        conventions: vec![
            "error = predicted / measured − 1".into(),
            "throughput: TFLOP/s per GPU in the row's FLOP convention where the row measured TFLOP/s or MFU, else step time".into(),
            "TFLOP/s conventions: NAR21 and BLOOMPQ Narayanan Eq. 3 (recompute counted); KOR22 Korthikanti model FLOPs; others Megatron num_floating_point_operations".into(),
            "memory: measured nvidia-smi GB read as GiB; predicted nvidia-smi = allocated peak of the worst rank + the GPU profile's reserve_gib, except Megatron-DeepSpeed rows (BLOOMPQ): 1.26 × allocated + 5.5 GiB (allocator cache and DeepSpeed buffers; fitted on BLOOMPQ-005/031/079/119 only)".into(),
            "fit: allocated ≤ memory − reserve (as search); BLOOMPQ: predicted nvidia-smi ≤ device memory".into(),
            "derived (*): the measured figure is computed from another measured one through the FLOP convention".into(),
        ],
    }
}

fn stats(metric: &'static str, source: String, errs: &[(String, f64)]) -> Option<SummaryLine> {
    if errs.is_empty() {
        return None;
    }
    let abs: Vec<f64> = errs.iter().map(|(_, e)| e.abs()).collect();
    let (worst, max) = errs
        .iter()
        .map(|(id, e)| (id.clone(), e.abs()))
        .fold((String::new(), -1.0), |b, x| if x.1 > b.1 { x } else { b });
    Some(SummaryLine {
        metric,
        source,
        count: errs.len(),
        median_abs: median(&abs),
        max_abs: max,
        worst,
    })
}

/// Per-metric, per-source statistics of `rows`.
pub fn summarize(rows: &[RowResult]) -> Vec<SummaryLine> {
    let mut out = Vec::new();
    let mut sources: Vec<&'static str> = rows.iter().map(|r| r.source).collect();
    sources.sort();
    sources.dedup();
    type Pick = fn(&RowResult) -> Option<f64>;
    let metrics: [(&'static str, Pick); 3] = [
        ("throughput", |r| r.throughput_error),
        ("step", |r| r.step_s.map(|m| m.error)),
        ("memory", |r| r.memory_gib.map(|m| m.error)),
    ];
    for (name, pick) in metrics {
        for s in &sources {
            let errs: Vec<(String, f64)> = rows
                .iter()
                .filter(|r| r.source == *s)
                .filter_map(|r| pick(r).map(|e| (r.id.clone(), e)))
                .collect();
            out.extend(stats(name, s.to_string(), &errs));
        }
        let errs: Vec<(String, f64)> = rows
            .iter()
            .filter_map(|r| pick(r).map(|e| (r.id.clone(), e)))
            .collect();
        out.extend(stats(name, "all".into(), &errs));
    }
    out
}

fn fit_lines(rows: &[RowResult]) -> Vec<FitLine> {
    let mut sources: Vec<&'static str> = rows.iter().map(|r| r.source).collect();
    sources.sort();
    sources.dedup();
    sources
        .into_iter()
        .map(|s| {
            let of: Vec<&RowResult> = rows.iter().filter(|r| r.source == s).collect();
            FitLine {
                source: s.to_string(),
                ran: of.iter().filter(|r| !r.out_of_memory).count(),
                ran_predicted_fit: of
                    .iter()
                    .filter(|r| !r.out_of_memory && r.predicted_fits)
                    .count(),
                oom: of.iter().filter(|r| r.out_of_memory).count(),
                oom_predicted_not_fit: of
                    .iter()
                    .filter(|r| r.out_of_memory && !r.predicted_fits)
                    .count(),
            }
        })
        .collect()
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// Write `r` as a plain-text table.
///
/// # Errors
/// I/O errors of `w`.
pub fn write_table(w: &mut dyn std::io::Write, r: &ValidationReport) -> std::io::Result<()> {
    writeln!(
        w,
        "{:<12} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8}  layout",
        "row", "TFLOP/s", "pred", "err", "step s", "pred", "err", "mem GiB", "pred", "err"
    )?;
    for x in &r.rows {
        let m = |m: &Option<Metric>, prec: usize| -> (String, String, String) {
            match m {
                Some(m) => (
                    format!("{:.prec$}{}", m.measured, if m.derived { "*" } else { "" }),
                    format!("{:.prec$}", m.predicted),
                    pct(m.error),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            }
        };
        let (tm, tp, te) = m(&x.tflops, 1);
        let (sm, sp, se) = m(&x.step_s, 2);
        let (mm, mp, me) = match (&x.memory_gib, x.out_of_memory) {
            (_, true) => (
                "OOM".to_string(),
                format!("{:.1}", x.predicted_smi_gib),
                if x.predicted_fits {
                    "fits!".into()
                } else {
                    "no-fit".into()
                },
            ),
            (Some(_), _) => {
                let (a, b, c) = m(&x.memory_gib, 1);
                (a, b, if x.predicted_fits { c } else { format!("{c}!") })
            }
            (None, _) => ("-".into(), "-".into(), "-".into()),
        };
        writeln!(
            w,
            "{:<12} {:>9} {:>9} {:>8} {:>9} {:>9} {:>8} {:>7} {:>7} {:>8}  {}",
            x.id, tm, tp, te, sm, sp, se, mm, mp, me, x.layout
        )?;
    }
    writeln!(w)?;
    writeln!(w, "Summary (|error|):")?;
    writeln!(
        w,
        "{:<11} {:<8} {:>5} {:>9} {:>9}  worst",
        "metric", "source", "rows", "median", "max"
    )?;
    for s in &r.summary {
        writeln!(
            w,
            "{:<11} {:<8} {:>5} {:>8.1}% {:>8.1}%  {}",
            s.metric,
            s.source,
            s.count,
            100.0 * s.median_abs,
            100.0 * s.max_abs,
            s.worst
        )?;
    }
    writeln!(w)?;
    writeln!(w, "Fit verdicts:")?;
    for f in &r.fit {
        if f.oom > 0 || f.ran > 0 {
            writeln!(
                w,
                "  {:<8} ran {:>3}, predicted to fit {:>3} ({:.0}%); out of memory {:>2}, predicted not to fit {:>2}",
                f.source,
                f.ran,
                f.ran_predicted_fit,
                if f.ran > 0 {
                    100.0 * f.ran_predicted_fit as f64 / f.ran as f64
                } else {
                    0.0
                },
                f.oom,
                f.oom_predicted_not_fit
            )?;
        }
    }
    if !r.skipped.is_empty() {
        writeln!(w)?;
        writeln!(w, "Skipped rows:")?;
        for s in &r.skipped {
            writeln!(w, "  {:<12} {}", s.id, s.reason)?;
        }
    }
    writeln!(w)?;
    writeln!(w, "Conventions:")?;
    for c in &r.conventions {
        writeln!(w, "  - {c}")?;
    }
    writeln!(w)?;
    writeln!(w, "Assumptions per row (cells the row leaves empty):")?;
    for x in &r.rows {
        writeln!(w, "  {}: {}", x.id, x.assumptions.join("; "))?;
    }
    Ok(())
}

/// Where the published layout of a row lands in `search`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanCheck {
    /// Row id.
    pub id: String,
    /// Rules the published layout breaks (memory included); empty = valid.
    pub rejected_by: Vec<String>,
    /// 1-based rank of the published layout among the valid layouts.
    pub rank: Option<usize>,
    /// Valid layouts searched.
    pub valid: u64,
    /// Predicted tokens/s of the published layout.
    pub published_tokens_per_s: f64,
    /// The layout ranked first and its tokens/s.
    pub best: Option<(String, f64)>,
}

/// Search the row's model, GPU count and global batch (micro-batch fixed
/// to the row's, to keep the space small) and place the published layout.
pub fn plan_check(case: &Case) -> PlanCheck {
    use crate::search::{self, Filter, Space};
    let pr = case.problem();
    let policy = crate::rules::Policy::default();
    let (set, eval) = search::judge(&pr, &policy, &case.layout);
    let space = Space {
        filter: Filter {
            micro_batch: Some(case.layout.micro_batch),
            ..Filter::default()
        },
        keep_all: true,
        top_k: 1,
        ..Space::default()
    };
    let result = search::search(&pr, &space);
    let rank = set
        .is_empty()
        .then(|| search::rank_among(&result.all, &eval));
    PlanCheck {
        id: case.row.id.clone(),
        rejected_by: set.iter().map(|r| r.code().to_string()).collect(),
        rank,
        valid: result.stats.valid,
        published_tokens_per_s: eval.tokens_per_s,
        best: result
            .top
            .first()
            .map(|c| (c.layout.short(), c.eval.tokens_per_s)),
    }
}
