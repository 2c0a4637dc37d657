/* v4, implicit GEMM: the columns never stored, dy gathered into shared memory tile by tile.
 *
 * Idea: v3's product without col. The gradient is an M = C by N = N H W product with a
 * reduction over j = (k, r, s) (dgrad.cuh): A[c, j] = w[k, c, r, s] read in place, and
 * B[j, (n, h, w)] = dy[n, k, p, q] for the output (p, q) whose tap (r, s) lands on (h, w), 0
 * where there is none. Each stage a block gathers a BK x BN tile of B straight from dy with
 * that test (implicit_gemm.cuh) and BM x BK of A from w, into shared memory; each thread
 * then makes TM x 8 multiply-adds per element pair it reads. A stage's taps are decoded once,
 * by BK threads, into a table the next stage's loads read, a stage ahead.
 * What changed from v3: the column matrix, its pack kernels, its write and read, and the
 * second kernel are gone: one launch, dy, w and dx crossing DRAM about once.
 * Cost: 2 N K P Q C R S FLOPs at stride 1; at stride s the reduction still runs over all R S
 * taps, and s^2 - 1 in s^2 of the gathered elements are zeros: 4x the multiply-adds at stride
 * 2, which is what v6's phases remove. Registers are double-buffered: a stage's loads are in
 * flight while the one before is multiplied.
 * The kernel is implicit_gemm.cuh's, which v6 shares; here it runs one phase, every pixel and
 * every tap, and tests each tap's division by the stride.
 * Expected: 15-25 TFLOP/s fp32 at the large presets (chapter 07's v4, with cp.async and warp
 * tiles, made 33), a quarter of that at stride 2.
 * Limits: none on the shape: tails read 0 and are not stored.
 * Measured (H200): 20 TFLOP/s at large (242 us fp32), 28.8 at resnet (257 us, 0.52x cuDNN);
 * stride2 979 us, 3.8 TFLOP/s: four times the multiply-adds, as predicted. */
#include "implicit_gemm.cuh"

/* One phase: every pixel of dx and every tap; the output under tap r of row h is
 * (h + pad - r) / stride, where the stride divides it. */
struct every_tap {
    static __device__ __forceinline__ gemm_phase of(const conv2d_dims &d, int)
    {
        gemm_phase ph;
        ph.ph = ph.pw = 0;
        ph.step = 1;
        ph.rows = (int)d.h;
        ph.cols = (int)d.w;
        ph.r0 = ph.s0 = 0;
        ph.tap_step = 1;
        ph.taps_r = (int)d.r;
        ph.taps_s = (int)d.s;
        ph.a_r = ph.a_s = (int)d.pad;
        return ph;
    }
};

template <typename T>
static void backward(const T *dy, const T *w, T *dx, conv2d_dims d, void *workspace,
                     cudaStream_t s)
{
    (void)workspace;
    if (d.stride == 1)
        dgrad_gemm_launch<false, every_tap>(dy, w, dx, d, d.n * d.h * d.w, 1, s);
    else
        dgrad_gemm_launch<true, every_tap>(dy, w, dx, d, d.n * d.h * d.w, 1, s);
}

DGRAD_LAUNCHER(v4)
