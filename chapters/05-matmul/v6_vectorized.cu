/* v6, vectorised loads and a transposed A tile.
 *
 * Idea: v5's inner loop reads A's tile down a column (8 rows, one bank apart by BK = 8 floats:
 * conflicts) and every global load moves 4 bytes. Here A's tile is stored transposed (k-major,
 * BK x BM), so a thread's 8 values of A at step q are 8 neighbouring floats, read as two 16-byte
 * shared loads, like its 8 values of B. Global loads move 4 elements at once (16 bytes of fp32,
 * 8 of fp16) where the row allows it: K a multiple of 4 for A, N for B, and the matrix 16-byte
 * aligned. Elsewhere, at the edges and for other shapes, the same loads go element by element
 * with bounds, so any M, N, K still works. C is stored 4 elements at a time on the same terms.
 * What changed from v5: A's tile transposed; 4-wide global and shared loads and stores.
 * Expected: fewer load instructions (a quarter of the global ones, a quarter of the shared
 * ones) and no bank conflicts on A: 60-70% of cuBLAS SGEMM at 4096.
 * Limits: as v1; the fast path needs K % 4 == 0 and N % 4 == 0. */
#include "matmul.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define THREADS (BM / TM * (BN / TN)) /* 256 */

template <typename T>
__global__ void __launch_bounds__(THREADS, 2) /* two blocks an SM: at most 128 registers */
    matmul_vectorized(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                      int64_t m, int64_t n, int64_t k, bool vec_a, bool vec_b, bool vec_c)
{
    __shared__ __align__(16) float a_tile[BK][BM]; /* transposed: a_tile[q][i] = A[i][p0 + q] */
    __shared__ __align__(16) float b_tile[BK][BN];
    const int t = threadIdx.x;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int out_row = (t / (BN / TN)) * TM, out_col = (t % (BN / TN)) * TN;
    /* Each thread loads 4 elements of each tile: A row t / 2, columns (t % 2) * 4 ..; B row
     * t / 32, columns (t % 32) * 4 ... */
    const int a_row = t / (BK / 4), a_col = (t % (BK / 4)) * 4;
    const int b_row = t / (BN / 4), b_col = (t % (BN / 4)) * 4;
    float acc[TM][TN] = {};
    for (int64_t p0 = 0; p0 < k; p0 += BK) {
        const float4 av = matmul_load4(a, m, k, row0 + a_row, p0 + a_col, vec_a);
        a_tile[a_col + 0][a_row] = av.x;
        a_tile[a_col + 1][a_row] = av.y;
        a_tile[a_col + 2][a_row] = av.z;
        a_tile[a_col + 3][a_row] = av.w;
        *reinterpret_cast<float4 *>(&b_tile[b_row][b_col]) =
            matmul_load4(b, k, n, p0 + b_row, col0 + b_col, vec_b);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < BK; q++) {
            float a_reg[TM], b_reg[TN];
#pragma unroll
            for (int r = 0; r < TM; r += 4)
                *reinterpret_cast<float4 *>(&a_reg[r]) =
                    *reinterpret_cast<const float4 *>(&a_tile[q][out_row + r]);
#pragma unroll
            for (int s = 0; s < TN; s += 4)
                *reinterpret_cast<float4 *>(&b_reg[s]) =
                    *reinterpret_cast<const float4 *>(&b_tile[q][out_col + s]);
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
        for (int s = 0; s < TN; s += 4)
            matmul_store4(c, m, n, row0 + out_row + r, col0 + out_col + s, &acc[r][s], vec_c);
}

template <typename T>
static void launch(const T *a, const T *b, T *c, struct matmul_dims d, cudaStream_t s)
{
    const dim3 grid(matmul_blocks(d.n, BN), matmul_blocks(d.m, BM));
    matmul_vectorized<T><<<grid, THREADS, 0, s>>>(a, b, c, d.m, d.n, d.k,
                                                  matmul_rows_of_4(a, d.k, sizeof(T)),
                                                  matmul_rows_of_4(b, d.n, sizeof(T)),
                                                  matmul_rows_of_4(c, d.n, sizeof(T)));
    LAUNCH_CHECK();
}

extern "C" void matmul_v6(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    kl_note_rung("v6_vectorized");
    if (t == DT_FP32)
        launch((const float *)a, (const float *)b, (float *)c, d, s);
    else
        launch((const __half *)a, (const __half *)b, (__half *)c, d, s);
}
