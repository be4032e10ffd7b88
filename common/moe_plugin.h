/*
 * moe_plugin.h: the plugin ABI. A shared library that exports one function,
 *
 *     const moe_plugin_entry *inkling_moe_plugin(void);
 *
 * hands inkling-moe a layer backend (the same moe_backend table as the built-in paths, moe.h),
 * which every command that takes a path then runs as `plugin:FILE.so` (docs/external-paths.md).
 *
 * Rules of the ABI (version MOE_PLUGIN_ABI_VERSION):
 *   - the ABI is this header and the types of moe.h it includes (moe_config, moe_split,
 *     moe_shard, moe_options, moe_stages, moe_error, moe_backend, the enums). Any change to
 *     their layout or meaning bumps MOE_PLUGIN_ABI_VERSION; MOE_PLUGIN_LAYOUT (sizes and offsets
 *     as the plugin's compiler saw them) catches a header that changed without a bump;
 *   - the host refuses a plugin whose abi_version or layout differs from its own, naming both;
 *   - a plugin uses only the types: it calls no function of libinkling (the host exports
 *     none), fills moe_error itself (status plus a one-line msg) and never exits or aborts;
 *   - available() and supports() run in the host process; create, forward, route and destroy
 *     run in a child process per forward call (crash isolation, docs/external-paths.md), so a
 *     plugin keeps no state between forward calls other than what create builds from the shard.
 * Build a plugin with `cc -shared -fPIC $(pkg-config --cflags inkling-moe) my_plugin.c`.
 */
#ifndef INKLING_MOE_PLUGIN_H
#define INKLING_MOE_PLUGIN_H

#include "moe.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLUGIN_ABI_VERSION 1u
#define MOE_PLUGIN_ENTRY_SYMBOL "inkling_moe_plugin"

/* A fingerprint of the ABI's struct layouts: equal on host and plugin when both were compiled
 * from the same header by compatible compilers. */
#define MOE_PLUGIN_LAYOUT                                                                         \
    ((uint32_t)(sizeof(moe_config) + 3u * sizeof(moe_split) + 5u * sizeof(moe_shard) +            \
                7u * sizeof(moe_options) + 11u * sizeof(moe_stages) + 13u * sizeof(moe_error) +   \
                17u * sizeof(moe_backend) + 19u * offsetof(moe_shard, sink_w2) +                  \
                23u * offsetof(moe_stages, filled) + 29u * offsetof(moe_backend, destroy) +      \
                31u * offsetof(moe_config, routed_format)))

typedef struct {
    uint32_t abi_version;       /* MOE_PLUGIN_ABI_VERSION the plugin was built with */
    uint32_t layout;            /* MOE_PLUGIN_LAYOUT as the plugin's compiler saw it */
    const moe_backend *backend; /* name, description and every function but route non-NULL */
} moe_plugin_entry;

typedef const moe_plugin_entry *(*moe_plugin_entry_fn)(void);

/* Defines the exported entry point for a moe_backend variable: MOE_PLUGIN_EXPORT(my_backend) */
#define MOE_PLUGIN_EXPORT(backend_var)                                                            \
    const moe_plugin_entry *inkling_moe_plugin(void);                                             \
    const moe_plugin_entry *inkling_moe_plugin(void) {                                            \
        static const moe_plugin_entry entry = {MOE_PLUGIN_ABI_VERSION, MOE_PLUGIN_LAYOUT,        \
                                               &(backend_var)};                                  \
        return &entry;                                                                            \
    }

#ifdef __cplusplus
}
#endif

#endif /* INKLING_MOE_PLUGIN_H */
