/* Chapter 01, ReLU: y = max(x, 0) forward; dx = dy where x > 0, else 0, backward.
 * Each rung's launchers take device pointers and the element count; the chapter table in
 * main.cu wraps them for the harness, and later chapters may call them directly. */
#ifndef RELU_H
#define RELU_H

#include <stddef.h>

#include "ladder.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RELU_RUNG(v)                                                                           \
    void relu_forward_##v(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s);     \
    void relu_backward_##v(const void *x, const void *dy, void *dx, size_t n, enum dtype t,    \
                           cudaStream_t s);
RELU_RUNG(v1)
RELU_RUNG(v2)
RELU_RUNG(v3)
RELU_RUNG(v4)
RELU_RUNG(v5)
RELU_RUNG(vendor)
#undef RELU_RUNG

void relu_forward_exercise(const void *x, void *y, size_t n, enum dtype t, cudaStream_t s);

/* The CPU reference (reference.c): x and dy hold n elements of type t; results in double. */
void relu_forward_reference(const void *x, enum dtype t, size_t n, double *y);
void relu_backward_reference(const void *x, const void *dy, enum dtype t, size_t n, double *dx);
double relu_of(double x);

extern const struct chapter relu_chapter;

#ifdef __cplusplus
}
#endif
#endif
