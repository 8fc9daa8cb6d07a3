//! meshplan: an analytical planner for the parallel layout of large-language-model
//! training on GPU clusters.
//!
//! The crate is split by idea: [`spec`] reads the inputs (model cards,
//! hardware profiles, the job), [`layout`] describes one parallel layout and
//! its rank placement, [`cost`] is the pure cost model (memory, compute,
//! communication, schedule), [`rules`] rejects layouts with reasons,
//! [`search`] enumerates and ranks layouts, and [`render`] prints results.
//! [`explain`] finds the smallest fixes of rejected layouts and answers
//! why-not questions, [`checkpoint`] sizes checkpoints, their interval and
//! the time to train, [`plot`] draws SVG pictures, and [`generate`] writes
//! launch files (Megatron-LM, SLURM, an engine-neutral plan file).
//! [`validate`] compares predictions with published measurements and
//! [`calibrate`] fits a profile's efficiencies to a user's own runs.
//! [`split`] chooses uneven pipeline stage layer splits (an ILP, with an
//! exact dynamic program as its test oracle).

pub mod calibrate;
pub mod checkpoint;
pub mod cli;
pub mod cost;
pub mod error;
pub mod explain;
pub mod generate;
pub mod layout;
pub mod plot;
pub mod render;
pub mod report;
pub mod rules;
pub mod search;
pub mod spec;
pub mod split;
pub mod validate;
