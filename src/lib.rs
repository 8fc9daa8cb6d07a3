//! meshplan: an analytical planner for the parallel layout of large-language-model
//! training on GPU clusters.
//!
//! The crate is split by idea: [`spec`] reads the inputs (model cards,
//! hardware profiles, the job), [`layout`] describes one parallel layout and
//! its rank placement, [`cost`] is the pure cost model (memory, compute,
//! communication, schedule), [`rules`] rejects layouts with reasons,
//! [`search`] enumerates and ranks layouts, and [`render`] prints results.

pub mod error;
pub mod spec;
pub mod cost;
pub mod layout;
pub mod rules;
pub mod search;
pub mod cli;
pub mod render;
pub mod report;
pub mod validate;
pub mod calibrate;
