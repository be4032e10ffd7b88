/*
 * paths.h: a path's name as the commands take it (run --backend, diff --backend/--against,
 * fuzz --paths) turned into a backend. The one place that knows the forms of a name:
 *   NAME               a backend of the registry (ref, blas, cuda: moe.h)
 *   mutant:NAME        a planted-bug path (mutants.h)
 *   plugin:FILE.so     a shared library exporting a backend (plugin_host.h, moe_plugin.h)
 *   exec:COMMAND       an external program run once per call (exec_path.h)
 *   worker:COMMAND     an external program kept running, one call per line (exec_path.h)
 * Opening the same name twice gives the same backend (a plugin is loaded once).
 */
#ifndef INKLING_PATHS_H
#define INKLING_PATHS_H

#include "../common/moe.h"

/* NULL plus err (naming the path and the fault) when the name is unknown or cannot be opened. */
const moe_backend *moe_path_open(const char *name, moe_error *err);

/* Splits a comma-separated list of path names into names [cap] (pointers into buf, which
 * receives a copy of list). An exec: or worker: name takes the rest of the list, commas
 * included, so it comes last. Returns the count. */
int moe_path_list_split(const char *list, char *buf, size_t buf_len, const char **names, int cap);

#endif
