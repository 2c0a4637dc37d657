/* An epoch as graph replays (train.h). A step's kernels are captured once per batch size; the
 * epoch is then full_steps replays of one graph and at most one of the other, launched back to
 * back: the host never waits for the GPU inside an epoch, and the GPU runs a replay's kernels
 * with about 1 us between them instead of the 3-4 us a launch from the host costs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rng.h"
#include "stats.h"
#include "train.h"

extern "C" void cnn_epoch_order(uint64_t seed, int epoch, int64_t count, int32_t *order)
{
    struct rng r = rng_seeded(seed + 1 + (uint64_t)epoch);
    for (int64_t i = 0; i < count; i++)
        order[i] = (int32_t)i;
    for (int64_t i = count - 1; i > 0; i--) {
        const int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        const int32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

static cudaGraphExec_t capture_step(struct trainer *tr, int batch)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(tr->stream, cudaStreamCaptureModeThreadLocal));
    tr->step(tr->st, batch, tr->ctx, tr->stream);
    CUDA_CHECK(cudaStreamEndCapture(tr->stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
}

extern "C" void trainer_init(struct trainer *tr, struct cnn_state *st, cnn_step_fn step,
                             void *ctx, int use_graph)
{
    memset(tr, 0, sizeof *tr);
    tr->st = st;
    tr->step = step;
    tr->ctx = ctx;
    tr->use_graph = use_graph;
    tr->full_steps = (int)(st->count / st->max_batch);
    tr->tail = (int)(st->count % st->max_batch);
    CUDA_CHECK(cudaStreamCreateWithFlags(&tr->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaHostAlloc((void **)&tr->progress, sizeof(int), cudaHostAllocMapped));
    *tr->progress = 0;
    int *device_view;
    CUDA_CHECK(cudaHostGetDevicePointer((void **)&device_view, tr->progress, 0));
    st->progress = device_view;
    if (use_graph) {
        tr->full_graph = capture_step(tr, st->max_batch);
        if (tr->tail)
            tr->tail_graph = capture_step(tr, tr->tail);
    }
}

extern "C" void trainer_destroy(struct trainer *tr)
{
    if (tr->full_graph)
        CUDA_CHECK(cudaGraphExecDestroy(tr->full_graph));
    if (tr->tail_graph)
        CUDA_CHECK(cudaGraphExecDestroy(tr->tail_graph));
    tr->st->progress = NULL;
    CUDA_CHECK(cudaFreeHost(tr->progress));
    CUDA_CHECK(cudaStreamDestroy(tr->stream));
    memset(tr, 0, sizeof *tr);
}

static void run_step(struct trainer *tr, int batch)
{
    if (!tr->use_graph)
        tr->step(tr->st, batch, tr->ctx, tr->stream);
    else
        CUDA_CHECK(cudaGraphLaunch(batch == tr->st->max_batch ? tr->full_graph : tr->tail_graph,
                                   tr->stream));
}

static void draw_progress(int done, int total)
{
    const int width = 40, filled = total ? (int)((int64_t)done * width / total) : width;
    fprintf(stderr, "\r  [%.*s%*s] %d/%d steps", filled, "========================================",
            width - filled, "", done, total);
}

/* Waits for the epoch's end event, redrawing the bar from the host-mapped step counter. */
static void wait_with_progress(struct trainer *tr, cudaEvent_t end, int total)
{
    const struct timespec pause = {0, 20 * 1000 * 1000};
    while (cudaEventQuery(end) == cudaErrorNotReady) {
        draw_progress(*(volatile int *)tr->progress, total);
        nanosleep(&pause, NULL);
    }
    draw_progress(total, total);
    fputs("\r\033[K", stderr);
}

extern "C" void trainer_epoch(struct trainer *tr, const int32_t *order, int show_progress,
                              struct epoch_result *res)
{
    struct cnn_state *st = tr->st;
    const int limited = tr->step_limit > 0 && tr->step_limit < tr->full_steps + (tr->tail ? 1 : 0);
    const int full = limited ? tr->step_limit : tr->full_steps;
    const int tail = limited ? 0 : tr->tail;
    const int steps = full + (tail ? 1 : 0);
    CUDA_CHECK(cudaMemcpyAsync(st->order, order, (size_t)st->count * 4, cudaMemcpyHostToDevice,
                               tr->stream));
    CUDA_CHECK(cudaMemsetAsync(st->step, 0, sizeof(int), tr->stream));
    CUDA_CHECK(cudaMemsetAsync(st->correct, 0, sizeof(int), tr->stream));
    *tr->progress = 0;
    cudaEvent_t start, end;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&end));
    CUDA_CHECK(cudaEventRecord(start, tr->stream));
    for (int i = 0; i < full; i++)
        run_step(tr, st->max_batch);
    if (tail)
        run_step(tr, tail);
    CUDA_CHECK(cudaEventRecord(end, tr->stream));
    if (show_progress)
        wait_with_progress(tr, end, steps);
    CUDA_CHECK(cudaEventSynchronize(end));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(end));

    float *losses = (float *)malloc((size_t)steps * sizeof(float));
    int correct;
    if (!losses) {
        fprintf(stderr, "10-train-cnn: out of host memory for %d losses\n", steps);
        exit(KL_EXIT_CUDA);
    }
    CUDA_CHECK(cudaMemcpy(losses, st->loss_log, (size_t)steps * sizeof(float),
                          cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&correct, st->correct, sizeof(int), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < steps; i++)
        sum += losses[i];
    free(losses);
    res->seconds = ms * 1e-3;
    res->mean_loss = sum / steps;
    res->correct = correct;
    res->images = (int64_t)full * st->max_batch + tail;
    res->steps = steps;
}

extern "C" double cnn_test_accuracy(struct cnn_state *test, const struct cnn_state *from)
{
    CUDA_CHECK(cudaMemcpy(test->params, from->params,
                          (size_t)CNN_DEVICE_PARAMS * dtype_size(from->t),
                          cudaMemcpyDeviceToDevice));
    int32_t *order = (int32_t *)malloc((size_t)test->count * 4);
    if (!order) {
        fprintf(stderr, "10-train-cnn: out of host memory for the test order\n");
        exit(KL_EXIT_CUDA);
    }
    for (int64_t i = 0; i < test->count; i++)
        order[i] = (int32_t)i;
    CUDA_CHECK(cudaMemcpy(test->order, order, (size_t)test->count * 4, cudaMemcpyHostToDevice));
    free(order);
    CUDA_CHECK(cudaMemset(test->step, 0, sizeof(int)));
    CUDA_CHECK(cudaMemset(test->correct, 0, sizeof(int)));
    for (int64_t first = 0; first < test->count; first += test->max_batch) {
        const int n = (int)(test->count - first < test->max_batch ? test->count - first
                                                                   : test->max_batch);
        cnn_gather_batch(test, n, 0);
        cnn_ours_forward(test, n, 0);
        cnn_count_and_log(test, n, 0, 0);
    }
    int correct;
    CUDA_CHECK(cudaMemcpy(&correct, test->correct, sizeof(int), cudaMemcpyDeviceToHost));
    return (double)correct / (double)test->count;
}

/* ---- where a step's time goes: an event after each operation, inside the graph ---- */

#define MAX_OPS 48

struct op_marks {
    int n;
    const char *op[MAX_OPS];
    cudaEvent_t at[MAX_OPS + 1]; /* at[0] before the step, at[i + 1] after op i */
};

static void record_mark(void *marks, const char *op, cudaStream_t s)
{
    struct op_marks *m = (struct op_marks *)marks;
    if (m->n == MAX_OPS)
        return;
    m->op[m->n++] = op;
    /* An external record becomes a node of the graph; a plain one would only order streams. */
    CUDA_CHECK(cudaEventRecordWithFlags(m->at[m->n], s, cudaEventRecordExternal));
}

extern "C" void trainer_breakdown(struct trainer *tr, int reps, FILE *out)
{
    struct cnn_state *st = tr->st;
    static struct op_marks m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i <= MAX_OPS; i++)
        CUDA_CHECK(cudaEventCreate(&m.at[i]));
    st->mark = record_mark;
    st->marks = &m;
    CUDA_CHECK(cudaStreamBeginCapture(tr->stream, cudaStreamCaptureModeThreadLocal));
    CUDA_CHECK(cudaEventRecordWithFlags(m.at[0], tr->stream, cudaEventRecordExternal));
    tr->step(st, st->max_batch, tr->ctx, tr->stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamEndCapture(tr->stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    st->mark = NULL;
    st->marks = NULL;

    reps = reps < tr->full_steps ? reps : tr->full_steps;
    static double us[MAX_OPS + 1][64];
    reps = reps < 64 ? reps : 64;
    int32_t *order = (int32_t *)malloc((size_t)st->count * 4);
    if (!order) {
        fprintf(stderr, "10-train-cnn: out of host memory for the order\n");
        exit(KL_EXIT_CUDA);
    }
    cnn_epoch_order(0, 0, st->count, order);
    CUDA_CHECK(cudaMemcpy(st->order, order, (size_t)st->count * 4, cudaMemcpyHostToDevice));
    free(order);
    CUDA_CHECK(cudaMemsetAsync(st->step, 0, sizeof(int), tr->stream));
    for (int r = 0; r < reps; r++) {
        CUDA_CHECK(cudaGraphLaunch(exec, tr->stream));
        CUDA_CHECK(cudaStreamSynchronize(tr->stream));
        float ms;
        for (int i = 0; i < m.n; i++) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, m.at[i], m.at[i + 1]));
            us[i][r] = ms * 1e3;
        }
        CUDA_CHECK(cudaEventElapsedTime(&ms, m.at[0], m.at[m.n]));
        us[MAX_OPS][r] = ms * 1e3;
    }
    fprintf(out, "  where a step's time goes (median of %d graph replays, us; batch %d, %s):\n",
            reps, st->max_batch, dtype_name(st->t));
    for (int i = 0; i <= m.n; i++) {
        const int row = i < m.n ? i : MAX_OPS;
        fprintf(out, "    %-32s %9.2f\n", i < m.n ? m.op[i] : "the whole step",
                summarize(us[row], (size_t)reps).median);
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    for (int i = 0; i <= MAX_OPS; i++)
        CUDA_CHECK(cudaEventDestroy(m.at[i]));
}
