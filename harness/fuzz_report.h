/*
 * fuzz_report.h: what a fuzz run gathers for its reports, and the two report files it writes
 * into the report directory: fuzz.json (fuzz_report_json.c) and fuzz-junit.xml
 * (fuzz_report_junit.c), for a nightly job's dashboard (docs/harness.md, "Output").
 *
 * Rules:
 *   - a report is gathered in memory and published whole through the all-or-nothing writer
 *     (common/out_file.h): a reader never sees half a report; one that cannot be written is an
 *     error (exit 2, one line), never announced;
 *   - every failing path shows as failing: the JUnit report has a testsuite per path holding a
 *     testcase for its passing cases, one for its skipped ones, one per recorded failing case
 *     and one for any further failing cases;
 *   - strings are escaped for their format (JSON \uXXXX, XML entities; control characters in XML
 *     are dropped).
 */
#ifndef INKLING_FUZZ_REPORT_H
#define INKLING_FUZZ_REPORT_H

#include "fuzz_tally.h"

#include <stdint.h>
#include <stdio.h>

#define FUZZ_MAX_SUITES 4   /* suites one run draws from (--suite) */
#define FUZZ_MAX_FAILURES 8 /* failing cases recorded one by one; the rest are counted */

/* One failing case as the reports show it. */
typedef struct {
    char path[48];
    char suite[32];
    char line[512];
    char shrunk[512];
    char msg[768];
    char saved[600]; /* the regression case, or the sequence of an intermittent failure */
    char kind[16];   /* "deterministic" or "intermittent" */
} fuzz_failure_record;

/* A whole run: outcomes per path, cases per suite, the recorded failures. */
typedef struct {
    fuzz_tally tally;
    long suite_cases[FUZZ_MAX_SUITES];
    fuzz_failure_record failures[FUZZ_MAX_FAILURES];
    int n_failures;
    long total_failures; /* failing cases, recorded or not, and cases that could not run */
    long cases;
    double elapsed;
} fuzz_totals;

/* DIR/fuzz.json: seed, time, cases per path and per suite, the recorded failures. Returns 0,
 * or 2 after one error line. */
int fuzz_write_json(const char *dir, uint64_t seed, const fuzz_totals *tt, const fuzz_suite *suites, int n_suites);
/* DIR/fuzz-junit.xml (rules above). Returns 0, or 2 after one error line. */
int fuzz_write_junit(const char *dir, uint64_t seed, const fuzz_totals *tt);

/* The writers' common end: closes f (an open_memstream on *buf, *len) and publishes *buf whole
 * as path; frees *buf. Returns 0, or 2 after one error line. */
int fuzz_report_publish(const char *path, FILE *f, char **buf, size_t *len);

#endif
