/*
 * shard.c: configuration checks and the slab one rank holds (contract.md [sharding]).
 *
 * Rules:
 *   - TP n: rank r holds, for every routed expert and every sink, the contiguous slab of
 *     interleaved w13 rows [r*2*I/n, (r+1)*2*I/n) (gate/up pairs stay together) and w2
 *     columns [r*I/n, (r+1)*I/n). A block format needs I/n to be a multiple of its block (32
 *     MXFP4, 16 NVFP4); NVFP4's per-expert scale2 is replicated on every rank.
 *   - EP n: E_pad = R + ((-R) mod n); rank r owns experts [r*E_pad/n, (r+1)*E_pad/n) at full
 *     width; ids >= R are zero padding experts. Sinks are TP-sliced over the same n ranks.
 *   - pad_inter_to P: each rank's intermediate width is rounded up to a multiple of P; the
 *     added channels hold zero codes and zero scale bytes (E8M0 2^-127, E4M3 0: finite), so
 *     they add 0; EP padding experts are all zero (NVFP4 scale2 0).
 *   - The gate, bias and global scale are copied whole: every rank routes every token.
 */
#include "moe.h"
#include "numeric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOE_MAX_DIM (1 << 20)

moe_status moe_config_validate(const moe_config *cfg, moe_error *err) {
    if (!cfg) return moe_fail(err, MOE_ERR_ARG, "config: NULL");
    if (cfg->D <= 0 || cfg->D > MOE_MAX_DIM)
        return moe_fail(err, MOE_ERR_CONFIG, "config field hidden_size: %d is not in [1, %d]",
                        cfg->D, MOE_MAX_DIM);
    if (cfg->I <= 0 || cfg->I > MOE_MAX_DIM)
        return moe_fail(err, MOE_ERR_CONFIG, "config field intermediate_size: %d is not in [1, %d]",
                        cfg->I, MOE_MAX_DIM);
    if (cfg->R <= 0 || cfg->R > 65536)
        return moe_fail(err, MOE_ERR_CONFIG, "config field n_routed_experts: %d is not in [1, 65536]",
                        cfg->R);
    if (cfg->K <= 0 || cfg->K > cfg->R)
        return moe_fail(err, MOE_ERR_CONFIG,
                        "config field num_experts_per_tok: K = %d must be in [1, R = %d]", cfg->K,
                        cfg->R);
    if (cfg->S < 0 || cfg->S > 64)
        return moe_fail(err, MOE_ERR_CONFIG, "config field n_shared_experts: %d is not in [0, 64]",
                        cfg->S);
    if (!isfinite(cfg->route_scale))
        return moe_fail(err, MOE_ERR_CONFIG, "config field route_scale: not finite");
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    if (!fi)
        return moe_fail(err, MOE_ERR_CONFIG, "config: unknown routed weight format %d",
                        (int)cfg->routed_format);
    if (fi->block && (cfg->D % fi->block || cfg->I % fi->block))
        return moe_fail(err, MOE_ERR_CONFIG,
                        "config fields hidden_size/intermediate_size: %s experts need both to be "
                        "multiples of %d (D = %d, I = %d)",
                        fi->name, fi->block, cfg->D, cfg->I);
    return MOE_OK;
}

static int round_up(int v, int multiple) {
    return multiple > 0 ? (v + multiple - 1) / multiple * multiple : v;
}

moe_status moe_split_validate(const moe_config *cfg, const moe_split *split, moe_error *err) {
    moe_status st = moe_config_validate(cfg, err);
    if (st) return st;
    if (!split) return moe_fail(err, MOE_ERR_ARG, "split: NULL");
    if (split->n < 1 || split->n > 1024)
        return moe_fail(err, MOE_ERR_CONFIG, "split: rank count %d is not in [1, 1024]", split->n);
    if (split->rank < 0 || split->rank >= split->n)
        return moe_fail(err, MOE_ERR_CONFIG, "split: rank %d is not in [0, %d)", split->rank,
                        split->n);
    if (split->pad_inter_to < 0 || split->pad_inter_to > MOE_MAX_DIM)
        return moe_fail(err, MOE_ERR_CONFIG, "split: pad_inter_to %d is not in [0, %d]",
                        split->pad_inter_to, MOE_MAX_DIM);
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    const int B = fi->block;
    if (B && split->pad_inter_to % B)
        return moe_fail(err, MOE_ERR_CONFIG,
                        "split: pad_inter_to %d must be a multiple of %d for %s experts",
                        split->pad_inter_to, B, fi->name);
    switch (split->kind) {
    case MOE_SPLIT_NONE:
        if (split->n != 1)
            return moe_fail(err, MOE_ERR_CONFIG, "split: an unsplit layer has 1 rank, not %d",
                            split->n);
        break;
    case MOE_SPLIT_TP:
        if (cfg->I % split->n)
            return moe_fail(err, MOE_ERR_CONFIG,
                            "split: TP %d does not divide intermediate_size %d", split->n, cfg->I);
        if (B && (cfg->I / split->n) % B)
            return moe_fail(err, MOE_ERR_CONFIG,
                            "split: TP %d gives I/n = %d, not a multiple of %d as %s w2 needs",
                            split->n, cfg->I / split->n, B, fi->name);
        break;
    case MOE_SPLIT_EP:
        if (cfg->S > 0 && cfg->I % split->n)
            return moe_fail(err, MOE_ERR_CONFIG,
                            "split: EP %d TP-slices the sinks, but does not divide "
                            "intermediate_size %d",
                            split->n, cfg->I);
        break;
    default:
        return moe_fail(err, MOE_ERR_CONFIG, "split: unknown kind %d", (int)split->kind);
    }
    return MOE_OK;
}

int moe_local_expert_count(const moe_config *cfg, const moe_split *split) {
    if (split->kind != MOE_SPLIT_EP) return cfg->R;
    int e_pad = cfg->R + (split->n - cfg->R % split->n) % split->n;
    return e_pad / split->n;
}

/* Copies rows [row0, row0+rows) x columns [col0, col0+cols) (in elements of elem bytes) of a
 * source matrix with src_cols columns into a zeroed destination with dst_cols >= cols columns. */
static void copy_block(uint8_t *dst, size_t dst_cols, const uint8_t *src, size_t src_cols,
                       size_t row0, size_t rows, size_t col0, size_t cols, size_t elem) {
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + r * dst_cols * elem, src + ((row0 + r) * src_cols + col0) * elem, cols * elem);
}

/* Checks the MXFP4 blocks of a local [rows, cols] slab: no NaN scale byte, no block whose
 * largest code overflows fp32 once scaled. Reports global coordinates. Works on whole bytes:
 * E2M1 magnitudes grow with the low three bits of a code, so a block's largest magnitude is
 * the largest (code & 7) over its 32 nibbles, and the largest safe scale byte for each of the
 * eight magnitudes is computed once. */
static moe_status check_mx_slab(const char *tensor, int expert, const uint8_t *packed,
                                const uint8_t *scales, int rows, int cols, int row_offset,
                                int block_offset, moe_error *err) {
    uint8_t byte_mag[256]; /* largest (code & 7) of the byte's two nibbles */
    int max_byte[8];       /* largest finite-safe E8M0 byte for magnitude index m */
    for (int v = 0; v < 256; v++) {
        int lo = v & 7, hi = (v >> 4) & 7;
        byte_mag[v] = (uint8_t)(lo > hi ? lo : hi);
    }
    for (int m = 0; m < 8; m++) max_byte[m] = m == 0 ? 254 : moe_e8m0_max_finite_byte(moe_e2m1_to_f32((uint8_t)m));
    const int blocks = cols / 32;
    for (int r = 0; r < rows; r++) {
        for (int b = 0; b < blocks; b++) {
            uint8_t s = scales[(size_t)r * blocks + b];
            if (s == 0xFF)
                return moe_fail(err, MOE_ERR_VALUE,
                                "tensor %s_scale: NaN E8M0 byte 0xFF at [expert %d, row %d, block %d]",
                                tensor, expert, r + row_offset, b + block_offset);
            const uint8_t *p = packed + (size_t)r * (cols / 2) + (size_t)b * 16;
            uint8_t m = 0;
            for (int i = 0; i < 16; i++) m = byte_mag[p[i]] > m ? byte_mag[p[i]] : m;
            if (s > max_byte[m])
                return moe_fail(err, MOE_ERR_VALUE,
                                "tensor %s_scale: E8M0 byte 0x%02X at [expert %d, row %d, block %d] "
                                "makes a weight of magnitude %g overflow fp32",
                                tensor, s, expert, r + row_offset, b + block_offset,
                                (double)moe_e2m1_to_f32(m));
        }
    }
    return MOE_OK;
}

/* Checks the NVFP4 blocks of a local [rows, cols] slab (no NaN E4M3 byte) and the expert's
 * scale2 (finite, not negative, and the slab's largest |code * scale| times it finite in
 * fp32). Reports global coordinates. */
static moe_status check_nv_slab(const char *tensor, int expert, const uint8_t *packed,
                                const uint8_t *scales, float scale2, int rows, int cols,
                                int row_offset, int block_offset, moe_error *err) {
    if (!(scale2 >= 0.0f) || !isfinite(scale2))
        return moe_fail(err, MOE_ERR_VALUE,
                        "tensor %s.scale2: value %g at [expert %d] is %s (scale2 must be finite "
                        "and >= 0)",
                        tensor, (double)scale2, expert, isfinite(scale2) ? "negative" : "not finite");
    const int blocks = cols / 16;
    float largest = 0.0f;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < blocks; b++) {
            uint8_t s = scales[(size_t)r * blocks + b];
            if ((s & 0x7Fu) == 0x7Fu)
                return moe_fail(err, MOE_ERR_VALUE,
                                "tensor %s.scale: NaN E4M3 byte 0x%02X at [expert %d, row %d, "
                                "block %d]",
                                tensor, s, expert, r + row_offset, b + block_offset);
            const uint8_t *p = packed + (size_t)r * (cols / 2) + (size_t)b * 8;
            float m = 0.0f;
            for (int i = 0; i < 8; i++) {
                m = fmaxf(m, fabsf(moe_e2m1_to_f32(p[i] & 0x0Fu)));
                m = fmaxf(m, fabsf(moe_e2m1_to_f32(p[i] >> 4)));
            }
            largest = fmaxf(largest, m * fabsf(moe_e4m3_to_f32(s)));
        }
    if (!isfinite(largest * scale2))
        return moe_fail(err, MOE_ERR_VALUE,
                        "tensor %s.scale2: value %g at [expert %d] makes a weight of magnitude %g "
                        "overflow fp32",
                        tensor, (double)scale2, expert, (double)largest);
    return MOE_OK;
}

void moe_shard_free(moe_shard *sh) {
    if (!sh) return;
    free(sh->gate_w);
    free(sh->gate_bias);
    free(sh->w13_mx);
    free(sh->w13_scale);
    free(sh->w2_mx);
    free(sh->w2_scale);
    free(sh->w13_scale2);
    free(sh->w2_scale2);
    free(sh->w13_bf16);
    free(sh->w2_bf16);
    free(sh->sink_w13);
    free(sh->sink_w2);
    memset(sh, 0, sizeof *sh);
}

static void *zalloc(size_t n, size_t size, bool *failed) {
    void *p = calloc(n ? n : 1, size);
    if (!p) *failed = true;
    return p;
}

/* Copies global routed expert ge into local slot e of a block-format shard and checks the slab:
 * w13 rows [2*c0, 2*c0 + 2*IV) of [2I, D]; w2 columns [c0, c0 + IV) of [D, I] (bytes c0/2,
 * scale columns c0/B); scale2 replicated. */
static moe_status copy_block_expert(moe_shard *sh, const moe_weights *w, size_t e, size_t ge,
                                    size_t c0, moe_error *err) {
    const moe_routed_format_info *fi = moe_routed_format_get(sh->cfg.routed_format);
    const size_t B = (size_t)fi->block, D = (size_t)sh->cfg.D, I = (size_t)sh->cfg.I;
    const size_t IL = (size_t)sh->I_local, IV = (size_t)sh->I_valid;
    uint8_t *m13 = sh->w13_mx + e * 2 * IL * D / 2, *s13 = sh->w13_scale + e * 2 * IL * D / B;
    uint8_t *m2 = sh->w2_mx + e * D * IL / 2, *s2 = sh->w2_scale + e * D * IL / B;
    copy_block(m13, D / 2, w->w13_mx + ge * 2 * I * D / 2, D / 2, 2 * c0, 2 * IV, 0, D / 2, 1);
    copy_block(s13, D / B, w->w13_scale + ge * 2 * I * D / B, D / B, 2 * c0, 2 * IV, 0, D / B, 1);
    copy_block(m2, IL / 2, w->w2_mx + ge * D * I / 2, I / 2, 0, D, c0 / 2, IV / 2, 1);
    copy_block(s2, IL / B, w->w2_scale + ge * D * I / B, I / B, 0, D, c0 / B, IV / B, 1);
    char n13[192], n2[192]; /* full names in messages when the loader gave the prefix */
    snprintf(n13, sizeof n13, "%sexperts.w13_weight", w->name_prefix ? w->name_prefix : "");
    snprintf(n2, sizeof n2, "%sexperts.w2_weight", w->name_prefix ? w->name_prefix : "");
    if (!fi->has_scale2) {
        moe_status st = check_mx_slab(n13, (int)ge, m13, s13, (int)(2 * IV), (int)D, (int)(2 * c0),
                                      0, err);
        return st ? st : check_mx_slab(n2, (int)ge, m2, s2, (int)D, (int)IL, 0, (int)(c0 / B), err);
    }
    sh->w13_scale2[e] = w->w13_scale2[ge];
    sh->w2_scale2[e] = w->w2_scale2[ge];
    moe_status st = check_nv_slab(n13, (int)ge, m13, s13, sh->w13_scale2[e], (int)(2 * IV), (int)D,
                                  (int)(2 * c0), 0, err);
    return st ? st : check_nv_slab(n2, (int)ge, m2, s2, sh->w2_scale2[e], (int)D, (int)IL, 0,
                                   (int)(c0 / B), err);
}

/* The routed arrays of a shard whose layout fields are set; false when out of memory. */
static bool alloc_routed(moe_shard *sh) {
    const moe_routed_format_info *fi = moe_routed_format_get(sh->cfg.routed_format);
    const size_t E = (size_t)sh->n_local_experts, IL = (size_t)sh->I_local, D = (size_t)sh->cfg.D;
    bool nomem = false;
    if (fi->block) {
        const size_t B = (size_t)fi->block;
        sh->w13_mx = zalloc(E * 2 * IL * D / 2, 1, &nomem);
        sh->w13_scale = zalloc(E * 2 * IL * D / B, 1, &nomem);
        sh->w2_mx = zalloc(E * D * IL / 2, 1, &nomem);
        sh->w2_scale = zalloc(E * D * IL / B, 1, &nomem);
    } else {
        sh->w13_bf16 = zalloc(E * 2 * IL * D, sizeof(uint16_t), &nomem);
        sh->w2_bf16 = zalloc(E * D * IL, sizeof(uint16_t), &nomem);
    }
    if (fi->has_scale2) {
        sh->w13_scale2 = zalloc(E, sizeof(float), &nomem);
        sh->w2_scale2 = zalloc(E, sizeof(float), &nomem);
    }
    return !nomem;
}

moe_status moe_shard_build(const moe_config *cfg, const moe_weights *w, const moe_split *split,
                           moe_shard *sh, moe_error *err) {
    if (!sh) return moe_fail(err, MOE_ERR_ARG, "shard: NULL");
    memset(sh, 0, sizeof *sh);
    moe_status st = moe_split_validate(cfg, split, err);
    if (st) return st;
    const moe_routed_format_info *fi = moe_routed_format_get(cfg->routed_format);
    const bool blocks = fi->block > 0;
    if (!w || !w->gate_w || (cfg->has_gate_bias && !w->gate_bias) ||
        (cfg->S > 0 && (!w->sink_w13 || !w->sink_w2)) ||
        (blocks && (!w->w13_mx || !w->w13_scale || !w->w2_mx || !w->w2_scale)) ||
        (fi->has_scale2 && (!w->w13_scale2 || !w->w2_scale2)) ||
        (!blocks && (!w->w13_bf16 || !w->w2_bf16)))
        return moe_fail(err, MOE_ERR_ARG, "weights: a tensor the configuration needs is NULL");

    const size_t D = (size_t)cfg->D, G = (size_t)(cfg->R + cfg->S);
    const int n = split->n;
    const bool sliced = split->kind != MOE_SPLIT_NONE;
    sh->cfg = *cfg;
    sh->split = *split;
    sh->I_valid = split->kind == MOE_SPLIT_TP ? cfg->I / n : cfg->I;
    sh->sink_I_valid = sliced ? cfg->I / n : cfg->I;
    sh->I_local = round_up(sh->I_valid, split->pad_inter_to);
    sh->sink_I_local = round_up(sh->sink_I_valid, split->pad_inter_to);
    sh->n_local_experts = moe_local_expert_count(cfg, split);
    sh->expert_first = split->kind == MOE_SPLIT_EP ? split->rank * sh->n_local_experts : 0;
    sh->global_scale = cfg->has_global_scale ? w->global_scale : 1.0f;

    const size_t E = (size_t)sh->n_local_experts, IL = (size_t)sh->I_local;
    const size_t IV = (size_t)sh->I_valid, I = (size_t)cfg->I;
    const size_t c0 = split->kind == MOE_SPLIT_TP ? (size_t)split->rank * IV : 0;
    bool nomem = !alloc_routed(sh);
    sh->gate_w = zalloc(G * D, sizeof(uint16_t), &nomem);
    if (cfg->has_gate_bias) sh->gate_bias = zalloc((size_t)cfg->R, sizeof(float), &nomem);
    const size_t SIL = (size_t)sh->sink_I_local, SIV = (size_t)sh->sink_I_valid;
    const size_t s0 = sliced ? (size_t)split->rank * SIV : 0;
    sh->sink_w13 = zalloc((size_t)cfg->S * 2 * SIL * D, sizeof(uint16_t), &nomem);
    sh->sink_w2 = zalloc((size_t)cfg->S * D * SIL, sizeof(uint16_t), &nomem);
    if (nomem) {
        moe_shard_free(sh);
        return moe_fail(err, MOE_ERR_NOMEM, "shard: out of memory for rank %d of %d", split->rank, n);
    }

    memcpy(sh->gate_w, w->gate_w, G * D * sizeof(uint16_t));
    if (cfg->has_gate_bias) memcpy(sh->gate_bias, w->gate_bias, (size_t)cfg->R * sizeof(float));

    for (size_t e = 0; e < E; e++) {
        size_t ge = (size_t)sh->expert_first + e;
        if (ge >= (size_t)cfg->R) continue; /* an EP padding expert: stays zero */
        if (blocks) {
            st = copy_block_expert(sh, w, e, ge, c0, err);
            if (st) {
                moe_shard_free(sh);
                return st;
            }
        } else {
            copy_block((uint8_t *)(sh->w13_bf16 + e * 2 * IL * D), D,
                       (const uint8_t *)(w->w13_bf16 + ge * 2 * I * D), D, 2 * c0, 2 * IV, 0, D, 2);
            copy_block((uint8_t *)(sh->w2_bf16 + e * D * IL), IL,
                       (const uint8_t *)(w->w2_bf16 + ge * D * I), I, 0, D, c0, IV, 2);
        }
    }
    for (size_t s = 0; s < (size_t)cfg->S; s++) {
        copy_block((uint8_t *)(sh->sink_w13 + s * 2 * SIL * D), D,
                   (const uint8_t *)(w->sink_w13 + s * 2 * I * D), D, 2 * s0, 2 * SIV, 0, D, 2);
        copy_block((uint8_t *)(sh->sink_w2 + s * D * SIL), SIL,
                   (const uint8_t *)(w->sink_w2 + s * D * I), I, 0, D, s0, SIV, 2);
    }
    return MOE_OK;
}
