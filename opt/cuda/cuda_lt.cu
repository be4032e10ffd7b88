/*
 * cuda_lt.cu: the dense bf16 GEMMs (gate logits, the sinks' two GEMMs) through cuBLASLt.
 *
 * Rules:
 *   - row-major C [T, N] = X [T, Kd] W^T with W [N, Kd] row-major: in cuBLASLt's column-major
 *     terms C^T [N, T] = op(W) X^T with op = transpose, so no data is moved;
 *   - bf16 inputs, fp32 compute and scale type, output fp32 or bf16 (round to nearest even);
 *   - the algorithm is cuBLASLt's first heuristic choice for the shape (and, where the plan
 *     asks, for fewer multiprocessors than the device has), fixed per plan, with a workspace
 *     owned by the stream that runs it: the same T gives bitwise-identical results;
 *   - a plan may run the algorithm chosen for another row count (algo_T): the sinks' GEMM1 in
 *     pieces runs the whole T's algorithm, so that its rows come out as the whole GEMM's.
 */
#include "cuda_internal.h"

#include <string.h>

void moe_cuda_lt_plan_free(moe_cuda_lt_plan *plan) {
    if (!plan) return;
    if (plan->op) cublasLtMatmulDescDestroy(plan->op);
    if (plan->w) cublasLtMatrixLayoutDestroy(plan->w);
    if (plan->x) cublasLtMatrixLayoutDestroy(plan->x);
    if (plan->c) cublasLtMatrixLayoutDestroy(plan->c);
    memset(plan, 0, sizeof *plan);
}

moe_status moe_cuda_lt_plan_for(cublasLtHandle_t lt, moe_cuda_lt_plan *plan, int N, int Kd, int T,
                                int algo_T, cudaDataType_t out_type, int sm_target,
                                size_t workspace_bytes, moe_error *err) {
    if (algo_T <= 0) algo_T = T;
    if (plan->ready && plan->T == T && plan->algo_T == algo_T && plan->N == N && plan->Kd == Kd &&
        plan->out_type == out_type && plan->sm_target == sm_target)
        return MOE_OK;
    moe_cuda_lt_plan_free(plan);
    plan->T = T, plan->algo_T = algo_T, plan->N = N, plan->Kd = Kd, plan->out_type = out_type;
    plan->sm_target = sm_target;
    LT_TRY(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    LT_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                          sizeof transpose));
    LT_TRY(cublasLtMatrixLayoutCreate(&plan->w, CUDA_R_16BF, (uint64_t)Kd, (uint64_t)N, (int64_t)Kd));
    LT_TRY(cublasLtMatrixLayoutCreate(&plan->x, CUDA_R_16BF, (uint64_t)Kd, (uint64_t)algo_T, (int64_t)Kd));
    LT_TRY(cublasLtMatrixLayoutCreate(&plan->c, out_type, (uint64_t)N, (uint64_t)algo_T, (int64_t)N));
    if (sm_target > 0) {
        const int32_t sms = sm_target;
        LT_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms,
                                              sizeof sms));
    }
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof workspace_bytes);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt, plan->op, plan->w, plan->x, plan->c, plan->c, pref, 1,
                                           &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return moe_fail(err, MOE_ERR_DEVICE,
                        "cublasLt: cublasLtMatmulAlgoGetHeuristic failed: status %d (N %d, K %d, T %d)",
                        (int)s, N, Kd, T);
    if (found < 1)
        return moe_fail(err, MOE_ERR_DEVICE,
                        "cublasLt: no algorithm for the bf16 GEMM N %d, K %d, T %d", N, Kd, T);
    plan->algo = result.algo;
    if (algo_T != T) { /* the layouts of the rows it runs, and whether the algorithm takes them */
        cublasLtMatrixLayoutDestroy(plan->x), plan->x = NULL;
        cublasLtMatrixLayoutDestroy(plan->c), plan->c = NULL;
        LT_TRY(cublasLtMatrixLayoutCreate(&plan->x, CUDA_R_16BF, (uint64_t)Kd, (uint64_t)T, (int64_t)Kd));
        LT_TRY(cublasLtMatrixLayoutCreate(&plan->c, out_type, (uint64_t)N, (uint64_t)T, (int64_t)N));
        s = cublasLtMatmulAlgoCheck(lt, plan->op, plan->w, plan->x, plan->c, plan->c, &plan->algo,
                                    &result);
        if (s != CUBLAS_STATUS_SUCCESS || result.workspaceSize > workspace_bytes)
            return moe_fail(err, MOE_ERR_DEVICE,
                            "cublasLt: the algorithm chosen for T %d does not run T %d (N %d, K %d): "
                            "status %d", algo_T, T, N, Kd, (int)s);
    }
    plan->ready = true;
    return MOE_OK;
}

moe_status moe_cuda_lt_run(cublasLtHandle_t lt, const moe_cuda_lt_plan *plan, const uint16_t *w,
                           const uint16_t *x, void *c, void *workspace, size_t workspace_bytes,
                           cudaStream_t stream, moe_error *err) {
    const float one = 1.0f, zero = 0.0f;
    LT_TRY(cublasLtMatmul(lt, plan->op, &one, w, plan->w, x, plan->x, &zero, c, plan->c, c, plan->c,
                          &plan->algo, workspace, workspace_bytes, stream));
    return MOE_OK;
}
