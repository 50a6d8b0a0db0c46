"""Generates the probe fixtures of tests/data/probes/ (committed; tests do not run this).

Needs probeinterface (pip install probeinterface==0.4.2) for the probeinterface files;
the Kilosort file is written directly in the layout of kilosort.io.save_probe.
Run: python make_probes.py  (from this folder)
"""
import json

import numpy as np
import probeinterface as pi

# Two shanks, 2 columns x 3 rows each, x pitch 16 um, y pitch 20 um, shanks 150 um apart.
# Columns wired in reverse order; contact 2 (x=0, y=40, shank "0") is not recorded (-1).
p = pi.generate_multi_shank(num_shank=2, num_columns=2, num_contact_per_column=3,
                            xpitch=16, ypitch=20, shank_pitch=[150, 0])
dci = np.arange(12)[::-1].copy()
dci[2] = -1
p.set_device_channel_indices(dci)
p.annotate(model_name="test-2shank")
g = pi.ProbeGroup()
g.add_probe(p)
pi.write_probeinterface("pi_2shank.json", g)

# A 4-contact linear probe in millimetres (25 um pitch), no device_channel_indices (contact order).
q = pi.Probe(ndim=2, si_units="mm")
q.set_contacts(positions=np.array([[0, 0], [0, 0.025], [0, 0.05], [0, 0.075]]),
               shapes="circle", shape_params={"radius": 0.006})
g = pi.ProbeGroup()
g.add_probe(q)
pi.write_probeinterface("pi_linear_mm.json", g)

# A group of two 4-contact linear probes; the second reads columns 4..7 (global indices).
a = pi.generate_linear_probe(num_elec=4, ypitch=20)
a.set_device_channel_indices([0, 1, 2, 3])
b = pi.generate_linear_probe(num_elec=4, ypitch=30)
b.move([300, 0])
b.set_device_channel_indices([4, 5, 6, 7])
g = pi.ProbeGroup()
g.add_probe(a)
g.add_probe(b)
pi.write_probeinterface("pi_group2.json", g)

# Kilosort probe dictionary: 6 channels of an 8-column binary, two shanks (kcoords 1, 2).
ks = {
    "chanMap": [0, 1, 2, 3, 5, 6],
    "xc": [0.0, 32.0, 0.0, 32.0, 250.0, 282.0],
    "yc": [0.0, 0.0, 15.0, 15.0, 0.0, 0.0],
    "kcoords": [1.0, 1.0, 1.0, 1.0, 2.0, 2.0],
    "n_chan": 8,
}
with open("ks_probe.json", "w") as f:
    json.dump(ks, f, indent=4)

# A real layout: the probe probeinterface reads from a SpikeGLX .meta of a four-shank NP 2.0
# recording that saved different electrodes per shank (tests/data/spikeglx/meta), written
# compactly, and the expected result of reading it: one line per connected contact in file
# order with column, x (um), y (um), shank id.
meta = "../spikeglx/meta/NP2_4_shanks_save_different_electrodes.imec0.ap.meta"
p = pi.read_spikeglx(meta)
g = pi.ProbeGroup()
g.add_probe(p)
pi.write_probeinterface("/tmp/np2_4shank_indented.json", g)
with open("/tmp/np2_4shank_indented.json") as f:
    j = json.load(f)
with open("np2_4shank.json", "w") as f:
    json.dump(j, f, separators=(",", ":"))
dci = p.device_channel_indices
with open("np2_4shank.expect", "w") as f:
    for i in range(p.get_contact_count()):
        if dci[i] >= 0:
            x, y = p.contact_positions[i]
            f.write("%d %.6f %.6f %s\n" % (dci[i], x, y, p.shank_ids[i]))
