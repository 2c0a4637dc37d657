/* v2, coalesced: wide accesses for the 2x2 window; the backward gathers and writes dx in order.
 *
 * Idea, forward: v1's warps already stored along OW, but a 2x2 stride-2 window reads 2
 * neighbouring elements of 2 rows, one 4- or 2-byte load each. For that common case (2x2,
 * stride 2, no padding) a thread here owns the outputs whose y fill 16 bytes of a row (4 in
 * fp32, 8 in fp16): it reads the elements under them 16 bytes at a time (2 loads an input row),
 * finds each window's first maximum by a small tree of comparisons, and stores its y with one
 * 16-byte store and their 2-bit argmax fields as one byte (fp32) or 16-bit word (fp16). The
 * window never leaves x, so nothing is tested inside the row, and the input rows follow from
 * the output row with at most two divisions for all of the thread's outputs.
 * Idea, backward, for disjoint windows (S >= KH and S >= KW): a gather, a thread per input
 * (h, w). The only window that can hold it is i = (h + P) / S, j = (w + P) / S, at position
 * r = h + P - i S, q = w + P - j S; dx = dy[i, j] if that window's argmax says (r, q), else 0.
 * Every dx is written once, in order: no memset, no atomics, coalesced stores.
 * What changed from v1: 16-byte accesses on the 2x2 path; index splits in 32-bit divisions where
 * they fit (maxpool_divmod); grids sized to fill the GPU once, with a grid-stride loop; the
 * backward's scatter replaced by the gather. It removes v1's narrow loads and index arithmetic.
 * Expected: the forward at the roof, v1's bytes in a quarter (fp32) to an eighth (fp16) of the
 * load instructions; the backward at 5.06 bytes an input (2x2 stride 2, fp32), no memset or atomic.
 * Limits: the fast forward needs 2x2, stride 2, padding 0, OW a multiple of the outputs a thread
 * (4 where 8 do not fit), rows of x whole 16 bytes and aligned tensors; other shapes run v1's
 * thread per output. Overlapping windows keep v1's atomic scatter (v3 replaces it).
 * Measured (H200): forward at large 503 us fp32 (97.9% of the roof, 1.51x cuDNN). The backward's
 * prediction failed: 76.5 us at the seed, against v1's 27.4 (0.93x cuDNN), paying four
 * divisions an input. */
#include "maxpool.cuh"

#define THREADS 256

/* The first maximum of the 2x2 window {t0, t1 / b0, b1} as a tree: the first maximum of each
 * row, then the bottom row's against the top's (the top wins ties, being earlier). The same
 * winner as v1's row-major scan, with the two rows' comparisons independent. */
__device__ __forceinline__ int argmax_2x2(float t0, float t1, float b0, float b1, float &best)
{
    const bool top_right = maxpool_wins(t1, t0), bottom_right = maxpool_wins(b1, b0);
    const float top = top_right ? t1 : t0, bottom = bottom_right ? b1 : b0;
    const bool lower = maxpool_wins(bottom, top);
    best = lower ? bottom : top;
    return lower ? 2 + bottom_right : top_right; /* r 2 + q */
}

/* 2x2 windows, stride 2, no padding: thread t owns OUTS outputs of a row (maxpool.cuh). It
 * loads the 2 OUTS elements under them in each input row 16 bytes at a time, and stores OUTS
 * y with one instruction and their argmax fields as one byte or 16-bit word. y is the winner
 * widened to fp32 and narrowed back, which is exact (fp16 -> fp32 -> fp16 changes no number). */
template <typename T, int OUTS>
__global__ void maxpool_forward_2x2(const T *__restrict__ x, T *__restrict__ y,
                                    uint8_t *__restrict__ argmax, maxpool_dims d)
{
    const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t out_row, j0, in_row;
        maxpool_2x2_group<OUTS>(d, t, out_row, j0, in_row);
        const T *top = x + in_row * d.w + 2 * j0;
        T a[2 * OUTS], b[2 * OUTS];
        maxpool_load_row(top, a);
        maxpool_load_row(top + d.w, b);

        maxpool_vec<T, OUTS> yv;
        unsigned fields = 0; /* output k's 2 bits at bit 2 k */
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            float best;
            const int position = argmax_2x2(to_float(a[2 * k]), to_float(a[2 * k + 1]),
                                            to_float(b[2 * k]), to_float(b[2 * k + 1]), best);
            yv.e[k] = from_float<T>(best);
            fields |= (unsigned)position << (2 * k);
        }
        *reinterpret_cast<maxpool_vec<T, OUTS> *>(y + out_row * d.ow + j0) = yv;
        maxpool_store_fields<OUTS>(argmax, t, fields);
    }
}

/* Any window: v1's thread per output (whole warps, for the argmax's shuffles), with the index
 * split in 32 bits where it fits. */
template <typename T>
__global__ void maxpool_forward_general(const T *__restrict__ x, T *__restrict__ y,
                                        uint8_t *__restrict__ argmax, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t first = maxpool_warp_first_output(); first < outputs; first += stride) {
        const int64_t o = first + threadIdx.x % 32;
        const bool valid = o < outputs;
        int position = 0;
        if (valid) {
            int64_t out_row, j, plane, i;
            maxpool_divmod(o, d.ow, out_row, j);
            maxpool_divmod(out_row, d.oh, plane, i);
            const maxpool_pick<T> m = maxpool_window_argmax(x + plane * d.h * d.w, d, i, j);
            y[o] = m.value;
            position = maxpool_window_position(d, m.r, m.q);
        }
        maxpool_store_argmax_by_warp(argmax, d, o, valid, position);
    }
}

/* Disjoint windows: input e gets the dy of the one window that may hold it, if that window
 * chose it, else 0. */
template <typename T>
__global__ void maxpool_backward_gather(const T *__restrict__ dy,
                                        const uint8_t *__restrict__ argmax, T *__restrict__ dx,
                                        maxpool_dims d)
{
    const int64_t inputs = d.n * d.c * d.h * d.w;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < inputs; e += stride) {
        int64_t in_row, ww, plane, hh, i, r, j, q;
        maxpool_divmod(e, d.w, in_row, ww);
        maxpool_divmod(in_row, d.h, plane, hh);
        maxpool_divmod(hh + d.p, d.s, i, r);
        maxpool_divmod(ww + d.p, d.s, j, q);
        T g = from_float<T>(0.f);
        if (i < d.oh && j < d.ow && r < d.kh && q < d.kw) {
            const int64_t o = (plane * d.oh + i) * d.ow + j;
            const int chosen = maxpool_load_argmax(argmax, d, o);
            if (chosen == maxpool_window_position(d, (int)r, (int)q))
                g = dy[o];
        }
        dx[e] = g;
    }
}

template <typename T, int OUTS>
static void forward_2x2(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_2x2<T, OUTS>, THREADS,
                                        maxpool_blocks(groups, THREADS));
    maxpool_forward_2x2<T, OUTS><<<blocks, THREADS, 0, s>>>(x, y, argmax, d);
}

/* The 2x2 path with 16 bytes of y a thread (4 fp32, 8 fp16) where OW allows, else 4 outputs;
 * every other shape, a thread per output. */
template <typename T>
static void forward(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    constexpr int WIDE = 16 / sizeof(T);
    if (maxpool_2x2_path(d, WIDE, sizeof(T), x, y)) {
        forward_2x2<T, WIDE>(x, y, argmax, d, s);
    } else if (maxpool_2x2_path(d, 4, sizeof(T), x, y)) {
        forward_2x2<T, 4>(x, y, argmax, d, s);
    } else {
        const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_general<T>, THREADS,
                                            maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS));
        maxpool_forward_general<<<blocks, THREADS, 0, s>>>(x, y, argmax, d);
    }
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d, cudaStream_t s)
{
    if (!maxpool_disjoint_windows(d)) {
        maxpool_backward_v1(dy, argmax, dx, d, sizeof(T) == 4 ? DT_FP32 : DT_FP16, s);
        return;
    }
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_gather<T>, THREADS,
                                        maxpool_blocks(d.n * d.c * d.h * d.w, THREADS));
    maxpool_backward_gather<<<blocks, THREADS, 0, s>>>(dy, argmax, dx, d);
    LAUNCH_CHECK();
}

MAXPOOL_FORWARD_LAUNCHER(v2)
MAXPOOL_BACKWARD_LAUNCHER(v2)
