/* What the max-pooling rungs share: the window scan that defines the argmax, the packed argmax
 * (stored by a warp, read by anyone), index splitting, grid sizing and the dtype dispatch of
 * the launchers.
 *
 * Comparisons are made in fp32 whatever the storage type (fp16 widens exactly), and y is the
 * chosen element itself, copied in its own type: pooling rounds nothing. Window positions
 * (r, q), r < KH and q < KW, fit an int (a window holds at most 255 positions); every other
 * index is 64-bit. */
#ifndef MAXPOOL_CUH
#define MAXPOOL_CUH

#include <stdint.h>

#include "kernels.cuh"
#include "maxpool.h"

/* Whether v takes the place of the best so far: larger, or the first NaN. NaN compares false
 * with everything, so `v > best` alone would let a NaN neither win nor be beaten. Written as
 * "best is a number and v is not <= best": v wins when it is larger or NaN, and nothing beats
 * a NaN; two comparisons (FSETP.GTU, then FSETP.NUM). */
__device__ __forceinline__ bool maxpool_wins(float v, float best)
{
    return best == best && !(v <= best);
}

/* The argmax of one window: the element, and its position (r, q) inside the window. */
template <typename T> struct maxpool_pick {
    T value;
    int r, q;
};

/* Top-left corner of window (i, j) in x's plane; negative inside the padding. */
__device__ __forceinline__ int64_t maxpool_window_top(const maxpool_dims &d, int64_t i)
{
    return i * d.s - d.p;
}

__device__ __forceinline__ int64_t maxpool_window_left(const maxpool_dims &d, int64_t j)
{
    return j * d.s - d.p;
}

/* Window (i, j) of one (n, c) plane of x, scanned row by row over the positions inside x: the
 * first maximum, or the first NaN. The scan starts from the first position inside x (p < KH and
 * p < KW guarantee one), so padding never takes part. */
template <typename T>
__device__ __forceinline__ maxpool_pick<T> maxpool_window_argmax(const T *__restrict__ plane,
                                                                 const maxpool_dims &d,
                                                                 int64_t i, int64_t j)
{
    const int64_t top = maxpool_window_top(d, i), left = maxpool_window_left(d, j);
    const int r0 = top < 0 ? (int)-top : 0, q0 = left < 0 ? (int)-left : 0;
    const int r1 = (int)(d.h - top < d.kh ? d.h - top : d.kh); /* one past the last row */
    const int q1 = (int)(d.w - left < d.kw ? d.w - left : d.kw);
    maxpool_pick<T> best = {plane[(top + r0) * d.w + left + q0], r0, q0};
    float best_f = to_float(best.value);
    for (int r = r0; r < r1; r++) {
        const int64_t row = (top + r) * d.w + left;
        for (int q = q0; q < q1; q++) {
            const T v = plane[row + q];
            const float f = to_float(v);
            if (maxpool_wins(f, best_f)) {
                best = {v, r, q};
                best_f = f;
            }
        }
    }
    return best;
}

/* The winner's position inside its window: what the argmax stores. */
__device__ __forceinline__ int maxpool_window_position(const maxpool_dims &d, int r, int q)
{
    return r * (int)d.kw + q;
}

/* The packed argmax (maxpool.h): output o's field is bits wide, at bit (o % per_byte) bits of
 * byte o / per_byte, per_byte = 8 / bits = 2^slots_log2 (shifts, not 64-bit divisions). */
__device__ __forceinline__ int maxpool_slots_log2(int bits)
{
    return bits == 2 ? 2 : bits == 4 ? 1 : 0;
}

__device__ __forceinline__ int maxpool_load_argmax(const uint8_t *__restrict__ argmax,
                                                   const maxpool_dims &d, int64_t o)
{
    const int slots_log2 = maxpool_slots_log2(d.argmax_bits);
    const int slot = (int)(o & ((1 << slots_log2) - 1));
    return (argmax[o >> slots_log2] >> (slot * d.argmax_bits)) & ((1 << d.argmax_bits) - 1);
}

/* Stores the argmax of a thread-per-output kernel, where lane L of a warp owns output
 * o = first + L, first a multiple of 32: all 32 lanes call it together (the kernel's loop runs
 * whole warps; lanes past the last output pass valid = false). The 1, 2 or 4 lanes whose
 * fields share a byte OR them together with shuffles, and the first of them stores the byte:
 * no atomics, and every byte is written whole, once. */
__device__ __forceinline__ void maxpool_store_argmax_by_warp(uint8_t *__restrict__ argmax,
                                                             const maxpool_dims &d, int64_t o,
                                                             bool valid, int position)
{
    const int slots_log2 = maxpool_slots_log2(d.argmax_bits);
    const int slot = (int)(o & ((1 << slots_log2) - 1));
    unsigned field = valid ? (unsigned)position << (slot * d.argmax_bits) : 0u;
    for (int lanes = 1; lanes < 1 << slots_log2; lanes *= 2)
        field |= __shfl_xor_sync(0xffffffffu, field, lanes);
    if (valid && slot == 0)
        argmax[o >> slots_log2] = (uint8_t)field;
}

/* The first output of this thread's warp, for loops that run whole warps over outputs: a
 * multiple of 32 (blocks of a multiple of 32 threads), so that lane L owns first + L. */
__device__ __forceinline__ int64_t maxpool_warp_first_output()
{
    return (int64_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31u);
}

/* quotient = a / b and rest = a % b, for a >= 0 and b > 0. A 64-bit division is a software
 * routine of dozens of instructions, a 32-bit one a handful: the short one is taken whenever
 * the operands fit, which is nearly always (a tensor of 2^32 outputs is 16 GB of fp32). */
__device__ __forceinline__ void maxpool_divmod(int64_t a, int64_t b, int64_t &quotient,
                                               int64_t &rest)
{
    if (a <= UINT32_MAX && b <= UINT32_MAX) {
        const uint32_t q = (uint32_t)a / (uint32_t)b;
        quotient = q;
        rest = a - (int64_t)q * b;
    } else {
        quotient = a / b;
        rest = a - quotient * b;
    }
}

/* ---- The 2x2 stride-2 paths (v2's forward, v3's backward) ----
 * With no padding, windows tile x: output row out_row = (n C + c) OH + i reads input rows
 * 2 i and 2 i + 1 of its plane, columns 2 j and 2 j + 1. Thread t owns OUTS neighbouring
 * outputs of a row, j0 = OUTS (t % (OW / OUTS)), the 2 OUTS inputs under them in each of the
 * two rows, and OUTS 2-bit fields of the argmax, 2 OUTS bits from bit 2 OUTS t, since
 * OW % OUTS == 0: half a byte (OUTS = 2), a byte (4) or a 16-bit word (8). */

/* N elements stored or loaded by one instruction of N sizeof(T) bytes (at most 16). */
template <typename T, int N> struct alignas(N * sizeof(T)) maxpool_vec {
    T e[N];
};

/* 2 OUTS elements of a row, 16 bytes at a time (the row start is 16-byte aligned). */
template <typename T, int N>
__device__ __forceinline__ void maxpool_load_row(const T *__restrict__ row, T (&v)[N])
{
    using pack = pack16<T>;
#pragma unroll
    for (int k = 0; k < N / pack::width; k++) {
        pack pk;
        pk.raw = reinterpret_cast<const uint4 *>(row)[k];
#pragma unroll
        for (int e = 0; e < pack::width; e++)
            v[k * pack::width + e] = pk.e[e];
    }
}

template <typename T, int N>
__device__ __forceinline__ void maxpool_store_row(T *__restrict__ row, const T (&v)[N])
{
    using pack = pack16<T>;
#pragma unroll
    for (int k = 0; k < N / pack::width; k++) {
        pack pk;
#pragma unroll
        for (int e = 0; e < pack::width; e++)
            pk.e[e] = v[k * pack::width + e];
        reinterpret_cast<uint4 *>(row)[k] = pk.raw;
    }
}

/* Group t's output row, first column, and the first of its two input rows: 2 out_row, plus
 * one row for each earlier plane when H is odd (the last row of a plane is in no window).
 * One 32-bit division, two when H is odd. */
template <int OUTS>
__device__ __forceinline__ void maxpool_2x2_group(const maxpool_dims &d, int64_t t,
                                                  int64_t &out_row, int64_t &j0, int64_t &in_row)
{
    int64_t group;
    maxpool_divmod(t, d.ow / OUTS, out_row, group);
    j0 = group * OUTS;
    in_row = 2 * out_row;
    if (d.h != 2 * d.oh) {
        int64_t plane, i;
        maxpool_divmod(out_row, d.oh, plane, i);
        in_row += plane;
    }
}

/* Group t's 2 OUTS bits of argmax fields, as v3's backward reads them: half a byte (OUTS = 2,
 * fp32) or a byte (OUTS = 4, fp16). */
template <int OUTS> __device__ __forceinline__ unsigned maxpool_load_fields(const uint8_t *a,
                                                                             int64_t t)
{
    static_assert(OUTS == 2 || OUTS == 4, "the backward's groups fill 8 bytes of dy");
    if constexpr (OUTS == 4)
        return a[t];
    else
        return a[t >> 1] >> (t & 1) * 4 & 0xf;
}

/* ... and as v2's forward stores them: a byte (OUTS = 4) or a 16-bit word (OUTS = 8, fp16). */
template <int OUTS> __device__ __forceinline__ void maxpool_store_fields(uint8_t *a, int64_t t,
                                                                          unsigned fields)
{
    static_assert(OUTS == 4 || OUTS == 8, "4 outputs, or 16 bytes of fp16 y");
    if constexpr (OUTS == 8)
        reinterpret_cast<uint16_t *>(a)[t] = (uint16_t)fields;
    else
        a[t] = (uint8_t)fields;
}

/* Whether the 2x2 paths apply, with OUTS outputs a thread: 2x2 windows, stride 2, no padding,
 * OW a multiple of OUTS, rows of x 16-byte multiples and the tensors 16-byte aligned. */
static inline bool maxpool_2x2_path(const maxpool_dims &d, int outs, size_t element,
                                    const void *big, const void *small)
{
    return d.kh == 2 && d.kw == 2 && d.s == 2 && d.p == 0 && d.ow % outs == 0 &&
           d.w * (int64_t)element % 16 == 0 && aligned16(big) && aligned16(small);
}

/* A thread's 16 bytes of a row of dx, w0 .. w0 + V - 1: one 16-byte store where the row is
 * whole and aligned (vec), else its first count elements one by one. */
template <typename T>
__device__ __forceinline__ void maxpool_store_inputs(T *__restrict__ row, const pack16<T> &v,
                                                     bool vec, int count)
{
    if (vec) {
        *reinterpret_cast<uint4 *>(row) = v.raw;
    } else {
#pragma unroll
        for (int e = 0; e < pack16<T>::width; e++)
            if (e < count)
                row[e] = v.e[e];
    }
}

/* Windows never overlap when the stride is at least the window: each input then lies in at
 * most one window, and the backward is a gather with one candidate per input. */
static inline bool maxpool_disjoint_windows(const maxpool_dims &d)
{
    return d.s >= d.kh && d.s >= d.kw;
}

/* Blocks of `threads` threads for one thread per item, at most 2^31 - 1 (gridDim.x's limit):
 * the kernels loop with a grid stride, so a larger count is still covered. */
static inline unsigned maxpool_blocks(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks < INT32_MAX ? blocks : INT32_MAX);
}

/* The extern "C" launchers of maxpool.h, from a file's templates
 *   template <typename T> static void forward(const T *x, T *y, uint8_t *argmax,
 *                                             maxpool_dims d, cudaStream_t s)
 *   template <typename T> static void backward(const T *dy, const uint8_t *argmax, T *dx,
 *                                              maxpool_dims d, cudaStream_t s)
 * instantiated for fp32 and fp16. */
#define MAXPOOL_FORWARD_LAUNCHER(v)                                                            \
    extern "C" void maxpool_forward_##v(const void *x, void *y, uint8_t *argmax,               \
                                        struct maxpool_dims d, enum dtype t, cudaStream_t s)   \
    {                                                                                          \
        kl_note_rung(#v);                                                                      \
        if (t == DT_FP32)                                                                      \
            forward((const float *)x, (float *)y, argmax, d, s);                               \
        else                                                                                   \
            forward((const __half *)x, (__half *)y, argmax, d, s);                             \
    }

#define MAXPOOL_BACKWARD_LAUNCHER(v)                                                           \
    extern "C" void maxpool_backward_##v(const void *dy, const uint8_t *argmax, void *dx,      \
                                         struct maxpool_dims d, enum dtype t, cudaStream_t s)  \
    {                                                                                          \
        kl_note_rung(#v);                                                                      \
        if (t == DT_FP32)                                                                      \
            backward((const float *)dy, argmax, (float *)dx, d, s);                            \
        else                                                                                   \
            backward((const __half *)dy, argmax, (__half *)dx, d, s);                          \
    }

#endif
