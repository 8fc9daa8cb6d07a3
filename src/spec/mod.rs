//! Inputs: model cards, hardware profiles, the training job, the catalog
//! that loads them, and Hugging Face `config.json` files read as model
//! cards ([`hf`]).

pub mod catalog;
pub mod hardware;
pub mod hf;
pub mod job;
pub mod model;

pub use catalog::Catalog;
pub use hardware::{Cluster, GIB, Gpu};
pub use job::{
    AttnKernel, CpImpl, DeepSpeedZero3, EngineMemory, Fp8Kernels, Fp8Recipe, Job, LossBuffers,
    Precision, Recipe, RecipeName, SelectivePolicy,
};
pub use model::Model;
