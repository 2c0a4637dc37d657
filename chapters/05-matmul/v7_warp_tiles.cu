/* v7, warp tiles and double-buffered shared memory.
 *
 * Idea: two changes to v6, both about waiting.
 *   - Warp tiles. v6 hands each thread an 8 x 8 block of C in a row of threads, so a warp's 32
 *     threads read 32 different 8-float runs of B's tile and 2 of A's. Here each of the 8 warps
 *     owns a 64 x 32 tile of C, and lane (r, c) of a 8 x 4 grid of lanes computes the four 4 x 4
 *     sub-blocks at rows 4r and 32 + 4r, columns 4c and 16 + 4c of it. At each step along K a
 *     warp then reads 64 floats of A and 32 of B from shared memory, as 16-byte loads that are
 *     either the same address (a broadcast) or neighbouring ones: no bank conflicts, 4 loads
 *     for 64 FMAs.
 *   - Double buffering. Two copies of each tile in shared memory: while the warps multiply
 *     from one, the next tile's global loads are already in flight into registers, and are
 *     stored into the other copy after the multiplications. One barrier per tile of K instead
 *     of two, and the global loads' latency hides behind 16 steps of arithmetic.
 * Tiles are 128 x 128 of C and 16 deep in K; 256 threads; A's tile stored transposed and the
 * loads 4 wide where the rows allow, element by element at the edges (v6's helpers).
 * What changed from v6: the thread-to-output map (warp tiles), a second buffer, BK 8 -> 16.
 * Expected: 85-95% of cuBLAS SGEMM at 4096 and 8192 in fp32; the best ordinary-core rung.
 * Limits: as v1; the fast path needs K % 4 == 0 and N % 4 == 0. */
#include "matmul.cuh"

#define BM 128
#define BN 128
#define BK 16
#define WM 64 /* a warp's tile of C */
#define WN 32
#define THREADS 256 /* 8 warps: 2 down, 4 across */
#define LOADS 2     /* 4-element runs of each tile a thread loads: 128 x 16 / (256 x 4) */

struct tile_regs {
    float4 a[LOADS], b[LOADS];
};

/* The thread's runs of the tiles at depth p0: A rows idx / 4, columns 4 (idx % 4); B rows
 * idx / 32, columns 4 (idx % 32), for idx = t and t + 256. */
template <typename T>
__device__ __forceinline__ tile_regs load_tiles(const T *a, const T *b, int64_t m, int64_t n,
                                                int64_t k, int64_t row0, int64_t col0,
                                                int64_t p0, bool vec_a, bool vec_b)
{
    tile_regs r;
#pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int idx = threadIdx.x + l * THREADS;
        r.a[l] = matmul_load4(a, m, k, row0 + idx / (BK / 4), p0 + (idx % (BK / 4)) * 4, vec_a);
        r.b[l] = matmul_load4(b, k, n, p0 + idx / (BN / 4), col0 + (idx % (BN / 4)) * 4, vec_b);
    }
    return r;
}

__device__ __forceinline__ void store_tiles(const tile_regs &r, float (*a_tile)[BM],
                                            float (*b_tile)[BN])
{
#pragma unroll
    for (int l = 0; l < LOADS; l++) {
        const int idx = threadIdx.x + l * THREADS;
        const int ar = idx / (BK / 4), ac = (idx % (BK / 4)) * 4; /* A transposed */
        a_tile[ac + 0][ar] = r.a[l].x;
        a_tile[ac + 1][ar] = r.a[l].y;
        a_tile[ac + 2][ar] = r.a[l].z;
        a_tile[ac + 3][ar] = r.a[l].w;
        *reinterpret_cast<float4 *>(&b_tile[idx / (BN / 4)][(idx % (BN / 4)) * 4]) = r.b[l];
    }
}

template <typename T>
__global__ void __launch_bounds__(THREADS)
    matmul_warp_tiles(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                      int64_t m, int64_t n, int64_t k, bool vec_a, bool vec_b, bool vec_c)
{
    __shared__ __align__(16) float a_tiles[2][BK][BM]; /* a_tiles[s][q][i] = A[i][p0 + q] */
    __shared__ __align__(16) float b_tiles[2][BK][BN];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = (int64_t)blockIdx.y * BM, col0 = (int64_t)blockIdx.x * BN;
    const int warp_row = (warp / (BN / WN)) * WM, warp_col = (warp % (BN / WN)) * WN;
    const int lane_row = (lane / 4) * 4, lane_col = (lane % 4) * 4;
    const int64_t tiles = (k + BK - 1) / BK;

    float acc[8][8] = {}; /* rows lane_row + {0..3, 32..35}, cols lane_col + {0..3, 16..19} */
    store_tiles(load_tiles(a, b, m, n, k, row0, col0, 0, vec_a, vec_b), a_tiles[0], b_tiles[0]);
    __syncthreads();
    for (int64_t tile = 0; tile < tiles; tile++) {
        const int cur = (int)(tile & 1);
        tile_regs next;
        if (tile + 1 < tiles)
            next = load_tiles(a, b, m, n, k, row0, col0, (tile + 1) * BK, vec_a, vec_b);
#pragma unroll
        for (int q = 0; q < BK; q++) {
            float a_reg[8], b_reg[8];
            *reinterpret_cast<float4 *>(&a_reg[0]) =
                *reinterpret_cast<const float4 *>(&a_tiles[cur][q][warp_row + lane_row]);
            *reinterpret_cast<float4 *>(&a_reg[4]) =
                *reinterpret_cast<const float4 *>(&a_tiles[cur][q][warp_row + 32 + lane_row]);
            *reinterpret_cast<float4 *>(&b_reg[0]) =
                *reinterpret_cast<const float4 *>(&b_tiles[cur][q][warp_col + lane_col]);
            *reinterpret_cast<float4 *>(&b_reg[4]) =
                *reinterpret_cast<const float4 *>(&b_tiles[cur][q][warp_col + 16 + lane_col]);
#pragma unroll
            for (int r = 0; r < 8; r++)
#pragma unroll
                for (int s = 0; s < 8; s++)
                    acc[r][s] = fmaf(a_reg[r], b_reg[s], acc[r][s]);
        }
        if (tile + 1 < tiles)
            store_tiles(next, a_tiles[cur ^ 1], b_tiles[cur ^ 1]);
        __syncthreads(); /* the next tile is in place; this one may be overwritten */
    }
#pragma unroll
    for (int r = 0; r < 8; r++) {
        const int64_t i = row0 + warp_row + (r < 4 ? lane_row + r : 32 + lane_row + r - 4);
#pragma unroll
        for (int s = 0; s < 8; s += 4) {
            const int64_t j = col0 + warp_col + (s < 4 ? lane_col : 16 + lane_col);
            matmul_store4(c, m, n, i, j, &acc[r][s], vec_c);
        }
    }
}

template <typename T>
static void launch(const T *a, const T *b, T *c, struct matmul_dims d, cudaStream_t s)
{
    const dim3 grid(matmul_blocks(d.n, BN), matmul_blocks(d.m, BM));
    matmul_warp_tiles<T><<<grid, THREADS, 0, s>>>(a, b, c, d.m, d.n, d.k,
                                                  matmul_rows_of_4(a, d.k, sizeof(T)),
                                                  matmul_rows_of_4(b, d.n, sizeof(T)),
                                                  matmul_rows_of_4(c, d.n, sizeof(T)));
    LAUNCH_CHECK();
}

extern "C" void matmul_v7(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    if (t == DT_FP32)
        launch((const float *)a, (const float *)b, (float *)c, d, s);
    else
        launch((const __half *)a, (const __half *)b, (__half *)c, d, s);
}
