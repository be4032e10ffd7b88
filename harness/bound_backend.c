/* bound_backend.c: the pool of run-time backend tables (bound_backend.h). */
#include "bound_backend.h"

#include <stdio.h>

typedef struct {
    moe_backend table;
    const moe_bound_ops *ops;
    void *ctx;
    char name[64];
    char description[160];
} bound_slot;

static bound_slot slots[MOE_BOUND_SLOTS];
static int slots_used;

#define SLOT_THUNKS(i)                                                                           \
    static bool available_##i(char *why, size_t len) {                                           \
        return slots[i].ops->available(slots[i].ctx, why, len);                                  \
    }                                                                                            \
    static bool supports_##i(const moe_config *c, const moe_split *s, const moe_options *o,      \
                             char *why, size_t len) {                                            \
        return slots[i].ops->supports(slots[i].ctx, c, s, o, why, len);                          \
    }                                                                                            \
    static moe_status create_##i(const moe_shard *sh, const moe_options *o, void **st,          \
                                 moe_error *err) {                                               \
        return slots[i].ops->create(slots[i].ctx, sh, o, st, err);                               \
    }
SLOT_THUNKS(0)
SLOT_THUNKS(1)
SLOT_THUNKS(2)
SLOT_THUNKS(3)
SLOT_THUNKS(4)
SLOT_THUNKS(5)
SLOT_THUNKS(6)
SLOT_THUNKS(7)
SLOT_THUNKS(8)
SLOT_THUNKS(9)
SLOT_THUNKS(10)
SLOT_THUNKS(11)
SLOT_THUNKS(12)
SLOT_THUNKS(13)
SLOT_THUNKS(14)
SLOT_THUNKS(15)
#undef SLOT_THUNKS

#define THUNKS(i) {available_##i, supports_##i, create_##i}
static const struct {
    bool (*available)(char *, size_t);
    bool (*supports)(const moe_config *, const moe_split *, const moe_options *, char *, size_t);
    moe_status (*create)(const moe_shard *, const moe_options *, void **, moe_error *);
} thunks[MOE_BOUND_SLOTS] = {THUNKS(0),  THUNKS(1),  THUNKS(2),  THUNKS(3),  THUNKS(4),  THUNKS(5),
                             THUNKS(6),  THUNKS(7),  THUNKS(8),  THUNKS(9),  THUNKS(10), THUNKS(11),
                             THUNKS(12), THUNKS(13), THUNKS(14), THUNKS(15)};
#undef THUNKS

const moe_backend *moe_bound_backend(const char *name, const char *description,
                                     const moe_bound_ops *ops, void *ctx,
                                     const moe_shape_hint *hints, moe_error *err) {
    if (slots_used >= MOE_BOUND_SLOTS) {
        moe_fail(err, MOE_ERR_ARG, "path %s: at most %d external paths per run", name, MOE_BOUND_SLOTS);
        return NULL;
    }
    const int i = slots_used++;
    bound_slot *s = &slots[i];
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->description, sizeof s->description, "%s", description);
    s->ops = ops;
    s->ctx = ctx;
    moe_backend t = {s->name, s->description, thunks[i].available, thunks[i].supports,
                     thunks[i].create, ops->forward, ops->route, ops->destroy, hints};
    s->table = t;
    return &s->table;
}
