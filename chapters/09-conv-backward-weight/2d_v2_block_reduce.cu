/* 2d_v2, a block per tap: 256 threads share each sum, then a shared-memory tree adds them.
 *
 * Idea: give each long sum many threads. Block (r, s) has 256 threads stride over the N P Q
 * output pixels, thread t taking pixels t, t + 256, ..., so a warp's loads of dy are 32
 * neighbouring elements (one 128-byte line in fp32) and its loads of x nearly so; each thread
 * keeps a partial sum, and the block adds its 256 partials in shared memory, halving the
 * active threads at each of 8 steps. The order is fixed, so the result is deterministic.
 * What changed from 2d_v1: a sum is 256 chains of N P Q / 256 steps (512 at seed-2d) instead
 * of one of N P Q, and a step's loads are coalesced lines instead of one element.
 * What it leaves: the grid is R S blocks, 9 SMs of 132 at 3x3, with 8 warps each to hide the
 * latency of loads that mostly miss L1; and every block reads all of dy, so dy crosses from L2
 * R S times. A long reduction wants its pixels split across the whole GPU, and each element
 * of x and dy read once for all the taps at once: 2d_v3.
 * Expected: seed-2d in the order of 100 us (512 steps a thread, each behind an L2 or DRAM
 * round trip shared by a few loads in flight), 10-30x faster than 2d_v1, slower than cuDNN's
 * 23.4 us; db is chapter 02's bias_grad.
 * Measured (H200): seed-2d 158 us fp32, 144 fp16 (0.22x and 0.19x cuDNN). */
#include "wgrad.cuh"

#define THREADS 256

template <typename T>
__global__ void __launch_bounds__(THREADS)
    wgrad_2d_block_reduce(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                          conv2d_dims d)
{
    __shared__ float partial[THREADS];
    const int tap = blockIdx.x, r = tap / (int)d.s, s = tap % (int)d.s;
    const int H = (int)d.h, W = (int)d.w, Q = (int)d.q, plane = (int)(d.p * d.q);
    const int stride = (int)d.stride, pad = (int)d.pad;
    const int64_t pixels = wgrad_pixels(d); /* 64 bits: the last i + THREADS may pass 2^31 */
    float sum = 0.f;
    for (int64_t at = threadIdx.x; at < pixels; at += THREADS) {
        const int i = (int)at, n = i / plane, pq = i - n * plane, p = pq / Q, q = pq - p * Q;
        const int h = p * stride + r - pad, w = q * stride + s - pad;
        if ((unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W)
            sum = fmaf(to_float(dy[i]), to_float(x[(n * H + h) * W + w]), sum);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half)
            partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        dw[tap] = from_float<T>(partial[0]);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db, (void)workspace;
    wgrad_2d_block_reduce<T><<<(unsigned)(d.r * d.s), THREADS, 0, s>>>(x, dy, dw, d);
    LAUNCH_CHECK();
}

WGRAD_LAUNCHER(2d_v2, 0)
