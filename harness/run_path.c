/*
 * run_path.c: one path run on a case into a moe_run (rules in compare.h): the run names itself
 * after its backend, contract and split, asks the backend whether it can run the case (else
 * MOE_ERR_UNAVAILABLE / MOE_ERR_UNSUPPORTED, reported SKIPPED by the callers), and owns the
 * arrays of its output and of every stage it asked for.
 */
#include "compare.h"

#include <stdlib.h>
#include <string.h>

const char *moe_cmp_precision_name(moe_precision p) {
    return p == MOE_PRECISION_EXACT ? "exact" : p == MOE_PRECISION_ENGINE ? "engine" : "serving";
}

void moe_run_free(moe_run *r) {
    if (!r) return;
    free(r->out);
    free(r->logits);
    free(r->ids);
    free(r->weights);
    free(r->routed_h);
    free(r->routed_y);
    free(r->sink_h);
    free(r->sink_y);
    memset(r, 0, sizeof *r);
}

static void *alloc_or_null(size_t n, size_t size) { return calloc(n ? n : 1, size); }

/* Names the run, checks that the path can run the case, and allocates its arrays. */
static moe_status run_prepare(const moe_backend *be, const moe_options *opt, const moe_config *cfg,
                              moe_split_kind kind, int n, int pad, int T, bool want_intermediates,
                              moe_run *run, moe_error *err) {
    if (!run) return moe_fail(err, MOE_ERR_ARG, "run: NULL run");
    memset(run, 0, sizeof *run);
    if (!be || !opt || !cfg) return moe_fail(err, MOE_ERR_ARG, "run: NULL backend, options or config");
    if (kind == MOE_SPLIT_NONE) n = 1;
    run->backend = be;
    run->opt = *opt;
    run->split_kind = kind;
    run->split_n = n;
    run->pad_inter_to = pad;
    run->T = T, run->D = cfg->D, run->I = cfg->I, run->R = cfg->R, run->K = cfg->K, run->S = cfg->S;
    char split_name[32] = "";
    if (kind != MOE_SPLIT_NONE) snprintf(split_name, sizeof split_name, "/%s%d", kind == MOE_SPLIT_TP ? "tp" : "ep", n);
    if (pad) snprintf(split_name + strlen(split_name), sizeof split_name - strlen(split_name), "+pad%d", pad);
    snprintf(run->name, sizeof run->name, "%s/%s%s", be->name, moe_cmp_precision_name(opt->precision), split_name);

    char why[256] = "";
    if (!be->available(why, sizeof why))
        return moe_fail(err, MOE_ERR_UNAVAILABLE, "%s: unavailable: %s", run->name, why);
    moe_split split = {kind, n, 0, pad};
    moe_status st = moe_split_validate(cfg, &split, err);
    if (st) return st;
    moe_options computed = *opt; /* the engine contract is computed as serving */
    computed.precision = moe_precision_computed(opt->precision);
    if (!be->supports(cfg, &split, &computed, why, sizeof why))
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "%s: unsupported: %s", run->name, why);

    const size_t TT = (size_t)(T > 0 ? T : 0), D = (size_t)cfg->D, I = (size_t)cfg->I,
                 K = (size_t)cfg->K, S = (size_t)cfg->S, G = (size_t)(cfg->R + cfg->S);
    bool inter = want_intermediates && kind == MOE_SPLIT_NONE && pad == 0;
    run->out = alloc_or_null(TT * D, sizeof(float));
    run->logits = alloc_or_null(TT * G, sizeof(float));
    run->ids = alloc_or_null(TT * K, sizeof(int32_t));
    run->weights = alloc_or_null(TT * (K + S), sizeof(float));
    if (inter) {
        run->routed_h = alloc_or_null(TT * K * I, sizeof(float));
        run->routed_y = alloc_or_null(TT * K * D, sizeof(float));
        run->sink_h = alloc_or_null(TT * S * I, sizeof(float));
        run->sink_y = alloc_or_null(TT * D, sizeof(float));
    }
    if (!run->out || !run->logits || !run->ids || !run->weights ||
        (inter && (!run->routed_h || !run->routed_y || !run->sink_h || !run->sink_y))) {
        moe_run_free(run);
        return moe_fail(err, MOE_ERR_NOMEM, "run: out of memory for T = %d", T);
    }
    return MOE_OK;
}

static moe_stages run_stages(moe_run *run) {
    moe_stages stages = {run->logits, run->ids,  run->weights, run->routed_h,
                         run->routed_y, run->sink_h, run->sink_y, 0};
    return stages;
}

moe_status moe_run_path(const moe_backend *be, const moe_options *opt, const moe_config *cfg,
                        const moe_weights *w, moe_split_kind kind, int n, int pad, int T,
                        const uint16_t *x, bool want_intermediates, moe_run *run, moe_error *err) {
    moe_status st = run_prepare(be, opt, cfg, kind, n, pad, T, want_intermediates, run, err);
    if (st) return st;
    if (!w) {
        moe_run_free(run);
        return moe_fail(err, MOE_ERR_ARG, "run: NULL weights");
    }
    moe_stages stages = run_stages(run);
    st = moe_forward_all_ranks(be, cfg, w, kind, n, pad, opt, T, x, run->out, &stages, err);
    run->filled = stages.filled;
    return st;
}

moe_status moe_run_layers(const moe_backend *be, const moe_options *opt, const moe_config *cfg,
                          moe_split_kind kind, int n, int pad, moe_layer *const *layers, int T,
                          const uint16_t *x, bool want_intermediates, moe_run *run, moe_error *err) {
    moe_status st = run_prepare(be, opt, cfg, kind, n, pad, T, want_intermediates, run, err);
    if (st) return st;
    moe_stages stages = run_stages(run);
    st = moe_forward_ranks(layers, run->split_n, opt, T, x, run->out, &stages, err);
    run->filled = stages.filled;
    return st;
}

/* Moves row tokens[i] of a [T, row] array to row i. Ascending tokens never overwrite a row
 * still to be read. */
static void keep_rows(void *base, size_t row_bytes, const int *tokens, int n) {
    if (!base) return;
    for (int i = 0; i < n; i++)
        if (tokens[i] != i)
            memmove((char *)base + (size_t)i * row_bytes, (char *)base + (size_t)tokens[i] * row_bytes, row_bytes);
}

void moe_run_keep_tokens(moe_run *run, const int *tokens, int n) {
    const size_t D = (size_t)run->D, I = (size_t)run->I, K = (size_t)run->K, S = (size_t)run->S;
    keep_rows(run->out, D * sizeof(float), tokens, n);
    keep_rows(run->logits, (size_t)(run->R + run->S) * sizeof(float), tokens, n);
    keep_rows(run->ids, K * sizeof(int32_t), tokens, n);
    keep_rows(run->weights, (K + S) * sizeof(float), tokens, n);
    keep_rows(run->routed_h, K * I * sizeof(float), tokens, n);
    keep_rows(run->routed_y, K * D * sizeof(float), tokens, n);
    keep_rows(run->sink_h, S * I * sizeof(float), tokens, n);
    keep_rows(run->sink_y, D * sizeof(float), tokens, n);
    run->T = n;
}
