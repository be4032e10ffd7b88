/* main.c: inkling-moe, the project's command-line tool: a table of subcommands. */
#include "commands.h"

#include "../common/out_file.h"

#include <stdio.h>
#include <string.h>

static const moe_command commands[] = {
    {"run", "run one MoE layer of a checkpoint on an input file", cmd_run},
    {"diff", "compare two paths stage by stage on a checkpoint layer", cmd_diff},
    {"fuzz", "differential fuzzing of every available path against the reference", cmd_fuzz},
    {"backends", "list the paths this build knows and whether they can run here", cmd_backends},
};

static void usage(FILE *f) {
    fprintf(f, "usage: inkling-moe COMMAND [options]   (inkling-moe COMMAND --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    moe_out_guard_signals(); /* an interrupted write leaves no temporary behind */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 2, argv + 2);
    fprintf(stderr, "inkling-moe: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
