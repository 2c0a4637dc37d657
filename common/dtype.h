/* Element types, and fp16 on the host.
 *
 * Every operation runs in fp32 and in fp16 (fp16 storage, fp32 accumulation). The host keeps
 * fp16 values as their 16 raw bits; the conversions below round to nearest even, as the GPU's
 * __float2half does, so the CPU reference sees exactly the values the GPU reads. */
#ifndef KL_DTYPE_H
#define KL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum dtype { DT_FP32, DT_FP16, DT_I32, DT_U8 };
#define DT_FLOATS ((1u << DT_FP32) | (1u << DT_FP16))

size_t dtype_size(enum dtype t);
const char *dtype_name(enum dtype t);

uint16_t half_from_float(float f);
float half_to_float(uint16_t h);

/* All 65536 halves as floats, filled at program start: the reference reads fp16 through it. */
extern const float *half_table;

/* Element i of a host buffer holding type t, as a double. */
static inline double load_as_double(const void *buf, enum dtype t, size_t i)
{
    switch (t) {
    case DT_FP32: return ((const float *)buf)[i];
    case DT_FP16: return half_table[((const uint16_t *)buf)[i]];
    case DT_I32: return ((const int32_t *)buf)[i];
    case DT_U8: return ((const uint8_t *)buf)[i];
    }
    return 0.0;
}

/* Stores v into element i, rounded to type t. */
void store_from_double(void *buf, enum dtype t, size_t i, double v);

#ifdef __cplusplus
}
#endif
#endif
