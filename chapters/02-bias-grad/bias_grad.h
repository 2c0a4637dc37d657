/* Chapter 02, bias gradient: db[c] = sum over n, h, w of dy[n, c, h, w] (NCHW).
 * Every rung's launcher takes device pointers and the sizes; main.cu wraps them for the
 * harness, and later chapters may call them directly. */
#ifndef BIAS_GRAD_H
#define BIAS_GRAD_H

#include <stddef.h>
#include <stdint.h>

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sizes of dy: n images of c channels of hw (= H x W) elements each. */
struct bias_grad_size {
    int64_t n, c, hw;
};

#define BIAS_GRAD_RUNG(v)                                                                      \
    void bias_grad_##v(const void *dy, void *db, struct bias_grad_size z, enum dtype t,        \
                       cudaStream_t s);
BIAS_GRAD_RUNG(v1)
BIAS_GRAD_RUNG(v3)
BIAS_GRAD_RUNG(v5)
BIAS_GRAD_RUNG(vendor)
BIAS_GRAD_RUNG(exercise)
#undef BIAS_GRAD_RUNG

/* The rungs that keep sums between two kernels: in `workspace`, of at least
 * bias_grad_workspace_bytes (api.h) bytes, whose contents they need not find zeroed. */
#define BIAS_GRAD_RUNG_WITH_WORKSPACE(v)                                                       \
    void bias_grad_##v(const void *dy, void *db, struct bias_grad_size z, enum dtype t,        \
                       void *workspace, cudaStream_t s);
BIAS_GRAD_RUNG_WITH_WORKSPACE(v2)
BIAS_GRAD_RUNG_WITH_WORKSPACE(v4)
BIAS_GRAD_RUNG_WITH_WORKSPACE(v6)
#undef BIAS_GRAD_RUNG_WITH_WORKSPACE

/* The CPU reference (reference.c): dy holds n x c x hw elements of type t; db gets c sums. */
void bias_grad_reference(const void *dy, enum dtype t, struct bias_grad_size z, double *db);

extern const struct chapter bias_grad_chapter;

#ifdef __cplusplus
}
#endif
#endif
