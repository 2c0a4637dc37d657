/* Chapter 06's entry points (api.h): a rung by window, stride and size.
 *
 * The rules come from the sweep, bench/results/h200/06-maxpool.csv (the H200, graph replay,
 * cold L2):
 * - 3x3 windows at stride 1 or 2: v4's windows unrolled over registers, forward (2.1-2.6x the
 *   next rung) and backward; except the fp32 backward at stride 2, where v1's atomics are as
 *   fast or faster (8x64x128x128-k3s2p1: v4 1.12x; 32x64x112x112-k3s2p1: v1 1.008x v4's time);
 * - other windows, forward: v2's rows of outputs where its 2x2 stride-2 path applies (v3's and
 *   v4's forward are v2's there), else v1, whose thread per output beats v2's general kernel
 *   (8x64x127x129-k2s2p0: v2 1.050x v1's time in fp16, 1.035x in fp32; 3x3 stride 2 goes to v4);
 * - other windows, backward: v3's gathers, but v1 where H or W is odd (8x64x127x129: v3
 *   1.15x in fp16, 1.56x in fp32), and v1 for fp32 tensors of 2^20 to 2^22 elements, where its
 *   atomics meet few collisions and v3's grid is small (8x64x56x56: v3 1.10x; at 1x64x56x56
 *   and 32x64x112x112 v3 leads by 1.47x and 1.37x). */
#include <stdio.h>

#include "api.h"
#include "maxpool.cuh"

#define V1_FP32_FROM ((int64_t)1 << 20)
#define V1_FP32_UP_TO ((int64_t)1 << 22)

extern "C" int maxpool_dims_of(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh,
                               int64_t kw, int64_t s, int64_t p, struct maxpool_dims *d,
                               char *why, size_t why_len)
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
    /* Each side first: k and p may each be near 2^48, and k * k past 2^63. */
    if (kh > MAXPOOL_MAX_WINDOW || kw > MAXPOOL_MAX_WINDOW || kh * kw > MAXPOOL_MAX_WINDOW) {
        snprintf(why, why_len, "windows of at most %d positions (%lldx%lld has %.0f)",
                 MAXPOOL_MAX_WINDOW, (long long)kh, (long long)kw, (double)kh * (double)kw);
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

static bool unrolled_3x3(struct maxpool_dims d)
{
    return d.kh == 3 && d.kw == 3 && (d.s == 1 || d.s == 2);
}

extern "C" void maxpool_forward(const void *x, void *y, uint8_t *argmax, struct maxpool_dims d,
                                enum dtype t, cudaStream_t s)
{
    if (unrolled_3x3(d))
        maxpool_forward_v4(x, y, argmax, d, t, s);
    else if (maxpool_2x2_path(d, 4, dtype_size(t), x, y))
        maxpool_forward_v2(x, y, argmax, d, t, s);
    else
        maxpool_forward_v1(x, y, argmax, d, t, s);
}

extern "C" void maxpool_backward(const void *dy, const uint8_t *argmax, void *dx,
                                 struct maxpool_dims d, enum dtype t, cudaStream_t s)
{
    const int64_t elements = d.n * d.c * d.h * d.w;
    const bool odd = d.h % 2 || d.w % 2;
    if (unrolled_3x3(d) && !(t == DT_FP32 && d.s == 2))
        maxpool_backward_v4(dy, argmax, dx, d, t, s);
    else if (unrolled_3x3(d) || odd ||
             (t == DT_FP32 && elements >= V1_FP32_FROM && elements <= V1_FP32_UP_TO))
        maxpool_backward_v1(dy, argmax, dx, d, t, s);
    else
        maxpool_backward_v3(dy, argmax, dx, d, t, s);
}
