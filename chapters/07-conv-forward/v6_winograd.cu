/* v6, Winograd F(2x2, 3x3): each 2x2 tile of outputs from its 4x4 input patch, 16 multiplies a
 * channel instead of 36.
 *
 * Idea: Y = A^T [sum over c of (G g_c G^T) .* (B^T d_c B)] A for the patch d_c and filter g_c of
 * each channel. With U = G g G^T (the filters, transformed each call into the workspace by a
 * small kernel) and V = B^T d B (the patches), the sum is 16 independent products, one per
 * place xi of the 4x4 transformed tile: M[xi] = U[xi] (K x C) times V[xi] (C x tiles).
 * What changed from v4: the reduction runs over C in the transformed domain, not over C R S.
 * A block takes 32 tiles (a lane each) and 64 filters (32 where K <= 32). Per chunk of 8
 * channels a thread loads a patch and writes its 16 V's to shared memory while cp.async brings
 * the chunk's U; each thread then multiplies one xi for 8 filters x 16 tiles, 128 FMAs for six
 * 16-byte shared loads (chapter 05's wide tiles), as the next chunk's patches and U travel.
 * The 16 xi of a tile meet in shared memory (two rounds of half the filters), where a thread
 * per (filter, tile) applies A^T M A, the bias and the activation.
 * Expected: 2.25x fewer FMAs than a direct sum, plus the transforms' additions and the
 * exchange's 256 KB of shared traffic a block (the products of 8 channels: heavy at small C).
 * resnet needs 23 of the 60 fp32 TFLOP/s for the bar: 90-120 us expected, large 60-90 us.
 * Accuracy: B, A hold 0 and +-1 and G halves: a V sums up to 4 inputs, a U 9 weights / 4, an
 * output 9 of the 16 M's, which partly cancel, but an M sums C products, not 9 C: the error
 * should be no worse than v4's. F(4x4) would save 1.8x of the products, not needed for the
 * bars, at coefficients up to 5 and 1/24, 36 M's to exchange and ten times the error.
 * Limits: 3x3 filters, stride 1, any padding and size (partial tiles zero-filled, stores
 * guarded); 99 KB of shared memory a block (else v4 runs). Workspace: U, 16 K C floats.
 * Measured (H200): resnet 133 us fp32, 55.8 effective TFLOP/s, 1.19x cuDNN (predicted 90-120);
 * large 106 us, 2.49x; max abs error 1.4e-5 at resnet against v4's 5.8e-5. */
#include "async_copy.cuh"
#include "conv.cuh"

/* Tuning constants. */
#define TILES 32    /* 2x2 tiles a block: one a lane of a warp (the exchange reads by lane) */
#define CHUNK 8     /* channels a stage: more, fewer barriers a FMA; fewer, less shared memory */
#define WIDE_K 64   /* filters a block: 128 accumulators a thread, one block of 8 warps an SM */
#define NARROW_K 32 /* filters a block where K <= 32: no idle half, two blocks an SM */

#define POSITIONS 16 /* xi: the 4x4 transformed tile */
#define THREADS(bk) (4 * (bk)) /* 16 xi x bk/8 rows of 8 filters x 2 columns of 16 tiles */
/* Shared memory, in floats: two stages of U [16][CHUNK][bk] and V [16][CHUNK][TILES], then,
 * after the loop, half of M [16][bk/2][TILES] over them. The pads put what a warp reads or
 * writes at once on different banks (multiply_chunk, spill_products). */
#define U_STRIDE(bk) (CHUNK * (bk) + 16)
#define V_STRIDE (CHUNK * TILES + 8)
#define M_ROW (TILES + 4)
#define M_STRIDE(bk) ((bk) / 2 * M_ROW + 8)
#define STAGE_FLOATS(bk) (POSITIONS * (U_STRIDE(bk) + V_STRIDE))
#define SHARED_BYTES(bk) (sizeof(float) * 2 * STAGE_FLOATS(bk)) /* > 16 M_STRIDE(bk) */

/* The shape as the kernels see it, in 32 bits (every tensor < 2^31 elements), and its tiling. */
struct winograd_shape {
    int c, h, w, k, p, q, pad;
    int tiles_q, tiles_image, tiles; /* 2x2 tiles along a row of y, in an image, in all */
    int k_padded, chunks;            /* U's filters (a multiple of the block's) and chunks of C */
};

/* A lane's tile: image n, first output row p and column q. */
struct winograd_tile {
    int n, p, q;
    bool inside; /* not past the last tile */
};

/* Where the tile's 4x4 patch of channel c lies: x[n, c, p - pad + a, q - pad + b] is element
 * origin + c H W + a W + b, read where bit a of rows and bit b of cols say it is inside x.
 * Unsigned: origin lies before x when the patch starts in the padding; the offsets that are
 * read are exact modulo 2^32. */
struct winograd_patch {
    unsigned origin, rows, cols;
};

__device__ __forceinline__ winograd_tile tile_of(const winograd_shape &sh, int64_t index)
{
    winograd_tile t;
    t.inside = index < sh.tiles;
    const int tile = t.inside ? (int)index : 0;
    t.n = tile / sh.tiles_image;
    const int rest = tile - t.n * sh.tiles_image;
    t.p = 2 * (rest / sh.tiles_q);
    t.q = 2 * (rest % sh.tiles_q);
    return t;
}

__device__ __forceinline__ winograd_patch patch_of(const winograd_shape &sh,
                                                   const winograd_tile &t)
{
    const int top = t.p - sh.pad, left = t.q - sh.pad;
    winograd_patch pt;
    pt.origin = (unsigned)(t.n * sh.c * sh.h * sh.w) + (unsigned)(top * sh.w + left);
    pt.rows = pt.cols = 0;
#pragma unroll
    for (int a = 0; a < 4; a++) {
        pt.rows |= ((unsigned)(top + a) < (unsigned)sh.h) << a;
        pt.cols |= ((unsigned)(left + a) < (unsigned)sh.w) << a;
    }
    if (!t.inside)
        pt.rows = 0;
    return pt;
}

/* U = G g G^T, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]; g and u row-major. */
__device__ __forceinline__ void transform_filter(const float g[9], float u[16])
{
    float t[12]; /* G g, 4 x 3 */
#pragma unroll
    for (int j = 0; j < 3; j++) {
        t[j] = g[j];
        t[3 + j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
        t[6 + j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
        t[9 + j] = g[6 + j];
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        u[4 * a] = t[3 * a];
        u[4 * a + 1] = 0.5f * (t[3 * a] + t[3 * a + 1] + t[3 * a + 2]);
        u[4 * a + 2] = 0.5f * (t[3 * a] - t[3 * a + 1] + t[3 * a + 2]);
        u[4 * a + 3] = t[3 * a + 2];
    }
}

/* V = B^T d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: additions only. */
template <typename T>
__device__ __forceinline__ void transform_patch(const T raw[16], float v[16])
{
    float e[16]; /* B^T d */
#pragma unroll
    for (int b = 0; b < 4; b++) {
        const float d0 = to_float(raw[b]), d1 = to_float(raw[4 + b]);
        const float d2 = to_float(raw[8 + b]), d3 = to_float(raw[12 + b]);
        e[b] = d0 - d2;
        e[4 + b] = d1 + d2;
        e[8 + b] = d2 - d1;
        e[12 + b] = d1 - d3;
    }
#pragma unroll
    for (int a = 0; a < 4; a++) {
        v[4 * a] = e[4 * a] - e[4 * a + 2];
        v[4 * a + 1] = e[4 * a + 1] + e[4 * a + 2];
        v[4 * a + 2] = e[4 * a + 2] - e[4 * a + 1];
        v[4 * a + 3] = e[4 * a + 1] - e[4 * a + 3];
    }
}

/* Y = A^T M A, A^T = [1 1 1 0; 0 1 -1 -1]: the 2x2 outputs, row-major. */
__device__ __forceinline__ void transform_output(const float m[16], float y[4])
{
    float f[8]; /* A^T M, 2 x 4 */
#pragma unroll
    for (int b = 0; b < 4; b++) {
        f[b] = m[b] + m[4 + b] + m[8 + b];
        f[4 + b] = m[4 + b] - m[8 + b] - m[12 + b];
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        y[2 * i] = f[4 * i] + f[4 * i + 1] + f[4 * i + 2];
        y[2 * i + 1] = f[4 * i + 1] - f[4 * i + 2] - f[4 * i + 3];
    }
}

/* Item i of the filter kernel: filter k = i % k_padded, channel c = i / k_padded, stored as
 * u[c][xi][k] (a row of k_padded filters for each channel of the chunks), zero past K and C so
 * that the main kernel's copies need no bounds. */
template <typename T>
__device__ __forceinline__ void transform_filter_item(const T *__restrict__ w,
                                                      float *__restrict__ u, int c, int k,
                                                      int k_padded, int64_t i)
{
    const int kk = (int)(i % k_padded), cc = (int)(i / k_padded);
    float g[9] = {}, v[16];
    if (kk < k && cc < c)
        for (int j = 0; j < 9; j++)
            g[j] = to_float(w[(kk * c + cc) * 9 + j]);
    transform_filter(g, v);
    for (int xi = 0; xi < POSITIONS; xi++)
        u[((int64_t)cc * POSITIONS + xi) * k_padded + kk] = v[xi];
}

template <typename T>
__global__ void winograd_filters(const T *__restrict__ w, float *__restrict__ u, int c, int k,
                                 int c_padded, int k_padded)
{
    kl_let_next_grid_start(); /* the main kernel's blocks may start their patches meanwhile */
    const int64_t items = (int64_t)c_padded * k_padded;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items;
         i += (int64_t)gridDim.x * blockDim.x)
        transform_filter_item(w, u, c, k, k_padded, i);
}

/* This thread's patches of a chunk: channel tid / TILES (and + THREADS / TILES), its lane's tile;
 * zeros in the padding, past C and past the last tile. */
template <typename T, int BK>
__device__ __forceinline__ void load_patches(const T *__restrict__ x, const winograd_shape &sh,
                                             const winograd_patch &pt, int chunk, int tid,
                                             T raw[][16])
{
    const T zero = from_float<T>(0.f);
#pragma unroll
    for (int i = 0; i < CHUNK * TILES / THREADS(BK); i++) {
        const int c = chunk * CHUNK + tid / TILES + THREADS(BK) / TILES * i;
        const unsigned rows = c < sh.c ? pt.rows : 0;
        const unsigned plane = pt.origin + (unsigned)c * (unsigned)(sh.h * sh.w);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++)
                raw[i][4 * a + b] = (rows >> a & pt.cols >> b & 1)
                                        ? x[plane + (unsigned)(a * sh.w + b)]
                                        : zero;
    }
}

/* V[xi][c][tile] of this thread's patches: a warp writes 32 neighbouring floats a store. */
template <typename T, int BK>
__device__ __forceinline__ void store_patches(const T raw[][16], float *v_s, int tid)
{
#pragma unroll
    for (int i = 0; i < CHUNK * TILES / THREADS(BK); i++) {
        float v[16];
        transform_patch(raw[i], v);
        const int c = tid / TILES + THREADS(BK) / TILES * i;
#pragma unroll
        for (int xi = 0; xi < POSITIONS; xi++)
            v_s[xi * V_STRIDE + c * TILES + tid % TILES] = v[xi];
    }
}

/* The chunk's U for filters k0 .. k0 + BK - 1: 16 CHUNK rows of BK floats, 16 bytes a copy,
 * 8 copies a thread, neighbouring threads on neighbouring bytes. */
template <int BK>
__device__ __forceinline__ void copy_filters(const float *__restrict__ u,
                                             const winograd_shape &sh, int k0, int chunk,
                                             float *u_s, int tid)
{
    constexpr int parts = BK / 4; /* copies a row */
#pragma unroll
    for (int i = 0; i < POSITIONS * CHUNK * parts / THREADS(BK); i++) {
        const int copy = tid + THREADS(BK) * i, row = copy / parts, part = copy % parts;
        const int c = row / POSITIONS, xi = row % POSITIONS;
        const float *from =
            u + ((size_t)(chunk * CHUNK + c) * POSITIONS + xi) * sh.k_padded + k0 + 4 * part;
        kl_copy16_async((uint4 *)(u_s + xi * U_STRIDE(BK) + c * BK + 4 * part),
                        (const uint4 *)from);
    }
}

/* Thread tid multiplies place xi = tid / (BK/4) for filters 4 row + {0..3} and BK/2 + 4 row +
 * {0..3} (acc's rows) by tiles 8 j + 4 col + {0..3}, j = 0..3 (acc's columns). A warp's U loads
 * are 8 filters' runs (2 or 4 places, whose rows U_STRIDE sets 16 banks apart), its V loads 2
 * places x 2 columns or 4 x 2, 8 floats apart by V_STRIDE: no bank conflicts. */
template <int BK>
__device__ __forceinline__ void multiply_chunk(const float *u_s, const float *v_s, int tid,
                                               float acc[8][16])
{
    const int xi = tid / (BK / 4), row = tid % (BK / 4) / 2, col = tid % 2;
    const float *u_row = u_s + xi * U_STRIDE(BK) + 4 * row;
    const float *v_row = v_s + xi * V_STRIDE + 4 * col;
#pragma unroll
    for (int c = 0; c < CHUNK; c++) {
        float a[8], b[16];
        *(float4 *)&a[0] = *(const float4 *)(u_row + c * BK);
        *(float4 *)&a[4] = *(const float4 *)(u_row + c * BK + BK / 2);
#pragma unroll
        for (int j = 0; j < 4; j++)
            *(float4 *)&b[4 * j] = *(const float4 *)(v_row + c * TILES + 8 * j);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 16; j++)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

/* Half `half` of the filters (acc's rows 4 half ..) to m[xi][k - half BK/2][tile]. M_ROW and
 * M_STRIDE spread a warp's 32 16-byte stores evenly over the banks: 4 wavefronts, the least. */
template <int BK>
__device__ __forceinline__ void spill_products(const float acc[8][16], int half, float *m,
                                               int tid)
{
    const int xi = tid / (BK / 4), row = tid % (BK / 4) / 2, col = tid % 2;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float *p = &acc[4 * half + i][4 * j];
            *(float4 *)(m + xi * M_STRIDE(BK) + (4 * row + i) * M_ROW + 8 * j + 4 * col) =
                make_float4(p[0], p[1], p[2], p[3]);
        }
}

/* Filters k0 + half BK/2 + warp + (BK/8) i of the lane's tile: its 16 M's from the exchange,
 * A^T M A, the epilogue, the stores that fall inside y. */
template <typename T, int BK>
__device__ __forceinline__ void finish_outputs(const float *m, int half, const winograd_shape &sh,
                                               const winograd_tile &tile, int k0,
                                               const T *__restrict__ bias, T *__restrict__ y,
                                               conv2d_activation act, int tid)
{
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int i = 0; i < BK / 2 / (BK / 8); i++) {
        const int kh = warp + BK / 8 * i, k = k0 + half * BK / 2 + kh;
        if (k >= sh.k || !tile.inside)
            continue;
        float mv[16], out[4];
#pragma unroll
        for (int xi = 0; xi < POSITIONS; xi++)
            mv[xi] = m[xi * M_STRIDE(BK) + kh * M_ROW + lane];
        transform_output(mv, out);
        T *plane = y + (tile.n * sh.k + k) * sh.p * sh.q;
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int s = 0; s < 2; s++)
                if (tile.p + r < sh.p && tile.q + s < sh.q)
                    plane[(tile.p + r) * sh.q + tile.q + s] =
                        from_float<T>(conv_epilogue(out[2 * r + s], bias, k, act));
    }
}

template <typename T, int BK>
__global__ void __launch_bounds__(THREADS(BK), 256 / THREADS(BK))
    winograd_conv(const T *__restrict__ x, const float *__restrict__ u,
                  const T *__restrict__ bias, T *__restrict__ y, winograd_shape sh,
                  conv2d_activation act)
{
    extern __shared__ __align__(16) float smem[];
    float *u_s = smem, *v_s = smem + 2 * POSITIONS * U_STRIDE(BK);
    const int tid = threadIdx.x, k_blocks = sh.k_padded / BK;
    const int k0 = (int)(blockIdx.x % k_blocks) * BK;
    const winograd_tile tile =
        tile_of(sh, (int64_t)(blockIdx.x / k_blocks) * TILES + tid % TILES);
    const winograd_patch patch = patch_of(sh, tile);
    T raw[CHUNK * TILES / THREADS(BK)][16];
    load_patches<T, BK>(x, sh, patch, 0, tid, raw);
    kl_wait_for_previous_grid(); /* U is the filter kernel's output; x is older */
    copy_filters<BK>(u, sh, k0, 0, u_s, tid);
    kl_copies_commit();
    store_patches<T, BK>(raw, v_s, tid);
    kl_copies_wait<0>();
    __syncthreads();

    float acc[8][16] = {};
    for (int chunk = 0; chunk < sh.chunks; chunk++) {
        const int now = chunk % 2, next = 1 - now;
        const bool more = chunk + 1 < sh.chunks;
        if (more) { /* into the other stage, read by nobody since the last barrier */
            copy_filters<BK>(u, sh, k0, chunk + 1, u_s + next * POSITIONS * U_STRIDE(BK), tid);
            kl_copies_commit();
            load_patches<T, BK>(x, sh, patch, chunk + 1, tid, raw);
        }
        multiply_chunk<BK>(u_s + now * POSITIONS * U_STRIDE(BK), v_s + now * POSITIONS * V_STRIDE,
                           tid, acc);
        if (more)
            store_patches<T, BK>(raw, v_s + next * POSITIONS * V_STRIDE, tid);
        kl_copies_wait<0>();
        __syncthreads();
    }

    /* The exchange overwrites both stages, which every thread has finished reading. */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        spill_products<BK>(acc, half, smem, tid);
        __syncthreads();
        finish_outputs<T, BK>(smem, half, sh, tile, k0, bias, y, act, tid);
        if (half == 0)
            __syncthreads();
    }
}

static int filters_a_block(const conv2d_dims &d)
{
    return d.k <= NARROW_K ? NARROW_K : WIDE_K;
}

static winograd_shape shape_of(const conv2d_dims &d)
{
    const int bk = filters_a_block(d);
    winograd_shape sh;
    sh.c = (int)d.c;
    sh.h = (int)d.h;
    sh.w = (int)d.w;
    sh.k = (int)d.k;
    sh.p = (int)d.p;
    sh.q = (int)d.q;
    sh.pad = (int)d.pad;
    sh.tiles_q = (int)((d.q + 1) / 2);
    sh.tiles_image = (int)((d.p + 1) / 2) * sh.tiles_q;
    sh.tiles = (int)d.n * sh.tiles_image;
    sh.k_padded = (int)((d.k + bk - 1) / bk * bk);
    sh.chunks = (int)((d.c + CHUNK - 1) / CHUNK);
    return sh;
}

/* false where the device lacks the shared memory. */
template <typename T, int BK>
static bool launch(const T *x, const T *w, const T *bias, T *y, const winograd_shape &sh,
                   conv2d_activation act, float *u, cudaStream_t s)
{
    static const size_t room = kl_grant_shared_memory((const void *)winograd_conv<T, BK>);
    if (room < SHARED_BYTES(BK))
        return false;
    const int64_t items = (int64_t)sh.chunks * CHUNK * sh.k_padded;
    winograd_filters<T><<<conv_blocks(items, 256), 256, 0, s>>>(
        w, u, sh.c, sh.k, sh.chunks * CHUNK, sh.k_padded);
    LAUNCH_CHECK();
    const unsigned blocks =
        (unsigned)(((int64_t)sh.tiles + TILES - 1) / TILES * (sh.k_padded / BK));
    const struct kl_launch_opts early = {1, kl_device_cc() >= 90};
    kl_launch(winograd_conv<T, BK>, dim3(blocks), dim3(THREADS(BK)), SHARED_BYTES(BK), s, early,
              x, (const float *)u, bias, y, sh, act);
    return true;
}

template <typename T>
static void forward(const T *x, const T *w, const T *bias, T *y, conv2d_dims d,
                    conv2d_activation act, void *workspace, cudaStream_t s)
{
    const enum dtype t = sizeof(T) == sizeof(float) ? DT_FP32 : DT_FP16;
    bool done = false;
    if (!conv2d_forward_v6_unsupported(d, t)) {
        const winograd_shape sh = shape_of(d);
        float *u = (float *)workspace;
        done = filters_a_block(d) == NARROW_K
                   ? launch<T, NARROW_K>(x, w, bias, y, sh, act, u, s)
                   : launch<T, WIDE_K>(x, w, bias, y, sh, act, u, s);
    }
    if (!done)
        conv2d_forward_v4(x, w, bias, y, d, act, t, workspace, s);
}

CONV2D_FORWARD_LAUNCHER(v6)

extern "C" const char *conv2d_forward_v6_unsupported(struct conv2d_dims d, enum dtype t)
{
    (void)t;
    return d.r == 3 && d.s == 3 && d.stride == 1 ? NULL : "3x3 filters with stride 1 only";
}

/* U: 16 floats for every filter and channel, K and C padded to the block's tiles. */
extern "C" size_t conv2d_winograd_workspace_bytes(struct conv2d_dims d, enum dtype t)
{
    if (conv2d_forward_v6_unsupported(d, t))
        return 0;
    const winograd_shape sh = shape_of(d);
    const size_t bytes = sizeof(float) * POSITIONS * (size_t)sh.k_padded * sh.chunks * CHUNK;
    return (bytes + 255) / 256 * 256;
}
