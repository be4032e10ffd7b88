/* paths.c: path names to backends (paths.h). */
#include "paths.h"

#include "exec_path.h"
#include "mutants.h"
#include "plugin_host.h"

#include <stdio.h>
#include <string.h>

#define MAX_OPENED 16

static struct {
    char name[512];
    const moe_backend *backend;
} opened[MAX_OPENED];
static int n_opened;

static bool has_prefix(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static const moe_backend *open_new(const char *name, moe_error *err) {
    if (has_prefix(name, "mutant:")) {
        const moe_backend *m = moe_mutant_find(name);
        if (!m) moe_fail(err, MOE_ERR_ARG, "path %s: no such mutant (inkling-moe fuzz --selftest lists them)", name);
        return m;
    }
    if (has_prefix(name, "plugin:")) {
        if (!name[7]) moe_fail(err, MOE_ERR_ARG, "path %s: plugin: needs a file, as in plugin:FILE.so", name);
        return name[7] ? moe_plugin_open(name + 7, err) : NULL;
    }
    if (has_prefix(name, "exec:") || has_prefix(name, "worker:")) return moe_exec_open(name, err);
    const moe_backend *b = moe_backend_find(name);
    if (!b) moe_fail(err, MOE_ERR_ARG, "unknown backend '%s' (a backend name, mutant:NAME, plugin:FILE.so, "
                     "exec:COMMAND or worker:COMMAND)", name);
    return b;
}

const moe_backend *moe_path_open(const char *name, moe_error *err) {
    if (!name || !name[0]) {
        moe_fail(err, MOE_ERR_ARG, "path: empty name");
        return NULL;
    }
    for (int i = 0; i < n_opened; i++)
        if (!strcmp(opened[i].name, name)) return opened[i].backend;
    const moe_backend *b = open_new(name, err);
    if (b && n_opened < MAX_OPENED && strlen(name) < sizeof opened[0].name) {
        snprintf(opened[n_opened].name, sizeof opened[0].name, "%s", name);
        opened[n_opened++].backend = b;
    }
    return b;
}

int moe_path_list_split(const char *list, char *buf, size_t buf_len, const char **names, int cap) {
    snprintf(buf, buf_len, "%s", list);
    int n = 0;
    for (char *p = buf; *p && n < cap;) {
        names[n++] = p;
        if (has_prefix(p, "exec:") || has_prefix(p, "worker:")) break; /* commas are its own */
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    return n;
}
