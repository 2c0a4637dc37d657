/* v3, shared-memory tiles: a 16 x 16 block of C from 16 x 16 tiles of A and B.
 *
 * Idea: the threads of a block computing a 16 x 16 tile of C all need the same 16 rows of A and
 * 16 columns of B. So the block loads a 16 x 16 tile of each into shared memory (one element
 * per thread, coalesced), waits at a barrier, and every thread takes its 16 multiply-adds from
 * shared memory; then the next 16 along K. Each element loaded from global memory now serves 16
 * outputs instead of 1. (This is the reference report's kernel.)
 * What changed from v2: global loads cut 16-fold; shared memory and two barriers per 16 steps.
 * Expected: bound by shared-memory traffic: 2 shared loads per FMA. A few TFLOP/s at 4096.
 * Limits: as v1; tiles hang over the edges (matmul.cuh). */
#include "matmul.cuh"

#define TILE 16

template <typename T>
__global__ void __launch_bounds__(TILE *TILE)
    matmul_shared_tiles(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                        int64_t m, int64_t n, int64_t k)
{
    __shared__ float a_tile[TILE][TILE], b_tile[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i = (int64_t)blockIdx.y * TILE + ty, j = (int64_t)blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int64_t p0 = 0; p0 < k; p0 += TILE) {
        a_tile[ty][tx] = matmul_load(a, m, k, i, p0 + tx);
        b_tile[ty][tx] = matmul_load(b, k, n, p0 + ty, j);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < TILE; q++)
            acc = fmaf(a_tile[ty][q], b_tile[q][tx], acc);
        __syncthreads(); /* the tiles are overwritten next */
    }
    matmul_store(c, m, n, i, j, acc);
}

MATMUL_LAUNCHER(v3, matmul_shared_tiles, dim3(matmul_blocks(d.n, TILE), matmul_blocks(d.m, TILE)),
                dim3(TILE, TILE))
