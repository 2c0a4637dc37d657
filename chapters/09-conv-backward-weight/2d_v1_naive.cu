/* 2d_v1, naive: the 2D kernel, a thread per tap, each summing all N P Q products in turn.
 *
 * Idea: the 2D kernel is the weight gradient with one channel and one filter (C = K = 1), as
 * the reference report computed it: dw is R x S (9 numbers for 3x3), and thread (r, s) walks
 * every output pixel (n, p, q), adding dy[n, p, q] x[n, p stride + r - pad, q stride + s - pad]
 * where that tap lies on x. It is v1 with C = K = 1, and it shows v1's flaw at its starkest:
 * 9 threads, a third of one warp on one SM of 132, each sum a chain of N P Q = 131072
 * dependent FMAs at seed-2d. The lesson is the shape of the work: a few outputs, each a very
 * long sum, need many threads a sum, which 2d_v2 gives them.
 * Cost: per step the warp loads one dy element (the same for all 9 threads: a broadcast) and
 * 9 neighbouring x elements, served by L1 but for one new 128-byte line of dy and three of x
 * every 32 steps, each a DRAM round trip of about a microsecond that no other warp hides.
 * Expected: at seed-2d, 131072 steps of some 10-30 cycles plus 4096 such stalls: about 2-4 ms
 * in fp32, somewhat less in fp16 (a line holds 64 elements); db is chapter 02's bias_grad.
 * Measured (H200): seed-2d 9945 us fp32, 6805 fp16, where cuDNN takes 34.9 and 27.7. */
#include "wgrad.cuh"

#define THREADS 32

extern "C" const char *wgrad_2d_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    if (d.c != 1 || d.k != 1)
        return "the 2D kernel takes one channel and one filter (C = K = 1)";
    return NULL;
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    wgrad_2d_naive(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ dw,
                   conv2d_dims d)
{
    const int taps = (int)(d.r * d.s);
    const int tap = blockIdx.x * blockDim.x + threadIdx.x;
    if (tap >= taps)
        return;
    const int r = tap / (int)d.s, s = tap % (int)d.s;
    const int H = (int)d.h, W = (int)d.w, P = (int)d.p, Q = (int)d.q;
    const int stride = (int)d.stride, pad = (int)d.pad;
    float sum = 0.f;
    for (int n = 0; n < (int)d.n; n++) {
        const T *image = x + n * H * W;
        const T *grad = dy + n * P * Q;
        for (int p = 0; p < P; p++) {
            const int h = p * stride + r - pad;
            if (h < 0 || h >= H)
                continue;
            for (int q = 0; q < Q; q++) {
                const int w = q * stride + s - pad;
                if (w >= 0 && w < W)
                    sum = fmaf(to_float(grad[p * Q + q]), to_float(image[h * W + w]), sum);
            }
        }
    }
    dw[tap] = from_float<T>(sum);
}

template <typename T>
static void backward(const T *x, const T *dy, T *dw, T *db, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)db, (void)workspace;
    const int64_t taps = d.r * d.s;
    wgrad_2d_naive<T><<<(unsigned)((taps + THREADS - 1) / THREADS), THREADS, 0, s>>>(x, dy, dw,
                                                                                    d);
    LAUNCH_CHECK();
}

WGRAD_LAUNCHER(2d_v1, 0)
