/*
 * test_fuzz_case.c: case lines, suites and features (harness/fuzz_case.h).
 *
 * Rules checked:
 *   - every drawn case of every suite is valid, inside the suite's bounds, and its line parses
 *     back to the same case;
 *   - drawing is deterministic in (suite, seed, index);
 *   - aimed cases land on the OpenBLAS path's declared constants: one tile, several, a partial
 *     last one, T at a chunk, one expert with exactly a cut-off's rows;
 *   - building a case twice gives the same bytes;
 *   - bad lines fail naming the key or word at fault;
 *   - features do what they say: ties make equal gate rows, nonfinite puts NaN/inf in x,
 *     codes puts all 16 codes in a row's first block, neglogit gives logits below -100, and
 *     below -709 on every routed row and no sink in some cases, file gives the candidates the
 *     same bytes through a checkpoint written and loaded back;
 *   - the host-memory estimate covers the measured peaks of the real-model cases, and a case
 *     over the memory limit runs no path, each skipped with the reason; the host's available
 *     memory reads as a positive amount below its total.
 */
#include "test_support.h"

#include "harness/fuzz.h"
#include "harness/fuzz_case.h"
#include "harness/fuzz_file.h"
#include "harness/host_memory.h"
#include "harness/mutants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_roundtrip_and_bounds(void **state) {
    (void)state;
    const char *names[] = {"smoke", "ci", "nightly"};
    for (int s = 0; s < 3; s++) {
        fuzz_suite suite;
        moe_error err;
        if (fuzz_suite_load("harness/suites", names[s], &suite, &err)) fail_msg("%s", err.msg);
        fuzz_suite plain = suite; /* aimed cases leave the bounds on purpose: checked below */
        plain.aim_p = 0;
        int nvfp4 = 0, e4m3 = 0, scale2 = 0, narrow = 0;
        for (long i = 0; i < 300; i++) {
            fuzz_case c = fuzz_suite_case(&suite, 42, i), back, again = fuzz_suite_case(&suite, 42, i);
            assert_memory_equal(&c, &again, sizeof c);
            char line[512];
            fuzz_case_format(&c, line, sizeof line);
            if (fuzz_case_parse(line, &back, &err)) fail_msg("%s: %s", line, err.msg);
            assert_memory_equal(&c, &back, sizeof c);
            if (i < suite.n_fixed) continue;
            c = fuzz_suite_case(&plain, 42, i);
            /* NVFP4 may take 16 off a width of 48 or more: still within the suite's bounds */
            const int unit = c.cfg.routed_format == MOE_ROUTED_NVFP4 ? 16 : 32;
            assert_true(c.cfg.D % unit == 0 && c.cfg.D >= suite.D_lo && c.cfg.D <= suite.D_hi);
            assert_true(c.cfg.I % unit == 0 && c.cfg.I >= suite.I_lo && c.cfg.I <= suite.I_hi);
            assert_true(c.cfg.R >= suite.R_lo && c.cfg.R <= suite.R_hi);
            assert_true(c.cfg.K >= 1 && c.cfg.K <= c.cfg.R && c.cfg.K <= suite.K_hi);
            assert_true(c.T >= 0 && c.T <= (suite.T_hi > suite.big_T_hi ? suite.T_hi : suite.big_T_hi));
            assert_true(c.n >= 1 && c.n <= suite.split_n_hi);
            if (c.cfg.routed_format != MOE_ROUTED_NVFP4) continue;
            nvfp4++;
            e4m3 += (c.features & FZ_E4M3) != 0;
            scale2 += (c.features & FZ_SCALE2) != 0;
            narrow += c.cfg.D % 32 != 0 || c.cfg.I % 32 != 0;
        }
        /* the default suites draw NVFP4 layers, with its features and widths of 16 mod 32 */
        if (nvfp4 < 30 || e4m3 < 5 || scale2 < 5 || narrow < 5)
            fail_msg("suite %s: %d NVFP4 cases of 300 (%d e4m3, %d scale2, %d narrow)", names[s],
                     nvfp4, e4m3, scale2, narrow);
    }
}

/* Tiles of `unit` along `extent`: 1 exactly one, 2 several whole, 3 whole ones and a partial
 * last one, 0 otherwise (less than one tile). */
static int tiling_of(long extent, long unit) {
    if (unit <= 0 || extent < unit) return 0;
    if (extent == unit) return 1;
    return extent % unit == 0 ? 2 : 3;
}

/* Aimed cases land on every declared constant of the OpenBLAS path: each tiling (one tile,
 * several, a partial last one) of w2 and w13, T at and next to the gate chunk, and one expert
 * with exactly the sgemv cut-off's rows. The tile arithmetic is redone here from moe.h's
 * definition of MOE_HINT_TILE_ELEMENTS. */
static void test_aimed_cases_reach_hints(void **state) {
    (void)state;
    const moe_shape_hint *h = moe_backend_blas.shape_hints;
    assert_non_null(h);
    fuzz_case base;
    moe_error err;
    assert_int_equal(fuzz_case_parse("D=64 I=64 R=8 K=2 S=1 T=4 fmt=mxfp4 bias=0 gscale=0 rs=1 "
                                     "split=tp2 pad=32 seed=5 feat=nonfinite", &base, &err), MOE_OK);
    for (; h->name; h++) {
        bool seen[4] = {false, false, false, false}; /* tile: -, one, several, partial */
        bool at = false, above = false;
        moe_rng rng = moe_rng_make(99, 1);
        for (int i = 0; i < 20000; i++) {
            fuzz_case c = base;
            if (!fuzz_case_aim(&c, &rng)) continue;
            assert_int_equal(fuzz_case_validate(&c, NULL), MOE_OK);
            assert_true(c.cfg.D <= 4096 && c.cfg.I <= 4096 && c.split != MOE_SPLIT_TP && c.pad == 0);
            if (h->kind == MOE_HINT_TILE_ELEMENTS) {
                seen[tiling_of(c.cfg.D, h->value / c.cfg.I)] = true;        /* w2 [D, I] */
                seen[tiling_of(c.cfg.I, h->value / (2 * c.cfg.D))] = true;  /* w13 [2I, D] */
            }
            if (h->kind == MOE_HINT_TOKENS) {
                at = at || c.T == h->value;
                above = above || c.T == h->value + 1;
            }
            if (h->kind == MOE_HINT_EXPERT_ROWS && (c.features & FZ_FEW) && c.cfg.has_gate_bias &&
                !(c.features & FZ_NONFINITE)) {
                at = at || c.T == h->value;
                above = above || c.T == h->value + 1;
            }
        }
        if (h->kind == MOE_HINT_TILE_ELEMENTS && !(seen[1] && seen[2] && seen[3]))
            fail_msg("%s: one tile %d, several %d, partial last %d", h->name, seen[1], seen[2], seen[3]);
        if ((h->kind == MOE_HINT_TOKENS || h->kind == MOE_HINT_EXPERT_ROWS) && !(at && above))
            fail_msg("%s = %ld: T at it %d, one above %d", h->name, h->value, at, above);
    }
}

static void test_bad_lines(void **state) {
    (void)state;
    fuzz_case c;
    moe_error err;
    assert_int_not_equal(fuzz_case_parse("D=64 I=64 R=4 K=2 S=1", &c, &err), MOE_OK);
    assert_msg_has(err, "key T missing");
    assert_int_not_equal(fuzz_case_parse("D=64 I=64 R=4 K=2 S=1 T=1 colour=red", &c, &err), MOE_OK);
    assert_msg_has(err, "colour");
    assert_int_not_equal(fuzz_case_parse("D=64 I=64 R=4 K=2 S=1 T=1 feat=sparkle", &c, &err), MOE_OK);
    assert_msg_has(err, "sparkle");
    assert_int_not_equal(fuzz_case_parse("D=64 I=64 R=4 K=5 S=1 T=1", &c, &err), MOE_OK);
    assert_msg_has(err, "num_experts_per_tok");
    assert_int_not_equal(fuzz_case_parse("D=64 I=64 R=4 K=2 S=1 T=1 split=tp3", &c, &err), MOE_OK);
    assert_msg_has(err, "TP 3");
}

static void build(const char *line, fuzz_case *c, moe_layer_data *ld, uint16_t **x) {
    moe_error err;
    if (fuzz_case_parse(line, c, &err)) fail_msg("%s", err.msg);
    if (fuzz_case_build(c, ld, x, &err)) fail_msg("%s", err.msg);
}

static void test_build_deterministic(void **state) {
    (void)state;
    const char *line = "D=64 I=32 R=6 K=2 S=2 T=5 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 "
                       "seed=77 feat=ties,near,e8m0,codes,neglogit,nonfinite";
    fuzz_case c;
    moe_layer_data a, b;
    uint16_t *xa, *xb;
    build(line, &c, &a, &xa);
    build(line, &c, &b, &xb);
    assert_memory_equal(xa, xb, (size_t)c.T * c.cfg.D * 2);
    assert_memory_equal(a.gate_w, b.gate_w, (size_t)(c.cfg.R + c.cfg.S) * c.cfg.D * 2);
    assert_memory_equal(a.w13_scale, b.w13_scale, (size_t)c.cfg.R * 2 * c.cfg.I * c.cfg.D / 32);
    assert_memory_equal(a.w2_mx, b.w2_mx, (size_t)c.cfg.R * c.cfg.D * c.cfg.I / 2);
    moe_layer_data_free(&a);
    moe_layer_data_free(&b);
    free(xa);
    free(xb);
}

static void test_features(void **state) {
    (void)state;
    fuzz_case c;
    moe_layer_data ld;
    uint16_t *x;
    build("D=64 I=32 R=9 K=3 S=1 T=8 fmt=mxfp4 bias=1 gscale=0 rs=1 split=none pad=0 seed=5 "
          "feat=ties,codes,nonfinite,neglogit", &c, &ld, &x);
    const int D = c.cfg.D;
    /* ties: at most 3 distinct routed gate rows (the neglogit column may differ per row) */
    int distinct = 0;
    for (int e = 0; e < c.cfg.R; e++) {
        bool seen = false;
        for (int f = 0; f < e && !seen; f++) {
            bool same = true;
            for (int d = 0; d < D; d++)
                if (x[d] != moe_f32_to_bf16(32.0f) && ld.gate_w[e * D + d] != ld.gate_w[f * D + d]) same = false;
            seen = same;
        }
        distinct += !seen;
    }
    assert_true(distinct <= 3);
    /* nonfinite: some row holds NaN or inf */
    bool bad = false;
    for (int i = 0; i < c.T * D; i++) bad = bad || (x[i] & 0x7F80u) == 0x7F80u;
    assert_true(bad);
    /* codes: row 0 of expert 0's w13, first block: all 16 codes */
    unsigned seen_codes = 0;
    for (int k = 0; k < 16; k++) seen_codes |= 1u << (ld.w13_mx[k] & 15) | 1u << (ld.w13_mx[k] >> 4);
    assert_int_equal(seen_codes, 0xFFFFu);
    /* neglogit: a column of x at 32 in every token, and some gate row holds -8, -32 or -128 */
    int col = -1;
    for (int d = 0; d < D && col < 0; d++) {
        bool all = true;
        for (int t = 0; t < c.T; t++) all = all && x[t * D + d] == moe_f32_to_bf16(32.0f);
        if (all) col = d;
    }
    assert_true(col >= 0);
    int rows = 0;
    for (int g = 0; g < c.cfg.R + c.cfg.S; g++) {
        float w = moe_bf16_to_f32(ld.gate_w[g * D + col]);
        rows += w == -8.0f || w == -32.0f || w == -128.0f;
    }
    assert_true(rows >= 1);
    moe_layer_data_free(&ld);
    free(x);
}

/* neglogit reaches past -709 (logits of -1024 and -4096) and, in some cases, on every routed
 * gate row while no sink's is touched: what a normaliser that forgets the sinks needs to show. */
static void test_neglogit_depths(void **state) {
    (void)state;
    bool deep = false, routed_only_deep = false;
    for (int seed = 1; seed <= 60; seed++) {
        char line[200];
        snprintf(line, sizeof line, "D=32 I=32 R=3 K=2 S=2 T=1 fmt=bf16 bias=0 gscale=0 rs=1 "
                 "split=none pad=0 seed=%d feat=neglogit", seed);
        fuzz_case c;
        moe_layer_data ld;
        uint16_t *x;
        build(line, &c, &ld, &x);
        int col = 0;
        while (x[col] != moe_f32_to_bf16(32.0f)) col++;
        int routed = 0, sinks = 0;
        for (int g = 0; g < 5; g++) {
            bool hit = moe_bf16_to_f32(ld.gate_w[g * 32 + col]) * 32.0f <= -1024.0f;
            routed += g < 3 && hit;
            sinks += g >= 3 && ld.gate_w[g * 32 + col] == ld.gate_w[col];
        }
        deep = deep || routed > 0;
        routed_only_deep = routed_only_deep || (routed == 3 && sinks == 0);
        moe_layer_data_free(&ld);
        free(x);
    }
    assert_true(deep && routed_only_deep);
}

/* Feature file: the loaded view holds the bytes written (both formats, both global_scale
 * dtypes and scale layouts over the seeds), and the loader mutant's view differs only in its
 * misread global_scale. */
static void test_file_round_trip(void **state) {
    (void)state;
    bool dtype_seen[2] = {false, false};
    for (int seed = 1; seed <= 8; seed++) {
        char line[200];
        snprintf(line, sizeof line, "D=64 I=32 R=3 K=2 S=1 T=2 fmt=%s bias=1 gscale=1 rs=8 split=none "
                 "pad=0 seed=%d feat=file", seed % 2 ? "mxfp4" : "bf16", seed);
        fuzz_case c;
        moe_layer_data ld;
        uint16_t *x;
        build(line, &c, &ld, &x);
        dtype_seen[fuzz_file_opts(&c).global_scale_bf16] = true;
        fuzz_file f;
        fuzz_file_prepare(&f, &c, &ld);
        const moe_weights *w = NULL, *q = NULL;
        moe_error err;
        assert_int_equal(fuzz_file_weights(&f, &moe_backend_ref, &w, &err), MOE_OK);
        assert_true(w != &ld.w);
        const size_t D = 64, I = 32, R = 3, S = 1;
        assert_memory_equal(w->gate_w, ld.w.gate_w, (R + S) * D * 2);
        assert_memory_equal(w->gate_bias, ld.w.gate_bias, R * 4);
        assert_true(w->global_scale == ld.w.global_scale);
        if (seed % 2) {
            assert_memory_equal(w->w13_mx, ld.w.w13_mx, R * 2 * I * D / 2);
            assert_memory_equal(w->w13_scale, ld.w.w13_scale, R * 2 * I * D / 32);
            assert_memory_equal(w->w2_mx, ld.w.w2_mx, R * D * I / 2);
            assert_memory_equal(w->w2_scale, ld.w.w2_scale, R * D * I / 32);
        } else {
            assert_memory_equal(w->w13_bf16, ld.w.w13_bf16, R * 2 * I * D * 2);
            assert_memory_equal(w->w2_bf16, ld.w.w2_bf16, R * D * I * 2);
        }
        assert_memory_equal(w->sink_w2, ld.w.sink_w2, S * D * I * 2);
        assert_int_equal(fuzz_file_weights(&f, moe_mutant_find("loader_gscale_width"), &q, &err), MOE_OK);
        assert_true(q->global_scale != ld.w.global_scale && q->gate_w == w->gate_w);
        fuzz_file_close(&f);
        moe_layer_data_free(&ld);
        free(x);
    }
    assert_true(dtype_seen[0] && dtype_seen[1]);
}

/* The host-memory estimate against the peak resident sizes measured for the nightly suite's
 * real-model cases (`/usr/bin/time -v inkling-moe fuzz --paths blas --case LINE`, docs/harness.md,
 * "Memory"): at or above each, so that a host the estimate admits holds the case, and within a
 * quarter above it, so that a host that holds the case is not refused it. */
static void test_host_bytes_cover_measured_peaks(void **state) {
    (void)state;
    const struct {
        const char *line;
        double peak_kib;
    } measured[] = {
        {"D=4096 I=2048 R=256 K=6 S=2 T=1 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=11 feat=none", 7050380},
        {"D=4096 I=2048 R=256 K=6 S=2 T=4096 fmt=mxfp4 bias=1 gscale=1 rs=8 split=ep8 pad=0 seed=16 feat=few sample=3",
         9192856},
        {"D=6144 I=3072 R=256 K=6 S=2 T=1 fmt=mxfp4 bias=1 gscale=1 rs=8 split=none pad=0 seed=21 feat=none", 15656892},
        {"D=6144 I=3072 R=256 K=6 S=2 T=64 fmt=mxfp4 bias=1 gscale=1 rs=8 split=tp4 pad=0 seed=22 feat=none sample=2",
         15716824},
        {"D=6144 I=3072 R=256 K=6 S=2 T=4096 fmt=mxfp4 bias=1 gscale=1 rs=8 split=ep4 pad=0 seed=23 feat=none sample=2",
         19218944},
    };
    for (size_t i = 0; i < sizeof measured / sizeof measured[0]; i++) {
        fuzz_case c;
        moe_error err;
        assert_int_equal(fuzz_case_parse(measured[i].line, &c, &err), MOE_OK);
        const double peak = measured[i].peak_kib * 1024.0, est = fuzz_case_host_bytes(&c, 1);
        if (est < peak || est > 1.25 * peak)
            fail_msg("%s: estimated %.2f GB against a measured peak of %.2f GB", measured[i].line, est / 1e9,
                     peak / 1e9);
    }
    /* more candidates, tokens or bytes a weight: more memory */
    fuzz_case c;
    moe_error err;
    assert_int_equal(fuzz_case_parse(measured[0].line, &c, &err), MOE_OK);
    const double base = fuzz_case_host_bytes(&c, 1);
    assert_true(fuzz_case_host_bytes(&c, 2) > base);
    c.T = 64;
    assert_true(fuzz_case_host_bytes(&c, 1) > base);
    c.T = 1, c.cfg.routed_format = MOE_ROUTED_BF16;
    assert_true(fuzz_case_host_bytes(&c, 1) > 3.0 * base);
}

/* Where the host says (Linux), its available memory is a positive amount below its total. */
static void test_host_memory_available(void **state) {
    (void)state;
    double bytes = -1.0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) {
        assert_false(host_memory_available(&bytes));
        assert_true(bytes == -1.0); /* untouched */
        skip();
    }
    unsigned long long total_kib = 0;
    char line[256];
    while (fgets(line, sizeof line, f) && sscanf(line, "MemTotal: %llu kB", &total_kib) != 1) {}
    fclose(f);
    assert_true(host_memory_available(&bytes));
    assert_true(bytes > 0.0);
    assert_true(bytes <= (double)total_kib * 1024.0);
}

/* A case estimated above the targets' memory limit runs no path: each is SKIPPED with the
 * reason, and nothing is built; under the limit the same case runs. */
static void test_case_over_memory_limit_skipped(void **state) {
    (void)state;
    fuzz_case c;
    moe_error err;
    assert_int_equal(fuzz_case_parse("D=64 I=64 R=8 K=2 S=1 T=3 fmt=mxfp4 bias=1 gscale=1 rs=8 split=tp2 pad=0 "
                                     "seed=5 feat=none", &c, &err), MOE_OK);
    const moe_backend *cands[1] = {moe_mutant_find("none")};
    assert_non_null(cands[0]);
    fuzz_targets tg = {.candidates = cands, .n_candidates = 1, .ref_paths = true, .n_threads = 1,
                       .max_host_bytes = 0.5 * fuzz_case_host_bytes(&c, 1)};
    static fuzz_case_result res;
    assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
    assert_int_equal(res.n, fuzz_paths_per_case(&tg));
    assert_non_null(strstr(res.not_run, "host memory"));
    for (int i = 0; i < res.n; i++) {
        assert_int_equal(res.r[i].outcome, FUZZ_SKIP);
        assert_non_null(strstr(res.r[i].skip_reason, "over --max-memory"));
    }
    assert_string_equal(res.r[0].path, "ref/exact");
    assert_string_equal(res.r[res.n - 1].path, "mutant:none/serving/split");
    tg.max_host_bytes = 2.0 * fuzz_case_host_bytes(&c, 1);
    assert_int_equal(fuzz_run_case(&c, &tg, &res, &err), MOE_OK);
    assert_string_equal(res.not_run, "");
    int passed = 0;
    for (int i = 0; i < res.n; i++) passed += res.r[i].outcome == FUZZ_PASS;
    assert_true(passed > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_bytes_cover_measured_peaks),
        cmocka_unit_test(test_case_over_memory_limit_skipped),
        cmocka_unit_test(test_host_memory_available),
        cmocka_unit_test(test_roundtrip_and_bounds),
        cmocka_unit_test(test_aimed_cases_reach_hints),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_build_deterministic),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_neglogit_depths),
        cmocka_unit_test(test_file_round_trip),
    };
    return cmocka_run_group_tests_name("fuzz_case", tests, NULL, NULL);
}
