/*
 * fuzz_aim.c: cases aimed at the paths' declared tiling and threshold constants (moe.h,
 * moe_shape_hint), so that code behind a size threshold is reached by a few small cases.
 *
 * Rules:
 *   - one hint is drawn from every registered path's list (a path not built still declares its
 *     constants), a kind first, then a hint of that kind; the case's shape is set so that it
 *     lands on the constant:
 *       tokens        T = v - 1, v, v + 1, 2v or 2v + 1 on a narrow layer;
 *       expert rows   T = v - 1, v or v + 1 with `few` (every finite token selects the same
 *                     boosted experts), so one expert gets exactly those rows;
 *       tile elements w2 [D, I] or w13 [2I, D] cut into exactly one tile, several whole ones,
 *                     or whole ones and a partial last one (tile rows = v / cols, MXFP4-aligned);
 *       width         D or I a multiple of v, or one 32-block either side;
 *   - aimed cases stay cheap: few experts, tokens and sinks on the wide ones; the split is
 *     none or EP (which keeps I_local = I), so the tile arithmetic holds on every rank;
 *   - everything is drawn from the rng given, so a suite's case i stays a function of
 *     (suite, seed, i); the case line says the shape, so a replay needs no aiming.
 */
#include "fuzz_case.h"

#include <stdbool.h>
#include <stddef.h>

#define AIM_MAX_HINTS 64
#define AIM_MAX_DIM 4096 /* widest aimed D or I: aimed cases stay cheap */

/* Every registered path's hints: out [cap]; returns the count. */
static int all_hints(const moe_shape_hint **out, int cap) {
    int n = 0;
    for (int b = 0; b < moe_backend_count(); b++) {
        const moe_shape_hint *h = moe_backend_at(b)->shape_hints;
        for (; h && h->name && n < cap; h++) out[n++] = h;
    }
    return n;
}

/* A multiple of 32 in [lo, hi], or 0 if there is none. */
static int multiple_of_32(moe_rng *rng, long lo, long hi) {
    long a = (lo + 31) / 32, b = hi / 32;
    if (lo < 32) a = 1;
    return a > b ? 0 : 32 * moe_rng_int(rng, (int)a, (int)b);
}

/* The tiled extent (a multiple of 32) for tiles of `unit` along it: n whole tiles, or n - 1
 * whole ones and a partial last one. 0 when no multiple of 32 does it. */
static int tiled_extent(moe_rng *rng, int unit, int n, bool partial) {
    if (!partial) return unit % 32 == 0 ? n * unit : 0;
    return multiple_of_32(rng, (long)(n - 1) * unit + 1, (long)n * unit - 1);
}

/* Few experts around the aimed dimensions: at most 4 experts, 2 slots, 1 sink. */
static void keep_experts_cheap(fuzz_case *c, moe_rng *rng) {
    c->cfg.R = moe_rng_int(rng, 1, 4);
    c->cfg.K = moe_rng_int(rng, 1, c->cfg.R < 2 ? c->cfg.R : 2);
    c->cfg.S = moe_rng_int(rng, 0, 1);
}

/* A small layer around the aimed dimensions: few experts and at most 3 tokens. */
static void keep_cheap(fuzz_case *c, moe_rng *rng) {
    keep_experts_cheap(c, rng);
    c->T = moe_rng_int(rng, 1, 3);
}

/* Tiles of about v elements: w2 [D, I] in tiles of v / I rows, or w13 [2I, D] in tiles of
 * v / (2D) channels. Returns false when v leaves no MXFP4-aligned choice. */
static bool aim_tiles(fuzz_case *c, long v, moe_rng *rng) {
    const bool w13 = moe_rng_int(rng, 0, 1);
    const long per = w13 ? v / 2 : v; /* tile = per / cols units (rows of w2, channels of w13) */
    const bool partial = moe_rng_int(rng, 0, 2) > 0; /* the case a tiler most likely drops */
    const int n = partial ? moe_rng_int(rng, 2, 3) : moe_rng_int(rng, 1, 3);
    int cols = 0;
    if (!partial) { /* whole tiles need a unit that is a multiple of 32 */
        long unit = 32L << moe_rng_int(rng, 0, 2);
        if (per % unit == 0 && (per / unit) % 32 == 0) cols = (int)(per / unit);
    } else {
        cols = multiple_of_32(rng, per / 256, per / 32); /* a unit of 32..256 */
    }
    if (cols < 32 || cols > AIM_MAX_DIM) return false;
    const int extent = tiled_extent(rng, (int)(per / cols), n, partial);
    if (extent < 32 || extent > AIM_MAX_DIM) return false;
    keep_cheap(c, rng);
    c->cfg.D = w13 ? cols : extent;
    c->cfg.I = w13 ? extent : cols;
    return true;
}

/* D or I a multiple of v, or one 32-block either side; the other dimension narrow. */
static bool aim_width(fuzz_case *c, long v, moe_rng *rng) {
    long w = v * moe_rng_int(rng, 1, 3) + 32L * moe_rng_int(rng, -1, 1);
    w = w / 32 * 32;
    if (w < 32 || w > 1024) return false;
    keep_cheap(c, rng);
    int other = 32 * moe_rng_int(rng, 1, 3);
    bool on_d = moe_rng_int(rng, 0, 1);
    c->cfg.D = on_d ? (int)w : other;
    c->cfg.I = on_d ? other : (int)w;
    return true;
}

/* T at a token cut-off v: one below, at, one above, or two chunks (whole or with one more). */
static bool aim_tokens(fuzz_case *c, long v, moe_rng *rng) {
    static const int mul[5] = {1, 1, 1, 2, 2}, add[5] = {-1, 0, 1, 0, 1};
    int i = moe_rng_int(rng, 0, 4);
    long T = v * mul[i] + add[i];
    if (T < 0 || T > 4096) return false;
    c->T = (int)T;
    c->cfg.D = 32 * moe_rng_int(rng, 1, 2);
    c->cfg.I = 32 * moe_rng_int(rng, 1, 2);
    if (T > 64) keep_experts_cheap(c, rng); /* cut-offs up to 512: T up to 1025 stays cheap */
    if (c->T == 0) c->features &= ~(unsigned)(FZ_NONFINITE | FZ_ALLHIT);
    return true;
}

/* One expert with exactly v - 1, v or v + 1 token rows: `few` sends every finite token to the
 * same boosted experts, and no input row is non-finite. */
static bool aim_expert_rows(fuzz_case *c, long v, moe_rng *rng) {
    long T = v + moe_rng_int(rng, -1, 1);
    if (T < 1 || T > 4096) return false;
    c->T = (int)T;
    c->cfg.D = 32 * moe_rng_int(rng, 1, 2);
    c->cfg.I = 32 * moe_rng_int(rng, 1, 2);
    c->cfg.has_gate_bias = true;
    c->features = (c->features | FZ_FEW) & ~(unsigned)(FZ_NONFINITE | FZ_ALLHIT);
    return true;
}

/* A hint drawn kind first (each kind declared by some path equally likely), then among the
 * hints of that kind: a path with many width blocks does not crowd out the one weight tile. */
static const moe_shape_hint *draw_hint(moe_rng *rng) {
    const moe_shape_hint *hints[AIM_MAX_HINTS];
    const int n = all_hints(hints, AIM_MAX_HINTS);
    int kinds[8], n_kinds = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < n_kinds; k++) seen = seen || kinds[k] == (int)hints[i]->kind;
        if (!seen && n_kinds < 8) kinds[n_kinds++] = (int)hints[i]->kind;
    }
    if (n_kinds == 0) return NULL;
    const int kind = kinds[moe_rng_int(rng, 0, n_kinds - 1)];
    int of_kind = 0;
    for (int i = 0; i < n; i++) of_kind += (int)hints[i]->kind == kind;
    int pick = moe_rng_int(rng, 0, of_kind - 1);
    for (int i = 0; i < n; i++)
        if ((int)hints[i]->kind == kind && pick-- == 0) return hints[i];
    return NULL;
}

bool fuzz_case_aim(fuzz_case *c, moe_rng *rng) {
    const moe_shape_hint *h = draw_hint(rng);
    if (!h) return false;
    fuzz_case a = *c;
    bool ok = false;
    switch (h->kind) {
    case MOE_HINT_TOKENS: ok = aim_tokens(&a, h->value, rng); break;
    case MOE_HINT_EXPERT_ROWS: ok = aim_expert_rows(&a, h->value, rng); break;
    case MOE_HINT_TILE_ELEMENTS: ok = aim_tiles(&a, h->value, rng); break;
    case MOE_HINT_WIDTH: ok = aim_width(&a, h->value, rng); break;
    default: break;
    }
    if (!ok) return false;
    if (a.cfg.K > a.cfg.R) a.cfg.K = a.cfg.R;
    if (a.split == MOE_SPLIT_TP) a.split = MOE_SPLIT_EP; /* keeps I_local = I */
    a.pad = 0;
    while (a.split != MOE_SPLIT_NONE && a.n > 1) {
        moe_split s = {a.split, a.n, 0, 0};
        if (moe_split_validate(&a.cfg, &s, NULL) == MOE_OK) break;
        a.n--;
    }
    if (a.n <= 1) a.split = MOE_SPLIT_NONE, a.n = 1;
    if (fuzz_case_validate(&a, NULL)) return false;
    *c = a;
    return true;
}
