/* What the max-pooling rungs share: the window scan that defines the argmax, the two forms of
 * the saved argmax, index splitting, grid sizing and the dtype dispatch of the launchers.
 *
 * Comparisons are made in fp32 whatever the storage type (fp16 widens exactly), and y is the
 * chosen element itself, copied in its own type: pooling rounds nothing. Window positions
 * (r, q), r < KH and q < KW, fit an int (a window holds at most 255 positions); every other
 * index is 64-bit.
 *
 * maxpool_plane_to_window, the conversion kernel that maxpool.h declares, lives in
 * v1_naive.cu: an extern "C" function may be defined in one file only. Its per-output
 * arithmetic is maxpool_window_from_plane below. */
#ifndef MAXPOOL_CUH
#define MAXPOOL_CUH

#include <stdint.h>

#include "kernels.cuh"
#include "maxpool.h"

/* Whether v takes the place of the best so far: larger, or the first NaN. NaN compares false
 * with everything, so `v > best` alone would let a NaN neither win nor be beaten; the second
 * term makes it win once and then stay. */
__device__ __forceinline__ bool maxpool_wins(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

/* The argmax of one window: the element, and its position (r, q) inside the window. */
template <typename T> struct maxpool_pick {
    T value;
    int r, q;
};

/* Top-left corner of window (i, j) in x's plane; negative inside the padding. */
__device__ __forceinline__ int64_t maxpool_window_top(const maxpool_dims &d, int64_t i)
{
    return i * d.s - d.p;
}

__device__ __forceinline__ int64_t maxpool_window_left(const maxpool_dims &d, int64_t j)
{
    return j * d.s - d.p;
}

/* Window (i, j) of one (n, c) plane of x, scanned row by row over the positions inside x: the
 * first maximum, or the first NaN. The scan starts from the first position inside x (p < KH and
 * p < KW guarantee one), so padding never takes part. */
template <typename T>
__device__ __forceinline__ maxpool_pick<T> maxpool_window_argmax(const T *__restrict__ plane,
                                                                 const maxpool_dims &d,
                                                                 int64_t i, int64_t j)
{
    const int64_t top = maxpool_window_top(d, i), left = maxpool_window_left(d, j);
    const int r0 = top < 0 ? (int)-top : 0, q0 = left < 0 ? (int)-left : 0;
    const int r1 = (int)(d.h - top < d.kh ? d.h - top : d.kh); /* one past the last row */
    const int q1 = (int)(d.w - left < d.kw ? d.w - left : d.kw);
    maxpool_pick<T> best = {plane[(top + r0) * d.w + left + q0], r0, q0};
    float best_f = to_float(best.value);
    for (int r = r0; r < r1; r++) {
        const int64_t row = (top + r) * d.w + left;
        for (int q = q0; q < q1; q++) {
            const T v = plane[row + q];
            const float f = to_float(v);
            if (maxpool_wins(f, best_f)) {
                best = {v, r, q};
                best_f = f;
            }
        }
    }
    return best;
}

/* The two forms of the saved argmax (maxpool.h): h W + w in the plane, r KW + q in the window. */
__device__ __forceinline__ int32_t maxpool_plane_index(const maxpool_dims &d, int64_t i,
                                                       int64_t j, int r, int q)
{
    return (int32_t)((maxpool_window_top(d, i) + r) * d.w + maxpool_window_left(d, j) + q);
}

__device__ __forceinline__ uint8_t maxpool_window_index(const maxpool_dims &d, int r, int q)
{
    return (uint8_t)(r * (int)d.kw + q);
}

/* quotient = a / b and rest = a % b, for a >= 0 and b > 0. A 64-bit division is a software
 * routine of dozens of instructions, a 32-bit one a handful: the short one is taken whenever
 * the operands fit, which is nearly always (a tensor of 2^32 outputs is 16 GB of fp32). */
__device__ __forceinline__ void maxpool_divmod(int64_t a, int64_t b, int64_t &quotient,
                                               int64_t &rest)
{
    if (a <= UINT32_MAX && b <= UINT32_MAX) {
        const uint32_t q = (uint32_t)a / (uint32_t)b;
        quotient = q;
        rest = a - (int64_t)q * b;
    } else {
        quotient = a / b;
        rest = a - quotient * b;
    }
}

/* Window position of a plane index chosen by window (i, j): the plane position less the
 * window's corner. */
__device__ __forceinline__ uint8_t maxpool_window_from_plane(const maxpool_dims &d,
                                                             int32_t plane_index, int64_t i,
                                                             int64_t j)
{
    int64_t hh, ww;
    maxpool_divmod(plane_index, d.w, hh, ww);
    return maxpool_window_index(d, (int)(hh - maxpool_window_top(d, i)),
                                (int)(ww - maxpool_window_left(d, j)));
}

/* Windows never overlap when the stride is at least the window: each input then lies in at
 * most one window, and the backward is a gather with one candidate per input. */
static inline bool maxpool_disjoint_windows(const maxpool_dims &d)
{
    return d.s >= d.kh && d.s >= d.kw;
}

/* Blocks of `threads` threads for one thread per item, at most 2^31 - 1 (gridDim.x's limit):
 * the kernels loop with a grid stride, so a larger count is still covered. */
static inline unsigned maxpool_blocks(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks < INT32_MAX ? blocks : INT32_MAX);
}

/* The extern "C" launchers of maxpool.h, from a file's templates
 *   template <typename T> static void forward(const T *x, T *y, int32_t *plane_idx,
 *                                             uint8_t *window_idx, maxpool_dims d, cudaStream_t s)
 *   template <typename T> static void backward(const T *dy, const int32_t *plane_idx,
 *                                              const uint8_t *window_idx, T *dx, maxpool_dims d,
 *                                              cudaStream_t s)
 * instantiated for fp32 and fp16. */
#define MAXPOOL_FORWARD_LAUNCHER(v)                                                            \
    extern "C" void maxpool_forward_##v(const void *x, void *y, int32_t *plane_idx,            \
                                        uint8_t *window_idx, struct maxpool_dims d,            \
                                        enum dtype t, cudaStream_t s)                          \
    {                                                                                          \
        if (t == DT_FP32)                                                                      \
            forward((const float *)x, (float *)y, plane_idx, window_idx, d, s);                \
        else                                                                                   \
            forward((const __half *)x, (__half *)y, plane_idx, window_idx, d, s);              \
    }

#define MAXPOOL_BACKWARD_LAUNCHER(v)                                                           \
    extern "C" void maxpool_backward_##v(const void *dy, const int32_t *plane_idx,             \
                                         const uint8_t *window_idx, void *dx,                  \
                                         struct maxpool_dims d, enum dtype t, cudaStream_t s)  \
    {                                                                                          \
        if (t == DT_FP32)                                                                      \
            backward((const float *)dy, plane_idx, window_idx, (float *)dx, d, s);             \
        else                                                                                   \
            backward((const __half *)dy, plane_idx, window_idx, (__half *)dx, d, s);           \
    }

#endif
