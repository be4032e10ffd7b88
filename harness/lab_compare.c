/* lab_compare.c: two builds' lab CSVs side by side (rules in lab_compare.h). */
#include "lab_compare.h"
#include "lab.h"
#include "common/in_file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CSV_FIELDS 13     /* the columns of LAB_CSV_HEADER */
#define CSV_LINE_MAX 4096 /* a longer line is no line the lab wrote */

moe_status lab_compare_init(lab_compare_set *set, const char *stage, moe_error *err) {
    memset(set, 0, sizeof *set);
    if (!stage || !*stage || strlen(stage) >= LAB_COMPARE_NAME)
        return moe_fail(err, MOE_ERR_ARG, "stage: a name of 1 to %d characters is needed", LAB_COMPARE_NAME - 1);
    strcpy(set->stage, stage);
    return MOE_OK;
}

void lab_compare_free(lab_compare_set *set) {
    free(set->rows);
    memset(set, 0, sizeof *set);
}

/* line (no newline) -> its comma-separated fields (pointers into line, which is cut; the first
 * CSV_FIELDS + 1 kept); returns how many there are. */
static int split_fields(char *line, char *fields[CSV_FIELDS + 1]) {
    int n = 0;
    for (char *p = line;; p++) {
        if (n <= CSV_FIELDS) fields[n] = p;
        n++;
        p = strchr(p, ',');
        if (!p) return n;
        *p = '\0';
    }
}

/* The set's row of (shape, variant, T), added without runs if new; NULL out of memory. */
static lab_compare_row *row_of(lab_compare_set *set, const char *shape, const char *variant, int T) {
    for (int i = 0; i < set->n; i++) {
        lab_compare_row *r = &set->rows[i];
        if (r->T == T && !strcmp(r->shape, shape) && !strcmp(r->variant, variant)) return r;
    }
    if (set->n == set->cap) {
        const int cap = set->cap ? 2 * set->cap : 16;
        lab_compare_row *rows = realloc(set->rows, (size_t)cap * sizeof *rows);
        if (!rows) return NULL;
        set->rows = rows, set->cap = cap;
    }
    lab_compare_row *r = &set->rows[set->n++];
    memset(r, 0, sizeof *r);
    strcpy(r->shape, shape), strcpy(r->variant, variant);
    r->T = T;
    return r;
}

/* One data line of path (line number ln) into side; MOE_OK or a one-line refusal. */
static moe_status read_line(lab_compare_set *set, int side, const char *path, int ln, char *line,
                            moe_error *err) {
    char *f[CSV_FIELDS + 1];
    const int n = split_fields(line, f);
    if (n != CSV_FIELDS)
        return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: %d fields, the lab writes %d", path, ln, n, CSV_FIELDS);
    if (strcmp(f[3], set->stage) != 0) return MOE_OK;
    for (int i = 0; i < 2; i++)
        if (!*f[i] || strlen(f[i]) >= LAB_COMPARE_NAME)
            return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: field %s: 1 to %d characters", path, ln,
                            i ? "variant" : "shape", LAB_COMPARE_NAME - 1);
    char *end;
    errno = 0;
    const long T = strtol(f[2], &end, 10);
    if (end == f[2] || *end || errno || T < 1 || T > INT_MAX)
        return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: field T: '%s' is no token count", path, ln, f[2]);
    const double median = strtod(f[6], &end);
    if (end == f[6] || *end || !isfinite(median) || median < 0)
        return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: field median_us: '%s' is no time", path, ln, f[6]);
    const int rows_before = set->n;
    lab_compare_row *r = row_of(set, f[0], f[1], (int)T);
    if (!r) return moe_fail(err, MOE_ERR_NOMEM, "%s:%d: out of memory", path, ln);
    if (set->n > rows_before && set->n > LAB_COMPARE_MAX_ROWS)
        return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: more than %d (shape, variant, T) of stage \"%s\": "
                        "not a lab's runs", path, ln, LAB_COMPARE_MAX_ROWS, set->stage);
    if (r->runs[side] == LAB_COMPARE_MAX_RUNS)
        return moe_fail(err, MOE_ERR_FORMAT, "%s:%d: more than %d runs of %s %s T = %ld on one side",
                        path, ln, LAB_COMPARE_MAX_RUNS, f[0], f[1], T);
    r->median_us[side][r->runs[side]++] = median;
    return MOE_OK;
}

moe_status lab_compare_read(lab_compare_set *set, int side, const char *path, moe_error *err) {
    if (side != LAB_BASELINE && side != LAB_CANDIDATE)
        return moe_fail(err, MOE_ERR_ARG, "side: %d is neither baseline nor candidate", side);
    int fd;
    uint64_t size;
    moe_status st = moe_in_open(path, &fd, &size, err); /* a pipe or a device cannot hold it up */
    if (st) return st;
    FILE *file = fdopen(fd, "r");
    if (!file) {
        close(fd);
        return moe_fail(err, MOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    /* rows read so far stay as they were unless the whole file reads */
    lab_compare_set before = *set;
    before.rows = set->n ? malloc((size_t)set->n * sizeof *set->rows) : NULL;
    if (set->n && !before.rows) {
        fclose(file);
        return moe_fail(err, MOE_ERR_NOMEM, "%s: out of memory", path);
    }
    if (set->n) memcpy(before.rows, set->rows, (size_t)set->n * sizeof *set->rows);
    char line[CSV_LINE_MAX + 2];
    int ln = 0;
    while (!st && fgets(line, sizeof line, file)) {
        ln++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        else if (!feof(file) && ln > 1) st = moe_fail(err, MOE_ERR_FORMAT, "%s:%d: a line longer than %d bytes", path, ln, CSV_LINE_MAX);
        if (len && line[len - 1] == '\r') line[--len] = '\0';
        if (st) break;
        if (ln == 1) {
            if (strcmp(line, LAB_CSV_HEADER) != 0)
                st = moe_fail(err, MOE_ERR_FORMAT, "%s:1: not a lab CSV (its first line is not the lab's header)", path);
            continue;
        }
        if (!len || line[0] == '#') continue;
        st = read_line(set, side, path, ln, line, err);
    }
    if (!st && ferror(file)) st = moe_fail(err, MOE_ERR_IO, "%s: read error", path);
    if (!st && ln == 0) st = moe_fail(err, MOE_ERR_FORMAT, "%s: empty (not a lab CSV)", path);
    fclose(file);
    if (st) {
        free(set->rows);
        *set = before;
        set->cap = set->n;
        return st;
    }
    free(before.rows);
    return MOE_OK;
}

/* ---------------------------------------------------------------- the rank-sum test */

/* cur, prev [nb + 1][U_MAX + 1] -> cur[j][u]: how many of the C(na + j, na) orderings of na a's
 * and j b's have u pairs with the b above the a. Built up over i a's: the largest value is
 * either an a (above no b: the orderings of i - 1 a's) or a b (above all i a's: u - i pairs
 * among the rest). */
#define U_MAX (LAB_COMPARE_MAX_RUNS * LAB_COMPARE_MAX_RUNS)
static void rank_sum_counts(int na, int nb, double (*cur)[U_MAX + 1], double (*prev)[U_MAX + 1]) {
    for (int i = 0; i <= na; i++) {
        for (int j = 0; j <= nb; j++)
            for (int u = 0; u <= U_MAX; u++) {
                if (i == 0 || j == 0) cur[j][u] = u == 0;
                else cur[j][u] = prev[j][u] + (u >= i ? cur[j - 1][u - i] : 0.0);
            }
        memcpy(prev, cur, (size_t)(nb + 1) * sizeof *cur);
    }
}

double lab_rank_sum_p(const double *a, int na, const double *b, int nb) {
    if (na < 1 || nb < 1 || na > LAB_COMPARE_MAX_RUNS || nb > LAB_COMPARE_MAX_RUNS) return 1.0;
    int twice_u = 0; /* 2 U: pairs with b above a, a tie counting half */
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) twice_u += b[j] > a[i] ? 2 : b[j] == a[i] ? 1 : 0;
    double (*cur)[U_MAX + 1] = malloc((size_t)(nb + 1) * sizeof *cur);
    double (*prev)[U_MAX + 1] = malloc((size_t)(nb + 1) * sizeof *prev);
    if (!cur || !prev) {
        free(cur), free(prev);
        return 1.0; /* no memory: claim nothing */
    }
    rank_sum_counts(na, nb, cur, prev);
    const int u_low = (twice_u + 1) / 2, u_high = twice_u / 2; /* a half U: the far side of it */
    double total = 0.0, low = 0.0, high = 0.0;
    for (int u = 0; u <= na * nb; u++) {
        total += cur[nb][u];
        if (u <= u_low) low += cur[nb][u];
        if (u >= u_high) high += cur[nb][u];
    }
    free(cur), free(prev);
    const double p = 2.0 * (low < high ? low : high) / total;
    return p < 1.0 ? p : 1.0;
}

/* ---------------------------------------------------------------- the table */

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median_of(const double *v, int n) {
    double s[LAB_COMPARE_MAX_RUNS];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* A side's cell: "median [least, most] (runs)", or "-" without runs. */
static void side_cell(const lab_compare_row *r, int side, char *cell, size_t cap) {
    const int n = r->runs[side];
    if (!n) {
        snprintf(cell, cap, "-");
        return;
    }
    double lo = r->median_us[side][0], hi = lo;
    for (int i = 1; i < n; i++) {
        lo = fmin(lo, r->median_us[side][i]);
        hi = fmax(hi, r->median_us[side][i]);
    }
    snprintf(cell, cap, "%.1f [%.1f, %.1f] (%d)", median_of(r->median_us[side], n), lo, hi, n);
}

/* p as the table prints it: three decimals, or the exponent below 0.001 (eight runs a side
 * reach 2 / 12870). */
static void p_text_of(double p, char *text, size_t cap) {
    if (p >= 0.001) snprintf(text, cap, "%.3f", p);
    else snprintf(text, cap, "%.1e", p);
}

/* What the two sides of a row say: both ran, their figures, the difference and its p. */
typedef struct {
    bool both, told; /* told: p <= LAB_COMPARE_ALPHA and the figures differ */
    double baseline_us, candidate_us, pct, p;
} row_verdict;

static row_verdict verdict_of(const lab_compare_row *r) {
    row_verdict v = {.both = r->runs[0] && r->runs[1], .p = 1.0};
    if (!v.both) return v;
    v.baseline_us = median_of(r->median_us[0], r->runs[0]);
    v.candidate_us = median_of(r->median_us[1], r->runs[1]);
    v.pct = v.baseline_us > 0 ? 100.0 * (v.candidate_us / v.baseline_us - 1.0) : 0.0;
    v.p = lab_rank_sum_p(r->median_us[0], r->runs[0], r->median_us[1], r->runs[1]);
    v.told = v.p <= LAB_COMPARE_ALPHA && v.candidate_us != v.baseline_us;
    return v;
}

int lab_compare_print(FILE *out, const lab_compare_set *set, double max_slowdown_pct) {
    int w_shape = 5, w_variant = 7;
    for (int i = 0; i < set->n; i++) {
        w_shape = (int)fmax(w_shape, (double)strlen(set->rows[i].shape));
        w_variant = (int)fmax(w_variant, (double)strlen(set->rows[i].variant));
    }
    fprintf(out, "lab-compare: stage \"%s\", us: the median of a side's runs' medians [least, most] "
                 "(runs); p: exact two-sided rank-sum test (~: p > %.2f, not a result)\n",
            set->stage, LAB_COMPARE_ALPHA);
    fprintf(out, "  %-*s  %-*s  %7s  %-30s  %-30s  %-12s  %s\n", w_shape, "shape", w_variant, "variant", "T",
            "baseline", "candidate", "difference", "p");
    int faster = 0, slower = 0, same = 0, one_sided = 0;
    for (int i = 0; i < set->n; i++) {
        const lab_compare_row *r = &set->rows[i];
        const row_verdict v = verdict_of(r);
        char base[64], cand[64], diff[32] = "-", p_text[16] = "-";
        side_cell(r, LAB_BASELINE, base, sizeof base);
        side_cell(r, LAB_CANDIDATE, cand, sizeof cand);
        if (v.both) {
            snprintf(diff, sizeof diff, "%+.1f %%%s", v.pct, v.told ? "" : " ~");
            p_text_of(v.p, p_text, sizeof p_text);
        }
        one_sided += !v.both;
        same += v.both && !v.told;
        faster += v.told && v.candidate_us < v.baseline_us;
        slower += v.told && v.candidate_us > v.baseline_us;
        fprintf(out, "  %-*s  %-*s  %7d  %-30s  %-30s  %-12s  %s\n", w_shape, r->shape, w_variant,
                r->variant, r->T, base, cand, diff, p_text);
    }
    fprintf(out, "verdict: %d faster, %d slower (p <= %.2f), %d not told apart, %d on one side only\n",
            faster, slower, LAB_COMPARE_ALPHA, same, one_sided);
    if (max_slowdown_pct < 0) return 0;
    int over = 0;
    for (int i = 0; i < set->n; i++) {
        const lab_compare_row *r = &set->rows[i];
        const row_verdict v = verdict_of(r);
        if (!v.told || v.candidate_us <= v.baseline_us || v.pct <= max_slowdown_pct) continue;
        char p_text[16];
        p_text_of(v.p, p_text, sizeof p_text);
        fprintf(out, "slower than allowed: %s %s T = %d: %+.1f %% (p %s), more than %.1f %%\n",
                r->shape, r->variant, r->T, v.pct, p_text, max_slowdown_pct);
        over++;
    }
    return over;
}
