/*
 * blas_internal.h: the pieces of the OpenBLAS path that its files share.
 *
 * Rules:
 *   - weight tiles are decoded exactly to fp32 (MXFP4 and bf16 are exact in fp32, SPEC §3),
 *     so the decoder's speed never changes a result;
 *   - a weight matrix is described by the reference's ref_matrix view (MXFP4 codes + E8M0
 *     scales, or bf16), so both paths read the same storage the same way.
 */
#ifndef INKLING_BLAS_INTERNAL_H
#define INKLING_BLAS_INTERNAL_H

#include "../../ref/ref.h"

/* The path's tiling and threshold constants, declared once each, one line each:
 * X(NAME, kind, value, why). The code uses BLAS_NAME; moe_backend_blas.shape_hints lists them
 * for the harness, which aims case shapes at them (moe.h, moe_hint_kind). */
#define BLAS_SHAPE_CONSTANTS(X)                                                                    \
    X(TILE_FLOATS, MOE_HINT_TILE_ELEMENTS, 1 << 17, "decoded weight tile: a core's L2 share")     \
    X(GATE_CHUNK, MOE_HINT_TOKENS, 64, "gate logits are computed in chunks of this many tokens")  \
    X(SGEMV_BELOW, MOE_HINT_EXPERT_ROWS, 4, "fewer token rows: one sgemv per row, not sgemm")

#define BLAS_AS_ENUM(name, kind, value, why) BLAS_##name = (value),
enum { BLAS_SHAPE_CONSTANTS(BLAS_AS_ENUM) };
#undef BLAS_AS_ENUM

/* The same constants as moe_shape_hint entries, ended by {NULL} (blas_hints.c: built with and
 * without OpenBLAS, so that the harness sees them either way). */
extern const moe_shape_hint blas_shape_hints[];

/* Rows [r0, r0 + n) of m, decoded exactly: out [n, m->cols] fp32 (NVFP4: without scale2). */
void blas_decode_rows(const ref_matrix *m, int r0, int n, float *out);

/* Whether blas_decode_rows uses its AVX-512 MXFP4 kernel on this machine (for reports). */
int blas_decode_has_avx512(void);

#endif
