/* v8, vector strips: four neighbouring rows a lane, one wide load per channel.
 *
 * Idea: at `large-spatial` (64x1000x14x14) the rows are 1000 channels 196 elements apart, and
 * v3's strips give each lane one row: per channel a warp loads 32 neighbouring elements, 128
 * bytes in fp32 and 64 in fp16, one 4- or 2-byte access a lane. v3 reaches 52% of the roof in
 * fp32 and 33% in fp16, in nearly the same time for both dtypes: so it is not the bytes that
 * limit it but the number of memory requests an SM can keep in flight, each of which brings
 * half as much in fp16. Smaller blocks (two an SM) moved that by 5% at most. The fix is wider
 * requests: when H W is a multiple of 4, four neighbouring positions of one image are four
 * neighbouring elements of every channel, 16-byte aligned in fp32 (8 in fp16) if the tensor
 * is. So lane l owns 4 rows, and one 16-byte (8-byte) load brings a channel of all four: a
 * quarter of the requests for the same bytes.
 * The layout: a strip is TR x 4 neighbouring rows; the lanes of a warp are 32 / TR channel
 * groups of TR lanes, the warps more groups, each thread K <= 8 channels (forward: 8 x 4 = 32
 * values in registers; backward, y and dy: 4 channels). Each thread reduces its 4 rows over
 * its channels, shuffles combine the groups of a warp, and the warps' partial results meet in
 * shared memory, transposed so that one warp finishes each row with shuffles: two barriers,
 * and no thread reads more than one partial from shared memory.
 * What changed from v4: rows in fours per lane, and 16-byte (8-byte) loads and stores, on
 * strided rows; v4's one (max, sum) merge per row.
 * Expected: four times fewer load instructions and requests: `large-spatial` from 52% of the
 * roof (fp32) toward 85%, and fp16 up by more, since it was the further from its bytes.
 * Limits: strided rows (H W > 1, a multiple of 4) of 33 channels or more, tensors aligned to
 * 4 elements, up to 8192 channels (forward) or 4096 (backward). Everything else runs as v7
 * does, the seed shapes (10 channels, a whole row in one thread) included. */
#include "softmax.cuh"
#include "softmax.h"

#define POSITIONS 4   /* neighbouring rows a lane owns */
#define FWD_CHANNELS 8 /* channels a thread holds: 32 values */
#define BWD_CHANNELS 4 /* y and dy: 2 x 16 values */
#define MAX_WARPS 32
#define STRIP_ROWS (8 * POSITIONS) /* the most: TR = 8 */

/* 4 neighbouring elements as floats: one 16-byte load in fp32, 8-byte in fp16. */
__device__ __forceinline__ void load4(const float *p, float *v)
{
    const float4 q = *reinterpret_cast<const float4 *>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}

__device__ __forceinline__ void load4(const __half *p, float *v)
{
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&raw.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&raw.y));
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

__device__ __forceinline__ void store4(float *p, const float *v)
{
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void store4(__half *p, const float *v)
{
    uint2 raw;
    *reinterpret_cast<__half2 *>(&raw.x) = __floats2half2_rn(v[0], v[1]);
    *reinterpret_cast<__half2 *>(&raw.y) = __floats2half2_rn(v[2], v[3]);
    *reinterpret_cast<uint2 *>(p) = raw;
}

/* Where a thread works: its first channel g of `groups`, and the offset of channel 0 of its
 * 4 rows (which lie in one image, H W being a multiple of 4). */
struct vector_place {
    int64_t first;
    int g, groups, sub; /* sub: the thread's slot in the strip, 0 .. TR - 1 */
    bool live;
};

template <int TR>
__device__ __forceinline__ vector_place place_in_strip(int64_t rows, int C, int64_t S)
{
    constexpr int groups_per_warp = 32 / TR;
    vector_place vp;
    vp.sub = threadIdx.x % TR;
    vp.groups = blockDim.y * groups_per_warp;
    vp.g = threadIdx.y * groups_per_warp + threadIdx.x / TR;
    const int64_t r = ((int64_t)blockIdx.x * TR + vp.sub) * POSITIONS;
    vp.live = r < rows;
    vp.first = vp.live ? softmax_row_start(r, C, S) : 0;
    return vp;
}

/* op over every channel group of each of the strip's TR x 4 rows; each thread passes its 4
 * partial results and gets the 4 totals back. Shuffles first (the groups of a warp), then
 * part[warp][row] in shared memory, read transposed: warp w finishes rows w, w + warps, ...
 * with shuffles over the warps' partials, into total[row]. */
template <int TR, typename V, typename Op>
__device__ __forceinline__ void strip_reduce4(V *v, Op op, V (*part)[STRIP_ROWS], V *total,
                                              V identity)
{
    constexpr int ROWS = TR * POSITIONS;
#pragma unroll
    for (int lanes = TR; lanes < 32; lanes *= 2)
#pragma unroll
        for (int j = 0; j < POSITIONS; j++)
            v[j] = op(v[j], softmax_shfl_xor(v[j], lanes));
    const int lane = threadIdx.x, warp = threadIdx.y, warps = blockDim.y;
    if (lane < TR)
#pragma unroll
        for (int j = 0; j < POSITIONS; j++)
            part[warp][lane * POSITIONS + j] = v[j];
    __syncthreads();
    for (int row = warp; row < ROWS; row += warps) {
        V w = lane < warps ? part[lane][row] : identity;
#pragma unroll
        for (int lanes = 16; lanes > 0; lanes /= 2)
            w = op(w, softmax_shfl_xor(w, lanes));
        if (lane == 0)
            total[row] = w;
    }
    __syncthreads();
    const int sub = threadIdx.x % TR;
#pragma unroll
    for (int j = 0; j < POSITIONS; j++)
        v[j] = total[sub * POSITIONS + j];
}

template <typename T, int TR>
__global__ void __launch_bounds__(MAX_WARPS * 32)
    softmax_forward_vector_strips(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                                  int C, int64_t S)
{
    __shared__ softmax_stats part[MAX_WARPS][STRIP_ROWS], total[STRIP_ROWS];
    const vector_place vp = place_in_strip<TR>(rows, C, S);
    const int mine = vp.live && vp.g < C ? (C - vp.g + vp.groups - 1) / vp.groups : 0;
    const T *xp = x + vp.first + (int64_t)vp.g * S;
    const int64_t step = (int64_t)vp.groups * S;

    float v[FWD_CHANNELS][POSITIONS];
    softmax_stats st[POSITIONS];
#pragma unroll
    for (int j = 0; j < POSITIONS; j++)
        st[j] = {SOFTMAX_NO_VALUE, 0.f};
#pragma unroll
    for (int k = 0; k < FWD_CHANNELS; k++) {
        if (k < mine)
            load4(xp + k * step, v[k]);
#pragma unroll
        for (int j = 0; j < POSITIONS; j++) {
            v[k][j] = k < mine ? v[k][j] : SOFTMAX_NO_VALUE;
            st[j].max = fmaxf(st[j].max, v[k][j]);
        }
    }
#pragma unroll
    for (int k = 0; k < FWD_CHANNELS; k++)
#pragma unroll
        for (int j = 0; j < POSITIONS; j++) {
            v[k][j] = softmax_exp(v[k][j] - st[j].max); /* 0 for the padding */
            st[j].sum += v[k][j];
        }
    softmax_stats row[POSITIONS];
#pragma unroll
    for (int j = 0; j < POSITIONS; j++)
        row[j] = st[j];
    strip_reduce4<TR>(row, softmax_merge_op(), part, total, softmax_stats{SOFTMAX_NO_VALUE, 0.f});
    float scale[POSITIONS];
#pragma unroll
    for (int j = 0; j < POSITIONS; j++)
        scale[j] = softmax_exp(st[j].max - row[j].max) / row[j].sum;
    T *yp = y + vp.first + (int64_t)vp.g * S;
#pragma unroll
    for (int k = 0; k < FWD_CHANNELS; k++) {
        if (k >= mine)
            continue;
        float out[POSITIONS];
#pragma unroll
        for (int j = 0; j < POSITIONS; j++)
            out[j] = v[k][j] * scale[j];
        store4(yp + k * step, out);
    }
}

template <typename T, int TR>
__global__ void __launch_bounds__(MAX_WARPS * 32)
    softmax_backward_vector_strips(const T *__restrict__ y, const T *__restrict__ dy,
                                   T *__restrict__ dx, int64_t rows, int C, int64_t S)
{
    __shared__ float part[MAX_WARPS][STRIP_ROWS], total[STRIP_ROWS];
    const vector_place vp = place_in_strip<TR>(rows, C, S);
    const int mine = vp.live && vp.g < C ? (C - vp.g + vp.groups - 1) / vp.groups : 0;
    const int64_t offset = vp.first + (int64_t)vp.g * S, step = (int64_t)vp.groups * S;

    float yv[BWD_CHANNELS][POSITIONS], dv[BWD_CHANNELS][POSITIONS];
#pragma unroll
    for (int k = 0; k < BWD_CHANNELS; k++)
        if (k < mine) {
            load4(y + offset + k * step, yv[k]);
            load4(dy + offset + k * step, dv[k]);
        }
    float dot[POSITIONS] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < BWD_CHANNELS; k++)
#pragma unroll
        for (int j = 0; j < POSITIONS; j++)
            dot[j] += k < mine ? yv[k][j] * dv[k][j] : 0.f;
    strip_reduce4<TR>(dot, softmax_sum_op(), part, total, 0.f);
#pragma unroll
    for (int k = 0; k < BWD_CHANNELS; k++) {
        if (k >= mine)
            continue;
        float out[POSITIONS];
#pragma unroll
        for (int j = 0; j < POSITIONS; j++)
            out[j] = yv[k][j] * (dv[k][j] - dot[j]);
        store4(dx + offset + k * step, out);
    }
}

/* The widest strip (TR = 8, 4, 2 or 1 lanes a channel group) whose channel groups of `K`
 * channels fit in MAX_WARPS warps; 0 when C is too long for any. */
static int lanes_per_group(int C, int K, int *warps)
{
    for (int tr = 8; tr >= 1; tr /= 2) {
        const int groups = (C + K - 1) / K, per_warp = 32 / tr;
        *warps = (groups + per_warp - 1) / per_warp;
        if (*warps <= MAX_WARPS)
            return tr;
    }
    return 0;
}

/* Strided rows longer than a thread holds, with H W and the tensors in fours. */
static bool takes(struct softmax_dims d, size_t esize, const void *a, const void *b,
                  const void *c)
{
    const uintptr_t align = POSITIONS * esize;
    const bool aligned = (uintptr_t)a % align == 0 && (uintptr_t)b % align == 0 &&
                         (!c || (uintptr_t)c % align == 0);
    return d.h * d.w > 1 && (d.h * d.w) % POSITIONS == 0 && d.c > 32 && aligned;
}

#define LAUNCH_FOR_TR(kernel, args)                                                            \
    do {                                                                                       \
        const dim3 block(32, warps);                                                           \
        const unsigned blocks = (unsigned)((rows + tr * POSITIONS - 1) / (tr * POSITIONS));   \
        switch (tr) {                                                                          \
        case 8: kernel<T, 8><<<blocks, block, 0, s>>> args; break;                             \
        case 4: kernel<T, 4><<<blocks, block, 0, s>>> args; break;                             \
        case 2: kernel<T, 2><<<blocks, block, 0, s>>> args; break;                             \
        default: kernel<T, 1><<<blocks, block, 0, s>>> args; break;                            \
        }                                                                                      \
        LAUNCH_CHECK();                                                                        \
    } while (0)

template <typename T>
static bool forward(const T *x, T *y, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w, S = d.h * d.w;
    const int C = (int)d.c;
    int warps;
    const int tr = lanes_per_group(C, FWD_CHANNELS, &warps);
    if (!takes(d, sizeof(T), x, y, NULL) || !tr)
        return false;
    LAUNCH_FOR_TR(softmax_forward_vector_strips, (x, y, rows, C, S));
    return true;
}

template <typename T>
static bool backward(const T *y, const T *dy, T *dx, struct softmax_dims d, cudaStream_t s)
{
    const int64_t rows = d.n * d.h * d.w, S = d.h * d.w;
    const int C = (int)d.c;
    int warps;
    const int tr = lanes_per_group(C, BWD_CHANNELS, &warps);
    if (!takes(d, sizeof(T), y, dy, dx) || !tr)
        return false;
    LAUNCH_FOR_TR(softmax_backward_vector_strips, (y, dy, dx, rows, C, S));
    return true;
}

extern "C" void softmax_forward_v8(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   cudaStream_t s)
{
    const bool done = t == DT_FP32 ? forward((const float *)x, (float *)y, d, s)
                                   : forward((const __half *)x, (__half *)y, d, s);
    if (!done)
        softmax_forward_v7(x, y, d, t, s);
}

extern "C" void softmax_backward_v8(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, cudaStream_t s)
{
    const bool done =
        t == DT_FP32 ? backward((const float *)y, (const float *)dy, (float *)dx, d, s)
                     : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, s);
    if (!done)
        softmax_backward_v7(y, dy, dx, d, t, s);
}
