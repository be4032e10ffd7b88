/*
 * cmd_lab.c: `inkling-moe lab`, the kernel lab of the CUDA path (harness/lab.h): every CUDA
 * variant on one layer from the case generator, checked and timed stage by stage.
 *
 * Rules: options are read by the one parser (cli_args.h); the layer is --shape NAME (default
 * inkling-small, with --seed, --format and --routing) or --case LINE; --routing uniform leaves
 * the shape's gate bias out (the case line's bias=0), so that every token's experts are a uniform
 * draw, as contract.md [floors] counts them, and labels the shape NAME-uniform (the shapes' own
 * random bias skews the routing: docs/perf-cuda.md, forty-sixth run); --small is --shape small with
 * --tokens 1,33; --check names the T judged against the reference ("all" by default, "none");
 * --csv FILE appends one row per (variant, T, stage) (the header when the file is new); --list
 * prints the registry's CUDA variants; --tiles the routed rows' tiles at each T (lab_tiles.c).
 * Exit status 0 every check passed, 1 a check failed,
 * 2 bad usage, 77 (LAB_EXIT_SKIPPED) nothing could run here.
 */
#include "cli_args.h"
#include "commands.h"
#include "lab.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: inkling-moe lab [--stage " LAB_FOCUS_CHOICES "]\n"
            "         [--variant all|NAME,...] [--shape inkling-small|inkling|small | --case 'LINE' | --small]\n"
            "         [--tokens 1,64,4096] [--iters N] [--check all|none|T,...] [--seed S]\n"
            "         [--format mxfp4|nvfp4] [--routing skewed|uniform] [--csv FILE] [--timeline]\n"
            "         [--list] [--tiles]\n"
            "  runs every variant (--variant all: each CUDA variant the registry lists) on the same\n"
            "  layer and inputs at each T: bitwise determinism, sampled tokens judged against the\n"
            "  reference with the contract's envelope, the median of --iters calls per stage after\n"
            "  an L2 flush beside the bytes, FLOPs and floor of the stage (--stage: which stages),\n"
            "  and the spread of the layer's calls (p10, median, p90; per stage in the CSV);\n"
            "  --routing uniform: the shape without its gate bias, so each token's experts are a\n"
            "  uniform draw (the routing contract.md [floors] counts; the shape's random bias, the\n"
            "  default `skewed`, gives some experts many times the mean of rows and others none);\n"
            "  --timeline: the kernels of one more serving call as the GPU ran them (CUPTI);\n"
            "  --tiles: only the routed rows an expert and the row tiles they make at each T,\n"
            "  routed on the host (no GPU needed)\n");
}

/* "all" (every T of tokens), "none", or a list of T that must each be in tokens. */
/* Whether the file at path begins with LAB_CSV_HEADER: rows are only ever appended under
 * their own columns. */
static bool csv_header_matches(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[sizeof LAB_CSV_HEADER + 2];
    const bool ok = fgets(line, sizeof line, f) && strcmp(line, LAB_CSV_HEADER "\n") == 0;
    fclose(f);
    return ok;
}

static int parse_check(const char *list, lab_plan *p) {
    const bool all = strcmp(list, "all") == 0, none = strcmp(list, "none") == 0;
    for (int i = 0; i < p->n_tokens; i++) p->check[i] = all;
    if (all || none) return -1;
    int ts[LAB_MAX_T], n;
    moe_error err;
    moe_error_clear(&err);
    if (lab_parse_tokens(list, ts, LAB_MAX_T, &n, &err)) return cli_fail("lab", "argument --check: %s", err.msg);
    for (int k = 0; k < n; k++) {
        int hit = 0;
        for (int i = 0; i < p->n_tokens; i++)
            if (p->tokens[i] == ts[k]) p->check[i] = true, hit = 1;
        if (!hit) return cli_fail("lab", "argument --check: T = %d is not in --tokens", ts[k]);
    }
    return -1;
}

int cmd_lab(int argc, char **argv) {
    const char *variants = "cuda", *backends = NULL, *shape = "inkling-small", *line = NULL;
    const char *tokens = NULL, *check = "all", *csv_path = NULL;
    int focus = LAB_FOCUS_LAYER, iters = 30, format = 0, routing = 0;
    uint64_t seed = 1;
    bool small = false, list = false, timeline = false, tiles = false;
    cli_option opts[] = {
        {.name = "--stage", .kind = CLI_CHOICE, .out = &focus, .choices = LAB_FOCUS_CHOICES},
        {.name = "--variant", .kind = CLI_STRING, .out = &variants, .nonempty = true},
        {.name = "--backends", .kind = CLI_STRING, .out = &backends, .nonempty = true, .excludes = "--variant"},
        {.name = "--shape", .kind = CLI_STRING, .out = &shape, .nonempty = true, .excludes = "--case"},
        {.name = "--case", .kind = CLI_STRING, .out = &line, .nonempty = true, .excludes = "--seed"},
        {.name = "--small", .kind = CLI_FLAG, .out = &small, .excludes = "--shape"},
        {.name = "--tokens", .kind = CLI_STRING, .out = &tokens, .nonempty = true},
        {.name = "--iters", .kind = CLI_INT, .out = &iters, .lo = 1, .hi = 100000},
        {.name = "--check", .kind = CLI_STRING, .out = &check, .nonempty = true},
        {.name = "--seed", .kind = CLI_U64, .out = &seed},
        {.name = "--format", .kind = CLI_CHOICE, .out = &format, .choices = "mxfp4,nvfp4", .excludes = "--case"},
        {.name = "--routing", .kind = CLI_CHOICE, .out = &routing, .choices = "skewed,uniform", .excludes = "--case"},
        {.name = "--csv", .kind = CLI_STRING, .out = &csv_path, .nonempty = true},
        {.name = "--list", .kind = CLI_FLAG, .out = &list},
        {.name = "--timeline", .kind = CLI_FLAG, .out = &timeline},
        {.name = "--tiles", .kind = CLI_FLAG, .out = &tiles},
    };
    int rc = cli_parse("lab", opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, usage);
    if (rc >= 0) return rc;
    if (small && line) return cli_fail("lab", "argument --small: cannot be combined with --case");
    if (list) {
        const moe_backend *v[LAB_MAX_VARIANTS];
        const int n = lab_cuda_variants(v, LAB_MAX_VARIANTS);
        for (int i = 0; i < n && i < LAB_MAX_VARIANTS; i++) {
            char why[256] = "";
            const bool ok = v[i]->available(why, sizeof why);
            printf("%-12s %s%s%s\n", v[i]->name, v[i]->description, ok ? "" : "; unavailable here: ", ok ? "" : why);
        }
        if (n == 0) printf("no CUDA variant in this build (built without the CUDA toolkit)\n");
        return 0;
    }
    static lab_plan p; /* large: fuzz_case and the lists */
    memset(&p, 0, sizeof p);
    p.iters = iters;
    p.focus = (lab_focus)focus;
    p.timeline = timeline;
    moe_error err;
    moe_error_clear(&err);
    if (lab_parse_variants(backends ? backends : variants, &p, &err))
        return cli_fail("lab", "argument %s: %s", backends ? "--backends" : "--variant", err.msg);
    if (small) shape = "small";
    if (line) {
        if (fuzz_case_parse(line, &p.layer, &err) || lab_check_case(&p.layer, &err))
            return cli_fail("lab", "argument --case: %s", err.msg);
        snprintf(p.shape, sizeof p.shape, "case");
    } else {
        const moe_routed_format fmt = format ? MOE_ROUTED_NVFP4 : MOE_ROUTED_MXFP4;
        if (lab_shape_case(shape, seed, fmt, &p.layer, &err)) return cli_fail("lab", "argument --shape: %s", err.msg);
        if (routing) p.layer.cfg.has_gate_bias = false; /* uniform: no bias to favour an expert */
        snprintf(p.shape, sizeof p.shape, "%s%s%s", shape, format ? "-nvfp4" : "", routing ? "-uniform" : "");
    }
    if (!tokens) tokens = small ? "1,33" : line ? NULL : "1,64,4096";
    if (tokens) {
        if (lab_parse_tokens(tokens, p.tokens, LAB_MAX_T, &p.n_tokens, &err))
            return cli_fail("lab", "argument --tokens: %s", err.msg);
    } else { /* a case line without --tokens: its own T */
        p.tokens[0] = p.layer.T > 0 ? p.layer.T : 1;
        p.n_tokens = 1;
    }
    if (tiles) return lab_tiles_report(&p, stdout);
    rc = parse_check(check, &p);
    if (rc >= 0) return rc;
    FILE *csv = NULL;
    if (csv_path) {
        struct stat sb;
        const bool exists = stat(csv_path, &sb) == 0, fresh = !exists || sb.st_size == 0;
        if (exists && !S_ISREG(sb.st_mode)) /* a pipe would hold the lab until someone read it */
            return cli_fail("lab", "argument --csv: %s is not a regular file", csv_path);
        if (!fresh && !csv_header_matches(csv_path))
            return cli_fail("lab", "argument --csv: %s does not begin with this lab's header "
                            "(another tool's file, or an older lab's columns); name a new file",
                            csv_path);
        csv = fopen(csv_path, "a");
        if (!csv) return cli_fail("lab", "argument --csv: cannot open %s for appending", csv_path);
        if (fresh) fprintf(csv, "%s\n", LAB_CSV_HEADER);
    }
    rc = lab_run(&p, stdout, csv);
    if (csv && fclose(csv) != 0) return cli_fail("lab", "argument --csv: cannot write %s", csv_path);
    return rc;
}
