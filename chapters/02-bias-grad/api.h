/* Chapter 02 as a library: the convolution's bias gradient, db[c] = the sum over n, h, w of
 * dy[n, c, h, w] (NCHW), on the chapter's best rung for the shape and dtype (api.cu says
 * which, and why).
 *
 * dy and db are device pointers of type t (DT_FP32, or DT_FP16 with fp32 sums); workspace is
 * device memory of bias_grad_workspace_bytes(d, t) bytes, whose contents need not be anything
 * in particular; the call is asynchronous on stream s. Calls that may run at the same time
 * (on two streams) need a workspace each; calls in one stream, or captured into one graph in
 * order, may share one. */
#ifndef BIAS_GRAD_API_H
#define BIAS_GRAD_API_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bias_grad_dims {
    int64_t n, c, h, w; /* of dy */
};

size_t bias_grad_workspace_bytes(struct bias_grad_dims d, enum dtype t);

void bias_grad(const void *dy, void *db, struct bias_grad_dims d, enum dtype t, void *workspace,
               cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
