#!/usr/bin/python3
"""Write expected_probeinterface.txt: for every real Open Ephys recording in
real/ (probeinterface's test data, see ../README.md; settings.xml + structure.oebin), the
contact positions probeinterface's read_openephys() gives for each stream
that has a Neuropixels probe, listed by data column (contact k is wired to
device_channel_indices[k]; the line lists column 0, 1, ... in order).

probeinterface moves the origin (x starts at 0); boundsort keeps the
positions as written, so the test compares them up to one constant shift.

Run: /tmp/pi-venv/bin/python make_expected.py [OE_DIR]   (pip install probeinterface)
Line format: DATASET|STREAM|N_CONTACTS|x:y:shank,...  (µm rounded to 0.001; shank -1 when none)
"""
import glob
import json
import os
import sys
import warnings

import probeinterface

warnings.simplefilter("ignore")
here = os.path.dirname(os.path.abspath(__file__))
oe_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "real")
out = open(os.path.join(here, "expected_probeinterface.txt"), "w")
out.write(f"# probeinterface {probeinterface.__version__}: read_openephys(settings.xml, stream_name=STREAM)\n")
for oebin in sorted(glob.glob(os.path.join(oe_dir, "*", "*", "*", "*", "structure.oebin"))):
    dataset = os.path.relpath(oebin, oe_dir).split(os.sep)[0]
    node = os.path.dirname(os.path.dirname(os.path.dirname(oebin)))
    for stream in json.load(open(oebin))["continuous"]:
        name = stream["stream_name"]
        try:
            probe = probeinterface.read_openephys(os.path.join(node, "settings.xml"), stream_name=name)
        except Exception:
            continue  # an ADC stream: no probe
        by_col = {}
        shanks = probe.shank_ids if probe.shank_ids is not None else ["-1"] * probe.get_contact_count()
        for k, col in enumerate(probe.device_channel_indices):
            x, y = probe.contact_positions[k][:2]
            by_col[int(col)] = f"{x:.3f}:{y:.3f}:{shanks[k] if shanks[k] != '' else -1}"
        cols = sorted(by_col)
        assert cols == list(range(len(cols))), f"{dataset} {name}: columns are not 0..n-1"
        out.write(f"{dataset}|{name}|{len(cols)}|{','.join(by_col[c] for c in cols)}\n")
