/*
 * worker.c: an "engine" run by the harness as an external program (docs/external-paths.md),
 * in both forms:
 *
 *   inkling-moe fuzz --paths 'exec:build/examples/moe-worker'            one process per call
 *   inkling-moe fuzz --paths 'worker:build/examples/moe-worker --worker' one process, many calls
 *
 * It loads the exported checkpoint with the library's loader (checkpoint.h), runs a path of the
 * library (--backend NAME, default ref) and writes out F32 [T, D] with every stage it has
 * (topk_ids, topk_weights, logits, routed_h, routed_y, sink_h, sink_y). A real engine replaces
 * compute() with its own layer. One-shot form: paths from INKLING_MOE_MODEL, INKLING_MOE_INPUT,
 * INKLING_MOE_OUTPUT, INKLING_MOE_PRECISION; exit status 0 on success, else a line on stderr.
 * Worker form: one request per stdin line "MODEL\tINPUT\tOUTPUT\tPRECISION", one answer per
 * stdout line, "ok" or "error MESSAGE"; the checkpoint stays open while MODEL does not change.
 */
#include "checkpoint.h" /* pkg-config --cflags inkling-moe; in the tree: -Icommon */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char dir[1024];
    moe_checkpoint ck;
    moe_config cfg;
    moe_weights w;
    bool open;
} model_cache;

static moe_status load_model(model_cache *m, const char *dir, moe_error *err) {
    if (m->open && !strcmp(m->dir, dir)) return MOE_OK;
    if (m->open) moe_checkpoint_close(&m->ck);
    m->open = false;
    moe_status st = moe_checkpoint_open(dir, &m->ck, err);
    if (st) return st;
    st = moe_checkpoint_layer(&m->ck, -1, NULL, &m->cfg, &m->w, err);
    if (st) {
        moe_checkpoint_close(&m->ck);
        return st;
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m->open = true;
    return MOE_OK;
}

/* Runs the layer on x [T, D] and writes every stage to output. */
static moe_status compute(const moe_backend *be, const model_cache *m, moe_precision precision, int T,
                          const uint16_t *x, const char *output, moe_error *err) {
    const moe_config *c = &m->cfg;
    const int64_t t = T, D = c->D, K = c->K, S = c->S, I = c->I, G = c->R + c->S;
    const int64_t sizes[8] = {t * D, t * K, t * (K + S), t * G, t * K * I, t * K * D, t * S * I, t * D};
    void *a[8] = {0};
    bool ok = true;
    for (int i = 0; i < 8; i++) ok = ok && (a[i] = malloc((size_t)sizes[i] * 4 + 4)) != NULL;
    moe_status st = ok ? MOE_OK : moe_fail(err, MOE_ERR_NOMEM, "worker: out of memory for T = %d", T);
    moe_options opt = moe_options_default();
    opt.precision = precision;
    moe_stages stages = {a[3], a[1], a[2], a[4], a[5], a[6], a[7], 0};
    if (!st) st = moe_forward_all_ranks(be, c, &m->w, MOE_SPLIT_NONE, 1, 0, &opt, T, x, a[0], &stages, err);
    if (!st) {
        static const char *const names[8] = {"out", "topk_ids", "topk_weights", "logits",
                                             "routed_h", "routed_y", "sink_h", "sink_y"};
        const unsigned bits[8] = {0, MOE_STAGE_TOPK, MOE_STAGE_TOPK, MOE_STAGE_LOGITS, MOE_STAGE_ROUTED_H,
                                  MOE_STAGE_ROUTED_Y, MOE_STAGE_SINK_H, MOE_STAGE_SINK_Y};
        const int64_t shapes[8][3] = {{t, D}, {t, K}, {t, K + S}, {t, G}, {t, K, I}, {t, K, D}, {t, S, I}, {t, D}};
        moe_st_entry e[8];
        int n = 0;
        for (int i = 0; i < 8; i++) {
            if (i > 0 && !(stages.filled & bits[i])) continue;
            int nd = (i >= 4 && i <= 6) ? 3 : 2;
            e[n] = (moe_st_entry){names[i], i == 1 ? MOE_ST_I32 : MOE_ST_F32, nd, {0}, a[i]};
            for (int d = 0; d < nd; d++) e[n].shape[d] = shapes[i][d];
            n++;
        }
        st = moe_st_write(output, e, n, err);
    }
    for (int i = 0; i < 8; i++) free(a[i]);
    return st;
}

static moe_status one_call(const moe_backend *be, model_cache *m, const char *model, const char *input,
                           const char *output, const char *precision, moe_error *err) {
    moe_status st = load_model(m, model, err);
    int T = 0;
    uint16_t *x = NULL;
    if (!st) st = moe_read_input(input, m->cfg.D, &T, &x, err);
    if (!st) st = compute(be, m, strcmp(precision, "exact") ? MOE_PRECISION_SERVING : MOE_PRECISION_EXACT, T,
                          x, output, err);
    free(x);
    return st;
}

static int serve(const moe_backend *be, model_cache *m) {
    char line[4200];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char *save = NULL, *f[4];
        int n = 0;
        for (char *p = strtok_r(line, "\t", &save); p && n < 4; p = strtok_r(NULL, "\t", &save)) f[n++] = p;
        moe_error err = {0};
        if (n != 4) moe_fail(&err, MOE_ERR_ARG, "request: expected MODEL<TAB>INPUT<TAB>OUTPUT<TAB>PRECISION");
        else one_call(be, m, f[0], f[1], f[2], f[3], &err);
        if (err.status) printf("error %s\n", err.msg);
        else printf("ok\n");
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *backend = "ref";
    bool worker = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--worker")) worker = true;
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else {
            fprintf(stderr, "usage: moe-worker [--worker] [--backend NAME]\n");
            return 2;
        }
    }
    const moe_backend *be = moe_backend_find(backend);
    if (!be) {
        fprintf(stderr, "moe-worker: unknown backend '%s'\n", backend);
        return 2;
    }
    model_cache m = {0};
    if (worker) {
        serve(be, &m);
        if (m.open) moe_checkpoint_close(&m.ck);
        return 0;
    }
    const char *model = getenv("INKLING_MOE_MODEL"), *input = getenv("INKLING_MOE_INPUT"),
               *output = getenv("INKLING_MOE_OUTPUT"), *precision = getenv("INKLING_MOE_PRECISION");
    if (!model || !input || !output) {
        fprintf(stderr, "moe-worker: INKLING_MOE_MODEL, INKLING_MOE_INPUT and INKLING_MOE_OUTPUT must be set\n");
        return 2;
    }
    moe_error err = {0};
    one_call(be, &m, model, input, output, precision ? precision : "serving", &err);
    if (m.open) moe_checkpoint_close(&m.ck);
    if (err.status) fprintf(stderr, "moe-worker: %s\n", err.msg);
    return err.status ? 1 : 0;
}
