/* The CPU reference for ReLU, in double, reading the very values the GPU reads.
 *
 * relu(x) = x for x >= 0 (and for NaN, which propagates), 0 for x < 0.
 * Its derivative is taken as 1 for x > 0 and 0 for x <= 0, so dx = dy where x > 0, else 0. */
#include "relu.h"

double relu_of(double x)
{
    return x < 0 ? 0 : x;
}

void relu_forward_reference(const void *x, enum dtype t, size_t n, double *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = relu_of(load_as_double(x, t, i));
}

void relu_backward_reference(const void *x, const void *dy, enum dtype t, size_t n, double *dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = load_as_double(x, t, i) > 0 ? load_as_double(dy, t, i) : 0;
}
