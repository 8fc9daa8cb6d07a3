//! The command line. Flags are documented where they are defined; `main`
//! only calls [`run`].

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};

use crate::calibrate::{self, Overlay};
use crate::cost::Problem;
use crate::error::InputError;
use crate::generate::Target;
use crate::layout::{CpComm, Layout, RankOrder, Recompute};
use crate::names::{self, Named};
use crate::ranking::RankBy;
use crate::render::{self, Format};
use crate::report::{ExplainReport, SearchReport};
use crate::rules::Policy;
use crate::search::{self, Filter, Space, parse_size, parse_switch, parse_zero};
use crate::spec::GIB;
use crate::spec::{
    Catalog, Cluster, Fp8Kernels, Fp8Recipe, Gpu, Job, Model, Precision, RecipeName,
};
use crate::validate;
use crate::{checkpoint, explain, plot};

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
    /// Write launch files (Megatron-LM, SLURM, plan.json, checklist) for a plan.
    Generate(GenerateArgs),
    /// Compare predictions with measured runs (CSV of `published-dev.csv` format).
    Validate(ValidateArgs),
    /// Fit a GPU's efficiencies to measured runs and write a profile overlay.
    Calibrate(CalibrateArgs),
    /// Fit a cluster's link bandwidths and latencies to nccl-tests output
    /// and write a profile overlay (`search --profile FILE`).
    CalibrateNetwork(CalibrateNetworkArgs),
    /// Print Megatron-LM training logs as measurement rows (CSV of
    /// `validate`'s columns): `meshplan import-log run.log --gpu h100-sxm >> runs.csv`.
    ImportLog(ImportLogArgs),
    /// Print the model card (TOML) of a Hugging Face config.json:
    /// `meshplan import-model config.json > models/NAME.toml`.
    ImportModel(ImportModelArgs),
}

/// `import-model`: a Hugging Face `config.json` as a model card.
#[derive(Debug, Args)]
struct ImportModelArgs {
    /// The Hugging Face `config.json` (model_types llama, mistral, mixtral,
    /// qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v3, gpt2, gpt_neox).
    /// The card goes to stdout, its notes (approximations, keys the card
    /// does not carry) to stderr and into the card as comments.
    file: PathBuf,
    /// Card name (default: the folder holding config.json, lower-case).
    #[arg(long)]
    name: Option<String>,
    /// The card's default sequence length, `[defaults] seq_len` (default:
    /// 4096, or max_position_embeddings when shorter).
    #[arg(long, value_parser = parse_count)]
    seq_len: Option<u64>,
    /// The card's default global batch in sequences, `[defaults]
    /// global_batch` (default: 4M tokens per step at the sequence length).
    #[arg(long, value_parser = parse_count)]
    global_batch: Option<u64>,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// Measurement CSV (columns of `tests/data/published-dev.csv`).
    file: PathBuf,
    /// Profile overlay written by `meshplan calibrate`, applied to every row
    /// on its GPU (rows on other GPUs are skipped).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Output format: `table` (default) or `json` (every row's
    /// predictions, parts and assumptions).
    #[arg(long, default_value = "table", value_parser = parse_table_or_json)]
    format: Format,
    /// Also search each row's model, GPU count and global batch (its
    /// micro-batch fixed) and print where the published layout ranks.
    #[arg(long)]
    plan: bool,
    /// Extra model cards (`*.toml`), replacing shipped ones of the same name.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Extra hardware profiles (`gpus/*.toml`, `clusters/*.toml`),
    /// replacing shipped ones of the same name: price the rows with edited
    /// profiles.
    #[arg(long)]
    hardware_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct CalibrateArgs {
    /// Measurement CSV of the user's own runs (same format as `validate`);
    /// optional when --megatron-log gives the runs.
    #[arg(required_unless_present = "megatron_log")]
    file: Option<PathBuf>,
    /// A Megatron-LM training log (rank 0's stdout: the arguments block,
    /// the iteration lines, the memory reports) as one more measured run;
    /// repeatable. `meshplan import-log` shows the row it becomes.
    #[arg(long)]
    megatron_log: Vec<PathBuf>,
    /// Padded vocabulary of the --megatron-log runs, when their logs lack
    /// the tokenizer's ` > padded vocab … (new size: V)` line.
    #[arg(long, value_parser = parse_count)]
    vocab: Option<u64>,
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

/// `import-log`: Megatron-LM logs → measurement rows.
#[derive(Debug, Args)]
struct ImportLogArgs {
    /// Megatron-LM training logs (rank 0's stdout).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// GPU profile the runs used (`meshplan list gpus`), e.g. `h100-sxm`.
    #[arg(long)]
    gpu: String,
    /// Padded vocabulary, when a log lacks the tokenizer's line.
    #[arg(long, value_parser = parse_count)]
    vocab: Option<u64>,
    /// Append the rows to this CSV instead of printing them: the header is
    /// written only when the file is new or empty; an existing file must
    /// start with import-log's header, and a row id already in it is an
    /// error (appending with `>>` would repeat the header).
    #[arg(long, value_name = "FILE.csv")]
    append: Option<PathBuf>,
}

/// `calibrate-network`: nccl-tests runs → link overlay.
#[derive(Debug, Args)]
struct CalibrateNetworkArgs {
    /// nccl-tests output: the stdout table of `all_reduce_perf`,
    /// `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf` or
    /// `sendrecv_perf`, or the JSON its `-J FILE` writes. Runs on one node
    /// fit the NVLink level, runs across nodes the NIC level (with every
    /// rank line kept, so the hosts can be counted). Examples:
    /// `examples/nccl-tests/`.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Cluster profile the runs were taken on (`meshplan list clusters`).
    #[arg(long)]
    cluster: String,
    /// Where to write the overlay TOML.
    #[arg(long)]
    out: PathBuf,
    /// Extra hardware profiles (`gpus/*.toml`, `clusters/*.toml`).
    #[arg(long)]
    hardware_dir: Option<PathBuf>,
}

/// Model, hardware and job: shared by every planning command.
#[derive(Debug, Args)]
struct JobArgs {
    /// Model card name or alias (`meshplan list models`), e.g. `70b`, or
    /// the path of a Hugging Face `config.json` (any value ending in
    /// `.json`), read as `meshplan import-model` reads it: the same model a
    /// card of that architecture gives (model_types llama, mistral,
    /// mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v3, gpt2,
    /// gpt_neox; see src/spec/hf.rs for the key mapping). Its
    /// approximations are printed as notes on stderr; a config.json holds no
    /// training job, so give --seq-len and --global-batch (default: 4096
    /// tokens, 4M tokens per step).
    #[arg(long)]
    model: String,
    /// Cluster profile name (`meshplan list clusters`), e.g. `dgx64`.
    #[arg(long)]
    cluster: String,
    /// Plan for N GPUs of the cluster (default: all of them).
    #[arg(long, value_parser = parse_count)]
    gpus: Option<u64>,
    /// Global batch B in sequences (default: the model card's).
    #[arg(long, value_parser = parse_count)]
    global_batch: Option<u64>,
    /// Sequence length s in tokens (default: the model card's).
    #[arg(long, value_parser = parse_count)]
    seq_len: Option<u64>,
    /// Precision recipe: `megatron` (bf16 weights, fp32 main grads, fp32
    /// master and Adam: 2 + 4 + 12 bytes per parameter), `adam-16b` (bf16
    /// gradients reduced in bf16: 2 + 2 + 12 = 16 bytes) or `deepspeed`
    /// (2 + (2 + 4) + 12).
    #[arg(long, default_value_t = RecipeName::Megatron, value_parser = NamedParser::<RecipeName>::new())]
    recipe: RecipeName,
    /// Number format of the linear-layer GEMMs (QKV, attention output
    /// projection, FC1, FC2 and experts; forward and both backward GEMMs):
    /// `bf16`, `fp8` (needs FP8 tensor cores: Hopper, Ada or Blackwell),
    /// `mxfp8` or `nvfp4` (Blackwell). The attention core, router,
    /// embedding, output layer, norms and optimizer stay bf16/fp32, and so do
    /// the master weights and gradients of `--recipe`. MFU stays reported
    /// against the bf16 peak.
    #[arg(long, default_value_t = Precision::Bf16, value_parser = NamedParser::<Precision>::new())]
    precision: Precision,
    /// FP8 scaling, with `--precision fp8` only: `delayed` (amax history of
    /// past steps; Megatron-LM's default), `current` (this step's amax per
    /// tensor; also spelled `tensorwise`), `rowwise` (one scale per row,
    /// torchao) or `blockwise` (1×128 activation tiles and 128×128 weight
    /// blocks, as DeepSeek-V3). Default `delayed`.
    #[arg(long, value_parser = NamedParser::<Fp8Recipe>::new())]
    fp8_recipe: Option<Fp8Recipe>,
    /// Library running the low-precision linears: `te` (Transformer Engine,
    /// as Megatron-LM, NeMo and Megatron-Bridge: weights cast once per step
    /// and cached with their transposes, linear inputs saved in FP8) or
    /// `torchao` (torchtitan's float8: cast at every use, bf16 inputs saved).
    /// Default `te`; with a low-precision `--precision` only.
    #[arg(long, value_parser = NamedParser::<Fp8Kernels>::new())]
    fp8_kernels: Option<Fp8Kernels>,
    /// All-gather parameters in the low-precision format under the
    /// distributed optimizer or ZeRO-3/FSDP (Megatron-LM
    /// `--fp8-param-gather`, torchtitan's FP8 all-gather).
    #[arg(long)]
    fp8_param_gather: bool,
    /// MoE: dispatch tokens to the experts in the low-precision format (the
    /// forward dispatch and the backward gradient all-to-all narrow, the
    /// combine and its gradient bf16, as DeepSeek-V3 trained); off by
    /// default.
    #[arg(long)]
    fp8_dispatch: bool,
    /// Price attention without flash attention (stores the s×s scores).
    #[arg(long)]
    no_flash_attention: bool,
    /// Price ZeRO-3 as DeepSpeed 0.3 (early 2021) ran it, to reproduce
    /// 2021 DeepSpeed measurements (not to plan today's runs): one
    /// synchronous collective per parameter tensor over the whole DP group,
    /// with its 2021 memory limits (the engine of Narayanan et al. 2021
    /// Table 2; `validate` sets it for `engine = deepspeed` rows). Implies
    /// `--no-flash-attention` (2021 had none). Refuses what DeepSpeed 0.3
    /// could not run: MoE models, FP8/MXFP8/NVFP4, `--recipe megatron`,
    /// C > 1, SP, and ZeRO-3 with p > 1; `search` then tries ZeRO-3 at
    /// p = C = 1 without SP only, and `generate` refuses it. At ZeRO 0-2 it changes only what
    /// `--no-flash-attention` does (a note says so). Without it, ZeRO-3 is priced per unit with
    /// overlapped gathers.
    #[arg(long)]
    deepspeed_2021: bool,
    /// Do not overlap the DP gradient reduction with backward.
    #[arg(long)]
    no_overlap_grad_reduce: bool,
    /// Overlap TP communication with GEMMs when SP is on (`--tp-comm-overlap`).
    #[arg(long)]
    tp_comm_overlap: bool,
    /// Busiest expert rank's load over the mean (MoE), ≥ 1.0; dropless
    /// routing (Megatron's default) when no capacity factor is given. The
    /// cost model never prices less than the balanced-random-routing floor
    /// 1 + √(2·ln E·(1 − 1/E)/μ) (μ = pairs per EP rank and micro-batch);
    /// a learned router is usually more skewed: state it here.
    #[arg(long, default_value_t = 1.0)]
    moe_imbalance: f64,
    /// Expert capacity factor (Megatron `--moe-expert-capacity-factor`,
    /// also accepted under that name): tokens beyond this multiple of the
    /// mean load are dropped, so the busiest rank computes
    /// min(imbalance, factor) times the mean; `generate` writes it.
    #[arg(long, alias = "moe-expert-capacity-factor")]
    moe_capacity_factor: Option<f64>,
    /// Memory to keep free on every GPU beyond the profile's reserve, GiB
    /// (default 0): a margin for the memory model's error (its median on
    /// the measured runs is about 3%, `meshplan validate`) or for
    /// fragmentation. Layouts whose peak leaves less are rejected for
    /// memory; the header's usable GiB and the plan file say what is left.
    #[arg(long, default_value_t = 0.0)]
    headroom_gib: f64,
    /// Extra model cards (`*.toml`), replacing shipped ones of the same name.
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Extra hardware profiles (`gpus/*.toml`, `clusters/*.toml`).
    #[arg(long)]
    hardware_dir: Option<PathBuf>,
    /// Profile overlay written by `meshplan calibrate` (the GPU's
    /// efficiencies, the cluster's collective efficiencies) or `meshplan
    /// calibrate-network` (collective efficiencies and link latencies);
    /// repeatable, applied in the order given. Each applied overlay is
    /// named in a note on stderr.
    #[arg(long)]
    profile: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Args)]
struct SearchArgs {
    #[command(flatten)]
    job: JobArgs,
    /// How many of the best layouts to print (at least 1).
    #[arg(long, default_value_t = 10, value_parser = parse_positive)]
    top: u64,
    /// Largest T to try (at least 1).
    #[arg(long, value_parser = parse_size)]
    max_tp: Option<u32>,
    /// Largest p to try (at least 1).
    #[arg(long, value_parser = parse_size)]
    max_pp: Option<u32>,
    /// Largest C to try (at least 1; 16 when not given; `--no-cp` is C = 1).
    #[arg(long, value_parser = parse_size)]
    max_cp: Option<u32>,
    /// Do not try context parallelism (C = 1).
    #[arg(long)]
    no_cp: bool,
    /// Only this context-parallel K/V exchange (default: try both).
    #[arg(long, value_parser = NamedParser::<CpComm>::new())]
    cp_comm: Option<CpComm>,
    /// Largest micro-batch to try (at least 1).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_micro_batch: u32,
    /// Try T beyond one NVLink domain (costed on the NICs).
    #[arg(long)]
    allow_tp_across_nodes: bool,
    /// List only the layouts this training program can run, priced as it
    /// runs them (`megatron`, the default, lists every layout; `torchtitan`,
    /// `megatron-bridge`, `deepspeed` as `generate --target`, whose
    /// `--rank K` then names row K of this table). src/generate/target.rs.
    #[arg(long, default_value_t = Target::Megatron, value_parser = NamedParser::<Target>::new())]
    target: Target,
    /// Reject layouts whose TP, CP, EP or ETP groups climb above scale-out
    /// tier N of the cluster's `[[tiers]]` (0: none leaves a tier-1 switch
    /// group, nor on a rail-optimized tier its rail; DP and PP groups may
    /// cross). Without it every placement is priced, slow levels included.
    #[arg(long, value_name = "N")]
    max_tier: Option<u8>,
    /// Fix some values, e.g. `tp=8,pp=2,recompute=selective`. Unfixed, the
    /// interleaving v takes the values up to 8 whose p·v chunks split the
    /// layers evenly; a fixed `vpp` is tried whenever each chunk can hold a
    /// layer, with the uneven split the re-split finds.
    #[arg(long, value_name = "KEY=VALUE,...")]
    fix: Option<String>,
    /// Print search counters and wall time to stderr (layouts considered,
    /// pruned, priced, valid; layouts priced per second).
    #[arg(long)]
    stats: bool,
    /// Why is no layout like this one ranked first? A partial assignment
    /// (keys as for --fix, e.g. `tp=16,pp=2`): prints the best matching
    /// layout, its rank and its gap to the winner part by part, or why none
    /// matching is valid and the best near-miss.
    #[arg(long, value_name = "KEY=VALUE,...")]
    why_not: Option<String>,
    /// How to order the listed plans: `predicted` (by predicted tokens/s;
    /// plans whose error bands overlap are tied, the `tie` column, and the
    /// better-validated one goes first) or `robust` (by the lower edge of
    /// the band, tokens/s × (1 − median |error| of the plan's regime)). See
    /// src/ranking.rs and the README.
    #[arg(long, default_value_t = RankBy::Predicted, value_parser = NamedParser::<RankBy>::new())]
    rank_by: RankBy,
    #[command(flatten)]
    extras: Extras,
}

/// Pictures and a token budget, for `search` and `explain`.
#[derive(Debug, Args)]
struct Extras {
    /// Write schedule.svg (pipeline schedule), memory.svg (memory per stage)
    /// and pareto.svg (throughput vs peak memory) into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Token budget for the time to train, e.g. `15T`, `300B`, `2e12`
    /// (suffixes K, M, B, T).
    #[arg(long, value_name = "TOKENS", value_parser = parse_tokens_flag)]
    tokens: Option<(f64, String)>,
}

/// `--tokens`: a token count of at least 1 with an optional K/M/B/T suffix
/// ([`checkpoint::parse_token_count`]); text that is not one is a usage
/// error (exit 2). The limit is checked with the job (exit 1).
fn parse_tokens_flag(value: &str) -> std::result::Result<(f64, String), String> {
    checkpoint::parse_token_count(value).map(|v| (v, value.to_string()))
}

#[derive(Debug, Args)]
struct ExplainArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Price the layout as this training program runs it and rank it among
    /// the layouts it runs, as `search --target` and `generate --target`
    /// do (`megatron`, the default; `torchtitan`, `megatron-bridge`,
    /// `deepspeed`); a note names the target's refusals of this layout.
    /// src/generate/target.rs.
    #[arg(long, default_value_t = Target::Megatron, value_parser = NamedParser::<Target>::new())]
    target: Target,
    /// Accept T beyond one NVLink domain (costed on the NICs).
    #[arg(long)]
    allow_tp_across_nodes: bool,
    #[command(flatten)]
    layout: LayoutArgs,
    /// Choose the layers per pipeline chunk with the stage-split ILP
    /// (fastest split that fits; fails naming the stage that overflows).
    #[arg(long, conflicts_with = "split")]
    auto_split: bool,
    #[command(flatten)]
    extras: Extras,
}

/// The layout of `explain` and `generate`: one flag per key of the layout
/// grammar ([`search::LAYOUT_KEYS`], the keys of `search --fix` and
/// `--why-not`, parsed by the same functions). A key not given takes that
/// table's default, which `--help` shows.
#[derive(Debug, Clone, Default, Args)]
#[group(id = "layout", multiple = true)]
#[command(mut_args(show_layout_default))]
struct LayoutArgs {
    /// Data-parallel size D.
    #[arg(long, value_parser = parse_size)]
    dp: Option<u32>,
    /// Tensor-parallel size T.
    #[arg(long, value_parser = parse_size)]
    tp: Option<u32>,
    /// Pipeline-parallel size p.
    #[arg(long, value_parser = parse_size)]
    pp: Option<u32>,
    /// Context-parallel size C.
    #[arg(long, value_parser = parse_size)]
    cp: Option<u32>,
    /// Expert-parallel size E (MoE).
    #[arg(long, value_parser = parse_size)]
    ep: Option<u32>,
    /// Expert tensor-parallel size ETP (MoE).
    #[arg(long, value_parser = parse_size)]
    etp: Option<u32>,
    /// Context-parallel K/V exchange when C > 1 (Megatron `--cp-comm-type
    /// p2p|allgather`, also accepted).
    #[arg(long, value_parser = NamedParser::<CpComm>::new())]
    cp_comm: Option<CpComm>,
    /// Virtual pipeline stages per rank v.
    #[arg(long, value_parser = parse_size)]
    vpp: Option<u32>,
    /// Micro-batch size b, sequences.
    #[arg(long, value_parser = parse_size)]
    mbs: Option<u32>,
    /// Activation recompute.
    #[arg(long, value_parser = NamedParser::<Recompute>::new())]
    recompute: Option<Recompute>,
    /// ZeRO stage 0-3 (1 = Megatron distributed optimizer).
    #[arg(long, value_parser = parse_zero)]
    zero: Option<u8>,
    /// Sequence parallelism (Megatron `--sequence-parallel`): `--sp` or
    /// `--sp on` turns it on, `--sp off` off.
    #[arg(long, value_name = "on|off", num_args = 0..=1, default_missing_value = "on", value_parser = parse_switch)]
    sp: Option<bool>,
    /// Rank order (first axis varies fastest).
    #[arg(long, value_parser = NamedParser::<RankOrder>::new())]
    order: Option<RankOrder>,
    /// Explicit layers per pipeline chunk in model order (p·v entries),
    /// e.g. `19,21,21,19`.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = parse_layer_count)]
    split: Option<Vec<u32>>,
}

impl LayoutArgs {
    /// The values given, as a partial layout (the split apart).
    fn filter(&self) -> Filter {
        Filter {
            dp: self.dp,
            tp: self.tp,
            pp: self.pp,
            cp: self.cp,
            ep: self.ep,
            etp: self.etp,
            cp_comm: self.cp_comm,
            vpp: self.vpp,
            micro_batch: self.mbs,
            recompute: self.recompute,
            zero: self.zero,
            sp: self.sp,
            order: self.order,
        }
    }

    /// Whether any layout flag was given.
    fn any(&self) -> bool {
        !self.filter().is_empty() || self.split.is_some()
    }

    /// The layout for `world` GPUs and a global batch of `global_batch`
    /// sequences: the values given, the grammar's defaults elsewhere.
    fn layout(&self, world: u64, global_batch: u64) -> Result<Layout> {
        let given = self.filter();
        let Some(mut layout) = given.layout_with_defaults(world) else {
            let d = Filter::defaults();
            let inner = [given.tp.or(d.tp), given.pp.or(d.pp), given.cp.or(d.cp)]
                .iter()
                .map(|x| x.unwrap_or(1) as u64)
                .product::<u64>();
            bail!(
                "T·p·C = {inner} does not divide the {world} GPUs, so no D fills them: choose T, p and C whose product divides {world} (or --gpus a multiple of {inner})"
            );
        };
        if global_batch < layout.dp as u64 {
            return Err(InputError::Job(format!(
                "global batch {global_batch} is smaller than D = {}: every replica needs at least one sequence",
                layout.dp
            ))
            .into());
        }
        layout.split = self.split.clone();
        Ok(layout)
    }
}

/// A count (GPUs, sequences, tokens): an integer of at least 0; a negative
/// one gets its own sentence.
fn parse_count(value: &str) -> std::result::Result<u64, String> {
    let v = value.trim();
    let shown = crate::limits::echo(v);
    if v.starts_with('-') && v[1..].parse::<u64>().is_ok() {
        return Err(format!("`{shown}` is negative; give a positive integer"));
    }
    // Zero parses: the job's checks say why it cannot run.
    match v.parse::<u64>() {
        Ok(x) => Ok(x),
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("`{shown}` does not fit in 64 bits"))
        }
        Err(_) => Err(format!("`{shown}` is not an integer")),
    }
}

/// `table` or `json`: the formats of a report that has no one-row-per-
/// layout form (`validate`).
fn parse_table_or_json(value: &str) -> std::result::Result<Format, String> {
    match value {
        "table" => Ok(Format::Table),
        "json" => Ok(Format::Json),
        other => Err(format!(
            "`{}` is not a format of this command; use table or json",
            crate::limits::echo(other)
        )),
    }
}

/// A count of at least 1 (`--top`, `--rank`).
fn parse_positive(value: &str) -> std::result::Result<u64, String> {
    match parse_count(value)? {
        0 => Err("`0` is not a positive integer".into()),
        x => Ok(x),
    }
}

/// One entry of `--split`: a layer count (0 parses; the split rule says
/// why a stage cannot be empty).
fn parse_layer_count(value: &str) -> std::result::Result<u32, String> {
    let v = value.trim();
    let shown = crate::limits::echo(v);
    if v.starts_with('-') && v[1..].parse::<u64>().is_ok() {
        return Err(format!(
            "`{shown}` is negative; a split lists the layers of each stage"
        ));
    }
    v.parse::<u32>()
        .map_err(|_| format!("`{shown}` is not a layer count"))
}

/// The command line as clap parses it, with negative numbers taken as
/// values (so `--pp -8` is told it is negative, not that `-8` is an
/// unknown flag).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommands(|sc| {
        sc.mut_args(|a| {
            if a.get_num_args().is_none_or(|n| n.takes_values()) && !a.is_positional() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
    })
}

/// Parse the process's arguments with [`command`]; exits with clap's
/// message and status 2 on a usage error.
pub fn parse_args() -> Cli {
    use clap::FromArgMatches;
    let argv: Vec<String> = std::env::args().collect();
    let m = command().try_get_matches_from(&argv).unwrap_or_else(|e| {
        if let Some(why) = misplaced_layout_flag(&e, &argv) {
            let _ = writeln!(std::io::stderr(), "error: {why}");
            std::process::exit(2);
        }
        e.exit()
    });
    Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit())
}

/// The sentence for a layout flag given to the wrong command: `search
/// --recompute full` (search takes layout values through `--fix`; clap
/// offered `--recipe`), or `explain --fix tp=8` (explain and generate
/// take them as flags). `None` for any other parse error.
fn misplaced_layout_flag(e: &clap::Error, argv: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let sub = argv.get(1).map(String::as_str)?;
    let flag = arg.strip_prefix("--")?;
    let (name, inline) = match flag.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (flag, None),
    };
    match sub {
        "search" => {
            let key = search::layout_key(name)?;
            let with_eq = format!("{arg}=");
            let value = inline
                .or_else(|| {
                    argv.iter()
                        .find_map(|a| a.strip_prefix(&with_eq).map(str::to_string))
                })
                .or_else(|| {
                    let at = argv.iter().position(|a| a == arg)?;
                    argv.get(at + 1).filter(|v| !v.starts_with("--")).cloned()
                })
                .unwrap_or_else(|| key.example.to_string());
            Some(format!(
                "search takes layout values through --fix ({arg} is a flag of explain and generate): --fix {}={value} keeps the search to it, --why-not {}={value} asks why it is not #1",
                key.name, key.name
            ))
        }
        "explain" | "generate" if name == "fix" || name == "why-not" => Some(format!(
            "{sub} takes the layout's values as flags, one per key (--tp 8 --pp 2 --sp …, see {sub} --help); {arg} is a flag of search"
        )),
        _ => None,
    }
}

/// Appends the layout grammar's default to the help of each layout flag.
fn show_layout_default(a: clap::Arg) -> clap::Arg {
    let id = a.get_id().as_str().to_string();
    let Some(key) = search::LAYOUT_KEYS.iter().find(|k| k.name == id) else {
        return a;
    };
    let note = format!("[default: {}]", key.default_text());
    let help = match a.get_help() {
        Some(h) => format!("{h} {note}"),
        None => note.clone(),
    };
    let long = a.get_long_help().map(|h| format!("{h}\n\n{note}"));
    let a = a.help(help);
    match long {
        Some(l) => a.long_help(l),
        None => a,
    }
}

/// Parses and lists the names of a [`Named`] type for clap: `--help` shows
/// the printed names, aliases are accepted but not shown, and a bad value
/// gets clap's error naming the flag, the value and the possible values.
#[derive(Clone)]
struct NamedParser<T>(std::marker::PhantomData<T>);

impl<T: Named + Send + Sync> NamedParser<T> {
    fn new() -> Self {
        NamedParser(std::marker::PhantomData)
    }

    fn values() -> Vec<PossibleValue> {
        T::VALUES
            .iter()
            .map(|v| PossibleValue::new(v.name()).aliases(v.aliases().iter().copied()))
            .collect()
    }
}

impl<T: Named + Send + Sync> TypedValueParser for NamedParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<T, clap::Error> {
        let text = PossibleValuesParser::new(Self::values()).parse_ref(cmd, arg, value)?;
        names::parse::<T>(&text)
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Self::values().into_iter()))
    }
}

/// `generate`: which plan, and where to write it. With no layout flags and
/// no `--plan`, the best layout of a default search (or the `--rank`-th).
#[derive(Debug, Args)]
struct GenerateArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Directory to write the files into (created if missing).
    #[arg(long, default_value = "plan")]
    out: PathBuf,
    /// The training program the files are for: `megatron` (Megatron-LM's
    /// pretrain_gpt.py with torchrun and SLURM scripts), `torchtitan` (a
    /// Python configuration function and a torchrun script),
    /// `megatron-bridge` (a library recipe with KEY=VALUE overrides through
    /// its train.sh) or `deepspeed` (ds_config.json and a deepspeed launcher
    /// for your training script). Each refuses, with the reason, a plan it
    /// cannot express; without layout flags or --plan, the search keeps to
    /// what the target can run. src/generate/target.rs.
    #[arg(long, default_value_t = Target::Megatron, value_parser = NamedParser::<Target>::new())]
    target: Target,
    /// Take the K-th layout (1 = best) of the search, or row K of `--plan`.
    #[arg(long, value_name = "K", conflicts_with = "layout", value_parser = parse_positive)]
    rank: Option<u64>,
    /// The ranking `--rank` (or the best layout) is taken from, as `search
    /// --rank-by`; not with `--plan` or layout flags, which name the layout.
    #[arg(long, default_value_t = RankBy::Predicted, value_parser = NamedParser::<RankBy>::new(), conflicts_with_all = ["plan", "layout"])]
    rank_by: RankBy,
    /// A `search --format json` output (or a plan.json written by generate) to take the layout from.
    #[arg(long, value_name = "FILE.json", conflicts_with = "layout")]
    plan: Option<PathBuf>,
    /// Allow T beyond one NVLink domain (as `search --allow-tp-across-nodes`).
    #[arg(long)]
    allow_tp_across_nodes: bool,
    #[command(flatten)]
    layout: LayoutArgs,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// What to list.
    #[arg(value_enum)]
    what: ListWhat,
    /// Extra model cards (`*.toml`), listed with the shipped ones (a card of
    /// a shipped name replaces it).
    #[arg(long)]
    models_dir: Option<PathBuf>,
    /// Extra hardware profiles (`gpus/*.toml`, `clusters/*.toml`), listed
    /// with the shipped ones (a profile of a shipped name replaces it).
    #[arg(long)]
    hardware_dir: Option<PathBuf>,
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

/// `l` if its sizes are within [`crate::limits`] for `model`, else the
/// limit's sentence.
fn check_layout(l: Layout, model: &Model) -> Result<Layout> {
    crate::limits::check_layout(&l, model.architecture.layers)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(l)
}

/// What `explain` and `generate` plan, resolved once from their flags: the
/// model, GPU, cluster and job, the rules' policy, and the layout the flags
/// give (`None` when no layout flag is given).
struct PlanRequest {
    setup: Setup,
    policy: Policy,
    layout: Option<Layout>,
}

impl PlanRequest {
    fn new(job: &JobArgs, layout: &LayoutArgs, allow_tp_across_nodes: bool) -> Result<PlanRequest> {
        let setup = setup(job)?;
        let layout = if layout.any() {
            let l = layout.layout(setup.world, setup.job.global_batch)?;
            let l = check_layout(l, &setup.model)?;
            if job.deepspeed_2021
                && let Some(n) = deepspeed_2021_layout(&l)?
            {
                eprintln!("{n}");
            }
            Some(l)
        } else {
            None
        };
        Ok(PlanRequest {
            setup,
            policy: Policy {
                allow_tp_across_domains: allow_tp_across_nodes,
                ..Policy::default()
            },
            layout,
        })
    }

    fn problem(&self) -> Problem<'_> {
        self.setup.problem()
    }

    /// The layout given, or every key at its default.
    fn layout_or_defaults(&self) -> Result<Layout> {
        match &self.layout {
            Some(l) => Ok(l.clone()),
            None => LayoutArgs::default().layout(self.setup.world, self.setup.job.global_batch),
        }
    }
}

fn catalog(models_dir: &Option<PathBuf>, hardware_dir: &Option<PathBuf>) -> Result<Catalog> {
    let mut c = Catalog::shipped()?;
    if let Some(d) = models_dir {
        for n in c.add_models_dir(d)? {
            eprintln!("{n}");
        }
    }
    if let Some(d) = hardware_dir {
        for n in c.add_hardware_dir(d)? {
            eprintln!("{n}");
        }
    }
    Ok(c)
}

/// The model `--model` names: a catalog card, or a Hugging Face
/// `config.json` (a value ending in `.json`) with its notes.
fn resolve_model(cat: &Catalog, a: &JobArgs) -> Result<(Model, Vec<String>)> {
    if !crate::spec::hf::looks_like_config(&a.model) {
        return Ok((cat.model(&a.model)?.clone(), Vec::new()));
    }
    let file = std::path::Path::new(&a.model);
    let imp = crate::spec::hf::read(file, &Default::default())?;
    let mut notes: Vec<String> = imp
        .all_notes()
        .into_iter()
        .map(|n| format!("note: {}: {n}", file.display()))
        .collect();
    if a.seq_len.is_none() || a.global_batch.is_none() {
        notes.extend(
            imp.job_note()
                .map(|n| format!("note: {}: {n}", file.display())),
        );
    }
    Ok((imp.model, notes))
}

fn setup(a: &JobArgs) -> Result<Setup> {
    let cat = catalog(&a.models_dir, &a.hardware_dir)?;
    let (model, model_notes) = resolve_model(&cat, a)?;
    let mut cluster = cat.cluster(&a.cluster)?.clone();
    let mut gpu = cat.gpu(&cluster.gpu)?.clone();
    let mut overlay_notes = Vec::new();
    for path in &a.profile {
        let o = read_overlay(path)?;
        o.check_gpu(path, &gpu.name, &cluster.name)?;
        o.apply_gpu(&mut gpu);
        o.apply_cluster(&mut cluster);
        overlay_notes.push(format!(
            "note: profile overlay {} applied to {} / {}",
            path.display(),
            gpu.name,
            cluster.name
        ));
    }
    // A value past a million GiB is written in exponent form (1e308 would
    // print 309 digits).
    let gib = |x: f64| {
        if x.abs() < 1e6 {
            format!("{x}")
        } else {
            format!("{x:e}")
        }
    };
    if !(a.headroom_gib.is_finite() && a.headroom_gib >= 0.0) {
        return Err(InputError::Job(format!(
            "--headroom-gib {} must be a finite number of GiB, at least 0",
            gib(a.headroom_gib)
        ))
        .into());
    }
    if gpu.reserve_gib + a.headroom_gib >= gpu.memory_gib {
        return Err(InputError::Job(format!(
            "--headroom-gib {} with the profile's reserve of {} GiB leaves nothing of {}'s {} GiB",
            gib(a.headroom_gib),
            gpu.reserve_gib,
            gpu.name,
            gpu.memory_gib
        ))
        .into());
    }
    let world = a.gpus.unwrap_or(cluster.job_gpus());
    if world == 0 {
        return Err(InputError::Job("--gpus must be at least 1".into()).into());
    }
    if world > cluster.job_gpus() {
        let segment = match cluster.segment {
            Some(s) => format!(
                " a job can use ({s} hosts of each {}-GPU scale-up domain: the profile's `segment`)",
                cluster.scale_up_domain
            ),
            None => String::new(),
        };
        return Err(InputError::Job(format!(
            "--gpus {} exceeds the {} GPUs of cluster {}{segment}",
            world,
            cluster.job_gpus(),
            cluster.name
        ))
        .into());
    }
    let seq_len = a.seq_len.unwrap_or(model.defaults.seq_len);
    // Notes wait until the job is known to be possible.
    let mut notes = model_notes;
    notes.extend(overlay_notes);
    let global_batch = match (a.global_batch, a.seq_len) {
        (Some(b), _) => b,
        // A new sequence length alone keeps the card's tokens per step, as
        // long-context phases do: B = B₀·s₀/s (at least one sequence).
        (None, Some(s)) if s > 0 && s != model.defaults.seq_len => {
            let tokens = model.defaults.global_batch * model.defaults.seq_len;
            let b = (tokens as f64 / s as f64).round().max(1.0) as u64;
            notes.push(format!(
                "note: --seq-len {s} without --global-batch keeps the model card's {:.1}M tokens per step: global batch {b} sequences",
                tokens as f64 / 1e6
            ));
            b
        }
        _ => model.defaults.global_batch,
    };
    if seq_len > model.architecture.max_seq {
        notes.push(format!(
            "warning: --seq-len {seq_len} exceeds {}'s architecture.max_seq {} (the longest context it was built for); pricing it anyway",
            model.name,
            model.architecture.max_seq
        ));
    }
    // A card whose published count its architecture does not reproduce
    // (Model::known_params: to 0.5%, as the shipped cards) describes some
    // other model than it says; price it, but say so.
    let counted = model.total_params();
    if (counted / model.known_params - 1.0).abs() > 0.005 {
        notes.push(format!(
            "warning: {}'s known_params {:.4e} differs from the {:.4e} parameters its architecture counts ({:+.1}%); check its sizes (layers, hidden, ffn, heads, vocab, experts): meshplan prices the architecture",
            model.name,
            model.known_params,
            counted,
            100.0 * (counted / model.known_params - 1.0)
        ));
    }
    if model.moe.is_none() && (a.moe_imbalance != 1.0 || a.moe_capacity_factor.is_some()) {
        notes.push(format!(
            "warning: {} is dense (no experts): --moe-imbalance and --moe-capacity-factor change nothing",
            model.name
        ));
    }
    if let Some(c) = a.moe_capacity_factor
        && c < 1.0
        && model.moe.is_some()
    {
        notes.push(format!(
            "warning: --moe-capacity-factor {c} is below 1: every expert drops tokens even with perfectly balanced routing"
        ));
    }
    let mut job = Job::new(global_batch, seq_len);
    job.recipe_name = a.recipe;
    job.recipe = a.recipe.recipe();
    job.flash_attention = !a.no_flash_attention;
    if a.deepspeed_2021 {
        deepspeed_2021_job(a, &model)?;
        job.engine_memory.deepspeed_zero3 = Some(crate::spec::DeepSpeedZero3::DEFAULTS_2021);
        // DeepSpeed 0.3 (early 2021) predates FlashAttention (May 2022).
        job.flash_attention = false;
    }
    job.overlap_grad_reduce = !a.no_overlap_grad_reduce;
    job.tp_comm_overlap = a.tp_comm_overlap;
    job.moe_imbalance = a.moe_imbalance;
    job.moe_capacity_factor = a.moe_capacity_factor;
    job.headroom_gib = a.headroom_gib;
    job.precision = a.precision;
    if let Some(k) = a.fp8_kernels {
        if !a.precision.is_low() {
            bail!("--fp8-kernels {k} needs a low-precision --precision (fp8, mxfp8 or nvfp4)");
        }
        job.fp8_kernels = k;
    }
    job.fp8_param_gather = a.fp8_param_gather;
    if let Some(r) = a.fp8_recipe {
        if a.precision != Precision::Fp8 {
            bail!(
                "--fp8-recipe {r} applies to --precision fp8 only, and this job's precision is {} (mxfp8 and nvfp4 fix their own block scaling)",
                a.precision
            );
        }
        job.fp8_recipe = r;
    }
    if a.fp8_param_gather && !a.precision.is_low() {
        bail!("--fp8-param-gather needs a low-precision --precision (fp8, mxfp8 or nvfp4)");
    }
    if a.fp8_dispatch && !a.precision.is_low() {
        bail!("--fp8-dispatch needs a low-precision --precision (fp8, mxfp8 or nvfp4)");
    }
    job.fp8_dispatch = a.fp8_dispatch;
    job.check()?;
    crate::cost::precision::check(&gpu, &job)?;
    for n in notes {
        let _ = writeln!(std::io::stderr(), "{n}");
    }
    Ok(Setup {
        model,
        gpu,
        cluster,
        job,
        world,
    })
}

/// What `--deepspeed-2021` cannot price for the job: DeepSpeed 0.3 (early
/// 2021) had no expert parallelism, no FP8-class GEMMs and kept fp16
/// gradients with an fp32 partition (`--recipe deepspeed`; `adam-16b` is
/// the same bytes reduced at 2); one clear error naming the flag.
fn deepspeed_2021_job(a: &JobArgs, model: &Model) -> Result<()> {
    if model.moe.is_some() {
        bail!(
            "--deepspeed-2021: {} is an MoE model, and DeepSpeed 0.3 (early 2021) had no expert parallelism to price it with",
            model.name
        );
    }
    if a.precision.is_low() {
        bail!(
            "--deepspeed-2021: --precision {} is not a DeepSpeed 0.3 (early 2021) precision: it trained fp16 (use --precision bf16)",
            a.precision
        );
    }
    if a.recipe == RecipeName::Megatron {
        bail!(
            "--deepspeed-2021 with --recipe megatron: DeepSpeed 0.3 kept fp16 gradients and an fp32 gradient partition; pass --recipe deepspeed"
        );
    }
    Ok(())
}

/// What `--deepspeed-2021` cannot price for layout `l`: context parallelism
/// (DeepSpeed 0.3 had none), sequence parallelism (2022) and ZeRO-3 under
/// its pipeline engine (which refused ZeRO-2 and -3); an error naming the
/// flag. At ZeRO 0-2 the flag
/// changes nothing: `Some(note)` says so.
fn deepspeed_2021_layout(l: &Layout) -> Result<Option<String>> {
    if l.cp > 1 {
        bail!(
            "--deepspeed-2021 with C = {}: DeepSpeed 0.3 (early 2021) had no context parallelism",
            l.cp
        );
    }
    if l.sp && l.tp > 1 {
        bail!(
            "--deepspeed-2021 with --sp: sequence parallelism (Korthikanti et al., 2022) postdates DeepSpeed 0.3 (early 2021)"
        );
    }
    if l.zero >= 3 && l.pp > 1 {
        bail!(
            "--deepspeed-2021 with ZeRO-3 and p = {}: DeepSpeed 0.3's pipeline engine ran ZeRO 0 and 1 only",
            l.pp
        );
    }
    Ok((l.zero < 3).then(|| {
        format!(
            "note: at ZeRO {} --deepspeed-2021 changes only what its --no-flash-attention implies: it prices ZeRO-3's per-tensor collectives, and 2021 had no flash attention",
            l.zero
        )
    }))
}

fn space(a: &SearchArgs) -> Result<Space> {
    let mut filter = match &a.fix {
        Some(text) => Filter::parse(text).map_err(|e| anyhow::anyhow!("--fix: {e}"))?,
        None => Filter::default(),
    };
    if let Some(c) = a.cp_comm {
        if filter.cp_comm.is_some_and(|x| x != c) {
            bail!(
                "--cp-comm {c} contradicts --fix cp_comm={}",
                filter.cp_comm.unwrap_or(c)
            );
        }
        filter.cp_comm = Some(c);
    }
    // `--deepspeed-2021` searches what DeepSpeed 0.3's ZeRO-3 ran: ZeRO-3
    // at p = C = 1, no SP (`deepspeed_2021_layout`).
    if a.job.deepspeed_2021 {
        if filter.sp == Some(true) {
            bail!(
                "--deepspeed-2021 searches without sequence parallelism (it postdates DeepSpeed 0.3), and --fix asks sp=on"
            );
        }
        filter.sp = Some(false);
        for (key, fixed, only) in [
            ("zero", filter.zero.map(u32::from), 3),
            ("pp", filter.pp, 1),
            ("cp", filter.cp, 1),
        ] {
            if let Some(v) = fixed.filter(|v| *v != only) {
                bail!(
                    "--deepspeed-2021 searches ZeRO-3 at pp=1 cp=1 only (DeepSpeed 0.3's ZeRO-3), and --fix asks {key}={v}"
                );
            }
        }
        filter.zero = Some(3);
        filter.pp = Some(1);
        filter.cp = Some(1);
    }
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
            max_tier: a.max_tier,
        },
        // The ranking orders every valid layout (`keep_all`) and `--top`
        // only cuts the list, so row K is the same for every `--top` ≥ K;
        // the re-split budget (the best K of the uniform pass) is the
        // default's whatever `--top` is, so the counts do not move with it.
        keep_all: true,
        ..Space::default()
    })
}

/// Why `--fix` asks for a ZeRO stage or recompute mode that `target`'s
/// search limits ([`Target::limit_search`]) leave out, in the target's own
/// refusal sentence (as `generate --target` gives it), else `None`.
fn fixed_beyond_target(target: Target, s: &Setup, space: &Space, flag: &str) -> Option<String> {
    let f = &space.filter;
    let zero = f.zero.filter(|z| !space.zero_stages.contains(z));
    let recompute = f.recompute.filter(|r| !space.recompute_modes.contains(r));
    if zero.is_none() && recompute.is_none() {
        return None;
    }
    let mut l = Layout::dense(s.world as u32, 1, 1, 1);
    l.zero = zero.unwrap_or(l.zero);
    l.recompute = recompute.unwrap_or(l.recompute);
    let model_level = target.model_refusals(&s.model, &s.job);
    let why: Vec<String> = target
        .refusals(&s.model, &s.job, &l)
        .into_iter()
        .filter(|r| !model_level.contains(r))
        .filter(|r| {
            (zero.is_some() && (r.code.ends_with("-zero") || r.code.ends_with("-recipe")))
                || (recompute.is_some() && r.code.ends_with("-recompute"))
        })
        .map(|r| format!("{}; {}", r.message, r.remedy))
        .collect();
    let asked = [
        zero.map(|z| format!("zero={z}")),
        recompute.map(|r| format!("recompute={r}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    Some(if why.is_empty() {
        format!("{flag} {asked}: --target {target} runs no such layout")
    } else {
        format!("{flag} {asked}: --target {target}: {}", why.join("; "))
    })
}

fn run_search(a: &SearchArgs, out: &mut dyn Write) -> Result<()> {
    if a.job.deepspeed_2021 && a.target != Target::Megatron {
        bail!(
            "--deepspeed-2021 with --target {}: the flag prices DeepSpeed 0.3 (early 2021), a target prices today's engine; drop one",
            a.target
        );
    }
    let mut s = setup(&a.job)?;
    a.target.engine_job(&mut s.job);
    target_model_check(a.target, &s)?;
    let pr = s.problem();
    let mut space = space(a)?;
    let user_filter = space.filter.clone();
    a.target.limit_search(&mut space, s.job.recipe_name);
    if let Some(why) = fixed_beyond_target(a.target, &s, &space, "--fix") {
        bail!("{why}");
    }
    // A `--why-not` asking for what the target's limits leave out is
    // answered by the target's refusal, not by the search bounds; one
    // asking for a value the limits fixed (etp=2 under torchtitan) is not
    // asked of the search at all (`conflict`).
    let mut conflict = false;
    let why_not_beyond_target = a.why_not.as_deref().and_then(|q| {
        let asked = search::Filter::parse(q).ok()?;
        match space.filter.merged(&asked, "--fix", "--why-not") {
            Ok(filter) => {
                let probe = Space {
                    filter,
                    ..space.clone()
                };
                fixed_beyond_target(a.target, &s, &probe, "--why-not")
            }
            Err(_) => {
                let with = user_filter.merged(&asked, "--fix", "--why-not").ok()?;
                conflict = true;
                Some(limited_by_target(a.target, &s, &user_filter, &with, q))
            }
        }
    });
    let tokens = tokens_flag(&a.extras, a.job.format)?;
    if a.why_not.is_some() && a.job.format == Format::Csv {
        bail!("--why-not is printed as a table or JSON, not CSV; drop --format csv");
    }
    // The trust record (every published run priced, a couple of
    // milliseconds) does not depend on this search, and the ranking needs
    // it right after: build it on its own thread, where it fills the
    // search's serial stretches on a two-core machine. The ranking waits
    // for it (`Record::shipped` is a `OnceLock`), so nothing else changes.
    std::thread::spawn(|| {
        crate::trust::Record::shipped();
    });
    // `generate` refuses such a count ([launch-nodes]): say so up front.
    let gpn = pr.cluster.gpus_per_node as u64;
    if pr.world > gpn && !pr.world.is_multiple_of(gpn) {
        eprintln!(
            "note: {} GPUs do not fill whole {gpn}-GPU nodes: the layouts are priced, but `generate` writes no launch files for them (torchrun starts the same number of processes on every node; {} or {} would)",
            pr.world,
            pr.world / gpn * gpn,
            (pr.world / gpn + 1) * gpn
        );
    }
    let result = search::search(&pr, &space);
    let top = a.top.max(1).min(usize::MAX as u64) as usize;
    // Another target filters the ranked rows, and `--why-not` places a
    // layout among all of them, so rank them all first.
    let limit = if a.target == Target::Megatron && a.why_not.is_none() {
        top
    } else {
        usize::MAX
    };
    let mut report = SearchReport::ranked(&pr, &space.policy, &result, a.rank_by, limit);
    if a.target != Target::Megatron {
        let before = report.rows.len();
        let fastest = report
            .rows
            .iter()
            .max_by(|a, b| a.tokens_per_s.total_cmp(&b.tokens_per_s))
            .map(|r| r.layout.clone());
        keep_target_rows(&mut report.rows, a.target, &s);
        // The band is the target's first row's, over the layouts the
        // target runs (every ranked row is still here: limit above).
        report.within_winner_band = crate::report::within_band(&report.rows);
        // Valid layouts, none of which the target runs (a `--fix etp=2`
        // under torchtitan): say why, not "every one breaks a rule".
        if report.rows.is_empty()
            && let Some(l) = fastest
        {
            let why = a
                .target
                .refusals(&s.model, &s.job, &l)
                .iter()
                .map(|r| format!("[{}] {}; fix: {}", r.code, r.message, r.remedy))
                .collect::<Vec<_>>()
                .join("; ");
            report.empty_reason = Some(format!(
                "--target {} runs none of the {before} ranked valid layouts; the fastest, {}, is refused: {why}",
                a.target,
                l.short()
            ));
        }
        report.fastest_predicted = report
            .rows
            .iter()
            .skip(1)
            .filter(|r| r.tokens_per_s > report.rows[0].tokens_per_s)
            .min_by(|a, b| b.tokens_per_s.total_cmp(&a.tokens_per_s))
            .cloned();
        let plausible = |r: &&crate::report::Row| {
            !r.trust
                .as_ref()
                .and_then(|t| t.envelope.as_ref())
                .is_some_and(|e| e.implausible)
        };
        report.fastest_plausible = report
            .rows
            .iter()
            .skip(1)
            .filter(plausible)
            .filter(|r| r.tokens_per_s > report.rows[0].tokens_per_s)
            .min_by(|a, b| b.tokens_per_s.total_cmp(&a.tokens_per_s))
            .filter(|r| {
                report
                    .fastest_predicted
                    .as_ref()
                    .is_none_or(|f| f.rank != r.rank)
            })
            .cloned();
        let left_out = if before == 0 {
            "no layout it kept is valid".to_string()
        } else {
            format!(
                "{} of the {before} best layouts kept are left out for another of its conditions (`generate --target {}` names them)",
                before - report.rows.len(),
                a.target
            )
        };
        let _ = writeln!(
            std::io::stderr(),
            "note: --target {}: the search kept to {}; {left_out}",
            a.target,
            a.target.search_limits(),
        );
        // Only when the search itself found nothing valid: when valid
        // layouts were left out for the target's other conditions (a
        // `--fix tp=2`), another recipe would not bring them back.
        if before == 0
            && let Some(hint) = a.target.widening_hint(s.job.recipe_name)
        {
            let _ = writeln!(
                std::io::stderr(),
                "note: --target {}: no valid layout; {hint}",
                a.target
            );
        }
    }
    // The whole ranking as the table lists it, for `--why-not`.
    let ranked = if a.why_not.is_some() {
        report.rows.clone()
    } else {
        Vec::new()
    };
    report.rows.truncate(top);
    report.fewer_gpus = crate::gpu_count::fewer_gpus(&pr, &space, &result);
    report.scale_down =
        crate::gpu_count::scale_down(&pr, &space.policy, &result, report.fewer_gpus.as_ref());
    search_extras(
        &pr,
        &space,
        &result,
        &mut report,
        a.why_not.as_deref().filter(|_| !conflict),
        &ranked,
        tokens,
        a.extras.plot.as_deref(),
    )?;
    if conflict {
        report.why_not = Some(explain::WhyNot {
            query: a.why_not.clone().unwrap_or_default(),
            valid_total: result.stats.valid as usize,
            ranked_total: ranked.len(),
            matching_considered: 0,
            matching_valid: 0,
            winner: report.rows.first().cloned(),
            best: None,
            faster: None,
            unranked: None,
            unranked_reason: None,
            outside_space: None,
            gap: None,
            rejections: Vec::new(),
            near_miss: None,
            note: why_not_beyond_target,
        });
    } else if let (Some(w), Some(why)) = (report.why_not.as_mut(), why_not_beyond_target)
        && w.best.is_none()
        && w.unranked.is_none()
    {
        w.note = Some(why);
    }
    // Matching layouts valid but not in the target's ranking: the target
    // refuses the best of them (it was answered as if ranked elsewhere).
    if a.target != Target::Megatron
        && let Some(w) = report.why_not.as_mut()
        && w.best.is_none()
        && let Some(u) = w.unranked.clone()
    {
        let refused = a.target.refusals(&s.model, &s.job, &u.layout);
        if !refused.is_empty() {
            w.note = Some(format!(
                "--target {} runs none of the ranked layouts matching it; the best matching valid one, {}, is refused: {}",
                a.target,
                u.layout.short(),
                coded(&refused)
            ));
            w.unranked = None;
            w.unranked_reason = None;
        }
    }
    render::exporter(a.job.format).search(out, &report)?;
    out.flush()?;
    if a.stats {
        let st = &result.stats;
        let _ = writeln!(
            std::io::stderr(),
            "stats: considered {} layouts = priced {} + pruned {} + rejected unpriced {} + unpriceable {} + near-miss bounded {}; valid {} ({} distinct, {} rank-order twins); search {:.1} ms ({:.2e} priced layouts/s on {} threads)",
            st.considered,
            st.evaluated,
            st.pruned,
            st.unpriced,
            st.unpriceable,
            st.near_miss_bounded,
            st.valid,
            st.valid - st.twins,
            st.twins,
            st.seconds * 1e3,
            st.evaluated as f64 / st.seconds.max(1e-9),
            rayon::current_num_threads()
        );
    }
    Ok(())
}

/// `--tokens` parsed; an error for CSV output, which has no place for it.
fn tokens_flag(e: &Extras, format: Format) -> Result<Option<f64>> {
    match &e.tokens {
        None => Ok(None),
        Some(_) if format == Format::Csv => {
            bail!("--tokens is printed as a table or JSON, not CSV; drop --format csv")
        }
        Some((v, text)) => Ok(Some(
            checkpoint::check_token_budget(*v, text)
                .map_err(|e| anyhow::anyhow!("--tokens: {e}"))?,
        )),
    }
}

/// Checkpoint plan and time to train of the winner, the why-not answer and
/// the pictures of a search.
fn search_extras(
    pr: &Problem,
    space: &Space,
    result: &search::SearchResult,
    report: &mut SearchReport,
    why_not: Option<&str>,
    ranked: &[crate::report::Row],
    tokens: Option<f64>,
    plot: Option<&std::path::Path>,
) -> Result<()> {
    // The winner is the table's first row (the ranking with tie groups),
    // not merely the fastest predicted.
    let Some(win) = report.rows.first().map(|r| search::Candidate {
        layout: r.layout.clone(),
        eval: r.eval,
    }) else {
        if let Some(q) = why_not {
            report.why_not = Some(
                explain::why_not(pr, space, &result.all, &[], result.stats.valid, q)
                    .map_err(|e| anyhow::anyhow!("--why-not: {e}"))?,
            );
        }
        // No valid layout is a search's answer, not an error (exit 0, the
        // rejections listed); the plots are skipped with a note.
        if let Some(dir) = plot {
            eprintln!(
                "note: --plot: no valid layout to draw, nothing written to {}",
                dir.display()
            );
        }
        return Ok(());
    };
    report.outlook = Some(checkpoint::Outlook::of(pr, &win.layout, &win.eval, tokens));
    let mut marks = vec![plot::Mark {
        label: format!("#1 {}", win.layout.short()),
        peak_gib: win.eval.peak_bytes / GIB,
        tokens_per_s: win.eval.tokens_per_s,
    }];
    if let Some(q) = why_not {
        let mut w = explain::why_not(pr, space, &result.all, ranked, result.stats.valid, q)
            .map_err(|e| anyhow::anyhow!("--why-not: {e}"))?;
        if let Some(first) = report.rows.first() {
            w.gap = w
                .best
                .as_ref()
                .map(|b| explain::gap(&first.eval.time, &b.eval.time));
            w.winner = Some(first.clone());
        }
        if let Some(b) = &w.best {
            marks.push(plot::Mark {
                label: format!("best with {q} (#{})", b.rank),
                peak_gib: b.peak_gib,
                tokens_per_s: b.tokens_per_s,
            });
        } else if let Some(n) = &w.near_miss {
            marks.push(plot::Mark {
                label: format!("near-miss with {q} (rejected)"),
                peak_gib: n.eval.peak_bytes / GIB,
                tokens_per_s: n.eval.tokens_per_s,
            });
        }
        report.why_not = Some(w);
    }
    if let Some(dir) = plot {
        let (files, note) = plot::write_all(dir, pr, &win.layout, &win.eval, &result.all, &marks)?;
        report_plots(&files, note);
    }
    Ok(())
}

/// Say on stderr which pictures were written (stdout stays parseable).
fn report_plots(files: &[PathBuf], note: Option<String>) {
    for f in files {
        let _ = writeln!(std::io::stderr(), "wrote {}", f.display());
    }
    if let Some(n) = note {
        let _ = writeln!(std::io::stderr(), "note: {n}");
    }
}

/// The uniform split of `l` (the first `L mod p·v` chunks take one more
/// layer), as `--split` would write it.
fn uniform_split(l: &Layout, layers: u32) -> Vec<u32> {
    let chunks = l.pp.saturating_mul(l.vpp).max(1);
    (0..chunks)
        .map(|c| layers / chunks + u32::from(c < layers % chunks))
        .collect()
}

fn run_explain(a: &ExplainArgs, out: &mut dyn Write) -> Result<()> {
    if a.job.deepspeed_2021 && a.target != Target::Megatron {
        bail!(
            "--deepspeed-2021 with --target {}: the flag prices DeepSpeed 0.3 (early 2021), a target prices today's engine; drop one",
            a.target
        );
    }
    let mut req = PlanRequest::new(&a.job, &a.layout, a.allow_tp_across_nodes)?;
    a.target.engine_job(&mut req.setup.job);
    target_model_check(a.target, &req.setup)?;
    let pr = req.problem();
    let mut layout = req.layout_or_defaults()?;
    if a.auto_split {
        match crate::split::solve(&pr, &layout) {
            Ok(s) => layout.split = Some(s.layers),
            // No split fits: explain the one that minimises the largest
            // stage's memory, so the verdict (REJECTED, memory) comes with
            // its numbers and the smallest fixes, as any other layout's.
            Err(crate::split::SplitError::Infeasible { split, .. }) => {
                eprintln!(
                    "note: --auto-split: no stage split fits in memory; explaining the split that minimises the largest stage's memory"
                );
                layout.split = Some(split);
            }
            Err(e) => bail!("--auto-split: {e}"),
        }
    }
    // SP off by default here, while a search tries both and its T > 1 rows
    // mostly have it on: say so, as copying `tp=8,pp=2` from a table
    // without `--sp` prices another layout.
    if layout.tp > 1 && !layout.sp && a.layout.sp.is_none() {
        eprintln!(
            "note: T = {} without --sp: sequence parallelism is off (explain's default); a search row's SP column says which it priced (--sp for on)",
            layout.tp
        );
    }
    let tokens = tokens_flag(&a.extras, a.job.format)?;
    let policy = &req.policy;
    let mut report = ExplainReport::new(&pr, policy, &layout);
    // Place it among all valid layouts, as `search` with its defaults sees
    // them: the same top K re-split by the ILP, so `explain` and `search`
    // give one rank.
    let mut space = Space {
        keep_all: true,
        ..Space::default()
    };
    a.target.limit_search(&mut space, req.setup.job.recipe_name);
    let refusals = a.target.refusals(&req.setup.model, &req.setup.job, &layout);
    if !refusals.is_empty() {
        eprintln!(
            "note: --target {} does not run this layout: {}",
            a.target,
            coded(&refusals)
        );
    }
    let result = search::search(&pr, &space);
    // The best is the first row of `search`'s table and the rank is the
    // layout's row in it (the ranking with tie groups); a layout the
    // search did not price as it is here (another split) takes the rank
    // of its predictions among the valid layouts.
    let mut ranked = crate::report::ranked_rows(&pr, result.pool(), RankBy::default(), usize::MAX);
    keep_target_rows(&mut ranked, a.target, &req.setup);
    if let Some(best) = ranked.first() {
        if report.is_valid() {
            // The same plan: equal predictions and the same layout up to a
            // uniform split written out and the rank order of a twin.
            let layers = pr.model.architecture.layers;
            let canon = |l: &Layout| Layout {
                order: layout.order,
                split: l.split.clone().filter(|s| *s != uniform_split(l, layers)),
                ..l.clone()
            };
            let mine = canon(&layout);
            let row = ranked.iter().find(|r| {
                r.eval.tokens_per_s == report.eval.tokens_per_s
                    && r.eval.peak_bytes == report.eval.peak_bytes
                    && canon(&r.layout) == mine
            });
            report.rank_among_valid = Some(match row {
                Some(r) => r.rank,
                // Among the valid layouts the target runs.
                None if a.target != Target::Megatron => {
                    let kept: Vec<search::Candidate> = result
                        .all
                        .iter()
                        .filter(|c| {
                            a.target
                                .refusals(&req.setup.model, &req.setup.job, &c.layout)
                                .is_empty()
                        })
                        .cloned()
                        .collect();
                    search::rank_among(&kept, &report.eval)
                }
                None => search::rank_among(&result.all, &report.eval),
            });
            report.rank_is_row = row.is_some();
            report.ranking_target = (a.target != Target::Megatron).then(|| a.target.to_string());
            // A layout the target refuses has no row of its ranking for
            // that reason first.
            report.outside_space = if refusals.is_empty() {
                search::outside_space(&pr, space.max_vpp, &layout)
            } else {
                Some(format!(
                    "--target {} does not run it: {}",
                    a.target,
                    coded(&refusals)
                ))
            };
            report.gap_to_best = Some(explain::gap(&best.eval.time, &report.eval.time));
        }
        report.best = Some(best.clone());
    }
    if !report.is_valid() {
        report.fixes = Some(explain::smallest_fixes_resplit(
            &pr,
            policy,
            &layout,
            a.auto_split,
        ));
    }
    report.outlook = Some(checkpoint::Outlook::of(&pr, &layout, &report.eval, tokens));
    if let Some(dir) = &a.extras.plot {
        let mut marks = vec![plot::Mark {
            label: format!(
                "{} ({})",
                layout.short(),
                if report.is_valid() {
                    "explained"
                } else {
                    "explained, rejected"
                }
            ),
            peak_gib: report.eval.peak_bytes / GIB,
            tokens_per_s: report.eval.tokens_per_s,
        }];
        if let Some(best) = ranked.first() {
            marks.push(plot::Mark {
                label: format!("#1 {}", best.layout.short()),
                peak_gib: best.eval.peak_bytes / GIB,
                tokens_per_s: best.eval.tokens_per_s,
            });
        }
        let (files, note) = plot::write_all(dir, &pr, &layout, &report.eval, &result.all, &marks)?;
        report_plots(&files, note);
    }
    render::exporter(a.job.format).explain(out, &report)
}

fn run_list(a: &ListArgs, out: &mut dyn Write) -> Result<()> {
    let cat = catalog(&a.models_dir, &a.hardware_dir)?;
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
                writeln!(
                    out,
                    "{:<16} {:>6} × {:<10} {}",
                    c.name,
                    c.total_gpus(),
                    c.gpu,
                    c.display
                )?;
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

fn generate_layout(a: &GenerateArgs, req: &PlanRequest) -> Result<Layout> {
    let s = &req.setup;
    if let Some(file) = &a.plan {
        let text = read_text(file)?;
        let input = crate::generate::PlanInput::parse(&text, file, a.rank.unwrap_or(1))?;
        input.check_job(file, &s.model.name, &s.cluster.name, s.world, &s.job)?;
        return crate::limits::check_layout(&input.layout, s.model.architecture.layers)
            .map(|()| input.layout)
            .map_err(|e| InputError::field(file, "layout", e).into());
    }
    if let Some(l) = &req.layout {
        return Ok(l.clone());
    }
    let k = a.rank.unwrap_or(1) as usize;
    // The same search and ranking as `search`, so `--rank K` names row K
    // of its table; another target filters the ranked rows, so rank them
    // all first.
    target_model_check(a.target, s)?;
    let limit = if a.target == Target::Megatron {
        k
    } else {
        usize::MAX
    };
    let mut space = Space {
        keep_all: true,
        policy: req.policy.clone(),
        ..Space::default()
    };
    a.target.limit_search(&mut space, s.job.recipe_name);
    let pr = req.problem();
    let result = search::search(&pr, &space);
    let rows = crate::report::ranked_rows(&pr, result.pool(), a.rank_by, limit);
    let runnable: Vec<_> = rows
        .iter()
        .filter(|c| a.target.refusals(&s.model, &s.job, &c.layout).is_empty())
        .collect();
    match runnable.get(k - 1) {
        Some(c) => Ok(c.layout.clone()),
        None if a.target != Target::Megatron && !runnable.is_empty() => bail!(
            "--rank {k}: {} of the search's {} ranked layout(s) of {} on {} GPUs can be written for {}",
            runnable.len(),
            result.stats.ranked,
            s.model.name,
            s.world,
            a.target
        ),
        None if a.target != Target::Megatron => {
            let first = rows
                .first()
                .map(|c| a.target.refusals(&s.model, &s.job, &c.layout))
                .and_then(|r| r.into_iter().next());
            bail!(
                "--target {}: {} of the search's {} ranked layout(s) for {} on {} GPUs can be written for {} (the search kept to what it runs: {}){}{}",
                a.target,
                runnable.len(),
                result.stats.ranked,
                s.model.name,
                s.world,
                a.target,
                a.target.search_limits(),
                match first {
                    Some(r) => format!("; the best ranked one is refused: {}", r.message),
                    None => String::new(),
                },
                match a.target.widening_hint(s.job.recipe_name) {
                    Some(h) => format!("; {h}"),
                    None => String::new(),
                }
            )
        }
        None => bail!(
            "--rank {k}: the search ranks {} layout(s) for {} on {} GPUs: the distinct valid ones ({} valid, {} of them rank-order twins listed once) predicted at least {:.0}% of the fastest's tokens/s",
            result.stats.ranked,
            s.model.name,
            s.world,
            result.stats.valid,
            result.stats.twins,
            100.0 * search::RANKED_FLOOR
        ),
    }
}

/// What `target` refuses whatever the layout, as one error (checked before
/// searching).
/// Keep the ranked rows `target` runs, ranked among themselves as
/// `generate --target --rank K` counts them, their tie groups renumbered
/// 1, 2, … over the rows kept. Megatron runs every row.
/// The answer to a `--why-not` that asks for a value `target`'s search
/// limits fixed (`etp=2` where torchtitan keeps ETP = 1): the limits and
/// the refusals the asked values add to the layout of the user's own
/// `--fix` values (`user`, with the defaults elsewhere), against `with`
/// the asked ones.
fn limited_by_target(
    target: Target,
    s: &Setup,
    user: &search::Filter,
    with: &search::Filter,
    q: &str,
) -> String {
    let world = s.world;
    let before = user
        .layout_with_defaults(world)
        .map(|l| target.refusals(&s.model, &s.job, &l))
        .unwrap_or_default();
    let added: Vec<crate::generate::Refusal> = with
        .layout_with_defaults(world)
        .map(|l| target.refusals(&s.model, &s.job, &l))
        .unwrap_or_default()
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    let why = if added.is_empty() {
        String::new()
    } else {
        format!(
            ": {}",
            added
                .iter()
                .map(|r| format!("[{}] {}; fix: {}", r.code, r.message, r.remedy))
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    format!(
        "--why-not {q}: --target {target} keeps the search to {}{why}",
        target.search_limits()
    )
}

/// Refusals as `[code] message`, joined by `; `.
fn coded(refusals: &[crate::generate::Refusal]) -> String {
    refusals
        .iter()
        .map(|r| format!("[{}] {}", r.code, r.message))
        .collect::<Vec<_>>()
        .join("; ")
}

fn keep_target_rows(rows: &mut Vec<crate::report::Row>, target: Target, s: &Setup) {
    if target == Target::Megatron {
        return;
    }
    rows.retain(|r| target.refusals(&s.model, &s.job, &r.layout).is_empty());
    let mut last = (0, 0);
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i + 1;
        if r.group != last.0 {
            last = (r.group, last.1 + 1);
        }
        r.group = last.1;
    }
}

fn target_model_check(target: Target, s: &Setup) -> Result<()> {
    let whole = target.model_refusals(&s.model, &s.job);
    if !whole.is_empty() {
        bail!(
            "--target {target}: no layout of {} can be written for it:{}",
            s.model.name,
            whole
                .iter()
                .map(|r| format!("\n  [{}] {}; fix: {}", r.code, r.message, r.remedy))
                .collect::<String>()
        );
    }
    Ok(())
}

fn run_generate(a: &GenerateArgs, out: &mut dyn Write) -> Result<()> {
    if a.job.format == Format::Csv {
        bail!("--format csv: generate prints the checklist (table) or the plan (json)");
    }
    if a.job.deepspeed_2021 {
        bail!(
            "--deepspeed-2021 prices DeepSpeed 0.3 (early 2021) to reproduce its measurements; generate writes launch files for today's engines: drop the flag (--target deepspeed prices today's DeepSpeed)"
        );
    }
    let mut req = PlanRequest::new(&a.job, &a.layout, a.allow_tp_across_nodes)?;
    // Price the plan as the target runs it (engine behaviour; see
    // `Target::engine_job`).
    a.target.engine_job(&mut req.setup.job);
    let s = &req.setup;
    let pr = req.problem();
    let layout = generate_layout(a, &req)?;
    let bundle = crate::generate::generate_for(&pr, &req.policy, &layout, a.target)?;
    let report = crate::generate::write(&bundle.files, &a.out)?;
    let stale = stale_files_note(&report, &a.out, a.target);
    if a.job.format == Format::Json {
        if let Some(note) = &stale {
            eprintln!("{note}");
        }
        out.write_all(
            bundle
                .file(crate::generate::PLAN_FILE)
                .unwrap_or_default()
                .as_bytes(),
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{} on {} GPUs of {}: {}",
        s.model.name,
        s.world,
        s.cluster.name,
        layout.short_with_split()
    )?;
    for f in &report.files {
        use crate::generate::WriteStatus;
        let what = match f.status {
            WriteStatus::Created => "wrote",
            WriteStatus::Replaced => "replaced",
            WriteStatus::Unchanged => "unchanged",
        };
        writeln!(out, "{what} {}", f.path.display())?;
    }
    if let Some(note) = &stale {
        writeln!(out, "{note}")?;
    }
    writeln!(out)?;
    out.write_all(
        bundle
            .file(crate::generate::CHECKLIST)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    Ok(())
}

/// A note naming the launch files of other targets that `generate` found
/// beside the ones it wrote (they describe an earlier plan), if any.
fn stale_files_note(
    report: &crate::generate::WriteReport,
    dir: &std::path::Path,
    target: crate::generate::Target,
) -> Option<String> {
    if report.other_targets.is_empty() {
        return None;
    }
    let names: Vec<String> = report
        .other_targets
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    Some(format!(
        "note: {} {} another target's launch files, left by an earlier generate into {}; they do not describe this plan (--target {target}): remove them or use another --out",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" },
        dir.display(),
    ))
}

/// The text of `path`, or an I/O error naming it.
fn read_text(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| {
        InputError::Io {
            file: path.to_path_buf(),
            source,
        }
        .into()
    })
}

fn read_overlay(path: &std::path::Path) -> Result<Overlay> {
    Ok(Overlay::from_toml(&read_text(path)?, path)?)
}

fn read_rows(path: &std::path::Path) -> Result<Vec<validate::MeasuredRow>> {
    Ok(validate::read_csv(&read_text(path)?, path)?)
}

fn read_table(path: &std::path::Path) -> Result<validate::Table> {
    Ok(validate::read_table(&read_text(path)?, path)?)
}

fn run_validate(a: &ValidateArgs, out: &mut dyn Write) -> Result<()> {
    let table = read_table(&a.file)?;
    let rows = &table.rows;
    let cat = catalog(&a.models_dir, &a.hardware_dir)?;
    let overlay = match &a.profile {
        Some(p) => {
            let o = read_overlay(p)?;
            cat.gpu(&o.gpu)
                .map_err(|e| InputError::field(p, "gpu", e.to_string()))?;
            Some(o)
        }
        None => None,
    };
    let report = validate::validate_table(&table, &cat, overlay.as_ref());
    let plans: Vec<validate::PlanCheck> = if a.plan {
        rows.iter()
            .filter(|r| {
                report
                    .rows
                    .iter()
                    .any(|x| x.id == r.id && (x.tflops.is_some() || x.step_s.is_some()))
            })
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
                writeln!(
                    out,
                    "Plan quality (search with the row's model, GPUs, global batch, micro-batch fixed):"
                )?;
                for p in &plans {
                    match p.rank {
                        Some(rank) => writeln!(
                            out,
                            "  {:<12} published layout{} ranks {rank} of {} valid; best {} ({:.0} vs {:.0} tokens/s)",
                            p.id,
                            p.split
                                .as_ref()
                                .map(|s| format!(" (re-split {s:?} by the ILP)"))
                                .unwrap_or_default(),
                            p.valid,
                            p.best.as_ref().map(|b| b.0.as_str()).unwrap_or("-"),
                            p.best.as_ref().map(|b| b.1).unwrap_or(0.0),
                            p.published_tokens_per_s
                        )?,
                        None => writeln!(
                            out,
                            "  {:<12} published layout REJECTED by {}",
                            p.id,
                            p.rejected_by.join(", ")
                        )?,
                    }
                }
                let mut software: Vec<&str> = plans.iter().map(|p| p.software).collect();
                software.sort_unstable();
                software.dedup();
                writeln!(
                    out,
                    "  Each search holds to what the row's software could run: {}.",
                    software.join("; ")
                )?;
                if let Some((n, med, p90, max)) = validate::plan_ratios(&plans) {
                    writeln!(
                        out,
                        "  Fastest predicted / published layout, predicted tokens/s, over {n} rows: median {med:.2}, p90 {p90:.2}, max {max:.2}."
                    )?;
                    if let Some((n, med, p90, max)) = validate::ranked_plan_ratios(&plans) {
                        writeln!(
                            out,
                            "  Ranked first (the row `search` lists first: tie groups, better-validated first) / published layout, predicted tokens/s, over {n} rows: median {med:.2}, p90 {p90:.2}, max {max:.2}."
                        )?;
                    }
                    let b = validate::plan_ratio_bins(&plans);
                    let e = validate::PLAN_RATIO_EDGES;
                    writeln!(
                        out,
                        "  Distribution: = {:.2} (published is first) {}; ({:.2}, {:.2}] {}; ({:.2}, {:.2}] {}; ({:.2}, {:.2}] {}; ({:.2}, {:.2}] {}; > {:.2} {}.",
                        e[0],
                        b[0],
                        e[0],
                        e[1],
                        b[1],
                        e[1],
                        e[2],
                        b[2],
                        e[2],
                        e[3],
                        b[3],
                        e[3],
                        e[4],
                        b[4],
                        e[4],
                        b[5]
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Writes `overlay` to `path` with a header naming the `command` that
/// fitted it and how to apply it.
fn write_overlay(
    path: &std::path::Path,
    overlay: &Overlay,
    command: &str,
    warnings: &[String],
) -> Result<()> {
    let text = toml::to_string_pretty(overlay)?;
    let mut header = format!(
        "# meshplan profile overlay (written by `meshplan {command}`).\n# Apply with `meshplan search --profile FILE` (also explain, validate).\n"
    );
    for w in warnings {
        header.push_str(&format!("# warning: {w}\n"));
    }
    std::fs::write(path, format!("{header}{text}")).map_err(|source| InputError::Write {
        file: path.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// The measurement rows of Megatron-LM logs, each named after its file.
fn log_rows(files: &[PathBuf], gpu: &str, vocab: Option<u64>) -> Result<String> {
    Ok(crate::megatron_log::csv(&log_records(files, gpu, vocab)?))
}

/// The measurement rows of Megatron-LM logs `files`, one per log, named by
/// the file stem.
fn log_records(
    files: &[PathBuf],
    gpu: &str,
    vocab: Option<u64>,
) -> Result<Vec<std::collections::BTreeMap<&'static str, String>>> {
    files
        .iter()
        .map(|f| {
            let log = crate::megatron_log::parse(&read_text(f)?, f)?;
            let id = f
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "log".into());
            Ok(log.row(&id, f, gpu, vocab)?)
        })
        .collect::<Result<Vec<_>>>()
}

/// Append `rows` to the CSV at `path` (created with import-log's header
/// when new or empty). An existing file's header must name every column
/// import-log writes, in any order (the rows are written in the file's
/// order; a column only the file has stays empty), and no row id may be in
/// it already. Returns how many rows were added.
fn append_rows(
    path: &std::path::Path,
    rows: &[std::collections::BTreeMap<&'static str, String>],
) -> Result<usize> {
    use std::io::Write as _;
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(InputError::Io {
                file: path.to_path_buf(),
                source,
            }
            .into());
        }
    };
    // Two logs of one call with the same file stem would be two rows of
    // one id: validate keeps only the first.
    let mut ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.get("id").map(|x| x.trim()))
        .collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        bail!(
            "{}: two of the logs give the row id `{}` (the id is a log's file stem): rename one; nothing was written",
            path.display(),
            w[0]
        );
    }
    let ours = crate::megatron_log::csv_columns();
    // A file of blank lines is new: it is rewritten, not appended to.
    let new_file = existing.trim().is_empty();
    let crlf = existing.contains("\r\n");
    let text = if new_file {
        crate::megatron_log::csv_text(rows, &ours, true, false)
    } else {
        let mut reader = csv::ReaderBuilder::new()
            .flexible(true)
            .from_reader(existing.as_bytes());
        let header: Vec<String> = reader
            .headers()
            .map_err(|e| anyhow::anyhow!("{}: line 1: {e}", path.display()))?
            .iter()
            .map(|c| c.trim().to_string())
            .collect();
        let missing: Vec<&str> = ours
            .iter()
            .copied()
            .filter(|c| !header.iter().any(|h| h == c))
            .collect();
        if !missing.is_empty() {
            bail!(
                "{}: line 1 is not a measurement header: it lacks the column(s) {} that import-log writes; append to a file import-log or the validation table created, or to a new one",
                path.display(),
                missing.join(", ")
            );
        }
        let id_col = header.iter().position(|h| h == "id").unwrap_or(0);
        for rec in reader.records() {
            let Ok(rec) = rec else { continue };
            let id = rec.get(id_col).unwrap_or_default().trim();
            if ids.contains(&id) {
                // The file line of the record: newlines before its first
                // byte, plus one (the csv crate counts CRLF line ends twice).
                let bytes = existing.as_bytes();
                let line = rec.position().map_or(0, |p| {
                    // The csv crate may start a record at the `\n` of the
                    // CRLF before it: skip line ends first.
                    let mut at = (p.byte() as usize).min(bytes.len());
                    while at < bytes.len() && matches!(bytes[at], b'\r' | b'\n') {
                        at += 1;
                    }
                    bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1
                });
                bail!(
                    "{}: row id `{id}` is already there (line {line}); rename the log (the id is its file stem) or remove that row",
                    path.display(),
                );
            }
        }
        let mut text = crate::megatron_log::csv_text(rows, &header, false, crlf);
        if !existing.ends_with('\n') {
            text.insert_str(0, if crlf { "\r\n" } else { "\n" });
        }
        text
    };
    let write_error = |source| InputError::Write {
        file: path.to_path_buf(),
        source,
    };
    if new_file {
        std::fs::write(path, text.as_bytes()).map_err(write_error)?;
    } else {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(write_error)?;
        f.write_all(text.as_bytes()).map_err(write_error)?;
    }
    Ok(rows.len())
}

fn run_import_log(a: &ImportLogArgs, out: &mut dyn Write) -> Result<()> {
    Catalog::shipped()?
        .gpu(&a.gpu)
        .map_err(|e| anyhow::anyhow!("--gpu: {e}"))?;
    let rows = log_records(&a.files, &a.gpu, a.vocab)?;
    match &a.append {
        Some(path) => {
            let n = append_rows(path, &rows)?;
            writeln!(out, "appended {n} row(s) to {}", path.display())?;
        }
        None => write!(out, "{}", crate::megatron_log::csv(&rows))?,
    }
    Ok(())
}

fn run_calibrate(a: &CalibrateArgs, out: &mut dyn Write) -> Result<()> {
    let mut rows = match &a.file {
        Some(f) => read_rows(f)?,
        None => Vec::new(),
    };
    if !a.megatron_log.is_empty() {
        let text = log_rows(&a.megatron_log, &a.gpu, a.vocab)?;
        rows.extend(validate::read_csv(
            &text,
            std::path::Path::new("--megatron-log"),
        )?);
    }
    if let Some(ids) = &a.rows {
        for id in ids {
            if !rows.iter().any(|r| &r.id == id) {
                bail!("--rows: no row `{id}` among the runs given");
            }
        }
        rows.retain(|r| ids.contains(&r.id));
    }
    let cat = Catalog::shipped()?;
    cat.gpu(&a.gpu).map_err(|e| anyhow::anyhow!("--gpu: {e}"))?;
    let fit = calibrate::calibrate(&rows, &cat, &a.gpu).map_err(|e| {
        let from = a
            .file
            .iter()
            .chain(&a.megatron_log)
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        anyhow::anyhow!("{from}: {e}")
    })?;
    write_overlay(&a.out, &fit.overlay, "calibrate", &fit.warnings)?;
    for w in &fit.warnings {
        eprintln!("warning: {w}");
    }
    writeln!(
        out,
        "{:<32} {:>10} {:>10}",
        "parameter", "shipped", "fitted"
    )?;
    for (n, a0, b) in &fit.parameters {
        writeln!(out, "{n:<32} {a0:>10.4} {b:>10.4}")?;
    }
    if let Some(c) = &fit.overlay.calibration {
        writeln!(
            out,
            "{:<16} {:>12} {:>12}",
            "row", "err before", "err after"
        )?;
        writeln!(
            out,
            "(step-time error, predicted / measured − 1: negative is predicted faster, as validate's `err` beside `step s`; validate's throughput error reads the other way, + = predicted faster)"
        )?;
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

fn run_calibrate_network(a: &CalibrateNetworkArgs, out: &mut dyn Write) -> Result<()> {
    let cat = catalog(&None, &a.hardware_dir)?;
    let cluster = cat.cluster(&a.cluster)?;
    if let Some(f) = a.files.iter().find(|f| **f == a.out) {
        bail!(
            "--out {} is also an input; write the overlay elsewhere",
            f.display()
        );
    }
    let runs = a
        .files
        .iter()
        .map(|f| Ok(crate::nccl_tests::parse(&read_text(f)?, f)?))
        .collect::<Result<Vec<_>>>()?;
    let fit = crate::calibrate_network::fit(&runs, cluster).map_err(|e| anyhow::anyhow!("{e}"))?;
    write_overlay(&a.out, &fit.overlay, "calibrate-network", &[])?;
    writeln!(
        out,
        "{:<6} {:>5} {:>8} {:>12} {:>22} {:>20}",
        "level", "runs", "samples", "GB/s/GPU", "efficiency (profile)", "latency µs (profile)"
    )?;
    for l in &fit.levels {
        writeln!(
            out,
            "{:<6} {:>5} {:>8} {:>12.1} {:>22} {:>20}",
            l.level,
            l.runs,
            l.samples,
            l.bandwidth / 1e9,
            format!("{:.3} ({:.3})", l.efficiency, l.efficiency_before),
            format!("{:.2} ({:.2})", l.latency_s * 1e6, l.latency_before_s * 1e6)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "largest message: bus bandwidth measured, fitted and with the profile's links (GB/s); worst time error over all sizes"
    )?;
    for c in &fit.checks {
        writeln!(
            out,
            "  {} ({}, {} ranks on {} host{}): {:.0} MB: {:.1} measured, {:.1} fitted ({:+.1}%), {:.1} profile; worst {:.0}%",
            c.file,
            c.collective.program(),
            c.ranks,
            c.hosts,
            if c.hosts == 1 { "" } else { "s" },
            c.largest_bytes / 1e6,
            c.measured_busbw / 1e9,
            c.fitted_busbw / 1e9,
            100.0 * (c.fitted_busbw / c.measured_busbw - 1.0),
            c.profile_busbw / 1e9,
            100.0 * c.max_time_error
        )?;
    }
    for n in &fit.notes {
        writeln!(out, "note: {n}")?;
    }
    writeln!(out, "wrote {}", a.out.display())?;
    Ok(())
}

fn run_import_model(a: &ImportModelArgs, out: &mut dyn Write) -> Result<()> {
    let opts = crate::spec::hf::Options {
        name: a.name.clone(),
        seq_len: a.seq_len,
        global_batch: a.global_batch,
    };
    let imp = crate::spec::hf::read(&a.file, &opts)?;
    let text = crate::spec::hf::card_toml(&imp);
    // The card must read back as the model it describes.
    let back = Model::from_toml(&text, &a.file)?;
    if back != imp.model {
        bail!(
            "{}: the card written does not read back to the same model (a meshplan bug)",
            a.file.display()
        );
    }
    out.write_all(text.as_bytes())?;
    out.flush()?;
    let mut notes = imp.all_notes();
    notes.extend(imp.job_note());
    for n in notes {
        let _ = writeln!(std::io::stderr(), "note: {}: {n}", a.file.display());
    }
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
        Command::Generate(a) => run_generate(a, &mut out),
        Command::Validate(a) => run_validate(a, &mut out),
        Command::Calibrate(a) => run_calibrate(a, &mut out),
        Command::CalibrateNetwork(a) => run_calibrate_network(a, &mut out),
        Command::ImportLog(a) => run_import_log(a, &mut out),
        Command::ImportModel(a) => run_import_model(a, &mut out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_args(cmd: &str, flags: &[&str]) -> LayoutArgs {
        let mut argv = vec!["meshplan", cmd, "--model", "70b", "--cluster", "dgx64"];
        argv.extend_from_slice(flags);
        match Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(Command::Explain(a)) => a.layout,
            Ok(Command::Generate(a)) => a.layout,
            other => panic!("{other:?}"),
        }
    }

    /// Every key of the layout grammar is a flag of `explain` and
    /// `generate`, and `--KEY EXAMPLE` fixes what `KEY=EXAMPLE` fixes.
    #[test]
    fn flags_and_key_values_are_one_grammar() {
        for key in search::LAYOUT_KEYS {
            let flag = key.flag();
            for cmd in ["explain", "generate"] {
                let a = layout_args(cmd, &[&flag, key.example]);
                if key.name == "split" {
                    assert_eq!(a.split, Some(vec![19, 21, 21, 19]));
                    continue;
                }
                let f = Filter::parse(&format!("{}={}", key.name, key.example)).unwrap();
                assert_eq!(a.filter(), f, "{cmd} {flag} {}", key.example);
            }
        }
    }

    /// `--sp` alone, `--sp on` and `--sp off`; absent means the default.
    #[test]
    fn sp_flag_forms() {
        assert_eq!(layout_args("explain", &["--sp"]).sp, Some(true));
        assert_eq!(layout_args("explain", &["--sp", "on"]).sp, Some(true));
        assert_eq!(layout_args("generate", &["--sp", "off"]).sp, Some(false));
        assert_eq!(layout_args("explain", &["--sp", "--tp", "8"]).tp, Some(8));
        assert_eq!(layout_args("explain", &[]).sp, None);
    }

    /// The help of a layout flag shows the table's default and, for named
    /// values, the possible values; a hidden alias is not listed.
    #[test]
    fn help_shows_defaults_and_values() {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        let explain = cmd.find_subcommand_mut("explain").unwrap();
        let help = explain.render_long_help().to_string();
        assert!(
            help.contains("Tensor-parallel size T [default: 1]"),
            "{help}"
        );
        assert!(help.contains("[default: off]"), "{help}");
        assert!(
            help.contains("[possible values: none, selective, full]"),
            "{help}"
        );
        assert!(
            help.contains("[possible values: ring, all-gather]"),
            "{help}"
        );
        assert!(
            help.contains("[possible values: megatron, adam-16b, deepspeed]"),
            "{help}"
        );
        assert!(!help.contains("p2p,") && !help.contains("seed"), "{help}");
    }

    /// Clap's error for a bad named value names the flag, the value and the
    /// possible values; an alias is accepted.
    #[test]
    fn named_values_parse_or_fail_clearly() {
        let argv = ["meshplan", "explain", "--model", "m", "--cluster", "c"];
        let bad = Cli::try_parse_from(argv.iter().chain(&["--order", "pp-first"])).unwrap_err();
        let text = bad.to_string();
        assert!(
            text.contains("invalid value 'pp-first' for '--order <ORDER>'"),
            "{text}"
        );
        assert!(text.contains("tp-cp-ep-dp-pp, tp-cp-ep-pp-dp"), "{text}");
        let a = layout_args("explain", &["--cp-comm", "allgather"]);
        assert_eq!(a.cp_comm, Some(CpComm::AllGather));
    }
}
