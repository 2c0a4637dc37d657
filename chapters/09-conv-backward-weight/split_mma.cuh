/* The split implicit GEMM on tensor cores, v4's kernel (v5 runs it with db too), fp16.
 *
 * A block owns 64 filters by 32 channels by up to 9 taps of dw (a tap group; a 5x5 filter has
 * three) over one slice of the output's row segments, a segment being 16 pixels of one output
 * row. Per segment it stages
 *   dy:  the 64 filters' 16 pixels, a 32-byte row a filter (A of mma.sync: filters by pixels);
 *   x:   the R input rows under the segment, 15 stride + S columns wide, channels last: a
 *        64-byte row of 32 channels a pixel, 0 off x.
 * B, pixels by channels for one tap (r, s), is then x's staged rows read at pixel
 * i stride + s of row r: ldmatrix lets every lane name its own row, so each tap is only a
 * shifted window on the same staged pixels, and one staging of x serves all the taps, each
 * element read R S / stride^2 times from shared memory instead of gathered as often from L2.
 * Each of the 8 warps holds 32 filters x 8 channels x 9 taps of sums (72 registers) and reuses
 * its dy fragments across the taps. Rows of x are swizzled (the 16-byte unit of 8 channels
 * XOR (pixel / 2) % 4) so that eight neighbouring pixels of one unit fall in different banks. */
#ifndef WGRAD_SPLIT_MMA_CUH
#define WGRAD_SPLIT_MMA_CUH

#include "mma_sync.cuh"
#include "wgrad.cuh"

#define MMA_THREADS 256
#define MMA_BM 64   /* filters a block */
#define MMA_BC 32   /* channels a block */
#define MMA_TAPS 9  /* taps a block */
#define MMA_SEG 16  /* pixels a segment: one k16 step */
#define MMA_X_PAIRS 8 /* channel pairs of x a thread stages per segment, at most */

struct mma_geometry {
    int span;         /* staged columns: 15 stride + S */
    int rows_per_img; /* segments of one image: P ceil(Q / 16) */
    int segs_per_row; /* ceil(Q / 16) */
    int c_tiles, groups;
};

static inline mma_geometry mma_geometry_of(conv2d_dims d)
{
    mma_geometry g;
    g.span = (int)((MMA_SEG - 1) * d.stride + d.s);
    g.segs_per_row = (int)((d.q + MMA_SEG - 1) / MMA_SEG);
    g.rows_per_img = (int)d.p * g.segs_per_row;
    g.c_tiles = (int)((d.c + MMA_BC - 1) / MMA_BC);
    g.groups = (int)((d.r * d.s + MMA_TAPS - 1) / MMA_TAPS);
    return g;
}

/* The filter's side, stride and staged span, compile-time constants in the kernels made for
 * the common filters (FR x FR at stride FST; 0: read from d), so that the staging's divisions
 * by them are multiplications. */
struct mma_filter {
    int r, s, stride, span;
};

template <int FR, int FST>
__device__ __forceinline__ mma_filter mma_filter_of(conv2d_dims d)
{
    mma_filter f;
    f.r = FR ? FR : (int)d.r;
    f.s = FR ? FR : (int)d.s;
    f.stride = FST ? FST : (int)d.stride;
    f.span = (MMA_SEG - 1) * f.stride + f.s;
    return f;
}

__host__ __device__ inline size_t mma_stage_bytes(conv2d_dims d, mma_geometry g)
{
    return (size_t)(d.r * g.span) * MMA_BC * 2 + MMA_BM * MMA_SEG * 2;
}

/* The block's tile (grid.x) and slice of segments [first, end) (grid.z). */
struct mma_place {
    int tile, k0, c0, tap0, first, end;
};

__device__ __forceinline__ mma_place mma_place_of(mma_geometry g, int segments, int per_slice)
{
    mma_place at;
    at.tile = blockIdx.x;
    const int per_k = g.c_tiles * g.groups;
    at.k0 = blockIdx.x / per_k * MMA_BM;
    at.c0 = blockIdx.x % per_k / g.groups * MMA_BC;
    at.tap0 = blockIdx.x % g.groups * MMA_TAPS;
    at.first = blockIdx.z * per_slice;
    at.end = at.first + per_slice < segments ? at.first + per_slice : segments;
    return at;
}

/* Byte offsets of the staged rows: x's pixel `pix`, unit (8 channels) `unit`; dy's filter k,
 * half (8 pixels) `half`. */
__device__ __forceinline__ int x_offset(int pix, int unit)
{
    return pix * 64 + ((unit ^ (pix >> 1)) & 3) * 16;
}
__device__ __forceinline__ int dy_offset(int k, int half)
{
    return k * 32 + ((half ^ (k >> 2)) & 1) * 16;
}

/* One segment's loads into registers, as fp16 pairs: x's channel pairs (this thread's e-th
 * is element threadIdx.x + 256 e of R x span x 16 pairs, columns fastest, so a warp reads
 * along rows) and dy's pixel pairs (64 filters x 8 pairs: 2 a thread). */
struct mma_stage_regs {
    __half2 x[MMA_X_PAIRS];
    __half2 dy[2];
};

__device__ __forceinline__ __half load_or_zero(const __half *p, bool ok)
{
    return ok ? *p : __float2half(0.f);
}

__device__ __forceinline__ void mma_load(const __half *__restrict__ x,
                                         const __half *__restrict__ dy, conv2d_dims d,
                                         mma_geometry g, mma_filter f, mma_place at, int seg,
                                         mma_stage_regs &regs)
{
    const int n = seg / g.rows_per_img, p = seg / g.segs_per_row % (int)d.p;
    const int q0 = seg % g.segs_per_row * MMA_SEG;
    const int H = (int)d.h, W = (int)d.w, C = (int)d.c, PQ = (int)(d.p * d.q);
    const int pairs = f.r * f.span * (MMA_BC / 2);
    const __half *image = x + (int64_t)n * C * H * W;
#pragma unroll
    for (int e = 0; e < MMA_X_PAIRS; e++) {
        const int item = threadIdx.x + MMA_THREADS * e;
        const int col = item % f.span, r = item / f.span % f.r;
        const int cp = item / (f.span * f.r);
        const int h = p * f.stride - (int)d.pad + r;
        const int w = q0 * f.stride - (int)d.pad + col;
        const int c = at.c0 + 2 * cp;
        const bool on_x = item < pairs && h >= 0 && h < H && w >= 0 && w < W;
        const __half *at_c = image + ((int64_t)c * H + h) * W + w;
        regs.x[e] = __halves2half2(load_or_zero(at_c, on_x && c < C),
                                   load_or_zero(at_c + H * W, on_x && c + 1 < C));
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int item = threadIdx.x + MMA_THREADS * e;
        const int k = at.k0 + item / 8, q = q0 + 2 * (item % 8);
        const __half *at_k = dy + ((int64_t)n * d.k + k) * PQ + p * (int)d.q + q;
        const bool live = k < (int)d.k;
        regs.dy[e] = __halves2half2(load_or_zero(at_k, live && q < (int)d.q),
                                    load_or_zero(at_k + 1, live && q + 1 < (int)d.q));
    }
}

__device__ __forceinline__ void mma_store(char *stage, mma_filter f, const mma_stage_regs &regs)
{
    const int pairs = f.r * f.span * (MMA_BC / 2);
    char *dys = stage + (size_t)(f.r * f.span) * MMA_BC * 2;
#pragma unroll
    for (int e = 0; e < MMA_X_PAIRS; e++) {
        const int item = threadIdx.x + MMA_THREADS * e;
        if (item >= pairs)
            break;
        const int col = item % f.span, r = item / f.span % f.r;
        const int cp = item / (f.span * f.r);
        const int pix = r * f.span + col;
        *(__half2 *)(stage + x_offset(pix, cp / 4) + cp % 4 * 4) = regs.x[e];
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int item = threadIdx.x + MMA_THREADS * e;
        const int k = item / 8, pair = item % 8;
        *(__half2 *)(dys + dy_offset(k, pair / 4) + pair % 4 * 4) = regs.dy[e];
    }
}

/* One segment's products: this warp's 32 filters (two m16 tiles) x 8 channels, every tap. */
__device__ __forceinline__ void mma_segment(const char *stage, mma_filter f, mma_place at,
                                            float acc[2][MMA_TAPS][4])
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kh = warp / 4, cg = warp % 4;
    const uint32_t xs = kl_shared_address(stage);
    const uint32_t dys = xs + (uint32_t)(f.r * f.span) * MMA_BC * 2;
    uint32_t a[2][4];
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const int k = kh * 32 + m * 16 + (lane / 8 & 1) * 8 + lane % 8;
        kl_ldmatrix_x4(a[m], dys + dy_offset(k, lane / 16));
    }
    const int taps = f.r * f.s - at.tap0;
    const int i = (lane / 8 & 1) * 8 + lane % 8; /* this lane's pixel row of B */
#pragma unroll
    for (int t = 0; t < MMA_TAPS; t += 2) {
        if (t >= taps)
            break;
        const int tap = at.tap0 + t + (lane / 16 && t + 1 < taps ? 1 : 0);
        const int pix = tap / f.s * f.span + i * f.stride + tap % f.s;
        uint32_t b[4];
        kl_ldmatrix_x4_trans(b, xs + x_offset(pix, cg));
#pragma unroll
        for (int m = 0; m < 2; m++) {
            kl_mma_16816(acc[m][t], a[m], b);
            if (t + 1 < MMA_TAPS && t + 1 < taps)
                kl_mma_16816(acc[m][t + 1], a[m], b + 2);
        }
    }
}

/* db's share of a segment: this thread's filter row of the staged dy, summed in pixel order. */
__device__ __forceinline__ float mma_row_sum(const char *stage, mma_filter f)
{
    const char *dys = stage + (size_t)(f.r * f.span) * MMA_BC * 2;
    float sum = 0.f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const __half *row = (const __half *)(dys + dy_offset(threadIdx.x, half));
#pragma unroll
        for (int j = 0; j < 8; j++)
            sum += __half2float(row[j]);
    }
    return sum;
}

/* Where the sum in acc[m][t][v] belongs: its dw index, or -1 off dw. */
__device__ __forceinline__ int mma_weight_index(conv2d_dims d, mma_place at, int m, int t, int v)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k = at.k0 + warp / 4 * 32 + m * 16 + lane / 4 + (v >= 2 ? 8 : 0);
    const int c = at.c0 + warp % 4 * 8 + lane % 4 * 2 + (v & 1), tap = at.tap0 + t;
    const int rs = (int)(d.r * d.s);
    if (k >= (int)d.k || c >= (int)d.c || t >= MMA_TAPS || tap >= rs)
        return -1;
    return (k * (int)d.c + c) * rs + tap;
}

template <bool WITH_BIAS, int FR, int FST>
__global__ void __launch_bounds__(MMA_THREADS, 2)
    wgrad_split_mma(const __half *__restrict__ x, const __half *__restrict__ dy,
                    __half *__restrict__ dw, __half *__restrict__ db, conv2d_dims d,
                    mma_geometry g, wgrad_slices ws, int slices, int segments, int per_slice)
{
    extern __shared__ __align__(128) char smem[];
    const size_t stage_bytes = mma_stage_bytes(d, g);
    const mma_filter f = mma_filter_of<FR, FST>(d);
    const mma_place at = mma_place_of(g, segments, per_slice);
    const bool sums_bias = WITH_BIAS && at.c0 == 0 && at.tap0 == 0 && threadIdx.x < MMA_BM &&
                           at.k0 + (int)threadIdx.x < (int)d.k;
    const int warp = threadIdx.x / 32;
    const bool idle = at.k0 + warp / 4 * 32 >= (int)d.k || at.c0 + warp % 4 * 8 >= (int)d.c;
    float acc[2][MMA_TAPS][4] = {}, bias = 0.f;
    mma_stage_regs regs;
    if (at.first < at.end) {
        mma_load(x, dy, d, g, f, at, at.first, regs);
        mma_store(smem, f, regs);
    }
    __syncthreads();
    int buf = 0;
    for (int seg = at.first; seg < at.end; seg++) {
        const bool more = seg + 1 < at.end;
        if (more)
            mma_load(x, dy, d, g, f, at, seg + 1, regs);
        const char *stage = smem + buf * stage_bytes;
        if (!idle)
            mma_segment(stage, f, at, acc);
        if (sums_bias)
            bias += mma_row_sum(stage, f);
        if (more)
            mma_store(smem + (buf ^ 1) * stage_bytes, f, regs);
        __syncthreads();
        buf ^= 1;
    }

    float *mine = ws.partials + (int64_t)blockIdx.z * ws.floats;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int t = 0; t < MMA_TAPS; t++)
#pragma unroll
            for (int v = 0; v < 4; v++) {
                const int e = mma_weight_index(d, at, m, t, v);
                if (e < 0)
                    continue;
                if (slices == 1)
                    dw[e] = __float2half(acc[m][t][v]);
                else
                    mine[e] = acc[m][t][v];
            }
    if (sums_bias) {
        const int k = at.k0 + threadIdx.x;
        if (slices == 1)
            db[k] = __float2half(bias);
        else
            mine[d.k * wgrad_columns(d) + k] = bias;
    }
}

/* NULL where the kernel takes d: fp16, and x's staged rows within what a thread stages. */
static inline const char *split_mma_unsupported(conv2d_dims d, enum dtype t)
{
    if (t != DT_FP16)
        return "tensor cores here take fp16 (fp32 runs on v3)";
    const mma_geometry g = mma_geometry_of(d);
    if (d.r * g.span * (MMA_BC / 2) > MMA_X_PAIRS * MMA_THREADS)
        return "the filter's rows under a segment pass 128 pixels (R (15 stride + S) > 128)";
    if (kl_device_cc() < 80)
        return "mma.sync needs compute capability 8.0";
    return NULL;
}

/* The launch: as many blocks an SM as fit at once, slices of at least 8 segments, then the
 * second pass. The kernel is made for 3x3 filters at stride 1 and 2 and for 1x1, whose
 * divisions then fold; other filters take the general one. */
template <bool WITH_BIAS, int FR, int FST>
static void launch_split_mma_made(const __half *x, const __half *dy, __half *dw, __half *db,
                                  conv2d_dims d, void *workspace, cudaStream_t s)
{
    const mma_geometry g = mma_geometry_of(d);
    const int segments = (int)d.n * g.rows_per_img;
    const int64_t tiles = (d.k + MMA_BM - 1) / MMA_BM * g.c_tiles * g.groups;
    const size_t smem = 2 * mma_stage_bytes(d, g); /* at most 20 KB: R span <= 128 */
    const int fit =
        kl_blocks_per_sm((const void *)wgrad_split_mma<WITH_BIAS, FR, FST>, MMA_THREADS, smem);
    int64_t slices = ((int64_t)kl_sm_count() * fit + tiles - 1) / tiles;
    const int64_t by_length = (segments + 7) / 8;
    slices = slices < by_length ? slices : by_length;
    slices = slices < wgrad_max_slices(d) ? slices : wgrad_max_slices(d);
    slices = slices < 1 ? 1 : slices;
    const int per_slice = (int)((segments + slices - 1) / slices);
    slices = (segments + per_slice - 1) / per_slice;
    const wgrad_slices ws = wgrad_slices_of(d, workspace);
    const dim3 grid((unsigned)tiles, 1, (unsigned)slices);
    wgrad_split_mma<WITH_BIAS, FR, FST><<<grid, MMA_THREADS, smem, s>>>(
        x, dy, dw, db, d, g, ws, (int)slices, segments, per_slice);
    LAUNCH_CHECK();
    if (slices > 1)
        wgrad_finish_slices(ws.partials, (int)slices, d, dw, WITH_BIAS ? db : NULL, DT_FP16, s);
}

template <bool WITH_BIAS>
static void launch_split_mma(const __half *x, const __half *dy, __half *dw, __half *db,
                             conv2d_dims d, void *workspace, cudaStream_t s)
{
    const bool square = d.r == d.s;
    if (square && d.r == 3 && d.stride == 1)
        launch_split_mma_made<WITH_BIAS, 3, 1>(x, dy, dw, db, d, workspace, s);
    else if (square && d.r == 3 && d.stride == 2)
        launch_split_mma_made<WITH_BIAS, 3, 2>(x, dy, dw, db, d, workspace, s);
    else if (square && d.r == 1 && d.stride == 1)
        launch_split_mma_made<WITH_BIAS, 1, 1>(x, dy, dw, db, d, workspace, s);
    else
        launch_split_mma_made<WITH_BIAS, 0, 0>(x, dy, dw, db, d, workspace, s);
}

#endif
