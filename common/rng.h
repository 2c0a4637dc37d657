/* A seeded generator (splitmix64): the same seed gives the same inputs on every machine, so a
 * failure seen once can be replayed with --seed. */
#ifndef KL_RNG_H
#define KL_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rng {
    uint64_t state;
};

static inline struct rng rng_seeded(uint64_t seed)
{
    struct rng r = {seed};
    return r;
}

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi), from the top 53 bits. */
static inline double rng_uniform(struct rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0. */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    return (uint64_t)((double)(rng_next(r) >> 11) * 0x1.0p-53 * (double)n);
}

#ifdef __cplusplus
}
#endif
#endif
