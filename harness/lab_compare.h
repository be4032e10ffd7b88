/*
 * lab_compare.h: `inkling-moe lab-compare`, two builds' lab runs side by side. A kernel change
 * is judged by the same lab run several times with the baseline build and with the candidate,
 * one process after another (harness/bench/ab.sh alternates them); within one process two
 * variants share what ran before them, across processes each run stands alone.
 *
 * Rules:
 *   - input is the lab's own CSV (LAB_CSV_HEADER, lab.h); each row of a (shape, variant, T,
 *     stage) is one run of it, and its median_us that run's figure; a side's files are read in
 *     order and their rows pooled;
 *   - a figure per side is the median of its runs' medians, with their least and most;
 *   - whether the two sides differ is the exact two-sided rank-sum (Mann-Whitney) test on the
 *     runs' medians: no assumption about the spread across processes, and a difference is
 *     called only at p <= LAB_COMPARE_ALPHA. One run a side can never show one (p = 1); three
 *     a side at best p = 0.1; four a side 0.029;
 *   - a malformed file is refused whole, with its name and line: nothing is compared from
 *     part of a file; so is one that holds more than LAB_COMPARE_MAX_ROWS (shape, variant, T).
 * Library code: returns moe_status, never exits.
 */
#ifndef INKLING_LAB_COMPARE_H
#define INKLING_LAB_COMPARE_H

#include "common/moe.h"

#include <stdbool.h>
#include <stdio.h>

#define LAB_COMPARE_MAX_RUNS 16 /* runs a side of one (shape, variant, T, stage) */
#define LAB_COMPARE_MAX_ROWS 4096 /* (shape, variant, T) of the stage: far above a lab's 16 T by
                                     16 variants a shape, and a bound on the time a file takes */
#define LAB_COMPARE_ALPHA 0.05
#define LAB_COMPARE_NAME 64     /* the longest shape, variant or stage name kept */

enum { LAB_BASELINE = 0, LAB_CANDIDATE = 1 };

/* One (shape, variant, T) of the compared stage: each side's runs' medians, in file order. */
typedef struct {
    char shape[LAB_COMPARE_NAME], variant[LAB_COMPARE_NAME];
    int T;
    int runs[2];
    double median_us[2][LAB_COMPARE_MAX_RUNS];
} lab_compare_row;

typedef struct {
    char stage[LAB_COMPARE_NAME]; /* the lab's stage name compared ("serving graph") */
    lab_compare_row *rows;        /* in the order they were first read */
    int n, cap;
} lab_compare_set;

/* An empty set comparing the lab's stage named stage. */
moe_status lab_compare_init(lab_compare_set *set, const char *stage, moe_error *err);
void lab_compare_free(lab_compare_set *set);

/* Adds the rows of the set's stage in the lab CSV at path to side (LAB_BASELINE or
 * LAB_CANDIDATE). On a malformed file (MOE_ERR_FORMAT, naming path and line) or one that
 * cannot be read (MOE_ERR_IO) the set is as it was before. */
moe_status lab_compare_read(lab_compare_set *set, int side, const char *path, moe_error *err);

/* The exact two-sided rank-sum p of two samples a [na] and b [nb] (1 <= na, nb <=
 * LAB_COMPARE_MAX_RUNS): the chance, were both drawn from one distribution, of a rank sum at
 * least as far from its middle as this one. A tie counts half; the tail is then taken on the
 * far side of the half, so ties never make p smaller. */
double lab_rank_sum_p(const double *a, int na, const double *b, int nb);

/* The comparison table on out, a row per (shape, variant, T) and a closing verdict line.
 * max_slowdown_pct >= 0: also lists each row where the candidate is slower by more than that
 * many percent with p <= LAB_COMPARE_ALPHA, and returns how many there are (0 when < 0). */
int lab_compare_print(FILE *out, const lab_compare_set *set, double max_slowdown_pct);

#endif /* INKLING_LAB_COMPARE_H */
