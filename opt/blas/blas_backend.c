/*
 * blas_backend.c: the OpenBLAS CPU path as a moe_backend, serving contract only
 * (contract.md [precision.serving]).
 *
 * Rules:
 *   - gate logits: one cblas_sgemm per fixed chunk of tokens on fp32 copies of x and the gate
 *     (bf16 -> fp32 is exact; only the accumulation order differs from the reference); every
 *     product with fewer than 4 token rows is one cblas_sgemv per row instead;
 *   - selection and weights: moe_route_token, the CPU routing shared with the reference
 *     (common/routing.h; checked apart from both by harness/selection.c and tests/test_route.c);
 *   - routed experts, grouped by expert: the rows of x routed to a local expert are gathered;
 *     an MXFP4 expert with fewer than BLAS_FUSED_BELOW rows runs the fused decode-and-dot
 *     kernels (blas_fused.c) on bf16 copies of the rows; a larger group, or bf16 or NVFP4
 *     weights, has its weights decoded tile by tile to fp32 and multiplied with cblas_sgemm
 *     (NVFP4: the tile holds code * scale and the products are multiplied by scale2 in fp32);
 *     g and u are rounded to bf16, h = silu(g) * u is formed from them exactly as the
 *     reference forms it (in double) and rounded to bf16; GEMM2 accumulates in fp32 and y_k is kept apart from
 *     the routing weight, which multiplies after W2 (contract.md [math.experts]);
 *   - sinks: every token runs every sink through the same tile code, the gamma multiplying h
 *     before W2; the sink sum is added in fp32 in sink order;
 *   - output per token, in fp32 and a fixed order: slots k = 0..K-1 (w_k * y_k, slots whose
 *     expert this rank does not hold skipped), then the sink sum; rounded to bf16 once;
 *   - determinism: the tiling and the route of each expert depend only on the shapes and the
 *     group sizes, never on the thread count; OpenMP threads take whole tiles (experts x row
 *     blocks, so one token keeps every core busy), each tile is one single-threaded sgemm or one
 *     fused call writing its own part of the result (OpenBLAS's own threading changes sgemm's
 *     bits, so it is held at 1 during a call and restored after), so the result is bitwise the
 *     same for any thread count; below BLAS_PARALLEL_TOKENS tokens the per-token loops run on
 *     one thread (a team barrier costs more than their work when the cores are shared);
 *   - non-finite input rows (contract.md [nonfinite]): their fp32 copy is zeroed so no NaN enters a
 *     GEMM batch; their routing, output and stages follow the shared rules of
 *     common/layer_rules.h, which the reference calls too;
 *   - one forward call: plan the tiles, allocate, then input_to_f32, gate_logits, route_tokens,
 *     group_by_expert and gather_rows, run_gemms (GEMM1 + h, GEMM2, routed and sinks as work
 *     items), combine_output, export_stages.
 */
#include "blas_internal.h"

#include "../../common/layer_rules.h"
#include "../../common/numeric.h"
#include "../../common/routing.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tiling constants (BLAS_TILE_FLOATS, BLAS_GATE_CHUNK, BLAS_SGEMV_BELOW): blas_internal.h. */

static int fused_below = BLAS_FUSED_BELOW;
void blas_set_fused_below(int rows) { fused_below = rows < 0 ? BLAS_FUSED_BELOW : rows; }

typedef struct {
    const moe_shard *shard;
    int n_threads;
    float *gate_f32; /* [G, D] fp32 copy of the bf16 gate */
    blas_scale_range *scales13, *scales2; /* [n_local_experts] (MXFP4 only) */
} blas_state;

/* One unit of parallel work: a tile of one weight matrix applied to one group of tokens. */
typedef struct {
    int expert; /* local routed expert, or -1 - s for sink s */
    int start;  /* first channel (GEMM1) or first output row d (GEMM2) */
    int len;
} blas_item;

/* The work list of one GEMM phase, in a fixed order (so the tiling depends only on the shapes):
 * for each local expert with tokens, tiles of `r_tile` along its extent `r_len`; then for each
 * sink (when T > 0), tiles of `s_tile` along `s_len`. offset [E+1] are the experts' row starts.
 * Returns the item count. */
static int list_items(blas_item *items, int E, const int *offset, int r_len, int r_tile, int S,
                      int T, int s_len, int s_tile) {
    int n = 0;
    for (int e = 0; e < E; e++)
        for (int j = 0; j < r_len && offset[e + 1] > offset[e]; j += r_tile)
            items[n++] = (blas_item){e, j, r_len - j < r_tile ? r_len - j : r_tile};
    for (int sk = 0; sk < S && T > 0; sk++)
        for (int j = 0; j < s_len; j += s_tile)
            items[n++] = (blas_item){-1 - sk, j, s_len - j < s_tile ? s_len - j : s_tile};
    return n;
}

static bool blas_available(char *why, size_t why_len) {
    (void)why;
    (void)why_len;
    return true;
}

static bool blas_supports(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                          char *why, size_t why_len) {
    (void)cfg;
    (void)split;
    if (opt->precision != MOE_PRECISION_SERVING) {
        snprintf(why, why_len,
                 "precision: the blas path implements the serving contract only "
                 "(contract.md [precision.serving]); "
                 "the exact contract runs on the reference");
        return false;
    }
    return true;
}

static void blas_destroy(void *p) {
    blas_state *s = p;
    if (!s) return;
    free(s->gate_f32);
    free(s->scales13);
    free(s->scales2);
    free(s);
}

static moe_status blas_create(const moe_shard *sh, const moe_options *opt, void **out,
                              moe_error *err) {
    blas_state *s = calloc(1, sizeof *s);
    if (!s) return moe_fail(err, MOE_ERR_NOMEM, "blas: out of memory");
    const size_t GD = (size_t)(sh->cfg.R + sh->cfg.S) * (size_t)sh->cfg.D;
    s->shard = sh;
    s->n_threads = opt->n_threads > 0 ? opt->n_threads : omp_get_max_threads();
    s->gate_f32 = malloc(GD * sizeof(float));
    if (!s->gate_f32) {
        blas_destroy(s);
        return moe_fail(err, MOE_ERR_NOMEM, "blas: out of memory for the fp32 gate [R+S, D]");
    }
    for (size_t i = 0; i < GD; i++) s->gate_f32[i] = moe_bf16_to_f32(sh->gate_w[i]);
    if (sh->cfg.routed_format == MOE_ROUTED_MXFP4) {
        const int E = sh->n_local_experts;
        s->scales13 = malloc((size_t)(E > 0 ? E : 1) * sizeof(blas_scale_range));
        s->scales2 = malloc((size_t)(E > 0 ? E : 1) * sizeof(blas_scale_range));
        if (!s->scales13 || !s->scales2) {
            blas_destroy(s);
            return moe_fail(err, MOE_ERR_NOMEM, "blas: out of memory for the scale ranges");
        }
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1)
        for (int e = 0; e < E; e++) {
            moe_matrix w13, w2;
            moe_routed_matrices(sh, e, &w13, &w2);
            s->scales13[e] = blas_scale_range_of(&w13);
            s->scales2[e] = blas_scale_range_of(&w2);
        }
    }
    *out = s;
    return MOE_OK;
}

/* Channels per GEMM1 tile and rows per GEMM2 tile: functions of the shapes only. */
static int gemm1_tile_channels(int D, int width) {
    int c = BLAS_TILE_FLOATS / (2 * D);
    return c < 1 ? 1 : (c > width ? width : c);
}
static int gemm2_tile_rows(int D, int width) {
    int r = width > 0 ? BLAS_TILE_FLOATS / width : D;
    return r < 1 ? 1 : (r > D ? D : r);
}

/* c [n, ldc] = a [n, lda] * tile [rows, cols]^T, fp32. Fewer than BLAS_SGEMV_BELOW rows of a
 * go through one sgemv each (measured: sgemm packs the tile for every call and is several times
 * slower there); the choice depends on n only, so it never depends on the thread count. */
static void times_tile(int n, int rows, int cols, const float *a, int lda, const float *tile,
                       float *c, int ldc) {
    if (n < BLAS_SGEMV_BELOW) {
        for (int p = 0; p < n; p++)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, tile, cols,
                        a + (size_t)p * lda, 1, 0.0f, c + (size_t)p * ldc, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, a, lda, tile, cols,
                0.0f, c, ldc);
}

static double silu(double z) { return z / (1.0 + exp(-z)); }

/* NVFP4: c [n, ldc] columns [0, cols) times the matrix's scale2, in fp32, after the dot products
 * (a tile holds code * scale only). Nothing for the other formats. */
static void apply_scale2(const moe_matrix *m, int n, int cols, float *c, int ldc) {
    if (!m->scale2) return;
    const float s2 = *m->scale2;
    for (int p = 0; p < n; p++)
        for (int j = 0; j < cols; j++) c[(size_t)p * ldc + j] *= s2;
}

/* h on channels [j0, j0+len) from GEMM1's products gu [n, 2*len] (g, u of each channel
 * side by side); gamma [n] or NULL (1); h [n, ldh]: columns [j0, j0+len) are written. */
static void h_from_gu(const float *gu, int n, int len, const float *gamma, int j0, float *h,
                      int ldh) {
    for (int p = 0; p < n; p++) {
        const float *row = gu + (size_t)p * 2 * len;
        const double gam = gamma ? (double)gamma[p] : 1.0;
        for (int j = 0; j < len; j++) {
            /* The reference's serving h: bf16 g and u, silu(g) * u * gamma in double, rounded
             * through fp32 to bf16. */
            double g = (double)moe_round_bf16(row[2 * j]);
            double u = (double)moe_round_bf16(row[2 * j + 1]);
            h[(size_t)p * ldh + j0 + j] = moe_round_bf16((float)(silu(g) * u * gam));
        }
    }
}

/* GEMM1 on channels [j0, j0+len) of one expert for n tokens, then h.
 * x [n, D]; gamma [n] or NULL (1); tile [2*len, D] and gu [n, 2*len] scratch;
 * h [n, ldh]: columns [j0, j0+len) are written. */
static void gemm1_tile(const moe_matrix *w13, const float *x, int n, int D, const float *gamma,
                       int j0, int len, float *tile, float *gu, float *h, int ldh) {
    blas_decode_rows(w13, 2 * j0, 2 * len, tile);
    times_tile(n, 2 * len, D, x, D, tile, gu, 2 * len);
    apply_scale2(w13, n, 2 * len, gu, 2 * len);
    h_from_gu(gu, n, len, gamma, j0, h, ldh);
}

/* GEMM2 on output rows [d0, d0+len) of one expert for n tokens.
 * h [n, ldh] (width w2->cols); tile [len, w2->cols] scratch; y [n, ldy]: columns [d0, d0+len). */
static void gemm2_tile(const moe_matrix *w2, const float *h, int ldh, int n, int d0, int len,
                       float *tile, float *y, int ldy) {
    blas_decode_rows(w2, d0, len, tile);
    times_tile(n, len, w2->cols, h, ldh, tile, y + d0, ldy);
    apply_scale2(w2, n, len, y + d0, ldy);
}

/* The tiling of one call and the scratch it needs: functions of the shapes alone. */
typedef struct {
    int r_ch, s_ch;       /* GEMM1 channels per tile: routed experts, sinks */
    int r_rows, s_rows;   /* GEMM2 output rows per tile: routed experts, sinks */
    size_t tile_floats;   /* one decoded weight tile */
    size_t per_thread;    /* one thread's scratch: a tile, then T rows of GEMM1 products */
    size_t max_items;     /* work items of the larger GEMM phase */
} blas_plan;

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }
static int max_int(int a, int b) { return a > b ? a : b; }

static blas_plan plan_of(const moe_shard *sh, int T) {
    const int D = sh->cfg.D, S = sh->cfg.S, IL = sh->I_local, SIL = sh->sink_I_local;
    blas_plan p;
    p.r_ch = gemm1_tile_channels(D, IL), p.s_ch = gemm1_tile_channels(D, SIL);
    p.r_rows = gemm2_tile_rows(D, IL), p.s_rows = gemm2_tile_rows(D, SIL);
    p.tile_floats = max_sz(max_sz((size_t)2 * p.r_ch * D, (size_t)2 * p.s_ch * D),
                           max_sz((size_t)p.r_rows * IL, (size_t)p.s_rows * SIL));
    p.per_thread = p.tile_floats + (size_t)T * 2 * max_int(p.r_ch, p.s_ch);
    const int r_tiles1 = (IL + p.r_ch - 1) / p.r_ch, s_tiles1 = SIL > 0 ? (SIL + p.s_ch - 1) / p.s_ch : 0;
    const int r_tiles2 = (D + p.r_rows - 1) / p.r_rows, s_tiles2 = (D + p.s_rows - 1) / p.s_rows;
    p.max_items = (size_t)sh->n_local_experts * (size_t)max_int(r_tiles1, r_tiles2) +
                  (size_t)S * (size_t)max_int(s_tiles1, s_tiles2);
    return p;
}

/* Everything one forward call needs besides the state; freed as a whole. */
typedef struct {
    blas_plan plan;
    float *xf;          /* [T, D] fp32 input, non-finite rows zeroed */
    unsigned char *finite; /* [T] */
    float *logits;      /* [T, G] */
    int32_t *ids;       /* [T, K] */
    float *weights;     /* [T, K+S] */
    int *count;         /* [E] tokens per local expert */
    int *offset;        /* [E+1] first pair of each local expert */
    int *pair_token;    /* [T*K] token of each (expert, token) pair, grouped by expert */
    int *slot_pair;     /* [T*K] pair of token t's slot k, or -1 when not held here */
    float *xg;          /* [P, D] gathered inputs */
    float *hg;          /* [P, I_local] routed h */
    float *yg;          /* [P, D] routed y */
    float *gamma;       /* [S, T] sink gammas, 0 on non-finite rows */
    float *hs;          /* [T, S, sink_I_local] sink h */
    float *ys;          /* [S, T, D] per-sink y; ys[0] becomes the sink sum */
    float *scratch;     /* [n_threads, plan.per_thread] */
    blas_item *items;   /* work lists */
    unsigned char *fused; /* [E] whether expert e takes the fused kernels */
    uint16_t *xa;       /* [P, blas_fused_stride(D)] arranged rows of fused experts */
    uint16_t *ha;       /* [P, blas_fused_stride(I_local)] arranged h of fused experts */
    blas_act_range *pair_range; /* [P] range of each arranged input row */
    blas_act_range *item_range; /* [items] range of the h values each GEMM1 item arranged */
    blas_act_range *range1, *range2; /* [E] merged over each expert's inputs and h */
} blas_work;

static void work_free(blas_work *w) {
    free(w->xf);
    free(w->finite);
    free(w->logits);
    free(w->ids);
    free(w->weights);
    free(w->count);
    free(w->offset);
    free(w->pair_token);
    free(w->slot_pair);
    free(w->xg);
    free(w->hg);
    free(w->yg);
    free(w->gamma);
    free(w->hs);
    free(w->ys);
    free(w->scratch);
    free(w->items);
    free(w->fused);
    free(w->xa);
    free(w->ha);
    free(w->pair_range);
    free(w->item_range);
    free(w->range1);
    free(w->range2);
}

static void *alloc_or_flag(size_t n, size_t size, bool *failed) {
    void *p = malloc((n ? n : 1) * size);
    if (!p) *failed = true;
    return p;
}

/* The buffers sized by T (and the plan's items and scratch); false if one could not be had. */
static bool work_alloc_tokens(blas_work *w, const moe_shard *sh, int T, int nt) {
    const moe_config *c = &sh->cfg;
    const size_t t = (size_t)T, TD = t * (size_t)c->D, K = (size_t)c->K, S = (size_t)c->S;
    const size_t E = (size_t)sh->n_local_experts;
    bool nomem = false;
    w->xf = alloc_or_flag(TD, sizeof(float), &nomem);
    w->finite = alloc_or_flag(t, 1, &nomem);
    w->logits = alloc_or_flag(t * (size_t)(c->R + c->S), sizeof(float), &nomem);
    w->ids = alloc_or_flag(t * K, sizeof(int32_t), &nomem);
    w->weights = alloc_or_flag(t * (K + S), sizeof(float), &nomem);
    w->count = alloc_or_flag(E, sizeof(int), &nomem);
    w->offset = alloc_or_flag(E + 1, sizeof(int), &nomem);
    w->pair_token = alloc_or_flag(t * K, sizeof(int), &nomem);
    w->slot_pair = alloc_or_flag(t * K, sizeof(int), &nomem);
    w->gamma = alloc_or_flag(S * t, sizeof(float), &nomem);
    w->hs = alloc_or_flag(t * S * (size_t)sh->sink_I_local, sizeof(float), &nomem);
    w->ys = alloc_or_flag((S > 0 ? S : 1) * TD, sizeof(float), &nomem);
    w->scratch = alloc_or_flag((size_t)nt * w->plan.per_thread, sizeof(float), &nomem);
    w->items = alloc_or_flag(w->plan.max_items, sizeof(blas_item), &nomem);
    return !nomem;
}

/* The buffers sized by the P routed (expert, token) pairs; false if one could not be had. */
static bool work_alloc_pairs(blas_work *w, const moe_shard *sh, int P) {
    const size_t p = (size_t)P, D = (size_t)sh->cfg.D, IL = (size_t)sh->I_local;
    const size_t E = (size_t)sh->n_local_experts;
    bool nomem = false;
    w->xg = alloc_or_flag(p * D, sizeof(float), &nomem);
    w->hg = alloc_or_flag(p * IL, sizeof(float), &nomem);
    w->yg = alloc_or_flag(p * D, sizeof(float), &nomem);
    w->fused = alloc_or_flag(E, 1, &nomem);
    w->xa = alloc_or_flag(p * blas_fused_stride((int)D), sizeof(uint16_t), &nomem);
    w->ha = alloc_or_flag(p * blas_fused_stride((int)IL), sizeof(uint16_t), &nomem);
    w->pair_range = alloc_or_flag(p, sizeof(blas_act_range), &nomem);
    w->item_range = alloc_or_flag(w->plan.max_items, sizeof(blas_act_range), &nomem);
    w->range1 = alloc_or_flag(E, sizeof(blas_act_range), &nomem);
    w->range2 = alloc_or_flag(E, sizeof(blas_act_range), &nomem);
    return !nomem;
}

/* Groups the finite tokens' slots by local expert, in token order within an expert. */
static int group_by_expert(const moe_shard *sh, int T, blas_work *w) {
    const int K = sh->cfg.K, E = sh->n_local_experts;
    memset(w->count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K && w->finite[t]; k++) {
            int e = w->ids[(size_t)t * K + k] - sh->expert_first;
            if (e >= 0 && e < E) w->count[e]++;
        }
    w->offset[0] = 0;
    for (int e = 0; e < E; e++) w->offset[e + 1] = w->offset[e] + w->count[e];
    memset(w->count, 0, (size_t)E * sizeof(int)); /* reused as the fill cursor */
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) {
            int e = w->ids[(size_t)t * K + k] - sh->expert_first;
            int *slot = &w->slot_pair[(size_t)t * K + k];
            *slot = -1;
            if (!w->finite[t] || e < 0 || e >= E) continue;
            *slot = w->offset[e] + w->count[e]++;
            w->pair_token[*slot] = t;
        }
    return w->offset[E];
}

/* Gathers the input rows of every pair, and arranges those of fused experts (xa) with their
 * ranges merged per expert (range1); zeroes the padding of their arranged h rows (ha). */
static void gather_rows(blas_work *w, int E, int D, int IL, int nt) {
    const size_t sD = blas_fused_stride(D), sI = blas_fused_stride(IL);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) \
    if (w->offset[E] >= BLAS_PARALLEL_TOKENS)
    for (int e = 0; e < E; e++)
        for (int q = w->offset[e]; q < w->offset[e + 1]; q++) {
            float *row = w->xg + (size_t)q * D;
            memcpy(row, w->xf + (size_t)w->pair_token[q] * D, (size_t)D * sizeof(float));
            if (!w->fused[e]) continue;
            w->pair_range[q] = blas_fused_arrange(row, D, w->xa + (size_t)q * sD);
            blas_fused_zero_padding(IL, w->ha + (size_t)q * sI);
        }
    for (int e = 0; e < E; e++) {
        w->range1[e] = BLAS_ACT_RANGE_EMPTY;
        for (int q = w->offset[e]; w->fused[e] && q < w->offset[e + 1]; q++)
            w->range1[e] = blas_act_range_merge(w->range1[e], w->pair_range[q]);
    }
}

/* GEMM1's h of channels [j0, j0+len) for n rows (hg [n, IL]) arranged into ha [n, stride];
 * returns their range. */
static blas_act_range arrange_h(const float *hg, int n, int IL, int j0, int len, uint16_t *ha) {
    blas_act_range r = BLAS_ACT_RANGE_EMPTY;
    for (int p = 0; p < n; p++)
        r = blas_act_range_merge(r, blas_fused_arrange_cols(hg + (size_t)p * IL, j0, j0 + len,
                                                            ha + (size_t)p * blas_fused_stride(IL)));
    return r;
}

/* Input to fp32, each row's finiteness noted; non-finite rows zeroed so no NaN enters a GEMM. */
static void input_to_f32(blas_work *w, const uint16_t *x, int T, int D, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (T >= BLAS_PARALLEL_TOKENS)
    for (int t = 0; t < T; t++) {
        const uint16_t *x_t = x + (size_t)t * D;
        float *row = w->xf + (size_t)t * D;
        w->finite[t] = moe_row_finite(x_t, D);
        for (int d = 0; d < D; d++) row[d] = w->finite[t] ? moe_bf16_to_f32(x_t[d]) : 0.0f;
    }
}

/* Gate logits [T, G], in fixed chunks of tokens. */
static void gate_logits(const blas_state *s, blas_work *w, int T) {
    const int D = s->shard->cfg.D, G = s->shard->cfg.R + s->shard->cfg.S;
    const int gate_chunks = (T + BLAS_GATE_CHUNK - 1) / BLAS_GATE_CHUNK;
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1) if (gate_chunks > 1)
    for (int ch = 0; ch < gate_chunks; ch++) {
        int t0 = ch * BLAS_GATE_CHUNK, n = T - t0 < BLAS_GATE_CHUNK ? T - t0 : BLAS_GATE_CHUNK;
        times_tile(n, G, D, w->xf + (size_t)t0 * D, D, s->gate_f32, w->logits + (size_t)t0 * G, G);
    }
}

/* Selection and weights (the shared CPU routing), and the sink gammas [S, T] (0 on non-finite
 * rows, whose routing follows the shared rule). */
static void route_tokens(const blas_state *s, blas_work *w, int T) {
    const moe_shard *sh = s->shard;
    const moe_config *c = &sh->cfg;
    const int R = c->R, K = c->K, S = c->S, G = R + S, KS = K + S;
#pragma omp parallel for num_threads(s->n_threads) schedule(static) if (T >= BLAS_PARALLEL_TOKENS)
    for (int t = 0; t < T; t++) {
        float *lg = w->logits + (size_t)t * G, *wt = w->weights + (size_t)t * KS;
        int32_t *id = w->ids + (size_t)t * K;
        if (w->finite[t])
            moe_route_token(lg, sh->gate_bias, R, K, S, c->route_scale, sh->global_scale, id, wt);
        else
            moe_nonfinite_route(c, lg, id, wt);
        for (int sk = 0; sk < S; sk++) w->gamma[(size_t)sk * T + t] = w->finite[t] ? wt[K + sk] : 0.0f;
    }
}

/* An item's weights and rows: its expert's views, and (routed) its pairs [q0, q0 + n). */
typedef struct {
    moe_matrix w13, w2;
    int sink; /* sink index, or -1 for a routed expert */
    int q0, n;
} item_operands;

static item_operands operands_of(const moe_shard *sh, const blas_work *w, blas_item it) {
    item_operands o = {.sink = -1};
    if (it.expert >= 0) {
        moe_routed_matrices(sh, it.expert, &o.w13, &o.w2);
        o.q0 = w->offset[it.expert], o.n = w->offset[it.expert + 1] - o.q0;
    } else {
        o.sink = -1 - it.expert;
        moe_sink_matrices(sh, o.sink, &o.w13, &o.w2);
    }
    return o;
}

/* GEMM1 (+ h) of item i: a routed expert's channel tile on its rows (fused kernels or decoded
 * tile), or a sink's on every token. tile: this thread's scratch. */
static void gemm1_item(const blas_state *s, blas_work *w, int T, int i, float *tile) {
    const moe_shard *sh = s->shard;
    const int D = sh->cfg.D, S = sh->cfg.S, IL = sh->I_local, SIL = sh->sink_I_local;
    const blas_item it = w->items[i];
    const item_operands o = operands_of(sh, w, it);
    float *gu = tile + w->plan.tile_floats;
    if (o.sink >= 0) {
        gemm1_tile(&o.w13, w->xf, T, D, w->gamma + (size_t)o.sink * T, it.start, it.len, tile, gu,
                   w->hs + (size_t)o.sink * SIL, S * SIL);
        return;
    }
    float *h = w->hg + (size_t)o.q0 * IL;
    w->item_range[i] = BLAS_ACT_RANGE_EMPTY;
    if (!w->fused[it.expert]) {
        gemm1_tile(&o.w13, w->xg + (size_t)o.q0 * D, o.n, D, NULL, it.start, it.len, tile, gu, h, IL);
        return;
    }
    blas_fused_rows(&o.w13, s->scales13[it.expert], 2 * it.start, 2 * it.len,
                    w->xa + (size_t)o.q0 * blas_fused_stride(D), o.n, w->range1[it.expert], gu,
                    2 * it.len);
    h_from_gu(gu, o.n, it.len, NULL, it.start, h, IL);
    w->item_range[i] = arrange_h(h, o.n, IL, it.start, it.len,
                                 w->ha + (size_t)o.q0 * blas_fused_stride(IL));
}

/* GEMM2 of item i: a routed expert's output-row tile on its rows, or a sink's on every token. */
static void gemm2_item(const blas_state *s, blas_work *w, int T, int i, float *tile) {
    const moe_shard *sh = s->shard;
    const int D = sh->cfg.D, S = sh->cfg.S, IL = sh->I_local, SIL = sh->sink_I_local;
    const blas_item it = w->items[i];
    const item_operands o = operands_of(sh, w, it);
    if (o.sink >= 0)
        gemm2_tile(&o.w2, w->hs + (size_t)o.sink * SIL, S * SIL, T, it.start, it.len, tile,
                   w->ys + (size_t)o.sink * T * D, D);
    else if (w->fused[it.expert])
        blas_fused_rows(&o.w2, s->scales2[it.expert], it.start, it.len,
                        w->ha + (size_t)o.q0 * blas_fused_stride(IL), o.n, w->range2[it.expert],
                        w->yg + (size_t)o.q0 * D + it.start, D);
    else
        gemm2_tile(&o.w2, w->hg + (size_t)o.q0 * IL, IL, o.n, it.start, it.len, tile,
                   w->yg + (size_t)o.q0 * D, D);
}

/* Both GEMM phases over their work items (experts x tiles, then sinks x tiles), in a fixed
 * order; between them, the range of each fused expert's h merged from its GEMM1 items. */
static void run_gemms(const blas_state *s, blas_work *w, int T) {
    const moe_shard *sh = s->shard;
    const int D = sh->cfg.D, S = sh->cfg.S, E = sh->n_local_experts;
    const blas_plan *pl = &w->plan;
    int n_items = list_items(w->items, E, w->offset, sh->I_local, pl->r_ch, S, T,
                             sh->sink_I_local, pl->s_ch);
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1)
    for (int i = 0; i < n_items; i++)
        gemm1_item(s, w, T, i, w->scratch + (size_t)omp_get_thread_num() * pl->per_thread);

    for (int e = 0; e < E; e++) w->range2[e] = BLAS_ACT_RANGE_EMPTY;
    for (int i = 0; i < n_items; i++)
        if (w->items[i].expert >= 0 && w->fused[w->items[i].expert])
            w->range2[w->items[i].expert] =
                blas_act_range_merge(w->range2[w->items[i].expert], w->item_range[i]);

    n_items = list_items(w->items, E, w->offset, D, pl->r_rows, S, T, D, pl->s_rows);
#pragma omp parallel for num_threads(s->n_threads) schedule(dynamic, 1)
    for (int i = 0; i < n_items; i++)
        gemm2_item(s, w, T, i, w->scratch + (size_t)omp_get_thread_num() * pl->per_thread);
}

/* Output: slots in order, then the sink sum (itself summed in sink order, kept in ys[0] for
 * the stages), rounded to bf16 once; non-finite rows by the shared rule. */
static void combine_output(const blas_state *s, blas_work *w, int T, float *out) {
    const moe_config *c = &s->shard->cfg;
    const int D = c->D, K = c->K, S = c->S, KS = K + S;
    const size_t TD = (size_t)T * D;
#pragma omp parallel for num_threads(s->n_threads) schedule(static) if (T >= BLAS_PARALLEL_TOKENS)
    for (int t = 0; t < T; t++) {
        float *o = out + (size_t)t * D, *sink_sum = w->ys + (size_t)t * D;
        if (!w->finite[t]) {
            moe_nonfinite_output(c, o);
            continue;
        }
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int k = 0; k < K; k++) {
            int q = w->slot_pair[(size_t)t * K + k];
            if (q < 0) continue;
            const float wk = w->weights[(size_t)t * KS + k], *y = w->yg + (size_t)q * D;
            for (int d = 0; d < D; d++) o[d] += wk * y[d];
        }
        for (int d = 0; d < D; d++) {
            float sum = 0.0f;
            for (int sk = 0; sk < S; sk++) sum += w->ys[(size_t)sk * TD + (size_t)t * D + d];
            sink_sum[d] = sum;
            o[d] = moe_round_bf16(o[d] + sum);
        }
    }
}

/* The stages asked for, by the shared export rules (zeros for a slot that ran no expert, NaN
 * sinks for a non-finite token). */
static void export_stages(const moe_shard *sh, int T, const blas_work *w, moe_stages *st) {
    if (!st) return;
    const int D = sh->cfg.D, K = sh->cfg.K, IL = sh->I_local;
    const size_t SH = (size_t)sh->cfg.S * sh->sink_I_local;
    moe_stages_put_route(st, &sh->cfg, 0, T, w->logits, w->ids, w->weights);
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < K; k++) {
            const int q = w->slot_pair[(size_t)t * K + k];
            moe_stages_put_slot(st, sh, t, k, q < 0 ? NULL : w->hg + (size_t)q * IL,
                                q < 0 ? NULL : w->yg + (size_t)q * D);
        }
        const bool f = w->finite[t];
        moe_stages_put_sinks(st, sh, t, f ? w->hs + (size_t)t * SH : NULL,
                             f ? w->ys + (size_t)t * D : NULL);
    }
    st->filled = moe_stages_wanted(st);
}

/* The five stages: input, gate, routing, experts (grouped, both GEMMs) and sinks, output. */
static moe_status compute(const blas_state *s, blas_work *w, int T, const uint16_t *x, float *out,
                          moe_error *err) {
    const moe_shard *sh = s->shard;
    const int D = sh->cfg.D, E = sh->n_local_experts;
    input_to_f32(w, x, T, D, s->n_threads);
    gate_logits(s, w, T);
    route_tokens(s, w, T);
    const int P = group_by_expert(sh, T, w);
    if (!work_alloc_pairs(w, sh, P))
        return moe_fail(err, MOE_ERR_NOMEM, "blas: out of memory for %d routed token rows", P);
    /* Small MXFP4 groups take the fused kernels (a function of the group sizes only). */
    for (int e = 0; e < E; e++) {
        const int n = w->offset[e + 1] - w->offset[e];
        w->fused[e] = s->scales13 && n > 0 && n < fused_below;
    }
    gather_rows(w, E, D, sh->I_local, s->n_threads);
    run_gemms(s, w, T);
    combine_output(s, w, T, out);
    return MOE_OK;
}

static moe_status blas_forward(void *p, int T, const uint16_t *x, float *out, moe_stages *st,
                               moe_error *err) {
    const blas_state *s = p;
    blas_work w;
    memset(&w, 0, sizeof w);
    w.plan = plan_of(s->shard, T);
    if (!work_alloc_tokens(&w, s->shard, T, s->n_threads)) {
        work_free(&w);
        return moe_fail(err, MOE_ERR_NOMEM, "blas: out of memory for the work buffers of T = %d", T);
    }
    /* sgemm's bits depend on OpenBLAS's thread count: one thread inside every call. */
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    moe_status status = compute(s, &w, T, x, out, err);
    openblas_set_num_threads(blas_threads);
    if (status == MOE_OK) export_stages(s->shard, T, &w, st);
    work_free(&w);
    return status;
}

static moe_status blas_route(void *p, int T, const float *logits, int32_t *ids, float *weights,
                             moe_error *err) {
    (void)err;
    const blas_state *s = p;
    moe_route_tokens(s->shard, T, logits, ids, weights);
    return MOE_OK;
}

const moe_backend moe_backend_blas = {
    "blas",
    "OpenBLAS CPU path: sgemm on exactly decoded fp32 tiles, grouped by expert (serving only)",
    blas_available,
    blas_supports,
    blas_create,
    blas_forward,
    blas_route,
    blas_destroy,
    blas_shape_hints,
};
