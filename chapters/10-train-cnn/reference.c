/* The CPU reference of net.h's CNN (reference.h), one image at a time, in double.
 *
 * The forward keeps every layer's output, since the backward needs them:
 *   x -> conv1 -> ReLU -> pool1 -> conv2 -> ReLU -> pool2 -> fc1 -> ReLU -> fc2 -> logits z
 * and the loss of one image is L = logsumexp(z) - z[label]; the batch's loss is the mean.
 *
 * The backward walks the same chain in reverse, each layer turning the gradient of its output
 * into the gradient of its input (and of its parameters):
 *   softmax cross-entropy: dL/dz = (softmax(z) - onehot(label)) / n   (n: the batch, the mean)
 *   linear y = W x + b:    dW += dy x^T,  db += dy,  dx = W^T dy
 *   ReLU y = max(x, 0):    dx = dy where y > 0, else 0 (so 0 at x = 0)
 *   max pool:              each window's dy goes to the input its maximum came from
 *   3x3 conv, padding 1:   every product w[k][c][r][s] x[c][h'][w'] that formed y[k][h][w]
 *                          sends dy[k][h][w] x[c][h'][w'] to dw and dy[k][h][w] w[...] to dx
 * Each image's parameter gradients are added into grads, so grads ends as the mean's gradient.
 * conv1's input gradient is never formed: nothing upstream of the image learns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

#define SIDE1 CNN_SIDE            /* conv1's planes, 28 x 28 */
#define SIDE2 (CNN_SIDE / 2)      /* pool1's and conv2's, 14 x 14 */
#define SIDE3 (CNN_SIDE / 4)      /* pool2's, 7 x 7 */
#define CONV1_OUT (CNN_C1 * SIDE1 * SIDE1)
#define POOL1_OUT (CNN_C1 * SIDE2 * SIDE2)
#define CONV2_OUT (CNN_C2 * SIDE2 * SIDE2)
#define POOL2_OUT (CNN_C2 * SIDE3 * SIDE3)   /* = CNN_FLAT, fc1's input, in NCHW order */

/* One image's activations, each layer's output as the backward reads it. */
struct forward {
    double x[CNN_PIXELS];
    double conv1[CONV1_OUT];                 /* after its ReLU */
    double pool1[POOL1_OUT];
    int pool1_from[POOL1_OUT];               /* the index in conv1 of each window's maximum */
    double conv2[CONV2_OUT];                 /* after its ReLU */
    double pool2[POOL2_OUT];
    int pool2_from[POOL2_OUT];
    double fc1[CNN_HIDDEN];                  /* after its ReLU */
    double logits[CNN_CLASSES];
};

/* The gradient of the batch's loss with respect to each of one image's activations. */
struct backward {
    double logits[CNN_CLASSES], fc1[CNN_HIDDEN], pool2[POOL2_OUT], conv2[CONV2_OUT],
        pool1[POOL1_OUT], conv1[CONV1_OUT];
};

static const double *tensor(const double *params, enum cnn_param i)
{
    return params + cnn_param_offset(i);
}

static double *grad_of(double *grads, enum cnn_param i)
{
    return grads + cnn_param_offset(i);
}

/* ---- the layers, forward ---- */

static int inside(int h, int w, int side)
{
    return h >= 0 && h < side && w >= 0 && w < side;
}

/* y[k][h][w] = b[k] + sum over c, r, s of w[k][c][r][s] x[c][h + r - 1][w + s - 1]: a 3x3
 * convolution with padding 1 (taps outside x read zero), so y keeps x's side. */
static void conv3x3(const double *x, int channels, int side, const double *w, const double *b,
                    int filters, double *y)
{
    for (int k = 0; k < filters; k++)
        for (int h = 0; h < side; h++)
            for (int col = 0; col < side; col++) {
                double sum = b[k];
                for (int c = 0; c < channels; c++)
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++)
                            if (inside(h + r - 1, col + s - 1, side))
                                sum += w[((k * channels + c) * 3 + r) * 3 + s] *
                                       x[(c * side + h + r - 1) * side + col + s - 1];
                y[(k * side + h) * side + col] = sum;
            }
}

/* In place; a NaN stays NaN. */
static void relu(double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 0)
            v[i] = 0;
}

/* Whether v takes the place of the best so far: larger, or the first NaN (chapter 06's rule,
 * so that a tie goes to the first maximum in row-major order). */
static int beats(double v, double best)
{
    return v > best || (isnan(v) && !isnan(best));
}

/* 2x2 windows, stride 2, over `planes` planes of side x side; from[o] is the index in x of
 * output o's maximum, which the backward sends o's gradient to. */
static void maxpool2x2(const double *x, int planes, int side, double *y, int *from)
{
    const int half = side / 2;
    for (int p = 0; p < planes; p++)
        for (int i = 0; i < half; i++)
            for (int j = 0; j < half; j++) {
                const int o = (p * half + i) * half + j;
                from[o] = (p * side + 2 * i) * side + 2 * j;
                for (int r = 0; r < 2; r++)
                    for (int s = 0; s < 2; s++) {
                        const int at = (p * side + 2 * i + r) * side + 2 * j + s;
                        if (beats(x[at], x[from[o]]))
                            from[o] = at;
                    }
                y[o] = x[from[o]];
            }
}

/* y[o] = b[o] + sum over i of w[o][i] x[i]: PyTorch's Linear, w as [out][in]. */
static void linear(const double *x, int in, const double *w, const double *b, int out,
                   double *y)
{
    for (int o = 0; o < out; o++) {
        double sum = b[o];
        for (int i = 0; i < in; i++)
            sum += w[(size_t)o * in + i] * x[i];
        y[o] = sum;
    }
}

/* The index of the first maximum. */
static int first_max(const double *v, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int label_ok(int32_t label)
{
    return label >= 0 && label < CNN_CLASSES;
}

/* One image's loss, logsumexp(z) - z[label], with the maximum taken out first so that no exp
 * overflows. When dz is not NULL, also the gradient of the batch's mean loss with respect to
 * z: (softmax(z) - onehot(label)) / n. A label out of range has no logit: NaN, both. */
static double cross_entropy(const double *z, int32_t label, int n, double *dz)
{
    const double top = z[first_max(z, CNN_CLASSES)];
    double sum = 0;
    for (int j = 0; j < CNN_CLASSES; j++)
        sum += exp(z[j] - top);
    for (int j = 0; dz && j < CNN_CLASSES; j++)
        dz[j] = label_ok(label) ? (exp(z[j] - top) / sum - (j == label)) / n : NAN;
    return label_ok(label) ? top + log(sum) - z[label] : NAN;
}

static void forward(const double *params, const float *image, struct forward *f)
{
    for (int p = 0; p < CNN_PIXELS; p++)
        f->x[p] = image[p];
    conv3x3(f->x, 1, SIDE1, tensor(params, CNN_CONV1_W), tensor(params, CNN_CONV1_B), CNN_C1,
            f->conv1);
    relu(f->conv1, CONV1_OUT);
    maxpool2x2(f->conv1, CNN_C1, SIDE1, f->pool1, f->pool1_from);
    conv3x3(f->pool1, CNN_C1, SIDE2, tensor(params, CNN_CONV2_W), tensor(params, CNN_CONV2_B),
            CNN_C2, f->conv2);
    relu(f->conv2, CONV2_OUT);
    maxpool2x2(f->conv2, CNN_C2, SIDE2, f->pool2, f->pool2_from);
    linear(f->pool2, CNN_FLAT, tensor(params, CNN_FC1_W), tensor(params, CNN_FC1_B),
           CNN_HIDDEN, f->fc1);
    relu(f->fc1, CNN_HIDDEN);
    linear(f->fc1, CNN_HIDDEN, tensor(params, CNN_FC2_W), tensor(params, CNN_FC2_B),
           CNN_CLASSES, f->logits);
}

/* ---- the layers, backward: dw and db accumulate over the batch; dx is written ---- */

/* From dy: dw[o][i] += dy[o] x[i], db[o] += dy[o], and dx[i] = sum over o of w[o][i] dy[o]. */
static void linear_backward(const double *x, int in, const double *w, int out,
                            const double *dy, double *dw, double *db, double *dx)
{
    for (int i = 0; i < in; i++)
        dx[i] = 0;
    for (int o = 0; o < out; o++) {
        db[o] += dy[o];
        for (int i = 0; i < in; i++) {
            dw[(size_t)o * in + i] += dy[o] * x[i];
            dx[i] += w[(size_t)o * in + i] * dy[o];
        }
    }
}

/* y is the ReLU's output: its input was positive exactly where y is. */
static void relu_backward(const double *y, double *dy, int n)
{
    for (int i = 0; i < n; i++)
        if (!(y[i] > 0))
            dy[i] = 0;
}

/* dx is zero but where a window's maximum came from, which receives that window's dy. */
static void maxpool2x2_backward(const double *dy, const int *from, int outputs, double *dx,
                                int inputs)
{
    for (int i = 0; i < inputs; i++)
        dx[i] = 0;
    for (int o = 0; o < outputs; o++)
        dx[from[o]] += dy[o];
}

/* conv3x3's products, read the other way: each tap that formed y[k][h][w] from
 * w[k][c][r][s] and x[c][h'][w'] (h' = h + r - 1, w' = w + s - 1) sends dy[k][h][w] x[c][h'][w']
 * to dw[k][c][r][s] and dy[k][h][w] w[k][c][r][s] to dx[c][h'][w'] (unless dx is NULL);
 * db[k] gathers dy[k]'s sum. */
static void conv3x3_backward(const double *x, int channels, int side, const double *w,
                             int filters, const double *dy, double *dw, double *db, double *dx)
{
    for (int i = 0; dx && i < channels * side * side; i++)
        dx[i] = 0;
    for (int k = 0; k < filters; k++)
        for (int h = 0; h < side; h++)
            for (int col = 0; col < side; col++) {
                const double g = dy[(k * side + h) * side + col];
                db[k] += g;
                for (int c = 0; c < channels; c++)
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++) {
                            if (!inside(h + r - 1, col + s - 1, side))
                                continue;
                            const int wi = ((k * channels + c) * 3 + r) * 3 + s;
                            const int xi = (c * side + h + r - 1) * side + col + s - 1;
                            dw[wi] += g * x[xi];
                            if (dx)
                                dx[xi] += w[wi] * g;
                        }
            }
}

/* From b->logits (dL/dz, filled by cross_entropy) back through every layer; each
 * parameter's gradient is added into grads. */
static void backward(const double *params, const struct forward *f, struct backward *b,
                     double *grads)
{
    linear_backward(f->fc1, CNN_HIDDEN, tensor(params, CNN_FC2_W), CNN_CLASSES, b->logits,
                    grad_of(grads, CNN_FC2_W), grad_of(grads, CNN_FC2_B), b->fc1);
    relu_backward(f->fc1, b->fc1, CNN_HIDDEN);
    linear_backward(f->pool2, CNN_FLAT, tensor(params, CNN_FC1_W), CNN_HIDDEN, b->fc1,
                    grad_of(grads, CNN_FC1_W), grad_of(grads, CNN_FC1_B), b->pool2);
    maxpool2x2_backward(b->pool2, f->pool2_from, POOL2_OUT, b->conv2, CONV2_OUT);
    relu_backward(f->conv2, b->conv2, CONV2_OUT);
    conv3x3_backward(f->pool1, CNN_C1, SIDE2, tensor(params, CNN_CONV2_W), CNN_C2, b->conv2,
                     grad_of(grads, CNN_CONV2_W), grad_of(grads, CNN_CONV2_B), b->pool1);
    maxpool2x2_backward(b->pool1, f->pool1_from, POOL1_OUT, b->conv1, CONV1_OUT);
    relu_backward(f->conv1, b->conv1, CONV1_OUT);
    conv3x3_backward(f->x, 1, SIDE1, tensor(params, CNN_CONV1_W), CNN_C1, b->conv1,
                     grad_of(grads, CNN_CONV1_W), grad_of(grads, CNN_CONV1_B), NULL);
}

/* ---- the entry points ---- */

/* The activations are some 400 KB an image, too many for a thread's stack. */
static void *alloc_or_exit(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "cnn reference: out of host memory (%zu bytes)\n", bytes);
        exit(3); /* the book's status for running out of memory */
    }
    return p;
}

/* The batch, image by image: the mean loss, the count of right predictions and, when grads
 * is not NULL, the mean loss's gradient. */
static double run_batch(const double *params, const float *images, const int32_t *labels,
                        int n, double *grads, int *correct)
{
    if (grads)
        memset(grads, 0, CNN_PARAM_TOTAL * sizeof *grads);
    if (correct)
        *correct = 0;
    if (n < 1)
        return NAN; /* the mean of no losses */
    struct forward *f = alloc_or_exit(sizeof *f);
    struct backward *b = grads ? alloc_or_exit(sizeof *b) : NULL;
    double loss = 0;
    int right = 0;
    for (int i = 0; i < n; i++) {
        forward(params, images + (size_t)i * CNN_PIXELS, f);
        loss += cross_entropy(f->logits, labels[i], n, b ? b->logits : NULL);
        right += first_max(f->logits, CNN_CLASSES) == labels[i];
        if (b)
            backward(params, f, b, grads);
    }
    free(f);
    free(b);
    if (correct)
        *correct = right;
    return loss / n;
}

void cnn_cpu_logits(const double *params, const float *images, int n, double *logits)
{
    struct forward *f = alloc_or_exit(sizeof *f);
    for (int i = 0; i < n; i++) {
        forward(params, images + (size_t)i * CNN_PIXELS, f);
        memcpy(logits + (size_t)i * CNN_CLASSES, f->logits, sizeof f->logits);
    }
    free(f);
}

double cnn_cpu_loss(const double *params, const float *images, const int32_t *labels, int n,
                    int *correct)
{
    return run_batch(params, images, labels, n, NULL, correct);
}

double cnn_cpu_gradient(const double *params, const float *images, const int32_t *labels, int n,
                        double *grads, int *correct)
{
    return run_batch(params, images, labels, n, grads, correct);
}

void cnn_cpu_sgd(double *params, const double *grads, double lr)
{
    for (int i = 0; i < CNN_PARAM_TOTAL; i++)
        params[i] -= lr * grads[i];
}
