/*
 * fuzz_pool.c: live layers kept between cases (rules in fuzz_pool.h).
 *
 * The key holds a 64-bit hash of the full layer's weight bytes next to the configuration: two
 * layers of the same configuration whose weights differ anywhere get different entries (a hash
 * collision between the few layers of one run is the only way to confuse them).
 */
#include "fuzz_pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const moe_backend *be;
    moe_options opt;
    moe_config cfg;
    moe_split_kind kind;
    int n, pad;
    uint64_t hash;
    size_t bytes;
    unsigned long last_use;
    moe_shard *shards;  /* [n] */
    moe_layer **layers; /* [n] */
} pool_entry;

struct fuzz_pool {
    pool_entry *e;
    int n, cap;
    size_t max_bytes, bytes;
    unsigned long clock;
    fuzz_pool_stats stats;
};

fuzz_pool *fuzz_pool_new(size_t max_bytes) {
    fuzz_pool *p = calloc(1, sizeof *p);
    if (p) p->max_bytes = max_bytes;
    return p;
}

static void entry_free(pool_entry *e) {
    for (int r = 0; r < e->n; r++) {
        if (e->layers) moe_layer_destroy(e->layers[r]);
        if (e->shards) moe_shard_free(&e->shards[r]);
    }
    free(e->layers);
    free(e->shards);
    memset(e, 0, sizeof *e);
}

void fuzz_pool_free(fuzz_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) entry_free(&p->e[i]);
    free(p->e);
    free(p);
}

fuzz_pool_stats fuzz_pool_stats_of(const fuzz_pool *p) {
    fuzz_pool_stats none = {0, 0, 0};
    return p ? p->stats : none;
}

/* FNV-1a over 8-byte words (then the tail bytes), chained over the arrays. */
static uint64_t hash_bytes(uint64_t h, const void *data, size_t len) {
    const unsigned char *b = data;
    if (!b) return h * 0x100000001b3ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t word;
        memcpy(&word, b + i, 8);
        h = (h ^ word) * 0x100000001b3ull;
    }
    for (; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The hash of the weights the configuration reads, and their byte count. */
static uint64_t weights_hash(const moe_config *c, const moe_weights *w, size_t *bytes) {
    const size_t D = (size_t)c->D, I = (size_t)c->I, R = (size_t)c->R, S = (size_t)c->S;
    const bool mx = c->routed_format == MOE_ROUTED_MXFP4;
    const struct { const void *p; size_t len; } part[] = {
        {w->gate_w, (R + S) * D * 2},
        {c->has_gate_bias ? (const void *)w->gate_bias : NULL, c->has_gate_bias ? R * 4 : 0},
        {&w->global_scale, sizeof w->global_scale},
        {mx ? w->w13_mx : NULL, mx ? R * 2 * I * D / 2 : 0},
        {mx ? w->w13_scale : NULL, mx ? R * 2 * I * D / 32 : 0},
        {mx ? w->w2_mx : NULL, mx ? R * D * I / 2 : 0},
        {mx ? w->w2_scale : NULL, mx ? R * D * I / 32 : 0},
        {mx ? NULL : w->w13_bf16, mx ? 0 : R * 2 * I * D * 2},
        {mx ? NULL : w->w2_bf16, mx ? 0 : R * D * I * 2},
        {w->sink_w13, S * 2 * I * D * 2},
        {w->sink_w2, S * D * I * 2},
    };
    uint64_t h = 0xcbf29ce484222325ull;
    *bytes = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        h = hash_bytes(h, part[i].p, part[i].len);
        *bytes += part[i].len;
    }
    return h;
}

static bool same_key(const pool_entry *e, const pool_entry *k) {
    return e->be == k->be && e->opt.precision == k->opt.precision &&
           e->opt.n_threads == k->opt.n_threads &&
           e->opt.strict_nonfinite == k->opt.strict_nonfinite && e->opt.device == k->opt.device &&
           !memcmp(&e->cfg, &k->cfg, sizeof e->cfg) && e->kind == k->kind && e->n == k->n &&
           e->pad == k->pad && e->hash == k->hash;
}

/* Destroys least recently used entries (never the one at keep) while over the byte budget. */
static void evict(fuzz_pool *p, int keep) {
    while (p->bytes > p->max_bytes && p->n > 1) {
        int oldest = -1;
        for (int i = 0; i < p->n; i++)
            if (i != keep && (oldest < 0 || p->e[i].last_use < p->e[oldest].last_use)) oldest = i;
        p->bytes -= p->e[oldest].bytes;
        entry_free(&p->e[oldest]);
        p->e[oldest] = p->e[p->n - 1];
        if (keep == p->n - 1) keep = oldest;
        p->n--;
        p->stats.evicted++;
    }
}

/* Builds the shards and layers of the entry k (key filled) from w. */
static moe_status entry_make(pool_entry *k, const moe_weights *w, moe_error *err) {
    k->shards = calloc((size_t)k->n, sizeof *k->shards);
    k->layers = calloc((size_t)k->n, sizeof *k->layers);
    if (!k->shards || !k->layers) return moe_fail(err, MOE_ERR_NOMEM, "pool: out of memory");
    for (int r = 0; r < k->n; r++) {
        moe_split split = {k->kind, k->n, r, k->pad};
        moe_status st = moe_shard_build(&k->cfg, w, &split, &k->shards[r], err);
        if (!st) st = moe_layer_create(k->be, &k->shards[r], &k->opt, &k->layers[r], err);
        if (st) return st;
    }
    return MOE_OK;
}

moe_status fuzz_pool_layers(fuzz_pool *p, const moe_backend *be, const moe_options *opt,
                            const moe_config *cfg, const moe_weights *w, moe_split_kind kind,
                            int n, int pad, moe_layer *const **layers, moe_error *err) {
    if (!p || !be || !opt || !cfg || !w || !layers) return moe_fail(err, MOE_ERR_ARG, "pool: NULL argument");
    pool_entry k;
    memset(&k, 0, sizeof k);
    k.be = be, k.opt = *opt, k.cfg = *cfg, k.kind = kind, k.n = kind == MOE_SPLIT_NONE ? 1 : n, k.pad = pad;
    moe_split first = {kind, k.n, 0, pad};
    moe_status st = moe_split_validate(cfg, &first, err);
    if (st) return st;
    k.hash = weights_hash(cfg, w, &k.bytes);
    k.last_use = ++p->clock;
    for (int i = 0; i < p->n; i++)
        if (same_key(&p->e[i], &k)) {
            p->e[i].last_use = k.last_use;
            p->stats.reused++;
            *layers = p->e[i].layers;
            return MOE_OK;
        }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        pool_entry *grown = realloc(p->e, (size_t)cap * sizeof *grown);
        if (!grown) return moe_fail(err, MOE_ERR_NOMEM, "pool: out of memory for %d entries", cap);
        p->e = grown, p->cap = cap;
    }
    st = entry_make(&k, w, err);
    if (st) {
        entry_free(&k);
        return st;
    }
    p->e[p->n++] = k;
    p->bytes += k.bytes;
    p->stats.made++;
    evict(p, p->n - 1);
    for (int i = 0; i < p->n; i++)
        if (p->e[i].last_use == k.last_use) *layers = p->e[i].layers;
    return MOE_OK;
}
