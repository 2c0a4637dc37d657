/* v9, images streamed through a resident grid: v8's slabs, every SM in a team, and the next
 * image loading while this one is written.
 *
 * Idea: v8 lost where the images outnumber what the GPU holds at once, for two reasons. A
 * cluster must sit within one GPC, so 4-block clusters of 196 KB leave 12 of the H200's 132
 * SMs idle (30 clusters, not 33): at 64x1000x14x14 in fp32 the 64 images take three waves, the
 * last one nearly alone. And a block reads its slab, merges, writes, and only then does the
 * next wave start reading. Here the B blocks of a team are plain blocks of one cooperative
 * launch (all resident at once, on any SMs), so 132 / B teams fit; they meet through global
 * memory instead of distributed shared memory: each block publishes its per-position
 * summaries, counts itself in with one atomic add, and waits until all B have. And the grid
 * stays resident: team t takes images t, t + teams, ..., and as soon as piece j of this image
 * has been sent back, the block asks for piece j of its next image into the same shared
 * memory, so the next image's reads overlap this one's writes.
 * What changed from v8: teams in a cooperative launch instead of clusters; the exchange through
 * global memory (summaries two rounds deep, an arrival counter a team that the last block to
 * finish zeroes; a team of one block skips it); a loop over images, each piece refilled once sent.
 * Expected: at 64x1000x14x14 in fp32, two rounds of 33 images instead of three waves: 70-80% of
 * the roof against v8's 52% and v3's 57%; the fp16 forward fits one round, as in v8, and pays
 * for the slower exchange.
 * Limits: v8's shapes, at most 16 blocks an image and 1024 resident; the teams' state in the
 * caller's workspace (softmax_workspace_bytes), so concurrent launches need one each. Else v8.
 * Needs sm_90 (bulk copies) and cooperative launch.
 * Measured (H200): 64x1000x14x14 fp32 forward 43.1 us, 55.0%, far below 70-80% and still behind
 * v3's 41.3 us; fp16 49.1% (v8 53.1%); it wins at 32x2048x14x14, 56.2% fp32 (v8 49.7%). */
#include "image_slabs.cuh"
#include "launch.cuh"
#include "softmax.h"

#define MAX_TEAM 16  /* blocks an image at most */
#define MAX_GRID 1024 /* resident blocks at most: the room in team_results */

/* The teams' meeting place, in the caller's workspace. Each block's per-position results of
 * a round, two rounds deep: a block writes round k + 2's where round k's were, and it gets
 * there only after every block of its team has counted itself in at round k + 1, that is
 * after each has read round k's. Per team, the number of its blocks that have published, over
 * all rounds of a launch; the last block to finish zeroes them for the next launch, so the
 * workspace is zeroed once, before its first launch. */
struct team_space {
    unsigned *finished;     /* blocks done with this launch */
    unsigned *arrivals;     /* [MAX_GRID], a counter a team */
    softmax_stats *results; /* [2][MAX_GRID][S]: a round's results of every block */
};

#define RESULTS_OFFSET (16 + MAX_GRID * sizeof(unsigned))

static struct team_space team_space_in(void *workspace)
{
    char *base = (char *)workspace;
    return {(unsigned *)base, (unsigned *)(base + 16), (softmax_stats *)(base + RESULTS_OFFSET)};
}

extern "C" size_t softmax_v9_workspace_bytes(struct softmax_dims d)
{
    const int64_t S = d.h * d.w < MAX_POSITIONS ? d.h * d.w : MAX_POSITIONS;
    return RESULTS_OFFSET + 2 * MAX_GRID * (size_t)S * sizeof(softmax_stats);
}

template <typename V>
__device__ __forceinline__ V *team_slot(const team_space &ts, int S, int round, int block)
{
    return reinterpret_cast<V *>(ts.results + ((size_t)(round & 1) * MAX_GRID + block) * S);
}

/* Reads what another SM wrote: from the L2, never an older copy in this SM's L1. */
__device__ __forceinline__ softmax_stats load_fresh(const softmax_stats *p)
{
    const float2 v = __ldcg(reinterpret_cast<const float2 *>(p));
    return {v.x, v.y};
}
__device__ __forceinline__ float load_fresh(const float *p)
{
    return __ldcg(p);
}

/* Round `round` of team `team`: the block publishes published[0 .. S) to global memory,
 * counts itself in, waits for the other B - 1, and merges the B results in rank order into
 * combined, so every block of the team gets the same bits. */
template <typename V, typename Op>
__device__ __forceinline__ void exchange_through_global(const image_args &a, const team_space &ts,
                                                        int team, int round, const V *published,
                                                        Op op, V *combined)
{
    if (a.cluster == 1) { /* a team of one has nobody to wait for */
        __syncthreads();
        for (int p = threadIdx.x; p < a.S; p += blockDim.x)
            combined[p] = published[p];
        __syncthreads();
        return;
    }
    V *mine = team_slot<V>(ts, a.S, round, (int)blockIdx.x);
    for (int p = threadIdx.x; p < a.S; p += blockDim.x)
        mine[p] = published[p];
    __threadfence(); /* these writes before the count below, for every SM */
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(&ts.arrivals[team], 1u);
        const unsigned everyone = (unsigned)(a.cluster * (round + 1));
        while (*(volatile unsigned *)&ts.arrivals[team] < everyone)
            __nanosleep(100);
        __threadfence(); /* the count before the reads below */
    }
    __syncthreads();
    const int first = team * a.cluster;
    for (int p = threadIdx.x; p < a.S; p += blockDim.x) {
        V acc = load_fresh(team_slot<V>(ts, a.S, round, first) + p);
        for (int r = 1; r < a.cluster; r++)
            acc = op(acc, load_fresh(team_slot<V>(ts, a.S, round, first + r) + p));
        combined[p] = acc;
    }
    __syncthreads();
}

/* The last block to finish zeroes the teams' counters for the next launch. */
__device__ __forceinline__ void finish_stream(const team_space &ts, int teams)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        kl_bulk_stores_wait_read();
        __threadfence();
        if (atomicAdd(ts.finished, 1u) == gridDim.x - 1) {
            for (int t = 0; t < teams; t++)
                ts.arrivals[t] = 0;
            *ts.finished = 0;
            __threadfence();
        }
    }
}

/* Writes this image's outputs piece by piece (write(j) puts piece j's in place in `out`) and
 * sends each back. When the team has a next image, piece j - 1 of it comes in as soon as the
 * copy engine has read piece j - 1's store (all of thread 0's stores but the newest), and the
 * last piece once every store has been read: the next image's reads overlap these writes. */
template <typename T, int A, typename Write>
__device__ __forceinline__ void send_and_refill(const image_args &a, const slab &b, const T *out,
                                                T *to, bool more, const slab &next,
                                                T *const (&held)[A], const T *const (&from)[A],
                                                uint64_t *landed, Write write)
{
    for (int j = 0; j < b.pieces; j++) {
        write(j);
        store_piece(a, b, j, out, to);
        if (more && threadIdx.x == 0 && j > 0) {
            kl_bulk_stores_wait_read_but_newest();
            load_piece(a, next, j - 1, held, from, landed);
        }
    }
    if (more && threadIdx.x == 0) {
        kl_bulk_stores_wait_read();
        load_piece(a, next, next.pieces - 1, held, from, landed);
    }
}

/* ---- forward ---- */

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1)
    softmax_forward_stream(const T *__restrict__ x, T *__restrict__ y, image_args a, int images,
                           int teams, team_space ts)
{
    extern __shared__ __align__(128) unsigned char shared[];
    const int team = (int)blockIdx.x / a.cluster, rank = (int)blockIdx.x % a.cluster;
    T *held = reinterpret_cast<T *>(shared);
    const image_shared<softmax_stats> sh = shared_parts<T, softmax_stats>(shared, a, 1);
    T *const held_arrays[1] = {held};
    const T *const from[1] = {x};
    slab b = slab_of<V>(a, team, rank);
    load_slabs(a, b, held_arrays, from, sh.landed); /* the plan makes no more teams than images */

    for (int round = 0, image = team; image < images; round++, image += teams) {
        b = slab_of<V>(a, image, rank);
        softmax_stats mine[V];
#pragma unroll
        for (int e = 0; e < V; e++)
            mine[e] = {SOFTMAX_NO_VALUE, 0.f};
        for (int j = 0; j < b.pieces; j++) {
            kl_mbarrier_wait_parity(sh.landed + j, round & 1);
            summarise_piece<T, V>(a, b, held, j, mine);
        }
        combine_groups(a, b, mine, sh.part, softmax_merge_op(), sh.published);
        exchange_through_global(a, ts, team, round, sh.published, softmax_merge_op(),
                                sh.combined);

        float max[V], scale[V];
#pragma unroll
        for (int e = 0; e < V; e++) {
            const softmax_stats r = sh.combined[b.position + e];
            max[e] = r.max;
            scale[e] = 1.f / r.sum;
        }
        send_and_refill(a, b, held, y, image + teams < images, slab_of<V>(a, image + teams, rank),
                        held_arrays, from, sh.landed,
                        [&](int j) { write_piece<T, V>(a, b, held, j, max, scale); });
    }
    finish_stream(ts, teams);
}

/* ---- backward ---- */

template <typename T, int V>
__global__ void __launch_bounds__(1024, 1)
    softmax_backward_stream(const T *__restrict__ y, const T *__restrict__ dy,
                            T *__restrict__ dx, image_args a, int images, int teams,
                            team_space ts)
{
    extern __shared__ __align__(128) unsigned char shared[];
    const int team = (int)blockIdx.x / a.cluster, rank = (int)blockIdx.x % a.cluster;
    T *held_y = reinterpret_cast<T *>(shared);
    T *held_dy = reinterpret_cast<T *>(shared + slab_bytes(a.channels, a.S, sizeof(T)));
    const image_shared<float> sh = shared_parts<T, float>(shared, a, 2);
    T *const held_arrays[2] = {held_y, held_dy};
    const T *const from[2] = {y, dy};
    slab b = slab_of<V>(a, team, rank);
    load_slabs(a, b, held_arrays, from, sh.landed); /* the plan makes no more teams than images */

    for (int round = 0, image = team; image < images; round++, image += teams) {
        b = slab_of<V>(a, image, rank);
        float mine[V] = {};
        for (int j = 0; j < b.pieces; j++) {
            kl_mbarrier_wait_parity(sh.landed + j, round & 1);
            dot_piece<T, V>(a, b, held_y, held_dy, j, mine);
        }
        combine_groups(a, b, mine, sh.part, softmax_sum_op(), sh.published);
        exchange_through_global(a, ts, team, round, sh.published, softmax_sum_op(),
                                sh.combined);

        float dot[V];
#pragma unroll
        for (int e = 0; e < V; e++)
            dot[e] = sh.combined[b.position + e];
        send_and_refill(a, b, held_dy, dx, image + teams < images,
                        slab_of<V>(a, image + teams, rank), held_arrays, from, sh.landed,
                        [&](int j) { write_gradient_piece<T, V>(a, b, held_y, held_dy, j, dot); });
    }
    finish_stream(ts, teams);
}

/* ---- the plan ---- */

/* Images at once: the teams of the plan's shape whose blocks are all resident, at most
 * MAX_GRID blocks. */
static int64_t resident_teams(const void *kernel, const struct image_plan *pl,
                              struct softmax_dims d)
{
    (void)d;
    int64_t resident = (int64_t)kl_sm_count() * kl_blocks_per_sm(kernel, pl->threads, pl->shared);
    resident = resident < MAX_GRID ? resident : MAX_GRID;
    return resident / pl->a.cluster;
}

template <typename T> static struct image_pass *forward_pass()
{
    static struct image_pass p = {{(const void *)softmax_forward_stream<T, 1>,
                                   (const void *)softmax_forward_stream<T, 2>,
                                   (const void *)softmax_forward_stream<T, 4>},
                                  0};
    return &p;
}

template <typename T> static struct image_pass *backward_pass()
{
    static struct image_pass p = {{(const void *)softmax_backward_stream<T, 1>,
                                   (const void *)softmax_backward_stream<T, 2>,
                                   (const void *)softmax_backward_stream<T, 4>},
                                  0};
    return &p;
}

/* Cuts the images of d, or returns false (then v8 runs): pl.at_once teams, never more than
 * the images. */
static bool plan_stream(struct image_pass *p, struct softmax_dims d, size_t size, int arrays,
                        struct image_plan *pl)
{
    return kl_device_attribute(cudaDevAttrCooperativeLaunch) &&
           plan_images(p, d, size, arrays, MAX_TEAM, resident_teams, pl);
}

/* A cooperative launch: every block resident at once, or an error. */
template <typename... Params, typename... Args>
static void launch_resident(void (*kernel)(Params...), const struct image_plan *pl, int teams,
                            cudaStream_t s, Args... args)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(teams * pl->a.cluster));
    cfg.blockDim = dim3((unsigned)pl->threads);
    cfg.dynamicSmemBytes = pl->shared;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
    LAUNCH_CHECK();
}

template <typename T>
static bool forward(const T *x, T *y, struct softmax_dims d, void *workspace, cudaStream_t s)
{
    struct image_plan pl;
    if (kl_device_cc() < 90 || !aligned16(x) || !aligned16(y) ||
        !plan_stream(forward_pass<T>(), d, sizeof(T), 1, &pl))
        return false;
    const int n = (int)d.n, teams = pl.at_once;
    const team_space ts = team_space_in(workspace);
    switch (pl.vector) {
    case 1:
        launch_resident(softmax_forward_stream<T, 1>, &pl, teams, s, x, y, pl.a, n, teams, ts);
        break;
    case 2:
        launch_resident(softmax_forward_stream<T, 2>, &pl, teams, s, x, y, pl.a, n, teams, ts);
        break;
    default:
        launch_resident(softmax_forward_stream<T, 4>, &pl, teams, s, x, y, pl.a, n, teams, ts);
    }
    return true;
}

template <typename T>
static bool backward(const T *y, const T *dy, T *dx, struct softmax_dims d, void *workspace,
                     cudaStream_t s)
{
    struct image_plan pl;
    if (kl_device_cc() < 90 || !aligned16(y) || !aligned16(dy) || !aligned16(dx) ||
        !plan_stream(backward_pass<T>(), d, sizeof(T), 2, &pl))
        return false;
    const int n = (int)d.n, teams = pl.at_once;
    const team_space ts = team_space_in(workspace);
    switch (pl.vector) {
    case 1:
        launch_resident(softmax_backward_stream<T, 1>, &pl, teams, s, y, dy, dx, pl.a, n, teams,
                        ts);
        break;
    case 2:
        launch_resident(softmax_backward_stream<T, 2>, &pl, teams, s, y, dy, dx, pl.a, n, teams,
                        ts);
        break;
    default:
        launch_resident(softmax_backward_stream<T, 4>, &pl, teams, s, y, dy, dx, pl.a, n, teams,
                        ts);
    }
    return true;
}

extern "C" void softmax_forward_v9(const void *x, void *y, struct softmax_dims d, enum dtype t,
                                   void *workspace, cudaStream_t s)
{
    kl_note_rung("v9_image_stream");
    const bool done = t == DT_FP32
                          ? forward((const float *)x, (float *)y, d, workspace, s)
                          : forward((const __half *)x, (__half *)y, d, workspace, s);
    if (!done)
        softmax_forward_v8(x, y, d, t, s);
}

extern "C" void softmax_backward_v9(const void *y, const void *dy, void *dx,
                                    struct softmax_dims d, enum dtype t, void *workspace,
                                    cudaStream_t s)
{
    kl_note_rung("v9_image_stream");
    const bool done =
        t == DT_FP32
            ? backward((const float *)y, (const float *)dy, (float *)dx, d, workspace, s)
            : backward((const __half *)y, (const __half *)dy, (__half *)dx, d, workspace, s);
    if (!done)
        softmax_backward_v8(y, dy, dx, d, t, s);
}
