/* vendor: cuBLAS, the yardstick of every rung.
 *  - fp32: cublasSgemm in CUBLAS_PEDANTIC_MATH, which forbids TF32 tensor cores (the default
 *    mode also avoids them unless NVIDIA_TF32_OVERRIDE or CUBLAS_TF32_TENSOR_OP_MATH asks for
 *    them; pedantic makes it explicit). The mode is read back after it is set and the rung
 *    stops with an error if cuBLAS reports anything else, so a TF32 result never passes for an
 *    fp32 one.
 *  - fp16: cublasGemmEx with fp16 A, B and C, fp32 compute (CUBLAS_COMPUTE_32F), in the
 *    default math mode, on a handle of its own: tensor cores, fp32 accumulation.
 * cuBLAS is column-major; a row-major C = A B is the column-major C^T = B^T A^T, so B goes
 * first and no transposition is needed. */
#include <cublas_v2.h>

#include "matmul.cuh"

/* One handle per math mode: pedantic for fp32 (checked), the default for fp16. */
static cublasHandle_t handle_for(enum dtype t, cudaStream_t s)
{
    static cublasHandle_t h[2];
    cublasHandle_t *mine = &h[t == DT_FP32 ? 0 : 1];
    if (!*mine) {
        CUBLAS_CHECK(cublasCreate(mine));
        if (t == DT_FP32) {
            CUBLAS_CHECK(cublasSetMathMode(*mine, CUBLAS_PEDANTIC_MATH));
            cublasMath_t mode;
            CUBLAS_CHECK(cublasGetMathMode(*mine, &mode));
            if (mode != CUBLAS_PEDANTIC_MATH) {
                fprintf(stderr, "cuBLAS refused pedantic math (mode %d): fp32 would not be fp32\n",
                        (int)mode);
                exit(KL_EXIT_CUDA);
            }
        }
    }
    CUBLAS_CHECK(cublasSetStream(*mine, s));
    return *mine;
}

extern "C" void matmul_vendor(const void *a, const void *b, void *c, struct matmul_dims d,
                              enum dtype t, cudaStream_t s)
{
    cublasHandle_t h = handle_for(t, s);
    const int m = (int)d.m, n = (int)d.n, k = (int)d.k;
    const float one = 1.f, zero = 0.f;
    if (t == DT_FP32)
        CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, (const float *)b,
                                 n, (const float *)a, k, &zero, (float *)c, n));
    else
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16F, n,
                                  a, CUDA_R_16F, k, &zero, c, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}
