/* v1, direct: a thread per output, looping over the input channels and the filter taps.
 *
 * Idea: the formula as written. Thread (n, k, p, q) sums C R S products of x under its window
 * and filter k, skipping the taps that fall in the padding, then adds the bias.
 * Cost: 2 N K P Q C R S FLOPs, and as many loads of x and of w, served by the caches: the warp's
 * 32 threads are 32 neighbouring q of one row, so its loads of x are nearly contiguous and its
 * loads of w one broadcast. Each x element is read by K R S threads and each w element by
 * N P Q threads, all through L1 and L2, and a thread issues two loads, an address, a bound test
 * and one FMA a tap: it is bound by load instructions, not by bytes or FLOPs.
 * Expected: a few TFLOP/s at best, a small fraction of the FMA peak; what the next rungs remove
 * is that every multiply pays for its own loads.
 * Measured (H200): 2.7-2.9 TFLOP/s at every large preset (resnet 2540 us fp32, 0.06x cuDNN). */
#include "conv.cuh"

#define THREADS 256

template <typename T>
__global__ void conv_direct(const T *__restrict__ x, const T *__restrict__ w,
                            const T *__restrict__ bias, T *__restrict__ y, conv2d_dims d,
                            conv2d_activation act)
{
    const int outputs = (int)(d.n * d.k * d.p * d.q);
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += gridDim.x * blockDim.x) {
        const int q = o % (int)d.q, p = o / (int)d.q % (int)d.p;
        const int k = o / (int)(d.q * d.p) % (int)d.k, n = o / (int)(d.q * d.p * d.k);
        const int top = p * (int)d.stride - (int)d.pad, left = q * (int)d.stride - (int)d.pad;
        float sum = 0.f;
        for (int c = 0; c < (int)d.c; c++) {
            const T *plane = x + (n * (int)d.c + c) * (int)(d.h * d.w);
            const T *filter = w + (k * (int)d.c + c) * (int)(d.r * d.s);
            for (int r = 0; r < (int)d.r; r++) {
                const int h = top + r;
                if ((unsigned)h >= (unsigned)d.h)
                    continue;
                for (int s = 0; s < (int)d.s; s++) {
                    const int col = left + s;
                    if ((unsigned)col < (unsigned)d.w)
                        sum = fmaf(to_float(plane[h * (int)d.w + col]),
                                   to_float(filter[r * (int)d.s + s]), sum);
                }
            }
        }
        y[o] = from_float<T>(conv_epilogue(sum, bias, k, act));
    }
}

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    (void)workspace;
    conv_direct<T><<<conv_blocks(d.n * d.k * d.p * d.q, THREADS), THREADS, 0, s>>>(x, w, bias,
                                                                                  y, d, act);
    LAUNCH_CHECK();
}

CONV2D_FORWARD_LAUNCHER(v1)
