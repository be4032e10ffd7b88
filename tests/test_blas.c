/*
 * test_blas.c: the OpenBLAS path against the reference's serving contract.
 *
 * Rules tested:
 *   - on random small layers (MXFP4 and bf16, S 0..3, K up to R, TP/EP splits with padded
 *     intermediates, T = 0, 1, 7, 64) every stage and the output lie inside the serving
 *     contract's envelope (harness/compare.h; derivation in docs/tolerances.md): the only
 *     differences allowed are those of fp32 accumulation order;
 *   - that envelope is tight enough to catch planted bugs: one wrong E8M0 block, a gate/up swap
 *     in one TP slab, a routed weight off by 2^-12 relative;
 *   - non-finite input rows give NaN output rows, NaN weights and ids 0..K-1, and leave the
 *     other rows of the same GEMM batches correct;
 *   - weight matrices cut into whole tiles and a partial last one match the reference;
 *   - results are bitwise identical for 1 and 2 threads and from one call to the next;
 *   - the exact contract is refused with the reason; the route entry is the reference's;
 *   - the fused decode-and-dot kernels (AVX-512 BF16, AVX2/FMA, portable) each give an fp32
 *     dot product within the worst-case bound of any summation order, across chunk, scale
 *     group and odd-row boundaries; the BF16 kernel is used only where it is exact (no
 *     subnormal input, product or sum), which a subnormal activation and a tiny scale prove;
 *   - both routes (fused for every group, sgemm for every group) and each kernel stay inside
 *     the envelope, bitwise the same for 1 and 2 threads.
 * Without OpenBLAS in the build the backend is unavailable and every test skips.
 */
#include "test_support.h"

#include "../common/layer_data.h"
#include "../common/moe.h"
#include "../common/numeric.h"
#include "../common/routing.h"
#include "../harness/compare.h"
#include "../common/matrix_view.h"

#ifdef MOE_HAVE_OPENBLAS
#include "../opt/blas/blas_internal.h"
#endif

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static bool blas_here(void) {
    char why[256] = "";
    return moe_backend_blas.available(why, sizeof why);
}

static moe_options blas_options(int threads) {
    moe_options o = moe_options_default();
    o.precision = MOE_PRECISION_SERVING;
    o.n_threads = threads;
    return o;
}

/* Runs blas (split kind n, pad) and the unsplit reference on layer ld and input x [T, D], and
 * fails the test with the comparison's report unless blas lies inside the envelope. */
static void expect_matches_ref(const moe_layer_data *ld, int T, const uint16_t *x,
                               moe_split_kind kind, int n, int pad, const char *label) {
    moe_cmp_case cc = {&ld->cfg, &ld->w, T, x};
    moe_options opt = blas_options(2);
    moe_cmp_report rep;
    moe_error err = {0};
    moe_status st = moe_check_against_ref(&moe_backend_blas, &opt, &cc, kind, n, pad, &rep, &err);
    if (st) fail_msg("%s: comparison did not run: %s", label, err.msg);
    if (!rep.ok) {
        moe_cmp_report_print(stderr, &rep);
        fail_msg("%s: blas left the serving envelope: %s", label, rep.msg);
    }
}

/* A random small configuration and split that the shard code accepts. */
typedef struct {
    moe_config cfg;
    moe_split_kind kind;
    int n, pad, T;
} small_case;

static small_case random_case(moe_rng *rng, int index) {
    static const int token_counts[] = {0, 1, 7, 64};
    small_case c;
    memset(&c, 0, sizeof c);
    static const moe_routed_format formats[3] = {MOE_ROUTED_MXFP4, MOE_ROUTED_BF16, MOE_ROUTED_NVFP4};
    c.cfg.routed_format = formats[index % 3];
    const int block = moe_routed_format_get(c.cfg.routed_format)->block, unit = block ? block : 8;
    c.cfg.D = unit * moe_rng_int(rng, block ? 1 : 2, 128 / unit);
    c.cfg.I = unit * moe_rng_int(rng, 1, 96 / unit);
    c.cfg.R = moe_rng_int(rng, 1, 12);
    c.cfg.K = moe_rng_int(rng, 1, c.cfg.R);
    c.cfg.S = moe_rng_int(rng, 0, 3);
    c.cfg.route_scale = (float)moe_rng_int(rng, 1, 8);
    c.cfg.has_gate_bias = moe_rng_int(rng, 0, 3) > 0;
    c.cfg.has_global_scale = moe_rng_int(rng, 0, 1) == 1;
    c.T = token_counts[index % 4];
    c.kind = (moe_split_kind)moe_rng_int(rng, 0, 2);
    c.n = c.kind == MOE_SPLIT_NONE ? 1 : moe_rng_int(rng, 2, 3);
    c.pad = moe_rng_int(rng, 0, 2) * 32;
    moe_split probe = {c.kind, c.n, 0, c.pad};
    if (moe_split_validate(&c.cfg, &probe, NULL)) { /* e.g. TP 3 of I = 64: run it unsplit */
        c.kind = MOE_SPLIT_NONE;
        c.n = 1;
    }
    return c;
}

static void test_unavailable_or_supports(void **state) {
    (void)state;
    char why[256] = "";
    if (!blas_here()) skip();
    moe_config cfg = {64, 64, 4, 2, 1, 1.0f, false, false, MOE_ROUTED_MXFP4};
    moe_split split = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_options exact = blas_options(1);
    exact.precision = MOE_PRECISION_EXACT;
    assert_false(moe_backend_blas.supports(&cfg, &split, &exact, why, sizeof why));
    assert_non_null(strstr(why, "serving"));
    moe_options serving = blas_options(1);
    assert_true(moe_backend_blas.supports(&cfg, &split, &serving, why, sizeof why));
}

static void test_random_layers_match_reference(void **state) {
    (void)state;
    if (!blas_here()) skip();
    moe_rng rng = moe_rng_make(2024, 6);
    int per_kind[3] = {0, 0, 0}, padded = 0;
    for (int i = 0; i < 60; i++) {
        small_case c = random_case(&rng, i);
        per_kind[c.kind]++;
        padded += c.pad > 0 && c.kind != MOE_SPLIT_NONE;
        moe_layer_data ld;
        moe_error err = {0};
        assert_int_equal(moe_layer_data_random(&c.cfg, 1000 + (uint64_t)i, &ld, &err), MOE_OK);
        uint16_t *x = malloc(((size_t)c.T * c.cfg.D + 1) * sizeof(uint16_t));
        assert_non_null(x);
        moe_random_input(c.T, c.cfg.D, 77 + (uint64_t)i, x);
        char label[160];
        snprintf(label, sizeof label,
                 "case %d (%s D=%d I=%d R=%d K=%d S=%d T=%d split %d x%d pad %d)", i,
                 moe_routed_format_get(c.cfg.routed_format)->key, c.cfg.D, c.cfg.I,
                 c.cfg.R, c.cfg.K, c.cfg.S, c.T, (int)c.kind, c.n, c.pad);
        expect_matches_ref(&ld, c.T, x, c.kind, c.n, c.pad, label);
        free(x);
        moe_layer_data_free(&ld);
    }
    /* The draw must have covered every split kind and padded slabs. */
    assert_true(per_kind[MOE_SPLIT_NONE] >= 3 && per_kind[MOE_SPLIT_TP] >= 3 &&
                per_kind[MOE_SPLIT_EP] >= 3 && padded >= 3);
}

#ifdef MOE_HAVE_OPENBLAS
/* Matrices cut into whole tiles and a partial last one (BLAS_TILE_FLOATS, blas_internal.h),
 * judged against the reference, not only thread against thread: w2 [D, I] in tiles of
 * TILE / I rows, w13 [2I, D] in tiles of TILE / (2D) channels; routed and sink, MXFP4 and
 * bf16, unsplit and EP 2. */
static void test_partial_tiles_match_reference(void **state) {
    (void)state;
    if (!blas_here()) skip();
    const int v = BLAS_TILE_FLOATS;
    const int shapes[2][2] = {{3 * v / 2048 / 2, 2048}, {1024, 3 * v / 2 / 1024 / 2}}; /* {D, I} */
    for (int s = 0; s < 2; s++) {
        const int D = shapes[s][0], I = shapes[s][1];
        /* w2 (first shape) or w13 (second) spans 1.5 tiles: one whole, one partial */
        if (s == 0) assert_true(D > v / I && D % (v / I) != 0);
        else assert_true(I > v / (2 * D) && I % (v / (2 * D)) != 0);
        for (int fmt = 0; fmt < 2; fmt++) {
            const moe_config cfg = {D, I, 3, 2, 1, 2.5f, true, true, (moe_routed_format)fmt};
            const int T = s == 0 ? 5 : 2;
            moe_layer_data ld;
            moe_error err = {0};
            assert_int_equal(moe_layer_data_random(&cfg, 300 + (uint64_t)(2 * s + fmt), &ld, &err), MOE_OK);
            uint16_t *x = malloc((size_t)T * D * sizeof(uint16_t));
            assert_non_null(x);
            moe_random_input(T, D, 31, x);
            char label[96];
            snprintf(label, sizeof label, "D=%d I=%d fmt %d", D, I, fmt);
            expect_matches_ref(&ld, T, x, MOE_SPLIT_NONE, 1, 0, label);
            expect_matches_ref(&ld, T, x, MOE_SPLIT_EP, 2, 0, label);
            free(x);
            moe_layer_data_free(&ld);
        }
    }
}
#endif

/* The shape of the production layer scaled down, with 64 tokens: several tokens per expert
 * (the fused kernels' token blocks; test_each_route_and_kernel runs the sgemm route too). */
static const moe_config mid_cfg = {128, 64, 16, 6, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};

static void test_nonfinite_rows(void **state) {
    (void)state;
    if (!blas_here()) skip();
    const int T = 64, D = mid_cfg.D, K = mid_cfg.K, S = mid_cfg.S;
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&mid_cfg, 5, &ld, &err), MOE_OK);
    uint16_t *x = malloc((size_t)T * D * sizeof(uint16_t));
    assert_non_null(x);
    moe_random_input(T, D, 9, x);
    x[3 * D + 17] = 0x7FC0u;  /* NaN */
    x[40 * D + 0] = 0x7F80u;  /* +inf */
    x[63 * D + 99] = 0xFF80u; /* -inf */
    expect_matches_ref(&ld, T, x, MOE_SPLIT_NONE, 1, 0, "non-finite rows");

    moe_split whole = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&mid_cfg, &ld.w, &whole, &sh, &err), MOE_OK);
    moe_options opt = blas_options(2);
    moe_layer *layer = NULL;
    assert_int_equal(moe_layer_create(&moe_backend_blas, &sh, &opt, &layer, &err), MOE_OK);
    float *out = malloc((size_t)T * D * sizeof(float));
    int32_t ids[64 * 6];
    float weights[64 * 8];
    moe_stages st = {NULL, ids, weights, NULL, NULL, NULL, NULL, 0};
    assert_non_null(out);
    assert_int_equal(moe_layer_forward(layer, T, x, out, &st, &err), MOE_OK);
    for (int t = 0; t < T; t++) {
        bool bad = t == 3 || t == 40 || t == 63;
        for (int d = 0; d < D; d++)
            if (bad != (bool)isnan(out[(size_t)t * D + d]))
                fail_msg("token %d element %d: %g (row %s)", t, d, out[(size_t)t * D + d],
                         bad ? "non-finite" : "finite");
        for (int k = 0; k < K && bad; k++) assert_int_equal(ids[t * K + k], k);
        for (int j = 0; j < K + S && bad; j++) assert_true(isnan(weights[t * (K + S) + j]));
    }
    free(out);
    moe_layer_destroy(layer);
    moe_shard_free(&sh);
    free(x);
    moe_layer_data_free(&ld);
}

/* One blas run of every stage on a shard; the arrays are owned by the caller. */
typedef struct {
    float *out, *logits, *weights, *routed_h, *routed_y, *sink_h, *sink_y;
    int32_t *ids;
} full_run;

static void run_all_stages(const moe_shard *sh, int threads, int T, const uint16_t *x,
                           full_run *r) {
    const size_t D = (size_t)sh->cfg.D, K = (size_t)sh->cfg.K, S = (size_t)sh->cfg.S;
    const size_t G = (size_t)(sh->cfg.R + sh->cfg.S), TT = (size_t)T;
    r->out = calloc(TT * D, sizeof(float));
    r->logits = calloc(TT * G, sizeof(float));
    r->ids = calloc(TT * K, sizeof(int32_t));
    r->weights = calloc(TT * (K + S), sizeof(float));
    r->routed_h = calloc(TT * K * (size_t)sh->I_local, sizeof(float));
    r->routed_y = calloc(TT * K * D, sizeof(float));
    r->sink_h = calloc(TT * S * (size_t)sh->sink_I_local, sizeof(float));
    r->sink_y = calloc(TT * D, sizeof(float));
    assert_true(r->out && r->logits && r->ids && r->weights && r->routed_h && r->routed_y &&
                r->sink_h && r->sink_y);
    moe_stages st = {r->logits, r->ids, r->weights, r->routed_h, r->routed_y, r->sink_h, r->sink_y, 0};
    moe_options opt = blas_options(threads);
    moe_layer *layer = NULL;
    moe_error err = {0};
    assert_int_equal(moe_layer_create(&moe_backend_blas, sh, &opt, &layer, &err), MOE_OK);
    assert_int_equal(moe_layer_forward(layer, T, x, r->out, &st, &err), MOE_OK);
    assert_int_equal(st.filled, MOE_STAGE_LOGITS | MOE_STAGE_TOPK | MOE_STAGE_ROUTED_H |
                                    MOE_STAGE_ROUTED_Y | MOE_STAGE_SINK_H | MOE_STAGE_SINK_Y);
    moe_layer_destroy(layer);
}

static void full_run_free(full_run *r) {
    free(r->out), free(r->logits), free(r->ids), free(r->weights);
    free(r->routed_h), free(r->routed_y), free(r->sink_h), free(r->sink_y);
}

static void assert_same_bits(const full_run *a, const full_run *b, const moe_shard *sh, int T) {
    const size_t D = (size_t)sh->cfg.D, K = (size_t)sh->cfg.K, S = (size_t)sh->cfg.S;
    const size_t G = (size_t)(sh->cfg.R + sh->cfg.S), TT = (size_t)T;
    assert_memory_equal(a->out, b->out, TT * D * sizeof(float));
    assert_memory_equal(a->logits, b->logits, TT * G * sizeof(float));
    assert_memory_equal(a->ids, b->ids, TT * K * sizeof(int32_t));
    assert_memory_equal(a->weights, b->weights, TT * (K + S) * sizeof(float));
    assert_memory_equal(a->routed_h, b->routed_h, TT * K * (size_t)sh->I_local * sizeof(float));
    assert_memory_equal(a->routed_y, b->routed_y, TT * K * D * sizeof(float));
    assert_memory_equal(a->sink_h, b->sink_h, TT * S * (size_t)sh->sink_I_local * sizeof(float));
    assert_memory_equal(a->sink_y, b->sink_y, TT * D * sizeof(float));
}

/* A random layer of shape cfg (seed, and seed + 1 for its T-token input, with token nan_token's
 * first value a NaN when nan_token >= 0) gives the same bits on 1 and 2 threads, and again on
 * 2. */
static void expect_same_bits_across_threads(const moe_config *cfg, uint64_t seed, int T, int nan_token) {
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(cfg, seed, &ld, &err), MOE_OK);
    uint16_t *x = malloc((size_t)T * cfg->D * sizeof(uint16_t));
    assert_non_null(x);
    moe_random_input(T, cfg->D, seed + 1, x);
    if (nan_token >= 0) x[(size_t)nan_token * cfg->D] = 0x7FC0u;
    moe_split whole = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(cfg, &ld.w, &whole, &sh, &err), MOE_OK);
    full_run one, two, again;
    run_all_stages(&sh, 1, T, x, &one);
    run_all_stages(&sh, 2, T, x, &two);
    run_all_stages(&sh, 2, T, x, &again);
    assert_same_bits(&one, &two, &sh, T);
    assert_same_bits(&two, &again, &sh, T);
    full_run_free(&one), full_run_free(&two), full_run_free(&again);
    moe_shard_free(&sh);
    free(x);
    moe_layer_data_free(&ld);
}

static void test_deterministic_across_threads(void **state) {
    (void)state;
    if (!blas_here()) skip();
    /* Wide enough that every weight matrix spans several tiles, so threads share the work. */
    const moe_config cfg = {512, 512, 8, 3, 2, 8.0f, true, true, MOE_ROUTED_MXFP4};
    expect_same_bits_across_threads(&cfg, 11, 64, 5);
}

/* Runs blas on corrupted weights and judges it against the envelope of the clean layer:
 * returns whether the comparison caught the corruption. */
static bool caught(const moe_layer_data *clean, const moe_weights *corrupt, int T,
                   const uint16_t *x, moe_split_kind kind, int n, const char *label) {
    moe_cmp_case cc = {&clean->cfg, &clean->w, T, x};
    moe_options opt = blas_options(2);
    moe_run run;
    moe_cmp_report rep;
    moe_error err = {0};
    assert_int_equal(moe_run_path(&moe_backend_blas, &opt, &clean->cfg, corrupt, kind, n, 0, T, x,
                                  true, &run, &err),
                     MOE_OK);
    assert_int_equal(moe_compare_runs(&cc, NULL, &run, NULL, NULL, &rep, &err), MOE_OK);
    if (!rep.ok) printf("  planted %s: caught: %s\n", label, rep.msg);
    moe_run_free(&run);
    return !rep.ok;
}

static void test_planted_bugs_are_caught(void **state) {
    (void)state;
    if (!blas_here()) skip();
    const int T = 64, D = mid_cfg.D, I = mid_cfg.I;
    moe_layer_data ld, bad;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&mid_cfg, 21, &ld, &err), MOE_OK);
    assert_int_equal(moe_layer_data_random(&mid_cfg, 21, &bad, &err), MOE_OK);
    uint16_t *x = malloc((size_t)T * D * sizeof(uint16_t));
    assert_non_null(x);
    moe_random_input(T, D, 22, x);
    /* The clean weights pass: the corruptions below are the only difference. */
    expect_matches_ref(&ld, T, x, MOE_SPLIT_TP, 2, 0, "clean TP 2");

    /* Expert chosen by token 0's first slot, so the corruption is certainly exercised. */
    int32_t ids[64 * 6];
    float weights[64 * 8];
    moe_stages st = {NULL, ids, weights, NULL, NULL, NULL, NULL, 0};
    float *out = malloc((size_t)T * D * sizeof(float));
    moe_options opt = blas_options(1);
    assert_non_null(out);
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &mid_cfg, &ld.w, MOE_SPLIT_NONE, 1, 0,
                                           &opt, T, x, out, &st, &err),
                     MOE_OK);
    const size_t e = (size_t)ids[0];

    /* One wrong E8M0 block: w13 row 2 (gate channel 1), block 1 doubled. */
    uint8_t *scale = bad.w13_scale + e * 2 * I * (D / 32) + 2 * (D / 32) + 1;
    *scale = (uint8_t)(*scale + 1);
    assert_true(caught(&ld, &bad.w, T, x, MOE_SPLIT_NONE, 1, "one wrong E8M0 block"));
    *scale = (uint8_t)(*scale - 1);

    /* Gate/up swapped in TP rank 1's slab of expert e: rows 2j <-> 2j+1 for j in [I/2, I). */
    uint8_t *w13 = bad.w13_mx + e * 2 * I * (D / 2), *s13 = bad.w13_scale + e * 2 * I * (D / 32);
    for (int j = I / 2; j < I; j++) {
        for (int b = 0; b < D / 2; b++) {
            uint8_t tmp = w13[(2 * j) * (D / 2) + b];
            w13[(2 * j) * (D / 2) + b] = w13[(2 * j + 1) * (D / 2) + b];
            w13[(2 * j + 1) * (D / 2) + b] = tmp;
        }
        for (int b = 0; b < D / 32; b++) {
            uint8_t tmp = s13[(2 * j) * (D / 32) + b];
            s13[(2 * j) * (D / 32) + b] = s13[(2 * j + 1) * (D / 32) + b];
            s13[(2 * j + 1) * (D / 32) + b] = tmp;
        }
    }
    assert_true(caught(&ld, &bad.w, T, x, MOE_SPLIT_TP, 2, "gate/up swap in one TP slab"));

    /* A routed weight off by 2^-12 relative (what a bias leaking into the weights looks like
     * at the size of a small bias), judged on an otherwise correct run. */
    moe_cmp_case cc = {&ld.cfg, &ld.w, T, x};
    moe_run run;
    moe_cmp_report rep;
    moe_options two = blas_options(2);
    assert_int_equal(moe_run_path(&moe_backend_blas, &two, &ld.cfg, &ld.w, MOE_SPLIT_NONE, 1, 0, T,
                                  x, true, &run, &err),
                     MOE_OK);
    assert_int_equal(moe_compare_runs(&cc, NULL, &run, NULL, NULL, &rep, &err), MOE_OK);
    assert_true(rep.ok);
    run.weights[7 * (mid_cfg.K + mid_cfg.S) + 1] *= 1.0f + 0x1p-12f;
    assert_int_equal(moe_compare_runs(&cc, NULL, &run, NULL, NULL, &rep, &err), MOE_OK);
    assert_false(rep.ok);
    printf("  planted weight off by 2^-12: caught: %s\n", rep.msg);
    moe_run_free(&run);

    free(out);
    free(x);
    moe_layer_data_free(&ld);
    moe_layer_data_free(&bad);
}

static void test_route_entry_is_the_reference(void **state) {
    (void)state;
    if (!blas_here()) skip();
    const int T = 5, R = mid_cfg.R, K = mid_cfg.K, S = mid_cfg.S;
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&mid_cfg, 31, &ld, &err), MOE_OK);
    moe_split whole = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&mid_cfg, &ld.w, &whole, &sh, &err), MOE_OK);
    moe_options opt = blas_options(2);
    moe_layer *layer = NULL;
    assert_int_equal(moe_layer_create(&moe_backend_blas, &sh, &opt, &layer, &err), MOE_OK);
    float logits[5 * 18];
    int32_t ids[5 * 6], want_ids[6];
    float weights[5 * 8], want_w[8];
    moe_rng rng = moe_rng_make(3, 3);
    for (int i = 0; i < T * (R + S); i++) logits[i] = (float)(moe_rng_normal(&rng) * 3.0);
    logits[R + S + 4] = logits[R + S + 9]; /* a tie within token 1 */
    assert_int_equal(moe_layer_route(layer, T, logits, ids, weights, &err), MOE_OK);
    for (int t = 0; t < T; t++) {
        moe_route_token(logits + t * (R + S), sh.gate_bias, R, K, S, mid_cfg.route_scale,
                        sh.global_scale, want_ids, want_w);
        assert_memory_equal(ids + t * K, want_ids, sizeof want_ids);
        assert_memory_equal(weights + t * (K + S), want_w, sizeof want_w);
    }
    /* T = 0 is a valid call with nothing to do. */
    assert_int_equal(moe_layer_forward(layer, 0, NULL, NULL, NULL, &err), MOE_OK);
    moe_layer_destroy(layer);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
}

/* The fast MXFP4 decoder gives the bits of the portable one (the contract's definition), scale
 * bytes 0 (subnormal 2^-127) to 254 and every code included. */
static void test_tile_decode_is_exact(void **state) {
    (void)state;
#ifdef MOE_HAVE_OPENBLAS
    enum { ROWS = 3, COLS = 256 };
    uint8_t packed[ROWS * COLS / 2], scales[ROWS * COLS / 32];
    float fast[ROWS * COLS], want[COLS];
    moe_rng rng = moe_rng_make(8, 8);
    for (size_t i = 0; i < sizeof packed; i++) packed[i] = (uint8_t)moe_rng_int(&rng, 0, 255);
    for (size_t i = 0; i < sizeof scales; i++) scales[i] = (uint8_t)(i == 0 ? 0 : moe_rng_int(&rng, 0, 254));
    moe_matrix m = {.mx = packed, .scale = scales, .rows = ROWS, .cols = COLS};
    blas_decode_rows(&m, 1, 2, fast);
    for (int r = 0; r < 2; r++) {
        moe_mxfp4_decode_row(packed + (r + 1) * COLS / 2, scales + (r + 1) * COLS / 32, COLS, want);
        assert_memory_equal(fast + r * COLS, want, sizeof want);
    }
    blas_decode_rows(&m, 0, 1, fast); /* row 0 holds the scale byte 0 */
    moe_mxfp4_decode_row(packed, scales, COLS, want);
    assert_memory_equal(fast, want, sizeof want);
#else
    skip();
#endif
}

#ifdef MOE_HAVE_OPENBLAS
/* m (MXFP4 [rows, cols]) times n activation rows x [n, cols] (bf16 values) on the current
 * kernel, each element checked against the exact dot within (cols - 1) u sum |w||x|, the bound
 * of any fp32 summation order, plus the envelope's absolute floor. */
static void check_fused_dots(const moe_matrix *m, const float *x, int n, const char *label) {
    const int rows = m->rows, cols = m->cols;
    const size_t stride = blas_fused_stride(cols);
    uint16_t *act = malloc((size_t)n * stride * sizeof(uint16_t));
    float *out = malloc((size_t)n * rows * sizeof(float));
    double *w = malloc((size_t)cols * sizeof(double));
    assert_true(act && out && w);
    blas_act_range ar = {0, 0, true};
    for (int p = 0; p < n; p++) {
        blas_act_range r = blas_fused_arrange(x + (size_t)p * cols, cols, act + (size_t)p * stride);
        ar = p ? blas_act_range_merge(ar, r) : r;
    }
    /* Rows 1..rows-1: an odd count when rows is even, so both row pairs and a lone row run. */
    blas_fused_rows(m, blas_scale_range_of(m), 1, rows - 1, act, n, ar, out, rows);
    for (int r = 1; r < rows; r++) {
        moe_matrix_row(m, r, w);
        for (int p = 0; p < n; p++) {
            double exact = 0.0, size = 0.0;
            for (int c = 0; c < cols; c++) {
                exact += w[c] * (double)x[(size_t)p * cols + c];
                size += fabs(w[c] * (double)x[(size_t)p * cols + c]);
            }
            double got = out[(size_t)p * rows + r - 1];
            if (!(fabs(got - exact) <= (cols - 1) * 0x1p-24 * size + 0x1p-120))
                fail_msg("%s: row %d token %d of %dx%d: %.9g, exact %.9g (size %g)", label, r, p,
                         rows, cols, got, exact, size);
        }
    }
    free(act), free(out), free(w);
}

/* A random MXFP4 matrix [rows, cols] with scale bytes in [s_lo, s_hi] and activations
 * x [n, cols] ~ N(0, 1) in bf16. */
static void random_fused_case(moe_rng *rng, int rows, int cols, int s_lo, int s_hi, int n,
                              uint8_t *packed, uint8_t *scales, float *x) {
    for (int i = 0; i < rows * cols / 2; i++) packed[i] = (uint8_t)moe_rng_int(rng, 0, 255);
    for (int i = 0; i < rows * cols / 32; i++) scales[i] = (uint8_t)moe_rng_int(rng, s_lo, s_hi);
    for (int i = 0; i < n * cols; i++) x[i] = moe_round_bf16((float)moe_rng_normal(rng));
}

static void test_fused_kernels_are_fp32_dots(void **state) {
    (void)state;
    /* 32: one tail chunk; 96: a chunk and a tail; 544: 17 scale blocks, past one scale group of
     * the BF16 kernel, and a tail; 1024: two whole groups. */
    static const int col_counts[] = {32, 96, 544, 1024};
    static const int token_counts[] = {1, 3, 4, 5, 9};
    static const blas_fused_kernel kernels[] = {BLAS_FUSED_AUTO, BLAS_FUSED_AVX2, BLAS_FUSED_PORTABLE};
    enum { ROWS = 6, MAX_COLS = 1024, MAX_N = 9 };
    static uint8_t packed[ROWS * MAX_COLS / 2], scales[ROWS * MAX_COLS / 32];
    static float x[MAX_N * MAX_COLS];
    moe_rng rng = moe_rng_make(15, 1);
    for (int k = 0; k < 3; k++) {
        blas_fused_force_kernel(kernels[k]);
        for (int ci = 0; ci < 4; ci++)
            for (int ni = 0; ni < 5; ni++) {
                const int cols = col_counts[ci], n = token_counts[ni];
                random_fused_case(&rng, ROWS, cols, 110, 130, n, packed, scales, x);
                moe_matrix m = {packed, scales, NULL, ROWS, cols, NULL, NULL};
                char label[64];
                snprintf(label, sizeof label, "kernel %d", (int)blas_fused_kernel_for(true));
                check_fused_dots(&m, x, n, label);
            }
    }
    blas_fused_force_kernel(BLAS_FUSED_AUTO);
}

/* Where vdpbf16ps would flush (a subnormal activation, a tiny scale), the BF16 kernel is not
 * used and the result is still the exact one. */
static void test_fused_bf16_only_where_exact(void **state) {
    (void)state;
    enum { ROWS = 2, COLS = 64 };
    uint8_t packed[ROWS * COLS / 2], scales[ROWS * COLS / 32];
    float x[COLS];
    memset(packed, 0, sizeof packed);
    memset(x, 0, sizeof x);
    memset(scales, 200, sizeof scales);
    moe_matrix m = {packed, scales, NULL, ROWS, COLS, NULL, NULL};
    uint16_t act[COLS];
    float out[ROWS];
    /* Row 1, column 5 holds code 6 (4.0): weight 4 * 2^73; x[5] = 2^-130, a bf16 subnormal.
     * Their product, 2^-55, is the whole dot product. */
    packed[COLS / 2 + 2] = 0x60;
    const uint32_t tiny_bits = 0x00080000u; /* 2^-130 */
    memcpy(&x[5], &tiny_bits, sizeof x[5]);
    blas_act_range ar = blas_fused_arrange(x, COLS, act);
    assert_false(ar.plain);
    assert_false(blas_fused_bf16_exact(blas_scale_range_of(&m), ar, COLS));
    blas_fused_rows(&m, blas_scale_range_of(&m), 0, ROWS, act, 1, ar, out, ROWS);
    assert_true(out[0] == 0.0f && out[1] == 0x1p-55f);

    /* Normal activations at the edge: x = 2^e, weight 0.5 * 2^(s - 127); the guard admits
     * e + s >= 9, where the product is at least 2^-126. */
    x[5] = 0x1p-100f;
    ar = blas_fused_arrange(x, COLS, act);
    assert_true(ar.plain && ar.exp_min == -100);
    packed[COLS / 2 + 2] = 0x10; /* code 1: 0.5 */
    memset(scales, 109, sizeof scales);
    assert_true(blas_fused_bf16_exact(blas_scale_range_of(&m), ar, COLS));
    blas_fused_rows(&m, blas_scale_range_of(&m), 0, ROWS, act, 1, ar, out, ROWS);
    assert_true(out[1] == 0x1p-119f);
    memset(scales, 108, sizeof scales);
    assert_false(blas_fused_bf16_exact(blas_scale_range_of(&m), ar, COLS));
    scales[0] = 1; /* a weight that would be a bf16 subnormal */
    memset(scales + 1, 200, sizeof scales - 1);
    assert_false(blas_fused_bf16_exact(blas_scale_range_of(&m), ar, COLS));
    scales[0] = 2; /* the smallest byte whose weights are normal bf16 */
    x[5] = 0x1p7f;
    ar = blas_fused_arrange(x, COLS, act);
    assert_true(blas_fused_bf16_exact(blas_scale_range_of(&m), ar, COLS));
    blas_fused_rows(&m, blas_scale_range_of(&m), 0, ROWS, act, 1, ar, out, ROWS);
    assert_true(out[0] == 0.0f && out[1] == 0x1p79f);
}
#endif

/* Every group on one route (fused, then sgemm), and the fused route on each kernel: inside the
 * envelope, and bitwise the same for 1 and 2 threads. */
static void test_each_route_and_kernel(void **state) {
    (void)state;
    if (!blas_here()) skip();
#ifdef MOE_HAVE_OPENBLAS
    static const struct {
        int fused_below;
        blas_fused_kernel kernel;
        const char *name;
    } routes[] = {{INT_MAX, BLAS_FUSED_AUTO, "fused"},
                  {0, BLAS_FUSED_AUTO, "sgemm"},
                  {INT_MAX, BLAS_FUSED_AVX2, "fused avx2"},
                  {INT_MAX, BLAS_FUSED_PORTABLE, "fused portable"}};
    moe_rng rng = moe_rng_make(77, 2);
    for (int ri = 0; ri < 4; ri++) {
        blas_set_fused_below(routes[ri].fused_below);
        blas_fused_force_kernel(routes[ri].kernel);
        for (int i = 0; i < 8; i++) {
            small_case c = random_case(&rng, 3 * i); /* a multiple of 3: MXFP4 */
            c.T = i % 2 ? 64 : 7;
            moe_layer_data ld;
            moe_error err = {0};
            assert_int_equal(moe_layer_data_random(&c.cfg, 300 + (uint64_t)i, &ld, &err), MOE_OK);
            uint16_t *x = malloc((size_t)c.T * c.cfg.D * sizeof(uint16_t));
            assert_non_null(x);
            moe_random_input(c.T, c.cfg.D, 40 + (uint64_t)i, x);
            char label[160];
            snprintf(label, sizeof label, "%s route, case %d (D=%d I=%d R=%d K=%d T=%d split %d x%d)",
                     routes[ri].name, i, c.cfg.D, c.cfg.I, c.cfg.R, c.cfg.K, c.T, (int)c.kind, c.n);
            expect_matches_ref(&ld, c.T, x, c.kind, c.n, c.pad, label);
            free(x);
            moe_layer_data_free(&ld);
        }
        /* Wide enough that each matrix spans several row blocks shared by the threads. */
        const moe_config cfg = {544, 288, 8, 3, 1, 8.0f, true, true, MOE_ROUTED_MXFP4};
        expect_same_bits_across_threads(&cfg, 13, 24, -1);
    }
    blas_set_fused_below(-1);
    blas_fused_force_kernel(BLAS_FUSED_AUTO);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unavailable_or_supports),
        cmocka_unit_test(test_tile_decode_is_exact),
        cmocka_unit_test(test_random_layers_match_reference),
#ifdef MOE_HAVE_OPENBLAS
        cmocka_unit_test(test_partial_tiles_match_reference),
#endif
        cmocka_unit_test(test_nonfinite_rows),
        cmocka_unit_test(test_deterministic_across_threads),
        cmocka_unit_test(test_planted_bugs_are_caught),
        cmocka_unit_test(test_route_entry_is_the_reference),
#ifdef MOE_HAVE_OPENBLAS
        cmocka_unit_test(test_fused_kernels_are_fp32_dots),
        cmocka_unit_test(test_fused_bf16_only_where_exact),
#endif
        cmocka_unit_test(test_each_route_and_kernel),
    };
    return cmocka_run_group_tests_name("blas", tests, NULL, NULL);
}
