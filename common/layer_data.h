/*
 * layer_data.h: full-layer weights that own their memory, and random ones for tests,
 * the harness and benchmarks.
 *
 * Rules of the random layer (deterministic from the seed, counter-based: see numeric.h):
 *   - x ~ N(0, 1) rounded to bf16; gate rows ~ N(0, 1/D) in bf16, so logits are O(1);
 *   - bf16 experts ~ N(0, 1/D) (w13) and N(0, 1/I) (w2);
 *   - MXFP4 experts: uniform random codes (all 16 appear) with scale bytes around
 *     127 - log2(sqrt(n)) - 2, so decoded weights have a magnitude like the bf16 ones;
 *   - NVFP4 experts: uniform random codes, E4M3 scale bytes 0x30..0x40 (0.5 to 2), one scale2
 *     per expert near 1 / (2.93 sqrt(n)), so decoded weights have the same magnitude;
 *   - gate bias ~ N(0, 0.05^2), global_scale uniform in [0.5, 2].
 */
#ifndef INKLING_LAYER_DATA_H
#define INKLING_LAYER_DATA_H

#include "moe.h"

typedef struct {
    moe_config cfg;
    moe_weights w;        /* a view of the arrays below, ready for moe_shard_build */
    uint16_t *gate_w;     /* [R+S, D] */
    float *gate_bias;     /* [R] or NULL */
    uint8_t *w13_mx;      /* [R, 2I, D/2] */
    uint8_t *w13_scale;   /* [R, 2I, D/B] (B: the format's block, 32 or 16) */
    uint8_t *w2_mx;       /* [R, D, I/2] */
    uint8_t *w2_scale;    /* [R, D, I/B] */
    float *w13_scale2;    /* [R] (NVFP4) */
    float *w2_scale2;     /* [R] (NVFP4) */
    uint16_t *w13_bf16;   /* [R, 2I, D] */
    uint16_t *w2_bf16;    /* [R, D, I] */
    uint16_t *sink_w13;   /* [S, 2I, D] */
    uint16_t *sink_w2;    /* [S, D, I] */
} moe_layer_data;

/* Allocates zeroed arrays for cfg (only those its routed format needs) and points w at them. */
moe_status moe_layer_data_alloc(const moe_config *cfg, moe_layer_data *ld, moe_error *err);
/* Allocates and fills with random weights as described above. */
moe_status moe_layer_data_random(const moe_config *cfg, uint64_t seed, moe_layer_data *ld,
                                 moe_error *err);
void moe_layer_data_free(moe_layer_data *ld);

/* x [T, D] bf16 ~ N(0, 1). */
void moe_random_input(int T, int D, uint64_t seed, uint16_t *x);

#endif
