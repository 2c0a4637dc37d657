/* Chapter 01's entry points (api.h): each picks a rung by size and dtype.
 *
 * The rules come from the sweep, bench/results/h200/01-relu.csv (the H200, graph replay, cold
 * L2). Up to 2^18 elements a launch is a few microseconds whatever the kernel, and v1, with
 * the least set-up a thread, is fastest or within 3% (v5_one_shot is 2-8% behind it from 2^10
 * to 2^16 elements). From 2^20 on v5 wins, by 6-10% at 2^28, except in the fp16 backward,
 * where v3's grid-stride loop stays ahead up to 2^22 (7% at 2^20, 1% at 2^22) and v5 leads
 * from 2^24. */
#include "api.h"
#include "relu.h"

#define SMALL ((size_t)1 << 18)
#define FP16_BACKWARD_V3_UP_TO ((size_t)1 << 22)

extern "C" void relu_forward(const void *x, void *y, struct relu_dims d, enum dtype t,
                             cudaStream_t s)
{
    if (d.n <= SMALL)
        relu_forward_v1(x, y, d.n, t, s);
    else
        relu_forward_v5(x, y, d.n, t, s);
}

extern "C" void relu_backward(const void *x, const void *dy, void *dx, struct relu_dims d,
                              enum dtype t, cudaStream_t s)
{
    if (d.n <= SMALL)
        relu_backward_v1(x, dy, dx, d.n, t, s);
    else if (t == DT_FP16 && d.n <= FP16_BACKWARD_V3_UP_TO)
        relu_backward_v3(x, dy, dx, d.n, t, s);
    else
        relu_backward_v5(x, dy, dx, d.n, t, s);
}
