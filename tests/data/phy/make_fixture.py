#!/usr/bin/python3
"""Write tests/data/phy/small/: a tiny Phy folder made with numpy alone (np.save,
plain text), independent of boundsort's writer, so `boundsort validate` is
tested against files written by another implementation. Run with Debian's
python3 (numpy): /usr/bin/python3 tests/data/phy/make_fixture.py

Content: 10 spikes, 3 templates (nt = 5, 4 channels), clusters {0, 2, 5},
2 PCs on 2 channels, a raw file rec.bin of 200 samples x 5 int16 columns.
tests/cli/test_validate.sh corrupts byte offsets of these files, so keep
np.save's 128-byte headers (numpy >= 1.x writes v1.0 headers padded to 64).
"""
import os
import numpy as np

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "small")
os.makedirs(out, exist_ok=True)
S, T, NT, C, P, PC, NDAT, NSAMP = 10, 3, 5, 4, 2, 2, 5, 200

def save(name, arr):
    np.save(os.path.join(out, name), arr)

save("spike_times.npy", np.array([3, 10, 10, 42, 100, 101, 150, 160, 198, 199], dtype=np.int64))
save("spike_templates.npy", np.array([0, 1, 2, 0, 1, 1, 2, 0, 0, 2], dtype=np.int32))
save("spike_clusters.npy", np.array([0, 2, 5, 0, 2, 2, 5, 0, 0, 5], dtype=np.int32))
save("amplitudes.npy", np.arange(S, dtype=np.float32) + 10)
tpl = np.zeros((T, NT, C), dtype=np.float32)
tpl[0, 2, 0] = 1; tpl[1, 2, 1] = -2; tpl[2, 2, 3] = 3
save("templates.npy", tpl)
save("templates_ind.npy", np.tile(np.arange(C, dtype=np.int32), (T, 1)))
flat = tpl.reshape(T, -1)
nrm = np.linalg.norm(flat, axis=1)
save("similar_templates.npy", ((flat @ flat.T) / np.outer(nrm, nrm)).astype(np.float32))
save("channel_map.npy", np.arange(C, dtype=np.int32))
save("channel_positions.npy", np.array([[0, 0], [16, 0], [0, 20], [16, 20]], dtype=np.float32))
save("channel_shanks.npy", np.zeros(C, dtype=np.int32))
save("whitening_mat.npy", np.eye(C, dtype=np.float32))
save("whitening_mat_inv.npy", np.eye(C, dtype=np.float32))
save("pc_features.npy", np.arange(S * P * PC, dtype=np.float32).reshape(S, P, PC))
save("pc_feature_ind.npy", np.array([[0, 1], [1, 2], [3, 2]], dtype=np.uint32))
np.zeros((NSAMP, NDAT), dtype=np.int16).tofile(os.path.join(out, "rec.bin"))
with open(os.path.join(out, "params.py"), "w") as f:
    f.write("dat_path = 'rec.bin'\nn_channels_dat = 5\ndtype = 'int16'\noffset = 0\n"
            "sample_rate = 30000.0\nhp_filtered = False\n")
tables = {"group": ["good", "mua", "good"], "KSLabel": ["good", "mua", "good"],
          "Amplitude": ["50.0", "20.0", "40.0"], "ContamPct": ["0.5", "30.0", "2.0"]}
for field, vals in tables.items():
    with open(os.path.join(out, "cluster_%s.tsv" % field), "w") as f:
        f.write("cluster_id\t%s\n" % field)
        for cid, v in zip([0, 2, 5], vals):
            f.write("%d\t%s\n" % (cid, v))
