/*
 * test_cuda_layout.c: the wgmma kernels' packed E2M1 layout and their activation copies
 * (opt/cuda/cuda_wgmma_layout.h), checked on any machine: the GPU decode's rule, applied here
 * to words packed by the layout's bit places, must give every code of every register back as
 * the bf16 pattern whose value is the E2M1 value times 2^-126 (the scale's product then adds
 * the 2^126 back); every activation piece of a stage must be copied once, from its place.
 *
 * Rules:
 *   - the expected patterns come from common/numeric.c's E2M1 table and the bf16 format, not
 *     from the layout;
 *   - every pair of codes is tried in every register, with the other registers full of other
 *     codes, so a layout whose registers overlap or leak fails;
 *   - a piece's chunk, row and column come from its index alone, not from the copy mapping.
 */
#include "test_support.h"

#include "../common/numeric.h"
#include "../opt/cuda/cuda_wgmma_layout.h"

#include <stdlib.h>

/* The word holding codes[j][h] at the layout's places. */
static uint32_t pack(const uint8_t codes[4][2]) {
    uint32_t w = 0;
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < 4; b++)
                w |= (uint32_t)((codes[j][h] >> b) & 1u) << moe_wg_code_bit(j, h, b);
    return w;
}

/* Register j as decode_word makes it, before the scale's product (a sign merged after the
 * product is the same bits here). */
static uint32_t decode_register(uint32_t w, int j) {
    const int own_sign = moe_wg_sign_rot(j) == moe_wg_mag_rot(j);
    const uint32_t kept = own_sign ? MOE_WG_MAG_BITS | MOE_WG_SIGN_BITS : MOE_WG_MAG_BITS;
    uint32_t r = moe_wg_bring(w, moe_wg_mag_rot(j), kept) & kept;
    if (!own_sign) r ^= moe_wg_bring(w, moe_wg_sign_rot(j), MOE_WG_SIGN_BITS) & MOE_WG_SIGN_BITS;
    return r;
}

static float bf16_bits_value(uint32_t bits16) {
    uint32_t u = bits16 << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_code_bits_fill_the_word_once(void **state) {
    (void)state;
    uint32_t seen = 0;
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < 4; b++) {
                const int bit = moe_wg_code_bit(j, h, b);
                assert_true(bit >= 0 && bit < 32);
                assert_false(seen & (1u << bit)); /* no two codes share a bit */
                seen |= 1u << bit;
            }
    assert_true(seen == 0xFFFFFFFFu);
}

static void test_decode_gives_every_code_back(void **state) {
    (void)state;
    for (int j = 0; j < 4; j++)
        for (int c0 = 0; c0 < 16; c0++)
            for (int c1 = 0; c1 < 16; c1++) {
                uint8_t codes[4][2];
                for (int o = 0; o < 4; o++) /* the others: codes that differ from this pair */
                    codes[o][0] = (uint8_t)((c0 + 5 * o + 3) & 15), codes[o][1] = (uint8_t)((c1 + 7 * o + 9) & 15);
                codes[j][0] = (uint8_t)c0, codes[j][1] = (uint8_t)c1;
                const uint32_t w = pack(codes);
                for (int o = 0; o < 4; o++) {
                    const uint32_t r = decode_register(w, o);
                    for (int h = 0; h < 2; h++) {
                        const uint8_t c = codes[o][h];
                        const float want = ldexpf(moe_e2m1_to_f32(c), -126);
                        const float got = bf16_bits_value((r >> (16 * h)) & 0xFFFFu);
                        if (got != want || signbit(got) != signbit(want))
                            fail_msg("register %d half %d code 0x%X: %g, want %g (word 0x%08X)", o, h,
                                     c, (double)got, (double)want, w);
                    }
                }
            }
}

/* Piece idx of a stage of bn-row chunks: its chunk, row and 16-byte column. */
static void act_piece(int bn, int idx, int *chunk, int *row, int *col) {
    *chunk = idx / (8 * bn), *row = idx / 8 % bn, *col = idx % 8;
}

/* Every piece of a stage is copied by exactly one (thread, copy), and copy i of a thread is the
 * piece of its place moe_wg_act_place(i) moved on by moe_wg_act_chunk(i) chunks: the same row
 * and column, the chunk further on. The kernels' three configurations first, then shapes that
 * take the other branches. */
static void test_act_copies_cover_each_piece_once(void **state) {
    (void)state;
    static const int configs[][3] = {/* bn, threads, chunks a stage */
                                     {16, 256, 4}, {32, 256, 4}, {128, 512, 2}, {16, 256, 1},
                                     {128, 256, 3}, {64, 512, 2},  {48, 256, 3}, {24, 128, 5}};
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        const int bn = configs[k][0], threads = configs[k][1], cps = configs[k][2];
        const int pieces = cps * 8 * bn, copies = (pieces + threads - 1) / threads;
        const int places = moe_wg_act_places(bn, threads, cps);
        int *seen = calloc((size_t)pieces, sizeof *seen);
        assert_non_null(seen);
        for (int tid = 0; tid < threads; tid++)
            for (int i = 0; i < copies; i++) {
                const int idx = tid + i * threads;
                if (idx >= pieces) continue;
                const int q = moe_wg_act_place(bn, threads, cps, i);
                if (q < 0 || q >= places)
                    fail_msg("bn %d threads %d cps %d: copy %d in place %d of %d", bn, threads, cps, i, q, places);
                int j, r, c, jq, rq, cq;
                act_piece(bn, idx, &j, &r, &c);
                act_piece(bn, tid + q * threads, &jq, &rq, &cq);
                if (r != rq || c != cq || j != jq + moe_wg_act_chunk(bn, threads, cps, i))
                    fail_msg("bn %d threads %d cps %d: thread %d copy %d is piece (%d, %d, %d), its "
                             "place gives (%d + %d, %d, %d)", bn, threads, cps, tid, i, j, r, c, jq,
                             moe_wg_act_chunk(bn, threads, cps, i), rq, cq);
                seen[idx]++;
            }
        for (int idx = 0; idx < pieces; idx++)
            if (seen[idx] != 1) fail_msg("bn %d threads %d cps %d: piece %d copied %d times", bn, threads, cps, idx, seen[idx]);
        free(seen);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_code_bits_fill_the_word_once),
        cmocka_unit_test(test_decode_gives_every_code_back),
        cmocka_unit_test(test_act_copies_cover_each_piece_once),
    };
    return cmocka_run_group_tests_name("cuda_layout", tests, NULL, NULL);
}
