#!/usr/bin/python3
"""Fixtures for tests/unit/test_highpass.c and test_whiten.c.

Run with Debian's python3 (numpy + scipy): /usr/bin/python3 make_fixtures.py
(writes next to this script). SciPy version used: see fixtures_versions.txt.

hp_cases.npy   float64 (n, 3): order, cutoff Hz, fs Hz
hp_sos.npy     float64 (n, 4, 6): scipy.signal.butter(order, cutoff, 'highpass', fs=fs, output='sos'), zero-padded
hp_zi.npy      float64 (n, 4, 2): scipy.signal.sosfilt_zi(sos), zero-padded
hp_padlen.npy  int64 (n,): sosfiltfilt's default padlen
hp_x.npy       float32 (4, 3000): input, µV (white noise 100 µV RMS + slow sine + offset)
hp_y.npy       float64 (4, 3000): sosfiltfilt(butter(3, 300, fs=30000), hp_x as float64)
hp_xs.npy / hp_ys.npy: the same for a 13-sample window (just above padlen 12)
wh_pos.npy     float64 (C, 3): x µm, y µm, shank id of a 2-shank, 2-column probe
wh_cov.npy     float64 (C, C): covariance, µV^2
wh_W.npy       float64 (C, C): local ZCA, 8 neighbours, eps 1e-6, same shank only
wh_Winv.npy    float64 (C, C): inverse of wh_W
wh_nbr.npy     int32 (C, 8): neighbours of each channel, nearest first (ties by index, itself first)
"""
import os
import numpy as np
import scipy
from scipy import signal

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261122)


def save(name, a):
    np.save(os.path.join(here, name), a)


# ---------------------------------------------------------------- high-pass
cases = [(3, 300, 30000), (3, 300, 25000), (3, 300, 32000), (3, 300, 1000), (1, 300, 30000),
         (2, 150, 20000), (4, 300, 30000), (5, 1000, 30000), (6, 3000, 10000), (3, 9000, 20000),
         (7, 500, 30000), (8, 4000, 30000)]
sos_all = np.zeros((len(cases), 4, 6))
zi_all = np.zeros((len(cases), 4, 2))
padlen = np.zeros(len(cases), dtype=np.int64)
for i, (o, fc, fs) in enumerate(cases):
    sos = signal.butter(o, fc, btype='highpass', fs=fs, output='sos')
    sos_all[i, :len(sos)] = sos
    zi_all[i, :len(sos)] = signal.sosfilt_zi(sos)
    padlen[i] = 3 * (2 * len(sos) + 1 - min((sos[:, 2] == 0).sum(), (sos[:, 5] == 0).sum()))
save('hp_cases.npy', np.array(cases, dtype=np.float64))
save('hp_sos.npy', sos_all)
save('hp_zi.npy', zi_all)
save('hp_padlen.npy', padlen)

sos = signal.butter(3, 300, btype='highpass', fs=30000, output='sos')
t = np.arange(3000) / 30000.0
x = rng.normal(0, 100, (4, 3000)) + 300 * np.sin(2 * np.pi * 7 * t + np.arange(4)[:, None]) + \
    np.array([50, -200, 0, 1000])[:, None]
x = x.astype(np.float32)
save('hp_x.npy', x)
save('hp_y.npy', signal.sosfiltfilt(sos, x.astype(np.float64), axis=1))
xs = (rng.normal(0, 100, (2, 13)) + 500).astype(np.float32)
save('hp_xs.npy', xs)
save('hp_ys.npy', signal.sosfiltfilt(sos, xs.astype(np.float64), axis=1))

# ---------------------------------------------------------------- whitening
pos = []
for r in range(10):          # shank 0: 2 columns x 10 rows, 20 µm pitch
    for col in range(2):
        pos.append((32.0 * col, 20.0 * r, 0))
for r in range(4):           # shank 1: interleaved positions (nearer than shank 0's own neighbours)
    for col in range(2):
        pos.append((16.0 + 32.0 * col, 20.0 * r + 10.0, 1))
pos = np.array(pos, dtype=np.float64)
C = len(pos)
d = np.sqrt(((pos[:, None, :2] - pos[None, :, :2]) ** 2).sum(-1))
A = rng.normal(0, 1, (C, 3 * C))
cov = 400.0 * np.exp(-d / 40.0) + 30.0 * (A @ A.T) / A.shape[1] + 50.0 * np.eye(C)
cov = (cov + cov.T) / 2
k, eps = 8, 1e-6
W = np.zeros((C, C))
nbr = np.zeros((C, k), dtype=np.int32)
for j in range(C):
    same = np.flatnonzero(pos[:, 2] == pos[j, 2])
    d2 = ((pos[same, :2] - pos[j, :2]) ** 2).sum(1)
    d2[same == j] = -1.0
    order = same[np.lexsort((same, d2))]
    ix = order[:k]
    nbr[j] = ix
    D, E = np.linalg.eigh(cov[np.ix_(ix, ix)])
    Wl = (E / np.sqrt(D + eps)) @ E.T
    W[j, ix] = Wl[0]
save('wh_pos.npy', pos)
save('wh_cov.npy', cov)
save('wh_W.npy', W)
save('wh_Winv.npy', np.linalg.inv(W))
save('wh_nbr.npy', nbr)

with open(os.path.join(here, 'fixtures_versions.txt'), 'w') as f:
    f.write('numpy %s scipy %s\n' % (np.__version__, scipy.__version__))
