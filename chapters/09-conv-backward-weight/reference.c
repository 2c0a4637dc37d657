/* The CPU reference for the convolution's weight gradient: products and sums in double from
 * the very inputs the GPU read, one element of dw at a time, each the correlation of one
 * channel of x with one filter's dy over every image (api.h's formula); db sums dy. */
#include <stdlib.h>

#include "wgrad.h"
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

/* The outputs [*first, *end) along one axis whose tap r lands on x (0 <= p stride + r - pad <
 * size): the others read the padding, which is 0. */
static void outputs_on_x(int64_t r, int64_t stride, int64_t pad, int64_t size, int64_t count,
                         int64_t *first, int64_t *end)
{
    const int64_t below = pad - r, above = size - 1 + pad - r;
    *first = below <= 0 ? 0 : (below + stride - 1) / stride;
    *end = above < 0 ? 0 : above / stride + 1;
    if (*end > count)
        *end = count;
}

/* dw[k, c, r, s]: the sum over the images and the outputs whose tap (r, s) lies on x. */
static double one_weight(const double *x, const double *dy, struct conv2d_dims d, int64_t k,
                         int64_t c, int64_t r, int64_t s)
{
    int64_t p0, p1, q0, q1;
    outputs_on_x(r, d.stride, d.pad, d.h, d.p, &p0, &p1);
    outputs_on_x(s, d.stride, d.pad, d.w, d.q, &q0, &q1);
    double sum = 0;
    for (int64_t n = 0; n < d.n; n++) {
        const double *plane = x + (n * d.c + c) * d.h * d.w;
        const double *grad = dy + (n * d.k + k) * d.p * d.q;
        for (int64_t p = p0; p < p1; p++) {
            const int64_t h = p * d.stride + r - d.pad;
            for (int64_t q = q0; q < q1; q++)
                sum += grad[p * d.q + q] * plane[h * d.w + q * d.stride + s - d.pad];
        }
    }
    return sum;
}

static void bias_sums(const double *dy, struct conv2d_dims d, double *db)
{
    const int64_t pq = d.p * d.q;
    for (int64_t k = 0; k < d.k; k++) {
        double sum = 0;
        for (int64_t n = 0; n < d.n; n++)
            for (int64_t i = 0; i < pq; i++)
                sum += dy[(n * d.k + k) * pq + i];
        db[k] = sum;
    }
}

void wgrad_reference(const void *x, const void *dy, enum dtype t, struct conv2d_dims d,
                     int64_t every, double *dw, double *db)
{
    double *xd = as_doubles(x, t, (size_t)(d.n * d.c * d.h * d.w));
    double *dyd = as_doubles(dy, t, (size_t)(d.n * d.k * d.p * d.q));
    const int64_t weights = d.k * d.c * d.r * d.s;
    if (every < 1)
        every = 1;
    for (int64_t i = 0; i < weights; i += every) {
        const int64_t s = i % d.s, r = i / d.s % d.r, c = i / (d.s * d.r) % d.c;
        dw[i] = one_weight(xd, dyd, d, i / (d.s * d.r * d.c), c, r, s);
    }
    if (db)
        bias_sums(dyd, d, db);
    free(xd);
    free(dyd);
}
