/*
 * checkpoint_write.h: one MoE layer written as a checkpoint directory that the loader
 * (checkpoint.h) reads back, for round trips in the harness and the tests.
 *
 * Rules:
 *   - dir/config.json in the original spelling (hidden_size, intermediate_size as the MoE
 *     width, n_routed_experts, num_experts_per_tok, n_shared_experts, route_scale,
 *     use_gate_bias, use_global_scale) with a quantization_config whose exclude list names the
 *     layer's two expert weights when they are bf16;
 *   - dir/model.safetensors with the layer's tensors under model.llm.layers.{layer}.mlp.
 *     (contract.md [checkpoint.tensors] names), MXFP4 or bf16 routed experts (NVFP4 is not
 *     written);
 *   - gate.global_scale as F32, or as BF16 when asked (its value must then be a bf16 value,
 *     else the round trip would change it: refused); MXFP4 scales flattened [R*rows, blocks]
 *     or, when asked, [R, rows, blocks].
 */
#ifndef INKLING_CHECKPOINT_WRITE_H
#define INKLING_CHECKPOINT_WRITE_H

#include "moe.h"

#include <stdbool.h>

typedef struct {
    int layer;              /* the layer index in the tensor names */
    bool global_scale_bf16; /* gate.global_scale stored as BF16 instead of F32 */
    bool scales_3d;         /* MXFP4 scales as [R, rows, blocks] */
} moe_checkpoint_write_opts;

/* Writes cfg and w (full layer) into the existing directory dir. */
moe_status moe_checkpoint_write_layer(const char *dir, const moe_config *cfg, const moe_weights *w,
                                      const moe_checkpoint_write_opts *o, moe_error *err);

#endif
