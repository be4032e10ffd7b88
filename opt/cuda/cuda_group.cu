/*
 * cuda_group.cu: token grouping by local expert, on the device, without host round trips.
 *
 * Rules:
 *   - assignment a = t*K + k (token t, slot k) belongs to local expert el when
 *     ids[a] == expert_first + el and token t is finite; other slots are not computed here;
 *   - each expert's group lists its assignments in ascending a, i.e. ordered by (token, slot);
 *   - O(T*K) work as a counting sort: the assignments are cut into chunks of
 *     MOE_CUDA_GROUP_CHUNK, one warp walks a chunk in index order and counts per expert
 *     (chunk_counts [n_chunks, E]); a scan over the chunks gives each (chunk, expert) its first
 *     position and each expert its count; the same walk again writes each assignment at its
 *     expert's position plus its rank among the equal experts before it in the warp
 *     (__match_any_sync). Every position follows from the index order alone: no atomics, so the
 *     grouping is deterministic;
 *   - a token selects an expert at most once, so a group never holds more than T entries and
 *     perm reserves T entries per expert;
 *   - the tile table lists (expert, first row) for every tile_m = tiers.rows[0] rows of every
 *     group (the tile size of the expert kernel that reads it), experts in ascending order, from
 *     a prefix sum over the groups' tile counts; with tiers (several kernels of smaller tiles
 *     beside, cuda_experts_wgmma.cu), an expert's last tile whose rows left fit a tier above 0
 *     goes after every tile of the first tier (n_tiles[0] of them), experts ascending, and that
 *     tier's list holds its table index; each list has its count (cuda_internal.h,
 *     moe_cuda_tile_counts). So each tier's kernel finds its own tiles and no other's;
 *   - at most GROUP_WARPS chunks (decode and small prefill) run as one block, one launch; more
 *     run as three launches (count, scan + tiles, scatter) over as many blocks as chunks need.
 */
#include "cuda_group_block.cuh"
#include "cuda_stages.h"

static_assert(sizeof(moe_cuda_tile) == MOE_CUDA_TILE_INTS * sizeof(int32_t),
              "moe_cuda_group_run hands the tile table out as MOE_CUDA_TILE_INTS int32 an entry");

namespace {

/* Everything in one block (n_chunks <= GROUP_WARPS). */
__global__ void group_one_block_kernel(int n, int T, int K, int E, int expert_first, moe_cuda_tiers tiers,
                                       const int32_t *ids, const int32_t *bad,
                                       int32_t *chunk_counts, int32_t *counts, int32_t *perm,
                                       moe_cuda_tile *tiles, int32_t *n_tiles) {
    __shared__ typename block_scan::TempStorage scan_storage;
    group_in_one_block(n, T, K, E, expert_first, tiers, ids, bad, chunk_counts, counts, perm,
                       tiles, n_tiles, scan_storage);
}

/* Many chunks: one warp per chunk, GROUP_WARPS chunks a block. */
template <bool scatter>
__global__ void walk_kernel(int n, int T, int K, int E, int expert_first, const int32_t *ids,
                            const int32_t *bad, int32_t *chunk_counts, int32_t *perm) {
    const int chunk = (int)(blockIdx.x * GROUP_WARPS + threadIdx.x / 32);
    if (chunk * MOE_CUDA_GROUP_CHUNK >= n) return; /* the whole warp */
    walk_chunk<scatter>(chunk, n, T, K, E, expert_first, ids, bad, chunk_counts, perm);
}

/* One block: the scan over chunks and the tile table. */
__global__ void offsets_kernel(int n_chunks, int E, moe_cuda_tiers tiers, int32_t *chunk_counts,
                               int32_t *counts, moe_cuda_tile *tiles, int32_t *n_tiles) {
    __shared__ typename block_scan::TempStorage scan_storage;
    offsets_and_tiles(n_chunks, E, tiers, chunk_counts, counts, tiles, n_tiles, scan_storage);
}

} // namespace

moe_status moe_cuda_group(cudaStream_t stream, int T, int K, int E, int expert_first,
                          moe_cuda_tiers tiers, const int32_t *ids, const int32_t *bad, int32_t *chunk_counts,
                          int32_t *counts, int32_t *perm, moe_cuda_tile *tiles, int32_t *n_tiles,
                          moe_error *err) {
    if (T == 0 || E == 0) return MOE_OK;
    const int n = T * K;
    const int n_chunks = (n + MOE_CUDA_GROUP_CHUNK - 1) / MOE_CUDA_GROUP_CHUNK;
    if (n_chunks <= GROUP_WARPS) {
        group_one_block_kernel<<<1, GROUP_THREADS, 0, stream>>>(
            n, T, K, E, expert_first, tiers, ids, bad, chunk_counts, counts, perm, tiles, n_tiles);
        LAUNCH_CHECK("group_one_block_kernel");
        return MOE_OK;
    }
    const int blocks = (n_chunks + GROUP_WARPS - 1) / GROUP_WARPS;
    walk_kernel<false><<<blocks, GROUP_THREADS, 0, stream>>>(n, T, K, E, expert_first, ids, bad,
                                                             chunk_counts, perm);
    LAUNCH_CHECK("walk_kernel (count)");
    offsets_kernel<<<1, GROUP_THREADS, 0, stream>>>(n_chunks, E, tiers, chunk_counts, counts,
                                                    tiles, n_tiles);
    LAUNCH_CHECK("offsets_kernel");
    walk_kernel<true><<<blocks, GROUP_THREADS, 0, stream>>>(n, T, K, E, expert_first, ids, bad,
                                                            chunk_counts, perm);
    LAUNCH_CHECK("walk_kernel (scatter)");
    return MOE_OK;
}

/* ---------------------------------------------------------------- host entry (cuda_stages.h) */

namespace {

struct group_buffers {
    int32_t *ids, *bad, *scratch, *counts, *perm, *n_tiles;
    moe_cuda_tile *tiles;
};

void free_group_buffers(group_buffers *b) {
    cudaFree(b->ids);
    cudaFree(b->bad);
    cudaFree(b->scratch);
    cudaFree(b->counts);
    cudaFree(b->perm);
    cudaFree(b->n_tiles);
    cudaFree(b->tiles);
}

moe_status group_on_stream(cudaStream_t st, group_buffers *b, int T, int K, int E,
                           int expert_first, moe_cuda_tiers tiers, const int32_t *ids,
                           const int32_t *bad, int32_t *counts, int32_t *perm, int32_t *tiles,
                           int32_t *n_tiles, moe_error *err) {
    const size_t n = (size_t)T * K, bound = (size_t)moe_cuda_tile_bound(T, K, E, tiers.rows[0]);
    const size_t n_counts = moe_cuda_tile_counts(E);
    const size_t perm_n = (size_t)E * T, scratch_n = moe_cuda_group_scratch(T, K, E);
    /* +1: a zero-sized cudaMalloc hands back NULL, which the kernels never see anyway */
    CUDA_TRY(cudaMalloc((void **)&b->ids, (n + 1) * 4));
    CUDA_TRY(cudaMalloc((void **)&b->bad, ((size_t)T + 1) * 4));
    CUDA_TRY(cudaMalloc((void **)&b->scratch, (scratch_n + 1) * 4));
    CUDA_TRY(cudaMalloc((void **)&b->counts, ((size_t)E + 1) * 4));
    CUDA_TRY(cudaMalloc((void **)&b->perm, (perm_n + 1) * 4));
    CUDA_TRY(cudaMalloc((void **)&b->n_tiles, n_counts * 4));
    CUDA_TRY(cudaMalloc((void **)&b->tiles, bound * sizeof(moe_cuda_tile)));
    /* poison: what the grouping leaves unwritten reads back as -1 */
    CUDA_TRY(cudaMemsetAsync(b->scratch, 0xFF, (scratch_n + 1) * 4, st));
    CUDA_TRY(cudaMemsetAsync(b->counts, 0xFF, ((size_t)E + 1) * 4, st));
    CUDA_TRY(cudaMemsetAsync(b->perm, 0xFF, (perm_n + 1) * 4, st));
    CUDA_TRY(cudaMemsetAsync(b->n_tiles, 0xFF, n_counts * 4, st));
    CUDA_TRY(cudaMemsetAsync(b->tiles, 0xFF, bound * sizeof(moe_cuda_tile), st));
    if (n) CUDA_TRY(cudaMemcpyAsync(b->ids, ids, n * 4, cudaMemcpyHostToDevice, st));
    if (T) CUDA_TRY(cudaMemcpyAsync(b->bad, bad, (size_t)T * 4, cudaMemcpyHostToDevice, st));
    moe_status s = moe_cuda_group(st, T, K, E, expert_first, tiers, b->ids, b->bad, b->scratch,
                                  b->counts, b->perm, b->tiles, b->n_tiles, err);
    if (s) return s;
    CUDA_TRY(cudaMemcpyAsync(counts, b->counts, (size_t)E * 4, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaMemcpyAsync(perm, b->perm, perm_n * 4, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaMemcpyAsync(tiles, b->tiles, bound * sizeof(moe_cuda_tile),
                             cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaMemcpyAsync(n_tiles, b->n_tiles, n_counts * 4, cudaMemcpyDeviceToHost, st));
    CUDA_TRY(cudaStreamSynchronize(st));
    return MOE_OK;
}

} // namespace

extern "C" int moe_cuda_group_tile_bound(int T, int K, int E, int tile_m) {
    return moe_cuda_tile_bound(T, K, E, tile_m);
}

extern "C" size_t moe_cuda_group_tile_counts(int E) { return moe_cuda_tile_counts(E); }

extern "C" moe_status moe_cuda_group_run(int device, int T, int K, int E, int expert_first,
                                         const int *tier_rows, int n_tiers, const int32_t *ids,
                                         const int32_t *bad, int32_t *counts, int32_t *perm,
                                         int32_t *tiles, int32_t *n_tiles, moe_error *err) {
    moe_cuda_tiers tiers = {n_tiers, {0}};
    bool tiers_ok = tier_rows && n_tiers >= 1 && n_tiers <= MOE_CUDA_MAX_TIERS;
    for (int k = 0; tiers_ok && k < n_tiers; k++) {
        tiers.rows[k] = tier_rows[k];
        tiers_ok = tier_rows[k] >= 1 && (k == 0 || tier_rows[k] < tier_rows[k - 1]);
    }
    if (T < 0 || K < 1 || E < 0 || !tiers_ok || (T > 0 && (!ids || !bad)) || !counts || !perm ||
        !tiles || !n_tiles)
        return moe_fail(err, MOE_ERR_ARG, "cuda group: bad arguments (T %d, K %d, E %d, %d tiers)",
                        T, K, E, n_tiers);
    CUDA_TRY(cudaSetDevice(device));
    cudaStream_t st = NULL;
    CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    group_buffers b = {};
    moe_status s = group_on_stream(st, &b, T, K, E, expert_first, tiers, ids, bad, counts, perm,
                                   tiles, n_tiles, err);
    cudaStreamSynchronize(st); /* after a failure too, before the buffers go */
    free_group_buffers(&b);
    cudaStreamDestroy(st);
    return s;
}
