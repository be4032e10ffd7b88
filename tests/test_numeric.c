/*
 * test_numeric.c: the number formats and the generator of common/numeric.h.
 *
 * Rules checked (contract.md [formats], numeric.h):
 *   - E2M1: every one of the 16 codes, derived from the format (1 sign, 2 exponent, 1 mantissa
 *     bit, bias 1, exponent 0 subnormal); 0x8 is -0;
 *   - E8M0: every byte b in 0..254 is exactly 2^(b-127) (checked against ldexp); 0x00 is the
 *     fp32 subnormal 2^-127, not zero; 0xFF is NaN;
 *   - MXFP4 rows: element 2k in the low nibble, 2k+1 in the high one; one scale per 32;
 *   - bf16: round to nearest, ties to even, overflow to inf, NaN stays NaN, -0 kept;
 *   - the counter generator: deterministic, a pure function of (seed, stream, counter).
 */
#include "test_support.h"

#include "common/numeric.h"

#include <float.h>
#include <limits.h>
#include <stdlib.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* E2M1 from its bit fields: exponent e (2 bits, bias 1), mantissa m (1 bit). */
static double e2m1_from_fields(unsigned code) {
    unsigned e = (code >> 1) & 3u, m = code & 1u;
    double mag = e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, (int)e - 1);
    return (code & 8u) ? -mag : mag;
}

static void test_e2m1_every_code(void **state) {
    (void)state;
    const double listed[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6}; /* contract.md [formats.mxfp4] */
    for (unsigned c = 0; c < 16; c++) {
        float v = moe_e2m1_to_f32((uint8_t)c);
        assert_true((double)v == e2m1_from_fields(c));
        assert_true((double)fabsf(v) == listed[c & 7u]);
        assert_int_equal(signbit(v) != 0, (c & 8u) != 0); /* the sign bit, -0 included */
        /* only the low 4 bits are read */
        assert_true(f32_bits(moe_e2m1_to_f32((uint8_t)(c | 0xA0u))) == f32_bits(v));
    }
    assert_true(f32_bits(moe_e2m1_to_f32(0x8)) == 0x80000000u); /* exactly -0 */
    assert_true(f32_bits(moe_e2m1_to_f32(0x0)) == 0x00000000u);
}

/* E4M3 (float8_e4m3fn) from its fields: bias 7, exponent 0 subnormal (m/8) 2^-6, 0x7F/0xFF NaN. */
static void test_e4m3_every_byte(void **state) {
    (void)state;
    for (int b = 0; b < 256; b++) {
        float v = moe_e4m3_to_f32((uint8_t)b);
        int e = (b >> 3) & 15, m = b & 7;
        if ((b & 0x7F) == 0x7F) {
            assert_true(isnan(v));
            continue;
        }
        double want = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
        if (b & 0x80) want = -want;
        if ((double)v != want || (signbit(v) != 0) != ((b & 0x80) != 0))
            fail_msg("E4M3 byte 0x%02X decodes to %a, expected %a", b, (double)v, want);
    }
    assert_true(moe_e4m3_to_f32(0x7E) == 448.0f);
    assert_true(moe_e4m3_to_f32(0x01) == 0x1p-9f);
    /* an NVFP4 row: one scale per 16 elements, low nibble first, scale2 not applied */
    uint8_t packed[16], scales[2] = {0x38, 0x01}; /* 1.0, 2^-9 */
    for (int i = 0; i < 16; i++) packed[i] = (uint8_t)(0x21 + (i & 1)); /* codes 1/2, then 2 */
    float out[32];
    moe_block_decode_row(&moe_format_nvfp4, packed, scales, 32, out);
    assert_true(out[0] == 0.5f && out[1] == 1.0f && out[2] == 1.0f && out[15] == 1.0f);
    assert_true(out[16] == 0.5f * 0x1p-9f && out[17] == 0x1p-9f && out[31] == 0x1p-9f);
}

static void test_e8m0_every_byte(void **state) {
    (void)state;
    for (int b = 0; b <= 254; b++) {
        float v = moe_e8m0_to_f32((uint8_t)b);
        if ((double)v != ldexp(1.0, b - 127)) fail_msg("E8M0 byte %d decodes to %a", b, (double)v);
    }
    float z = moe_e8m0_to_f32(0);
    assert_int_equal(fpclassify(z), FP_SUBNORMAL);
    assert_true(z > 0.0f);
    assert_true(isnan(moe_e8m0_to_f32(0xFF)));
    assert_true(moe_e8m0_to_f32(254) == ldexpf(1.0f, 127));
    assert_true(moe_e8m0_to_f32(1) == FLT_MIN); /* 2^-126, the smallest normal */
}

static void test_e8m0_max_finite_byte(void **state) {
    (void)state;
    /* m * 2^(b-127) <= FLT_MAX = (2 - 2^-23) * 2^127. By hand: 6 = 1.5*4 needs b-127 <= 125,
     * 4 = 2^2 needs <= 125, 3 = 1.5*2 and 2 need <= 126, 1.5 and below fit 2^127. */
    const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    const int expect[8] = {254, 254, 254, 254, 253, 253, 252, 252};
    for (int i = 0; i < 8; i++) {
        int b = moe_e8m0_max_finite_byte(mags[i]);
        assert_int_equal(b, expect[i]);
        assert_true((double)mags[i] * ldexp(1.0, b - 127) <= (double)FLT_MAX);
        if (b < 254) assert_true((double)mags[i] * ldexp(1.0, b - 126) > (double)FLT_MAX);
    }
}

static void test_mxfp4_row_nibble_order_and_blocks(void **state) {
    (void)state;
    enum { N = 96 };
    uint8_t packed[N / 2], scales[N / 32] = {127, 130, 120};
    /* element c carries code (c * 7 + 3) mod 16: neighbours differ, all 16 codes appear */
    for (int k = 0; k < N / 2; k++) {
        unsigned lo = (unsigned)((2 * k) * 7 + 3) % 16u, hi = (unsigned)((2 * k + 1) * 7 + 3) % 16u;
        packed[k] = (uint8_t)(lo | hi << 4);
    }
    float out[N];
    moe_mxfp4_decode_row(packed, scales, N, out);
    for (int c = 0; c < N; c++) {
        double expect = e2m1_from_fields((unsigned)(c * 7 + 3) % 16u) * ldexp(1.0, scales[c / 32] - 127);
        if ((double)out[c] != expect) fail_msg("element %d: %g, expected %g", c, (double)out[c], expect);
    }
    /* one byte by hand: 0x71 is element 0 = code 1 (0.5), element 1 = code 7 (6) */
    uint8_t one[16] = {0x71}, s1[1] = {128};
    float o[32];
    moe_mxfp4_decode_row(one, s1, 32, o);
    assert_true(o[0] == 1.0f && o[1] == 12.0f && o[2] == 0.0f);
    /* the scale boundary: element 31 uses block 0, element 32 block 1 */
    uint8_t same[32], sc[2] = {127, 129};
    memset(same, 0x22, sizeof same); /* every element code 2 = 1.0 */
    float o2[64];
    moe_mxfp4_decode_row(same, sc, 64, o2);
    assert_true(o2[31] == 1.0f && o2[32] == 4.0f && o2[63] == 4.0f && o2[0] == 1.0f);
    assert_int_equal(moe_format_mxfp4.block, 32);
    assert_true(moe_format_mxfp4.element(0xF) == -6.0f);
    assert_true(isnan(moe_format_mxfp4.scale(0xFF)));
}

static void test_bf16_roundtrip_every_pattern(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = moe_bf16_to_f32((uint16_t)h);
        assert_true(f32_bits(f) == h << 16); /* the upper half of an fp32 */
        uint16_t back = moe_f32_to_bf16(f);
        if ((h & 0x7F80u) == 0x7F80u && (h & 0x7Fu)) {
            assert_true(isnan(moe_bf16_to_f32(back)));
            assert_int_equal(back & 0x8000u, h & 0x8000u); /* sign kept */
        } else if (back != h) {
            fail_msg("bf16 0x%04x does not survive the round trip (0x%04x)", (unsigned)h, back);
        }
    }
}

static void test_bf16_ties_to_even(void **state) {
    (void)state;
    /* bf16 spacing at 1 is 2^-7; 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd) */
    assert_true(moe_round_bf16(1.0f + 0x1p-8f) == 1.0f);
    /* 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up */
    assert_true(moe_round_bf16(1.0f + 0x3p-8f) == 1.0f + 0x1p-6f);
    assert_true(moe_round_bf16(-1.0f - 0x1p-8f) == -1.0f);
    assert_true(moe_round_bf16(-1.0f - 0x3p-8f) == -1.0f - 0x1p-6f);
    /* the same at another binade */
    assert_true(moe_round_bf16(256.0f + 1.0f) == 256.0f);
    assert_true(moe_round_bf16(256.0f + 3.0f) == 260.0f);
    /* every fp32 midpoint between two bf16 neighbours in [1, 2), against the definition */
    for (uint32_t h = 0x3F80u; h < 0x4000u; h++) {
        float mid = bits_f32((h << 16) | 0x8000u);
        long double expect = test_round_bf16((long double)mid);
        assert_true((long double)moe_round_bf16(mid) == expect);
        assert_int_equal(moe_f32_to_bf16(mid) & 1u, 0); /* a tie always lands on an even pattern */
    }
}

static void test_bf16_just_above_and_below_half(void **state) {
    (void)state;
    assert_true(moe_round_bf16(1.0f + 0x1p-8f + 0x1p-23f) == 1.0f + 0x1p-7f);
    assert_true(moe_round_bf16(1.0f + 0x1p-8f - 0x1p-23f) == 1.0f);
    assert_true(moe_round_bf16(-(1.0f + 0x1p-8f + 0x1p-23f)) == -(1.0f + 0x1p-7f));
    /* random fp32 values against the definition */
    for (uint32_t i = 0; i < 200000; i++) {
        uint32_t u = (i * 2654435761u) & 0x7F7FFFFFu; /* finite, below the top binade's edge */
        if ((u >> 23) >= 0xFEu) continue;
        float f = bits_f32(u | (i & 1u) << 31);
        if ((long double)moe_round_bf16(f) != test_round_bf16((long double)f))
            fail_msg("bf16 rounding of %a", (double)f);
    }
}

static void test_bf16_subnormals(void **state) {
    (void)state;
    /* bf16 subnormals are multiples of 2^-133 */
    assert_true(moe_round_bf16(0x1p-133f) == 0x1p-133f);
    assert_true(moe_round_bf16(0x1p-149f) == 0.0f);             /* far below half a step */
    assert_true(moe_round_bf16(0x1p-134f) == 0.0f);             /* tie with 0: even is 0 */
    assert_true(moe_round_bf16(0x3p-134f) == 0x1p-132f);        /* tie, 2^-133 odd: up */
    assert_true(moe_round_bf16(0x1p-134f + 0x1p-149f) == 0x1p-133f);
    assert_true(moe_round_bf16(0x1p-126f) == 0x1p-126f);        /* smallest normal */
    assert_true(moe_round_bf16(0x7Fp-133f) == 0x7Fp-133f);      /* largest subnormal */
    assert_true(moe_round_bf16(0x7F8p-137f) == 0x1p-126f);      /* rounds up into the normals */
    float negtiny = moe_round_bf16(-0x1p-149f);
    assert_true(negtiny == 0.0f && signbit(negtiny));           /* rounds to -0 */
}

static void test_bf16_overflow_inf_nan_zero(void **state) {
    (void)state;
    assert_int_equal(moe_f32_to_bf16(FLT_MAX), 0x7F80);          /* past the largest bf16: inf */
    assert_int_equal(moe_f32_to_bf16(-FLT_MAX), 0xFF80);
    assert_int_equal(moe_f32_to_bf16(bits_f32(0x7F7F7FFFu)), 0x7F7F); /* just below the midpoint */
    assert_int_equal(moe_f32_to_bf16(bits_f32(0x7F7F8000u)), 0x7F80); /* the midpoint: to even = inf */
    assert_int_equal(moe_f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(moe_f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(moe_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(moe_f32_to_bf16(0.0f), 0x0000);
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7F80FFFFu,
                             0x7FBFFFFFu, 0x7FFFFFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = moe_f32_to_bf16(bits_f32(nans[i]));
        assert_true(isnan(moe_bf16_to_f32(h)));               /* signalling NaNs stay NaN */
        assert_int_equal(h & 0x0040u, 0x0040u);               /* made quiet */
        assert_int_equal(h >> 15, nans[i] >> 31);             /* sign kept */
    }
}

static void test_rng_deterministic(void **state) {
    (void)state;
    moe_rng a = moe_rng_make(42, 7), b = moe_rng_make(42, 7);
    for (int i = 0; i < 1000; i++) assert_true(moe_rng_next(&a) == moe_rng_next(&b));
    moe_rng c = moe_rng_make(42, 7), d = moe_rng_make(42, 7);
    for (int i = 0; i < 100; i++) assert_true(moe_rng_normal(&c) == moe_rng_normal(&d));
}

static void test_rng_counter_independence(void **state) {
    (void)state;
    moe_rng r = moe_rng_make(9, 3);
    uint64_t seq[64];
    for (int i = 0; i < 64; i++) seq[i] = moe_rng_next(&r);
    /* any element recomputed on its own, in any order */
    for (int i = 63; i >= 0; i--) assert_true(moe_rng_hash(9, 3, (uint64_t)i) == seq[i]);
    /* other streams and seeds give other numbers */
    int same_stream = 0, same_seed = 0, repeats = 0;
    for (int i = 0; i < 64; i++) {
        same_stream += moe_rng_hash(9, 4, (uint64_t)i) == seq[i];
        same_seed += moe_rng_hash(10, 3, (uint64_t)i) == seq[i];
        for (int j = 0; j < i; j++) repeats += seq[j] == seq[i];
    }
    assert_int_equal(same_stream, 0);
    assert_int_equal(same_seed, 0);
    assert_int_equal(repeats, 0);
    assert_true(moe_rng_hash(0, 0, 0) != moe_rng_hash(0, 0, 1));
}

static void test_rng_uniform_range(void **state) {
    (void)state;
    moe_rng r = moe_rng_make(1, 1);
    double sum = 0.0, lo = 1.0, hi = 0.0;
    int bins[10] = {0};
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        double u = moe_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        lo = fmin(lo, u);
        hi = fmax(hi, u);
        bins[(int)(u * 10)]++;
    }
    /* mean of n uniforms: sd = sqrt(1/12/n) ~ 0.0009; 0.005 is more than 5 sd */
    assert_true(fabs(sum / n - 0.5) < 0.005);
    assert_true(lo < 0.001 && hi > 0.999);
    for (int b = 0; b < 10; b++) assert_true(abs(bins[b] - n / 10) < 600); /* sd ~ 95 */
}

static void test_rng_int_bounds(void **state) {
    (void)state;
    moe_rng r = moe_rng_make(5, 0);
    int seen[9] = {0};
    for (int i = 0; i < 5000; i++) {
        int v = moe_rng_int(&r, -3, 5);
        assert_true(v >= -3 && v <= 5);
        seen[v + 3]++;
    }
    for (int i = 0; i < 9; i++) assert_true(seen[i] > 0);
    for (int i = 0; i < 100; i++) assert_int_equal(moe_rng_int(&r, 17, 17), 17);
    /* the widest span: every result must be in range, no overflow on the way */
    int any_negative = 0, any_positive = 0;
    for (int i = 0; i < 1000; i++) {
        int v = moe_rng_int(&r, INT_MIN, INT_MAX);
        any_negative |= v < 0;
        any_positive |= v > 0;
    }
    assert_true(any_negative && any_positive);
    for (int i = 0; i < 1000; i++) {
        int v = moe_rng_int(&r, INT_MAX - 2, INT_MAX);
        assert_true(v >= INT_MAX - 2);
    }
}

static void test_rng_normal_moments(void **state) {
    (void)state;
    moe_rng r = moe_rng_make(3, 2);
    double s = 0, s2 = 0;
    const int n = 50000;
    for (int i = 0; i < n; i++) {
        double v = moe_rng_normal(&r);
        assert_true(isfinite(v));
        s += v;
        s2 += v * v;
    }
    assert_true(fabs(s / n) < 0.03);     /* sd of the mean ~ 0.0045 */
    assert_true(fabs(s2 / n - 1.0) < 0.05); /* sd of the variance ~ 0.0063 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e2m1_every_code),
        cmocka_unit_test(test_e8m0_every_byte),
        cmocka_unit_test(test_e4m3_every_byte),
        cmocka_unit_test(test_e8m0_max_finite_byte),
        cmocka_unit_test(test_mxfp4_row_nibble_order_and_blocks),
        cmocka_unit_test(test_bf16_roundtrip_every_pattern),
        cmocka_unit_test(test_bf16_ties_to_even),
        cmocka_unit_test(test_bf16_just_above_and_below_half),
        cmocka_unit_test(test_bf16_subnormals),
        cmocka_unit_test(test_bf16_overflow_inf_nan_zero),
        cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_rng_counter_independence),
        cmocka_unit_test(test_rng_uniform_range),
        cmocka_unit_test(test_rng_int_bounds),
        cmocka_unit_test(test_rng_normal_moments),
    };
    return cmocka_run_group_tests_name("numeric", tests, NULL, NULL);
}
