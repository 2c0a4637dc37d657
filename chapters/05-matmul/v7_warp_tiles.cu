/* v7, warp tiles and a copy pipeline that bypasses the registers.
 *
 * Idea: two changes to v6, both about waiting. Warp tiles: each of the 8 warps owns a 64 x 32
 * tile of C (64 x 64 in wide tiles), and lane (r, c) of an 8 x 4 grid of lanes computes the
 * 4 x 4 blocks at rows 4r and 32 + 4r, columns 4c and 16 + 4c (and 32 + 4c, 48 + 4c) of it: a
 * step along K reads A and B from shared memory as 16-byte loads that are broadcasts or
 * neighbours, no bank conflicts, 4 loads for 64 FFMAs (6 for 128). Copies in flight: cp.async
 * (compute capability 8.0 on) copies the next tile from global straight into shared memory
 * while this one is multiplied, no register on the way; B 16 bytes a copy, A 4 bytes a copy to
 * its transposed place (rows of 128 + 4 floats keep a warp's stores on 32 banks), zero-filled
 * outside the matrix. fp16 tiles are widened on the way, so they still pass through registers.
 * What changed from v6: the thread-to-output map; two stages filled by cp.async, BK 8 -> 16;
 * 128 x 128 tiles held to 128 registers, two blocks (16 warps) an SM, and 128 x 256 ones where
 * they finish first (wide_tiles_pay counts each width's rounds over the SMs); tiles wholly
 * inside A and B copied with no bounds tests (copy_whole_tiles).
 * Bottleneck removed: v6's staging of every tile through registers (loads, then shared stores),
 * and the bounds tests that took some 100 of the 1250 instructions a warp issues a tile.
 * Expected: 90% of cuBLAS SGEMM at 4096 and 8192 in fp32; the best ordinary-core rung.
 * Limits: as v1; B's 16-byte copies need N % 4 == 0 and an aligned B (else 4-byte copies), the
 * 4-wide stores of C the same of C; below compute capability 8.0 the copies are plain loads and
 * stores. fp16 keeps the narrow tiles (wide ones lost at every size). Knobs: the block below.
 * Measured (H200): fp32 47.95 TFLOP/s at 4096 (0.93x cuBLAS) and 48.39 at 8192 (0.94x), past
 * the 90% predicted; 19.7 at 1024 (0.57x), whose 64 tiles fill under half of the 132 SMs. */
#include "async_copy.cuh"
#include "launch.cuh"
#include "matmul.cuh"

#ifndef V7_BM
#define V7_BM 128 /* block tile of C */
#endif
#ifndef V7_BN_NARROW
#define V7_BN_NARROW 128 /* the two widths, chosen per problem at launch (wide_tiles_pay) */
#endif
#ifndef V7_BN_WIDE
#define V7_BN_WIDE 256
#endif
#ifndef V7_BK
#define V7_BK 16 /* depth of one stage */
#endif
#ifndef V7_WARPS_M
#define V7_WARPS_M 2 /* the block's warps: V7_WARPS_M down, V7_WARPS_N across */
#endif
#ifndef V7_WARPS_N
#define V7_WARPS_N 4
#endif
#ifndef V7_STAGES
#define V7_STAGES 2 /* tiles of A and B in shared memory at once */
#endif
#ifndef V7_A_REGS
#define V7_A_REGS 0 /* 1: A's tile through registers, 4 wide; 0: copied by element */
#endif
#ifndef V7_FRAGMENTS
#define V7_FRAGMENTS 2 /* 2: the next depth's operands load while this one multiplies */
#endif

#define THREADS (V7_WARPS_M * V7_WARPS_N * 32)
#define WM (V7_BM / V7_WARPS_M) /* a warp's tile of C */
#define TM (WM / 8) /* a thread's outputs: TM rows (runs of 4, 32 apart) */
#define A_LD (V7_BM + 4) /* a row of A's transposed tile: padded, see copy_a */
#if V7_A_REGS
#define A_WIDTH 4 /* a thread's elements of A: runs of A_WIDTH along K ... */
#define A_LANES (V7_BK / 4)
#else
#define A_WIDTH 1
#define A_LANES 8
#endif
#define A_STEP (THREADS / A_LANES)    /* ... in rows A_STEP apart ... */
#define A_ROWS (V7_BM / A_STEP)       /* ... A_ROWS of them ... */
#define A_COLS (V7_BK / (A_LANES * A_WIDTH)) /* ... at this many depths */

static_assert(WM % 32 == 0, "a lane's outputs are whole 4 x 4 blocks");
static_assert(V7_BK % (A_LANES * A_WIDTH) == 0 && V7_BM % A_STEP == 0,
              "A's tile: whole rounds of copies");
static_assert(V7_STAGES >= 2, "a ring needs two stages");

/* What depends on the block tile's width BN (V7_BN_NARROW or V7_BN_WIDE). */
template <int BN> struct width {
    static constexpr int WN = BN / V7_WARPS_N;       /* a warp's tile of C: WM x WN */
    static constexpr int TN = WN / 4;                /* a thread's columns (runs of 4, 16 apart) */
    static constexpr int B_RUNS = BN / 4;            /* 4-element runs in a row of B's tile */
    static constexpr int B_STEP = THREADS / B_RUNS;  /* rows of B between a thread's runs */
    static constexpr int B_ROWS = V7_BK / B_STEP;    /* runs of B's tile a thread copies */
    static constexpr int STAGE_FLOATS = V7_BK * (A_LD + BN);
    static constexpr int SMEM_BYTES = V7_STAGES * STAGE_FLOATS * 4;
    /* Blocks an SM asked of the register allocator: two narrow ones (128 registers), or one
     * wide one, whose 128 accumulators a thread need more than 128. */
    static constexpr int MIN_BLOCKS = BN > 128 ? 1 : 2;
    static_assert(WN % 16 == 0, "a lane's outputs are whole 4 x 4 blocks");
    static_assert(THREADS % B_RUNS == 0 && V7_BK % B_STEP == 0,
                  "B's tile: whole rounds of copies");
};

/* ---- Copies into shared memory that bypass the registers; src_bytes 0 writes zeros. Below
 * compute capability 8.0 they are an ordinary load and store (the 4-byte one is
 * kl_copy4_async, async_copy.cuh). ---- */
__device__ __forceinline__ void copy16_async(float *dst, const float *src, bool in)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(in ? 16 : 0)
                 : "memory");
#else
    *reinterpret_cast<float4 *>(dst) =
        in ? *reinterpret_cast<const float4 *>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

/* Where a thread's elements of the tiles lie, fixed for the whole of K but for the depth p0.
 * A: rows t / A_LANES + i A_STEP of the block's, depths p0 + A_WIDTH (t % A_LANES) +
 *    A_LANES A_WIDTH j, A_WIDTH elements each (one, or a 4-wide run with V7_A_REGS);
 * B: rows p0 + t / B_RUNS + l B_STEP, columns 4 (t % B_RUNS) .. + 3 of the block's. What does
 * not change along K (the start, whether a row of A or the columns of B lie inside) is worked
 * out once, so that a tile's copies cost a compare and an add each. */
template <typename T> struct tile_runs {
    const T *a, *b;   /* A[row0 + t / A_LANES][A_WIDTH (t % A_LANES)], B[t / B_RUNS][...] */
    int64_t a_step;   /* A_STEP rows of A */
    int k, n;         /* main.cu keeps K below 2^31 and N far below */
    int a_col, b_row; /* A_WIDTH (t % A_LANES), t / B_RUNS */
    unsigned a_rows_in; /* bit i: row t / A_LANES + i A_STEP lies inside M */
    int b_cols_in;    /* of the run's 4 columns, how many lie inside N */
    bool vec_a, vec_b;
    int a_dst, b_dst; /* the thread's first element in a stage of shared memory */
};

template <typename T, int BN>
__device__ __forceinline__ tile_runs<T> runs_of(const T *a, const T *b, int64_t m, int64_t n,
                                                int64_t k, int64_t row0, int64_t col0,
                                                bool vec_a, bool vec_b)
{
    using W = width<BN>;
    const int t = threadIdx.x;
    tile_runs<T> r;
    const int64_t a_row = row0 + t / A_LANES;
    const int64_t b_col = col0 + (t % W::B_RUNS) * 4;
    r.a_col = (t % A_LANES) * A_WIDTH;
    r.b_row = t / W::B_RUNS;
    r.a = a + a_row * k + r.a_col;
    r.b = b + (int64_t)r.b_row * n + b_col;
    r.a_step = (int64_t)A_STEP * k;
    r.k = (int)k;
    r.n = (int)n;
    r.a_rows_in = 0;
#pragma unroll
    for (int i = 0; i < A_ROWS; i++)
        r.a_rows_in |= (a_row + i * A_STEP < m ? 1u : 0u) << i;
    const int64_t cols_left = n - b_col;
    r.b_cols_in = cols_left < 0 ? 0 : cols_left > 4 ? 4 : (int)cols_left;
    r.vec_a = vec_a;
    r.vec_b = vec_b;
    r.a_dst = r.a_col * A_LD + t / A_LANES;
    r.b_dst = V7_BK * A_LD + r.b_row * BN + (t % W::B_RUNS) * 4;
    return r;
}

/* Which operand goes how: fp32 tiles are copied without passing through registers (B 16 bytes
 * at a time where N allows, else by element; A by element, transposed on the way, or 4 wide
 * through registers with V7_A_REGS); fp16 ones are widened on the way, so they pass through
 * registers: fetched before a tile's arithmetic and stored into shared memory after it. */
template <typename T> struct route {
    static constexpr bool a_async = sizeof(T) == 4 && !V7_A_REGS, b_async = sizeof(T) == 4;
};

template <typename T, int BN>
__device__ __forceinline__ void copy_tiles(const tile_runs<T> &r, float *stage, int p0)
{
    using W = width<BN>;
    if constexpr (route<T>::a_async) {
#pragma unroll
        for (int j = 0; j < A_COLS; j++) {
            const bool col_in = p0 + r.a_col + 8 * j < r.k;
#pragma unroll
            for (int i = 0; i < A_ROWS; i++)
                kl_copy4_async(stage + r.a_dst + 8 * j * A_LD + i * A_STEP,
                            r.a + i * r.a_step + p0 + 8 * j, col_in && (r.a_rows_in >> i & 1));
        }
    }
    if constexpr (route<T>::b_async) {
#pragma unroll
        for (int l = 0; l < W::B_ROWS; l++) {
            const int row = p0 + r.b_row + l * W::B_STEP;
            const float *src = r.b + (int64_t)(p0 + l * W::B_STEP) * r.n;
            float *dst = stage + r.b_dst + l * W::B_STEP * BN;
            const int in = row < r.k ? r.b_cols_in : 0;
            if (r.vec_b) {
                copy16_async(dst, src, in == 4);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    kl_copy4_async(dst + e, src + e, e < in);
            }
        }
    }
}

/* A tile that lies wholly inside A and B (every tile of a block inside M and N but a last,
 * partial one along K): nothing to test, so a copy is its addresses and the cp.async. The
 * general path above spends about ten instructions a copy on bounds and addresses: for a
 * thread's 10 copies, some 100 of the 1250 instructions a warp issues a tile. */
template <typename T, int BN>
__device__ __forceinline__ void copy_whole_tiles(const tile_runs<T> &r, float *stage, int p0)
{
    using W = width<BN>;
    static_assert(route<T>::a_async && route<T>::b_async, "fp32 tiles only");
    const float *a = r.a + p0;
#pragma unroll
    for (int j = 0; j < A_COLS; j++)
#pragma unroll
        for (int i = 0; i < A_ROWS; i++)
            kl_copy4_async(stage + r.a_dst + 8 * j * A_LD + i * A_STEP, a + i * r.a_step + 8 * j,
                        true);
    const float *b = r.b + (int64_t)p0 * r.n;
#pragma unroll
    for (int l = 0; l < W::B_ROWS; l++)
        copy16_async(stage + r.b_dst + l * W::B_STEP * BN, b + (int64_t)(l * W::B_STEP) * r.n,
                     true);
}

/* The tile at depth p0 on its way: by the short path where the block lies inside M and N
 * (`inside`, with B's 16-byte copies) and the tile inside K, else by the general one. */
template <typename T, int BN>
__device__ __forceinline__ void issue_tile(const tile_runs<T> &r, float *stage, int p0,
                                           bool inside)
{
    if constexpr (route<T>::a_async && route<T>::b_async) {
        if (inside && p0 + V7_BK <= r.k) {
            copy_whole_tiles<T, BN>(r, stage, p0);
            return;
        }
    }
    copy_tiles<T, BN>(r, stage, p0);
}

/* 4 elements of a run, `in` of which (counted from the first; none if `in` <= 0) lie inside
 * the matrix: one wide load when all four do and the rows allow it, else element by element. */
template <typename T>
__device__ __forceinline__ float4 run_load4(const T *p, int in, bool vec)
{
    if (vec && in >= 4) {
        if constexpr (sizeof(T) == 4) {
            return *reinterpret_cast<const float4 *>(p);
        } else {
            const uint2 raw = *reinterpret_cast<const uint2 *>(p);
            const float2 l = __half22float2(*reinterpret_cast<const __half2 *>(&raw.x));
            const float2 h = __half22float2(*reinterpret_cast<const __half2 *>(&raw.y));
            return make_float4(l.x, l.y, h.x, h.y);
        }
    }
    return make_float4(in > 0 ? to_float(p[0]) : 0.f, in > 1 ? to_float(p[1]) : 0.f,
                       in > 2 ? to_float(p[2]) : 0.f, in > 3 ? to_float(p[3]) : 0.f);
}

template <int BN> struct tile_regs {
    float a[A_COLS][A_ROWS][A_WIDTH];
    float4 b[width<BN>::B_ROWS];
};

template <typename T, int BN>
__device__ __forceinline__ void fetch_tiles(tile_regs<BN> &g, const tile_runs<T> &r, int p0)
{
    using W = width<BN>;
    if constexpr (!route<T>::a_async) {
#pragma unroll
        for (int j = 0; j < A_COLS; j++) {
            const int col = p0 + r.a_col + A_LANES * A_WIDTH * j;
#pragma unroll
            for (int i = 0; i < A_ROWS; i++) {
                const T *p = r.a + i * r.a_step + col - r.a_col;
                const bool row_in = r.a_rows_in >> i & 1;
                if constexpr (A_WIDTH == 4) {
                    const float4 v = run_load4(p, row_in ? r.k - col : 0, r.vec_a);
                    g.a[j][i][0] = v.x, g.a[j][i][1] = v.y, g.a[j][i][2] = v.z,
                    g.a[j][i][3] = v.w;
                } else {
                    g.a[j][i][0] = row_in && col < r.k ? to_float(*p) : 0.f;
                }
            }
        }
    }
    if constexpr (!route<T>::b_async) {
#pragma unroll
        for (int l = 0; l < W::B_ROWS; l++) {
            const int row = p0 + r.b_row + l * W::B_STEP;
            g.b[l] = run_load4(r.b + (int64_t)(p0 + l * W::B_STEP) * r.n,
                               row < r.k ? r.b_cols_in : 0, r.vec_b);
        }
    }
}

template <typename T, int BN>
__device__ __forceinline__ void place_tiles(const tile_regs<BN> &g, const tile_runs<T> &r,
                                            float *stage)
{
    using W = width<BN>;
    if constexpr (!route<T>::a_async) {
#pragma unroll
        for (int j = 0; j < A_COLS; j++)
#pragma unroll
            for (int i = 0; i < A_ROWS; i++)
#pragma unroll
                for (int e = 0; e < A_WIDTH; e++)
                    stage[r.a_dst + (A_LANES * A_WIDTH * j + e) * A_LD + i * A_STEP] =
                        g.a[j][i][e];
    }
    if constexpr (!route<T>::b_async) {
#pragma unroll
        for (int l = 0; l < W::B_ROWS; l++)
            *reinterpret_cast<float4 *>(stage + r.b_dst + l * W::B_STEP * BN) = g.b[l];
    }
}

/* A lane's operands at one depth: TM elements of A's column, TN of B's row, as 16-byte loads
 * that the lanes of a warp share or that lie side by side: no bank conflicts. */
template <int BN> struct fragment {
    float a[TM], b[width<BN>::TN];
};

template <int BN>
__device__ __forceinline__ void load_fragment(fragment<BN> &f, const float *stage, int q,
                                              int a_off, int b_off)
{
#pragma unroll
    for (int i = 0; i < TM / 4; i++)
        *reinterpret_cast<float4 *>(&f.a[4 * i]) =
            *reinterpret_cast<const float4 *>(stage + q * A_LD + a_off + 32 * i);
#pragma unroll
    for (int j = 0; j < width<BN>::TN / 4; j++)
        *reinterpret_cast<float4 *>(&f.b[4 * j]) = *reinterpret_cast<const float4 *>(
            stage + V7_BK * A_LD + q * BN + b_off + 16 * j);
}

template <typename T, int BN>
__global__ void __launch_bounds__(THREADS, width<BN>::MIN_BLOCKS)
    matmul_warp_tiles(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                      int64_t m, int64_t n, int64_t k, bool vec_a, bool vec_b, bool vec_c)
{
    using W = width<BN>;
    constexpr int TN = W::TN, STAGE_FLOATS = W::STAGE_FLOATS;
    extern __shared__ float4 smem4[];
    float *const smem = reinterpret_cast<float *>(smem4);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = (int64_t)blockIdx.y * V7_BM, col0 = (int64_t)blockIdx.x * BN;
    const int warp_row = (warp / V7_WARPS_N) * WM, warp_col = (warp % V7_WARPS_N) * W::WN;
    const int lane_row = (lane / 4) * 4, lane_col = (lane % 4) * 4;
    const int a_off = warp_row + lane_row, b_off = warp_col + lane_col;
    const int tiles = (int)((k + V7_BK - 1) / V7_BK);
    const tile_runs<T> runs = runs_of<T, BN>(a, b, m, n, k, row0, col0, vec_a, vec_b);
    constexpr bool staged = !route<T>::a_async || !route<T>::b_async;
    const bool inside = row0 + V7_BM <= m && col0 + BN <= n && vec_b;

    /* The first STAGES - 1 tiles are put on their way; each is one group of copies. */
#pragma unroll
    for (int s = 0; s < V7_STAGES - 1; s++) {
        if (s < tiles) {
            issue_tile<T, BN>(runs, smem + s * STAGE_FLOATS, s * V7_BK, inside);
            if constexpr (staged) {
                tile_regs<BN> g;
                fetch_tiles(g, runs, s * V7_BK);
                place_tiles(g, runs, smem + s * STAGE_FLOATS);
            }
        }
        kl_copies_commit();
    }
    kl_copies_wait<V7_STAGES - 2>();
    __syncthreads();

    float acc[TM][TN] = {}; /* rows a_off + 32 (r / 4) + r % 4, cols b_off + 16 (s / 4) + s % 4 */
    fragment<BN> f[V7_FRAGMENTS];
    if constexpr (V7_FRAGMENTS == 2)
        load_fragment(f[0], smem, 0, a_off, b_off);
    int read = 0, write = V7_STAGES - 1; /* stages being multiplied and being filled */
    for (int tile = 0; tile < tiles; tile++) {
        const bool more = tile + V7_STAGES - 1 < tiles;
        tile_regs<BN> g;
#pragma unroll
        for (int q = 0; q < V7_BK; q++) {
            if constexpr (V7_FRAGMENTS == 1)
                load_fragment(f[0], smem + read * STAGE_FLOATS, q, a_off, b_off);
            if (q == V7_BK - 1) {
                /* Before the next tile's first operands are read: this thread's copies of it
                 * have landed, then everyone's. Past the barrier no warp reads the stage just
                 * finished, which the copies issued at q == 0 of the next tile overwrite. */
                if constexpr (staged)
                    if (more)
                        place_tiles(g, runs, smem + write * STAGE_FLOATS);
                kl_copies_wait<V7_STAGES - 2>();
                __syncthreads();
                read = read + 1 == V7_STAGES ? 0 : read + 1;
            }
            if constexpr (V7_FRAGMENTS == 2)
                load_fragment(f[(q + 1) % 2], smem + read * STAGE_FLOATS, (q + 1) % V7_BK,
                              a_off, b_off);
            if (q == 0) {
                if (more) {
                    issue_tile<T, BN>(runs, smem + write * STAGE_FLOATS,
                               (tile + V7_STAGES - 1) * V7_BK, inside);
                    if constexpr (staged)
                        fetch_tiles(g, runs, (tile + V7_STAGES - 1) * V7_BK);
                }
                kl_copies_commit();
            }
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int s = 0; s < TN; s++)
                    acc[r][s] = fmaf(f[q % V7_FRAGMENTS].a[r], f[q % V7_FRAGMENTS].b[s], acc[r][s]);
        }
        write = write + 1 == V7_STAGES ? 0 : write + 1;
    }
    kl_copies_wait<0>(); /* nothing is left in flight, but leave no copy behind the exit */

#pragma unroll
    for (int r = 0; r < TM; r++) {
        const int64_t i = row0 + a_off + 32 * (r / 4) + r % 4;
#pragma unroll
        for (int s = 0; s < TN; s += 4)
            matmul_store4(c, m, n, i, col0 + b_off + 16 * (s / 4), &acc[r][s], vec_c);
    }
}

/* The kernel on block tiles BN wide; each width asks for its shared memory once. */
template <typename T, int BN>
static void launch_width(const T *a, const T *b, T *c, struct matmul_dims d, cudaStream_t s)
{
    constexpr int bytes = width<BN>::SMEM_BYTES;
    static size_t room = 0; /* above 48 KB of dynamic shared memory a kernel must opt in */
    if (bytes > 48 * 1024 && !room)
        room = kl_grant_shared_memory((const void *)matmul_warp_tiles<T, BN>);
    const dim3 grid(matmul_blocks(d.n, BN), matmul_blocks(d.m, V7_BM));
    matmul_warp_tiles<T, BN><<<grid, THREADS, bytes, s>>>(
        a, b, c, d.m, d.n, d.k, matmul_rows_of_4(a, d.k, sizeof(T)),
        matmul_rows_of_4(b, d.n, sizeof(T)),
        matmul_rows_of_4(c, d.n, sizeof(T)));
    LAUNCH_CHECK();
}

/* Whether wide tiles finish first. Time is counted in rounds of tiles over the SMs, in
 * hundredths of what one wide tile takes an SM: a round of one wide tile an SM costs 100; a
 * round of two narrow tiles an SM 104 (where both fill the GPU the wide tiles make 4% more
 * FLOP a cycle: 48.0 against 46.2 TFLOP/s at 4096); a last round that leaves the narrow tiles
 * one an SM 60 (at 1024, 64 narrow tiles took 0.58 of the time of 32 wide ones). */
static bool wide_tiles_pay(struct matmul_dims d)
{
    const int64_t sms = kl_sm_count(), rows = matmul_blocks(d.m, V7_BM);
    const int64_t wide = rows * matmul_blocks(d.n, V7_BN_WIDE);
    const int64_t narrow = rows * matmul_blocks(d.n, V7_BN_NARROW);
    const int64_t wide_cost = 100 * ((wide + sms - 1) / sms);
    const int64_t last = narrow % (2 * sms);
    const int64_t narrow_cost =
        104 * (narrow / (2 * sms)) + (last == 0 ? 0 : last <= sms ? 60 : 104);
    return wide_cost < narrow_cost;
}

extern "C" void matmul_v7(const void *a, const void *b, void *c, struct matmul_dims d,
                          enum dtype t, cudaStream_t s)
{
    kl_note_rung("v7_warp_tiles");
    if (t == DT_FP32 && wide_tiles_pay(d))
        launch_width<float, V7_BN_WIDE>((const float *)a, (const float *)b, (float *)c, d, s);
    else if (t == DT_FP32)
        launch_width<float, V7_BN_NARROW>((const float *)a, (const float *)b, (float *)c, d, s);
    else /* fp16 stages its tiles in registers, and wide tiles lost at every size */
        launch_width<__half, V7_BN_NARROW>((const __half *)a, (const __half *)b, (__half *)c, d,
                                           s);
}
