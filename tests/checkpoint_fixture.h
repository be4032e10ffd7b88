/*
 * checkpoint_fixture.h: writes small checkpoint directories for the loader and CLI tests.
 *
 * Rules: a layer (moe_layer_data, random or hand-made) is written under its
 * contract.md [checkpoint.tensors] names with prefix model.llm.layers.{L}.mlp., next to an
 * unrelated tensor, plus a config.json in the original spelling. Options plant one fault at a time:
 * a tensor left out, a tensor with one extra leading dimension (same bytes, so the file stays
 * valid), a tensor with a wrong dtype of the same element size, the 3-D scale layout, a bf16 global
 * scale. Header-only (static inline) so that each test binary takes what it uses.
 */
#ifndef INKLING_TEST_CHECKPOINT_FIXTURE_H
#define INKLING_TEST_CHECKPOINT_FIXTURE_H

#include "../common/layer_data.h"
#include "../common/numeric.h"
#include "../common/safetensors.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int layer;
    bool scales_3d;          /* scales as [R, rows, blocks] instead of [R*rows, blocks] */
    bool global_scale_bf16;
    const char *omit;        /* suffix of a tensor to leave out, or NULL */
    const char *bad_shape;   /* suffix of a tensor written with an extra leading dimension 1 */
    const char *bad_dtype;   /* suffix of a tensor written with another dtype of equal size */
    const char *config_json; /* config.json text, or NULL for the default from the layer */
    bool sidecars;           /* MXFP4: also write .input_amax and .original_shape per weight */
    const char *extra;       /* suffix of a tensor no layer has, written under the layer, or NULL */
    float amax13;            /* NVFP4 / sidecars: w13_weight.input_amax (0: 3.5) */
    bool bad_original_shape; /* w13_weight.original_shape says D + 16 */
} fixture_opts;

/* Every tensor suffix of a layer in the routed format of cfg, in contract.md [checkpoint.tensors]
 * order. */
static inline int fixture_suffixes(const moe_config *cfg, const char **out) {
    int n = 0;
    out[n++] = "gate.weight";
    if (cfg->has_gate_bias) out[n++] = "gate.bias";
    if (cfg->has_global_scale) out[n++] = "gate.global_scale";
    const bool nv = cfg->routed_format == MOE_ROUTED_NVFP4;
    out[n++] = "experts.w13_weight";
    if (cfg->routed_format == MOE_ROUTED_MXFP4) out[n++] = "experts.w13_weight_scale";
    if (nv) {
        out[n++] = "experts.w13_weight.scale";
        out[n++] = "experts.w13_weight.scale2";
        out[n++] = "experts.w13_weight.input_amax";
        out[n++] = "experts.w13_weight.original_shape";
    }
    out[n++] = "experts.w2_weight";
    if (cfg->routed_format == MOE_ROUTED_MXFP4) out[n++] = "experts.w2_weight_scale";
    if (nv) {
        out[n++] = "experts.w2_weight.scale";
        out[n++] = "experts.w2_weight.scale2";
        out[n++] = "experts.w2_weight.input_amax";
        out[n++] = "experts.w2_weight.original_shape";
    }
    out[n++] = "shared_experts.shared_w13_weight";
    out[n++] = "shared_experts.shared_w2_weight";
    return n;
}

/* The default config.json of cfg, original spelling, with a quantization_config that excludes
 * nothing of this layer unless its experts are bf16 (Quark's for MXFP4 and bf16, ModelOpt's
 * with quant_algo NVFP4 for NVFP4). text [len]. */
static inline void fixture_config_text(const moe_config *cfg, int layer, char *text, size_t len) {
    char excl[96] = "";
    if (cfg->routed_format == MOE_ROUTED_BF16)
        snprintf(excl, sizeof excl, ", \"model.llm.layers.%d.mlp.experts\"", layer);
    const bool nv = cfg->routed_format == MOE_ROUTED_NVFP4;
    snprintf(text, len,
             "{\"hidden_size\": %d, \"intermediate_size\": %d, \"dense_intermediate_size\": %d,\n"
             " \"n_routed_experts\": %d, \"num_experts_per_tok\": %d, \"n_shared_experts\": %d,\n"
             " \"route_scale\": %.9g, \"use_gate_bias\": %s, \"use_global_scale\": %s,\n"
             " \"quantization_config\": {%s\"lm_head\"%s]}}\n",
             cfg->D, cfg->I, 3 * cfg->I, cfg->R, cfg->K, cfg->S, (double)cfg->route_scale,
             cfg->has_gate_bias ? "true" : "false", cfg->has_global_scale ? "true" : "false",
             nv ? "\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\", \"group_size\": 16, "
                  "\"exclude_modules\": ["
                : "\"quant_method\": \"quark\", \"exclude\": [",
             excl);
}

static inline int fixture_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Writes dir/config.json and dir/model.safetensors (dir is created). 0 on success. */
static inline int fixture_write_model(const char *dir, const moe_layer_data *ld, const fixture_opts *o) {
    const moe_config *c = &ld->cfg;
    const int64_t D = c->D, I = c->I, R = c->R, S = c->S;
    const bool mx = c->routed_format == MOE_ROUTED_MXFP4;
    mkdir(dir, 0755);
    char path[4096], text[2048];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!o->config_json) fixture_config_text(c, o->layer, text, sizeof text);
    if (fixture_write_text(path, o->config_json ? o->config_json : text)) return -1;

    static char names[24][128];
    moe_st_entry e[24];
    int n = 0;
    float gs = ld->w.global_scale;
    uint16_t gs_bf16 = moe_f32_to_bf16(gs);
    static const uint16_t unrelated[4] = {0x3f80, 0, 0, 0x3f80};
#define FIXTURE_ADD(suffix, dt, nd, data, ...)                                                      \
    do {                                                                                            \
        snprintf(names[n], sizeof names[n], "model.llm.layers.%d.mlp.%s", o->layer, suffix);         \
        e[n] = (moe_st_entry){names[n], dt, nd, __VA_ARGS__, data};                                 \
        n++;                                                                                        \
    } while (0)
    FIXTURE_ADD("gate.weight", MOE_ST_BF16, 2, ld->gate_w, {R + S, D});
    if (c->has_gate_bias) FIXTURE_ADD("gate.bias", MOE_ST_F32, 1, ld->gate_bias, {R});
    if (c->has_global_scale) {
        if (o->global_scale_bf16) FIXTURE_ADD("gate.global_scale", MOE_ST_BF16, 1, &gs_bf16, {1});
        else FIXTURE_ADD("gate.global_scale", MOE_ST_F32, 1, &gs, {1});
    }
    if (mx) {
        FIXTURE_ADD("experts.w13_weight", MOE_ST_U8, 3, ld->w13_mx, {R, 2 * I, D / 2});
        if (o->scales_3d) FIXTURE_ADD("experts.w13_weight_scale", MOE_ST_U8, 3, ld->w13_scale, {R, 2 * I, D / 32});
        else FIXTURE_ADD("experts.w13_weight_scale", MOE_ST_U8, 2, ld->w13_scale, {R * 2 * I, D / 32});
        FIXTURE_ADD("experts.w2_weight", MOE_ST_U8, 3, ld->w2_mx, {R, D, I / 2});
        if (o->scales_3d) FIXTURE_ADD("experts.w2_weight_scale", MOE_ST_U8, 3, ld->w2_scale, {R, D, I / 32});
        else FIXTURE_ADD("experts.w2_weight_scale", MOE_ST_U8, 2, ld->w2_scale, {R * D, I / 32});
    }
    static float amax[2];
    amax[0] = o->amax13 != 0.0f ? o->amax13 : 3.5f;
    amax[1] = 2.25f;
    static int64_t s13[3];
    static int32_t s2[3];
    const int64_t shape13[3] = {R, 2 * I, D + (o->bad_original_shape ? 16 : 0)};
    const int32_t shape2[3] = {(int32_t)R, (int32_t)D, (int32_t)I};
    memcpy(s13, shape13, sizeof s13);
    memcpy(s2, shape2, sizeof s2);
    if (mx && o->sidecars) {
        FIXTURE_ADD("experts.w13_weight.input_amax", MOE_ST_F32, 1, &amax[0], {1});
        FIXTURE_ADD("experts.w13_weight.original_shape", MOE_ST_I64, 1, s13, {3});
        FIXTURE_ADD("experts.w2_weight.input_amax", MOE_ST_F32, 1, &amax[1], {1});
        FIXTURE_ADD("experts.w2_weight.original_shape", MOE_ST_I32, 1, s2, {3});
    }
    if (o->extra) FIXTURE_ADD(o->extra, MOE_ST_F32, 1, &amax[1], {1});
    if (c->routed_format == MOE_ROUTED_NVFP4) {
        FIXTURE_ADD("experts.w13_weight", MOE_ST_U8, 3, ld->w13_mx, {R, 2 * I, D / 2});
        if (o->scales_3d) FIXTURE_ADD("experts.w13_weight.scale", MOE_ST_F8_E4M3, 3, ld->w13_scale, {R, 2 * I, D / 16});
        else FIXTURE_ADD("experts.w13_weight.scale", MOE_ST_F8_E4M3, 2, ld->w13_scale, {R * 2 * I, D / 16});
        FIXTURE_ADD("experts.w13_weight.scale2", MOE_ST_F32, 1, ld->w13_scale2, {R});
        FIXTURE_ADD("experts.w13_weight.input_amax", MOE_ST_F32, 1, &amax[0], {1});
        FIXTURE_ADD("experts.w13_weight.original_shape", MOE_ST_I64, 1, s13, {3});
        FIXTURE_ADD("experts.w2_weight", MOE_ST_U8, 3, ld->w2_mx, {R, D, I / 2});
        FIXTURE_ADD("experts.w2_weight.scale", MOE_ST_F8_E4M3, 3, ld->w2_scale, {R, D, I / 16});
        FIXTURE_ADD("experts.w2_weight.scale2", MOE_ST_F32, 1, ld->w2_scale2, {R});
        FIXTURE_ADD("experts.w2_weight.input_amax", MOE_ST_F32, 1, &amax[1], {1});
        FIXTURE_ADD("experts.w2_weight.original_shape", MOE_ST_I32, 1, s2, {3});
    } else if (!mx) {
        FIXTURE_ADD("experts.w13_weight", MOE_ST_BF16, 3, ld->w13_bf16, {R, 2 * I, D});
        FIXTURE_ADD("experts.w2_weight", MOE_ST_BF16, 3, ld->w2_bf16, {R, D, I});
    }
    FIXTURE_ADD("shared_experts.shared_w13_weight", MOE_ST_BF16, 3, ld->sink_w13, {S, 2 * I, D});
    FIXTURE_ADD("shared_experts.shared_w2_weight", MOE_ST_BF16, 3, ld->sink_w2, {S, D, I});
#undef FIXTURE_ADD
    e[n++] = (moe_st_entry){"model.llm.embed_tokens.weight", MOE_ST_BF16, 2, {2, 2}, unrelated};

    moe_st_entry kept[24];
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *suffix = strstr(e[i].name, ".mlp.") ? strstr(e[i].name, ".mlp.") + 5 : "";
        if (o->omit && !strcmp(suffix, o->omit)) continue;
        moe_st_entry t = e[i];
        if (o->bad_shape && !strcmp(suffix, o->bad_shape)) {
            memmove(t.shape + 1, t.shape, (size_t)t.ndim * sizeof t.shape[0]);
            t.shape[0] = 1;
            t.ndim++;
        }
        if (o->bad_dtype && !strcmp(suffix, o->bad_dtype))
            t.dtype = t.dtype == MOE_ST_BF16  ? MOE_ST_F16
                      : t.dtype == MOE_ST_F32 ? MOE_ST_I32
                      : t.dtype == MOE_ST_I64 ? MOE_ST_F64
                      : t.dtype == MOE_ST_I32 ? MOE_ST_F32
                                              : MOE_ST_I8;
        kept[k++] = t;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return moe_st_write(path, kept, k, NULL) ? -1 : 0;
}

/* Writes x [T, D] bf16 as the input file path. */
static inline int fixture_write_input(const char *path, int T, int D, const uint16_t *x) {
    moe_st_entry e = {"x", MOE_ST_BF16, 2, {T, D}, x};
    return moe_st_write(path, &e, 1, NULL) ? -1 : 0;
}

/* A fresh directory under $TMPDIR (or /tmp): dir [len]. */
static inline int fixture_tempdir(char *dir, size_t len, const char *tag) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, len, "%s/inkling-%s-XXXXXX", base && base[0] ? base : "/tmp", tag);
    return mkdtemp(dir) ? 0 : -1;
}

/* How many entries of dir (not . and ..) are output temporaries (.NAME.XXXXXXXXXXXX.tmp, from
 * common/out_file.h); with all set, how many entries there are. -1 if dir cannot be read. */
static inline int fixture_count_entries(const char *dir, bool all) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        size_t len = strlen(s);
        if (!strcmp(s, ".") || !strcmp(s, "..")) continue;
        n += all || (s[0] == '.' && len > 4 && !strcmp(s + len - 4, ".tmp"));
    }
    closedir(d);
    return n;
}

/* rm -r of a directory holding only files and one level of subdirectories made by the tests. */
static inline void fixture_remove_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) { /* best effort: a leftover temp dir is harmless */ }
}

#endif
