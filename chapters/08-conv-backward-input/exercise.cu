/* Exercise: write the direct gather's index test (fp32).
 *
 * The kernel below is v1's direct gather: a thread per element (n, c, h, w) of dx sums, over
 * the filters k and the taps (r, s), dy[n, k, p, q] w[k, c, r, s] for the output (p, q) whose
 * window put tap (r, s) on (h, w), where there is one. The loops, loads, sum and store are
 * written; the test that finds that output, output_under, is yours, and serves both axes (rows
 * with r and P, columns with s and Q). Complete it:
 *   1. the window of output p puts tap r on input row p stride + r - pad: solve
 *      p stride + r - pad = h for p stride, at = h + pad - r;
 *   2. return -1 where at < 0: the tap lies above the first window;
 *   3. return -1 where at is not a multiple of stride: the tap falls between two windows (at
 *      stride 1 every at is one);
 *   4. else p = at / stride, or -1 where p >= count: past dy's last row;
 *   5. stay correct for every shape: `./run --exercise` checks one output, 1x1 to 7x7 filters,
 *      strides 2 and 3, padding up to 3, and says which element is wrong first.
 * (dgrad.cuh's dgrad_output_under is an answer: write yours before you read it.)
 * Then compare the time printed after PASS with v1's (./run --variant v1 at the same shape):
 * the kernel is v1's, so what does your test cost against it? Last, run both at --preset
 * stride2: at stride 2 three taps in four find no output, and pay the test, a loop step and
 * the branch for nothing. Only the taps r = (h + pad) mod stride, r + stride, ... can hit:
 * start r and s there and step by stride, drop the multiple test, and measure what it buys
 * (v6 takes the same idea further, one phase of taps per launch). */
#include "dgrad.cuh"

#define THREADS 256

/* The output p whose window puts tap r on input row h (p stride + r - pad = h, 0 <= p < count),
 * or -1 where there is none. */
static __device__ int output_under(int h, int r, int stride, int pad, int count)
{
    /* TODO: steps 1 to 4. */
    (void)h;
    (void)r;
    (void)stride;
    (void)pad;
    (void)count;
    return -1;
}

/* Thread i computes dx[i], i = ((n C + c) H + h) W + w, with a grid stride. */
__global__ void __launch_bounds__(THREADS)
    dgrad_exercise_kernel(const float *__restrict__ dy, const float *__restrict__ w,
                          float *__restrict__ dx, conv2d_dims d)
{
    const int inputs = (int)(d.n * d.c * d.h * d.w);
    const int stride = (int)d.stride, pad = (int)d.pad;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < inputs; i += gridDim.x * blockDim.x) {
        const int col = i % (int)d.w, h = i / (int)d.w % (int)d.h;
        const int c = i / (int)(d.w * d.h) % (int)d.c, n = i / (int)(d.w * d.h * d.c);
        float sum = 0.f;
        for (int k = 0; k < (int)d.k; k++) {
            const float *plane = dy + (n * (int)d.k + k) * (int)(d.p * d.q);
            const float *filter = w + (k * (int)d.c + c) * (int)(d.r * d.s);
            for (int r = 0; r < (int)d.r; r++) {
                const int p = output_under(h, r, stride, pad, (int)d.p);
                if (p < 0)
                    continue;
                for (int s = 0; s < (int)d.s; s++) {
                    const int q = output_under(col, s, stride, pad, (int)d.q);
                    if (q >= 0)
                        sum = fmaf(plane[p * (int)d.q + q], filter[r * (int)d.s + s], sum);
                }
            }
        }
        dx[i] = sum;
    }
}

extern "C" void dgrad_exercise(const float *dy, const float *w, float *dx, struct conv2d_dims d,
                               cudaStream_t s)
{
    dgrad_exercise_kernel<<<dgrad_blocks(d.n * d.c * d.h * d.w, THREADS), THREADS, 0, s>>>(
        dy, w, dx, d);
    LAUNCH_CHECK();
}
