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

int maxpool_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                    int64_t s, int64_t p, struct maxpool_dims *d, char *why, size_t why_len)
{
    if (n < 1 || c < 1 || h < 1 || w < 1) {
        snprintf(why, why_len, "N, C, H and W must each be at least 1");
        return -1;
    }
    if (kh < 1 || kw < 1) {
        snprintf(why, why_len, "the window must be at least 1x1 (k = %lld)", (long long)kh);
        return -1;
    }
    if (s < 1) {
        snprintf(why, why_len, "the stride must be at least 1 (s = %lld)", (long long)s);
        return -1;
    }
    if (p < 0 || p >= kh || p >= kw) {
        snprintf(why, why_len,
                 "padding must be below the window (p = %lld, window %lldx%lld): a window of "
                 "padding alone has no maximum",
                 (long long)p, (long long)kh, (long long)kw);
        return -1;
    }
    if (kh > h + 2 * p || kw > w + 2 * p) {
        snprintf(why, why_len, "the %lldx%lld window is larger than the padded %lldx%lld input",
                 (long long)kh, (long long)kw, (long long)(h + 2 * p), (long long)(w + 2 * p));
        return -1;
    }
    if (kh * kw > MAXPOOL_MAX_WINDOW) {
        snprintf(why, why_len, "windows of at most %d positions (%lldx%lld has %lld)",
                 MAXPOOL_MAX_WINDOW, (long long)kh, (long long)kw, (long long)(kh * kw));
        return -1;
    }
    if (h * w > INT32_MAX) {
        snprintf(why, why_len, "an H x W plane of at most 2^31 - 1 elements (int32 indices)");
        return -1;
    }
    d->n = n, d->c = c, d->h = h, d->w = w;
    d->kh = kh, d->kw = kw, d->s = s, d->p = p;
    d->oh = (h + 2 * p - kh) / s + 1;
    d->ow = (w + 2 * p - kw) / s + 1;
    d->argmax_bits = maxpool_argmax_bits(kh * kw);
    return 0;
}

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
