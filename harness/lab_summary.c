/* lab_summary.c: the lab's last table (rules in lab.h): the serving graph of every (T, variant)
 * side by side, each later variant against the first one timed at that T, so that a change is
 * read against its own spread, not against a single median. */
#include "lab.h"

#include <stdio.h>

/* Whether two calls' [p10, p90] ranges share a point: then the medians' difference is within
 * the calls' spread (an A/A pair of one process differed by up to 1.6 us at T = 1 on an H100,
 * docs/perf-cuda.md, forty-fourth run). */
static bool spreads_overlap(lab_times a, lab_times b) {
    return a.p10_us <= b.p90_us && b.p10_us <= a.p90_us;
}

void lab_print_summary(FILE *out, const int *tokens, int n_tokens, const char *const *names,
                       int n_variants, const lab_summary_cell *cells) {
    bool any = false;
    for (int i = 0; i < n_tokens * n_variants; i++) any = any || cells[i].timed;
    if (!any) return;
    fprintf(out, "summary: serving graph, median us [p10, p90]; after the first variant timed at a "
                 "T, the difference from it (~: within the two calls' spreads)\n");
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
                             spreads_overlap(t, first->serving) ? " ~" : "");
                if (!first) first = c;
            }
            fprintf(out, "  %-*s", v + 1 < n_variants ? 34 : 0, cell); /* no trailing blanks */
        }
        fprintf(out, "\n");
    }
}
