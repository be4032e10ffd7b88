/*
 * test_shard.c: configuration and split checks, and the slab each rank holds
 * (contract.md [sharding]).
 *
 * Rules checked:
 *   - invalid configurations and splits are refused with a message naming the field;
 *   - TP n: rank r holds w13 rows [r*2I/n, (r+1)*2I/n) and w2 columns [r*I/n, (r+1)*I/n) of
 *     every routed expert and sink (MXFP4: bytes and scale columns alike);
 *   - EP n: E_pad = R + (-R mod n), rank r owns experts [r*E_pad/n, ...), ids >= R are zero;
 *     sinks TP-sliced over the n ranks;
 *   - pad_inter_to: added channels hold zero weights;
 *   - a NaN scale byte or a scale that overflows a weight is refused, naming tensor and index,
 *     and only the bytes of the rank's slab are checked.
 * Offsets are computed here from the contract's layouts, not through the library.
 */
#include "test_support.h"

#include "common/layer_data.h"
#include "common/numeric.h"

static moe_config mx_config(int D, int I, int R, int K, int S) {
    moe_config c = {D, I, R, K, S, 8.0f, true, true, MOE_ROUTED_MXFP4};
    return c;
}

static void expect_config_error(moe_config c, const char *field) {
    moe_error err = {0};
    assert_int_equal(moe_config_validate(&c, &err), MOE_ERR_CONFIG);
    assert_msg_has(err, field);
}

static void test_config_validation_names_fields(void **state) {
    (void)state;
    moe_error err = {0};
    moe_config ok = mx_config(64, 32, 8, 2, 1);
    assert_int_equal(moe_config_validate(&ok, &err), MOE_OK);
    moe_config c = ok;
    c.K = 9;
    expect_config_error(c, "num_experts_per_tok");
    c.K = 0;
    expect_config_error(c, "num_experts_per_tok");
    c = ok, c.D = 48;
    expect_config_error(c, "hidden_size");
    c = ok, c.I = 40;
    expect_config_error(c, "intermediate_size");
    c = ok, c.D = 0;
    expect_config_error(c, "hidden_size");
    c = ok, c.I = -32;
    expect_config_error(c, "intermediate_size");
    c = ok, c.R = 0;
    expect_config_error(c, "n_routed_experts");
    c = ok, c.S = -1;
    expect_config_error(c, "n_shared_experts");
    c = ok, c.route_scale = NAN;
    expect_config_error(c, "route_scale");
    c = ok, c.route_scale = INFINITY;
    expect_config_error(c, "route_scale");
    c = ok, c.routed_format = (moe_routed_format)7;
    expect_config_error(c, "format");
    /* bf16 experts need no block alignment; K = R and S = 0 are valid */
    c = ok, c.routed_format = MOE_ROUTED_BF16, c.D = 48, c.I = 40, c.K = 8, c.S = 0;
    assert_int_equal(moe_config_validate(&c, &err), MOE_OK);
    assert_int_equal(moe_config_validate(NULL, &err), MOE_ERR_ARG);
}

static void expect_split_error(moe_config c, moe_split s, const char *field) {
    moe_error err = {0};
    assert_int_equal(moe_split_validate(&c, &s, &err), MOE_ERR_CONFIG);
    assert_msg_has(err, field);
    /* the builder refuses the same way and leaves the shard empty */
    moe_layer_data ld;
    if (moe_layer_data_alloc(&c, &ld, &err) != MOE_OK) { /* an invalid config: weights from a valid one */
        moe_config valid = c;
        valid.K = 1;
        assert_int_equal(moe_layer_data_alloc(&valid, &ld, &err), MOE_OK);
    }
    moe_shard sh;
    memset(&sh, 0xAB, sizeof sh);
    assert_int_equal(moe_shard_build(&c, &ld.w, &s, &sh, &err), MOE_ERR_CONFIG);
    assert_msg_has(err, field);
    assert_null(sh.gate_w);
    assert_null(sh.sink_w13);
    moe_layer_data_free(&ld);
}

static void test_split_validation_names_fields(void **state) {
    (void)state;
    moe_config c = mx_config(32, 64, 6, 2, 1);
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 3, 0, 0}, "intermediate_size");
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 4, 0, 0}, "multiple of 32"); /* I/n = 16 */
    expect_split_error(c, (moe_split){MOE_SPLIT_EP, 3, 0, 0}, "intermediate_size"); /* sinks */
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 2, 2, 0}, "rank");
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 2, -1, 0}, "rank");
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 0, 0, 0}, "rank count");
    expect_split_error(c, (moe_split){MOE_SPLIT_NONE, 2, 0, 0}, "1 rank");
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 2, 0, 48}, "pad_inter_to");
    expect_split_error(c, (moe_split){MOE_SPLIT_TP, 2, 0, -32}, "pad_inter_to");
    expect_split_error(c, (moe_split){(moe_split_kind)9, 2, 0, 0}, "kind");
    expect_split_error(mx_config(32, 64, 6, 7, 1), (moe_split){MOE_SPLIT_TP, 2, 0, 0},
                       "num_experts_per_tok");
    /* EP 3 without sinks needs nothing of I; with bf16, TP 3 of I = 48 is fine */
    moe_error err = {0};
    moe_config nosink = mx_config(32, 64, 6, 2, 0);
    moe_split ep3 = {MOE_SPLIT_EP, 3, 2, 0};
    assert_int_equal(moe_split_validate(&nosink, &ep3, &err), MOE_OK);
    moe_config bf = {32, 48, 6, 2, 1, 8.0f, false, false, MOE_ROUTED_BF16};
    moe_split tp3 = {MOE_SPLIT_TP, 3, 1, 0};
    assert_int_equal(moe_split_validate(&bf, &tp3, &err), MOE_OK);
}

static void test_local_expert_count(void **state) {
    (void)state;
    moe_config c = mx_config(32, 96, 10, 2, 0);
    const int n[5] = {1, 2, 3, 4, 8}, expect[5] = {10, 5, 4, 3, 2}; /* ceil(10 / n) */
    for (int i = 0; i < 5; i++) {
        moe_split ep = {MOE_SPLIT_EP, n[i], 0, 0}, tp = {MOE_SPLIT_TP, n[i], 0, 0};
        assert_int_equal(moe_local_expert_count(&c, &ep), expect[i]);
        assert_int_equal(moe_local_expert_count(&c, &tp), 10);
    }
}

/* Fills every byte of the layer with a pattern of its position, and finite scale bytes. */
static void fill_pattern(moe_layer_data *ld) {
    const moe_config *c = &ld->cfg;
    const size_t D = (size_t)c->D, I = (size_t)c->I, R = (size_t)c->R, S = (size_t)c->S;
    for (size_t i = 0; i < R * 2 * I * D / 2; i++) ld->w13_mx[i] = (uint8_t)(i * 37 + 1);
    for (size_t i = 0; i < R * 2 * I * D / 32; i++) ld->w13_scale[i] = (uint8_t)(100 + i % 40);
    for (size_t i = 0; i < R * D * I / 2; i++) ld->w2_mx[i] = (uint8_t)(i * 53 + 5);
    for (size_t i = 0; i < R * D * I / 32; i++) ld->w2_scale[i] = (uint8_t)(90 + i % 50);
    for (size_t i = 0; i < S * 2 * I * D; i++) ld->sink_w13[i] = (uint16_t)(i + 1);
    for (size_t i = 0; i < S * D * I; i++) ld->sink_w2[i] = (uint16_t)(i * 3 + 2);
    for (size_t i = 0; i < (R + S) * D; i++) ld->gate_w[i] = (uint16_t)(i ^ 0x3C00u);
    for (size_t e = 0; e < R; e++) ld->gate_bias[e] = (float)e * 0.25f;
    ld->w.global_scale = 1.75f;
}

static void test_tp_slab_contents_mxfp4(void **state) {
    (void)state;
    enum { D = 64, I = 128, R = 3, S = 2, N = 2 };
    const int IT = I / N; /* 64 channels per rank */
    moe_config c = mx_config(D, I, R, 2, S);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, &ld, &err), MOE_OK);
    fill_pattern(&ld);
    for (int r = 0; r < N; r++) {
        moe_split sp = {MOE_SPLIT_TP, N, r, 0};
        moe_shard sh;
        assert_int_equal(moe_shard_build(&c, &ld.w, &sp, &sh, &err), MOE_OK);
        assert_int_equal(sh.I_local, IT);
        assert_int_equal(sh.I_valid, IT);
        assert_int_equal(sh.sink_I_local, IT);
        assert_int_equal(sh.n_local_experts, R);
        assert_int_equal(sh.expert_first, 0);
        assert_true(sh.global_scale == 1.75f);
        assert_memory_equal(sh.gate_w, ld.gate_w, (R + S) * D * sizeof(uint16_t));
        assert_memory_equal(sh.gate_bias, ld.gate_bias, R * sizeof(float));
        for (int e = 0; e < R; e++) {
            for (int row = 0; row < 2 * IT; row++) {
                int grow = 2 * IT * r + row; /* interleaved rows stay in pairs */
                for (int b = 0; b < D / 2; b++)
                    assert_int_equal(sh.w13_mx[((size_t)e * 2 * IT + row) * (D / 2) + b],
                                     ld.w13_mx[((size_t)e * 2 * I + grow) * (D / 2) + b]);
                for (int b = 0; b < D / 32; b++)
                    assert_int_equal(sh.w13_scale[((size_t)e * 2 * IT + row) * (D / 32) + b],
                                     ld.w13_scale[((size_t)e * 2 * I + grow) * (D / 32) + b]);
            }
            for (int d = 0; d < D; d++) {
                for (int b = 0; b < IT / 2; b++)
                    assert_int_equal(sh.w2_mx[((size_t)e * D + d) * (IT / 2) + b],
                                     ld.w2_mx[((size_t)e * D + d) * (I / 2) + r * IT / 2 + b]);
                for (int b = 0; b < IT / 32; b++)
                    assert_int_equal(sh.w2_scale[((size_t)e * D + d) * (IT / 32) + b],
                                     ld.w2_scale[((size_t)e * D + d) * (I / 32) + r * IT / 32 + b]);
            }
        }
        for (int s = 0; s < S; s++) {
            /* a few elements by hand: the first and last row of the slab, first and last column */
            const int rows[2] = {0, 2 * IT - 1}, cols[2] = {0, D - 1};
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    assert_int_equal(sh.sink_w13[((size_t)s * 2 * IT + rows[i]) * D + cols[j]],
                                     ld.sink_w13[((size_t)s * 2 * I + 2 * IT * r + rows[i]) * D + cols[j]]);
            assert_int_equal(sh.sink_w2[((size_t)s * D + 5) * IT + 7], ld.sink_w2[((size_t)s * D + 5) * I + r * IT + 7]);
            assert_int_equal(sh.sink_w2[((size_t)s * D + D - 1) * IT + IT - 1],
                             ld.sink_w2[((size_t)s * D + D - 1) * I + r * IT + IT - 1]);
        }
        moe_shard_free(&sh);
        assert_null(sh.w13_mx);
    }
    moe_layer_data_free(&ld);
}

static bool all_zero(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

static void test_tp_bf16_padding_channels_zero(void **state) {
    (void)state;
    enum { D = 8, I = 6, R = 2, S = 1, N = 3, P = 4 };
    moe_config c = {D, I, R, 1, S, 1.0f, false, false, MOE_ROUTED_BF16};
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 5, &ld, &err), MOE_OK);
    const int IT = I / N, IL = P; /* 2 real channels, padded to 4 */
    for (int r = 0; r < N; r++) {
        moe_split sp = {MOE_SPLIT_TP, N, r, P};
        moe_shard sh;
        assert_int_equal(moe_shard_build(&c, &ld.w, &sp, &sh, &err), MOE_OK);
        assert_int_equal(sh.I_local, IL);
        assert_int_equal(sh.I_valid, IT);
        assert_int_equal(sh.sink_I_local, IL);
        assert_null(sh.gate_bias);
        assert_true(sh.global_scale == 1.0f);
        for (int e = 0; e < R; e++) {
            const uint16_t *w13 = sh.w13_bf16 + (size_t)e * 2 * IL * D;
            const uint16_t *w2 = sh.w2_bf16 + (size_t)e * D * IL;
            assert_memory_equal(w13, ld.w13_bf16 + ((size_t)e * 2 * I + 2 * IT * r) * D,
                                2 * IT * D * sizeof(uint16_t));
            assert_true(all_zero(w13 + 2 * IT * D, (size_t)2 * (IL - IT) * D * sizeof(uint16_t)));
            for (int d = 0; d < D; d++) {
                for (int j = 0; j < IT; j++)
                    assert_int_equal(w2[d * IL + j], ld.w2_bf16[((size_t)e * D + d) * I + r * IT + j]);
                for (int j = IT; j < IL; j++) assert_int_equal(w2[d * IL + j], 0);
            }
        }
        assert_true(all_zero(sh.sink_w13 + 2 * IT * D, (size_t)2 * (IL - IT) * D * sizeof(uint16_t)));
        for (int d = 0; d < D; d++)
            for (int j = IT; j < IL; j++) assert_int_equal(sh.sink_w2[d * IL + j], 0);
        moe_shard_free(&sh);
    }
    moe_layer_data_free(&ld);
}

static void test_mxfp4_padding_channels_zero(void **state) {
    (void)state;
    enum { D = 32, I = 64, R = 2, S = 1, N = 2, P = 64 };
    moe_config c = mx_config(D, I, R, 1, S);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, &ld, &err), MOE_OK);
    fill_pattern(&ld);
    moe_split sp = {MOE_SPLIT_TP, N, 1, P};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&c, &ld.w, &sp, &sh, &err), MOE_OK);
    const int IT = 32, IL = 64;
    assert_int_equal(sh.I_local, IL);
    for (int e = 0; e < R; e++) {
        /* w13 rows [2*IT, 2*IL): zero codes; their scale bytes must decode finite */
        const uint8_t *codes = sh.w13_mx + (size_t)e * 2 * IL * D / 2;
        const uint8_t *scales = sh.w13_scale + (size_t)e * 2 * IL * D / 32;
        assert_true(all_zero(codes + (size_t)2 * IT * D / 2, (size_t)2 * (IL - IT) * D / 2));
        for (int i = 2 * IT * D / 32; i < 2 * IL * D / 32; i++) assert_true(scales[i] != 0xFF);
        assert_int_equal(codes[0], ld.w13_mx[((size_t)e * 2 * I + 2 * IT) * D / 2]);
        for (int d = 0; d < D; d++) {
            const uint8_t *row = sh.w2_mx + ((size_t)e * D + d) * (IL / 2);
            assert_true(all_zero(row + IT / 2, (IL - IT) / 2));
            assert_int_equal(row[0], ld.w2_mx[((size_t)e * D + d) * (I / 2) + IT / 2]);
            assert_true(sh.w2_scale[((size_t)e * D + d) * (IL / 32) + 1] != 0xFF);
        }
    }
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
}

static void test_ep_padding_experts_zero(void **state) {
    (void)state;
    enum { D = 32, I = 64, R = 5, S = 1, N = 4 };
    moe_config c = mx_config(D, I, R, 2, S);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, &ld, &err), MOE_OK);
    fill_pattern(&ld);
    const size_t w13b = 2 * I * D / 2, w13s = 2 * I * D / 32, w2b = D * I / 2, w2s = D * I / 32;
    /* E_pad = 8: two experts per rank; rank 2 holds 4 and padding 5, rank 3 only padding */
    for (int r = 0; r < N; r++) {
        moe_split sp = {MOE_SPLIT_EP, N, r, 0};
        moe_shard sh;
        assert_int_equal(moe_shard_build(&c, &ld.w, &sp, &sh, &err), MOE_OK);
        assert_int_equal(sh.n_local_experts, 2);
        assert_int_equal(sh.expert_first, 2 * r);
        assert_int_equal(sh.I_local, I);
        assert_int_equal(sh.sink_I_local, I / N);
        for (int e = 0; e < 2; e++) {
            int ge = 2 * r + e;
            if (ge < R) {
                assert_memory_equal(sh.w13_mx + e * w13b, ld.w13_mx + ge * w13b, w13b);
                assert_memory_equal(sh.w13_scale + e * w13s, ld.w13_scale + ge * w13s, w13s);
                assert_memory_equal(sh.w2_mx + e * w2b, ld.w2_mx + ge * w2b, w2b);
                assert_memory_equal(sh.w2_scale + e * w2s, ld.w2_scale + ge * w2s, w2s);
            } else {
                assert_true(all_zero(sh.w13_mx + e * w13b, w13b));
                assert_true(all_zero(sh.w2_mx + e * w2b, w2b));
            }
        }
        /* sinks: TP slab r of 4, 16 channels */
        const int IT = I / N;
        assert_memory_equal(sh.sink_w13, ld.sink_w13 + (size_t)2 * IT * r * D, (size_t)2 * IT * D * 2);
        for (int d = 0; d < D; d++)
            assert_memory_equal(sh.sink_w2 + (size_t)d * IT, ld.sink_w2 + (size_t)d * I + r * IT,
                                (size_t)IT * 2);
        moe_shard_free(&sh);
    }
    moe_layer_data_free(&ld);
}

static void test_nan_scale_rejected_with_index(void **state) {
    (void)state;
    enum { D = 64, I = 64, R = 3, S = 1 };
    moe_config c = mx_config(D, I, R, 1, S);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 3, &ld, &err), MOE_OK);
    /* w13 of expert 1, row 5, block 1 */
    ld.w13_scale[((size_t)1 * 2 * I + 5) * (D / 32) + 1] = 0xFF;
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, "experts.w13_weight_scale");
    assert_msg_has(err, "expert 1, row 5, block 1");
    assert_null(sh.w13_mx);
    assert_null(sh.gate_w);
    /* TP 2: row 5 is in rank 0's slab (rows 0..63); rank 1 never reads it */
    moe_split tp = {MOE_SPLIT_TP, 2, 1, 0};
    assert_int_equal(moe_shard_build(&c, &ld.w, &tp, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    ld.w13_scale[((size_t)1 * 2 * I + 5) * (D / 32) + 1] = 127;
    /* w2 of expert 2, row 3, block 1 (columns 32..63): rank 1 of TP 2 reports the global block */
    ld.w2_scale[((size_t)2 * D + 3) * (I / 32) + 1] = 0xFF;
    assert_int_equal(moe_shard_build(&c, &ld.w, &tp, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, "experts.w2_weight_scale");
    assert_msg_has(err, "expert 2, row 3, block 1");
    tp.rank = 0;
    assert_int_equal(moe_shard_build(&c, &ld.w, &tp, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    /* EP 4 (E_pad = 4, one expert per rank): expert 2 belongs to rank 2 only */
    moe_split ep = {MOE_SPLIT_EP, 4, 1, 0};
    assert_int_equal(moe_shard_build(&c, &ld.w, &ep, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    ep.rank = 2;
    assert_int_equal(moe_shard_build(&c, &ld.w, &ep, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, "expert 2");
    moe_layer_data_free(&ld);
}

static void test_overflowing_scale_rejected(void **state) {
    (void)state;
    enum { D = 32, I = 32, R = 1, S = 0 };
    moe_config c = mx_config(D, I, R, 1, S);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, &ld, &err), MOE_OK);
    memset(ld.w13_scale, 127, 2 * I * D / 32);
    memset(ld.w2_scale, 127, D * I / 32);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    /* w13 row 9: one code 7 (6.0) at element 3 (byte 1, high nibble) */
    uint8_t *row9 = ld.w13_mx + (size_t)9 * (D / 2);
    row9[1] = 0x70;
    ld.w13_scale[9] = 252; /* 6 * 2^125 ~ 2.6e38: finite */
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    ld.w13_scale[9] = 253; /* 6 * 2^126 ~ 5.1e38: overflows */
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, "experts.w13_weight_scale");
    assert_msg_has(err, "row 9, block 0");
    /* the same byte with code 5 (3.0): 3 * 2^126 ~ 2.6e38 is finite */
    row9[1] = 0x50;
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    /* -6 (code 0xF) overflows to -inf just as well; in w2 this time */
    ld.w13_scale[9] = 127;
    ld.w2_mx[(size_t)4 * (I / 2) + 15] = 0xF0;
    ld.w2_scale[4] = 254;
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_ERR_VALUE);
    assert_msg_has(err, "experts.w2_weight_scale");
    assert_msg_has(err, "row 4, block 0");
    moe_layer_data_free(&ld);
}

/* NVFP4: NaN E4M3 bytes (0x7F, 0xFF) and bad scale2 values are named with their index; a TP
 * slab takes w2 bytes [r*I_tp/2, ...) and scale columns [r*I_tp/16, ...), scale2 replicated. */
static void test_nvfp4_checks_and_slab(void **state) {
    (void)state;
    enum { D = 32, I = 64, R = 3, S = 1, IT = I / 2 };
    moe_config c = mx_config(D, I, R, 1, S);
    c.routed_format = MOE_ROUTED_NVFP4;
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_random(&c, 5, &ld, &err), MOE_OK);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0}, tp = {MOE_SPLIT_TP, 2, 1, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&c, &ld.w, &tp, &sh, &err), MOE_OK);
    for (int e = 0; e < R; e++) {
        assert_true(sh.w13_scale2[e] == ld.w13_scale2[e] && sh.w2_scale2[e] == ld.w2_scale2[e]);
        for (int d = 0; d < D; d++) {
            assert_memory_equal(sh.w2_mx + ((size_t)e * D + d) * (IT / 2),
                                ld.w2_mx + ((size_t)e * D + d) * (I / 2) + IT / 2, IT / 2);
            assert_memory_equal(sh.w2_scale + ((size_t)e * D + d) * (IT / 16),
                                ld.w2_scale + ((size_t)e * D + d) * (I / 16) + IT / 16, IT / 16);
        }
        assert_memory_equal(sh.w13_scale + (size_t)e * 2 * IT * (D / 16),
                            ld.w13_scale + ((size_t)e * 2 * I + 2 * IT) * (D / 16), 2 * IT * (D / 16));
    }
    moe_shard_free(&sh);
    const uint8_t nan_bytes[2] = {0x7F, 0xFF};
    for (int i = 0; i < 2; i++) {
        uint8_t *b = ld.w13_scale + ((size_t)2 * 2 * I + 7) * (D / 16) + 1; /* expert 2, row 7 */
        uint8_t keep = *b;
        *b = nan_bytes[i];
        assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_ERR_VALUE);
        assert_msg_has(err, "experts.w13_weight.scale");
        assert_msg_has(err, "expert 2, row 7, block 1");
        *b = keep;
    }
    const float bad[4] = {-1.0f, NAN, INFINITY, 1e38f};
    const char *why[4] = {"negative", "not finite", "not finite", "overflow"};
    for (int i = 0; i < 4; i++) {
        float keep = ld.w2_scale2[1];
        ld.w2_scale2[1] = bad[i];
        assert_int_equal(moe_shard_build(&c, &ld.w, &tp, &sh, &err), MOE_ERR_VALUE);
        assert_msg_has(err, "experts.w2_weight.scale2");
        assert_msg_has(err, "expert 1");
        assert_msg_has(err, why[i]);
        ld.w2_scale2[1] = keep;
    }
    ld.w13_scale2[0] = 0.0f; /* zero is a valid scale2: the expert's w13 is all zero */
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, &sh, &err), MOE_OK);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
}

static void test_shard_null_arguments(void **state) {
    (void)state;
    moe_config c = mx_config(32, 32, 2, 1, 1);
    moe_layer_data ld;
    moe_error err = {0};
    assert_int_equal(moe_layer_data_alloc(&c, &ld, &err), MOE_OK);
    moe_split none = {MOE_SPLIT_NONE, 1, 0, 0};
    moe_shard sh;
    assert_int_equal(moe_shard_build(&c, &ld.w, &none, NULL, &err), MOE_ERR_ARG);
    assert_int_equal(moe_shard_build(&c, NULL, &none, &sh, &err), MOE_ERR_ARG);
    assert_int_equal(moe_shard_build(&c, &ld.w, NULL, &sh, &err), MOE_ERR_ARG);
    moe_weights w = ld.w;
    w.w2_scale = NULL;
    assert_int_equal(moe_shard_build(&c, &w, &none, &sh, &err), MOE_ERR_ARG);
    w = ld.w;
    w.gate_bias = NULL; /* the config has a gate bias */
    assert_int_equal(moe_shard_build(&c, &w, &none, &sh, &err), MOE_ERR_ARG);
    moe_shard_free(NULL);
    moe_layer_data_free(&ld);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation_names_fields),
        cmocka_unit_test(test_split_validation_names_fields),
        cmocka_unit_test(test_local_expert_count),
        cmocka_unit_test(test_tp_slab_contents_mxfp4),
        cmocka_unit_test(test_tp_bf16_padding_channels_zero),
        cmocka_unit_test(test_mxfp4_padding_channels_zero),
        cmocka_unit_test(test_ep_padding_experts_zero),
        cmocka_unit_test(test_nan_scale_rejected_with_index),
        cmocka_unit_test(test_nvfp4_checks_and_slab),
        cmocka_unit_test(test_overflowing_scale_rejected),
        cmocka_unit_test(test_shard_null_arguments),
    };
    return cmocka_run_group_tests_name("shard", tests, NULL, NULL);
}
