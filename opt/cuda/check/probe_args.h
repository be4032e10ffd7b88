/*
 * probe_args.h: the command line of the GPU probes (cuda-stream-probe, cuda-wgmma-probe):
 * [--csv FILE] [--quick], each argument refused by name in one line, and FILE tried before
 * anything is measured, so that a bad path costs no device time.
 */
#ifndef INKLING_PROBE_ARGS_H
#define INKLING_PROBE_ARGS_H

#include "../../../common/out_file.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *csv_path; /* --csv FILE: every case as a CSV row, written whole at the end or
                             not at all (NULL: none) */
    bool quick;           /* --quick: each measurement once, with every check (the sanitizers'
                             run) */
} probe_args;

/* Parses argv into a and installs the output file's signal handlers; 0, or 2 once the refusal
 * is printed. prog names the program in it. */
static inline int probe_parse_args(const char *prog, int argc, char **argv, probe_args *a) {
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
