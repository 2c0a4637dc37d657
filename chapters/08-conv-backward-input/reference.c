/* The CPU reference for the convolution's input gradient: products and sums in double from
 * the very inputs the GPU read, one element of dx at a time, gathering from api.h's formula the
 * outputs whose window covered it. */
#include <stdlib.h>

#include "dgrad.h"
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

/* Where tap r of some output window lands on input row h: the output p with
 * p stride + r - pad = h, or -1 where there is none. */
static int64_t output_under(int64_t h, int64_t r, int64_t stride, int64_t pad, int64_t p_count)
{
    const int64_t at = h + pad - r;
    if (at < 0 || at % stride)
        return -1;
    return at / stride < p_count ? at / stride : -1;
}

/* dx[n, c, h, w]: the sum over the filters and the taps that put (h, w) under a window. */
static double one_input(const double *dy, const double *w, struct conv2d_dims d, int64_t n,
                        int64_t c, int64_t h, int64_t col)
{
    double sum = 0;
    for (int64_t k = 0; k < d.k; k++)
        for (int64_t r = 0; r < d.r; r++) {
            const int64_t p = output_under(h, r, d.stride, d.pad, d.p);
            if (p < 0)
                continue;
            for (int64_t s = 0; s < d.s; s++) {
                const int64_t q = output_under(col, s, d.stride, d.pad, d.q);
                if (q >= 0)
                    sum += dy[((n * d.k + k) * d.p + p) * d.q + q] *
                           w[((k * d.c + c) * d.r + r) * d.s + s];
            }
        }
    return sum;
}

void dgrad_reference(const void *dy, const void *w, enum dtype t, struct conv2d_dims d,
                     int64_t every, double *dx)
{
    double *dyd = as_doubles(dy, t, (size_t)(d.n * d.k * d.p * d.q));
    double *wd = as_doubles(w, t, (size_t)(d.k * d.c * d.r * d.s));
    const int64_t inputs = d.n * d.c * d.h * d.w;
    if (every < 1)
        every = 1;
    for (int64_t i = 0; i < inputs; i += every) {
        const int64_t col = i % d.w, h = i / d.w % d.h, c = i / (d.w * d.h) % d.c;
        dx[i] = one_input(dyd, wd, d, i / (d.w * d.h * d.c), c, h, col);
    }
    free(dyd);
    free(wd);
}
