#include "timing.h"

#include "check.h"

void timer_init(struct timer *t, const struct device_info *d)
{
    CUDA_CHECK(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&t->start));
    CUDA_CHECK(cudaEventCreate(&t->stop));
    t->flush_bytes = 2 * d->l2_bytes;
    CUDA_CHECK(cudaMalloc(&t->flush, t->flush_bytes));
}

void timer_destroy(struct timer *t)
{
    CUDA_CHECK(cudaFree(t->flush));
    CUDA_CHECK(cudaEventDestroy(t->start));
    CUDA_CHECK(cudaEventDestroy(t->stop));
    CUDA_CHECK(cudaStreamDestroy(t->stream));
}

int cold_sets_needed(const struct device_info *d, size_t set_bytes)
{
    size_t l2x2 = 2 * d->l2_bytes;
    if (set_bytes >= l2x2)
        return 1; /* one launch streams more than twice the L2 between two reads of a byte */
    size_t sets = (l2x2 + set_bytes - 1) / set_bytes + 1;
    return sets > KL_MAX_LAUNCHES_PER_REPLAY ? KL_MAX_LAUNCHES_PER_REPLAY : (int)sets;
}

static cudaGraphExec_t capture(struct timer *t, const struct pool *pl, const struct problem *p,
                               launch_fn launch, int count)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(t->stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < count; k++) {
        struct launch_args a = pool_args(pl, p, k);
        launch(&a, t->stream);
    }
    CUDA_CHECK(cudaStreamEndCapture(t->stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
}

/* Milliseconds of one replay (or, without a graph, one launch on set `set`). */
static float time_once(struct timer *t, cudaGraphExec_t exec, const struct pool *pl,
                       const struct problem *p, launch_fn launch, int set, int cold)
{
    if (cold)
        CUDA_CHECK(cudaMemsetAsync(t->flush, set & 0xff, t->flush_bytes, t->stream));
    CUDA_CHECK(cudaEventRecord(t->start, t->stream));
    if (exec) {
        CUDA_CHECK(cudaGraphLaunch(exec, t->stream));
    } else {
        struct launch_args a = pool_args(pl, p, set);
        launch(&a, t->stream);
    }
    CUDA_CHECK(cudaEventRecord(t->stop, t->stream));
    CUDA_CHECK(cudaEventSynchronize(t->stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t->start, t->stop));
    return ms;
}

/* Launches per replay so that one replay lasts about KL_REPLAY_TARGET_US. A launch that alone
 * lasts that long needs no probe of ten. */
static int choose_launches(struct timer *t, const struct pool *pl, const struct problem *p,
                           launch_fn launch)
{
    enum { PROBE = 10 };
    cudaGraphExec_t one = capture(t, pl, p, launch, 1);
    double us = 1e3 * time_once(t, one, pl, p, launch, 0, 0);
    CUDA_CHECK(cudaGraphExecDestroy(one));
    if (us >= KL_REPLAY_TARGET_US)
        return 1;
    cudaGraphExec_t probe = capture(t, pl, p, launch, PROBE);
    time_once(t, probe, pl, p, launch, 0, 0);
    us = 1e3 * time_once(t, probe, pl, p, launch, 0, 0) / PROBE;
    CUDA_CHECK(cudaGraphExecDestroy(probe));
    int k = us > 0 ? (int)(KL_REPLAY_TARGET_US / us) + 1 : KL_MAX_LAUNCHES_PER_REPLAY;
    return k < 1 ? 1 : k > KL_MAX_LAUNCHES_PER_REPLAY ? KL_MAX_LAUNCHES_PER_REPLAY : k;
}

/* Samples of one launch (exec NULL) or one replay, per launch, until o->iters or the budget. */
static int sample(struct timer *t, cudaGraphExec_t exec, const struct pool *pl,
                  const struct problem *p, launch_fn launch, const struct timing_opts *o,
                  int cold, int k, double *us)
{
    double spent_ms = 0;
    for (int i = 0; i < o->warmup && spent_ms < KL_SAMPLING_BUDGET_MS; i++)
        spent_ms += time_once(t, exec, pl, p, launch, i, cold);
    spent_ms = 0;
    int n = 0;
    while (n < o->iters && (n < KL_MIN_SAMPLES || spent_ms < KL_SAMPLING_BUDGET_MS)) {
        const float ms = time_once(t, exec, pl, p, launch, n, cold);
        spent_ms += ms;
        us[n++] = 1e3 * ms / k;
    }
    return n;
}

int time_launches(struct timer *t, const struct pool *pl, const struct problem *p,
                  launch_fn launch, const struct timing_opts *o, double *us, int *taken)
{
    int cold = !o->hot_l2;
    /* One launch outside any capture first: a rung's first call may create library handles or
     * workspaces, which a capture forbids (with --no-verify no launch has happened yet). */
    struct launch_args first = pool_args(pl, p, 0);
    pool_zero_workspace(pl, t->stream);
    launch(&first, t->stream);
    CUDA_CHECK(cudaStreamSynchronize(t->stream));
    if (o->no_graph) {
        *taken = sample(t, NULL, pl, p, launch, o, cold, 1, us);
        return 1;
    }
    int k = choose_launches(t, pl, p, launch);
    cudaGraphExec_t exec = capture(t, pl, p, launch, k);
    *taken = sample(t, exec, pl, p, launch, o, cold, k, us);
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    return k;
}
