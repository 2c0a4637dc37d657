/* The CPU reference for the convolution forward: products and sums in double from the very
 * inputs the GPU read, one output at a time, straight from the formula in api.h. */
#include <stdlib.h>

#include "conv.h"
#include "verify.h"

static double *as_doubles(const void *x, enum dtype t, size_t n)
{
    double *d = host_alloc(n * sizeof *d);
    if (!d)
        abort(); /* problem_alloc_host already found room for far more */
    for (size_t i = 0; i < n; i++)
        d[i] = load_as_double(x, t, i);
    return d;
}

/* Output (n, k, p, q): the sum over the filter taps that land inside x. */
static double one_output(const double *x, const double *w, struct conv2d_dims d, int64_t n,
                         int64_t k, int64_t p, int64_t q)
{
    double sum = 0;
    for (int64_t c = 0; c < d.c; c++)
        for (int64_t r = 0; r < d.r; r++) {
            const int64_t h = p * d.stride + r - d.pad;
            if (h < 0 || h >= d.h)
                continue;
            for (int64_t s = 0; s < d.s; s++) {
                const int64_t col = q * d.stride + s - d.pad;
                if (col < 0 || col >= d.w)
                    continue;
                sum += x[((n * d.c + c) * d.h + h) * d.w + col] *
                       w[((k * d.c + c) * d.r + r) * d.s + s];
            }
        }
    return sum;
}

void conv2d_forward_reference(const void *x, const void *w, const void *bias, enum dtype t,
                              struct conv2d_dims d, enum conv2d_activation act, int64_t every,
                              double *y)
{
    double *xd = as_doubles(x, t, (size_t)(d.n * d.c * d.h * d.w));
    double *wd = as_doubles(w, t, (size_t)(d.k * d.c * d.r * d.s));
    const int64_t outputs = d.n * d.k * d.p * d.q;
    if (every < 1)
        every = 1;
    for (int64_t o = 0; o < outputs; o += every) {
        const int64_t q = o % d.q, p = o / d.q % d.p, k = o / (d.q * d.p) % d.k;
        const int64_t n = o / (d.q * d.p * d.k);
        double v = one_output(xd, wd, d, n, k, p, q);
        if (bias)
            v += load_as_double(bias, t, (size_t)k);
        if (act == CONV2D_RELU && v < 0)
            v = 0;
        y[o] = v;
    }
    free(xd);
    free(wd);
}
