/* The CPU reference of net.h's CNN: its forward, its loss, its backward and the SGD update, in
 * double, with plain loops (reference.c). The GPU steps are checked against it, and it is the
 * place to read how each layer's gradient is formed.
 *
 * params is the flat array of net.h (CNN_PARAM_TOTAL doubles); images are n x CNN_PIXELS
 * pixels already scaled to [0, 1]; labels are n classes, 0 to CNN_CLASSES - 1 (a label outside
 * that range makes the loss NaN, and the gradient too, as chapter 04's reference does); n >= 1.
 * Ties: max pooling's maximum, and the predicted class, are the first maximum in row-major
 * order (chapter 06's rule); ReLU's gradient at 0 is 0. */
#ifndef CNN_REFERENCE_H
#define CNN_REFERENCE_H

#include <stdint.h>

#include "net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The logits of n images, n x CNN_CLASSES. */
void cnn_cpu_logits(const double *params, const float *images, int n, double *logits);

/* The mean cross-entropy of n images; the number whose predicted class is their label goes to
 * *correct unless correct is NULL. */
double cnn_cpu_loss(const double *params, const float *images, const int32_t *labels, int n,
                    int *correct);

/* The same forward, then the gradient of the mean loss into grads (CNN_PARAM_TOTAL doubles,
 * net.h's layout). Returns the loss. */
double cnn_cpu_gradient(const double *params, const float *images, const int32_t *labels, int n,
                        double *grads, int *correct);

/* One step of plain SGD: params -= lr * grads. */
void cnn_cpu_sgd(double *params, const double *grads, double lr);

#ifdef __cplusplus
}
#endif
#endif
