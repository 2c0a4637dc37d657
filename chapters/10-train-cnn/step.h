/* One training step of net.h's CNN on the GPU: the tensors it reads and writes, laid out once
 * for the largest batch, and the steps that run on them (ours through chapters 01-09's api.h,
 * vendor on cuDNN and cuBLAS). A step takes its batch from the resident data set by a device
 * counter, so the same captured graph serves every step of an epoch: nothing on the host
 * changes between replays.
 *
 * Parameters and gradients are flat, one tensor after another as net.h orders them, each
 * starting on a 256-byte boundary on the device (cnn_device_offset), so every kernel may load
 * them in 16-byte vectors. In fp32 the step updates `params` in place; in fp16 it keeps fp32
 * master weights in `master` and writes their fp16 copy into `params` after each update. */
#ifndef CNN_STEP_H
#define CNN_STEP_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"
#include "net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where parameter i starts in the device's flat arrays, in elements. */
static inline int64_t cnn_device_offset(int i)
{
    int64_t off = 0;
    for (int j = 0; j < i; j++)
        off += (cnn_param_elems[j] + 63) / 64 * 64;
    return off;
}
#define CNN_DEVICE_PARAMS (cnn_device_offset(CNN_PARAMS))

#define CNN_WS_REGIONS 8

/* The fusions ours may use (the chapter's rungs switch them on one by one). */
enum cnn_fusion {
    CNN_FUSE_POOL_RELU = 1u << 0, /* a pool's backward and the ReLU's before it: fused.cu */
    CNN_FUSE_FC2 = 1u << 1,       /* fc2's product with its bias, its input gradient with ReLU' */
    CNN_FUSE_COUNT = 1u << 2,     /* with FC2: the hits counted by fc2, the log by the update */
};
#define CNN_ALL_FUSIONS (CNN_FUSE_POOL_RELU | CNN_FUSE_FC2 | CNN_FUSE_COUNT)

struct cnn_state {
    enum dtype t;
    int max_batch;
    float lr;
    unsigned fusions; /* of enum cnn_fusion, for ours; CNN_ALL_FUSIONS unless a rung says */

    /* the data set, resident: images as bytes, labels, and this epoch's order */
    const uint8_t *images;
    const int32_t *labels;
    int64_t count;
    int32_t *order;

    /* device counters a step advances: which batch is next, the correct predictions so far,
     * the batch's mean loss and every step's loss */
    int *step;
    int *correct;
    float *loss;
    float *loss_log;
    int max_steps;
    int *progress; /* host-mapped, or NULL: the step counter copied out for a progress bar */

    /* one batch: its images (type t) and labels, then the activations, forward order */
    void *x;
    int32_t *y;
    void *conv1, *pool1, *conv2, *pool2, *fc1, *logits; /* conv and fc1 outputs after ReLU */
    uint8_t *argmax1, *argmax2;
    /* and their gradients, backward order */
    void *d_logits, *d_fc1, *d_pool2, *d_conv2, *d_pool1, *d_conv1;

    float *master;  /* fp32 weights (== params in fp32) */
    void *params;   /* type t */
    void *grads;    /* type t */

    /* --breakdown: called after each operation of a step with its name (NULL in an epoch) */
    void (*mark)(void *marks, const char *op, cudaStream_t s);
    void *marks;

    void *workspace; /* the library calls', one region each (ours.cu), zeroed once */
    size_t workspace_bytes;
    size_t region[CNN_WS_REGIONS]; /* where each call's region starts */
};

/* Allocates everything for batches of up to max_batch on a data set of count images (copied to
 * the GPU from host images and labels). Returns 0, or 3 with a message (out of memory). */
int cnn_state_create(struct cnn_state *st, enum dtype t, int max_batch, float lr,
                     const uint8_t *images, const uint8_t *labels, int64_t count, char *why,
                     size_t why_len);
void cnn_state_destroy(struct cnn_state *st);

/* cudaMalloc of bytes (at least 1): 0, or 3 with "out of GPU memory: N more bytes for the
 * <what>" in why. The state's buffers and the vendor's go through it. */
int cnn_device_alloc(void **p, size_t bytes, const char *what, char *why, size_t why_len);

/* Host <-> device parameters in net.h's flat fp32 layout (the master weights). */
void cnn_state_set_params(struct cnn_state *st, const float *params);
void cnn_state_get_params(const struct cnn_state *st, float *params);
/* The last step's gradients, as floats in net.h's flat layout. */
void cnn_state_get_grads(const struct cnn_state *st, float *grads);

/* After an operation of a step: tells st->mark, where there is one, that `op` ended. */
static inline void cnn_mark(const struct cnn_state *st, const char *op, cudaStream_t s)
{
    if (st->mark)
        st->mark(st->marks, op, s);
}

/* Parameter i's tensor within a flat device array of the state's type. */
void *cnn_param(const struct cnn_state *st, void *flat, int i);

/* A step's parts that ours and the vendor share (glue.cu): the batch gathered and scaled into
 * x and y; the loss logged and the correct predictions counted (after the logits); the SGD
 * update of every parameter from its gradient. */
void cnn_gather_batch(struct cnn_state *st, int batch, cudaStream_t s);
void cnn_count_and_log(struct cnn_state *st, int batch, int log_loss, cudaStream_t s);
void cnn_sgd_update(struct cnn_state *st, cudaStream_t s); /* logs too with CNN_FUSE_COUNT */
/* y[i][j] = act(y[i][j] + bias[j]) on a rows x cols matrix of type t (act: 0 none, 1 ReLU). */
void cnn_bias_act_rows(void *y, const void *bias, int64_t rows, int64_t cols, int relu,
                       enum dtype t, cudaStream_t s);

/* The 2x2 stride-2 pool's backward fused with the ReLU's: dz = the pooled gradient at each
 * window's argmax where the activation there is positive, else 0 (fused.cu). */
void cnn_pool_relu_backward(const void *d_pooled, const uint8_t *argmax, const void *activation,
                            void *dz, int64_t planes, int oh, int ow, enum dtype t,
                            cudaStream_t s);

/* fc2 (128 -> 10) fused: logits = fc1 W2^T + b2, and where labels is not NULL the rows whose
 * first maximum is their label added to *correct; d_fc1 = (d_logits W2) * ReLU'(fc1). */
void cnn_fc2_forward(const void *fc1, const void *w2, const void *b2, void *logits,
                     const int32_t *labels, int *correct, int rows, enum dtype t,
                     cudaStream_t s);
void cnn_fc2_input_gradient(const void *d_logits, const void *w2, const void *fc1, void *d_fc1,
                            int rows, enum dtype t, cudaStream_t s);

/* Ours: one step through the library (forward, loss, backward, update) on `batch` images.
 * The workspace layout: each region's offset, for batches up to max_batch; returns the total. */
size_t cnn_ours_workspace_layout(enum dtype t, int max_batch, size_t region[CNN_WS_REGIONS]);
void cnn_ours_step(struct cnn_state *st, int batch, void *unused, cudaStream_t s);
/* The forward alone, to the logits, for the test set (no loss, no counters). */
void cnn_ours_forward(struct cnn_state *st, int batch, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
