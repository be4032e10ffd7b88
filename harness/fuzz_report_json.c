/*
 * fuzz_report_json.c: fuzz.json, the machine-readable summary of a fuzz run (rules in
 * fuzz_report.h).
 */
#include "fuzz_report.h"

#include "cli_args.h"

#include <inttypes.h>
#include <stdlib.h>

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* `, "name": "value"` (lead "" for an object's first field, else ", "). */
static void json_field(FILE *f, const char *lead, const char *name, const char *value) {
    fprintf(f, "%s\"%s\": ", lead, name);
    json_string(f, value);
}

static void json_failure(FILE *f, const fuzz_failure_record *r, bool last) {
    fprintf(f, "    {");
    json_field(f, "", "path", r->path);
    json_field(f, ", ", "suite", r->suite);
    json_field(f, ", ", "case", r->line);
    json_field(f, ", ", "shrunk", r->shrunk);
    json_field(f, ", ", "message", r->msg);
    json_field(f, ", ", "kind", r->kind);
    json_field(f, ", ", "regression_file", r->saved);
    fprintf(f, "}%s\n", last ? "" : ",");
}

int fuzz_write_json(const char *dir, uint64_t seed, const fuzz_totals *tt, const fuzz_suite *suites, int n_suites) {
    char path[1200], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/fuzz.json", dir);
    FILE *f = open_memstream(&buf, &len);
    if (!f) return cli_fail("fuzz", "file %s: out of memory", path);
    fprintf(f, "{\n  \"seed\": %" PRIu64 ",\n  \"seconds\": %.3f,\n  \"cases\": %ld,\n", seed, tt->elapsed, tt->cases);
    fprintf(f, "  \"cases_per_second\": %.3f,\n  \"paths\": [\n", tt->elapsed > 0 ? tt->cases / tt->elapsed : 0.0);
    for (int i = 0; i < tt->tally.n; i++) {
        const fuzz_path_tally *p = &tt->tally.p[i];
        fprintf(f, "    {");
        json_field(f, "", "name", p->name);
        fprintf(f, ", \"passed\": %ld, \"failed\": %ld, \"skipped\": %ld}%s\n", p->passed, p->failed,
                p->skipped, i + 1 < tt->tally.n ? "," : "");
    }
    fprintf(f, "  ],\n  \"suites\": [\n");
    for (int i = 0; i < n_suites; i++) {
        fprintf(f, "    {");
        json_field(f, "", "name", suites[i].name);
        fprintf(f, ", \"cases\": %ld}%s\n", tt->suite_cases[i], i + 1 < n_suites ? "," : "");
    }
    fprintf(f, "  ],\n  \"failures\": [\n");
    for (int i = 0; i < tt->n_failures; i++) json_failure(f, &tt->failures[i], i + 1 == tt->n_failures);
    fprintf(f, "  ]\n}\n");
    return fuzz_report_publish(path, f, &buf, &len);
}
