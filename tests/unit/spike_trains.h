/*
 * spike_trains.h - a refractory Poisson spike train for the cluster tests:
 * starting at 10 ms, each interval is dead_ms plus an exponential draw of
 * mean 1/rate_hz (from the project's seeded bs_rng), until `seconds`; times
 * in samples at 30 kHz, ascending. Returns the number of spikes written to t.
 */
#ifndef BS_TEST_SPIKE_TRAINS_H
#define BS_TEST_SPIKE_TRAINS_H

#include <math.h>
#include <stdint.h>

#include "common/rng.h"

static inline int64_t refractory_train(bs_rng *r, double rate_hz, double seconds, double dead_ms, int64_t *t)
{
    int64_t n = 0;
    double time = 0.01;
    for (;;) {
        time += dead_ms / 1000.0 - log(1.0 - bs_rng_uniform(r)) / rate_hz;
        if (time >= seconds)
            return n;
        t[n++] = (int64_t)(time * 30000.0);
    }
}

#endif
