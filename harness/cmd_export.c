/*
 * cmd_export.c: `inkling-moe export`, a fuzz case as files any engine can load
 * (harness/case_files.h, docs/external-paths.md).
 *
 * Rules: --case LINE (a fuzz case line, as the fuzzer prints and saves them) and --out DIR are
 * required; --precision picks the contract of expected.safetensors (serving by default);
 * options are read by the one parser (cli_args.h); exit status 0 written, 2 bad usage, a case
 * that does not parse or a file that cannot be written (one line naming the option or file).
 */
#include "case_files.h"
#include "cli_args.h"
#include "commands.h"

#include <stdio.h>

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe export --case 'LINE' --out DIR [--precision exact|serving|engine]\n"
               "  writes DIR/config.json and DIR/model.safetensors (the layer, original tensor names),\n"
               "  DIR/input.safetensors (x), DIR/expected.safetensors (the reference with every stage)\n"
               "  and DIR/case.txt; judge an engine's output with inkling-moe check\n");
}

int cmd_export(int argc, char **argv) {
    const char *line = NULL, *dir = NULL;
    int precision = 1;
    cli_option opts[] = {
        {.name = "--case", .kind = CLI_STRING, .out = &line, .required = true, .nonempty = true},
        {.name = "--out", .kind = CLI_STRING, .out = &dir, .required = true, .nonempty = true},
        {.name = "--precision", .kind = CLI_CHOICE, .out = &precision, .choices = "exact,serving,engine"},
    };
    int rc = cli_parse("export", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage);
    if (rc >= 0) return rc;
    fuzz_case c;
    moe_error err;
    moe_error_clear(&err);
    moe_status st = fuzz_case_parse(line, &c, &err);
    if (st) return cli_fail("export", "argument --case: %s", err.msg);
    st = moe_export_case(&c, precision == 0 ? MOE_PRECISION_EXACT : precision == 1 ? MOE_PRECISION_SERVING : MOE_PRECISION_ENGINE, dir, &err);
    if (st) return cli_fail("export", "%s", err.msg);
    printf("exported to %s: config.json model.safetensors input.safetensors expected.safetensors case.txt\n", dir);
    return 0;
}
