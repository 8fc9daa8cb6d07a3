//! GPU and cluster profiles, read from `hardware/gpus/*.toml` and
//! `hardware/clusters/*.toml`.
//!
//! Every number in a shipped profile names its source in the file (vendor
//! datasheet, or the calibration that produced it). Efficiencies live here,
//! not in code, so `meshplan calibrate` can write an overlay that replaces them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

/// Achieved fractions of peak for the compute model (`[efficiency]` of a GPU).
///
/// Kernel time is a roofline (Williams et al. 2009): `max(flops / (peak ·
/// gemm), bytes / (hbm_bandwidth · memory))` plus a fixed launch overhead, so
/// small, thin GEMMs (the shards of a high TP degree) fall below peak on their
/// own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeEfficiency {
    /// Fraction of dense peak that a large bf16 GEMM sustains (0–1].
    pub gemm: f64,
    /// Fraction of the dense FP8 peak that a large FP8 (or MXFP8) GEMM
    /// sustains (0–1]; absent on GPUs without FP8 tensor cores. Planning an
    /// FP8 job on a profile without it is an error, never a bf16 price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_fp8: Option<f64>,
    /// Fraction of the dense FP4 peak that a large NVFP4 GEMM sustains
    /// (0–1]; absent on GPUs without FP4 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_fp4: Option<f64>,
    /// Fraction of dense peak that fused (flash) attention sustains (0–1].
    pub attention: f64,
    /// Fraction of HBM bandwidth that element-wise kernels sustain (0–1].
    pub memory: f64,
    /// Fixed cost of one kernel launch, microseconds.
    pub kernel_overhead_us: f64,
    /// Factor (0–1] on the attention rate when attention is unfused (cuBLAS
    /// batched GEMMs for QKᵀ and A·V) and the head dimension is not a
    /// multiple of 8 elements (16 bytes of fp16/bf16), the alignment that
    /// cuBLAS's tensor-core kernels need (NVIDIA, *Matrix Multiplication
    /// Background User's Guide*, §2.2 "Tensor Core Requirements").
    /// Dimensionless; see the GPU profile for how it was obtained.
    pub misaligned_attention: f64,
    /// Tokens per local expert at which a grouped expert GEMM runs at half
    /// the rate of one dense GEMM of the same rows (`m½` of
    /// [`crate::cost::moe::grouped_gemm_efficiency`]), tokens; ≥ 0 (0 =
    /// grouped GEMMs as fast as dense ones). See the GPU profile for how it
    /// was obtained.
    pub grouped_gemm_half_tokens: f64,
    /// Contraction length at which a bf16/fp16 GEMM runs at half its
    /// asymptotic rate (`k½` of [`crate::cost::compute::contraction_factor`]),
    /// elements; ≥ 0 (0 = every GEMM at `gemm` whatever its depth). Each
    /// output tile pays a fixed prologue and epilogue (its output written to
    /// HBM) beside a main loop that grows with the contraction, so shallow
    /// GEMMs sustain less of the peak. See the GPU profile for its source.
    #[serde(default)]
    pub gemm_half_k: f64,
    /// `k½` of FP8 and MXFP8 GEMMs, elements; ≥ 0 (0 = no curve). The main
    /// loop runs twice as fast as bf16's against the same epilogue, so the
    /// half-saturation depth is larger.
    #[serde(default)]
    pub gemm_fp8_half_k: f64,
    /// `k½` of NVFP4 GEMMs, elements; ≥ 0 (0 = no curve).
    #[serde(default)]
    pub gemm_fp4_half_k: f64,
}

/// Compute slowdown while a collective overlaps compute (`[contention]` of
/// a GPU): the share σ of the overlapped communication time that the
/// compute it overlaps loses, because NCCL's kernels take SMs and HBM
/// bandwidth from the GEMMs (see `src/cost/contention.rs`). Dimensionless,
/// in [0, 1); the profile says how each value was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contention {
    /// σ while a collective inside the scale-up domain (NVLink) overlaps
    /// compute.
    pub intra: f64,
    /// σ while a collective across scale-up domains (the NICs) overlaps
    /// compute.
    pub inter: f64,
}

/// A GPU profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Catalog name, e.g. `a100-80g`.
    pub name: String,
    /// Marketing name, e.g. `NVIDIA A100-SXM4-80GB`.
    pub display: String,
    /// Where the numbers come from.
    pub source: String,
    /// Device memory, GiB (2^30 bytes), as the driver reports it.
    pub memory_gib: f64,
    /// Memory not available to tensors: CUDA context, NCCL buffers and
    /// allocator fragmentation, GiB.
    pub reserve_gib: f64,
    /// HBM bandwidth, GB/s (10^9 bytes per second).
    pub hbm_bandwidth_gbs: f64,
    /// Dense (non-sparse) bf16/fp16 tensor-core peak, TFLOP/s.
    pub peak_tflops_bf16: f64,
    /// Dense fp8 tensor-core peak, TFLOP/s (0 if the GPU has no fp8).
    #[serde(default)]
    pub peak_tflops_fp8: f64,
    /// Dense FP4 (NVFP4) tensor-core peak, TFLOP/s (0 if the GPU has none).
    #[serde(default)]
    pub peak_tflops_fp4: f64,
    /// The tensor cores read per-block scale factors (MXFP8 with E8M0 scales
    /// per 32 elements, NVFP4 with E4M3 scales per 16): Blackwell (sm_100)
    /// and newer ([ref:ocp-mx]). Hopper runs only per-tensor-scaled FP8 in
    /// its tensor cores.
    #[serde(default)]
    pub block_scaled_mma: bool,
    /// Bandwidth of the GPU's link to host memory, one direction, GB/s
    /// (PCIe or NVLink-C2C); 0 = not stated (activation offload cannot be
    /// priced).
    #[serde(default)]
    pub host_link_gbs: f64,
    /// The GPU whose measured runs judge plans on this profile (the trust
    /// column, the error band and the MFU envelope, `src/trust.rs`), e.g.
    /// `a100` for a renamed or re-tuned copy of `a100-80g`; absent, the
    /// name up to its first `-` (`a100-80g` → `a100`, `my-gpu` → `my`, of
    /// which no run is measured).
    #[serde(default)]
    pub measured_as: Option<String>,
    /// Achieved-fraction parameters.
    pub efficiency: ComputeEfficiency,
    /// Compute slowdown under overlapped communication.
    pub contention: Contention,
}

/// Links inside a node (`[intra_node]`): NVLink/NVSwitch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntraNode {
    /// Bandwidth per GPU per direction, GB/s.
    pub bandwidth_gbs: f64,
    /// Latency of one ring step on NVLink (and of one NVLink message of an
    /// all-to-all or p2p send), microseconds; the shipped profiles take
    /// NCCL's Ring/Simple NVLink figure, 3.4 ([`crate::cost::comm`]).
    pub latency_us: f64,
}

/// Links between nodes (`[inter_node]`): the NICs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterNode {
    /// Bandwidth of one NIC per direction, Gb/s (10^9 bits per second).
    pub nic_bandwidth_gbps: f64,
    /// NICs per node.
    pub nics_per_node: u32,
    /// Latency of one ring step that crosses nodes (and of one cross-node
    /// message of an all-to-all or p2p send), microseconds; the shipped
    /// profiles take NCCL's Ring/Simple NET figure, 14
    /// ([`crate::cost::comm`]).
    pub latency_us: f64,
}

/// Achieved fractions of link bandwidth for NCCL collectives (`[collective]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveEfficiency {
    /// Bus-bandwidth fraction reached inside a node (0–1].
    pub intra: f64,
    /// Bus-bandwidth fraction reached across nodes (0–1].
    pub inter: f64,
}

/// A scale-out tier above the first switch level (`[[tiers]]`, innermost
/// first): `gpus` GPUs under one switch group of this tier (a pod, a
/// building), and the oversubscription of its uplinks, so a collective
/// whose group spans two such groups runs its cross-node phase at
/// `1/oversubscription` of the NIC bandwidth (e.g. Llama 3's 24K-GPU
/// cluster: pods of 3,072 GPUs at full bisection, 1:7 above them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// What the switch group is called (`pod`, `building`), for messages.
    pub name: String,
    /// GPUs under one switch group of this tier: a multiple of the
    /// scale-up domain and of `gpus_per_node`, larger than the tier below.
    pub gpus: u32,
    /// Uplink oversubscription above this tier (1 = full bisection; 7 for
    /// 1:7), ≥ 1.
    pub oversubscription: f64,
    /// The switch group is rail-optimized (first tier only): NIC k of every
    /// host sits on leaf k, so only traffic between GPUs of one local rank
    /// (one rail) stays on a leaf; traffic between rails climbs to the
    /// switches above this tier and pays its `oversubscription` although
    /// it never leaves the group (NVIDIA DGX SuperPOD reference
    /// architecture's rail-optimized compute fabric). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rails: bool,
    /// Extra latency of a message (or ring step) that climbs above this
    /// tier (the switch hops up and down), microseconds, added to
    /// `inter_node.latency_us` and to the tiers' below; default 0 (NCCL's
    /// model has no per-tier term, and no shipped profile sets one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// What the uplinks above this tier lead to (`spine`, `core`), for
    /// `explain`; default `<name> uplinks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<String>,
}

impl Tier {
    /// The name of the level above this tier: [`Tier::above`] or
    /// `<name> uplinks`.
    pub fn above_name(&self) -> String {
        self.above
            .clone()
            .unwrap_or_else(|| format!("{} uplinks", self.name))
    }
}

/// Most `[[tiers]]` a cluster profile may list.
pub const MAX_TIERS: usize = 3;

/// Largest uplink oversubscription of one tier a profile may state (1:1000;
/// real fabrics stay below 1:10).
pub const MAX_OVERSUBSCRIPTION: f64 = 1000.0;

/// Storage and failure figures for checkpoint planning (`[reliability]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reliability {
    /// Aggregate checkpoint write bandwidth of the cluster's storage, GB/s.
    pub storage_bandwidth_gbs: f64,
    /// Mean time between failures of one node, hours.
    pub node_mtbf_hours: f64,
}

/// A cluster profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Catalog name, e.g. `dgx64`.
    pub name: String,
    /// Description.
    pub display: String,
    /// Where the numbers come from.
    pub source: String,
    /// GPU profile name.
    pub gpu: String,
    /// Nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// GPUs that share the fast scale-up fabric (NVLink domain); equals
    /// `gpus_per_node` on DGX/HGX machines, 72 on an NVL72 rack.
    pub scale_up_domain: u32,
    /// Hosts a job takes from each scale-up domain (Slurm topology/block's
    /// `--segment`), when fewer than the domain holds: the job's ranks fill
    /// `segment · gpus_per_node` GPUs of one domain before the next, and
    /// the job gets that many GPUs per domain (16 trays = 64 GPUs of an
    /// NVL72 rack, NVIDIA's advice for large MoE jobs). Absent: every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<u32>,
    /// Fast links.
    pub intra_node: IntraNode,
    /// NICs.
    pub inter_node: InterNode,
    /// Collective efficiencies.
    pub collective: CollectiveEfficiency,
    /// Storage and failures.
    pub reliability: Reliability,
    /// Scale-out tiers above the first switch level, innermost first; none
    /// for a cluster whose network has full bisection bandwidth.
    #[serde(default)]
    pub tiers: Vec<Tier>,
}

pub(crate) fn check_fraction(file: &Path, field: &str, v: f64) -> Result<(), InputError> {
    InputError::unless(v.is_finite() && v > 0.0 && v <= 1.0, file, field, || {
        format!("must be a fraction in (0, 1], found {v}")
    })
}

fn check_share(file: &Path, field: &str, v: f64) -> Result<(), InputError> {
    InputError::unless(
        v.is_finite() && (0.0..1.0).contains(&v),
        file,
        field,
        || format!("must be a share in [0, 1), found {v}"),
    )
}

/// `v` beyond [`crate::limits::MAX_PROFILE_VALUE`] is refused naming the
/// field and the limit.
fn check_bounded(file: &Path, field: &str, v: f64) -> Result<(), InputError> {
    let limit = crate::limits::MAX_PROFILE_VALUE;
    // NaN passes here and is refused by the caller's own check.
    InputError::unless(v.is_nan() || v <= limit, file, field, || {
        format!("{v:e} exceeds meshplan's limit of {limit:e} (see src/limits.rs)")
    })
}

fn check_positive(file: &Path, field: &str, v: f64) -> Result<(), InputError> {
    check_bounded(file, field, v)?;
    InputError::unless(v.is_finite() && v > 0.0, file, field, || {
        format!("must be a positive number, found {v}")
    })
}

fn check_non_negative(file: &Path, field: &str, v: f64) -> Result<(), InputError> {
    check_bounded(file, field, v)?;
    InputError::unless(v.is_finite() && v >= 0.0, file, field, || {
        format!("must be zero or positive, found {v}")
    })
}

/// One value check of a profile: the field's name, its value, and the
/// rule it must meet ([`check_fraction`], [`check_positive`], …).
type Check = fn(&Path, &str, f64) -> Result<(), InputError>;

/// Run `checks` in order; the first failure is the error.
fn check_all<const N: usize>(
    file: &Path,
    checks: [(&str, f64, Check); N],
) -> Result<(), InputError> {
    checks
        .into_iter()
        .try_for_each(|(field, v, check)| check(file, field, v))
}

impl Gpu {
    /// Parse and check a GPU profile.
    ///
    /// # Errors
    /// [`InputError::Syntax`] for TOML errors and missing fields,
    /// [`InputError::Field`] for non-positive sizes, fractions outside (0, 1],
    /// or a reserve that leaves no usable memory.
    pub fn from_toml(text: &str, file: &Path) -> Result<Gpu, InputError> {
        InputError::parse_checked(text, file, Gpu::check)
    }

    /// The GPU whose measured runs judge plans on this profile
    /// ([`Gpu::measured_as`], else the name up to its first `-`).
    pub fn measured_class(&self) -> String {
        match &self.measured_as {
            Some(c) => c.clone(),
            None => crate::trust::gpu_class(&self.name),
        }
    }

    /// Check every value (also used for calibrated overlays).
    ///
    /// # Errors
    /// [`InputError::Field`] naming the first bad field.
    pub fn check(&self, file: &Path) -> Result<(), InputError> {
        if let Some(c) = &self.measured_as {
            InputError::unless(
                !c.is_empty() && !c.contains(char::is_whitespace),
                file,
                "measured_as",
                || format!("{c:?} is not a GPU name (e.g. \"a100\", \"h100\")"),
            )?;
        }
        check_positive(file, "memory_gib", self.memory_gib)?;
        check_non_negative(file, "reserve_gib", self.reserve_gib)?;
        if self.reserve_gib >= self.memory_gib {
            return Err(InputError::field(
                file,
                "reserve_gib",
                format!(
                    "reserve {} GiB leaves nothing of {} GiB",
                    self.reserve_gib, self.memory_gib
                ),
            ));
        }
        check_positive(file, "hbm_bandwidth_gbs", self.hbm_bandwidth_gbs)?;
        check_positive(file, "peak_tflops_bf16", self.peak_tflops_bf16)?;
        check_non_negative(file, "peak_tflops_fp8", self.peak_tflops_fp8)?;
        check_non_negative(file, "peak_tflops_fp4", self.peak_tflops_fp4)?;
        check_fraction(file, "efficiency.gemm", self.efficiency.gemm)?;
        for (field, v) in [
            ("efficiency.gemm_fp8", self.efficiency.gemm_fp8),
            ("efficiency.gemm_fp4", self.efficiency.gemm_fp4),
        ] {
            if let Some(v) = v {
                check_fraction(file, field, v)?;
            }
        }
        if self.efficiency.gemm_fp8.is_some() && self.peak_tflops_fp8 == 0.0 {
            return Err(InputError::field(
                file,
                "efficiency.gemm_fp8",
                "is set but peak_tflops_fp8 is 0 (a GPU without FP8 tensor cores has no FP8 GEMM efficiency)",
            ));
        }
        if self.efficiency.gemm_fp4.is_some() && self.peak_tflops_fp4 == 0.0 {
            return Err(InputError::field(
                file,
                "efficiency.gemm_fp4",
                "is set but peak_tflops_fp4 is 0 (a GPU without FP4 tensor cores has no FP4 GEMM efficiency)",
            ));
        }
        let e = &self.efficiency;
        let checks: [(&str, f64, Check); 10] = [
            ("efficiency.attention", e.attention, check_fraction),
            ("efficiency.memory", e.memory, check_fraction),
            (
                "efficiency.kernel_overhead_us",
                e.kernel_overhead_us,
                check_non_negative,
            ),
            (
                "efficiency.misaligned_attention",
                e.misaligned_attention,
                check_fraction,
            ),
            (
                "efficiency.grouped_gemm_half_tokens",
                e.grouped_gemm_half_tokens,
                check_non_negative,
            ),
            ("efficiency.gemm_half_k", e.gemm_half_k, check_non_negative),
            (
                "efficiency.gemm_fp8_half_k",
                e.gemm_fp8_half_k,
                check_non_negative,
            ),
            (
                "efficiency.gemm_fp4_half_k",
                e.gemm_fp4_half_k,
                check_non_negative,
            ),
            ("contention.intra", self.contention.intra, check_share),
            ("contention.inter", self.contention.inter, check_share),
        ];
        check_all(file, checks)
    }

    /// Memory available to tensors, bytes: `(memory_gib − reserve_gib)·2^30`.
    pub fn usable_bytes(&self) -> f64 {
        (self.memory_gib - self.reserve_gib) * GIB
    }
}

impl Cluster {
    /// Parse and check a cluster profile.
    ///
    /// # Errors
    /// [`InputError::Syntax`] for TOML errors and missing fields,
    /// [`InputError::Field`] for zero counts, non-positive bandwidths and
    /// fractions outside (0, 1].
    pub fn from_toml(text: &str, file: &Path) -> Result<Cluster, InputError> {
        InputError::parse_checked(text, file, Cluster::check)
    }

    /// Check every value.
    ///
    /// # Errors
    /// [`InputError::Field`] naming the first bad field.
    pub fn check(&self, file: &Path) -> Result<(), InputError> {
        for (field, v) in [
            ("nodes", self.nodes),
            ("gpus_per_node", self.gpus_per_node),
            ("scale_up_domain", self.scale_up_domain),
            ("inter_node.nics_per_node", self.inter_node.nics_per_node),
        ] {
            if v == 0 {
                return Err(InputError::field(file, field, "must be positive, found 0"));
            }
        }
        let total = self.nodes as u64 * self.gpus_per_node as u64;
        if total > crate::limits::MAX_GPUS {
            return Err(InputError::field(
                file,
                "nodes",
                format!(
                    "{} nodes × {} GPUs = {total} GPUs exceed meshplan's limit of {} (see src/limits.rs)",
                    self.nodes,
                    self.gpus_per_node,
                    crate::limits::MAX_GPUS
                ),
            ));
        }
        if self.scale_up_domain as u64 > crate::limits::MAX_GPUS {
            return Err(InputError::field(
                file,
                "scale_up_domain",
                format!(
                    "{} exceeds meshplan's limit of {} (see src/limits.rs)",
                    self.scale_up_domain,
                    crate::limits::MAX_GPUS
                ),
            ));
        }
        if self.scale_up_domain % self.gpus_per_node != 0
            && self.gpus_per_node % self.scale_up_domain != 0
        {
            return Err(InputError::field(
                file,
                "scale_up_domain",
                format!(
                    "{} neither divides nor is a multiple of gpus_per_node {}",
                    self.scale_up_domain, self.gpus_per_node
                ),
            ));
        }
        if self.scale_up_domain as u64 > total {
            return Err(InputError::field(
                file,
                "scale_up_domain",
                format!(
                    "{} GPUs per scale-up domain exceed the cluster's {total} GPUs ({} nodes × {})",
                    self.scale_up_domain, self.nodes, self.gpus_per_node
                ),
            ));
        }
        if let Some(seg) = self.segment {
            let hosts = self.scale_up_domain / self.gpus_per_node;
            if seg == 0 || self.scale_up_domain % self.gpus_per_node != 0 || seg > hosts {
                return Err(InputError::field(
                    file,
                    "segment",
                    format!(
                        "{seg} hosts per scale-up domain: must be between 1 and the {hosts} hosts of gpus_per_node {} in a {}-GPU domain",
                        self.gpus_per_node, self.scale_up_domain
                    ),
                ));
            }
            if self.nodes % hosts != 0 {
                return Err(InputError::field(
                    file,
                    "segment",
                    format!(
                        "is set but the {} nodes do not fill whole {}-host scale-up domains",
                        self.nodes, hosts
                    ),
                ));
            }
        }
        self.check_tiers(file)?;
        let (intra, inter, rel) = (&self.intra_node, &self.inter_node, &self.reliability);
        let checks: [(&str, f64, Check); 8] = [
            (
                "intra_node.bandwidth_gbs",
                intra.bandwidth_gbs,
                check_positive,
            ),
            (
                "intra_node.latency_us",
                intra.latency_us,
                check_non_negative,
            ),
            (
                "inter_node.nic_bandwidth_gbps",
                inter.nic_bandwidth_gbps,
                check_positive,
            ),
            (
                "inter_node.latency_us",
                inter.latency_us,
                check_non_negative,
            ),
            ("collective.intra", self.collective.intra, check_fraction),
            ("collective.inter", self.collective.inter, check_fraction),
            (
                "reliability.storage_bandwidth_gbs",
                rel.storage_bandwidth_gbs,
                check_positive,
            ),
            (
                "reliability.node_mtbf_hours",
                rel.node_mtbf_hours,
                check_positive,
            ),
        ];
        check_all(file, checks)
    }

    /// GPUs in the whole cluster.
    pub fn total_gpus(&self) -> u64 {
        self.nodes as u64 * self.gpus_per_node as u64
    }

    /// GPUs of one fast (NVLink) domain as a job's ranks fill it: the
    /// scale-up domain, or `segment · gpus_per_node` of it when the profile
    /// names a [`Cluster::segment`]; the tier boundary for collectives.
    pub fn fast_domain(&self) -> u32 {
        match self.segment {
            Some(s) => (s * self.gpus_per_node).min(self.scale_up_domain),
            None => self.scale_up_domain,
        }
    }

    /// GPUs a job can use: every GPU, or with a [`Cluster::segment`] the
    /// segment's GPUs of each scale-up domain.
    pub fn job_gpus(&self) -> u64 {
        match self.segment {
            Some(_) => {
                let hosts = (self.scale_up_domain / self.gpus_per_node.max(1)).max(1) as u64;
                (self.nodes as u64 / hosts) * self.fast_domain() as u64
            }
            None => self.total_gpus(),
        }
    }

    /// GPUs per switch group of each `[[tiers]]` entry counted in job
    /// ranks, innermost first: the physical size scaled by the job's share
    /// of a domain ([`Cluster::fast_domain`] / `scale_up_domain`).
    pub fn job_tier_sizes(&self) -> impl Iterator<Item = u32> + '_ {
        let (job, phys) = (
            self.fast_domain() as u64,
            self.scale_up_domain.max(1) as u64,
        );
        let seg = self.segment.is_some();
        self.tiers.iter().map(move |t| {
            if seg {
                (t.gpus as u64 / phys * job) as u32
            } else {
                t.gpus
            }
        })
    }

    /// `[[tiers]]`: at most [`MAX_TIERS`], each a multiple of the scale-up
    /// domain and of `gpus_per_node`, larger than the one below, with an
    /// oversubscription ≥ 1.
    fn check_tiers(&self, file: &Path) -> Result<(), InputError> {
        if self.tiers.len() > MAX_TIERS {
            return Err(InputError::field(
                file,
                "tiers",
                format!(
                    "{} tiers listed; meshplan prices at most {MAX_TIERS}",
                    self.tiers.len()
                ),
            ));
        }
        let mut below = self.scale_up_domain.max(self.gpus_per_node);
        for (i, t) in self.tiers.iter().enumerate() {
            let field = |f: &str| format!("tiers[{i}].{f}");
            let unit = self.scale_up_domain.max(self.gpus_per_node);
            if t.gpus == 0 || t.gpus % unit != 0 || t.gpus <= below {
                return Err(InputError::field(
                    file,
                    &field("gpus"),
                    format!(
                        "{} GPUs per {}: must be a multiple of {unit} (the scale-up domain and the node) larger than the {below} GPUs of the level below",
                        t.gpus, t.name
                    ),
                ));
            }
            if t.name.trim().is_empty() {
                return Err(InputError::field(
                    file,
                    &field("name"),
                    "is empty; name the switch group (pod, building)".to_string(),
                ));
            }
            if t.gpus as u64 > crate::limits::MAX_GPUS {
                return Err(InputError::field(
                    file,
                    &field("gpus"),
                    format!(
                        "{} exceeds meshplan's limit of {} GPUs (see src/limits.rs)",
                        t.gpus,
                        crate::limits::MAX_GPUS
                    ),
                ));
            }
            if !(t.oversubscription.is_finite()
                && t.oversubscription >= 1.0
                && t.oversubscription <= MAX_OVERSUBSCRIPTION)
            {
                return Err(InputError::field(
                    file,
                    &field("oversubscription"),
                    format!(
                        "must be between 1 (full bisection) and {MAX_OVERSUBSCRIPTION}, found {}",
                        t.oversubscription
                    ),
                ));
            }
            if t.gpus % below != 0 {
                return Err(InputError::field(
                    file,
                    &field("gpus"),
                    format!(
                        "{} GPUs per {} is not a multiple of the {below} GPUs of the level below",
                        t.gpus, t.name
                    ),
                ));
            }
            if let Some(v) = t.latency_us {
                check_non_negative(file, &field("latency_us"), v)?;
            }
            if t.rails && i > 0 {
                return Err(InputError::field(
                    file,
                    &field("rails"),
                    "rails are a property of the first scale-out level (tiers[0]) only".to_string(),
                ));
            }
            below = t.gpus;
        }
        Ok(())
    }

    /// GPUs per switch group of each `[[tiers]]` entry, innermost first.
    pub fn tier_sizes(&self) -> impl Iterator<Item = u32> + '_ {
        self.tiers.iter().map(|t| t.gpus)
    }

    /// Fast-link bandwidth per GPU per direction, bytes/s.
    pub fn intra_bytes_per_s(&self) -> f64 {
        self.intra_node.bandwidth_gbs * 1e9
    }

    /// NIC bandwidth available to one GPU per direction, bytes/s: the node's
    /// NIC bandwidth shared evenly by its GPUs.
    pub fn nic_bytes_per_s_per_gpu(&self) -> f64 {
        self.inter_node.nic_bandwidth_gbps * 1e9 / 8.0 * self.inter_node.nics_per_node as f64
            / self.gpus_per_node as f64
    }
}

/// Bytes in one GiB (2^30).
pub const GIB: f64 = 1073741824.0;
