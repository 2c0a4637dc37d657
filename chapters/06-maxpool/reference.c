/* The CPU reference for max pooling, in double, reading the very values the GPU reads.
 *
 * A window's argmax is its first maximum in row-major order, over the positions inside x
 * (padding never wins); a NaN beats every number, and the first NaN wins among NaNs, so NaN
 * propagates to y and its gradient goes to where the NaN was. The backward scatters dy through
 * the plane indices in output order: a position chosen by several overlapping windows receives
 * the sum of their dy. */
#include <math.h>
#include <stdio.h>

#include "maxpool.h"

/* Whether v takes the place of the best so far: larger, or the first NaN. */
static int beats(double v, double best)
{
    return v > best || (isnan(v) && !isnan(best));
}

void maxpool_forward_reference(const void *x, enum dtype t, struct maxpool_dims d, double *y,
                               int32_t *plane_idx, uint8_t *window_idx)
{
    size_t o = 0;
    for (int64_t plane = 0; plane < d.n * d.c; plane++) {
        const size_t base = (size_t)(plane * d.h * d.w);
        for (int64_t i = 0; i < d.oh; i++)
            for (int64_t j = 0; j < d.ow; j++, o++) {
                const int64_t h0 = i * d.s - d.p, w0 = j * d.s - d.p;
                double best = 0;
                int64_t at = -1, window_at = -1;
                for (int64_t r = 0; r < d.kh; r++)
                    for (int64_t q = 0; q < d.kw; q++) {
                        const int64_t hh = h0 + r, ww = w0 + q;
                        if (hh < 0 || hh >= d.h || ww < 0 || ww >= d.w)
                            continue;
                        const double v = load_as_double(x, t, base + (size_t)(hh * d.w + ww));
                        if (at < 0 || beats(v, best)) {
                            best = v;
                            at = hh * d.w + ww;
                            window_at = r * d.kw + q;
                        }
                    }
                y[o] = best;
                if (plane_idx)
                    plane_idx[o] = (int32_t)at;
                if (window_idx)
                    window_idx[o] = (uint8_t)window_at;
            }
    }
}

void maxpool_pack_argmax(const uint8_t *window_idx, struct maxpool_dims d, uint8_t *packed)
{
    const int64_t outputs = d.n * d.c * d.oh * d.ow, per_byte = 8 / d.argmax_bits;
    for (int64_t b = 0; b < maxpool_argmax_bytes(d); b++)
        packed[b] = 0;
    for (int64_t o = 0; o < outputs; o++)
        packed[o / per_byte] |= (uint8_t)(window_idx[o] << (o % per_byte * d.argmax_bits));
}

void maxpool_backward_reference(const double *dy, const int32_t *plane_idx,
                                struct maxpool_dims d, double *dx)
{
    const size_t plane_in = (size_t)(d.h * d.w), plane_out = (size_t)(d.oh * d.ow);
    for (size_t e = 0; e < (size_t)(d.n * d.c) * plane_in; e++)
        dx[e] = 0;
    for (size_t plane = 0; plane < (size_t)(d.n * d.c); plane++)
        for (size_t o = 0; o < plane_out; o++)
            dx[plane * plane_in + (size_t)plane_idx[plane * plane_out + o]] +=
                dy[plane * plane_out + o];
}
