/* v2, block reduction: the threads of a block share rows, and combine through a shared-memory
 * tree.
 *
 * Idea: give a row many threads. A block of 256 threads works on TS rows at once, TC = 256 / TS
 * threads per row: thread (ts, tc) takes channels tc, tc + TC, tc + 2 TC, ... of row ts. Each
 * thread reduces its channels, then the TC partial results of each row meet in shared memory,
 * halving each step (log2 TC steps, a barrier between steps, sequential addressing: the active
 * threads are the low ones, so whole warps drop out together, except in the last 5 steps
 * when TS = 1).
 * The mapping follows the layout: with contiguous rows (H W = 1) TS = 1, the block's 256
 * threads read 256 neighbouring elements of one row; with rows H W apart TS = 32, a warp covers
 * 32 neighbouring (h, w) at one channel (the same coalescing v1 had) and the block's 8 warps
 * split the channels.
 * What changed from v1: a long row is read by 256 threads in coalesced sweeps, not by one thread
 * alone; `large` goes from 4096 threads to a million.
 * Expected: a large step on long contiguous rows; still three passes over the row (two
 * backward). A 128 KiB row does not stay in the L1, and with 8 blocks per SM on 132 SMs the
 * rows in flight (about 135 MB at `large` forward) do not fit the 60 MB L2 either, so the second
 * and third reads come largely from DRAM: about 60% of the roof at best forward (x read
 * three times, y written once, against the 2 arrays the roof counts), a little more backward
 * (y and dy read twice, dx written once). At the seed shapes, slower than v1: each row's two
 * reductions cost 5 barriers each, for 10 channels.
 * Limits: the row's data make the round trip to memory three times; v3 keeps it in registers. */
#include "softmax.cuh"
#include "softmax.h"

#define THREADS 256

/* op over the TC threads of each of the TS rows, returned to every thread of the row. TC is a
 * power of two. */
template <typename Op>
__device__ __forceinline__ float softmax_tile_reduce(float *red, float v, int TS, Op op)
{
    const int TC = THREADS / TS, tc = threadIdx.x / TS;
    red[threadIdx.x] = v;
    __syncthreads();
    for (int stride = TC / 2; stride > 0; stride /= 2) {
        if (tc < stride)
            red[threadIdx.x] = op(red[threadIdx.x], red[threadIdx.x + stride * TS]);
        __syncthreads();
    }
    v = red[threadIdx.x % TS];
    __syncthreads(); /* red is written again by the next reduction */
    return v;
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    softmax_forward_tile(const T *__restrict__ x, T *__restrict__ y, int64_t rows, int C,
                         int64_t S, int TS)
{
    __shared__ float red[THREADS];
    const int TC = THREADS / TS, tc = threadIdx.x / TS;
    const int64_t r = (int64_t)blockIdx.x * TS + threadIdx.x % TS;
    const bool live = r < rows;
    const int64_t start = live ? softmax_row_start(r, C, S) : 0;
    const T *xr = x + start;
    T *yr = y + start;

    float m = SOFTMAX_NO_VALUE;
    if (live)
        for (int c = tc; c < C; c += TC)
            m = fmaxf(m, to_float(xr[c * S]));
    m = softmax_tile_reduce(red, m, TS, softmax_max_op());

    float sum = 0.f;
    if (live)
        for (int c = tc; c < C; c += TC)
            sum += softmax_exp(to_float(xr[c * S]) - m);
    sum = softmax_tile_reduce(red, sum, TS, softmax_sum_op());

    const float inv = 1.f / sum;
    if (live)
        for (int c = tc; c < C; c += TC)
            yr[c * S] = from_float<T>(softmax_exp(to_float(xr[c * S]) - m) * inv);
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    softmax_backward_tile(const T *__restrict__ y, const T *__restrict__ dy, T *__restrict__ dx,
                          int64_t rows, int C, int64_t S, int TS)
{
    __shared__ float red[THREADS];
    const int TC = THREADS / TS, tc = threadIdx.x / TS;
    const int64_t r = (int64_t)blockIdx.x * TS + threadIdx.x % TS;
    const bool live = r < rows;
    const int64_t start = live ? softmax_row_start(r, C, S) : 0;
    const T *yr = y + start, *dyr = dy + start;
    T *dxr = dx + start;

    float dot = 0.f;
    if (live)
        for (int c = tc; c < C; c += TC)
            dot += to_float(yr[c * S]) * to_float(dyr[c * S]);
    dot = softmax_tile_reduce(red, dot, TS, softmax_sum_op());

    if (live)
        for (int c = tc; c < C; c += TC)
            dxr[c * S] = from_float<T>(to_float(yr[c * S]) * (to_float(dyr[c * S]) - dot));
}

/* Rows per block: one for contiguous rows, 32 neighbouring ones when rows are H W apart. */
static int rows_per_block(struct softmax_dims d)
{
    return d.h * d.w == 1 ? 1 : 32;
}

template <typename T> static void forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w;
    const int TS = rows_per_block(d);
    const unsigned blocks = (unsigned)((rows + TS - 1) / TS);
    softmax_forward_tile<<<blocks, THREADS, 0, s>>>(x, y, rows, (int)d.c, d.h * d.w, TS);
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *y, const T *dy, T *dx, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w;
    const int TS = rows_per_block(d);
    const unsigned blocks = (unsigned)((rows + TS - 1) / TS);
    softmax_backward_tile<<<blocks, THREADS, 0, s>>>(y, dy, dx, rows, (int)d.c, d.h * d.w, TS);
    LAUNCH_CHECK();
}

extern "C" void softmax_forward_v2(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    kl_note_rung("v2_block_reduce");
    if (t == DT_FP32)
        forward((const float *)x, (float *)y, d, s);
    else
        forward((const __half *)x, (__half *)y, d, s);
}

extern "C" void softmax_backward_v2(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v2_block_reduce");
    if (t == DT_FP32)
        backward((const float *)y, (const float *)dy, (float *)dx, d, s);
    else
        backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
}
