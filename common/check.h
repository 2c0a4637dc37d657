/* Error checks. Every CUDA, cuBLAS and cuDNN call and every kernel launch goes through one of
 * these: on failure the program prints the library's error name, the call and file:line in one
 * line and exits with status 3 (README.md). */
#ifndef KL_CHECK_H
#define KL_CHECK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KL_EXIT_OK 0
#define KL_EXIT_WRONG 1
#define KL_EXIT_USAGE 2
#define KL_EXIT_CUDA 3

#ifdef __cplusplus
#define KL_NORETURN [[noreturn]]
#else
#define KL_NORETURN _Noreturn
#endif

KL_NORETURN void kl_fail(const char *lib, const char *error, const char *call, const char *file,
                       int line);

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t err_ = (call);                                                             \
        if (err_ != cudaSuccess)                                                               \
            kl_fail("CUDA", cudaGetErrorName(err_), #call, __FILE__, __LINE__);                \
    } while (0)

/* After every <<<...>>>: a bad configuration shows here, a fault in the kernel at the next
 * synchronising call. */
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t st_ = (call);                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                      \
            kl_fail("cuBLAS", cublasGetStatusName(st_), #call, __FILE__, __LINE__);            \
    } while (0)

#define CUDNN_CHECK(call)                                                                      \
    do {                                                                                       \
        cudnnStatus_t st_ = (call);                                                            \
        if (st_ != CUDNN_STATUS_SUCCESS)                                                       \
            kl_fail("cuDNN", cudnnGetErrorString(st_), #call, __FILE__, __LINE__);             \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
