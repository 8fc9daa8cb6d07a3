//! Low-precision linear layers: FP8 (delayed, current, row-wise or
//! block-wise scaling), MXFP8 and NVFP4.
//!
//! What a recipe narrows: the linear GEMMs of every transformer layer (QKV,
//! attention output projection, FC1, FC2, the routed and shared experts;
//! forward and both backward GEMMs, [`crate::cost::compute::linear_gemms`]).
//! What stays bf16/fp32: the attention core, the router, the embedding and
//! the output layer, norms, residuals and the optimizer with its fp32 master
//! weights, as DeepSeek-V3 kept its sensitive operators ([ref:deepseek-v3]
//! §3.3.1) and as Transformer Engine applies its recipes to its linear
//! modules only ([ref:te-fp8-primer]).
//!
//! Each term is one function below, with its source:
//! - the GEMM rate: the precision's dense peak times a per-GPU efficiency
//!   ([`gemm_time`]; roofline with 1-byte (FP8) or half-byte (FP4) operands,
//!   so small GEMMs stay bound by bandwidth and launches and gain less);
//! - the casts: every high-precision operand is read (once more for the
//!   amax under current scaling) and written as one or two narrow copies with
//!   their scale factors ([`cast_bytes`], [`linear_cast_bytes`]); weights
//!   once per step when the library caches them, at every use otherwise;
//! - memory: the narrow weight copies kept between forward and backward
//!   ([`weight_copy_bytes`]), the scaling state ([`scaling_state_bytes`]),
//!   and the linears' inputs saved in the narrow format where the library
//!   does it ([`saved_input_bytes_per_token`]).

use crate::cost::RankCost;
use crate::cost::compute::{Linear, Rates};
use crate::cost::data_parallel::DpVolumes;
use crate::cost::layer::{ItemCost, LayerCosts};
use crate::error::InputError;
use crate::spec::{Fp8Kernels, Fp8Recipe, Gpu, Job, Model, Precision, Recipe};

/// Amax history length of delayed scaling: 1024 steps with the `max`
/// reduction, as Megatron-LM's Llama 3 FP8 example launches it
/// (`examples/llama/train_llama3_8b_h100_fp8.sh`: `--fp8-amax-history-len
/// 1024 --fp8-amax-compute-algo max`, [ref:megatron-arguments]).
pub const AMAX_HISTORY_LEN: u32 = 1024;

/// Tensors with their own scale per low-precision GEMM under per-tensor
/// scaling: the input, the weight and the output gradient
/// ([ref:te-fp8-primer]: the forward meta holds input and weight, the
/// backward meta the gradient).
pub const SCALED_TENSORS_PER_GEMM: f64 = 3.0;

/// Elements per scale of the block formats: 1×128 tiles for activations and
/// gradients, 128×128 blocks for weights ([ref:deepseek-v3] §3.3.2).
pub const BLOCKWISE_TILE: f64 = 128.0;

/// Elements per E8M0 scale of MXFP8 ([ref:ocp-mx] §5.2, block size 32).
pub const MX_BLOCK: f64 = 32.0;

/// Elements per E4M3 scale of NVFP4 ([ref:nvfp4-2025] §2, block size 16).
pub const NVFP4_BLOCK: f64 = 16.0;

/// The job's low-precision recipe on one GPU, fixed for a problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowPrecision {
    /// Number format (never bf16 here).
    pub precision: Precision,
    /// FP8 scaling recipe (for MXFP8 and NVFP4 their block scaling).
    pub recipe: Fp8Recipe,
    /// Library running the linears.
    pub kernels: Fp8Kernels,
    /// Parameters gathered in the narrow format (`--fp8-param-gather`).
    pub param_gather: bool,
    /// MoE tokens dispatched in the narrow format (`--fp8-dispatch`).
    pub dispatch: bool,
    /// Sustained rate of a large narrow GEMM, FLOP/s
    /// ([`gemm_flops`]).
    pub gemm_flops: f64,
    /// Bytes per narrow element ([`operand_bytes`]).
    pub operand_bytes: f64,
    /// Extra reads of the high-precision tensor before a cast
    /// ([`amax_reads`]).
    pub amax_reads: f64,
    /// Contraction length at which a narrow GEMM runs at half its
    /// asymptotic rate ([`half_k`]), elements.
    pub half_k: f64,
    /// The dense linears (casts included) are priced from torchao's
    /// published row-wise table ([`torchao_rowwise_measured`],
    /// [`torchao_rowwise_speedup`]) instead of the narrow roofline.
    pub rowwise_table: bool,
}

impl LowPrecision {
    /// The recipe of `job` on `gpu`: `None` for bf16.
    ///
    /// # Errors
    /// [`InputError::Job`] naming the GPU when it has no tensor cores for the
    /// precision, or its profile has no GEMM efficiency for it ([`check`]).
    pub fn of(gpu: &Gpu, job: &Job) -> Result<Option<LowPrecision>, InputError> {
        if !job.precision.is_low() {
            return Ok(None);
        }
        let flops = gemm_flops(gpu, job.precision)?;
        Ok(Some(LowPrecision {
            precision: job.precision,
            recipe: job.fp8_recipe,
            kernels: job.fp8_kernels,
            param_gather: job.fp8_param_gather,
            dispatch: job.fp8_dispatch,
            gemm_flops: flops,
            operand_bytes: operand_bytes(job.precision),
            amax_reads: amax_reads_of(job),
            half_k: half_k(gpu, job.precision),
            rowwise_table: torchao_rowwise_measured(gpu, job),
        }))
    }

    /// The recipe of `job` priced at 1 FLOP/s: what [`Rates::for_job`] uses
    /// when [`check`] was skipped and the GPU cannot run it.
    pub fn unusable(job: &Job) -> LowPrecision {
        LowPrecision {
            precision: job.precision,
            recipe: job.fp8_recipe,
            kernels: job.fp8_kernels,
            param_gather: job.fp8_param_gather,
            dispatch: job.fp8_dispatch,
            gemm_flops: 1.0,
            operand_bytes: operand_bytes(job.precision),
            amax_reads: amax_reads_of(job),
            half_k: 0.0,
            rowwise_table: false,
        }
    }

    /// Scale-factor bytes per element of an activation or gradient whose
    /// rows (along the GEMM's contraction) are `row` elements long
    /// ([`scale_bytes_per_element`]).
    pub fn act_scale_bytes(&self, row: f64) -> f64 {
        scale_bytes_per_element(self.precision, self.recipe, false, row)
    }

    /// Scale-factor bytes per element of a weight with rows of `row`.
    pub fn weight_scale_bytes(&self, row: f64) -> f64 {
        scale_bytes_per_element(self.precision, self.recipe, true, row)
    }
}

/// Refuse a job whose precision `gpu` cannot run, in one sentence naming the
/// GPU: FP8 needs FP8 tensor cores (`peak_tflops_fp8` > 0: Hopper, Ada,
/// Blackwell; not Ampere), MXFP8 block-scaled tensor cores
/// (`block_scaled_mma`, Blackwell), NVFP4 both those and an FP4 peak; and the
/// profile must carry the GEMM efficiency of that precision. The row-wise
/// and block-wise recipes need FP8 as well.
///
/// # Errors
/// [`InputError::Job`].
pub fn check(gpu: &Gpu, job: &Job) -> Result<(), InputError> {
    gemm_flops(gpu, job.precision).map(|_| ())
}

/// Sustained rate of a large GEMM in `precision` on `gpu`, FLOP/s: the dense
/// peak of the format times its efficiency (`[efficiency] gemm_fp8` for
/// FP8 and MXFP8, `gemm_fp4` for NVFP4; bf16 `gemm`). Vendor sheets give
/// the same dense peak for FP8 and MXFP8 on Blackwell; NVFP4 doubles it.
///
/// # Errors
/// [`InputError::Job`] when the GPU has no such tensor cores or its profile
/// no efficiency for them.
pub fn gemm_flops(gpu: &Gpu, precision: Precision) -> Result<f64, InputError> {
    let name = format!("GPU `{}` ({})", gpu.name, gpu.display);
    let instead = if gpu.peak_tflops_fp8 > 0.0 && precision != Precision::Fp8 {
        "fp8 or bf16"
    } else {
        "bf16"
    };
    let no = |what: &str| {
        Err(InputError::Job(format!(
            "--precision {precision} needs {what}; {name} has none, so it cannot be priced (use --precision {instead})"
        )))
    };
    let missing = |field: &str| {
        Err(InputError::Job(format!(
            "--precision {precision}: the profile of {name} has no `[efficiency] {field}` (the fraction of its {precision} peak a large GEMM sustains); add it to the profile"
        )))
    };
    match precision {
        Precision::Bf16 => Ok(gpu.peak_tflops_bf16 * 1e12 * gpu.efficiency.gemm),
        Precision::Fp8 | Precision::Mxfp8 => {
            if gpu.peak_tflops_fp8 <= 0.0 {
                return no("FP8 tensor cores (peak_tflops_fp8 > 0 in its profile)");
            }
            if precision == Precision::Mxfp8 && !gpu.block_scaled_mma {
                return no(
                    "tensor cores that read MXFP8 block scales (block_scaled_mma, Blackwell or newer)",
                );
            }
            match gpu.efficiency.gemm_fp8 {
                Some(e) => Ok(gpu.peak_tflops_fp8 * 1e12 * e),
                None => missing("gemm_fp8"),
            }
        }
        Precision::Nvfp4 => {
            if gpu.peak_tflops_fp4 <= 0.0 || !gpu.block_scaled_mma {
                return no(
                    "FP4 tensor cores with block scales (peak_tflops_fp4 > 0 and block_scaled_mma, Blackwell or newer)",
                );
            }
            match gpu.efficiency.gemm_fp4 {
                Some(e) => Ok(gpu.peak_tflops_fp4 * 1e12 * e),
                None => missing("gemm_fp4"),
            }
        }
    }
}

/// Contraction length at which a GEMM in `precision` runs at half its
/// asymptotic rate on `gpu` (`[efficiency] gemm_half_k`, `gemm_fp8_half_k`
/// for FP8 and MXFP8, `gemm_fp4_half_k` for NVFP4), elements; the `k½` of
/// [`crate::cost::compute::contraction_factor`].
pub fn half_k(gpu: &Gpu, precision: Precision) -> f64 {
    match precision {
        Precision::Bf16 => gpu.efficiency.gemm_half_k,
        Precision::Fp8 | Precision::Mxfp8 => gpu.efficiency.gemm_fp8_half_k,
        Precision::Nvfp4 => gpu.efficiency.gemm_fp4_half_k,
    }
}

/// Dense tensor-core peak of `precision` on `gpu`, TFLOP/s: bf16, FP8 (also
/// MXFP8) or FP4; the denominator of [`crate::cost::Evaluation::mfu_own_peak`].
pub fn dense_peak_tflops(gpu: &Gpu, precision: Precision) -> f64 {
    match precision {
        Precision::Bf16 => gpu.peak_tflops_bf16,
        Precision::Fp8 | Precision::Mxfp8 => gpu.peak_tflops_fp8,
        Precision::Nvfp4 => gpu.peak_tflops_fp4,
    }
}

/// Bytes per element of a narrow operand: 1 for FP8 (E4M3 or E5M2,
/// [ref:micikevicius-2022]) and MXFP8 ([ref:ocp-mx]), ½ for NVFP4's E2M1
/// ([ref:nvfp4-2025]); bf16 2.
pub fn operand_bytes(precision: Precision) -> f64 {
    match precision {
        Precision::Bf16 => 2.0,
        Precision::Fp8 | Precision::Mxfp8 => 1.0,
        Precision::Nvfp4 => 0.5,
    }
}

/// Scale-factor bytes per element of a narrow tensor whose rows along the
/// GEMM's contraction are `row` elements long:
/// - per-tensor (delayed, current): 0 per element (one fp32 per tensor,
///   counted in [`scaling_state_bytes`]);
/// - row-wise: one fp32 per row, `4/row`;
/// - block-wise: one fp32 per 1×128 tile of an activation or gradient,
///   `4/128`, per 128×128 block of a weight, `4/128²` ([ref:deepseek-v3]
///   §3.3.2);
/// - MXFP8: one E8M0 byte per 32 elements, `1/32` ([ref:ocp-mx]);
/// - NVFP4: one E4M3 byte per 16 elements, `1/16` ([ref:nvfp4-2025]).
pub fn scale_bytes_per_element(
    precision: Precision,
    recipe: Fp8Recipe,
    weight: bool,
    row: f64,
) -> f64 {
    match precision {
        Precision::Bf16 => 0.0,
        Precision::Mxfp8 => 1.0 / MX_BLOCK,
        Precision::Nvfp4 => 1.0 / NVFP4_BLOCK,
        Precision::Fp8 => match recipe {
            Fp8Recipe::Delayed | Fp8Recipe::Current => 0.0,
            Fp8Recipe::Rowwise => 4.0 / row.max(1.0),
            Fp8Recipe::Blockwise if weight => 4.0 / (BLOCKWISE_TILE * BLOCKWISE_TILE),
            Fp8Recipe::Blockwise => 4.0 / BLOCKWISE_TILE,
        },
    }
}

/// Scale factors of a `rows × cols` tensor scaled in `block_rows ×
/// block_cols` blocks: `⌈rows/block_rows⌉·⌈cols/block_cols⌉`.
///
/// Example: an 8192 × 28672 weight (Llama-3-70B's FC2, or FC1 up or gate)
/// in 128×128 blocks ([ref:deepseek-v3] §3.3.2): `64 · 224 = 14,336`
/// fp32 scales (56 KiB).
pub fn block_scale_count(rows: u64, cols: u64, block_rows: u64, block_cols: u64) -> u64 {
    rows.div_ceil(block_rows.max(1)) * cols.div_ceil(block_cols.max(1))
}

/// Extra reads of a high-precision tensor before it is cast: current
/// scaling (per tensor or per row) needs the tensor's own amax first, one
/// pass more; delayed scaling casts with last steps' amax history and takes
/// the new amax in the same pass ([ref:te-fp8-primer]); block formats find
/// each block's amax inside the cast kernel (the block is on chip). NVFP4
/// adds a per-tensor fp32 scale from the tensor's amax ([ref:nvfp4-2025]
/// §2), one pass more.
pub fn amax_reads(precision: Precision, recipe: Fp8Recipe) -> f64 {
    match precision {
        Precision::Bf16 | Precision::Mxfp8 => 0.0,
        Precision::Nvfp4 => 1.0,
        Precision::Fp8 => match recipe {
            Fp8Recipe::Delayed | Fp8Recipe::Blockwise => 0.0,
            Fp8Recipe::Current | Fp8Recipe::Rowwise => 1.0,
        },
    }
}

/// [`amax_reads`] of the job's recipe as its library runs it: torchao's
/// float8 runs under `torch.compile` (torchtitan requires it for float8),
/// which fuses the amax reduction into the kernel that produces the tensor
/// ([ref:torchao-float8]), so no cast reads a tensor for its amax alone;
/// Transformer Engine's current scaling reads it once more.
pub fn amax_reads_of(job: &Job) -> f64 {
    match job.fp8_kernels {
        Fp8Kernels::Torchao => 0.0,
        Fp8Kernels::Te => amax_reads(job.precision, job.fp8_recipe),
    }
}

/// Time of one narrow GEMM `[m×k]·[k×n]`, seconds: the roofline of
/// [`crate::cost::compute::gemm_time`] with narrow operands (`b` bytes per
/// element plus their scales) and a bf16 output, at the narrow rate at the
/// GEMM's depth ([`crate::cost::compute::contraction_factor`] with the
/// precision's `k½`):
/// `max(2mnk / (rate·f(k)), (b·(mk + kn) + 2mn) / hbm) + launch`.
pub fn gemm_time(m: f64, n: f64, k: f64, lp: &LowPrecision, r: &Rates) -> f64 {
    if m <= 0.0 || n <= 0.0 || k <= 0.0 {
        return 0.0;
    }
    let flops = 2.0 * m * n * k;
    let b_act = lp.operand_bytes + lp.act_scale_bytes(k);
    let b_w = lp.operand_bytes + lp.weight_scale_bytes(k);
    let bytes = b_act * m * k + b_w * k * n + 2.0 * m * n;
    let rate = lp.gemm_flops * crate::cost::compute::contraction_factor(k, lp.half_k);
    (flops / rate).max(bytes / r.hbm) + r.overhead
}

/// Backward time of the narrow GEMM `[m×k]·[k×n]`, seconds: the input
/// gradient (contraction `n`) and the weight gradient (contraction `m`),
/// both narrow ([ref:te-fp8-primer]: Transformer Engine and torchao run the
/// forward and both backward GEMMs of a linear in FP8; gradients in E5M2
/// under the hybrid format, the same rate), each a [`gemm_time`] of its own
/// shape.
pub fn gemm_backward_time(m: f64, n: f64, k: f64, lp: &LowPrecision, r: &Rates) -> f64 {
    gemm_time(m, k, n, lp, r) + gemm_time(k, n, m, lp, r)
}

/// Forward GEMM sizes of [`TORCHAO_ROWWISE_SPEEDUP`] along each of M, K
/// and N, elements.
pub const TORCHAO_ROWWISE_DIMS: [f64; 6] = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0];

/// torchao's published speed-up of its row-wise float8 linear over bf16 on
/// one NVIDIA H100, dimensionless, indexed `[M][K][N]` by the forward shape
/// `[M×K]·[K×N]` at [`TORCHAO_ROWWISE_DIMS`] ([ref:torchao-rowwise-table]:
/// pytorch/ao `docs/static/fp8-rowwise-perf.png`, added by PR #2312 at
/// commit fdddb2cf, 2025-06-06, and linked from `torchao/float8/README.md`
/// "Rowwise scaling" at 6243040, the torchao commit of torchtitan's
/// async-TP benchmark; "Speedup observed vs bfloat16 for LayerNorm ->
/// Linear -> Sigmoid fwd + bwd by forward M, K, N, dynamic row-wise
/// scaling, PyTorch version 2.8.0a0+git48807d5", produced by
/// `benchmarks/float8/float8_roofline.py`: both models under
/// `torch.compile`, so the float8 time holds every cast and amax the
/// compiled recipe runs, the CUTLASS row-wise forward GEMM and the
/// tensor-wise cuBLAS backward GEMMs with their separate rescale
/// (`torchao/float8/float8_ops.py` `addmm_float8_unwrapped`: "The rowwise
/// CUTLASS-based kernel is so slow without fast-accum that we'd rather use
/// the tensorwise cuBLAS-based kernel and do the scaling manually
/// afterwards"; the recipe runs the backward GEMMs without fast
/// accumulation, `torchao/float8/config.py`). Transcribed from the image,
/// two decimals as printed.
pub const TORCHAO_ROWWISE_SPEEDUP: [[[f64; 6]; 6]; 6] = [
    // M = 1024
    [
        [0.42, 0.42, 0.50, 0.51, 0.56, 0.56],
        [0.40, 0.38, 0.42, 0.50, 0.50, 0.56],
        [0.48, 0.43, 0.46, 0.53, 0.57, 0.60],
        [0.45, 0.48, 0.54, 0.62, 0.60, 0.62],
        [0.46, 0.48, 0.54, 0.60, 0.60, 0.61],
        [0.45, 0.50, 0.55, 0.60, 0.62, 0.65],
    ],
    // M = 2048
    [
        [0.43, 0.43, 0.48, 0.55, 0.62, 0.65],
        [0.38, 0.45, 0.58, 0.65, 0.72, 0.75],
        [0.43, 0.50, 0.68, 0.78, 0.81, 0.82],
        [0.46, 0.58, 0.73, 0.82, 0.87, 0.89],
        [0.48, 0.62, 0.75, 0.83, 0.84, 0.85],
        [0.50, 0.64, 0.75, 0.84, 0.83, 0.99],
    ],
    // M = 4096
    [
        [0.45, 0.47, 0.57, 0.66, 0.72, 0.76],
        [0.43, 0.53, 0.70, 0.83, 0.90, 0.91],
        [0.44, 0.64, 0.84, 1.01, 1.01, 1.04],
        [0.53, 0.72, 0.91, 1.01, 1.07, 1.13],
        [0.53, 0.74, 0.92, 1.05, 1.10, 1.18],
        [0.54, 0.75, 0.93, 1.02, 1.17, 1.18],
    ],
    // M = 8192
    [
        [0.48, 0.52, 0.65, 0.77, 0.83, 0.84],
        [0.45, 0.64, 0.82, 1.01, 1.03, 1.06],
        [0.52, 0.76, 1.00, 1.13, 1.17, 1.19],
        [0.59, 0.85, 1.05, 1.20, 1.31, 1.41],
        [0.58, 0.82, 1.03, 1.22, 1.37, 1.40],
        [0.59, 0.82, 1.04, 1.30, 1.36, 1.46],
    ],
    // M = 16384
    [
        [0.48, 0.58, 0.73, 0.86, 0.85, 0.89],
        [0.51, 0.70, 0.90, 1.05, 1.07, 1.15],
        [0.57, 0.79, 1.02, 1.20, 1.26, 1.40],
        [0.61, 0.87, 1.08, 1.33, 1.39, 1.49],
        [0.59, 0.83, 1.07, 1.34, 1.42, 1.55],
        [0.60, 0.85, 1.16, 1.35, 1.48, 1.72],
    ],
    // M = 32768
    [
        [0.51, 0.62, 0.77, 0.87, 0.88, 0.94],
        [0.54, 0.73, 0.91, 1.08, 1.14, 1.27],
        [0.59, 0.81, 1.04, 1.28, 1.35, 1.49],
        [0.63, 0.87, 1.11, 1.41, 1.50, 1.62],
        [0.60, 0.83, 1.16, 1.39, 1.49, 1.73],
        [0.63, 0.93, 1.16, 1.48, 1.70, 1.52],
    ],
];

/// Position of `x` on [`TORCHAO_ROWWISE_DIMS`]: the lower index and the
/// fraction towards the next, linear in log₂ and clamped to the table.
fn rowwise_axis(x: f64) -> (usize, f64) {
    let t = (x.max(1.0).log2() - 10.0).clamp(0.0, 5.0); // log₂ 1024 = 10
    let i = (t.floor() as usize).min(4);
    (i, t - i as f64)
}

/// Speed-up of torchao's row-wise float8 linear over bf16 for the forward
/// shape `[m×k]·[k×n]`, dimensionless: [`TORCHAO_ROWWISE_SPEEDUP`],
/// trilinear in log₂ of each size between the measured points and clamped
/// to its edges: below 1024 the 1024 value (optimistic: the table falls
/// towards small K and N), above 32768 the 32768 value (pessimistic in M,
/// where it still rises).
///
/// Example: Llama-3.1-8B's FC1 (gate and up) at TP 8, 12 × 8192 tokens
/// gathered by SP: M = 98,304 → 32768 row; K = 4096; N = 2·14336/8 = 3584,
/// log₂ 3584 = 11.807, between 2048 (0.81) and 4096 (1.04):
/// 0.81 + 0.807·0.23 = 0.9957.
pub fn torchao_rowwise_speedup(m: f64, k: f64, n: f64) -> f64 {
    let (im, fm) = rowwise_axis(m);
    let (ik, fk) = rowwise_axis(k);
    let (i_n, f_n) = rowwise_axis(n);
    let t = &TORCHAO_ROWWISE_SPEEDUP;
    let along_n = |a: usize, b: usize| t[a][b][i_n] + f_n * (t[a][b][i_n + 1] - t[a][b][i_n]);
    let along_k = |a: usize| along_n(a, ik) + fk * (along_n(a, ik + 1) - along_n(a, ik));
    along_k(im) + fm * (along_k(im + 1) - along_k(im))
}

/// Whether `job`'s dense linears are priced from torchao's row-wise table
/// ([`torchao_rowwise_speedup`]): FP8 row-wise scaling run by torchao
/// (torchtitan) on a GPU of the table's kind, FP8 tensor cores without
/// block-scaled MMA (Hopper; the table was measured on an H100, whose
/// row-wise `_scaled_mm` is a CUTLASS kernel). On Blackwell the narrow
/// roofline stays.
pub fn torchao_rowwise_measured(gpu: &Gpu, job: &Job) -> bool {
    job.precision == Precision::Fp8
        && job.fp8_recipe == Fp8Recipe::Rowwise
        && job.fp8_kernels == Fp8Kernels::Torchao
        && gpu.peak_tflops_fp8 > 0.0
        && !gpu.block_scaled_mma
}

/// Forward and backward time of one dense linear under torchao's row-wise
/// float8 on Hopper, seconds: for each projection it stands for
/// ([`Linear::parts`]: torchtitan's Llama runs `wq`, `wk`, `wv` and `w1`,
/// `w3` as separate `Float8Linear`s), its bf16 GEMMs
/// ([`crate::cost::compute::gemm_pass_times`]) over the published speed-up
/// of its own shape ([`torchao_rowwise_speedup`]), both passes by the same
/// ratio (the table gives forward plus backward only). The table's float8
/// time includes the casts, so [`linear_cast_bytes`] adds none for these
/// linears; its LayerNorm and sigmoid, in both timings, make the ratio
/// slightly closer to 1 than the linear's own.
///
/// Example: Llama-3.1-8B's gate and up projections at TP 8 (M = 98,304,
/// K = 4096, two parts of N = 1792): each its bf16 time over
/// 0.59 + 0.807·(0.81 − 0.59) = 0.7675.
pub fn rowwise_table_pass_times(lin: &Linear, r: &Rates) -> (f64, f64) {
    let one = |n: f64| {
        let (f, b) = crate::cost::compute::gemm_pass_times(lin.m, n, lin.k, r);
        let s = torchao_rowwise_speedup(lin.m, lin.k, n);
        (f / s, b / s)
    };
    if lin.parts.iter().all(|&w| w <= 0.0) {
        return one(lin.n);
    }
    lin.parts
        .iter()
        .filter(|&&w| w > 0.0)
        .map(|&w| one(f64::from(w)))
        .fold((0.0, 0.0), |(f, b), (df, db)| (f + df, b + db))
}

/// HBM bytes of casting one bf16 tensor of `elements` to the narrow format:
/// the tensor is read `1 + amax_reads` times ([`amax_reads`]) and `copies`
/// narrow copies are written with `scale` bytes of scale factors per
/// element: `elements·(2·(1 + a) + copies·(b + scale))`.
///
/// Example (the input of Llama-3-70B's FC1, 8192 tokens × h 8192, current
/// scaling, Transformer Engine's fused cast-transpose writing the row-wise
/// copy for the forward GEMM and the transposed copy for the weight
/// gradient): `67,108,864 · (2·2 + 2·1) = 402,653,184` bytes.
pub fn cast_bytes(elements: f64, copies: f64, scale: f64, lp: &LowPrecision) -> f64 {
    elements * (2.0 * (1.0 + lp.amax_reads) + copies * (lp.operand_bytes + scale))
}

/// Kernels of one cast: one per read pass (the amax reduction is its own
/// kernel under current scaling).
pub fn cast_kernels(lp: &LowPrecision) -> f64 {
    1.0 + lp.amax_reads
}

/// Cast work of one linear GEMM per micro-batch: HBM bytes and kernels, in
/// forward and in backward.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CastWork {
    /// Forward bytes (input, and the weight's share).
    pub forward_bytes: f64,
    /// Forward kernels.
    pub forward_kernels: f64,
    /// Backward bytes (output gradient, and what is cast again).
    pub backward_bytes: f64,
    /// Backward kernels.
    pub backward_kernels: f64,
}

impl CastWork {
    /// Add `other`.
    pub fn add(&mut self, other: &CastWork) {
        self.forward_bytes += other.forward_bytes;
        self.forward_kernels += other.forward_kernels;
        self.backward_bytes += other.backward_bytes;
        self.backward_kernels += other.backward_kernels;
    }
}

/// Casts of one linear GEMM `lin` per micro-batch. `weight_casts` is how
/// many times per micro-batch its weight is cast ([`weight_casts`]); `tp`
/// the TP size (under SP the all-gathered operands are cast on the local
/// `m/T` shard before the narrow all-gather).
///
/// Transformer Engine (Megatron-LM, NeMo, Megatron-Bridge)
/// ([ref:te-fp8-primer]): one fused cast-transpose of the input writing the
/// row-wise copy (forward GEMM) and the column-wise copy (weight gradient,
/// saved for backward); the weight likewise, into its cached copies; in
/// backward one cast-transpose of the output gradient (input-gradient and
/// weight-gradient GEMMs).
///
/// torchao float8 (torchtitan) ([ref:torchao-float8]): forward casts the
/// input and the weight; backward casts the output gradient twice (one
/// layout per GEMM; tensor-wise shares the amax, row-wise scales along
/// other axes and reads it again), and casts the saved bf16 input and the
/// weight again. Where the linears are priced from torchao's row-wise table
/// ([`LowPrecision::rowwise_table`]) the casts are inside that measured
/// time: none here.
pub fn linear_cast_bytes(lin: &Linear, weight_casts: f64, tp: f64, lp: &LowPrecision) -> CastWork {
    if lp.rowwise_table && !lin.expert {
        // In the measured time of [`rowwise_table_pass_times`].
        return CastWork::default();
    }
    let x_rows = if lin.gathered_input {
        lin.m / tp
    } else {
        lin.m
    };
    let dy_rows = if lin.gathered_grad { lin.m / tp } else { lin.m };
    let x = x_rows * lin.k;
    let w = lin.k * lin.n;
    let dy = dy_rows * lin.n;
    let sx = lp.act_scale_bytes(lin.k);
    let sw = lp.weight_scale_bytes(lin.k);
    let sdy = lp.act_scale_bytes(lin.n);
    let k1 = cast_kernels(lp);
    match lp.kernels {
        Fp8Kernels::Te => CastWork {
            forward_bytes: cast_bytes(x, 2.0, sx, lp) + weight_casts * cast_bytes(w, 2.0, sw, lp),
            forward_kernels: k1 * (1.0 + weight_casts.min(1.0)),
            backward_bytes: cast_bytes(dy, 2.0, sdy, lp),
            backward_kernels: k1,
        },
        Fp8Kernels::Torchao => {
            // The second cast of the output gradient: tensor-wise reuses the
            // amax, row-wise reads the tensor again for the other axis.
            let (dy_again, dy_again_kernels) = if lp.recipe == Fp8Recipe::Rowwise {
                (cast_bytes(dy, 1.0, sdy, lp), k1)
            } else {
                (dy * (2.0 + lp.operand_bytes + sdy), 1.0)
            };
            let w_bytes = weight_casts * cast_bytes(w, 1.0, sw, lp);
            CastWork {
                forward_bytes: cast_bytes(x, 1.0, sx, lp) + w_bytes,
                forward_kernels: k1 * (1.0 + weight_casts.min(1.0)),
                backward_bytes: cast_bytes(dy, 1.0, sdy, lp)
                    + dy_again
                    + cast_bytes(x, 1.0, sx, lp)
                    + w_bytes,
                backward_kernels: k1 * (2.0 + weight_casts.min(1.0)) + dy_again_kernels,
            }
        }
    }
}

/// Casts of one grouped expert GEMM `lin` over `groups` local experts per
/// micro-batch: [`linear_cast_bytes`] with one weight per expert (`lin`
/// holds one expert's `k × n`), and the activation operands (the input in
/// forward, the output gradient in backward) quantized split by split where
/// the library has no fused kernel for the recipe.
///
/// Transformer Engine's `GroupedLinear` quantizes its inputs with
/// `tex.split_quantize`, one quantizer per expert; `multi_tensor_quantize_impl`
/// (`transformer_engine/pytorch/csrc/extensions/cast.cpp`, TE v2.8 to v2.11,
/// Oct–Dec 2025, the releases of the Megatron-Bridge 25.09/25.11 rows) runs one
/// fused multi-tensor cast-transpose (`nvte_multi_cast_transpose`) for FP8
/// delayed scaling only ("Currently only have fused kernel for FP8 delayed
/// scaling") and otherwise quantizes each split on its own: current scaling
/// one amax reduction and one cast per split, MXFP8 and block-wise one cast
/// per split. The bytes are the same either way; what the split costs is
/// `groups − 1` more launches of [`cast_kernels`] per activation operand in
/// each direction. torchao (torchtitan): as [`linear_cast_bytes`] with the
/// weights of every group (no per-split source read).
///
/// Example: Qwen3-30B-A3B at EP 8 (16 local experts), FP8 current scaling
/// (an amax kernel and a cast per split, [`cast_kernels`] = 2): the input of
/// each expert GEMM takes 2 + 15·2 = 32 kernels per micro-batch in forward
/// and its output gradient 32 in backward; under delayed scaling 1 and 1.
pub fn grouped_linear_cast(
    lin: &Linear,
    weight_casts: f64,
    tp: f64,
    groups: f64,
    lp: &LowPrecision,
) -> CastWork {
    let g = groups.max(1.0);
    let mut work = linear_cast_bytes(lin, weight_casts * g, tp, lp);
    let fused = lp.precision == Precision::Fp8 && lp.recipe == Fp8Recipe::Delayed;
    if lp.kernels == Fp8Kernels::Te && !fused {
        let extra = (g - 1.0) * cast_kernels(lp);
        work.forward_kernels += extra;
        work.backward_kernels += extra;
    }
    work
}

/// Casts of a weight per micro-batch: Transformer Engine caches the narrow
/// weight and its transpose for the whole step, so its cast is shared by the
/// `m` micro-batches, `1/m` ([ref:te-fp8-primer]; Megatron-LM's
/// `is_first_microbatch`), except under ZeRO-3 / FSDP where every gather
/// brings a fresh bf16 weight (one cast per micro-batch). torchao casts at
/// every use (forward and again in backward, counted by
/// [`linear_cast_bytes`]: one here). With narrow parameter gathers the cast
/// happens once per step on the rank's `1/shard` of the weight before the
/// gather (the gathered copy is already narrow).
pub fn weight_casts(lp: &LowPrecision, zero: u8, micro_batches: f64, shard: f64) -> f64 {
    let m = micro_batches.max(1.0);
    match (lp.param_gather && zero >= 1, lp.kernels, zero) {
        (true, _, _) => 1.0 / (m * shard.max(1.0)),
        (false, Fp8Kernels::Te, 0..=2) => 1.0 / m,
        _ => 1.0,
    }
}

/// Seconds of `work` on HBM: bytes over the sustained bandwidth plus one
/// launch per kernel, forward and backward.
pub fn cast_seconds(work: &CastWork, r: &Rates) -> (f64, f64) {
    (
        work.forward_bytes / r.hbm + work.forward_kernels * r.overhead,
        work.backward_bytes / r.hbm + work.backward_kernels * r.overhead,
    )
}

/// Narrow weight copies a rank keeps, bytes, for `params` parameters of
/// low-precision linears: Transformer Engine caches the weight and its
/// transpose (Hopper's FP8 tensor cores take only the K-major layout) or
/// the row-wise and column-wise MX copies, each `b + scale` bytes per
/// element, for the whole step ([ref:te-fp8-primer]); under ZeRO-3 only the
/// gathered unit is materialised (`unit_params`). torchao keeps no copy
/// between uses: one narrow copy of the gathered unit is alive while it runs.
pub fn weight_copy_bytes(
    lp: &LowPrecision,
    params: f64,
    unit_params: f64,
    zero: u8,
    row: f64,
) -> f64 {
    let per = lp.operand_bytes + lp.weight_scale_bytes(row);
    match (lp.kernels, zero) {
        (Fp8Kernels::Te, 0..=2) => 2.0 * per * params,
        (Fp8Kernels::Te, _) => 2.0 * per * unit_params,
        (Fp8Kernels::Torchao, _) => per * unit_params,
    }
}

/// Working-precision weight bytes that narrow parameters replace, bytes,
/// for `low_params` parameters of low-precision linears: with narrow
/// parameter gathers under the distributed optimizer (ZeRO 1–2; Megatron-LM
/// `--fp8-param-gather` / `--fp4-param-gather`, "keep params in FP8 and
/// all-gather in FP8", [ref:megatron-arguments]) Transformer Engine holds
/// those parameters in the narrow format itself, so the `b_w`-byte copy of
/// [`crate::cost::memory::model_states`] does not exist: the narrow weight
/// and its transpose ([`weight_copy_bytes`]) are the parameter, and the
/// fp32 master copy stays in the optimizer state. Zero otherwise (ZeRO-3
/// shards and gathered units are priced as before; torchao keeps bf16
/// parameters).
pub fn narrow_param_weight_saving(
    lp: &LowPrecision,
    zero: u8,
    low_params: f64,
    weight_bytes: f64,
) -> f64 {
    if lp.param_gather && lp.kernels == Fp8Kernels::Te && (1..=2).contains(&zero) {
        weight_bytes * low_params
    } else {
        0.0
    }
}

/// Scaling state of `gemms` low-precision GEMMs, bytes: under per-tensor
/// scaling every scaled tensor ([`SCALED_TENSORS_PER_GEMM`]) keeps an fp32
/// scale and its inverse, and delayed scaling also its amax history of
/// [`AMAX_HISTORY_LEN`] fp32 values ([ref:te-fp8-primer]); this state is
/// saved in checkpoints. Block formats keep their scales with the data
/// (in [`weight_copy_bytes`] and the casts), row-wise ones with the rows.
pub fn scaling_state_bytes(lp: &LowPrecision, gemms: f64) -> f64 {
    let per_tensor = match (lp.precision, lp.recipe) {
        (Precision::Fp8, Fp8Recipe::Delayed) => 4.0 * AMAX_HISTORY_LEN as f64 + 8.0,
        (Precision::Fp8, Fp8Recipe::Current) | (Precision::Nvfp4, _) => 8.0,
        _ => 0.0,
    };
    gemms * SCALED_TENSORS_PER_GEMM * per_tensor
}

/// Low-precision GEMMs of the whole model: four per dense layer (QKV or
/// MLA's projection counted once, output projection, FC1, FC2), per MoE
/// layer two attention GEMMs, two per shared-expert MLP and two per routed
/// expert.
pub fn model_low_gemms(model: &Model) -> f64 {
    let moe = model
        .moe
        .as_ref()
        .map(|m| {
            let shared = if m.shared_experts > 0 { 2.0 } else { 0.0 };
            2.0 + shared + 2.0 * m.experts as f64
        })
        .unwrap_or(0.0);
    4.0 * model.dense_layers() as f64 + moe * model.moe_layers() as f64
}

/// Scaling state a checkpoint saves, bytes: [`scaling_state_bytes`] of
/// every low-precision GEMM ([`model_low_gemms`]) on each of the `tp`
/// tensor-parallel shards (Transformer Engine keeps one state per module
/// instance, [ref:te-fp8-primer]; data-parallel replicas save it once).
pub fn checkpoint_scaling_bytes(lp: &LowPrecision, model: &Model, tp: u32) -> f64 {
    scaling_state_bytes(lp, model_low_gemms(model) * tp as f64)
}

/// Bytes per token that saving the linears' inputs in the narrow format
/// removes from a layer's saved activations, split as
/// [`crate::cost::memory::ActivationTerms`] (replicated, sharded).
/// Transformer Engine keeps the input of every low-precision linear for the
/// weight gradient as its narrow column-wise copy instead of bf16
/// ([ref:te-fp8-primer]): the QKV input and the FC1 input (replicated
/// unless SP, `h` each) and the output-projection and FC2 inputs (sharded,
/// `q` and `f`); each saves `2 − b − scale` bytes per element. torchao saves
/// the bf16 inputs ([ref:torchao-float8]): nothing changes.
pub fn saved_input_bytes_per_token(
    model: &Model,
    include_mlp: bool,
    lp: &LowPrecision,
) -> (f64, f64) {
    if lp.kernels != Fp8Kernels::Te {
        return (0.0, 0.0);
    }
    let a = &model.architecture;
    let h = a.hidden as f64;
    let out = model.attn_out_width() as f64;
    let f = a.ffn as f64;
    let save = |row: f64| 2.0 - lp.operand_bytes - lp.act_scale_bytes(row);
    let mut replicated = save(h) * h;
    let mut sharded = save(out) * out;
    if include_mlp {
        replicated += save(h) * h;
        sharded += save(f) * f;
    }
    (replicated, sharded)
}

/// Bytes per element at which a low-precision linear keeps its input for
/// the weight gradient, rows of `row` elements: Transformer Engine saves the
/// narrow column-wise copy, `b + scale` ([ref:te-fp8-primer]; its
/// `GroupedLinear`, the experts' grouped GEMM, saves its quantized inputs
/// the same way); torchao and bf16 save the bf16 input, 2. The complement
/// of what [`saved_input_bytes_per_token`] removes per element.
///
/// Example: FP8 tensor-wise (current scaling), TE: 1 + 0 = 1 byte; FP8
/// block-wise, rows of 2048: 1 + 4/128 = 1.03125 bytes.
pub fn saved_input_element_bytes(lp: Option<&LowPrecision>, row: f64) -> f64 {
    match lp {
        Some(lp) if lp.kernels == Fp8Kernels::Te => lp.operand_bytes + lp.act_scale_bytes(row),
        _ => 2.0,
    }
}

/// Element bytes of the SP all-gathers (forward input gathers, backward
/// output-gradient gathers) over the bf16 two: Transformer Engine and
/// torchao's tensor-wise float8 tensor parallelism cast before gathering
/// and move the narrow copy ([ref:te-fp8-primer], [ref:torchao-float8]);
/// torchao's row-wise recipe gathers bf16 and casts after.
pub fn sp_gather_bytes_factor(lp: &LowPrecision) -> f64 {
    if lp.kernels == Fp8Kernels::Torchao && lp.recipe == Fp8Recipe::Rowwise {
        1.0
    } else {
        lp.operand_bytes / 2.0
    }
}

/// A pipeline rank's narrow weight copies and scaling state, bytes, from
/// the items it holds ([`ItemCost::low_params`], [`ItemCost::low_gemms`]):
/// `(copies + scaling state, scaling state)`, the sum of [`item_bytes`]
/// over the rank's items plus [`unit_bytes`]. The stage-split problem
/// (`crate::split`) adds the same two terms.
pub fn rank_memory(
    lp: &LowPrecision,
    zero: u8,
    items: &ItemCost,
    lc: &LayerCosts,
    hidden: u64,
) -> (f64, f64) {
    let scaling = scaling_state_bytes(lp, items.low_gemms);
    (
        item_bytes(lp, zero, items, hidden) + unit_bytes(lp, zero, lc, hidden),
        scaling,
    )
}

/// The part of [`rank_memory`] that grows with the items a rank holds:
/// Transformer Engine's cached weight copies below ZeRO-3
/// ([`weight_copy_bytes`]) and every GEMM's scaling state
/// ([`scaling_state_bytes`]), bytes.
pub fn item_bytes(lp: &LowPrecision, zero: u8, ic: &ItemCost, hidden: u64) -> f64 {
    let copies = match (lp.kernels, zero) {
        (Fp8Kernels::Te, 0..=2) => weight_copy_bytes(lp, ic.low_params, 0.0, zero, hidden as f64),
        _ => 0.0,
    };
    copies + scaling_state_bytes(lp, ic.low_gemms)
}

/// The part of [`rank_memory`] every rank holds whatever its layers: the
/// narrow copies of the gathered unit (two of the larger layer kind, as
/// [`crate::cost::zero3_largest_unit`]) under ZeRO-3 or with torchao, bytes.
pub fn unit_bytes(lp: &LowPrecision, zero: u8, lc: &LayerCosts, hidden: u64) -> f64 {
    match (lp.kernels, zero) {
        (Fp8Kernels::Te, 0..=2) => 0.0,
        _ => weight_copy_bytes(
            lp,
            0.0,
            2.0 * lc.dense.low_params.max(lc.moe.low_params),
            zero,
            hidden as f64,
        ),
    }
}

/// Expert all-to-all time over its bf16 price with narrow dispatch
/// ([ref:deepseek-v3] §3.3.3): of the four all-to-alls of an MoE layer, the
/// forward dispatch and the backward all-to-all of the gradients entering
/// the down-projections move `b + scale` bytes per element (1×128 tiles)
/// instead of 2; the forward combine and the dispatch's gradient stay bf16:
/// `(1 + (b + 4/128)/2)/2`, 0.758 for FP8. 1 without `--fp8-dispatch`.
pub fn dispatch_time_factor(lp: &LowPrecision) -> f64 {
    if !lp.dispatch {
        return 1.0;
    }
    let narrow = lp.operand_bytes + 4.0 / BLOCKWISE_TILE;
    (1.0 + narrow / 2.0) / 2.0
}

/// Parameter all-gather volumes when parameters are gathered narrow
/// (Megatron-LM `--fp8-param-gather`, torchtitan's FP8 all-gather under
/// FSDP2 [ref:torchao-float8]): the rank's low-precision linear weights
/// move at `b + scale` bytes per element, the rest (norms, embedding,
/// output layer) at the recipe's weight bytes; gradients are unchanged.
pub fn narrow_param_gather(
    v: DpVolumes,
    lp: &LowPrecision,
    rc: &RankCost,
    recipe: &Recipe,
    hidden: u64,
) -> DpVolumes {
    let per = lp.operand_bytes + lp.weight_scale_bytes(hidden as f64);
    let dense_low = (rc.items.low_params - rc.expert_params).clamp(0.0, rc.params);
    DpVolumes {
        params: (rc.params - dense_low) * recipe.weight_bytes + dense_low * per,
        expert_params: rc.expert_params * per,
        ..v
    }
}

/// ZeRO-3/FSDP gather bytes of one unit (item `it`) under a narrow
/// parameter gather, `(dense, expert)` bytes per rank: the unit's
/// low-precision weights at the format's operand bytes plus its block
/// scales (as [`narrow_param_gather`] prices the rank), the rest at the
/// recipe's weight bytes. Only the bytes narrow: each gather keeps its own
/// latency (`layer::fsdp_unit_collectives`).
///
/// Example: FP8 (1 byte, no block scales), bf16 recipe (2 bytes), a unit of
/// 100 M dense parameters of which 90 M in low-precision GEMMs, no
/// experts: `10 M · 2 + 90 M · 1 = 110` MB dense, 0 expert.
pub fn narrow_unit_gather_bytes(
    it: &crate::cost::layer::ItemCost,
    lp: &LowPrecision,
    recipe: &Recipe,
    hidden: u64,
) -> (f64, f64) {
    let per = lp.operand_bytes + lp.weight_scale_bytes(hidden as f64);
    let dense_low = (it.low_params - it.expert_params).clamp(0.0, it.params);
    (
        (it.params - dense_low) * recipe.weight_bytes + dense_low * per,
        it.expert_params * per,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp8(recipe: Fp8Recipe) -> LowPrecision {
        LowPrecision {
            precision: Precision::Fp8,
            recipe,
            kernels: Fp8Kernels::Te,
            param_gather: false,
            dispatch: false,
            gemm_flops: 1e15,
            operand_bytes: 1.0,
            amax_reads: amax_reads(Precision::Fp8, recipe),
            half_k: 0.0,
            rowwise_table: false,
        }
    }

    #[test]
    fn narrow_unit_gather_bytes_by_hand() {
        // The doc example: bf16 weights (2 bytes), FP8 (1 byte, per-tensor
        // delayed scaling: no block scales), 100 M dense parameters of
        // which 90 M in low-precision GEMMs: 10 M·2 + 90 M·1 = 110 MB.
        let it = crate::cost::layer::ItemCost {
            params: 100e6,
            low_params: 90e6,
            ..Default::default()
        };
        let lp = fp8(Fp8Recipe::Delayed);
        let r = crate::spec::Recipe::MEGATRON_BF16;
        assert_eq!(narrow_unit_gather_bytes(&it, &lp, &r, 4096), (110e6, 0.0));
        // With 8 M expert parameters (all low precision): the dense share is
        // 98 − 8 = 90 M again, the experts 8 M·1 byte.
        let it = crate::cost::layer::ItemCost {
            params: 100e6,
            low_params: 98e6,
            expert_params: 8e6,
            ..Default::default()
        };
        assert_eq!(narrow_unit_gather_bytes(&it, &lp, &r, 4096), (110e6, 8e6));
    }

    #[test]
    fn saved_input_element_bytes_te_and_bf16() {
        // bf16 (no low precision): 2 bytes.
        assert_eq!(saved_input_element_bytes(None, 2048.0), 2.0);
        let mut job = crate::spec::Job::new(8, 4096);
        job.precision = crate::spec::Precision::Fp8;
        job.fp8_kernels = Fp8Kernels::Te;
        // Tensor-wise current scaling: 1 byte, one scale per tensor.
        job.fp8_recipe = Fp8Recipe::Current;
        let lp = LowPrecision::unusable(&job);
        assert_eq!(saved_input_element_bytes(Some(&lp), 2048.0), 1.0);
        // Block-wise: one fp32 scale per 1×128 tile, 1 + 4/128.
        job.fp8_recipe = Fp8Recipe::Blockwise;
        let lp = LowPrecision::unusable(&job);
        assert_eq!(saved_input_element_bytes(Some(&lp), 2048.0), 1.03125);
        // torchao saves the bf16 input.
        job.fp8_kernels = Fp8Kernels::Torchao;
        job.fp8_recipe = Fp8Recipe::Current;
        let lp = LowPrecision::unusable(&job);
        assert_eq!(saved_input_element_bytes(Some(&lp), 2048.0), 2.0);
    }

    #[test]
    fn blockwise_scales_of_an_ffn_weight() {
        // 8192 × 28672 in 128 × 128 blocks: 64 · 224.
        assert_eq!(block_scale_count(8192, 28672, 128, 128), 14_336);
        // 1 × 128 tiles of 8192 tokens × 8192: 8192 · 64.
        assert_eq!(block_scale_count(8192, 8192, 1, 128), 524_288);
    }

    #[test]
    fn grouped_casts_split_by_split_unless_delayed() {
        // Qwen3-30B-A3B's expert fc1 on one rank: 65,536 routed pairs,
        // [65536 × 2048]·[2048 × 1536], 16 local experts, weights cast once
        // per step of 32 micro-batches (1/32 each).
        let lin = Linear {
            m: 65_536.0,
            n: 1536.0,
            k: 2048.0,
            expert: true,
            ..Linear::default()
        };
        let wc = 1.0 / 32.0;
        // Current scaling: the single-GEMM work with 16 weights
        // (weight_casts 16/32, kernels 2·(1 + min(1, 0.5)) = 3 forward, 2
        // backward), plus 15 more splits of 2 kernels each way: 33 and 32.
        let cur = fp8(Fp8Recipe::Current);
        let g = grouped_linear_cast(&lin, wc, 1.0, 16.0, &cur);
        let one = linear_cast_bytes(&lin, 16.0 * wc, 1.0, &cur);
        assert_eq!(g.forward_bytes, one.forward_bytes);
        assert_eq!(g.backward_bytes, one.backward_bytes);
        assert_eq!(one.forward_kernels, 3.0);
        assert_eq!(g.forward_kernels, 33.0);
        assert_eq!(g.backward_kernels, 32.0);
        // The weights' bytes: 16 experts' 2048·1536 at 1/32 cast per
        // micro-batch, 3,145,728 elements × (2·2 + 2·1) bytes each: half of
        // 16 · 18,874,368 on top of the input's 65,536·2048·6.
        let x = 65_536.0 * 2048.0 * 6.0;
        let w = 2048.0 * 1536.0 * 6.0;
        assert!((g.forward_bytes - (x + 0.5 * w)).abs() < 1.0, "{g:?}");
        // Delayed scaling: TE's fused multi-tensor cast, one kernel for all
        // 16 splits: no extra launches.
        let del = fp8(Fp8Recipe::Delayed);
        let g = grouped_linear_cast(&lin, wc, 1.0, 16.0, &del);
        assert_eq!(g, linear_cast_bytes(&lin, 16.0 * wc, 1.0, &del));
        assert_eq!(g.backward_kernels, 1.0);
        // One local expert: the plain linear.
        assert_eq!(
            grouped_linear_cast(&lin, wc, 1.0, 1.0, &cur),
            linear_cast_bytes(&lin, wc, 1.0, &cur)
        );
    }

    #[test]
    fn rowwise_table_reads_its_points_and_interpolates_in_log2() {
        // Measured points come back as printed: M 8192, K 4096, N 4096 is
        // 1.00; M 32768, K 1024, N 4096 is 0.77.
        assert!((torchao_rowwise_speedup(8192.0, 4096.0, 4096.0) - 1.00).abs() < 1e-12);
        assert!((torchao_rowwise_speedup(32768.0, 1024.0, 4096.0) - 0.77).abs() < 1e-12);
        // Between two N: M 32768, K 4096, N 1792, log₂ 1792 = 10.807:
        // 0.59 + 0.807·(0.81 − 0.59) = 0.7675 (the doc example).
        let f = 1792f64.log2() - 10.0;
        let want = 0.59 + f * (0.81 - 0.59);
        assert!((want - 0.7675).abs() < 5e-4);
        assert!((torchao_rowwise_speedup(32768.0, 4096.0, 1792.0) - want).abs() < 1e-12);
        // Between two K as well, at the midpoint in log₂ (K = 2896.3 =
        // 2^11.5, N = 2^12.5): the mean of the four corners
        // (0.91, 1.08; 1.04, 1.28) = 1.0775.
        let k = 2f64.powf(11.5);
        let n = 2f64.powf(12.5);
        assert!((torchao_rowwise_speedup(32768.0, k, n) - 1.0775).abs() < 1e-12);
        // Clamped: M beyond 32768 reads the 32768 row (the doc example,
        // FC1 fused at N = 3584: 0.81 + 0.807·0.23 = 0.9957), sizes below
        // 1024 the 1024 column.
        let fused = torchao_rowwise_speedup(98_304.0, 4096.0, 3584.0);
        assert!((fused - (0.81 + (3584f64.log2() - 11.0) * 0.23)).abs() < 1e-12);
        assert!((fused - 0.9957).abs() < 5e-4);
        assert_eq!(
            torchao_rowwise_speedup(98_304.0, 512.0, 128.0),
            torchao_rowwise_speedup(32768.0, 1024.0, 1024.0)
        );
        assert!((torchao_rowwise_speedup(98_304.0, 512.0, 128.0) - 0.51).abs() < 1e-12);
    }

    #[test]
    fn rowwise_table_prices_each_projection_at_its_own_shape() {
        // Flat rates (no depth curve): 1e15 FLOP/s bf16, 1e12 B/s HBM, no
        // launch cost. Llama-3.1-8B QKV at TP 8 and 98,304 tokens: wq
        // N = 512, wk and wv N = 128, K = 4096, each clamped to N = 1024 in
        // the table (0.59); the fused roofline's FLOPs split in proportion.
        let r = Rates::flat(1e12, 0.0);
        let m = 98_304.0;
        let qkv = Linear {
            m,
            n: 768.0,
            k: 4096.0,
            parts: [512.0, 128.0, 128.0],
            ..Linear::default()
        };
        let (f, b) = rowwise_table_pass_times(&qkv, &r);
        // wq: 2·98304·512·4096 = 4.123e11 FLOP → 0.4123 ms against
        // (98304·4096 + 4096·512 + 98304·512)·2 = 910,163,968 bytes →
        // 0.9102 ms of HBM: memory-bound in this toy profile; wk, wv:
        // (98304·4096 + 4096·128 + 98304·128)·2 = 831,520,768 bytes,
        // 0.8315 ms each.
        let wq = 2.0 * (m * 4096.0 + 4096.0 * 512.0 + m * 512.0) / 1e12;
        let wkv = 2.0 * (m * 4096.0 + 4096.0 * 128.0 + m * 128.0) / 1e12;
        let want = (wq + 2.0 * wkv) / 0.59;
        assert!((f - want).abs() < 1e-12 * want.max(1.0), "{f} vs {want}");
        // Backward: two GEMMs of the same bytes each.
        assert!((b - 2.0 * want).abs() < 1e-12, "{b} vs {}", 2.0 * want);
        // No parts: one GEMM of width n.
        let one = Linear {
            parts: [0.0; 3],
            ..qkv
        };
        let (f1, _) = rowwise_table_pass_times(&one, &r);
        let bytes = 2.0 * (m * 4096.0 + 4096.0 * 768.0 + m * 768.0) / 1e12;
        assert!((f1 - bytes / 0.59).abs() < 1e-12);
    }

    #[test]
    fn rowwise_table_linears_carry_no_separate_casts() {
        let lin = Linear {
            m: 98_304.0,
            n: 3584.0,
            k: 4096.0,
            gathered_input: true,
            ..Linear::default()
        };
        let mut lp = fp8(Fp8Recipe::Rowwise);
        lp.kernels = Fp8Kernels::Torchao;
        let priced = linear_cast_bytes(&lin, 1.0, 8.0, &lp);
        assert!(priced.forward_bytes > 0.0 && priced.backward_kernels > 0.0);
        lp.rowwise_table = true;
        assert_eq!(linear_cast_bytes(&lin, 1.0, 8.0, &lp), CastWork::default());
        // Expert GEMMs are not in the table: their casts stay.
        let expert = Linear {
            expert: true,
            ..lin
        };
        assert_eq!(
            linear_cast_bytes(&expert, 1.0, 8.0, &lp).forward_bytes,
            priced.forward_bytes
        );
    }

    #[test]
    fn current_scaling_reads_the_input_twice() {
        let x = 8192.0 * 8192.0;
        assert_eq!(
            cast_bytes(x, 2.0, 0.0, &fp8(Fp8Recipe::Current)),
            402_653_184.0
        );
        // Delayed scaling: one read, 4 + 2 bytes per element.
        assert_eq!(
            cast_bytes(x, 2.0, 0.0, &fp8(Fp8Recipe::Delayed)),
            268_435_456.0
        );
    }
}
