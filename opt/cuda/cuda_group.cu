/*
 * cuda_group.cu: token grouping by local expert, on the device, without host round trips.
 *
 * Rules:
 *   - assignment a = t*K + k (token t, slot k) belongs to local expert el when
 *     ids[a] == expert_first + el and token t is finite; other slots are not computed here;
 *   - each expert's group lists its assignments in ascending a, i.e. ordered by (token, slot),
 *     found by a block-wide prefix sum (no atomics), so the grouping is deterministic;
 *   - a token selects an expert at most once, so a group never holds more than T entries and
 *     perm reserves T entries per expert;
 *   - the tile table lists (expert, first row) for every tile_m rows of every group (the
 *     tile size of the expert kernel that reads it), experts in ascending order, from a prefix
 *     sum over the groups' tile counts.
 */
#include "cuda_internal.h"

#include <cub/block/block_scan.cuh>

#define GROUP_THREADS 256

namespace {

typedef cub::BlockScan<int, GROUP_THREADS> block_scan;

/* One block per local expert. ids [T, K], bad [T], counts [E], perm [E, T]. */
__global__ void group_kernel(int T, int K, int expert_first, const int32_t *ids,
                             const int32_t *bad, int32_t *counts, int32_t *perm) {
    __shared__ typename block_scan::TempStorage scan_storage;
    const int el = blockIdx.x, expert = expert_first + el;
    const int n = T * K;
    int32_t *group = perm + (size_t)el * T;
    int base = 0;
    for (int a0 = 0; a0 < n; a0 += GROUP_THREADS) {
        const int a = a0 + (int)threadIdx.x;
        const int mine = a < n && ids[a] == expert && !bad[a / K] ? 1 : 0;
        int offset, total;
        block_scan(scan_storage).ExclusiveSum(mine, offset, total);
        if (mine) group[base + offset] = a;
        base += total;
        __syncthreads(); /* scan_storage is reused */
    }
    if (threadIdx.x == 0) counts[el] = base;
}

/* One block. counts [E] -> tiles [*n_tiles] of tile_m rows, n_tiles [1]. */
__global__ void tile_kernel(int E, int tile_m, const int32_t *counts, moe_cuda_tile *tiles,
                            int32_t *n_tiles) {
    __shared__ typename block_scan::TempStorage scan_storage;
    int base = 0;
    for (int e0 = 0; e0 < E; e0 += GROUP_THREADS) {
        const int e = e0 + (int)threadIdx.x;
        const int mine = e < E ? (counts[e] + tile_m - 1) / tile_m : 0;
        int offset, total;
        block_scan(scan_storage).ExclusiveSum(mine, offset, total);
        for (int i = 0; i < mine; i++) {
            moe_cuda_tile tile = {e, i * tile_m};
            tiles[base + offset + i] = tile;
        }
        base += total;
        __syncthreads();
    }
    if (threadIdx.x == 0) *n_tiles = base;
}

} // namespace

moe_status moe_cuda_group(cudaStream_t stream, int T, int K, int E, int expert_first, int tile_m,
                          const int32_t *ids, const int32_t *bad, int32_t *counts,
                          int32_t *perm, moe_cuda_tile *tiles, int32_t *n_tiles,
                          moe_error *err) {
    if (T == 0 || E == 0) return MOE_OK;
    group_kernel<<<E, GROUP_THREADS, 0, stream>>>(T, K, expert_first, ids, bad, counts, perm);
    LAUNCH_CHECK("group_kernel");
    tile_kernel<<<1, GROUP_THREADS, 0, stream>>>(E, tile_m, counts, tiles, n_tiles);
    LAUNCH_CHECK("tile_kernel");
    return MOE_OK;
}
