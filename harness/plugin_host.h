/*
 * plugin_host.h: loading a plugin (common/moe_plugin.h) as a path, `plugin:FILE.so`.
 *
 * Rules:
 *   - the file is opened with dlopen; a missing file, a missing entry symbol, an ABI version
 *     or layout other than the host's, or a table with a missing function fails the load with
 *     a message naming the file and what is wrong (the caller reports it, exit status 2);
 *   - the path is named "plugin:<the backend's own name>";
 *   - crash isolation (INKLING_MOE_PLUGIN_ISOLATION=fork, the default): every forward (and
 *     route) call runs the plugin's create, forward and destroy in a forked child that writes
 *     its results into shared memory; a child killed by a signal, exiting by itself or running
 *     past INKLING_MOE_PATH_TIMEOUT seconds (default 120) makes the call fail with
 *     MOE_ERR_DEVICE and a message naming the plugin and the signal, so the case fails and is
 *     never counted as passed. INKLING_MOE_PLUGIN_ISOLATION=none runs the plugin in-process
 *     (needed by a CUDA plugin when the host has already initialised CUDA).
 */
#ifndef INKLING_PLUGIN_HOST_H
#define INKLING_PLUGIN_HOST_H

#include "../common/moe.h"

const moe_backend *moe_plugin_open(const char *file, moe_error *err);

/* The per-call time limit of an external path: INKLING_MOE_PATH_TIMEOUT seconds, default 120. */
int moe_external_timeout_s(void);

#endif
