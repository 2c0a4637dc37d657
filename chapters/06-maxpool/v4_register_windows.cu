/* v4, register windows: 3x3 windows unrolled over registers, forward and backward.
 *
 * Idea: v1 and v2 scan a 3x3 window with loops whose bounds are known only at run time: for
 * each of 9 elements a loop step, an address, a load and a compare, the window's bounds worked
 * out first. At the overlap preset they run under a quarter of the roof, held back by their
 * instructions rather than their bytes (README: the profile). Here the window and stride are
 * template parameters (3x3 at stride 1 or 2: the ResNet stem, the "same" pooling of inception
 * blocks), and a thread owns OUTS = 4 neighbouring outputs of a row. The (OUTS - 1) S + K
 * columns under them are loaded once for the K rows into a register array, padding and the
 * edges of x marked invalid instead of tested in the scan, which is then fully unrolled: a
 * predicate and a compare an element. At stride 2 a thread loads 27 elements for 4 outputs
 * instead of 36, and its 4-bit fields make one 16-bit store. Padding still never wins: the
 * first position inside x starts the scan, so an x of -inf stays exact.
 * Backward: v3's overlapping gather, with the same change. A thread owns 16 bytes of a row of
 * dx; the windows that can reach them are a compile-time count of columns (3 in fp32, 5 in fp16
 * at stride 2) in at most 2 window rows, so it loads each window's field and dy once, not once
 * an input, and tests every (input, window) pair in unrolled code.
 * What changed from v2 and v3: compile-time windows, outputs (inputs) a thread sharing their
 * loads, no loop bounds in the scan. Expected: v2's bytes in about a third of the instructions
 * an output, close to the roof at the overlap preset; the backward from v3's 337 us there to
 * below v1's atomics (113 us).
 * Limits: 3x3 windows at stride 1 or 2; the forward also wants OW a multiple of 4 (each thread's
 * fields start a byte) and an aligned y. Other shapes run v2's forward and v3's backward.
 * Measured (H200), overlap: forward 62.7 us fp32 (1.35x cuDNN, 2.1x v1) but 50.3% of the roof,
 * not close to it; backward 111 us fp32, just below v1's 113, and 98.6 in fp16 (6.17x cuDNN). */
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

/* Backward, K x K windows, stride S: thread t owns inputs w0 .. w0 + V - 1 (V = 16 bytes of T)
 * of input row (plane, h). The window columns that can reach them are j_first .. j_first +
 * WINDOWS - 1; for each window row holding h, the thread loads their fields and dy once, then
 * every input tests every window with unrolled, compile-time loops: q = w - (j S - P) in
 * [0, K) and the field equal to r K + q. Sums in fp32, in window order, one rounding. */
template <typename T, int K, int S>
__global__ void maxpool_backward_registers(const T *__restrict__ dy,
                                           const uint8_t *__restrict__ argmax,
                                           T *__restrict__ dx, maxpool_dims d, bool vec)
{
    using pack = pack16<T>;
    constexpr int V = pack::width;
    constexpr int WINDOWS = (V + K - 2) / S + 1; /* window columns reaching V inputs */
    constexpr int ROWS = (K - 1) / S + 1;        /* window rows holding an input row */
    const int64_t groups_a_row = (d.w + V - 1) / V;
    const int64_t groups = d.n * d.c * d.h * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t in_row, group, plane, hh;
        maxpool_divmod(t, groups_a_row, in_row, group);
        maxpool_divmod(in_row, d.h, plane, hh);
        const int64_t w0 = group * V;
        const int count = (int)(d.w - w0 < V ? d.w - w0 : V);
        /* The first window row and column that can reach (hh, w0): ceil((x + P - K + 1) / S),
         * with x + P - K + 1 shifted by K S to divide a non-negative number by a constant. */
        const int64_t i_first = (hh + d.p + K * S - K + S) / S - K;
        const int64_t j_first = (w0 + d.p + K * S - K + S) / S - K;
        const int c0 = (int)(w0 + d.p - j_first * S); /* q of input w0 in window j_first */

        float sum[V];
#pragma unroll
        for (int e = 0; e < V; e++)
            sum[e] = 0.f;
#pragma unroll
        for (int ri = 0; ri < ROWS; ri++) {
            const int64_t i = i_first + ri;
            const int r = (int)(hh + d.p - i * S);
            if (i < 0 || i >= d.oh || r < 0 || r >= K)
                continue;
            const int64_t out_row = (plane * d.oh + i) * d.ow;
            int field[WINDOWS];
            float g[WINDOWS];
#pragma unroll
            for (int jj = 0; jj < WINDOWS; jj++) {
                const int64_t j = j_first + jj;
                const bool in = j >= 0 && j < d.ow;
                field[jj] = in ? maxpool_load_argmax(argmax, d, out_row + j) : -1;
                g[jj] = in ? to_float(dy[out_row + j]) : 0.f;
            }
#pragma unroll
            for (int e = 0; e < V; e++)
#pragma unroll
                for (int jj = 0; jj < WINDOWS; jj++) {
                    const int q = c0 + e - jj * S;
                    if (q >= 0 && q < K && field[jj] == r * K + q)
                        sum[e] += g[jj];
                }
        }

        pack out;
#pragma unroll
        for (int e = 0; e < V; e++)
            out.e[e] = from_float<T>(sum[e]);
        maxpool_store_inputs(dx + in_row * d.w + w0, out, vec, count);
    }
}

template <typename T, int K, int S>
static void backward_registers(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d,
                               cudaStream_t s)
{
    constexpr int V = pack16<T>::width;
    const bool vec = d.w % V == 0 && aligned16(dx);
    const int64_t groups = d.n * d.c * d.h * ((d.w + V - 1) / V);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_registers<T, K, S>,
                                        THREADS, maxpool_blocks(groups, THREADS));
    maxpool_backward_registers<T, K, S><<<blocks, THREADS, 0, s>>>(dy, argmax, dx, d, vec);
    LAUNCH_CHECK();
}

/* 3x3 with stride 1 or 2 here; the rest is v3's. */
template <typename T>
static void backward(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d, cudaStream_t s)
{
    const bool fits = d.kh == 3 && d.kw == 3;
    if (fits && d.s == 2)
        backward_registers<T, 3, 2>(dy, argmax, dx, d, s);
    else if (fits && d.s == 1)
        backward_registers<T, 3, 1>(dy, argmax, dx, d, s);
    else
        maxpool_backward_v3(dy, argmax, dx, d, sizeof(T) == 4 ? DT_FP32 : DT_FP16, s);
}

MAXPOOL_BACKWARD_LAUNCHER(v4)
