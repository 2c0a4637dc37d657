/* Exercise: write the implicit GEMM's gather (fp32).
 *
 * The kernel below is chapter 05's 16 x 16 tiled matmul made a convolution: y is the product of
 * w (K x C R S, as it is stored) and the column matrix col (C R S x N P Q, conv.cuh's header),
 * which is never stored: at each step along the reduction every thread fetches its element of
 * the 16 x 16 column tile from x. The tiles, barriers, products and store are written; the
 * fetch, column_element, is yours. Complete it:
 *   1. split the row i into the tap (c, r, s), i = (c R + r) S + s, and the column j into the
 *      output pixel (n, p, q), j = (n P + p) Q + q;
 *   2. find the input row and column under the tap, h = p stride - pad + r and
 *      w = q stride - pad + s, and return x[n, c, h, w] (NCHW, packed);
 *   3. return 0 where (h, w) lies in the padding, and outside col (i >= C R S or j >= N P Q):
 *      the tiles hang over its edges;
 *   4. stay correct for every shape: `./run --exercise` checks one output, 1x1 and 7x7 filters,
 *      stride 2, padding up to 3 and a filter as large as the padded input, and says which
 *      element is wrong first.
 * Then compare the time printed after PASS with v2's (./run --variant v2 at the same shape):
 * v2 runs these tiles over a stored col; what did storing it cost, in bytes and in time? Last,
 * a thread's column j, and so its pixel (n, p, q), is the same at every step along the
 * reduction: split it once, before the loop (conv.cuh's conv_pixel_of and conv_tap_of divide
 * the work this way), and measure what the divisions cost at --preset large. */
#include "conv.cuh"

#define TILE 16

/* col[i][j]: x under tap i of output pixel j, 0 in the padding and outside col. */
__device__ float column_element(const float *__restrict__ x, const conv2d_dims &d, int i, int j)
{
    /* TODO: steps 1 to 3. */
    (void)x;
    (void)d;
    (void)i;
    (void)j;
    return 0.f;
}

/* Block (x, y) computes the 16 x 16 tile of the product at filters y TILE.., columns x TILE... */
__global__ void __launch_bounds__(TILE *TILE)
    conv_exercise_kernel(const float *__restrict__ x, const float *__restrict__ w,
                         const float *__restrict__ bias, float *__restrict__ y, conv2d_dims d)
{
    __shared__ float w_tile[TILE][TILE], col_tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int taps = (int)(d.c * d.r * d.s), pixels = (int)(d.n * d.p * d.q);
    const int k = blockIdx.y * TILE + ty, j = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int i0 = 0; i0 < taps; i0 += TILE) {
        w_tile[ty][tx] = k < d.k && i0 + tx < taps ? w[k * taps + i0 + tx] : 0.f;
        col_tile[ty][tx] = column_element(x, d, i0 + ty, j);
        __syncthreads();
#pragma unroll
        for (int e = 0; e < TILE; e++)
            acc = fmaf(w_tile[ty][e], col_tile[e][tx], acc);
        __syncthreads(); /* the tiles are overwritten next */
    }
    if (k < d.k && j < pixels)
        y[conv_output_index(d, k, j)] = conv_epilogue(acc, bias, k, CONV2D_LINEAR);
}

extern "C" void conv2d_forward_exercise(const float *x, const float *w, const float *bias,
                                        float *y, struct conv2d_dims d, cudaStream_t s)
{
    const dim3 grid((unsigned)((d.n * d.p * d.q + TILE - 1) / TILE),
                    (unsigned)((d.k + TILE - 1) / TILE)),
        block(TILE, TILE);
    conv_exercise_kernel<<<grid, block, 0, s>>>(x, w, bias, y, d);
    LAUNCH_CHECK();
}
