/* Chapter 05's entry point (api.h): C = A B, A^T B or A B^T.
 *
 * C = A B runs a rung by dtype, GPU and size. The rules come from the sweep,
 * bench/results/h200/05-matmul.csv (the H200, graph replay, cold L2):
 * - up to 2^27 multiply-adds (512^3), v3's 16 x 16 tiles: their many small blocks fill the
 *   GPU where v7's 128-row tiles leave most SMs idle (fp32 512^3: v7 1.38x; 1023x77x513:
 *   v7 2.36x); so too in fp16 when N or K is no multiple of 8, which the tensor-core rungs
 *   cannot tile (1023x77x513: v8 1.99x, v10 2.52x);
 * - otherwise v7 in fp32 (1000^3: v4 1.37x), and in fp16 v10 on compute capability 9.0 (it
 *   runs v9 itself where the copy engine cannot describe the matrices: 4097^3 makes 1.04x
 *   v8's time there), v9 from 8.0, v8 below.
 * The transposed forms run v3's shared-memory tiles read through strides: element (i, p) of
 * op(A) is a[i * a_row + p * a_col] and (p, j) of op(B) is b[p * b_row + j * b_col], so a
 * transposed operand is the same matrix walked the other way. Their tile loads are strided,
 * not coalesced: correct everywhere, fast nowhere, until the fast rungs learn transposed tile
 * loads. */
#include "api.h"
#include "launch.cuh"
#include "matmul.cuh"

#define TILE 16

template <typename T>
__global__ void __launch_bounds__(TILE *TILE)
    matmul_strided_tiles(const T *__restrict__ a, int64_t a_row, int64_t a_col,
                         const T *__restrict__ b, int64_t b_row, int64_t b_col,
                         T *__restrict__ c, int64_t m, int64_t n, int64_t k)
{
    __shared__ float a_tile[TILE][TILE], b_tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i = (int64_t)blockIdx.y * TILE + ty, j = (int64_t)blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int64_t p0 = 0; p0 < k; p0 += TILE) {
        const int64_t pa = p0 + tx, pb = p0 + ty;
        a_tile[ty][tx] = i < m && pa < k ? to_float(a[i * a_row + pa * a_col]) : 0.f;
        b_tile[ty][tx] = pb < k && j < n ? to_float(b[pb * b_row + j * b_col]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < TILE; q++)
            acc = fmaf(a_tile[ty][q], b_tile[q][tx], acc);
        __syncthreads();
    }
    matmul_store(c, m, n, i, j, acc);
}

template <typename T>
static void launch(enum matmul_form form, const T *a, const T *b, T *c, struct matmul_dims d,
                   cudaStream_t s)
{
    /* Strides of op(A) (m x k) and op(B) (k x n) in the stored matrices. */
    const int64_t a_row = form == MATMUL_ATB ? 1 : d.k, a_col = form == MATMUL_ATB ? d.m : 1;
    const int64_t b_row = form == MATMUL_ABT ? 1 : d.n, b_col = form == MATMUL_ABT ? d.k : 1;
    const dim3 grid(matmul_blocks(d.n, TILE), matmul_blocks(d.m, TILE)), block(TILE, TILE);
    matmul_strided_tiles<T><<<grid, block, 0, s>>>(a, a_row, a_col, b, b_row, b_col, c, d.m,
                                                    d.n, d.k);
    LAUNCH_CHECK();
}

#define SMALL_MACS ((double)(1 << 27))

static void best_ab(const void *a, const void *b, void *c, struct matmul_dims d, enum dtype t,
                    cudaStream_t s)
{
    const bool small = (double)d.m * (double)d.n * (double)d.k <= SMALL_MACS;
    if (small && (t == DT_FP32 || d.n % 8 || d.k % 8))
        matmul_v3(a, b, c, d, t, s);
    else if (t == DT_FP32)
        matmul_v7(a, b, c, d, t, s);
    else if (kl_device_cc() == 90)
        matmul_v10(a, b, c, d, t, s);
    else if (kl_device_cc() >= 80)
        matmul_v9(a, b, c, d, t, s);
    else
        matmul_v8(a, b, c, d, t, s);
}

extern "C" void matmul(enum matmul_form form, const void *a, const void *b, void *c,
                       struct matmul_dims d, enum dtype t, cudaStream_t s)
{
    if (form == MATMUL_AB)
        best_ab(a, b, c, d, t, s);
    else if (t == DT_FP32)
        launch(form, (const float *)a, (const float *)b, (float *)c, d, s);
    else
        launch(form, (const __half *)a, (const __half *)b, (__half *)c, d, s);
}
