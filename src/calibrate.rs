//! `meshplan calibrate`: fit a GPU's efficiency parameters (and the
//! cluster's collective efficiencies) to a user's measured runs, and the
//! profile overlay that `search --profile`, `explain --profile` and
//! `validate --profile` apply on top of the shipped profiles.
//!
//! # Procedure
//!
//! Parameters θ: the GPU's `efficiency.gemm`, `efficiency.attention`,
//! `efficiency.memory`, `efficiency.kernel_overhead_us` and the cluster's
//! `collective.intra`, `collective.inter`. They are fitted in log space,
//! φ = ln θ, by Levenberg–Marquardt (Marquardt 1963; Nocedal & Wright,
//! *Numerical Optimization*, §10.3) on the residuals
//!
//! - `ln(t_pred(θ) / t_meas)` for every measured row (step time, measured or
//!   derived from TFLOP/s through the row's FLOP convention), and
//! - `√λ · (φ_i − φ0_i)` for every parameter (a ridge prior towards the
//!   shipped value, λ = [`PRIOR_WEIGHT`]), so that a parameter the runs say
//!   nothing about (e.g. `collective.inter` when every run fits in one node)
//!   stays where it was, and three or four runs suffice.
//!
//! Rows with low-precision linears (FP8, MXFP8, NVFP4) are priced with the
//! profile's `gemm_fp8` / `gemm_fp4`, which the fit keeps fixed (an overlay
//! may still replace `gemm_fp8`); they inform the efficiencies they share
//! with bf16 runs.
//!
//! The Jacobian is taken by forward differences (step 1e-4 in φ). Fractions
//! are kept in [0.02, 1], the kernel overhead in [0.1, 200] µs. The fit stops
//! when the step changes φ by less than 1e-6 or after 100 iterations.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cost;
use crate::error::InputError;
use crate::spec::hardware::check_fraction;
use crate::spec::{Catalog, Cluster, Gpu};
use crate::validate::{self, MeasuredRow};

/// Optional replacements of a GPU's `[efficiency]` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfficiencyOverlay {
    /// Replaces `efficiency.gemm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm: Option<f64>,
    /// Replaces `efficiency.gemm_fp8` (FP8 and MXFP8 GEMMs); not fitted by
    /// `calibrate`, which prices bf16 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_fp8: Option<f64>,
    /// Replaces `efficiency.attention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<f64>,
    /// Replaces `efficiency.memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<f64>,
    /// Replaces `efficiency.kernel_overhead_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_overhead_us: Option<f64>,
}

/// Optional replacements of a cluster's `[collective]` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveOverlay {
    /// Replaces `collective.intra`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra: Option<f64>,
    /// Replaces `collective.inter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter: Option<f64>,
}

/// Optional replacements of a cluster's link latencies (written by
/// `meshplan calibrate-network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinksOverlay {
    /// Replaces `intra_node.latency_us` (one NVLink ring step), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_latency_us: Option<f64>,
    /// Replaces `inter_node.latency_us` (one inter-node ring step), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inter_latency_us: Option<f64>,
}

impl LinksOverlay {
    fn is_empty(&self) -> bool {
        self.intra_latency_us.is_none() && self.inter_latency_us.is_none()
    }
}

/// What the fit saw (written for the reader; ignored when applied).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationInfo {
    /// Rows used.
    #[serde(default)]
    pub rows: Vec<String>,
    /// Step-time error per row before the fit, `pred/meas − 1`.
    #[serde(default)]
    pub error_before: Vec<f64>,
    /// Step-time error per row after the fit.
    #[serde(default)]
    pub error_after: Vec<f64>,
    /// Iterations of Levenberg–Marquardt.
    #[serde(default)]
    pub iterations: u32,
}

/// A profile overlay: efficiency values that replace the shipped ones of
/// one GPU (and of the cluster it is used in).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// GPU profile name the overlay applies to (e.g. `a100-80g`).
    pub gpu: String,
    /// Cluster profile the overlay was fitted on (`calibrate-network`);
    /// when set, the overlay applies to that cluster only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Where the values come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// GPU efficiencies.
    #[serde(default)]
    pub efficiency: EfficiencyOverlay,
    /// Collective efficiencies of the cluster.
    #[serde(default)]
    pub collective: CollectiveOverlay,
    /// Link latencies of the cluster.
    #[serde(default, skip_serializing_if = "LinksOverlay::is_empty")]
    pub links: LinksOverlay,
    /// Fit record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationInfo>,
}

/// [`check_fraction`] of a value the overlay may leave out.
fn check_frac(file: &Path, field: &str, v: Option<f64>) -> Result<(), InputError> {
    v.map_or(Ok(()), |x| check_fraction(file, field, x))
}

impl Overlay {
    /// Parse and check an overlay file.
    ///
    /// # Errors
    /// [`InputError::Syntax`] for TOML errors, unknown keys or a missing
    /// `gpu`; [`InputError::Field`] for a fraction outside (0, 1] or a
    /// negative kernel overhead.
    pub fn from_toml(text: &str, file: &Path) -> Result<Overlay, InputError> {
        InputError::parse_checked(text, file, Overlay::check)
    }

    /// Check every value.
    ///
    /// # Errors
    /// [`InputError::Field`] naming the first bad field.
    pub fn check(&self, file: &Path) -> Result<(), InputError> {
        if self.gpu.trim().is_empty() {
            return Err(InputError::field(
                file,
                "gpu",
                "is empty; name the GPU profile, e.g. `a100-80g`",
            ));
        }
        check_frac(file, "efficiency.gemm", self.efficiency.gemm)?;
        check_frac(file, "efficiency.gemm_fp8", self.efficiency.gemm_fp8)?;
        check_frac(file, "efficiency.attention", self.efficiency.attention)?;
        check_frac(file, "efficiency.memory", self.efficiency.memory)?;
        if let Some(x) = self.efficiency.kernel_overhead_us
            && !(x.is_finite() && x >= 0.0)
        {
            return Err(InputError::field(
                file,
                "efficiency.kernel_overhead_us",
                format!("must be zero or positive, found {x}"),
            ));
        }
        check_frac(file, "collective.intra", self.collective.intra)?;
        check_frac(file, "collective.inter", self.collective.inter)?;
        for (field, v) in [
            ("links.intra_latency_us", self.links.intra_latency_us),
            ("links.inter_latency_us", self.links.inter_latency_us),
        ] {
            if let Some(x) = v
                && !(x.is_finite() && (0.0..=crate::limits::MAX_PROFILE_VALUE).contains(&x))
            {
                return Err(InputError::field(
                    file,
                    field,
                    format!("must be zero or a positive number of µs, found {x}"),
                ));
            }
        }
        Ok(())
    }

    /// Replace `gpu`'s efficiencies with the overlay's.
    pub fn apply_gpu(&self, gpu: &mut Gpu) {
        let e = &mut gpu.efficiency;
        let o = &self.efficiency;
        if let Some(x) = o.gemm {
            e.gemm = x;
        }
        if let Some(x) = o.gemm_fp8 {
            e.gemm_fp8 = Some(x);
        }
        if let Some(x) = o.attention {
            e.attention = x;
        }
        if let Some(x) = o.memory {
            e.memory = x;
        }
        if let Some(x) = o.kernel_overhead_us {
            e.kernel_overhead_us = x;
        }
    }

    /// Replace `cluster`'s collective efficiencies with the overlay's.
    pub fn apply_cluster(&self, cluster: &mut Cluster) {
        if let Some(x) = self.collective.intra {
            cluster.collective.intra = x;
        }
        if let Some(x) = self.collective.inter {
            cluster.collective.inter = x;
        }
        if let Some(x) = self.links.intra_latency_us {
            cluster.intra_node.latency_us = x;
        }
        if let Some(x) = self.links.inter_latency_us {
            cluster.inter_node.latency_us = x;
        }
    }

    /// Check that the overlay is for `gpu` (the GPU of the chosen cluster).
    ///
    /// # Errors
    /// [`InputError::Field`] on field `gpu` when the names differ.
    pub fn check_gpu(&self, file: &Path, gpu: &str, cluster: &str) -> Result<(), InputError> {
        if let Some(c) = &self.cluster
            && !c.eq_ignore_ascii_case(cluster)
        {
            return Err(InputError::field(
                file,
                "cluster",
                format!("the overlay was fitted on cluster `{c}`, not `{cluster}`"),
            ));
        }
        if !self.gpu.eq_ignore_ascii_case(gpu) {
            return Err(InputError::field(
                file,
                "gpu",
                format!(
                    "the overlay is for GPU `{}`, but cluster `{cluster}` has `{gpu}` GPUs",
                    self.gpu
                ),
            ));
        }
        Ok(())
    }
}

/// Weight λ of the ridge prior on ln θ − ln θ0 (see the module docs). With
/// λ = 0.05 a parameter moves by a factor e (2.7×) only when that lowers
/// the sum of squared log step-time errors by 0.05, i.e. by about a 22%
/// error on one run.
pub const PRIOR_WEIGHT: f64 = 0.05;

const NAMES: [&str; 6] = [
    "efficiency.gemm",
    "efficiency.attention",
    "efficiency.memory",
    "efficiency.kernel_overhead_us",
    "collective.intra",
    "collective.inter",
];

fn get(gpu: &Gpu, cl: &Cluster) -> [f64; 6] {
    let e = &gpu.efficiency;
    [
        e.gemm,
        e.attention,
        e.memory,
        e.kernel_overhead_us.max(0.1),
        cl.collective.intra,
        cl.collective.inter,
    ]
}

fn bounds(i: usize) -> (f64, f64) {
    if i == 3 { (0.1, 200.0) } else { (0.02, 1.0) }
}

fn overlay_of(gpu: &str, th: &[f64; 6]) -> Overlay {
    Overlay {
        gpu: gpu.to_string(),
        cluster: None,
        source: None,
        links: LinksOverlay::default(),
        efficiency: EfficiencyOverlay {
            gemm: Some(th[0]),
            gemm_fp8: None,
            attention: Some(th[1]),
            memory: Some(th[2]),
            kernel_overhead_us: Some(th[3]),
        },
        collective: CollectiveOverlay {
            intra: Some(th[4]),
            inter: Some(th[5]),
        },
        calibration: None,
    }
}

/// Result of a fit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// The overlay to write.
    pub overlay: Overlay,
    /// Parameter names, shipped values and fitted values.
    pub parameters: Vec<(String, f64, f64)>,
    /// Rows not used, with reasons.
    pub skipped: Vec<validate::Skipped>,
}

/// Solve `a·x = b` (n×n, Gaussian elimination with partial pivoting).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| {
            a[i][c]
                .abs()
                .partial_cmp(&a[j][c].abs())
                .unwrap_or(std::cmp::Ordering::Equal)
        })?;
        if a[p][c].abs() < 1e-300 {
            return None;
        }
        a.swap(c, p);
        b.swap(c, p);
        let (top, rest) = a.split_at_mut(c + 1);
        let pivot = &top[c];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[c] / pivot[c];
            for (x, y) in row[c..].iter_mut().zip(&pivot[c..]) {
                *x -= f * y;
            }
            b[c + 1 + i] -= f * b[c];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    Some(x)
}

/// Fit the efficiencies of `gpu_name` to the rows of `rows` that ran on
/// that GPU and measured a step time or TFLOP/s.
///
/// # Errors
/// A sentence when the GPU is unknown or no row can be used.
pub fn calibrate(rows: &[MeasuredRow], cat: &Catalog, gpu_name: &str) -> Result<Fit, String> {
    let gpu0 = cat.gpu(gpu_name).map_err(|e| e.to_string())?.clone();
    let mut cases = Vec::new();
    let mut skipped = Vec::new();
    for row in rows {
        match validate::build_case(row, cat, None) {
            Ok(c) if c.gpu.name != gpu0.name => skipped.push(validate::Skipped {
                id: row.id.clone(),
                kind: "other GPU".into(),
                reason: format!("runs on `{}`, not `{}`", c.gpu.name, gpu0.name),
            }),
            Ok(c) => match c.measured_step() {
                Some((t, _)) => cases.push((c, t)),
                None => skipped.push(validate::Skipped {
                    id: row.id.clone(),
                    kind: "nothing measured".into(),
                    reason: "no step time, TFLOP/s or MFU measured".into(),
                }),
            },
            Err(u) => skipped.push(validate::Skipped {
                id: row.id.clone(),
                kind: u.kind,
                reason: u.reason,
            }),
        }
    }
    if cases.is_empty() {
        return Err(format!(
            "no row of the file ran on `{}` with a measured step time or TFLOP/s",
            gpu0.name
        ));
    }
    let th0 = get(&gpu0, &cases[0].0.cluster);
    let phi0: Vec<f64> = th0.iter().map(|x| x.ln()).collect();
    let residuals = |phi: &[f64]| -> Vec<f64> {
        let th: Vec<f64> = phi.iter().map(|p| p.exp()).collect();
        let th: [f64; 6] = [th[0], th[1], th[2], th[3], th[4], th[5]];
        let o = overlay_of(&gpu0.name, &th);
        let mut r: Vec<f64> = cases
            .iter()
            .map(|(c, t)| {
                let mut g = c.gpu.clone();
                let mut cl = c.cluster.clone();
                o.apply_gpu(&mut g);
                o.apply_cluster(&mut cl);
                let pr = cost::Problem::new(&c.model, &g, &cl, &c.job, c.row.num_gpus);
                (cost::evaluate(&pr, &c.layout).time.step / t).ln()
            })
            .collect();
        r.extend(
            phi.iter()
                .zip(&phi0)
                .map(|(p, q)| PRIOR_WEIGHT.sqrt() * (p - q)),
        );
        r
    };
    let clamp = |phi: &mut [f64]| {
        for (i, p) in phi.iter_mut().enumerate() {
            let (lo, hi) = bounds(i);
            *p = p.clamp(lo.ln(), hi.ln());
        }
    };
    let sq = |r: &[f64]| r.iter().map(|x| x * x).sum::<f64>();
    let mut phi = phi0.clone();
    let mut r = residuals(&phi);
    let before: Vec<f64> = r[..cases.len()].iter().map(|x| x.exp() - 1.0).collect();
    let mut mu = 1e-2;
    let mut it = 0;
    while it < 100 {
        it += 1;
        let n = phi.len();
        let h = 1e-4;
        let mut jac = vec![vec![0.0; n]; r.len()];
        for j in 0..n {
            let mut p = phi.clone();
            p[j] += h;
            let rj = residuals(&p);
            for i in 0..r.len() {
                jac[i][j] = (rj[i] - r[i]) / h;
            }
        }
        let mut jtj = vec![vec![0.0; n]; n];
        let mut jtr = vec![0.0; n];
        for i in 0..r.len() {
            for a in 0..n {
                jtr[a] += jac[i][a] * r[i];
                for b in 0..n {
                    jtj[a][b] += jac[i][a] * jac[i][b];
                }
            }
        }
        let mut improved = false;
        for _ in 0..20 {
            let mut a = jtj.clone();
            for (d, row) in a.iter_mut().enumerate() {
                row[d] += mu * (jtj[d][d] + 1e-9);
            }
            let Some(delta) = solve(a, jtr.iter().map(|x| -x).collect()) else {
                mu *= 10.0;
                continue;
            };
            let mut cand: Vec<f64> = phi.iter().zip(&delta).map(|(p, d)| p + d).collect();
            clamp(&mut cand);
            let rc = residuals(&cand);
            if sq(&rc) < sq(&r) {
                let moved = cand
                    .iter()
                    .zip(&phi)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                phi = cand;
                r = rc;
                mu = (mu / 10.0).max(1e-12);
                improved = moved > 1e-6;
                break;
            }
            mu *= 10.0;
        }
        if !improved {
            break;
        }
    }
    let th: Vec<f64> = phi.iter().map(|p| p.exp()).collect();
    let th: [f64; 6] = [th[0], th[1], th[2], th[3], th[4], th[5]];
    let after: Vec<f64> = r[..cases.len()].iter().map(|x| x.exp() - 1.0).collect();
    let mut overlay = overlay_of(&gpu0.name, &th);
    overlay.source = Some(format!(
        "meshplan calibrate: Levenberg–Marquardt on ln(step time) of {} runs, ridge prior λ = {} towards the shipped profile",
        cases.len(),
        PRIOR_WEIGHT
    ));
    overlay.calibration = Some(CalibrationInfo {
        rows: cases.iter().map(|(c, _)| c.row.id.clone()).collect(),
        error_before: before.iter().map(|x| (x * 1e4).round() / 1e4).collect(),
        error_after: after.iter().map(|x| (x * 1e4).round() / 1e4).collect(),
        iterations: it,
    });
    let parameters = NAMES
        .iter()
        .zip(th0.iter().zip(th.iter()))
        .map(|(n, (a, b))| (n.to_string(), *a, *b))
        .collect();
    Ok(Fit {
        overlay,
        parameters,
        skipped,
    })
}
