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

/* Rows [r0, r0 + n) of m, decoded exactly: out [n, m->cols] fp32. */
void blas_decode_rows(const ref_matrix *m, int r0, int n, float *out);

/* Whether blas_decode_rows uses its AVX-512 MXFP4 kernel on this machine (for reports). */
int blas_decode_has_avx512(void);

#endif
