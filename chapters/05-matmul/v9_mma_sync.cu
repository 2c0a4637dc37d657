/* v9, mma.sync fed by ldmatrix from a multi-stage cp.async pipeline.
 *
 * Idea: go below WMMA to the instructions it is built from. mma.sync.m16n8k16 adds a 16 x 16
 * tile of A times a 16 x 8 tile of B to 16 x 8 fp32 sums, one HMMA for the warp, its operands
 * in ordinary registers in a layout the PTX ISA documents. ldmatrix.x4 reads four 8 x 8 tiles
 * from shared memory in one instruction, each lane naming one 16-byte row and receiving exactly
 * the pairs mma.sync expects (.trans gives B's operands from its row-major K x N tile). Shared
 * memory is swizzled, not padded: 16-byte chunk c of row r is stored at c XOR (r mod 8), so an
 * ldmatrix tile's 8 rows fall on 8 different bank groups and the cp.async stores only change
 * places within a 128-byte line. A ring of 4 stages keeps tile t + 3 in flight while tile t is
 * multiplied: one wait and one barrier a tile.
 * What changed from v8: mma.sync and ldmatrix instead of WMMA; a swizzled instead of a padded
 * layout; the cp.async ring instead of load, wait, multiply; 128 x 256 block tiles of 64 x 64
 * warp tiles, 64 deep (192 KB, 252 registers: one block an SM); blocks taken in groups of 8
 * block rows, to share A and B in L2. Copies and ldmatrix addresses are planned once a thread
 * (copy_plan, fragment_offsets), and the copies issue between the rows of HMMAs, not in a burst.
 * Bottleneck removed: v8's wait for each tile's loads, and WMMA's opaque fragments.
 * Expected: a warp reads 4 KB of shared memory for 32 HMMAs (a byte per 16 multiply-adds, v8 one
 * per 10.7), and copies three tiles ahead hide DRAM: at least 70% of cuBLAS fp16 at 4096, 8192.
 * Limits: fp16 only; compute capability 8.0 on. The fast kernel needs K % 8 == 0, N % 8 == 0 and
 * 16-byte aligned A and B, else a second kernel stages element by element (matmul_mma_sync_any:
 * any shape, slowly); C is stored in pairs where N is even. Knobs: the block below.
 * Measured (H200): 449 TFLOP/s at 4096 (0.59x cuBLAS) and 458 at 8192 (0.63x), short of the 70%
 * predicted; cuBLAS's own mma.sync kernel (vendor_mma_sync) makes 0.63x and 0.56x. */
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
#define V9_BK 64 /* depth of one stage */
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

/* 16 bytes global -> shared, asynchronously; where `copy` is false, 16 zero bytes, and src is
 * not read (the copy's ignore-source predicate), so it may point anywhere. */
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool copy)
{
    asm volatile("{\n .reg .pred skip;\n setp.eq.u32 skip, %2, 0;\n"
                 " cp.async.cg.shared.global [%0], [%1], 16, skip;\n}\n" ::"r"(dst),
                 "l"(src), "r"((unsigned)copy)
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
 * tile at (row0 + idx / chunks, col0 + 8 (idx % chunks)), stored swizzled from shared address
 * `dst` on.
 * With cols % 8 == 0 and an aligned matrix, cp.async: a chunk that starts inside the matrix
 * then ends inside it, so the only partial case is "wholly outside", written as 16 zero bytes
 * without a read. Otherwise element by element through registers,
 * one chunk at a time: this path is for odd shapes, and must not cost the fast one registers. */
__device__ __forceinline__ void load_tile(uint32_t dst, const __half *x, int64_t rows, int64_t cols,
                                          int64_t row0, int64_t col0, int chunks, int count,
                                          bool vec)
{
    if (vec) {
#pragma unroll
        for (int l = 0; l < count; l++) {
            const int idx = threadIdx.x + l * THREADS, r = idx / chunks, ch = idx % chunks;
            const int64_t row = row0 + r, col = col0 + ch * 8;
            const bool inside = row < rows && col < cols;
            /* src is not read outside; pointing it at x there spares registers (96 bytes
             * spilled against 160 with the address computed for every chunk) */
            cp_async_16(dst + swizzled(r, ch, chunks),
                        inside ? x + row * cols + col : x, inside);
        }
    } else {
#pragma unroll 1
        for (int l = 0; l < count; l++) {
            const int idx = threadIdx.x + l * THREADS, r = idx / chunks, ch = idx % chunks;
            st_shared_16(dst + swizzled(r, ch, chunks),
                         gather8(x, rows, cols, row0 + r, col0 + ch * 8));
        }
    }
}

/* Issues the copies of the tiles of A and B at depth p0 into the stage at shared address
 * `stage`, element by element where a matrix is not read in chunks. Thread t copies chunks t,
 * t + THREADS, ...: consecutive threads along a row, so the reads are coalesced. */
__device__ __forceinline__ void load_stage(const struct block_view *v, uint32_t stage, int64_t p0)
{
    load_tile(stage, v->a, v->m, v->k, v->row0, p0, A_CHUNKS, A_LOADS, v->vec_a);
    load_tile(stage + A_BYTES, v->b, v->k, v->n, p0, v->col0, B_CHUNKS, B_LOADS, v->vec_b);
}

/* The fast path's copies, planned once. Along K a thread's chunks only move: A's by V9_BK
 * elements a tile, B's by V9_BK rows. So the thread keeps one pointer into each matrix, the
 * distance between its chunks, and what lies inside M and N; a tile's copy then costs an add
 * and a compare, and none of the index arithmetic that load_tile repeats on every tile. */
struct copy_plan {
    const __half *a, *b;    /* the thread's first chunk of the next tile to copy */
    int64_t a_step, b_step; /* elements between its chunks: THREADS / A_CHUNKS rows of A, ... */
    uint32_t a_dst, b_dst;  /* its first chunk's place in a stage (the others: fixed strides) */
    unsigned a_rows_in;     /* bit l: chunk l's row of A lies inside M */
    bool b_cols_in;         /* its chunks of B lie inside N (the same columns for all) */
    int a_col, b_row;       /* its chunks' depth within A's tile, and first row within B's */
};

#define A_ROWS_APART (THREADS / A_CHUNKS) /* rows of A's tile between a thread's chunks */
#define B_ROWS_APART (THREADS / B_CHUNKS)

__device__ __forceinline__ struct copy_plan plan_copies(const struct block_view *v)
{
    const int t = threadIdx.x;
    const int a_row = t / A_CHUNKS, a_chunk = t % A_CHUNKS;
    const int b_row = t / B_CHUNKS, b_chunk = t % B_CHUNKS;
    struct copy_plan p;
    p.a = v->a + (v->row0 + a_row) * v->k + a_chunk * 8;
    p.b = v->b + b_row * v->n + v->col0 + b_chunk * 8;
    p.a_step = A_ROWS_APART * v->k;
    p.b_step = B_ROWS_APART * v->n;
    p.a_dst = swizzled(a_row, a_chunk, A_CHUNKS);
    p.b_dst = A_BYTES + swizzled(b_row, b_chunk, B_CHUNKS);
    p.a_rows_in = 0;
#pragma unroll
    for (int l = 0; l < A_LOADS; l++)
        p.a_rows_in |= (v->row0 + a_row + l * A_ROWS_APART < v->m ? 1u : 0u) << l;
    p.b_cols_in = v->col0 + b_chunk * 8 < v->n;
    p.a_col = a_chunk * 8;
    p.b_row = b_row;
    return p;
}

/* Copy `idx` of this thread's share of the stage at depth p0 (p->a and p->b already point at
 * that depth): A's chunks first, then B's. Rows l A_ROWS_APART apart keep the same swizzle, so
 * chunk l lies a fixed stride past chunk 0. A chunk outside the matrix is written as 16 zero
 * bytes and reads nothing. */
__device__ __forceinline__ void copy_chunk(const struct copy_plan *p, int k, uint32_t stage,
                                           int p0, int idx)
{
    if (idx < A_LOADS) {
        const int l = idx;
        const bool inside = (p->a_rows_in >> l & 1) && p0 + p->a_col < k;
        cp_async_16(stage + p->a_dst + l * A_ROWS_APART * A_CHUNKS * 16, p->a + l * p->a_step,
                    inside);
    } else {
        const int l = idx - A_LOADS;
        const bool inside = p->b_cols_in && p0 + p->b_row + l * B_ROWS_APART < k;
        cp_async_16(stage + p->b_dst + l * B_ROWS_APART * B_CHUNKS * 16, p->b + l * p->b_step,
                    inside);
    }
}

/* The next tile's chunks: V9_BK columns of A further, V9_BK rows of B further down. */
__device__ __forceinline__ void advance_copies(struct copy_plan *p, int64_t n)
{
    p->a += V9_BK;
    p->b += V9_BK * n;
}

/* The swizzle repeats every 8 rows (one per line, or 8 / chunks rows a line times chunks). */
static_assert(A_ROWS_APART % 8 == 0 && B_ROWS_APART % 8 == 0,
              "a thread's chunks keep one swizzle");

/* ---- Shared -> registers -> tensor cores. ---- */

/* One k16 step's operands for the warp's 64 x 64 tile: MMA_M tiles of A, MMA_N of B. */
struct fragments {
    uint32_t a[MMA_M][4];
    uint32_t b[MMA_N][2];
};

/* For ldmatrix, lane l addresses row l % 16 of a 16-row block at chunk l / 16: A's 4 tiles
 * come out as (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), the a0..a3 of
 * mma.sync; B's rows are k, so its 4 transposed tiles are b0, b1 of one n8 tile and b0, b1 of
 * the next. The swizzle repeats every 8 rows, so 16 rows on (A's next mma tile, B's next k16
 * step) the address is a constant further: a lane's addresses in a stage are worked out once,
 * as one offset per k16 step for A and one per pair of n8 tiles for B, and each ldmatrix adds
 * a constant to one of them. (Worked out at every step, the swizzle's index arithmetic issued
 * more instructions than the ldmatrix themselves.) */
struct fragment_offsets {
    uint32_t a[K_STEPS];   /* rows warp_row + l % 16 of A, chunk 2 ks + l / 16 */
    uint32_t b[MMA_N / 2]; /* row l % 16 of B, the chunk of n8 tile 2 jj + l / 16 */
};

#define A_MMA_ROWS_BYTES (16 * A_CHUNKS * 16) /* 16 rows of A's tile: the next mma tile */
#define B_K16_BYTES (16 * B_CHUNKS * 16)      /* 16 rows of B's tile: the next k16 step */

__device__ __forceinline__ struct fragment_offsets plan_fragments(int warp_row, int warp_col)
{
    const int lane = threadIdx.x % 32, lrow = lane % 16, lchunk = lane / 16;
    struct fragment_offsets o;
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ks++)
        o.a[ks] = swizzled(warp_row + lrow, ks * 2 + lchunk, A_CHUNKS);
#pragma unroll
    for (int jj = 0; jj < MMA_N / 2; jj++)
        o.b[jj] = A_BYTES + swizzled(lrow, warp_col / 8 + 2 * jj + lchunk, B_CHUNKS);
    return o;
}

/* Loads step `ks` of the stage at shared address `stage`. */
__device__ __forceinline__ void load_fragments(struct fragments *f, uint32_t stage,
                                               const struct fragment_offsets *o, int ks)
{
#pragma unroll
    for (int i = 0; i < MMA_M; i++)
        ldmatrix_x4(f->a[i], stage + o->a[ks] + i * A_MMA_ROWS_BYTES);
#pragma unroll
    for (int j = 0; j < MMA_N; j += 2) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, stage + o->b[j / 2] + ks * B_K16_BYTES);
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

/* One tile's HMMAs, with the fast path's copies of a later tile spread between the rows of
 * mma tiles: the copies' few integer instructions then issue in the gaps between one warp's
 * HMMAs instead of in a burst that leaves the tensor cores without work. */
__device__ __forceinline__ void mma_and_copy(float acc[MMA_M][MMA_N][4], const struct fragments *f,
                                             const struct copy_plan *p, int k, uint32_t stage,
                                             int p0, bool copy)
{
    constexpr int copies = A_LOADS + B_LOADS;
#pragma unroll
    for (int i = 0; i < MMA_M; i++) {
#pragma unroll
        for (int j = 0; j < MMA_N; j++)
            mma_16816(acc[i][j], f->a[i], f->b[j]);
#pragma unroll
        for (int c = i * copies / MMA_M; c < (i + 1) * copies / MMA_M; c++)
            if (copy)
                copy_chunk(p, k, stage, p0, c);
    }
}

/* The kernel's body. `chunks`: A and B are read in 16-byte chunks (K and N multiples of 8,
 * aligned matrices), planned once (copy_plan); otherwise by load_stage, element by element
 * where needed. Two kernels call it with a constant, so neither carries the other's path. */
__device__ __forceinline__ void mma_sync_tiles(const __half *__restrict__ a,
                                               const __half *__restrict__ b,
                                               __half *__restrict__ c, int64_t m, int64_t n,
                                               int64_t k, bool vec_a, bool vec_b, bool vec_c,
                                               const bool chunks)
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
    struct copy_plan plan = plan_copies(&v);
    const int tiles = (int)((k + V9_BK - 1) / V9_BK); /* K < 2^31 */

    float acc[MMA_M][MMA_N][4] = {};
    struct fragments f[2];

    /* Fill the ring but one stage; each stage is one commit group, even when empty, so that
     * "S - 2 groups pending" always means "the oldest tile has landed". */
#pragma unroll
    for (int s = 0; s < V9_STAGES - 1; s++) {
        if (s < tiles) {
            if (chunks) {
#pragma unroll
                for (int i = 0; i < A_LOADS + B_LOADS; i++)
                    copy_chunk(&plan, (int)k, smem_base + s * STAGE_BYTES, s * V9_BK, i);
                advance_copies(&plan, n);
            } else {
                load_stage(&v, smem_base + s * STAGE_BYTES, (int64_t)s * V9_BK);
            }
        }
        kl_copies_commit();
    }
    kl_copies_wait<V9_STAGES - 2>();
    __syncthreads();
    const struct fragment_offsets offsets = plan_fragments(warp_row, warp_col);
    load_fragments(&f[0], smem_base, &offsets, 0);

    /* The stages read and written, as shared addresses walking the ring. */
    const uint32_t last_stage = smem_base + (V9_STAGES - 1) * STAGE_BYTES;
    uint32_t read_stage = smem_base, write_stage = last_stage;
    for (int tile = 0; tile < tiles; tile++) {
        const bool more = tile + V9_STAGES - 1 < tiles;
        const int64_t p_next = (int64_t)(tile + V9_STAGES - 1) * V9_BK;
#pragma unroll
        for (int ks = 0; ks < K_STEPS; ks++) {
            if (ks == K_STEPS - 1) {
                /* The next tile's first fragments are loaded below: wait for its copies (this
                 * thread's), then for everyone's. Past the barrier no warp reads the stage
                 * finished last, so the copies issued at ks == 0 may overwrite it. */
                kl_copies_wait<V9_STAGES - 2>();
                __syncthreads();
                read_stage = read_stage == last_stage ? smem_base : read_stage + STAGE_BYTES;
            }
            load_fragments(&f[(ks + 1) % 2], read_stage, &offsets, (ks + 1) % K_STEPS);
            if (ks == 0) {
                if (chunks) {
                    mma_and_copy(acc, &f[0], &plan, (int)k, write_stage, (int)p_next, more);
                    advance_copies(&plan, n);
                } else {
                    if (more)
                        load_stage(&v, write_stage, p_next);
                    mma_warp_tile(acc, &f[0]);
                }
                kl_copies_commit();
                write_stage = write_stage == last_stage ? smem_base : write_stage + STAGE_BYTES;
            } else {
                mma_warp_tile(acc, &f[ks % 2]);
            }
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
    (void)chunks;
#endif
}

/* A and B both read in 16-byte chunks: the common case, and the one timed. */
__global__ void __launch_bounds__(THREADS, V9_MIN_BLOCKS)
    matmul_mma_sync(const __half *__restrict__ a, const __half *__restrict__ b,
                    __half *__restrict__ c, int64_t m, int64_t n, int64_t k, bool vec_c)
{
    mma_sync_tiles(a, b, c, m, n, k, true, true, vec_c, true);
}

/* Any shape and alignment: the matrices that cannot be read in chunks go element by element. */
__global__ void __launch_bounds__(THREADS, V9_MIN_BLOCKS)
    matmul_mma_sync_any(const __half *__restrict__ a, const __half *__restrict__ b,
                        __half *__restrict__ c, int64_t m, int64_t n, int64_t k, bool vec_a,
                        bool vec_b, bool vec_c)
{
    mma_sync_tiles(a, b, c, m, n, k, vec_a, vec_b, vec_c, false);
}

extern "C" void matmul_v9(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    kl_note_rung("v9_mma_sync");
    (void)t; /* fp16 only: the rung's dtypes say so */
    static size_t room = 0; /* above 48 KB of dynamic shared memory a kernel must opt in */
    if (!room) {
        room = kl_grant_shared_memory((const void *)matmul_mma_sync);
        kl_grant_shared_memory((const void *)matmul_mma_sync_any);
    }
    const bool vec_a = d.k % 8 == 0 && aligned16(a), vec_b = d.n % 8 == 0 && aligned16(b);
    const bool vec_c = d.n % 2 == 0 && (uintptr_t)c % 4 == 0;
    const dim3 grid(matmul_blocks(d.n, V9_BN), matmul_blocks(d.m, V9_BM));
    if (vec_a && vec_b)
        matmul_mma_sync<<<grid, THREADS, SMEM_BYTES, s>>>((const __half *)a, (const __half *)b,
                                                         (__half *)c, d.m, d.n, d.k, vec_c);
    else
        matmul_mma_sync_any<<<grid, THREADS, SMEM_BYTES, s>>>(
            (const __half *)a, (const __half *)b, (__half *)c, d.m, d.n, d.k, vec_a, vec_b,
            vec_c);
    LAUNCH_CHECK();
}
