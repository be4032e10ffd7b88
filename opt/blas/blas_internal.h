/*
 * blas_internal.h: the pieces of the OpenBLAS path that its files share.
 *
 * Rules:
 *   - weight tiles are decoded exactly to fp32 (MXFP4 and bf16 are exact in fp32,
 *     contract.md [precision.decode]), so the decoder's speed never changes a result;
 *   - a weight matrix is described by the shared moe_matrix view (common/matrix_view.h: block
 *     codes and scales, or bf16), the one the reference reads too, so both paths read the same
 *     storage the same way; nothing here uses ref/.
 */
#ifndef INKLING_BLAS_INTERNAL_H
#define INKLING_BLAS_INTERNAL_H

#include "../../common/matrix_view.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* The path's tiling and threshold constants, declared once each, one line each:
 * X(NAME, kind, value, why). The code uses BLAS_NAME; moe_backend_blas.shape_hints lists them
 * for the harness, which aims case shapes at them (moe.h, moe_hint_kind). */
#define BLAS_SHAPE_CONSTANTS(X)                                                                    \
    X(TILE_FLOATS, MOE_HINT_TILE_ELEMENTS, 1 << 17, "decoded weight tile: a core's L2 share")     \
    X(GATE_CHUNK, MOE_HINT_TOKENS, 64, "gate logits are computed in chunks of this many tokens")  \
    X(PARALLEL_TOKENS, MOE_HINT_TOKENS, 32, "fewer tokens: per-token loops on one thread")       \
    X(SGEMV_BELOW, MOE_HINT_EXPERT_ROWS, 4, "fewer token rows: one sgemv per row, not sgemm")   \
    X(FUSED_BELOW, MOE_HINT_EXPERT_ROWS, 256, "fewer rows on an MXFP4 expert: fused kernels")    \
    X(FUSED_TOKEN_BLOCK, MOE_HINT_EXPERT_ROWS, 4, "fused kernels: token rows per register block") \
    X(FUSED_CHUNK, MOE_HINT_WIDTH, 64, "fused kernels: columns per step (a last one of 32)")     \
    X(FUSED_SCALE_GROUP, MOE_HINT_WIDTH, 512, "BF16 kernel: columns per load of scale bytes")

#define BLAS_AS_ENUM(name, kind, value, why) BLAS_##name = (value),
enum { BLAS_SHAPE_CONSTANTS(BLAS_AS_ENUM) };
#undef BLAS_AS_ENUM

/* The same constants as moe_shape_hint entries, ended by {NULL} (blas_hints.c: built with and
 * without OpenBLAS, so that the harness sees them either way). */
extern const moe_shape_hint blas_shape_hints[];

/* Rows [r0, r0 + n) of m, decoded exactly: out [n, m->cols] fp32 (NVFP4: without scale2). */
void blas_decode_rows(const moe_matrix *m, int r0, int n, float *out);

/* Whether blas_decode_rows uses its AVX-512 MXFP4 kernel on this machine (for reports). */
int blas_decode_has_avx512(void);

/* ---------------------------------------------------------------- fused decode-and-dot
 * (blas_fused.c): MXFP4 weight rows times a small group of bf16 activation rows. */

/* Routed MXFP4 experts with fewer token rows than BLAS_FUSED_BELOW take the fused kernels,
 * larger groups the decoded-tile sgemm route (the cross-over measured in docs/perf-cpu.md).
 * Tests and benchmarks only: the cut-off for every later forward call (negative: the default;
 * 0: never fused; INT_MAX: always). */
void blas_set_fused_below(int rows);

/* Activation rows are arranged in chunks of BLAS_FUSED_CHUNK columns. */
/* Elements per arranged activation row: cols rounded up to BLAS_FUSED_CHUNK. */
size_t blas_fused_stride(int cols);

/* The exponents of a set of activations, for blas_fused_bf16_exact: over the nonzero values
 * (exp_min INT_MAX and exp_max INT_MIN when all are zero); plain: none is subnormal or not
 * finite. */
typedef struct {
    int exp_min, exp_max;
    bool plain;
} blas_act_range;

#define BLAS_ACT_RANGE_EMPTY ((blas_act_range){INT_MAX, INT_MIN, true})

/* x [cols] fp32 holding bf16 values -> out [blas_fused_stride(cols)] arranged bf16 (the padding
 * zeroed). blas_fused_arrange_cols arranges columns [c0, c1) only. */
blas_act_range blas_fused_arrange(const float *x, int cols, uint16_t *out);
blas_act_range blas_fused_arrange_cols(const float *x, int c0, int c1, uint16_t *out);
/* Zeroes the padding of an arranged row of cols columns (out [blas_fused_stride(cols)]). */
void blas_fused_zero_padding(int cols, uint16_t *out);
blas_act_range blas_act_range_merge(blas_act_range a, blas_act_range b);

/* Smallest and largest E8M0 byte of an MXFP4 matrix. */
typedef struct {
    uint8_t min, max;
} blas_scale_range;
blas_scale_range blas_scale_range_of(const moe_matrix *m);

/* Whether the AVX-512 BF16 kernel computes an fp32 accumulation exactly for these ranges: no
 * subnormal input, product or partial sum (vdpbf16ps would flush it) and no overflow. */
bool blas_fused_bf16_exact(blas_scale_range s, blas_act_range a, int cols);

typedef enum {
    BLAS_FUSED_AUTO = 0, /* the best kernel this CPU has that is exact for the data */
    BLAS_FUSED_BF16,     /* AVX-512 BF16 dot products */
    BLAS_FUSED_AVX2,     /* AVX2/FMA on exactly decoded fp32 */
    BLAS_FUSED_PORTABLE, /* plain C */
} blas_fused_kernel;

/* The kernel blas_fused_rows runs on this CPU, given blas_fused_bf16_exact's verdict. */
blas_fused_kernel blas_fused_kernel_for(bool bf16_exact);
/* Tests only: make every later call use at most kernel k (AUTO restores the default). */
void blas_fused_force_kernel(blas_fused_kernel k);

/* out [n, ldo]: out[p, r] = row r0 + r of m (MXFP4, sr its scale range) . act row p, for
 * r < nr, p < n; act [n, blas_fused_stride(m->cols)] arranged, ar its range. Each element is
 * one fp32 dot product whose order depends on the kernel and m->cols only. */
void blas_fused_rows(const moe_matrix *m, blas_scale_range sr, int r0, int nr,
                     const uint16_t *act, int n, blas_act_range ar, float *out, int ldo);

#endif
