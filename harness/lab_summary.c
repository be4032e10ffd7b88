/* lab_summary.c: the lab's last table (rules in lab.h): the serving graph of every (T, variant)
 * side by side, each later variant against the first one timed at that T, marked where the
 * calls cannot tell the two medians apart. */
#include "lab.h"

#include <stdio.h>

/* Whether two medians' notches share a point: then their difference is not shown by these calls.
 * Not the [p10, p90] ranges: at T = 8 on an H100 those were 20-30 us wide while two variants'
 * medians stood 4 % apart, run after run (docs/device-notes.md, forty-fourth run). */
static bool notches_overlap(lab_times a, lab_times b) {
    const double na = lab_median_notch(a), nb = lab_median_notch(b);
    return a.median_us - na <= b.median_us + nb && b.median_us - nb <= a.median_us + na;
}

void lab_print_summary(FILE *out, const int *tokens, int n_tokens, const char *const *names,
                       int n_variants, const lab_summary_cell *cells) {
    bool any = false;
    for (int i = 0; i < n_tokens * n_variants; i++) any = any || cells[i].timed;
    if (!any) return;
    fprintf(out, "summary: serving graph, median us [p10, p90]; after the first variant timed at a "
                 "T, the difference from it (~: the medians' notches overlap, not a result)\n");
    fprintf(out, "  %7s", "T");
    for (int v = 0; v < n_variants; v++) fprintf(out, "  %-*s", v + 1 < n_variants ? 34 : 0, names[v]);
    fprintf(out, "\n");
    for (int i = 0; i < n_tokens; i++) {
        const lab_summary_cell *row = cells + (size_t)i * n_variants, *first = NULL;
        fprintf(out, "  %7d", tokens[i]);
        for (int v = 0; v < n_variants; v++) {
            char cell[96] = "-";
            const lab_summary_cell *c = &row[v];
            if (c->timed) {
                const lab_times t = c->serving;
                int len = snprintf(cell, sizeof cell, "%.1f [%.1f, %.1f]", t.median_us, t.p10_us, t.p90_us);
                if (first && first->serving.median_us > 0)
                    snprintf(cell + len, sizeof cell - (size_t)len, " %+.1f%%%s",
                             100.0 * (t.median_us / first->serving.median_us - 1.0),
                             notches_overlap(t, first->serving) ? " ~" : "");
                if (!first) first = c;
            }
            fprintf(out, "  %-*s", v + 1 < n_variants ? 34 : 0, cell); /* no trailing blanks */
        }
        fprintf(out, "\n");
    }
}
