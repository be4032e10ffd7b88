/* main.c: inkling-moe, the project's command-line tool: a table of subcommands. */
#include "cli_args.h"
#include "commands.h"

#include "../common/out_file.h"

#include <stdio.h>
#include <string.h>

static const moe_command commands[] = {
    {"run", "run one MoE layer of a checkpoint on an input file", cmd_run},
    {"inspect", "show what the loader understands of each MoE layer of a checkpoint", cmd_inspect},
    {"diff", "compare two paths stage by stage on a checkpoint layer", cmd_diff},
    {"fuzz", "differential fuzzing of every available path against the reference", cmd_fuzz},
    {"export", "write a fuzz case as a checkpoint, input and expected outputs for any engine", cmd_export},
    {"check", "judge an outputs file written by any implementation against the contract", cmd_check},
    {"backends", "list the paths this build knows and whether they can run here", cmd_backends},
    {"lab", "the CUDA variants on one layer: checked against the reference, timed per stage", cmd_lab},
    {"lab-compare", "two builds' lab runs side by side, with a rank-sum test of each difference", cmd_lab_compare},
};

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe COMMAND [options]   (inkling-moe COMMAND --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    moe_out_guard_signals(); /* an interrupted write leaves no temporary behind */
    cli_set_program(argv[0]);  /* rerun lines name this binary, wherever it was built */
    if (argc < 2) return cli_fail(NULL, "a command is needed (inkling-moe --help lists them)");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 2, argv + 2);
    return cli_fail(NULL, "unknown command '%s' (inkling-moe --help lists them)", argv[1]);
}
