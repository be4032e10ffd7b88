/* case_files.c: cases as checkpoint, input and stages files; outputs read back (case_files.h). */
#include "case_files.h"

#include "../common/numeric.h"
#include "../common/out_file.h"
#include "../common/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static moe_status write_config(const char *dir, const moe_config *c, moe_error *err) {
    char path[1100], text[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int n = snprintf(text, sizeof text,
                     "{\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"n_routed_experts\": %d,\n"
                     "  \"num_experts_per_tok\": %d,\n  \"n_shared_experts\": %d,\n  \"route_scale\": %.9g,\n"
                     "  \"use_gate_bias\": %s,\n  \"use_global_scale\": %s\n}\n",
                     c->D, c->I, c->R, c->K, c->S, (double)c->route_scale, c->has_gate_bias ? "true" : "false",
                     c->has_global_scale ? "true" : "false");
    return moe_out_write_whole(path, text, (size_t)n, err);
}

/* NVFP4's per-matrix tensors beyond codes and scales: .scale2 [R], .input_amax [1] (unused by
 * W4A16 paths; 1), .original_shape I64 [3]. names [6][96], shapes [2][3] stay alive. */
static int nvfp4_sidecars(const moe_config *c, const moe_weights *w, char names[][96], int64_t shapes[][3],
                          moe_st_entry *e) {
    static const float one = 1.0f;
    const int64_t R = c->R, D = c->D, I = c->I;
    int n = 0;
    for (int m = 0; m < 2; m++) {
        const char *weight = m == 0 ? "experts.w13_weight" : "experts.w2_weight";
        shapes[m][0] = R, shapes[m][1] = m == 0 ? 2 * I : D, shapes[m][2] = m == 0 ? D : I;
        snprintf(names[3 * m], 96, "model.llm.layers.%d.mlp.%s.scale2", MOE_EXPORT_LAYER, weight);
        snprintf(names[3 * m + 1], 96, "model.llm.layers.%d.mlp.%s.input_amax", MOE_EXPORT_LAYER, weight);
        snprintf(names[3 * m + 2], 96, "model.llm.layers.%d.mlp.%s.original_shape", MOE_EXPORT_LAYER, weight);
        e[n++] = (moe_st_entry){names[3 * m], MOE_ST_F32, 1, {R}, m == 0 ? w->w13_scale2 : w->w2_scale2};
        e[n++] = (moe_st_entry){names[3 * m + 1], MOE_ST_F32, 1, {1}, &one};
        e[n++] = (moe_st_entry){names[3 * m + 2], MOE_ST_I64, 1, {3}, shapes[m]};
    }
    return n;
}

moe_status moe_export_checkpoint(const char *dir, const moe_config *c, const moe_weights *w,
                                 moe_error *err) {
    if (c->routed_format > MOE_ROUTED_NVFP4)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "export: routed format %d", (int)c->routed_format);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return moe_fail(err, MOE_ERR_IO, "export: cannot create directory %s: %s", dir, strerror(errno));
    moe_status st = write_config(dir, c, err);
    if (st) return st;
    const int64_t R = c->R, S = c->S, D = c->D, I = c->I, G = c->R + c->S;
    const bool nv = c->routed_format == MOE_ROUTED_NVFP4;
    const int64_t B = nv ? 16 : 32; /* elements per scale byte */
    char names[9][96], side_names[6][96];
    int64_t side_shapes[2][3];
    const char *suffix[9] = {"gate.weight", "gate.bias", "gate.global_scale", "experts.w13_weight",
                             nv ? "experts.w13_weight.scale" : "experts.w13_weight_scale", "experts.w2_weight",
                             nv ? "experts.w2_weight.scale" : "experts.w2_weight_scale",
                             "shared_experts.shared_w13_weight", "shared_experts.shared_w2_weight"};
    for (int i = 0; i < 9; i++)
        snprintf(names[i], sizeof names[i], "model.llm.layers.%d.mlp.%s", MOE_EXPORT_LAYER, suffix[i]);
    moe_st_entry e[15];
    int n = 0;
    e[n++] = (moe_st_entry){names[0], MOE_ST_BF16, 2, {G, D}, w->gate_w};
    if (c->has_gate_bias) e[n++] = (moe_st_entry){names[1], MOE_ST_F32, 1, {R}, w->gate_bias};
    if (c->has_global_scale) e[n++] = (moe_st_entry){names[2], MOE_ST_F32, 1, {1}, &w->global_scale};
    if (c->routed_format != MOE_ROUTED_BF16) {
        const moe_st_dtype sdt = nv ? MOE_ST_F8_E4M3 : MOE_ST_U8;
        e[n++] = (moe_st_entry){names[3], MOE_ST_U8, 3, {R, 2 * I, D / 2}, w->w13_mx};
        e[n++] = (moe_st_entry){names[4], sdt, 3, {R, 2 * I, D / B}, w->w13_scale};
        e[n++] = (moe_st_entry){names[5], MOE_ST_U8, 3, {R, D, I / 2}, w->w2_mx};
        e[n++] = (moe_st_entry){names[6], sdt, 3, {R, D, I / B}, w->w2_scale};
        if (nv) n += nvfp4_sidecars(c, w, side_names, side_shapes, e + n);
    } else {
        e[n++] = (moe_st_entry){names[3], MOE_ST_BF16, 3, {R, 2 * I, D}, w->w13_bf16};
        e[n++] = (moe_st_entry){names[5], MOE_ST_BF16, 3, {R, D, I}, w->w2_bf16};
    }
    if (S > 0) {
        e[n++] = (moe_st_entry){names[7], MOE_ST_BF16, 3, {S, 2 * I, D}, w->sink_w13};
        e[n++] = (moe_st_entry){names[8], MOE_ST_BF16, 3, {S, D, I}, w->sink_w2};
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return moe_st_write(path, e, n, err);
}

moe_status moe_export_input(const char *path, int T, int D, const uint16_t *x, moe_error *err) {
    moe_st_entry e = {"x", MOE_ST_BF16, 2, {T, D}, x};
    return moe_st_write(path, &e, 1, err);
}

moe_status moe_export_stages(const char *path, const moe_run *r, moe_error *err) {
    const int64_t T = r->T, D = r->D, K = r->K, S = r->S, I = r->I, G = r->R + r->S;
    moe_st_entry e[8];
    int n = 0;
    e[n++] = (moe_st_entry){"out", MOE_ST_F32, 2, {T, D}, r->out};
    if (r->filled & MOE_STAGE_TOPK) {
        e[n++] = (moe_st_entry){"topk_ids", MOE_ST_I32, 2, {T, K}, r->ids};
        e[n++] = (moe_st_entry){"topk_weights", MOE_ST_F32, 2, {T, K + S}, r->weights};
    }
    if (r->filled & MOE_STAGE_LOGITS) e[n++] = (moe_st_entry){"logits", MOE_ST_F32, 2, {T, G}, r->logits};
    if ((r->filled & MOE_STAGE_ROUTED_H) && r->routed_h)
        e[n++] = (moe_st_entry){"routed_h", MOE_ST_F32, 3, {T, K, I}, r->routed_h};
    if ((r->filled & MOE_STAGE_ROUTED_Y) && r->routed_y)
        e[n++] = (moe_st_entry){"routed_y", MOE_ST_F32, 3, {T, K, D}, r->routed_y};
    if ((r->filled & MOE_STAGE_SINK_H) && r->sink_h)
        e[n++] = (moe_st_entry){"sink_h", MOE_ST_F32, 3, {T, S, I}, r->sink_h};
    if ((r->filled & MOE_STAGE_SINK_Y) && r->sink_y)
        e[n++] = (moe_st_entry){"sink_y", MOE_ST_F32, 2, {T, D}, r->sink_y};
    return moe_st_write(path, e, n, err);
}

static moe_status write_case_text(const char *dir, const fuzz_case *c, moe_precision p, moe_error *err) {
    char path[1100], line[512], split[16] = "none", text[1400];
    snprintf(path, sizeof path, "%s/case.txt", dir);
    if (c->split != MOE_SPLIT_NONE) snprintf(split, sizeof split, "%s%d", c->split == MOE_SPLIT_TP ? "tp" : "ep", c->n);
    fuzz_case_format(c, line, sizeof line);
    int n = snprintf(text, sizeof text,
                     "# split %s (an engine runs every rank and sums the partials; check --%.2s %d judges that)\n"
                     "# expected.safetensors: the reference, unsplit, contract %s\n%s\n",
                     split, split, c->n, p == MOE_PRECISION_EXACT ? "exact" : p == MOE_PRECISION_ENGINE ? "engine (computed as serving)" : "serving", line);
    return moe_out_write_whole(path, text, (size_t)n, err);
}

moe_status moe_export_case(const fuzz_case *c, moe_precision precision, const char *dir, moe_error *err) {
    moe_layer_data ld;
    uint16_t *x = NULL;
    moe_status st = fuzz_case_build(c, &ld, &x, err);
    if (st) return st;
    moe_run ref;
    memset(&ref, 0, sizeof ref);
    moe_options opt = moe_options_default();
    opt.precision = precision;
    char path[1100];
    st = moe_export_checkpoint(dir, &c->cfg, &ld.w, err);
    snprintf(path, sizeof path, "%s/input.safetensors", dir);
    if (!st) st = moe_export_input(path, c->T, c->cfg.D, x, err);
    if (!st) st = moe_run_path(&moe_backend_ref, &opt, &c->cfg, &ld.w, MOE_SPLIT_NONE, 1, 0, c->T, x, true, &ref, err);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    if (!st) st = moe_export_stages(path, &ref, err);
    if (!st) st = write_case_text(dir, c, precision, err);
    moe_run_free(&ref);
    moe_layer_data_free(&ld);
    free(x);
    return st;
}

/* ---------------------------------------------------------------- reading outputs */

/* One optional tensor: absent is fine (false), present must match dtype and shape. */
static moe_status optional_tensor(const moe_st_file *f, const char *name, moe_st_dtype dt, int ndim,
                                  const int64_t *shape, const moe_st_tensor **out, moe_error *err) {
    *out = moe_st_find(f, name);
    if (!*out) return MOE_OK;
    const moe_st_tensor *t = *out;
    bool ok = t->ndim == ndim && (t->dtype == dt || (dt == MOE_ST_F32 && t->dtype == MOE_ST_BF16));
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (ok) return MOE_OK;
    char want[96], got[96];
    moe_st_shape_str(ndim, shape, want, sizeof want);
    moe_st_shape_str(t->ndim, t->shape, got, sizeof got);
    return moe_fail(err, MOE_ERR_SHAPE, "%s: tensor %s: %s %s, expected %s %s", f->label, name,
                    moe_st_dtype_name(t->dtype), got, moe_st_dtype_name(dt), want);
}

moe_status moe_read_outputs(const char *path, const moe_config *c, int T, float *out, moe_stages *st,
                            moe_error *err) {
    moe_st_file f;
    moe_status s = moe_st_open(path, &f, err);
    if (s) return s;
    const int64_t t = T, D = c->D, K = c->K, S = c->S, I = c->I, G = c->R + c->S;
    struct {
        const char *name;
        moe_st_dtype dt;
        int ndim;
        int64_t shape[3];
        void *dst;
        unsigned bit;
    } want[] = {
        {"out", MOE_ST_F32, 2, {t, D}, out, 0},
        {"logits", MOE_ST_F32, 2, {t, G}, st->logits, MOE_STAGE_LOGITS},
        {"topk_ids", MOE_ST_I32, 2, {t, K}, st->topk_ids, MOE_STAGE_TOPK},
        {"topk_weights", MOE_ST_F32, 2, {t, K + S}, st->topk_weights, MOE_STAGE_TOPK},
        {"routed_h", MOE_ST_F32, 3, {t, K, I}, st->routed_h, MOE_STAGE_ROUTED_H},
        {"routed_y", MOE_ST_F32, 3, {t, K, D}, st->routed_y, MOE_STAGE_ROUTED_Y},
        {"sink_h", MOE_ST_F32, 3, {t, S, I}, st->sink_h, MOE_STAGE_SINK_H},
        {"sink_y", MOE_ST_F32, 2, {t, D}, st->sink_y, MOE_STAGE_SINK_Y},
    };
    unsigned filled = 0, topk_seen = 0;
    st->filled = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0] && !s; i++) {
        const moe_st_tensor *tn;
        s = optional_tensor(&f, want[i].name, want[i].dt, want[i].ndim, want[i].shape, &tn, err);
        if (s) break;
        if (!tn && i == 0) s = moe_fail(err, MOE_ERR_FORMAT, "%s: tensor out: missing", path);
        if (!tn || !want[i].dst || s) continue;
        if (want[i].dt == MOE_ST_I32) memcpy(want[i].dst, tn->data, tn->nbytes);
        else moe_st_to_f32(tn, want[i].dst);
        if (want[i].bit == MOE_STAGE_TOPK) topk_seen++;
        else filled |= want[i].bit;
    }
    if (!s && topk_seen == 2) filled |= MOE_STAGE_TOPK;
    else if (!s && topk_seen == 1)
        s = moe_fail(err, MOE_ERR_FORMAT, "%s: topk_ids and topk_weights come together (one is missing)", path);
    moe_st_close(&f);
    if (!s) st->filled = filled;
    return s;
}
