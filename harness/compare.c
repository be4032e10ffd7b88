/*
 * compare.c: running a path into a moe_run and judging two runs stage by stage against the
 * contract envelope (rules in compare.h, derivations in docs/tolerances.md).
 *
 * Rules implemented here:
 *   - a stored value passes when lo <= value <= hi (NaN never passes where a finite value is
 *     due); its error is |value - centre| and its tolerance the half-width of [lo, hi];
 *   - ids: every run's ids must equal the exact routing's (the contract's selection, computed
 *     apart from ref/ by selection.c), except on a near-tie token, where the contract's
 *     selector fed the run's logits must give the run's ids and the run's own
 *     selector (its route entry, when it has one) fed the exact fp32 logits must give the
 *     exact ids; such a token's later stages are not compared for that run;
 *   - a token with a non-finite input row: all-NaN output row, ids in [0, R), NaN weights.
 */
#include "compare.h"

#include "envelope.h"
#include "selection.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- runs */

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

static const char *precision_name(moe_precision p) {
    return p == MOE_PRECISION_EXACT ? "exact" : p == MOE_PRECISION_ENGINE ? "engine" : "serving";
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
    snprintf(run->name, sizeof run->name, "%s/%s%s", be->name, precision_name(opt->precision), split_name);

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

/* ---------------------------------------------------------------- reports */

static const char *const stage_names[MOE_CMP_STAGE_COUNT] = {
    "logits", "ids", "weights", "routed_h", "routed_y", "sink_h", "sink_y", "output"};

const char *moe_cmp_stage_name(moe_cmp_stage s) {
    return (s >= 0 && s < MOE_CMP_STAGE_COUNT) ? stage_names[s] : "?";
}

void moe_cmp_report_print(FILE *f, const moe_cmp_report *rep) {
    fprintf(f, "  %s\n", rep->msg);
    if (rep->ok) return;
    fprintf(f, "    first diverging stage: %s (path %s)\n", moe_cmp_stage_name(rep->first_stage), rep->path);
    fprintf(f, "    worst: token %d, slot %d, expert %d, element %d\n", rep->token, rep->slot,
            rep->expert, rep->element);
    fprintf(f, "    values: A %.9g, B %.9g; exact %.9g; allowed [%.9g, %.9g]\n", rep->value_a,
            rep->value_b, rep->centre, rep->lo, rep->hi);
    fprintf(f, "    error %.3g against tolerance %.3g\n", rep->err, rep->tol);
}

/* ---------------------------------------------------------------- judging */

typedef struct {
    const moe_run *run;
    const moe_envelope *env;
    unsigned char *skip; /* [T] token not compared after the ids (non-finite or re-routed) */
} judged;

/* The worst element of one stage over the runs that filled it. */
typedef struct {
    bool bad;
    double ratio;
    int run; /* 0 = a, 1 = b */
    size_t index;
    double value, centre, lo, hi;
} worst_element;

static double ratio_of(double v, double c, double lo, double hi) {
    if (isnan(v)) return INFINITY;
    double err = fabs(v - c), tol = fmax(c - lo, hi - c);
    if (tol > 0) return err / tol;
    return err > 0 ? INFINITY : 0.0;
}

/* Scans n elements, per_token to a token, of one run's stage against a band. */
static void scan_band(const moe_band *band, const float *values, size_t n, size_t per_token,
                      const unsigned char *skip, int run_index, worst_element *w) {
    for (size_t i = 0; i < n; i++) {
        if (skip[i / per_token]) continue;
        double v = (double)values[i], lo = band->lo[i], hi = band->hi[i], c = band->c[i];
        bool inside = v >= lo && v <= hi; /* false for NaN */
        if (inside) continue;
        double r = ratio_of(v, c, lo, hi);
        if (!w->bad || r > w->ratio) {
            w->bad = true;
            w->ratio = r;
            w->run = run_index;
            w->index = i;
            w->value = v;
            w->centre = c;
            w->lo = lo;
            w->hi = hi;
        }
    }
}

static void fill_failure(moe_cmp_report *rep, moe_cmp_stage stage, const judged *j, int nj,
                         const worst_element *w) {
    const moe_run *r = j[w->run].run;
    const moe_envelope *e = j[w->run].env;
    const int G = e->R + e->S, KS = e->K + e->S;
    size_t i = w->index;
    rep->ok = false;
    rep->first_stage = stage;
    snprintf(rep->path, sizeof rep->path, "%s", r->name);
    rep->token = rep->slot = rep->expert = rep->element = -1;
    size_t per = 1;
    switch (stage) {
    case MOE_CMP_LOGITS: per = (size_t)G; break;
    case MOE_CMP_WEIGHTS: per = (size_t)KS; break;
    case MOE_CMP_ROUTED_H: per = (size_t)e->K * e->I; break;
    case MOE_CMP_ROUTED_Y: per = (size_t)e->K * e->D; break;
    case MOE_CMP_SINK_H: per = (size_t)e->S * e->I; break;
    default: per = (size_t)e->D; break;
    }
    rep->token = (int)(i / per);
    size_t in_token = i % per;
    const int32_t *ids = r->ids + (size_t)rep->token * e->K;
    switch (stage) {
    case MOE_CMP_LOGITS: rep->expert = rep->element = (int)in_token; break;
    case MOE_CMP_WEIGHTS:
        rep->slot = (int)in_token;
        rep->expert = rep->slot < e->K ? ids[rep->slot] : e->R + (rep->slot - e->K);
        break;
    case MOE_CMP_ROUTED_H:
    case MOE_CMP_ROUTED_Y: {
        size_t width = stage == MOE_CMP_ROUTED_H ? (size_t)e->I : (size_t)e->D;
        rep->slot = (int)(in_token / width);
        rep->element = (int)(in_token % width);
        rep->expert = ids[rep->slot];
        break;
    }
    case MOE_CMP_SINK_H:
        rep->slot = (int)(in_token / (size_t)e->I);
        rep->element = (int)(in_token % (size_t)e->I);
        rep->expert = e->R + rep->slot;
        break;
    default: rep->element = (int)in_token; break;
    }
    rep->value_a = rep->value_b = NAN;
    for (int k = 0; k < nj; k++) {
        const float *arr = NULL;
        const moe_run *rk = j[k].run;
        switch (stage) {
        case MOE_CMP_LOGITS: arr = rk->logits; break;
        case MOE_CMP_WEIGHTS: arr = rk->weights; break;
        case MOE_CMP_ROUTED_H: arr = rk->routed_h; break;
        case MOE_CMP_ROUTED_Y: arr = rk->routed_y; break;
        case MOE_CMP_SINK_H: arr = rk->sink_h; break;
        case MOE_CMP_SINK_Y: arr = rk->sink_y; break;
        default: arr = rk->out; break;
        }
        double v = arr ? (double)arr[i] : NAN;
        if (k == 0) rep->value_a = v;
        else rep->value_b = v;
    }
    rep->centre = w->centre;
    rep->lo = w->lo;
    rep->hi = w->hi;
    rep->err = fabs(w->value - w->centre);
    rep->tol = fmax(w->centre - w->lo, w->hi - w->centre);
    snprintf(rep->msg, sizeof rep->msg,
             "FAIL stage %s: %s left the %s envelope at token %d slot %d expert %d element %d: "
             "value %.9g, exact %.9g, allowed [%.9g, %.9g], error %.3g vs tolerance %.3g (%.3gx)",
             moe_cmp_stage_name(stage), r->name, precision_name(e->precision), rep->token,
             rep->slot, rep->expert, rep->element, w->value, w->centre, w->lo, w->hi, rep->err,
             rep->tol, w->ratio);
}

/* A selector on one layer: the router of a backend, made on demand (near-ties are rare). */
typedef struct {
    moe_shard shard;
    moe_layer *layer;
    bool made;
} router;

static moe_status router_route(router *rt, const moe_backend *be, const moe_options *opt,
                               const moe_cmp_case *cc, const float *logits, int32_t *ids,
                               float *weights, moe_error *err) {
    if (!rt->made) {
        moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
        moe_status st = moe_shard_build(cc->cfg, cc->w, &none, &rt->shard, err);
        if (st) return st;
        rt->made = true;
        st = moe_layer_create(be, &rt->shard, opt, &rt->layer, err);
        if (st) return st;
    }
    return moe_layer_route(rt->layer, 1, logits, ids, weights, err);
}

static void router_free(router *rt) {
    if (!rt->made) return;
    moe_layer_destroy(rt->layer);
    moe_shard_free(&rt->shard);
}

static bool ids_equal(const int32_t *a, const int32_t *b, int K) {
    for (int k = 0; k < K; k++)
        if (a[k] != b[k]) return false;
    return true;
}

/* The ids stage for one run: exact, or a near-tie on which both selectors agree. */
static moe_status judge_ids(const moe_cmp_case *cc, judged *j, int run_index, router *own_router,
                            int *near_ties, moe_cmp_report *rep, moe_error *err) {
    const moe_run *r = j->run;
    const moe_envelope *e = j->env;
    const int K = e->K, R = e->R, S = e->S, G = R + S;
    int32_t *tmp_ids = malloc((size_t)K * sizeof(int32_t));
    float *tmp_w = malloc((size_t)(K + S) * sizeof(float));
    float *exact_logits = malloc((size_t)G * sizeof(float));
    if (!tmp_ids || !tmp_w || !exact_logits) {
        free(tmp_ids);
        free(tmp_w);
        free(exact_logits);
        return moe_fail(err, MOE_ERR_NOMEM, "compare: out of memory");
    }
    moe_status st = MOE_OK;
    for (int t = 0; t < e->T && !st && rep->ok; t++) {
        const int32_t *got = r->ids + (size_t)t * K, *want = e->ids + (size_t)t * K;
        int bad_slot = -1;
        for (int k = 0; k < K; k++)
            if (got[k] < 0 || got[k] >= R) bad_slot = bad_slot < 0 ? k : bad_slot;
        bool agree = bad_slot < 0;
        if (agree && !e->nonfinite[t] && !ids_equal(got, want, K)) {
            agree = false;
            if (e->near_tie[t]) {
                /* feed the contract's selector (selection.c) this run's logits ... */
                contract_select(r->logits + (size_t)t * G, cc->cfg->has_gate_bias ? cc->w->gate_bias : NULL,
                                R, K, tmp_ids, tmp_w);
                bool ref_agrees = ids_equal(tmp_ids, got, K);
                /* ... and this run's selector the exact logits */
                bool own_agrees = true;
                if (!st && r->backend->route) {
                    for (int g = 0; g < G; g++) exact_logits[g] = (float)e->logits.c[(size_t)t * G + g];
                    st = router_route(own_router, r->backend, &r->opt, cc, exact_logits, tmp_ids, tmp_w, err);
                    own_agrees = !st && ids_equal(tmp_ids, want, K);
                }
                if (ref_agrees && own_agrees) {
                    agree = true;
                    j->skip[t] = 1;
                    (*near_ties)++;
                }
            }
            for (int k = 0; k < K && bad_slot < 0; k++)
                if (got[k] != want[k]) bad_slot = k;
        }
        if (agree) continue;
        rep->ok = false;
        rep->first_stage = MOE_CMP_IDS;
        snprintf(rep->path, sizeof rep->path, "%s", r->name);
        rep->token = t;
        rep->slot = bad_slot;
        rep->expert = got[bad_slot];
        rep->element = bad_slot;
        rep->value_a = run_index == 0 ? got[bad_slot] : NAN;
        rep->value_b = run_index == 1 ? got[bad_slot] : NAN;
        rep->centre = rep->lo = rep->hi = e->nonfinite[t] ? NAN : want[bad_slot];
        rep->err = rep->tol = 0;
        snprintf(rep->msg, sizeof rep->msg,
                 "FAIL stage ids: %s token %d slot %d selects expert %d, the exact routing %d%s",
                 r->name, t, bad_slot, got[bad_slot], e->nonfinite[t] ? -1 : want[bad_slot],
                 got[bad_slot] < 0 || got[bad_slot] >= R ? " (not in [0, R))"
                 : e->near_tie[t] ? " (near-tie, but the selectors disagree on the same logits)"
                                  : " (not a near-tie)");
    }
    free(tmp_ids);
    free(tmp_w);
    free(exact_logits);
    return st;
}

/* Non-finite tokens: NaN weights and an all-NaN output row. */
static void judge_nonfinite(const judged *j, moe_cmp_report *rep) {
    const moe_run *r = j->run;
    const moe_envelope *e = j->env;
    for (int t = 0; t < e->T && rep->ok; t++) {
        if (!e->nonfinite[t]) continue;
        int bad = -1;
        const char *what = "";
        for (int k = 0; k < e->K + e->S && bad < 0; k++)
            if (!isnan(r->weights[(size_t)t * (e->K + e->S) + k])) bad = k, what = "weight";
        for (int d = 0; d < e->D && bad < 0; d++)
            if (!isnan(r->out[(size_t)t * e->D + d])) bad = d, what = "output element";
        if (bad < 0) continue;
        rep->ok = false;
        rep->first_stage = what[0] == 'w' ? MOE_CMP_WEIGHTS : MOE_CMP_OUTPUT;
        snprintf(rep->path, sizeof rep->path, "%s", r->name);
        rep->token = t;
        rep->element = bad;
        snprintf(rep->msg, sizeof rep->msg,
                 "FAIL stage %s: %s token %d has a non-finite input row but %s %d is not NaN",
                 moe_cmp_stage_name((moe_cmp_stage)rep->first_stage), r->name, t, what, bad);
    }
}

moe_status moe_compare_runs(const moe_cmp_case *cc, const moe_run *a, const moe_run *b,
                            const moe_envelope *env_a, const moe_envelope *env_b,
                            moe_cmp_report *rep, moe_error *err) {
    if (!rep) return moe_fail(err, MOE_ERR_ARG, "compare: NULL report");
    memset(rep, 0, sizeof *rep);
    rep->ok = true;
    rep->first_stage = -1;
    rep->token = rep->slot = rep->expert = rep->element = -1;
    if (!cc || !cc->cfg || !a) return moe_fail(err, MOE_ERR_ARG, "compare: NULL case or run");
    const moe_config *c = cc->cfg;
    const moe_run *runs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const moe_run *r = runs[k];
        if (!r) continue;
        if (r->T != cc->T || r->D != c->D || r->I != c->I || r->R != c->R || r->K != c->K || r->S != c->S)
            return moe_fail(err, MOE_ERR_ARG, "compare: run %s was made on another case", r->name);
        if (r->opt.precision != a->opt.precision)
            return moe_fail(err, MOE_ERR_ARG, "compare: runs %s and %s claim different contracts",
                            a->name, r->name);
    }
    moe_envelope *made[2] = {NULL, NULL};
    const moe_envelope *envs[2] = {env_a, env_b};
    moe_status st = MOE_OK;
    for (int k = 0; k < 2 && !st; k++) {
        if (!runs[k] || envs[k]) continue;
        if (k == 1 && a->split_kind == b->split_kind && a->split_n == b->split_n) {
            envs[1] = envs[0];
            continue;
        }
        st = moe_envelope_build(cc, a->opt.precision, runs[k]->split_kind, runs[k]->split_n, &made[k], err);
        envs[k] = made[k];
    }
    const int nj = b ? 2 : 1;
    judged j[2] = {{a, envs[0], NULL}, {b, envs[1], NULL}};
    for (int k = 0; k < nj && !st; k++) {
        j[k].skip = calloc(cc->T > 0 ? (size_t)cc->T : 1, 1);
        if (!j[k].skip) st = moe_fail(err, MOE_ERR_NOMEM, "compare: out of memory");
        else
            for (int t = 0; t < cc->T; t++) j[k].skip[t] = envs[k]->nonfinite[t];
    }
    router routers[2];
    memset(routers, 0, sizeof routers);
    const size_t T = (size_t)cc->T, G = (size_t)(c->R + c->S), KS = (size_t)(c->K + c->S);
    const size_t KI = (size_t)c->K * c->I, KD = (size_t)c->K * c->D, SI = (size_t)c->S * c->I;
    for (int stage = 0; stage < MOE_CMP_STAGE_COUNT && !st && rep->ok && T > 0; stage++) {
        worst_element w = {0};
        for (int k = 0; k < nj && !st && rep->ok; k++) {
            const moe_run *r = j[k].run;
            const moe_envelope *e = j[k].env;
            bool inter = r->split_kind == MOE_SPLIT_NONE && r->pad_inter_to == 0;
            switch ((moe_cmp_stage)stage) {
            case MOE_CMP_LOGITS:
                if (!(r->filled & MOE_STAGE_LOGITS)) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->logits, r->logits, T * G, G, j[k].skip, k, &w);
                break;
            case MOE_CMP_IDS:
                if (!(r->filled & MOE_STAGE_TOPK)) break;
                rep->stages_compared |= 1u << stage;
                st = judge_ids(cc, &j[k], k, &routers[k], &rep->near_ties, rep, err);
                if (!st && rep->ok) judge_nonfinite(&j[k], rep);
                break;
            case MOE_CMP_WEIGHTS:
                if (!(r->filled & MOE_STAGE_TOPK)) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->weights, r->weights, T * KS, KS, j[k].skip, k, &w);
                break;
            case MOE_CMP_ROUTED_H:
                if (!inter || !(r->filled & MOE_STAGE_ROUTED_H) || !KI) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->routed_h, r->routed_h, T * KI, KI, j[k].skip, k, &w);
                break;
            case MOE_CMP_ROUTED_Y:
                if (!inter || !(r->filled & MOE_STAGE_ROUTED_Y) || !KD) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->routed_y, r->routed_y, T * KD, KD, j[k].skip, k, &w);
                break;
            case MOE_CMP_SINK_H:
                if (!inter || !(r->filled & MOE_STAGE_SINK_H) || !SI) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->sink_h, r->sink_h, T * SI, SI, j[k].skip, k, &w);
                break;
            case MOE_CMP_SINK_Y:
                if (!inter || !(r->filled & MOE_STAGE_SINK_Y) || !c->S) break;
                rep->stages_compared |= 1u << stage;
                scan_band(&e->sink_y, r->sink_y, T * (size_t)c->D, (size_t)c->D, j[k].skip, k, &w);
                break;
            case MOE_CMP_OUTPUT:
                rep->stages_compared |= 1u << stage;
                scan_band(r->split_kind == MOE_SPLIT_NONE ? &e->out_unsplit : &e->out_split, r->out,
                          T * (size_t)c->D, (size_t)c->D, j[k].skip, k, &w);
                break;
            default: break;
            }
        }
        if (w.bad) fill_failure(rep, (moe_cmp_stage)stage, j, nj, &w);
    }
    if (rep->ok)
        snprintf(rep->msg, sizeof rep->msg, "ok: %s%s%s inside the %s envelope (%d near-tie token%s)",
                 a->name, b ? " and " : "", b ? b->name : "", precision_name(a->opt.precision),
                 rep->near_ties, rep->near_ties == 1 ? "" : "s");
    for (int k = 0; k < 2; k++) router_free(&routers[k]);
    for (int k = 0; k < 2; k++) {
        free(j[k].skip);
        moe_envelope_free(made[k]);
    }
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

moe_status moe_check_against_ref(const moe_backend *be, const moe_options *opt,
                                 const moe_cmp_case *cc, moe_split_kind kind, int n, int pad,
                                 moe_cmp_report *rep, moe_error *err) {
    if (!opt || !cc) return moe_fail(err, MOE_ERR_ARG, "check: NULL options or case");
    moe_options ref_opt = moe_options_default();
    ref_opt.precision = opt->precision;
    moe_run ref, path;
    moe_status st = moe_run_path(&moe_backend_ref, &ref_opt, cc->cfg, cc->w, MOE_SPLIT_NONE, 1, 0,
                                 cc->T, cc->x, true, &ref, err);
    if (!st) st = moe_run_path(be, opt, cc->cfg, cc->w, kind, n, pad, cc->T, cc->x, true, &path, err);
    else memset(&path, 0, sizeof path);
    if (!st) st = moe_compare_runs(cc, &ref, &path, NULL, NULL, rep, err);
    moe_run_free(&ref);
    moe_run_free(&path);
    return st;
}
