//! The command line. Flags are documented where they are defined; `main`
//! only calls [`run`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};

use crate::calibrate::{self, Overlay};
use crate::cost::Problem;
use crate::error::InputError;
use crate::layout::{Layout, RankOrder, Recompute};
use crate::render::{self, Format};
use crate::report::{ExplainReport, Row, SearchReport};
use crate::rules::Policy;
use crate::search::{self, Filter, Space};
use crate::spec::{Catalog, Cluster, Gpu, Job, Model, RecipeName};
use crate::validate;

/// meshplan: rank the parallel layouts of an LLM training job on a GPU cluster.
#[derive(Debug, Parser)]
#[command(name = "meshplan", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Rank every valid layout by predicted throughput.
    Search(SearchArgs),
    /// Price one layout in depth and say why it is rejected or slower.
    Explain(ExplainArgs),
    /// List the shipped models, clusters or GPUs.
    List(ListArgs),
    /// Compare predictions with measured runs (CSV of `published-dev.csv` format).
    Validate(ValidateArgs),
    /// Fit a GPU's efficiencies to measured runs and write a profile overlay.
    Calibrate(CalibrateArgs),
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// Measurement CSV (columns of `tests/data/published-dev.csv`).
    file: PathBuf,
    /// Profile overlay written by `meshplan calibrate`, applied to every row
    /// on its GPU (rows on other GPUs are skipped).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Output format (`table` or `json`).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also search each row's model, GPU count and global batch (its
    /// micro-batch fixed) and print where the published layout ranks.
    #[arg(long)]
    plan: bool,
}

#[derive(Debug, Args)]
struct CalibrateArgs {
    /// Measurement CSV of the user's own runs (same format as `validate`).
    file: PathBuf,
    /// GPU profile to fit (`meshplan list gpus`), e.g. `a100-80g`.
    #[arg(long)]
    gpu: String,
    /// Where to write the overlay TOML.
    #[arg(long)]
    out: PathBuf,
    /// Use only these row ids (comma separated).
    #[arg(long, value_delimiter = ',')]
    rows: Option<Vec<String>>,
}

/// Model, hardware and job: shared by every planning command.
#[derive(Debug, Args)]
struct JobArgs {
    /// Model card name or alias (`meshplan list models`), e.g. `70b`.
    #[arg(long)]
    model: String,
    /// Cluster profile name (`meshplan list clusters`), e.g. `dgx64`.
    #[arg(long)]
    cluster: String,
    /// Plan for N GPUs of the cluster (default: all of them).
    #[arg(long)]
    gpus: Option<u64>,
    /// Global batch B in sequences (default: the model card's).
    #[arg(long)]
    global_batch: Option<u64>,
    /// Sequence length s in tokens (default: the model card's).
    #[arg(long)]
    seq_len: Option<u64>,
    /// Precision recipe: `megatron` (bf16 + fp32 main grads, 2/4/12 bytes)
    /// or `seed` (2/2/12).
    #[arg(long, value_enum, default_value_t = RecipeName::Megatron)]
    recipe: RecipeName,
    /// Price attention without flash attention (stores the s×s scores).
    #[arg(long)]
    no_flash_attention: bool,
    /// Do not overlap the DP gradient reduction with backward.
    #[arg(long)]
    no_overlap_grad_reduce: bool,
    /// Overlap TP communication with GEMMs when SP is on (`--tp-comm-overlap`).
    #[arg(long)]
    tp_comm_overlap: bool,
    /// Busiest expert rank's load over the mean (MoE), ≥ 1.0.
    #[arg(long, default_value_t = 1.0)]
    moe_imbalance: f64,
    /// Extra model cards (`*.toml`), replacing shipped ones of the same name.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Extra hardware profiles (`gpus/*.toml`, `clusters/*.toml`).
    #[arg(long)]
    hardware_dir: Option<PathBuf>,
    /// Profile overlay written by `meshplan calibrate`: replaces the GPU's
    /// efficiencies and the cluster's collective efficiencies.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Args)]
struct SearchArgs {
    #[command(flatten)]
    job: JobArgs,
    /// How many of the best layouts to print.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Largest T to try.
    #[arg(long)]
    max_tp: Option<u32>,
    /// Largest p to try.
    #[arg(long)]
    max_pp: Option<u32>,
    /// Largest C to try.
    #[arg(long)]
    max_cp: Option<u32>,
    /// Do not try context parallelism (C = 1).
    #[arg(long)]
    no_cp: bool,
    /// Largest micro-batch to try.
    #[arg(long, default_value_t = 16)]
    max_micro_batch: u32,
    /// Try T beyond one NVLink domain (costed on the NICs).
    #[arg(long)]
    allow_tp_across_nodes: bool,
    /// Fix some values, e.g. `tp=8,pp=2,recompute=selective`.
    #[arg(long, value_name = "KEY=VALUE,...")]
    fix: Option<String>,
}

#[derive(Debug, Args)]
struct ExplainArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Data-parallel size D (default: what the GPUs leave).
    #[arg(long)]
    dp: Option<u32>,
    /// Tensor-parallel size T.
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Pipeline-parallel size p.
    #[arg(long, default_value_t = 1)]
    pp: u32,
    /// Context-parallel size C.
    #[arg(long, default_value_t = 1)]
    cp: u32,
    /// Expert-parallel size E.
    #[arg(long, default_value_t = 1)]
    ep: u32,
    /// Expert tensor-parallel size ETP.
    #[arg(long, default_value_t = 1)]
    etp: u32,
    /// Virtual pipeline stages per rank v.
    #[arg(long, default_value_t = 1)]
    vpp: u32,
    /// Micro-batch size b.
    #[arg(long, default_value_t = 1)]
    mbs: u32,
    /// Activation recompute.
    #[arg(long, value_enum, default_value_t = Recompute::None)]
    recompute: Recompute,
    /// ZeRO stage (1 = Megatron distributed optimizer).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    zero: u8,
    /// Sequence parallelism.
    #[arg(long)]
    sp: bool,
    /// Rank order.
    #[arg(long, value_enum, default_value_t = RankOrder::TpCpEpDpPp)]
    order: RankOrder,
    /// Explicit layers per pipeline chunk, e.g. `19,21,21,19`.
    #[arg(long, value_delimiter = ',')]
    split: Option<Vec<u32>>,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// What to list.
    #[arg(value_enum)]
    what: ListWhat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ListWhat {
    Models,
    Clusters,
    Gpus,
}

/// A resolved planning problem (owned parts).
struct Setup {
    model: Model,
    gpu: Gpu,
    cluster: Cluster,
    job: Job,
    world: u64,
}

impl Setup {
    fn problem(&self) -> Problem<'_> {
        Problem::new(&self.model, &self.gpu, &self.cluster, &self.job, self.world)
    }
}

fn catalog(models_dir: &Option<PathBuf>, hardware_dir: &Option<PathBuf>) -> Result<Catalog> {
    let mut c = Catalog::shipped()?;
    if let Some(d) = models_dir {
        c.add_models_dir(d)?;
    }
    if let Some(d) = hardware_dir {
        c.add_hardware_dir(d)?;
    }
    Ok(c)
}

fn setup(a: &JobArgs) -> Result<Setup> {
    let cat = catalog(&a.models_dir, &a.hardware_dir)?;
    let model = cat.model(&a.model)?.clone();
    let mut cluster = cat.cluster(&a.cluster)?.clone();
    let mut gpu = cat.gpu(&cluster.gpu)?.clone();
    if let Some(path) = &a.profile {
        let o = read_overlay(path)?;
        o.check_gpu(path, &gpu.name, &cluster.name)?;
        o.apply_gpu(&mut gpu);
        o.apply_cluster(&mut cluster);
    }
    let world = a.gpus.unwrap_or(cluster.total_gpus());
    if world == 0 {
        return Err(InputError::Job("--gpus must be at least 1".into()).into());
    }
    if world > cluster.total_gpus() {
        return Err(InputError::Job(format!(
            "--gpus {} exceeds the {} GPUs of cluster {}",
            world,
            cluster.total_gpus(),
            cluster.name
        ))
        .into());
    }
    let mut job = Job::new(
        a.global_batch.unwrap_or(model.defaults.global_batch),
        a.seq_len.unwrap_or(model.defaults.seq_len),
    );
    job.recipe_name = a.recipe;
    job.recipe = a.recipe.recipe();
    job.flash_attention = !a.no_flash_attention;
    job.overlap_grad_reduce = !a.no_overlap_grad_reduce;
    job.tp_comm_overlap = a.tp_comm_overlap;
    job.moe_imbalance = a.moe_imbalance;
    job.check()?;
    Ok(Setup {
        model,
        gpu,
        cluster,
        job,
        world,
    })
}

fn space(a: &SearchArgs) -> Result<Space> {
    let filter = match &a.fix {
        Some(text) => Filter::parse(text).map_err(|e| anyhow::anyhow!("--fix: {e}"))?,
        None => Filter::default(),
    };
    let max_cp = if a.no_cp { Some(1) } else { a.max_cp };
    Ok(Space {
        max_micro_batch: a.max_micro_batch.max(1),
        max_cp: max_cp.unwrap_or(Space::default().max_cp),
        filter,
        policy: Policy {
            max_tp: a.max_tp,
            max_pp: a.max_pp,
            max_cp,
            allow_tp_across_domains: a.allow_tp_across_nodes,
        },
        top_k: a.top.max(1),
        ..Space::default()
    })
}

fn run_search(a: &SearchArgs, out: &mut dyn Write) -> Result<()> {
    let s = setup(&a.job)?;
    let pr = s.problem();
    let space = space(a)?;
    let result = search::search(&pr, &space);
    let report = SearchReport::new(&pr, &space.policy, &result);
    render::exporter(a.job.format).search(out, &report)
}

fn run_explain(a: &ExplainArgs, out: &mut dyn Write) -> Result<()> {
    let s = setup(&a.job)?;
    let pr = s.problem();
    let inner = a.tp as u64 * a.pp as u64 * a.cp as u64;
    for (flag, v) in [("--tp", a.tp), ("--pp", a.pp), ("--cp", a.cp), ("--ep", a.ep), ("--etp", a.etp), ("--vpp", a.vpp), ("--mbs", a.mbs)] {
        if v == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    let dp = match a.dp {
        Some(0) => bail!("--dp must be at least 1"),
        Some(d) => d,
        None => {
            if s.world % inner != 0 {
                bail!(
                    "T·p·C = {} does not divide the {} GPUs; give --dp explicitly or change the sizes",
                    inner,
                    s.world
                );
            }
            (s.world / inner) as u32
        }
    };
    let layout = Layout {
        dp,
        tp: a.tp,
        pp: a.pp,
        cp: a.cp,
        ep: a.ep,
        etp: a.etp,
        vpp: a.vpp,
        micro_batch: a.mbs,
        recompute: a.recompute,
        zero: a.zero,
        sp: a.sp,
        order: a.order,
        split: a.split.clone(),
    };
    let policy = Policy::default();
    let mut report = ExplainReport::new(&pr, &policy, &layout);
    // Place it among all valid layouts.
    let space = Space {
        keep_all: true,
        top_k: 1,
        ..Space::default()
    };
    let result = search::search(&pr, &space);
    if let Some(best) = result.top.first() {
        report.best = Some(Row::of(1, best));
        if report.is_valid() {
            let faster = result.all.iter().filter(|c| c.eval.tokens_per_s > report.eval.tokens_per_s).count();
            report.rank_among_valid = Some(faster + 1);
        }
    }
    render::exporter(a.job.format).explain(out, &report)
}

fn run_list(a: &ListArgs, out: &mut dyn Write) -> Result<()> {
    let cat = Catalog::shipped()?;
    match a.what {
        ListWhat::Models => {
            for m in &cat.models {
                let alias = if m.aliases.is_empty() {
                    String::new()
                } else {
                    format!(" (alias {})", m.aliases.join(", "))
                };
                writeln!(
                    out,
                    "{:<16} {:>8.1}B params, {} layers, hidden {}, seq {}, batch {}{}",
                    m.name,
                    m.total_params() / 1e9,
                    m.architecture.layers,
                    m.architecture.hidden,
                    m.defaults.seq_len,
                    m.defaults.global_batch,
                    alias
                )?;
            }
        }
        ListWhat::Clusters => {
            for c in &cat.clusters {
                writeln!(out, "{:<16} {:>6} × {:<10} {}", c.name, c.total_gpus(), c.gpu, c.display)?;
            }
        }
        ListWhat::Gpus => {
            for g in &cat.gpus {
                writeln!(
                    out,
                    "{:<10} {:>6.1} GiB, {:>6.0} TFLOP/s bf16 dense, {:>5.0} GB/s HBM  {}",
                    g.name, g.memory_gib, g.peak_tflops_bf16, g.hbm_bandwidth_gbs, g.display
                )?;
            }
        }
    }
    Ok(())
}

fn read_overlay(path: &std::path::Path) -> Result<Overlay> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    Ok(Overlay::from_toml(&text, path)?)
}

fn read_rows(path: &std::path::Path) -> Result<Vec<validate::MeasuredRow>> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    Ok(validate::read_csv(&text, path)?)
}

fn run_validate(a: &ValidateArgs, out: &mut dyn Write) -> Result<()> {
    let rows = read_rows(&a.file)?;
    let cat = Catalog::shipped()?;
    let overlay = match &a.profile {
        Some(p) => {
            let o = read_overlay(p)?;
            cat.gpu(&o.gpu).map_err(|e| InputError::field(p, "gpu", e.to_string()))?;
            Some(o)
        }
        None => None,
    };
    if a.format == Format::Csv {
        bail!("--format csv is not available for validate; use table or json");
    }
    let report = validate::validate(&rows, &cat, overlay.as_ref());
    let plans: Vec<validate::PlanCheck> = if a.plan {
        rows.iter()
            .filter(|r| report.rows.iter().any(|x| x.id == r.id && (x.tflops.is_some() || x.step_s.is_some())))
            .filter_map(|r| validate::build_case(r, &cat, overlay.as_ref()).ok())
            .map(|c| validate::plan_check(&c))
            .collect()
    } else {
        Vec::new()
    };
    match a.format {
        Format::Json => {
            let v = serde_json::json!({ "report": report, "plans": plans });
            serde_json::to_writer_pretty(&mut *out, &v)?;
            writeln!(out)?;
        }
        _ => {
            validate::write_table(out, &report)?;
            if a.plan {
                writeln!(out)?;
                writeln!(out, "Plan quality (search with the row's model, GPUs, global batch, micro-batch fixed):")?;
                for p in &plans {
                    match p.rank {
                        Some(rank) => writeln!(
                            out,
                            "  {:<12} published layout ranks {rank} of {} valid; best {} ({:.0} vs {:.0} tokens/s)",
                            p.id,
                            p.valid,
                            p.best.as_ref().map(|b| b.0.as_str()).unwrap_or("-"),
                            p.best.as_ref().map(|b| b.1).unwrap_or(0.0),
                            p.published_tokens_per_s
                        )?,
                        None => writeln!(out, "  {:<12} published layout REJECTED by {}", p.id, p.rejected_by.join(", "))?,
                    }
                }
            }
        }
    }
    Ok(())
}

fn run_calibrate(a: &CalibrateArgs, out: &mut dyn Write) -> Result<()> {
    let mut rows = read_rows(&a.file)?;
    if let Some(ids) = &a.rows {
        for id in ids {
            if !rows.iter().any(|r| &r.id == id) {
                bail!("--rows: no row `{id}` in {}", a.file.display());
            }
        }
        rows.retain(|r| ids.contains(&r.id));
    }
    let cat = Catalog::shipped()?;
    let fit = calibrate::calibrate(&rows, &cat, &a.gpu).map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
    let text = toml::to_string_pretty(&fit.overlay)?;
    let header = "# meshplan profile overlay (written by `meshplan calibrate`).\n# Apply with `meshplan search --profile FILE` (also explain, validate).\n";
    std::fs::write(&a.out, format!("{header}{text}")).map_err(|source| InputError::Io {
        file: a.out.clone(),
        source,
    })?;
    writeln!(out, "{:<32} {:>10} {:>10}", "parameter", "shipped", "fitted")?;
    for (n, a0, b) in &fit.parameters {
        writeln!(out, "{n:<32} {a0:>10.4} {b:>10.4}")?;
    }
    if let Some(c) = &fit.overlay.calibration {
        writeln!(out, "{:<16} {:>12} {:>12}", "row", "err before", "err after")?;
        for ((id, b), f) in c.rows.iter().zip(&c.error_before).zip(&c.error_after) {
            writeln!(out, "{id:<16} {:>11.1}% {:>11.1}%", 100.0 * b, 100.0 * f)?;
        }
    }
    for s in &fit.skipped {
        writeln!(out, "skipped {}: {}", s.id, s.reason)?;
    }
    writeln!(out, "wrote {}", a.out.display())?;
    Ok(())
}

/// Run a parsed command line, writing to standard output.
///
/// # Errors
/// Every user error (unknown names, bad files, impossible jobs) as one
/// sentence; `main` prints it and exits with status 1.
pub fn run(cli: Cli) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match &cli.command {
        Command::Search(a) => run_search(a, &mut out),
        Command::Explain(a) => run_explain(a, &mut out),
        Command::List(a) => run_list(a, &mut out),
        Command::Validate(a) => run_validate(a, &mut out),
        Command::Calibrate(a) => run_calibrate(a, &mut out),
    }
}
