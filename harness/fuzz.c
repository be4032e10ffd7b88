/*
 * fuzz.c: one case over every path, and greedy shrinking (rules in fuzz.h).
 */
#include "fuzz.h"

#include "fuzz_file.h"
#include "host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A path class: "<who>/<contract>" or "<who>/<contract>/split". */
static void path_name(char (*path)[48], const char *who, const char *prec, bool split) {
    snprintf(*path, sizeof *path, "%s/%s%s", who, prec, split ? "/split" : "");
}

int fuzz_paths_per_case(const fuzz_targets *tg) { return 2 * (2 + 2 * tg->n_candidates); }

/* A new result slot; NULL (after saying why in err) when the case holds FUZZ_MAX_PATHS already. */
fuzz_path_result *fuzz_add_result(fuzz_case_result *res, const char *path, moe_error *err) {
    if (res->n >= FUZZ_MAX_PATHS) {
        moe_fail(err, MOE_ERR_INTERNAL, "fuzz: path %s would be result %d of one case; the limit "
                 "is FUZZ_MAX_PATHS = %d (fewer candidates, or raise it)", path, res->n + 1, FUZZ_MAX_PATHS);
        return NULL;
    }
    fuzz_path_result *r = &res->r[res->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    return r;
}

int fuzz_first_failure(const fuzz_case_result *res) {
    for (int i = 0; i < res->n; i++)
        if (res->r[i].outcome == FUZZ_FAIL) return i;
    return -1;
}

/* The tokens a case runs on: all of them (x, T), and the sampled ones the reference checks. */
typedef struct {
    const uint16_t *x; /* [T, D] */
    int T;
    const int *tokens; /* [n] ascending; the reference's x is the sampled rows */
    int n;
} case_tokens;

moe_status fuzz_run_on(fuzz_pool *pool, const moe_backend *be, const moe_options *opt,
                       const moe_config *cfg, const moe_weights *w, moe_split_kind kind, int n,
                       int pad, int T, const uint16_t *x, moe_run *run, moe_error *err) {
    if (!pool) return moe_run_path(be, opt, cfg, w, kind, n, pad, T, x, true, run, err);
    moe_layer *const *layers = NULL;
    moe_status st = fuzz_pool_layers(pool, be, opt, cfg, w, kind, n, pad, &layers, err);
    if (!st) return moe_run_layers(be, opt, cfg, kind, n, pad, layers, T, x, true, run, err);
    memset(run, 0, sizeof *run);
    snprintf(run->name, sizeof run->name, "%s", be->name);
    return st;
}

bool fuzz_path_not_run(fuzz_path_result *r, moe_status st, const moe_run *run, const moe_error *run_err) {
    if (st == MOE_ERR_UNAVAILABLE || st == MOE_ERR_UNSUPPORTED) {
        r->outcome = FUZZ_SKIP;
        snprintf(r->skip_reason, sizeof r->skip_reason, "%.159s", run_err->msg);
        return true;
    }
    if (!st) return false;
    /* a path that errors on a valid case fails the case */
    r->outcome = FUZZ_FAIL;
    r->rep.ok = false;
    r->rep.first_stage = MOE_CMP_OUTPUT;
    snprintf(r->rep.path, sizeof r->rep.path, "%s", run->name);
    snprintf(r->rep.msg, sizeof r->rep.msg, "FAIL: %s returned %s: %s", run->name,
             moe_status_name(st), run_err->msg);
    return true;
}

/* Runs one candidate path and compares it with the reference run. The reference backend runs
 * on the sampled tokens only; any other path runs on all of them and is cut down to the sample. */
static moe_status run_candidate(fuzz_pool *pool, const moe_backend *be, const moe_options *opt, const fuzz_case *c,
                                const moe_cmp_case *cc, fuzz_file *file, const case_tokens *ct,
                                const moe_run *reference, const moe_envelope *env, bool split, bool output_only,
                                const char *path, fuzz_case_result *res, moe_error *err) {
    fuzz_path_result *r = fuzz_add_result(res, path, err);
    if (!r) return MOE_ERR_INTERNAL;
    moe_run run;
    moe_error run_err;
    moe_error_clear(&run_err);
    const bool all_tokens = be != &moe_backend_ref && ct->n < ct->T;
    /* the round trip (feature file) only for a path that will run */
    const moe_weights *w = cc->w;
    char why[8];
    const moe_split sp = {split ? c->split : MOE_SPLIT_NONE, split ? c->n : 1, 0, split ? c->pad : 0};
    moe_options computed = *opt; /* the engine contract is computed as serving */
    computed.precision = moe_precision_computed(opt->precision);
    moe_status st = be->available(why, sizeof why) && be->supports(cc->cfg, &sp, &computed, why, sizeof why)
                        ? fuzz_file_weights(file, be, &w, &run_err) : MOE_OK;
    if (!st)
        st = fuzz_run_on(pool, be, opt, cc->cfg, w, sp.kind, sp.n, sp.pad_inter_to,
                         all_tokens ? ct->T : cc->T, all_tokens ? ct->x : cc->x, &run, &run_err);
    else
        memset(&run, 0, sizeof run), snprintf(run.name, sizeof run.name, "%s", be->name);
    if (fuzz_path_not_run(r, st, &run, &run_err)) {
        moe_run_free(&run);
        return MOE_OK;
    }
    if (all_tokens) moe_run_keep_tokens(&run, ct->tokens, ct->n);
    if (output_only) run.filled = 0;
    st = moe_compare_runs(cc, reference, &run, env, env, &r->rep, err);
    r->outcome = r->rep.ok ? FUZZ_PASS : FUZZ_FAIL;
    moe_run_free(&run);
    return st;
}

/* Does any candidate run this contract here? (Without the reference's own paths, a contract
 * nobody runs needs no reference run: at real sizes that run costs minutes.) If none does, its
 * candidate paths are reported SKIPPED with their reasons. */
static moe_status contract_wanted(const fuzz_targets *tg, const moe_config *cfg, const moe_split *split,
                                  const moe_options *opt, const char *prec, fuzz_case_result *res,
                                  bool *wanted, moe_error *err) {
    moe_options computed = *opt; /* the engine contract is computed as serving */
    computed.precision = moe_precision_computed(opt->precision);
    opt = &computed;
    *wanted = tg->ref_paths;
    char why[256];
    for (int i = 0; i < tg->n_candidates && !*wanted; i++) {
        const moe_backend *be = tg->candidates[i];
        *wanted = be->available(why, sizeof why) && be->supports(cfg, split, opt, why, sizeof why);
    }
    for (int i = 0; i < tg->n_candidates && !*wanted; i++) {
        const moe_backend *be = tg->candidates[i];
        for (int sp = 0; sp < 1 + (split->kind != MOE_SPLIT_NONE); sp++) {
            char path[48];
            path_name(&path, be->name, prec, sp);
            fuzz_path_result *r = fuzz_add_result(res, path, err);
            if (!r) return MOE_ERR_INTERNAL;
            r->outcome = FUZZ_SKIP;
            if (be->available(why, sizeof why)) (void)be->supports(cfg, split, opt, why, sizeof why);
            snprintf(r->skip_reason, sizeof r->skip_reason, "%.159s", why);
        }
    }
    return MOE_OK;
}

/* The sampled rows of x: xs [n, D]; also names them in res->sampled. */
static uint16_t *sample_rows(const fuzz_case *c, const uint16_t *x, const int *tokens, int n,
                             fuzz_case_result *res) {
    const size_t D = (size_t)c->cfg.D;
    uint16_t *xs = malloc(((size_t)n * D + 1) * sizeof *xs);
    if (!xs) return NULL;
    for (int i = 0; i < n; i++) memcpy(xs + (size_t)i * D, x + (size_t)tokens[i] * D, D * sizeof *xs);
    int used = snprintf(res->sampled, sizeof res->sampled, "tokens");
    for (int i = 0; i < n && used < (int)sizeof res->sampled - 12; i++)
        used += snprintf(res->sampled + used, sizeof res->sampled - (size_t)used, " %d", tokens[i]);
    return xs;
}

static const moe_precision contracts[3] = {MOE_PRECISION_EXACT, MOE_PRECISION_SERVING, MOE_PRECISION_ENGINE};
static const char *const contract_names[3] = {"exact", "serving", "engine"};

/* Without the reference's own paths, a case that every candidate declines in every contract
 * needs no layer: its paths are reported SKIPPED (with the reasons) and nothing is built, so
 * that hunting a mutant that declines most cases costs only the cases it runs. Returns
 * whether the case must be built and run. */
static moe_status any_path_runs(const fuzz_case *c, const fuzz_targets *tg, fuzz_case_result *res,
                                bool *runs, moe_error *err) {
    *runs = true;
    if (tg->ref_paths) return MOE_OK;
    const moe_split sp = {c->split, c->n, 0, c->pad};
    for (int p = tg->engine ? 2 : 0; p < (tg->engine ? 3 : 2); p++)
        for (int i = 0; i < tg->n_candidates; i++) {
            char why[8];
            moe_options o = moe_options_default();
            o.precision = moe_precision_computed(contracts[p]); /* engine: computed as serving */
            o.n_threads = tg->n_threads;
            const moe_backend *be = tg->candidates[i];
            if (be->available(why, sizeof why) && be->supports(&c->cfg, &sp, &o, why, sizeof why)) return MOE_OK;
        }
    *runs = false;
    moe_status st = MOE_OK;
    for (int p = tg->engine ? 2 : 0; p < (tg->engine ? 3 : 2) && !st; p++) {
        moe_options o = moe_options_default();
        o.precision = contracts[p];
        o.n_threads = tg->n_threads;
        bool wanted;
        st = contract_wanted(tg, &c->cfg, &sp, &o, contract_names[p], res, &wanted, err);
    }
    return st;
}

/* What every path of one case shares: the case, its tokens, its comparison case and the
 * candidates' round-trip layer (feature file). */
typedef struct {
    const fuzz_case *c;
    const case_tokens *ct;
    const moe_cmp_case *cc;
    fuzz_file *file;
} case_paths;

/* The paths of one contract p: the reference run (unsplit, every stage), judged alone and
 * split when the reference's own paths are asked for, then every candidate, unsplit and split. */
static moe_status run_contract(const case_paths *cp, const fuzz_targets *tg, int p, fuzz_case_result *res,
                               moe_error *err) {
    const fuzz_case *c = cp->c;
    const moe_cmp_case *cc = cp->cc;
    const bool split = c->split != MOE_SPLIT_NONE;
    const moe_split case_split = {c->split, c->n, 0, c->pad};
    moe_options opt = moe_options_default();
    opt.precision = contracts[p];
    const char *prec = contract_names[p];
    moe_options cand_opt = opt;
    cand_opt.n_threads = tg->n_threads;
    bool wanted;
    moe_status st = contract_wanted(tg, &c->cfg, &case_split, &cand_opt, prec, res, &wanted, err);
    if (st || !wanted) return st;
    moe_run reference;
    moe_envelope *env = NULL;
    st = moe_run_path(&moe_backend_ref, &opt, cc->cfg, cc->w, MOE_SPLIT_NONE, 1, 0, cc->T, cc->x, true, &reference, err);
    if (!st) st = moe_envelope_build(cc, opt.precision, c->split, c->n, &env, err);
    char path[48];
    if (!st && tg->ref_paths) {
        path_name(&path, "ref", prec, false);
        fuzz_path_result *r = fuzz_add_result(res, path, err);
        st = r ? moe_compare_runs(cc, &reference, NULL, env, NULL, &r->rep, err) : MOE_ERR_INTERNAL;
        if (r) r->outcome = r->rep.ok ? FUZZ_PASS : FUZZ_FAIL;
        if (!st && split) {
            path_name(&path, "ref", prec, true);
            st = run_candidate(tg->pool, &moe_backend_ref, &opt, c, cc, cp->file, cp->ct, &reference, env, true,
                               false, path, res, err);
        }
    }
    for (int i = 0; i < tg->n_candidates && !st; i++) {
        const moe_backend *be = tg->candidates[i];
        for (int sp = 0; sp < 1 + split && !st; sp++) {
            path_name(&path, be->name, prec, sp);
            st = run_candidate(tg->pool, be, &cand_opt, c, cc, cp->file, cp->ct, &reference, env, sp,
                               tg->output_only, path, res, err);
        }
    }
    moe_envelope_free(env);
    moe_run_free(&reference);
    return st;
}

/* Cases under 1 GB are not checked, so that the small suites do not read /proc sixty times a
 * second. */
bool fuzz_case_too_big(const fuzz_case *c, const fuzz_targets *tg, int copies, char *why, size_t len) {
    const double need = fuzz_case_host_bytes(c, copies);
    double have = tg->max_host_bytes;
    if (have > 0 && need > have) {
        snprintf(why, len, "needs about %.1f GB of host memory, over --max-memory %.1f GB", need / 1e9, have / 1e9);
        return true;
    }
    if (have > 0 || need < 1e9 || !host_memory_available(&have) || need <= have) return false;
    snprintf(why, len, "needs about %.1f GB of host memory, %.1f GB available", need / 1e9, have / 1e9);
    return true;
}

/* The run_contract paths' names (stress mode's too: the same without the engine contract). */
moe_status fuzz_skip_every_path(const fuzz_case *c, const fuzz_targets *tg, const char *why,
                                fuzz_case_result *res, moe_error *err) {
    snprintf(res->not_run, sizeof res->not_run, "%s", why);
    const bool split = c->split != MOE_SPLIT_NONE;
    for (int p = tg->engine ? 2 : 0; p < (tg->engine ? 3 : 2); p++)
        for (int i = tg->ref_paths ? -1 : 0; i < tg->n_candidates; i++) /* -1: the reference */
            for (int sp = 0; sp < 1 + split; sp++) {
                char path[48];
                path_name(&path, i < 0 ? "ref" : tg->candidates[i]->name, contract_names[p], sp);
                fuzz_path_result *r = fuzz_add_result(res, path, err);
                if (!r) return MOE_ERR_INTERNAL;
                r->outcome = FUZZ_SKIP;
                snprintf(r->skip_reason, sizeof r->skip_reason, "%s", why);
            }
    return MOE_OK;
}

moe_status fuzz_run_case(const fuzz_case *c, const fuzz_targets *tg, fuzz_case_result *res,
                         moe_error *err) {
    memset(res, 0, sizeof *res);
    bool runs;
    moe_status pre = any_path_runs(c, tg, res, &runs, err);
    if (pre || !runs) return pre;
    char why[160];
    if (fuzz_case_too_big(c, tg, tg->n_candidates, why, sizeof why)) return fuzz_skip_every_path(c, tg, why, res, err);
    moe_layer_data ld;
    uint16_t *x = NULL, *xs = NULL;
    int *tokens = NULL;
    fuzz_file file; /* the candidates' layer after a checkpoint round trip (feature file) */
    moe_status st = fuzz_case_build(c, &ld, &x, err);
    if (st) return st;
    fuzz_file_prepare(&file, c, &ld);
    tokens = malloc(((size_t)c->T + 1) * sizeof *tokens);
    const int n = tokens ? fuzz_case_sampled_tokens(c, tokens) : 0;
    if (tokens && n < c->T) xs = sample_rows(c, x, tokens, n, res);
    if (!tokens || (n < c->T && !xs)) {
        st = moe_fail(err, MOE_ERR_NOMEM, "fuzz: out of memory for the token sample");
    } else {
        const case_tokens ct = {x, c->T, tokens, n};
        const moe_cmp_case cc = {&c->cfg, &ld.w, n, xs ? xs : x};
        const case_paths cp = {c, &ct, &cc, &file};
        for (int p = tg->engine ? 2 : 0; p < (tg->engine ? 3 : 2) && !st; p++) st = run_contract(&cp, tg, p, res, err);
    }
    fuzz_file_close(&file);
    moe_layer_data_free(&ld);
    free(x);
    free(xs);
    free(tokens);
    return st;
}

/* ---------------------------------------------------------------- shrinking */

static bool still_fails(const fuzz_case *c, const char *path, const fuzz_targets *tg) {
    if (fuzz_case_validate(c, NULL)) return false;
    fuzz_case_result res;
    if (fuzz_run_case(c, tg, &res, NULL)) return false;
    for (int i = 0; i < res.n; i++)
        if (res.r[i].outcome == FUZZ_FAIL && !strcmp(res.r[i].path, path)) return true;
    return false;
}

/* The candidate simplifications of c, simplest-first within each kind; returns their count. */
static int simplifications(const fuzz_case *c, fuzz_case *out, int cap) {
    int n = 0;
#define TRY(stmt)                                                                                \
    do {                                                                                         \
        if (n < cap) {                                                                           \
            fuzz_case s = *c;                                                                    \
            stmt;                                                                                \
            if (memcmp(&s, c, sizeof s)) out[n++] = s;                                           \
        }                                                                                        \
    } while (0)
    TRY(s.T = c->T > 1 ? 1 : c->T);
    TRY(s.T = c->T / 2);
    TRY(s.T = c->T - 1 > 0 ? c->T - 1 : c->T);
    for (int f = 0; f < FZ_FEATURE_COUNT; f++) TRY(s.features &= ~(1u << f));
    TRY(s.pad = 0);
    TRY((s.split = MOE_SPLIT_NONE, s.n = 1, s.pad = 0));
    TRY(s.n = c->n > 2 ? 2 : c->n);
    TRY(s.n = c->n - 1 >= 2 ? c->n - 1 : c->n);
    TRY((s.cfg.R = c->cfg.R / 2 > 0 ? c->cfg.R / 2 : 1, s.cfg.K = s.cfg.K < s.cfg.R ? s.cfg.K : s.cfg.R));
    TRY((s.cfg.R = c->cfg.R - 1 > 0 ? c->cfg.R - 1 : 1, s.cfg.K = s.cfg.K < s.cfg.R ? s.cfg.K : s.cfg.R));
    TRY(s.cfg.K = c->cfg.K > 1 ? c->cfg.K - 1 : 1);
    TRY(s.cfg.K = 1);
    TRY(s.cfg.S = 0);
    TRY(s.cfg.S = c->cfg.S > 0 ? c->cfg.S - 1 : 0);
    TRY(s.cfg.D = c->cfg.D / 64 * 32 >= 32 ? c->cfg.D / 64 * 32 : 32);
    TRY(s.cfg.D = c->cfg.D > 32 ? c->cfg.D - 32 : 32);
    TRY(s.cfg.I = c->cfg.I / 64 * 32 >= 32 ? c->cfg.I / 64 * 32 : 32);
    TRY(s.cfg.I = c->cfg.I > 32 ? c->cfg.I - 32 : 32);
    TRY(s.cfg.has_gate_bias = false);
    TRY(s.cfg.has_global_scale = false);
    TRY(s.cfg.route_scale = 1.0f);
#undef TRY
    return n;
}

int fuzz_shrink(const fuzz_case *c, const char *path, const fuzz_targets *tg, int max_tries,
                fuzz_case *out) {
    *out = *c;
    int tries = 0;
    bool progress = true;
    while (progress && tries < max_tries) {
        progress = false;
        fuzz_case cand[64];
        int n = simplifications(out, cand, 64);
        for (int i = 0; i < n && tries < max_tries; i++) {
            if (fuzz_case_validate(&cand[i], NULL)) continue;
            tries++;
            if (still_fails(&cand[i], path, tg)) {
                *out = cand[i];
                progress = true;
                break;
            }
        }
    }
    return tries;
}

/* ---------------------------------------------------------------- hunting one backend */

double fuzz_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long fuzz_hunt(const moe_backend *be, const fuzz_suite *s, uint64_t seed, long max_cases,
               double max_seconds, unsigned flags, fuzz_case *caught, fuzz_case_result *res) {
    const moe_backend *cands[1] = {be};
    fuzz_targets tg = {cands, 1, false, 1, (flags & FUZZ_HUNT_OUTPUT_ONLY) != 0, NULL, (flags & FUZZ_HUNT_ENGINE) != 0, 0.0};
    double t0 = fuzz_now();
    long counted = 0;
    for (long i = 0; counted < max_cases && (counted < FUZZ_HUNT_MIN_CASES || fuzz_now() - t0 < max_seconds);
         i++) {
        fuzz_case c = fuzz_suite_case(s, seed, i);
        if (fuzz_run_case(&c, &tg, res, NULL)) continue;
        bool ran = false;
        for (int k = 0; k < res->n; k++) ran = ran || res->r[k].outcome != FUZZ_SKIP;
        if (!ran) continue;
        counted++;
        if (fuzz_first_failure(res) >= 0) {
            *caught = c;
            return counted;
        }
    }
    return -1;
}
