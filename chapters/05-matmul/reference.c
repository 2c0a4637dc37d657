/* The CPU reference for C = op(A) op(B): products and sums in double from the very inputs the GPU
 * read. A stored operand is converted to doubles in the layout of A B (A as m x k, B as k x n),
 * transposing it on the way for A^T B (A stored k x m) and A B^T (B stored n x k); then loops
 * run i, k, j so that B and C are walked along their rows. */
#include <stdbool.h>
#include <stdlib.h>

#include "matmul.h"
#include "verify.h"

/* A stored rows x cols matrix as doubles, rows x cols as stored, or transposed (cols x rows):
 * one conversion per element instead of one per use. */
static double *as_doubles(const void *x, enum dtype t, size_t rows, size_t cols, bool transpose)
{
    double *d = host_alloc(rows * cols * sizeof *d);
    if (!d)
        abort(); /* problem_alloc_host already found room for far more */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            d[transpose ? c * rows + r : r * cols + c] = load_as_double(x, t, r * cols + c);
    return d;
}

/* op(A) as m x k doubles: A is stored k x m for A^T B. */
static double *a_of(enum matmul_form form, const void *a, enum dtype t, struct matmul_dims d)
{
    return form == MATMUL_ATB ? as_doubles(a, t, (size_t)d.k, (size_t)d.m, true)
                              : as_doubles(a, t, (size_t)d.m, (size_t)d.k, false);
}

/* op(B) as k x n doubles: B is stored n x k for A B^T. */
static double *b_of(enum matmul_form form, const void *b, enum dtype t, struct matmul_dims d)
{
    return form == MATMUL_ABT ? as_doubles(b, t, (size_t)d.n, (size_t)d.k, true)
                              : as_doubles(b, t, (size_t)d.k, (size_t)d.n, false);
}

/* Row i of C, all N columns, into row (N doubles). */
static void full_row(const double *a, const double *b, struct matmul_dims d, size_t i,
                     double *row)
{
    const size_t n = (size_t)d.n, k = (size_t)d.k;
    for (size_t j = 0; j < n; j++)
        row[j] = 0;
    for (size_t p = 0; p < k; p++) {
        const double aip = a[i * k + p];
        const double *bp = b + p * n;
        for (size_t j = 0; j < n; j++)
            row[j] += aip * bp[j];
    }
}

void matmul_reference_form(enum matmul_form form, const void *a, const void *b, enum dtype t,
                           struct matmul_dims d, double *c)
{
    const size_t m = (size_t)d.m, n = (size_t)d.n;
    double *ad = a_of(form, a, t, d), *bd = b_of(form, b, t, d);
    for (size_t i = 0; i < m; i++)
        full_row(ad, bd, d, i, c + i * n);
    free(ad);
    free(bd);
}

void matmul_reference(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                      double *c)
{
    matmul_reference_form(MATMUL_AB, a, b, t, d, c);
}

/* Index s of `count` spread over [0, len): 0 and len - 1 always among them. */
static size_t spread(int s, int count, size_t len)
{
    return count <= 1 ? 0 : (size_t)((double)s * (double)(len - 1) / (double)(count - 1) + 0.5);
}

void matmul_reference_form_sampled(enum matmul_form form, const void *a, const void *b,
                                   enum dtype t, struct matmul_dims d, int rows, int cols,
                                   double *c)
{
    const size_t m = (size_t)d.m, n = (size_t)d.n, k = (size_t)d.k;
    const double skip = verify_unchecked();
    for (size_t i = 0; i < m * n; i++)
        c[i] = skip;
    double *ad = a_of(form, a, t, d), *bd = b_of(form, b, t, d);
    double *bcols = malloc((size_t)cols * k * sizeof *bcols);
    size_t *col_index = malloc((size_t)cols * sizeof *col_index);
    if (!bcols || !col_index)
        abort();
    for (int r = 0; r < rows; r++) {
        const size_t i = spread(r, rows, m);
        full_row(ad, bd, d, i, c + i * n);
    }
    /* The sampled columns of B side by side, so that each row of A meets them in one sweep. */
    for (int s = 0; s < cols; s++)
        col_index[s] = spread(s, cols, n);
    for (size_t p = 0; p < k; p++)
        for (int s = 0; s < cols; s++)
            bcols[p * (size_t)cols + (size_t)s] = bd[p * n + col_index[s]];
    double *acc = malloc((size_t)cols * sizeof *acc);
    if (!acc)
        abort();
    for (size_t i = 0; i < m; i++) {
        for (int s = 0; s < cols; s++)
            acc[s] = 0;
        for (size_t p = 0; p < k; p++) {
            const double aip = ad[i * k + p];
            const double *bp = bcols + p * (size_t)cols;
            for (int s = 0; s < cols; s++)
                acc[s] += aip * bp[s];
        }
        for (int s = 0; s < cols; s++)
            c[i * n + col_index[s]] = acc[s];
    }
    free(acc);
    free(col_index);
    free(bcols);
    free(ad);
    free(bd);
}

void matmul_reference_sampled(const void *a, const void *b, enum dtype t, struct matmul_dims d,
                              int rows, int cols, double *c)
{
    matmul_reference_form_sampled(MATMUL_AB, a, b, t, d, rows, cols, c);
}
