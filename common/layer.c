/*
 * layer.c: the backend registry and the checks every forward call gets, whatever the backend.
 *
 * Rules:
 *   - a backend is asked available() and supports() before create(); their reason becomes the
 *     error message;
 *   - arguments are validated here once, so backends may assume T >= 0 and non-NULL buffers;
 *   - the strict non-finite policy (contract.md [nonfinite]) is applied here, so every backend
 *     honours it alike.
 */
#include "moe.h"
#include "numeric.h"

#include <stdlib.h>
#include <string.h>

static const moe_backend *const all_backends[] = {&moe_backend_ref, &moe_backend_blas,
                                                  &moe_backend_cuda, &moe_backend_cuda_wmma,
                                                  &moe_backend_cuda_gemv, &moe_backend_cuda_mma,
                                                  &moe_backend_cuda_wgmma};

int moe_backend_count(void) { return (int)(sizeof all_backends / sizeof all_backends[0]); }

const moe_backend *moe_backend_at(int i) {
    return (i >= 0 && i < moe_backend_count()) ? all_backends[i] : NULL;
}

const moe_backend *moe_backend_find(const char *name) {
    for (int i = 0; name && i < moe_backend_count(); i++)
        if (strcmp(all_backends[i]->name, name) == 0) return all_backends[i];
    return NULL;
}

moe_options moe_options_default(void) {
    moe_options o = {MOE_PRECISION_SERVING, 0, false, 0};
    return o;
}

moe_precision moe_precision_computed(moe_precision p) {
    return p == MOE_PRECISION_ENGINE ? MOE_PRECISION_SERVING : p;
}

struct moe_layer {
    const moe_backend *backend;
    const moe_shard *shard;
    moe_options opt;
    void *state;
};

moe_status moe_layer_create(const moe_backend *be, const moe_shard *shard, const moe_options *opt,
                            moe_layer **out, moe_error *err) {
    if (!out) return moe_fail(err, MOE_ERR_ARG, "layer: NULL output pointer");
    *out = NULL;
    if (!be || !shard || !opt) return moe_fail(err, MOE_ERR_ARG, "layer: NULL backend, shard or options");
    if (opt->precision != MOE_PRECISION_EXACT && opt->precision != MOE_PRECISION_SERVING &&
        opt->precision != MOE_PRECISION_ENGINE)
        return moe_fail(err, MOE_ERR_ARG, "options: unknown precision %d", (int)opt->precision);
    moe_options computed = *opt; /* the engine contract is computed as serving */
    computed.precision = moe_precision_computed(opt->precision);
    opt = &computed;
    char why[256] = "";
    if (!be->available(why, sizeof why))
        return moe_fail(err, MOE_ERR_UNAVAILABLE, "backend %s unavailable: %s", be->name, why);
    if (!be->supports(&shard->cfg, &shard->split, opt, why, sizeof why))
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "backend %s does not support this layer: %s",
                        be->name, why);
    moe_layer *l = calloc(1, sizeof *l);
    if (!l) return moe_fail(err, MOE_ERR_NOMEM, "layer: out of memory");
    l->backend = be;
    l->shard = shard;
    l->opt = *opt;
    moe_status st = be->create(shard, opt, &l->state, err);
    if (st) {
        free(l);
        return st;
    }
    *out = l;
    return MOE_OK;
}

int moe_first_nonfinite_row(int T, int D, const uint16_t *x) {
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++)
            if ((x[(size_t)t * D + d] & 0x7F80u) == 0x7F80u) return t; /* exponent all ones */
    return -1;
}

moe_status moe_layer_forward(moe_layer *l, int T, const uint16_t *x, float *out, moe_stages *st,
                             moe_error *err) {
    if (!l) return moe_fail(err, MOE_ERR_ARG, "forward: NULL layer");
    if (T < 0) return moe_fail(err, MOE_ERR_ARG, "forward: token count T = %d is negative", T);
    if (T > 0 && (!x || !out)) return moe_fail(err, MOE_ERR_ARG, "forward: NULL x or out with T = %d", T);
    if (st) st->filled = 0;
    if (l->opt.strict_nonfinite && T > 0) {
        int bad = moe_first_nonfinite_row(T, l->shard->cfg.D, x);
        if (bad >= 0)
            return moe_fail(err, MOE_ERR_NONFINITE_INPUT,
                            "input x: token %d holds NaN or inf (strict mode)", bad);
    }
    return l->backend->forward(l->state, T, x, out, st, err);
}

moe_status moe_layer_route(moe_layer *l, int T, const float *logits, int32_t *ids, float *weights,
                           moe_error *err) {
    if (!l) return moe_fail(err, MOE_ERR_ARG, "route: NULL layer");
    if (!l->backend->route)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "backend %s has no separate routing entry",
                        l->backend->name);
    if (T < 0 || (T > 0 && (!logits || !ids || !weights)))
        return moe_fail(err, MOE_ERR_ARG, "route: bad arguments (T = %d)", T);
    return l->backend->route(l->state, T, logits, ids, weights, err);
}

const moe_shard *moe_layer_shard(const moe_layer *l) { return l ? l->shard : NULL; }
const moe_backend *moe_layer_backend(const moe_layer *l) { return l ? l->backend : NULL; }
void *moe_layer_backend_state(const moe_layer *l) { return l ? l->state : NULL; }

void moe_layer_destroy(moe_layer *l) {
    if (!l) return;
    if (l->state) l->backend->destroy(l->state);
    free(l);
}
