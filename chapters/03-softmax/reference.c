/* The CPU reference for softmax over the channels of NCHW, in double, reading the very values
 * the GPU reads.
 *
 * Row (n, s), s = h W + w, holds the C elements n C S + c S + s, c = 0 .. C-1, with S = H W.
 * Forward: m = max_c x_c, y_c = exp(x_c - m) / sum_k exp(x_k - m). Subtracting m changes
 * nothing in exact arithmetic and keeps every exponent <= 0, so nothing overflows, whatever
 * the magnitude of x.
 * Backward: with L any function of y, dL/dx_j = sum_c dL/dy_c * dy_c/dx_j and
 * dy_c/dx_j = y_c ([c = j] - y_j), so dx_j = y_j (dy_j - sum_c dy_c y_c). */
#include <math.h>

#include "softmax.h"

void softmax_forward_reference(const void *x, enum dtype t, struct softmax_dims d, double *y)
{
    const size_t S = (size_t)(d.h * d.w), C = (size_t)d.c;
    for (size_t n = 0; n < (size_t)d.n; n++) {
        for (size_t s = 0; s < S; s++) {
            size_t first = n * C * S + s;
            double m = -INFINITY;
            for (size_t c = 0; c < C; c++) {
                double v = load_as_double(x, t, first + c * S);
                if (v > m)
                    m = v;
            }
            double sum = 0;
            for (size_t c = 0; c < C; c++) {
                double e = exp(load_as_double(x, t, first + c * S) - m);
                y[first + c * S] = e;
                sum += e;
            }
            for (size_t c = 0; c < C; c++)
                y[first + c * S] /= sum;
        }
    }
}

void softmax_backward_reference(const void *y, const void *dy, enum dtype t,
                                struct softmax_dims d, double *dx)
{
    const size_t S = (size_t)(d.h * d.w), C = (size_t)d.c;
    for (size_t n = 0; n < (size_t)d.n; n++) {
        for (size_t s = 0; s < S; s++) {
            size_t first = n * C * S + s;
            double dot = 0;
            for (size_t c = 0; c < C; c++)
                dot += load_as_double(y, t, first + c * S) * load_as_double(dy, t, first + c * S);
            for (size_t c = 0; c < C; c++) {
                size_t i = first + c * S;
                dx[i] = load_as_double(y, t, i) * (load_as_double(dy, t, i) - dot);
            }
        }
    }
}
