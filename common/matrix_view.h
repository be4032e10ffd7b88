/*
 * matrix_view.h: a shard's weight matrices as views, decoded one row at a time.
 *
 * A shared primitive, not the reference's own code: the reference, the OpenBLAS path (its tiles
 * and fused kernels), the envelope and the mutants all read the storage through it, so every
 * path reads the same bytes the same way. What checks it apart from its users:
 * tests/test_matrix_view.c (rows against the element and scale decoders of numeric.h, views
 * against the full layer's arrays), tests/test_numeric.c (every code and scale byte) and the
 * golden cases (ml_dtypes decoders). docs/architecture.md lists who reuses what.
 *
 * Rules:
 *   - a block-format row is code * scale (NVFP4: * scale2), exact in double and in fp32
 *     (contract.md [precision.decode]); a bf16 row is its values;
 *   - w13 rows interleave (row 2j gate j, row 2j+1 up j), as stored (contract.md [checkpoint.w13]).
 */
#ifndef INKLING_MATRIX_VIEW_H
#define INKLING_MATRIX_VIEW_H

#include "moe.h"
#include "numeric.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix [rows, cols] in either storage. */
typedef struct {
    const uint8_t *mx;     /* E2M1 codes [rows, cols/2], or NULL */
    const uint8_t *scale;  /* scale bytes [rows, cols/B] of fmt */
    const uint16_t *bf16;  /* bf16 [rows, cols], or NULL */
    int rows, cols;
    const moe_block_format *fmt; /* the block format of mx; NULL: MXFP4 */
    const float *scale2;   /* NVFP4: the matrix's per-expert scale2 (multiplies every weight); NULL: 1 */
} moe_matrix;

/* The block format of a block-stored matrix (MXFP4 when m->fmt is NULL). */
const moe_block_format *moe_matrix_format(const moe_matrix *m);

/* Row r of m, exactly, as double: out [cols] (NVFP4: code * scale * scale2, exact in double). */
void moe_matrix_row(const moe_matrix *m, int r, double *out);

/* Views of a shard's local routed expert e (0 <= e < n_local_experts):
 * w13 [2*I_local, D], w2 [D, I_local], in the shard's routed format. */
void moe_routed_matrices(const moe_shard *sh, int e, moe_matrix *w13, moe_matrix *w2);
/* Views of a shard's sink s: w13 [2*sink_I_local, D], w2 [D, sink_I_local], bf16. */
void moe_sink_matrices(const moe_shard *sh, int s, moe_matrix *w13, moe_matrix *w2);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_MATRIX_VIEW_H */
