/*
 * moe.h: the one layer interface of the project.
 *
 * Every path that computes the Inkling MoE layer (the pure-C reference, the OpenBLAS path,
 * the CUDA path, the harness's deliberately broken test doubles) is a `moe_backend`: a table
 * of function pointers, modelled on ggml's backend interface. A caller
 *   1. describes the layer with a `moe_config` and full-layer `moe_weights` (borrowed pointers),
 *   2. cuts the weights one rank would hold with `moe_shard_build` (TP n / EP n,
 *      contract.md [sharding]),
 *   3. makes a `moe_layer` on a backend from that shard (weights become resident there),
 *   4. calls `moe_layer_forward` as often as it likes: it returns the rank's partial output
 *      and, on request, the stage outputs the harness compares.
 *
 * Rules that hold for every function declared here:
 *   - library code never exits or aborts: every failure is a moe_status plus a message in a
 *     moe_error that names the tensor, field or argument at fault;
 *   - shapes are written next to every pointer, in the contract's letters:
 *     T tokens, D hidden, I expert width, R routed experts, K top-k, S sinks, G = R + S;
 *   - bf16 values travel as uint16_t bit patterns, everything else as fp32 unless stated;
 *   - the types here are the plugin ABI (moe_plugin.h): a change to their layout or meaning
 *     bumps MOE_PLUGIN_ABI_VERSION there.
 */
#ifndef INKLING_MOE_H
#define INKLING_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status and errors */

typedef enum {
    MOE_OK = 0,
    MOE_ERR_ARG,             /* a caller passed something invalid (NULL, negative T, ...) */
    MOE_ERR_CONFIG,          /* inconsistent layer configuration or split */
    MOE_ERR_SHAPE,           /* a tensor has the wrong shape */
    MOE_ERR_DTYPE,           /* a tensor has the wrong element type */
    MOE_ERR_VALUE,           /* a bad value inside weights (NaN E8M0 scale, overflow) */
    MOE_ERR_NONFINITE_INPUT, /* strict mode refused an input row holding NaN or inf */
    MOE_ERR_UNSUPPORTED,     /* the backend does not handle this configuration */
    MOE_ERR_UNAVAILABLE,     /* the backend cannot run on this machine */
    MOE_ERR_NOMEM,
    MOE_ERR_IO,              /* a file could not be opened, read or written */
    MOE_ERR_FORMAT,          /* a file is malformed */
    MOE_ERR_DEVICE,          /* a CUDA / cuBLASLt / BLAS call failed */
    MOE_ERR_INTERNAL,
} moe_status;

typedef struct {
    moe_status status;
    char msg[512];
} moe_error;

/* Records a failure in err (which may be NULL) and returns st, so that callers can write
 * `return moe_fail(err, MOE_ERR_SHAPE, "tensor %s: ...", name);`. */
moe_status moe_fail(moe_error *err, moe_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void moe_error_clear(moe_error *err);
const char *moe_status_name(moe_status st);

/* ---------------------------------------------------------------- layer configuration */

typedef enum {
    MOE_ROUTED_MXFP4 = 0, /* routed experts in MXFP4 (the Quark releases' quantized layers) */
    MOE_ROUTED_BF16 = 1,  /* routed experts in bf16 (the first MoE layer, layer 2) */
    MOE_ROUTED_NVFP4 = 2, /* routed experts in NVFP4 (the ModelOpt -NVFP4 releases) */
    MOE_ROUTED_FORMAT_COUNT
} moe_routed_format;

/* What every layer of the project needs to know about a routed weight format (the one table:
 * common/routed_formats.c). Block formats store E2M1 codes two to a byte (element 2k in the
 * low nibble) in the *_mx arrays and one scale byte per `block` elements in the *_scale
 * arrays; NVFP4 adds one fp32 scale2 per expert and matrix, which multiplies the products. */
struct moe_block_format_s; /* numeric.h: element and scale decoders of a block format */

typedef struct {
    const char *name;      /* "MXFP4", "bf16", "NVFP4": messages */
    const char *key;       /* "mxfp4", "bf16", "nvfp4": case lines and reports */
    int block;             /* elements per scale byte; 0 for bf16 (no blocks) */
    bool has_scale2;       /* one fp32 scale2 per expert (NVFP4) */
    const struct moe_block_format_s *decoder; /* NULL for bf16 */
} moe_routed_format_info;

/* The entry of fmt, or NULL for a value outside the enum. */
const moe_routed_format_info *moe_routed_format_get(moe_routed_format fmt);
/* The format whose key is key, or -1. */
int moe_routed_format_from_key(const char *key);

typedef struct {
    int D;                /* hidden_size */
    int I;                /* per-expert MoE intermediate width */
    int R;                /* routed experts */
    int K;                /* experts per token */
    int S;                /* always-on sink experts */
    float route_scale;
    bool has_gate_bias;
    bool has_global_scale;
    moe_routed_format routed_format;
} moe_config;

/* Checks the configuration on its own (positive sizes, 1 <= K <= R, block alignment of D and I
 * for the block formats, finite route_scale). Names the offending config field on failure. */
moe_status moe_config_validate(const moe_config *cfg, moe_error *err);

/* The full layer's weights, as in the checkpoint (contract.md [checkpoint.tensors]). Pointers are
 * borrowed. Only the members of cfg->routed_format are read. */
typedef struct {
    const uint16_t *gate_w;     /* [R+S, D] bf16; rows >= R are the sinks' gate rows */
    const float *gate_bias;     /* [R], or NULL when !has_gate_bias */
    float global_scale;         /* 1 when !has_global_scale */
    const uint8_t *w13_mx;      /* E2M1  [R, 2I, D/2]; row 2j = W1 row j (gate), 2j+1 = W3 row j (up) */
    const uint8_t *w13_scale;   /* [R, 2I, D/B]: E8M0 (MXFP4, B = 32) or E4M3 (NVFP4, B = 16) */
    const uint8_t *w2_mx;       /* E2M1  [R, D, I/2] */
    const uint8_t *w2_scale;    /* [R, D, I/B] */
    const uint16_t *w13_bf16;   /* bf16  [R, 2I, D], same interleave */
    const uint16_t *w2_bf16;    /* bf16  [R, D, I] */
    const uint16_t *sink_w13;   /* bf16  [S, 2I, D], same interleave */
    const uint16_t *sink_w2;    /* bf16  [S, D, I] */
    const float *w13_scale2;    /* NVFP4 [R] fp32, finite and >= 0; NULL otherwise */
    const float *w2_scale2;     /* NVFP4 [R] */
    const char *name_prefix;    /* the tensors' name prefix in messages ("model.llm.layers.3.mlp."),
                                 * or NULL for none */
} moe_weights;

/* ---------------------------------------------------------------- splits and shards */

typedef enum {
    MOE_SPLIT_NONE = 0,
    MOE_SPLIT_TP = 1, /* tensor parallel: every expert's intermediate sliced n ways */
    MOE_SPLIT_EP = 2, /* expert parallel: experts dealt out n ways, sinks TP-sliced */
} moe_split_kind;

typedef struct {
    moe_split_kind kind;
    int n;            /* ranks in the split (1 for MOE_SPLIT_NONE) */
    int rank;         /* 0 <= rank < n */
    int pad_inter_to; /* round each rank's intermediate width up to a multiple of this; 0 = none */
} moe_split;

/* What one rank holds (contract.md [sharding]). Every array is owned by the shard. */
typedef struct {
    moe_config cfg;        /* the full layer's configuration (D, I, R, K, S unchanged) */
    moe_split split;
    int I_local;           /* routed intermediate width held, padding included */
    int I_valid;           /* of which real channels; [I_valid, I_local) hold zero weights */
    int sink_I_local;      /* sink intermediate width held, padding included */
    int sink_I_valid;
    int expert_first;      /* global id of the first local routed expert */
    int n_local_experts;   /* R without EP; E_pad/n with EP (ids >= R are zero padding) */
    uint16_t *gate_w;      /* [R+S, D] bf16: every rank computes the full routing */
    float *gate_bias;      /* [R] or NULL */
    float global_scale;
    uint8_t *w13_mx;       /* [n_local_experts, 2*I_local, D/2]   (block formats) */
    uint8_t *w13_scale;    /* [n_local_experts, 2*I_local, D/B]   (block formats, B = block) */
    uint8_t *w2_mx;        /* [n_local_experts, D, I_local/2]     (block formats) */
    uint8_t *w2_scale;     /* [n_local_experts, D, I_local/B]     (block formats) */
    float *w13_scale2;     /* [n_local_experts] (NVFP4; padding experts 0) */
    float *w2_scale2;      /* [n_local_experts] (NVFP4) */
    uint16_t *w13_bf16;    /* [n_local_experts, 2*I_local, D]     (bf16 only) */
    uint16_t *w2_bf16;     /* [n_local_experts, D, I_local]       (bf16 only) */
    uint16_t *sink_w13;    /* [S, 2*sink_I_local, D] */
    uint16_t *sink_w2;     /* [S, D, sink_I_local] */
} moe_shard;

/* Validates a split against a configuration without building anything: n divides what it must,
 * block-format slabs stay block-aligned (32 MXFP4, 16 NVFP4), rank in range. Names the offending field. */
moe_status moe_split_validate(const moe_config *cfg, const moe_split *split, moe_error *err);

/* Copies the slab of w that split.rank holds into a new shard, padding as
 * contract.md [sharding.pad] says. Only the slab's bytes are read, so w may point into
 * memory-mapped checkpoint files. Every scale block copied is checked: a NaN byte (E8M0 0xFF, E4M3
 * 0x7F/0xFF), an MXFP4 block whose largest weight overflows fp32, an NVFP4 scale2 that is negative,
 * not finite, or makes the largest weight overflow fp32 fail with MOE_ERR_VALUE naming the tensor
 * and index. On failure *shard is empty. */
moe_status moe_shard_build(const moe_config *cfg, const moe_weights *w, const moe_split *split,
                           moe_shard *shard, moe_error *err);
void moe_shard_free(moe_shard *shard);

/* E_pad / n under EP n, else R. */
int moe_local_expert_count(const moe_config *cfg, const moe_split *split);

/* ---------------------------------------------------------------- forward */

typedef enum {
    MOE_PRECISION_EXACT = 0,   /* the mathematical layer, double after the logits (contract.md [precision.exact]) */
    MOE_PRECISION_SERVING = 1, /* bf16 at the served model's rounding points (contract.md [precision.serving]) */
    MOE_PRECISION_ENGINE = 2,  /* a contract, not a computation: paths compute serving, and are
                                  judged by the engine envelope, wider by exactly a served
                                  engine's extra bf16 roundings (docs/tolerances.md); no backend
                                  is ever handed this value (moe_precision_computed) */
} moe_precision;

typedef struct {
    moe_precision precision;
    int n_threads;          /* 0 = the backend's default */
    bool strict_nonfinite;  /* refuse a call whose input holds NaN/inf instead of NaN rows */
    int device;             /* CUDA device ordinal */
} moe_options;

moe_options moe_options_default(void);

/* What a path computes for a contract: SERVING for ENGINE, else p itself. */
moe_precision moe_precision_computed(moe_precision p);

/* Stage outputs. Any pointer may be NULL (not wanted). A backend sets the MOE_STAGE_* bit in
 * `filled` for each stage it wrote; the harness compares only what both sides filled.
 * Slots whose expert is not held by this rank (EP) hold zeros in routed_h and routed_y. */
enum {
    MOE_STAGE_LOGITS = 1u << 0,
    MOE_STAGE_TOPK = 1u << 1,     /* topk_ids and topk_weights */
    MOE_STAGE_ROUTED_H = 1u << 2,
    MOE_STAGE_ROUTED_Y = 1u << 3,
    MOE_STAGE_SINK_H = 1u << 4,
    MOE_STAGE_SINK_Y = 1u << 5,
};

typedef struct {
    float *logits;        /* [T, R+S] fp32 gate logits */
    int32_t *topk_ids;    /* [T, K] in slot order */
    float *topk_weights;  /* [T, K+S] routed weights w_0..w_{K-1}, then sink gammas */
    float *routed_h;      /* [T, K, I_local] silu(g)*u of slot k's expert (serving: bf16 values) */
    float *routed_y;      /* [T, K, D] W2 h of slot k's expert, before the routing weight */
    float *sink_h;        /* [T, S, sink_I_local] gamma_s*silu(g)*u (serving: bf16 values) */
    float *sink_y;        /* [T, D] sum over sinks of W2_s h_s */
    unsigned filled;      /* MOE_STAGE_* bits written by the backend */
} moe_stages;

/* ---------------------------------------------------------------- shape hints */

/* What a path's tiling or threshold constant counts. The harness aims case shapes at each
 * declared constant (one tile, several, a partial last one, exactly at a cut-off and one
 * either side), so that code behind a size threshold is reached by small cases too. */
typedef enum {
    MOE_HINT_TOKENS = 1,    /* tokens in the batch, T: a chunk of T or a small-T cut-off */
    MOE_HINT_EXPERT_ROWS,   /* token rows routed to one expert (sinks: T): a kernel cut-off */
    MOE_HINT_TILE_ELEMENTS, /* a decoded weight tile holds about this many elements: w2
                               [D, I_local] is cut into tiles of value / I_local rows, w13
                               [2*I_local, D] into tiles of value / (2*D) channels (row pairs);
                               the sinks' matrices alike */
    MOE_HINT_WIDTH,         /* D and I_local are cut into blocks of this many elements (a GEMM's
                               N or K block): a partial last block unless a multiple */
} moe_hint_kind;

typedef struct {
    const char *name; /* the constant's name in the path's source */
    moe_hint_kind kind;
    long value;
    const char *what; /* what it decides, in a few words */
} moe_shape_hint;

/* ---------------------------------------------------------------- the backend interface */

typedef struct moe_backend {
    const char *name;        /* "ref", "blas", "cuda", or a test double's name */
    const char *description;
    /* Can this backend run on this machine at all? If not, why (e.g. "no CUDA device"). */
    bool (*available)(char *why, size_t why_len);
    /* Does it handle this configuration, split and precision? If not, why. */
    bool (*supports)(const moe_config *cfg, const moe_split *split, const moe_options *opt,
                     char *why, size_t why_len);
    /* Makes the backend's resident copy of a shard. The shard must outlive the state
     * (a backend may borrow its arrays). */
    moe_status (*create)(const moe_shard *shard, const moe_options *opt, void **state,
                         moe_error *err);
    /* One forward call on T tokens: x [T, D] bf16 -> out [T, D] fp32, the rank's partial
     * (serving: bf16-representable values). stages may be NULL. T may be 0. */
    moe_status (*forward)(void *state, int T, const uint16_t *x, float *out, moe_stages *stages,
                          moe_error *err);
    /* Optional (may be NULL): the backend's own selection and weights on given logits, so that
     * the harness can judge near-ties by feeding two selectors the same logits.
     * logits [T, R+S] -> ids [T, K], weights [T, K+S]. */
    moe_status (*route)(void *state, int T, const float *logits, int32_t *ids, float *weights,
                        moe_error *err);
    void (*destroy)(void *state);
    /* The path's tiling and threshold constants, ended by an entry whose name is NULL; NULL
     * when it has none. */
    const moe_shape_hint *shape_hints;
} moe_backend;

/* The backends every build knows by name; one built without its library reports
 * available() == false with the reason. */
extern const moe_backend moe_backend_ref;
extern const moe_backend moe_backend_blas;
extern const moe_backend moe_backend_cuda;      /* expert kernels chosen by T */
extern const moe_backend moe_backend_cuda_wmma; /* the same, tensor-core expert GEMMs forced */
extern const moe_backend moe_backend_cuda_gemv; /* the same, GEMV expert kernels forced */
extern const moe_backend moe_backend_cuda_mma;  /* the same, mma expert kernels forced */
extern const moe_backend moe_backend_cuda_wgmma; /* the same, wgmma expert kernels forced */

int moe_backend_count(void);
const moe_backend *moe_backend_at(int i);
const moe_backend *moe_backend_find(const char *name); /* NULL if unknown */

/* ---------------------------------------------------------------- layers */

typedef struct moe_layer moe_layer;

/* Checks availability and support, then creates. */
moe_status moe_layer_create(const moe_backend *backend, const moe_shard *shard,
                            const moe_options *opt, moe_layer **layer, moe_error *err);
/* Validates arguments, applies the strict non-finite policy, then forwards. */
moe_status moe_layer_forward(moe_layer *layer, int T, const uint16_t *x, float *out,
                             moe_stages *stages, moe_error *err);
moe_status moe_layer_route(moe_layer *layer, int T, const float *logits, int32_t *ids,
                           float *weights, moe_error *err);
const moe_shard *moe_layer_shard(const moe_layer *layer);
const moe_backend *moe_layer_backend(const moe_layer *layer);
/* The state the backend's create() made, for a backend's entries beyond its table (the CUDA
 * path's device-pointer forward, opt/cuda/cuda_layer.h); NULL for a NULL layer. */
void *moe_layer_backend_state(const moe_layer *layer);
void moe_layer_destroy(moe_layer *layer);

/* Runs every rank of a split kind (TP n or EP n, pad_inter_to as in moe_split; NONE with n=1
 * is the unsplit layer), each from its own shard, and writes the sum of the partials added in
 * fp32 in rank order (serving: the sum rounded to bf16 once more). stages, if given, receive
 * rank 0's logits, ids and weights (every rank computes the same routing). */
moe_status moe_forward_all_ranks(const moe_backend *backend, const moe_config *cfg,
                                 const moe_weights *w, moe_split_kind kind, int n,
                                 int pad_inter_to, const moe_options *opt, int T,
                                 const uint16_t *x, float *out, moe_stages *stages,
                                 moe_error *err);

/* The same sum over layers already made: layers[r] holds rank r of one split (or layers[0] the
 * unsplit layer, n = 1), all with opt's precision. The layers live on between calls, so a caller
 * can run many inputs through one backend instance (the harness's stress mode does). */
moe_status moe_forward_ranks(moe_layer *const *layers, int n, const moe_options *opt, int T,
                             const uint16_t *x, float *out, moe_stages *stages, moe_error *err);

/* Index of the first token whose row of x [T, D] holds NaN or inf, or -1. */
int moe_first_nonfinite_row(int T, int D, const uint16_t *x);

#ifdef __cplusplus
}
#endif

#endif /* INKLING_MOE_H */
