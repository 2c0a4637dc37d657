/* v4, 1D register blocking: each thread computes a column of 8 elements of C.
 *
 * Idea: v3 makes two shared-memory loads per FMA, so shared memory, not arithmetic, bounds it.
 * Give each thread TM = 8 outputs in one column: at each step along K it loads one element of
 * B's tile into a register and reuses it for 8 FMAs against 8 elements of A's tile. A block
 * computes a 64 x 64 tile of C with 512 threads, from 64 x 8 tiles of A and 8 x 64 of B.
 * What changed from v3: 8 outputs a thread; shared loads per FMA from 2 to about 1.1; tiles of
 * 64 x 64 (each global element now serves 64 outputs, against 16).
 * Expected: about 2-3x v3.
 * Limits: as v1. */
#include "matmul.cuh"

#define BM 64
#define BN 64
#define BK 8
#define TM 8
#define THREADS (BM * BN / TM) /* 512 */

template <typename T>
__global__ void __launch_bounds__(THREADS)
    matmul_1d_blocking(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                       int64_t m, int64_t n, int64_t k)
{
    __shared__ float a_tile[BM][BK], b_tile[BK][BN];
    const int t = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int out_col = t % BN, out_row = (t / BN) * TM; /* this thread's column of TM */
    const int a_row = t / BK, a_col = t % BK;           /* one element of each tile a thread */
    const int b_row = t / BN, b_col = t % BN;
    float acc[TM] = {};
    for (int64_t p0 = 0; p0 < k; p0 += BK) {
        a_tile[a_row][a_col] = matmul_load(a, m, k, row0 + a_row, p0 + a_col);
        b_tile[b_row][b_col] = matmul_load(b, k, n, p0 + b_row, col0 + b_col);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < BK; q++) {
            const float bq = b_tile[q][out_col];
#pragma unroll
            for (int r = 0; r < TM; r++)
                acc[r] = fmaf(a_tile[out_row + r][q], bq, acc[r]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < TM; r++)
        matmul_store(c, m, n, row0 + out_row + r, col0 + out_col, acc[r]);
}

MATMUL_LAUNCHER(v4, matmul_1d_blocking, dim3(matmul_blocks(d.n, BN), matmul_blocks(d.m, BM)),
                dim3(THREADS))
