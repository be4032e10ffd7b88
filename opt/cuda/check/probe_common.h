/*
 * probe_common.h: what the GPU probes (cuda-stream-probe, cuda-wgmma-probe) share: their
 * command line ([--csv FILE] [--quick], each argument refused by name in one line, and FILE
 * tried before anything is measured, so that a bad path costs no device time), a failed CUDA
 * call ending the program with its name, the CSV kept until it is written whole, and medians.
 */
#ifndef INKLING_PROBE_COMMON_H
#define INKLING_PROBE_COMMON_H

#include "../../../common/out_file.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *probe_prog = "probe"; /* the program's name in its messages */

/* A CUDA call that must succeed: else the program ends (exit 1) naming the call. */
#define PROBE_TRY(call)                                                                           \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s: %s: %s\n", probe_prog, #call, cudaGetErrorString(e_));            \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* The CSV's rows, kept until the end (a few kB) and written whole then (moe_out_write_whole). */
static char probe_csv[1 << 16];
static size_t probe_csv_len;
static inline void csv_row(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void csv_row(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(probe_csv + probe_csv_len, sizeof probe_csv - probe_csv_len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof probe_csv - probe_csv_len) probe_csv_len += (size_t)n;
}

static inline int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* The median of v [n] (sorted in place). */
static inline double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    const char *csv_path; /* --csv FILE: every case as a CSV row, written whole at the end or
                             not at all (NULL: none) */
    bool quick;           /* --quick: each measurement once, with every check (the sanitizers'
                             run) */
} probe_args;

/* Parses argv into a and installs the output file's signal handlers; 0, or 2 once the refusal
 * is printed. prog names the program in it and in PROBE_TRY's. */
static inline int probe_parse_args(const char *prog, int argc, char **argv, probe_args *a) {
    probe_prog = prog;
    a->csv_path = NULL, a->quick = false;
    for (int i = 1; i < argc; i++) {
        const char *why = NULL;
        if (!strcmp(argv[i], "--csv")) {
            if (a->csv_path) why = "given twice";
            else if (i + 1 == argc) why = "needs a FILE";
            else a->csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--quick")) {
            if (a->quick) why = "given twice";
            a->quick = true;
        } else {
            why = "unknown";
        }
        if (why) {
            fprintf(stderr, "%s: argument %s: %s (usage: %s [--csv FILE] [--quick])\n", prog, argv[i],
                    why, prog);
            return 2;
        }
    }
    moe_error err;
    if (a->csv_path) { /* opened once and given up: refused now, not after the measurements */
        moe_out_file probe;
        if (moe_out_refuse_same("argument --csv", a->csv_path, NULL, 0, &err) ||
            moe_out_open(a->csv_path, &probe, &err)) {
            fprintf(stderr, "%s: %s\n", prog, err.msg);
            return 2;
        }
        moe_out_abort(&probe);
    }
    moe_out_guard_signals();
    return 0;
}

#endif
