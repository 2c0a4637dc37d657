/* v4, register windows: overlapping windows read each input once a thread, from registers.
 *
 * Idea: v1 and v2 scan a 3x3 window with loops whose bounds are known only at run time: for
 * each of 9 elements a loop step, an address, a load and a compare, and the window's bounds
 * worked out first. At the overlap preset they run at a quarter of the roof, held back by
 * their instructions rather than their bytes (README: the profile). Here the
 * window and stride are template parameters (3x3 with stride 1 or 2, the ResNet stem and the
 * "same" pooling of inception blocks), and a thread owns OUTS = 4 neighbouring outputs of a
 * row. The columns under them, (OUTS - 1) S + K of them, are loaded once for the K rows into a
 * register array, with the padding and the edges of x marked invalid rather than tested in the
 * scan; the scan is then fully unrolled over registers: per element a predicate and a compare.
 * At 3x3 stride 2 a thread loads 27 elements for 4 outputs instead of 36, and its fields, 4
 * bits each, make one 16-bit store.
 * What changed from v2: compile-time windows, several outputs a thread sharing the columns
 * between them, no loop bounds in the scan. Padding is still "never wins": a position outside
 * x is skipped, and the first position inside x starts the scan, so an x of -inf stays exact.
 * Expected: the same bytes as v2 (x once, y and the argmax) in about a third of the
 * instructions an output: close to the roof at the overlap preset, where cuDNN runs at about
 * a third of it.
 * Limits: 3x3 windows with stride 1 or 2, OW a multiple of 4 (so each thread's fields start a
 * byte) and aligned tensors; every other shape runs v2's forward, and the backward is v3's. */
#include "maxpool.cuh"

#define THREADS 256
#define OUTS 4 /* outputs a thread */

/* K x K windows, stride S, any padding below K: thread t owns outputs j0 .. j0 + OUTS - 1 of
 * output row (plane, i), j0 = OUTS (t % (OW / OUTS)). */
template <typename T, int K, int S>
__global__ void maxpool_forward_registers(const T *__restrict__ x, T *__restrict__ y,
                                          uint8_t *__restrict__ argmax, maxpool_dims d)
{
    constexpr int COLS = (OUTS - 1) * S + K; /* input columns under a thread's outputs */
    static_assert(K * K > 4 && K * K <= 16, "4-bit fields: a thread's make one 16-bit word");
    const int64_t groups_a_row = d.ow / OUTS;
    const int64_t groups = d.n * d.c * d.oh * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t out_row, group, plane, i;
        maxpool_divmod(t, groups_a_row, out_row, group);
        maxpool_divmod(out_row, d.oh, plane, i);
        const int64_t j0 = group * OUTS;
        const int64_t top = maxpool_window_top(d, i), left = maxpool_window_left(d, j0);
        const T *base = x + plane * d.h * d.w;

        bool row_in[K], col_in[COLS];
        float v[K][COLS];
#pragma unroll
        for (int c = 0; c < COLS; c++)
            col_in[c] = left + c >= 0 && left + c < d.w;
#pragma unroll
        for (int r = 0; r < K; r++) {
            row_in[r] = top + r >= 0 && top + r < d.h;
#pragma unroll
            for (int c = 0; c < COLS; c++)
                v[r][c] = row_in[r] && col_in[c] ? to_float(base[(top + r) * d.w + left + c])
                                                 : 0.f;
        }

        maxpool_vec<T, OUTS> yv;
        unsigned fields = 0;
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            bool found = false;
            float best = 0.f;
            int position = 0;
#pragma unroll
            for (int r = 0; r < K; r++)
#pragma unroll
                for (int q = 0; q < K; q++) {
                    const float e = v[r][k * S + q];
                    if (row_in[r] && col_in[k * S + q] && (!found || maxpool_wins(e, best))) {
                        best = e;
                        position = r * K + q;
                        found = true;
                    }
                }
            yv.e[k] = from_float<T>(best);
            fields |= (unsigned)position << (4 * k);
        }
        *reinterpret_cast<maxpool_vec<T, OUTS> *>(y + out_row * d.ow + j0) = yv;
        reinterpret_cast<uint16_t *>(argmax)[t] = (uint16_t)fields; /* outputs 4 t .. 4 t + 3 */
    }
}

template <typename T, int K, int S>
static void forward_registers(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_registers<T, K, S>,
                                        THREADS, maxpool_blocks(groups, THREADS));
    maxpool_forward_registers<T, K, S><<<blocks, THREADS, 0, s>>>(x, y, argmax, d);
    LAUNCH_CHECK();
}

/* 3x3 with stride 1 or 2 here; the rest, including 2x2 stride 2, is v2's. OW % OUTS == 0 puts
 * each thread's fields at a whole byte; aligned y takes the one-instruction store. */
template <typename T>
static void forward(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    const bool fits = d.kh == 3 && d.kw == 3 && d.ow % OUTS == 0 && aligned16(y);
    const enum dtype t = sizeof(T) == 4 ? DT_FP32 : DT_FP16;
    if (fits && d.s == 2)
        forward_registers<T, 3, 2>(x, y, argmax, d, s);
    else if (fits && d.s == 1)
        forward_registers<T, 3, 1>(x, y, argmax, d, s);
    else
        maxpool_forward_v2(x, y, argmax, d, t, s);
}

MAXPOOL_FORWARD_LAUNCHER(v4)

/* The backward is v3's: v4 changes the forward alone. */
extern "C" void maxpool_backward_v4(const void *dy, const uint8_t *argmax, void *dx,
                                    struct maxpool_dims d, enum dtype t, cudaStream_t s)
{
    maxpool_backward_v3(dy, argmax, dx, d, t, s);
}
