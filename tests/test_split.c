/*
 * test_split.c: TP n and EP n give the unsplit layer (contract.md [sharding]), through
 * moe_forward_all_ranks.
 *
 * Rules checked, for n in {1, 2, 3, 4, 8}, with and without pad_inter_to, MXFP4 and bf16
 * experts, both contracts:
 *   - moe_forward_all_ranks returns the partials added in fp32 in rank order (serving: that
 *     sum rounded to bf16 once more), bitwise;
 *   - every rank computes the unsplit routing: logits, ids and weights bitwise;
 *   - n = 1 (with or without padding) is the unsplit layer bitwise;
 *   - the sum differs from the unsplit output by no more than the roundings the contracts
 *     make, bounded from the magnitudes (u32 = 2^-24, u16 = 2^-8 unit roundoffs):
 *       exact:   each partial p_r = fl32(P_r), the sum s in fp32, the unsplit U = fl32(P):
 *                |s - U| <= u32 (sum_r |P_r| + sum_k |s_k| + |P|) + delta
 *       serving: p_r = bf16(fl32(P_r)), out = bf16(s), U = bf16(fl32(P)): each bf16 rounding
 *                through fp32 costs (u16 + u32)|v|:
 *                |out - U| <= (u16 + u32)(sum_r |P_r| + |P|) + u32 sum_k |s_k| + u16 |s| + delta
 *     where s_k are the running fp32 sums, the exact |P_r|, |P| are bounded by the rounded
 *     magnitudes times 1 + 2^-6, and delta (2^-30 of the magnitudes) covers the different
 *     order of the double accumulations, orders of magnitude below one fp32 rounding.
 * EP with R = 10 and n = 3, 4, 8 forces padding experts (E_pad 12, 12, 16).
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/numeric.h"

#include <stdlib.h>

enum { T = 4, MAXN = 8 };

typedef struct {
    float *out;                 /* [T, D] */
    float *logits;              /* [T, R+S] */
    int32_t *ids;               /* [T, K] */
    float *weights;             /* [T, K+S] */
} run_result;

static void result_alloc(const moe_config *c, run_result *r) {
    r->out = calloc((size_t)T * c->D, sizeof(float));
    r->logits = calloc((size_t)T * (c->R + c->S), sizeof(float));
    r->ids = calloc((size_t)T * c->K, sizeof(int32_t));
    r->weights = calloc((size_t)T * (c->K + c->S), sizeof(float));
    assert_non_null(r->out);
}

static void result_free(run_result *r) {
    free(r->out);
    free(r->logits);
    free(r->ids);
    free(r->weights);
}

/* One rank on its own shard: its partial and its routing. x [T, D] bf16. */
static void run_rank(const moe_layer_data *ld, moe_split sp, const moe_options *opt,
                     const uint16_t *x, run_result *r) {
    moe_shard sh;
    moe_layer *layer;
    moe_error err = {0};
    assert_int_equal(moe_shard_build(&ld->cfg, &ld->w, &sp, &sh, &err), MOE_OK);
    assert_int_equal(moe_layer_create(&moe_backend_ref, &sh, opt, &layer, &err), MOE_OK);
    moe_stages st = {r->logits, r->ids, r->weights, NULL, NULL, NULL, NULL, 0};
    assert_int_equal(moe_layer_forward(layer, T, x, r->out, &st, &err), MOE_OK);
    moe_layer_destroy(layer);
    moe_shard_free(&sh);
}

static void assert_same_routing(const moe_config *c, const run_result *a, const run_result *b) {
    assert_memory_equal(a->logits, b->logits, (size_t)T * (c->R + c->S) * sizeof(float));
    assert_memory_equal(a->ids, b->ids, (size_t)T * c->K * sizeof(int32_t));
    assert_memory_equal(a->weights, b->weights, (size_t)T * (c->K + c->S) * sizeof(float));
}

/* x [T, D] bf16; unsplit: the unsplit layer's output and routing on x. */
static void check_split(const moe_layer_data *ld, moe_split_kind kind, int n, int pad,
                        moe_precision prec, const uint16_t *x, const run_result *unsplit) {
    const moe_config *c = &ld->cfg;
    const size_t TD = (size_t)T * c->D;
    const bool serving = prec == MOE_PRECISION_SERVING;
    moe_options opt = moe_options_default();
    opt.precision = prec;
    run_result part[MAXN], all;
    for (int r = 0; r < n; r++) {
        result_alloc(c, &part[r]);
        run_rank(ld, (moe_split){kind, n, r, pad}, &opt, x, &part[r]);
        assert_same_routing(c, &part[r], unsplit);
        if (serving)
            for (size_t i = 0; i < TD; i++) assert_true(moe_round_bf16(part[r].out[i]) == part[r].out[i]);
    }
    result_alloc(c, &all);
    moe_stages st = {all.logits, all.ids, all.weights, NULL, NULL, NULL, NULL, 0};
    moe_error err = {0};
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, c, &ld->w, kind, n, pad, &opt, T, x,
                                           all.out, &st, &err), MOE_OK);
    assert_same_routing(c, &all, unsplit);
    const long double u32 = 0x1p-24L, u16 = 0x1p-8L, grow = 1.0L + 0x1p-6L, delta = 0x1p-30L;
    int nonzero = 0;
    for (size_t i = 0; i < TD; i++) {
        float s = 0.0f;
        long double sum_p = 0.0L, sum_s = 0.0L;
        for (int r = 0; r < n; r++) {
            s += part[r].out[i]; /* fp32, rank order */
            sum_p += fabsl((long double)part[r].out[i]);
            if (r > 0) sum_s += fabsl((long double)s);
        }
        float expect_all = serving ? moe_round_bf16(s) : s;
        if (memcmp(&expect_all, &all.out[i], sizeof(float)))
            fail_msg("element %zu: all ranks gave %a, the rank-order fp32 sum is %a", i,
                     (double)all.out[i], (double)expect_all);
        long double U = fabsl((long double)unsplit->out[i]);
        long double bound = serving ? grow * ((u16 + u32) * (sum_p + U) + u32 * sum_s + u16 * fabsl((long double)s))
                                    : grow * u32 * (sum_p + sum_s + U);
        bound += delta * (sum_p + U) + 0x1p-133L;
        long double diff = fabsl((long double)all.out[i] - (long double)unsplit->out[i]);
        if (n == 1 && diff != 0.0L) fail_msg("n = 1 differs from the unsplit layer at %zu", i);
        if (!(diff <= bound))
            fail_msg("%s %d pad %d %s: element %zu differs by %Lg, bound %Lg",
                     kind == MOE_SPLIT_TP ? "TP" : "EP", n, pad, serving ? "serving" : "exact", i,
                     diff, bound);
        nonzero += unsplit->out[i] != 0.0f;
    }
    assert_true(nonzero > (int)TD / 2); /* the comparison is not over zeros */
    for (int r = 0; r < n; r++) result_free(&part[r]);
    result_free(&all);
}

static void check_invariance(moe_routed_format fmt, moe_split_kind kind, moe_precision prec) {
    /* I = 768 = 3 * 256 = 8 * 96: I/n is a multiple of 32 for every n; bf16 I = 24 likewise
     * divisible; R = 10 needs EP padding for n = 3, 4, 8 */
    const bool mx = fmt != MOE_ROUTED_BF16; /* block formats: I/n a multiple of 32 (or 16) */
    moe_config c = {mx ? 32 : 16, mx ? 768 : 24, 10, 3, 2, 8.0f, true, true, fmt};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, mx ? 31 : 32, &ld, &err), MOE_OK);
    uint16_t *x = malloc((size_t)T * c.D * sizeof *x);
    moe_random_input(T, c.D, 77, x);
    moe_options opt = moe_options_default();
    opt.precision = prec;
    run_result unsplit, direct;
    result_alloc(&c, &unsplit);
    result_alloc(&c, &direct);
    moe_stages st = {unsplit.logits, unsplit.ids, unsplit.weights, NULL, NULL, NULL, NULL, 0};
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_NONE, 1, 0, &opt, T,
                                           x, unsplit.out, &st, &err), MOE_OK);
    run_rank(&ld, (moe_split){MOE_SPLIT_NONE, 1, 0, 0}, &opt, x, &direct);
    assert_memory_equal(direct.out, unsplit.out, (size_t)T * c.D * sizeof(float));
    assert_same_routing(&c, &direct, &unsplit);
    const int ns[5] = {1, 2, 3, 4, 8};
    const int pads[2] = {0, mx ? 128 : 16};
    for (int i = 0; i < 5; i++)
        for (int p = 0; p < 2; p++) check_split(&ld, kind, ns[i], pads[p], prec, x, &unsplit);
    result_free(&unsplit);
    result_free(&direct);
    free(x);
    moe_layer_data_free(&ld);
}

static void test_tp_mxfp4_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_MXFP4, MOE_SPLIT_TP, MOE_PRECISION_EXACT); }
static void test_tp_mxfp4_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_MXFP4, MOE_SPLIT_TP, MOE_PRECISION_SERVING); }
static void test_ep_mxfp4_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_MXFP4, MOE_SPLIT_EP, MOE_PRECISION_EXACT); }
static void test_ep_mxfp4_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_MXFP4, MOE_SPLIT_EP, MOE_PRECISION_SERVING); }
static void test_tp_nvfp4_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_NVFP4, MOE_SPLIT_TP, MOE_PRECISION_EXACT); }
static void test_tp_nvfp4_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_NVFP4, MOE_SPLIT_TP, MOE_PRECISION_SERVING); }
static void test_ep_nvfp4_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_NVFP4, MOE_SPLIT_EP, MOE_PRECISION_EXACT); }
static void test_ep_nvfp4_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_NVFP4, MOE_SPLIT_EP, MOE_PRECISION_SERVING); }
static void test_tp_bf16_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_BF16, MOE_SPLIT_TP, MOE_PRECISION_EXACT); }
static void test_tp_bf16_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_BF16, MOE_SPLIT_TP, MOE_PRECISION_SERVING); }
static void test_ep_bf16_exact(void **s) { (void)s; check_invariance(MOE_ROUTED_BF16, MOE_SPLIT_EP, MOE_PRECISION_EXACT); }
static void test_ep_bf16_serving(void **s) { (void)s; check_invariance(MOE_ROUTED_BF16, MOE_SPLIT_EP, MOE_PRECISION_SERVING); }

static void test_ep_rank_of_padding_only_contributes_sinks(void **state) {
    (void)state;
    /* R = 10, EP 8: E_pad = 16, ranks 5..7 hold only padding experts; without sinks their
     * partial is exactly zero */
    moe_config c = {32, 64, 10, 3, 0, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 41, &ld, &err), MOE_OK);
    uint16_t x[T * 32];
    moe_random_input(T, 32, 5, x);
    moe_options opt = moe_options_default();
    for (int r = 5; r < 8; r++) {
        run_result res;
        result_alloc(&c, &res);
        run_rank(&ld, (moe_split){MOE_SPLIT_EP, 8, r, 0}, &opt, x, &res);
        for (int i = 0; i < T * 32; i++) assert_true(res.out[i] == 0.0f);
        for (int i = 0; i < T * 3; i++) assert_true(res.ids[i] >= 0 && res.ids[i] < 10);
        result_free(&res);
    }
    moe_layer_data_free(&ld);
}

static void test_all_ranks_arguments(void **state) {
    (void)state;
    moe_config c = {32, 64, 4, 2, 1, 8.0f, false, false, MOE_ROUTED_MXFP4};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 42, &ld, &err), MOE_OK);
    uint16_t x[2 * 32];
    float out[2 * 32];
    moe_random_input(2, 32, 6, x);
    moe_options opt = moe_options_default();
    /* no rank at all must not pass for a zero output */
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_TP, 0, 0, &opt, 2, x,
                                           out, NULL, &err), MOE_ERR_CONFIG);
    assert_msg_has(err, "rank count");
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_TP, 4, 0, &opt, 2, x,
                                           out, NULL, &err), MOE_ERR_CONFIG);
    assert_msg_has(err, "multiple of 32");
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_TP, 2, 0, &opt, -1, x,
                                           out, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_forward_all_ranks(&moe_backend_ref, &c, &ld.w, MOE_SPLIT_TP, 2, 0, &opt, 2, x,
                                           NULL, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_forward_all_ranks(NULL, &c, &ld.w, MOE_SPLIT_TP, 2, 0, &opt, 2, x, out, NULL,
                                           &err), MOE_ERR_ARG);
    /* a backend that cannot run is reported as such */
    const moe_backend *cuda = moe_backend_find("cuda");
    char why[128];
    if (cuda && !cuda->available(why, sizeof why)) {
        assert_int_equal(moe_forward_all_ranks(cuda, &c, &ld.w, MOE_SPLIT_TP, 2, 0, &opt, 2, x, out,
                                               NULL, &err), MOE_ERR_UNAVAILABLE);
        assert_msg_has(err, "cuda");
    }
    moe_layer_data_free(&ld);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_mxfp4_exact),   cmocka_unit_test(test_tp_mxfp4_serving),
        cmocka_unit_test(test_ep_mxfp4_exact),   cmocka_unit_test(test_ep_mxfp4_serving),
        cmocka_unit_test(test_tp_nvfp4_exact),   cmocka_unit_test(test_tp_nvfp4_serving),
        cmocka_unit_test(test_ep_nvfp4_exact),   cmocka_unit_test(test_ep_nvfp4_serving),
        cmocka_unit_test(test_tp_bf16_exact),    cmocka_unit_test(test_tp_bf16_serving),
        cmocka_unit_test(test_ep_bf16_exact),    cmocka_unit_test(test_ep_bf16_serving),
        cmocka_unit_test(test_ep_rank_of_padding_only_contributes_sinks),
        cmocka_unit_test(test_all_ranks_arguments),
    };
    return cmocka_run_group_tests_name("split", tests, NULL, NULL);
}
