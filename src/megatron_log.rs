//! Reading a Megatron-LM training log into a measurement row, so that a
//! user calibrates (`meshplan calibrate --megatron-log FILE`) from runs they
//! already have.
//!
//! What the log holds (Megatron-LM at the commit of
//! `tests/data/megatron_flags.txt`):
//! - the arguments block that `_print_args` writes on rank 0
//!   (`megatron/training/arguments.py`): `------------------------ arguments
//!   ------------------------`, then `  name ....... value` lines, then
//!   `-------------------- end of arguments ---------------------`;
//! - the padded vocabulary that the tokenizer reports
//!   (`megatron/core/tokenizers/utils/build_tokenizer.py`): ` > padded vocab
//!   (size: V) with k dummy tokens (new size: V')`;
//! - one line per logging interval from `training_log`
//!   (`megatron/training/training.py`): ` iteration  N/ M | … | elapsed time
//!   per iteration (ms): t | throughput per GPU (TFLOP/s/GPU): x | …`, the
//!   elapsed time averaged over the interval;
//! - memory reports from `report_memory`
//!   (`megatron/training/utils/common_utils.py`): `[Rank r] (after N
//!   iterations) memory (MB) | allocated: … | max allocated: a | reserved: …
//!   | max reserved: r` (MB = 2²⁰ bytes).
//!
//! The row's step time is the median of the logged intervals after the
//! first (which holds the warm-up), its TFLOP/s the median of the same
//! intervals (Megatron's model-FLOP convention, recompute not counted), its
//! memory the largest `max reserved` reported, in GiB. The layout, model
//! shape and precision come from the arguments block; a log without one is
//! refused.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::InputError;
use crate::validate::{COLUMNS, V2_COLUMNS};

/// One Megatron-LM log, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// `name → value` of the arguments block, as printed.
    pub args: BTreeMap<String, String>,
    /// Padded vocabulary from the tokenizer's line.
    pub padded_vocab: Option<u64>,
    /// Logged intervals: (iteration, elapsed ms per iteration, TFLOP/s/GPU).
    pub intervals: Vec<(u64, f64, Option<f64>)>,
    /// Largest `max reserved` and `max allocated` reported, MiB.
    pub max_reserved_mib: Option<f64>,
    /// See `max_reserved_mib`.
    pub max_allocated_mib: Option<f64>,
}

/// The number after `key` up to the next `|`, in `line`.
fn field(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split('|')
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|x: &f64| x.is_finite())
}

/// Reads a log.
///
/// # Errors
/// [`InputError::Field`] naming the file and what is missing: no arguments
/// block, fewer than two iteration lines.
pub fn parse(text: &str, file: &Path) -> Result<Log, InputError> {
    let mut args = BTreeMap::new();
    let mut in_args = false;
    let mut seen_args = false;
    let mut log = Log {
        args: BTreeMap::new(),
        padded_vocab: None,
        intervals: Vec::new(),
        max_reserved_mib: None,
        max_allocated_mib: None,
    };
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.contains("------------------------ arguments ------------------------") {
            in_args = true;
            seen_args = true;
            continue;
        }
        if line.contains("end of arguments") {
            in_args = false;
            continue;
        }
        if in_args {
            // `  name ....... value`: the dots run to column 48.
            if let Some((name, value)) = line.split_once(" .")
                && let Some(v) = value.trim_start_matches('.').strip_prefix(' ')
            {
                args.insert(name.trim().to_string(), v.trim().to_string());
            }
            continue;
        }
        if let Some(p) = line.find("(new size: ") {
            let n = line[p + "(new size: ".len()..].trim_end_matches(')').trim();
            log.padded_vocab = n.parse().ok();
        }
        if line.contains("elapsed time per iteration (ms):") {
            let at = |problem: &str| {
                InputError::field(file, &format!("line {}", i + 1), problem.to_string())
            };
            let iter = line
                .split("iteration")
                .nth(1)
                .and_then(|r| r.split('/').next())
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| at("an iteration line without `iteration N/M`"))?;
            let ms = field(line, "elapsed time per iteration (ms):")
                .filter(|x| *x > 0.0)
                .ok_or_else(|| at("elapsed time per iteration is not a positive number"))?;
            log.intervals
                .push((iter, ms, field(line, "throughput per GPU (TFLOP/s/GPU):")));
        }
        if line.contains("memory (MB)") {
            let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(x), Some(y)) => Some(x.max(y)),
                (x, y) => x.or(y),
            };
            log.max_reserved_mib = max(log.max_reserved_mib, field(line, "| max reserved:"));
            log.max_allocated_mib = max(log.max_allocated_mib, field(line, "| max allocated:"));
        }
    }
    if !seen_args || args.is_empty() {
        return Err(InputError::field(
            file,
            "arguments",
            "no `------------------------ arguments ------------------------` block: Megatron-LM prints it on rank 0 at start-up; keep rank 0's log",
        ));
    }
    if log.intervals.len() < 2 {
        return Err(InputError::field(
            file,
            "iterations",
            format!(
                "{} iteration line(s) with `elapsed time per iteration (ms)`; two or more are needed (the first holds the warm-up)",
                log.intervals.len()
            ),
        ));
    }
    log.args = args;
    Ok(log)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Log {
    fn arg(&self, name: &str) -> Option<&str> {
        self.args
            .get(name)
            .map(String::as_str)
            .filter(|v| *v != "None")
    }

    fn flag(&self, name: &str) -> bool {
        self.arg(name) == Some("True")
    }

    /// [`Log::flag`] as the measurement table writes it: `yes` or `no`.
    fn yes_no(&self, name: &str) -> String {
        if self.flag(name) { "yes" } else { "no" }.into()
    }

    /// The measurement row of this log (columns of
    /// `tests/data/published-dev-v2.csv`), `gpu` the GPU profile it ran on.
    ///
    /// # Errors
    /// [`InputError::Field`] naming an argument the row needs that the log
    /// does not give (e.g. `num_layers`), or a vocabulary neither printed nor
    /// given.
    pub fn row(
        &self,
        id: &str,
        file: &Path,
        gpu: &str,
        vocab: Option<u64>,
    ) -> Result<BTreeMap<&'static str, String>, InputError> {
        let need = |name: &str| {
            self.arg(name).map(str::to_string).ok_or_else(|| {
                InputError::field(
                    file,
                    &format!("arguments.{name}"),
                    "missing from the arguments block",
                )
            })
        };
        let or = |name: &str, default: &str| self.arg(name).unwrap_or(default).to_string();
        let mut r: BTreeMap<&'static str, String> = BTreeMap::new();
        r.insert("id", id.to_string());
        r.insert("source", format!("Megatron-LM log {}", file.display()));
        r.insert("model", format!("{} (from its log)", id));
        r.insert("layers", need("num_layers")?);
        r.insert("hidden", need("hidden_size")?);
        let heads = need("num_attention_heads")?;
        r.insert(
            "kv_heads",
            if self.flag("group_query_attention") {
                need("num_query_groups")?
            } else {
                heads.clone()
            },
        );
        r.insert("heads", heads);
        r.insert("ffn", need("ffn_hidden_size")?);
        let vocab = vocab.or(self.padded_vocab).ok_or_else(|| {
            InputError::field(
                file,
                "vocab",
                "the log has no ` > padded vocab … (new size: V)` line; pass --vocab",
            )
        })?;
        r.insert("vocab", vocab.to_string());
        r.insert("seq", need("seq_length")?);
        r.insert("gpu", gpu.to_string());
        r.insert("gpu_type", gpu.to_string());
        r.insert("num_gpus", need("world_size")?);
        r.insert("tp", or("tensor_model_parallel_size", "1"));
        r.insert("pp", or("pipeline_model_parallel_size", "1"));
        r.insert("cp", or("context_parallel_size", "1"));
        let moe = self.arg("num_experts").is_some();
        if moe {
            r.insert("ep", or("expert_model_parallel_size", "1"));
            r.insert("etp", or("expert_tensor_parallel_size", "1"));
        }
        r.insert("dp", need("data_parallel_size")?);
        r.insert("vpp", or("virtual_pipeline_model_parallel_size", "1"));
        r.insert("mbs", need("micro_batch_size")?);
        r.insert("gbs", need("global_batch_size")?);
        r.insert(
            "recompute",
            match self.arg("recompute_granularity") {
                Some("full") => "full",
                Some("selective") => "selective",
                _ => "none",
            }
            .into(),
        );
        r.insert("sp", self.yes_no("sequence_parallel"));
        // The first interval holds the warm-up.
        let after: Vec<_> = self.intervals[1..].to_vec();
        r.insert(
            "measured_step_s",
            format!("{}", median(after.iter().map(|x| x.1 / 1e3).collect())),
        );
        let tflops: Vec<f64> = after.iter().filter_map(|x| x.2).collect();
        if !tflops.is_empty() {
            r.insert("measured_tflops_per_gpu", format!("{}", median(tflops)));
        }
        if let Some(m) = self.max_reserved_mib {
            r.insert("measured_mem_gb", format!("{}", m / 1024.0));
            r.insert("mem_kind", "torch-max-reserved".into());
            r.insert("mem_unit", "GiB".into());
        }
        let arch = if moe {
            "moe"
        } else if self.flag("swiglu") && self.arg("normalization") == Some("RMSNorm") {
            "llama"
        } else {
            "gpt"
        };
        r.insert("arch", arch.into());
        if moe {
            r.insert("experts", need("num_experts")?);
            r.insert("topk", or("moe_router_topk", "2"));
            r.insert(
                "moe_ffn",
                or("moe_ffn_hidden_size", &need("ffn_hidden_size")?),
            );
            let shared = match (
                self.arg("moe_shared_expert_intermediate_size")
                    .and_then(|s| s.parse::<u64>().ok()),
                self.arg("moe_ffn_hidden_size")
                    .and_then(|s| s.parse::<u64>().ok()),
            ) {
                (Some(s), Some(f)) if f > 0 => s / f,
                _ => 0,
            };
            r.insert("shared_experts", shared.to_string());
        }
        // bf16 unless the log says fp16 alone (`--bf16` wins over `--fp16`).
        let precision = if self.arg("fp8").is_some() {
            "fp8"
        } else if self.flag("fp16") && !self.flag("bf16") {
            "fp16"
        } else {
            "bf16"
        };
        r.insert("precision", precision.into());
        if precision == "fp8"
            && let Some(recipe) = self.arg("fp8_recipe")
            && ["delayed", "tensorwise", "blockwise", "mxfp8"].contains(&recipe)
        {
            r.insert(
                "fp8_recipe",
                match recipe {
                    "tensorwise" => "current",
                    "mxfp8" => "mx",
                    x => x,
                }
                .into(),
            );
        }
        let fsdp = self.flag("use_megatron_fsdp")
            && self.arg("data_parallel_sharding_strategy") == Some("optim_grads_params");
        let zero = if fsdp {
            "3"
        } else if self.flag("use_distributed_optimizer") {
            "1"
        } else {
            "0"
        };
        r.insert("zero", zero.into());
        r.insert("engine", "megatron".into());
        r.insert("flops_convention", "model".into());
        r.insert("oom", "no".into());
        r.insert("tp_comm_overlap", self.yes_no("tp_comm_overlap"));
        let mut notes = vec![format!(
            "step time: median of {} logged interval(s) after the first (iterations {}–{})",
            after.len(),
            after.first().map(|x| x.0).unwrap_or(0),
            after.last().map(|x| x.0).unwrap_or(0)
        )];
        for (flag, what) in [
            ("overlap_grad_reduce", "--overlap-grad-reduce"),
            ("overlap_param_gather", "--overlap-param-gather"),
        ] {
            if self.flag(flag) {
                notes.push(what.to_string());
            }
        }
        r.insert("notes", notes.join("; "));
        Ok(r)
    }
}

/// The CSV (header and one line per row) of `rows`, in the columns of
/// `tests/data/published-dev-v2.csv`; `validate` and `calibrate` read it.
pub fn csv(rows: &[BTreeMap<&'static str, String>]) -> String {
    csv_text(rows, &csv_columns(), true, false)
}

/// The columns [`csv`] writes, in its order.
pub fn csv_columns() -> Vec<&'static str> {
    COLUMNS.iter().chain(V2_COLUMNS.iter()).copied().collect()
}

/// `rows` as CSV lines in the order of `cols` (a cell a row lacks is
/// empty), with the header line first when `header`, each record ended by
/// CRLF when `crlf` (to append to a file that uses it), else LF.
pub fn csv_text<S: AsRef<str>>(
    rows: &[BTreeMap<&'static str, String>],
    cols: &[S],
    header: bool,
    crlf: bool,
) -> String {
    let mut w = csv::WriterBuilder::new()
        .terminator(if crlf {
            csv::Terminator::CRLF
        } else {
            csv::Terminator::Any(b'\n')
        })
        .from_writer(Vec::new());
    let cols: Vec<&str> = cols.iter().map(AsRef::as_ref).collect();
    // Writing to a Vec cannot fail; the `unwrap_or_default`s keep it so.
    if header {
        w.write_record(&cols).ok();
    }
    for r in rows {
        w.write_record(
            cols.iter()
                .map(|c| r.get(c).map(String::as_str).unwrap_or("")),
        )
        .ok();
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_medians() {
        let line = " [2026-11-30 10:00:00.1] iteration       20/    1000 | consumed samples:        10240 | elapsed time per iteration (ms): 9512.3 | throughput per GPU (TFLOP/s/GPU): 405.2 | learning rate: 3.0E-05 |";
        assert_eq!(
            field(line, "elapsed time per iteration (ms):"),
            Some(9512.3)
        );
        assert_eq!(
            field(line, "throughput per GPU (TFLOP/s/GPU):"),
            Some(405.2)
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
