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
//!   from 02-21 on (Megatron-DeepSpeed PR #251: `24·4·B·s·L·h²·(…)` with
//!   checkpointing) and before it `8·B·s·P_non-embedding`
//!   ([`FlopConvention::MdsPre251`]);
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
//!   divides by 1024. A `torch.cuda` figure (max allocated, or max reserved:
//!   the caching allocator's pool, which holds no CUDA context or NCCL
//!   buffers) is compared with the allocated peak itself; torchtitan's
//!   unstated figures are its logged `max_reserved_gib`, KempnerForge's
//!   `logged` ones `max_memory_allocated`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::cost::{self, Evaluation, Problem, compute};
use crate::error::InputError;
use crate::layout::{CpComm, Layout, Recompute};
use crate::spec::model::{Architecture, JobDefaults, Norm, PositionEmbedding};
use crate::spec::{Catalog, Cluster, GIB, Gpu, Job, Model, Recipe, RecipeName};
use crate::spec::{Fp8Kernels, Fp8Recipe};
use crate::spec::{LossBuffers, SelectivePolicy};

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

/// Columns `published-dev-v2.csv` adds (its README, copied to
/// `tests/data/README.md`); optional: a v1 table has none of them, and an
/// empty cell means "not stated".
pub const V2_COLUMNS: [&str; 20] = [
    "arch",
    "card",
    "experts",
    "topk",
    "moe_ffn",
    "shared_experts",
    "etp",
    "precision",
    "fp8_recipe",
    "zero",
    "engine",
    "gpu_type",
    "gpus_per_node",
    "scaleup_gpus",
    "flops_convention",
    "oom",
    "mem_kind",
    "mem_unit",
    "tp_comm_overlap",
    "async_tp",
];

/// Block family of a row without a model card (`arch` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Arch {
    /// LayerNorm, GeLU 2-matrix MLP, learned positions, biases.
    Gpt,
    /// RMSNorm, SwiGLU 3-matrix MLP, RoPE, no biases.
    Llama,
    /// Squared-ReLU 2-matrix MLP, RoPE, no biases.
    Nemotron,
    /// A mixture-of-experts family (`mixtral`, `deepseek-v3`, `qwen3-moe`,
    /// `gpt-oss`): needs a card or the MoE columns.
    Moe,
    /// `palm`, `other`: not modelled without a card.
    Unmodelled,
}

/// GEMM precision of a row (`precision` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Precision {
    /// fp16 with loss scaling.
    Fp16,
    /// bf16.
    Bf16,
    /// fp8, mxfp8 or nvfp4 linear GEMMs ([`crate::cost::precision`]).
    Low(crate::spec::Precision),
}

/// Scaling recipe of a low-precision row (`fp8_recipe` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RowRecipe {
    /// An FP8 recipe (`delayed`, `current` = `tensorwise`, `rowwise`,
    /// `blockwise`).
    Fp8(crate::spec::Fp8Recipe),
    /// MX block scaling (`mx`): the row's precision is MXFP8.
    Mx,
}

/// What a row's `measured_mem_gb` is (`mem_kind` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MemKind {
    /// nvidia-smi: reserved pool plus CUDA context.
    NvidiaSmi,
    /// `torch.cuda.max_memory_reserved()`.
    TorchReserved,
    /// `torch.cuda.max_memory_allocated()`.
    TorchAllocated,
    /// The framework's own log line (read as reserved plus context).
    Logged,
}

/// The v2 columns of one row, parsed; `None` = empty cell or v1 table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunColumns {
    /// Block family.
    pub arch: Option<Arch>,
    /// Model card of this project.
    pub card: Option<String>,
    /// Routed experts per MoE layer.
    pub experts: Option<u32>,
    /// Experts per token.
    pub topk: Option<u32>,
    /// One expert's FFN width.
    pub moe_ffn: Option<u64>,
    /// Shared experts.
    pub shared_experts: Option<u32>,
    /// Expert tensor-parallel size.
    pub etp: Option<u32>,
    /// GEMM precision.
    pub precision: Option<Precision>,
    /// FP8 scaling recipe (`tensorwise` read as current scaling).
    pub fp8_recipe: Option<RowRecipe>,
    /// ZeRO / FSDP stage 0–3.
    pub zero: Option<u8>,
    /// Training software as written.
    pub engine: Option<String>,
    /// GPU profile name (matched exactly).
    pub gpu_type: Option<String>,
    /// GPUs per host.
    pub gpus_per_node: Option<u32>,
    /// GPUs in one NVLink domain.
    pub scaleup_gpus: Option<u32>,
    /// `true` = hardware FLOPs (recompute counted), `false` = model FLOPs.
    pub hardware_flops: Option<bool>,
    /// The row itself ran out of memory.
    pub oom: Option<bool>,
    /// What the memory figure is.
    pub mem_kind: Option<MemKind>,
    /// `true` when `measured_mem_gb` is in GB (10⁹), `false` for GiB.
    pub mem_in_gb: Option<bool>,
    /// TP collectives overlapped with GEMMs.
    pub tp_comm_overlap: Option<bool>,
    /// torchtitan's asynchronous TP.
    pub async_tp: Option<bool>,
}

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
    /// Hidden size h (needed without a card).
    pub hidden: Option<u64>,
    /// Attention heads a.
    pub heads: Option<u32>,
    /// Key/value heads.
    pub kv_heads: Option<u32>,
    /// FFN width.
    pub ffn: Option<u64>,
    /// Vocabulary as written (`51200`, `~250000`; needed without a card).
    pub vocab: Option<String>,
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
    /// The v2 columns.
    pub run: RunColumns,
}

impl MeasuredRow {
    /// Source family: the id up to the first `-` (`NAR21`, `KOR22`, `MEG24`,
    /// `BLOOMPQ`), or `OTHER`.
    pub fn family(&self) -> Family {
        Family::of(&self.id)
    }

    /// Whether this run did not fit: the `oom` column where stated, else the
    /// notes (`did not fit`, or `OOM on`; "too close to OOM" is not an OOM).
    pub fn out_of_memory(&self) -> bool {
        self.run
            .oom
            .unwrap_or_else(|| self.notes.contains("did not fit") || self.notes.contains("OOM on"))
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

impl Cells<'_> {
    /// The cell of `col` as one of `values` (`(text, value)` pairs).
    fn choice<T: Copy>(
        &self,
        col: &'static str,
        values: &[(&str, T)],
    ) -> Result<Option<T>, InputError> {
        let v = self.text(col);
        if v.is_empty() {
            return Ok(None);
        }
        values
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(v))
            .map(|(_, x)| Some(*x))
            .ok_or_else(|| {
                let names: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
                self.err(col, format!("`{v}` is not one of {}", names.join(", ")))
            })
    }

    fn yes_no(&self, col: &'static str) -> Result<Option<bool>, InputError> {
        self.choice(col, &[("yes", true), ("no", false)])
    }
}

/// A measurement table as read: the rows that parse, and those that do
/// not with the file, line, column and value that failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    /// Rows that parsed.
    pub rows: Vec<MeasuredRow>,
    /// Rows that did not, with the reason.
    pub skipped: Vec<Skipped>,
    /// The file the rows came from (empty when they did not come from one),
    /// for the reasons of rows skipped after parsing.
    pub file: std::path::PathBuf,
}

/// Parse a measurement CSV (v1 or v2 columns), every row on its own: a row
/// with an empty required cell, a malformed value or an id already used is
/// skipped with its reason, and the other rows are read.
///
/// # Errors
/// [`InputError::Syntax`] for malformed CSV or a table without rows;
/// [`InputError::Field`] naming a missing column of [`COLUMNS`].
pub fn read_table(text: &str, file: &Path) -> Result<Table, InputError> {
    let (rows, bad) = read_rows(text, file)?;
    Ok(Table {
        rows,
        skipped: bad.into_iter().map(|(s, _)| s).collect(),
        file: file.to_path_buf(),
    })
}

/// A row that did not parse: its [`Skipped`] line and the error.
type BadRow = (Skipped, InputError);

/// The rows that parse, and those that do not.
fn read_rows(text: &str, file: &Path) -> Result<(Vec<MeasuredRow>, Vec<BadRow>), InputError> {
    // Flexible: a row with too few or too many cells is skipped with its
    // reason below, not an error for the whole file.
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let syntax = |e: csv::Error| InputError::Syntax {
        file: file.to_path_buf(),
        detail: e.to_string(),
    };
    let headers = rdr.headers().map_err(syntax)?.clone();
    // A column named twice would be read from its first place only.
    for (i, h) in headers.iter().enumerate() {
        if headers.iter().take(i).any(|g| g.trim() == h.trim()) && !h.trim().is_empty() {
            return Err(InputError::field(
                file,
                h.trim(),
                "the header names this column twice; each column may appear once",
            ));
        }
    }
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
    for col in V2_COLUMNS {
        if let Some(i) = headers.iter().position(|h| h.trim() == col) {
            index.insert(col, i);
        }
    }
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    // Lines counted from the record's byte offset: the csv crate's own line
    // count is one short on files with CRLF line ends (the shipped table),
    // and its offset can point at the end of the line before.
    let (mut counted_to, mut newlines) = (0usize, 0usize);
    for rec in rdr.records() {
        let rec = rec.map_err(syntax)?;
        // The record's first line in the file (header = line 1).
        let mut at = rec
            .position()
            .map_or(counted_to, |p| (p.byte() as usize).min(text.len()));
        // With CRLF ends the offset can sit on the previous line's `\n`.
        while at < text.len() && matches!(text.as_bytes()[at], b'\r' | b'\n') {
            at += 1;
        }
        if at > counted_to {
            newlines += text.as_bytes()[counted_to..at]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            counted_to = at;
        }
        let line = newlines + 1;
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
        let parsed = match first_line.get(&id) {
            _ if rec.len() != headers.len() => Err(c.err(
                "cells",
                format!(
                    "the row has {} cells but the header has {} columns",
                    rec.len(),
                    headers.len()
                ),
            )),
            Some(first) if !id.is_empty() => Err(c.err(
                "id",
                format!("`{id}` is already the id of line {first}; ids must be unique"),
            )),
            _ => parse_row(&c),
        };
        match parsed {
            Ok(row) => {
                first_line.insert(id, line);
                rows.push(row);
            }
            Err(e) => bad.push((
                Skipped {
                    id: if id.is_empty() {
                        format!("line {line}")
                    } else {
                        id
                    },
                    kind: skip_kind(&e),
                    reason: e.to_string(),
                },
                e,
            )),
        }
    }
    if rows.is_empty() && bad.is_empty() {
        return Err(InputError::Syntax {
            file: file.to_path_buf(),
            detail: "no rows under the header".into(),
        });
    }
    Ok((rows, bad))
}

/// The reason class of a row that did not parse: `field: problem` without
/// the row's own numbers (`tp: empty`, `sp: malformed`).
fn skip_kind(e: &InputError) -> String {
    match e {
        InputError::Field { field, problem, .. } => {
            let what = if problem.contains("is empty but required") {
                "empty"
            } else if problem.contains("already the id") {
                "duplicate id"
            } else {
                "malformed"
            };
            format!("{field}: {what}")
        }
        other => other.to_string(),
    }
}

/// Parse a measurement CSV, failing on the first row that does not parse
/// (for `calibrate`, whose fit must not silently lose rows).
///
/// # Errors
/// Those of [`read_table`], and [`InputError::Field`] for the first row
/// that [`read_table`] would skip.
pub fn read_csv(text: &str, file: &Path) -> Result<Vec<MeasuredRow>, InputError> {
    let (rows, bad) = read_rows(text, file)?;
    match bad.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(rows),
    }
}

/// One row of the table.
fn parse_row(c: &Cells) -> Result<MeasuredRow, InputError> {
    let id = c.id.clone();
    if id.is_empty() {
        return Err(c.err("id", "is empty but required".into()));
    }
    let text_req = |col: &'static str| -> Result<String, InputError> {
        c.opt_text(col)
            .ok_or_else(|| c.err(col, "is empty but required".into()))
    };
    let frac = "a number";
    let whole = "a whole number";
    let run = RunColumns {
        arch: c.choice(
            "arch",
            &[
                ("gpt", Arch::Gpt),
                ("llama", Arch::Llama),
                ("nemotron", Arch::Nemotron),
                ("mixtral", Arch::Moe),
                ("deepseek-v3", Arch::Moe),
                ("qwen3-moe", Arch::Moe),
                ("gpt-oss", Arch::Moe),
                ("palm", Arch::Unmodelled),
                ("other", Arch::Unmodelled),
            ],
        )?,
        card: c.opt_text("card"),
        experts: c.opt("experts", whole)?,
        topk: c.opt("topk", whole)?,
        moe_ffn: c.opt("moe_ffn", whole)?,
        shared_experts: c.opt("shared_experts", whole)?,
        etp: c.opt("etp", whole)?,
        precision: c.choice(
            "precision",
            &[
                ("fp16", Precision::Fp16),
                ("bf16", Precision::Bf16),
                ("fp8", Precision::Low(crate::spec::Precision::Fp8)),
                ("mxfp8", Precision::Low(crate::spec::Precision::Mxfp8)),
                ("nvfp4", Precision::Low(crate::spec::Precision::Nvfp4)),
            ],
        )?,
        fp8_recipe: c.choice(
            "fp8_recipe",
            &[
                ("delayed", RowRecipe::Fp8(Fp8Recipe::Delayed)),
                ("current", RowRecipe::Fp8(Fp8Recipe::Current)),
                ("tensorwise", RowRecipe::Fp8(Fp8Recipe::Current)),
                ("rowwise", RowRecipe::Fp8(Fp8Recipe::Rowwise)),
                ("blockwise", RowRecipe::Fp8(Fp8Recipe::Blockwise)),
                ("mx", RowRecipe::Mx),
            ],
        )?,
        zero: c.choice("zero", &[("0", 0u8), ("1", 1), ("2", 2), ("3", 3)])?,
        engine: c.opt_text("engine").map(|e| e.to_ascii_lowercase()),
        gpu_type: c.opt_text("gpu_type").map(|g| g.to_ascii_lowercase()),
        gpus_per_node: c.opt("gpus_per_node", whole)?,
        scaleup_gpus: c.opt("scaleup_gpus", whole)?,
        hardware_flops: c.choice("flops_convention", &[("hardware", true), ("model", false)])?,
        oom: c.yes_no("oom")?,
        mem_kind: c.choice(
            "mem_kind",
            &[
                ("nvidia-smi", MemKind::NvidiaSmi),
                ("torch-max-reserved", MemKind::TorchReserved),
                ("torch-max-allocated", MemKind::TorchAllocated),
                ("logged", MemKind::Logged),
            ],
        )?,
        mem_in_gb: c.choice("mem_unit", &[("GB", true), ("GiB", false)])?,
        tp_comm_overlap: c.yes_no("tp_comm_overlap")?,
        async_tp: c.yes_no("async_tp")?,
    };
    let row = MeasuredRow {
        line: c.line,
        id: id.clone(),
        source: c.text("source").to_string(),
        model: c.text("model").to_string(),
        layers: c.opt("layers", whole)?,
        hidden: c.opt("hidden", whole)?,
        heads: c.opt("heads", whole)?,
        kv_heads: c.opt("kv_heads", whole)?,
        ffn: c.opt("ffn", whole)?,
        vocab: c.opt_text("vocab"),
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
        run,
    };
    if let Some(r) = row.recompute.as_deref()
        && !["full", "selective", "none"].contains(&r)
    {
        return Err(c.err(
            "recompute",
            format!("`{r}` is not one of full, selective, none"),
        ));
    }
    if let Some(v) = row.sp.as_deref()
        && !["yes", "no"].contains(&v)
    {
        return Err(c.err("sp", format!("`{v}` is not one of yes, no")));
    }
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
        ("etp", row.run.etp.map(|x: u32| x as u64)),
        ("experts", row.run.experts.map(|x: u32| x as u64)),
        ("topk", row.run.topk.map(|x: u32| x as u64)),
        (
            "gpus_per_node",
            row.run.gpus_per_node.map(|x: u32| x as u64),
        ),
        ("scaleup_gpus", row.run.scaleup_gpus.map(|x: u32| x as u64)),
        ("tp", Some(row.tp as u64)),
        ("pp", Some(row.pp as u64)),
        ("dp", Some(row.dp as u64)),
        ("num_gpus", Some(row.num_gpus)),
        ("hidden", row.hidden),
        ("seq", Some(row.seq)),
        ("gbs", Some(row.gbs)),
    ] {
        if v == Some(0) {
            return Err(c.err(col, "must be positive, found 0".into()));
        }
    }
    Ok(row)
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
    /// Model FLOPs plus the recomputed forward (hardware FLOPs, HFU).
    Hardware,
    /// NeMo's model FLOPs: Megatron's, but the attention core counted over
    /// the full `s×s` score matrix, not halved for the causal mask
    /// (`12·s·h` per layer and token; NVIDIA/NeMo `nemo/utils/flops_formulas.py`
    /// [ref:nemo-flops], the "Model TFLOP/sec/GPU" of its performance tables).
    NemoFullAttention,
    /// Megatron-DeepSpeed's estimator before PR #251 (BigScience fork, commit
    /// ae6277f5 of 2022-02-21 replaced it): `8·B·s·P_ne`, the non-embedding
    /// parameter count times 2 FLOPs per multiply-add times 4 passes with
    /// activation checkpointing ([`mds_pre251_flops`]); the attention score
    /// matrix and the output-layer logits are not counted. The BLOOM log
    /// (`chronicles-prequel.md`, "TFLOPs calculation improved") used it for
    /// every row before 02-21.
    MdsPre251,
}

/// FLOPs of one step under Megatron-DeepSpeed's estimator before PR #251,
/// `ckpt·2·s·B·P_ne` with `ckpt` = 4 under activation checkpointing (3
/// without) and `P_ne` the parameters outside the embedding tables
/// (`megatron/training.py` `training_log` and `megatron/utils.py`
/// `non_embedding_params` at bigscience-workshop/Megatron-DeepSpeed
/// ae6277f5^). Per layer of a GPT block with biases and two LayerNorms
/// `P = 4h² + 4h` (attention) `+ 2·h·f + f + h` (MLP) `+ 4h` (norms), plus
/// the final LayerNorm `2h`. Units: FLOPs.
///
/// Worked example (BLOOMPQ-001, 02-17: L 8, h 14400, f 57600, s 2048,
/// B 2048, 8 GPUs, 769.99 s): per layer 4·14400² + 2·14400·57600 + 13·14400
/// = 2,488,507,200; `P_ne` = 8 × that + 28,800 = 19,908,086,400;
/// `4·2·2048·2048·P_ne` = 6.680e17 FLOPs; over 769.99 s and 8 GPUs 108.45
/// TFLOP/s, the log's 108.47 (Eq. 3 would give 125.8).
pub fn mds_pre251_flops(l: f64, h: f64, ffn: f64, b: f64, s: f64, checkpointed: bool) -> f64 {
    let per_layer = 4.0 * h * h + 4.0 * h + 2.0 * h * ffn + ffn + h + 4.0 * h;
    let p_ne = l * per_layer + 2.0 * h;
    let passes = if checkpointed { 4.0 } else { 3.0 };
    passes * 2.0 * s * b * p_ne
}

impl FlopConvention {
    /// Name as printed.
    pub fn name(self) -> &'static str {
        match self {
            FlopConvention::NarayananEq3 => "Narayanan Eq.3 (hardware, recompute counted)",
            FlopConvention::Korthikanti => "Korthikanti model FLOPs (72·B·s·L·h²·(1+s/6h+V/12Lh))",
            FlopConvention::Megatron => "Megatron num_floating_point_operations (model FLOPs)",
            FlopConvention::Hardware => "model FLOPs + recomputed forward (hardware FLOPs)",
            FlopConvention::NemoFullAttention => {
                "NeMo flops_formulas (model FLOPs, causal attention not halved)"
            }
            FlopConvention::MdsPre251 => {
                "Megatron-DeepSpeed before PR #251 (8·B·s·non-embedding params)"
            }
        }
    }

    /// FLOPs of one step under this convention.
    pub fn flops(self, model: &Model, job: &Job, vocab_padded: f64, recompute: Recompute) -> f64 {
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
            FlopConvention::Hardware => {
                compute::model_flops_per_step(model, b, s)
                    + compute::recompute_flops_per_step(model, b, s, recompute)
            }
            FlopConvention::NemoFullAttention => {
                // Megatron's count plus the causal half of the attention core
                // it leaves out: 3 passes · L · B · (QKᵀ + A·V)/2.
                compute::model_flops_per_step(model, b, s)
                    + 3.0 * l * b * compute::attention_core_flops(model, s, s)
            }
            FlopConvention::MdsPre251 => {
                mds_pre251_flops(l, h, a.ffn as f64, b, s, recompute == Recompute::Full)
            }
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
    /// What the measured memory figure is.
    pub memory: MemKind,
    /// The measured memory is in GB (10⁹ bytes), not GiB.
    pub mem_in_gb: bool,
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
        self.convention.flops(
            &self.model,
            &self.job,
            self.vocab_padded,
            self.layout.recompute,
        )
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
    // The profile each GPU's rows have always been priced on (a larger
    // profile of the same GPU does not move them); 4-GPU H200 nodes on the
    // profile with 4-GPU nodes.
    let preferred = match gpu {
        "a100-80g" => Some("dgx-a100-3072"),
        "h100-sxm" => Some("dgx-h100-6144"),
        "h800" => Some("h800-2048"),
        "h200" if row.run.gpus_per_node == Some(4) => Some("h200-4gpu-160"),
        "h200" => Some("h200-64"),
        "gb200" => Some("gb200-nvl72-576"),
        "b200" => Some("dgx-b200-64"),
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

/// Why a row is not priced: a class for the summary and the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpriced {
    /// The reason's class (`fp8 not modelled yet`, `gpu_type: no profile`).
    pub kind: String,
    /// The sentence, with the row's values.
    pub reason: String,
}

impl Unpriced {
    /// A reason of class `kind`.
    pub fn new(kind: &str, reason: impl Into<String>) -> Unpriced {
        Unpriced {
            kind: kind.to_string(),
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Unpriced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A sentence as its own class, with quoted values and numbers blanked
/// (`hidden 5 is not divisible by 3 heads` → `hidden N is not divisible by N heads`).
impl From<String> for Unpriced {
    fn from(reason: String) -> Unpriced {
        let mut kind = String::new();
        let mut quoted = false;
        let mut last_digit = false;
        for ch in reason.chars() {
            if ch == '`' {
                if !quoted {
                    kind.push('…');
                }
                quoted = !quoted;
                continue;
            }
            if quoted {
                continue;
            }
            if ch.is_ascii_digit() || (last_digit && ch == '.') {
                if !last_digit {
                    kind.push('N');
                }
                last_digit = true;
                continue;
            }
            last_digit = false;
            kind.push(ch);
        }
        Unpriced { kind, reason }
    }
}

impl From<&str> for Unpriced {
    fn from(reason: &str) -> Unpriced {
        Unpriced::from(reason.to_string())
    }
}

/// The software of the 2021–22 Megatron-LM and Megatron-DeepSpeed rows:
/// a 16-bit recipe (`recipe`) under the `adam-16b` name, fused softmax
/// instead of flash attention (FlashAttention appeared May 2022), and
/// neither the gradient reduction, the parameter gather, the TP
/// collectives nor the pipeline sends overlapped with compute; `async_tp_backward` says whether
/// the backward TP all-reduce already ran asynchronously.
fn megatron_2021_software(job: &mut Job, recipe: Recipe, async_tp_backward: bool) {
    job.recipe = recipe;
    job.recipe_name = RecipeName::Adam16b;
    job.flash_attention = false;
    job.overlap_grad_reduce = false;
    job.overlap_param_gather = false;
    job.tp_comm_overlap = false;
    job.overlap_p2p_comm = false;
    job.async_tp_backward = async_tp_backward;
}

/// A Megatron-LM commit that measurement notes name, with what its code
/// does with the data-parallel gradient reduction and parameter gather.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MegatronLmCommit {
    /// Abbreviated hash, as the notes give it.
    pub sha: &'static str,
    /// Commit date.
    pub date: &'static str,
    /// Whether the reduction and gather overlap the compute.
    pub dp_overlap: bool,
    /// Whether the interleaved schedule overlaps its pipeline sends and
    /// receives (`overlap_p2p_comm`, from f9283c5a, 2023-05-31).
    pub p2p_overlap: bool,
    /// The code's behaviour, for the assumptions.
    pub what: &'static str,
}

/// The Megatron-LM commits named by rows of the shipped table
/// (`Megatron-LM commit <sha>` in `notes`), each read from its code.
pub const MEGATRON_LM_COMMITS: &[MegatronLmCommit] = &[MegatronLmCommit {
    // megatron/training.py `train_step` at 285068c8: forward-backward,
    // then `optimizer.reduce_model_grads` (the distributed optimizer's
    // `_reduce_scatter_base` of the whole gradient buffer, fp32 under bf16,
    // megatron/optimizer/distrib_optimizer.py), the step, then
    // `gather_model_params` (`_all_gather_base` of the parameters); none
    // overlaps compute. `--overlap-grad-reduce` came with 2d5220a4
    // (2023-08-16).
    sha: "285068c8",
    date: "2023-01-11",
    dp_overlap: false,
    // No `--no-overlap-p2p-communication` in megatron/arguments.py at
    // 285068c8: the interleaved schedule's sends and receives block.
    p2p_overlap: false,
    what: "reduce-scatters the gradients after the last backward and all-gathers the parameters after the step, neither overlapped (train_step; --overlap-grad-reduce came in 2d5220a4, 2023-08-16); pipeline sends and receives blocking (overlap_p2p_comm came in f9283c5a, 2023-05-31)",
}];

/// The Megatron-LM commit `notes` name (`Megatron-LM commit <sha>`), if
/// any; a commit that is not in [`MEGATRON_LM_COMMITS`] leaves the row
/// unpriced rather than priced with today's defaults.
fn megatron_lm_commit(notes: &str) -> Result<Option<MegatronLmCommit>, Unpriced> {
    const KEY: &str = "Megatron-LM commit ";
    let Some(at) = notes.find(KEY) else {
        return Ok(None);
    };
    let rest = &notes[at + KEY.len()..];
    let sha: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
    MEGATRON_LM_COMMITS
        .iter()
        .find(|c| !sha.is_empty() && (c.sha.starts_with(&sha) || sha.starts_with(c.sha)))
        .copied()
        .map(Some)
        .ok_or_else(|| {
            Unpriced::new(
                "software: unknown Megatron-LM commit",
                format!(
                    "notes name Megatron-LM commit `{sha}`, whose data-parallel overlap meshplan has not read (known: {})",
                    MEGATRON_LM_COMMITS
                        .iter()
                        .map(|c| c.sha)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })
}

/// Build the case of `row`, or say why it cannot be predicted.
///
/// Every stated column is used: `card` (the project's model card),
/// otherwise `arch` with the shape columns; `precision` (low-precision rows
/// are not priced until FP8 is modelled, never as bf16); `zero`; `engine`;
/// `gpu_type` (matched exactly), `gpus_per_node` and `scaleup_gpus`;
/// `flops_convention`; `tp_comm_overlap` and `async_tp`; `oom`;
/// `mem_kind` and `mem_unit`. What a row leaves empty is assumed, and the
/// assumption is printed with the row.
///
/// # Errors
/// [`Unpriced`]: the class and a sentence naming what is missing or
/// inconsistent (the row is then listed as skipped).
pub fn build_case(row: &MeasuredRow, cat: &Catalog, overlay: OverlayRef) -> Result<Case, Unpriced> {
    let fam = row.family();
    let run = &row.run;
    let mut assume: Vec<String> = Vec::new();
    let notes = &row.notes;

    if run.arch == Some(Arch::Unmodelled) && run.card.is_none() {
        return Err(Unpriced::new(
            "arch: not modelled without a card",
            "arch: this block family is not modelled without a model card",
        ));
    }

    // --- Hardware.
    let (mut gpu, gname) = match &run.gpu_type {
        Some(t) => {
            let g = cat.gpu(t).map_err(|_| {
                Unpriced::new(
                    "gpu_type: no GPU profile",
                    format!(
                        "gpu_type `{t}` has no GPU profile (known: {})",
                        cat.gpus
                            .iter()
                            .map(|g| g.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            (g.clone(), g.name.clone())
        }
        None => {
            let g = gpu_name(&row.gpu).ok_or_else(|| {
                Unpriced::new(
                    "gpu: no GPU profile",
                    format!("GPU `{}` matches no shipped GPU profile", row.gpu),
                )
            })?;
            assume.push(format!(
                "gpu: {g} from the description `{}` (gpu_type not stated)",
                row.gpu
            ));
            (
                cat.gpu(g).map_err(|e| e.to_string())?.clone(),
                g.to_string(),
            )
        }
    };
    let (cname, template) = cluster_name(row, &gname, cat)
        .map(|c| (c, None))
        .or_else(|| {
            // No shipped cluster of this GPU: the links of the nearest
            // generation's cluster (named in the assumption).
            let stand_in = match gname.as_str() {
                "h100-96g" | "gb200" | "b200" => Some("dgx-h100-6144"),
                _ => None,
            };
            stand_in
                .filter(|c| cat.cluster(c).is_ok())
                .map(|c| (c.to_string(), Some(c)))
        })
        .ok_or_else(|| {
            Unpriced::new(
                "cluster: none for this GPU",
                format!("no shipped cluster has {gname} GPUs"),
            )
        })?;
    let mut cluster = cat.cluster(&cname).map_err(|e| e.to_string())?.clone();
    if let Some(t) = template {
        assume.push(format!(
            "links: those of the `{t}` profile (no shipped cluster has {gname} GPUs)"
        ));
        cluster.gpu = gname.clone();
    }
    if let Some(g) = run.gpus_per_node
        && g != cluster.gpus_per_node
    {
        // One NIC per GPU as in the profile: NICs scale with the node.
        let nics_per_gpu = cluster.inter_node.nics_per_node as f64 / cluster.gpus_per_node as f64;
        cluster.inter_node.nics_per_node = ((nics_per_gpu * g as f64).round() as u32).max(1);
        cluster.gpus_per_node = g;
    }
    cluster.scale_up_domain = match run.scaleup_gpus {
        Some(d) => d,
        None => cluster.scale_up_domain.min(cluster.gpus_per_node),
    };
    cluster.nodes = (row.num_gpus.div_ceil(cluster.gpus_per_node as u64)).max(1) as u32;
    // A row states its own placement: no job segment of the profile.
    cluster.segment = None;
    assume.push(format!(
        "cluster: {} nodes of {} GPUs (NVLink domain {}) with the `{}` profile's links",
        cluster.nodes, cluster.gpus_per_node, cluster.scale_up_domain, cname
    ));
    if let Some(o) = overlay {
        if o.gpu != gpu.name {
            return Err(Unpriced::new(
                "overlay: other GPU",
                format!(
                    "the overlay is for GPU `{}`, this row runs on `{}`",
                    o.gpu, gpu.name
                ),
            ));
        }
        if let Some(c) = &o.cluster
            && !c.eq_ignore_ascii_case(&cluster.name)
        {
            return Err(Unpriced::new(
                "overlay: other cluster",
                format!(
                    "the overlay was fitted on cluster `{c}`, this row is priced with `{}`'s links",
                    cluster.name
                ),
            ));
        }
        o.apply_gpu(&mut gpu);
        o.apply_cluster(&mut cluster);
    }

    // --- Model.
    let named = run.card.clone().or_else(|| {
        card_of_model_column(&row.model).map(|c| {
            assume.push(format!(
                "card: `{c}` (not stated; the model column names `{}`)",
                row.model
            ));
            c.to_string()
        })
    });
    let (mut model, vocab) = match &named {
        Some(card) => card_model(row, card, cat, &mut assume)?,
        None => column_model(row, fam, &mut assume)?,
    };
    model.known_params = model.total_params();
    model.defaults = JobDefaults {
        seq_len: row.seq,
        global_batch: row.gbs,
    };
    // The checks and limits of a model card (src/limits.rs) hold for the
    // model the row's columns describe too.
    model
        .check(Path::new("the row's model columns"))
        .map_err(|e| Unpriced::new("size: beyond meshplan's limits", e.to_string()))?;
    let layers = model.architecture.layers;

    // --- Job.
    let mut job = Job::new(row.gbs, row.seq);
    let has = |flag: &str| notes.contains(flag);
    let engine = run.engine.as_deref();
    match (fam, engine) {
        (_, Some("deepspeed")) => {
            // DeepSpeed ZeRO (Narayanan et al. 2021 Table 2's baseline):
            // fp16 weights and gradients plus the fp32 gradient partition
            // (2 + 6 + 12), no flash attention (2021). ZeRO-3 moves its
            // parameters and gradients tensor by tensor and synchronously
            // (DeepSpeed 0.3, `DeepSpeedZero3::per_tensor_sync`).
            job.recipe = Recipe::DEEPSPEED;
            job.recipe_name = RecipeName::Deepspeed;
            // ZeRO-3 gathers module by module under DeepSpeed's 2021 limits
            // (`cost::deepspeed_zero3_transients`).
            job.engine_memory.deepspeed_zero3 = Some(crate::spec::DeepSpeedZero3::DEFAULTS_2021);
            job.flash_attention = false;
            job.tp_comm_overlap = false;
            job.async_tp_backward = false;
            assume.push("software: DeepSpeed 0.3 — 2/6/12 bytes per parameter, no flash attention; ZeRO-3 gathers module by module (max live 1e9, prefetch 5e7, reduce bucket 5e8, persistence 1e5, reuse distance 1e9 parameters, 2021 defaults), one synchronous collective per tensor".into());
        }
        (Family::Nar21 | Family::Kor22, _) => {
            // Megatron-LM 2021/22: fp16 with fp16 gradients all-reduced after
            // backward (no overlap), no distributed optimizer, fused softmax
            // instead of flash attention (FlashAttention appeared May 2022).
            // The asynchronous backward TP all-reduce came to Megatron-LM after
            // the April 2021 release that Table 1 of Narayanan et al. used.
            megatron_2021_software(&mut job, Recipe::ADAM_16B, fam == Family::Kor22);
            assume.push(format!(
                "software: Megatron-LM {} — fp16, no flash attention, no DP overlap, no distributed optimizer, async backward TP all-reduce {}",
                if fam == Family::Kor22 { "2022" } else { "April 2021" },
                job.async_tp_backward
            ));
        }
        (Family::Bloom, _) => {
            // Megatron-DeepSpeed: ZeRO-1 over DP, fp16 (2+2 bytes + 12/D) or,
            // from 02-28, the BF16Optimizer that adds fp32 gradient
            // accumulation (+4 bytes per parameter, unsharded).
            let bf16opt = has("BF16Optimizer");
            let recipe = Recipe {
                weight_bytes: 2.0,
                grad_bytes: if bf16opt { 6.0 } else { 2.0 },
                optimizer_bytes: 12.0,
                grad_reduce_bytes: 2.0,
                // BF16Optimizer's fp32 accumulation buffer persists.
                step_grad_bytes: 0.0,
            };
            megatron_2021_software(&mut job, recipe, false);
            assume.push(format!(
                "software: Megatron-DeepSpeed — ZeRO-1, {} bytes/param unsharded + 12/D, no flash attention, no DP overlap, no dropout",
                if bf16opt { "2+2+4 (BF16Optimizer)" } else { "2+2 (fp16)" }
            ));
        }
        (_, Some("megatron-deepspeed")) => {
            // Megatron-DeepSpeed of 2021–22 (MT-NLG): as the BLOOM rows,
            // fp16 with ZeRO-1, no flash attention, no DP overlap.
            megatron_2021_software(&mut job, Recipe::ADAM_16B, false);
            assume.push("software: Megatron-DeepSpeed — 2+2+12/D bytes per parameter (ZeRO-1), no flash attention, no DP overlap".into());
        }
        (_, Some(e @ ("torchtitan" | "kempnerforge"))) => {
            // PyTorch FSDP2 [ref:zhao-2023]: bf16 compute, fp32 sharded
            // parameters, gradients and Adam state, gradients reduced in
            // fp32; prefetching overlaps the gathers, flash attention (SDPA),
            // the embedding and output layer as FSDP2's root unit
            // (`cost::fsdp2_transients`). PyTorch SDPA's flash backend is
            // FlashAttention-2; torchtitan restricts SDPA to it (or the
            // slower memory-efficient backend) under CP (`utils.py`
            // `get_train_context`, git 9dec370) and runs PyTorch's
            // experimental `context_parallel`.
            job.pytorch_fsdp2();
            let cp_note = if row.cp.unwrap_or(1) > 1 {
                "; PyTorch context_parallel: K/V after repeat_kv, all-gather rotater, fp32 dK/dV and merges"
            } else {
                ""
            };
            if e == "torchtitan" {
                // torchtitan's benchmark configs run `selective_ac_option =
                // "op"` (train_configs/llama3_8b.toml at 9dec370 and
                // e7c0cae); its loss upcasts the logits to fp32, eagerly in
                // December 2024 (train.py at 9dec370 leaves the loss
                // uncompiled), compiled with `--training.compile` later
                // (components/loss.py at e7c0cae).
                job.engine_memory.selective = SelectivePolicy::TorchtitanOp;
                // The model is fp32 and FSDP2 casts to bf16 at the gather
                // (`apply_fsdp`, MixedPrecisionPolicy(param_dtype=bf16,
                // reduce_dtype=fp32)): fp32 shard + fp32 gradients + Adam =
                // 16 bytes per parameter over D, no bf16 shard.
                job.engine_memory.fp32_shards_only = true;
                let eager_era = row.source.contains("202412");
                job.engine_memory.loss = if has("compile") && !eager_era {
                    LossBuffers::TorchCompiled
                } else {
                    LossBuffers::TorchFp32Eager
                };
                assume.push(format!(
                    "software: torchtitan (PyTorch FSDP2) — fp32 shards (4 + 4 gradients + 8 Adam bytes per parameter over D, bf16 only when gathered), flash attention (SDPA, FlashAttention-2), overlapped gathers and reductions; embedding and output gathered as FSDP2's root unit; selective = per-op SAC (every second matmul and the attention output saved); loss {}{}",
                    if job.engine_memory.loss == LossBuffers::TorchCompiled {
                        "compiled (bf16 logits and gradient, 4 B per logit)"
                    } else {
                        "eager fp32 cross-entropy (12 B per logit)"
                    },
                    cp_note
                ));
            } else {
                // KempnerForge holds the model in bf16 (`model.to(dtype=
                // param_dtype)` in scripts/train.py; config/training.py:
                // "bf16" is the master weight dtype), so AdamW's moments are
                // bf16 and FSDP2 casts the fp32-reduced gradient back to bf16:
                // 2 + 2 + 4 bytes per parameter, reduced in fp32
                // (`default_mp_policy`, distributed/parallel.py). Gradient
                // accumulation skips the reduction on every micro-batch but
                // the last (training/grad.py `maybe_no_sync`), so FSDP2 keeps
                // the unsharded gradients in fp32 across them.
                job.recipe = Recipe {
                    weight_bytes: 2.0,
                    grad_bytes: 2.0,
                    optimizer_bytes: 4.0,
                    grad_reduce_bytes: 4.0,
                    step_grad_bytes: 0.0,
                };
                job.engine_memory.unsharded_grad_accum_bytes = 4.0;
                job.engine_memory.loss = LossBuffers::TorchBf16Gathered;
                assume.push(format!(
                    "software: {e} (PyTorch FSDP2) — bf16 parameters, gradients and AdamW moments (2/2/4 bytes per parameter, fp32 reduction), unsharded fp32 gradients kept across accumulated micro-batches, embedding and output gathered as FSDP2's root unit, bf16 cross-entropy over the gathered vocabulary, flash attention (SDPA, FlashAttention-2), overlapped gathers and reductions{cp_note}"
                ));
            }
        }
        _ => {
            job.overlap_grad_reduce = has("--overlap-grad-reduce") || fam == Family::Other;
            job.overlap_param_gather = has("--overlap-param-gather") || fam == Family::Other;
            if let Some(commit) = megatron_lm_commit(notes)? {
                // The code the run used decides, not today's defaults.
                job.overlap_grad_reduce = commit.dp_overlap;
                job.overlap_param_gather = commit.dp_overlap;
                job.overlap_p2p_comm = commit.p2p_overlap;
                assume.push(format!(
                    "data parallel: Megatron-LM {} ({}) {}",
                    commit.sha, commit.date, commit.what
                ));
            }
            job.tp_comm_overlap = has("--tp-comm-overlap");
            // Runs published before Megatron-LM 260cba71 (2026-04-16) hide
            // the steady-state forward sends as well (`Job::
            // p2p_forward_send_waits`): NeMo 24.07, Megatron-Bridge 25.09 and
            // 25.11 (Megatron-Core 0.14–0.15), the 2024 Megatron-Core README
            // tables. Later runs (Megatron-Bridge 26.04) and a user's own rows
            // are priced with today's code.
            let before_send_wait = matches!(engine, Some("nemo"))
                || (engine == Some("megatron-bridge")
                    && (row.source.contains("release 25.09")
                        || row.source.contains("release 25.11")))
                || fam == Family::Meg24
                || row.id.starts_with("MCORE-");
            if before_send_wait {
                job.p2p_forward_send_waits = false;
            }
            if matches!(engine, Some("nemo" | "megatron-bridge"))
                && row.tp > 1
                && run.tp_comm_overlap.is_none()
                && row.sp.as_deref() != Some("no")
            {
                // The vendors' performance recipes run TP with sequence
                // parallelism and userbuffers TP overlap
                // ([ref:megatron-bridge-recipes]).
                job.tp_comm_overlap = true;
                assume.push(format!(
                    "tp_comm_overlap: on (not stated; {} performance recipes overlap TP communication when TP > 1, with sequence parallelism)",
                    engine.unwrap_or_default()
                ));
            }
            job.flash_attention = !has("no flash");
            // Megatron-Bridge's performance configs keep and reduce the main
            // gradients in bf16 (`grad_reduce_in_fp32 = False`,
            // [ref:megatron-bridge-recipes]): the 2/2/12 recipe.
            // NeMo 24.07's performance runs use Apex's distributed_fused_adam
            // with a contiguous gradient buffer in `grad_sync_dtype`, which
            // NVIDIA's H100 examples set to bf16 (NeMo-Framework-Launcher
            // `launcher_scripts/conf/training/llama/llama3_8b.yaml`,
            // `examples/training/llama/h100/llama3_8b_fp8.sh`
            // `+training.model.optim.grad_sync_dtype=bf16`).
            let bf16_grads = matches!(engine, Some("megatron-bridge" | "nemo"));
            if bf16_grads {
                job.recipe = Recipe::ADAM_16B;
                job.recipe_name = RecipeName::Adam16b;
            }
            if engine == Some("nemo")
                && run.arch == Some(Arch::Nemotron)
                && row.model.contains("340B")
                && row.source.contains("NeMo 24.07")
            {
                // NeMo-Framework-Launcher 24.07's only Nemotron-340B training
                // config, `launcher_scripts/conf/training/nemotron/
                // nemotron_340b.yaml`, runs `distributed_fused_adam` with
                // `dtype: bf16`: Apex `DistributedFusedAdam` keeps its
                // parameter shard and both Adam moments in that dtype, 2 + 2
                // + 2 bytes per parameter over D instead of 4 + 4 + 4.
                job.recipe.optimizer_bytes = 6.0;
                assume.push("optimizer: bf16 states, 6 B per parameter over D (NeMo-Framework-Launcher 24.07 nemotron_340b.yaml optim.dtype bf16; the summary's run is taken to keep it)".into());
            }
            if engine == Some("megatron-bridge") {
                // Megatron-Bridge 25.09/25.11 (tags v0.1.0rc4, v0.2.0) run
                // Megatron-Core 0.14+ (v0.2.0 pins 3rdparty/Megatron-LM at
                // 0d8e071): its `GPTModelProvider` turns on
                // `cross_entropy_loss_fusion`, and the performance configs
                // set `cross_entropy_fusion_impl = "te"` (the Llama and
                // DeepSeek providers, `scripts/performance/configs/*.yaml`
                // at v0.1.0rc4, `utils/helpers.py` at v0.2.0): TE's in-place
                // fused cross-entropy (`memory::loss_buffer_bytes`). The
                // MoE experts apply the routing probabilities in the
                // weighted SwiGLU (`experts.py` core_v0.14.0), so the
                // combine saves no expert output (`moe::RoutedSaved`).
                job.engine_memory.loss = LossBuffers::TeFusedInPlace;
                job.engine_memory.moe_probs_in_expert = true;
                if let Some(layers) = megatron_bridge_offload_layers(
                    run.gpu_type.as_deref(),
                    named.as_deref(),
                    run.zero,
                    row.pp,
                    run.precision,
                    run.fp8_recipe,
                ) {
                    job.activation_offload_layers = layers;
                    assume.push(format!("activation offload: {layers} of 80 layers' activations to host memory over NVLink-C2C (Megatron-Bridge Llama3-70B Megatron-FSDP recipe on this GPU, cpu_offloading_num_layers = {layers})"));
                }
                assume.push(format!(
                    "memory: Megatron-Bridge — TE fused cross-entropy in place (2 B per logit){}",
                    if row.run.experts.is_some() {
                        ", MoE probabilities applied in the expert activation (Megatron-Core 0.14)"
                    } else {
                        ""
                    }
                ));
            }
            assume.push(format!(
                "software: Megatron-Core{} — bf16 with {} main grads, flash attention, distributed optimizer, overlap-grad-reduce {}, overlap-param-gather {}, overlap-p2p-comm {}{}",
                engine.map(|e| format!(" ({e})")).unwrap_or_default(),
                match engine {
                    Some("megatron-bridge") => "bf16 (grad_reduce_in_fp32 off)",
                    Some("nemo") => "bf16 (distributed_fused_adam grad_sync_dtype bf16)",
                    _ => "fp32",
                },
                job.overlap_grad_reduce, job.overlap_param_gather, job.overlap_p2p_comm,
                if job.p2p_forward_send_waits {
                    " (forward sends waited for, Megatron-LM since 260cba71)"
                } else {
                    " (forward sends hidden too, before Megatron-LM 260cba71)"
                }
            ));
        }
    }
    match (run.tp_comm_overlap, run.async_tp) {
        (Some(on), _) => job.tp_comm_overlap = on,
        (None, Some(true)) => {
            job.tp_comm_overlap = true;
            assume.push("async TP: priced as TP communication overlapped with the GEMMs (--tp-comm-overlap)".into());
        }
        _ => {}
    }

    // --- Precision of the linear GEMMs (`precision`, `fp8_recipe`).
    if let Some(Precision::Low(p)) = run.precision {
        use crate::spec::Precision as P;
        let torchao = engine == Some("torchtitan");
        job.precision = p;
        job.fp8_kernels = if torchao {
            Fp8Kernels::Torchao
        } else {
            Fp8Kernels::Te
        };
        match (p, run.fp8_recipe) {
            (P::Fp8, Some(RowRecipe::Fp8(r))) => job.fp8_recipe = r,
            (P::Fp8, Some(RowRecipe::Mx)) => {
                return Err(Unpriced::new(
                    "fp8_recipe: mx with precision fp8",
                    "fp8_recipe `mx` is MX block scaling, but precision says fp8 (write mxfp8)",
                ));
            }
            (P::Fp8, None) => {
                let deepseek =
                    engine == Some("other") && run.card.as_deref() == Some("deepseek-v3");
                let (r, why) = if torchao {
                    (
                        Fp8Recipe::Current,
                        "torchtitan's float8 default, tensorwise",
                    )
                } else if deepseek {
                    (
                        Fp8Recipe::Blockwise,
                        "DeepSeek-V3's own recipe, 1×128 tiles and 128×128 blocks, arXiv 2412.19437 §3.3.2",
                    )
                } else if engine == Some("megatron-bridge") {
                    (
                        Fp8Recipe::Current,
                        // [ref:megatron-bridge-recipes]
                        "Megatron-Bridge's default fp8_recipe, tensorwise",
                    )
                } else {
                    (
                        Fp8Recipe::Delayed,
                        "Megatron-LM's and Transformer Engine's default",
                    )
                };
                job.fp8_recipe = r;
                assume.push(format!("fp8_recipe: {r} (not stated; {why})"));
            }
            (_, Some(RowRecipe::Fp8(r))) => {
                return Err(Unpriced::new(
                    "fp8_recipe: not for this precision",
                    format!(
                        "fp8_recipe `{r}` is an FP8 recipe, but precision says {p} (which fixes its own block scaling)"
                    ),
                ));
            }
            _ => {}
        }
        job.fp8_param_gather = has("fp8 all-gather") || has("--fp8-param-gather");
        // Megatron-Bridge's FP8 current-scaling precision config (the
        // performance tables' `fp8_cs`) gathers parameters in FP8
        // ([ref:megatron-bridge-fp8-cs]).
        // Its MXFP8 config does too (`bf16_with_mxfp8_mixed`:
        // `fp8_param_gather = True`, `src/megatron/bridge/training/
        // mixed_precision.py` at v0.2.0 and v0.4.1, the releases of the
        // 25.11 and 26.04 tables). Its NVFP4 config does not in those
        // releases (`bf16_with_nvfp4_mixed` sets `fp8_param_gather = False`;
        // `fp4_param_gather` arrived after v0.4.1, in v0.5.0), so NVFP4 rows
        // keep the bf16 parameters and gather them in bf16.
        let bridge_config = match (p, job.fp8_recipe) {
            (P::Fp8, Fp8Recipe::Current) => {
                Some("bf16_with_fp8_current_scaling_mixed sets fp8_param_gather")
            }
            (P::Mxfp8, _) => Some("bf16_with_mxfp8_mixed sets fp8_param_gather"),
            _ => None,
        };
        if let Some(config) = bridge_config
            && engine == Some("megatron-bridge")
            && !job.fp8_param_gather
        {
            job.fp8_param_gather = true;
            assume.push(format!(
                "fp8_param_gather: on (not stated; Megatron-Bridge's {config} = True)"
            ));
        }
        crate::cost::precision::check(&gpu, &job)
            .map_err(|e| Unpriced::new("precision: not on this GPU", e.to_string()))?;
        assume.push(format!(
            "precision: {p} linears{} by {}, weights {}{}{}",
            if p == P::Fp8 {
                format!(" ({} scaling)", job.fp8_recipe)
            } else {
                String::new()
            },
            if torchao {
                "torchao float8 (torchtitan)"
            } else {
                "Transformer Engine"
            },
            if torchao {
                "cast at every use, bf16 inputs saved"
            } else {
                "cast once per step and cached, FP8 inputs saved"
            },
            if job.fp8_param_gather {
                ", parameters all-gathered in FP8"
            } else {
                ""
            },
            if crate::cost::precision::torchao_rowwise_measured(&gpu, &job) {
                "; dense linears (casts included) at torchao's measured H100 row-wise speed-up over bf16 by shape"
            } else {
                ""
            }
        ));
    }

    // --- MoE routing and the recipes' MoE switches.
    if model.moe.is_some() {
        let r = moe_recipe(row);
        job.moe_capacity_factor = r.capacity_factor;
        assume.push(match r.capacity_factor {
            Some(c) => format!(
                "moe: token drop at capacity factor {c}, every expert padded to capacity (the model column says tokendrop; Megatron-Bridge `apply_moe_token_drop`)"
            ),
            None => "moe: dropless, force-balanced (random) routing: the random-routing skew floor (Megatron-Bridge MoE benchmarks, `moe_router_force_load_balancing`)".into(),
        });
        if r.a2a_overlap {
            job.moe_a2a_overlap = true;
        }
        if let Some(on) = r.overlap_grad_reduce {
            job.overlap_grad_reduce = on;
        }
        if let Some(on) = r.tp_comm_overlap
            && run.tp_comm_overlap.is_none()
        {
            job.tp_comm_overlap = on;
            assume.retain(|a| !a.starts_with("tp_comm_overlap:"));
        }
        if let Some(why) = r.why {
            assume.push(format!("recipe: {why}"));
        }
    }

    // --- Layout.
    let cp = row.cp.unwrap_or(1);
    let ep = row.ep.unwrap_or(1);
    let etp = run.etp.unwrap_or(1);
    if (ep > 1 || etp > 1) && model.moe.is_none() {
        return Err(Unpriced::new(
            "ep: dense model",
            format!("ep {ep} / etp {etp} on a dense model (no card or MoE columns)"),
        ));
    }
    let world = row.dp as u64 * row.tp as u64 * row.pp as u64 * cp as u64;
    if world != row.num_gpus {
        return Err(format!(
            "dp·tp·pp·cp = {world} differs from num_gpus {}",
            row.num_gpus
        )
        .into());
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
        _ => {
            if row.recompute.is_none() {
                assume.push("recompute: none (not stated; Megatron default)".into());
            }
            Recompute::None
        }
    };
    let sp = match row.sp.as_deref() {
        Some("yes") => true,
        Some("no") => false,
        _ if engine == Some("kempnerforge") && row.tp > 1 => {
            // KempnerForge's TP plan uses SequenceParallel unless PP or tied
            // embeddings (kempnerforge/distributed/tensor_parallel.py).
            let on = row.pp == 1 && !model.architecture.tied_embeddings;
            assume.push(format!(
                "sp: {} (not stated; kempnerforge runs SequenceParallel with TP unless PP or tied embeddings)",
                if on { "on" } else { "off" }
            ));
            on
        }
        _ => {
            // --tp-comm-overlap requires sequence parallelism (Megatron);
            // Megatron-Bridge's performance configs turn SP on with TP
            // (`WorkloadBaseConfig.sequence_parallel = TP > 1`,
            // [ref:megatron-bridge-moe-recipes]).
            let bridge = engine == Some("megatron-bridge") && row.tp > 1;
            let on = row.tp > 1 && (job.tp_comm_overlap || bridge);
            assume.push(format!(
                "sp: {} (not stated; {})",
                if on { "on" } else { "off" },
                if on && job.tp_comm_overlap {
                    "--tp-comm-overlap requires it"
                } else if on {
                    "Megatron-Bridge's performance configs set sequence_parallel = TP > 1"
                } else {
                    "Megatron default"
                }
            ));
            on
        }
    };
    let zero = match run.zero {
        Some(z) => z,
        None => {
            let z = match (fam, engine) {
                (Family::Nar21 | Family::Kor22, _) => 0,
                (Family::Bloom, _) | (_, Some("megatron-deepspeed")) => 1,
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
            if run != &RunColumns::default() {
                assume.push(format!("zero: {z} (not stated)"));
            }
            z
        }
    };
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
    } else if engine == Some("megatron-bridge")
        && run.card.as_deref() == Some("deepseek-v3")
        && row.run.gpu_type.as_deref() == Some("h100-sxm")
        && row.pp == 8
        && vpp == 4
        && layers == 61
    {
        // Megatron-Bridge's DeepSeek-V3 H100 performance run sets
        // `pipeline_model_parallel_layout = "Et|(tt|)*30mL"` for its pp = 8,
        // vp = 4 (`scripts/performance/run_script.py` at v0.1.0rc4): the
        // embedding and one layer, thirty stages of two, and a last stage
        // of the MTP block and the loss; the card's MTP layer is priced
        // there with the output layer (`cost::mtp`).
        let mut s = vec![2u32; 32];
        s[0] = 1;
        s[31] = 0;
        assume.push(
            "split: Megatron-Bridge layout Et|(tt|)*30mL — 1, 2×30, 0 layers over the 32 stages (the last holds the MTP block, priced from the card's mtp_layers = 1, and the loss)".into(),
        );
        Some(s)
    } else if engine == Some("megatron-bridge")
        && named.as_deref() == Some("qwen3-235b-a22b")
        && (layers + 2).is_multiple_of(row.pp * vpp)
        && row.pp * vpp > 1
    {
        // Megatron-Bridge's Qwen3-235B-A22B recipe sets
        // `account_for_embedding_in_pipeline_split` and
        // `account_for_loss_in_pipeline_split`
        // (`recipes/qwen/qwen3_235b_a22b.py` at v0.1.0rc4,
        // `recipes/qwen/qwen3_moe.py` at v0.2.0): the embedding and the loss
        // each take a layer slot, so the first and the last of the p·v
        // stages hold one layer fewer.
        let chunks = row.pp * vpp;
        let per = (layers + 2) / chunks;
        let mut s = vec![per; chunks as usize];
        s[0] -= 1;
        s[chunks as usize - 1] -= 1;
        assume.push(format!(
            "split: Megatron-Bridge account_for_embedding/loss_in_pipeline_split — {} layers per stage, {} on the first and last of {chunks}",
            per,
            per - 1
        ));
        Some(s)
    } else {
        None
    };
    if !layers.is_multiple_of(row.pp * vpp) && split.is_none() {
        assume.push(format!(
            "split: {layers} layers over {} stages, uneven (the first stages take one more)",
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
        ep,
        etp,
        cp_comm: if engine == Some("torchtitan") {
            // torchtitan's `context_parallel_rotate_method` defaults to
            // "allgather" (torchtitan `config_manager.py`, git 9dec370,
            // the commit of its Dec 2024 benchmarks).
            CpComm::AllGather
        } else {
            CpComm::Ring
        },
        ..Layout::dense(row.dp, row.tp, row.pp, cp)
    };
    let convention = match (fam, run.hardware_flops) {
        (Family::Kor22, _) => FlopConvention::Korthikanti,
        // The BLOOM log's TFLOP/s before 02-21 came from the old estimator
        // (the notes say so); from 02-21 on, PR #251's Eq. 3.
        (Family::Bloom, _) if notes.contains("pre-02-21 estimator") => {
            assume.push(
                "TFLOP/s: Megatron-DeepSpeed's estimator before PR #251, 8·B·s·non-embedding parameters (notes: pre-02-21 estimator)"
                    .into(),
            );
            FlopConvention::MdsPre251
        }
        (Family::Nar21 | Family::Bloom, _) => FlopConvention::NarayananEq3,
        _ if notes.contains("Eq.3") => FlopConvention::NarayananEq3,
        (_, Some(true)) => FlopConvention::Hardware,
        _ if engine == Some("nemo") => FlopConvention::NemoFullAttention,
        _ => FlopConvention::Megatron,
    };
    if convention == FlopConvention::NarayananEq3 && recompute != Recompute::Full {
        return Err("Eq. 3 TFLOP/s assume full recompute, but the row says otherwise".into());
    }
    let memory = match (run.mem_kind, row.measured_mem_gb) {
        // KempnerForge logs `torch.cuda.max_memory_allocated()` / 1024³
        // (`kempnerforge/metrics/memory.py` `get_memory_stats`, "peak_gb").
        (Some(MemKind::Logged), Some(_)) if engine == Some("kempnerforge") => {
            assume.push(
                "memory: kempnerforge's logged peak is torch.cuda.max_memory_allocated (metrics/memory.py)"
                    .into(),
            );
            MemKind::TorchAllocated
        }
        (Some(k), _) => k,
        // torchtitan logs `max_reserved_gib` (the caching allocator's
        // `reserved_bytes.all.peak`, train.py and metrics.py at 9dec370).
        (None, Some(_)) if engine == Some("torchtitan") => {
            assume.push(
                "memory: read as torch max reserved (mem_kind not stated; torchtitan logs max_reserved_gib)"
                    .into(),
            );
            MemKind::TorchReserved
        }
        (None, Some(_)) => {
            assume.push("memory: read as nvidia-smi (mem_kind not stated)".into());
            MemKind::NvidiaSmi
        }
        (None, None) => MemKind::NvidiaSmi,
    };
    let mem_in_gb = match (run.mem_in_gb, row.measured_mem_gb) {
        (Some(g), _) => g,
        (None, Some(_)) => {
            assume.push("memory unit: GiB (mem_unit not stated; nvidia-smi MiB / 1024)".into());
            false
        }
        (None, None) => false,
    };
    // The limits every command applies (src/limits.rs), before pricing.
    job.check().map_err(|e| {
        let text = e
            .to_string()
            .replace("--global-batch", "gbs")
            .replace("--seq-len", "seq");
        Unpriced::new("size: beyond meshplan's limits", text)
    })?;
    crate::limits::check_layout(&layout, layers)
        .map_err(|e| Unpriced::new("size: beyond meshplan's limits", e))?;
    let vocab_padded = crate::cost::layer::padded_vocab(vocab, row.tp) as f64;
    let mut case = Case {
        row: row.clone(),
        family: fam,
        model,
        gpu,
        cluster,
        job,
        layout,
        convention,
        vocab_padded,
        memory,
        mem_in_gb,
        assumptions: assume,
    };
    // A convention the row states (`flops_convention`) stands, agreeing or not.
    if run.hardware_flops.is_none()
        && let Some(note) = convention_from_own_numbers(&mut case)
    {
        case.assumptions.push(note);
    }
    if let Some(note) = tflops_outvoted(&mut case) {
        case.assumptions.push(note);
    }
    Ok(case)
}

/// A row that gives TFLOP/s, MFU and a step time, all measured, where the
/// MFU (at the GPU's dense bf16 peak) and the step time (through the row's
/// FLOP convention) agree within [`CONVENTION_AGREEMENT`] and the TFLOP/s
/// disagrees with both by more: the TFLOP/s figure is the odd one (a
/// transcription or a derivation, e.g. an aggregate PFLOP/s divided by the
/// GPU count), so the case compares the MFU's. Worked (MEGASCALE-175B-MLM-
/// 1024, 1,024 A100, 11.9 s): MFU 44.7% × 312 = 139.5 TFLOP/s, the step
/// time implies 137.2, the row's TFLOP/s says 128.8.
fn tflops_outvoted(case: &mut Case) -> Option<String> {
    let row = &case.row;
    let (tf, mfu, t) = (
        row.measured_tflops_per_gpu?,
        row.measured_mfu?,
        row.measured_step_s?,
    );
    let from_mfu = mfu * case.gpu.peak_tflops_bf16;
    let from_step = case.flops() / t / row.num_gpus as f64 / 1e12;
    let off = |a: f64, b: f64| (a / b - 1.0).abs();
    let outvoted = off(from_mfu, from_step) <= CONVENTION_AGREEMENT
        && off(tf, from_mfu) > CONVENTION_AGREEMENT
        && off(tf, from_step) > CONVENTION_AGREEMENT;
    if !outvoted {
        return None;
    }
    case.row.measured_tflops_per_gpu = None;
    Some(format!(
        "TFLOP/s: the row's {tf} disagrees with its MFU ({mfu} × {} = {from_mfu:.1}) and its step time ({t} s: {from_step:.1}), which agree; the MFU's figure is compared",
        case.gpu.peak_tflops_bf16
    ))
}

/// A row that gives TFLOP/s and an MFU compares the TFLOP/s; when the
/// MFU says another figure (MFU × the dense bf16 peak in model FLOPs,
/// against the TFLOP/s counted as model FLOPs, more than
/// [`CONVENTION_AGREEMENT`] apart) the case says that it was not
/// compared, with both figures (a review's crafted MEGASCALE-175B-MLM-1024
/// whose three figures all disagree dropped its MFU silently). MEG24-01's
/// 408.8 TFLOP/s against 0.41 × 989 = 405.5 (0.8%, the MFU's rounding)
/// gets no note.
fn mfu_not_compared(case: &Case) -> Option<String> {
    let row = &case.row;
    let (tf, mfu) = (row.measured_tflops_per_gpu?, row.measured_mfu?);
    let model = FlopConvention::Megatron.flops(
        &case.model,
        &case.job,
        case.vocab_padded,
        case.layout.recompute,
    );
    let tf_model = tf * model / case.flops();
    let from_mfu = mfu * case.gpu.peak_tflops_bf16;
    if (from_mfu / tf_model - 1.0).abs() <= CONVENTION_AGREEMENT {
        return None;
    }
    Some(format!(
        "MFU: the row's {mfu} × {} = {from_mfu:.1} TFLOP/s disagrees with its {tf} TFLOP/s ({tf_model:.1} as model FLOPs); the TFLOP/s is compared, the MFU is not",
        case.gpu.peak_tflops_bf16
    ))
}

/// Largest disagreement between a row's measured TFLOP/s and the TFLOP/s
/// its measured step time implies under a FLOP convention for that
/// convention to be taken as the one the row counted in (2%: the rounding
/// of a published TFLOP/s figure and step time, well inside
/// [`CONSISTENCY`]).
pub const CONVENTION_AGREEMENT: f64 = 0.02;

/// A row that gives both TFLOP/s and a step time, measured, and does not
/// state its FLOP convention, says which FLOP count its TFLOP/s used: the
/// one under which the two agree. When the
/// convention chosen from the row's source disagrees by more than
/// [`CONSISTENCY`] and a hardware count (Narayanan et al. 2021 Eq. 3 for a
/// full-recompute row, else model FLOPs plus the recomputed forward)
/// agrees within [`CONVENTION_AGREEMENT`], the case takes that one (the
/// closer if both do) and says so. Worked (MTNLG-1, 530B, B 1920, s 2048,
/// 2240 GPUs, 60.1 s): Megatron model FLOPs 1.270e19 per step imply 94
/// TFLOP/s against the measured 126; Eq. 3's 1.693e19 imply 125.7.
fn convention_from_own_numbers(case: &mut Case) -> Option<String> {
    let (tf, t) = (case.row.measured_tflops_per_gpu?, case.row.measured_step_s?);
    let n = case.row.num_gpus as f64;
    let implied = |c: FlopConvention| {
        c.flops(
            &case.model,
            &case.job,
            case.vocab_padded,
            case.layout.recompute,
        ) / t
            / n
            / 1e12
    };
    let off = |c: FlopConvention| (implied(c) / tf - 1.0).abs();
    let chosen = case.convention;
    if off(chosen) <= CONSISTENCY {
        return None;
    }
    let mut candidates = vec![FlopConvention::Hardware];
    if case.layout.recompute == Recompute::Full {
        candidates.insert(0, FlopConvention::NarayananEq3);
    }
    let best = candidates
        .into_iter()
        .filter(|c| *c != chosen && off(*c) <= CONVENTION_AGREEMENT)
        .min_by(|a, b| off(*a).total_cmp(&off(*b)))?;
    let note = format!(
        "TFLOP/s: counted as {} (the measured {tf} TFLOP/s and {t} s agree under it, {:.1}; under {} they imply {:.1})",
        best.name(),
        implied(best),
        chosen.name(),
        implied(chosen)
    );
    case.convention = best;
    Some(note)
}

/// The model card a row without a `card` cell ran, from its model column:
/// the Megatron-Bridge performance tables name their models as
/// `Qwen3_235B_a22B` (the card `qwen3-235b-a22b`, from its public config,
/// `models/qwen3-235b-a22b.toml`). `None` for any other name.
fn card_of_model_column(model: &str) -> Option<&'static str> {
    const NAMES: &[(&str, &str)] = &[("qwen3_235b_a22b", "qwen3-235b-a22b")];
    let m = model.to_ascii_lowercase();
    NAMES
        .iter()
        .find(|(name, _)| m.split_whitespace().next() == Some(*name))
        .map(|(_, card)| *card)
}

/// MoE switches of the run behind a row.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct MoeRecipe {
    /// Capacity factor (`--moe-expert-capacity-factor`); `None` = dropless.
    capacity_factor: Option<f64>,
    /// `--overlap-moe-expert-parallel-comm`.
    a2a_overlap: bool,
    /// `--overlap-grad-reduce` when the recipe sets it against the default.
    overlap_grad_reduce: Option<bool>,
    /// TP communication overlap when the recipe sets it against the default.
    tp_comm_overlap: Option<bool>,
    /// What the recipe sets, for the assumptions.
    why: Option<&'static str>,
}

/// The MoE switches of a row's run ([ref:megatron-bridge-moe-recipes]):
/// token drop when the model column says `(tokendrop)` (Megatron-Bridge's
/// `apply_moe_token_drop`: capacity factor 1.0, padded to capacity), else
/// dropless; and for the Megatron-Bridge H100 rows what the release's
/// performance script sets: 25.09 DeepSeek-V3 (`run_script.py`, `A2A_1F1B`
/// on H100) overlaps the all-to-all with 1F1B and turns the gradient-reduce
/// overlap off; 25.11 Qwen3 (`workload_base_configs.py`, H100 presets,
/// `moe_a2a_overlap = True`) overlaps the all-to-all, and its 235B preset
/// turns TP communication overlap off.
fn moe_recipe(row: &MeasuredRow) -> MoeRecipe {
    let model = row.model.to_ascii_lowercase();
    let mut r = MoeRecipe {
        capacity_factor: model.contains("(tokendrop)").then_some(1.0),
        ..MoeRecipe::default()
    };
    let h100 = row.run.gpu_type.as_deref() == Some("h100-sxm");
    if row.run.engine.as_deref() != Some("megatron-bridge") || !h100 {
        return r;
    }
    if row.id.starts_with("MBRIDGE-25.09-") && model.starts_with("deepseekv3") {
        r.a2a_overlap = true;
        r.overlap_grad_reduce = Some(false);
        r.why = Some(
            "Megatron-Bridge 25.09 DeepSeek-V3 on H100: DeepEP dispatch, all-to-all overlapped with 1F1B, overlap_grad_reduce off; its recompute of mla_up_proj and mlp and DeepEP's per-node deduplication are not modelled",
        );
    } else if row.id.starts_with("MBRIDGE-25.11-")
        && model.starts_with("qwen3")
        && r.capacity_factor.is_none()
    {
        r.a2a_overlap = true;
        if model.starts_with("qwen3_235b") {
            r.tp_comm_overlap = Some(false);
            r.why = Some(
                "Megatron-Bridge 25.11 Qwen3-235B on H100: all-to-all overlapped with 1F1B (moe_a2a_overlap), tp_comm_overlap off",
            );
        } else {
            r.why = Some(
                "Megatron-Bridge 25.11 Qwen3 on H100: all-to-all overlapped with 1F1B (moe_a2a_overlap)",
            );
        }
    }
    r
}

/// The project's model card `card`, with the row's sequence length, and
/// its vocabulary. Shape columns that disagree with the card are named in
/// an assumption (the card is the model the row ran).
fn card_model(
    row: &MeasuredRow,
    card: &str,
    cat: &Catalog,
    assume: &mut Vec<String>,
) -> Result<(Model, u64), Unpriced> {
    let mut model = cat
        .model(card)
        .map_err(|_| {
            Unpriced::new(
                "card: unknown",
                format!("card `{card}` is not a model card of this project"),
            )
        })?
        .clone();
    let a = &model.architecture;
    let mut differs = Vec::new();
    for (col, stated, card_value) in [
        ("layers", row.layers.map(u64::from), a.layers as u64),
        ("hidden", row.hidden, a.hidden),
        ("heads", row.heads.map(u64::from), a.heads as u64),
        ("kv_heads", row.kv_heads.map(u64::from), a.kv_heads as u64),
        ("ffn", row.ffn, a.ffn),
    ] {
        // An MoE row's `ffn` cell holds the expert width (tests/data/README:
        // "DeepSeekV3: ffn=expert ffn 2048").
        let expert_width = col == "ffn"
            && model
                .moe
                .as_ref()
                .is_some_and(|m| stated == Some(m.expert_ffn));
        if let Some(v) = stated
            && v != card_value
            && !expert_width
        {
            differs.push(format!("{col} {v} (card {card_value})"));
        }
    }
    assume.push(if differs.is_empty() {
        format!("model: card `{}`", model.name)
    } else {
        format!(
            "model: card `{}`; the row's {} differ, the card is used",
            model.name,
            differs.join(", ")
        )
    });
    if let (Some(moe), Some(e)) = (&model.moe, row.run.experts)
        && moe.experts != e
    {
        return Err(format!(
            "experts {e} but card `{card}` has {} routed experts",
            moe.experts
        )
        .into());
    }
    model.architecture.max_seq = model.architecture.max_seq.max(row.seq);
    let vocab = model.architecture.vocab;
    Ok((model, vocab))
}

/// The model a row's shape and `arch` columns describe.
fn column_model(
    row: &MeasuredRow,
    fam: Family,
    assume: &mut Vec<String>,
) -> Result<(Model, u64), Unpriced> {
    let notes = &row.notes;
    let run = &row.run;
    let h = row.hidden.ok_or_else(|| {
        Unpriced::new("hidden: empty", "hidden is empty and the row names no card")
    })?;
    let vocab_text = row
        .vocab
        .as_deref()
        .ok_or_else(|| Unpriced::new("vocab: empty", "vocab is empty and the row names no card"))?;
    let heads = match row.heads {
        Some(a) => a,
        None => match number_after(notes, "NHEADS=") {
            Some(a) => {
                assume.push(format!("heads: {a} (notes: NHEADS={a})"));
                a as u32
            }
            None => return Err(Unpriced::new("heads: empty", "heads not stated")),
        },
    };
    if heads == 0 || !h.is_multiple_of(heads as u64) {
        return Err(format!("hidden {h} is not divisible by {heads} heads").into());
    }
    let kv_heads = row.kv_heads.unwrap_or_else(|| {
        assume.push(format!("kv_heads: {heads} (multi-head attention)"));
        heads
    });
    let arch = run.arch.unwrap_or(Arch::Gpt);
    let family_is_gpt = arch == Arch::Gpt;
    let ffn = row.ffn.unwrap_or_else(|| {
        assume.push(format!("ffn: 4h = {} (GPT)", 4 * h));
        4 * h
    });
    let vocab: u64 = match vocab_text.trim_start_matches('~').parse::<u64>() {
        Ok(_) if vocab_text.starts_with('~') && fam == Family::Bloom => {
            // BLOOM's tokenizer has 250,680 entries, padded to 250,880
            // (bigscience/bloom config.json vocab_size).
            assume.push(format!(
                "vocab: 250880 for `{vocab_text}` (BLOOM tokenizer padded, bigscience/bloom config.json)"
            ));
            250_880
        }
        Ok(v) => {
            if vocab_text.starts_with('~') {
                assume.push(format!("vocab: {v} for `{vocab_text}`"));
            }
            v
        }
        Err(_) => return Err(format!("vocab `{vocab_text}` is not a number").into()),
    };
    // Block family: GPT rows keep the family conventions of their source;
    // Llama and Nemotron blocks have RoPE, no biases and no dropout.
    let (position, dropout, bias, gated, norm, tied) = match (arch, fam) {
        // BLOOM: ALiBi, no dropout in the tr11 recipe (bigscience tr11-176B-ml).
        (Arch::Gpt, Family::Bloom) => (
            PositionEmbedding::Alibi,
            false,
            true,
            false,
            Norm::Layernorm,
            true,
        ),
        // GPT in Megatron-LM: learned positions, dropout 0.1, biases (defaults).
        (Arch::Gpt, _) => (
            PositionEmbedding::Learned,
            true,
            true,
            false,
            Norm::Layernorm,
            true,
        ),
        (Arch::Nemotron, _) => (
            PositionEmbedding::Rope,
            false,
            false,
            false,
            Norm::Layernorm,
            false,
        ),
        // Llama and the MoE families without a card.
        _ => (
            PositionEmbedding::Rope,
            false,
            false,
            true,
            Norm::Rmsnorm,
            false,
        ),
    };
    if !family_is_gpt {
        assume.push(format!(
            "block: {} MLP, {:?} norm, RoPE, no biases, no dropout, untied embeddings (arch {:?})",
            if gated { "gated (SwiGLU)" } else { "2-matrix" },
            norm,
            arch
        ));
    }
    let architecture = Architecture {
        layers: row.layers.unwrap_or(1),
        hidden: h,
        heads,
        kv_heads,
        head_dim: None,
        ffn,
        gated_mlp: gated,
        vocab,
        tied_embeddings: tied,
        norm,
        position_embedding: position,
        max_seq: row.seq,
        linear_bias: bias,
        dropout,
        rope_theta: None,
        qk_layernorm: false,
        norm_epsilon: None,
        rope_scaling: None,
        tokenizer_vocab: None,
        mtp_layers: 0,
        mtp_loss_scale: None,
    };
    if heads % kv_heads.max(1) != 0 {
        return Err(format!("{heads} heads are not a multiple of {kv_heads} kv heads").into());
    }
    let moe = if arch == Arch::Moe {
        match (run.experts, run.topk, run.moe_ffn) {
            (Some(experts), Some(top_k), Some(expert_ffn)) => {
                assume.push(format!(
                    "moe: {experts} experts, top-{top_k}, expert FFN {expert_ffn}, {} shared, every layer MoE (no card)",
                    run.shared_experts.unwrap_or(0)
                ));
                Some(crate::spec::model::MoeSpec {
                    experts,
                    top_k,
                    expert_ffn,
                    shared_experts: run.shared_experts.unwrap_or(0),
                    shared_expert_ffn: None,
                    first_k_dense: 0,
                    load_balancing: None,
                    aux_loss_coeff: None,
                    score_function: None,
                    expert_bias: false,
                    groups: None,
                    group_top_k: None,
                    topk_scaling_factor: None,
                })
            }
            _ => {
                return Err(Unpriced::new(
                    "moe: no card and no experts/topk/moe_ffn",
                    "a mixture-of-experts row needs a card or the experts, topk and moe_ffn columns",
                ));
            }
        }
    } else {
        None
    };
    let mut model = Model {
        name: row.id.clone(),
        aliases: vec![],
        source: row.source.clone(),
        known_params: 1.0,
        known_active_params: None,
        architecture,
        moe,
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
            // GPT rows: tied or untied, whichever matches the stated size
            // (Megatron's GPT ties by default, some recipes untie). Llama,
            // Nemotron and MoE blocks untie, and a size rounded in the
            // model's name ("70B") cannot tell them apart.
            if let Some(p) = stated.filter(|_| family_is_gpt) {
                model.architecture.tied_embeddings = true;
                let tied_p = model.total_params();
                model.architecture.tied_embeddings = false;
                let untied = model.total_params();
                let use_untied = (untied - p).abs() < (tied_p - p).abs();
                model.architecture.tied_embeddings = !use_untied;
                assume.push(format!(
                    "embeddings {}: {:.2}B params tied vs {:.2}B untied against the stated {:.1}B",
                    if use_untied { "untied" } else { "tied" },
                    tied_p / 1e9,
                    untied / 1e9,
                    p / 1e9
                ));
            } else {
                assume.push(format!(
                    "embeddings {} ({} default)",
                    if tied { "tied" } else { "untied" },
                    if tied { "Megatron" } else { "Llama" }
                ));
            }
        }
        None => {
            let p = stated.ok_or_else(|| {
                Unpriced::new(
                    "layers: empty",
                    "layers not stated and no size to derive them from",
                )
            })?;
            // P = L·(per-layer params) + embedding.
            model.architecture.layers = 1;
            let one = model.dense_layer_params();
            let rest = model.total_params() - one;
            let exact = (p - rest) / one;
            // The BLOOM log's topology sweeps (02-20, "the number of layers
            // had to be tweaked to fit PP and NHIDDEN was fixed") ran a
            // layer count that is a multiple of the stage count; the rows'
            // notes say "NLAYERS adjusted per PP" or "NLAYERS not stated"
            // for those tables. Their TFLOP/s and
            // step-time pairs say so: under the pre-02-21 estimator they
            // agree to 0.03% with 80 layers for "200B" at P 4 and P 8 and 78
            // for "194B" at P 6, and are 1.3% apart with the rounded 79 and
            // 77 (tests/validate_v2.rs).
            let per_pp = fam == Family::Bloom
                && (notes.contains("NLAYERS adjusted per PP")
                    || notes.contains("NLAYERS not stated"));
            let l = if per_pp {
                let p_stages = row.pp.max(1) as f64;
                ((exact / p_stages).round().max(1.0) * p_stages) as u32
            } else {
                exact.round().max(1.0) as u32
            };
            model.architecture.layers = l;
            assume.push(format!(
                "layers: {l} from the stated size {:.0}B ({} embeddings, (P − V·h)/params per layer rounded{})",
                p / 1e9,
                if tied { "tied" } else { "untied" },
                if per_pp {
                    " to a multiple of the stage count: the sweep tweaked NLAYERS to fit PP"
                } else {
                    ""
                }
            ));
        }
    }
    Ok((model, vocab))
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

/// The source code of row `id`: up to its first `-`, upper-cased
/// (`MBRIDGE-25.09-…` → `MBRIDGE`; a user's `llama3-8b-run` → `LLAMA3`).
pub fn source_code(id: &str) -> String {
    id.split('-').next().unwrap_or("").to_ascii_uppercase()
}

/// The comparison of one row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    /// Row id.
    pub id: String,
    /// Source code: the row id up to its first `-`, upper-cased (`MBRIDGE`,
    /// `TT`, …), as the regime table's `source` groups it.
    pub source: String,
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
    /// The regime the row belongs to.
    pub regime: Regime,
    /// Predicted over measured throughput, minus 1 (TFLOP/s where measured,
    /// else the inverse step time): positive = the model is optimistic.
    pub speed_error: Option<f64>,
}

/// The regime of a priced row: what a training lead plans by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Regime {
    /// GPU profile.
    pub gpu: String,
    /// GEMM precision (`bf16`, `fp16`).
    pub precision: &'static str,
    /// ZeRO / FSDP stage.
    pub zero: u8,
    /// Context parallel in use (C > 1).
    pub context_parallel: bool,
    /// Mixture of experts.
    pub moe: bool,
    /// Training software (`engine` column, or the source family's).
    pub engine: String,
    /// GPUs: `≤64`, `65–512`, `513–4096`, `>4096`.
    pub scale: &'static str,
    /// Source family: the row id up to its first `-` (`NAR21`, `TT`, `KF`).
    pub source: String,
}

impl Regime {
    /// The regime of `case`.
    pub fn of(case: &Case) -> Regime {
        let n = case.row.num_gpus;
        Regime {
            gpu: case.gpu.name.clone(),
            precision: match case.row.run.precision {
                Some(Precision::Fp16) => "fp16",
                Some(Precision::Bf16) => "bf16",
                Some(Precision::Low(p)) => p.as_str(),
                // As the software assumptions price the row: Megatron-LM
                // 2021–22 in fp16; the BLOOM sweeps in fp16 unless their
                // notes name the BF16Optimizer.
                None => match case.family {
                    Family::Nar21 | Family::Kor22 => "fp16",
                    Family::Bloom if !case.row.notes.contains("BF16Optimizer") => "fp16",
                    _ => "bf16",
                },
            },
            zero: case.layout.zero,
            context_parallel: case.layout.cp > 1,
            moe: case.model.moe.is_some(),
            engine: case.row.run.engine.clone().unwrap_or_else(|| {
                match case.family {
                    Family::Bloom => "megatron-deepspeed",
                    _ => "megatron",
                }
                .to_string()
            }),
            scale: crate::trust::scale_band(n),
            source: source_code(&case.row.id),
        }
    }

    /// `(dimension, value)` pairs the summary groups by.
    pub fn keys(&self) -> [(&'static str, String); 8] {
        [
            ("source", self.source.clone()),
            ("gpu", self.gpu.clone()),
            ("precision", self.precision.to_string()),
            ("zero", self.zero.to_string()),
            ("cp>1", self.context_parallel.to_string()),
            ("moe", self.moe.to_string()),
            ("engine", self.engine.clone()),
            ("scale", self.scale.to_string()),
        ]
    }
}

/// Throughput errors of one regime value (`zero = 3`, `gpu = h200`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegimeLine {
    /// Dimension (`source`, `gpu`, `precision`, `zero`, `cp>1`, `moe`,
    /// `engine`, `scale`).
    pub dimension: &'static str,
    /// Its value.
    pub value: String,
    /// Rows with a throughput comparison.
    pub count: usize,
    /// Median |error|.
    pub median_abs: f64,
    /// Median signed error (positive: the model is optimistic).
    pub median_signed: f64,
    /// 90th percentile of |error| (nearest rank).
    pub p90_abs: f64,
    /// Largest |error|.
    pub max_abs: f64,
    /// Rows the model predicts faster than measured.
    pub optimistic: usize,
}

/// How many rows were read, predicted, skipped (per reason) and assumed
/// (per assumption).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counts {
    /// Rows in the table (parsed or not).
    pub rows: usize,
    /// Rows predicted.
    pub predicted: usize,
    /// Rows skipped, per reason class.
    pub skipped: Vec<(String, usize)>,
    /// Predicted rows that needed an assumption, per assumption (the text
    /// before its first colon).
    pub assumed: Vec<(String, usize)>,
}

/// A row that could not be predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    /// Row id.
    pub id: String,
    /// The reason's class, for the summary (`tp: empty`, `fp8 not modelled yet`).
    pub kind: String,
    /// Why, with the file, line, field and value where they apply.
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
    /// Rows predicted, skipped and assumed.
    pub counts: Counts,
    /// Throughput errors per regime.
    pub regimes: Vec<RegimeLine>,
    /// Conventions used for the comparison.
    pub conventions: Vec<String>,
}

impl ValidationReport {
    /// The throughput error (predicted / measured − 1) of row `id`, if it
    /// was predicted and its throughput measured.
    pub fn speed_error_of(&self, id: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|x| x.id == id)
            .and_then(|x| x.speed_error)
    }
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
/// set aside (15%: wide enough for rounded logs; the BLOOM rows before 02-21
/// agree to 0.03% in their own convention, [`FlopConvention::MdsPre251`],
/// and BLOOMPQ-043's 4× is what it catches).
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
    if let Some(note) = mfu_not_compared(case) {
        assumptions.push(note);
    }
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
                "step: the measured {t} s implies {implied:.1} TFLOP/s, not the measured {tf}; step time not compared"
            ));
        }
    }
    let (smi, fits) = nvidia_smi_gib(
        case.family,
        e.peak_bytes / GIB,
        case.gpu.memory_gib,
        case.gpu.reserve_gib,
    );
    // The predicted figure of the kind the row measured: the allocated peak
    // for `torch.cuda.max_memory_allocated()`, the nvidia-smi model for the
    // reserved pool, nvidia-smi itself and framework logs.
    // The caching allocator's reserved pool holds PyTorch's tensors only;
    // the CUDA context and NCCL's buffers are outside it (PyTorch
    // `torch.cuda.memory_reserved`, docs/source/notes/cuda.rst "Memory
    // management"), so a reserved peak is compared with the allocated peak,
    // not with the nvidia-smi model (which adds `reserve_gib`) — except the
    // Megatron-DeepSpeed model, which has no separate allocator term.
    let predicted_mem = match case.memory {
        MemKind::TorchAllocated => e.peak_bytes / GIB,
        MemKind::TorchReserved if case.family != Family::Bloom => e.peak_bytes / GIB,
        MemKind::NvidiaSmi | MemKind::TorchReserved | MemKind::Logged => smi,
    };
    let unit = if case.mem_in_gb { 1e9 / GIB } else { 1.0 };
    let memory = case
        .row
        .measured_mem_gb
        .map(|m| Metric::new(m * unit, predicted_mem, false));
    let throughput_error = if case.measured_tflops().is_some() {
        tflops.map(|m| m.error)
    } else {
        step.map(|m| m.error)
    };
    let r = RowResult {
        id: case.row.id.clone(),
        source: source_code(&case.row.id),
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
        regime: Regime::of(case),
        speed_error: if case.measured_tflops().is_some() {
            tflops.map(|m| m.error)
        } else {
            step.map(|m| m.measured / m.predicted - 1.0)
        },
    };
    (r, e)
}

/// Validate every row of `rows`.
pub fn validate(rows: &[MeasuredRow], cat: &Catalog, overlay: OverlayRef) -> ValidationReport {
    validate_table(
        &Table {
            rows: rows.to_vec(),
            skipped: Vec::new(),
            file: std::path::PathBuf::new(),
        },
        cat,
        overlay,
    )
}

/// Validate every row of `table`; the rows that did not parse are listed
/// as skipped with their reasons, first.
pub fn validate_table(table: &Table, cat: &Catalog, overlay: OverlayRef) -> ValidationReport {
    let mut results = Vec::new();
    let mut skipped = table.skipped.clone();
    for row in &table.rows {
        match build_case(row, cat, overlay) {
            Ok(case) => {
                if let Some(s) = refused(&case, &table.file) {
                    skipped.push(s);
                    continue;
                }
                let (r, _) = compare(&case);
                if r.tflops.is_none()
                    && r.step_s.is_none()
                    && r.memory_gib.is_none()
                    && !r.out_of_memory
                {
                    skipped.push(Skipped {
                        id: row.id.clone(),
                        kind: "nothing measured".into(),
                        reason: "nothing measured (no TFLOP/s, MFU, step time or memory, not out of memory)".into(),
                    });
                    continue;
                }
                results.push(r);
            }
            Err(u) => skipped.push(Skipped {
                id: row.id.clone(),
                kind: u.kind,
                reason: u.reason,
            }),
        }
    }
    let summary = summarize(&results);
    let fit = fit_lines(&results);
    let counts = Counts {
        rows: table.rows.len() + table.skipped.len(),
        predicted: results.len(),
        skipped: tally(skipped.iter().map(|s| s.kind.clone())),
        assumed: tally(results.iter().flat_map(|r| {
            let mut classes: Vec<String> = r
                .assumptions
                .iter()
                .map(|a| a.split(':').next().unwrap_or(a).trim().to_string())
                .collect();
            classes.sort();
            classes.dedup();
            classes
        })),
    };
    let regimes = regime_lines(&results);
    ValidationReport {
        rows: results,
        summary,
        fit,
        skipped,
        counts,
        regimes,
        conventions: vec![
            "error = predicted / measured − 1".into(),
            "throughput: TFLOP/s per GPU in the row's FLOP convention where the row measured TFLOP/s or MFU, else step time".into(),
            "TFLOP/s conventions: NAR21 and BLOOMPQ from 02-21 Narayanan Eq. 3 (recompute counted); BLOOMPQ before 02-21 Megatron-DeepSpeed pre-PR-#251 8·B·s·non-embedding params; KOR22 Korthikanti model FLOPs; flops_convention = hardware: model FLOPs + recomputed forward; others Megatron num_floating_point_operations".into(),
            "memory: measured nvidia-smi GB read as GiB unless mem_unit says GB; predicted nvidia-smi = allocated peak of the worst rank + the GPU profile's reserve_gib (also for logged figures); torch-max-allocated and torch-max-reserved figures are compared with the allocated peak (the reserved pool holds no CUDA context or NCCL buffers); torchtitan's unstated figures are its logged max_reserved_gib, kempnerforge's logged ones max_memory_allocated, except Megatron-DeepSpeed rows (BLOOMPQ): 1.26 × allocated + 5.5 GiB (allocator cache and DeepSpeed buffers; fitted on BLOOMPQ-005/031/079/119 only)".into(),
            "fit: allocated ≤ memory − reserve (as search); BLOOMPQ: predicted nvidia-smi ≤ device memory".into(),
            "derived (*): the measured figure is computed from another measured one through the FLOP convention".into(),
            "regimes: speed error = predicted / measured throughput − 1; optimistic = predicted faster than measured".into(),
        ],
    }
}

/// A parsed row that cannot be compared, as a [`Skipped`] entry naming
/// the file, line and field:
/// - its stated layout breaks a rule under which the cost model's price
///   means nothing ([`Rule::price_holds`]: the batch rule B % (D·b), the
///   interleave rule, a mesh that is not the row's GPU count): such a run
///   cannot have happened as stated, and its error would enter the medians;
///   the rule's own sentences give the reason;
/// - its `measured_tflops_per_gpu` is above the GPU's dense peak of the
///   row's precision ([`cost::precision::dense_peak_tflops`]): a typo or a
///   unit slip (sparse peak, per node), not a measurement. (MFU above 1 is
///   refused when the row is read.)
///
/// [`Rule::price_holds`]: crate::rules::Rule::price_holds
pub fn refused(case: &Case, file: &Path) -> Option<Skipped> {
    let row = &case.row;
    let at = if file.as_os_str().is_empty() {
        format!("line {}", row.line)
    } else {
        format!("{}, line {}", file.display(), row.line)
    };
    let broken: Vec<crate::rules::Violation> = crate::rules::explain(
        &case.problem(),
        &crate::rules::Policy::default(),
        &case.layout,
        None,
    )
    .into_iter()
    .filter(|v| !v.rule.price_holds())
    .collect();
    if let Some(first) = broken.first() {
        let l = &case.layout;
        return Some(Skipped {
            id: row.id.clone(),
            kind: format!("{}: layout cannot run", first.code),
            reason: format!(
                "{at}: the stated layout (num_gpus {}, dp {}, tp {}, pp {}, cp {}, vpp {}, mbs {}, gbs {}) cannot run: {}",
                row.num_gpus,
                l.dp,
                l.tp,
                l.pp,
                l.cp,
                l.vpp,
                l.micro_batch,
                row.gbs,
                broken
                    .iter()
                    .map(|v| format!("[{}] {}", v.code, v.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    let peak = cost::precision::dense_peak_tflops(&case.gpu, case.job.precision);
    if let Some(tf) = row.measured_tflops_per_gpu
        && tf > peak
    {
        return Some(Skipped {
            id: row.id.clone(),
            kind: "measured_tflops_per_gpu: above peak".into(),
            reason: format!(
                "{at}: field measured_tflops_per_gpu: {tf} is above the {} dense {} peak, {peak} TFLOP/s (hardware/gpus/{}.toml); a measured rate cannot exceed it",
                case.gpu.name, case.job.precision, case.gpu.name
            ),
        });
    }
    // A step time, the row's only throughput figure, whose model FLOPs
    // alone would run faster than the peak (the row's own count may hold
    // more, so model FLOPs are the floor). Beside a TFLOP/s or MFU figure,
    // a disagreeing step time is set aside by [`CONSISTENCY`] instead
    // (BLOOMPQ-043's, logged for another batch).
    if row.measured_tflops_per_gpu.is_some() || row.measured_mfu.is_some() {
        return None;
    }
    let model_flops = compute::model_flops_per_step(
        &case.model,
        case.job.global_batch as f64,
        case.job.seq_len as f64,
    );
    match row.measured_step_s {
        Some(t) if model_flops / t / row.num_gpus as f64 / 1e12 > peak => Some(Skipped {
            id: row.id.clone(),
            kind: "measured_step_s: above peak".into(),
            reason: format!(
                "{at}: field measured_step_s: {t} s would run the step's {:.3e} model FLOPs at {:.0} TFLOP/s per GPU, above the {} dense {} peak, {peak} TFLOP/s (hardware/gpus/{}.toml); a measured step cannot be that short",
                model_flops,
                model_flops / t / row.num_gpus as f64 / 1e12,
                case.gpu.name,
                case.job.precision,
                case.gpu.name
            ),
        }),
        _ => None,
    }
}

/// How often each value of `items` occurs, most frequent first.
fn tally(items: impl Iterator<Item = String>) -> Vec<(String, usize)> {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for x in items {
        *m.entry(x).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = m.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// Nearest-rank percentile `q` (0–1) of `xs`.
fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Speed errors of `rows` per regime dimension and value.
pub fn regime_lines(rows: &[RowResult]) -> Vec<RegimeLine> {
    let mut groups: BTreeMap<(&'static str, String), Vec<f64>> = BTreeMap::new();
    for r in rows {
        if let Some(e) = r.speed_error {
            for key in r.regime.keys() {
                groups.entry(key).or_default().push(e);
            }
        }
    }
    let order = [
        "source",
        "gpu",
        "precision",
        "zero",
        "cp>1",
        "moe",
        "engine",
        "scale",
    ];
    let mut out: Vec<RegimeLine> = groups
        .into_iter()
        .map(|((dimension, value), errs)| {
            let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
            RegimeLine {
                dimension,
                value,
                count: errs.len(),
                median_abs: median(&abs),
                median_signed: median(&errs),
                p90_abs: percentile(&abs, 0.9),
                max_abs: abs.iter().copied().fold(0.0, f64::max),
                optimistic: errs.iter().filter(|e| **e > 0.0).count(),
            }
        })
        .collect();
    out.sort_by_key(|l| order.iter().position(|d| *d == l.dimension));
    out
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
    let mut sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
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
    let mut sources: Vec<&str> = rows.iter().map(|r| r.source.as_str()).collect();
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
    // Sources are row-id prefixes (a user's may be long): the column takes
    // the longest, at least 8.
    let sw = r
        .summary
        .iter()
        .map(|s| s.source.chars().count())
        .chain(r.fit.iter().map(|f| f.source.chars().count()))
        .max()
        .unwrap_or(0)
        .max(8);
    writeln!(
        w,
        "{:<11} {:<sw$} {:>5} {:>9} {:>9}  worst",
        "metric", "source", "rows", "median", "max"
    )?;
    for s in &r.summary {
        writeln!(
            w,
            "{:<11} {:<sw$} {:>5} {:>8.1}% {:>8.1}%  {}",
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
                "  {:<sw$} ran {:>3}, predicted to fit {:>3} ({:.0}%); out of memory {:>2}, predicted not to fit {:>2}",
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
    writeln!(w)?;
    writeln!(
        w,
        "By regime (throughput: speed error = predicted / measured − 1; signed: its median, + = optimistic; median, p90, max: of |error|; optimistic = predicted faster):"
    )?;
    writeln!(
        w,
        "  {:<10} {:<20} {:>5} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "dimension", "value", "rows", "signed", "median", "p90", "max", "optimistic"
    )?;
    for g in &r.regimes {
        writeln!(
            w,
            "  {:<10} {:<20} {:>5} {:>+8.1}% {:>8.1}% {:>8.1}% {:>8.1}% {:>7} of {}",
            g.dimension,
            g.value,
            g.count,
            100.0 * g.median_signed,
            100.0 * g.median_abs,
            100.0 * g.p90_abs,
            100.0 * g.max_abs,
            g.optimistic,
            g.count
        )?;
    }
    writeln!(w)?;
    let c = &r.counts;
    writeln!(
        w,
        "Rows: {} in the table, {} predicted, {} skipped.",
        c.rows,
        c.predicted,
        c.rows - c.predicted
    )?;
    for (kind, n) in &c.skipped {
        writeln!(w, "  skipped {n:>3}: {kind}")?;
    }
    for (kind, n) in &c.assumed {
        writeln!(w, "  assumed {n:>3}: {kind}")?;
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
    /// The first row of the search's ranking (tie groups, better-validated
    /// first: what `search` lists first), its short form and predicted
    /// tokens/s; `best` is the fastest predicted.
    pub ranked_first: Option<(String, f64)>,
    /// The stage split the ILP chose when the uniform one was rejected
    /// (layers per stage), as the search would.
    pub split: Option<Vec<u32>>,
    /// What the row's software could run, as the search was restricted.
    pub software: &'static str,
}

impl PlanCheck {
    /// Predicted tokens/s of the search's first choice over the published
    /// layout's, when the published layout is valid.
    pub fn ratio(&self) -> Option<f64> {
        self.rank?;
        let (_, best) = self.best.as_ref()?;
        (self.published_tokens_per_s > 0.0).then(|| best / self.published_tokens_per_s)
    }

    /// [`PlanCheck::ranked_first`]'s predicted tokens/s over the published
    /// layout's, for rows whose published layout is valid.
    pub fn ranked_ratio(&self) -> Option<f64> {
        self.rank?;
        let (_, first) = self.ranked_first.as_ref()?;
        (self.published_tokens_per_s > 0.0).then(|| first / self.published_tokens_per_s)
    }
}

/// The distribution of [`PlanCheck::ratio`] over `plans`: `(rows, median,
/// 90th percentile, max)`, nearest rank; `None` without a ratio.
pub fn plan_ratios(plans: &[PlanCheck]) -> Option<(usize, f64, f64, f64)> {
    ratio_stats(plans.iter().filter_map(PlanCheck::ratio).collect())
}

/// The same for [`PlanCheck::ranked_ratio`]: `(rows, median, 90th
/// percentile, max)`.
pub fn ranked_plan_ratios(plans: &[PlanCheck]) -> Option<(usize, f64, f64, f64)> {
    ratio_stats(plans.iter().filter_map(PlanCheck::ranked_ratio).collect())
}

fn ratio_stats(mut r: Vec<f64>) -> Option<(usize, f64, f64, f64)> {
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    let at = |q: f64| r[((q * r.len() as f64).ceil() as usize).clamp(1, r.len()) - 1];
    Some((r.len(), median(&r), at(0.9), r[r.len() - 1]))
}

/// Upper edges of the bins [`plan_ratio_bins`] counts [`PlanCheck::ratio`]
/// in (the last bin is everything above 1.50); 1.0 is "the published
/// layout is meshplan's first choice".
pub const PLAN_RATIO_EDGES: [f64; 5] = [1.0, 1.05, 1.15, 1.30, 1.50];

/// How many of `plans`' ratios fall in each bin of [`PLAN_RATIO_EDGES`]
/// (`≤ 1.00`, `(1.00, 1.05]`, …, `> 1.50`); a ratio within 1e-9 of an edge
/// counts in the bin below it.
pub fn plan_ratio_bins(plans: &[PlanCheck]) -> [usize; 6] {
    let mut bins = [0; 6];
    for r in plans.iter().filter_map(PlanCheck::ratio) {
        let i = PLAN_RATIO_EDGES
            .iter()
            .position(|e| r <= e + 1e-9)
            .unwrap_or(PLAN_RATIO_EDGES.len());
        bins[i] += 1;
    }
    bins
}

/// What the software of a measured run could launch, for `validate
/// --plan`: a plan its team could not have run is no fair comparison, so
/// the search leaves out what came later.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capabilities {
    /// Sequence parallelism ([ref:korthikanti-2022], Megatron-LM 2022).
    pub sp: bool,
    /// Selective recompute ([ref:korthikanti-2022]).
    pub selective: bool,
    /// Highest ZeRO stage.
    pub max_zero: u8,
    /// Context parallelism (Megatron-Core 2024).
    pub cp: bool,
    /// Tensor and pipeline parallelism.
    pub model_parallel: bool,
    /// The interleaved 1F1B schedule ([ref:narayanan-2021]; not in
    /// DeepSpeed's pipeline engine).
    pub interleaving: bool,
    /// The sentence `--plan` prints.
    pub what: &'static str,
}

impl Capabilities {
    /// The capabilities of `case`'s software, from its source family and
    /// engine.
    pub fn of(case: &Case) -> Capabilities {
        let all = Capabilities {
            sp: true,
            selective: true,
            max_zero: 3,
            cp: true,
            model_parallel: true,
            interleaving: true,
            what: "everything meshplan searches",
        };
        match (case.family, case.row.run.engine.as_deref()) {
            (_, Some("deepspeed")) => Capabilities {
                sp: false,
                selective: false,
                cp: false,
                model_parallel: false,
                interleaving: false,
                what: "DeepSpeed ZeRO without Megatron: data parallel and ZeRO 0-3 only",
                ..all
            },
            (Family::Nar21, _) => Capabilities {
                sp: false,
                selective: false,
                max_zero: 0,
                cp: false,
                what: "Megatron-LM April 2021: TP, PP and interleaving; no SP or selective recompute (2022), no distributed optimizer, no CP",
                ..all
            },
            (Family::Kor22, _) => Capabilities {
                max_zero: 0,
                cp: false,
                what: "Megatron-LM 2022: TP, PP, interleaving, SP and selective recompute; no distributed optimizer, no CP",
                ..all
            },
            (Family::Bloom, _) | (_, Some("megatron-deepspeed")) => Capabilities {
                sp: false,
                selective: false,
                max_zero: 1,
                cp: false,
                interleaving: false,
                what: "Megatron-DeepSpeed 2021-22: TP, PP (DeepSpeed's pipeline engine, no interleaving) and ZeRO 0-1; no SP, selective recompute or CP",
                ..all
            },
            _ => all,
        }
    }
}

/// Search the row's model, GPU count and global batch (micro-batch fixed
/// to the row's, to keep the space small) and place the published layout.
pub fn plan_check(case: &Case) -> PlanCheck {
    use crate::search::{self, Filter, Space};
    let pr = case.problem();
    let policy = crate::rules::Policy::default();
    let (mut set, mut eval) = search::judge(&pr, &policy, &case.layout);
    // As the search does: a layout rejected only because its layers do not
    // split evenly over p·v, or only for memory, is re-split (by `split::solve`)
    // before it is rejected (Llama 3 405B ran 126 layers over 16 stages).
    let mut split = None;
    let only = |r: crate::rules::Rule| set.len() == 1 && set.contains(r);
    if case.layout.split.is_none()
        && case.layout.pp > 1
        && (only(crate::rules::Rule::LayersPp) || only(crate::rules::Rule::Memory))
        && let Ok(s) = crate::split::solve(&pr, &case.layout)
        && let Some(c) = search::with_split(&pr, &policy, &case.layout, s.layers)
    {
        (set, eval) = (crate::rules::RuleSet::default(), c.eval);
        split = c.layout.split;
    }
    let can = Capabilities::of(case);
    let one = |allowed: bool| (!allowed).then_some(1);
    let space = Space {
        filter: Filter {
            micro_batch: Some(case.layout.micro_batch),
            sp: (!can.sp).then_some(false),
            tp: one(can.model_parallel),
            pp: one(can.model_parallel),
            vpp: one(can.interleaving),
            cp: one(can.cp),
            ..Filter::default()
        },
        recompute_modes: crate::layout::Recompute::ALL
            .into_iter()
            .filter(|&r| can.selective || r != crate::layout::Recompute::Selective)
            .collect(),
        zero_stages: (0..=can.max_zero).collect(),
        keep_all: true,
        top_k: 1,
        ..Space::default()
    };
    let result = search::search(&pr, &space);
    let rank = set
        .is_empty()
        .then(|| search::rank_among(&result.all, &eval));
    // The published layout counts among the valid ones even when the
    // search did not reach it (re-split by the ILP here, beyond the
    // search's split budget), so its rank never exceeds the count.
    let listed = result
        .all
        .iter()
        .any(|c| c.layout.short() == case.layout.short() && c.layout.split == split);
    let valid = result.stats.valid + u64::from(set.is_empty() && !listed);
    PlanCheck {
        id: case.row.id.clone(),
        rejected_by: set.iter().map(|r| r.code().to_string()).collect(),
        rank,
        valid,
        published_tokens_per_s: eval.tokens_per_s,
        // The published layout is a candidate too: when the search's first
        // choice is slower (the published split or micro-batch count is one
        // the search did not reach), the first choice is the published one.
        best: match result.top.first() {
            Some(c) if !(set.is_empty() && eval.tokens_per_s > c.eval.tokens_per_s) => {
                Some((c.layout.short(), c.eval.tokens_per_s))
            }
            _ if set.is_empty() => Some((
                format!("{} (the published layout)", case.layout.short()),
                eval.tokens_per_s,
            )),
            _ => None,
        },
        ranked_first: crate::report::ranked_rows(&pr, result.pool(), Default::default(), 1)
            .first()
            .map(|r| (r.layout.short(), r.tokens_per_s)),
        split,
        software: can.what,
    }
}

/// Activation-offload layers of Megatron-Bridge's Llama3-70B Megatron-FSDP
/// pretraining recipes (activations only, `cpu_offloading_weights =
/// False`), by GPU and precision, in
/// `scripts/performance/configs/llama3/workload_base_configs.py` at v0.2.0
/// (release 25.11, `LLAMA3_70B_<GPU>_<PRECISION>_BASE_CONFIG`) and the same
/// counts in the `_V1`/`_V2` presets of
/// `scripts/performance/configs/llama/llama3_workload_base_configs.py` at
/// v0.4.1 (release 26.04): GB300 BF16 30 and FP8 current scaling 20, GB200
/// BF16 20 and FP8 current scaling 40, B200 FP8 current scaling 5. The
/// MXFP8 and NVFP4 recipes run without Megatron-FSDP and offload nothing;
/// `None` for every other row.
fn megatron_bridge_offload_layers(
    gpu_type: Option<&str>,
    card: Option<&str>,
    zero: Option<u8>,
    pp: u32,
    precision: Option<Precision>,
    fp8_recipe: Option<RowRecipe>,
) -> Option<u32> {
    use crate::spec::{Fp8Recipe, Precision as P};
    if card != Some("llama3-70b") || zero != Some(3) || pp != 1 {
        return None;
    }
    let bf16 = matches!(precision, None | Some(Precision::Bf16));
    let fp8_cs = precision == Some(Precision::Low(P::Fp8))
        && fp8_recipe == Some(RowRecipe::Fp8(Fp8Recipe::Current));
    match (gpu_type?, bf16, fp8_cs) {
        ("gb300", true, _) => Some(30),
        ("gb300", _, true) => Some(20),
        ("gb200", true, _) => Some(20),
        ("gb200", _, true) => Some(40),
        ("b200", _, true) => Some(5),
        _ => None,
    }
}

#[cfg(test)]
mod offload_tests {
    use super::*;
    use crate::spec::{Fp8Recipe, Precision as P};

    /// The recipes' `cpu_offloading_num_layers` (Megatron-Bridge v0.2.0 and
    /// v0.4.1, [`megatron_bridge_offload_layers`]): by GPU and precision,
    /// and only for Llama3-70B under Megatron-FSDP without pipelining.
    #[test]
    fn offload_follows_the_recipe_of_the_rows_precision() {
        let cs = Some(RowRecipe::Fp8(Fp8Recipe::Current));
        let fp8 = Some(Precision::Low(P::Fp8));
        let bf16 = Some(Precision::Bf16);
        let at = |gpu: &str, precision, recipe| {
            megatron_bridge_offload_layers(
                Some(gpu),
                Some("llama3-70b"),
                Some(3),
                1,
                precision,
                recipe,
            )
        };
        assert_eq!(at("gb200", fp8, cs), Some(40));
        assert_eq!(at("gb200", bf16, None), Some(20));
        assert_eq!(at("gb300", fp8, cs), Some(20));
        assert_eq!(at("gb300", bf16, None), Some(30));
        assert_eq!(at("b200", fp8, cs), Some(5));
        // No offload in the recipes without Megatron-FSDP or without one.
        assert_eq!(at("b200", bf16, None), None);
        assert_eq!(
            at("gb200", Some(Precision::Low(P::Mxfp8)), Some(RowRecipe::Mx)),
            None
        );
        assert_eq!(
            at("gb200", fp8, Some(RowRecipe::Fp8(Fp8Recipe::Delayed))),
            None
        );
        assert_eq!(at("h100", fp8, cs), None);
        let other = |card, zero, pp| {
            megatron_bridge_offload_layers(Some("gb200"), Some(card), Some(zero), pp, fp8, cs)
        };
        assert_eq!(other("llama3-8b", 3, 1), None);
        assert_eq!(other("llama3-70b", 1, 1), None);
        assert_eq!(other("llama3-70b", 3, 4), None);
    }
}

#[cfg(test)]
mod plan_ratio_tests {
    use super::*;

    fn plan(published: f64, best: f64) -> PlanCheck {
        PlanCheck {
            id: "x".into(),
            rejected_by: Vec::new(),
            rank: Some(1),
            valid: 1,
            published_tokens_per_s: published,
            best: Some(("b".into(), best)),
            ranked_first: None,
            split: None,
            software: "",
        }
    }

    #[test]
    fn ranked_first_ratio_is_its_own_distribution() {
        // Published 100 tokens/s; fastest predicted 120, ranked first 105
        // (a better-validated plan in the fastest's tie group): 1.20 and
        // 1.05. A rejected published layout (no rank) has neither.
        let mut p = plan(100.0, 120.0);
        p.ranked_first = Some(("r".into(), 105.0));
        assert_eq!(p.ratio(), Some(1.2));
        assert_eq!(p.ranked_ratio(), Some(1.05));
        assert_eq!(
            ranked_plan_ratios(&[p.clone()]),
            Some((1, 1.05, 1.05, 1.05))
        );
        p.rank = None;
        assert_eq!((p.ratio(), p.ranked_ratio()), (None, None));
    }

    #[test]
    fn ratio_bins_count_each_ratio_once() {
        // Ratios 1.0, 1.04, 1.05 (on the edge: the lower bin), 1.2, 1.6 and
        // a rejected layout (no ratio).
        let mut plans: Vec<PlanCheck> = [(100.0, 100.0), (100.0, 104.0), (100.0, 105.0)]
            .iter()
            .chain(&[(100.0, 120.0), (100.0, 160.0)])
            .map(|&(p, b)| plan(p, b))
            .collect();
        let mut rejected = plan(100.0, 130.0);
        rejected.rank = None;
        plans.push(rejected);
        assert_eq!(plan_ratio_bins(&plans), [1, 2, 0, 1, 0, 1]);
    }
}

#[cfg(test)]
mod megatron_commit_tests {
    use super::*;
    use crate::cost::TimePart;

    #[test]
    fn named_commits_are_read_or_refused() {
        let c = megatron_lm_commit("Megatron-LM commit 285068c8 baseline; x")
            .unwrap()
            .unwrap();
        assert_eq!((c.sha, c.dp_overlap), ("285068c8", false));
        // The full hash names the same commit.
        assert_eq!(
            megatron_lm_commit("Megatron-LM commit 285068c8108e0e8e6538f54fe27c3ee86c5217a2")
                .unwrap(),
            Some(c)
        );
        assert_eq!(
            megatron_lm_commit("method=Megatron-LM. conf=high").unwrap(),
            None
        );
        let e = megatron_lm_commit("Megatron-LM commit abc1234 baseline").unwrap_err();
        assert!(
            e.reason.contains("`abc1234`") && e.reason.contains("285068c8"),
            "{e}"
        );
        assert!(megatron_lm_commit("Megatron-LM commit  x").is_err());
    }

    /// The MegaScale Megatron-LM baseline rows (Jiang et al. 2024 Table 2,
    /// Megatron-LM 285068c8) price their data-parallel reduce-scatter and
    /// all-gather unhidden: exposed = total. At 1,024 GPUs (D = 16, 175B
    /// over T·p = 64 ranks, 2.74e9 parameters a rank): the fp32 gradient
    /// reduce-scatter moves 15/16 · 4 B · 2.74e9 = 10.3 GB a GPU and the
    /// bf16 gather half that, so the gradient part is twice the gather.
    #[test]
    fn megascale_baseline_rows_expose_their_dp_traffic() {
        let cat = Catalog::shipped().unwrap();
        let table = read_table(
            include_str!("../tests/data/published-dev-v2.csv"),
            std::path::Path::new("published-dev-v2.csv"),
        )
        .unwrap();
        let mut seen = 0;
        for row in table.rows.iter().filter(|r| r.id.starts_with("MEGASCALE-")) {
            let case = build_case(row, &cat, None).unwrap();
            assert!(!case.job.overlap_grad_reduce && !case.job.overlap_param_gather);
            let (_, e) = compare(&case);
            let (g, a) = (e.time[TimePart::DpGrad], e.time[TimePart::ParamGather]);
            assert!(g.exposed > 0.0 && g.exposed == g.total, "{}", row.id);
            assert!(a.exposed > 0.0 && a.exposed == a.total, "{}", row.id);
            if row.id == "MEGASCALE-175B-MLM-1024" {
                let ratio = g.total / a.total;
                assert!((ratio - 2.0).abs() < 0.01, "{ratio}");
            }
            seen += 1;
        }
        assert_eq!(seen, 8);
    }
}
