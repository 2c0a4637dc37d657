/* v7, few channels: a lane per input pixel, all C of its channels in registers.
 *
 * Idea: where C is small (chapter 10's second layer has 16, the seed 4), the product's M = C
 * rows leave v4's 32- and 64-row tiles mostly empty, and v5 pays a launch for its flipped
 * filter. Here a lane takes one pixel (n, h, w) and sums all C channels of dx at once: for
 * each filter k and each tap that reaches the pixel, one load of dy feeds C multiply-adds,
 * with the C weights w[k, :, r, s] read from shared memory as float4s (the block stages w
 * there once, laid out [k][r][s][c]; a warp's lanes all read the same weights, a broadcast).
 * The taps that reach row h are r = r0, r0 + stride, ... with r0 = (h + pad) mod stride: one
 * division a pixel, none a tap, so no stride multiplies a zero. A block is 32 pixels x 8
 * warps, warp j taking the filters j, j + 8, ...: a pixel's loop is K / 8 filters long, not K
 * (a thread a pixel with the whole loop measured 13.2 us at the seed and 70.5 at cnn: eight
 * times the threads hide the loads' latency), and the 8 partial sums meet in shared memory.
 * What changed from v6: no tiles and no shared dy; w read in place (no flip, one launch).
 * Cost: 2 N K P Q C R S FLOPs; dy read once from DRAM and about R S / stride^2 times from L1
 * and L2; per tap one global load, C / 4 shared loads and C FMAs.
 * Expected: the seed (C = 4, 8192 pixels) in one launch of 4-5 us, against v5's 7.5; chapter
 * 10's layer at batch 32 (C = 16, 6,272 pixels) in 7-10 us against v5's 15.5.
 * Limits: C <= 16, and w with the slices' sums within 96 KB of shared memory.
 * Measured (H200): the seed 5.02 us fp32 and 4.72 fp16 (2.76x and 3.89x cuDNN), as predicted;
 * cnn at batch 32 19.4 us fp32, slower than predicted and than v5's 15.5. */
#include "dgrad.cuh"

#define SLICES 8 /* warps a block, each summing every SLICES-th filter */
#define THREADS (32 * SLICES)
#define MAX_CHANNELS 16
#define MAX_FILTER_FLOATS (24 * 1024) /* 96 KB of shared memory: w and the sums, as floats */

extern "C" const char *dgrad_v7_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if (d.c > MAX_CHANNELS)
        return "more than 16 channels: v7 keeps a pixel's channels in registers";
    if ((d.k * d.r * d.s + SLICES * 32) * ((d.c + 3) / 4 * 4) > MAX_FILTER_FLOATS)
        return "the filters do not fit v7's 96 KB of shared memory";
    return NULL;
}

/* The first tap reaching input row h, and the output it comes from, at (h + pad - r0) /
 * stride; further taps step r by the stride and p down by one. */
struct first_tap {
    int r, p;
};

__device__ __forceinline__ first_tap first_tap_of(int h, int stride, int pad)
{
    first_tap f;
    f.r = (h + pad) % stride;
    f.p = (h + pad - f.r) / stride;
    return f;
}

/* CP channels padded to a multiple of 4, so that a tap's weights are whole float4s. A block
 * is 32 pixels (the lanes) x SLICES warps, warp j summing the filters k = j, j + SLICES, ...;
 * the slices' partial sums meet in shared memory at the end. */
template <int CP, typename T>
__global__ void __launch_bounds__(THREADS)
    dgrad_few_channels(const T *__restrict__ dy, const T *__restrict__ w, T *__restrict__ dx,
                       conv2d_dims d)
{
    extern __shared__ float4 filters[]; /* [k][r][s][CP / 4], then the slices' sums */
    const int C = (int)d.c, R = (int)d.r, S = (int)d.s, taps = (int)(d.k * d.r * d.s);
    for (int e = threadIdx.x; e < taps * CP; e += blockDim.x) {
        const int c = e % CP, tap = e / CP, k = tap / (R * S), rs = tap - k * R * S;
        ((float *)filters)[e] = c < C ? to_float(w[(k * C + c) * R * S + rs]) : 0.f;
    }
    float *sums = (float *)(filters + taps * (CP / 4)); /* [SLICES][CP][32] */
    __syncthreads();
    const int pixels = (int)(d.n * d.h * d.w), pq = (int)(d.p * d.q), hw = (int)(d.h * d.w);
    const int stride = (int)d.stride, pad = (int)d.pad, lane = threadIdx.x % 32;
    const int slice = threadIdx.x / 32;
    for (int i0 = blockIdx.x * 32; i0 < pixels; i0 += gridDim.x * 32) {
        const int i = i0 + lane < pixels ? i0 + lane : pixels - 1;
        const int x = i % (int)d.w, h = i / (int)d.w % (int)d.h, n = i / hw;
        const first_tap row = first_tap_of(h, stride, pad), col = first_tap_of(x, stride, pad);
        float acc[CP] = {};
        for (int k = slice; k < (int)d.k; k += SLICES) {
            const T *plane = dy + (n * (int)d.k + k) * pq;
            for (int r = row.r, p = row.p; r < R; r += stride, p--) {
                if ((unsigned)p >= (unsigned)d.p)
                    continue;
                for (int s = col.r, q = col.p; s < S; s += stride, q--) {
                    if ((unsigned)q >= (unsigned)d.q)
                        continue;
                    const float v = to_float(plane[p * (int)d.q + q]);
                    const float4 *wk = filters + ((k * R + r) * S + s) * (CP / 4);
#pragma unroll
                    for (int c4 = 0; c4 < CP / 4; c4++) {
                        const float4 f = wk[c4];
                        acc[4 * c4] = fmaf(v, f.x, acc[4 * c4]);
                        acc[4 * c4 + 1] = fmaf(v, f.y, acc[4 * c4 + 1]);
                        acc[4 * c4 + 2] = fmaf(v, f.z, acc[4 * c4 + 2]);
                        acc[4 * c4 + 3] = fmaf(v, f.w, acc[4 * c4 + 3]);
                    }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < CP; c++)
            sums[(slice * CP + c) * 32 + lane] = acc[c];
        __syncthreads();
        for (int e = threadIdx.x; e < CP * 32; e += THREADS) {
            const int c = e / 32, px = i0 + e % 32;
            float total = 0.f;
#pragma unroll
            for (int j = 0; j < SLICES; j++)
                total += sums[(j * CP + c) * 32 + e % 32];
            if (c < C && px < pixels) {
                const int m = px / hw;
                dx[(m * C + c) * hw + (px - m * hw)] = from_float<T>(total);
            }
        }
        __syncthreads(); /* the sums are overwritten next */
    }
}

template <int CP, typename T>
static void launch(const T *dy, const T *w, T *dx, conv2d_dims d, cudaStream_t s)
{
    const size_t smem = ((size_t)(d.k * d.r * d.s) + SLICES * 32) * CP * sizeof(float);
    const auto kernel = dgrad_few_channels<CP, T>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    kernel<<<dgrad_blocks(d.n * d.h * d.w, 32), THREADS, smem, s>>>(dy, w, dx, d);
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)workspace;
    if (d.c <= 4)
        launch<4>(dy, w, dx, d, s);
    else if (d.c <= 8)
        launch<8>(dy, w, dx, d, s);
    else
        launch<16>(dy, w, dx, d, s);
}

DGRAD_LAUNCHER(v7)
