/*
 * cuda_wgmma_tiles.cuh: the tiles of the wgmma expert kernels' packed MXFP4 weights, shared by
 * the re-layout that writes them (cuda_wgmma_pack.cu) and the kernels that read them
 * (cuda_experts_wgmma.cu): row tiles of WG_ROWS weight rows by chunks of WG_KC reduction values,
 * WG_A_BYTES of codes and WG_S_BYTES of scale words each, then a byte an expert that says
 * whether its blocks decode with two products.
 */
#ifndef INKLING_CUDA_WGMMA_TILES_CUH
#define INKLING_CUDA_WGMMA_TILES_CUH

#include <stddef.h>

#define WG_ROWS 128                       /* weight rows per row tile */
#define WG_KC 64                          /* reduction values per chunk */
#define WG_A_BYTES (WG_ROWS * WG_KC / 2)  /* codes per row tile and chunk: 4 kB */
#define WG_S_BYTES (WG_ROWS / 16 * 8 * 4) /* scale words per row tile and chunk: 256 B */

namespace {

/* Row tiles of WG_ROWS: GEMM1 packs 64 channels (their gate and up rows) a tile. */
__host__ __device__ inline int wg_row_tiles(int stage, int N) {
    return stage == 1 ? (N / 2 + 63) / 64 : (N + WG_ROWS - 1) / WG_ROWS;
}
__host__ __device__ inline int wg_chunks(int Kdim) { return (Kdim + WG_KC - 1) / WG_KC; }

/* The source row of tile row r (0..WG_ROWS-1) of row tile rt, or -1 past the matrix:
 * GEMM1 rows 16w + g and 16w + g + 8 are the gate (2c) and up (2c + 1) rows of channel
 * c = 64 rt + 8 w + g; GEMM2 rows are output columns. */
__host__ __device__ inline int wg_source_row(int stage, int N, int rt, int r) {
    if (stage == 1) {
        const int c = 64 * rt + 8 * (r / 16) + r % 8;
        return c < N / 2 ? 2 * c + (r % 16) / 8 : -1;
    }
    const int row = WG_ROWS * rt + r;
    return row < N ? row : -1;
}

/* A code's magnitude bits (e1 e0 m) placed at bits 8..6 of a bf16 are that E2M1 magnitude times
 * 2^-126 (exponent field e1 e0, 0.5 the subnormal 2^-127), so one bf16 product by 2^(e - 1)
 * gives the code times its scale 2^(e - 127). That factor is a bf16 for scale bytes e <= 128
 * (exponent field e + 126); larger scales take two products, by 2^126 and by 2^(e - 127). */
#define WG_ONE_PRODUCT_MAX_SCALE 128u

/* The packed scales are followed by one byte an expert (at this offset): 1 where a scale byte
 * of the expert's matrix is above WG_ONE_PRODUCT_MAX_SCALE, so that its blocks decode with two
 * products (checked once at create, not per chunk in the kernels). */
__host__ __device__ inline size_t wg_flags_offset(int stage, int E, int N, int Kdim) {
    return (size_t)E * wg_row_tiles(stage, N) * wg_chunks(Kdim) * WG_S_BYTES;
}

} // namespace

#endif
