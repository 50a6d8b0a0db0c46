/*
 * sim_rng.c - sequential random streams for the simulator: xoshiro256**
 * (Blackman and Vigna) whose 256-bit state is filled by splitmix64 from the
 * stream key (seed, purpose, index), so every unit and every purpose has its
 * own independent stream and the draws never depend on the thread count or
 * on the order in which streams are used.
 */
#include <math.h>

#include "sim_internal.h"

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void bs_sim_rng_seed(bs_sim_rng *r, uint64_t seed, uint64_t purpose, uint64_t index)
{
    uint64_t k = bs_sim_key(seed, purpose, index);
    for (int i = 0; i < 4; i++) {
        k += 0x9e3779b97f4a7c15ULL;
        r->s[i] = bs_sim_mix64(k);
    }
    if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
        r->s[0] = 1;
}

uint64_t bs_sim_rng_next(bs_sim_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double bs_sim_rng_uniform(bs_sim_rng *r)
{
    return (double)(bs_sim_rng_next(r) >> 11) * 0x1.0p-53;
}

double bs_sim_rng_range(bs_sim_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * bs_sim_rng_uniform(r);
}

double bs_sim_rng_normal(bs_sim_rng *r)
{
    double u1 = 1.0 - bs_sim_rng_uniform(r); /* (0, 1] */
    double u2 = bs_sim_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double bs_sim_rng_exp(bs_sim_rng *r)
{
    return -log(1.0 - bs_sim_rng_uniform(r));
}
