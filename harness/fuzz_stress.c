/*
 * fuzz_stress.c: the history check of a case and the stress plan (rules in fuzz_stress.h).
 */
#include "fuzz_stress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- bit-for-bit comparison */

typedef struct {
    moe_cmp_stage stage;
    unsigned bit; /* MOE_STAGE_* that says the stage was filled; 0: the output, always */
    const void *reference, *candidate;
    int row;      /* 4-byte elements per token */
    bool is_int;
} stage_array;

/* The first element whose bits differ: the report names it, the fresh value the one expected. */
static void fail_element(const stage_array *x, size_t i, const moe_run *candidate, moe_cmp_report *rep) {
    const unsigned char *pr = (const unsigned char *)x->reference + 4 * i;
    const unsigned char *pc = (const unsigned char *)x->candidate + 4 * i;
    float fr, fc;
    int32_t ir, ic;
    memcpy(&fr, pr, 4), memcpy(&fc, pc, 4);
    memcpy(&ir, pr, 4), memcpy(&ic, pc, 4);
    rep->ok = false;
    rep->first_stage = x->stage;
    rep->token = (int)(i / (size_t)x->row);
    rep->element = (int)(i % (size_t)x->row);
    rep->value_reference = x->is_int ? ir : fr;
    rep->value_candidate = x->is_int ? ic : fc;
    /* the fresh value is the one expected, with no tolerance */
    rep->centre = rep->lo = rep->hi = rep->value_reference;
    rep->err = fabs(rep->value_candidate - rep->value_reference);
    snprintf(rep->path, sizeof rep->path, "%s", candidate->name);
    snprintf(rep->msg, sizeof rep->msg, "FAIL: %s after its history differs from a fresh "
             "instance: stage %s, token %d, element %d: %.9g (bits %08x) against %.9g "
             "(bits %08x, fresh)", candidate->name, moe_cmp_stage_name(x->stage), rep->token,
             rep->element, rep->value_candidate, (unsigned)ic, rep->value_reference, (unsigned)ir);
}

bool fuzz_runs_identical(const moe_run *reference, const moe_run *candidate, moe_cmp_report *rep) {
    const moe_run *f = reference, *c = candidate;
    memset(rep, 0, sizeof *rep);
    rep->ok = true;
    rep->first_stage = -1;
    rep->slot = rep->expert = -1;
    const int G = c->R + c->S;
    const stage_array arrays[] = {
        {MOE_CMP_LOGITS, MOE_STAGE_LOGITS, f->logits, c->logits, G, false},
        {MOE_CMP_IDS, MOE_STAGE_TOPK, f->ids, c->ids, c->K, true},
        {MOE_CMP_WEIGHTS, MOE_STAGE_TOPK, f->weights, c->weights, c->K + c->S, false},
        {MOE_CMP_ROUTED_H, MOE_STAGE_ROUTED_H, f->routed_h, c->routed_h, c->K * c->I, false},
        {MOE_CMP_ROUTED_Y, MOE_STAGE_ROUTED_Y, f->routed_y, c->routed_y, c->K * c->D, false},
        {MOE_CMP_SINK_H, MOE_STAGE_SINK_H, f->sink_h, c->sink_h, c->S * c->I, false},
        {MOE_CMP_SINK_Y, MOE_STAGE_SINK_Y, f->sink_y, c->sink_y, c->D, false},
        {MOE_CMP_OUTPUT, 0, f->out, c->out, c->D, false},
    };
    if (c->filled != f->filled || c->T != f->T) {
        rep->ok = false;
        rep->first_stage = MOE_CMP_OUTPUT;
        snprintf(rep->msg, sizeof rep->msg, "FAIL: %s after its history filled stages 0x%x for %d "
                 "tokens, a fresh instance 0x%x for %d", c->name, c->filled, c->T, f->filled, f->T);
        return false;
    }
    for (size_t s = 0; s < sizeof arrays / sizeof arrays[0]; s++) {
        const stage_array *x = &arrays[s];
        if (!x->reference || !x->candidate || (x->bit && !(c->filled & x->bit))) continue;
        rep->stages_compared |= 1u << x->stage;
        const size_t n = (size_t)c->T * (size_t)x->row;
        for (size_t i = 0; i < n; i++) {
            if (memcmp((const char *)x->reference + 4 * i, (const char *)x->candidate + 4 * i, 4)) {
                fail_element(x, i, c, rep);
                return false;
            }
        }
    }
    snprintf(rep->msg, sizeof rep->msg, "ok: %s after its history equals a fresh instance bit for bit", c->name);
    return true;
}

/* ---------------------------------------------------------------- the history check */

typedef struct {
    const fuzz_case *c;
    const moe_layer_data *ld;
    const uint16_t *x;
} stress_input;

/* After a difference: a second fresh instance says which of the two runs was the odd one out
 * (a racy path can be wrong on a fresh instance too); appended to the report's message. */
static void odd_one_out(const moe_run *lived, const moe_run *fresh, const moe_backend *be,
                        const moe_options *opt, const stress_input *in, moe_split_kind kind, int n,
                        int pad, moe_cmp_report *rep) {
    moe_run again;
    moe_error err;
    moe_cmp_report ignored;
    const char *verdict = "a second fresh instance could not run";
    if (!fuzz_run_on(NULL, be, opt, &in->c->cfg, &in->ld->w, kind, n, pad, in->c->T, in->x, &again, &err)) {
        if (fuzz_runs_identical(&again, lived, &ignored)) verdict = "a second fresh instance equals the live one: the first fresh run was wrong";
        else if (fuzz_runs_identical(fresh, &again, &ignored)) verdict = "a second fresh instance equals the first: the live instance was wrong";
        else verdict = "a second fresh instance differs from both";
    }
    moe_run_free(&again);
    size_t used = strlen(rep->msg);
    snprintf(rep->msg + used, sizeof rep->msg - used, "; %s", verdict);
}

static moe_status stress_path(const fuzz_targets *tg, const moe_backend *be, const moe_options *opt,
                              const stress_input *in, bool split, fuzz_case_result *res, moe_error *err) {
    char path[48];
    snprintf(path, sizeof path, "%s/%s%s", be->name,
             opt->precision == MOE_PRECISION_EXACT ? "exact" : "serving", split ? "/split" : "");
    fuzz_path_result *r = fuzz_add_result(res, path, err);
    if (!r) return MOE_ERR_INTERNAL;
    const fuzz_case *c = in->c;
    const moe_split_kind kind = split ? c->split : MOE_SPLIT_NONE;
    const int n = split ? c->n : 1, pad = split ? c->pad : 0;
    moe_run lived, fresh;
    moe_error run_err;
    moe_error_clear(&run_err);
    moe_status st = fuzz_run_on(tg->pool, be, opt, &c->cfg, &in->ld->w, kind, n, pad, c->T, in->x,
                                &lived, &run_err);
    if (fuzz_path_not_run(r, st, &lived, &run_err)) {
        moe_run_free(&lived);
        return MOE_OK;
    }
    st = fuzz_run_on(NULL, be, opt, &c->cfg, &in->ld->w, kind, n, pad, c->T, in->x, &fresh, &run_err);
    if (!fuzz_path_not_run(r, st, &fresh, &run_err)) {
        r->outcome = fuzz_runs_identical(&fresh, &lived, &r->rep) ? FUZZ_PASS : FUZZ_FAIL;
        if (r->outcome == FUZZ_FAIL) odd_one_out(&lived, &fresh, be, opt, in, kind, n, pad, &r->rep);
    }
    moe_run_free(&lived);
    moe_run_free(&fresh);
    return MOE_OK;
}

moe_status fuzz_stress_case(const fuzz_case *c, const fuzz_targets *tg, fuzz_case_result *res,
                            moe_error *err) {
    memset(res, 0, sizeof *res);
    /* each path holds a live layer and a fresh one (the pool's older layers are counted by the
     * host's available memory itself) */
    char why[160];
    fuzz_targets exact_serving = *tg; /* the paths stress runs (below), whatever tg->engine says */
    exact_serving.engine = false;
    if (fuzz_case_too_big(c, tg, 2 * (tg->n_candidates + tg->ref_paths), why, sizeof why))
        return fuzz_skip_every_path(c, &exact_serving, why, res, err);
    moe_layer_data ld;
    uint16_t *x = NULL;
    moe_status st = fuzz_case_build(c, &ld, &x, err);
    if (st) return st;
    const stress_input in = {c, &ld, x};
    for (int p = 0; p < 2 && !st; p++) {
        moe_options opt = moe_options_default();
        opt.precision = p == 0 ? MOE_PRECISION_EXACT : MOE_PRECISION_SERVING;
        opt.n_threads = tg->n_threads;
        /* b = -1: the reference, when its paths are checked */
        for (int b = tg->ref_paths ? -1 : 0; b < tg->n_candidates && !st; b++) {
            const moe_backend *be = b < 0 ? &moe_backend_ref : tg->candidates[b];
            st = stress_path(tg, be, &opt, &in, false, res, err);
            if (!st && c->split != MOE_SPLIT_NONE) st = stress_path(tg, be, &opt, &in, true, res, err);
        }
    }
    moe_layer_data_free(&ld);
    free(x);
    return st;
}

/* ---------------------------------------------------------------- the plan */

moe_status fuzz_stress_plan_init(fuzz_stress_plan *p, const fuzz_suite *suites, int n_suites,
                                 uint64_t seed, moe_error *err) {
    memset(p, 0, sizeof *p);
    if (n_suites < 1 || n_suites > (int)(sizeof p->draws / sizeof p->draws[0]))
        return moe_fail(err, MOE_ERR_ARG, "stress: %d suites given; it takes 1 to %d", n_suites,
                        (int)(sizeof p->draws / sizeof p->draws[0]));
    p->suites = suites, p->n_suites = n_suites, p->seed = seed;
    return MOE_OK;
}

/* A new layer: the next draw of a suite, all its tokens checked. */
static void new_layer(fuzz_stress_plan *p, moe_rng *rng, int slot) {
    /* three layers in four from the first suite (smoke: cheap), the rest from the others */
    int si = p->n_suites == 1 || moe_rng_uniform(rng) < 0.75 ? 0 : moe_rng_int(rng, 1, p->n_suites - 1);
    fuzz_case c = fuzz_suite_case(&p->suites[si], p->seed, p->draws[si]++);
    c.sample = 0;
    p->layer[slot] = c;
    p->layer_suite[slot] = si;
}

/* A token count for a case of layer slot: up and down around the suite's ranges. */
static int draw_T(const fuzz_stress_plan *p, moe_rng *rng, int slot) {
    const fuzz_suite *s = &p->suites[p->layer_suite[slot]];
    const fuzz_case *c = &p->layer[slot];
    const bool narrow = s->big_T_dim_max <= 0 || (c->cfg.D <= s->big_T_dim_max && c->cfg.I <= s->big_T_dim_max);
    int hi = narrow && s->big_T_hi > s->T_hi ? s->big_T_hi : 4 * s->T_hi + 8;
    if (hi > FUZZ_STRESS_T_MAX) hi = FUZZ_STRESS_T_MAX;
    double u = moe_rng_uniform(rng);
    if (u < 0.15) return moe_rng_int(rng, 0, 1);
    if (u < 0.60) return moe_rng_int(rng, 0, s->T_hi);
    if (u < 0.70) return c->T <= FUZZ_STRESS_T_MAX ? c->T : FUZZ_STRESS_T_MAX;
    return moe_rng_int(rng, s->T_hi < hi ? s->T_hi + 1 : hi, hi);
}

fuzz_case fuzz_stress_next(fuzz_stress_plan *p) {
    moe_rng rng = moe_rng_make(p->seed, 0x57E55000u + (uint64_t)p->step++);
    if (p->n_layers < FUZZ_STRESS_LAYERS) new_layer(p, &rng, p->n_layers++);
    else if (moe_rng_uniform(&rng) < 1.0 / 32) new_layer(p, &rng, moe_rng_int(&rng, 0, FUZZ_STRESS_LAYERS - 1));
    fuzz_case c;
    if (p->n_recent > 0 && moe_rng_uniform(&rng) < 0.25) {
        long have = p->n_recent < FUZZ_STRESS_RECENT ? p->n_recent : FUZZ_STRESS_RECENT;
        c = p->recent[moe_rng_int(&rng, 0, (int)have - 1)];
    } else {
        int slot = moe_rng_int(&rng, 0, p->n_layers - 1);
        c = p->layer[slot];
        c.T = draw_T(p, &rng, slot);
        c.input = ++p->input;
    }
    p->recent[p->n_recent++ % FUZZ_STRESS_RECENT] = c;
    return c;
}
