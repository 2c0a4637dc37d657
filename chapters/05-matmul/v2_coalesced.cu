/* v2, coalesced: the same thread per element, with the warp along a row of C.
 *
 * Idea: swap the roles of x and y. Now the 32 threads of a warp share the row i and have 32
 * consecutive columns j: at each step k they all read the same A[i][k] (one broadcast) and 32
 * neighbouring elements of B's row k (one 128-byte line in fp32), and they write 32 neighbouring
 * elements of C. Same arithmetic, same count of loads; a sixteenth of the memory transactions.
 * What changed from v1: two indices swapped.
 * Expected: several times v1, still bound by L1/L2 traffic: each element of B is loaded by
 * every row's warps, K x N x M / 32 line reads.
 * Limits: as v1. */
#include "matmul.cuh"

#define SIDE 32

template <typename T>
__global__ void matmul_coalesced(const T *__restrict__ a, const T *__restrict__ b,
                                 T *__restrict__ c, int64_t m, int64_t n, int64_t k)
{
    const int64_t j = (int64_t)blockIdx.x * SIDE + threadIdx.x;
    const int64_t i = (int64_t)blockIdx.y * SIDE + threadIdx.y;
    if (i >= m || j >= n)
        return;
    float acc = 0.f;
    for (int64_t p = 0; p < k; p++)
        acc = fmaf(to_float(a[i * k + p]), to_float(b[p * n + j]), acc);
    c[i * n + j] = from_float<T>(acc);
}

MATMUL_LAUNCHER(v2, matmul_coalesced, dim3(matmul_blocks(d.n, SIDE), matmul_blocks(d.m, SIDE)),
                dim3(SIDE, SIDE))
