/*
 * compare.c: judging a reference run and a candidate run stage by stage against the contract
 * envelope (rules in compare.h, derivations in docs/tolerances.md). Running a path into a
 * moe_run is run_path.c.
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

/* The two runs of a comparison, in this order everywhere in this file. */
enum { REFERENCE = 0, CANDIDATE = 1 };

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
    fprintf(f, "    values: reference %.9g, candidate %.9g; exact %.9g; allowed [%.9g, %.9g]\n",
            rep->value_reference, rep->value_candidate, rep->centre, rep->lo, rep->hi);
    fprintf(f, "    error %.3g against tolerance %.3g\n", rep->err, rep->tol);
}

void moe_cmp_stages_print(FILE *f, const moe_cmp_report *rep) {
    fprintf(f, "stages compared:");
    for (int s = 0; s < MOE_CMP_STAGE_COUNT; s++)
        if (rep->stages_compared & (1u << s)) fprintf(f, " %s", moe_cmp_stage_name((moe_cmp_stage)s));
    fprintf(f, "\n");
}

/* ---------------------------------------------------------------- one stage of one run */

typedef struct {
    const moe_run *run;  /* NULL: this side of the comparison is absent */
    const moe_envelope *env;
    unsigned char *skip; /* [T] token not compared after the ids (non-finite or re-routed) */
} judged;

/* A banded stage of one run: its values [T, per_token] and their allowed intervals. */
typedef struct {
    const moe_band *band;
    const float *values; /* NULL where the run holds no such array */
    size_t per_token;
    bool compared; /* the run filled the stage, and it is compared for this run */
} stage_view;

static stage_view view_of(moe_cmp_stage s, const moe_run *r, const moe_envelope *e) {
    const size_t G = (size_t)(e->R + e->S), KS = (size_t)(e->K + e->S), D = (size_t)e->D;
    const size_t KI = (size_t)e->K * e->I, KD = (size_t)e->K * D, SI = (size_t)e->S * e->I;
    /* a rank's intermediates hold a slab: compared only for unsplit, unpadded runs */
    const bool inter = r->split_kind == MOE_SPLIT_NONE && r->pad_inter_to == 0;
    const unsigned f = r->filled;
    switch (s) {
    case MOE_CMP_LOGITS: return (stage_view){&e->logits, r->logits, G, f & MOE_STAGE_LOGITS};
    case MOE_CMP_WEIGHTS: return (stage_view){&e->weights, r->weights, KS, f & MOE_STAGE_TOPK};
    case MOE_CMP_ROUTED_H:
        return (stage_view){&e->routed_h, r->routed_h, KI, inter && (f & MOE_STAGE_ROUTED_H) && KI};
    case MOE_CMP_ROUTED_Y:
        return (stage_view){&e->routed_y, r->routed_y, KD, inter && (f & MOE_STAGE_ROUTED_Y) && KD};
    case MOE_CMP_SINK_H: return (stage_view){&e->sink_h, r->sink_h, SI, inter && (f & MOE_STAGE_SINK_H) && SI};
    case MOE_CMP_SINK_Y: return (stage_view){&e->sink_y, r->sink_y, D, inter && (f & MOE_STAGE_SINK_Y) && e->S};
    default:
        return (stage_view){r->split_kind == MOE_SPLIT_NONE ? &e->out_unsplit : &e->out_split, r->out, D, true};
    }
}

/* The worst element of one stage over the runs that filled it. */
typedef struct {
    bool bad;
    double ratio;
    int side; /* REFERENCE or CANDIDATE */
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
                      const unsigned char *skip, int side, worst_element *w) {
    for (size_t i = 0; i < n; i++) {
        if (skip[i / per_token]) continue;
        double v = (double)values[i], lo = band->lo[i], hi = band->hi[i], c = band->c[i];
        bool inside = v >= lo && v <= hi; /* false for NaN */
        if (inside) continue;
        double r = ratio_of(v, c, lo, hi);
        if (!w->bad || r > w->ratio) *w = (worst_element){true, r, side, i, v, c, lo, hi};
    }
}

/* Token, slot, expert and element of index i of a stage (-1 where the stage has none). */
static void locate(moe_cmp_report *rep, moe_cmp_stage stage, const moe_run *r, const moe_envelope *e,
                   size_t i, size_t per_token) {
    rep->token = (int)(i / per_token);
    const size_t in_token = i % per_token;
    const int32_t *ids = r->ids + (size_t)rep->token * e->K;
    rep->slot = rep->expert = rep->element = -1;
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
}

static void fill_failure(moe_cmp_report *rep, moe_cmp_stage stage, const judged *j, const worst_element *w) {
    const moe_run *r = j[w->side].run;
    const moe_envelope *e = j[w->side].env;
    rep->ok = false;
    rep->first_stage = stage;
    snprintf(rep->path, sizeof rep->path, "%s", r->name);
    locate(rep, stage, r, e, w->index, view_of(stage, r, e).per_token);
    double v[2] = {NAN, NAN}; /* both runs' values there, where they hold the array */
    for (int k = REFERENCE; k <= CANDIDATE; k++) {
        const float *arr = j[k].run ? view_of(stage, j[k].run, e).values : NULL;
        if (arr) v[k] = (double)arr[w->index];
    }
    rep->value_reference = v[REFERENCE];
    rep->value_candidate = v[CANDIDATE];
    rep->centre = w->centre;
    rep->lo = w->lo;
    rep->hi = w->hi;
    rep->err = fabs(w->value - w->centre);
    rep->tol = fmax(w->centre - w->lo, w->hi - w->centre);
    snprintf(rep->msg, sizeof rep->msg,
             "FAIL stage %s: %s left the %s envelope at token %d slot %d expert %d element %d: "
             "value %.9g, exact %.9g, allowed [%.9g, %.9g], error %.3g vs tolerance %.3g (%.3gx)",
             moe_cmp_stage_name(stage), r->name, moe_cmp_precision_name(e->precision), rep->token,
             rep->slot, rep->expert, rep->element, w->value, w->centre, w->lo, w->hi, rep->err,
             rep->tol, w->ratio);
}

/* ---------------------------------------------------------------- ids */

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

/* Scratch of the near-tie check: ids [K], weights [K+S], logits [R+S]. */
typedef struct {
    int32_t *ids;
    float *weights, *logits;
} tie_scratch;

/* Token t's ids differ from the exact ones on a near-tie: do both selectors agree when fed the
 * same logits? The contract's selector (selection.c) on this run's logits must give this run's
 * ids, and this run's own selector on the exact logits the exact ids. */
static moe_status near_tie_agrees(const moe_cmp_case *cc, const judged *j, int t, router *own_router,
                                  tie_scratch *s, bool *agree, moe_error *err) {
    const moe_run *r = j->run;
    const moe_envelope *e = j->env;
    const int K = e->K, R = e->R, G = R + e->S;
    const int32_t *got = r->ids + (size_t)t * K, *want = e->ids + (size_t)t * K;
    contract_select(r->logits + (size_t)t * G, cc->cfg->has_gate_bias ? cc->w->gate_bias : NULL, R, K,
                    s->ids, s->weights);
    *agree = ids_equal(s->ids, got, K);
    if (!*agree || !r->backend->route) return MOE_OK;
    for (int g = 0; g < G; g++) s->logits[g] = (float)e->logits.c[(size_t)t * G + g];
    moe_status st = router_route(own_router, r->backend, &r->opt, cc, s->logits, s->ids, s->weights, err);
    *agree = !st && ids_equal(s->ids, want, K);
    return st;
}

static void fail_ids(moe_cmp_report *rep, const judged *j, int side, int t, int bad_slot) {
    const moe_run *r = j->run;
    const moe_envelope *e = j->env;
    const int32_t *got = r->ids + (size_t)t * e->K, *want = e->ids + (size_t)t * e->K;
    rep->ok = false;
    rep->first_stage = MOE_CMP_IDS;
    snprintf(rep->path, sizeof rep->path, "%s", r->name);
    rep->token = t;
    rep->slot = bad_slot;
    rep->expert = got[bad_slot];
    rep->element = bad_slot;
    rep->value_reference = side == REFERENCE ? got[bad_slot] : NAN;
    rep->value_candidate = side == CANDIDATE ? got[bad_slot] : NAN;
    rep->centre = rep->lo = rep->hi = e->nonfinite[t] ? NAN : want[bad_slot];
    rep->err = rep->tol = 0;
    snprintf(rep->msg, sizeof rep->msg,
             "FAIL stage ids: %s token %d slot %d selects expert %d, the exact routing %d%s",
             r->name, t, bad_slot, got[bad_slot], e->nonfinite[t] ? -1 : want[bad_slot],
             got[bad_slot] < 0 || got[bad_slot] >= e->R ? " (not in [0, R))"
             : e->near_tie[t] ? " (near-tie, but the selectors disagree on the same logits)"
                              : " (not a near-tie)");
}

/* The ids stage for one run: exact, or a near-tie on which both selectors agree. */
static moe_status judge_ids(const moe_cmp_case *cc, judged *j, int side, router *own_router,
                            int *near_ties, moe_cmp_report *rep, moe_error *err) {
    const moe_envelope *e = j->env;
    const int K = e->K, R = e->R;
    tie_scratch s = {malloc((size_t)K * sizeof(int32_t)), malloc((size_t)(K + e->S) * sizeof(float)),
                     malloc((size_t)(R + e->S) * sizeof(float))};
    moe_status st = s.ids && s.weights && s.logits ? MOE_OK : moe_fail(err, MOE_ERR_NOMEM, "compare: out of memory");
    for (int t = 0; t < e->T && !st && rep->ok; t++) {
        const int32_t *got = j->run->ids + (size_t)t * K, *want = e->ids + (size_t)t * K;
        int bad_slot = -1;
        for (int k = 0; k < K; k++)
            if ((got[k] < 0 || got[k] >= R) && bad_slot < 0) bad_slot = k;
        bool agree = bad_slot < 0;
        if (agree && !e->nonfinite[t] && !ids_equal(got, want, K)) {
            agree = false;
            if (e->near_tie[t]) st = near_tie_agrees(cc, j, t, own_router, &s, &agree, err);
            if (agree) {
                j->skip[t] = 1;
                (*near_ties)++;
            }
            for (int k = 0; k < K && bad_slot < 0; k++)
                if (got[k] != want[k]) bad_slot = k;
        }
        if (!agree) fail_ids(rep, j, side, t, bad_slot);
    }
    free(s.ids);
    free(s.weights);
    free(s.logits);
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

/* ---------------------------------------------------------------- the comparison */

/* Both runs (where present) were made on the case and claim the same contract. */
static moe_status check_runs(const moe_cmp_case *cc, const judged *j, moe_error *err) {
    const moe_config *c = cc->cfg;
    const moe_run *first = j[REFERENCE].run ? j[REFERENCE].run : j[CANDIDATE].run;
    for (int k = REFERENCE; k <= CANDIDATE; k++) {
        const moe_run *r = j[k].run;
        if (!r) continue;
        if (r->T != cc->T || r->D != c->D || r->I != c->I || r->R != c->R || r->K != c->K || r->S != c->S)
            return moe_fail(err, MOE_ERR_ARG, "compare: run %s was made on another case", r->name);
        if (r->opt.precision != first->opt.precision)
            return moe_fail(err, MOE_ERR_ARG, "compare: runs %s and %s claim different contracts",
                            first->name, r->name);
    }
    return MOE_OK;
}

/* Each present run's envelope: the one given, the other run's when both have the same split,
 * else built here into made[k]; and its skip array, the non-finite tokens to start with. */
static moe_status prepare_judged(const moe_cmp_case *cc, judged *j, moe_envelope **made, moe_error *err) {
    moe_status st = MOE_OK;
    for (int k = REFERENCE; k <= CANDIDATE && !st; k++) {
        const moe_run *r = j[k].run, *other = j[1 - k].run;
        if (!r || j[k].env) continue;
        if (k == CANDIDATE && other && j[REFERENCE].env && other->split_kind == r->split_kind &&
            other->split_n == r->split_n) {
            j[k].env = j[REFERENCE].env;
            continue;
        }
        st = moe_envelope_build(cc, r->opt.precision, r->split_kind, r->split_n, &made[k], err);
        j[k].env = made[k];
    }
    for (int k = REFERENCE; k <= CANDIDATE && !st; k++) {
        if (!j[k].run) continue;
        j[k].skip = calloc(cc->T > 0 ? (size_t)cc->T : 1, 1);
        if (!j[k].skip) return moe_fail(err, MOE_ERR_NOMEM, "compare: out of memory");
        for (int t = 0; t < cc->T; t++) j[k].skip[t] = j[k].env->nonfinite[t];
    }
    return st;
}

/* One stage of both runs; the worst element outside its interval becomes the failure. */
static moe_status judge_stage(const moe_cmp_case *cc, moe_cmp_stage stage, judged *j, router *routers,
                              moe_cmp_report *rep, moe_error *err) {
    worst_element w = {0};
    moe_status st = MOE_OK;
    for (int k = REFERENCE; k <= CANDIDATE && !st && rep->ok; k++) {
        const moe_run *r = j[k].run;
        if (!r) continue;
        if (stage == MOE_CMP_IDS) {
            if (!(r->filled & MOE_STAGE_TOPK)) continue;
            rep->stages_compared |= 1u << stage;
            st = judge_ids(cc, &j[k], k, &routers[k], &rep->near_ties, rep, err);
            if (!st && rep->ok) judge_nonfinite(&j[k], rep);
            continue;
        }
        const stage_view v = view_of(stage, r, j[k].env);
        if (!v.compared) continue;
        rep->stages_compared |= 1u << stage;
        scan_band(v.band, v.values, (size_t)cc->T * v.per_token, v.per_token, j[k].skip, k, &w);
    }
    if (w.bad) fill_failure(rep, stage, j, &w);
    return st;
}

moe_status moe_compare_runs(const moe_cmp_case *cc, const moe_run *reference, const moe_run *candidate,
                            const moe_envelope *env_reference, const moe_envelope *env_candidate,
                            moe_cmp_report *rep, moe_error *err) {
    if (!rep) return moe_fail(err, MOE_ERR_ARG, "compare: NULL report");
    memset(rep, 0, sizeof *rep);
    rep->ok = true;
    rep->first_stage = -1;
    rep->token = rep->slot = rep->expert = rep->element = -1;
    if (!cc || !cc->cfg || (!reference && !candidate))
        return moe_fail(err, MOE_ERR_ARG, "compare: NULL case or no run");
    judged j[2] = {{reference, env_reference, NULL}, {candidate, env_candidate, NULL}};
    moe_envelope *made[2] = {NULL, NULL};
    router routers[2];
    memset(routers, 0, sizeof routers);
    moe_status st = check_runs(cc, j, err);
    if (!st) st = prepare_judged(cc, j, made, err);
    for (int stage = 0; stage < MOE_CMP_STAGE_COUNT && !st && rep->ok && cc->T > 0; stage++)
        st = judge_stage(cc, (moe_cmp_stage)stage, j, routers, rep, err);
    if (!st && rep->ok) {
        const moe_run *one = reference ? reference : candidate;
        if (reference && candidate)
            snprintf(rep->msg, sizeof rep->msg, "ok: candidate %s and reference %s inside the %s envelope "
                     "(%d near-tie token%s)", candidate->name, reference->name,
                     moe_cmp_precision_name(one->opt.precision), rep->near_ties, rep->near_ties == 1 ? "" : "s");
        else
            snprintf(rep->msg, sizeof rep->msg, "ok: %s inside the %s envelope (%d near-tie token%s)", one->name,
                     moe_cmp_precision_name(one->opt.precision), rep->near_ties, rep->near_ties == 1 ? "" : "s");
    }
    for (int k = REFERENCE; k <= CANDIDATE; k++) {
        router_free(&routers[k]);
        free(j[k].skip);
        moe_envelope_free(made[k]);
    }
    return st;
}

moe_status moe_check_against_ref(const moe_backend *be, const moe_options *opt,
                                 const moe_cmp_case *cc, moe_split_kind kind, int n, int pad,
                                 moe_cmp_report *rep, moe_error *err) {
    if (!opt || !cc) return moe_fail(err, MOE_ERR_ARG, "check: NULL options or case");
    moe_options ref_opt = moe_options_default();
    ref_opt.precision = opt->precision;
    moe_run reference, candidate;
    moe_status st = moe_run_path(&moe_backend_ref, &ref_opt, cc->cfg, cc->w, MOE_SPLIT_NONE, 1, 0,
                                 cc->T, cc->x, true, &reference, err);
    if (!st) st = moe_run_path(be, opt, cc->cfg, cc->w, kind, n, pad, cc->T, cc->x, true, &candidate, err);
    else memset(&candidate, 0, sizeof candidate);
    if (!st) st = moe_compare_runs(cc, &reference, &candidate, NULL, NULL, rep, err);
    moe_run_free(&reference);
    moe_run_free(&candidate);
    return st;
}
