/* v11, split K over a thread-block cluster: small tiles for skinny products, in all three forms.
 *
 * Idea: a skinny product such as the CNN's 32x128x1568 makes one 128 x 128 tile, so v7 leaves
 * 131 SMs idle while one block walks all of K. Here tiles are small (32 x 64, or 64 x 64 where
 * those alone fill the SMs; 256 threads, 2 x 4 or 4 x 4 outputs a thread) and K is cut into S
 * slices, S the blocks of a cluster along the grid's x: each block sums its slice in registers
 * and leaves its partial tile in its shared memory; after a cluster barrier each block sums its
 * share of the tile from the S partials, read in rank order through distributed shared memory.
 * The same order every run, so the same bits; no atomics, no workspace. S = min(8, ceil(2 SMs /
 * tiles), K's 32-deep steps), evened so that no slice is empty: two blocks (16 warps) an SM hide
 * the loads' latency where one cannot, and 8 is the portable cluster size. Each operand is read
 * along its contiguous dimension, 4 elements a load where its rows allow (along k for A of A B and
 * A B^T and for B of A B^T, transposed on the way into shared memory; else along m or n); both
 * tiles sit k-major in shared memory as the inner product reads them, rows padded against bank
 * conflicts. Registers hold two steps' loads in flight while one step is multiplied.
 * What changed from v7: tiles 8 or 4 times smaller, a cluster per tile summing K's slices, the
 * form a template parameter; no cp.async (fp16 is widened on its way to shared memory anyway).
 * Expected: the fc1 forward (A B^T, 32x128x1568: 2 tiles x 8 slices, 7 steps each) in about
 * 5 us, beside cuBLAS's 3-17 us at the CNN's products; under v7 on large squares, whose tiles
 * reuse each load 2 to 4 times more. Limits: as v1; below compute capability 9.0 S = 1.
 * Measured (H200), in chapter 10's step (bench/results/h200/10-breakdown.txt): fc1's forward,
 * 32x128x1568 A B^T in fp32, 13.7 us against the 5 predicted; the sweep's rows are to come. */
#include <type_traits>

#include "cluster.cuh"
#include "launch.cuh"
#include "matmul.cuh"

#define BN 64            /* block tile of C: BM x BN, BM 32 or 64 (plan_of) */
#define BK 32            /* depth of one step */
#define THREADS 256      /* 16 x 16: a thread has BM / 16 rows and 4 columns of the tile */
#define PAD 4            /* floats after each row of a tile in shared memory */
#define MAX_SPLIT 8      /* the portable cluster size */
#define BLOCKS_PER_SM 2  /* the split aims at this many blocks an SM */

/* An operand's tile in shared memory, k-major: tile[p][r] is element r of the tile (a row of
 * op(A), a column of op(B)) at depth p of the step. */
template <int R> using tile_of = float[BK][R + PAD];

/* 4 neighbouring elements as stored, held in registers from their load to their store into
 * shared memory: widened to fp32 only there, so that no instruction waits on a load before the
 * step's other loads are issued (converting at the load made fp16 wait on each in turn). */
template <typename T> struct alignas(4 * sizeof(T)) quad {
    T e[4];
};

/* x[row][col .. col + 3] of a rows x cols matrix, 0 outside. VEC (cols % 4 == 0, x aligned,
 * col a multiple of 4): one 16-byte load (8 in fp16), the 4 wholly inside or wholly outside;
 * else element by element. */
template <bool VEC, typename T>
__device__ __forceinline__ quad<T> load_quad(const T *x, int64_t rows, int64_t cols, int64_t row,
                                             int64_t col)
{
    quad<T> q;
    if constexpr (VEC) {
        const bool in = row < rows && col < cols;
        if (in)
            q = *reinterpret_cast<const quad<T> *>(x + row * cols + col);
        else
            for (int e = 0; e < 4; e++)
                q.e[e] = from_float<T>(0.f);
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++)
            q.e[e] = row < rows && col + e < cols ? x[row * cols + col + e] : from_float<T>(0.f);
    }
    return q;
}

/* An operand stored with K as its rows, `outer` elements a row (A of A^T B; B of A B and
 * A^T B): the tile is rows p0 .. p0 + 31, elements c0 .. c0 + R - 1 of them, loaded and stored as
 * it lies, 4 elements a thread a load. A quarter-warp's 16-byte stores fill one row: no
 * conflicts. */
template <int R> struct k_rows {
    static constexpr int RUNS = R / 4, STEP = THREADS / RUNS, LOADS = BK / STEP;
    template <bool VEC, typename T>
    __device__ static __forceinline__ void fetch(quad<T> *r, const T *x, int64_t outer,
                                                 int64_t k, int64_t p0, int64_t c0)
    {
        const int t = threadIdx.x;
#pragma unroll
        for (int l = 0; l < LOADS; l++)
            r[l] = load_quad<VEC>(x, k, outer, p0 + t / RUNS + l * STEP, c0 + 4 * (t % RUNS));
    }
    template <typename T>
    __device__ static __forceinline__ void put(const quad<T> *r, tile_of<R> &tile)
    {
        const int t = threadIdx.x;
#pragma unroll
        for (int l = 0; l < LOADS; l++)
            *reinterpret_cast<float4 *>(&tile[t / RUNS + l * STEP][4 * (t % RUNS)]) =
                make_float4(to_float(r[l].e[0]), to_float(r[l].e[1]), to_float(r[l].e[2]),
                            to_float(r[l].e[3]));
    }
};

/* An operand stored with K along its rows, `outer` rows of k (A of A B and A B^T; B of A B^T):
 * 4 depths a thread a load, a warp 16 rows by 8 depths (16 whole 32-byte sectors in fp32), and
 * the tile transposed on the way to shared memory. At one depth a warp stores 16 rows at two
 * depths 4 apart, and 4 (R + 4) floats is 16 banks mod 32: all 32 banks, no conflicts. */
template <int R> struct k_cols {
    static constexpr int LOADS = R / 32;
    /* A thread's depths 4 depths() .. + 3 of the step, its row (+ 32 l) of the tile. */
    __device__ static __forceinline__ int depths()
    {
        return threadIdx.x % 2 + 2 * (threadIdx.x / 32 % 4);
    }
    __device__ static __forceinline__ int row()
    {
        return threadIdx.x % 32 / 2 + 16 * (threadIdx.x / 128);
    }
    template <bool VEC, typename T>
    __device__ static __forceinline__ void fetch(quad<T> *r, const T *x, int64_t outer,
                                                 int64_t k, int64_t p0, int64_t c0)
    {
#pragma unroll
        for (int l = 0; l < LOADS; l++)
            r[l] = load_quad<VEC>(x, outer, k, c0 + row() + 32 * l, p0 + 4 * depths());
    }
    template <typename T>
    __device__ static __forceinline__ void put(const quad<T> *r, tile_of<R> &tile)
    {
        const int p = 4 * depths(), e = row();
#pragma unroll
        for (int l = 0; l < LOADS; l++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                tile[p + i][e + 32 * l] = to_float(r[l].e[i]);
    }
};

/* How each operand of form F comes in. */
template <int F, int BM>
using a_way = std::conditional_t<F == MATMUL_ATB, k_rows<BM>, k_cols<BM>>;
template <int F> using b_way = std::conditional_t<F == MATMUL_ABT, k_cols<BN>, k_rows<BN>>;

/* The S partial tiles of a cluster summed in rank order: each block writes its own to shared
 * memory, and after a cluster barrier block r sums and stores quads (4 neighbouring outputs)
 * [r share, (r + 1) share) of the tile, reading every block's partial through distributed
 * shared memory. The second barrier keeps each block's shared memory alive until all have read
 * it. Compiled only for sm_90, the only place a launch makes S > 1. */
template <typename T, int BM>
__device__ __forceinline__ void sum_over_cluster(float (&partial)[BM][BN],
                                                 const float (&acc)[BM / 16][4], T *c,
                                                 int64_t m, int64_t n, int64_t m0, int64_t n0,
                                                 bool vec_c)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int TM = BM / 16, QUADS = BM * BN / 4;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < TM; i++)
        *reinterpret_cast<float4 *>(&partial[ty * TM + i][4 * tx]) =
            make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int splits = (int)cluster.num_blocks(), share = (QUADS + splits - 1) / splits;
    const int begin = (int)cluster.block_rank() * share;
    const int end = begin + share < QUADS ? begin + share : QUADS;
    float4 *quads = reinterpret_cast<float4 *>(&partial[0][0]);
    for (int q = begin + (int)threadIdx.x; q < end; q += THREADS) {
        float4 sum = *cluster.map_shared_rank(quads + q, 0);
        for (int r = 1; r < splits; r++) {
            const float4 v = *cluster.map_shared_rank(quads + q, r);
            sum.x += v.x;
            sum.y += v.y;
            sum.z += v.z;
            sum.w += v.w;
        }
        const float out[4] = {sum.x, sum.y, sum.z, sum.w};
        matmul_store4(c, m, n, m0 + q / (BN / 4), n0 + 4 * (q % (BN / 4)), out, vec_c);
    }
    cluster.sync();
#else
    (void)partial, (void)acc, (void)c, (void)m, (void)n, (void)m0, (void)n0, (void)vec_c;
#endif
}

/* Block (x, y, z): slice x of K (`slice` deep, a multiple of BK), tile (z, y) of C. VEC: both
 * operands are read 4 elements a load (their rows whole quads, aligned). */
template <typename T, int F, int BM, bool VEC>
__global__ void __launch_bounds__(THREADS)
    matmul_split_k_cluster(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ c,
                           int64_t m, int64_t n, int64_t k, int64_t slice, bool vec_c)
{
    using A = a_way<F, BM>;
    using B = b_way<F>;
    constexpr int TM = BM / 16;
    __shared__ __align__(16) union {
        struct {
            tile_of<BM> a[2];
            tile_of<BN> b[2];
        } step;
        float partial[BM][BN];
    } sm;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t m0 = (int64_t)blockIdx.z * BM, n0 = (int64_t)blockIdx.y * BN;
    const int64_t p_begin = (int64_t)blockIdx.x * slice;
    const int64_t p_end = p_begin + slice < k ? p_begin + slice : k;
    const int steps = p_end > p_begin ? (int)((p_end - p_begin + BK - 1) / BK) : 0;

    /* A step's loads, held in registers on their way to shared memory. Only the last slice's
     * last step passes its end, and there K's bound zero-fills. */
    struct staged {
        quad<T> a[A::LOADS], b[B::LOADS];
    } r0, r1;
    auto fetch = [&](staged &r, int s) {
        const int64_t p0 = p_begin + (int64_t)s * BK;
        A::template fetch<VEC>(r.a, a, m, k, p0, m0);
        B::template fetch<VEC>(r.b, b, n, k, p0, n0);
    };
    auto put = [&](const staged &r, int buf) {
        A::put(r.a, sm.step.a[buf]);
        B::put(r.b, sm.step.b[buf]);
    };
    float acc[TM][4] = {};
    auto multiply = [&](int buf) {
#pragma unroll
        for (int p = 0; p < BK; p++) {
            float av[TM];
            if constexpr (TM == 4) {
                const float4 v = *reinterpret_cast<const float4 *>(&sm.step.a[buf][p][ty * TM]);
                av[0] = v.x, av[1] = v.y, av[2] = v.z, av[3] = v.w;
            } else {
                const float2 v = *reinterpret_cast<const float2 *>(&sm.step.a[buf][p][ty * TM]);
                av[0] = v.x, av[1] = v.y;
            }
            const float4 bv = *reinterpret_cast<const float4 *>(&sm.step.b[buf][p][4 * tx]);
#pragma unroll
            for (int i = 0; i < TM; i++) {
                acc[i][0] = fmaf(av[i], bv.x, acc[i][0]);
                acc[i][1] = fmaf(av[i], bv.y, acc[i][1]);
                acc[i][2] = fmaf(av[i], bv.z, acc[i][2]);
                acc[i][3] = fmaf(av[i], bv.w, acc[i][3]);
            }
        }
    };

    /* Steps s and s + 1 a turn: while one buffer is multiplied the registers hold the next two
     * steps' loads, one set landing, the other just issued. */
    if (steps > 0)
        fetch(r0, 0);
    if (steps > 1)
        fetch(r1, 1);
    if (steps > 0)
        put(r0, 0);
    __syncthreads();
    for (int s = 0; s < steps; s += 2) {
        if (s + 2 < steps)
            fetch(r0, s + 2);
        multiply(0);
        if (s + 1 < steps)
            put(r1, 1);
        __syncthreads();
        if (s + 1 == steps)
            break;
        if (s + 3 < steps)
            fetch(r1, s + 3);
        multiply(1);
        if (s + 2 < steps)
            put(r0, 0);
        __syncthreads(); /* also frees the buffers for the partial tile */
    }

    if (cluster_blocks() == 1) {
#pragma unroll
        for (int i = 0; i < TM; i++)
            matmul_store4(c, m, n, m0 + ty * TM + i, n0 + 4 * tx, acc[i], vec_c);
        return;
    }
    sum_over_cluster<T, BM>(sm.partial, acc, c, m, n, m0, n0, vec_c);
}

/* The launch: tile height, blocks a cluster (S) and the depth of each one's slice. */
struct plan {
    int bm;
    unsigned splits;
    int64_t slice;
};

/* Whether clusters may be launched: a GPU of compute capability 9.0 on, running this file's
 * sm_90 code (a build for older targets only would be JIT-compiled without the cluster sum). */
static bool clusters_usable(void)
{
    static int built = -1;
    if (built < 0) {
        const cudaStreamCaptureMode mode = kl_capture_relax();
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncGetAttributes(&fa, matmul_split_k_cluster<float, MATMUL_AB, 32, false>));
        kl_capture_restore(mode);
        built = fa.ptxVersion >= 90;
    }
    return built && kl_device_cc() >= 90;
}

/* 64-row tiles where they alone make a block for every SM (half the loads of 32-row ones),
 * else 32-row tiles; then K split until there are BLOCKS_PER_SM blocks an SM, at most
 * MAX_SPLIT ways and no finer than one step a slice, and the split evened so that the slices
 * differ by at most one step and none is empty. */
static struct plan plan_of(struct matmul_dims d)
{
    const int64_t sms = kl_sm_count();
    struct plan p;
    p.bm = (int64_t)matmul_blocks(d.m, 64) * matmul_blocks(d.n, BN) >= sms ? 64 : 32;
    const int64_t tiles = (int64_t)matmul_blocks(d.m, p.bm) * matmul_blocks(d.n, BN);
    const int64_t steps = (d.k + BK - 1) / BK;
    int64_t split = 1;
    if (clusters_usable()) {
        split = (BLOCKS_PER_SM * sms + tiles - 1) / tiles;
        split = split < MAX_SPLIT ? split : MAX_SPLIT;
        split = split < steps ? split : steps;
    }
    const int64_t per = (steps + split - 1) / split;
    p.splits = (unsigned)((steps + per - 1) / per);
    p.slice = per * BK;
    return p;
}

extern "C" int matmul_v11_splits(struct matmul_dims d)
{
    return (int)plan_of(d).splits;
}

/* The 4-wide loads where both operands' rows allow them (else both load by element: an odd
 * shape), the 4-wide stores where C's rows do. */
template <typename T, int F, int BM>
static void launch(const T *a, const T *b, T *c, struct matmul_dims d, struct plan p,
                   cudaStream_t s)
{
    const size_t es = sizeof(T);
    const bool vec = matmul_rows_of_4(a, F == MATMUL_ATB ? d.m : d.k, es) &&
                     matmul_rows_of_4(b, F == MATMUL_ABT ? d.k : d.n, es);
    const bool vec_c = matmul_rows_of_4(c, d.n, es);
    const dim3 grid(p.splits, matmul_blocks(d.n, BN), matmul_blocks(d.m, BM));
    const kl_launch_opts o = {p.splits, false};
    if (vec)
        kl_launch(matmul_split_k_cluster<T, F, BM, true>, grid, dim3(THREADS), 0, s, o, a, b, c,
                  d.m, d.n, d.k, p.slice, vec_c);
    else
        kl_launch(matmul_split_k_cluster<T, F, BM, false>, grid, dim3(THREADS), 0, s, o, a, b,
                  c, d.m, d.n, d.k, p.slice, vec_c);
}

template <typename T, int F>
static void launch_form(const void *a, const void *b, void *c, struct matmul_dims d,
                        cudaStream_t s)
{
    const struct plan p = plan_of(d);
    if (p.bm == 64)
        launch<T, F, 64>((const T *)a, (const T *)b, (T *)c, d, p, s);
    else
        launch<T, F, 32>((const T *)a, (const T *)b, (T *)c, d, p, s);
}

template <typename T>
static void launch_dtype(enum matmul_form form, const void *a, const void *b, void *c,
                         struct matmul_dims d, cudaStream_t s)
{
    if (form == MATMUL_ATB)
        launch_form<T, MATMUL_ATB>(a, b, c, d, s);
    else if (form == MATMUL_ABT)
        launch_form<T, MATMUL_ABT>(a, b, c, d, s);
    else
        launch_form<T, MATMUL_AB>(a, b, c, d, s);
}

extern "C" void matmul_v11(enum matmul_form form, const void *a, const void *b, void *c,
                           struct matmul_dims d, enum dtype t, cudaStream_t s)
{
    kl_note_rung("v11");
    if (t == DT_FP32)
        launch_dtype<float>(form, a, b, c, d, s);
    else
        launch_dtype<__half>(form, a, b, c, d, s);
}
