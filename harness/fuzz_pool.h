/*
 * fuzz_pool.h: live layers kept from one case to the next, so that a path's backend instance
 * carries a history (the fuzzer's stress mode and sequence replay; docs/harness.md).
 *
 * Rules:
 *   - an entry is one split of one layer on one backend under one set of options: the shards of
 *     its n ranks and a moe_layer made from each. It is found again when the backend, the
 *     options, the configuration, the split and the bytes of the full layer's weights are the
 *     same, so a case with the same layer and another input (another T) runs on the same
 *     instance, after every call made on it before;
 *   - an entry is made on first use; past the byte budget (the layer weights the entries hold)
 *     the least recently used entries are destroyed, the newest one always stays. The counts of
 *     entries made, runs that reused one, and entries destroyed are kept for the report;
 *   - a backend that cannot make the layer (unavailable, unsupported, error) leaves no entry.
 */
#ifndef INKLING_FUZZ_POOL_H
#define INKLING_FUZZ_POOL_H

#include "../common/moe.h"

typedef struct fuzz_pool fuzz_pool;

typedef struct {
    long made;    /* entries made (fresh instances) */
    long reused;  /* lookups answered by a live entry */
    long evicted; /* entries destroyed for the byte budget */
} fuzz_pool_stats;

/* NULL when out of memory. max_bytes: the weight bytes the entries may hold together. */
fuzz_pool *fuzz_pool_new(size_t max_bytes);
void fuzz_pool_free(fuzz_pool *p);

/* The live layers [n] (n = 1 unsplit) of split (kind, n, pad) of the layer (cfg, w) on be with
 * opt: those of a live entry with the same key, else new ones. *layers stays valid until the
 * next call on the pool. */
moe_status fuzz_pool_layers(fuzz_pool *p, const moe_backend *be, const moe_options *opt,
                            const moe_config *cfg, const moe_weights *w, moe_split_kind kind,
                            int n, int pad, moe_layer *const **layers, moe_error *err);

fuzz_pool_stats fuzz_pool_stats_of(const fuzz_pool *p);

#endif
