/* v9, mma.sync fed by ldmatrix from a multi-stage cp.async pipeline.
 *
 * Idea: v8 multiplies on the tensor cores but spends much of its time waiting. At each step
 * along K it loads the next tiles from global memory, waits for them, and only then
 * multiplies; and WMMA's fragments are opaque, so how they are read from shared memory is not
 * ours to choose. This rung goes down to the instructions WMMA is built from, and removes
 * both waits:
 *   - mma.sync.m16n8k16 (PTX) adds the product of a 16 x 16 tile of A and a 16 x 8 tile of B
 *     to a 16 x 8 tile of fp32 sums: one HMMA instruction for the whole warp. Its operands
 *     are ordinary registers in a layout the PTX ISA documents: lane l holds 2-element runs
 *     of rows l / 4 and l / 4 + 8, starting at column 2 (l % 4) (and 8 columns on, for A).
 *     Knowing the layout is what lets us feed it efficiently.
 *   - ldmatrix reads four 8 x 8 tiles of 16-bit elements from shared memory in one warp-wide
 *     instruction: each lane gives the address of one 16-byte row and receives exactly the
 *     pairs mma.sync expects. x4 gives a whole A operand; x4.trans, which transposes each 8 x 8
 *     tile on the way, gives B's operands for two n8 tiles straight from B's K x N row-major
 *     tile. No shuffles and no conversions: one instruction for 16 x 16 elements.
 *   - A swizzled shared layout. The 8 lanes that address one ldmatrix tile read 8 rows at the
 *     same column. Stored plainly, B's rows of 512 bytes put those 8 reads on the same 4 banks
 *     (an 8-way conflict) and A's rows of 64 bytes on two sets of 4 (4-way). v8 pads every
 *     row by 16 bytes, which staggers them but costs shared memory (a quarter more for A).
 *     Here chunk c of row r (16 bytes) is stored at position c XOR (3 bits of r that change
 *     from one 128-byte line to the next): the 8 rows of an ldmatrix tile then fall on 8
 *     different 16-byte bank groups, covering all 32 banks, and the cp.async stores, 8
 *     consecutive chunks of one 128-byte line, are only permuted within that line. Both are
 *     conflict-free, and no byte is wasted.
 *   - cp.async copies 16 bytes from global to shared memory without passing through registers
 *     and without stalling the thread. A ring of S stages keeps the loads of tile t + S - 1 in
 *     flight while tile t is multiplied: commit_group closes one tile's copies, and
 *     wait_group S - 2 waits only for the oldest tile. The global latency hides behind S - 1
 *     tiles of arithmetic, and one barrier per tile is enough.
 * Tiles: a block computes 128 x 256 of C with 8 warps (2 down, 4 across); each warp computes
 * 64 x 64 as 4 x 8 mma tiles (128 fp32 sums per thread). K advances by 32 per tile, two k16
 * steps, with 4 stages of A (128 x 32) and B (32 x 256) in shared memory: 4 x 24 KB = 96 KB,
 * one block per SM. Each step's operands are loaded while the previous step is multiplied,
 * including across tiles, so ldmatrix latency hides behind 32 HMMAs.
 * Edges: where K (for A) or N (for B) is a multiple of 8 and the matrix is 16-byte aligned,
 * each 16-byte chunk lies wholly inside the matrix or wholly outside it, and the chunks
 * outside use cp.async's zero-fill form (source size 0). Otherwise the tile is staged element
 * by element, 0 outside, into the same swizzled layout. C is stored from the accumulators in
 * pairs where N is even and element by element elsewhere; only elements inside C are written.
 * What changed from v8: mma.sync and ldmatrix instead of WMMA; a swizzled instead of a padded
 * layout; a 4-stage cp.async ring instead of load, wait, multiply; a 128 x 256 block tile of
 * 64 x 64 warp tiles (v8: 128 x 128 of 64 x 32); and blocks taken in groups of 8 block rows,
 * so that the blocks running at the same time share their tiles of A and B in L2.
 * Expected: per k16 step a warp reads 4 KB of shared memory (4 ldmatrix.x4 for A, 4 for B)
 * for 32 HMMAs, 64 K multiply-adds: one byte per 16 multiply-adds, against one per 10.7 for
 * v8's 64 x 32 warp tiles. Each element of A that a block loads serves 256 multiply-adds and
 * each of B 128 (v8: 128 and 128): 24 KB per tile for 1 M multiply-adds. The copies are issued
 * three tiles ahead, about 1.5 microseconds of arithmetic at the target rate, which is more
 * than a DRAM round trip. Prediction: at least 70% of cuBLAS fp16 at 4096 and 8192 on an
 * H200. The rest needs Hopper's wgmma and TMA (v10).
 * Limits: fp16 only; compute capability 8.0 or newer (cp.async, m16n8k16). The fast path needs
 * K % 8 == 0 for A, N % 8 == 0 for B and 16-byte aligned matrices; the paired stores of C need
 * N even. Any M, N and K work, the other cases more slowly.
 * Knobs (-D at build time, for tuning): V9_BM, V9_BN, V9_BK, V9_WARPS_M, V9_WARPS_N,
 * V9_STAGES, V9_GROUP_M, V9_MIN_BLOCKS; the defaults are the tiles above. */
#include "async_copy.cuh"
#include "launch.cuh"
#include "matmul.cuh"

#ifndef V9_BM
#define V9_BM 128 /* block tile of C */
#endif
#ifndef V9_BN
#define V9_BN 256
#endif
#ifndef V9_BK
#define V9_BK 32 /* depth of one stage */
#endif
#ifndef V9_WARPS_M
#define V9_WARPS_M 2 /* the block's warps: V9_WARPS_M down, V9_WARPS_N across */
#endif
#ifndef V9_WARPS_N
#define V9_WARPS_N 4
#endif
#ifndef V9_STAGES
#define V9_STAGES 4 /* tiles of A and B in shared memory at once */
#endif
#ifndef V9_GROUP_M
#define V9_GROUP_M 8 /* block rows run side by side for L2 reuse; 1 = plain row order */
#endif
#ifndef V9_MIN_BLOCKS
#define V9_MIN_BLOCKS 1 /* blocks per SM asked of the register allocator */
#endif

#define THREADS (V9_WARPS_M * V9_WARPS_N * 32)
#define WARP_M (V9_BM / V9_WARPS_M) /* a warp's tile of C */
#define WARP_N (V9_BN / V9_WARPS_N)
#define MMA_M (WARP_M / 16) /* mma tiles in it: 16 x 8 each */
#define MMA_N (WARP_N / 8)
#define K_STEPS (V9_BK / 16)        /* k16 steps in a stage */
#define A_CHUNKS (V9_BK / 8)        /* 16-byte chunks in a row of A's tile */
#define B_CHUNKS (V9_BN / 8)        /* ... of B's tile */
#define A_BYTES (V9_BM * V9_BK * 2) /* one stage of A in shared memory */
#define B_BYTES (V9_BK * V9_BN * 2)
#define STAGE_BYTES (A_BYTES + B_BYTES)
#define SMEM_BYTES (V9_STAGES * STAGE_BYTES)
#define A_LOADS (V9_BM * A_CHUNKS / THREADS) /* chunks a thread copies a stage */
#define B_LOADS (V9_BK * B_CHUNKS / THREADS)

static_assert(V9_BM % (16 * V9_WARPS_M) == 0 && V9_BN % (16 * V9_WARPS_N) == 0,
              "warp tiles must be whole 16 x 16 mma pairs");
static_assert(V9_BK % 32 == 0, "two k16 steps a stage at least: the pipeline waits on the last");
static_assert(V9_STAGES >= 2, "a ring needs two stages");
static_assert((V9_BM * A_CHUNKS) % THREADS == 0 && (V9_BK * B_CHUNKS) % THREADS == 0,
              "every thread copies the same number of chunks");
static_assert((B_CHUNKS & (B_CHUNKS - 1)) == 0 && (A_CHUNKS & (A_CHUNKS - 1)) == 0,
              "the swizzle needs rows of a power of 2 chunks");

/* ---- The PTX instructions, one helper each. Shared addresses are 32-bit .shared ones. ---- */

/* 16 bytes global -> shared, asynchronously; bytes past src_bytes (0 or 16 here) are zeros. */
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* A plain 16-byte store to shared memory, for the chunks gathered element by element. */
__device__ __forceinline__ void st_shared_16(uint32_t dst, uint4 v)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

/* Four 8 x 8 tiles of 16-bit elements; lanes 8i .. 8i + 7 address the rows of tile i, and
 * r[i] receives the lane's pair of tile i: row lane / 4, columns 2 (lane % 4) and + 1. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* The same, each tile transposed: r[i] holds rows 2 (lane % 4) and + 1 of column lane / 4. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* acc (16 x 8, fp32) += a (16 x 16, fp16, row-major) b (16 x 8, fp16, column-major). */
__device__ __forceinline__ void mma_16816(float acc[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* ---- The shared layout. ---- */

/* Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows are `chunks` chunks
 * long (a power of 2). The chunk index is XORed with the number of the row's 128-byte line
 * (128 bytes: once across the 32 banks), modulo 8, or modulo `chunks` when a line holds
 * several rows: any 8 consecutive rows at one logical chunk then fall on 8 different 16-byte
 * bank groups, and the chunks of a line only change places within it. */
__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int chunks)
{
    const int rows_per_line = chunks >= 8 ? 1 : 8 / chunks;
    const int mask = chunks >= 8 ? 7 : chunks - 1;
    return (uint32_t)(row * chunks + (chunk ^ (row / rows_per_line & mask))) * 16;
}

/* ---- Global -> shared: one stage. ---- */

/* Where this block's tiles start and how each matrix may be read. */
struct block_view {
    const __half *a, *b;
    int64_t m, n, k;
    int64_t row0, col0; /* the block's tile of C */
    bool vec_a, vec_b;  /* 16-byte chunks (cp.async) or element by element */
};

/* 8 elements x[row][col .. col + 7] of a rows x cols matrix, 0 outside it, as 16 bytes. */
__device__ __forceinline__ uint4 gather8(const __half *x, int64_t rows, int64_t cols,
                                         int64_t row, int64_t col)
{
    pack16<__half> p;
#pragma unroll
    for (int e = 0; e < 8; e++)
        p.e[e] = row < rows && col + e < cols ? x[row * cols + col + e] : __float2half(0.f);
    return p.raw;
}

/* One matrix's share of a stage: `count` chunks of a rows x cols matrix, chunk idx of the
 * tile at (row0 + idx / chunks, col0 + 8 (idx % chunks)), stored swizzled at `stage`.
 * With cols % 8 == 0 and an aligned matrix, cp.async: a chunk that starts inside the matrix
 * then ends inside it, so the only partial case is "wholly outside", copied as 16 zero bytes
 * from a valid address (the matrix's first). Otherwise element by element through registers,
 * one chunk at a time: this path is for odd shapes, and must not cost the fast one registers. */
__device__ __forceinline__ void load_tile(uint32_t smem_base, uint32_t stage,
                                          const __half *x, int64_t rows, int64_t cols,
                                          int64_t row0, int64_t col0, int chunks, int count,
                                          bool vec)
{
    if (vec) {
#pragma unroll
        for (int l = 0; l < count; l++) {
            const int idx = threadIdx.x + l * THREADS, r = idx / chunks, ch = idx % chunks;
            const int64_t row = row0 + r, col = col0 + ch * 8;
            const bool inside = row < rows && col < cols;
            cp_async_16(smem_base + stage + swizzled(r, ch, chunks),
                        inside ? x + row * cols + col : x, inside ? 16 : 0);
        }
    } else {
#pragma unroll 1
        for (int l = 0; l < count; l++) {
            const int idx = threadIdx.x + l * THREADS, r = idx / chunks, ch = idx % chunks;
            st_shared_16(smem_base + stage + swizzled(r, ch, chunks),
                         gather8(x, rows, cols, row0 + r, col0 + ch * 8));
        }
    }
}

/* Issues the copies of the tiles of A and B at depth p0 into stage `slot`. Thread t copies
 * chunks t, t + THREADS, ...: consecutive threads along a row, so the reads are coalesced. */
__device__ __forceinline__ void load_stage(const struct block_view *v, uint32_t smem_base,
                                           int slot, int64_t p0)
{
    const uint32_t a_stage = slot * STAGE_BYTES, b_stage = a_stage + A_BYTES;
    load_tile(smem_base, a_stage, v->a, v->m, v->k, v->row0, p0, A_CHUNKS, A_LOADS,
              v->vec_a);
    load_tile(smem_base, b_stage, v->b, v->k, v->n, p0, v->col0, B_CHUNKS, B_LOADS,
              v->vec_b);
}

/* ---- Shared -> registers -> tensor cores. ---- */

/* One k16 step's operands for the warp's 64 x 64 tile: MMA_M tiles of A, MMA_N of B. */
struct fragments {
    uint32_t a[MMA_M][4];
    uint32_t b[MMA_N][2];
};

/* Loads step `ks` of stage `slot`. For ldmatrix, lane l addresses row l % 16 of a 16-row
 * block at chunk l / 16: A's 4 tiles come out as (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
 * (8-15, 8-15), the a0..a3 of mma.sync; B's rows are k, so its 4 transposed tiles are b0, b1
 * of one n8 tile and b0, b1 of the next. */
__device__ __forceinline__ void load_fragments(struct fragments *f, uint32_t smem_base, int slot,
                                               int ks, int warp_row, int warp_col)
{
    const int lane = threadIdx.x % 32, lrow = lane % 16, lchunk = lane / 16;
    const uint32_t a_stage = smem_base + slot * STAGE_BYTES, b_stage = a_stage + A_BYTES;
#pragma unroll
    for (int i = 0; i < MMA_M; i++)
        ldmatrix_x4(f->a[i], a_stage + swizzled(warp_row + i * 16 + lrow, ks * 2 + lchunk,
                                                A_CHUNKS));
#pragma unroll
    for (int j = 0; j < MMA_N; j += 2) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, b_stage + swizzled(ks * 16 + lrow, warp_col / 8 + j + lchunk,
                                                B_CHUNKS));
        f->b[j][0] = r[0];
        f->b[j][1] = r[1];
        f->b[j + 1][0] = r[2];
        f->b[j + 1][1] = r[3];
    }
}

__device__ __forceinline__ void mma_warp_tile(float acc[MMA_M][MMA_N][4], const struct fragments *f)
{
#pragma unroll
    for (int i = 0; i < MMA_M; i++)
#pragma unroll
        for (int j = 0; j < MMA_N; j++)
            mma_16816(acc[i][j], f->a[i], f->b[j]);
}

/* ---- Registers -> C. ---- */

/* The accumulators of mma tile (i, j): lane l holds rows l / 4 and l / 4 + 8, columns
 * 2 (l % 4) and + 1. Pairs as one __half2 where N is even (then col < n means col + 1 < n). */
__device__ __forceinline__ void store_c(__half *c, int64_t m, int64_t n, int64_t row, int64_t col,
                                        float v0, float v1, bool vec_c)
{
    if (row >= m || col >= n)
        return;
    if (vec_c) {
        *reinterpret_cast<__half2 *>(c + row * n + col) = __floats2half2_rn(v0, v1);
        return;
    }
    c[row * n + col] = __float2half_rn(v0);
    if (col + 1 < n)
        c[row * n + col + 1] = __float2half_rn(v1);
}

/* ---- The kernel. ---- */

/* The block's tile of C. Blocks are launched in order of blockIdx.x fastest; taken plainly,
 * the blocks running at one time cover one or two block rows and all of B. Renumbered, they
 * cover V9_GROUP_M block rows by a few block columns: fewer distinct tiles of A and B at once,
 * more of them found in L2. */
__device__ __forceinline__ void block_tile(int *tile_m, int *tile_n)
{
    const int tiles_m = gridDim.y, tiles_n = gridDim.x;
    const int id = blockIdx.y * tiles_n + blockIdx.x;
    const int per_group = V9_GROUP_M * tiles_n, first_m = id / per_group * V9_GROUP_M;
    const int group_m = min(tiles_m - first_m, V9_GROUP_M);
    *tile_m = first_m + id % per_group % group_m;
    *tile_n = id % per_group / group_m;
}

__global__ void __launch_bounds__(THREADS, V9_MIN_BLOCKS)
    matmul_mma_sync(const __half *__restrict__ a, const __half *__restrict__ b,
                    __half *__restrict__ c, int64_t m, int64_t n, int64_t k, bool vec_a,
                    bool vec_b, bool vec_c)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / V9_WARPS_N * WARP_M, warp_col = warp % V9_WARPS_N * WARP_N;
    int tile_m, tile_n;
    block_tile(&tile_m, &tile_n);
    const struct block_view v = {a, b, m, n, k, (int64_t)tile_m * V9_BM,
                                 (int64_t)tile_n * V9_BN, vec_a, vec_b};
    const int tiles = (int)((k + V9_BK - 1) / V9_BK); /* K < 2^31 */

    float acc[MMA_M][MMA_N][4] = {};
    struct fragments f[2];

    /* Fill the ring but one stage; each stage is one commit group, even when empty, so that
     * "S - 2 groups pending" always means "the oldest tile has landed". */
#pragma unroll
    for (int s = 0; s < V9_STAGES - 1; s++) {
        if (s < tiles)
            load_stage(&v, smem_base, s, (int64_t)s * V9_BK);
        kl_copies_commit();
    }
    kl_copies_wait<V9_STAGES - 2>();
    __syncthreads();
    load_fragments(&f[0], smem_base, 0, 0, warp_row, warp_col);

    int read_slot = 0, write_slot = V9_STAGES - 1;
    for (int tile = 0; tile < tiles; tile++) {
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ks++) {
            if (ks == K_STEPS - 1) {
                /* The next tile's first fragments are loaded below: wait for its copies (this
                 * thread's), then for everyone's. Past the barrier no warp reads the stage
                 * finished last, so the copies issued at ks == 0 may overwrite it. */
                kl_copies_wait<V9_STAGES - 2>();
                __syncthreads();
                read_slot = read_slot + 1 == V9_STAGES ? 0 : read_slot + 1;
            }
            load_fragments(&f[(ks + 1) % 2], smem_base, read_slot, (ks + 1) % K_STEPS,
                           warp_row, warp_col);
            if (ks == 0) {
                if (tile + V9_STAGES - 1 < tiles)
                    load_stage(&v, smem_base, write_slot,
                               (int64_t)(tile + V9_STAGES - 1) * V9_BK);
                kl_copies_commit();
                write_slot = write_slot + 1 == V9_STAGES ? 0 : write_slot + 1;
            }
            mma_warp_tile(acc, &f[ks % 2]);
        }
    }
    kl_copies_wait<0>(); /* nothing is left in flight, but leave no copy behind the exit */

    const int64_t row = v.row0 + warp_row + lane / 4, col = v.col0 + warp_col + lane % 4 * 2;
#pragma unroll
    for (int i = 0; i < MMA_M; i++)
#pragma unroll
        for (int j = 0; j < MMA_N; j++) {
            store_c(c, m, n, row + i * 16, col + j * 8, acc[i][j][0], acc[i][j][1], vec_c);
            store_c(c, m, n, row + i * 16 + 8, col + j * 8, acc[i][j][2], acc[i][j][3], vec_c);
        }
#else
    /* cp.async and m16n8k16 need sm_80; the rung table never launches this below 8.0. */
    (void)a, (void)b, (void)c, (void)m, (void)n, (void)k, (void)vec_a, (void)vec_b, (void)vec_c;
#endif
}

extern "C" void matmul_v9(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    (void)t; /* fp16 only: the rung's dtypes say so */
    static size_t room = 0; /* above 48 KB of dynamic shared memory a kernel must opt in */
    if (!room)
        room = kl_grant_shared_memory((const void *)matmul_mma_sync);
    const bool vec_a = d.k % 8 == 0 && aligned16(a), vec_b = d.n % 8 == 0 && aligned16(b);
    const bool vec_c = d.n % 2 == 0 && (uintptr_t)c % 4 == 0;
    const dim3 grid(matmul_blocks(d.n, V9_BN), matmul_blocks(d.m, V9_BM));
    matmul_mma_sync<<<grid, THREADS, SMEM_BYTES, s>>>((const __half *)a, (const __half *)b,
                                                     (__half *)c, d.m, d.n, d.k, vec_a, vec_b,
                                                     vec_c);
    LAUNCH_CHECK();
}
