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

/* Two fusions of the last layer, whose products are too thin for a matrix kernel: 10 classes.
 *
 * Forward: logits = fc1 W2^T + b2, a row of 128 against 10 rows of W2. A warp a row: each lane
 * holds 4 of the 128 inputs and 4 x 10 weights' products, the warp sums each class with
 * shuffles, and lane c < 10 adds the bias and writes class c: one launch for the product and
 * the bias, W2 (5 KB in fp32) read through L1 by every warp. The lanes also hold the row's argmax
 * (the first maximum, the reference's rule), so the warp counts a hit: the step's count needs
 * no launch of its own.
 * Backward: d_fc1 = (d_logits W2) * ReLU'(fc1), 10 multiply-adds an element, in the same pass as
 * the ReLU's gradient: one launch where chapter 05's product and chapter 01's ReLU take two. */
#define ROWS_A_BLOCK (THREADS / 32)

template <typename T>
__global__ void __launch_bounds__(THREADS)
    fc2_forward(const T *__restrict__ fc1, const T *__restrict__ w2, const T *__restrict__ b2,
                T *__restrict__ logits, const int32_t *__restrict__ labels,
                int *__restrict__ correct, int rows)
{
    const int row = blockIdx.x * ROWS_A_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float in[CNN_HIDDEN / 32];
#pragma unroll
    for (int e = 0; e < CNN_HIDDEN / 32; e++)
        in[e] = to_float(fc1[(int64_t)row * CNN_HIDDEN + lane + 32 * e]);
    float mine = 0.f;
#pragma unroll
    for (int c = 0; c < CNN_CLASSES; c++) {
        float sum = 0.f;
#pragma unroll
        for (int e = 0; e < CNN_HIDDEN / 32; e++)
            sum = fmaf(in[e], to_float(w2[c * CNN_HIDDEN + lane + 32 * e]), sum);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        mine = lane == c ? sum : mine;
    }
    const T stored = from_float<T>(mine + to_float(b2[lane < CNN_CLASSES ? lane : 0]));
    if (lane < CNN_CLASSES)
        logits[(int64_t)row * CNN_CLASSES + lane] = stored;
    if (!labels)
        return;
    /* The argmax of the stored (rounded) logits, as the unfused count reads them. */
    float top = lane < CNN_CLASSES ? to_float(stored) : -INFINITY;
    int best = lane;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, top, offset);
        const int at = __shfl_xor_sync(0xffffffffu, best, offset);
        if (other > top || (other == top && at < best))
            top = other, best = at;
    }
    if (lane == 0 && best == labels[row])
        atomicAdd(correct, 1);
}

template <typename T>
__global__ void fc2_input_gradient(const T *__restrict__ d_logits, const T *__restrict__ w2,
                                   const T *__restrict__ fc1, T *__restrict__ d_fc1, int rows)
{
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= (int64_t)rows * CNN_HIDDEN)
        return;
    const int64_t row = i / CNN_HIDDEN;
    const int j = (int)(i % CNN_HIDDEN);
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CNN_CLASSES; c++)
        sum = fmaf(to_float(d_logits[row * CNN_CLASSES + c]), to_float(w2[c * CNN_HIDDEN + j]),
                   sum);
    d_fc1[i] = from_float<T>(to_float(fc1[i]) > 0.f ? sum : 0.f);
}

template <typename T>
static void fc2_forward_as(const void *fc1, const void *w2, const void *b2, void *logits,
                           const int32_t *labels, int *correct, int rows, cudaStream_t s)
{
    const unsigned blocks = (unsigned)((rows + ROWS_A_BLOCK - 1) / ROWS_A_BLOCK);
    fc2_forward<<<blocks, THREADS, 0, s>>>((const T *)fc1, (const T *)w2, (const T *)b2,
                                           (T *)logits, labels, correct, rows);
}

template <typename T>
static void fc2_input_gradient_as(const void *d_logits, const void *w2, const void *fc1,
                                  void *d_fc1, int rows, cudaStream_t s)
{
    const unsigned blocks = (unsigned)(((int64_t)rows * CNN_HIDDEN + THREADS - 1) / THREADS);
    fc2_input_gradient<<<blocks, THREADS, 0, s>>>((const T *)d_logits, (const T *)w2,
                                                  (const T *)fc1, (T *)d_fc1, rows);
}

extern "C" void cnn_fc2_forward(const void *fc1, const void *w2, const void *b2, void *logits,
                                const int32_t *labels, int *correct, int rows, enum dtype t,
                                cudaStream_t s)
{
    t == DT_FP32 ? fc2_forward_as<float>(fc1, w2, b2, logits, labels, correct, rows, s)
                 : fc2_forward_as<__half>(fc1, w2, b2, logits, labels, correct, rows, s);
    LAUNCH_CHECK();
}

extern "C" void cnn_fc2_input_gradient(const void *d_logits, const void *w2, const void *fc1,
                                       void *d_fc1, int rows, enum dtype t, cudaStream_t s)
{
    t == DT_FP32 ? fc2_input_gradient_as<float>(d_logits, w2, fc1, d_fc1, rows, s)
                 : fc2_input_gradient_as<__half>(d_logits, w2, fc1, d_fc1, rows, s);
    LAUNCH_CHECK();
}
