/*
 * lab.h: the kernel lab (`inkling-moe lab`): every CUDA variant of the layer run on the same
 * case, each judged against the reference's result and timed stage by stage against its floor.
 *
 * Rules:
 *   - the layer and its inputs come from the harness's case generator (fuzz_case.h): a case
 *     line, or a named real shape that stands for one (lab_shape_case); the lab runs that layer
 *     at every T of its list, so the case may hold no feature that changes the input
 *     (FZ_INPUT_FEATURES); the inputs at T are the case at T with input = 0..LAB_ROTATE-1;
 *   - the variants are the registry's entries (common/layer.c) that the CUDA backend's stage
 *     timer can drive: those whose forward entry is the CUDA backend's (lab_cuda_variants);
 *     "all" is every one of them, in registry order, never a list written here;
 *   - a stage's floor is max(bytes / LAB_COPY_BW, flops / LAB_BF16_RATE) (contract.md
 *     [floors]); bytes are the fewest the stage must move (the weights of the distinct experts
 *     the batch selected, read once; activations read and written once);
 *   - the CSV has one row per (shape, variant, T, stage); its columns are LAB_CSV_HEADER;
 *   - the variants' timed calls at a T are interleaved (harness/lab_run.c), and the run ends
 *     with a summary of every (T, variant)'s serving graph, each variant against the first;
 *   - without a GPU (or in a build without CUDA) nothing is timed or judged: the lab says
 *     SKIPPED with the reason and exits LAB_EXIT_SKIPPED, never 0.
 * Library code: returns moe_status, never exits.
 */
#ifndef INKLING_LAB_H
#define INKLING_LAB_H

#include "fuzz_case.h"
#include "common/layer_data.h"

#include <stdbool.h>
#include <stdio.h>

#define LAB_COPY_BW 4.2e12   /* bytes/s, device copy on an H200 (contract.md [floors]) */
#define LAB_BF16_RATE 7.8e14 /* FLOP/s, dense bf16 on an H200 (contract.md [floors]) */
#define LAB_ROTATE 4         /* inputs timed in turn, so no call finds the last one's input */
#define LAB_MAX_T 16
#define LAB_MAX_VARIANTS 16
#define LAB_EXIT_SKIPPED 77  /* nothing could run here (no GPU, or no CUDA in this build) */

/* The stages the CUDA backend times (opt/cuda/cuda_profile.h), in its order, plus the host's
 * wall clock of one whole forward call, from host memory and on device pointers. */
typedef enum {
    LAB_UPLOAD = 0,
    LAB_GATE,
    LAB_ROUTE,
    LAB_GROUP,
    LAB_GEMM1,
    LAB_GEMM2,
    LAB_COMBINE,
    LAB_DOWNLOAD,
    LAB_SINK_GEMM1,
    LAB_SINK_SWIGLU,
    LAB_SINK_GEMM2,
    LAB_DEVICE, /* upload's end to combine's end: the layer on the device */
    LAB_HOST,   /* one forward call on the host's clock, transfers included, as a caller makes
                   it (no stage events: those come from a timed call before it) */
    LAB_DEVICE_CALL, /* one call on x and out already on the device (as a serving engine makes
                        it, opt/cuda/cuda_profile.h), on the host's clock */
    LAB_SERVING_DEVICE, /* the same call's captured graph on the device: one event pair around
                           its launch, no events between its kernels */
    LAB_PINNED_UPLOAD,   /* x up and out down as single DMAs from and to pinned memory, no host */
    LAB_PINNED_DOWNLOAD, /* copy: the bus speed the host call's transfers are held to */
    LAB_STAGE_COUNT
} lab_stage_id;

typedef struct {
    const char *name;   /* "GEMM1+SwiGLU"; the CSV's stage column */
    double bytes;       /* the fewest bytes the stage moves */
    double flops;
} lab_stage;

/* What the lab reports: the stages of one kernel, or all (the "lab experts"). */
typedef enum { LAB_FOCUS_LAYER = 0, LAB_FOCUS_EXPERTS, LAB_FOCUS_GATE, LAB_FOCUS_ROUTE,
               LAB_FOCUS_GROUP, LAB_FOCUS_SINKS, LAB_FOCUS_COMBINE, LAB_FOCUS_TRANSFERS } lab_focus;
#define LAB_FOCUS_CHOICES "layer,experts,gate,route,group,sinks,combine,transfers"

#define LAB_CSV_HEADER \
    "shape,variant,T,stage,bytes,flops,median_us,floor_us,achieved_GBps,achieved_TFLOPs,x_floor," \
    "p10_us,p90_us"

/* One kernel of a traced serving call (--timeline): µs after the call's first kernel began. */
typedef struct {
    char name[96];
    double start_us, end_us;
    unsigned stream; /* the kernels of one stream share it */
} lab_span;
#define LAB_MAX_SPANS 64

/* How the lab drives a variant's calls and times them: the CUDA backend's stage events
 * (lab_cuda_timer), or a test double. "Device" buffers are the timer's own memory; the lab
 * reads the host's clock around each call itself. */
typedef struct {
    /* Overwrites more than the last-level cache, so that the next call starts cold. */
    moe_status (*flush)(const moe_backend *be, void *state, moe_error *err);
    /* One forward call on x [T, D] -> out [T, D] in host memory; ms [LAB_DEVICE + 1] its stage
     * intervals in milliseconds, or NULL: the call exactly as a caller makes it (no events). */
    moe_status (*call)(const moe_backend *be, void *state, int T, const uint16_t *x, float *out,
                       float ms[LAB_DEVICE + 1], moe_error *err);
    /* The same call on x_dev and out_dev, buffers of dev_alloc, returning when out_dev holds
     * the result. device_ms NULL: the call exactly as a serving engine makes it; else also the
     * call's interval on the device, in milliseconds. */
    moe_status (*call_on_device)(const moe_backend *be, void *state, int T, const void *x_dev,
                                 void *out_dev, float *device_ms, moe_error *err);
    /* bytes of device memory into *p, a copy of src when src is not NULL. */
    moe_status (*dev_alloc)(void **p, size_t bytes, const void *src, moe_error *err);
    moe_status (*dev_read)(void *host, const void *dev, size_t bytes, moe_error *err);
    void (*dev_free)(void *p);
    /* The kernels of one more device-pointer call, as the GPU ran them: spans [cap] in start
     * order, *n how many. NULL: the timer has no timeline. */
    moe_status (*timeline)(const moe_backend *be, void *state, int T, const void *x_dev,
                           void *out_dev, lab_span *spans, int cap, int *n, moe_error *err);
    /* The transfers of a call of T tokens at pinned-memory speed: ms[0] x up, ms[1] out down,
     * in milliseconds. NULL: the timer cannot measure them (their stages are not reported). */
    moe_status (*pinned_dma)(const moe_backend *be, void *state, int T, float ms[2], moe_error *err);
} lab_timer;

/* The CUDA backend's timer (harness/lab_cuda.c): its state is the `void *` of the CUDA
 * variants' create(). NULL in a build without CUDA. */
const lab_timer *lab_cuda_timer(void);

typedef struct {
    const lab_timer *timer; /* NULL: lab_cuda_timer(), and the variants must be CUDA variants */
    fuzz_case layer;  /* the case whose layer every run shares; its T is replaced */
    char shape[32];   /* the named shape, or "case" for a case line */
    int tokens[LAB_MAX_T];
    int n_tokens;
    bool check[LAB_MAX_T]; /* judge T = tokens[i] against the reference */
    int iters;             /* timed calls per (variant, T) */
    const moe_backend *variants[LAB_MAX_VARIANTS];
    int n_variants;
    lab_focus focus;
    bool timeline; /* print the kernels of one serving call at each (variant, T) */
} lab_plan;

/* The registry's CUDA variants, in its order, into out [cap]; returns how many there are. */
int lab_cuda_variants(const moe_backend **out, int cap);

/* The case a named shape stands for: "inkling-small" (D = 4096), "inkling" (D = 6144), both
 * as contract.md [model] gives them, or "small" (D = 256, I = 128, R = 16, K = 4: a case quick
 * enough for compute-sanitizer), MXFP4, seed and format as given, T = 1. */
moe_status lab_shape_case(const char *name, uint64_t seed, moe_routed_format fmt, fuzz_case *c,
                          moe_error *err);

/* "1,8,64" -> out [cap] ascending as given, each in [1, 1000000]; *n their count. */
moe_status lab_parse_tokens(const char *list, int *out, int cap, int *n, moe_error *err);

/* "all", a list of registry names (each a CUDA variant; none twice), into p->variants. */
moe_status lab_parse_variants(const char *list, lab_plan *p, moe_error *err);

/* Refuses a case the lab cannot run at many T (an input feature, a split). */
moe_status lab_check_case(const fuzz_case *c, moe_error *err);

/* The sampled tokens the reference checks at T: all for T <= 4, 4 for T <= 64, else 8, unless
 * the case line says sample=N (N < T). */
int lab_sample_count(const fuzz_case *c, int T);

/* Bytes and FLOPs of every stage of layer cfg at T tokens that selected `distinct` experts. */
void lab_stages(const moe_config *cfg, int T, int distinct, lab_stage out[LAB_STAGE_COUNT]);

/* Whether the focus reports stage s (the whole layer and the host call always are). */
bool lab_focus_has(lab_focus f, lab_stage_id s);

/* The floor of a stage, in seconds. */
double lab_floor_s(const lab_stage *s);

/* A stage's timed calls: their median; for the spread, the 10th and 90th percentiles; for the
 * median's uncertainty, the quartiles and the count. */
typedef struct {
    double median_us, p10_us, p90_us, p25_us, p75_us;
    int calls;
} lab_times;

/* times [n] (any order) -> their median and percentiles (sorts times). */
lab_times lab_times_of(float *times, int n);

/* Half the width of the median's notch, 1.58 (p75 - p25) / sqrt(calls): where two calls'
 * notches do not overlap, their medians differ at about 95 % confidence (McGill, Tukey and
 * Larsen, "Variations of box plots", 1978). 0 for fewer than two calls. */
double lab_median_notch(lab_times t);

/* One CSV row (no header) for a stage timed t (rates and x_floor from the median). */
void lab_csv_row(FILE *f, const char *shape, const char *variant, int T, const lab_stage *s,
                 lab_times t);

/* The plan's layer alone (its case at T = 0): prints "layer SHAPE: LINE (note)" on out, then
 * makes its data and its unsplit shard. On failure neither is held. */
moe_status lab_layer_build(const lab_plan *p, const char *note, FILE *out, moe_layer_data *ld,
                           moe_shard *sh, moe_error *err);

/* The row tiles that the routed experts' rows make (harness/lab_tiles.c): bn rows a tile, how
 * many tiles, and the real rows and wgmma's n (the rows rounded up to 16) a tile holds on
 * average (0 without tiles). */
typedef struct {
    int bn, tiles;
    double rows_per_tile, n_per_tile;
} lab_tiles;

/* rows [E]: each expert's routed rows -> its tiles of bn rows. */
lab_tiles lab_tiles_of(const int *rows, int E, int bn);
/* rows [E] -> one tier's share of the tiles of table_m rows: those whose rows left in the
 * expert (from the tile's first row) are in (rows_above, rows_at_most], each holding at most
 * table_m of them (bn = table_m in the result). */
lab_tiles lab_tier_of(const int *rows, int E, int table_m, int rows_above, int rows_at_most);

/* Three lines on out: the experts' rows (used, least, most, mean), their tiles of each size
 * the wgmma kernels take, and how the tiers of tile sizes that the CUDA path runs share those
 * tiles among their kernels. */
void lab_print_tiles(FILE *out, const int *rows, int E);

/* Each routed expert's rows [sh->cfg.R] at T tokens of x [T, D], routed on the host as the
 * reference routes (tokens holding NaN or inf count for none). */
moe_status lab_expert_rows(const moe_shard *sh, int T, const uint16_t *x, int *rows, moe_error *err);

/* `lab --tiles`: lab_print_tiles at every T of the plan, routed on the host; no GPU needed.
 * Returns the exit status (0, or 1 with the reason printed). */
int lab_tiles_report(const lab_plan *p, FILE *out);

/* One (T, variant) of the lab's summary: its serving graph's times, if it was timed. */
typedef struct {
    bool timed;
    lab_times serving;
} lab_summary_cell;

/* The summary after every T (harness/lab_summary.c): a row per T of tokens [n_tokens], a column
 * per variant of names [n_variants]; cells [n_tokens][n_variants]. Each timed cell after a T's
 * first shows its difference from that first one, marked "~" where the two medians' notches
 * (lab_median_notch) overlap. Nothing when no cell was timed. */
void lab_print_summary(FILE *out, const int *tokens, int n_tokens, const char *const *names,
                       int n_variants, const lab_summary_cell *cells);

/* Runs the plan: prints a table per (T, variant) on out and appends rows to csv (NULL: none).
 * Returns the exit status: 0 every check passed, 1 a check failed, LAB_EXIT_SKIPPED when
 * nothing could run here (the reason printed). */
int lab_run(const lab_plan *p, FILE *out, FILE *csv);

#endif /* INKLING_LAB_H */
