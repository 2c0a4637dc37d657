/* One training step on the GPU against the CPU reference of the same network (reference.h), on
 * the same images, labels and weights: the loss, every gradient and every updated weight. */
#ifndef CNN_CHECK_STEP_H
#define CNN_CHECK_STEP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "dtype.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

struct step_check {
    int ok;
    double loss, loss_ref;
    int correct, correct_ref;  /* the step's count of hits, and the reference's */
    double worst_rel_err;      /* the largest normwise relative error of any tensor checked */
    double worst_abs_err;
    char worst[64];            /* the tensor it was in: "conv2.weight gradient", "loss", ... */
};

/* The normwise relative error a tensor of the step may show: fp16 rounds every activation and
 * gradient on the way, fp32 only sums in another order. */
double step_tolerance(enum dtype t);

/* Runs one step of `step` (with ctx, which `make_ctx` builds for the state when not NULL; with
 * the state's fusions set to `fusions`) at batch n on images (n x 784 bytes) and labels, from
 * params (net.h's flat layout), with learning rate lr; compares with the reference. Returns 0,
 * or 3 with a message (no memory). */
typedef int (*cnn_ctx_fn)(void **ctx, struct cnn_state *st, char *why, size_t why_len);
int cnn_check_step(cnn_step_fn step, cnn_ctx_fn make_ctx, void (*free_ctx)(void *),
                   unsigned fusions, enum dtype t, int n, const uint8_t *images,
                   const uint8_t *labels, const float *params, float lr, struct step_check *res,
                   char *why, size_t why_len);

/* The classroom kernel's signature (exercise.cu), and fused.cu's own in fp32, which passes. */
typedef void (*pool_relu_backward_fn)(const float *d_pooled, const uint8_t *argmax,
                                      const float *activation, float *dz, int64_t planes, int oh,
                                      int ow, cudaStream_t s);
void cnn_pool_relu_backward_exercise(const float *d_pooled, const uint8_t *argmax,
                                     const float *activation, float *dz, int64_t planes, int oh,
                                     int ow, cudaStream_t s);
void cnn_pool_relu_backward_fp32(const float *d_pooled, const uint8_t *argmax,
                                 const float *activation, float *dz, int64_t planes, int oh,
                                 int ow, cudaStream_t s);

/* Checks a fused pool + ReLU backward against the CPU at a few shapes, a line each to out.
 * Returns 0 right everywhere, 1 wrong somewhere. */
int cnn_exercise_verify(pool_relu_backward_fn kernel, uint64_t seed, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
