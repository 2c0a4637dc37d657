/* The step's tensors (step.h): allocated once for the largest batch, the data set copied to the
 * GPU once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "check.h"
#include "step.h"

#define ACTS_CONV1 ((int64_t)CNN_C1 * CNN_PIXELS)
#define ACTS_POOL1 ((int64_t)CNN_C1 * 14 * 14)
#define ACTS_CONV2 ((int64_t)CNN_C2 * 14 * 14)

/* Allocations go through here so that running out of memory is one line and exit 3. */
extern "C" int cnn_device_alloc(void **p, size_t bytes, const char *what, char *why,
                                size_t why_len)
{
    if (cudaMalloc(p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        snprintf(why, why_len, "out of GPU memory: %zu more bytes for the %s", bytes, what);
        return 3;
    }
    return 0;
}

extern "C" void *cnn_param(const struct cnn_state *st, void *flat, int i)
{
    return (char *)flat + cnn_device_offset(i) * (int64_t)dtype_size(st->t);
}

#define STATE_BUFFERS(st)                                                                      \
    {(void **)&(st)->order, (void **)&(st)->step, (void **)&(st)->correct, (void **)&(st)->loss, \
     (void **)&(st)->loss_log, &(st)->x, (void **)&(st)->y, &(st)->conv1, &(st)->pool1,        \
     &(st)->conv2, &(st)->pool2, &(st)->fc1, &(st)->logits, (void **)&(st)->argmax1,          \
     (void **)&(st)->argmax2, &(st)->d_logits, &(st)->d_fc1, &(st)->d_pool2, &(st)->d_conv2,   \
     &(st)->d_pool1, &(st)->d_conv1, &(st)->grads, &(st)->workspace,                           \
     (void **)&(st)->images, (void **)&(st)->labels}

extern "C" int cnn_state_create(struct cnn_state *st, enum dtype t, int max_batch, float lr,
                                const uint8_t *images, const uint8_t *labels, int64_t count,
                                char *why, size_t why_len)
{
    memset(st, 0, sizeof *st);
    st->t = t;
    st->max_batch = max_batch;
    st->lr = lr;
    st->fusions = CNN_ALL_FUSIONS;
    st->count = count;
    st->max_steps = (int)((count + max_batch - 1) / max_batch);
    st->workspace_bytes = cnn_ours_workspace_layout(t, max_batch, st->region);
    const size_t e = dtype_size(t), b = (size_t)max_batch;
    const size_t bytes[] = {(size_t)count * 4, sizeof(int), sizeof(int), sizeof(float),
                            (size_t)st->max_steps * sizeof(float), b * CNN_PIXELS * e, b * 4,
                            b * ACTS_CONV1 * e, b * ACTS_POOL1 * e, b * ACTS_CONV2 * e,
                            b * CNN_FLAT * e, b * CNN_HIDDEN * e, b * CNN_CLASSES * e,
                            b * ACTS_POOL1, b * CNN_FLAT, b * CNN_CLASSES * e, b * CNN_HIDDEN * e,
                            b * CNN_FLAT * e, b * ACTS_CONV2 * e, b * ACTS_POOL1 * e,
                            b * ACTS_CONV1 * e, (size_t)CNN_DEVICE_PARAMS * e,
                            st->workspace_bytes, (size_t)count * CNN_PIXELS, (size_t)count * 4};
    void **buffers[] = STATE_BUFFERS(st);
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (cnn_device_alloc(buffers[i], bytes[i], "training step", why, why_len)) {
            cnn_state_destroy(st);
            return 3;
        }
    if (cnn_device_alloc((void **)&st->master, (size_t)CNN_DEVICE_PARAMS * 4, "training step",
                         why, why_len) ||
        (t != DT_FP32 && cnn_device_alloc(&st->params, (size_t)CNN_DEVICE_PARAMS * e,
                                          "training step", why, why_len))) {
        cnn_state_destroy(st);
        return 3;
    }
    if (t == DT_FP32)
        st->params = st->master;

    int32_t *wide = (int32_t *)malloc((size_t)count * 4);
    if (!wide) {
        snprintf(why, why_len, "out of host memory for %lld labels", (long long)count);
        cnn_state_destroy(st);
        return 3;
    }
    for (int64_t i = 0; i < count; i++)
        wide[i] = labels[i];
    CUDA_CHECK(cudaMemcpy((void *)st->labels, wide, (size_t)count * 4, cudaMemcpyHostToDevice));
    free(wide);
    CUDA_CHECK(cudaMemcpy((void *)st->images, images, (size_t)count * CNN_PIXELS,
                          cudaMemcpyHostToDevice));
    /* Pads between tensors stay zero in every flat array, so the update leaves them zero. */
    CUDA_CHECK(cudaMemset(st->grads, 0, (size_t)CNN_DEVICE_PARAMS * e));
    CUDA_CHECK(cudaMemset(st->master, 0, (size_t)CNN_DEVICE_PARAMS * 4));
    CUDA_CHECK(cudaMemset(st->workspace, 0, st->workspace_bytes ? st->workspace_bytes : 1));
    CUDA_CHECK(cudaMemset(st->step, 0, sizeof(int)));
    CUDA_CHECK(cudaMemset(st->correct, 0, sizeof(int)));
    return 0;
}

extern "C" void cnn_state_destroy(struct cnn_state *st)
{
    void **buffers[] = STATE_BUFFERS(st);
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        cudaFree(*buffers[i]);
        *buffers[i] = NULL;
    }
    if (st->params != st->master)
        cudaFree(st->params);
    cudaFree(st->master);
    st->params = st->master = NULL;
}

extern "C" void cnn_state_set_params(struct cnn_state *st, const float *params)
{
    const size_t n = (size_t)CNN_DEVICE_PARAMS;
    float *padded = (float *)calloc(n, sizeof(float));
    uint16_t *halves = (uint16_t *)calloc(n, sizeof(uint16_t));
    if (!padded || !halves) {
        fprintf(stderr, "10-train-cnn: out of host memory for the parameters\n");
        exit(KL_EXIT_CUDA);
    }
    for (int i = 0; i < CNN_PARAMS; i++)
        memcpy(padded + cnn_device_offset(i), params + cnn_param_offset(i),
               (size_t)cnn_param_elems[i] * sizeof(float));
    for (size_t i = 0; i < n; i++)
        halves[i] = half_from_float(padded[i]);
    CUDA_CHECK(cudaMemcpy(st->master, padded, n * sizeof(float), cudaMemcpyHostToDevice));
    if (st->t != DT_FP32)
        CUDA_CHECK(cudaMemcpy(st->params, halves, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(padded);
    free(halves);
}

/* A flat device array of type t (or fp32) into net.h's unpadded fp32 layout. */
static void unpad(const void *device, enum dtype t, float *out)
{
    const size_t n = (size_t)CNN_DEVICE_PARAMS, e = dtype_size(t);
    void *host = malloc(n * e);
    if (!host) {
        fprintf(stderr, "10-train-cnn: out of host memory for the parameters\n");
        exit(KL_EXIT_CUDA);
    }
    CUDA_CHECK(cudaMemcpy(host, device, n * e, cudaMemcpyDeviceToHost));
    for (int i = 0; i < CNN_PARAMS; i++)
        for (int64_t j = 0; j < cnn_param_elems[i]; j++)
            out[cnn_param_offset(i) + j] =
                (float)load_as_double(host, t, (size_t)(cnn_device_offset(i) + j));
    free(host);
}

extern "C" void cnn_state_get_params(const struct cnn_state *st, float *params)
{
    unpad(st->master, DT_FP32, params);
}

extern "C" void cnn_state_get_grads(const struct cnn_state *st, float *grads)
{
    unpad(st->grads, st->t, grads);
}
