//! The largest sizes meshplan accepts, in one place.
//!
//! Every size a model card, a cluster profile, a plan file or a flag may give
//! is checked against these bounds when it is read, before any pricing, so
//! the work of a command is bounded by the limits and never by a raw value:
//! an absurd `--vpp` or `--pp` is rejected in microseconds, and every product
//! of sizes the cost model forms (the mesh D·T·p·C, the chunks p·v, the
//! expert block E·ETP, the tokens per step B·s, a split's sum, a padded
//! vocabulary) fits its integer type. The bounds are far above any real
//! training job: clusters of hundreds of thousands of GPUs stay supported.

use crate::layout::Layout;

/// GPUs in a job or a cluster, and every parallel size D, T, p, C, E, ETP
/// and their products D·T·p·C and E·ETP: 2^20 = 1,048,576 (the largest
/// training clusters announced hold a few hundred thousand).
pub const MAX_GPUS: u64 = 1 << 20;

/// Any one parallel size, micro-batch or virtual stage count given as a
/// flag or a `key=value`: at most [`MAX_GPUS`].
pub const MAX_SIZE: u32 = MAX_GPUS as u32;

/// Transformer layers of a model card: 2^14 = 16,384 (the largest shipped
/// card has 128). The pipeline chunks p·v of a layout are at most the
/// model's layers: every chunk holds at least one layer.
pub const MAX_LAYERS: u32 = 1 << 14;

/// Multi-token-prediction layers of a model card (`mtp_layers`): 64
/// (published models train with one).
pub const MAX_MTP_LAYERS: u32 = 64;

/// Hidden size, FFN width, head width and every other width of a model
/// card (`hidden`, `ffn`, `head_dim`, `moe.expert_ffn`, the MLA ranks):
/// 2^20.
pub const MAX_WIDTH: u64 = 1 << 20;

/// Attention heads and key/value heads: 2^16.
pub const MAX_HEADS: u32 = 1 << 16;

/// Vocabulary size: 2^24 = 16,777,216 (real tokenizers hold at most a few
/// hundred thousand entries).
pub const MAX_VOCAB: u64 = 1 << 24;

/// Routed experts of a MoE card: 2^16.
pub const MAX_EXPERTS: u32 = 1 << 16;

/// Sequence length s and a card's `max_seq`, tokens: 2^24 = 16,777,216.
pub const MAX_SEQ: u64 = 1 << 24;

/// Global batch B, sequences: 2^24.
pub const MAX_GLOBAL_BATCH: u64 = 1 << 24;

/// Tokens per step B·s: 2^40 ≈ 1.1 × 10¹² (real jobs step a few tens of
/// millions).
pub const MAX_TOKENS_PER_STEP: u64 = 1 << 40;

/// A `--tokens` budget: 10¹⁸ tokens (the largest published pre-training
/// runs use a few times 10¹³).
pub const MAX_TOKEN_BUDGET: f64 = 1e18;

/// `--moe-imbalance`, the busiest expert rank's load over the mean: at most
/// 1024 (measured imbalances of trained routers are below 2; beyond the
/// number of expert ranks no routing can reach).
pub const MAX_MOE_IMBALANCE: f64 = 1024.0;

/// Every number of a GPU or cluster profile (GiB, GB/s, Gbit/s, TFLOP/s,
/// µs, hours): at most 10⁹, a thousand times beyond any real part, so
/// no profile prices a step at 10³⁰⁰ seconds.
pub const MAX_PROFILE_VALUE: f64 = 1e9;

/// Names echoed in messages are cut to this many characters.
pub const MAX_NAME_ECHO: usize = 64;

/// `value` if it is at most `max`, else a sentence naming `what`, the value
/// and the limit.
///
/// # Errors
/// The sentence.
pub fn at_most(what: &str, value: u64, max: u64) -> Result<u64, String> {
    if value > max {
        Err(format!(
            "{what} = {value} exceeds meshplan's limit of {max} (see src/limits.rs)"
        ))
    } else {
        Ok(value)
    }
}

/// `name` cut to [`MAX_NAME_ECHO`] characters (with `…` and the full length
/// when cut), for messages that echo what a user typed.
pub fn echo(name: &str) -> String {
    let n = name.chars().count();
    if n <= MAX_NAME_ECHO {
        name.to_string()
    } else {
        let head: String = name.chars().take(MAX_NAME_ECHO).collect();
        format!("{head}… ({n} characters)")
    }
}

/// Check the sizes of a layout given by a user (flags, a plan file, a
/// `--why-not` question) against the limits and against the model's
/// `layers`: every size positive and at most [`MAX_SIZE`], the mesh
/// D·T·p·C and the expert block E·ETP at most [`MAX_GPUS`], p·v at most
/// `layers`, and an explicit split of at most `layers` entries, none above
/// `layers`. Whether
/// the mesh equals the job's GPU count, and the split's sum, are rules
/// (`mesh-size`, `split`), not limits: those layouts are priced and
/// rejected with reasons.
///
/// # Errors
/// A sentence naming the size, its value and the limit.
pub fn check_layout(l: &Layout, layers: u32) -> Result<(), String> {
    for (name, v) in [
        ("D", l.dp),
        ("T", l.tp),
        ("p", l.pp),
        ("C", l.cp),
        ("E", l.ep),
        ("ETP", l.etp),
        ("v", l.vpp),
        ("micro-batch b", l.micro_batch),
    ] {
        if v == 0 {
            return Err(format!("{name} = 0: every size must be at least 1"));
        }
        at_most(name, v as u64, MAX_SIZE as u64)?;
    }
    if l.zero > 3 {
        return Err(format!(
            "ZeRO stage {}: the stages are 0 (none), 1 (optimizer), 2 (+ gradients) and 3 (+ parameters)",
            l.zero
        ));
    }
    let mesh = l.dp as u64 * l.tp as u64 * l.pp as u64 * l.cp as u64;
    at_most("the mesh D·T·p·C", mesh, MAX_GPUS)?;
    at_most(
        "the expert block E·ETP",
        l.ep as u64 * l.etp as u64,
        MAX_GPUS,
    )?;
    let chunks = l.pp as u64 * l.vpp as u64;
    if chunks > layers as u64 {
        return Err(format!(
            "p·v = {}·{} = {chunks} pipeline stages, but the model has only {layers} transformer layers: every stage needs at least one layer",
            l.pp, l.vpp
        ));
    }
    if let Some(s) = &l.split {
        if s.len() as u64 > layers as u64 {
            return Err(format!(
                "the split has {} entries, more than the model's {layers} layers",
                s.len()
            ));
        }
        if let Some(x) = s.iter().find(|&&x| x > layers) {
            return Err(format!(
                "split entry {x} exceeds the model's {layers} layers"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_beyond_the_limits_are_named() {
        let ok = Layout::dense(8, 8, 1, 1);
        assert_eq!(check_layout(&ok, 80), Ok(()));
        // Two pipeline stages with v chunks each; 64-way DP with the given
        // expert sizes and ZeRO stage.
        let interleaved = |vpp| Layout {
            vpp,
            ..Layout::dense(1, 1, 2, 1)
        };
        let dp64 = |ep, etp, zero| Layout {
            ep,
            etp,
            zero,
            ..Layout::dense(64, 1, 1, 1)
        };
        // (layout, the model's layers, the refusal).
        let cases = [
            // p·v = 2·2^31 = 2^32 wraps a u32 to 0; in u64 it is 4294967296.
            (
                interleaved(1 << 31),
                80,
                "v = 2147483648 exceeds meshplan's limit of 1048576 (see src/limits.rs)",
            ),
            (
                interleaved(41),
                80,
                "p·v = 2·41 = 82 pipeline stages, but the model has only 80 transformer layers: every stage needs at least one layer",
            ),
            // E·ETP = 2^16·2^16 = 2^32 > 2^20.
            (
                dp64(1 << 16, 1 << 16, 1),
                32,
                "the expert block E·ETP = 4294967296 exceeds meshplan's limit of 1048576 (see src/limits.rs)",
            ),
            // A hand-edited plan file with `"zero": 4` (the reviewer's panic
            // in plan_file.rs, which sliced three sharded-state names by it).
            (
                dp64(1, 1, 4),
                32,
                "ZeRO stage 4: the stages are 0 (none), 1 (optimizer), 2 (+ gradients) and 3 (+ parameters)",
            ),
        ];
        for (l, layers, want) in cases {
            assert_eq!(check_layout(&l, layers), Err(want.into()), "{}", l.short());
        }
        // 2^10 · 2^10 · 2 > 2^20.
        let l = Layout::dense(1 << 10, 1 << 10, 2, 1);
        assert!(
            check_layout(&l, 80)
                .unwrap_err()
                .contains("D·T·p·C = 2097152")
        );
    }

    #[test]
    fn long_names_are_cut() {
        assert_eq!(echo("70b"), "70b");
        let long = "x".repeat(100_000);
        let e = echo(&long);
        assert_eq!(
            e.chars().count(),
            64 + "… (100000 characters)".chars().count()
        );
        assert!(e.ends_with("… (100000 characters)"));
    }
}
