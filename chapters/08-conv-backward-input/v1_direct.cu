/* v1, direct gather: a thread per input element, looping over the outputs that touched it.
 *
 * Idea: the formula read backwards. Thread (n, c, h, w) asks, for each filter k and tap
 * (r, s), which output (p, q) put that tap on it (p stride + r - pad = h: dgrad_output_under),
 * and sums dy[n, k, p, q] w[k, c, r, s] over those that exist. No thread writes another's
 * element, so there are no atomics and the sum's order is fixed: the result is deterministic.
 * Cost: 2 N K P Q C R S FLOPs, and as many loads of dy and of w, served by the caches: the
 * warp's 32 threads are 32 neighbouring w of one row, so its loads of dy are nearly contiguous
 * and its loads of w one broadcast. A tap costs two loads, the index test and one FMA: like
 * chapter 07's v1 it is bound by instructions, not by bytes or FLOPs. At stride 2 three taps
 * in four find no output and cost the test alone.
 * Expected: a few TFLOP/s at stride 1, under half that at stride 2; for the smallest shapes,
 * one launch and no buffer, the cheapest rung there is.
 * Measured (H200): 1.7 TFLOP/s at large and resnet (4298 us fp32 at resnet, 0.03x cuDNN),
 * 0.24 at stride2, where three taps in four find nothing; 13.6 us at the seed. */
#include "dgrad.cuh"

#define THREADS 256

template <typename T>
__global__ void dgrad_direct(const T *__restrict__ dy, const T *__restrict__ w,
                             T *__restrict__ dx, conv2d_dims d)
{
    const int inputs = (int)(d.n * d.c * d.h * d.w);
    const int stride = (int)d.stride, pad = (int)d.pad;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < inputs; i += gridDim.x * blockDim.x) {
        const int col = i % (int)d.w, h = i / (int)d.w % (int)d.h;
        const int c = i / (int)(d.w * d.h) % (int)d.c, n = i / (int)(d.w * d.h * d.c);
        float sum = 0.f;
        for (int k = 0; k < (int)d.k; k++) {
            const T *plane = dy + (n * (int)d.k + k) * (int)(d.p * d.q);
            const T *filter = w + (k * (int)d.c + c) * (int)(d.r * d.s);
            for (int r = 0; r < (int)d.r; r++) {
                const int p = dgrad_output_under(h, r, stride, pad, (int)d.p);
                if (p < 0)
                    continue;
                for (int s = 0; s < (int)d.s; s++) {
                    const int q = dgrad_output_under(col, s, stride, pad, (int)d.q);
                    if (q >= 0)
                        sum = fmaf(to_float(plane[p * (int)d.q + q]),
                                   to_float(filter[r * (int)d.s + s]), sum);
                }
            }
        }
        dx[i] = from_float<T>(sum);
    }
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)workspace;
    dgrad_direct<T><<<dgrad_blocks(d.n * d.c * d.h * d.w, THREADS), THREADS, 0, s>>>(dy, w, dx,
                                                                                    d);
    LAUNCH_CHECK();
}

DGRAD_LAUNCHER(v1)
