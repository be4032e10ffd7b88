/*
 * cuda_timeline.cu: the kernels of one serving call as the GPU ran them, from CUPTI's kernel
 * activity records (moe_cuda_graph_timeline, cuda_profile.h; the lab's --timeline).
 *
 * Why: the serving call is one CUDA graph whose kernels overlap (the sinks beside the routed
 * chain, GEMM2 beside GEMM1's last wave); events between them would stop the overlap, and the
 * graph's kernels include cuBLASLt's, which no probe of ours can stamp.
 *
 * Rules:
 *   - CUPTI is loaded at run time (dlopen of the library the build found, MOE_CUPTI_LIB, else
 *     "libcupti.so"), so the tool needs it only when a timeline is asked for; without it the
 *     call fails with MOE_ERR_UNSUPPORTED and says why;
 *   - records are read through CUpti_ActivityKernel4, whose leading fields (kind .. name)
 *     every later record version keeps in place; only kernel records count;
 *   - exactly one graph launch runs while the records are on, so every record is of that call:
 *     first the layer's kept graph; if CUPTI gives no record of a graph made before it was on,
 *     the kept graphs are dropped and the call captures a new one with the records on;
 *   - CUPTI's callbacks are process-wide: one timeline at a time (the lab is one thread).
 */
#include "cuda_internal.h"
#include "cuda_profile.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<cupti.h>)
#include <cupti.h>
#define HAVE_CUPTI_HEADER 1
#else
#define HAVE_CUPTI_HEADER 0
#endif

#ifndef MOE_CUPTI_LIB
#define MOE_CUPTI_LIB "libcupti.so"
#endif

#define TIMELINE_MAX_KERNELS 256 /* records kept of one call */
#define TIMELINE_BUFFER_BYTES ((size_t)1 << 20)
#define TIMELINE_TRY(expr)                                                                         \
    do {                                                                                           \
        const moe_status st_ = (expr);                                                             \
        if (st_) return st_;                                                                       \
    } while (0)

#if HAVE_CUPTI_HEADER
namespace {

/* The CUPTI entry points the timeline uses, from the library loaded at run time. */
struct cupti_api {
    bool loaded;
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
};

/* Loads CUPTI once; false with the reason in why. */
bool load_cupti(cupti_api *api, char *why, size_t why_len) {
    if (api->loaded) return true;
    void *lib = dlopen(MOE_CUPTI_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, why_len, "CUPTI could not be loaded (%s)", e ? e : MOE_CUPTI_LIB);
        return false;
    }
    /* dlsym returns void *: copied into the typed pointer */
#define CUPTI_SYM(field, name)                                                                     \
    do {                                                                                           \
        void *f = dlsym(lib, name);                                                                \
        if (!f) {                                                                                  \
            snprintf(why, why_len, "CUPTI (%s) has no %s", MOE_CUPTI_LIB, name);                   \
            return false;                                                                          \
        }                                                                                          \
        memcpy(&api->field, &f, sizeof f);                                                         \
    } while (0)
    CUPTI_SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    CUPTI_SYM(enable, "cuptiActivityEnable");
    CUPTI_SYM(disable, "cuptiActivityDisable");
    CUPTI_SYM(flush_all, "cuptiActivityFlushAll");
    CUPTI_SYM(next_record, "cuptiActivityGetNextRecord");
#undef CUPTI_SYM
    api->loaded = true;
    return true;
}

cupti_api cupti;
bool callbacks_registered;

/* The kernel records of the call being traced (the callbacks have no user pointer). */
struct {
    moe_cuda_kernel_span spans[TIMELINE_MAX_KERNELS];
    int n;
    int dropped; /* records past TIMELINE_MAX_KERNELS */
} traced;

/* "void (anonymous namespace)::expert_wgmma_kernel<1, 16, ...>(stream_args, ...)" ->
 * "expert_wgmma_kernel<1, 16, ...>": demangled, return type, namespace prefix and parameters
 * dropped. */
void kernel_name(const char *mangled, char *out, size_t cap) {
    int status = 0;
    char *full = mangled ? abi::__cxa_demangle(mangled, NULL, NULL, &status) : NULL;
    const char *name = full && status == 0 ? full : mangled ? mangled : "?";
    static const char returns[] = "void ", anon[] = "(anonymous namespace)::";
    if (strncmp(name, returns, sizeof returns - 1) == 0) name += sizeof returns - 1;
    if (strncmp(name, anon, sizeof anon - 1) == 0) name += sizeof anon - 1;
    size_t len = strlen(name);
    int depth = 0; /* the parameter list: the first '(' outside template brackets */
    for (size_t i = 0; i < len; i++) {
        if (name[i] == '<') depth++;
        if (name[i] == '>') depth--;
        if (name[i] == '(' && depth == 0 && i > 0) {
            len = i;
            break;
        }
    }
    if (len >= cap) len = cap - 1;
    memcpy(out, name, len);
    out[len] = '\0';
    free(full);
}

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(8, TIMELINE_BUFFER_BYTES);
    *size = *buffer ? TIMELINE_BUFFER_BYTES : 0;
    *max_records = 0; /* as many as fit */
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *record = NULL;
    while (buffer && cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel4 *k = (const CUpti_ActivityKernel4 *)record;
        if (traced.n == TIMELINE_MAX_KERNELS) {
            traced.dropped++;
            continue;
        }
        moe_cuda_kernel_span *sp = &traced.spans[traced.n];
        kernel_name(k->name, sp->name, sizeof sp->name);
        sp->start_us = (double)k->start; /* made relative once all are in */
        sp->end_us = (double)k->end;
        sp->stream = k->streamId;
        traced.n++;
    }
    free(buffer);
}

int by_start(const void *a, const void *b) {
    const double x = ((const moe_cuda_kernel_span *)a)->start_us;
    const double y = ((const moe_cuda_kernel_span *)b)->start_us;
    return x < y ? -1 : x > y;
}

/* One serving call with the kernel records on; *got how many came. */
moe_status traced_call(void *state, int T, const uint16_t *x_dev, float *out_dev, int *got,
                       moe_error *err) {
    traced.n = 0, traced.dropped = 0;
    if (!callbacks_registered)
        callbacks_registered =
            cupti.register_callbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS;
    if (!callbacks_registered || cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda timeline: CUPTI refused to record "
                        "kernels here (another profiler attached?)");
    moe_status st = moe_cuda_forward_device_timed(state, T, x_dev, out_dev, NULL, err);
    cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* every record delivered now */
    cupti.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    *got = traced.n;
    return st;
}

} // namespace
#endif

extern "C" moe_status moe_cuda_graph_timeline(void *state, int T, const uint16_t *x_dev,
                                              float *out_dev, moe_cuda_kernel_span *spans,
                                              int cap, int *n, moe_error *err) {
    if (n) *n = 0;
    if (!state || !spans || !n || cap < 1)
        return moe_fail(err, MOE_ERR_ARG, "cuda timeline: NULL state, spans or n, or cap < 1");
    if (T <= 0) return moe_fail(err, MOE_ERR_ARG, "cuda timeline: T = %d", T);
#if HAVE_CUPTI_HEADER
    char why[256];
    if (!load_cupti(&cupti, why, sizeof why))
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda timeline: %s", why);
    /* the kept graph for (T, x, out), made before the records were on */
    TIMELINE_TRY(moe_cuda_forward_device_timed(state, T, x_dev, out_dev, NULL, err));
    TIMELINE_TRY(moe_cuda_flush_l2(state, err));
    int got = 0;
    TIMELINE_TRY(traced_call(state, T, x_dev, out_dev, &got, err));
    if (got == 0) { /* no record of a graph made before: capture one with the records on */
        TIMELINE_TRY(moe_cuda_drop_graphs(state, err));
        TIMELINE_TRY(moe_cuda_flush_l2(state, err));
        TIMELINE_TRY(traced_call(state, T, x_dev, out_dev, &got, err));
    }
    if (got == 0)
        return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda timeline: CUPTI gave no kernel record "
                        "of the serving call");
    if (traced.dropped)
        return moe_fail(err, MOE_ERR_INTERNAL, "cuda timeline: more than %d kernels in one call",
                        TIMELINE_MAX_KERNELS);
    qsort(traced.spans, (size_t)got, sizeof traced.spans[0], by_start);
    const double first = traced.spans[0].start_us;
    for (int i = 0; i < got && i < cap; i++) {
        spans[i] = traced.spans[i];
        spans[i].start_us = (spans[i].start_us - first) / 1e3;
        spans[i].end_us = (spans[i].end_us - first) / 1e3;
    }
    *n = got < cap ? got : cap;
    return MOE_OK;
#else
    (void)x_dev, (void)out_dev;
    return moe_fail(err, MOE_ERR_UNSUPPORTED, "cuda timeline: built without CUPTI's header");
#endif
}
