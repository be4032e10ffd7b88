/*
 * cuda_group_block.cuh: the grouping's device steps (rules in cuda_group.cu), shared by the
 * grouping kernels and by the small-T front end's last block (cuda_front_small.cu).
 */
#ifndef INKLING_CUDA_GROUP_BLOCK_CUH
#define INKLING_CUDA_GROUP_BLOCK_CUH

#include "cuda_internal.h"

#include <cub/block/block_scan.cuh>

#define GROUP_WARPS 8                 /* warps per block, one chunk each */
#define GROUP_THREADS (GROUP_WARPS * 32)
#define ALL_LANES 0xFFFFFFFFu

namespace {

typedef cub::BlockScan<int, GROUP_THREADS> block_scan;

/* Local expert of assignment a, or -1 when it is not grouped here (past the n assignments, a
 * non-finite token, another rank's expert). ids [T, K], bad [T]. */
__device__ int local_expert(int a, int n, int K, int E, int expert_first, const int32_t *ids,
                            const int32_t *bad) {
    if (a >= n) return -1;
    const int el = ids[a] - expert_first;
    if (el < 0 || el >= E || bad[a / K]) return -1;
    return el;
}

/* One warp walks chunk `chunk` of the n assignments in index order. Counting: row [E] (this
 * chunk's row of chunk_counts) becomes the chunk's count per expert. Scattering: row holds the
 * chunk's first position per expert (after the scan) and each assignment goes to
 * perm [E, T] at its expert's next position. All 32 lanes call it. */
template <bool scatter>
__device__ void walk_chunk(int chunk, int n, int T, int K, int E, int expert_first,
                           const int32_t *ids, const int32_t *bad, int32_t *chunk_counts,
                           int32_t *perm) {
    const int lane = (int)(threadIdx.x % 32);
    const unsigned lanes_below = (1u << lane) - 1u;
    const int a0 = chunk * MOE_CUDA_GROUP_CHUNK;
    int32_t *row = chunk_counts + (size_t)chunk * E;
    if (!scatter) {
        for (int e = lane; e < E; e += 32) row[e] = 0;
        __syncwarp();
    }
    for (int r0 = a0; r0 < a0 + MOE_CUDA_GROUP_CHUNK && r0 < n; r0 += 32) {
        const int a = r0 + lane;
        const int el = local_expert(a, n, K, E, expert_first, ids, bad);
        const unsigned same = __match_any_sync(ALL_LANES, el); /* lanes with my expert */
        const int before = __popc(same & lanes_below);
        if (scatter && el >= 0) perm[(size_t)el * T + row[el] + before] = a;
        __syncwarp(); /* every lane has read row before the first of each group moves it on */
        if (el >= 0 && before == 0) row[el] += __popc(same);
        __syncwarp();
    }
}

/* chunk_counts [n_chunks, E] -> in place, each (chunk, expert)'s first position in the expert's
 * group; counts [E]; tiles of tiers.rows[0] rows, n_tiles [moe_cuda_tile_counts(E)] with each
 * tier's list (cuda_internal.h): the first tier's tiles first, then the later tiers' (a second
 * pass, once the first tier's count is known). Called by every thread of one block. */
__device__ void offsets_and_tiles(int n_chunks, int E, moe_cuda_tiers tiers, int32_t *chunk_counts,
                                  int32_t *counts, moe_cuda_tile *tiles, int32_t *n_tiles,
                                  typename block_scan::TempStorage &scan_storage) {
    const int tile_m = tiers.rows[0];
    /* expert e's tiles of total rows, and the tier of its last one (0: it stays in the first) */
    auto last_tier_of = [&](int total, int mine) {
        return mine > 0 ? moe_cuda_tier_of(&tiers, total - (mine - 1) * tile_m) : 0;
    };
    int first = 0; /* the first tier's tiles so far */
    for (int e0 = 0; e0 < E; e0 += GROUP_THREADS) {
        const int e = e0 + (int)threadIdx.x;
        int total = 0;
        if (e < E) {
            for (int c = 0; c < n_chunks; c++) {
                int32_t *cell = chunk_counts + (size_t)c * E + e;
                const int v = *cell;
                *cell = total;
                total += v;
            }
            counts[e] = total;
        }
        const int mine = e < E ? (total + tile_m - 1) / tile_m : 0;
        const int kept = mine - (last_tier_of(total, mine) > 0 ? 1 : 0);
        int offset, sum;
        block_scan(scan_storage).ExclusiveSum(kept, offset, sum);
        for (int i = 0; i < kept; i++) {
            moe_cuda_tile tile = {e, i * tile_m, 0};
            tiles[first + offset + i] = tile;
        }
        first += sum;
        __syncthreads(); /* scan_storage is reused */
    }
    /* each expert's last tile that a later tier takes, after the first tier's (experts in order),
     * and its table index into that tier's list: counts[e] is this thread's own write */
    int later = 0, listed[MOE_CUDA_MAX_TIERS] = {0};
    for (int e0 = 0; tiers.n > 1 && e0 < E; e0 += GROUP_THREADS) {
        const int e = e0 + (int)threadIdx.x;
        const int total = e < E ? counts[e] : 0, mine = (total + tile_m - 1) / tile_m;
        const int last_tier = last_tier_of(total, mine);
        int at, n_later;
        block_scan(scan_storage).ExclusiveSum(last_tier > 0 ? 1 : 0, at, n_later);
        const int index = first + later + at;
        if (last_tier > 0) {
            moe_cuda_tile tile = {e, (mine - 1) * tile_m, 0};
            tiles[index] = tile;
        }
        later += n_later;
        for (int k = 1; k < tiers.n; k++) {
            __syncthreads(); /* scan_storage is reused */
            int in_list, in_tier;
            block_scan(scan_storage).ExclusiveSum(last_tier == k ? 1 : 0, in_list, in_tier);
            if (last_tier == k) n_tiles[moe_cuda_tier_list(k, E) + listed[k] + in_list] = index;
            listed[k] += in_tier;
        }
        __syncthreads(); /* scan_storage is reused */
    }
    if (threadIdx.x == 0) {
        *n_tiles = first;
        for (int k = 1; k < tiers.n; k++) n_tiles[k] = listed[k];
    }
}

/* Everything in one block of GROUP_THREADS threads (n_chunks <= GROUP_WARPS): count, scan +
 * tiles, scatter. Every thread of the block calls it. */
__device__ void group_in_one_block(int n, int T, int K, int E, int expert_first, moe_cuda_tiers tiers,
                                   const int32_t *ids, const int32_t *bad, int32_t *chunk_counts,
                                   int32_t *counts, int32_t *perm, moe_cuda_tile *tiles,
                                   int32_t *n_tiles,
                                   typename block_scan::TempStorage &scan_storage) {
    const int warp = (int)(threadIdx.x / 32);
    const int n_chunks = (n + MOE_CUDA_GROUP_CHUNK - 1) / MOE_CUDA_GROUP_CHUNK;
    if (warp < n_chunks)
        walk_chunk<false>(warp, n, T, K, E, expert_first, ids, bad, chunk_counts, perm);
    __syncthreads(); /* the counts in global memory are visible to the whole block */
    offsets_and_tiles(n_chunks, E, tiers, chunk_counts, counts, tiles, n_tiles, scan_storage);
    if (warp < n_chunks)
        walk_chunk<true>(warp, n, T, K, E, expert_first, ids, bad, chunk_counts, perm);
}

} // namespace

#endif
