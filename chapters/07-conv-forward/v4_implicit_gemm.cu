/* v4, implicit GEMM: v3's product, with the column tile gathered from x into shared memory.
 *
 * Idea: v3 writes col (C R S x N P Q: R S times x's elements at stride 1) to memory and reads
 * it back as B of chapter 05's v7. Here each element of B's tile is gathered from x as it is
 * copied in: x under tap i of pixel j's window, or 0 in the padding (conv_gather's test, made a
 * cp.async whose zero fill writes the padding). That is the whole diff from an im2col GEMM:
 * where the column tile comes from. The buffer, its write and its second read are gone.
 * What changed from v3: the product is v7's (warp tiles, 16-byte shared loads free of bank
 * conflicts, w's tile transposed, STAGES stages in flight by cp.async; fp16 through registers,
 * widened on the way), B's copies replaced by the gather. Its index arithmetic is paid once a
 * block or a stage, not an element: a thread finds its pixels' windows (conv_pixel) once, and
 * a stage's BK taps (conv_tap) are found by BK threads, a stage ahead, into a shared table.
 * Cost: 2 N K P Q C R S FLOPs; x, w and y cross DRAM about once (x's R S reuses hit L1 and
 * L2). A gathered element costs about 9 instructions (test, address, copy) and feeds BM FMAs:
 * some 7% of the issue slots at BM = 128, 14% at 64, 28% at 32. At most 128 registers a
 * thread, so 16 warps an SM.
 * Tiles: BM filters (32, 64 or 128: the least that holds K) x BN pixels (128, or 64 where wide
 * tiles would leave SMs idle, narrow_tiles_pay; always 64 for fp16 beside BM > 32, its staging
 * registers would spill), BK = 16 taps a stage. No split of the C R S sum across blocks.
 * Expected: 35-40 TFLOP/s fp32 at K >= 64 with N P Q to fill the GPU (large, resnet, stride2),
 * about 25 at K = 32 (cnn at batch 1024), a few us at small batches.
 * Limits: none on the shape (tails read 0 and are not stored); 4-wide stores need P Q % 4 == 0
 * and y 16-byte aligned. Below compute capability 8.0 the copies are plain loads and stores.
 * Measured (H200): large 148 us fp32, 32.7 TFLOP/s, 1.78x cuDNN (predicted 127-146); stride2
 * 119 us, 1.64x; resnet 217 us, 0.73x (Winograd's shape); fp16 storage 25 TFLOP/s. */
#include "async_copy.cuh"
#include "conv.cuh"

#define BK 16     /* taps a stage: deeper stages mean fewer barriers, more shared memory */
#define STAGES 3  /* stages in shared memory: STAGES - 1 on their way while one is multiplied */
#define A_LANES 8 /* lanes that copy one filter's taps of a stage: 8 x 4 bytes, one sector */

/* A block tile of y: BM filters x BN pixels, computed by WARPS_M x WARPS_N warps. */
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_> struct tile {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int WARPS = WARPS_M * WARPS_N, THREADS = 32 * WARPS;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* a warp's tile of y */
    static constexpr int TM = WM / 8, TN = WN / 4; /* a thread's, in 4 x 4 blocks (v7) */
    static constexpr int A_LD = BM + 4; /* a row of w's transposed tile: padded, see copy_stage */
    static constexpr int A_STEP = THREADS / A_LANES, A_ROWS = BM / A_STEP;
    static constexpr int PIXELS = BN / 32, TAPS = BK / WARPS; /* a thread's share of B's tile */
    static constexpr int STAGE_FLOATS = BK * (A_LD + BN);     /* w's tile, then B's */
    static constexpr int SMEM_BYTES = STAGES * STAGE_FLOATS * 4;
    static constexpr int MIN_BLOCKS = 512 / THREADS; /* at most 128 registers a thread */
    static_assert(WM % 32 == 0 && WN % 16 == 0, "a lane's outputs are whole 4 x 4 blocks");
    static_assert(BM % A_STEP == 0 && BK % A_LANES == 0, "w's tile: whole rounds of copies");
    static_assert(BN % 32 == 0 && BK % WARPS == 0, "B's tile: whole rounds of copies");
};

typedef tile<128, 128, 2, 4> tile_128x128; /* 256 threads, 8 x 8 outputs each */
typedef tile<128, 64, 2, 4> tile_128x64;   /* 256 threads, 8 x 4 */
typedef tile<64, 128, 1, 4> tile_64x128;   /* 128 threads, 8 x 8 */
typedef tile<64, 64, 1, 4> tile_64x64;     /* 128 threads, 8 x 4 */
typedef tile<32, 128, 1, 4> tile_32x128;   /* 128 threads, 4 x 8 */
typedef tile<32, 64, 1, 4> tile_32x64;     /* 128 threads, 4 x 4 */

/* The product's sizes, in the 32-bit indices of the kernel. */
struct gemm_shape {
    int m, n, k;  /* filters K, pixels N P Q, taps C R S */
    int m_tiles;  /* block tiles along the filters: block b takes filter tile b % m_tiles */
    int r_unseen; /* a filter row no window reaches (top + r < 0 for every pixel) */
    bool vec_y;   /* P Q % 4 == 0 and y 16-byte aligned: runs of 4 pixels stored at once */
};

/* col[tap, pixel] into shared memory: conv_gather's test, the padding by the copy's zero fill
 * (from x itself, an address inside it, where nothing is read). The index is unsigned: in the
 * padding base + offset may lie outside int, and is then never used. */
static __device__ __forceinline__ void gather_async(float *dst, const float *__restrict__ x,
                                                    const conv2d_dims &d, const conv_pixel &px,
                                                    const conv_tap &t)
{
    const int h = px.top + t.r, w = px.left + t.s;
    const bool inside = (unsigned)h < (unsigned)d.h && (unsigned)w < (unsigned)d.w;
    kl_copy4_async(dst, x + (inside ? (unsigned)px.base + (unsigned)t.offset : 0u), inside);
}

/* Row i of col as the stage's table holds it. Rows past C R S, the sum's tail, take a filter
 * row that no window reaches, so that the gather reads them as 0 (and w's tile has 0 there). */
static __device__ __forceinline__ void note_tap(int4 *entry, const conv2d_dims &d,
                                                const gemm_shape &g, int i)
{
    if (i < g.k) {
        const conv_tap t = conv_tap_of(d, i);
        *entry = make_int4(t.offset, t.r, t.s, 0);
    } else {
        *entry = make_int4(0, g.r_unseen, 0, 0);
    }
}

static __device__ __forceinline__ conv_tap tap_of_entry(int4 e)
{
    conv_tap t;
    t.offset = e.x;
    t.r = e.y;
    t.s = e.z;
    return t;
}

/* What a thread copies each stage, the same for the whole block. B's tile: taps (rows) warp +
 * m WARPS, pixels (columns) lane + 32 l, so that a warp's loads are 32 neighbouring pixels of
 * one tap. w's tile: filters a_row + i A_STEP at taps a_tap and a_tap + 8 (v7's map for A). */
template <typename G> struct thread_copies {
    conv_pixel px[G::PIXELS]; /* past N P Q, the last pixel: its outputs are never stored */
    unsigned w_at;    /* w's index of its first filter at tap a_tap; filter i is i A_STEP K on */
    unsigned rows_in; /* bit i: filter i exists */
    int a_tap, a_dst; /* its column of w's tile, and its first element's place there */
};

template <typename G>
__device__ __forceinline__ thread_copies<G> copies_of(const conv2d_dims &d, const gemm_shape &g,
                                                      int row0, int col0)
{
    const int t = threadIdx.x, lane = t % 32, last = g.n - 1 - col0;
    thread_copies<G> c;
#pragma unroll
    for (int l = 0; l < G::PIXELS; l++)
        c.px[l] = conv_pixel_of(d, col0 + (lane + 32 * l < last ? lane + 32 * l : last));
    const int a_row = t / A_LANES;
    c.a_tap = t % A_LANES;
    c.rows_in = 0;
#pragma unroll
    for (int i = 0; i < G::A_ROWS; i++) {
        const int row = row0 + a_row + i * G::A_STEP;
        c.rows_in |= (row < g.m ? 1u : 0u) << i;
    }
    c.w_at = (unsigned)(row0 + a_row) * (unsigned)g.k + (unsigned)c.a_tap;
    /* A lane's copy of w lands at a_tap (BM + 4) + a_row: the 8 taps x 4 filters of a warp
     * fall on 32 different banks. */
    c.a_dst = c.a_tap * G::A_LD + a_row;
    return c;
}

/* w's index of the thread's filter i at tap a_tap + k, unsigned: past the tensor it wraps
 * harmlessly, being never used there. */
template <typename G>
__device__ __forceinline__ unsigned w_index(const thread_copies<G> &c, const gemm_shape &g, int i,
                                            int k)
{
    return c.w_at + (unsigned)(i * G::A_STEP) * (unsigned)g.k + (unsigned)k;
}

/* The stage of taps k0 .. k0 + BK - 1 on its way, fp32: copies that bypass the registers. */
template <typename G>
__device__ __forceinline__ void copy_stage(const thread_copies<G> &c, const float *__restrict__ x,
                                           const float *__restrict__ w, const conv2d_dims &d,
                                           const gemm_shape &g, const int4 *taps, float *stage,
                                           int k0)
{
#pragma unroll
    for (int j = 0; j < BK / A_LANES; j++) {
        const bool tap_in = k0 + c.a_tap + A_LANES * j < g.k;
#pragma unroll
        for (int i = 0; i < G::A_ROWS; i++) {
            const bool in = tap_in && (c.rows_in >> i & 1);
            kl_copy4_async(stage + c.a_dst + A_LANES * j * G::A_LD + i * G::A_STEP,
                        w + (in ? w_index(c, g, i, k0 + A_LANES * j) : 0u), in);
        }
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int m = 0; m < G::TAPS; m++) {
        const int row = warp + m * G::WARPS;
        const conv_tap t = tap_of_entry(taps[row]);
#pragma unroll
        for (int l = 0; l < G::PIXELS; l++)
            gather_async(stage + BK * G::A_LD + row * G::BN + lane + 32 * l, x, d, c.px[l], t);
    }
}

/* fp16: the same elements through registers, widened, fetched before a stage's arithmetic and
 * placed in shared memory after it. */
template <typename G> struct stage_regs {
    float a[BK / A_LANES][G::A_ROWS];
    float b[G::TAPS][G::PIXELS];
};

template <typename T, typename G>
__device__ __forceinline__ void fetch_stage(stage_regs<G> &v, const thread_copies<G> &c,
                                            const T *__restrict__ x, const T *__restrict__ w,
                                            const conv2d_dims &d, const gemm_shape &g,
                                            const int4 *taps, int k0)
{
#pragma unroll
    for (int j = 0; j < BK / A_LANES; j++) {
        const bool tap_in = k0 + c.a_tap + A_LANES * j < g.k;
#pragma unroll
        for (int i = 0; i < G::A_ROWS; i++)
            v.a[j][i] = tap_in && (c.rows_in >> i & 1)
                            ? to_float(w[w_index(c, g, i, k0 + A_LANES * j)])
                            : 0.f;
    }
#pragma unroll
    for (int m = 0; m < G::TAPS; m++) {
        const conv_tap t = tap_of_entry(taps[threadIdx.x / 32 + m * G::WARPS]);
#pragma unroll
        for (int l = 0; l < G::PIXELS; l++)
            v.b[m][l] = conv_gather(x, d, c.px[l], t);
    }
}

template <typename G>
__device__ __forceinline__ void place_stage(const stage_regs<G> &v, const thread_copies<G> &c,
                                            float *stage)
{
#pragma unroll
    for (int j = 0; j < BK / A_LANES; j++)
#pragma unroll
        for (int i = 0; i < G::A_ROWS; i++)
            stage[c.a_dst + A_LANES * j * G::A_LD + i * G::A_STEP] = v.a[j][i];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int m = 0; m < G::TAPS; m++)
#pragma unroll
        for (int l = 0; l < G::PIXELS; l++)
            stage[BK * G::A_LD + (warp + m * G::WARPS) * G::BN + lane + 32 * l] = v.b[m][l];
}

template <typename T, typename G>
__device__ __forceinline__ void issue_stage(const thread_copies<G> &c, const T *__restrict__ x,
                                            const T *__restrict__ w, const conv2d_dims &d,
                                            const gemm_shape &g, const int4 *taps,
                                            float *stage, int k0)
{
    if constexpr (sizeof(T) == 4) {
        copy_stage<G>(c, x, w, d, g, taps, stage, k0);
    } else {
        stage_regs<G> v;
        fetch_stage<T, G>(v, c, x, w, d, g, taps, k0);
        place_stage<G>(v, c, stage);
    }
}

/* A lane's operands at depth q: TM filters' weights, TN pixels' values (v7's load_fragment). */
template <typename G> struct fragment {
    float a[G::TM], b[G::TN];
};

template <typename G>
__device__ __forceinline__ void load_fragment(fragment<G> &f, const float *stage, int q,
                                              int a_off, int b_off)
{
#pragma unroll
    for (int i = 0; i < G::TM / 4; i++)
        *reinterpret_cast<float4 *>(&f.a[4 * i]) =
            *reinterpret_cast<const float4 *>(stage + q * G::A_LD + a_off + 32 * i);
#pragma unroll
    for (int j = 0; j < G::TN / 4; j++)
        *reinterpret_cast<float4 *>(&f.b[4 * j]) = *reinterpret_cast<const float4 *>(
            stage + BK * G::A_LD + q * G::BN + b_off + 16 * j);
}

static __device__ __forceinline__ void store4(float *p, const float *v)
{
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

static __device__ __forceinline__ void store4(__half *p, const float *v)
{
    uint2 raw;
    *reinterpret_cast<__half2 *>(&raw.x) = __floats2half2_rn(v[0], v[1]);
    *reinterpret_cast<__half2 *>(&raw.y) = __floats2half2_rn(v[2], v[3]);
    *reinterpret_cast<uint2 *>(p) = raw;
}

/* Filter k's outputs at pixels col0 + at .. + 3 (k < K), those past N P Q skipped: one store
 * where P Q % 4 == 0 (the run then lies in one image, 4-aligned), else one by one. */
template <typename T>
__device__ __forceinline__ void store_run(T *__restrict__ y, const T *__restrict__ bias,
                                          const conv2d_dims &d, const gemm_shape &g,
                                          conv2d_activation act, int k, int col0, int at,
                                          const float *sum)
{
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; e++)
        v[e] = conv_epilogue(sum[e], bias, k, act);
    const int room = g.n - col0; /* pixels of the tile inside N P Q */
    if (g.vec_y && at < room) {
        store4(y + conv_output_index(d, k, col0 + at), v);
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; e++)
        if (at + e < room)
            y[conv_output_index(d, k, col0 + at + e)] = from_float<T>(v[e]);
}

template <typename T, typename G>
__global__ void __launch_bounds__(G::THREADS, G::MIN_BLOCKS)
    conv_implicit_gemm(const T *__restrict__ x, const T *__restrict__ w,
                       const T *__restrict__ bias, T *__restrict__ y, conv2d_dims d,
                       gemm_shape g, conv2d_activation act)
{
    constexpr int TM = G::TM, TN = G::TN, STAGE_FLOATS = G::STAGE_FLOATS;
    extern __shared__ float4 smem4[];
    float *const smem = reinterpret_cast<float *>(smem4);
    /* Stage s's taps, in slot s % STAGES like its tiles; written while the slot's previous
     * stage is multiplied, which reads its tiles but no longer its taps. */
    __shared__ int4 taps[STAGES][BK];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = (int)(blockIdx.x % (unsigned)g.m_tiles) * G::BM;
    const int col0 = (int)(blockIdx.x / (unsigned)g.m_tiles) * G::BN;
    const int a_off = (warp / G::WARPS_N) * G::WM + (lane / 4) * 4;
    const int b_off = (warp % G::WARPS_N) * G::WN + (lane % 4) * 4;
    const thread_copies<G> c = copies_of<G>(d, g, row0, col0);
    const int steps = (g.k + BK - 1) / BK;

    if (threadIdx.x < BK)
#pragma unroll
        for (int s = 0; s < STAGES; s++)
            note_tap(&taps[s][threadIdx.x], d, g, s * BK + threadIdx.x);
    __syncthreads();
    /* The first STAGES - 1 stages are put on their way; each is one group of copies. */
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < steps)
            issue_stage<T, G>(c, x, w, d, g, taps[s], smem + s * STAGE_FLOATS, s * BK);
        kl_copies_commit();
    }
    kl_copies_wait<STAGES - 2>();
    __syncthreads();

    /* acc[r][s]: filter a_off + 32 (r / 4) + r % 4, pixel b_off + 16 (s / 4) + s % 4 */
    float acc[TM][TN] = {};
    fragment<G> f[2];
    load_fragment<G>(f[0], smem, 0, a_off, b_off);
    int read = 0, write = STAGES - 1; /* slots being multiplied and being filled */
    for (int step = 0; step < steps; step++) {
        const bool more = step + STAGES - 1 < steps;
        const int k0 = (step + STAGES - 1) * BK;
        stage_regs<G> v; /* fp16 only */
#pragma unroll
        for (int q = 0; q < BK; q++) {
            if (q == BK - 1) {
                /* Before the next stage's first operands are read: this thread's copies of it
                 * have landed, then everyone's. Past the barrier no warp reads the slot just
                 * finished, which the copies issued at q == 0 of the next step overwrite. */
                if constexpr (sizeof(T) == 2)
                    if (more)
                        place_stage<G>(v, c, smem + write * STAGE_FLOATS);
                kl_copies_wait<STAGES - 2>();
                __syncthreads();
                read = read + 1 == STAGES ? 0 : read + 1;
            }
            load_fragment<G>(f[(q + 1) % 2], smem + read * STAGE_FLOATS, (q + 1) % BK, a_off,
                             b_off);
            if (q == 0) {
                if (more) {
                    if constexpr (sizeof(T) == 4)
                        copy_stage<G>(c, x, w, d, g, taps[write], smem + write * STAGE_FLOATS,
                                      k0);
                    else
                        fetch_stage<T, G>(v, c, x, w, d, g, taps[write], k0);
                }
                kl_copies_commit();
                if (threadIdx.x < BK)
                    note_tap(&taps[read][threadIdx.x], d, g, k0 + BK + threadIdx.x);
            }
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int s = 0; s < TN; s++)
                    acc[r][s] = fmaf(f[q % 2].a[r], f[q % 2].b[s], acc[r][s]);
        }
        write = write + 1 == STAGES ? 0 : write + 1;
    }
    kl_copies_wait<0>(); /* nothing is left in flight, but leave no copy behind the exit */

#pragma unroll
    for (int r = 0; r < TM; r++) {
        const int k = row0 + a_off + 32 * (r / 4) + r % 4;
        if (k < g.m)
#pragma unroll
            for (int s = 0; s < TN; s += 4)
                store_run(y, bias, d, g, act, k, col0, b_off + 16 * (s / 4), &acc[r][s]);
    }
}

static gemm_shape shape_of(conv2d_dims d, int bm, const void *y)
{
    gemm_shape g;
    g.m = (int)d.k;
    g.n = (int)(d.n * d.p * d.q);
    g.k = (int)(d.c * d.r * d.s);
    g.m_tiles = (g.m + bm - 1) / bm;
    /* Every window's top row is at most (P - 1) stride - pad, so a tap at this r lies above
     * row 0 of x in all of them. */
    g.r_unseen = (int)(d.pad - (d.p - 1) * d.stride - 1);
    g.vec_y = d.p * d.q % 4 == 0 && aligned16(y);
    return g;
}

template <typename T, typename G>
static void launch(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                   conv2d_activation act, cudaStream_t s)
{
    static size_t room = 0; /* above 48 KB of dynamic shared memory a kernel must opt in */
    if (G::SMEM_BYTES > 48 * 1024 && !room)
        room = kl_grant_shared_memory((const void *)conv_implicit_gemm<T, G>);
    const gemm_shape g = shape_of(d, G::BM, y);
    const int64_t blocks = (int64_t)g.m_tiles * ((g.n + G::BN - 1) / G::BN);
    conv_implicit_gemm<T, G><<<(unsigned)blocks, G::THREADS, G::SMEM_BYTES, s>>>(x, w, bias, y,
                                                                                d, g, act);
    LAUNCH_CHECK();
}

/* Whether tiles 64 pixels wide finish first. An SM makes outputs at about the same rate at
 * either width, so time goes as the most blocks any SM gets, ceil(blocks / SMs), times the
 * width; ties go to 128, whose outputs take fewer instructions each. stride2 (196 wide blocks:
 * 2 x 128 against 3 x 64) and cnn at batch 32 (49 wide blocks on 132 SMs) go narrow. */
static bool narrow_tiles_pay(int64_t m_tiles, int64_t pixels)
{
    const int64_t sms = kl_sm_count();
    const int64_t wide = m_tiles * ((pixels + 127) / 128), narrow = m_tiles * ((pixels + 63) / 64);
    return 64 * ((narrow + sms - 1) / sms) < 128 * ((wide + sms - 1) / sms);
}

/* The wide tile or the narrow one, as narrow_tiles_pay says; fp16's staging registers do not
 * fit beside 8 x 8 accumulators in 128 (they spill), so fp16 takes 8 x 4 where BM > 32. */
template <typename T, typename WIDE, typename NARROW>
static void launch_either(bool narrow, const T *x, const T *w, const T *bias, T *y,
                          conv2d_dims d, conv2d_activation act, cudaStream_t s)
{
    if constexpr (sizeof(T) == 2 && WIDE::BM > 32)
        launch<T, NARROW>(x, w, bias, y, d, act, s);
    else if (narrow)
        launch<T, NARROW>(x, w, bias, y, d, act, s);
    else
        launch<T, WIDE>(x, w, bias, y, d, act, s);
}

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    (void)workspace;
    const int bm = d.k > 64 ? 128 : d.k > 32 ? 64 : 32;
    const bool narrow = narrow_tiles_pay((d.k + bm - 1) / bm, d.n * d.p * d.q);
    if (bm == 128)
        launch_either<T, tile_128x128, tile_128x64>(narrow, x, w, bias, y, d, act, s);
    else if (bm == 64)
        launch_either<T, tile_64x128, tile_64x64>(narrow, x, w, bias, y, d, act, s);
    else
        launch_either<T, tile_32x128, tile_32x64>(narrow, x, w, bias, y, d, act, s);
}

CONV2D_FORWARD_LAUNCHER(v4)
