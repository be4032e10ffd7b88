/*
 * test_cuda_group.c: the CUDA grouping (opt/cuda/cuda_group.cu) against the grouping computed
 * the plain way on the host.
 *
 * Rules:
 *   - the host grouping here is the definition: for each local expert in turn, every assignment
 *     a = t*K + k in ascending order whose id is that expert's and whose token is finite; the
 *     tile table lists tile_m rows at a time, experts in order. A fixed case, worked by hand,
 *     checks it first (no GPU needed);
 *   - the device grouping must equal it exactly: counts, each group's order, the tile table,
 *     and nothing written past a group's count or the tile count (the device buffers start as
 *     -1, cuda_stages.h);
 *   - ids are drawn as routing writes them: K distinct experts per token, ids 0..K-1 for a
 *     non-finite token; cases cover T = 0, 1 and 4096, both tile sizes, EP ranks with padding
 *     experts, every token non-finite, E above one block's threads, and T on either side of
 *     the one-block cut (8 chunks of 256 assignments);
 *   - GPU tests skip when moe_backend_cuda.available() says no (CI has nvcc but no GPU).
 */
#include "test_support.h"

#include "../common/moe.h"
#include "../common/numeric.h"

#include <stdio.h>
#include <stdlib.h>

#include "../opt/cuda/cuda_stages.h" /* the tile table's layout; its functions need CUDA */

/* The grouping by definition. ids [T, K], bad [T] -> counts [E], perm [E, T] (-1 past each
 * count), tiles [*n_tiles][MOE_CUDA_TILE_INTS] (expert, first row, a GEMM1 count of 0); tiles
 * must hold the bound of entries, set to -1 past n_tiles. */
static void host_group(int T, int K, int E, int expert_first, int tile_m, const int32_t *ids,
                       const int32_t *bad, int32_t *counts, int32_t *perm, int32_t *tiles,
                       int tile_cap, int32_t *n_tiles) {
    for (size_t i = 0; i < (size_t)E * T; i++) perm[i] = -1;
    for (int i = 0; i < MOE_CUDA_TILE_INTS * tile_cap; i++) tiles[i] = -1;
    int nt = 0;
    for (int el = 0; el < E; el++) {
        int c = 0;
        for (int a = 0; a < T * K; a++)
            if (ids[a] == expert_first + el && !bad[a / K]) perm[(size_t)el * T + c++] = a;
        counts[el] = c;
        for (int row = 0; row < c; row += tile_m) {
            assert_true(nt < tile_cap);
            int32_t *tile = tiles + MOE_CUDA_TILE_INTS * nt;
            tile[0] = el, tile[1] = row, tile[2] = 0;
            nt++;
        }
    }
    *n_tiles = nt;
}

/* The host grouping on a case worked by hand: 4 tokens, K = 2, local experts 1..3 (E = 3,
 * expert_first 1), token 2 non-finite. */
static void test_host_grouping_by_hand(void **state) {
    (void)state;
    const int32_t ids[8] = {1, 2, 3, 1, 0, 1, 2, 3}, bad[4] = {0, 0, 1, 0};
    int32_t counts[3], perm[12], tiles[MOE_CUDA_TILE_INTS * 8], n_tiles;
    host_group(4, 2, 3, 1, 2, ids, bad, counts, perm, tiles, 8, &n_tiles);
    const int32_t want_counts[3] = {2, 2, 2};
    const int32_t want_perm[12] = {0, 3, -1, -1, 1, 6, -1, -1, 2, 7, -1, -1};
    const int32_t want_tiles2[9] = {0, 0, 0, 1, 0, 0, 2, 0, 0};
    assert_memory_equal(counts, want_counts, sizeof counts);
    assert_memory_equal(perm, want_perm, sizeof perm);
    assert_int_equal(n_tiles, 3);
    assert_memory_equal(tiles, want_tiles2, sizeof want_tiles2);
    assert_int_equal(tiles[9], -1);
    host_group(4, 2, 3, 1, 1, ids, bad, counts, perm, tiles, 8, &n_tiles);
    const int32_t want_tiles1[18] = {0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 2, 0, 0, 2, 1, 0};
    assert_int_equal(n_tiles, 6);
    assert_memory_equal(tiles, want_tiles1, sizeof want_tiles1);
}

#ifdef MOE_HAVE_CUDA

static void skip_without_gpu(void) {
    char why[256] = "";
    if (!moe_backend_cuda.available(why, sizeof why)) {
        print_message("cuda unavailable: %s\n", why);
        skip();
    }
}

/* ids [T, K] as routing writes them: K distinct experts of R per token, drawn at random; a
 * token marked bad (about one in bad_every, none when 0; every one when 1) holds 0..K-1. */
static void draw_ids(moe_rng *rng, int T, int K, int R, int bad_every, int32_t *ids,
                     int32_t *bad) {
    int *pool = malloc(sizeof(int) * (size_t)R);
    assert_non_null(pool);
    for (int e = 0; e < R; e++) pool[e] = e;
    for (int t = 0; t < T; t++) {
        bad[t] = bad_every == 1 || (bad_every > 1 && moe_rng_int(rng, 1, bad_every) == 1);
        for (int k = 0; k < K; k++) {
            int j = moe_rng_int(rng, k, R - 1), v = pool[j];
            pool[j] = pool[k], pool[k] = v;
            ids[(size_t)t * K + k] = bad[t] ? k : v;
        }
    }
    free(pool);
}

typedef struct {
    int T, K, R, ranks, tile_m, bad_every;
} group_case;

/* Every rank of an EP split of R experts (padded up to a multiple of ranks) against the host. */
static void check_group_case(const group_case *gc, uint64_t seed) {
    const int T = gc->T, K = gc->K, E = (gc->R + gc->ranks - 1) / gc->ranks;
    moe_rng rng = moe_rng_make(seed, 3);
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)T * K + 1));
    int32_t *bad = malloc(sizeof(int32_t) * ((size_t)T + 1));
    assert_true(ids && bad);
    draw_ids(&rng, T, K, gc->R, gc->bad_every, ids, bad);
    const int cap = moe_cuda_group_tile_bound(T, K, E, gc->tile_m);
    const size_t perm_n = (size_t)E * T + 1;
    const size_t tile_ints = MOE_CUDA_TILE_INTS * (size_t)cap;
    int32_t *want = malloc(sizeof(int32_t) * (perm_n + (size_t)E + tile_ints));
    int32_t *got = malloc(sizeof(int32_t) * (perm_n + (size_t)E + tile_ints));
    assert_true(want && got);
    for (int rank = 0; rank < gc->ranks; rank++) {
        int32_t *wc = want, *wp = want + E, *wt = want + E + perm_n;
        int32_t *gcnt = got, *gp = got + E, *gt = got + E + perm_n;
        int32_t want_tiles = 0, got_tiles = -1;
        moe_error err;
        moe_error_clear(&err);
        host_group(T, K, E, rank * E, gc->tile_m, ids, bad, wc, wp, wt, cap, &want_tiles);
        moe_status st = moe_cuda_group_run(0, T, K, E, rank * E, gc->tile_m, ids, bad, gcnt, gp,
                                           gt, &got_tiles, &err);
        if (st) fail_msg("T %d K %d R %d rank %d/%d: %s", T, K, gc->R, rank, gc->ranks, err.msg);
        if (T == 0) { /* nothing runs: every output stays as the poison left it */
            assert_int_equal(got_tiles, -1);
            for (int e = 0; e < E; e++) assert_int_equal(gcnt[e], -1);
            continue;
        }
        const char *what = memcmp(wc, gcnt, sizeof(int32_t) * (size_t)E) ? "counts"
                           : memcmp(wp, gp, sizeof(int32_t) * (size_t)E * T) ? "perm"
                           : want_tiles != got_tiles                         ? "n_tiles"
                           : memcmp(wt, gt, sizeof(int32_t) * tile_ints)     ? "tiles"
                                                                             : NULL;
        if (what)
            fail_msg("T %d K %d R %d rank %d/%d tile %d: %s differ from the host grouping", T, K,
                     gc->R, rank, gc->ranks, gc->tile_m, what);
    }
    free(ids);
    free(bad);
    free(want);
    free(got);
}

static void test_group_matches_host(void **state) {
    (void)state;
    skip_without_gpu();
    static const group_case cases[] = {
        {0, 6, 256, 1, 32, 0},    {1, 6, 256, 1, 8, 0},      {1, 6, 256, 1, 32, 0},
        {8, 6, 256, 1, 8, 4},     {64, 6, 256, 1, 32, 8},    {341, 6, 256, 1, 32, 0},
        {342, 6, 256, 1, 32, 0},  {342, 6, 256, 3, 8, 5},    {4096, 6, 256, 1, 32, 0},
        {4096, 6, 256, 1, 8, 0},  {4096, 6, 256, 3, 32, 16}, {4096, 6, 256, 4, 8, 16},
        {4096, 8, 1024, 4, 32, 3}, {33, 5, 5, 1, 32, 0},     {1000, 1, 1, 1, 32, 0},
        {700, 4, 2000, 1, 32, 7}, {700, 4, 2000, 2, 8, 0},   {100, 6, 256, 1, 32, 1},
        {2000, 6, 256, 2, 32, 1}, {257, 1, 3, 1, 8, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_group_case(&cases[i], 100 + i);
}

#else
static void test_group_matches_host(void **state) {
    (void)state;
    skip(); /* built without CUDA: no GPU path at all */
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_grouping_by_hand),
        cmocka_unit_test(test_group_matches_host),
    };
    return cmocka_run_group_tests_name("cuda_group", tests, NULL, NULL);
}
