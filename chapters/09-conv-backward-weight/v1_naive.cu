/* v1, naive: a thread per weight, summing all N P Q of its products in turn.
 *
 * Idea: the formula as written. Thread (k, c, r, s) walks every output pixel (n, p, q), and
 * where tap (r, s) of that window lies on x, adds dy[n, k, p, q] x[n, c, p stride + r - pad,
 * q stride + s - pad]. No thread shares a sum, so there are no atomics and the order is fixed.
 * The catch is the count: dw has K C R S elements, 18432 at the seed, 144 in chapter 10's
 * first layer, 9 in the 2D kernel, while each sum is N P Q = 131072 products long at the seed.
 * 18432 threads are 140 per SM, 4 warps, each a chain of dependent loads and FMAs; 144 threads
 * are 5 warps on the whole GPU. The reduction is the long dimension here, and one thread per
 * output leaves it serial.
 * Expected: the seed's 4.8 GFLOP at well under 1 TFLOP/s (a load pair and an FMA per product,
 * four warps an SM to hide the latency): several milliseconds; the small shapes are bound by
 * one thread's N P Q steps at a few ns each (seed-2d: 131072 steps, about a millisecond).
 * Measured (H200): seed 12000 us fp32 (0.40 TFLOP/s, 0.03x cuDNN), 9490 fp16; seed-2d 12470. */
#include "wgrad.cuh"

#define THREADS 128

template <typename T>
__global__ void wgrad_naive(const T *__restrict__ x, const T *__restrict__ dy,
                            T *__restrict__ dw, conv2d_dims d)
{
    const int weights = (int)(d.k * d.c * d.r * d.s);
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= weights)
        return;
    const int s = e % (int)d.s, r = e / (int)d.s % (int)d.r;
    const int c = e / (int)(d.s * d.r) % (int)d.c, k = e / (int)(d.s * d.r * d.c);
    const int H = (int)d.h, W = (int)d.w, P = (int)d.p, Q = (int)d.q;
    float sum = 0.f;
    for (int n = 0; n < (int)d.n; n++) {
        const T *plane = x + (n * (int)d.c + c) * H * W;
        const T *grad = dy + (n * (int)d.k + k) * P * Q;
        for (int p = 0; p < P; p++) {
            const int h = p * (int)d.stride + r - (int)d.pad;
            if (h < 0 || h >= H)
                continue;
            for (int q = 0; q < Q; q++) {
                const int w = q * (int)d.stride + s - (int)d.pad;
                if (w >= 0 && w < W)
                    sum = fmaf(to_float(grad[p * Q + q]), to_float(plane[h * W + w]), sum);
            }
        }
    }
    dw[e] = from_float<T>(sum);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db, (void)workspace;
    const int64_t weights = d.k * d.c * d.r * d.s;
    wgrad_naive<T><<<(unsigned)((weights + THREADS - 1) / THREADS), THREADS, 0, s>>>(x, dy, dw,
                                                                                    d);
    LAUNCH_CHECK();
}

WGRAD_LAUNCHER(v1, 0)
