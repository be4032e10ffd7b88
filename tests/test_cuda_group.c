/*
 * test_cuda_group.c: the CUDA grouping (opt/cuda/cuda_group.cu) against the grouping computed
 * the plain way on the host.
 *
 * Rules:
 *   - the host grouping here is the definition: for each local expert in turn, every assignment
 *     a = t*K + k in ascending order whose id is that expert's and whose token is finite; the
 *     tile table lists tile_m = tiers[0] rows at a time, experts in order; with tiers of
 *     smaller tiles, an expert's last tile whose rows left are at most tiers[k] and above
 *     tiers[k + 1] (k > 0) is tier k's: those stand after all the first tier's tiles, experts in
 *     order, and tier k lists their table indices. Fixed cases, worked by hand, check it first
 *     (no GPU needed);
 *   - the device grouping must equal it exactly: counts, each group's order, the tile table,
 *     the tiers' counts and lists, and nothing written past a group's count, the tile count or
 *     a list's count (the device buffers start as -1, cuda_stages.h);
 *   - ids are drawn as routing writes them: K distinct experts per token, ids 0..K-1 for a
 *     non-finite token; cases cover T = 0, 1 and 4096, both tile sizes, the layer's two sets of
 *     tiers, EP ranks with padding experts, every token non-finite, E above one block's
 *     threads, and T on either side of the one-block cut (8 chunks of 256 assignments);
 *   - GPU tests skip when moe_backend_cuda.available() says no (CI has nvcc but no GPU).
 */
#include "test_support.h"

#include "../common/moe.h"
#include "../common/numeric.h"

#include <stdio.h>
#include <stdlib.h>

#include "../opt/cuda/cuda_stages.h" /* the tile table's layout; its functions need CUDA */

#define MAX_TIERS 3 /* the layout of the counts and lists (cuda_stages.h) */

/* The grouping by definition. ids [T, K], bad [T] -> counts [E], perm [E, T] (-1 past each
 * count), tiles [][MOE_CUDA_TILE_INTS] (expert, first row, a GEMM1 count of 0): the first
 * tier's n_tiles[0], then the later tiers', tiles holding the bound of entries, -1 past them;
 * n_tiles [MAX_TIERS + (MAX_TIERS - 1) E]: the first tier's tile count, then each later tier's,
 * then each tier's list from MAX_TIERS + (k - 1) E, -1 where nothing stands. tiers [n_tiers],
 * descending: the table's tile rows, then the tiers'. */
static void host_group(int T, int K, int E, int expert_first, const int *tiers, int n_tiers,
                       const int32_t *ids, const int32_t *bad, int32_t *counts, int32_t *perm,
                       int32_t *tiles, int tile_cap, int32_t *n_tiles) {
    const int tile_m = tiers[0];
    for (size_t i = 0; i < (size_t)E * T; i++) perm[i] = -1;
    for (int i = 0; i < MOE_CUDA_TILE_INTS * tile_cap; i++) tiles[i] = -1;
    for (int i = 0; i < MAX_TIERS + (MAX_TIERS - 1) * E; i++) n_tiles[i] = -1;
    for (int k = 1; k < n_tiers; k++) n_tiles[k] = 0;
    for (int el = 0; el < E; el++) {
        int c = 0;
        for (int a = 0; a < T * K; a++)
            if (ids[a] == expert_first + el && !bad[a / K]) perm[(size_t)el * T + c++] = a;
        counts[el] = c;
    }
    /* pass 0: the first tier's tiles; pass 1: the later tiers' */
    int nt = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int el = 0; el < E; el++)
            for (int row = 0; row < counts[el]; row += tile_m) {
                int tier = 0;
                for (int k = n_tiers - 1; k >= 1 && !tier; k--) /* the smallest tier that holds it */
                    if (counts[el] - row <= tiers[k]) tier = k;
                if ((tier > 0) != (pass == 1)) continue;
                assert_true(nt < tile_cap);
                int32_t *tile = tiles + MOE_CUDA_TILE_INTS * nt;
                tile[0] = el, tile[1] = row, tile[2] = 0;
                if (tier > 0) n_tiles[MAX_TIERS + (tier - 1) * E + n_tiles[tier]++] = nt;
                nt++;
            }
        if (pass == 0) n_tiles[0] = nt;
    }
}

/* The host grouping on a case worked by hand: 4 tokens, K = 2, local experts 1..3 (E = 3,
 * expert_first 1), token 2 non-finite. */
static void test_host_grouping_by_hand(void **state) {
    (void)state;
    const int32_t ids[8] = {1, 2, 3, 1, 0, 1, 2, 3}, bad[4] = {0, 0, 1, 0};
    int32_t counts[3], perm[12], tiles[MOE_CUDA_TILE_INTS * 8], n_tiles[MAX_TIERS + 2 * 3];
    const int two[1] = {2}, one[1] = {1};
    host_group(4, 2, 3, 1, two, 1, ids, bad, counts, perm, tiles, 8, n_tiles);
    const int32_t want_counts[3] = {2, 2, 2};
    const int32_t want_perm[12] = {0, 3, -1, -1, 1, 6, -1, -1, 2, 7, -1, -1};
    const int32_t want_tiles2[9] = {0, 0, 0, 1, 0, 0, 2, 0, 0};
    assert_memory_equal(counts, want_counts, sizeof counts);
    assert_memory_equal(perm, want_perm, sizeof perm);
    assert_int_equal(n_tiles[0], 3);
    assert_int_equal(n_tiles[1], -1);
    assert_memory_equal(tiles, want_tiles2, sizeof want_tiles2);
    assert_int_equal(tiles[9], -1);
    host_group(4, 2, 3, 1, one, 1, ids, bad, counts, perm, tiles, 8, n_tiles);
    const int32_t want_tiles1[18] = {0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 2, 0, 0, 2, 1, 0};
    assert_int_equal(n_tiles[0], 6);
    assert_memory_equal(tiles, want_tiles1, sizeof want_tiles1);
}

/* Tiers by hand: experts 1..3 hold 3, 1 and 2 rows (token 2 non-finite); tiles of 2 rows, a
 * tier of 1: expert 1's tiles at rows 0 (3 left) and 2 (1 left: the tier's), expert 2's at 0 (1
 * left: the tier's), expert 3's at 0 (2 left). The first tier's two tiles come first, then the
 * tier's two. */
static void test_host_tiers_by_hand(void **state) {
    (void)state;
    const int32_t ids[8] = {1, 2, 1, 3, 0, 1, 1, 3}, bad[4] = {0, 0, 1, 0};
    int32_t counts[3], perm[12], tiles[MOE_CUDA_TILE_INTS * 8], n_tiles[MAX_TIERS + 2 * 3];
    const int tiers[2] = {2, 1};
    host_group(4, 2, 3, 1, tiers, 2, ids, bad, counts, perm, tiles, 8, n_tiles);
    const int32_t want_counts[3] = {3, 1, 2};
    const int32_t want_tiles[12] = {0, 0, 0, 2, 0, 0, 0, 2, 0, 1, 0, 0};
    const int32_t want_n[MAX_TIERS + 2 * 3] = {2, 2, -1, 2, 3, -1, -1, -1, -1};
    assert_memory_equal(counts, want_counts, sizeof counts);
    assert_memory_equal(tiles, want_tiles, sizeof want_tiles);
    assert_memory_equal(n_tiles, want_n, sizeof want_n);
    /* three tiers, tiles of 3 rows: expert 1's one tile stays in the first (3 left), expert 3's
     * (2 left) is the middle tier's, expert 2's (1 left) the last one's */
    const int three[3] = {3, 2, 1};
    host_group(4, 2, 3, 1, three, 3, ids, bad, counts, perm, tiles, 8, n_tiles);
    const int32_t want_tiles3[9] = {0, 0, 0, 1, 0, 0, 2, 0, 0};
    const int32_t want_n3[MAX_TIERS + 2 * 3] = {1, 1, 1, 2, -1, -1, 1, -1, -1};
    assert_memory_equal(tiles, want_tiles3, sizeof want_tiles3);
    assert_memory_equal(n_tiles, want_n3, sizeof want_n3);
    assert_int_equal(tiles[9], -1);
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
    int T, K, R, ranks, bad_every;
    int tiers[MAX_TIERS]; /* descending, 0 past the last */
} group_case;

static int n_tiers_of(const group_case *gc) {
    int n = 0;
    while (n < MAX_TIERS && gc->tiers[n] > 0) n++;
    return n;
}

/* Every rank of an EP split of R experts (padded up to a multiple of ranks) against the host. */
static void check_group_case(const group_case *gc, uint64_t seed) {
    const int T = gc->T, K = gc->K, E = (gc->R + gc->ranks - 1) / gc->ranks;
    moe_rng rng = moe_rng_make(seed, 3);
    int32_t *ids = malloc(sizeof(int32_t) * ((size_t)T * K + 1));
    int32_t *bad = malloc(sizeof(int32_t) * ((size_t)T + 1));
    assert_true(ids && bad);
    draw_ids(&rng, T, K, gc->R, gc->bad_every, ids, bad);
    const int n_tiers = n_tiers_of(gc);
    const int cap = moe_cuda_group_tile_bound(T, K, E, gc->tiers[0]);
    const size_t perm_n = (size_t)E * T + 1, n_counts = moe_cuda_group_tile_counts(E);
    const size_t tile_ints = MOE_CUDA_TILE_INTS * (size_t)cap;
    assert_int_equal(n_counts, MAX_TIERS + (MAX_TIERS - 1) * (size_t)E);
    const size_t all = perm_n + (size_t)E + tile_ints + n_counts;
    int32_t *want = malloc(sizeof(int32_t) * all), *got = malloc(sizeof(int32_t) * all);
    assert_true(want && got);
    for (int rank = 0; rank < gc->ranks; rank++) {
        int32_t *wc = want, *wp = want + E, *wt = want + E + perm_n, *wn = wt + tile_ints;
        int32_t *gcnt = got, *gp = got + E, *gt = got + E + perm_n, *gn = gt + tile_ints;
        moe_error err;
        moe_error_clear(&err);
        host_group(T, K, E, rank * E, gc->tiers, n_tiers, ids, bad, wc, wp, wt, cap, wn);
        moe_status st = moe_cuda_group_run(0, T, K, E, rank * E, gc->tiers, n_tiers, ids, bad,
                                           gcnt, gp, gt, gn, &err);
        if (st) fail_msg("T %d K %d R %d rank %d/%d: %s", T, K, gc->R, rank, gc->ranks, err.msg);
        if (T == 0) { /* nothing runs: every output stays as the poison left it */
            for (size_t i = 0; i < n_counts; i++) assert_int_equal(gn[i], -1);
            for (int e = 0; e < E; e++) assert_int_equal(gcnt[e], -1);
            continue;
        }
        const char *what = memcmp(wc, gcnt, sizeof(int32_t) * (size_t)E) ? "counts"
                           : memcmp(wp, gp, sizeof(int32_t) * (size_t)E * T) ? "perm"
                           : memcmp(wn, gn, sizeof(int32_t) * n_counts)      ? "tile counts or tier lists"
                           : memcmp(wt, gt, sizeof(int32_t) * tile_ints)     ? "tiles"
                                                                             : NULL;
        if (what)
            fail_msg("T %d K %d R %d rank %d/%d tiers %d,%d,%d: %s differ from the host grouping",
                     T, K, gc->R, rank, gc->ranks, gc->tiers[0], gc->tiers[1], gc->tiers[2], what);
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
        {0, 6, 256, 1, 0, {32}},      {1, 6, 256, 1, 0, {8}},       {1, 6, 256, 1, 0, {32}},
        {8, 6, 256, 1, 4, {8}},       {64, 6, 256, 1, 8, {32}},     {341, 6, 256, 1, 0, {32}},
        {342, 6, 256, 1, 0, {32}},    {342, 6, 256, 3, 5, {8}},     {4096, 6, 256, 1, 0, {32}},
        {4096, 6, 256, 1, 0, {8}},    {4096, 6, 256, 3, 16, {32}},  {4096, 6, 256, 4, 16, {8}},
        {4096, 8, 1024, 4, 3, {32}},  {33, 5, 5, 1, 0, {32}},       {1000, 1, 1, 1, 0, {32}},
        {700, 4, 2000, 1, 7, {32}},   {700, 4, 2000, 2, 0, {8}},    {100, 6, 256, 1, 1, {32}},
        {2000, 6, 256, 2, 1, {32}},   {257, 1, 3, 1, 2, {8}},
        /* the layer's tiers (cuda_experts_wgmma.cu): 32,16 and 128,32,16 */
        {0, 6, 256, 1, 0, {128, 32, 16}}, {1, 6, 256, 1, 0, {32, 16}},   {512, 6, 256, 1, 0, {32, 16}},
        {512, 6, 256, 3, 5, {32, 16}},    {4096, 6, 256, 1, 0, {128, 32, 16}},
        {4096, 6, 256, 4, 16, {128, 32, 16}}, {1500, 8, 1024, 4, 3, {128, 32, 16}},
        {700, 4, 2000, 1, 7, {128, 32, 16}}, {2000, 6, 256, 2, 1, {32, 16}},
        {300, 6, 256, 1, 0, {128, 32, 16}},
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
        cmocka_unit_test(test_host_tiers_by_hand),
        cmocka_unit_test(test_group_matches_host),
    };
    return cmocka_run_group_tests_name("cuda_group", tests, NULL, NULL);
}
