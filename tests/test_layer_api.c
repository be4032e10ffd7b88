/*
 * test_layer_api.c: the backend registry and the checks moe_layer_* make for every backend.
 *
 * Rules checked (common/moe.h, common/layer.c):
 *   - every backend is known by name; an unknown name gives NULL; one that cannot run says why;
 *   - moe_layer_create refuses NULL arguments and an unknown precision, and reports an
 *     unavailable backend with its reason;
 *   - moe_layer_forward refuses T < 0 and NULL buffers, accepts T = 0, sets the filled bits;
 *   - moe_first_nonfinite_row finds NaN and inf of either sign, never a finite value;
 *   - the shared layer rules (common/layer_rules.h): a non-finite token's routing and output,
 *     the stages asked for, and the export of routing, slot and sink stages (zeros for a slot
 *     that ran no expert, NaN sinks for a non-finite token), written only where asked;
 *   - status names and options defaults.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/layer_rules.h"
#include "common/numeric.h"

static void test_backend_find(void **state) {
    (void)state;
    const char *names[3] = {"ref", "blas", "cuda"};
    for (int i = 0; i < 3; i++) {
        const moe_backend *b = moe_backend_find(names[i]);
        assert_non_null(b);
        assert_string_equal(b->name, names[i]);
        assert_non_null(b->available);
        assert_non_null(b->description);
    }
    assert_ptr_equal(moe_backend_find("ref"), &moe_backend_ref);
    assert_null(moe_backend_find("nope"));
    assert_null(moe_backend_find(""));
    assert_null(moe_backend_find(NULL));
    assert_null(moe_backend_find("REF")); /* names are exact */
    int n = moe_backend_count();
    assert_true(n >= 3);
    for (int i = 0; i < n; i++) assert_ptr_equal(moe_backend_find(moe_backend_at(i)->name), moe_backend_at(i));
    assert_null(moe_backend_at(-1));
    assert_null(moe_backend_at(n));
}

static void test_available_reasons(void **state) {
    (void)state;
    char why[256];
    strcpy(why, "unchanged");
    assert_true(moe_backend_ref.available(why, sizeof why));
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        why[0] = '\0';
        if (!b->available(why, sizeof why))
            assert_true(strlen(why) > 0); /* a backend that cannot run says why */
        else
            assert_non_null(b->create); /* one that can run can be created */
    }
    /* a reason is cut to the buffer given, never written past it */
    char tiny[5];
    memset(tiny, 'x', sizeof tiny);
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        if (!b->available(tiny, sizeof tiny)) assert_true(memchr(tiny, '\0', sizeof tiny) != NULL);
    }
}

typedef struct {
    moe_layer_data ld;
    moe_shard shard;
} layer_fixture;

static void open_fixture(layer_fixture *f) {
    moe_config c = {32, 32, 4, 2, 1, 8.0f, true, true, MOE_ROUTED_MXFP4};
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 61, &f->ld, &err), MOE_OK);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    assert_int_equal(moe_shard_build(&c, &f->ld.w, &none, &f->shard, &err), MOE_OK);
}

static void close_fixture(layer_fixture *f) {
    moe_shard_free(&f->shard);
    moe_layer_data_free(&f->ld);
}

static void test_layer_create_refuses(void **state) {
    (void)state;
    layer_fixture f;
    open_fixture(&f);
    moe_options opt = moe_options_default();
    moe_layer *layer = (moe_layer *)&f; /* must be reset to NULL on failure */
    moe_error err = {0};
    assert_int_equal(moe_layer_create(NULL, &f.shard, &opt, &layer, &err), MOE_ERR_ARG);
    assert_null(layer);
    assert_int_equal(moe_layer_create(&moe_backend_ref, NULL, &opt, &layer, &err), MOE_ERR_ARG);
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f.shard, NULL, &layer, &err), MOE_ERR_ARG);
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f.shard, &opt, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(err.status, MOE_ERR_ARG);
    opt.precision = (moe_precision)5;
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f.shard, &opt, &layer, &err), MOE_ERR_ARG);
    assert_msg_has(err, "precision");
    opt = moe_options_default();
    char why[256];
    for (int i = 0; i < moe_backend_count(); i++) {
        const moe_backend *b = moe_backend_at(i);
        if (b->available(why, sizeof why)) continue;
        assert_int_equal(moe_layer_create(b, &f.shard, &opt, &layer, &err), MOE_ERR_UNAVAILABLE);
        assert_msg_has(err, b->name);
        assert_msg_has(err, why);
        assert_null(layer);
    }
    /* a NULL error record is allowed */
    assert_int_equal(moe_layer_create(NULL, &f.shard, &opt, &layer, NULL), MOE_ERR_ARG);
    close_fixture(&f);
}

static void test_layer_forward_arguments(void **state) {
    (void)state;
    layer_fixture f;
    open_fixture(&f);
    moe_options opt = moe_options_default();
    moe_layer *layer;
    moe_error err = {0};
    assert_int_equal(moe_layer_create(&moe_backend_ref, &f.shard, &opt, &layer, &err), MOE_OK);
    assert_ptr_equal(moe_layer_shard(layer), &f.shard);
    assert_ptr_equal(moe_layer_backend(layer), &moe_backend_ref);
    assert_null(moe_layer_shard(NULL));
    assert_null(moe_layer_backend(NULL));
    uint16_t x[2 * 32];
    float out[2 * 32];
    moe_random_input(2, 32, 1, x);
    assert_int_equal(moe_layer_forward(layer, -1, x, out, NULL, &err), MOE_ERR_ARG);
    assert_msg_has(err, "T = -1");
    assert_int_equal(moe_layer_forward(layer, 2, NULL, out, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_layer_forward(layer, 2, x, NULL, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_layer_forward(NULL, 2, x, out, NULL, &err), MOE_ERR_ARG);
    /* stages: only what was asked for is reported filled */
    float logits[2 * 5];
    moe_stages st = {logits, NULL, NULL, NULL, NULL, NULL, NULL, 0xFFu};
    assert_int_equal(moe_layer_forward(layer, 2, x, out, &st, &err), MOE_OK);
    assert_int_equal(st.filled, MOE_STAGE_LOGITS);
    int32_t ids[2 * 2];
    float w[2 * 3];
    moe_stages st2 = {NULL, ids, w, NULL, NULL, NULL, NULL, 0};
    assert_int_equal(moe_layer_forward(layer, 2, x, out, &st2, &err), MOE_OK);
    assert_int_equal(st2.filled, MOE_STAGE_TOPK);
    /* route on the reference agrees with its own forward on the same logits */
    int32_t ids_r[2 * 2];
    float w_r[2 * 3];
    assert_int_equal(moe_layer_route(layer, 2, logits, ids_r, w_r, &err), MOE_OK);
    assert_memory_equal(ids_r, ids, sizeof ids);
    assert_memory_equal(w_r, w, sizeof w);
    moe_layer_destroy(layer);
    moe_layer_destroy(NULL);
    close_fixture(&f);
}

static void test_first_nonfinite_row(void **state) {
    (void)state;
    uint16_t x[4 * 8];
    for (int i = 0; i < 32; i++) x[i] = moe_f32_to_bf16((float)i - 16.0f);
    x[5] = 0x7F7F;  /* the largest finite bf16 */
    x[6] = 0xFF7F;
    x[7] = 0x0001;  /* a subnormal */
    assert_int_equal(moe_first_nonfinite_row(4, 8, x), -1);
    assert_int_equal(moe_first_nonfinite_row(0, 8, NULL), -1);
    const uint16_t bad[5] = {0x7F80, 0xFF80, 0x7FC0, 0xFF81, 0x7F81};
    for (int i = 0; i < 5; i++) {
        uint16_t y[4 * 8];
        memcpy(y, x, sizeof y);
        y[3 * 8 + 7] = bad[i];
        assert_int_equal(moe_first_nonfinite_row(4, 8, y), 3);
        y[1 * 8 + 0] = bad[i];
        assert_int_equal(moe_first_nonfinite_row(4, 8, y), 1);
    }
}

static void test_layer_rules(void **state) {
    (void)state;
    /* D = 4, R = 3, K = 2, S = 2, I_local = 3, sink_I_local = 2; T = 2 */
    moe_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.cfg.D = 4, sh.cfg.R = 3, sh.cfg.K = 2, sh.cfg.S = 2, sh.I_local = 3, sh.sink_I_local = 2;
    const moe_config *c = &sh.cfg;
    uint16_t row[4] = {0x3F80, 0x0001, 0x7F7F, 0xFF7F};
    assert_true(moe_row_finite(row, 4));
    row[2] = 0xFFC0;
    assert_false(moe_row_finite(row, 4));

    float logits[5], weights[4], out[4];
    int32_t ids[2] = {7, 7};
    moe_nonfinite_route(c, logits, ids, weights);
    moe_nonfinite_output(c, out);
    for (int i = 0; i < 5; i++) assert_true(isnan(logits[i]));
    for (int i = 0; i < 4; i++) assert_true(isnan(weights[i]) && isnan(out[i]));
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);

    float st_logits[2 * 5], st_w[2 * 4], rh[2 * 2 * 3], ry[2 * 2 * 4], sh_h[2 * 2 * 2], sy[2 * 4];
    int32_t st_ids[2 * 2];
    moe_stages st = {st_logits, st_ids, st_w, rh, ry, sh_h, sy, 0};
    assert_int_equal(moe_stages_wanted(NULL), 0);
    assert_int_equal(moe_stages_wanted(&st), MOE_STAGE_LOGITS | MOE_STAGE_TOPK | MOE_STAGE_ROUTED_H |
                                                 MOE_STAGE_ROUTED_Y | MOE_STAGE_SINK_H | MOE_STAGE_SINK_Y);
    moe_stages half = {NULL, st_ids, NULL, NULL, ry, NULL, NULL, 0}; /* ids without weights */
    assert_int_equal(moe_stages_wanted(&half), MOE_STAGE_ROUTED_Y);

    for (size_t i = 0; i < sizeof rh / sizeof rh[0]; i++) rh[i] = -1.0f;
    for (size_t i = 0; i < sizeof ry / sizeof ry[0]; i++) ry[i] = -1.0f;
    const float h[3] = {1, 2, 3}, y[4] = {4, 5, 6, 7}, hs[4] = {8, 9, 10, 11};
    moe_stages_put_route(&st, c, 1, 1, logits, ids, weights);
    assert_true(isnan(st_logits[5]) && isnan(st_w[4 + 3]) && st_ids[3] == 1);
    moe_stages_put_slot(&st, &sh, 1, 0, h, y);
    moe_stages_put_slot(&st, &sh, 1, 1, NULL, NULL);
    assert_memory_equal(rh + 2 * 3, h, sizeof h);
    assert_memory_equal(ry + 2 * 4, y, sizeof y);
    for (int i = 0; i < 3; i++) assert_true(rh[3 * 3 + i] == 0.0f && rh[i] == -1.0f);
    for (int i = 0; i < 4; i++) assert_true(ry[3 * 4 + i] == 0.0f && ry[i] == -1.0f);
    moe_stages_put_sinks(&st, &sh, 0, hs, y);
    moe_stages_put_sinks(&st, &sh, 1, NULL, NULL);
    assert_memory_equal(sh_h, hs, sizeof hs);
    assert_memory_equal(sy, y, sizeof y);
    for (int i = 0; i < 4; i++) assert_true(isnan(sh_h[4 + i]) && isnan(sy[4 + i]));
    /* a stage not asked for is never written; NULL stages are no call at all */
    moe_stages_put_slot(&half, &sh, 0, 0, h, y);
    moe_stages_put_sinks(&half, &sh, 0, NULL, NULL);
    moe_stages_put_route(NULL, c, 0, 1, logits, ids, weights);
    assert_memory_equal(ry, y, sizeof y);
}

static void test_status_names_and_defaults(void **state) {
    (void)state;
    assert_string_equal(moe_status_name(MOE_OK), "ok");
    for (int s = MOE_ERR_ARG; s <= MOE_ERR_INTERNAL; s++) {
        const char *name = moe_status_name((moe_status)s);
        assert_non_null(name);
        assert_true(strcmp(name, "unknown status") != 0);
        for (int o = MOE_OK; o < s; o++) assert_true(strcmp(name, moe_status_name((moe_status)o)) != 0);
    }
    assert_string_equal(moe_status_name((moe_status)999), "unknown status");
    moe_error err;
    assert_int_equal(moe_fail(&err, MOE_ERR_SHAPE, "tensor %s: %d", "x", 7), MOE_ERR_SHAPE);
    assert_int_equal(err.status, MOE_ERR_SHAPE);
    assert_string_equal(err.msg, "tensor x: 7");
    assert_int_equal(moe_fail(NULL, MOE_ERR_IO, "ignored"), MOE_ERR_IO);
    moe_error_clear(&err);
    assert_int_equal(err.status, MOE_OK);
    assert_string_equal(err.msg, "");
    moe_options o = moe_options_default();
    assert_int_equal(o.precision, MOE_PRECISION_SERVING);
    assert_false(o.strict_nonfinite);
    assert_int_equal(o.n_threads, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_find),
        cmocka_unit_test(test_available_reasons),
        cmocka_unit_test(test_layer_create_refuses),
        cmocka_unit_test(test_layer_forward_arguments),
        cmocka_unit_test(test_first_nonfinite_row),
        cmocka_unit_test(test_layer_rules),
        cmocka_unit_test(test_status_names_and_defaults),
    };
    return cmocka_run_group_tests_name("layer_api", tests, NULL, NULL);
}
