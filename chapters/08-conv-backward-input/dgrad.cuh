/* What the input-gradient rungs share: the index test that finds the outputs above an input
 * pixel, the column plumbing of v2 and v3, and the dtype dispatch of the launchers (v4's and
 * v6's kernel is in implicit_gemm.cuh).
 *
 * The input gradient is a matrix product too (api.h's formula):
 *     dx[n, c, (h, w)] = sum over j = (k, r, s) of  w[k, c, r, s] dy_under[j, (n, h, w)],
 *     dy_under[(k, r, s), (n, h, w)] = dy[n, k, p, q] where p stride + r - pad = h and
 *                                      q stride + s - pad = w, 0 where no such (p, q) is
 * an M = C by N = N H W product with a reduction of K R S. At stride 1 every (h, w, r, s) has
 * its (p, q) unless it falls off dy's edge; at stride s only one tap in s along each axis
 * does, and the rest of the reduction multiplies zeros. Every tensor holds fewer than 2^31
 * elements (chapter 07's api.h), so indices within a tensor are 32-bit. Sums are fp32 for both
 * storage types. */
#ifndef DGRAD_CUH
#define DGRAD_CUH

#include <stdint.h>

#include "dgrad.h"
#include "kernels.cuh"
#include "launch.cuh"

/* The output p whose window puts tap r on input row h (p stride + r - pad = h), or -1 where
 * there is none: between two windows' taps at stride > 1, or past dy's edge. */
__device__ __forceinline__ int dgrad_output_under(int h, int r, int stride, int pad, int count)
{
    const int at = h + pad - r;
    if (at < 0)
        return -1;
    const int p = stride == 1 ? at : at / stride;
    return p * stride == at && p < count ? p : -1;
}

/* Blocks of `threads` threads for one thread per item, capped at gridDim.x's limit: kernels
 * that use it loop with a grid stride. */
static inline unsigned dgrad_blocks(int64_t items, int threads)
{
    const int64_t blocks = (items + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks < INT32_MAX ? blocks : INT32_MAX);
}

/* The extern "C" launcher of dgrad.h from a file's template
 *   template <typename T> static void backward(const T *dy, const T *w, T *dx, conv2d_dims d,
 *       void *workspace, cudaStream_t s)
 * instantiated for fp32 and fp16. */
#define DGRAD_LAUNCHER(v)                                                                      \
    extern "C" void dgrad_##v(const void *dy, const void *w, void *dx, struct conv2d_dims d,   \
                              enum dtype t, void *workspace, cudaStream_t s)                   \
    {                                                                                          \
        kl_note_rung(#v);                                                                      \
        if (t == DT_FP32)                                                                      \
            backward((const float *)dy, (const float *)w, (float *)dx, d, workspace, s);       \
        else                                                                                   \
            backward((const __half *)dy, (const __half *)w, (__half *)dx, d, workspace, s);    \
    }

/* Where a 256-byte aligned piece of `bytes` bytes starts after `used` bytes of a workspace;
 * cudaMalloc aligns the workspace itself. */
static inline size_t dgrad_align(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

/* ---- The column rungs' plumbing, shared by v2 and v3 (kernels in v2_col2im_atomic.cu) ----
 * Both compute the column matrix col = W^T dY (C R S x N P Q), whose element ((c, r, s),
 * (n, p, q)) is the contribution of dy[n, :, p, q] to x[n, c, p stride + r - pad,
 * q stride + s - pad], in one product by chapter 05's 16 x 16 tiles:
 *   dgrad_columns_pack stores W^T (C R S x K) and dy with its filters first (K x N P Q), so
 *     that the product is one call over every image;
 *   matmul_v3: col = W^T dY;
 *   then v2 adds each column back into dx with atomics (scatter), v3 has each element of dx
 *   sum the columns that cover it (gather).
 * The buffers lie in the workspace (dgrad_col2im_workspace_bytes), each 256-byte aligned. */
struct dgrad_columns {
    void *wt, *dyt, *col; /* W^T, dy as K x N P Q, col */
    float *sums;          /* v2's fp32 sums of dx, for fp16 (NULL for fp32: dx itself) */
};

dgrad_columns dgrad_columns_of(conv2d_dims d, enum dtype t, void *workspace);
void dgrad_columns_compute(const void *dy, const void *w, conv2d_dims d, dgrad_columns cols,
                           enum dtype t, cudaStream_t s);
/* ---- end of the column rungs' plumbing ---- */

#endif
