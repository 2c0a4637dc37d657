/* v1, naive: a thread per element of C, walking a row of A and a column of B.
 *
 * Idea: the definition, C[i][j] = sum_k A[i][k] B[k][j], one thread per (i, j). The thread's
 * index x picks the row i and y the column j, which is the natural reading of "thread (x, y)
 * computes C[x][y]", and the wrong one for memory: the 32 threads of a warp share j and have 32
 * consecutive i, so at each step k they read 32 elements of A K apart (32 lines for 128 bytes)
 * and write 32 elements of C N apart. Every operand comes from L1/L2/DRAM at every step: 2 K
 * loads per output, 2 FLOPs per 8 bytes loaded.
 * Expected: far under 1 TFLOP/s at 4096 (the loads, not the arithmetic, bound it).
 * Limits: none in shape (M, N up to 2^21 by the grid, any K). */
#include "matmul.cuh"

#define SIDE 32

template <typename T>
__global__ void matmul_naive(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                             int64_t m, int64_t n, int64_t k)
{
    const int64_t i = (int64_t)blockIdx.x * SIDE + threadIdx.x;
    const int64_t j = (int64_t)blockIdx.y * SIDE + threadIdx.y;
    if (i >= m || j >= n)
        return;
    float acc = 0.f;
    for (int64_t p = 0; p < k; p++)
        acc = fmaf(to_float(a[i * k + p]), to_float(b[p * n + j]), acc);
    c[i * n + j] = from_float<T>(acc);
}

MATMUL_LAUNCHER(v1, matmul_naive, dim3(matmul_blocks(d.m, SIDE), matmul_blocks(d.n, SIDE)),
                dim3(SIDE, SIDE))
