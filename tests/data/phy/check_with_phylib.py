#!/usr/bin/env python3
"""Optional check: load Phy folders with phylib's own loader (the one
`phy template-gui` uses) and, when it is installed, SpikeInterface's
read_phy / read_kilosort, and print what they found. Not part of the test suite.

    python -m venv /tmp/phyvenv --system-site-packages && /tmp/phyvenv/bin/pip install phylib
    /tmp/phyvenv/bin/python tests/data/phy/check_with_phylib.py FOLDER [FOLDER ...]

Exits 0 when every folder loads (and prints "SKIP" and exits 0 when phylib is
not installed), 1 when a folder fails to load. phylib may write files into
the folder (e.g. .phy/ caches), so pass copies of committed fixtures.
"""
import os
import sys

try:
    import numpy as np
    from phylib.io.model import load_model
except ImportError as e:  # phylib or numpy missing: nothing to check
    print("SKIP: phylib is not available (%s)" % e)
    load_model = None

try:
    from spikeinterface.extractors import read_phy, read_kilosort
except Exception as e:  # not installed, or broken by a numpy/numba mismatch
    print("SKIP: spikeinterface is not available (%s)" % e)
    read_phy = None

bad = 0
for folder in sys.argv[1:]:
    if read_phy is not None:
        try:
            s = read_phy(folder)
            k = read_kilosort(folder)
            print("%s: read_phy: units %s, spikes per unit %s, properties %s; read_kilosort: units %s"
                  % (folder, [int(u) for u in s.get_unit_ids()],
                     [len(s.get_unit_spike_train(u)) for u in s.get_unit_ids()], sorted(s.get_property_keys()),
                     [int(u) for u in k.get_unit_ids()]))
        except Exception as e:
            print("%s: read_phy FAILED: %r" % (folder, e))
            bad += 1
    if load_model is None:
        continue
    params = os.path.join(folder, "params.py")
    try:
        m = load_model(params)
        n_spikes = len(m.spike_times)
        clusters = np.unique(m.spike_clusters)
        print("%s: loaded: %d spikes, %d clusters, %d templates, %d channels, sample_rate %g, "
              "templates %s, features %s, metadata fields %s"
              % (folder, n_spikes, len(clusters), m.n_templates, m.n_channels, m.sample_rate,
                 None if m.sparse_templates is None else m.sparse_templates.data.shape,
                 None if m.sparse_features is None else m.sparse_features.data.shape,
                 sorted(m.metadata.keys())))
        # every cluster in spike_clusters has a group label
        groups = m.metadata.get("group", {})
        missing = [int(c) for c in clusters if int(c) not in groups]
        if missing:
            print("%s: clusters without a group: %s" % (folder, missing[:10]))
            bad += 1
        m.close()
    except Exception as e:  # report and go on with the next folder
        print("%s: FAILED to load: %r" % (folder, e))
        bad += 1
sys.exit(1 if bad else 0)
