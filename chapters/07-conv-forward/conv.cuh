/* What the convolution rungs share: the gather that reads the virtual column matrix, the
 * epilogue, grid sizing and the dtype dispatch of the launchers.
 *
 * The convolution is a matrix product in disguise (api.h's formula):
 *     y[n, k, (p, q)] = sum over i of  w[k, i] col[i, (n, p, q)],   i = (c, r, s),
 *     col[(c, r, s), (n, p, q)] = x[n, c, p stride + r - pad, q stride + s - pad]  (0 outside)
 * an M = K by N = N P Q product with a reduction of C R S, whose B operand, col, is never stored:
 * each element is an address computed from its row (a filter tap) and its column (an output
 * pixel). Every rung that gathers reads col through conv_gather. Every tensor holds fewer than
 * 2^31 elements (api.h), so indices within a tensor are 32-bit. Sums are fp32 for both storage
 * types, and the output is rounded once. */
#ifndef CONV2D_CUH
#define CONV2D_CUH

#include <stdint.h>

#include "conv.h"
#include "kernels.cuh"
#include "launch.cuh"

/* Column j = (n, p, q) of col: where its receptive field starts in x. Taps (r, s) of it read
 * x[base + c H W + r W + s] when 0 <= top + r < H and 0 <= left + s < W. */
struct conv_pixel {
    int base;      /* n C H W + top W + left: may be negative, never read as is */
    int top, left; /* p stride - pad, q stride - pad */
};

/* Row i = (c, r, s) of col: the tap's offset from a pixel's base, and its place in the filter. */
struct conv_tap {
    int offset; /* c H W + r W + s */
    int r, s;
};

__device__ __forceinline__ conv_pixel conv_pixel_of(const conv2d_dims &d, int j)
{
    const int pq = (int)(d.p * d.q);
    const int n = j / pq, rest = j - n * pq;
    const int p = rest / (int)d.q, q = rest - p * (int)d.q;
    conv_pixel px;
    px.top = p * (int)d.stride - (int)d.pad;
    px.left = q * (int)d.stride - (int)d.pad;
    px.base = n * (int)(d.c * d.h * d.w) + px.top * (int)d.w + px.left;
    return px;
}

__device__ __forceinline__ conv_tap conv_tap_of(const conv2d_dims &d, int i)
{
    const int rs = (int)(d.r * d.s);
    const int c = i / rs, rest = i - c * rs;
    conv_tap t;
    t.r = rest / (int)d.s;
    t.s = rest - t.r * (int)d.s;
    t.offset = c * (int)(d.h * d.w) + t.r * (int)d.w + t.s;
    return t;
}

/* col[tap, pixel]: x under the tap, or 0 in the padding. */
template <typename T>
__device__ __forceinline__ float conv_gather(const T *__restrict__ x, const conv2d_dims &d,
                                             const conv_pixel &px, const conv_tap &t)
{
    const int h = px.top + t.r, w = px.left + t.s;
    const bool inside = (unsigned)h < (unsigned)d.h && (unsigned)w < (unsigned)d.w;
    return inside ? to_float(x[px.base + t.offset]) : 0.f;
}

/* Where output (n, k, pq) of y lies, for column j = n P Q + pq of the product. */
__device__ __forceinline__ int conv_output_index(const conv2d_dims &d, int k, int j)
{
    const int pq = (int)(d.p * d.q);
    const int n = j / pq;
    return (n * (int)d.k + k) * pq + (j - n * pq);
}

/* The epilogue every rung applies before its one rounding: the bias, then the activation.
 * `v < 0 ? 0 : v` keeps a NaN a NaN, as the reference does. */
template <typename T>
__device__ __forceinline__ float conv_epilogue(float sum, const T *__restrict__ bias, int k,
                                               conv2d_activation act)
{
    const float v = bias ? sum + to_float(bias[k]) : sum;
    return act == CONV2D_RELU && v < 0.f ? 0.f : v;
}

/* Blocks of `threads` threads for one thread per item, capped at gridDim.x's limit: kernels
 * that use it loop with a grid stride. */
static inline unsigned conv_blocks(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks < INT32_MAX ? blocks : INT32_MAX);
}

/* The extern "C" launcher of conv.h from a file's template
 *   template <typename T> static void forward(const T *x, const T *w, const T *bias, T *y,
 *       conv2d_dims d, conv2d_activation act, void *workspace, cudaStream_t s)
 * instantiated for fp32 and fp16. */
#define CONV2D_FORWARD_LAUNCHER(v)                                                             \
    extern "C" void conv2d_forward_##v(const void *x, const void *w, const void *bias,         \
                                       void *y, struct conv2d_dims d,                          \
                                       enum conv2d_activation act, enum dtype t,               \
                                       void *workspace, cudaStream_t s)                        \
    {                                                                                          \
        kl_note_rung(#v);                                                                      \
        if (t == DT_FP32)                                                                      \
            forward((const float *)x, (const float *)w, (const float *)bias, (float *)y, d,    \
                    act, workspace, s);                                                        \
        else                                                                                   \
            forward((const __half *)x, (const __half *)w, (const __half *)bias, (__half *)y,   \
                    d, act, workspace, s);                                                     \
    }

/* ---- The im2col rungs' plumbing, shared by v2 and v3 (kernels in v2_im2col_tiled.cu) ----
 * Both run the convolution as one matrix product between two kernels:
 *   conv_im2col_pack stores col = [col; a row of ones] (depth x N P Q) and the filters beside
 *     it as wb = [w | b] (K x depth), each row of w followed by its bias; depth is C R S + 1,
 *     padded with zeros to a multiple of 8 in fp16 so that tensor-core GEMMs can tile it. The
 *     row of ones carries the bias into the product, whose one rounding is then the output's
 *     only one (adding b to an fp16 product would round twice).
 *   the product: prod = wb col (K x N P Q), by chapter 05 (the rungs differ only there);
 *   conv_im2col_finish moves prod's column (n, pq) of row k to y[n][k][pq] through the
 *     activation; prod is y itself when N = 1, and then the move is an in-place activation.
 * The buffers lie in the workspace (conv2d_im2col_workspace_bytes), each 256-byte aligned
 * from its start, which cudaMalloc aligns. */
struct conv_im2col_plan {
    int64_t depth;       /* rows of col, columns of wb: C R S + 1, padded in fp16 */
    void *col, *filters; /* col, depth x N P Q, and wb, K x depth */
    void *product;       /* prod, K x N P Q: in the workspace, or y where N = 1 */
};

conv_im2col_plan conv_im2col_plan_of(conv2d_dims d, enum dtype t, void *workspace, void *y);
void conv_im2col_pack(const void *x, const void *w, const void *bias, conv2d_dims d,
                      conv_im2col_plan plan, enum dtype t, cudaStream_t s);
void conv_im2col_finish(const void *product, void *y, conv2d_dims d, conv2d_activation act,
                        enum dtype t, cudaStream_t s);
/* ---- end of the im2col rungs' plumbing ---- */

#endif
