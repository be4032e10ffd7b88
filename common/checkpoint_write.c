/*
 * checkpoint_write.c: one MoE layer as a checkpoint directory (rules in checkpoint_write.h).
 */
#include "checkpoint_write.h"

#include "numeric.h"
#include "safetensors.h"

#include <stdio.h>
#include <string.h>

static moe_status write_config(const char *dir, const moe_config *c, int layer, moe_error *err) {
    char path[4096], excl[256] = "";
    if (c->routed_format == MOE_ROUTED_BF16)
        snprintf(excl, sizeof excl,
                 ", \"model.llm.layers.%d.mlp.experts.w13_weight\", "
                 "\"model.llm.layers.%d.mlp.experts.w2_weight\"", layer, layer);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return moe_fail(err, MOE_ERR_IO, "checkpoint write: cannot create %s", path);
    int n = fprintf(f,
                    "{\"hidden_size\": %d, \"intermediate_size\": %d, \"n_routed_experts\": %d,\n"
                    " \"num_experts_per_tok\": %d, \"n_shared_experts\": %d, \"route_scale\": %.9g,\n"
                    " \"use_gate_bias\": %s, \"use_global_scale\": %s,\n"
                    " \"quantization_config\": {\"quant_method\": \"quark\", \"exclude\": [\"lm_head\"%s]}}\n",
                    c->D, c->I, c->R, c->K, c->S, (double)c->route_scale,
                    c->has_gate_bias ? "true" : "false", c->has_global_scale ? "true" : "false", excl);
    if (fclose(f) != 0 || n < 0) return moe_fail(err, MOE_ERR_IO, "checkpoint write: cannot write %s", path);
    return MOE_OK;
}

moe_status moe_checkpoint_write_layer(const char *dir, const moe_config *c, const moe_weights *w,
                                      const moe_checkpoint_write_opts *o, moe_error *err) {
    if (c->routed_format != MOE_ROUTED_MXFP4 && c->routed_format != MOE_ROUTED_BF16)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "checkpoint write: routed format %d is not written",
                        (int)c->routed_format);
    const float gs = w->global_scale;
    const uint16_t gs_bf16 = moe_f32_to_bf16(gs);
    if (c->has_global_scale && o->global_scale_bf16 && moe_bf16_to_f32(gs_bf16) != gs)
        return moe_fail(err, MOE_ERR_VALUE, "checkpoint write: global_scale %.9g is not a bf16 value",
                        (double)gs);
    moe_status st = write_config(dir, c, o->layer, err);
    if (st) return st;
    const int64_t D = c->D, I = c->I, R = c->R, S = c->S;
    static const char *const suffix[9] = {
        "gate.weight", "gate.bias", "gate.global_scale", "experts.w13_weight",
        "experts.w13_weight_scale", "experts.w2_weight", "experts.w2_weight_scale",
        "shared_experts.shared_w13_weight", "shared_experts.shared_w2_weight"};
    char names[9][160];
    moe_st_entry e[9];
    int n = 0;
#define ADD(i, dt, nd, ptr, ...)                                                                   \
    do {                                                                                           \
        snprintf(names[n], sizeof names[n], "model.llm.layers.%d.mlp.%s", o->layer, suffix[i]);    \
        e[n] = (moe_st_entry){names[n], dt, nd, __VA_ARGS__, ptr};                                 \
        n++;                                                                                       \
    } while (0)
    ADD(0, MOE_ST_BF16, 2, w->gate_w, {R + S, D});
    if (c->has_gate_bias) ADD(1, MOE_ST_F32, 1, w->gate_bias, {R});
    if (c->has_global_scale && o->global_scale_bf16) ADD(2, MOE_ST_BF16, 1, &gs_bf16, {1});
    if (c->has_global_scale && !o->global_scale_bf16) ADD(2, MOE_ST_F32, 1, &gs, {1});
    if (c->routed_format == MOE_ROUTED_MXFP4) {
        ADD(3, MOE_ST_U8, 3, w->w13_mx, {R, 2 * I, D / 2});
        if (o->scales_3d) ADD(4, MOE_ST_U8, 3, w->w13_scale, {R, 2 * I, D / 32});
        else ADD(4, MOE_ST_U8, 2, w->w13_scale, {R * 2 * I, D / 32});
        ADD(5, MOE_ST_U8, 3, w->w2_mx, {R, D, I / 2});
        if (o->scales_3d) ADD(6, MOE_ST_U8, 3, w->w2_scale, {R, D, I / 32});
        else ADD(6, MOE_ST_U8, 2, w->w2_scale, {R * D, I / 32});
    } else {
        ADD(3, MOE_ST_BF16, 3, w->w13_bf16, {R, 2 * I, D});
        ADD(5, MOE_ST_BF16, 3, w->w2_bf16, {R, D, I});
    }
    ADD(7, MOE_ST_BF16, 3, w->sink_w13, {S, 2 * I, D});
    ADD(8, MOE_ST_BF16, 3, w->sink_w2, {S, D, I});
#undef ADD
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return moe_st_write(path, e, n, err);
}
