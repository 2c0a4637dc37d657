/* v2, coalesced: wide accesses for the 2x2 window; the backward gathers and writes dx in order.
 *
 * Idea, forward: v1's warps already stored along OW. What they did not do is use wide accesses:
 * a 2x2 stride-2 window reads 2 neighbouring elements of 2 rows, one 4- or 2-byte load each.
 * Here, for that common case (2x2, stride 2, no padding), each thread produces 4 neighbouring
 * outputs of a row: it reads the 8 elements above them in each of the two input rows with one
 * 16-byte load (fp16) or two (fp32), and stores its 4 y with one 16- or 8-byte store and their
 * four 2-bit argmax fields as one whole byte, with no shuffles. The window never leaves x there
 * (no padding, and OW = floor(W / 2)), so no bounds are tested inside the row. This needs every
 * group of 4 to start a byte of the argmax and 16 bytes of x's rows: OW % 4 == 0, W 16 bytes
 * long in whole, aligned pointers. Every other shape takes v1's thread per output, with the
 * index split in 32-bit divisions.
 * Idea, backward: a gather, one thread per input element (h, w), for disjoint windows
 * (S >= KH and S >= KW): the only window that can hold (h, w) is i = (h + P) / S,
 * j = (w + P) / S, at position r = h + P - i S, q = w + P - j S; dx = dy[i, j] if that window's
 * argmax says (r, q), else 0. Every dx is written once, in order: no memset, no atomics,
 * coalesced stores.
 * What changed from v1: 4 outputs a thread with 16-byte accesses on the 2x2 path; the index
 * split in 32-bit divisions where the index fits (maxpool_divmod); grids sized to fill the GPU
 * once, with a grid-stride loop; the backward's scatter replaced by a gather.
 * Expected: forward moves what v1 moves (x once; y and the argmax), in a quarter (fp32) to an
 * eighth (fp16) of the load instructions: close to the roof. Backward reads dy and the argmax
 * and writes dx once: at 2x2 stride 2 in fp32, (4 + 1 / 4) / 4 + 4 = 5.06 bytes per input
 * element, against v1's same reads plus a second pass over dx and its L2 atomics.
 * Limits: the forward's fast path is 2x2, stride 2, padding 0 only. Overlapping windows keep
 * v1's atomic scatter for the backward (v3 replaces it). The gather's threads each read a
 * byte of the argmax and dy: L1 hits, as neighbours share them, but one narrow store per dx
 * (v3 widens it). */
#include "maxpool.cuh"

#define THREADS 256
#define OUTS 4 /* outputs a thread on the 2x2 path */

/* OUTS elements of T, stored by one 16-byte (fp32) or 8-byte (fp16) instruction. */
template <typename T> struct alignas(OUTS * sizeof(T)) maxpool_quad {
    T e[OUTS];
};

/* The 2 OUTS elements of an input row under a thread's OUTS outputs, in 16-byte loads. */
template <typename T>
__device__ __forceinline__ void load_row_pairs(const T *__restrict__ row, T (&v)[2 * OUTS])
{
    using pack = pack16<T>;
#pragma unroll
    for (int k = 0; k < 2 * OUTS / pack::width; k++) {
        pack pk;
        pk.raw = reinterpret_cast<const uint4 *>(row)[k];
#pragma unroll
        for (int e = 0; e < pack::width; e++)
            v[k * pack::width + e] = pk.e[e];
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

/* 2x2 windows, stride 2, no padding, OW % 4 == 0, aligned rows: thread t owns outputs
 * j0 .. j0 + 3 of output row (plane, i), j0 = 4 (t % groups a row), and byte t of the argmax. */
template <typename T>
__global__ void maxpool_forward_2x2(const T *__restrict__ x, T *__restrict__ y,
                                    uint8_t *__restrict__ argmax, maxpool_dims d)
{
    const int64_t groups_a_row = d.ow / OUTS;
    const int64_t groups = d.n * d.c * d.oh * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t out_row, group, plane, i;
        maxpool_divmod(t, groups_a_row, out_row, group);
        maxpool_divmod(out_row, d.oh, plane, i);
        const int64_t j0 = group * OUTS;
        const T *top = x + (plane * d.h + 2 * i) * d.w + 2 * j0;
        T a[2 * OUTS], b[2 * OUTS];
        load_row_pairs(top, a);
        load_row_pairs(top + d.w, b);

        maxpool_quad<T> yv;
        unsigned fields = 0; /* output k's 2 bits at bit 2 k */
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            const maxpool_pick<T> m = argmax_2x2(a[2 * k], a[2 * k + 1], b[2 * k], b[2 * k + 1]);
            yv.e[k] = m.value;
            fields |= (unsigned)(2 * m.r + m.q) << (2 * k);
        }
        *reinterpret_cast<maxpool_quad<T> *>(y + out_row * d.ow + j0) = yv;
        argmax[t] = (uint8_t)fields; /* outputs 4 t .. 4 t + 3: byte t */
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

/* The 2x2 path's conditions: each group of 4 outputs starts a byte of the argmax (OW % 4 == 0)
 * and 16 bytes of x and y (W and OW whole multiples of 16 bytes, aligned pointers). */
static bool takes_2x2_path(const maxpool_dims &d, size_t element, const void *x, const void *y)
{
    return d.kh == 2 && d.kw == 2 && d.s == 2 && d.p == 0 && d.ow % OUTS == 0 &&
           d.w * element % 16 == 0 && aligned16(x) && aligned16(y);
}

template <typename T>
static void forward(const T *x, T *y, uint8_t *argmax, maxpool_dims d, cudaStream_t s)
{
    if (takes_2x2_path(d, sizeof(T), x, y)) {
        const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
        const int blocks = grid_to_fill_gpu((const void *)maxpool_forward_2x2<T>, THREADS,
                                            maxpool_blocks(groups, THREADS));
        maxpool_forward_2x2<<<blocks, THREADS, 0, s>>>(x, y, argmax, d);
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
