//! `meshplan generate`: the launch files of one plan.
//!
//! A layout is first judged: every meshplan rule ([`crate::rules::explain`],
//! the memory check included) and the Megatron-LM checks that only matter
//! at launch ([`refusals`]). A layout that breaks any of them is refused
//! with one line per broken rule, and nothing is written. Otherwise the
//! Rust side builds one typed context, the [`Plan`] (which is also the
//! engine-neutral `plan.json`), translates it to Megatron-LM flags
//! ([`megatron::megatron`]) and fills the checklist numbers
//! ([`checklist::checklist`]); the minijinja templates in `templates/`
//! (compiled into the binary) only format them.
//!
//! Files written (see [`FILES`]):
//! - `megatron_pretrain_gpt.sh`: `torchrun … pretrain_gpt.py` with every
//!   layout flag, the environment the layout needs, and parameters (data,
//!   tokenizer, checkpoints, logs, steps, learning rate) that stop the script
//!   when unset.
//! - `slurm_megatron.sbatch`: a SLURM batch script that starts the same
//!   launch once per node, with the rendezvous on the allocation's first node.
//! - `plan.json`: the engine-neutral plan (schema in `docs/plan-schema.md`).
//! - `CHECKLIST.md`: the checks to run before the long run, with this plan's
//!   predicted numbers, each naming its setting in the target's own files
//!   ([`words::words`]); also printed by the command.

pub mod checklist;
pub mod deepspeed;
pub mod megatron;
pub mod megatron_bridge;
pub mod plan_file;
pub mod target;
pub mod torchtitan;
pub mod words;

use std::fmt;
use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};
use serde::Serialize;

use crate::cost::{self, Problem};
use crate::layout::Layout;
use crate::report::memory_note;
use crate::rules::{self, Policy};
use crate::spec::model::PositionEmbedding;

pub use plan_file::Plan;
pub use target::Target;

static TEMPLATES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/templates");

/// The Megatron-LM launch script.
pub const MEGATRON_SCRIPT: &str = "megatron_pretrain_gpt.sh";
/// The SLURM batch script.
pub const SLURM_SCRIPT: &str = "slurm_megatron.sbatch";
/// The engine-neutral plan file.
pub const PLAN_FILE: &str = "plan.json";
/// The verification checklist.
pub const CHECKLIST: &str = "CHECKLIST.md";
/// Every file `generate` writes for Megatron-LM, in order
/// ([`Target::files`] for the others).
pub const FILES: [&str; 4] = [MEGATRON_SCRIPT, SLURM_SCRIPT, PLAN_FILE, CHECKLIST];
/// torchtitan's configuration module (`--module torchtitan_plan`).
pub const TORCHTITAN_CONFIG: &str = "torchtitan_plan.py";
/// torchtitan's torchrun script.
pub const TORCHTITAN_SCRIPT: &str = "torchtitan_launch.sh";
/// The Megatron-Bridge launch script (recipe plus overrides).
pub const BRIDGE_SCRIPT: &str = "megatron_bridge_train.sh";
/// The DeepSpeed configuration.
pub const DEEPSPEED_CONFIG: &str = "ds_config.json";
/// The DeepSpeed launcher script.
pub const DEEPSPEED_SCRIPT: &str = "deepspeed_launch.sh";

/// One reason a layout cannot be launched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    /// Stable code: a meshplan rule code, or `launch-…` / `megatron-…` for
    /// checks only the launch needs.
    pub code: String,
    /// What is wrong, with the numbers.
    pub message: String,
    /// What would fix it.
    pub remedy: String,
}

/// Why `generate` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The layout breaks rules; each is listed.
    #[error("refusing to write launch files for {layout}: {}", RefusalList(.refusals))]
    Refused {
        /// The layout, one line.
        layout: String,
        /// Every broken rule.
        refusals: Vec<Refusal>,
    },
    /// A template failed to render (a bug in meshplan's templates).
    #[error("template `{name}`: {detail}")]
    Template {
        /// Template file name.
        name: String,
        /// minijinja's message.
        detail: String,
    },
    /// A file could not be written.
    #[error("{}: cannot write", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
}

struct RefusalList<'a>(&'a [Refusal]);

impl fmt::Display for RefusalList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "it breaks {} rule(s)", self.0.len())?;
        for r in self.0 {
            write!(f, "\n  [{}] {}; fix: {}", r.code, r.message, r.remedy)?;
        }
        Ok(())
    }
}

/// Every reason layout `l` cannot be launched with Megatron-LM: meshplan's
/// rules under `policy` (memory included, from `eval = cost::evaluate(pr,
/// l)`) and the launch checks they do not cover:
/// - `launch-nodes`: torchrun starts the same number of processes on every
///   node, so N must fit one node or be a multiple of the GPUs per node.
/// - `megatron-recipe`: the DeepSpeed 2/(2+4)/12 recipe has no Megatron-LM
///   spelling (Megatron keeps fp32 main grads, or bf16 ones with
///   `--grad-reduce-in-bf16`).
/// - `megatron-position-embedding`: Megatron-LM has no ALiBi
///   (`--position-embedding-type` choices, [ref:megatron-arguments]).
/// - `megatron-precision`: a low-precision recipe Megatron-LM cannot
///   express: row-wise FP8 scaling (its `--fp8-recipe` takes `tensorwise`,
///   `delayed`, `mxfp8`, `blockwise` or `custom`, [ref:megatron-arguments]),
///   torchao's float8 kernels (Megatron runs FP8 through Transformer
///   Engine), narrow parameter gathers without the distributed optimizer
///   or FSDP [D4], or FP8 MoE dispatch (Megatron-LM has it only through the
///   `ncclep` flex dispatcher with MXFP8 payloads).
/// - `megatron-moe-bias` [E4]: MoE with linear biases needs ETP = 1.
pub fn refusals(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    eval: &cost::Evaluation,
) -> Vec<Refusal> {
    refusals_for(pr, policy, l, eval, Target::Megatron)
}

/// Every reason layout `l` cannot be launched with `target`: meshplan's
/// rules, the node check, Megatron-LM's launch checks when the target runs
/// on Megatron-Core ([`Target::is_megatron_core`]), and the target's own
/// ([`Target::refusals`]).
pub fn refusals_for(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    eval: &cost::Evaluation,
    target: Target,
) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = rules::explain(pr, policy, l, memory_note(eval))
        .into_iter()
        .map(|v| Refusal {
            code: v.code.to_string(),
            message: v.message,
            remedy: v.remedy,
        })
        .collect();
    let gpn = pr.cluster.gpus_per_node as u64;
    let world = l.world();
    if world > gpn && !world.is_multiple_of(gpn) {
        out.push(Refusal {
            code: "launch-nodes".into(),
            message: format!(
                "{world} GPUs do not fill whole {gpn}-GPU nodes; torchrun starts the same number of processes on every node"
            ),
            remedy: format!(
                "use a multiple of {gpn} GPUs (--gpus {} or {})",
                world / gpn * gpn,
                (world / gpn + 1) * gpn
            ),
        });
    }
    if target.is_megatron_core() {
        out.extend(megatron_refusals(pr, l));
    }
    out.extend(target.refusals(pr.model, pr.job, l));
    if target == Target::MegatronBridge && out.is_empty() {
        let plan = Plan::new(pr, l, eval);
        for flag in megatron_bridge::untranslated(&megatron::megatron(&plan)) {
            out.push(Refusal {
                code: "bridge-flag".into(),
                message: format!(
                    "the plan needs Megatron-LM's {flag}, which meshplan does not translate into a Megatron-Bridge override"
                ),
                remedy: "use --target megatron, or plan without the option that sets it".into(),
            });
        }
    }
    out
}

/// Megatron-LM's launch checks that meshplan's rules do not cover (see
/// [`refusals`]); they apply to every target on Megatron-Core.
fn megatron_refusals(pr: &Problem, l: &Layout) -> Vec<Refusal> {
    let mut out = Vec::new();
    let model = pr.model;
    if pr.job.moe_a2a_overlap && model.moe.is_some() && model.architecture.mtp_layers > 1 {
        out.push(Refusal {
            code: "megatron-mtp".into(),
            message: format!(
                "{} MTP layers with the expert all-to-all overlapped: Megatron-Core's TransformerConfig allows at most one MTP layer under overlap_moe_expert_parallel_comm",
                model.architecture.mtp_layers
            ),
            remedy: "plan without the all-to-all overlap, or with a card of one MTP layer".into(),
        });
    }
    if pr.job.recipe_name == crate::spec::RecipeName::Deepspeed {
        out.push(Refusal {
            code: "megatron-recipe".into(),
            message: "the deepspeed precision recipe (fp16 grads plus an fp32 partition) has no Megatron-LM flags".into(),
            remedy: "plan with --recipe megatron or --recipe adam-16b".into(),
        });
    }
    {
        use crate::spec::{Fp8Kernels, Fp8Recipe, Precision};
        let job = pr.job;
        if job.precision == Precision::Fp8 && job.fp8_recipe == Fp8Recipe::Rowwise {
            out.push(Refusal {
                code: "megatron-precision".into(),
                message: "Megatron-LM has no row-wise FP8 scaling: its --fp8-recipe takes tensorwise, delayed, mxfp8, blockwise or custom".into(),
                remedy: "plan with --fp8-recipe current (tensorwise) or blockwise".into(),
            });
        }
        if job.precision.is_low() && job.fp8_kernels == Fp8Kernels::Torchao {
            out.push(Refusal {
                code: "megatron-precision".into(),
                message: "the plan is priced with torchao's float8 kernels (torchtitan); Megatron-LM runs low-precision linears through Transformer Engine".into(),
                remedy: "plan with --fp8-kernels te".into(),
            });
        }
        if job.precision.is_low() && job.fp8_dispatch && model.moe.is_some() {
            out.push(Refusal {
                code: "megatron-precision".into(),
                message: "the plan dispatches MoE tokens in FP8; Megatron-LM does that only through the ncclep flex dispatcher with MXFP8 wire payloads (--moe-dispatch-fwd-dtype mxfp8), which these launch files do not set up".into(),
                remedy: "plan without --fp8-dispatch".into(),
            });
        }
        if job.precision.is_low() && job.fp8_param_gather && l.zero == 0 {
            out.push(Refusal {
                code: "megatron-precision".into(),
                message: "--fp8-param-gather needs the distributed optimizer or FSDP (Megatron's validate_args), and this layout is ZeRO 0".into(),
                remedy: "plan with ZeRO 1 or more (--zero 1), or without --fp8-param-gather".into(),
            });
        }
    }
    if model.architecture.position_embedding == PositionEmbedding::Alibi {
        out.push(Refusal {
            code: "megatron-position-embedding".into(),
            message: format!(
                "{} uses ALiBi, which Megatron-LM does not implement",
                model.name
            ),
            remedy: "plan a model card with RoPE or learned positions".into(),
        });
    }
    if let Some(r) = &model.architecture.rope_scaling
        && (r.low_freq_factor, r.high_freq_factor, r.original_max_seq) != (1.0, 4.0, 8192)
    {
        out.push(Refusal {
            code: "megatron-rope-scaling".into(),
            message: format!(
                "{}'s RoPE scaling has low_freq_factor {}, high_freq_factor {}, original_max_seq {}; Megatron-LM's --use-rope-scaling fixes them at 1, 4 and 8192 (rotary_pos_embedding.py _apply_scaling), so the launch files would build another model",
                model.name, r.low_freq_factor, r.high_freq_factor, r.original_max_seq
            ),
            remedy: "edit the launch files by hand, or plan a card whose rope_scaling is Llama 3.1's".into(),
        });
    }
    if model.moe.is_some() && model.architecture.linear_bias && l.etp != 1 {
        out.push(Refusal {
            code: "megatron-moe-bias".into(),
            message: format!(
                "{} has linear biases and ETP = {}; Megatron supports MoE biases only with ETP = 1 [E4]",
                model.name, l.etp
            ),
            remedy: "use ETP = 1".into(),
        });
    }
    out
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GeneratedFile {
    /// File name (one of [`FILES`]).
    pub name: &'static str,
    /// Whether to mark it executable.
    pub executable: bool,
    /// Its text.
    pub contents: String,
}

/// A rendered plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The typed context (also `plan.json`).
    pub plan: Plan,
    /// The files, in [`FILES`] order.
    pub files: Vec<GeneratedFile>,
}

impl Bundle {
    /// The text of file `name`, if it was generated.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.contents.as_str())
    }
}

/// Judge layout `l` and render its Megatron-LM files.
///
/// # Errors
/// [`GenerateError::Refused`] listing every broken rule when the layout
/// cannot be launched; [`GenerateError::Template`] if a template fails.
pub fn generate(pr: &Problem, policy: &Policy, l: &Layout) -> Result<Bundle, GenerateError> {
    generate_for(pr, policy, l, Target::Megatron)
}

/// Judge layout `l` for `target` and render that target's files.
///
/// # Errors
/// As [`generate`], with the target's own refusals.
pub fn generate_for(
    pr: &Problem,
    policy: &Policy,
    l: &Layout,
    target: Target,
) -> Result<Bundle, GenerateError> {
    let eval = cost::evaluate(pr, l);
    let refused = refusals_for(pr, policy, l, &eval, target);
    if !refused.is_empty() {
        return Err(GenerateError::Refused {
            layout: l.short(),
            refusals: refused,
        });
    }
    let plan = Plan::new(pr, l, &eval);
    let files = render_for(&plan, target)?;
    Ok(Bundle { plan, files })
}

fn fixed(v: f64, digits: Option<usize>) -> String {
    format!("{:.*}", digits.unwrap_or(1), v)
}

fn environment() -> Result<minijinja::Environment<'static>, GenerateError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.set_keep_trailing_newline(true);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_filter("f", fixed);
    for file in TEMPLATES.files() {
        let name = file.path().to_string_lossy().into_owned();
        let text = file
            .contents_utf8()
            .ok_or_else(|| GenerateError::Template {
                name: name.clone(),
                detail: "not UTF-8".into(),
            })?;
        env.add_template_owned(name.clone(), text.to_string())
            .map_err(|e| GenerateError::Template {
                name,
                detail: format!("{e:#}"),
            })?;
    }
    Ok(env)
}

/// Render the Megatron-LM files of `plan` (no checks: [`generate`] checks
/// first).
///
/// # Errors
/// [`GenerateError::Template`] if a template fails to render.
pub fn render(plan: &Plan) -> Result<Vec<GeneratedFile>, GenerateError> {
    render_for(plan, Target::Megatron)
}

/// What the Megatron-Bridge template reads.
#[derive(Serialize)]
struct BridgeContext {
    recipe: &'static str,
    overrides: Vec<ShellOverride>,
    /// Environment variables the launcher forwards to the job.
    forward_env: Vec<String>,
}

#[derive(Serialize)]
struct ShellOverride {
    shell: String,
    note: Option<String>,
}

/// Render the files of `plan` for `target` (no checks: [`generate_for`]
/// checks first; a target's model lookup that fails here is a template
/// error, since the checks refuse such plans).
///
/// # Errors
/// [`GenerateError::Template`] if a template fails to render.
pub fn render_for(plan: &Plan, target: Target) -> Result<Vec<GeneratedFile>, GenerateError> {
    let env = environment()?;
    let mega = megatron::megatron(plan);
    let upstream = target::UPSTREAM_MODELS
        .iter()
        .find(|u| u.card == plan.model.name);
    let missing = |what: &str| GenerateError::Template {
        name: format!("{target}"),
        detail: format!("no {what} for the card {}", plan.model.name),
    };
    let titan = match target {
        Target::Torchtitan => Some(torchtitan::torchtitan(
            plan,
            upstream
                .filter(|u| u.torchtitan_config.is_some())
                .ok_or_else(|| missing("torchtitan configuration"))?,
        )),
        _ => None,
    };
    let bridge_overrides = match target {
        Target::MegatronBridge => Some(megatron_bridge::overrides(plan)),
        _ => None,
    };
    let ds_config = match target {
        Target::Deepspeed => Some(deepspeed::config(plan)),
        _ => None,
    };
    let words = words::words(
        plan,
        target,
        words::Sources {
            megatron: &mega,
            torchtitan: titan.as_ref(),
            bridge: bridge_overrides.as_deref(),
            deepspeed: ds_config.as_ref(),
        },
    )
    .map_err(|detail| GenerateError::Template {
        name: CHECKLIST.into(),
        detail,
    })?;
    let bridge = match target {
        Target::MegatronBridge => Some(BridgeContext {
            recipe: upstream
                .and_then(|u| u.bridge_recipe)
                .ok_or_else(|| missing("Megatron-Bridge recipe"))?,
            overrides: bridge_overrides
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|o| ShellOverride {
                    shell: o.shell(),
                    note: o.note,
                })
                .collect(),
            forward_env: mega
                .env
                .iter()
                .filter_map(|e| e.text.strip_prefix("export "))
                .filter_map(|t| t.split('=').next())
                .map(str::to_string)
                .collect(),
        }),
        _ => None,
    };
    let ctx = minijinja::context! {
        plan => minijinja::Value::from_serialize(plan),
        megatron => minijinja::Value::from_serialize(&mega),
        checklist => minijinja::Value::from_serialize(checklist::checklist(plan)),
        torchtitan => minijinja::Value::from_serialize(&titan),
        target => minijinja::context! {
            name => target.as_str(),
        },
        words => minijinja::Value::from_serialize(&words),
        bridge => minijinja::Value::from_serialize(&bridge),
        files => minijinja::context! {
            megatron => MEGATRON_SCRIPT,
            slurm => SLURM_SCRIPT,
            plan => PLAN_FILE,
            checklist => CHECKLIST,
            torchtitan_config => TORCHTITAN_CONFIG,
            torchtitan_launch => TORCHTITAN_SCRIPT,
            deepspeed_config => DEEPSPEED_CONFIG,
        },
    };
    let tpl = |name: &str| -> Result<String, GenerateError> {
        let t = env
            .get_template(name)
            .map_err(|e| GenerateError::Template {
                name: name.to_string(),
                detail: format!("{e:#}"),
            })?;
        t.render(&ctx).map_err(|e| GenerateError::Template {
            name: name.to_string(),
            detail: format!("{e:#}"),
        })
    };
    let json = plan_file::to_json(plan).map_err(|e| GenerateError::Template {
        name: PLAN_FILE.into(),
        detail: e.to_string(),
    })?;
    let file = |name: &'static str, executable: bool, contents: String| GeneratedFile {
        name,
        executable,
        contents,
    };
    let mut files = match target {
        Target::Megatron => vec![
            file(MEGATRON_SCRIPT, true, tpl("megatron_pretrain_gpt.sh.j2")?),
            file(SLURM_SCRIPT, true, tpl("slurm_megatron.sbatch.j2")?),
        ],
        Target::Torchtitan => vec![
            file(TORCHTITAN_CONFIG, false, tpl("torchtitan_plan.py.j2")?),
            file(TORCHTITAN_SCRIPT, true, tpl("torchtitan_launch.sh.j2")?),
        ],
        Target::MegatronBridge => vec![file(
            BRIDGE_SCRIPT,
            true,
            tpl("megatron_bridge_train.sh.j2")?,
        )],
        Target::Deepspeed => vec![
            file(DEEPSPEED_CONFIG, false, deepspeed::config_text(plan)),
            file(DEEPSPEED_SCRIPT, true, tpl("deepspeed_launch.sh.j2")?),
        ],
    };
    files.push(file(PLAN_FILE, false, json));
    files.push(file(CHECKLIST, false, tpl("checklist.md.j2")?));
    Ok(files)
}

/// What [`write`] did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WriteStatus {
    /// The file did not exist.
    Created,
    /// A file of that name held other text (an earlier plan) and was
    /// replaced.
    Replaced,
    /// The file already held exactly this text.
    Unchanged,
}

/// One file [`write`] handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Its path.
    pub path: PathBuf,
    /// Whether it was new, replaced or already so.
    pub status: WriteStatus,
}

/// What [`write`] did: each file it wrote, and the launch files of other
/// targets it found beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    /// The files written, in order.
    pub files: Vec<Written>,
    /// Files in `dir` that another [`Target`] writes and this one does not
    /// (left by an earlier `generate --target …` into the same folder; they
    /// describe that plan, not this one). Left in place, named so the user
    /// can remove them.
    pub other_targets: Vec<PathBuf>,
}

/// Write `files` into directory `dir` (created if missing), replacing files
/// of the same names, and say which were new, replaced or unchanged, and
/// which files of other targets the folder holds.
///
/// # Errors
/// [`GenerateError::Io`] naming the directory or file that failed.
pub fn write(files: &[GeneratedFile], dir: &Path) -> Result<WriteReport, GenerateError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GenerateError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    // Every destination is checked before anything is written, so a file
    // that cannot be replaced (a directory of that name) leaves the earlier
    // plan whole instead of half replaced.
    for f in files {
        let path = dir.join(f.name);
        if path.exists() && !path.is_file() {
            return Err(GenerateError::Io {
                path,
                source: std::io::Error::other(
                    "not a regular file (a directory or special file of that name): nothing was written",
                ),
            });
        }
    }
    let mut written = Vec::new();
    for f in files {
        let path = dir.join(f.name);
        let status = match std::fs::read(&path) {
            Ok(old) if old == f.contents.as_bytes() => WriteStatus::Unchanged,
            Ok(_) => WriteStatus::Replaced,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => WriteStatus::Created,
            // Unreadable but present (a directory, no permission): writing
            // gives the error that names it.
            Err(_) => WriteStatus::Replaced,
        };
        if status != WriteStatus::Unchanged {
            std::fs::write(&path, &f.contents).map_err(io(&path))?;
        }
        #[cfg(unix)]
        if f.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&path))?;
        }
        written.push(Written { path, status });
    }
    let ours: Vec<&str> = files.iter().map(|f| f.name).collect();
    let mut other_targets: Vec<PathBuf> = Target::ALL
        .iter()
        .flat_map(|t| t.files().iter().copied())
        .filter(|name| !ours.contains(name))
        .map(|name| dir.join(name))
        .filter(|path| path.exists())
        .collect();
    other_targets.sort();
    other_targets.dedup();
    Ok(WriteReport {
        files: written,
        other_targets,
    })
}

/// A layout read from a `meshplan search --format json` output (row K of
/// `rows`) or from a `plan.json` written by `generate`, with the job it
/// was planned for.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    /// The layout.
    pub layout: Layout,
    /// Model card name it was planned for.
    pub model: String,
    /// Cluster name.
    pub cluster: String,
    /// GPUs.
    pub gpus: u64,
    /// Global batch, sequences.
    pub global_batch: u64,
    /// Sequence length, tokens.
    pub seq_len: u64,
    /// Recipe name (`megatron` or `seed`).
    pub recipe: String,
    /// Precision of the linear GEMMs (`bf16` when the input predates it).
    pub precision: String,
}

impl PlanInput {
    /// Read row `rank` (1-based) of a search JSON, or the layout of a plan
    /// file (`rank` must then be 1). `file` names the input in errors.
    ///
    /// # Errors
    /// [`InputError::Syntax`] for invalid JSON; [`InputError::Field`] naming
    /// the missing or malformed field, or a rank beyond the rows.
    pub fn parse(
        text: &str,
        file: &Path,
        rank: u64,
    ) -> Result<PlanInput, crate::error::InputError> {
        use crate::error::InputError;
        use serde_json::Value;
        let v: Value = serde_json::from_str(text).map_err(|e| InputError::Syntax {
            file: file.to_path_buf(),
            detail: format!("not JSON: {e}"),
        })?;
        let field = |f: &str, p: String| InputError::field(file, f, p);
        let get = |path: &str| -> Result<&Value, InputError> {
            path.split('.')
                .try_fold(&v, |x, k| x.get(k))
                .ok_or_else(|| field(path, "missing".into()))
        };
        let string = |path: &str| -> Result<String, InputError> {
            get(path)?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| field(path, "must be a string".into()))
        };
        let number = |path: &str| -> Result<u64, InputError> {
            get(path)?
                .as_u64()
                .ok_or_else(|| field(path, "must be a non-negative integer".into()))
        };
        // A precision the file does not state is bf16 (files written before
        // `--precision` existed).
        let optional = |path: &str| -> Result<String, InputError> {
            match path.split('.').try_fold(&v, |x, k| x.get(k)) {
                None => Ok("bf16".to_string()),
                Some(x) => x
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| field(path, "must be a string".into())),
            }
        };
        let layout_of = |x: &Value, path: &str| -> Result<Layout, InputError> {
            serde_json::from_value(x.clone())
                .map_err(|e| field(path, format!("not a meshplan layout: {e}")))
        };
        // The job read at the paths of one kind of file: model, cluster,
        // GPUs, global batch, sequence length, recipe, precision.
        let job_at = |layout: Layout, paths: [&str; 7]| -> Result<PlanInput, InputError> {
            let [
                model,
                cluster,
                gpus,
                global_batch,
                seq_len,
                recipe,
                precision,
            ] = paths;
            Ok(PlanInput {
                layout,
                model: string(model)?,
                cluster: string(cluster)?,
                gpus: number(gpus)?,
                global_batch: number(global_batch)?,
                seq_len: number(seq_len)?,
                recipe: string(recipe)?,
                precision: optional(precision)?,
            })
        };
        if v.get("schema")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("meshplan-plan/"))
        {
            if rank != 1 {
                return Err(field(
                    "layout",
                    format!("a plan file holds one layout; --rank {rank} asks for another"),
                ));
            }
            return job_at(
                layout_of(get("layout")?, "layout")?,
                [
                    "model.name",
                    "hardware.cluster",
                    "hardware.world",
                    "job.global_batch",
                    "job.seq_len",
                    "job.recipe",
                    "job.precision",
                ],
            );
        }
        let rows = get("rows")?.as_array().ok_or_else(|| {
            field(
                "rows",
                "must be an array (is this `meshplan search --format json` output?)".into(),
            )
        })?;
        let row = rows
            .iter()
            .find(|r| r.get("rank").and_then(Value::as_u64) == Some(rank))
            .ok_or_else(|| {
                field(
                    "rows",
                    format!("has no row of rank {rank} ({} rows)", rows.len()),
                )
            })?;
        let path = format!("rows[{}].layout", rank - 1);
        let layout = row
            .get("layout")
            .ok_or_else(|| field(&path, "missing".into()))?;
        job_at(
            layout_of(layout, &path)?,
            [
                "context.model",
                "context.cluster",
                "context.gpus",
                "context.global_batch",
                "context.seq_len",
                "context.recipe",
                "context.precision",
            ],
        )
    }

    /// Check that the job on the command line is the one this layout was
    /// planned for.
    ///
    /// # Errors
    /// [`InputError::Field`] naming the first field that differs and the flag
    /// that sets it.
    pub fn check_job(
        &self,
        file: &Path,
        model: &str,
        cluster: &str,
        world: u64,
        job: &crate::spec::Job,
    ) -> Result<(), crate::error::InputError> {
        let recipe = job.recipe_name.as_str();
        // A file written before `seed` was renamed `adam-16b` names the same
        // recipe by its old name.
        let planned_recipe = self
            .recipe
            .parse::<crate::spec::RecipeName>()
            .map_or_else(|_| self.recipe.clone(), |r| r.as_str().to_string());
        let checks: [(&str, String, String, &str); 7] = [
            ("model", self.model.clone(), model.to_string(), "--model"),
            (
                "cluster",
                self.cluster.clone(),
                cluster.to_string(),
                "--cluster",
            ),
            ("gpus", self.gpus.to_string(), world.to_string(), "--gpus"),
            (
                "global_batch",
                self.global_batch.to_string(),
                job.global_batch.to_string(),
                "--global-batch",
            ),
            (
                "seq_len",
                self.seq_len.to_string(),
                job.seq_len.to_string(),
                "--seq-len",
            ),
            ("recipe", planned_recipe, recipe.to_string(), "--recipe"),
            (
                "precision",
                self.precision.clone(),
                job.precision.to_string(),
                "--precision",
            ),
        ];
        for (name, planned, given, flag) in checks {
            if planned != given {
                return Err(crate::error::InputError::field(
                    file,
                    name,
                    format!(
                        "the layout was planned for {name} {planned}, but the command line gives {given}; pass {flag} {planned}"
                    ),
                ));
            }
        }
        Ok(())
    }
}
