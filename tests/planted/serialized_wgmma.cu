/*
 * serialized_wgmma.cu: a kernel that ptxas must serialise (a wgmma issued under a condition
 * inside a register-pipelined loop, C7513 "Potential Performance Loss"). Never linked: the
 * build rule for .cu files must refuse it, which `make check-ptxas-guard` (part of make test
 * where nvcc is found) checks, so the guard that keeps real kernels from silently losing
 * their wgmma pipeline is itself tested.
 */
#include <stdint.h>
/* d (64 x 16 fp32) += a (registers) * b (shared-memory descriptor) */
__device__ __forceinline__ void wg(float (&d)[8], const uint32_t (&a)[4], uint64_t b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
__global__ void planted_serialized_wgmma(float *o, uint64_t desc, uint32_t x, int n) {
    float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t a0[4], a1[4];
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 4; j++) a0[j] = x * (i + j);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        wg(d, a0, desc);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (i * 2 + 1 < n) {
            for (int j = 0; j < 4; j++) a1[j] = x * (i - j);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            wg(d, a1, desc + 2);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (int i = 0; i < 8; i++) o[threadIdx.x * 8 + i] = d[i];
}
