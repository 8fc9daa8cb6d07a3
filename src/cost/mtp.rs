//! Multi-token prediction (MTP): the D sequential modules DeepSeek-V3
//! trains beside the main model (DeepSeek-AI 2024, "DeepSeek-V3 Technical
//! Report", arXiv:2412.19437, §2.2).
//!
//! Module k takes the main model's (or module k−1's) hidden state of token
//! i and the embedding of token i+k, normalises both (RMSNorm), joins them
//! and projects them back to h with `M ∈ R^{h×2h}` (Eq. 21), runs one
//! transformer layer (Eq. 22), and predicts token i+k+1 through the shared
//! output head (Eq. 23) with a cross-entropy loss weighted by λ.
//!
//! Megatron-LM builds this as `MultiTokenPredictionLayer`
//! (`megatron/core/transformer/multi_token_prediction.py`): `enorm`,
//! `hnorm`, the column-parallel `eh_proj` (2h → h, no bias), a transformer
//! layer of the decoder's last layer spec (an MoE layer for DeepSeek-V3),
//! and a final norm; the logits and loss of every module are computed on
//! the same rank (`process_mtp_loss`). Without a custom pipeline layout all
//! MTP layers sit on the last pipeline stage (`mtp_on_this_rank`,
//! `get_mtp_num_layers_to_build`: the last virtual stage), which also keeps
//! a copy of the word embedding when p > 1
//! (`language_module.py`, `setup_embeddings_and_output_layer`: "we also
//! need to maintain duplicated embedding weights in mtp process stage").
//!
//! [`crate::cost::layer::layer_costs`] prices the module as part of the
//! last stage's output item (so the stage splits and every bound see it as
//! they see the output layer) from the terms below; the FLOPs of the MFU
//! convention add [`model_flops_per_step`].

use crate::spec::Model;

/// Model FLOPs per token of one MTP layer beyond its transformer layer,
/// forward and backward: `6·(3h + 2h²)` for the three norms and the
/// projection, plus `6·h·V` for its pass through the output head.
///
/// Source: Megatron-LM `megatron/training/training.py`
/// `num_floating_point_operations` ("MTP norms and proj": `3·h + 2·h²`
/// times the forward-backward and FMA factors 3·2; "Logit": `h·V` times
/// `mtp_num_layers + 1`). Megatron takes the padded V; meshplan's model
/// FLOPs take the card's V throughout ([`crate::cost::compute::model_flops_per_step`]).
///
/// Worked example, DeepSeek-V3 (h = 7168, V = 129,280):
/// `6·(21,504 + 102,760,448) = 616,691,712` plus
/// `6·926,679,040 = 5,560,074,240`, in all 6,176,765,952 FLOPs per token.
pub fn flops_per_token_beyond_layer(model: &Model) -> f64 {
    let a = &model.architecture;
    let h = a.hidden as f64;
    6.0 * (3.0 * h + model.mtp_projection_params() + h * a.vocab as f64)
}

/// Model FLOPs of one step of all D MTP layers (MFU convention, recompute
/// not counted): each is one more transformer layer of the main model's
/// last kind in Megatron-LM's count (`num_floating_point_operations` adds
/// `mtp_num_layers` to the MoE or dense layers by `last_layer_is_moe`, and
/// to the layers of the attention terms) plus
/// [`flops_per_token_beyond_layer`]. `layer_per_token` is the transformer
/// layer's GEMM FLOPs per token over 6 (its parameters a token meets,
/// [`crate::cost::compute::layer_flop_params`]) and `attention_core` its
/// causal attention-core forward FLOPs for one sequence
/// ([`crate::cost::compute::attention_core_flops`]).
pub fn model_flops_per_step(
    model: &Model,
    global_batch: f64,
    seq: f64,
    layer_per_token: f64,
    attention_core: f64,
) -> f64 {
    let d = model.architecture.mtp_layers as f64;
    if d == 0.0 {
        return 0.0;
    }
    let tokens = global_batch * seq;
    d * (tokens * (6.0 * layer_per_token + flops_per_token_beyond_layer(model))
        + 3.0 * global_batch * attention_core)
}

/// Element-wise bytes per token of one MTP layer's forward beyond its
/// transformer layer, bf16: `enorm` and `hnorm` read and write h values
/// each (2·4h), the concatenation reads and writes 2h (8h), the final norm
/// reads and writes h (4h): `20·h` bytes. The backward moves twice as much,
/// as for a layer's element-wise work ([`crate::cost::compute::layer_backward`]).
///
/// Worked example, h = 7168: 143,360 bytes per token.
pub fn elementwise_bytes_per_token(model: &Model) -> f64 {
    20.0 * model.architecture.hidden as f64
}

/// Activation bytes per token one MTP layer saves beyond its transformer
/// layer, bf16, before the division by T under sequence parallelism: the
/// inputs of `enorm` and `hnorm` (2h), of the projection (the joined 2h),
/// of the final norm (h) and of the output head (h): `6·h` values, `12·h`
/// bytes. The projection's input is saved as a bf16 tensor even under a
/// low-precision recipe (an overstatement of h bytes per token in FP8).
///
/// Worked example, h = 7168: 86,016 bytes per token.
pub fn saved_bytes_per_token(model: &Model) -> f64 {
    12.0 * model.architecture.hidden as f64
}

/// Tensor-parallel collectives of one MTP layer's projection per pass, in
/// all-reduces of the layer's `t·h` bf16 activation: the column-parallel
/// `eh_proj` all-gathers its `t×2h` input under SP (one all-reduce's
/// volume; without SP its backward all-reduces the `2h`-wide input
/// gradient instead, counted the same) and gathers its `h/T`-wide output
/// back to `t×h` (half an all-reduce), Megatron-LM `_concat_embeddings`
/// (`gather_from_tensor_model_parallel_region`, then
/// `scatter_to_sequence_parallel_region`, which is a local split).
pub const PROJECTION_TP_COLLECTIVES_PER_PASS: f64 = 1.5;

/// Parameters of the word-embedding copy the last stage keeps for MTP when
/// p > 1 and the embedding is untied (a tied model's last stage already
/// holds it as its output layer): `V_pad·h/T`; 0 otherwise. Megatron-LM
/// `language_module.py`: "we also need to maintain duplicated embedding
/// weights in mtp process stage"; its gradients are all-reduced with the
/// first stage's over the embedding group (`get_embedding_ranks` adds the
/// MTP ranks), a transfer not priced.
pub fn embedding_copy_params(model: &Model, padded_vocab: f64, tp: f64, pp: u32) -> f64 {
    let a = &model.architecture;
    if a.mtp_layers == 0 || pp <= 1 || a.tied_embeddings {
        return 0.0;
    }
    padded_vocab * a.hidden as f64 / tp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::catalog::Catalog;

    fn dsv3() -> Model {
        Catalog::shipped()
            .unwrap()
            .model("deepseek-v3")
            .unwrap()
            .clone()
    }

    #[test]
    fn deepseek_v3_flops_beyond_the_layer() {
        // Doc comment: 6·(3·7168 + 2·7168²) + 6·7168·129,280.
        let m = dsv3();
        assert_eq!(flops_per_token_beyond_layer(&m), 6_176_765_952.0);
        assert_eq!(elementwise_bytes_per_token(&m), 143_360.0);
        assert_eq!(saved_bytes_per_token(&m), 86_016.0);
    }

    #[test]
    fn embedding_copy_only_on_a_separate_last_stage() {
        let m = dsv3();
        // V_pad = 129,280 at T = 2 (a multiple of 256), h = 7168.
        assert_eq!(
            embedding_copy_params(&m, 129_280.0, 2.0, 8),
            129_280.0 * 7168.0 / 2.0
        );
        assert_eq!(embedding_copy_params(&m, 129_280.0, 2.0, 1), 0.0);
        let mut none = m.clone();
        none.architecture.mtp_layers = 0;
        assert_eq!(embedding_copy_params(&none, 129_280.0, 2.0, 8), 0.0);
    }
}
