/*
 * bound_backend.h: moe_backend tables made at run time for paths that carry data of their own
 * (a loaded plugin, an external command), since a moe_backend's available(), supports() and
 * create() receive no pointer to their own table.
 *
 * Rules: a fixed pool of MOE_BOUND_SLOTS tables, each with thunks that pass the slot's context
 * to the ops; a slot is taken for the life of the process (paths are opened once per command);
 * forward, route and destroy act on the state create made, so they are the ops' own.
 */
#ifndef INKLING_BOUND_BACKEND_H
#define INKLING_BOUND_BACKEND_H

#include "../common/moe.h"

#define MOE_BOUND_SLOTS 16

typedef struct {
    bool (*available)(void *ctx, char *why, size_t why_len);
    bool (*supports)(void *ctx, const moe_config *cfg, const moe_split *split,
                     const moe_options *opt, char *why, size_t why_len);
    moe_status (*create)(void *ctx, const moe_shard *shard, const moe_options *opt, void **state,
                         moe_error *err);
    moe_status (*forward)(void *state, int T, const uint16_t *x, float *out, moe_stages *stages,
                          moe_error *err);
    moe_status (*route)(void *state, int T, const float *logits, int32_t *ids, float *weights,
                        moe_error *err); /* may be NULL */
    void (*destroy)(void *state);
} moe_bound_ops;

/* A table named name (copied) calling ops with ctx, declaring hints (may be NULL; moe.h);
 * NULL plus err when every slot is taken. */
const moe_backend *moe_bound_backend(const char *name, const char *description,
                                     const moe_bound_ops *ops, void *ctx,
                                     const moe_shape_hint *hints, moe_error *err);

#endif
