/*
 * fuzz_tally.h: outcomes per path class over a fuzz run, and the summary table.
 *
 * Rules: every path result is counted (the table grows; out of memory is said, never ignored);
 * the summary's last line is "N passed, N failed, N skipped" over path-case outcomes.
 */
#ifndef INKLING_FUZZ_TALLY_H
#define INKLING_FUZZ_TALLY_H

#include "fuzz.h"

#include <stdio.h>

typedef struct {
    char name[48];
    long passed, failed, skipped;
} fuzz_path_tally;

typedef struct {
    fuzz_path_tally *p;
    int n, cap;
    long passed, failed, skipped; /* over every path */
} fuzz_tally;

/* Counts every result of res. Returns non-zero (after saying so on stderr) when out of memory. */
int fuzz_tally_add(fuzz_tally *t, const fuzz_case_result *res);
/* The table "path passed failed skipped", one row per path class, indented by two spaces. */
void fuzz_tally_print(FILE *f, const fuzz_tally *t);
void fuzz_tally_free(fuzz_tally *t);

/* The run's paths as the header line names them: "ref (exact, serving, splits), blas, cuda
 * (SKIPPED: why)". */
void fuzz_print_paths(FILE *f, const fuzz_targets *tg);

#endif
