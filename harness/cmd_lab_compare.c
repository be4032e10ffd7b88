/*
 * cmd_lab_compare.c: `inkling-moe lab-compare`, the lab runs of two builds side by side
 * (harness/lab_compare.h); harness/bench/ab.sh makes the runs, alternating the builds.
 *
 * Rules: options are read by the one parser (cli_args.h); --baseline and --candidate each name
 * one lab CSV or several, comma-separated, whose rows are pooled; --stage is the lab's stage
 * name compared (default the serving graph); --max-slowdown PCT makes a slowdown of more than
 * PCT percent that the test tells apart an exit status of 1. No GPU is needed. Exit status 0,
 * 1 slower than allowed, 2 bad usage or a file refused (one line naming file and line).
 */
#include "cli_args.h"
#include "commands.h"
#include "lab_compare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe lab-compare --baseline A.csv[,A2.csv...] --candidate B.csv[,B2.csv...]\n"
            "         [--stage NAME] [--max-slowdown PCT]\n"
            "  the runs of `inkling-moe lab --csv` made with two builds, side by side: for each\n"
            "  (shape, variant, T) of the stage (default \"serving graph\"), the median of each side's\n"
            "  runs, its least and most, the difference, and the exact two-sided rank-sum p of the\n"
            "  runs' medians (a difference is called at p <= 0.05: four runs a side can show one,\n"
            "  three cannot); --max-slowdown: exit 1 where the candidate is slower by more than PCT %%\n"
            "  and the test tells it apart. harness/bench/ab.sh makes such runs, alternating builds.\n");
}

/* Reads every file of the comma-separated list into side; 2 after one error line. */
static int read_side(lab_compare_set *set, int side, const char *option, const char *list) {
    char *copy = strdup(list);
    if (!copy) return cli_fail("lab-compare", "argument %s: out of memory", option);
    int rc = -1;
    for (char *name = copy, *next; name && rc < 0; name = next) {
        next = strchr(name, ',');
        if (next) *next++ = '\0';
        if (!*name) {
            rc = cli_fail("lab-compare", "argument %s: an empty file name in the list", option);
            break;
        }
        moe_error err;
        moe_error_clear(&err);
        if (lab_compare_read(set, side, name, &err)) rc = cli_fail("lab-compare", "argument %s: %s", option, err.msg);
    }
    free(copy);
    return rc;
}

int cmd_lab_compare(int argc, char **argv) {
    const char *baseline = NULL, *candidate = NULL, *stage = "serving graph";
    double max_slowdown = -1.0;
    cli_option opts[] = {
        {.name = "--baseline", .kind = CLI_STRING, .out = &baseline, .nonempty = true, .required = true},
        {.name = "--candidate", .kind = CLI_STRING, .out = &candidate, .nonempty = true, .required = true},
        {.name = "--stage", .kind = CLI_STRING, .out = &stage, .nonempty = true},
        {.name = "--max-slowdown", .kind = CLI_REAL, .out = &max_slowdown, .lo = 0.0, .hi = 1000.0},
    };
    int rc = cli_parse("lab-compare", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage);
    if (rc >= 0) return rc;
    lab_compare_set set;
    moe_error err;
    moe_error_clear(&err);
    if (lab_compare_init(&set, stage, &err)) return cli_fail("lab-compare", "argument --stage: %s", err.msg);
    rc = read_side(&set, LAB_BASELINE, "--baseline", baseline);
    if (rc < 0) rc = read_side(&set, LAB_CANDIDATE, "--candidate", candidate);
    if (rc < 0 && set.n == 0)
        rc = cli_fail("lab-compare", "argument --stage: no row of stage \"%s\" in either side's files", stage);
    if (rc < 0) rc = lab_compare_print(stdout, &set, max_slowdown) > 0 ? 1 : 0;
    lab_compare_free(&set);
    return rc;
}
