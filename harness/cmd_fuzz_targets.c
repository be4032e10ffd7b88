/*
 * cmd_fuzz_targets.c: what a fuzz run works on: its candidate paths, its suites and its
 * report directory (declarations in cmd_fuzz.h).
 *
 * Rules:
 *   - the candidates are every backend of the registry but the reference, or the paths --paths
 *     names (paths.h: registry names, mutant:, plugin:, exec:, worker:); 'ref' is the reference,
 *     never a candidate; --mutant NAME runs that mutant alone, without the reference's own paths;
 *   - limits fail loudly: more suites, candidates or paths per case than the harness holds is
 *     bad usage (exit 2), never a silently shorter run;
 *   - the report directory is created and checked writable before any case runs.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"
#include "mutants.h"
#include "paths.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* The candidates: the backends of the registry other than the reference, or the paths that
 * --paths names. Returns -1 (after saying so) if a named path cannot be opened. */
static int registry_candidates(const char *paths, const moe_backend **out, int cap) {
    int n = 0;
    if (paths && !strcmp(paths, "none")) return 0;
    char buf[1024];
    const char *names[16];
    int count = paths ? moe_path_list_split(paths, buf, sizeof buf, names, 16) : moe_backend_count();
    for (int i = 0; i < count; i++) {
        const moe_backend *be = paths ? NULL : moe_backend_at(i);
        if (be == &moe_backend_ref) continue;
        moe_error err;
        moe_error_clear(&err);
        if (paths) be = moe_path_open(names[i], &err);
        if (!be || be == &moe_backend_ref) {
            cli_fail("fuzz", "argument --paths: %s", be ? "'ref' is the reference, not a candidate path" : err.msg);
            return -1;
        }
        if (n == cap) {
            cli_fail("fuzz", "argument --paths: more than %d candidate paths; name fewer", cap);
            return -1;
        }
        out[n++] = be;
    }
    return n;
}

int fuzz_choose_targets(const fuzz_args *a, const moe_backend **cands, int cap, fuzz_targets *tg) {
    fuzz_targets t = {cands, 0, !a->no_ref, 1, false, NULL, a->engine, a->max_memory_gb * 1e9};
    if (a->mutant) {
        cands[0] = moe_mutant_find(a->mutant);
        if (!cands[0]) {
            cli_fail("fuzz", "argument --mutant: unknown mutant '%s'", a->mutant);
            return 2;
        }
        t.n_candidates = 1;
        t.ref_paths = false;
    } else {
        t.n_candidates = registry_candidates(a->paths, cands, cap);
        if (t.n_candidates < 0) return 2;
    }
    if (fuzz_paths_per_case(&t) > FUZZ_MAX_PATHS) {
        cli_fail("fuzz", "argument --paths: %d candidates give %d paths per case; a case holds %d "
                 "(FUZZ_MAX_PATHS): name fewer", t.n_candidates, fuzz_paths_per_case(&t), FUZZ_MAX_PATHS);
        return 2;
    }
    *tg = t;
    return 0;
}

int fuzz_load_suites(const fuzz_args *a, fuzz_suite *suites, int *ns) {
    moe_error err;
    char list[256];
    snprintf(list, sizeof list, "%s", a->suites);
    *ns = 0;
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (*ns == FUZZ_MAX_SUITES) {
            cli_fail("fuzz", "argument --suite: more than %d suites", FUZZ_MAX_SUITES);
            return 2;
        }
        if (fuzz_suite_load(a->suite_dir, s, &suites[*ns], &err)) {
            cli_fail("fuzz", "%s", err.msg);
            return 2;
        }
        (*ns)++;
    }
    if (!*ns) {
        cli_fail("fuzz", "argument --suite: no suite given");
        return 2;
    }
    return 0;
}

/* A run that cannot leave its reports fails at once instead of announcing files it never
 * wrote. */
int fuzz_check_report_dir(const char *dir) {
    if (strlen(dir) > 1000) return cli_fail("fuzz", "argument --report-dir: longer than 1000 bytes");
    if (fuzz_mkdir_p(dir) || access(dir, W_OK | X_OK))
        return cli_fail("fuzz", "argument --report-dir: cannot create or write directory %s: %s", dir,
                        strerror(errno));
    return 0;
}

fuzz_history_opts fuzz_history_opts_of(const fuzz_args *a) {
    fuzz_history_opts o = {a->seconds, a->seed, a->seed_given, a->max_cases, a->regress_dir,
                           a->report_dir, a->shrink, a->reruns, a->repeat, a->history};
    return o;
}
