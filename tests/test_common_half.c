/* Host fp16 conversion against values worked out by hand from the IEEE binary16 format. */
#include <criterion/criterion.h>
#include <math.h>

#include "dtype.h"

Test(half, exact_values_round_trip)
{
    const struct { float f; uint16_t h; } known[] = {
        {0.0f, 0x0000},    {-0.0f, 0x8000}, {1.0f, 0x3c00},           {-2.0f, 0xc000},
        {0.5f, 0x3800},    {65504.0f, 0x7bff}, {0x1p-14f, 0x0400},    {0x1p-24f, 0x0001},
        {0x1.ff8p-15f, 0x03ff}, {1.0009765625f, 0x3c01}, {-3.140625f, 0xc248},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        cr_expect_eq(half_from_float(known[i].f), known[i].h, "half(%a) = 0x%04x, want 0x%04x",
                     (double)known[i].f, half_from_float(known[i].f), known[i].h);
        cr_expect_eq(half_to_float(known[i].h), known[i].f, "float(0x%04x)", known[i].h);
    }
}

Test(half, rounds_to_nearest_even)
{
    /* 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1). */
    cr_expect_eq(half_from_float(1.0f + 0x1p-11f), 0x3c00);
    /* 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9. */
    cr_expect_eq(half_from_float(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_expect_eq(half_from_float(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* just above half */
    cr_expect_eq(half_from_float(0x1p-25f), 0x0000);                    /* tie to even zero */
    cr_expect_eq(half_from_float(0x1.8p-25f), 0x0001);
}

Test(half, overflow_infinity_and_nan)
{
    cr_expect_eq(half_from_float(65519.0f), 0x7bff);
    cr_expect_eq(half_from_float(65520.0f), 0x7c00);
    cr_expect_eq(half_from_float(-1e9f), 0xfc00);
    cr_expect_eq(half_from_float(INFINITY), 0x7c00);
    uint16_t nan = half_from_float(NAN);
    cr_expect((nan & 0x7c00) == 0x7c00 && (nan & 0x03ff), "NaN must stay NaN: 0x%04x", nan);
    cr_expect(isnan(half_to_float(0x7e00)));
    cr_expect(isinf(half_to_float(0xfc00)) && half_to_float(0xfc00) < 0);
}

Test(half, every_half_survives_the_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = half_to_float((uint16_t)h);
        if (isnan(f))
            continue;
        cr_assert_eq(half_from_float(f), h, "0x%04x -> %a -> 0x%04x", h, (double)f,
                     half_from_float(f));
        cr_assert_eq(half_table[h], f);
    }
}
