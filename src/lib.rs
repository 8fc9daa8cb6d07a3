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
//! [`validate`] compares predictions with published measurements,
//! [`trust`] tells each plan how well its regime is validated by them, and
//! [`calibrate`] fits a profile's efficiencies to a user's own runs.
//!
//! ```
//! use meshplan::cost::Problem;
//! use meshplan::search::{search, Space};
//! use meshplan::spec::{Catalog, Job};
//!
//! let catalog = Catalog::shipped().unwrap();
//! let model = catalog.model("70b").unwrap();
//! // 80·(2·8192² + 2·8192·1024 + 3·8192·28672 + 2·8192) + 2·128256·8192
//! assert_eq!(model.total_params(), 70_553_706_496.0);
//! let cluster = catalog.cluster("dgx64").unwrap();
//! let gpu = catalog.gpu(&cluster.gpu).unwrap();
//! let job = Job::new(2048, 8192);
//! let problem = Problem::new(model, gpu, cluster, &job, 64);
//! let best = &search(&problem, &Space::default()).top[0];
//! // Every ranked layout uses all 64 GPUs and the whole global batch.
//! assert_eq!(best.layout.world(), 64);
//! assert_eq!(best.layout.dp as u64 * best.eval.micro_batches * best.layout.micro_batch as u64, 2048);
//! assert!(best.eval.peak_bytes <= best.eval.usable_bytes);
//! ```
//! [`split`] chooses uneven pipeline stage layer splits (an ILP, with an
//! exact dynamic program as its test oracle).

#![warn(missing_docs)]

pub mod calibrate;
pub mod calibrate_network;
pub mod checkpoint;
pub mod cli;
pub mod cost;
pub mod error;
pub mod explain;
pub mod generate;
pub mod gpu_count;
pub mod layout;
pub mod limits;
pub mod megatron_log;
pub mod names;
pub mod nccl_tests;
pub mod plot;
pub mod ranking;
pub mod render;
pub mod report;
pub mod rules;
pub mod search;
pub mod spec;
pub mod split;
pub mod sweep;
pub mod trust;
pub mod validate;
