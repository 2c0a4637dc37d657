#include <criterion/criterion.h>

#include "rng.h"
#include "stats.h"

Test(stats, odd_count)
{
    double x[] = {5, 1, 4, 2, 3};
    struct summary s = summarize(x, 5);
    cr_expect_eq(s.median, 3);
    cr_expect_eq(s.min, 1);
    cr_expect_eq(s.max, 5);
    cr_expect_eq(x[0], 5, "the samples must be left in their order");
}

Test(stats, even_count_and_single)
{
    double x[] = {10, 2, 8, 4};
    struct summary s = summarize(x, 4);
    cr_expect_eq(s.median, 6);
    cr_expect_eq(s.min, 2);
    cr_expect_eq(s.max, 10);
    double one = 7.5;
    s = summarize(&one, 1);
    cr_expect(s.median == 7.5 && s.min == 7.5 && s.max == 7.5);
}

Test(rng, same_seed_same_stream)
{
    struct rng a = rng_seeded(42), b = rng_seeded(42), c = rng_seeded(43);
    int differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = rng_next(&a);
        cr_assert_eq(x, rng_next(&b));
        differs |= x != rng_next(&c);
    }
    cr_expect(differs, "seeds 42 and 43 gave the same stream");
}

Test(rng, uniform_stays_in_range_and_spreads)
{
    struct rng r = rng_seeded(7);
    double lo = 1, hi = -1, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double v = rng_uniform(&r, -4, 4);
        cr_assert(v >= -4 && v < 4);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    cr_expect(lo < -3.99 && hi > 3.99, "range [%g, %g]", lo, hi);
    cr_expect(sum / 100000 > -0.05 && sum / 100000 < 0.05, "mean %g", sum / 100000);
    for (int i = 0; i < 1000; i++)
        cr_assert(rng_below(&r, 10) < 10);
}
