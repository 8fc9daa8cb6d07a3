//! Inputs: model cards, hardware profiles, the training job, and the catalog
//! that loads them.

pub mod catalog;
pub mod hardware;
pub mod hf;
pub mod job;
pub mod model;

pub use catalog::Catalog;
pub use hardware::{Cluster, GIB, Gpu};
pub use job::{Job, Recipe, RecipeName};
pub use model::Model;
