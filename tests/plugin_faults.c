/*
 * plugin_faults.c: plugins that fail on purpose, one fault per build (-DFAULT_<name>), for
 * tests/test_plugin.c: the host must refuse or report each, naming the plugin, and never pass it.
 *   abi      an ABI version the host does not speak      layout   a wrong layout fingerprint
 *   noentry  no inkling_moe_plugin symbol                 crash    forward dereferences NULL
 *   exit     forward calls exit(3)                        hang     forward never returns
 */
#include "moe_plugin.h"

#include <stdlib.h>
#include <unistd.h>

static bool fault_available(char *why, size_t len) {
    (void)why, (void)len;
    return true;
}

static bool fault_supports(const moe_config *c, const moe_split *s, const moe_options *o, char *why,
                           size_t len) {
    (void)c, (void)s, (void)o, (void)why, (void)len;
    return true;
}

static moe_status fault_create(const moe_shard *sh, const moe_options *o, void **state, moe_error *err) {
    (void)sh, (void)o, (void)err;
    *state = malloc(1);
    return *state ? MOE_OK : MOE_ERR_NOMEM;
}

static moe_status fault_forward(void *state, int T, const uint16_t *x, float *out, moe_stages *st,
                                moe_error *err) {
    (void)state, (void)T, (void)x, (void)out, (void)st, (void)err;
#if defined(FAULT_crash)
    volatile int *nowhere = NULL;
    *nowhere = 1;
#elif defined(FAULT_exit)
    exit(3);
#elif defined(FAULT_hang)
    for (;;) pause();
#endif
    return MOE_OK;
}

static void fault_destroy(void *state) { free(state); }

static const moe_backend fault_backend = {"fault", "a plugin that fails on purpose", fault_available,
                                          fault_supports, fault_create, fault_forward, NULL,
                                          fault_destroy, NULL};

#if defined(FAULT_abi)
const moe_plugin_entry *inkling_moe_plugin(void);
const moe_plugin_entry *inkling_moe_plugin(void) {
    static const moe_plugin_entry e = {MOE_PLUGIN_ABI_VERSION + 1, MOE_PLUGIN_LAYOUT, &fault_backend};
    return &e;
}
#elif defined(FAULT_layout)
const moe_plugin_entry *inkling_moe_plugin(void);
const moe_plugin_entry *inkling_moe_plugin(void) {
    static const moe_plugin_entry e = {MOE_PLUGIN_ABI_VERSION, MOE_PLUGIN_LAYOUT + 1, &fault_backend};
    return &e;
}
#elif defined(FAULT_noentry)
const moe_backend *not_the_entry(void);
const moe_backend *not_the_entry(void) { return &fault_backend; }
#else
MOE_PLUGIN_EXPORT(fault_backend)
#endif
