/* What the programs of the convolution chapters (07 and on) share about their shapes: the
 * NxCxHxW-KkRsSpP form, read into chapter 07's conv2d_dims and checked with its
 * conv2d_dims_of; the tensors' element counts; and the NCHW <-> NHWC move their _nhwc passes
 * make outside the timed region. Host code of the rung tables (main.cu), not of the library. */
#ifndef CONV_PROGRAM_H
#define CONV_PROGRAM_H

#include <stdio.h>
#include <string.h>

#include "07-conv-forward/api.h"
#include "ladder.h"

/* The dims of a shape check_shape took: filter k (default 1), stride s (1), padding p (0). */
static inline struct conv2d_dims dims_of_shape(const struct shape *s)
{
    const int64_t r = shape_param(s, 'k', 1);
    struct conv2d_dims d;
    char why[200];
    if (conv2d_dims_of(s->dim[0], s->dim[1], s->dim[2], s->dim[3], s->lead, r, r,
                       shape_param(s, 's', 1), shape_param(s, 'p', 0), &d, why, sizeof why))
        d.p = d.q = 0; /* check_shape refused such shapes first */
    return d;
}

/* 0, or -1 with a one-line reason: the form, the window letters, then conv2d_dims_of. */
static inline int check_shape(const struct shape *s, char *why, size_t why_len)
{
    if (s->ndims != 4 || !s->has_lead) {
        snprintf(why, why_len, "convolution takes NxCxHxW-KkRsSpP (2x4x64x64-8k3s1p1)%s",
                 s->ndims != 4 ? ", with four dimensions" : ": K, the filters, is missing");
        return -1;
    }
    for (int i = 0; i < s->nparams; i++)
        if (s->param_name[i] != 'k' && s->param_name[i] != 's' && s->param_name[i] != 'p') {
            snprintf(why, why_len, "window parameter '%c' is not k (filter size), s (stride) or "
                     "p (padding)", s->param_name[i]);
            return -1;
        }
    const int64_t r = shape_param(s, 'k', 1);
    struct conv2d_dims d;
    return conv2d_dims_of(s->dim[0], s->dim[1], s->dim[2], s->dim[3], s->lead, r, r,
                          shape_param(s, 's', 1), shape_param(s, 'p', 0), &d, why, why_len);
}

static inline size_t count_x(struct conv2d_dims d) { return (size_t)(d.n * d.c * d.h * d.w); }
static inline size_t count_w(struct conv2d_dims d) { return (size_t)(d.k * d.c * d.r * d.s); }
static inline size_t count_y(struct conv2d_dims d) { return (size_t)(d.n * d.k * d.p * d.q); }

/* Element (a, b, c, d) of an A x B x C x D tensor, moved to (a, c, d, b): NCHW -> NHWC, KCRS ->
 * KRSC; `back` undoes it. */
static inline void permute_channels_last(const void *from, void *to, size_t es, int64_t a,
                                         int64_t b, int64_t c, int64_t dd, int back)
{
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++)
            for (int64_t k = 0; k < c * dd; k++) {
                const size_t first = (size_t)((i * b + j) * c * dd + k);
                const size_t last = (size_t)((i * c * dd + k) * b + j);
                memcpy((char *)to + (back ? first : last) * es,
                       (const char *)from + (back ? last : first) * es, es);
            }
}

#endif
