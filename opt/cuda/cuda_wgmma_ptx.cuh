/*
 * cuda_wgmma_ptx.cuh: the PTX that the wgmma expert kernels (cuda_experts_wgmma.cu) issue and
 * the wgmma shapes they choose: cp.async copies and the proxy fence, wgmma m64nNk16 on bf16 (one
 * specialisation per N) with its shared-memory descriptor, and n chosen from a tile's real rows.
 */
#ifndef INKLING_CUDA_WGMMA_PTX_CUH
#define INKLING_CUDA_WGMMA_PTX_CUH

#include <stdint.h>

namespace {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, zero-filled when !valid (src is then not read). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
/* The same with the byte count given: 16, or 0 to zero-fill without reading src. */
__device__ __forceinline__ void cp_async16_size(uint32_t dst, const void *src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* cp.async writes are generic-proxy writes; wgmma reads shared memory through the async proxy. */
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_one() {
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}

/* Shared-memory matrix descriptor of a K-major tile with 128-byte rows in the 128-byte
 * swizzle: 8-row groups 1024 bytes apart (the leading offset is unused in this mode). */
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

/* d[0 .. N/2 - 1] (64 x N fp32, wgmma's accumulator fragment: d[4j + e] row g, column 8j + 2t
 * + e, d[4j + 2 + e] row g + 8, so a narrower N's fragment is a prefix of a wider one's) += a
 * (64 x 16 bf16, registers) * b (16 x N bf16, shared memory, K-major). */
template <int N> __device__ __forceinline__ void wgmma_bf16(float *d, const uint32_t (&a)[4], uint64_t b_desc);

/* One specialisation per N: the accumulators are operands %0 .. %(N/2 - 1) (D_REGS, built eight
 * at a time below), then come a's four registers, the descriptor and the scale-d flag (A_REGS,
 * DESC, FLAG: their operand numbers); the rest are the accumulators' constraints. */
#define WG_DEFINE_WGMMA(N, D_REGS, A_REGS, DESC, FLAG, ...)                                      \
    template <>                                                                                   \
    __device__ __forceinline__ void wgmma_bf16<N>(float *d, const uint32_t (&a)[4], uint64_t b_desc) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 "                  \
                     "{" D_REGS "}, {" A_REGS "}, " DESC ", p, 1, 1, 0;\n}\n"                     \
                     : __VA_ARGS__                                                                \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));          \
    }
#define WG_ACC8(i)                                                                                 \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),   \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D8 "%0,%1,%2,%3,%4,%5,%6,%7"
#define WG_D16 WG_D8 ",%8,%9,%10,%11,%12,%13,%14,%15"
#define WG_D24 WG_D16 ",%16,%17,%18,%19,%20,%21,%22,%23"
#define WG_D32 WG_D24 ",%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_D40 WG_D32 ",%32,%33,%34,%35,%36,%37,%38,%39"
#define WG_D48 WG_D40 ",%40,%41,%42,%43,%44,%45,%46,%47"
#define WG_D56 WG_D48 ",%48,%49,%50,%51,%52,%53,%54,%55"
#define WG_D64 WG_D56 ",%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_ACC4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_A16 WG_ACC8(0)
#define WG_A32 WG_A16, WG_ACC8(8)
#define WG_A48 WG_A32, WG_ACC8(16)
#define WG_A64 WG_A48, WG_ACC8(24)
#define WG_A80 WG_A64, WG_ACC8(32)
#define WG_A96 WG_A80, WG_ACC8(40)
#define WG_A112 WG_A96, WG_ACC8(48)
#define WG_A128 WG_A112, WG_ACC8(56)
WG_DEFINE_WGMMA(16, WG_D8, "%8,%9,%10,%11", "%12", "%13", WG_A16)
WG_DEFINE_WGMMA(24, WG_D8 ",%8,%9,%10,%11", "%12,%13,%14,%15", "%16", "%17", WG_A16, WG_ACC4(8))
WG_DEFINE_WGMMA(32, WG_D16, "%16,%17,%18,%19", "%20", "%21", WG_A32)
WG_DEFINE_WGMMA(48, WG_D24, "%24,%25,%26,%27", "%28", "%29", WG_A48)
WG_DEFINE_WGMMA(64, WG_D32, "%32,%33,%34,%35", "%36", "%37", WG_A64)
WG_DEFINE_WGMMA(80, WG_D40, "%40,%41,%42,%43", "%44", "%45", WG_A80)
WG_DEFINE_WGMMA(96, WG_D48, "%48,%49,%50,%51", "%52", "%53", WG_A96)
WG_DEFINE_WGMMA(112, WG_D56, "%56,%57,%58,%59", "%60", "%61", WG_A112)
WG_DEFINE_WGMMA(128, WG_D64, "%64,%65,%66,%67", "%68", "%69", WG_A128)

/* The columns wgmma multiplies for a tile of BN columns of which `rows` are real: the narrowest
 * n that holds them, so the tensor cores and shared-memory reads skip padding. Steps of 8 for
 * 32-row tiles (n = 24: T = 512 0.7 % faster), of 16 for 128-row tiles (steps of 8 there gained
 * nothing at T = 1500 and 4096 for eight loops more; docs/perf-cuda.md, thirty-sixth run). */
template <int BN> __device__ __forceinline__ int wg_mma_cols(int rows) {
    const int step = BN == 32 ? 8 : 16;
    return BN <= 16 ? BN : min(BN, max(16, (rows + step - 1) / step * step));
}
/* acc (wgmma_bf16's fragment) += one chunk on the first N columns: the four k16 steps a[s] by
 * the activations at b_desc + 32 s bytes. The columns past N keep their zeros and are never
 * stored. */
template <int N> __device__ __forceinline__ void wgmma_steps(float *acc, const uint32_t (&a)[4][4], uint64_t b_desc) {
#pragma unroll
    for (int s = 0; s < 4; s++) wgmma_bf16<N>(acc, a[s], b_desc + 2 * s); /* + 32 bytes a step */
}
/* f(wg_n<N>{}) for N = n, a tile of BN columns' wg_mma_cols, as a compile-time value: one
 * branch, the same in every thread of the block. */
template <int N> struct wg_n {
    static constexpr int value = N;
};
template <int BN, typename F> __device__ __forceinline__ void with_mma_cols(int n, F &&f) {
    if constexpr (BN == 128) {
        switch (n) {
        case 16: f(wg_n<16>{}); break;
        case 32: f(wg_n<32>{}); break;
        case 48: f(wg_n<48>{}); break;
        case 64: f(wg_n<64>{}); break;
        case 80: f(wg_n<80>{}); break;
        case 96: f(wg_n<96>{}); break;
        case 112: f(wg_n<112>{}); break;
        default: f(wg_n<128>{}); break;
        }
    } else if constexpr (BN == 32) {
        if (n == 16) f(wg_n<16>{});
        else if (n == 24) f(wg_n<24>{});
        else f(wg_n<32>{});
    } else {
        f(wg_n<BN>{});
    }
}
/* wgmma_steps on n columns, chosen a chunk at a time (the 16- and 32-row tiles' last stages,
 * which wait for each chunk's products before the next; their whole stages choose n once).
 * ptxas closes each branch's wgmma group itself, so the caller's commit adds an empty group: a
 * wait for "all but one" group would wait for this chunk too. The 128-row tiles, which keep a chunk's products in flight, choose n once a tile
 * instead (expert_wgmma_kernel). */
template <int BN>
__device__ __forceinline__ void wgmma_chunk(float (&acc)[BN / 2], const uint32_t (&a)[4][4], uint64_t b_desc, int n) {
    with_mma_cols<BN>(n, [&](auto cols) { wgmma_steps<decltype(cols)::value>(acc, a, b_desc); });
}

} // namespace

#endif
