/* What the matmul rungs share: element access with bounds, and the launcher boilerplate. Every
 * rung computes in fp32 (fp16 inputs are widened as they are loaded) and rounds C once. Tiles
 * hang over the edges of A, B and C when M, N or K are no multiple of them: loads outside read
 * as 0 (which adds nothing to a sum) and stores outside are skipped, so no host-side padding
 * is ever needed. */
#ifndef MATMUL_CUH
#define MATMUL_CUH

#include "kernels.cuh"
#include "matmul.h"

/* x[row][col] of a rows x cols row-major matrix, or 0 outside it. */
template <typename T>
__device__ __forceinline__ float matmul_load(const T *x, int64_t rows, int64_t cols, int64_t row,
                                             int64_t col)
{
    return row < rows && col < cols ? to_float(x[row * cols + col]) : 0.f;
}

template <typename T>
__device__ __forceinline__ void matmul_store(T *c, int64_t rows, int64_t cols, int64_t row,
                                             int64_t col, float v)
{
    if (row < rows && col < cols)
        c[row * cols + col] = from_float<T>(v);
}

static inline unsigned matmul_blocks(int64_t len, int tile)
{
    return (unsigned)((len + tile - 1) / tile);
}

/* One launcher per rung: the kernel for fp32 or fp16, on the rung's grid. */
#define MATMUL_LAUNCHER(v, kernel, grid, block)                                                \
    extern "C" void matmul_##v(const void *a, const void *b, void *c, struct matmul_dims d,    \
                               enum dtype t, cudaStream_t s)                                   \
    {                                                                                          \
        if (t == DT_FP32)                                                                      \
            kernel<float><<<grid, block, 0, s>>>((const float *)a, (const float *)b,           \
                                                 (float *)c, d.m, d.n, d.k);                   \
        else                                                                                   \
            kernel<__half><<<grid, block, 0, s>>>((const __half *)a, (const __half *)b,        \
                                                  (__half *)c, d.m, d.n, d.k);                 \
        LAUNCH_CHECK();                                                                        \
    }

#endif
