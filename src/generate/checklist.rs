//! The verification checklist printed with the launch files: the checks to
//! run on a layout before the long run (update equivalence, memory
//! accounting, communication accounting, numerics, restart correctness,
//! effective throughput), each line filled with this plan's predicted
//! numbers. The numbers are computed here; `templates/checklist.md.j2` holds
//! the words.

use serde::Serialize;

use super::plan_file::{Plan, SpanInfo};
use crate::cost::{Term, TimePart};

/// The tiny run for the update-equivalence check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TinyRun {
    /// Layers of the cut-down model: one per model chunk, p·v.
    pub layers: u32,
    /// Smallest global batch this mesh accepts: D·b·m with m = 1, or m = p
    /// with interleaving (Megatron needs m ≥ p and m % p = 0 then) [P15, P16].
    pub global_batch: u64,
    /// Its micro-batches per replica.
    pub micro_batches: u64,
    /// Relative spacing of bf16 numbers near 1, 2⁻⁸ (8 significant bits).
    pub bf16_epsilon: f64,
    /// The cut model's weights, gradients and optimizer state, unsharded,
    /// GiB ([`crate::generate::plan_file::tiny_model_states_gib`]).
    pub states_gib: f64,
    /// GPUs the reference needs just to hold them, ⌈states / usable⌉: 1
    /// when they fit on one GPU (a plain reference), else the smallest
    /// ZeRO-3 group that can (activations come on top).
    pub reference_gpus: u64,
}

/// One pipeline stage's memory line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageLine {
    /// Pipeline rank.
    pub pp_rank: u32,
    /// A global rank of that stage to measure on.
    pub rank: u64,
    /// Its node.
    pub node: u64,
    /// Predicted peak, GiB.
    pub peak_gib: f64,
    /// Largest component.
    pub dominant: String,
    /// Its size, GiB.
    pub dominant_gib: f64,
    /// Weights + gradients + optimizer, GiB (present from the first step).
    pub states_gib: f64,
    /// Activations + logits + temporaries, GiB.
    pub transient_gib: f64,
}

/// One process group's communication line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupLine {
    /// Group name in the plan file.
    pub name: String,
    /// What runs over it.
    pub traffic: String,
    /// Ranks per group.
    pub size: u32,
    /// Groups.
    pub groups: u64,
    /// Nodes one group spans.
    pub nodes: u64,
    /// `NVLink` or `network`.
    pub link: String,
    /// Predicted time per step of its collectives on the slowest stage,
    /// overlapped or not, seconds.
    pub total_s: f64,
    /// Predicted exposed time per step on the slowest stage, seconds.
    pub exposed_s: f64,
    /// Its share of the step, percent.
    pub share_pct: f64,
}

/// The checklist's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checklist {
    /// Update-equivalence run.
    pub tiny: TinyRun,
    /// Memory per pipeline stage.
    pub stages: Vec<StageLine>,
    /// Communication per group with more than one rank.
    pub groups: Vec<GroupLine>,
    /// Twice the micro-batch, for the activation-scaling check.
    pub double_micro_batch: u32,
    /// Predicted step time in milliseconds (Megatron logs "elapsed time per
    /// iteration (ms)").
    pub step_ms: f64,
    /// MFU, percent.
    pub mfu_pct: f64,
    /// HFU, percent.
    pub hfu_pct: f64,
    /// How far the prediction is checked: its band on measured runs, or
    /// what no run covers, and the envelope when the plan is above it
    /// ([`crate::trust::Trust::sentence`]).
    pub trust: String,
    /// Bubble, percent of the step.
    pub bubble_pct: f64,
    /// Checkpoint size, GB (10⁹ bytes).
    pub checkpoint_gb: f64,
    /// Per rank, GB.
    pub checkpoint_per_rank_gb: f64,
    /// Checkpoint interval, hours.
    pub interval_h: f64,
    /// Job MTBF, hours.
    pub job_mtbf_h: f64,
    /// Checkpoint and failure overhead, percent.
    pub overhead_pct: f64,
    /// Share of the wall clock the Megatron script's evaluation takes (one
    /// batch every checkpoint interval, [`super::megatron::eval_batch_s`]),
    /// percent: not in the goodput.
    pub eval_pct: f64,
}

fn line(name: &str, traffic: &str, span: &SpanInfo, time: Term, step: f64) -> GroupLine {
    let exposed = time.exposed;
    GroupLine {
        name: name.to_string(),
        traffic: traffic.to_string(),
        size: span.size,
        groups: span.groups,
        nodes: span.nodes,
        link: if span.fast_domains > 1 {
            "network"
        } else {
            "NVLink"
        }
        .to_string(),
        total_s: time.total,
        exposed_s: exposed,
        share_pct: if step > 0.0 {
            100.0 * exposed / step
        } else {
            0.0
        },
    }
}

/// One group's line: name in the plan file, whether the layout uses it
/// (more than one rank), what runs over it, where it sits, the time parts
/// it pays.
type Traffic<'a> = (
    &'a str,
    bool,
    &'a str,
    Option<&'a SpanInfo>,
    &'static [TimePart],
);

/// The checklist of `plan`.
pub fn checklist(plan: &Plan) -> Checklist {
    let mesh = &plan.mesh;
    let pr = &plan.predicted;
    let t = &pr.time_s;
    let pl = &pr.placement;
    let m_tiny = if mesh.vpp > 1 { mesh.pp as u64 } else { 1 };
    let stages = pr
        .stages
        .iter()
        .map(|s| {
            let rank = plan.stage_rank(s.pp_rank);
            let (dominant, dominant_gib) = s.memory_gib.dominant();
            let g = &s.memory_gib;
            StageLine {
                pp_rank: s.pp_rank,
                rank,
                node: rank / plan.hardware.processes_per_node.max(1),
                peak_gib: g.total(),
                dominant: dominant.label().to_string(),
                dominant_gib,
                states_gib: g.model_states(),
                transient_gib: g.total() - g.model_states(),
            }
        })
        .collect();
    let tp_what = if mesh.sp {
        "all-gather + reduce-scatter of activations, 2 each per layer forward and backward (SP)"
    } else {
        "all-reduce of activations, 2 per layer forward and 2 backward"
    };
    let cp_what = match mesh.cp_comm {
        crate::layout::CpComm::Ring => "K/V ring exchange in every attention, overlapped with it",
        crate::layout::CpComm::AllGather => {
            "K/V all-gather before every attention and dK/dV reduce-scatter after its backward"
        }
    };
    let boundary = plan.job.deepspeed_dp
        && crate::cost::data_parallel::deepspeed_boundary_all_reduce(
            plan.sharding.zero,
            plan.job.recipe,
        );
    let dp_what = match plan.sharding.zero {
        0 if boundary => {
            "gradient all-reduce once per step, after the last backward (DeepSpeed's allreduce_gradients, not overlapped)"
        }
        1 if boundary => {
            "gradient all-reduce after the last backward and parameter all-gather in the optimizer step, once per step (DeepSpeed's BF16_Optimizer, not overlapped)"
        }
        0 => "gradient all-reduce once per step",
        1 => {
            "gradient reduce-scatter and parameter all-gather once per step (distributed optimizer)"
        }
        2 => "gradient reduce-scatter every micro-batch, parameter all-gather once per step",
        _ => {
            "parameter all-gather in forward and backward, gradient reduce-scatter, every micro-batch"
        }
    };
    // Each communicating group, when it has more than one rank: its name in
    // the plan file, its traffic, where it sits and the time parts it pays.
    let candidates: [Traffic; 5] = [
        (
            "tp",
            mesh.tp > 1,
            tp_what,
            Some(&pl.tp),
            &[TimePart::TpComm],
        ),
        (
            "cp",
            mesh.cp > 1,
            cp_what,
            Some(&pl.cp),
            &[TimePart::CpComm],
        ),
        (
            "ep",
            mesh.ep > 1,
            "token dispatch and combine all-to-all, forward and backward",
            pl.ep.as_ref(),
            &[TimePart::EpComm],
        ),
        (
            "pp",
            mesh.pp > 1,
            "activation send/receive at stage boundaries, per micro-batch and chunk",
            Some(&pl.pp),
            &[TimePart::PpComm],
        ),
        (
            "dp_cp",
            mesh.dp * mesh.cp > 1,
            dp_what,
            Some(&pl.dp_cp),
            &[TimePart::DpGrad, TimePart::ParamGather],
        ),
    ];
    let groups = candidates
        .into_iter()
        .filter_map(|(name, used, what, span, parts)| {
            let mut time = Term::default();
            for p in parts {
                time.add_scaled(t[*p], 1.0);
            }
            span.filter(|_| used)
                .map(|span| line(name, what, span, time, t.step))
        })
        .collect();
    let ck = &pr.checkpoint;
    Checklist {
        tiny: TinyRun {
            layers: plan.pipeline.chunks,
            global_batch: mesh.dp as u64 * plan.job.micro_batch as u64 * m_tiny,
            micro_batches: m_tiny,
            bf16_epsilon: 2f64.powi(-8),
            states_gib: pr.tiny_model_states_gib,
            reference_gpus: (pr.tiny_model_states_gib / plan.hardware.usable_gib)
                .ceil()
                .max(1.0) as u64,
        },
        stages,
        groups,
        double_micro_batch: plan.job.micro_batch * 2,
        step_ms: pr.step_s * 1e3,
        mfu_pct: pr.mfu * 100.0,
        hfu_pct: pr.hfu * 100.0,
        trust: pr.trust.sentence(),
        bubble_pct: pr.bubble_fraction * 100.0,
        checkpoint_gb: ck.bytes / 1e9,
        checkpoint_per_rank_gb: ck.bytes_per_rank / 1e9,
        interval_h: ck.interval_steps as f64 * pr.step_s / 3600.0,
        job_mtbf_h: ck.job_mtbf_s / 3600.0,
        overhead_pct: ck.overhead_fraction * 100.0,
        eval_pct: {
            let e = super::megatron::eval_batch_s(&pr.time_s, plan.sharding.zero);
            100.0 * e / (e + ck.interval_steps.max(1) as f64 * pr.step_s)
        },
    }
}
