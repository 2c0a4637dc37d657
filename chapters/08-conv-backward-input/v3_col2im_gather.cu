/* v3, the columns and col2im as a gather: no atomics, the same answer every run.
 *
 * Idea: v2's columns, read the other way round. A thread per element of dx visits the R S
 * columns that can cover it: for tap (r, s), the output (p, q) with p stride + r - pad = h
 * (dgrad_output_under, v1's test), and adds col[(c, r, s), (n, p, q)]. It writes its element
 * once, in a fixed order: deterministic, and without the zero fill, the atomics or, in fp16,
 * the fp32 buffer and its rounding kernel.
 * What changed from v2: col2im only; the pack kernels and the product are v2's.
 * Cost: the gather reads col once, as the scatter did, but with R S loads and index tests a
 * thread where the scatter made one atomic an element of col: at stride 1 the same bytes and
 * no read-modify-writes in L2. At stride 2 a thread tests R S taps and finds about R S / 4.
 * Expected: col2im from L2-bound atomics to about the read of col at the roof (large: 151 MB,
 * some 40 us in fp32), so perhaps 20-40 us off v2; the product still sets the rate.
 * Limits: v2's.
 * Measured (H200): large 816 us fp32 against v2's 1010, resnet 1137 against 1433: the
 * gather saves 200-300 us of atomics; at stride2 it is 8% slower (634 against 588). */
#include "dgrad.cuh"

#define THREADS 256

template <typename T>
__global__ void col2im_gather(const T *__restrict__ col, T *__restrict__ dx, conv2d_dims d)
{
    const int inputs = (int)(d.n * d.c * d.h * d.w), columns = (int)(d.n * d.p * d.q);
    const int stride = (int)d.stride, pad = (int)d.pad;
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < inputs; e += gridDim.x * blockDim.x) {
        const int x = e % (int)d.w, h = e / (int)d.w % (int)d.h;
        const int c = e / (int)(d.w * d.h) % (int)d.c, n = e / (int)(d.w * d.h * d.c);
        const T *image = col + n * (int)(d.p * d.q);
        float sum = 0.f;
        for (int r = 0; r < (int)d.r; r++) {
            const int p = dgrad_output_under(h, r, stride, pad, (int)d.p);
            if (p < 0)
                continue;
            for (int s = 0; s < (int)d.s; s++) {
                const int q = dgrad_output_under(x, s, stride, pad, (int)d.q);
                if (q >= 0)
                    sum += to_float(image[((c * (int)d.r + r) * (int)d.s + s) * columns +
                                          p * (int)d.q + q]);
            }
        }
        dx[e] = from_float<T>(sum);
    }
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    const dgrad_columns cols = dgrad_columns_of(d, t, workspace);
    dgrad_columns_compute(dy, w, d, cols, t, s);
    kl_note_rung("v3"); /* matmul_v3 noted chapter 05's rung: the row must name this one */
    col2im_gather<T><<<dgrad_blocks(d.n * d.c * d.h * d.w, THREADS), THREADS, 0, s>>>(
        (const T *)cols.col, dx, d);
    LAUNCH_CHECK();
}

DGRAD_LAUNCHER(v3)
