/* v6, stride phases: at stride s, s^2 sub-problems with no zero in them.
 *
 * Idea: at stride 2 an input row h is reached only by the taps r with h + pad - r even, so
 * the rows of dx fall into 2 phases (h even, h odd), each fed by its own half of the filter's
 * rows, and the same along the columns. Phase (ph, pw), the pixels (ph + s i, pw + s j), sums
 * over the taps r0, r0 + s, ... with r0 = (ph + pad) mod s, and the output under its tap t is
 *   p = i + a - t,   a = (ph + pad - r0) / s,
 * exactly, with no test of divisibility. v4's kernel runs each phase as one layer of the grid
 * (blockIdx.z), its reduction over K x ceil((R - r0) / s) x ceil((S - s0) / s) taps instead of
 * K R S: at stride2's 3x3, 1, 2, 2 and 4 taps a filter, 9 in all, where v4 gathered 36.
 * A phase with no tap (stride > R) stores zeros.
 * What changed from v4: the phases, in one launch; the tiles, tables and loads are v4's, and
 * at stride 1 it is v4 (one phase).
 * Cost: the forward's 2 N K P Q C R S FLOPs exactly, against v4's s^2 times as many gathered
 * elements; dx is written in strided runs (every s-th element of a row a phase), which the
 * L2 merges before DRAM sees them.
 * Expected: stride2 (32x64x56x56-128k3s2p1, 3.7 GFLOP) at v4's stride-1 rate, 20-28 TFLOP/s:
 * 130-180 us in both dtypes against v4's 1000, and 1.1-1.5x cuDNN's 190-210 us.
 * Limits: stride < 256 (the phases are grid layers, at most 65535).
 * Measured (H200): stride2 189 us fp32 (1.11x cuDNN) and 193 fp16 (0.99x), 19.6 TFLOP/s,
 * against v4's 979 and 888: the zeros are gone, but the rate is under the prediction. */
#include "implicit_gemm.cuh"

#define MAX_STRIDE 255

/* Layer z's phase: the one whose first taps are (r0, s0) = (z / s, z % s). The layers run
 * roughly in order, and the smaller r0 and s0, the more taps: the longest phases start first
 * and the short ones fill the last wave (in (ph, pw) order stride2's 4-tap phase comes last). */
struct stride_phase {
    static __device__ __forceinline__ gemm_phase of(const conv2d_dims &d, int z)
    {
        const int stride = (int)d.stride, pad = (int)d.pad;
        gemm_phase g;
        g.r0 = z / stride;
        g.s0 = z % stride;
        g.ph = ((g.r0 - pad) % stride + stride) % stride; /* (ph + pad) mod s = r0 */
        g.pw = ((g.s0 - pad) % stride + stride) % stride;
        g.step = g.tap_step = stride;
        g.rows = g.ph < (int)d.h ? ((int)d.h - g.ph + stride - 1) / stride : 0;
        g.cols = g.pw < (int)d.w ? ((int)d.w - g.pw + stride - 1) / stride : 0;
        g.taps_r = g.r0 < (int)d.r ? ((int)d.r - g.r0 + stride - 1) / stride : 0;
        g.taps_s = g.s0 < (int)d.s ? ((int)d.s - g.s0 + stride - 1) / stride : 0;
        g.a_r = (g.ph + pad - g.r0) / stride;
        g.a_s = (g.pw + pad - g.s0) / stride;
        return g;
    }
};

extern "C" const char *dgrad_v6_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    return d.stride > MAX_STRIDE ? "stride past 255: the phases are the grid's layers" : NULL;
}

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)workspace;
    const int64_t rows = (d.h + d.stride - 1) / d.stride, cols = (d.w + d.stride - 1) / d.stride;
    dgrad_gemm_launch<false, stride_phase>(dy, w, dx, d, d.n * rows * cols,
                                           (int)(d.stride * d.stride), s);
}

DGRAD_LAUNCHER(v6)
