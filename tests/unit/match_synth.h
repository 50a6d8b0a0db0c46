/*
 * match_synth.h - synthetic template sets for the src/match tests.
 *
 * A toy 2-column probe (channel c at x = 32 * (c % 2) um, y = 20 * (c / 2)
 * um), an orthonormal temporal basis made by Gram-Schmidt on shifted
 * Gaussians and their derivatives, and templates centred on given channels:
 * the support is the n_sup channels nearest the centre (distance, then index),
 * sorted ascending; weights U[i,p] decay with distance (Gaussian, 40 um) and
 * mix a per-template random temporal profile with a small per-channel term so
 * templates on the same channels still differ. Random numbers come from a
 * fixed 64-bit LCG, so every test is reproducible on every machine.
 */
#ifndef BS_TEST_MATCH_SYNTH_H
#define BS_TEST_MATCH_SYNTH_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "match/match.h"

typedef struct {
    uint64_t s;
} synth_rng;

static inline double synth_uniform(synth_rng *r)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return ((r->s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static inline double synth_normal(synth_rng *r)
{
    double u1 = synth_uniform(r), u2 = synth_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline void synth_chan_pos(int c, double *x, double *y)
{
    *x = 32.0 * (c % 2);
    *y = 20.0 * (c / 2);
}

/* P x nt orthonormal basis. */
static inline void synth_basis(int P, int nt, int nb, float *basis)
{
    double *b = calloc((size_t)P * nt, sizeof(double));
    for (int p = 0; p < P; p++) {
        double w = 2.5 + 1.2 * (p / 2);
        double c0 = nb + 2.0 * (p / 2);
        for (int s = 0; s < nt; s++) {
            double z = (s - c0) / w;
            double g = exp(-0.5 * z * z);
            b[p * nt + s] = (p % 2 == 0) ? g : -z * g;
        }
        for (int q = 0; q < p; q++) {
            double dot = 0;
            for (int s = 0; s < nt; s++)
                dot += b[p * nt + s] * b[q * nt + s];
            for (int s = 0; s < nt; s++)
                b[p * nt + s] -= dot * b[q * nt + s];
        }
        double n = 0;
        for (int s = 0; s < nt; s++)
            n += b[p * nt + s] * b[p * nt + s];
        for (int s = 0; s < nt; s++)
            b[p * nt + s] /= sqrt(n);
    }
    for (int i = 0; i < P * nt; i++)
        basis[i] = (float)b[i];
    free(b);
}

/* Support of a template centred on channel cc: n_sup nearest, ascending. */
static inline void synth_support(int C, int cc, int n_sup, int32_t *sup)
{
    double cx, cy;
    synth_chan_pos(cc, &cx, &cy);
    int *idx = malloc(sizeof(int) * (size_t)C);
    double *dist = malloc(sizeof(double) * (size_t)C);
    for (int c = 0; c < C; c++) {
        double x, y;
        synth_chan_pos(c, &x, &y);
        dist[c] = (x - cx) * (x - cx) + (y - cy) * (y - cy);
        idx[c] = c;
    }
    /* partial selection sort by (distance, index) */
    for (int i = 0; i < n_sup; i++) {
        int best = i;
        for (int j = i + 1; j < C; j++)
            if (dist[idx[j]] < dist[idx[best]] || (dist[idx[j]] == dist[idx[best]] && idx[j] < idx[best]))
                best = j;
        int tmp = idx[i];
        idx[i] = idx[best];
        idx[best] = tmp;
    }
    for (int i = 0; i < n_sup; i++)
        sup[i] = idx[i];
    for (int i = 1; i < n_sup; i++)
        for (int j = i; j > 0 && sup[j] < sup[j - 1]; j--) {
            int32_t tmp = sup[j];
            sup[j] = sup[j - 1];
            sup[j - 1] = tmp;
        }
    free(idx);
    free(dist);
}

/* Weights for K templates centred on centers[k]; U is K x n_sup x P. */
static inline void synth_weights(synth_rng *r, int K, int P, int n_sup, const int *centers, const int32_t *sup,
                                 float *U)
{
    for (int k = 0; k < K; k++) {
        double prof[64];
        for (int p = 0; p < P; p++)
            prof[p] = synth_normal(r) / (1.0 + p);
        prof[0] -= 3.0; /* a dominant trough component */
        double cx, cy;
        synth_chan_pos(centers[k], &cx, &cy);
        for (int i = 0; i < n_sup; i++) {
            double x, y;
            synth_chan_pos(sup[(size_t)k * n_sup + i], &x, &y);
            double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
            double g = exp(-d2 / (2 * 40.0 * 40.0));
            for (int p = 0; p < P; p++)
                U[((size_t)k * n_sup + i) * P + p] = (float)(g * (prof[p] + 0.3 * synth_normal(r)));
        }
    }
}

/* A template set of K templates on a C-channel probe. */
static inline bs_status synth_templates(uint64_t seed, int C, int K, int n_sup, int P, int nt, int nb,
                                        const int *centers, bs_match_templates *t)
{
    synth_rng r = {seed};
    float *basis = malloc(sizeof(float) * (size_t)P * nt);
    int32_t *sup = malloc(sizeof(int32_t) * (size_t)K * n_sup);
    float *U = malloc(sizeof(float) * (size_t)K * n_sup * P);
    synth_basis(P, nt, nb, basis);
    for (int k = 0; k < K; k++)
        synth_support(C, centers[k], n_sup, sup + (size_t)k * n_sup);
    synth_weights(&r, K, P, n_sup, centers, sup, U);
    bs_status st = bs_match_templates_create("synthetic templates", C, nt, nb, P, basis, K, n_sup, sup, U, t);
    free(basis);
    free(sup);
    free(U);
    return st;
}

/* Three templates of n_sup channels on a C-channel probe (C >= 40 + 2 n_sup),
 * the middle one too wide for a score window (two channel groups 40 apart),
 * so its scores go through the gather path; random weights (seed 8). */
static inline bs_status synth_wide_templates(int C, int n_sup, int P, int nt, int nb, bs_match_templates *t)
{
    float *basis = malloc(sizeof(float) * (size_t)P * nt), *U = malloc(sizeof(float) * 3 * (size_t)n_sup * P);
    int32_t *sup = malloc(sizeof(int32_t) * 3 * (size_t)n_sup);
    synth_basis(P, nt, nb, basis);
    synth_rng r = {8};
    for (int i = 0; i < 3 * n_sup * P; i++)
        U[i] = (float)synth_normal(&r);
    for (int i = 0; i < n_sup; i++) {
        sup[i] = i;
        sup[n_sup + i] = i < n_sup / 2 ? i : 40 + i;
        sup[2 * n_sup + i] = 30 + i;
    }
    bs_status st = bs_match_templates_create("wide", C, nt, nb, P, basis, 3, n_sup, sup, U, t);
    free(basis);
    free(U);
    free(sup);
    return st;
}

/* Add a * W_k at trough sample t (window-relative) into X (C x n_t). */
static inline void synth_add_spike(const bs_match_templates *t, float *X, int64_t n_t, int k, int64_t tt,
                                   float a)
{
    float *w = malloc(sizeof(float) * (size_t)t->n_sup * t->nt);
    bs_match_template_waveform(t, k, w);
    for (int i = 0; i < t->n_sup; i++) {
        int c = t->support[(size_t)k * t->n_sup + i];
        for (int s = 0; s < t->nt; s++) {
            int64_t u = tt - t->nt_before + s;
            if (u >= 0 && u < n_t)
                X[(size_t)c * n_t + u] += a * w[(size_t)i * t->nt + s];
        }
    }
    free(w);
}

#endif
