/*
 * test_golden.c: every golden case (golden/cases/<name>/, written by the independent NumPy
 * generator) loaded through the checkpoint loader and run by the C reference in both
 * contracts with the case's split, compared with the expected files.
 *
 * Rules (tolerances derived in docs/tolerances-golden.md):
 *   - cases are discovered at run time by listing golden/cases (tests run from the repository
 *     root); no golden/cases directory: skipped; an empty one or a broken case: failure;
 *   - topk_ids exactly on finite rows; on non-finite rows every id lies in [0, R);
 *   - logits within 1 fp32 ulp, topk_weights within 4 fp32 ulps, NaN only against NaN;
 *   - exact out: |d| <= 2n ulp32(M) + 1e-9 rowmax; serving out: |d| <= n ulp_bf16(M), where n
 *     is the rank count and M = max(|expected|, max over ranks of |partial|);
 *   - elements that differ at all are counted and printed.
 */
#include "test_support.h"

#include "../common/checkpoint.h"
#include "../common/numeric.h"
#include "../common/safetensors.h"
#include "../harness/compare.h"
#include "golden_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 values on a line of integers, so that ulp distance is a difference. */
static int64_t ordered(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}

static int64_t ulp_distance(float a, float b) {
    int64_t d = ordered(a) - ordered(b);
    return d < 0 ? -d : d;
}

static double ulp32(double m) {
    m = fabs(m);
    float f = (float)m;
    if (f == 0.0f) return ldexp(1.0, -149);
    return (double)nextafterf(f, INFINITY) - (double)f;
}

static double ulp_bf16(double m) {
    uint16_t h = moe_f32_to_bf16((float)fabs(m));
    if (h >= 0x7f80) return INFINITY;
    return (double)moe_bf16_to_f32((uint16_t)(h + 1)) - (double)moe_bf16_to_f32(h);
}

typedef struct {
    int problems;
    char report[2048];
} verdict;

static void note(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(verdict *v, const char *fmt, ...) {
    v->problems++;
    size_t used = strlen(v->report);
    if (used >= sizeof v->report - 200) return; /* enough said */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->report + used, sizeof v->report - used, fmt, ap);
    va_end(ap);
}

/* An expected tensor converted to float: out [numel]. */
static bool expected_f32(const moe_st_file *f, const char *name, moe_st_dtype want, uint64_t numel,
                         float *out, verdict *v) {
    const moe_st_tensor *t = moe_st_find(f, name);
    if (!t || t->dtype != want || t->numel != numel) {
        note(v, "  expected tensor %s: missing or wrong dtype/size\n", name);
        return false;
    }
    if (want == MOE_ST_I32) { /* ids: the raw int bits, read back with memcpy */
        memcpy(out, t->data, (size_t)numel * 4);
        return true;
    }
    return moe_st_to_f32(t, out);
}

/* Per-element max over ranks of |partial|: mag [T, D]. */
static moe_status partial_magnitudes(const moe_config *cfg, const moe_weights *w,
                                     const golden_case *gc, const moe_options *opt,
                                     const uint16_t *x, float *mag, moe_error *err) {
    const size_t TD = (size_t)gc->T * (size_t)cfg->D;
    float *p = malloc((TD ? TD : 1) * sizeof *p);
    memset(mag, 0, (TD ? TD : 1) * sizeof *mag);
    moe_status st = p ? MOE_OK : MOE_ERR_NOMEM;
    for (int r = 0; r < gc->n && !st; r++) {
        moe_split split = {gc->kind, gc->n, r, gc->pad};
        moe_shard sh;
        moe_layer *layer = NULL;
        st = moe_shard_build(cfg, w, &split, &sh, err);
        if (st) break;
        st = moe_layer_create(&moe_backend_ref, &sh, opt, &layer, err);
        if (!st) st = moe_layer_forward(layer, gc->T, x, p, NULL, err);
        for (size_t i = 0; !st && i < TD; i++) mag[i] = fmaxf(mag[i], fabsf(p[i]));
        moe_layer_destroy(layer);
        moe_shard_free(&sh);
    }
    free(p);
    return st;
}

/* Runs one contract and compares; returns the number of differing out elements. */
static long compare_contract(const golden_case *gc, const moe_config *cfg, const moe_weights *w,
                             const uint16_t *x, bool serving, verdict *v) {
    char path[600];
    snprintf(path, sizeof path, CASES_DIR "/%s/expected-%s.safetensors", gc->name,
             serving ? "serving" : "exact");
    const char *tag = serving ? "serving" : "exact";
    moe_st_file ef;
    moe_error err = {0};
    if (moe_st_open(path, &ef, &err)) {
        note(v, "  %s\n", err.msg);
        return 0;
    }
    const int T = gc->T, D = cfg->D, K = cfg->K, S = cfg->S, G = cfg->R + cfg->S;
    const size_t TD = (size_t)T * (size_t)D;
    float *out = calloc(TD + 1, sizeof *out), *mag = calloc(TD + 1, sizeof *mag);
    float *eout = calloc(TD + 1, sizeof *eout), *elog = calloc((size_t)T * G + 1, sizeof *elog);
    float *logits = calloc((size_t)T * G + 1, sizeof *logits);
    float *wts = calloc((size_t)T * (K + S) + 1, sizeof *wts), *ewts = calloc((size_t)T * (K + S) + 1, sizeof *ewts);
    int32_t *ids = calloc((size_t)T * K + 1, sizeof *ids);
    float *eids_f = calloc((size_t)T * K + 1, sizeof *eids_f);
    moe_options opt = moe_options_default();
    opt.precision = serving ? MOE_PRECISION_SERVING : MOE_PRECISION_EXACT;
    moe_stages stages = {.logits = logits, .topk_ids = ids, .topk_weights = wts};
    long differ = 0;
    if (moe_forward_all_ranks(&moe_backend_ref, cfg, w, gc->kind, gc->n, gc->pad, &opt, T, x, out,
                              &stages, &err) ||
        partial_magnitudes(cfg, w, gc, &opt, x, mag, &err)) {
        note(v, "  %s run: %s\n", tag, err.msg);
        goto done;
    }
    bool ok = expected_f32(&ef, "out", serving ? MOE_ST_BF16 : MOE_ST_F32, TD, eout, v) &
              expected_f32(&ef, "logits", MOE_ST_F32, (size_t)T * G, elog, v) &
              expected_f32(&ef, "topk_weights", MOE_ST_F32, (size_t)T * (K + S), ewts, v) &
              expected_f32(&ef, "topk_ids", MOE_ST_I32, (size_t)T * K, eids_f, v); /* raw int bits */
    if (!ok) goto done;
    for (int t = 0; t < T; t++) {
        bool finite_row = moe_first_nonfinite_row(1, D, x + (size_t)t * D) < 0;
        for (int k = 0; k < K; k++) {
            int32_t want;
            memcpy(&want, &eids_f[(size_t)t * K + k], 4);
            int32_t got = ids[(size_t)t * K + k];
            if (finite_row ? got != want : (got < 0 || got >= cfg->R))
                note(v, "  %s topk_ids[%lld]: got %d, expected %d\n", tag, (long long)t * K + k, got, want);
        }
        for (int e = 0; e < G; e++) {
            float a = logits[(size_t)t * G + e], b = elog[(size_t)t * G + e];
            if (isnan(a) != isnan(b) || (!isnan(a) && ulp_distance(a, b) > 1))
                note(v, "  %s logits[%lld]: got %.9g, expected %.9g\n", tag, (long long)t * G + e, a, b);
        }
        for (int j = 0; j < K + S; j++) {
            float a = wts[(size_t)t * (K + S) + j], b = ewts[(size_t)t * (K + S) + j];
            if (isnan(a) != isnan(b) || (!isnan(a) && ulp_distance(a, b) > 4))
                note(v, "  %s topk_weights[%lld]: got %.9g, expected %.9g\n", tag,
                     (long long)t * (K + S) + j, a, b);
        }
        double rowmax = 0;
        for (int d = 0; d < D; d++) {
            double e = eout[(size_t)t * D + d];
            if (isfinite(e)) rowmax = fmax(rowmax, fabs(e));
        }
        for (int d = 0; d < D; d++) {
            size_t i = (size_t)t * D + d;
            double a = out[i], b = eout[i];
            if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) {
                if (!(isnan(a) && isnan(b)) && a != b)
                    note(v, "  %s out[%lld]: got %g, expected %g\n", tag, (long long)i, a, b);
                continue;
            }
            double m = fmax(fabs(b), mag[i]), diff = fabs(a - b);
            double tol = serving ? gc->n * ulp_bf16(m) : 2.0 * gc->n * ulp32(m) + 1e-9 * rowmax;
            if (diff > 0) differ++;
            if (diff > tol)
                note(v, "  %s out[%lld]: got %.9g, expected %.9g\n", tag, (long long)i, a, b);
        }
    }
done:
    free(out); free(mag); free(eout); free(elog); free(logits); free(wts); free(ewts); free(ids); free(eids_f);
    moe_st_close(&ef);
    return differ;
}

/* The case's input x [T, D] through the loader's reader (which checks dtype and width); T must
 * be the case's. NULL (noted) on any problem. */
static uint16_t *read_input(const char *name, int D, int T, verdict *v) {
    char path[600];
    snprintf(path, sizeof path, CASES_DIR "/%.255s/input.safetensors", name);
    moe_error err = {0};
    uint16_t *x = NULL;
    int file_T = -1;
    if (moe_read_input(path, D, &file_T, &x, &err)) {
        note(v, "  %s\n", err.msg);
        return NULL;
    }
    if (file_T != T) {
        note(v, "  input x: %d tokens, case.json says %d\n", file_T, T);
        free(x);
        return NULL;
    }
    return x;
}

/* One case as loaded: its case.json, the layer through the loader, the input (NULL when the
 * input could not be read: v says why) and the problems found so far. */
typedef struct {
    golden_case gc;
    verdict v;
    moe_checkpoint ck;
    moe_config cfg;
    moe_weights w;
    uint16_t *x;
} loaded_case;

/* Loads case `name` into c. On failure prints why, counts a failure and returns false (nothing
 * is then left open); else loaded_case_close(c) releases it. */
static bool load_case(const char *name, loaded_case *c, int *failures) {
    char why[700], model[600];
    moe_error err = {0};
    memset(c, 0, sizeof *c);
    if (!read_case(name, &c->gc, why, sizeof why)) {
        print_error("golden %s: %s\n", name, why);
        (*failures)++;
        return false;
    }
    snprintf(model, sizeof model, CASES_DIR "/%s/model", name);
    if (moe_checkpoint_open(model, &c->ck, &err) ||
        moe_checkpoint_layer(&c->ck, c->gc.layer, NULL, &c->cfg, &c->w, &err)) {
        print_error("golden %s: load: %s\n", name, err.msg);
        moe_checkpoint_close(&c->ck);
        (*failures)++;
        return false;
    }
    c->x = read_input(name, c->cfg.D, c->gc.T, &c->v);
    return true;
}

static void loaded_case_close(loaded_case *c) {
    free(c->x);
    moe_checkpoint_close(&c->ck);
}

static void run_case(const char *name, int *failures) {
    loaded_case c;
    if (!load_case(name, &c, failures)) return;
    int layers[8], n_layers;
    moe_checkpoint_moe_layers(&c.ck, layers, 8, &n_layers);
    if (n_layers == 1 && layers[0] != c.gc.layer)
        note(&c.v, "  layer discovery found %d, case.json says %d\n", layers[0], c.gc.layer);
    long d_exact = 0, d_serving = 0;
    if (c.x) {
        d_exact = compare_contract(&c.gc, &c.cfg, &c.w, c.x, false, &c.v);
        d_serving = compare_contract(&c.gc, &c.cfg, &c.w, c.x, true, &c.v);
    }
    print_message("golden %-36s T=%-3d split=%s%.0d: out elements differing at all: exact %ld, "
                  "serving %ld of %lld; %d problems\n",
                  name, c.gc.T,
                  c.gc.kind == MOE_SPLIT_TP ? "tp" : c.gc.kind == MOE_SPLIT_EP ? "ep" : "none",
                  c.gc.n, d_exact, d_serving, (long long)c.gc.T * c.cfg.D, c.v.problems);
    if (c.v.problems) {
        print_error("%s", c.v.report);
        (*failures)++;
    }
    loaded_case_close(&c);
}

/* A fast path (serving contract) on every golden case with the case's split, judged against
 * the reference by the harness's envelope comparison (docs/tolerances.md): accumulation order
 * only. The reference itself matches the golden files (test_every_golden_case), so this ties
 * the fast path to the independent NumPy implementation. Skipped where the path cannot run. */
static void fast_path_on_every_case(const char *backend_name) {
    const moe_backend *be = moe_backend_find(backend_name);
    char why[256] = "";
    assert_non_null(be);
    if (!be->available(why, sizeof why)) {
        print_message("%s path unavailable here (%s): golden cases skipped\n", backend_name, why);
        skip();
    }
    if (!is_dir(CASES_DIR)) skip();
    static char names[512][256];
    int n = list_cases(names, 512), failures = 0;
    if (n <= 0) fail_msg(CASES_DIR " exists but holds no case directory");
    for (int i = 0; i < n; i++) {
        loaded_case c;
        if (!load_case(names[i], &c, &failures)) continue;
        moe_options opt = moe_options_default();
        moe_cmp_case cc = {&c.cfg, &c.w, c.gc.T, c.x};
        moe_cmp_report rep;
        moe_error err = {0};
        if (!c.x || moe_check_against_ref(be, &opt, &cc, c.gc.kind, c.gc.n, c.gc.pad, &rep, &err)) {
            print_error("golden %s on %s: %s%s", names[i], backend_name, err.msg, c.v.report);
            failures++;
        } else if (!rep.ok) {
            print_error("golden %s on %s:\n", names[i], backend_name);
            moe_cmp_report_print(stderr, &rep);
            failures++;
        }
        loaded_case_close(&c);
    }
    print_message("golden cases on the %s path: %d of %d failed\n", backend_name, failures, n);
    if (failures) fail_msg("%d of %d golden cases failed on the %s path", failures, n, backend_name);
}

static void test_every_golden_case_on_blas(void **state) {
    (void)state;
    fast_path_on_every_case("blas");
}

static void test_every_golden_case_on_cuda(void **state) {
    (void)state;
    fast_path_on_every_case("cuda");
}

static void test_every_golden_case(void **state) {
    (void)state;
    if (!is_dir(CASES_DIR)) {
        print_message("no " CASES_DIR " directory under the working directory: golden cases skipped\n");
        skip();
    }
    static char names[512][256];
    int n = list_cases(names, 512);
    if (n <= 0) fail_msg(CASES_DIR " exists but holds no case directory");
    int failures = 0;
    for (int i = 0; i < n; i++) run_case(names[i], &failures);
    if (failures) fail_msg("%d of %d golden cases failed", failures, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_golden_case),
        cmocka_unit_test(test_every_golden_case_on_blas),
        cmocka_unit_test(test_every_golden_case_on_cuda),
    };
    return cmocka_run_group_tests_name("golden", tests, NULL, NULL);
}
