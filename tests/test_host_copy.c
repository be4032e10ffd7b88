/*
 * test_host_copy.c: the split host copy (common/host_copy.h) that stages the CUDA path's
 * transfers.
 *
 * Rules checked: every byte of the destination range equals the source, and not one byte
 * around it changes, for sizes below, at and past the split threshold (odd sizes, a size that
 * leaves a short last piece, fewer bytes than threads * 4096), at 1, 2, 3 and 8 threads, with
 * the source and destination at odd offsets; a copy inside a parallel region stays correct;
 * the thread count a large copy uses is at least 1 and at most MOE_COPY_MAX_THREADS. The
 * widening gives every one of the 65,536 bf16 patterns (NaNs, -0, subnormals) its exact fp32
 * value, at sizes below and past the split and at 1, 2 and 8 threads, with the destination
 * aligned and not, and changes nothing around it.
 */
#include "test_support.h"

#include "common/host_copy.h"

#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>

#define GUARD 64 /* bytes checked on each side of the destination */

/* Byte i of pattern `seed`: no period a piece boundary could hide behind. */
static uint8_t pattern(size_t i, unsigned seed) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + seed;
    z ^= z >> 29;
    return (uint8_t)(z * 0xBF58476D1CE4E5B9ull >> 56);
}

/* Copies `bytes` from src + src_off to dst + dst_off over `threads` and checks the copy and
 * the guard bytes around it. */
static void check_copy(size_t bytes, int threads, size_t src_off, size_t dst_off) {
    uint8_t *src = malloc(bytes + src_off + 1), *dst = malloc(bytes + dst_off + 2 * GUARD);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < bytes + src_off; i++) src[i] = pattern(i, 1);
    memset(dst, 0xA5, bytes + dst_off + 2 * GUARD);
    moe_copy_parallel(dst + GUARD + dst_off, src + src_off, bytes, threads);
    for (size_t i = 0; i < GUARD + dst_off; i++)
        if (dst[i] != 0xA5) fail_msg("byte %zu before the copy changed (%zu bytes, %d threads)", i, bytes, threads);
    const uint8_t *got = dst + GUARD + dst_off;
    for (size_t i = 0; i < bytes; i++)
        if (got[i] != src[src_off + i])
            fail_msg("byte %zu of %zu differs at %d threads (offsets %zu, %zu)", i, bytes, threads,
                     src_off, dst_off);
    for (size_t i = 0; i < GUARD; i++)
        if (got[bytes + i] != 0xA5) fail_msg("byte %zu after the copy changed (%zu bytes, %d threads)", i, bytes, threads);
    free(src);
    free(dst);
}

static void test_copies_equal_memcpy_at_every_size_and_team(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 63, 4097, MOE_COPY_SPLIT_MIN - 1, MOE_COPY_SPLIT_MIN,
                            MOE_COPY_SPLIT_MIN + 1, 3 * MOE_COPY_SPLIT_MIN + 12345,
                            8 * MOE_COPY_SPLIT_MIN + 4096 * 3 + 7};
    const int teams[] = {1, 2, 3, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t t = 0; t < sizeof teams / sizeof teams[0]; t++) {
            check_copy(sizes[s], teams[t], 0, 0);
            check_copy(sizes[s], teams[t], 3, 5); /* unaligned source and destination */
        }
}

static void test_copy_inside_a_parallel_region(void **state) {
    (void)state;
    int failed = 0;
#pragma omp parallel for num_threads(2) reduction(+ : failed)
    for (int i = 0; i < 2; i++) {
        const size_t bytes = 2 * MOE_COPY_SPLIT_MIN + (size_t)i;
        uint8_t *src = malloc(bytes), *dst = malloc(bytes);
        if (!src || !dst) {
            failed++;
        } else {
            for (size_t j = 0; j < bytes; j++) src[j] = pattern(j, (unsigned)i + 7);
            moe_copy_parallel(dst, src, bytes, 4);
            failed += memcmp(dst, src, bytes) != 0;
        }
        free(src);
        free(dst);
    }
    assert_int_equal(failed, 0);
}

static void check_widen(size_t n, int threads, size_t dst_off) {
    uint16_t *src = malloc(n * 2 + 2);
    float *dst = malloc((n + dst_off + 2 * GUARD) * sizeof(float));
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < n; i++) src[i] = (uint16_t)(i * 40503u + 7u); /* every pattern when n >= 65536 */
    const uint32_t poison = 0xDEADBEEFu;
    for (size_t i = 0; i < n + dst_off + 2 * GUARD; i++) memcpy(&dst[i], &poison, 4);
    moe_widen_bf16_parallel(dst + GUARD + dst_off, src, n, threads);
    for (size_t i = 0; i < n + dst_off + 2 * GUARD; i++) {
        uint32_t got;
        memcpy(&got, &dst[i], 4);
        const bool inside = i >= GUARD + dst_off && i < GUARD + dst_off + n;
        const uint32_t want = inside ? (uint32_t)src[i - GUARD - dst_off] << 16 : poison;
        if (got != want)
            fail_msg("element %zu: 0x%08x, want 0x%08x (%zu elements, %d threads, offset %zu)", i, got,
                     want, n, threads, dst_off);
    }
    free(src);
    free(dst);
}

static void test_widening_is_exact_for_every_pattern(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 7, 65536, MOE_COPY_SPLIT_MIN / 4 - 1, MOE_COPY_SPLIT_MIN + 12345};
    const int teams[] = {1, 2, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t t = 0; t < sizeof teams / sizeof teams[0]; t++) {
            check_widen(sizes[s], teams[t], 0);
            check_widen(sizes[s], teams[t], 1); /* dst not 16-byte aligned */
        }
}

static void test_thread_count_is_bounded(void **state) {
    (void)state;
    const int n = moe_copy_threads();
    assert_true(n >= 1 && n <= MOE_COPY_MAX_THREADS);
    assert_true(n <= omp_get_max_threads());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_equal_memcpy_at_every_size_and_team),
        cmocka_unit_test(test_copy_inside_a_parallel_region),
        cmocka_unit_test(test_widening_is_exact_for_every_pattern),
        cmocka_unit_test(test_thread_count_is_bounded),
    };
    return cmocka_run_group_tests_name("host_copy", tests, NULL, NULL);
}
