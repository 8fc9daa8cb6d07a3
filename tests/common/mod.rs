//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use meshplan::layout::{CpComm, Layout, RankOrder, Recompute};
use meshplan::spec::{Catalog, Cluster, Gpu, Job, Model};

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

/// A dense layout with defaults for the rest.
pub fn layout(dp: u32, tp: u32, pp: u32, cp: u32) -> Layout {
    Layout {
        dp,
        tp,
        pp,
        cp,
        ep: 1,
        etp: 1,
        vpp: 1,
        micro_batch: 1,
        recompute: Recompute::None,
        zero: 1,
        sp: tp > 1,
        order: RankOrder::TpCpEpDpPp,
        split: None,
        cp_comm: CpComm::Ring,
    }
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
