/* v2, coalesced: wide accesses for the 2x2 window; the backward gathers and writes dx in order.
 *
 * Idea, forward: v1's warps already stored along OW. What they did not do is use wide accesses:
 * a 2x2 stride-2 window reads 2 neighbouring elements of 2 rows, one 4- or 2-byte load each.
 * Here, for that common case (2x2, stride 2, no padding), each thread produces 4 neighbouring
 * outputs of a row: it reads the 8 elements above them in each of the two input rows with one
 * 16-byte load (fp16) or two (fp32), and stores its 4 y, 4 plane indices and 4 window indices
 * with one 16- or 8-byte, one 16-byte and one 4-byte store. The window never leaves x there
 * (no padding, and OW = floor(W / 2)), so no bounds are tested inside the row. Where W's rows
 * are not 16-byte aligned or OW % 4 != 0, the same thread does the same work with scalar
 * accesses. Every other window takes v1's per-output scan.
 * Idea, backward: a gather, one thread per input element (h, w), for disjoint windows
 * (S >= KH and S >= KW): the only window that can hold (h, w) is i = (h + P) / S,
 * j = (w + P) / S, at position r = h + P - i S, q = w + P - j S; dx = dy[i, j] if that window's
 * 1-byte window index says (r, q), else 0. Every dx is written once, in order: no memset, no
 * atomics, coalesced stores.
 * What changed from v1: 4 outputs a thread with 16-byte accesses on the 2x2 path; the index
 * split in 32-bit divisions where the index fits (maxpool_divmod); grids sized to fill the GPU
 * once, with a grid-stride loop; the backward's scatter replaced by a gather that reads the
 * window index (1 byte an output) instead of the plane index (4).
 * Expected: forward moves what v1 moves (x once; y and 5 bytes of indices per output), in a
 * quarter (fp32) to an eighth (fp16) of the load instructions: close to the roof at the seed
 * shape. Backward reads dy and 1 byte per output and writes dx once: at 2x2 stride 2 in fp32,
 * (4 + 1) / 4 + 4 = 5.25 bytes per input element, against v1's 4 + (4 + 4) / 4 = 6 plus a
 * second pass over dx and its L2 atomics.
 * Limits: the forward's fast path is 2x2, stride 2, padding 0 only. Overlapping windows keep
 * v1's atomic scatter for the backward (v3 replaces it). The gather's threads read dy and the
 * window index KH KW times per output: L1 hits, but one narrow store per dx (v3 widens it). */
#include "maxpool.cuh"

#define THREADS 256
#define OUTS 4 /* outputs a thread on the 2x2 path */

/* OUTS elements of T, stored by one 16-byte (fp32) or 8-byte (fp16) instruction. */
template <typename T> struct alignas(OUTS * sizeof(T)) maxpool_quad {
    T e[OUTS];
};

/* The 2 OUTS elements of an input row under a thread's OUTS outputs: 16-byte loads when vec,
 * else the first 2 count one by one (and zeros past them, which no output reads). */
template <typename T>
__device__ __forceinline__ void load_row_pairs(const T *__restrict__ row, bool vec, int count,
                                               T (&v)[2 * OUTS])
{
    if (vec) {
        using pack = pack16<T>;
#pragma unroll
        for (int k = 0; k < 2 * OUTS / pack::width; k++) {
            pack pk;
            pk.raw = reinterpret_cast<const uint4 *>(row)[k];
#pragma unroll
            for (int e = 0; e < pack::width; e++)
                v[k * pack::width + e] = pk.e[e];
        }
    } else {
#pragma unroll
        for (int e = 0; e < 2 * OUTS; e++)
            v[e] = e < 2 * count ? row[e] : from_float<T>(0.f);
    }
}

/* The argmax of the 2x2 window {top[0], top[1], bottom[0], bottom[1]}, position r 2 + q. */
template <typename T>
__device__ __forceinline__ maxpool_pick<T> argmax_2x2(T t0, T t1, T b0, T b1)
{
    maxpool_pick<T> best = {t0, 0, 0};
    float best_f = to_float(t0);
    const T later[3] = {t1, b0, b1};
#pragma unroll
    for (int k = 0; k < 3; k++) {
        const float f = to_float(later[k]);
        if (maxpool_wins(f, best_f)) {
            best = {later[k], (k + 1) / 2, (k + 1) % 2};
            best_f = f;
        }
    }
    return best;
}

/* 2x2 windows, stride 2, no padding: thread t owns outputs j0 .. j0 + 3 of output row
 * (plane, i), j0 = 4 (t % groups a row). */
template <typename T>
__global__ void maxpool_forward_2x2(const T *__restrict__ x, T *__restrict__ y,
                                    int32_t *__restrict__ plane_idx,
                                    uint8_t *__restrict__ window_idx, maxpool_dims d, bool vec)
{
    const int64_t groups_a_row = (d.ow + OUTS - 1) / OUTS;
    const int64_t groups = d.n * d.c * d.oh * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t out_row, group, plane, i;
        maxpool_divmod(t, groups_a_row, out_row, group);
        maxpool_divmod(out_row, d.oh, plane, i);
        const int64_t j0 = group * OUTS;
        const int count = (int)(d.ow - j0 < OUTS ? d.ow - j0 : OUTS);
        const T *top = x + (plane * d.h + 2 * i) * d.w + 2 * j0;
        T a[2 * OUTS], b[2 * OUTS];
        load_row_pairs(top, vec, count, a);
        load_row_pairs(top + d.w, vec, count, b);

        const int64_t corner = 2 * i * d.w + 2 * j0; /* plane index of window j0's (0, 0) */
        maxpool_quad<T> yv;
        int32_t pv[OUTS];
        uint8_t wv[OUTS];
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            const maxpool_pick<T> m = argmax_2x2(a[2 * k], a[2 * k + 1], b[2 * k], b[2 * k + 1]);
            yv.e[k] = m.value;
            pv[k] = (int32_t)(corner + m.r * d.w + 2 * k + m.q);
            wv[k] = (uint8_t)(2 * m.r + m.q);
        }

        const int64_t o = out_row * d.ow + j0;
        if (vec) {
            *reinterpret_cast<maxpool_quad<T> *>(y + o) = yv;
            *reinterpret_cast<int4 *>(plane_idx + o) = make_int4(pv[0], pv[1], pv[2], pv[3]);
            *reinterpret_cast<uchar4 *>(window_idx + o) = make_uchar4(wv[0], wv[1], wv[2], wv[3]);
        } else {
#pragma unroll
            for (int k = 0; k < OUTS; k++)
                if (k < count) {
                    y[o + k] = yv.e[k];
                    plane_idx[o + k] = pv[k];
                    window_idx[o + k] = wv[k];
                }
        }
    }
}

/* Any window: v1's thread per output, with the index split in 32 bits where it fits. */
template <typename T>
__global__ void maxpool_forward_general(const T *__restrict__ x, T *__restrict__ y,
                                        int32_t *__restrict__ plane_idx,
                                        uint8_t *__restrict__ window_idx, maxpool_dims d)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        int64_t out_row, j, plane, i;
        maxpool_divmod(o, d.ow, out_row, j);
        maxpool_divmod(out_row, d.oh, plane, i);
        const maxpool_pick<T> m = maxpool_window_argmax(x + plane * d.h * d.w, d, i, j);
        y[o] = m.value;
        plane_idx[o] = maxpool_plane_index(d, i, j, m.r, m.q);
        window_idx[o] = maxpool_window_index(d, m.r, m.q);
    }
}

/* Disjoint windows: input e gets the dy of the one window that may hold it, if that window
 * chose it, else 0. */
template <typename T>
__global__ void maxpool_backward_gather(const T *__restrict__ dy,
                                        const uint8_t *__restrict__ window_idx,
                                        T *__restrict__ dx, maxpool_dims d)
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
            if (window_idx[o] == maxpool_window_index(d, (int)r, (int)q))
                g = dy[o];
        }
        dx[e] = g;
    }
}

static bool is_2x2_stride_2(const maxpool_dims &d)
{
    return d.kh == 2 && d.kw == 2 && d.s == 2 && d.p == 0;
}

template <typename T>
static void forward(const T *x, T *y, int32_t *plane_idx, uint8_t *window_idx, maxpool_dims d,
                    cudaStream_t s)
{
    if (is_2x2_stride_2(d)) {
        /* Whole groups of 4 outputs, and rows of x and of every output starting 16 bytes
         * aligned (then each group's accesses are aligned to their width). */
        const bool vec = d.ow % OUTS == 0 && d.w * sizeof(T) % 16 == 0 && aligned16(x) &&
                         aligned16(y) && aligned16(plane_idx) && aligned16(window_idx);
        const int64_t groups = d.n * d.c * d.oh * ((d.ow + OUTS - 1) / OUTS);
        const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_2x2<T>, THREADS,
                                            maxpool_blocks(groups, THREADS));
        maxpool_forward_2x2<<<blocks, THREADS, 0, s>>>(x, y, plane_idx, window_idx, d, vec);
    } else {
        const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_general<T>, THREADS,
                                            maxpool_blocks(d.n * d.c * d.oh * d.ow, THREADS));
        maxpool_forward_general<<<blocks, THREADS, 0, s>>>(x, y, plane_idx, window_idx, d);
    }
    LAUNCH_CHECK();
}

template <typename T>
static void backward(const T *dy, const int32_t *plane_idx, const uint8_t *window_idx, T *dx,
                     maxpool_dims d, cudaStream_t s)
{
    if (!maxpool_disjoint_windows(d)) {
        maxpool_backward_v1(dy, plane_idx, window_idx, dx, d, sizeof(T) == 4 ? DT_FP32 : DT_FP16,
                            s);
        return;
    }
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_gather<T>, THREADS,
                                        maxpool_blocks(d.n * d.c * d.h * d.w, THREADS));
    maxpool_backward_gather<<<blocks, THREADS, 0, s>>>(dy, window_idx, dx, d);
    LAUNCH_CHECK();
}

MAXPOOL_FORWARD_LAUNCHER(v2)
MAXPOOL_BACKWARD_LAUNCHER(v2)
