/*
 * ref.h: the pure-C reference of the Inkling MoE layer, piece by piece.
 *
 * Rules of the reference (each file restates the rules it implements):
 *   - plain loops, double accumulation, no BLAS, no threads, no cleverness: it is trusted
 *     because it can be read against docs/contract.md line by line;
 *   - exact contract: logits accumulated in double and rounded once to fp32; selection and
 *     weights in fp32 (computed in double from the fp32 logits, rounded once to fp32); all
 *     later arithmetic in double with no rounding; the output rounded to fp32;
 *   - serving contract: as exact, plus: GEMM1 outputs g, u rounded (via fp32) to bf16;
 *     h = silu(g)*u (sinks: *gamma) from those values, rounded (via fp32) to bf16; the
 *     output rounded (via fp32) to bf16 once.
 * The pieces are exported so that other paths can reuse the parts that are not their
 * business to speed up (the OpenBLAS path routes with ref_route_token).
 */
#ifndef INKLING_REF_H
#define INKLING_REF_H

#include "../common/moe.h"

#include <stdbool.h>
#include <stdint.h>

/* One token's gate logits: x [D] (as double), gate_w [G, D] bf16 -> logits [G] fp32. */
void ref_gate_logits(const double *x, const uint16_t *gate_w, int G, int D, float *logits);

/* One token's selection and weights (contract.md [routing]).
 * logits [R+S] fp32, bias [R] or NULL -> ids [K] in slot order, weights [K+S] (routed, then
 * sink gammas) summing to route_scale * global_scale. */
void ref_route_token(const float *logits, const float *bias, int R, int K, int S,
                     float route_scale, float global_scale, int32_t *ids, float *weights);

/* ref_route_token for T tokens, with a shard's bias, route_scale and global scale:
 * logits [T, R+S] -> ids [T, K], weights [T, K+S]. Every backend's route entry may use it. */
void ref_route_tokens(const moe_shard *sh, int T, const float *logits, int32_t *ids,
                      float *weights);

struct moe_block_format_s;

/* A weight matrix [rows, cols] in either storage, decoded one row at a time. */
typedef struct {
    const uint8_t *mx;     /* E2M1 codes [rows, cols/2], or NULL */
    const uint8_t *scale;  /* scale bytes [rows, cols/B] of fmt */
    const uint16_t *bf16;  /* bf16 [rows, cols], or NULL */
    int rows, cols;
    const struct moe_block_format_s *fmt; /* the block format of mx; NULL: MXFP4 */
    const float *scale2;   /* NVFP4: the matrix's per-expert scale2 (multiplies every weight); NULL: 1 */
} ref_matrix;

/* The block format of a block-stored matrix (MXFP4 when m->fmt is NULL). */
const struct moe_block_format_s *ref_matrix_format(const ref_matrix *m);

/* Row r of m, exactly, as double: out [cols] (NVFP4: code * scale * scale2, exact in double). */
void ref_matrix_row(const ref_matrix *m, int r, double *out);

/* Views of a shard's local routed expert e (0 <= e < n_local_experts):
 * w13 [2*I_local, D], w2 [D, I_local], in the shard's routed format. */
void ref_routed_matrices(const moe_shard *sh, int e, ref_matrix *w13, ref_matrix *w2);
/* Views of a shard's sink s: w13 [2*sink_I_local, D], w2 [D, sink_I_local], bf16. */
void ref_sink_matrices(const moe_shard *sh, int s, ref_matrix *w13, ref_matrix *w2);

/* One SwiGLU expert on one token.
 * w13 [2*I_loc, D] interleaved (row 2j gate, 2j+1 up), w2 [D, I_loc], x [D].
 * h [I_loc] = gamma * silu(g) * u, y [D] = W2 h. row_buf [max(D, I_loc)] is scratch. */
void ref_expert_token(const ref_matrix *w13, const ref_matrix *w2, const double *x, int D,
                      int I_loc, double gamma, bool serving, double *h, double *y,
                      double *row_buf);

#endif /* INKLING_REF_H */
