/*
 * all_ranks.c: run every rank of a split on one machine and add the partials.
 *
 * Rules (decided in docs/architecture.md, "Partials"):
 *   - each rank returns its partial as the served model would (serving: bf16 values);
 *   - partials are added in fp32, in rank order 0, 1, ..., n-1;
 *   - serving: the sum is rounded to bf16 once more (a no-op for n = 1).
 * Ranks run one after another, each from its own shard built as that rank would load it, so
 * peak memory is one shard at a time.
 */
#include "moe.h"
#include "numeric.h"

#include <stdlib.h>
#include <string.h>

/* Adds one rank's partial [TD] into out; after the last rank, rounds the serving sum once. */
static void add_partial(float *out, const float *partial, size_t TD) {
    for (size_t i = 0; i < TD; i++) out[i] += partial[i];
}

static void finish_sum(float *out, size_t TD, const moe_options *opt) {
    if (moe_precision_computed(opt->precision) == MOE_PRECISION_SERVING)
        for (size_t i = 0; i < TD; i++) out[i] = moe_round_bf16(out[i]);
}

static moe_status check_call(int T, const uint16_t *x, const float *out, moe_error *err) {
    if (T < 0) return moe_fail(err, MOE_ERR_ARG, "forward: token count T = %d is negative", T);
    if (T > 0 && (!x || !out)) return moe_fail(err, MOE_ERR_ARG, "forward: NULL x or out with T = %d", T);
    return MOE_OK;
}

moe_status moe_forward_all_ranks(const moe_backend *be, const moe_config *cfg,
                                 const moe_weights *w, moe_split_kind kind, int n,
                                 int pad_inter_to, const moe_options *opt, int T,
                                 const uint16_t *x, float *out, moe_stages *stages,
                                 moe_error *err) {
    if (!be || !cfg || !w || !opt) return moe_fail(err, MOE_ERR_ARG, "all ranks: NULL argument");
    moe_status st = check_call(T, x, out, err);
    if (st) return st;
    /* checked before the loop: with n < 1 it would run no rank and report a zero output */
    moe_split first = {kind, n, 0, pad_inter_to};
    st = moe_split_validate(cfg, &first, err);
    if (st) return st;
    const size_t TD = (size_t)T * (size_t)cfg->D;
    float *partial = malloc((TD ? TD : 1) * sizeof(float));
    if (!partial) return moe_fail(err, MOE_ERR_NOMEM, "all ranks: out of memory for a partial");
    if (TD) memset(out, 0, TD * sizeof(float));
    for (int r = 0; r < n && !st; r++) {
        moe_split split = {kind, n, r, pad_inter_to};
        moe_shard shard;
        moe_layer *layer = NULL;
        st = moe_shard_build(cfg, w, &split, &shard, err);
        if (st) break;
        st = moe_layer_create(be, &shard, opt, &layer, err);
        if (!st) st = moe_layer_forward(layer, T, x, partial, r == 0 ? stages : NULL, err);
        if (!st) add_partial(out, partial, TD);
        moe_layer_destroy(layer);
        moe_shard_free(&shard);
    }
    if (!st) finish_sum(out, TD, opt);
    free(partial);
    return st;
}

moe_status moe_forward_ranks(moe_layer *const *layers, int n, const moe_options *opt, int T,
                             const uint16_t *x, float *out, moe_stages *stages, moe_error *err) {
    if (!layers || n < 1 || !opt) return moe_fail(err, MOE_ERR_ARG, "ranks: no layers or options");
    for (int r = 0; r < n; r++)
        if (!layers[r]) return moe_fail(err, MOE_ERR_ARG, "ranks: layer of rank %d is NULL", r);
    moe_status st = check_call(T, x, out, err);
    if (st) return st;
    const size_t TD = (size_t)T * (size_t)moe_layer_shard(layers[0])->cfg.D;
    float *partial = malloc((TD ? TD : 1) * sizeof(float));
    if (!partial) return moe_fail(err, MOE_ERR_NOMEM, "ranks: out of memory for a partial");
    if (TD) memset(out, 0, TD * sizeof(float));
    for (int r = 0; r < n && !st; r++) {
        st = moe_layer_forward(layers[r], T, x, partial, r == 0 ? stages : NULL, err);
        if (!st) add_partial(out, partial, TD);
    }
    if (!st) finish_sum(out, TD, opt);
    free(partial);
    return st;
}
