/*
 * fuzz_report_junit.c: fuzz-junit.xml, a fuzz run as JUnit test suites for a dashboard (rules
 * in fuzz_report.h).
 */
#include "fuzz_report.h"

#include "cli_args.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static void xml_string(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: if ((unsigned char)*s >= 0x20) fputc(*s, f); break;
        }
    }
}

/* One <testcase>: name is "<path>: <what>"; kind 'p' passed, 's' skipped, 'f' failed. */
static void junit_case(FILE *f, const char *path, const char *what, char kind, const char *message,
                       const fuzz_failure_record *r) {
    fprintf(f, "    <testcase classname=\"fuzz.");
    xml_string(f, path);
    fprintf(f, "\" name=\"");
    xml_string(f, what);
    fprintf(f, "\">");
    if (kind == 's') fprintf(f, "<skipped/>");
    if (kind == 'f') {
        fprintf(f, "\n      <failure message=\"");
        xml_string(f, message);
        fprintf(f, "\">");
        if (r) {
            fprintf(f, "case: ");
            xml_string(f, r->line);
            fprintf(f, "\nshrunk: ");
            xml_string(f, r->shrunk);
            fprintf(f, "\n%s failure; regression file: ", r->kind);
            xml_string(f, r->saved);
        }
        fprintf(f, "</failure>\n    ");
    }
    fprintf(f, "</testcase>\n");
}

/* A path's testcases: tests, failures and skipped as its <testsuite> counts them. */
typedef struct {
    int tests, failures, skipped;
} suite_counts;

static suite_counts count_path(const fuzz_totals *tt, const fuzz_path_tally *p) {
    int recorded = 0;
    for (int k = 0; k < tt->n_failures; k++) recorded += !strcmp(tt->failures[k].path, p->name);
    const int fail_cases = recorded + (p->failed > recorded);
    suite_counts c = {(p->passed > 0) + (p->skipped > 0) + fail_cases, fail_cases, p->skipped > 0};
    return c;
}

/* One path's <testsuite>. */
static void junit_suite(FILE *f, const fuzz_totals *tt, const fuzz_path_tally *p, suite_counts c) {
    char what[700];
    fprintf(f, "  <testsuite name=\"");
    xml_string(f, p->name);
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\">\n", c.tests, c.failures, c.skipped);
    if (p->passed) {
        snprintf(what, sizeof what, "%ld cases passed", p->passed);
        junit_case(f, p->name, what, 'p', NULL, NULL);
    }
    if (p->skipped) {
        snprintf(what, sizeof what, "%ld cases skipped (path unavailable or case unsupported)", p->skipped);
        junit_case(f, p->name, what, 's', NULL, NULL);
    }
    long recorded = 0;
    for (int k = 0; k < tt->n_failures; k++)
        if (!strcmp(tt->failures[k].path, p->name)) {
            recorded++;
            snprintf(what, sizeof what, "failing case %.600s", tt->failures[k].line);
            junit_case(f, p->name, what, 'f', tt->failures[k].msg, &tt->failures[k]);
        }
    if (p->failed > recorded) {
        snprintf(what, sizeof what, "%ld further failing cases", p->failed - recorded);
        junit_case(f, p->name, what, 'f',
                   "failing cases not recorded one by one (the first failing path of a case, up "
                   "to the first failures of the run, is): see the fuzzer's output", NULL);
    }
    fprintf(f, "  </testsuite>\n");
}

int fuzz_write_junit(const char *dir, uint64_t seed, const fuzz_totals *tt) {
    char path[1200], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/fuzz-junit.xml", dir);
    suite_counts *counts = calloc((size_t)tt->tally.n + 1, sizeof *counts);
    FILE *f = counts ? open_memstream(&buf, &len) : NULL;
    if (!f) {
        free(counts);
        return cli_fail("fuzz", "file %s: out of memory", path);
    }
    long tests = 0, fails = 0, skips = 0;
    for (int i = 0; i < tt->tally.n; i++) {
        counts[i] = count_path(tt, &tt->tally.p[i]);
        tests += counts[i].tests, fails += counts[i].failures, skips += counts[i].skipped;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"inkling-moe fuzz (seed %" PRIu64 ")\" tests=\"%ld\" failures=\"%ld\" "
            "skipped=\"%ld\" time=\"%.3f\">\n", seed, tests, fails, skips, tt->elapsed);
    for (int i = 0; i < tt->tally.n; i++) junit_suite(f, tt, &tt->tally.p[i], counts[i]);
    fprintf(f, "</testsuites>\n");
    free(counts);
    return fuzz_report_publish(path, f, &buf, &len);
}
