/* The vendor's step (vendor.cu): the same step as ours.cu on cuDNN and cuBLAS, with the glue of
 * step.h for what neither library has (the batch gather, the accuracy count, the update). Its
 * context holds the libraries' handles, descriptors and algorithm choices, made once. */
#ifndef CNN_VENDOR_H
#define CNN_VENDOR_H

#include <cuda_runtime_api.h>

#include "step.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cnn_vendor;

/* For steps of st->max_batch images and of `tail` (0: none). Returns 0, or 3 with a message. */
int cnn_vendor_create(struct cnn_vendor **v, struct cnn_state *st, int tail, char *why,
                      size_t why_len);
void cnn_vendor_destroy(struct cnn_vendor *v);
/* A cnn_step_fn: ctx is the struct cnn_vendor. */
void cnn_vendor_step(struct cnn_state *st, int batch, void *ctx, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
