//! The one breakdown every output reads: where a step's time and a rank's
//! memory go, part by part.
//!
//! A part is an enum variant ([`TimePart`], [`MemoryPart`], and the
//! "of which" shares [`MemoryDetail`]) with a JSON key, a label, a unit and
//! the [`Source`] that prices it. Breakdowns are arrays indexed by the enum,
//! so the table, CSV, JSON, plan file, checklist, why-not gap and plots all
//! iterate over [`TimePart::ALL`] / [`MemoryPart::ALL`] instead of naming
//! fields. Adding a term is one variant here plus the cost module that
//! fills it.
//!
//! Every time part carries two numbers ([`Term`]): `total`, what the work
//! takes on its link or unit, and `exposed`, the part of it on the step's
//! critical path; `total − exposed` is what overlap hid. The exposed parts
//! add up to the step.

use std::ops::{Index, IndexMut};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// Where a part is priced: the function in this repository and the key of
/// the reference in `docs/references.md` its formula comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Source {
    /// File and functions, e.g. `src/cost/comm.rs: all_reduce`; several
    /// files are separated by `; `.
    pub function: &'static str,
    /// Key of the entry in `docs/references.md`.
    pub reference: &'static str,
}

/// Work that takes `total` seconds, of which `exposed` is on the critical
/// path of the step (the rest hides under other work).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Term {
    /// Seconds on the critical path.
    pub exposed: f64,
    /// Seconds the work takes on its link or unit, overlapped or not.
    pub total: f64,
}

impl Term {
    /// Work that nothing overlaps: exposed = total = `s`.
    pub const fn serial(s: f64) -> Term {
        Term {
            exposed: s,
            total: s,
        }
    }

    /// Work of `total` seconds of which `exposed` shows.
    pub const fn overlapped(exposed: f64, total: f64) -> Term {
        Term { exposed, total }
    }

    /// Seconds hidden by overlap, `total − exposed`.
    pub fn hidden(&self) -> f64 {
        self.total - self.exposed
    }

    /// Both numbers times `k`.
    pub fn scaled(self, k: f64) -> Term {
        Term {
            exposed: self.exposed * k,
            total: self.total * k,
        }
    }

    /// Add `k` times `other` to both numbers.
    pub fn add_scaled(&mut self, other: Term, k: f64) {
        self.exposed += k * other.exposed;
        self.total += k * other.total;
    }
}

/// `Index` and `IndexMut` of `$ty` by the part enum `$key`: the entry
/// `$key::index()` of the array at `self.$path`.
macro_rules! index_by_part {
    ($ty:ty, $key:ty => $out:ty, $($path:tt).+) => {
        impl Index<$key> for $ty {
            type Output = $out;
            fn index(&self, p: $key) -> &$out {
                &self.$($path).+[p.index()]
            }
        }

        impl IndexMut<$key> for $ty {
            fn index_mut(&mut self, p: $key) -> &mut $out {
                &mut self.$($path).+[p.index()]
            }
        }
    };
}

/// Defines a part enum with its `ALL` list and per-variant metadata, so a
/// part's key, label and source sit on one line next to its name.
macro_rules! parts {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => ($key:literal, $label:literal, $function:literal, $reference:literal) ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every part, in report order.
            pub const ALL: [$name; [$($name::$variant),+].len()] = [$($name::$variant),+];
            /// Number of parts.
            pub const COUNT: usize = Self::ALL.len();

            /// JSON and CSV key.
            pub const fn key(self) -> &'static str {
                match self { $($name::$variant => $key),+ }
            }

            /// Label in tables.
            pub const fn label(self) -> &'static str {
                match self { $($name::$variant => $label),+ }
            }

            /// Where it is priced.
            pub const fn source(self) -> Source {
                match self {
                    $($name::$variant => Source { function: $function, reference: $reference }),+
                }
            }

            /// Position in [`Self::ALL`].
            pub const fn index(self) -> usize {
                self as usize
            }

            /// The part with JSON key `key`.
            pub fn from_key(key: &str) -> Option<$name> {
                Self::ALL.into_iter().find(|p| p.key() == key)
            }
        }
    };
}

parts! {
    /// A part of the step time, seconds.
    TimePart {
        /// Forward and backward compute of the slowest stage (GEMMs, attention
        /// core, element-wise kernels, with CP the merging of partial
        /// attention results, and on the last stage the multi-token-prediction
        /// layers), micro-batches × per-micro-batch time.
        Compute => ("compute", "compute (forward + backward)",
            "src/cost/compute.rs: layer_forward, layer_backward, linear_pass_times; src/cost/precision.rs: gemm_time, rowwise_table_pass_times; src/cost/cp.rs: split_overhead; src/cost/mtp.rs: elementwise_bytes_per_token", "narayanan-2021"),
        /// Forward recomputed inside backward on the slowest stage.
        Recompute => ("recompute", "recompute",
            "src/cost/compute.rs: layer_recompute, op_sac_recompute", "korthikanti-2022"),
        /// Casts of the low-precision linears' operands to FP8/FP4 on the
        /// slowest stage: reads, amax passes, transposed copies and scale
        /// factors on HBM (zero in bf16; zero for the dense linears of
        /// torchao's row-wise FP8 on Hopper, whose measured time in the
        /// compute part holds their casts, `precision::rowwise_table_pass_times`).
        LowPrecisionCast => ("low_precision_cast", "FP8/FP4 casts (cast, transpose, amax)",
            "src/cost/precision.rs: linear_cast_bytes, grouped_linear_cast, cast_bytes, weight_casts", "te-fp8-primer"),
        /// Idle time of the slowest stage while the pipeline fills and drains.
        Bubble => ("bubble", "pipeline bubble",
            "src/cost/schedule.rs: pipeline_time_of", "narayanan-2021"),
        /// Tensor-parallel (and expert tensor-parallel) collectives.
        TpComm => ("tp_comm", "TP communication",
            "src/cost/layer.rs: tp_comm_per_layer, tp_comm_exposed", "shoeybi-2019"),
        /// Context-parallel K/V exchange.
        CpComm => ("cp_comm", "CP communication",
            "src/cost/cp.rs: exchange_time", "liu-2023"),
        /// Expert-parallel token dispatch and combine.
        EpComm => ("ep_comm", "EP all-to-all (dispatch+combine)",
            "src/cost/moe.rs: ep_comm_time", "lepikhin-2020"),
        /// Pipeline point-to-point sends at stage boundaries.
        PpComm => ("pp_comm", "PP point-to-point",
            "src/cost/layer.rs: p2p_per_micro_batch; src/cost/schedule.rs: p2p_exposed", "megatron-schedules"),
        /// Data-parallel gradient all-reduce or reduce-scatter.
        DpGrad => ("dp_grad", "DP gradient reduction",
            "src/cost/data_parallel.rs: gradient_reduction, exposed_after_overlap", "megatron-ddp"),
        /// Parameter all-gather of the distributed optimizer or ZeRO/FSDP.
        ParamGather => ("param_gather", "ZeRO/FSDP parameter all-gather",
            "src/cost/data_parallel.rs: parameter_gather, exposed_after_overlap", "rajbhandari-2020"),
        /// Compute slowed down by the collectives it overlaps: σ times the
        /// communication that overlap hid, for every overlapped term.
        Contention => ("contention", "overlap contention (compute slowed by NCCL)",
            "src/cost/contention.rs: contention, overlapped_step; src/cost/fsdp.rs: timeline", "isaev-2023"),
        /// Activation offload to host memory: the transfers of the
        /// offloaded layers' saved activations that the next layer's
        /// forward (or backward) does not hide.
        ActivationOffload => ("activation_offload", "activation offload (host link)",
            "src/cost/memory.rs: offload_transfer_time", "megatron-cpu-offload"),
        /// Optimizer step over the rank's shard.
        Optimizer => ("optimizer", "optimizer step",
            "src/cost/data_parallel.rs: optimizer_step_time", "kingma-2015"),
    }
}

parts! {
    /// A part of a rank's memory at its peak, bytes. The parts add up to the
    /// allocated peak; the allocator reserve is outside them (the usable
    /// memory is the capacity minus the reserve).
    MemoryPart {
        /// Working weights (without the bf16 copy that narrow parameters
        /// replace below ZeRO-3).
        Weights => ("weights", "weights",
            "src/cost/memory.rs: model_states; src/cost/precision.rs: narrow_param_weight_saving", "rajbhandari-2020"),
        /// Gradients as the optimizer keeps them (with the step-only ones
        /// when the optimizer step is the peak).
        Gradients => ("grads", "gradients",
            "src/cost/memory.rs: model_states, peak_at_optimizer_step", "rajbhandari-2020"),
        /// Optimizer state (fp32 master weights, Adam moments).
        Optimizer => ("optimizer", "optimizer",
            "src/cost/memory.rs: model_states", "rajbhandari-2020"),
        /// Narrow (FP8/FP4) copies of the low-precision linears' weights and
        /// their transposes kept between forward and backward, and the
        /// scaling state (zero in bf16).
        LowPrecisionWeights => ("low_precision_weights", "FP8/FP4 weight copies",
            "src/cost/precision.rs: weight_copy_bytes, scaling_state_bytes", "te-fp8-primer"),
        /// Saved activations of the micro-batches in flight.
        Activations => ("activations", "activations",
            "src/cost/memory.rs: layer_activation_bytes, in_flight", "korthikanti-2022"),
        /// Logits and loss buffers on the last stage (one set per loss: the
        /// main model's and each multi-token-prediction layer's).
        Logits => ("logits", "logits",
            "src/cost/memory.rs: logits_bytes; src/cost/layer.rs: layer_costs", "megatron-cross-entropy"),
        /// Temporaries and buffers at the peak: one layer's backward working
        /// set, SP all-gather, CP K/V, EP dispatch and unfused score buffers.
        Temporaries => ("temporaries", "temporaries",
            "src/cost/mod.rs: temporary_buffers", "korthikanti-2022"),
    }
}

parts! {
    /// A share of one [`MemoryPart`], already counted inside it, bytes.
    MemoryDetail {
        /// Routed-expert weights, inside weights.
        ExpertWeights => ("expert_weights", "expert weights",
            "src/cost/memory.rs: model_states", "rajbhandari-2020"),
        /// Routed-expert gradients, inside gradients.
        ExpertGradients => ("expert_grads", "expert gradients",
            "src/cost/memory.rs: model_states", "rajbhandari-2020"),
        /// Routed-expert optimizer state, inside optimizer.
        ExpertOptimizer => ("expert_optimizer", "expert optimizer",
            "src/cost/memory.rs: model_states", "rajbhandari-2020"),
        /// Saved activations of the micro-batches in flight beyond the one
        /// being computed, inside activations.
        InFlightActivations => ("in_flight_activations", "micro-batches in flight beyond the first",
            "src/cost/memory.rs: in_flight", "narayanan-2021"),
        /// Saved routed-token activations, inside activations.
        RoutedActivations => ("routed_activations", "routed-token activations",
            "src/cost/moe.rs: routed_activation_bytes", "lepikhin-2020"),
        /// All-to-all dispatch buffers of one MoE layer, inside temporaries.
        DispatchBuffers => ("dispatch_buffers", "EP dispatch buffers",
            "src/cost/moe.rs: dispatch_buffer_bytes", "lepikhin-2020"),
        /// Context-parallel K/V exchange buffers, inside temporaries.
        CpBuffers => ("cp_buffers", "CP K/V buffers",
            "src/cost/cp.rs: buffer_bytes", "liu-2023"),
        /// Scales and amax histories of the low-precision tensors, inside
        /// the FP8/FP4 weight copies; saved in checkpoints.
        ScalingState => ("scaling_state", "scaling state (scales, amax history)",
            "src/cost/precision.rs: scaling_state_bytes", "te-fp8-primer"),
        /// Gradients held unsharded at the peak under ZeRO-3/FSDP, inside
        /// gradients: a unit's before its reduce-scatter, FSDP2's root unit
        /// until the end of backward, or every gradient when the engine
        /// accumulates micro-batches without reducing.
        UnshardedGradients => ("unsharded_grads", "unsharded gradients (ZeRO-3/FSDP)",
            "src/cost/mod.rs: zero3_transients", "zhao-2023"),
    }
}

impl MemoryDetail {
    /// The part this share is inside.
    pub const fn parent(self) -> MemoryPart {
        match self {
            MemoryDetail::ExpertWeights => MemoryPart::Weights,
            MemoryDetail::ExpertGradients => MemoryPart::Gradients,
            MemoryDetail::ExpertOptimizer => MemoryPart::Optimizer,
            MemoryDetail::InFlightActivations | MemoryDetail::RoutedActivations => {
                MemoryPart::Activations
            }
            MemoryDetail::DispatchBuffers | MemoryDetail::CpBuffers => MemoryPart::Temporaries,
            MemoryDetail::ScalingState => MemoryPart::LowPrecisionWeights,
            MemoryDetail::UnshardedGradients => MemoryPart::Gradients,
        }
    }
}

impl MemoryPart {
    /// Persistent model states (weights, gradients, optimizer), as opposed
    /// to what lives only while a step runs.
    pub const fn is_model_state(self) -> bool {
        matches!(
            self,
            MemoryPart::Weights | MemoryPart::Gradients | MemoryPart::Optimizer
        )
    }
}

/// Per-part time terms, indexed by [`TimePart`]. Used per item and per
/// micro-batch inside the cost model, and per step in [`TimeBreakdown`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PartTimes([Term; TimePart::COUNT]);

impl PartTimes {
    /// Sum of the exposed seconds.
    pub fn exposed(&self) -> f64 {
        self.0.iter().map(|t| t.exposed).sum()
    }

    /// Add `k` times `other`, part by part.
    pub fn add_scaled(&mut self, other: &PartTimes, k: f64) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            a.add_scaled(*b, k);
        }
    }

    /// Every part with its term, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (TimePart, Term)> + '_ {
        TimePart::ALL.into_iter().zip(self.0.iter().copied())
    }
}

impl Serialize for PartTimes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(TimePart::COUNT))?;
        for (p, t) in self.iter() {
            m.serialize_entry(p.key(), &t)?;
        }
        m.end()
    }
}

index_by_part!(PartTimes, TimePart => Term, 0);

/// Where one step's time goes, seconds: every [`TimePart`] of the slowest
/// stage and the step-level terms. The exposed parts add up to `step`.
///
/// JSON: `{"compute": {"exposed": s, "total": s}, …, "step": s}`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimeBreakdown {
    /// The parts.
    pub parts: PartTimes,
    /// Whole step, seconds.
    pub step: f64,
}

impl TimeBreakdown {
    /// Exposed seconds of part `p`.
    pub fn exposed(&self, p: TimePart) -> f64 {
        self.parts[p].exposed
    }

    /// Every part with its term, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (TimePart, Term)> + '_ {
        self.parts.iter()
    }
}

index_by_part!(TimeBreakdown, TimePart => Term, parts.0);

impl Serialize for TimeBreakdown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(TimePart::COUNT + 1))?;
        for (p, t) in self.iter() {
            m.serialize_entry(p.key(), &t)?;
        }
        m.serialize_entry("step", &self.step)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for TimeBreakdown {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TimeBreakdown, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TimeBreakdown;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a time breakdown: one {exposed, total} object per part and `step`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TimeBreakdown, A::Error> {
                let mut t = TimeBreakdown::default();
                let mut seen = [false; TimePart::COUNT];
                let mut step = None;
                while let Some(k) = a.next_key::<String>()? {
                    if k == "step" {
                        step = Some(a.next_value()?);
                    } else if let Some(p) = TimePart::from_key(&k) {
                        t[p] = a.next_value()?;
                        seen[p.index()] = true;
                    } else {
                        return Err(de::Error::unknown_field(&k, &["step", "compute", "…"]));
                    }
                }
                if let Some(p) = TimePart::ALL.into_iter().find(|p| !seen[p.index()]) {
                    return Err(de::Error::missing_field(p.key()));
                }
                t.step = step.ok_or_else(|| de::Error::missing_field("step"))?;
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

/// A rank's memory at its peak: every [`MemoryPart`] and the
/// [`MemoryDetail`] shares inside them, in one unit (bytes in the cost
/// model; [`MemoryBreakdown::in_gib`] for reports).
///
/// JSON: `{"weights": x, "grads": x, …, "total": x, "of_which":
/// {"expert_weights": x, …}}`; `total` is the sum of the parts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryBreakdown {
    parts: [f64; MemoryPart::COUNT],
    details: [f64; MemoryDetail::COUNT],
}

impl MemoryBreakdown {
    /// Allocated bytes at the peak: the sum of the parts.
    pub fn total(&self) -> f64 {
        self.parts.iter().sum()
    }

    /// Weights, gradients and optimizer state.
    pub fn model_states(&self) -> f64 {
        self.iter()
            .filter(|(p, _)| p.is_model_state())
            .map(|(_, b)| b)
            .sum()
    }

    /// The largest part and its size (the first of equals).
    pub fn dominant(&self) -> (MemoryPart, f64) {
        self.iter()
            .fold((MemoryPart::Weights, f64::MIN), |best, x| {
                if x.1 > best.1 { x } else { best }
            })
    }

    /// Every part with its size, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (MemoryPart, f64)> + '_ {
        MemoryPart::ALL.into_iter().zip(self.parts.iter().copied())
    }

    /// Every share with its size, in report order.
    pub fn details(&self) -> impl Iterator<Item = (MemoryDetail, f64)> + '_ {
        MemoryDetail::ALL
            .into_iter()
            .zip(self.details.iter().copied())
    }

    /// The same breakdown in GiB (every number divided by 2³⁰).
    pub fn in_gib(&self) -> MemoryBreakdown {
        let g = crate::spec::GIB;
        MemoryBreakdown {
            parts: self.parts.map(|x| x / g),
            details: self.details.map(|x| x / g),
        }
    }
}

index_by_part!(MemoryBreakdown, MemoryPart => f64, parts);

index_by_part!(MemoryBreakdown, MemoryDetail => f64, details);

/// The "of which" shares of a [`MemoryBreakdown`] as a JSON object.
struct Details<'a>(&'a MemoryBreakdown);

impl Serialize for Details<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(MemoryDetail::COUNT))?;
        for (d, b) in self.0.details() {
            m.serialize_entry(d.key(), &b)?;
        }
        m.end()
    }
}

impl Serialize for MemoryBreakdown {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(MemoryPart::COUNT + 2))?;
        for (p, b) in self.iter() {
            m.serialize_entry(p.key(), &b)?;
        }
        m.serialize_entry("total", &self.total())?;
        m.serialize_entry("of_which", &Details(self))?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for MemoryBreakdown {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MemoryBreakdown, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Value {
            Number(f64),
            Shares(std::collections::BTreeMap<String, f64>),
        }
        let map = std::collections::BTreeMap::<String, Value>::deserialize(d)?;
        let mut out = MemoryBreakdown::default();
        for p in MemoryPart::ALL {
            match map.get(p.key()) {
                Some(Value::Number(x)) => out[p] = *x,
                _ => return Err(de::Error::missing_field(p.key())),
            }
        }
        if let Some(Value::Shares(shares)) = map.get("of_which") {
            for (k, x) in shares {
                let d = MemoryDetail::from_key(k)
                    .ok_or_else(|| de::Error::unknown_field(k, &["expert_weights", "…"]))?;
                out[d] = *x;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_round_trip() {
        for (i, p) in TimePart::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
            assert_eq!(TimePart::from_key(p.key()), Some(p));
        }
        for p in MemoryPart::ALL {
            assert_eq!(MemoryPart::from_key(p.key()), Some(p));
        }
        for d in MemoryDetail::ALL {
            assert_eq!(MemoryDetail::from_key(d.key()), Some(d));
        }
    }

    #[test]
    fn time_json_round_trip() {
        let mut t = TimeBreakdown::default();
        t[TimePart::TpComm] = Term::overlapped(1.5, 4.0);
        t[TimePart::Compute] = Term::serial(10.0);
        t.step = 11.5;
        let text = serde_json::to_string(&t).unwrap();
        assert!(text.starts_with(r#"{"compute":{"exposed":10.0,"total":10.0},"#));
        let back: TimeBreakdown = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t);
        assert_eq!(back[TimePart::TpComm].hidden(), 2.5);
        // A part missing is an error naming it.
        let err = serde_json::from_str::<TimeBreakdown>(r#"{"step": 1.0}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `compute`"), "{err}");
    }

    #[test]
    fn memory_json_round_trip_and_total() {
        let mut m = MemoryBreakdown::default();
        m[MemoryPart::Weights] = 3.0;
        m[MemoryPart::Activations] = 5.0;
        m[MemoryDetail::InFlightActivations] = 2.0;
        assert_eq!(m.total(), 8.0);
        assert_eq!(m.dominant(), (MemoryPart::Activations, 5.0));
        let v = serde_json::to_value(m).unwrap();
        assert_eq!(v["total"], 8.0);
        assert_eq!(v["of_which"]["in_flight_activations"], 2.0);
        let back: MemoryBreakdown = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }
}
