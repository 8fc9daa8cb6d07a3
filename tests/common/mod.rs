//! Helpers shared by the integration tests: fixtures from the shipped
//! catalog, synthetic model cards, and (for `generate`) a problem from
//! the shipped catalog, and run a generated launch script under bash with a
//! stub `torchrun` that records its argv and environment.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use meshplan::cost::Problem;
use meshplan::generate::{self, Bundle};
use meshplan::layout::Layout;
use meshplan::rules::Policy;
use meshplan::search::{self, Space};
use meshplan::spec::{Catalog, Cluster, Gpu, Job, Model};

/// Owned parts of a planning problem.
pub struct Setup {
    pub model: Model,
    pub gpu: Gpu,
    pub cluster: Cluster,
    pub job: Job,
    pub world: u64,
}

impl Setup {
    /// `model` on `gpus` GPUs of `cluster` (all of them when `None`), the
    /// model card's default job.
    pub fn new(model: &str, cluster: &str, gpus: Option<u64>) -> Setup {
        let cat = Catalog::shipped().expect("catalog");
        let model = cat.model(model).expect("model").clone();
        let cluster = cat.cluster(cluster).expect("cluster").clone();
        let gpu = cat.gpu(&cluster.gpu).expect("gpu").clone();
        let world = gpus.unwrap_or(cluster.job_gpus());
        let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
        Setup {
            model,
            gpu,
            cluster,
            job,
            world,
        }
    }

    /// `model` on all GPUs of `cluster`, the card's job with sequence
    /// length `seq` when given (global batch unchanged).
    pub fn with_seq(model: &str, cluster: &str, seq: Option<u64>) -> Setup {
        let mut s = Setup::new(model, cluster, None);
        if let Some(seq) = seq {
            s.job.seq_len = seq;
        }
        s
    }

    pub fn problem(&self) -> Problem<'_> {
        Problem::new(&self.model, &self.gpu, &self.cluster, &self.job, self.world)
    }

    /// The first row of a default search (ranked with tie groups), if any
    /// layout is valid.
    pub fn best(&self) -> Option<Layout> {
        let pr = self.problem();
        let r = search::search(
            &pr,
            &Space {
                keep_all: true,
                ..Space::default()
            },
        );
        meshplan::report::ranked_rows(&pr, r.pool(), Default::default(), 1)
            .first()
            .map(|row| row.layout.clone())
    }

    /// Render `l` (panics with the refusal if it is refused).
    pub fn bundle(&self, l: &Layout) -> Bundle {
        let pr = self.problem();
        match generate::generate(&pr, &Policy::default(), l) {
            Ok(b) => b,
            Err(e) => panic!("{}: {e}", self.model.name),
        }
    }
}

/// Run the `meshplan` binary with `args`; its exit status and output.
pub fn meshplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_meshplan"))
        .args(args)
        .output()
        .expect("the meshplan binary runs")
}

/// A fresh hardware directory (for `--hardware-dir`) holding the shipped
/// profile `rel` (e.g. `gpus/a100-80g.toml`) as `edit` changes it.
#[allow(dead_code)]
pub fn hardware_dir_with(tag: &str, rel: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = temp_dir(tag);
    let to = dir.join(rel);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hardware")
        .join(rel);
    std::fs::write(&to, edit(std::fs::read_to_string(from).unwrap())).unwrap();
    dir
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "meshplan-test-{}-{}-{}",
        tag,
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// What the stub `torchrun` saw.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Arguments before the script path (torchrun's own).
    pub torchrun: Vec<String>,
    /// The script path.
    pub script: String,
    /// Arguments after it (Megatron's).
    pub megatron: Vec<String>,
    /// `CUDA_DEVICE_MAX_CONNECTIONS` in the launch environment, `None` if unset.
    pub max_connections: Option<String>,
}

/// Write an executable stub named `name` into `dir`.
pub fn stub(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("stub");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// Every parameter the launch script requires, with dummy values.
pub const PARAMS: [(&str, &str); 7] = [
    ("MEGATRON_DIR", "/opt/Megatron-LM"),
    ("DATA_PATH", "0.7 /data/a_text 0.3 /data/b_text"),
    ("TOKENIZER_MODEL", "meta-llama/Meta-Llama-3-70B"),
    ("CHECKPOINT_DIR", "/ckpt/run1"),
    ("LOG_DIR", "/logs/run1"),
    ("TRAIN_ITERS", "1000"),
    ("LR", "1.5e-4"),
];

/// A command that runs `script` under bash with a stub `torchrun` on PATH,
/// every parameter set, and `extra` environment. Returns the command and the
/// file the stub writes.
pub fn launch_command(dir: &Path, script: &Path, extra: &[(&str, &str)]) -> (Command, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let out = dir.join("torchrun.out");
    stub(
        &bin,
        "torchrun",
        &format!(
            "printf '%s\\n' \"${{CUDA_DEVICE_MAX_CONNECTIONS-<unset>}}\" > '{0}'\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{0}'; done",
            out.display()
        ),
    );
    let mut cmd = Command::new("bash");
    cmd.arg(script);
    cmd.env_clear();
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()));
    // A value the FSDP script must remove, and TP/CP scripts overwrite.
    cmd.env("CUDA_DEVICE_MAX_CONNECTIONS", "8");
    for (k, v) in PARAMS.iter().chain(extra) {
        cmd.env(k, v);
    }
    (cmd, out)
}

/// Parse what the stub recorded.
pub fn read_launch(out: &Path) -> Launch {
    let text = std::fs::read_to_string(out).expect("torchrun stub was not called");
    let mut lines = text.lines().map(str::to_string);
    let env = lines.next().expect("env line");
    let args: Vec<String> = lines.collect();
    let pos = args
        .iter()
        .position(|a| a.ends_with("pretrain_gpt.py"))
        .expect("pretrain_gpt.py on the command line");
    Launch {
        torchrun: args[..pos].to_vec(),
        script: args[pos].clone(),
        megatron: args[pos + 1..].to_vec(),
        max_connections: if env == "<unset>" { None } else { Some(env) },
    }
}

/// Run the bundle's Megatron script as node `node_rank` and return what
/// torchrun received.
pub fn launch(bundle: &Bundle, node_rank: u64) -> Launch {
    let dir = temp_dir("launch");
    let report = generate::write(&bundle.files, &dir).expect("write");
    let script = report
        .files
        .iter()
        .map(|f| &f.path)
        .find(|p| p.ends_with(generate::MEGATRON_SCRIPT))
        .unwrap()
        .clone();
    let rank = node_rank.to_string();
    let (mut cmd, out) = launch_command(
        &dir,
        &script,
        &[("NODE_RANK", &rank), ("MASTER_ADDR", "node001")],
    );
    let res = cmd.output().expect("bash runs");
    assert!(
        res.status.success(),
        "launch script failed: {}\n{}",
        String::from_utf8_lossy(&res.stderr),
        bundle.file(generate::MEGATRON_SCRIPT).unwrap()
    );
    let l = read_launch(&out);
    let _ = std::fs::remove_dir_all(&dir);
    l
}

/// The shipped catalog.
pub fn catalog() -> Catalog {
    Catalog::shipped().expect("shipped catalog loads")
}

/// Owned inputs of one planning problem.
pub struct Fixture {
    pub model: Model,
    pub gpu: Gpu,
    pub cluster: Cluster,
    pub job: Job,
    pub world: u64,
}

impl Fixture {
    /// Model and cluster from the catalog with the model's default job.
    pub fn new(model: &str, cluster: &str) -> Fixture {
        let c = catalog();
        let model = c.model(model).unwrap().clone();
        let cluster = c.cluster(cluster).unwrap().clone();
        let gpu = c.gpu(&cluster.gpu).unwrap().clone();
        let job = Job::new(model.defaults.global_batch, model.defaults.seq_len);
        let world = cluster.total_gpus();
        Fixture {
            model,
            gpu,
            cluster,
            job,
            world,
        }
    }

    pub fn problem(&self) -> meshplan::cost::Problem<'_> {
        meshplan::cost::Problem::new(&self.model, &self.gpu, &self.cluster, &self.job, self.world)
    }
}

/// A model card from TOML text (for synthetic shapes).
pub fn model_from(text: &str) -> Model {
    Model::from_toml(text, Path::new("test.toml")).unwrap()
}

/// A GPT-style card with the given heads / kv heads and layers.
pub fn gpt_card(layers: u32, hidden: u64, heads: u32, kv_heads: u32) -> Model {
    model_from(&format!(
        r#"
name = "synthetic"
source = "test"
known_params = 1e9
[architecture]
layers = {layers}
hidden = {hidden}
heads = {heads}
kv_heads = {kv_heads}
head_dim = 128
ffn = {ffn}
gated_mlp = false
vocab = 51200
tied_embeddings = true
norm = "layernorm"
position_embedding = "learned"
max_seq = 8192
linear_bias = true
dropout = true
[defaults]
seq_len = 2048
global_batch = 512
"#,
        ffn = 4 * hidden
    ))
}

/// NAR21-T2-03's layout: GPT-3 175B on 1,536 A100s, D = 1,536, one
/// micro-batch, full recompute, ZeRO-3, DeepSpeed's recipe.
#[allow(dead_code)]
pub const NAR21_T2_03: &[&str] = &[
    "explain",
    "--model",
    "gpt3-175b",
    "--cluster",
    "dgx-a100-3072",
    "--gpus",
    "1536",
    "--global-batch",
    "1536",
    "--seq-len",
    "2048",
    "--recipe",
    "deepspeed",
    "--dp",
    "1536",
    "--tp",
    "1",
    "--pp",
    "1",
    "--mbs",
    "1",
    "--recompute",
    "full",
    "--zero",
    "3",
];
