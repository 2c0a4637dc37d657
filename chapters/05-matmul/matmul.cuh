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

/* 4 consecutive elements x[row][col .. col + 3] of a rows x cols matrix, as floats; 0 outside.
 * One 16-byte (fp32) or 8-byte (fp16) load when `vec` (cols % 4 == 0, matrix aligned) and all
 * four lie inside. */
template <typename T>
__device__ __forceinline__ float4 matmul_load4(const T *x, int64_t rows, int64_t cols, int64_t row,
                                        int64_t col, bool vec)
{
    if (vec && row < rows && col + 3 < cols) {
        const T *p = x + row * cols + col;
        if constexpr (sizeof(T) == 4) {
            return *reinterpret_cast<const float4 *>(p);
        } else {
            const uint2 raw = *reinterpret_cast<const uint2 *>(p);
            const __half2 lo = *reinterpret_cast<const __half2 *>(&raw.x);
            const __half2 hi = *reinterpret_cast<const __half2 *>(&raw.y);
            const float2 l = __half22float2(lo), h = __half22float2(hi);
            return make_float4(l.x, l.y, h.x, h.y);
        }
    }
    return make_float4(matmul_load(x, rows, cols, row, col),
                       matmul_load(x, rows, cols, row, col + 1),
                       matmul_load(x, rows, cols, row, col + 2),
                       matmul_load(x, rows, cols, row, col + 3));
}

template <typename T>
__device__ __forceinline__ void matmul_store4(T *c, int64_t rows, int64_t cols, int64_t row,
                                       int64_t col, const float *v, bool vec)
{
    if (vec && row < rows && col + 3 < cols) {
        T *p = c + row * cols + col;
        if constexpr (sizeof(T) == 4) {
            *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            uint2 raw;
            *reinterpret_cast<__half2 *>(&raw.x) = __floats2half2_rn(v[0], v[1]);
            *reinterpret_cast<__half2 *>(&raw.y) = __floats2half2_rn(v[2], v[3]);
            *reinterpret_cast<uint2 *>(p) = raw;
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; e++)
        matmul_store(c, rows, cols, row, col + e, v[e]);
}

/* 4-wide access to a matrix with rows of `cols` elements: every row 4-element aligned. */
static inline bool matmul_rows_of_4(const void *x, int64_t cols, size_t esize)
{
    return cols % 4 == 0 && ((uintptr_t)x % (4 * esize)) == 0;
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
        kl_note_rung(#v);                                                                      \
        if (t == DT_FP32)                                                                      \
            kernel<float><<<grid, block, 0, s>>>((const float *)a, (const float *)b,           \
                                                 (float *)c, d.m, d.n, d.k);                   \
        else                                                                                   \
            kernel<__half><<<grid, block, 0, s>>>((const __half *)a, (const __half *)b,        \
                                                  (__half *)c, d.m, d.n, d.k);                 \
        LAUNCH_CHECK();                                                                        \
    }

#endif
