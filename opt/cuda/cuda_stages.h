/*
 * cuda_stages.h: single stages of the CUDA path run on host arrays, for the unit tests and the
 * kernel lab. Exists only in builds made with nvcc (MOE_HAVE_CUDA); plain C.
 *
 * Rules: each entry creates its own non-blocking stream and device buffers, runs the stage's
 * launcher exactly as the layer does, copies the results back and waits; device buffers are
 * poisoned with 0xFF first, so an element the stage leaves unwritten reads back as -1 (int32).
 */
#ifndef INKLING_CUDA_STAGES_H
#define INKLING_CUDA_STAGES_H

#include "../../common/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* int32 values per entry of the tile table: local expert, first row, and the count that the
 * wgmma GEMM1 keeps there (0 as the grouping writes it). */
#define MOE_CUDA_TILE_INTS 3

/* Entries of the tile table that moe_cuda_group_run may write (MOE_CUDA_TILE_INTS int32 each). */
int moe_cuda_group_tile_bound(int T, int K, int E, int tile_m);

/* int32 values of the grouping's counts and tier lists for E local experts. */
size_t moe_cuda_group_tile_counts(int E);

/* The grouping (cuda_group.cu) on device `device`: ids [T, K], bad [T] (non-zero: token left
 * out) -> counts [E], perm [E, T] (expert el's assignments t*K+k in ascending order in
 * perm[el*T ..], the rest -1), tiles [moe_cuda_group_tile_bound(T, K, E, tier_rows[0])]
 * [MOE_CUDA_TILE_INTS] (local expert, first row, 0: the n_tiles[0] tiles of the first tier, then
 * the later tiers' n_tiles[1] + ... tiles, each part experts ascending; the rest -1), n_tiles
 * [moe_cuda_group_tile_counts(E)]: n_tiles[0], then for each tier k of 1 .. n_tiers - 1
 * (tier_rows descending, at most 3; tier k: the tiles whose rows left in their expert are at
 * most tier_rows[k] and above tier_rows[k + 1]) n_tiles[k] its tiles, their table indices from
 * n_tiles[3 + (k - 1) E] on, experts ascending; the rest -1. Local expert el holds global id
 * expert_first + el. With T = 0 (or E = 0) nothing runs: every output stays -1. */
moe_status moe_cuda_group_run(int device, int T, int K, int E, int expert_first,
                              const int *tier_rows, int n_tiers, const int32_t *ids,
                              const int32_t *bad, int32_t *counts, int32_t *perm, int32_t *tiles,
                              int32_t *n_tiles, moe_error *err);

/* h[i] = moe_silu_product(g[i], u[i], gamma[i]) (cuda_silu.h) as the GPU computes it, for i <
 * n, on device `device`: the expression of every GEMM1 epilogue and of the sinks' SwiGLU, whose
 * error bound tests/test_cuda_silu.c checks there. */
moe_status moe_cuda_silu_run(int device, int n, const float *g, const float *u, const float *gamma,
                             float *h, moe_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_CUDA_STAGES_H */
