/* v4, fused and online: a long row read from DRAM once, loss and gradient from one kernel.
 *
 * Idea: for rows longer than a warp's registers hold (C > 1024), a block per row makes a single
 * sweep over the logits in 16-byte packs, keeping a running maximum m and a running sum s of
 * exp(x - m) per thread: when a pack brings a larger maximum, s is rescaled by exp(old m -
 * new m) (the online logsumexp, cross_entropy.cuh). The block merges its threads' (m, s) pairs
 * with shuffles and one pass through shared memory. For the gradient the sweep also copies the
 * row into shared memory (up to 227 KB: about 58K fp32 or 116K fp16 logits), so dx is computed from
 * the copy and the row is never read from DRAM a second time; thread 0 adds the loss term
 * from the copy too. Rows of up to 1024 logits keep v3's warp-per-row kernel, which already
 * reads them once from registers: there is nothing left to fuse there.
 * What changed from v3 (and v2) for long rows: one sweep instead of two (fwd) or three (bwd,
 * fwd_bwd), so the bytes from DRAM fall to the minimum: the logits once, dx once; and 16-byte
 * loads and stores (a row of odd length starts at any alignment, so each row is split into a
 * scalar head, whole packs and a scalar tail).
 * Mapping: 1024 threads when the row copy takes more than half an SM's shared memory (fp32
 * rows past about 29K logits), so that the one block a SM holds has 1024 threads' loads in flight;
 * else 512 threads for rows over 2048 packs (two or more blocks a SM, whose sweeps and
 * gradient writes then overlap), else 256. Each thread keeps 4 packs (64 bytes) in flight.
 * Predicted: at the large preset (8192 x 50257) fwd near the read bandwidth, bwd and fwd_bwd
 * near the copy roof (each is a read and a write of N C elements): ~90% of the roof, short of
 * it by the pause at each row's merge (about 2 us in a row of about 13 us). At 1024 x 4096 and
 * 1024 x 16384, 2 to 3 times v3, which reads those rows two (fwd) or three (bwd) times.
 * Limits: rows past the shared-memory copy are read a second time for the gradient (from L2
 * if it still holds them); one block per row leaves SMs idle when N is below the SM count; the
 * per-row merge costs two barriers, which dominates rows of a few thousand logits. */
#include "cross_entropy.cuh"
#include "cross_entropy.h"
#include "launch.cuh"

#define MAX_THREADS 1024

/* One sweep over the row: the thread's online (m, s), and, when `copy` is not NULL, the row
 * stored at copy[c] (copy has the same offset from a 16-byte boundary as xr). */
template <typename T>
static __device__ ce_online sweep_row(const T *__restrict__ xr, int n_classes, T *copy)
{
    using pack = pack16<T>;
    constexpr int W = pack::width;
    const ce_row_split r = ce_split_row(xr, n_classes);
    const int tid = threadIdx.x, stride = blockDim.x;
    ce_online st = ce_online_empty();
    if (tid < r.head) {
        const T e = xr[tid];
        if (copy)
            copy[tid] = e;
        float v = to_float(e);
        st = ce_online_push<1>(st, &v);
    }
    const uint4 *xp = reinterpret_cast<const uint4 *>(xr + r.head);
    uint4 *cp = copy ? reinterpret_cast<uint4 *>(copy + r.head) : nullptr;
    for (int p0 = tid; p0 < r.n_packs; p0 += CE_UNROLL * stride) {
        pack v[CE_UNROLL];
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            const int p = p0 + u * stride;
            if (p < r.n_packs)
                v[u].raw = xp[p];
        }
#pragma unroll
        for (int u = 0; u < CE_UNROLL; u++) {
            const int p = p0 + u * stride;
            if (p < r.n_packs) {
                if (cp)
                    cp[p] = v[u].raw;
                float f[W];
#pragma unroll
                for (int j = 0; j < W; j++)
                    f[j] = to_float(v[u].e[j]);
                st = ce_online_push<W>(st, f);
            }
        }
    }
    const int c = r.head + r.n_packs * W + tid;
    if (tid < r.tail) {
        const T e = xr[c];
        if (copy)
            copy[c] = e;
        float v = to_float(e);
        st = ce_online_push<1>(st, &v);
    }
    return st;
}

/* A block per row (the grid loops past CE_MAX_BLOCKS rows). `cached`: the launcher found room
 * for the row in dynamic shared memory. */
template <typename T, bool LOSS, bool GRAD>
__global__ void __launch_bounds__(MAX_THREADS)
    ce_fused_rows(const T *__restrict__ x, const int32_t *__restrict__ labels,
                  float *__restrict__ loss, T *__restrict__ dx, size_t n_rows, int n_classes,
                  float inv_rows, bool cached, ce_workspace *ws)
{
    extern __shared__ uint4 row_copy_raw[]; /* 16-byte aligned */
    float loss_sum = 0.f; /* thread 0's */
    for (size_t row = blockIdx.x; row < n_rows; row += gridDim.x) {
        const T *xr = x + row * (size_t)n_classes;
        const int32_t label = labels[row];
        const bool ok = ce_label_ok(label, n_classes);
        /* The copy starts as far past a 16-byte boundary as the row does, so that a pack of
         * the row is a pack of the copy. */
        T *copy = GRAD && cached
                      ? reinterpret_cast<T *>(row_copy_raw) + ce_misalignment(xr)
                      : nullptr;

        /* The merge's barriers also make the copy whole before any thread reads it. */
        const ce_online st = ce_block_merge(sweep_row(xr, n_classes, copy));
        const float log_sum = logf(st.s);
        const T *src = copy ? copy : xr;
        if (LOSS && threadIdx.x == 0)
            loss_sum += ok ? ce_row_loss(st.m, log_sum, to_float(src[label])) : ce_nan();
        if (GRAD)
            ce_write_gradient_row(src, dx + row * (size_t)n_classes, n_classes, label, ok, st.m,
                                  log_sum, inv_rows);
        if (GRAD && cached)
            __syncthreads(); /* the next row overwrites the copy */
    }
    if (LOSS)
        ce_finish_mean(loss_sum, loss, n_rows, ws->partial_sums, &ws->blocks_done);
}

/* Dynamic shared memory the gradient kernels may use: the opt-in maximum less their static
 * shared memory, granted to them once. */
template <typename T, bool LOSS> static size_t copy_room()
{
    static size_t room = 0;
    if (!room)
        room = kl_grant_shared_memory((const void *)ce_fused_rows<T, LOSS, true>);
    return room;
}

template <typename T, bool LOSS, bool GRAD>
static void launch_rows(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                        int n_classes, ce_workspace *ws, cudaStream_t s)
{
    const int n_packs = n_classes / pack16<T>::width;
    /* Room for the row at any alignment: C elements plus up to a pack of offset. */
    const size_t copy_bytes = ((size_t)n_classes + pack16<T>::width) * sizeof(T);
    const bool cached = GRAD && copy_bytes <= copy_room<T, LOSS>();
    int threads = n_packs > 2048 ? 512 : 256;
    if (cached && 2 * (copy_bytes + 1024) >
                      (size_t)kl_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor))
        threads = MAX_THREADS; /* one block per SM: give it every thread */
    const unsigned blocks = (unsigned)(n_rows < CE_MAX_BLOCKS ? n_rows : CE_MAX_BLOCKS);
    ce_fused_rows<T, LOSS, GRAD><<<blocks, threads, cached ? copy_bytes : 0, s>>>(
        x, labels, loss, dx, n_rows, n_classes, 1.f / (float)n_rows, cached, ws);
    LAUNCH_CHECK();
}

template <typename T>
static void launch(const T *x, const int32_t *labels, float *loss, T *dx, size_t n_rows,
                   int n_classes, ce_workspace *ws, cudaStream_t s)
{
    if (loss && dx)
        launch_rows<T, true, true>(x, labels, loss, dx, n_rows, n_classes, ws, s);
    else if (loss)
        launch_rows<T, true, false>(x, labels, loss, dx, n_rows, n_classes, ws, s);
    else
        launch_rows<T, false, true>(x, labels, loss, dx, n_rows, n_classes, ws, s);
}

extern "C" void ce_v4(const void *x, const int32_t *labels, float *loss, void *dx, size_t n_rows,
                      size_t n_classes, enum dtype t, void *workspace, cudaStream_t s)
{
    kl_note_rung("v4_fused_online");
    if (n_classes <= CE_WARP_MAX_CLASSES) {
        ce_v3(x, labels, loss, dx, n_rows, n_classes, t, workspace, s);
        return;
    }
    ce_workspace *ws = (ce_workspace *)workspace;
    if (t == DT_FP32)
        launch((const float *)x, labels, loss, (float *)dx, n_rows, (int)n_classes, ws, s);
    else
        launch((const __half *)x, labels, loss, (__half *)dx, n_rows, (int)n_classes, ws, s);
}
