/* v3, vector gather: several inputs a thread and 16-byte stores of dx; overlapping windows
 * gather too, without atomics.
 *
 * Idea, 2x2 windows, stride 2, no padding: the windows tile x, so a thread owns OUTS outputs
 * whose inputs fill 16 bytes of each of their two rows (2 in fp32, 4 in fp16) and writes every
 * input under them: one 8-byte load of dy, 4 or 8 bits of argmax fields, two 16-byte stores,
 * each dy in its field's position and 0 elsewhere. Each dx is still written once, and the index
 * arithmetic (one 32-bit division) is paid once for 8 or 16 inputs. 16 bytes a row and no more:
 * with 32, a warp's store would write every other 16 bytes, half of each 32-byte sector.
 * Idea, other disjoint windows: a thread owns 16 bytes of a row of dx, finds the window row once
 * and advances along the row by counting, with no division; it reads each window's argmax once,
 * dy only where the argmax points at one of its inputs, and writes its 16 bytes in one store.
 * Idea, overlapping windows: a gather too. Input (h, w) lies in windows i = ceil((h + P - KH +
 * 1) / S) .. (h + P) / S, and likewise j (4 of them for the 3x3 stride-2 stem); each input adds,
 * in fp32 and a fixed order, the dy of the windows whose argmax names it; dx is written once.
 * What changed from v2: 16-byte stores, and index arithmetic once for many inputs instead of
 * four divisions for each (v2's gather is bound by its instructions); the overlapping path's
 * atomic scatter (a memset, then read-modify-writes in the L2) is gone. The forward is v2's.
 * Expected: on disjoint windows v2's bytes in a fraction of its instructions, at the roof; on
 * overlapping ones dx written once, not twice, the same bits every run, one fp16 rounding.
 * Limits: 2x2 needs H even (else a plane's last row lies in no window) and v2's forward terms.
 * The overlapping path reads a window's argmax and dy once for every input of it (9 at 3x3), in
 * short loops with data-dependent bounds.
 * Measured (H200): 2x2 backward at the seed 19.8 us fp32 (3.57x cuDNN, 3.9x v2) but 50.7% of the
 * roof, not at it; overlap 337 us fp32, slower than v1's atomics (113): instruction-bound. */
#include "maxpool.cuh"

#define THREADS 256

/* 2x2 windows, stride 2, no padding, H even: thread t owns OUTS outputs of a row and the
 * 2 x 2 OUTS inputs under them (maxpool.cuh). */
template <typename T, int OUTS>
__global__ void maxpool_backward_2x2(const T *__restrict__ dy, const uint8_t *__restrict__ argmax,
                                     T *__restrict__ dx, maxpool_dims d)
{
    const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t out_row, j0, in_row;
        maxpool_2x2_group<OUTS>(d, t, out_row, j0, in_row);
        const maxpool_vec<T, OUTS> g =
            *reinterpret_cast<const maxpool_vec<T, OUTS> *>(dy + out_row * d.ow + j0);
        const unsigned fields = maxpool_load_fields<OUTS>(argmax, t);
        const T zero = from_float<T>(0.f);
        T top[2 * OUTS], bottom[2 * OUTS];
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            const unsigned position = fields >> (2 * k) & 3; /* r 2 + q */
            top[2 * k] = position == 0 ? g.e[k] : zero;
            top[2 * k + 1] = position == 1 ? g.e[k] : zero;
            bottom[2 * k] = position == 2 ? g.e[k] : zero;
            bottom[2 * k + 1] = position == 3 ? g.e[k] : zero;
        }
        T *row = dx + in_row * d.w + 2 * j0;
        maxpool_store_row(row, top);
        maxpool_store_row(row + d.w, bottom);
    }
}

/* Disjoint windows: thread t owns inputs w0 .. w0 + V - 1 (V = 16 bytes of T) of input row
 * (plane, h), w0 = V (t % groups a row). vec: one 16-byte store (dx 16-byte aligned and
 * W % V == 0, so every group is whole and aligned). */
template <typename T>
__global__ void maxpool_backward_gather_vector(const T *__restrict__ dy,
                                               const uint8_t *__restrict__ argmax,
                                               T *__restrict__ dx, maxpool_dims d, bool vec)
{
    using pack = pack16<T>;
    constexpr int V = pack::width;
    const int64_t groups_a_row = (d.w + V - 1) / V;
    const int64_t groups = d.n * d.c * d.h * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t in_row, group, plane, hh, i, r;
        maxpool_divmod(t, groups_a_row, in_row, group);
        maxpool_divmod(in_row, d.h, plane, hh);
        maxpool_divmod(hh + d.p, d.s, i, r);
        const int64_t w0 = group * V;
        const int count = (int)(d.w - w0 < V ? d.w - w0 : V);

        pack g;
        g.raw = make_uint4(0, 0, 0, 0); /* all-zero bits are +0 in fp32 and fp16 alike */
        if (i < d.oh && r < d.kh) { /* else row h lies in no window: all zeros */
            const int64_t out_row = (plane * d.oh + i) * d.ow;
            const int row_position = maxpool_window_position(d, (int)r, 0);
            int64_t j, q;
            maxpool_divmod(w0 + d.p, d.s, j, q);
            int64_t loaded_j = -1;
            int chosen = 0;
#pragma unroll
            for (int e = 0; e < V; e++) {
                if (e < count && j < d.ow && q < d.kw) {
                    if (j != loaded_j) {
                        chosen = maxpool_load_argmax(argmax, d, out_row + j);
                        loaded_j = j;
                    }
                    if (chosen == row_position + q)
                        g.e[e] = dy[out_row + j];
                }
                if (++q == d.s) {
                    q = 0;
                    j++;
                }
            }
        }

        maxpool_store_inputs(dx + in_row * d.w + w0, g, vec, count);
    }
}

/* The windows along one axis that hold input position x (h or w): first .. last, empty when
 * first > last. Window k covers k S - P .. k S - P + K - 1, so it holds x when
 * (x + P - K + 1) / S <= k <= (x + P) / S. */
__device__ __forceinline__ void windows_holding(int64_t x, int64_t k, int64_t s, int64_t p,
                                                int64_t windows, int64_t &first, int64_t &last)
{
    int64_t rest;
    maxpool_divmod(x + p, s, last, rest);
    if (last > windows - 1)
        last = windows - 1;
    const int64_t lowest = x + p - k + 1; /* the first window's start may lie before it */
    if (lowest <= 0)
        first = 0;
    else
        maxpool_divmod(lowest + s - 1, s, first, rest);
}

/* Overlapping windows: thread t owns inputs w0 .. w0 + V - 1 of input row (plane, h), as the
 * disjoint gather does. The window rows holding h, i0 .. i1, are found once. Along the row, the
 * last window column that can hold w, (w + P) / S, advances by counting; from it the thread
 * walks left while the window still reaches w. Each input sums, in fp32, the dy of every
 * window that holds it and chose it, in a fixed order (rows down, columns right to left). */
template <typename T>
__global__ void maxpool_backward_gather_overlap(const T *__restrict__ dy,
                                                const uint8_t *__restrict__ argmax,
                                                T *__restrict__ dx, maxpool_dims d, bool vec)
{
    using pack = pack16<T>;
    constexpr int V = pack::width;
    const int64_t groups_a_row = (d.w + V - 1) / V;
    const int64_t groups = d.n * d.c * d.h * groups_a_row;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < groups; t += stride) {
        int64_t in_row, group, plane, hh, i0, i1, last_j, rest;
        maxpool_divmod(t, groups_a_row, in_row, group);
        maxpool_divmod(in_row, d.h, plane, hh);
        windows_holding(hh, d.kh, d.s, d.p, d.oh, i0, i1);
        const int64_t w0 = group * V;
        const int count = (int)(d.w - w0 < V ? d.w - w0 : V);
        maxpool_divmod(w0 + d.p, d.s, last_j, rest);

        pack g;
#pragma unroll
        for (int e = 0; e < V; e++) {
            const int64_t w = w0 + e;
            const int64_t first_j = last_j < d.ow - 1 ? last_j : d.ow - 1;
            float sum = 0.f;
            for (int64_t i = i0; e < count && i <= i1; i++) {
                const int64_t out_row = (plane * d.oh + i) * d.ow;
                const int r = (int)(hh - maxpool_window_top(d, i));
                for (int64_t j = first_j; j >= 0 && maxpool_window_left(d, j) + d.kw > w; j--) {
                    const int q = (int)(w - maxpool_window_left(d, j));
                    const int chosen = maxpool_load_argmax(argmax, d, out_row + j);
                    if (chosen == maxpool_window_position(d, r, q))
                        sum += to_float(dy[out_row + j]);
                }
            }
            g.e[e] = from_float<T>(sum);
            if (++rest == d.s) {
                rest = 0;
                last_j++;
            }
        }

        maxpool_store_inputs(dx + in_row * d.w + w0, g, vec, count);
    }
}

template <typename T>
static void backward_disjoint(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d,
                              cudaStream_t s)
{
    constexpr int V = pack16<T>::width;
    const bool vec = d.w % V == 0 && aligned16(dx);
    const int64_t groups = d.n * d.c * d.h * ((d.w + V - 1) / V);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_gather_vector<T>, THREADS,
                                        maxpool_blocks(groups, THREADS));
    maxpool_backward_gather_vector<<<blocks, THREADS, 0, s>>>(dy, argmax, dx, d, vec);
    LAUNCH_CHECK();
}

template <typename T>
static void backward_overlapping(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d,
                                 cudaStream_t s)
{
    constexpr int V = pack16<T>::width;
    const bool vec = d.w % V == 0 && aligned16(dx);
    const int64_t groups = d.n * d.c * d.h * ((d.w + V - 1) / V);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_gather_overlap<T>,
                                        THREADS, maxpool_blocks(groups, THREADS));
    maxpool_backward_gather_overlap<<<blocks, THREADS, 0, s>>>(dy, argmax, dx, d, vec);
    LAUNCH_CHECK();
}

template <typename T, int OUTS>
static void backward_2x2(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d,
                         cudaStream_t s)
{
    const int64_t groups = d.n * d.c * d.oh * (d.ow / OUTS);
    const int blocks = grid_to_fill_gpu((const void *)maxpool_backward_2x2<T, OUTS>, THREADS,
                                        maxpool_blocks(groups, THREADS));
    maxpool_backward_2x2<T, OUTS><<<blocks, THREADS, 0, s>>>(dy, argmax, dx, d);
    LAUNCH_CHECK();
}

/* The 2x2 path where it applies (16 bytes of dx a row a thread), then the row gather for other
 * disjoint windows, then the overlapping gather. */
template <typename T>
static void backward(const T *dy, const uint8_t *argmax, T *dx, maxpool_dims d, cudaStream_t s)
{
    constexpr int OUTS = 8 / sizeof(T);
    if (d.h % 2 == 0 && maxpool_2x2_path(d, OUTS, sizeof(T), dx, dy))
        backward_2x2<T, OUTS>(dy, argmax, dx, d, s);
    else if (maxpool_disjoint_windows(d))
        backward_disjoint(dy, argmax, dx, d, s);
    else
        backward_overlapping(dy, argmax, dx, d, s);
}

MAXPOOL_BACKWARD_LAUNCHER(v3)

/* The forward is v2's: v3 changes the backward alone. */
extern "C" void maxpool_forward_v3(const void *x, void *y, uint8_t *argmax, struct maxpool_dims d,
                                   enum dtype t, cudaStream_t s)
{
    kl_note_rung("v3_vector_gather");
    maxpool_forward_v2(x, y, argmax, d, t, s);
}
