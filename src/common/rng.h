/*
 * rng.h - a small deterministic random number generator (splitmix64).
 *
 * For seeded choices inside the sorter (k-means++ initialisation, subsets):
 * the same seed gives the same sequence on every platform. Not for
 * cryptography.
 */
#ifndef BS_RNG_H
#define BS_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} bs_rng;

static inline void bs_rng_seed(bs_rng *r, uint64_t seed) { r->state = seed ^ 0x9E3779B97F4A7C15ULL; }

static inline uint64_t bs_rng_next(bs_rng *r)
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double bs_rng_uniform(bs_rng *r) { return (double)(bs_rng_next(r) >> 11) * 0x1.0p-53; }

/* Standard normal (Box–Muller, one value per two uniforms). */
static inline double bs_rng_normal(bs_rng *r)
{
    double u = bs_rng_uniform(r), v = bs_rng_uniform(r);
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

#endif
