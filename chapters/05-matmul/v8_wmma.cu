/* v8, tensor cores through WMMA (fp16 inputs, fp32 accumulation).
 *
 * Idea: from here on the multiply-adds go to the tensor cores, which do a 16 x 16 x 16 product
 * of fp16 matrices into fp32 in one warp-wide instruction sequence (HMMA in the SASS), at 16
 * times the rate of the fp32 cores. The WMMA API exposes them as opaque per-warp "fragments":
 * load_matrix_sync from shared memory, mma_sync, store_matrix_sync. A block of 8 warps computes
 * a 128 x 128 tile of C, each warp 64 x 32 of it as 4 x 2 fragments, stepping K by 32 through
 * tiles of A (128 x 32) and B (32 x 128) staged in shared memory. The staging rows are padded
 * by 8 halves so that the fragments' row loads do not all land in the same banks, and every
 * fragment starts 32 bytes aligned, as load_matrix_sync requires.
 * Edges: the staging loads fill 0 outside A and B (16 bytes at a time where K, or N, is a
 * multiple of 8 and the matrix aligned, element by element elsewhere), and each finished
 * fragment goes through a small shared buffer so that only the elements inside C are stored.
 * What changed from v6: the tensor cores do the arithmetic; fp16 only.
 * Expected: well past any fp32 rung but far from cuBLAS (580-760 TFLOP/s): WMMA's loads from
 * shared memory are not pipelined with the global loads, which wait at each step. v9 and v10
 * address that. Under half of cuBLAS fp16 at 4096.
 * Limits: fp16 only (listed as such); any M, N, K. */
#include <mma.h>

#include "matmul.cuh"

using namespace nvcuda;

#define BM 128
#define BN 128
#define BK 32
#define PAD 8 /* halves: rows of 40 and 136, 16-byte multiples as load_matrix_sync requires */
#define WARPS 8
#define WARP_M 64 /* each warp's tile of C: 4 x 2 fragments */
#define WARP_N 32
#define F 16 /* fragment side */

/* 8 consecutive elements x[row][col .. col + 7] into shared memory, 0 outside the matrix. */
__device__ __forceinline__ void stage8(__half *to, const __half *x, int64_t rows, int64_t cols,
                                       int64_t row, int64_t col, bool vec)
{
    if (vec && row < rows && col + 7 < cols) {
        *reinterpret_cast<uint4 *>(to) = *reinterpret_cast<const uint4 *>(x + row * cols + col);
        return;
    }
#pragma unroll
    for (int e = 0; e < 8; e++)
        to[e] = row < rows && col + e < cols ? x[row * cols + col + e] : __float2half(0.f);
}

__global__ void __launch_bounds__(WARPS * 32)
    matmul_wmma(const __half *__restrict__ a, const __half *__restrict__ b,
                __half *__restrict__ c, int64_t m, int64_t n, int64_t k, bool vec_a, bool vec_b)
{
    __shared__ __align__(32) __half a_tile[BM][BK + PAD];
    __shared__ __align__(32) __half b_tile[BK][BN + PAD];
    __shared__ __align__(32) float out[WARPS][F * F];
    const int t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int warp_row = (warp / (BN / WARP_N)) * WARP_M, warp_col = (warp % (BN / WARP_N)) * WARP_N;

    wmma::fragment<wmma::accumulator, F, F, F, float> acc[WARP_M / F][WARP_N / F];
#pragma unroll
    for (int i = 0; i < WARP_M / F; i++)
#pragma unroll
        for (int j = 0; j < WARP_N / F; j++)
            wmma::fill_fragment(acc[i][j], 0.f);

    for (int64_t p0 = 0; p0 < k; p0 += BK) {
        /* A's tile: 128 rows of 32 = 512 runs of 8, two a thread; B's: 32 rows of 128, two. */
#pragma unroll
        for (int l = 0; l < 2; l++) {
            const int ra = (t + l * 256) / (BK / 8), ca = ((t + l * 256) % (BK / 8)) * 8;
            stage8(&a_tile[ra][ca], a, m, k, row0 + ra, p0 + ca, vec_a);
            const int rb = (t + l * 256) / (BN / 8), cb = ((t + l * 256) % (BN / 8)) * 8;
            stage8(&b_tile[rb][cb], b, k, n, p0 + rb, col0 + cb, vec_b);
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < BK; q += F) {
            wmma::fragment<wmma::matrix_a, F, F, F, __half, wmma::row_major> af[WARP_M / F];
            wmma::fragment<wmma::matrix_b, F, F, F, __half, wmma::row_major> bf[WARP_N / F];
#pragma unroll
            for (int i = 0; i < WARP_M / F; i++)
                wmma::load_matrix_sync(af[i], &a_tile[warp_row + i * F][q], BK + PAD);
#pragma unroll
            for (int j = 0; j < WARP_N / F; j++)
                wmma::load_matrix_sync(bf[j], &b_tile[q][warp_col + j * F], BN + PAD);
#pragma unroll
            for (int i = 0; i < WARP_M / F; i++)
#pragma unroll
                for (int j = 0; j < WARP_N / F; j++)
                    wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
        }
        __syncthreads();
    }

    /* Each fragment through the warp's buffer, then the elements inside C to global memory. */
#pragma unroll
    for (int i = 0; i < WARP_M / F; i++)
#pragma unroll
        for (int j = 0; j < WARP_N / F; j++) {
            wmma::store_matrix_sync(out[warp], acc[i][j], F, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < F * F; e += 32)
                matmul_store(c, m, n, row0 + warp_row + i * F + e / F,
                             col0 + warp_col + j * F + e % F, out[warp][e]);
            __syncwarp(); /* the buffer is reused by the next fragment */
        }
}

extern "C" void matmul_v8(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    kl_note_rung("v8_wmma");
    (void)t; /* fp16 only: the rung's dtypes say so */
    const bool vec_a = d.k % 8 == 0 && aligned16(a), vec_b = d.n % 8 == 0 && aligned16(b);
    const dim3 grid(matmul_blocks(d.n, BN), matmul_blocks(d.m, BM));
    matmul_wmma<<<grid, WARPS * 32, 0, s>>>((const __half *)a, (const __half *)b, (__half *)c,
                                            d.m, d.n, d.k, vec_a, vec_b);
    LAUNCH_CHECK();
}
