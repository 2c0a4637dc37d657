/* The parts of a training step that are no chapter's operation, shared by ours and the vendor:
 * taking the batch from the resident data set, counting what the logits got right, the linear
 * layers' bias and ReLU, and the SGD update. Each is one small kernel; together they are a few
 * microseconds of a step, most of it launch latency (the README's step table). */
#include "check.h"
#include "kernels.cuh"
#include "step.h"

#define THREADS 256

static unsigned blocks_for(int64_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

/* The batch is the `step`-th slice of the epoch's order; a step reads the counter, so one
 * captured graph takes a new batch on every replay. */
template <typename T>
__global__ void gather_batch(const uint8_t *__restrict__ images, const int32_t *__restrict__ labels,
                             const int32_t *__restrict__ order, const int *__restrict__ step,
                             int batch, int full_batch, T *__restrict__ x, int32_t *__restrict__ y)
{
    const int64_t first = (int64_t)*step * full_batch;
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= (int64_t)batch * CNN_PIXELS)
        return;
    const int64_t row = i / CNN_PIXELS, pixel = i % CNN_PIXELS;
    const int64_t image = order[first + row];
    x[i] = from_float<T>(images[image * CNN_PIXELS + pixel] * (1.f / 255.f));
    if (pixel == 0)
        y[row] = labels[image];
}

/* One block: each thread takes rows, finds their first maximum (the CPU reference's rule) and
 * counts a hit; thread 0 then logs the step's loss and advances the step counter, which no
 * later kernel of this step reads. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    count_and_log(const T *__restrict__ logits, const int32_t *__restrict__ y, int batch,
                  const float *__restrict__ loss, float *__restrict__ loss_log, int max_steps,
                  int *__restrict__ correct, int *__restrict__ step, int *progress)
{
    __shared__ int hits;
    if (threadIdx.x == 0)
        hits = 0;
    __syncthreads();
    int mine = 0;
    for (int row = threadIdx.x; row < batch; row += THREADS) {
        const T *z = logits + (int64_t)row * CNN_CLASSES;
        int best = 0;
        float top = to_float(z[0]);
        for (int j = 1; j < CNN_CLASSES; j++)
            if (to_float(z[j]) > top)
                top = to_float(z[j]), best = j;
        mine += best == y[row];
    }
    atomicAdd(&hits, mine);
    __syncthreads();
    if (threadIdx.x == 0) {
        *correct += hits;
        if (loss && *step < max_steps)
            loss_log[*step] = *loss;
        *step += 1;
        if (progress)
            *(volatile int *)progress = *step;
    }
}

template <typename T>
__global__ void bias_act_rows(T *__restrict__ y, const T *__restrict__ bias, int64_t rows,
                              int64_t cols, int relu)
{
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= rows * cols)
        return;
    float v = to_float(y[i]) + to_float(bias[i % cols]);
    y[i] = from_float<T>(relu ? fmaxf(v, 0.f) : v);
}

/* The step's log, where the update keeps it (CNN_FUSE_COUNT): the loss of the step into its
 * slot and the step counter advanced, by one thread of the last kernel of the step. */
struct step_log {
    const float *loss;
    float *loss_log;
    int max_steps;
    int *step, *progress;
};

/* master -= lr * grad, and the copy the step computes with (fp16) rounded from it. */
template <typename T>
__global__ void sgd_update(float *__restrict__ master, T *__restrict__ params,
                           const T *__restrict__ grads, int64_t n, float lr, step_log log)
{
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i == 0 && log.step) {
        if (*log.step < log.max_steps)
            log.loss_log[*log.step] = *log.loss;
        *log.step += 1;
        if (log.progress)
            *(volatile int *)log.progress = *log.step;
    }
    if (i >= n)
        return;
    const float w = master[i] - lr * to_float(grads[i]);
    master[i] = w;
    if ((void *)params != (void *)master)
        params[i] = from_float<T>(w);
}

/* The launchers: each instantiates its kernel for the state's type. */
template <typename T> static void gather_as(struct cnn_state *st, int batch, cudaStream_t s)
{
    const int64_t n = (int64_t)batch * CNN_PIXELS;
    gather_batch<<<blocks_for(n), THREADS, 0, s>>>(st->images, st->labels, st->order, st->step,
                                                    batch, st->max_batch, (T *)st->x, st->y);
}

template <typename T>
static void count_as(struct cnn_state *st, int batch, int log_loss, cudaStream_t s)
{
    count_and_log<<<1, THREADS, 0, s>>>((const T *)st->logits, st->y, batch,
                                        log_loss ? st->loss : NULL, st->loss_log, st->max_steps,
                                        st->correct, st->step, st->progress);
}

template <typename T>
static void bias_act_as(void *y, const void *bias, int64_t rows, int64_t cols, int relu,
                        cudaStream_t s)
{
    bias_act_rows<<<blocks_for(rows * cols), THREADS, 0, s>>>((T *)y, (const T *)bias, rows,
                                                              cols, relu);
}

template <typename T> static void sgd_as(struct cnn_state *st, cudaStream_t s)
{
    const int64_t n = CNN_DEVICE_PARAMS;
    step_log log = {st->loss, st->loss_log, st->max_steps, NULL, st->progress};
    if ((st->fusions & CNN_FUSE_FC2) && (st->fusions & CNN_FUSE_COUNT))
        log.step = st->step;
    sgd_update<<<blocks_for(n), THREADS, 0, s>>>(st->master, (T *)st->params,
                                                 (const T *)st->grads, n, st->lr, log);
}

extern "C" void cnn_gather_batch(struct cnn_state *st, int batch, cudaStream_t s)
{
    st->t == DT_FP32 ? gather_as<float>(st, batch, s) : gather_as<__half>(st, batch, s);
    LAUNCH_CHECK();
}

extern "C" void cnn_count_and_log(struct cnn_state *st, int batch, int log_loss, cudaStream_t s)
{
    st->t == DT_FP32 ? count_as<float>(st, batch, log_loss, s)
                     : count_as<__half>(st, batch, log_loss, s);
    LAUNCH_CHECK();
}

extern "C" void cnn_bias_act_rows(void *y, const void *bias, int64_t rows, int64_t cols, int relu,
                                  enum dtype t, cudaStream_t s)
{
    t == DT_FP32 ? bias_act_as<float>(y, bias, rows, cols, relu, s)
                 : bias_act_as<__half>(y, bias, rows, cols, relu, s);
    LAUNCH_CHECK();
}

extern "C" void cnn_sgd_update(struct cnn_state *st, cudaStream_t s)
{
    st->t == DT_FP32 ? sgd_as<float>(st, s) : sgd_as<__half>(st, s);
    LAUNCH_CHECK();
}
