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
 * Selection and weights, and the matrix views of a shard, are not here: the reference routes
 * with common/routing.h and reads weights through common/matrix_view.h, primitives the other CPU
 * paths share. The token loop (ref_layer) is exported with seams where a mutant plants its bug.
 */
#ifndef INKLING_REF_H
#define INKLING_REF_H

#include "../common/matrix_view.h"
#include "../common/moe.h"

#include <stdbool.h>
#include <stdint.h>

/* One token's gate logits: x [D] (as double), gate_w [G, D] bf16 -> logits [G] fp32. */
void ref_gate_logits(const double *x, const uint16_t *gate_w, int G, int D, float *logits);

/* One SwiGLU expert on one token.
 * w13 [2*I_loc, D] interleaved (row 2j gate, 2j+1 up), w2 [D, I_loc], x [D].
 * h [I_loc] = gamma * silu(g) * u, y [D] = W2 h. row_buf [max(D, I_loc)] is scratch. */
void ref_expert_token(const moe_matrix *w13, const moe_matrix *w2, const double *x, int D,
                      int I_loc, double gamma, bool serving, double *h, double *y,
                      double *row_buf);

/* ---------------------------------------------------------------- the token loop
 * The whole layer on a shard, token by token (ref_backend.c), as a layer other code can run:
 * the "ref" backend runs it with no seams; harness/mutants.c plants one bug per mutant through
 * a seam instead of copying the loop. A NULL seam is the reference's own step. */

/* One expert's work on one token, as the loop sets it up before the expert seam sees it. */
typedef struct {
    moe_matrix w13, w2; /* the expert's views */
    double gamma;       /* multiplies h: 1 for a routed expert, the sink's gamma for a sink */
    double weight;      /* multiplies y in the output sum: w_k for a routed slot, 1 for a sink */
    bool round_inter;   /* serving: g, u and h rounded to bf16 */
} ref_expert_call;

typedef struct {
    void *ctx;
    /* Replaces moe_route_token for a finite token: logits [R+S] -> ids [K], weights [K+S]. */
    void (*route)(void *ctx, const float *logits, int32_t *ids, float *weights);
    /* May change expert j's call for token t (j < K: routed slot j; else sink j - K), whose
     * routing weights are weights [K+S]. */
    void (*expert)(void *ctx, int t, int j, const float *weights, ref_expert_call *call);
    /* May change expert j's y [D] before it is weighted and exported. */
    void (*expert_y)(void *ctx, int j, double *y, int D);
} ref_seams;

typedef struct ref_layer ref_layer;

/* The reference on shard sh (which must outlive it), serving or exact, seams NULL or copied. */
moe_status ref_layer_create(const moe_shard *sh, bool serving, const ref_seams *seams,
                            ref_layer **out, moe_error *err);
/* x [T, D] bf16 -> out [T, D] the rank's partial; the stages st asks for (st may be NULL). */
void ref_layer_forward(ref_layer *l, int T, const uint16_t *x, float *out, moe_stages *st);
void ref_layer_destroy(ref_layer *l);

#endif /* INKLING_REF_H */
