/* Exercise: write the input under a filter tap (fp32).
 *
 * The kernel below is v1's: a thread per weight (k, c, r, s) of dw sums, over the images n and
 * the output pixels (p, q), dy[n, k, p, q] x[n, c, h, w] for the input (h, w) that tap (r, s)
 * of output (p, q)'s window lies on. The loops, loads, sum and store are written; the fetch of
 * that input, input_under, is yours. Complete it:
 *   1. the window of output (p, q) puts tap (r, s) on input row h = p stride + r - pad and
 *      column w = q stride + s - pad;
 *   2. return 0 where h < 0 or h >= H, or w < 0 or w >= W: the tap lies in the padding, which
 *      holds zeros (at padding 0 this never happens);
 *   3. else return plane[h W + w]: plane is x's H x W plane of image n and channel c, packed;
 *   4. stay correct for every shape: `./run --exercise` checks one output, 1x1 to 7x7 filters,
 *      strides 2 and 3, padding up to 3, the 2D kernel's single channel and filter, and says
 *      which element is wrong first.
 * (Chapter 07's conv_gather, in conv.cuh, reads the same element: write yours before you read
 * it.)
 * Then compare the time printed after PASS with v1's (./run --variant v1 at the same shape):
 * the kernel is v1's, so what does your test cost against it? Last, count the threads: at
 * --preset seed the grid has K C R S = 18,432 threads, 140 an SM, each a chain of
 * N P Q = 131,072 products, and at --preset seed-2d it has 9. Give each weight a warp
 * instead: lane l takes the pixels l, l + 32, ..., and __shfl_down_sync(0xffffffff, v, o) for
 * o = 16, 8, 4, 2, 1 adds the 32 partial sums into lane 0, which stores dw. Measure what the
 * 32 times as many threads buy at both presets (v3 splits the sums across blocks instead). */
#include "wgrad.cuh"

#define THREADS 128

/* x at row p stride + r - pad and column q stride + s - pad of plane, or 0 in the padding. */
static __device__ float input_under(const float *plane, const conv2d_dims &d, int p, int q,
                                    int r, int s)
{
    /* TODO: steps 1 to 3. */
    (void)plane;
    (void)d;
    (void)p;
    (void)q;
    (void)r;
    (void)s;
    return 0.f;
}

/* Thread i computes dw[i], i = ((k C + c) R + r) S + s, with a grid stride. */
__global__ void __launch_bounds__(THREADS)
    wgrad_exercise_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                          float *__restrict__ dw, conv2d_dims d)
{
    const int weights = (int)(d.k * d.c * d.r * d.s);
    const int hw = (int)(d.h * d.w), pq = (int)(d.p * d.q);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < weights; i += gridDim.x * blockDim.x) {
        const int s = i % (int)d.s, r = i / (int)d.s % (int)d.r;
        const int c = i / (int)(d.s * d.r) % (int)d.c, k = i / (int)(d.s * d.r * d.c);
        float sum = 0.f;
        for (int n = 0; n < (int)d.n; n++) {
            const float *plane = x + (n * (int)d.c + c) * hw;
            const float *grad = dy + (n * (int)d.k + k) * pq;
            for (int p = 0; p < (int)d.p; p++)
                for (int q = 0; q < (int)d.q; q++)
                    sum = fmaf(grad[p * (int)d.q + q], input_under(plane, d, p, q, r, s), sum);
        }
        dw[i] = sum;
    }
}

extern "C" void wgrad_exercise(const float *x, const float *dy, float *dw, struct conv2d_dims d,
                               cudaStream_t s)
{
    const int64_t blocks = (d.k * wgrad_columns(d) + THREADS - 1) / THREADS;
    wgrad_exercise_kernel<<<(unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX), THREADS, 0,
                            s>>>(x, dy, dw, d);
    LAUNCH_CHECK();
}
