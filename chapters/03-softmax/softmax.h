/* Chapter 03, softmax over the channels of an NCHW tensor.
 *
 * Forward y = softmax(x) over C at every (n, h, w); backward dx = y * (dy - sum_c dy * y),
 * which takes the forward's output y, not x. Each rung's launchers take device pointers and the
 * tensor's dimensions; the chapter table in main.cu wraps them for the harness, and later
 * chapters may call them directly. */
#ifndef SOFTMAX_H
#define SOFTMAX_H

#include <stdbool.h>
#include <stdint.h>

#include "api.h"
#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SOFTMAX_RUNG(v)                                                                        \
    void softmax_forward_##v(const void *x, void *y, struct softmax_dims d, enum dtype t,      \
                             cudaStream_t s);                                                  \
    void softmax_backward_##v(const void *y, const void *dy, void *dx, struct softmax_dims d,  \
                              enum dtype t, cudaStream_t s);
SOFTMAX_RUNG(v1)
SOFTMAX_RUNG(v2)
SOFTMAX_RUNG(v3)
SOFTMAX_RUNG(v4)
SOFTMAX_RUNG(v5)
SOFTMAX_RUNG(v6)
SOFTMAX_RUNG(v7)
SOFTMAX_RUNG(v8)
SOFTMAX_RUNG(vendor)
#undef SOFTMAX_RUNG

/* v9's teams meet in `workspace`: softmax_v9_workspace_bytes(d) bytes, zeroed before its first
 * launch, left zeroed by every launch (api.h's softmax_workspace_bytes covers it). */
void softmax_forward_v9(const void *x, void *y, struct softmax_dims d, enum dtype t,
                        void *workspace, cudaStream_t s);
void softmax_backward_v9(const void *y, const void *dy, void *dx, struct softmax_dims d,
                         enum dtype t, void *workspace, cudaStream_t s);
size_t softmax_v9_workspace_bytes(struct softmax_dims d);

/* v5's launchers with the choice v6 makes: early = programmatic dependent launch (sm_90). */
void softmax_forward_v5_launch(const void *x, void *y, struct softmax_dims d, enum dtype t,
                               bool early, cudaStream_t s);
void softmax_backward_v5_launch(const void *y, const void *dy, void *dx, struct softmax_dims d,
                                enum dtype t, bool early, cudaStream_t s);

void softmax_forward_exercise(const void *x, void *y, struct softmax_dims d, enum dtype t,
                              cudaStream_t s);

/* The CPU reference (reference.c): inputs of type t laid out as d says; results in double. */
void softmax_forward_reference(const void *x, enum dtype t, struct softmax_dims d, double *y);
void softmax_backward_reference(const void *y, const void *dy, enum dtype t,
                                struct softmax_dims d, double *dx);

extern const struct chapter softmax_chapter;

#ifdef __cplusplus
}
#endif
#endif
