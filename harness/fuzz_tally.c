/*
 * fuzz_tally.c: outcomes per path class (rules in fuzz_tally.h).
 */
#include "cli_args.h"
#include "fuzz_tally.h"

#include <stdlib.h>
#include <string.h>

static fuzz_path_tally *tally_of(fuzz_tally *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->p[i].name, name)) return &t->p[i];
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        fuzz_path_tally *grown = realloc(t->p, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        t->p = grown, t->cap = cap;
    }
    fuzz_path_tally *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    return p;
}

int fuzz_tally_add(fuzz_tally *t, const fuzz_case_result *res) {
    for (int i = 0; i < res->n; i++) {
        fuzz_path_tally *p = tally_of(t, res->r[i].path);
        if (!p) {
            cli_fail("fuzz", "out of memory for the tally of path %s", res->r[i].path);
            return 1;
        }
        const fuzz_outcome o = res->r[i].outcome;
        p->passed += o == FUZZ_PASS, p->failed += o == FUZZ_FAIL, p->skipped += o == FUZZ_SKIP;
        t->passed += o == FUZZ_PASS, t->failed += o == FUZZ_FAIL, t->skipped += o == FUZZ_SKIP;
    }
    return 0;
}

void fuzz_tally_print(FILE *f, const fuzz_tally *t) {
    fprintf(f, "  %-28s %8s %8s %8s\n", "path", "passed", "failed", "skipped");
    for (int i = 0; i < t->n; i++)
        fprintf(f, "  %-28s %8ld %8ld %8ld\n", t->p[i].name, t->p[i].passed, t->p[i].failed, t->p[i].skipped);
}

void fuzz_tally_free(fuzz_tally *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

void fuzz_print_paths(FILE *f, const fuzz_targets *tg) {
    fprintf(f, "paths:%s", tg->ref_paths ? " ref (exact, serving, splits)," : "");
    for (int i = 0; i < tg->n_candidates; i++) {
        char why[256] = "";
        bool av = tg->candidates[i]->available(why, sizeof why);
        fprintf(f, " %s%s%s%s", tg->candidates[i]->name, av ? "" : " (SKIPPED: ", av ? "" : why, av ? "" : ")");
    }
    fprintf(f, "\n");
}
