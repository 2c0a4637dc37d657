/* A fusion of the step: the 2x2 pool's backward and the ReLU's before it, in one pass.
 *
 * Unfused, chapter 06's backward writes dx = the pooled gradient at each window's argmax and
 * zero elsewhere, and chapter 01's ReLU backward reads dx and the activation back to write
 * dz = dx where the activation is positive. Fused, a thread takes one window: it reads the
 * window's gradient, its 2-bit argmax and the activation at the winner, and writes the
 * window's four elements of dz. Bytes at batch 32 (conv1's, fp32): unfused 3.2 MB written,
 * 3.2 MB + 3.2 MB read, plus the pooled gradient; fused 3.2 MB written and a quarter of the
 * activations read, in one launch instead of two. */
#include "check.h"
#include "kernels.cuh"
#include "step.h"

#define THREADS 256

/* The argmax layout of chapter 06 (maxpool.h): output o's 2-bit field, the winner's position
 * r * 2 + q in its 2x2 window, at bits 2 (o % 4) of byte o / 4. */
__device__ __forceinline__ int window_winner(const uint8_t *__restrict__ argmax, int64_t o)
{
    return (argmax[o >> 2] >> ((o & 3) * 2)) & 3;
}

template <typename T>
__global__ void pool_relu_backward(const T *__restrict__ d_pooled,
                                   const uint8_t *__restrict__ argmax,
                                   const T *__restrict__ activation, T *__restrict__ dz,
                                   int64_t windows, int ow)
{
    const int64_t o = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (o >= windows)
        return;
    const int64_t row = o / ow, j = o % ow; /* row: plane * OH + i */
    const int w = 2 * ow;
    const int64_t top = 2 * row * w + 2 * j; /* element (2i, 2j) of the plane, as rows of w */
    const int win = window_winner(argmax, o);
    const int64_t at = top + (win >> 1) * w + (win & 1);
    const float g = to_float(activation[at]) > 0.f ? to_float(d_pooled[o]) : 0.f;
    const T zero = from_float<T>(0.f);
#pragma unroll
    for (int e = 0; e < 4; e++)
        dz[top + (e >> 1) * w + (e & 1)] = zero;
    dz[at] = from_float<T>(g);
}

extern "C" void cnn_pool_relu_backward(const void *d_pooled, const uint8_t *argmax,
                                       const void *activation, void *dz, int64_t planes, int oh,
                                       int ow, enum dtype t, cudaStream_t s)
{
    const int64_t windows = planes * oh * ow;
    const unsigned blocks = (unsigned)((windows + THREADS - 1) / THREADS);
    if (t == DT_FP32)
        pool_relu_backward<<<blocks, THREADS, 0, s>>>((const float *)d_pooled, argmax,
                                                      (const float *)activation, (float *)dz,
                                                      windows, ow);
    else
        pool_relu_backward<<<blocks, THREADS, 0, s>>>((const __half *)d_pooled, argmax,
                                                      (const __half *)activation, (__half *)dz,
                                                      windows, ow);
    LAUNCH_CHECK();
}
