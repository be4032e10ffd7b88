/*
 * plugin_host.c: a plugin's backend, loaded with dlopen and run in a forked child per call
 * (rules in plugin_host.h; the ABI in common/moe_plugin.h).
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "plugin_host.h"

#include "../common/moe_plugin.h"
#include "bound_backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const moe_backend *inner; /* the plugin's own table */
    char name[64];            /* "plugin:<inner name>" */
    bool isolate;
} plugin_ctx;

typedef struct {
    const plugin_ctx *ctx;
    const moe_shard *shard;
    moe_options opt;
    void *inner_state; /* in-process mode only */
} plugin_state;

int moe_external_timeout_s(void) {
    const char *v = getenv("INKLING_MOE_PATH_TIMEOUT");
    int s = v ? atoi(v) : 0;
    return s > 0 ? s : 120;
}

/* ---------------------------------------------------------------- the child's results */

typedef struct {
    moe_status st;
    char msg[sizeof(((moe_error *)0)->msg)];
    unsigned filled;
} child_header;

/* One shared block: the header, then each wanted array, each at a 16-byte boundary. */
typedef struct {
    void *base;
    size_t size;
} shared_block;

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void *shared_alloc(shared_block *b, size_t size) {
    b->size = size;
    b->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b->base == MAP_FAILED) b->base = NULL;
    return b->base;
}

/* Forks; the child runs job(arg) with an alarm at the time limit, writes its status into hdr
 * and exits. The parent waits and turns a signal, an early exit or a timeout into an error. */
static moe_status run_isolated(const plugin_ctx *ctx, const char *what,
                               void (*job)(void *arg, child_header *hdr), void *arg,
                               child_header *hdr, moe_error *err) {
    const int limit = moe_external_timeout_s();
    fflush(NULL); /* the child must not repeat buffered output */
    pid_t pid = fork();
    if (pid < 0) return moe_fail(err, MOE_ERR_DEVICE, "%s: cannot fork for %s: %s", ctx->name, what, strerror(errno));
    if (pid == 0) {
        /* the plugin's faults kill the child plainly, whatever handlers the host installed */
        static const int fatal[] = {SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) signal(fatal[i], SIG_DFL);
        alarm((unsigned)limit);
        hdr->st = MOE_ERR_INTERNAL;
        job(arg, hdr);
        _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        return moe_fail(err, MOE_ERR_DEVICE, "%s: %s timed out after %d s (INKLING_MOE_PATH_TIMEOUT)",
                        ctx->name, what, limit);
    if (WIFSIGNALED(status))
        return moe_fail(err, MOE_ERR_DEVICE, "%s: crashed in %s: signal %d (%s)", ctx->name, what,
                        WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return moe_fail(err, MOE_ERR_DEVICE, "%s: exited with status %d during %s (a plugin must return, "
                        "not exit)", ctx->name, WIFEXITED(status) ? WEXITSTATUS(status) : -1, what);
    if (hdr->st) return moe_fail(err, hdr->st, "%s", hdr->msg);
    return MOE_OK;
}

/* ---------------------------------------------------------------- forward in a child */

typedef struct {
    const plugin_state *ps;
    int T;
    const uint16_t *x;
    float *out;
    moe_stages stages; /* pointers into the shared block */
    int32_t *ids;
    float *logits_in, *weights;
    bool route;
} child_call;

static void child_job(void *arg, child_header *hdr) {
    child_call *c = arg;
    const moe_backend *inner = c->ps->ctx->inner;
    moe_error e;
    memset(&e, 0, sizeof e);
    void *state = NULL;
    moe_status st = inner->create(c->ps->shard, &c->ps->opt, &state, &e);
    if (!st && c->route) st = inner->route(state, c->T, c->logits_in, c->ids, c->weights, &e);
    else if (!st) st = inner->forward(state, c->T, c->x, c->out, &c->stages, &e);
    if (state) inner->destroy(state);
    hdr->st = st;
    memcpy(hdr->msg, e.msg, sizeof hdr->msg);
    hdr->msg[sizeof hdr->msg - 1] = '\0';
    hdr->filled = c->stages.filled;
}

/* Lays out the header and the arrays of one call in a shared block: sizes [n] in bytes, the
 * wanted ones non-zero; ptrs [n] receive their places (NULL where not wanted). */
static child_header *layout(shared_block *b, const size_t *sizes, void **ptrs, int n) {
    size_t total = round16(sizeof(child_header));
    for (int i = 0; i < n; i++) total += round16(sizes[i]);
    char *p = shared_alloc(b, total);
    if (!p) return NULL;
    size_t at = round16(sizeof(child_header));
    for (int i = 0; i < n; i++) {
        ptrs[i] = sizes[i] ? p + at : NULL;
        at += round16(sizes[i]);
    }
    return (child_header *)p;
}

static moe_status isolated_forward(plugin_state *ps, int T, const uint16_t *x, float *out,
                                   moe_stages *stages, moe_error *err) {
    const moe_shard *sh = ps->shard;
    const size_t t = (size_t)T, D = (size_t)sh->cfg.D, K = (size_t)sh->cfg.K, S = (size_t)sh->cfg.S,
                 G = (size_t)(sh->cfg.R + sh->cfg.S);
    moe_stages none = {0};
    const moe_stages *want = stages ? stages : &none;
    float *dst[8] = {out, want->logits, (float *)want->topk_ids, want->topk_weights,
                     want->routed_h, want->routed_y, want->sink_h, want->sink_y};
    size_t sizes[8] = {t * D, t * G, t * K, t * (K + S), t * K * (size_t)sh->I_local, t * K * D,
                       t * S * (size_t)sh->sink_I_local, t * D};
    size_t room[8]; /* wanted arrays get room even when empty (T = 0): never a NULL buffer */
    for (int i = 0; i < 8; i++) {
        sizes[i] = dst[i] ? sizes[i] * 4 : 0; /* fp32 and int32 alike */
        room[i] = dst[i] ? sizes[i] + 4 : 0;
    }
    void *ptr[8];
    shared_block b;
    child_header *hdr = layout(&b, room, ptr, 8);
    if (!hdr) return moe_fail(err, MOE_ERR_NOMEM, "%s: no shared memory for T = %d", ps->ctx->name, T);
    child_call c = {ps, T, x, ptr[0], {ptr[1], ptr[2], ptr[3], ptr[4], ptr[5], ptr[6], ptr[7], 0},
                    NULL, NULL, NULL, false};
    moe_status st = run_isolated(ps->ctx, "forward", child_job, &c, hdr, err);
    if (!st) {
        for (int i = 0; i < 8; i++)
            if (dst[i]) memcpy(dst[i], ptr[i], sizes[i]);
        if (stages) stages->filled = hdr->filled;
    }
    munmap(b.base, b.size);
    return st;
}

static moe_status isolated_route(plugin_state *ps, int T, const float *logits, int32_t *ids,
                                 float *weights, moe_error *err) {
    const size_t t = (size_t)T, K = (size_t)ps->shard->cfg.K, S = (size_t)ps->shard->cfg.S;
    size_t sizes[2] = {t * K * 4, t * (K + S) * 4}, room[2] = {sizes[0] + 4, sizes[1] + 4};
    void *ptr[2];
    shared_block b;
    child_header *hdr = layout(&b, room, ptr, 2);
    if (!hdr) return moe_fail(err, MOE_ERR_NOMEM, "%s: no shared memory for T = %d", ps->ctx->name, T);
    child_call c = {ps, T, NULL, NULL, {0}, ptr[0], (float *)logits, ptr[1], true};
    moe_status st = run_isolated(ps->ctx, "route", child_job, &c, hdr, err);
    if (!st) {
        memcpy(ids, ptr[0], sizes[0]);
        memcpy(weights, ptr[1], sizes[1]);
    }
    munmap(b.base, b.size);
    return st;
}

/* ---------------------------------------------------------------- the bound table */

static bool plugin_available(void *vctx, char *why, size_t len) {
    const plugin_ctx *ctx = vctx;
    return ctx->inner->available(why, len);
}

static bool plugin_supports(void *vctx, const moe_config *cfg, const moe_split *split,
                            const moe_options *opt, char *why, size_t len) {
    const plugin_ctx *ctx = vctx;
    return ctx->inner->supports(cfg, split, opt, why, len);
}

static moe_status plugin_create(void *vctx, const moe_shard *shard, const moe_options *opt,
                                void **state, moe_error *err) {
    plugin_ctx *ctx = vctx;
    plugin_state *ps = calloc(1, sizeof *ps);
    if (!ps) return moe_fail(err, MOE_ERR_NOMEM, "%s: out of memory", ctx->name);
    ps->ctx = ctx;
    ps->shard = shard;
    ps->opt = *opt;
    if (!ctx->isolate) {
        moe_status st = ctx->inner->create(shard, opt, &ps->inner_state, err);
        if (st) {
            free(ps);
            return st;
        }
    }
    *state = ps;
    return MOE_OK;
}

static moe_status plugin_forward(void *state, int T, const uint16_t *x, float *out,
                                 moe_stages *stages, moe_error *err) {
    plugin_state *ps = state;
    if (!ps->ctx->isolate) return ps->ctx->inner->forward(ps->inner_state, T, x, out, stages, err);
    return isolated_forward(ps, T, x, out, stages, err);
}

static moe_status plugin_route(void *state, int T, const float *logits, int32_t *ids,
                               float *weights, moe_error *err) {
    plugin_state *ps = state;
    if (!ps->ctx->isolate) return ps->ctx->inner->route(ps->inner_state, T, logits, ids, weights, err);
    return isolated_route(ps, T, logits, ids, weights, err);
}

static void plugin_destroy(void *state) {
    plugin_state *ps = state;
    if (!ps) return;
    if (ps->inner_state) ps->ctx->inner->destroy(ps->inner_state);
    free(ps);
}

static const moe_bound_ops plugin_ops = {plugin_available, plugin_supports, plugin_create,
                                         plugin_forward, plugin_route, plugin_destroy};
static const moe_bound_ops plugin_ops_no_route = {plugin_available, plugin_supports, plugin_create,
                                                  plugin_forward, NULL, plugin_destroy};

/* ---------------------------------------------------------------- loading */

/* The plugin's entry, checked: version, layout and a complete table. */
static moe_status check_entry(const char *file, const moe_plugin_entry *e, moe_error *err) {
    if (!e) return moe_fail(err, MOE_ERR_FORMAT, "plugin %s: %s() returned NULL", file, MOE_PLUGIN_ENTRY_SYMBOL);
    if (e->abi_version != MOE_PLUGIN_ABI_VERSION)
        return moe_fail(err, MOE_ERR_FORMAT, "plugin %s: ABI version %u, this inkling-moe speaks version %u "
                        "(rebuild the plugin against this moe_plugin.h)", file, e->abi_version,
                        MOE_PLUGIN_ABI_VERSION);
    if (e->layout != MOE_PLUGIN_LAYOUT)
        return moe_fail(err, MOE_ERR_FORMAT, "plugin %s: struct layout fingerprint %u, host %u (built from "
                        "a different moe.h than its ABI version says)", file, e->layout, MOE_PLUGIN_LAYOUT);
    const moe_backend *b = e->backend;
    if (!b || !b->name || !b->name[0] || !b->description || !b->available || !b->supports ||
        !b->create || !b->forward || !b->destroy)
        return moe_fail(err, MOE_ERR_FORMAT, "plugin %s: incomplete backend table (name, description, "
                        "available, supports, create, forward and destroy are required)", file);
    return MOE_OK;
}

const moe_backend *moe_plugin_open(const char *file, moe_error *err) {
    char path[1024];
    /* a bare file name means the file here, not a search of the library path */
    snprintf(path, sizeof path, "%s%s", strchr(file, '/') ? "" : "./", file);
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        moe_fail(err, MOE_ERR_IO, "plugin %s: cannot load: %s", file, dlerror());
        return NULL;
    }
    moe_plugin_entry_fn entry_fn;
    void *sym = dlsym(dl, MOE_PLUGIN_ENTRY_SYMBOL);
    memcpy(&entry_fn, &sym, sizeof entry_fn); /* object to function pointer, as POSIX allows */
    if (!sym) {
        moe_fail(err, MOE_ERR_FORMAT, "plugin %s: no symbol %s (define it with MOE_PLUGIN_EXPORT)", file,
                 MOE_PLUGIN_ENTRY_SYMBOL);
        dlclose(dl);
        return NULL;
    }
    const moe_plugin_entry *e = entry_fn();
    plugin_ctx *ctx = check_entry(file, e, err) ? NULL : calloc(1, sizeof *ctx);
    if (!ctx) {
        if (err && !err->status) moe_fail(err, MOE_ERR_NOMEM, "plugin %s: out of memory", file);
        dlclose(dl);
        return NULL;
    }
    ctx->inner = e->backend;
    snprintf(ctx->name, sizeof ctx->name, "plugin:%.24s", e->backend->name);
    const char *iso = getenv("INKLING_MOE_PLUGIN_ISOLATION");
    ctx->isolate = !iso || strcmp(iso, "none") != 0;
    char desc[160];
    snprintf(desc, sizeof desc, "%.80s (%.60s)", e->backend->description, file);
    const moe_backend *b = moe_bound_backend(ctx->name, desc, e->backend->route ? &plugin_ops : &plugin_ops_no_route,
                                             ctx, e->backend->shape_hints, err);
    if (!b) {
        free(ctx);
        dlclose(dl);
    }
    return b; /* loaded for the life of the process, like the built-in paths */
}
