/*
 * cmd_fuzz_case.c: `inkling-moe fuzz --case 'LINE'`, one case over the run's paths
 * (docs/harness.md, "Cases and suites").
 *
 * Rules: the case line is parsed strictly (a bad line is bad usage, exit 2); every path result
 * is printed (PASS, FAIL with its report, SKIPPED with its reason), then the standard last
 * line "N passed, N failed, N skipped"; exit status 1 on any failure.
 */
#include "cli_args.h"
#include "cmd_fuzz.h"

#include <stdio.h>

void fuzz_print_result(const fuzz_case_result *res) {
    for (int i = 0; i < res->n; i++) {
        const fuzz_path_result *r = &res->r[i];
        printf("  %-28s %s\n", r->path,
               r->outcome == FUZZ_PASS ? "PASS" : r->outcome == FUZZ_FAIL ? "FAIL" : "SKIPPED");
        if (r->outcome == FUZZ_FAIL) moe_cmp_report_print(stdout, &r->rep);
        if (r->outcome == FUZZ_SKIP) printf("    %s\n", r->skip_reason);
    }
}

int fuzz_cmd_case(const fuzz_args *a) {
    fuzz_case c;
    moe_error err;
    moe_error_clear(&err);
    if (fuzz_case_parse(a->case_line, &c, &err)) return cli_fail("fuzz", "%s", err.msg);
    const moe_backend *cands[FUZZ_MAX_CANDIDATES];
    fuzz_targets tg;
    if (fuzz_choose_targets(a, cands, FUZZ_MAX_CANDIDATES, &tg)) return 2;
    char line[512];
    printf("case: %s\n", fuzz_case_format(&c, line, sizeof line));
    fuzz_case_result res;
    if (fuzz_run_case(&c, &tg, &res, &err)) return cli_fail("fuzz", "%s", err.msg);
    if (res.sampled[0]) printf("reference checked %s\n", res.sampled);
    fuzz_print_result(&res);
    long p = 0, f = 0, s = 0;
    for (int i = 0; i < res.n; i++) {
        p += res.r[i].outcome == FUZZ_PASS;
        f += res.r[i].outcome == FUZZ_FAIL;
        s += res.r[i].outcome == FUZZ_SKIP;
    }
    printf("%ld passed, %ld failed, %ld skipped\n", p, f, s);
    return f ? 1 : 0;
}
