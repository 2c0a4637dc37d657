/* v5, 2D register blocking: each thread computes an 8 x 8 block of C.
 *
 * Idea: take v4's reuse in both directions. At each step along K a thread loads 8 elements of
 * A's tile and 8 of B's into registers and does their 64 products: 16 shared loads for 64 FMAs
 * (v4: 9 for 8). A block of 256 threads computes a 128 x 128 tile of C from 128 x 8 tiles of A
 * and 8 x 128 tiles of B, each thread loading 4 elements of each tile.
 * What changed from v4: an 8 x 8 outer product per thread instead of an 8 x 1 column; tiles of
 * 128 x 128 (each global element serves 128 outputs).
 * Expected: arithmetic starts to matter: 10-20 TFLOP/s at 4096 in fp32, held back by bank
 * conflicts on A's tile (read down a column) and by scalar loads, which v6 removes.
 * Limits: as v1. */
#include "matmul.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define THREADS (BM / TM * (BN / TN)) /* 256 */

template <typename T>
__global__ void __launch_bounds__(THREADS)
    matmul_2d_blocking(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                       int64_t m, int64_t n, int64_t k)
{
    __shared__ float a_tile[BM][BK], b_tile[BK][BN];
    const int t = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int out_row = (t / (BN / TN)) * TM, out_col = (t % (BN / TN)) * TN;
    float acc[TM][TN] = {};
    for (int64_t p0 = 0; p0 < k; p0 += BK) {
#pragma unroll
        for (int l = 0; l < BM * BK / THREADS; l++) {
            const int e = t + l * THREADS;
            a_tile[e / BK][e % BK] = matmul_load(a, m, k, row0 + e / BK, p0 + e % BK);
            b_tile[e / BN][e % BN] = matmul_load(b, k, n, p0 + e / BN, col0 + e % BN);
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < BK; q++) {
            float a_reg[TM], b_reg[TN];
#pragma unroll
            for (int r = 0; r < TM; r++)
                a_reg[r] = a_tile[out_row + r][q];
#pragma unroll
            for (int s = 0; s < TN; s++)
                b_reg[s] = b_tile[q][out_col + s];
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int s = 0; s < TN; s++)
                    acc[r][s] = fmaf(a_reg[r], b_reg[s], acc[r][s]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < TM; r++)
#pragma unroll
        for (int s = 0; s < TN; s++)
            matmul_store(c, m, n, row0 + out_row + r, col0 + out_col + s, acc[r][s]);
}

MATMUL_LAUNCHER(v5, matmul_2d_blocking, dim3(matmul_blocks(d.n, BN), matmul_blocks(d.m, BM)),
                dim3(THREADS))
