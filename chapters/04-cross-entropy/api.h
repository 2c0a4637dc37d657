/* Chapter 04 as a library: the mean cross-entropy loss of N rows of C logits against integer
 * labels, its gradient, or both in one go, on the chapter's best rung for the shape, dtype and
 * GPU (api.cu says which, and why).
 *
 *   loss = (1/N) sum_n (logsumexp(x_n) - x_n[label_n])
 *   dx   = (softmax(x) - onehot(label)) / N          (the gradient of the mean loss)
 *
 * x and dx are device pointers to d.n x d.c elements of type t (DT_FP32, or DT_FP16 with fp32
 * arithmetic), row-major; labels holds d.n int32 in [0, d.c) (a row with a label outside is
 * NaN in dx, and makes the loss NaN); loss is one fp32 in device memory, whatever t. The call is
 * asynchronous on stream s. workspace is device memory of cross_entropy_workspace_bytes(d, t)
 * bytes, aligned as cudaMalloc aligns it, zeroed (cudaMemset) before its first use; a call
 * leaves it ready for the next one. Calls that may run at the same time (on two streams) need a
 * workspace each; calls in one stream, or captured into one graph in order, may share one. */
#ifndef CROSS_ENTROPY_API_H
#define CROSS_ENTROPY_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ce_dims {
    size_t n, c; /* rows (samples), classes (logits a row); each below 2^31 */
};

size_t cross_entropy_workspace_bytes(struct ce_dims d, enum dtype t);

/* loss only */
void cross_entropy_forward(const void *x, const int32_t *labels, float *loss, struct ce_dims d,
                           enum dtype t, void *workspace, cudaStream_t s);
/* dx only */
void cross_entropy_backward(const void *x, const int32_t *labels, void *dx, struct ce_dims d,
                            enum dtype t, void *workspace, cudaStream_t s);
/* loss and dx from one read of the logits: the pass a training step runs */
void cross_entropy_fused(const void *x, const int32_t *labels, float *loss, void *dx,
                         struct ce_dims d, enum dtype t, void *workspace, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
