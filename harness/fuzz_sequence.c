/*
 * fuzz_sequence.c: checks, fresh reruns, sequence files, replay and shrinking (rules in
 * fuzz_sequence.h).
 */
#include "fuzz_sequence.h"

#include "fuzz_stress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The weight bytes a replay's pool may keep alive. */
#define REPLAY_POOL_BYTES ((size_t)512 << 20)

const char *fuzz_check_name(fuzz_check check) {
    return check == FUZZ_CHECK_HISTORY ? "history" : "envelope";
}

moe_status fuzz_check_case(fuzz_check check, const fuzz_case *c, const fuzz_targets *tg,
                           fuzz_case_result *res, moe_error *err) {
    return check == FUZZ_CHECK_HISTORY ? fuzz_stress_case(c, tg, res, err) : fuzz_run_case(c, tg, res, err);
}

bool fuzz_result_failed(const fuzz_case_result *res, const char *path) {
    const bool any = !path || !path[0] || !strcmp(path, "any");
    for (int i = 0; i < res->n; i++)
        if (res->r[i].outcome == FUZZ_FAIL && (any || !strcmp(res->r[i].path, path))) return true;
    return false;
}

int fuzz_fresh_failures(fuzz_check check, const fuzz_case *c, const char *path,
                        const fuzz_targets *tg, int reruns) {
    fuzz_targets fresh = *tg;
    fresh.pool = NULL;
    int failed = 0;
    fuzz_case_result res;
    for (int i = 0; i < reruns; i++) {
        moe_error err;
        /* a case that cannot even be built fails every time */
        if (fuzz_check_case(check, c, &fresh, &res, &err) || fuzz_result_failed(&res, path)) failed++;
    }
    return failed;
}

/* ---------------------------------------------------------------- sequences */

moe_status fuzz_sequence_add(fuzz_sequence *s, const fuzz_case *c, moe_error *err) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        fuzz_case *grown = realloc(s->cases, (size_t)cap * sizeof *grown);
        if (!grown) return moe_fail(err, MOE_ERR_NOMEM, "sequence: out of memory for %d cases", cap);
        s->cases = grown, s->cap = cap;
    }
    s->cases[s->n++] = *c;
    return MOE_OK;
}

void fuzz_sequence_keep_last(fuzz_sequence *s, int n) {
    if (s->n <= n) return;
    memmove(s->cases, s->cases + (s->n - n), (size_t)n * sizeof *s->cases);
    s->n = n;
}

void fuzz_sequence_free(fuzz_sequence *s) {
    free(s->cases);
    memset(s, 0, sizeof *s);
}

/* "sequence check=... path=..." */
static moe_status parse_header(const char *line, fuzz_sequence *s, moe_error *err) {
    char check[32] = "", path[48] = "";
    if (sscanf(line, "sequence check=%31s path=%47s", check, path) != 2)
        return moe_fail(err, MOE_ERR_FORMAT, "first line is not 'sequence check=envelope|history path=PATH'");
    if (strcmp(check, "envelope") && strcmp(check, "history"))
        return moe_fail(err, MOE_ERR_FORMAT, "check=%s: expected envelope or history", check);
    s->check = strcmp(check, "history") ? FUZZ_CHECK_ENVELOPE : FUZZ_CHECK_HISTORY;
    snprintf(s->path, sizeof s->path, "%s", path);
    return MOE_OK;
}

moe_status fuzz_sequence_load(const char *file, fuzz_sequence *s, moe_error *err) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(file, "r");
    if (!f) return moe_fail(err, MOE_ERR_IO, "sequence %s: cannot open", file);
    char line[2048];
    bool header = false;
    moe_status st = MOE_OK;
    for (int no = 1; !st && fgets(line, sizeof line, f); no++) {
        line[strcspn(line, "\r\n")] = 0;
        const char *p = line + strspn(line, " \t");
        if (!*p || *p == '#') continue;
        moe_error e;
        moe_error_clear(&e);
        fuzz_case c;
        if (!header) st = parse_header(p, s, &e), header = true;
        else if (!(st = fuzz_case_parse(p, &c, &e))) st = fuzz_sequence_add(s, &c, &e);
        if (st) st = moe_fail(err, st, "sequence %s line %d: %s", file, no, e.msg);
    }
    fclose(f);
    if (!st && !s->n) st = moe_fail(err, MOE_ERR_FORMAT, "sequence %s: no case lines", file);
    if (st) fuzz_sequence_free(s);
    return st;
}

moe_status fuzz_sequence_save(const char *file, const fuzz_sequence *s, const char *notes,
                              moe_error *err) {
    FILE *f = fopen(file, "w");
    if (!f) return moe_fail(err, MOE_ERR_IO, "sequence %s: cannot write", file);
    fprintf(f, "# inkling-moe fuzz sequence: replay with  inkling-moe fuzz --replay FILE --repeat N\n");
    for (const char *p = notes ? notes : ""; *p;) {
        size_t len = strcspn(p, "\n");
        fprintf(f, "# %.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
    }
    fprintf(f, "sequence check=%s path=%s\n", fuzz_check_name(s->check), s->path[0] ? s->path : "any");
    char line[512];
    for (int i = 0; i < s->n; i++) fprintf(f, "%s\n", fuzz_case_format(&s->cases[i], line, sizeof line));
    int bad = ferror(f);
    if (fclose(f) || bad) return moe_fail(err, MOE_ERR_IO, "sequence %s: write failed", file);
    return MOE_OK;
}

/* ---------------------------------------------------------------- replay */

/* One repetition on a new pool; *failed_at: the first case index that failed on s->path.
 * Past deadline (> 0, fuzz_now() seconds) it stops between cases and leaves *complete false,
 * and the partial repetition counts for nothing. */
static moe_status replay_once(const fuzz_sequence *s, const fuzz_targets *tg, double deadline,
                              fuzz_replay_result *out, int *failed_at, bool *complete, moe_error *err) {
    fuzz_targets live = *tg;
    live.pool = fuzz_pool_new(REPLAY_POOL_BYTES);
    if (!live.pool) return moe_fail(err, MOE_ERR_NOMEM, "replay: out of memory for the pool");
    *failed_at = -1;
    *complete = false;
    moe_status st = MOE_OK;
    fuzz_case_result res;
    fuzz_replay_result counts = *out;
    int i = 0;
    for (; i < s->n && !st && (deadline <= 0 || fuzz_now() < deadline); i++) {
        st = fuzz_check_case(s->check, &s->cases[i], &live, &res, err);
        for (int k = 0; !st && k < res.n; k++) {
            counts.passed += res.r[k].outcome == FUZZ_PASS;
            counts.fails += res.r[k].outcome == FUZZ_FAIL;
            counts.skipped += res.r[k].outcome == FUZZ_SKIP;
        }
        if (!st && *failed_at < 0 && fuzz_result_failed(&res, s->path)) {
            *failed_at = i;
            if (counts.first_failing_case < 0) counts.first_failing_case = i, counts.first = res;
        }
    }
    fuzz_pool_free(live.pool);
    *complete = !st && i == s->n;
    if (*complete) {
        out->passed = counts.passed, out->fails = counts.fails, out->skipped = counts.skipped;
        if (out->first_failing_case < 0 && counts.first_failing_case >= 0)
            out->first_failing_case = counts.first_failing_case, out->first = counts.first;
    }
    return st;
}

moe_status fuzz_sequence_replay(const fuzz_sequence *s, const fuzz_targets *tg, int repeat,
                                double max_seconds, fuzz_replay_result *out, moe_error *err) {
    memset(out, 0, sizeof *out);
    out->first_failing_case = -1;
    const double t0 = fuzz_now();
    const double deadline = max_seconds > 0 ? t0 + max_seconds : 0;
    for (int r = 0; r < repeat; r++) {
        int at;
        bool complete;
        moe_status st = replay_once(s, tg, deadline, out, &at, &complete, err);
        if (st) return st;
        if (!complete) break;
        out->repeats++;
        out->failed += at >= 0;
    }
    return MOE_OK;
}

/* ---------------------------------------------------------------- shrinking */

/* Failing repetitions of s without its cases [from, from + len); -1 when `repeat` repetitions
 * did not complete within seconds. */
static int failures_without(const fuzz_sequence *s, int from, int len, const fuzz_targets *tg, int repeat,
                            double seconds) {
    fuzz_sequence t = *s;
    t.cases = malloc((size_t)s->n * sizeof *t.cases);
    if (!t.cases) return 0;
    t.n = 0;
    for (int i = 0; i < s->n; i++)
        if (i < from || i >= from + len) t.cases[t.n++] = s->cases[i];
    fuzz_replay_result rr;
    moe_error err;
    int failed = fuzz_sequence_replay(&t, tg, repeat, seconds, &rr, &err) ? 0 : rr.failed;
    if (rr.repeats < repeat) failed = -1;
    free(t.cases);
    return failed;
}

int fuzz_sequence_shrink(fuzz_sequence *s, const fuzz_targets *tg, int repeat, int base_failed,
                         double max_seconds) {
    const int need = base_failed / 2 > 1 ? base_failed / 2 : 1;
    const double t0 = fuzz_now();
    int replays = 0;
    for (int chunk = (s->n - 1) / 2 > 1 ? (s->n - 1) / 2 : 1; chunk >= 1; chunk /= 2) {
        /* chunks of the earlier cases, from the oldest; the last case always stays */
        for (int from = 0; from + chunk <= s->n - 1;) {
            const double left = max_seconds - (fuzz_now() - t0);
            if (left <= 0) return replays;
            replays += repeat;
            const int failed = failures_without(s, from, chunk, tg, repeat, left);
            if (failed < 0) return replays;
            if (failed >= need) {
                memmove(s->cases + from, s->cases + from + chunk, (size_t)(s->n - from - chunk) * sizeof *s->cases);
                s->n -= chunk;
            } else {
                from += chunk;
            }
        }
    }
    return replays;
}
