/*
 * lab_tiles.c: how full the routed experts' row tiles are at T: a line of every timed T, and
 * `inkling-moe lab --tiles`, which routes on the host and needs no GPU.
 *
 * Rules:
 *   - an expert with c routed rows makes ceil(c / bn) tiles of bn rows; a tile's n is wgmma's n
 *     on the kernel that takes it (wgmma_n below: its rows rounded up to 16, or to 8 on the
 *     32-row kernel, at least 16; docs/cuda-path.md). A tile's time has a part that
 *     grows with n and a part that does not (its weights' decode, its start and its end), so
 *     both the tile count and the rows a tile holds matter: the CUDA path picks one tile size a
 *     call from the average T * K / R (cuda_backend.cu, wgmma_for), which a skewed routing
 *     leaves far from the tiles' real rows. So the path runs tiers of tile sizes above a few
 *     rows an expert (cuda_experts_wgmma.cu, launch_tiers): the tiles of the largest size, each
 *     taken by the smallest kernel that holds its rows left, which the third line shows;
 *   - --tiles routes every token of the lab's input at T (input 0, the one the checks use) as
 *     the reference does: the gate logits in double rounded once to fp32 (ref_gate_logits),
 *     then moe_route_tokens; tokens holding NaN or inf are not routed.
 * Library code: returns moe_status, never exits.
 */
#include "lab.h"

#include "common/numeric.h"
#include "common/routing.h"
#include "ref/ref.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The tile sizes of the wgmma kernels and their tiers, largest first (opt/cuda/cuda_backend.cu,
 * wgmma_kernels). */
static const int TILE_ROWS[] = {16, 32, 128};
static const int TIERS[][4] = {{128, 32, 16, 0}, {32, 16, 0, 0}}; /* 0 ends a list */

/* wgmma's n for a tile of `rows` real rows on the kernel of kernel_rows rows a tile, as the
 * kernels choose it (opt/cuda/cuda_wgmma_ptx.cuh, wg_mma_cols). */
static int wgmma_n(int rows, int kernel_rows) {
    if (kernel_rows <= 16) return kernel_rows;
    const int step = kernel_rows == 32 ? 8 : 16, n = (rows + step - 1) / step * step;
    return n < 16 ? 16 : n > kernel_rows ? kernel_rows : n;
}

lab_tiles lab_tier_of(const int *rows, int E, int table_m, int rows_above, int rows_at_most) {
    lab_tiles t = {table_m, 0, 0.0, 0.0};
    /* the kernel of a tier holds rows_at_most rows; the first tier's, the table's */
    const int kernel_rows = rows_at_most < table_m ? rows_at_most : table_m;
    long real = 0, padded = 0;
    for (int e = 0; e < E; e++)
        for (int row0 = 0; row0 < rows[e]; row0 += table_m) {
            const int left = rows[e] - row0, in_tile = left < table_m ? left : table_m;
            if (left <= rows_above || left > rows_at_most) continue;
            t.tiles++;
            real += in_tile;
            padded += wgmma_n(in_tile, kernel_rows);
        }
    if (t.tiles > 0) t.rows_per_tile = (double)real / t.tiles, t.n_per_tile = (double)padded / t.tiles;
    return t;
}

lab_tiles lab_tiles_of(const int *rows, int E, int bn) { return lab_tier_of(rows, E, bn, 0, INT_MAX); }

void lab_print_tiles(FILE *out, const int *rows, int E) {
    int used = 0, lo = 0, hi = 0;
    long total = 0;
    for (int e = 0; e < E; e++) {
        if (rows[e] > 0) used++;
        total += rows[e];
        lo = e == 0 || rows[e] < lo ? rows[e] : lo;
        hi = rows[e] > hi ? rows[e] : hi;
    }
    fprintf(out, "  routed rows an expert: %d of %d experts used, rows %d to %d, mean %.1f\n", used, E,
            lo, hi, E > 0 ? (double)total / E : 0.0);
    fprintf(out, "  tiles (real rows a tile, n a tile):");
    for (size_t i = 0; i < sizeof TILE_ROWS / sizeof TILE_ROWS[0]; i++) {
        const lab_tiles t = lab_tiles_of(rows, E, TILE_ROWS[i]);
        fprintf(out, "%s %d of %d rows (%.1f, %.1f)", i ? ";" : "", t.tiles, t.bn, t.rows_per_tile,
                t.n_per_tile);
    }
    fprintf(out, "\n  tiers (tiles a kernel: real rows a tile, n a tile):");
    for (size_t l = 0; l < sizeof TIERS / sizeof TIERS[0]; l++) {
        const int *sizes = TIERS[l];
        fprintf(out, "%s", l ? ";" : "");
        for (int i = 0; sizes[i]; i++) fprintf(out, "%s%d", i ? "," : " ", sizes[i]);
        for (int i = 0; sizes[i]; i++) {
            const int above = sizes[i + 1], at_most = i == 0 ? INT_MAX : sizes[i];
            const lab_tiles t = lab_tier_of(rows, E, sizes[0], above, at_most);
            fprintf(out, "%s %d on %d (%.1f, %.1f)", i ? "," : ":", t.tiles, sizes[i],
                    t.rows_per_tile, t.n_per_tile);
        }
    }
    fprintf(out, "\n");
}

moe_status lab_expert_rows(const moe_shard *sh, int T, const uint16_t *x, int *rows, moe_error *err) {
    const moe_config *cfg = &sh->cfg;
    const int D = cfg->D, R = cfg->R, K = cfg->K, S = cfg->S, G = R + S;
    memset(rows, 0, sizeof(int) * (size_t)R);
    float *logits = malloc(sizeof(float) * (size_t)T * G);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T * K);
    float *weights = malloc(sizeof(float) * (size_t)T * (K + S));
    unsigned char *bad = malloc((size_t)T);
    moe_status st = MOE_OK;
    if (!logits || !ids || !weights || !bad)
        st = moe_fail(err, MOE_ERR_NOMEM, "lab --tiles: out of memory routing %d tokens", T);
    if (!st) {
        int no_memory = 0;
#pragma omp parallel for schedule(static) reduction(| : no_memory)
        for (int t = 0; t < T; t++) {
            double *xd = malloc(sizeof(double) * (size_t)D);
            if (!xd) {
                no_memory = 1;
                continue;
            }
            bad[t] = 0;
            for (int d = 0; d < D; d++) {
                xd[d] = moe_bf16_to_f32(x[(size_t)t * D + d]);
                bad[t] |= !isfinite(xd[d]);
            }
            ref_gate_logits(xd, sh->gate_w, G, D, logits + (size_t)t * G);
            free(xd);
        }
        if (no_memory) st = moe_fail(err, MOE_ERR_NOMEM, "lab --tiles: out of memory for a token's row");
    }
    if (!st) {
        moe_route_tokens(sh, T, logits, ids, weights);
        for (int t = 0; t < T; t++)
            for (int k = 0; !bad[t] && k < K; k++)
                if (ids[(size_t)t * K + k] >= 0 && ids[(size_t)t * K + k] < R) rows[ids[(size_t)t * K + k]]++;
    }
    free(logits);
    free(ids);
    free(weights);
    free(bad);
    return st;
}

int lab_tiles_report(const lab_plan *p, FILE *out) {
    moe_error err;
    moe_error_clear(&err);
    moe_layer_data ld;
    moe_shard sh;
    moe_status st = lab_layer_build(p, "T from --tokens; routed on the host", out, &ld, &sh, &err);
    if (st) {
        fprintf(out, "lab: %s\n", err.msg);
        return 1;
    }
    const moe_config *cfg = &p->layer.cfg;
    int *rows = malloc(sizeof(int) * (size_t)cfg->R);
    if (!rows) st = moe_fail(&err, MOE_ERR_NOMEM, "lab --tiles: out of memory");
    for (int i = 0; i < p->n_tokens && !st; i++) {
        fuzz_case c = p->layer;
        c.T = p->tokens[i], c.sample = 0;
        uint16_t *x = NULL;
        st = fuzz_case_input(&c, &x, &err);
        if (!st) st = lab_expert_rows(&sh, c.T, x, rows, &err);
        free(x);
        if (st) break;
        fprintf(out, "T = %d (expected %.1f rows an expert)\n", c.T, (double)c.T * cfg->K / cfg->R);
        lab_print_tiles(out, rows, cfg->R);
        fflush(out);
    }
    if (st) fprintf(out, "lab: %s\n", err.msg);
    free(rows);
    moe_shard_free(&sh);
    moe_layer_data_free(&ld);
    return st ? 1 : 0;
}
