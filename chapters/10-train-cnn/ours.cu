/* Ours: one training step as calls of the library, chapters 01-09's api.h, in the order a
 * student would write them. The convolutions' bias and ReLU are fused into chapter 07's
 * forward, and each weight gradient's bias gradient into chapter 09's pass over dy; everything
 * else is one call an operation. Each api picks its own rung for the shape and dtype.
 *
 * Forward:  conv1+ReLU, pool, conv2+ReLU, pool, fc1 (ABT) + bias + ReLU, fc2 (ABT) + bias,
 *           cross-entropy with its gradient (chapter 04, fused), the accuracy count.
 * Backward: fc2's dW (ATB) and db (chapter 02), d_fc1 (AB), ReLU', fc1's dW and db, d_pool2,
 *           pool2', ReLU', conv2's dW+db (chapter 09) and dx (chapter 08), pool1', ReLU',
 *           conv1's dW+db. conv1's input gradient is never needed.
 * Update:   one SGD kernel over the flat parameters.
 * The state's fusions (step.h) replace some of these calls by fused.cu's kernels: each pool's
 * backward with the ReLU's (two launches and a round trip of dz become one), fc2's product
 * with its bias and the count of hits (the update then logs the loss), and its input gradient
 * with fc1's ReLU'. */
#include <stdio.h>

#include "01-relu/api.h"
#include "02-bias-grad/api.h"
#include "04-cross-entropy/api.h"
#include "05-matmul/api.h"
#include "06-maxpool/api.h"
#include "07-conv-forward/api.h"
#include "08-conv-backward-input/api.h"
#include "09-conv-backward-weight/api.h"
#include "check.h"
#include "step.h"

/* The layers' shapes at a batch of n. Both convolutions and both pools are valid by
 * construction, so a failure here is a bug, not bad input. */
struct layers {
    struct conv2d_dims conv1, conv2;
    struct maxpool_dims pool1, pool2;
};

static struct layers layers_of(int n)
{
    struct layers l;
    char why[256];
    if (conv2d_dims_of(n, 1, CNN_SIDE, CNN_SIDE, CNN_C1, 3, 3, 1, 1, &l.conv1, why, sizeof why) ||
        conv2d_dims_of(n, CNN_C1, 14, 14, CNN_C2, 3, 3, 1, 1, &l.conv2, why, sizeof why) ||
        maxpool_dims_of(n, CNN_C1, CNN_SIDE, CNN_SIDE, 2, 2, 2, 0, &l.pool1, why, sizeof why) ||
        maxpool_dims_of(n, CNN_C2, 14, 14, 2, 2, 2, 0, &l.pool2, why, sizeof why)) {
        fprintf(stderr, "10-train-cnn: the network's layers at batch %d: %s\n", n, why);
        exit(KL_EXIT_CUDA);
    }
    return l;
}

/* The workspace: one region a call that needs one, each as large as any batch up to the
 * largest needs, so that no call's counters meet another's scratch. */
enum region { WS_CONV1_FWD, WS_CONV2_FWD, WS_CE, WS_BIAS_FC2, WS_BIAS_FC1, WS_CONV2_DX,
              WS_CONV2_DW, WS_CONV1_DW, WS_REGIONS };
static_assert(WS_REGIONS == CNN_WS_REGIONS, "step.h's count of workspace regions");

static size_t region_bytes(enum region r, enum dtype t, int n)
{
    const struct layers l = layers_of(n);
    const struct ce_dims ce = {(size_t)n, CNN_CLASSES};
    const struct bias_grad_dims fc2 = {n, CNN_CLASSES, 1, 1}, fc1 = {n, CNN_HIDDEN, 1, 1};
    switch (r) {
    case WS_CONV1_FWD: return conv2d_forward_workspace_bytes(l.conv1, t);
    case WS_CONV2_FWD: return conv2d_forward_workspace_bytes(l.conv2, t);
    case WS_CE: return cross_entropy_workspace_bytes(ce, t);
    case WS_BIAS_FC2: return bias_grad_workspace_bytes(fc2, t);
    case WS_BIAS_FC1: return bias_grad_workspace_bytes(fc1, t);
    case WS_CONV2_DX: return conv2d_backward_input_workspace_bytes(l.conv2, t);
    case WS_CONV2_DW: return conv2d_backward_weight_workspace_bytes(l.conv2, t);
    case WS_CONV1_DW: return conv2d_backward_weight_workspace_bytes(l.conv1, t);
    default: return 0;
    }
}

static size_t round_up(size_t v) { return (v + 255) / 256 * 256; }

extern "C" size_t cnn_ours_workspace_layout(enum dtype t, int max_batch, size_t *offset)
{
    size_t total = 0;
    for (int r = 0; r < WS_REGIONS; r++) {
        size_t most = 0;
        for (int n = 1; n <= max_batch; n++) {
            const size_t b = region_bytes((enum region)r, t, n);
            most = b > most ? b : most;
        }
        offset[r] = total;
        total += round_up(most);
    }
    return total;
}

struct call_space {
    void *at[WS_REGIONS];
};

static struct call_space spaces_of(const struct cnn_state *st)
{
    struct call_space c;
    for (int r = 0; r < WS_REGIONS; r++)
        c.at[r] = (char *)st->workspace + st->region[r];
    return c;
}

/* count: whether fc2's fused forward also counts the batch's hits (a training step's). */
static void forward(struct cnn_state *st, const struct layers *l, const struct call_space *ws,
                    int n, int count, cudaStream_t s)
{
    const enum dtype t = st->t;
    void *p = st->params;
    conv2d_forward(st->x, cnn_param(st, p, CNN_CONV1_W), cnn_param(st, p, CNN_CONV1_B),
                   st->conv1, l->conv1, CONV2D_RELU, t, ws->at[WS_CONV1_FWD], s);
    cnn_mark(st, "conv1 forward + ReLU", s);
    maxpool_forward(st->conv1, st->pool1, st->argmax1, l->pool1, t, s);
    cnn_mark(st, "pool1 forward", s);
    conv2d_forward(st->pool1, cnn_param(st, p, CNN_CONV2_W), cnn_param(st, p, CNN_CONV2_B),
                   st->conv2, l->conv2, CONV2D_RELU, t, ws->at[WS_CONV2_FWD], s);
    cnn_mark(st, "conv2 forward + ReLU", s);
    maxpool_forward(st->conv2, st->pool2, st->argmax2, l->pool2, t, s);
    cnn_mark(st, "pool2 forward", s);
    matmul(MATMUL_ABT, st->pool2, cnn_param(st, p, CNN_FC1_W), st->fc1,
           (struct matmul_dims){n, CNN_HIDDEN, CNN_FLAT}, t, s);
    cnn_mark(st, "fc1 forward", s);
    cnn_bias_act_rows(st->fc1, cnn_param(st, p, CNN_FC1_B), n, CNN_HIDDEN, 1, t, s);
    cnn_mark(st, "fc1 bias + ReLU", s);
    if (st->fusions & CNN_FUSE_FC2) {
        cnn_fc2_forward(st->fc1, cnn_param(st, p, CNN_FC2_W), cnn_param(st, p, CNN_FC2_B),
                        st->logits, count ? st->y : NULL, st->correct, n, t, s);
        cnn_mark(st, "fc2 forward + bias", s);
        return;
    }
    matmul(MATMUL_ABT, st->fc1, cnn_param(st, p, CNN_FC2_W), st->logits,
           (struct matmul_dims){n, CNN_CLASSES, CNN_HIDDEN}, t, s);
    cnn_mark(st, "fc2 forward", s);
    cnn_bias_act_rows(st->logits, cnn_param(st, p, CNN_FC2_B), n, CNN_CLASSES, 0, t, s);
    cnn_mark(st, "fc2 bias", s);
}

/* d_fc1 = (d_logits W2) * ReLU'(fc1): fused, or chapter 05's product then chapter 01's ReLU'. */
static void fc1_output_gradient(struct cnn_state *st, int n, cudaStream_t s)
{
    void *w2 = cnn_param(st, st->params, CNN_FC2_W);
    if (st->fusions & CNN_FUSE_FC2) {
        cnn_fc2_input_gradient(st->d_logits, w2, st->fc1, st->d_fc1, n, st->t, s);
        cnn_mark(st, "fc1 output gradient + ReLU'", s);
        return;
    }
    matmul(MATMUL_AB, st->d_logits, w2, st->d_fc1, (struct matmul_dims){n, CNN_HIDDEN, CNN_CLASSES},
           st->t, s);
    cnn_mark(st, "fc1 output gradient", s);
    relu_backward(st->fc1, st->d_fc1, st->d_fc1, (struct relu_dims){(size_t)n * CNN_HIDDEN}, st->t,
                  s);
    cnn_mark(st, "fc1 ReLU backward", s);
}

/* dz = ReLU'(a) * pool'(d_pooled): fused into one kernel, or chapter 06's backward then
 * chapter 01's, in place. */
static void pool_and_relu_backward(struct cnn_state *st, const void *d_pooled,
                                   const uint8_t *argmax, const void *a, void *dz,
                                   const struct maxpool_dims *d, cudaStream_t s)
{
    if (st->fusions & CNN_FUSE_POOL_RELU) {
        cnn_pool_relu_backward(d_pooled, argmax, a, dz, d->n * d->c, (int)d->oh, (int)d->ow,
                               st->t, s);
        cnn_mark(st, "pool + ReLU backward", s);
        return;
    }
    maxpool_backward(d_pooled, argmax, dz, *d, st->t, s);
    cnn_mark(st, "pool backward", s);
    relu_backward(a, dz, dz, (struct relu_dims){(size_t)(d->n * d->c * d->h * d->w)}, st->t, s);
    cnn_mark(st, "ReLU backward", s);
}

static void backward(struct cnn_state *st, const struct layers *l, const struct call_space *ws,
                     int n, cudaStream_t s)
{
    const enum dtype t = st->t;
    void *p = st->params, *g = st->grads;
    matmul(MATMUL_ATB, st->d_logits, st->fc1, cnn_param(st, g, CNN_FC2_W),
           (struct matmul_dims){CNN_CLASSES, CNN_HIDDEN, n}, t, s);
    cnn_mark(st, "fc2 weight gradient", s);
    bias_grad(st->d_logits, cnn_param(st, g, CNN_FC2_B),
              (struct bias_grad_dims){n, CNN_CLASSES, 1, 1}, t, ws->at[WS_BIAS_FC2], s);
    cnn_mark(st, "fc2 bias gradient", s);
    fc1_output_gradient(st, n, s);

    matmul(MATMUL_ATB, st->d_fc1, st->pool2, cnn_param(st, g, CNN_FC1_W),
           (struct matmul_dims){CNN_HIDDEN, CNN_FLAT, n}, t, s);
    cnn_mark(st, "fc1 weight gradient", s);
    bias_grad(st->d_fc1, cnn_param(st, g, CNN_FC1_B),
              (struct bias_grad_dims){n, CNN_HIDDEN, 1, 1}, t, ws->at[WS_BIAS_FC1], s);
    cnn_mark(st, "fc1 bias gradient", s);
    matmul(MATMUL_AB, st->d_fc1, cnn_param(st, p, CNN_FC1_W), st->d_pool2,
           (struct matmul_dims){n, CNN_FLAT, CNN_HIDDEN}, t, s);
    cnn_mark(st, "pool2 output gradient", s);

    pool_and_relu_backward(st, st->d_pool2, st->argmax2, st->conv2, st->d_conv2, &l->pool2, s);
    conv2d_backward_weight(st->pool1, st->d_conv2, cnn_param(st, g, CNN_CONV2_W),
                           cnn_param(st, g, CNN_CONV2_B), l->conv2, t, ws->at[WS_CONV2_DW], s);
    cnn_mark(st, "conv2 weight + bias gradient", s);
    conv2d_backward_input(st->d_conv2, cnn_param(st, p, CNN_CONV2_W), st->d_pool1, l->conv2, t,
                          ws->at[WS_CONV2_DX], s);
    cnn_mark(st, "conv2 input gradient", s);

    pool_and_relu_backward(st, st->d_pool1, st->argmax1, st->conv1, st->d_conv1, &l->pool1, s);
    conv2d_backward_weight(st->x, st->d_conv1, cnn_param(st, g, CNN_CONV1_W),
                           cnn_param(st, g, CNN_CONV1_B), l->conv1, t, ws->at[WS_CONV1_DW], s);
    cnn_mark(st, "conv1 weight + bias gradient", s);
}

extern "C" void cnn_ours_forward(struct cnn_state *st, int batch, cudaStream_t s)
{
    const struct layers l = layers_of(batch);
    const struct call_space ws = spaces_of(st);
    forward(st, &l, &ws, batch, 0, s);
}

extern "C" void cnn_ours_step(struct cnn_state *st, int batch, void *ctx, cudaStream_t s)
{
    const struct layers l = layers_of(batch);
    const struct call_space ws = spaces_of(st);
    (void)ctx;
    cnn_gather_batch(st, batch, s);
    cnn_mark(st, "gather the batch", s);
    const int counted = (st->fusions & CNN_FUSE_FC2) && (st->fusions & CNN_FUSE_COUNT);
    forward(st, &l, &ws, batch, counted, s);
    cross_entropy_fused(st->logits, st->y, st->loss, st->d_logits,
                        (struct ce_dims){(size_t)batch, CNN_CLASSES}, st->t, ws.at[WS_CE], s);
    cnn_mark(st, "cross-entropy + its gradient", s);
    if (!counted) {
        cnn_count_and_log(st, batch, 1, s);
        cnn_mark(st, "count and log", s);
    }
    backward(st, &l, &ws, batch, s);
    cnn_sgd_update(st, s);
    cnn_mark(st, "SGD update", s);
}
