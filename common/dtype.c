#include "dtype.h"

#include <string.h>

size_t dtype_size(enum dtype t)
{
    return t == DT_U8 ? 1 : t == DT_FP16 ? 2 : 4;
}

const char *dtype_name(enum dtype t)
{
    switch (t) {
    case DT_FP32: return "fp32";
    case DT_FP16: return "fp16";
    case DT_I32: return "i32";
    case DT_U8: return "u8";
    }
    return "?";
}

/* IEEE binary32 -> binary16, round to nearest even, with subnormals, infinities and NaN. */
uint16_t half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t mag = x & 0x7fffffffu;

    if (mag >= 0x7f800000u) /* inf or NaN; keep NaN quiet and non-zero */
        return (uint16_t)(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u | ((mag >> 13) & 0x3ffu) : 0));
    if (mag >= 0x477ff000u) /* rounds to a value >= 65520: overflow to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (mag < 0x38800000u) { /* below the smallest normal half: a subnormal or zero */
        if (mag < 0x33000000u) /* below half the smallest subnormal: rounds to zero */
            return sign;
        uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(mag >> 23); /* 14..24 */
        uint32_t half = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((mag - 0x38000000u) >> 13); /* rebias exponent 127 -> 15 */
    uint32_t rest = mag & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++; /* a carry into the exponent is still the right answer */
    return (uint16_t)(sign | half);
}

float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        x = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        x = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do { mant <<= 1; e++; } while (!(mant & 0x400u));
        x = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static float half_values[65536];
const float *half_table = half_values;

__attribute__((constructor)) static void fill_half_table(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        half_values[h] = half_to_float((uint16_t)h);
}

void store_from_double(void *buf, enum dtype t, size_t i, double v)
{
    switch (t) {
    case DT_FP32: ((float *)buf)[i] = (float)v; break;
    case DT_FP16: ((uint16_t *)buf)[i] = half_from_float((float)v); break;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}
