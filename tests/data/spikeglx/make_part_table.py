#!/usr/bin/python3
"""Print the C rows of the part-number table in src/io/spikeglx_geom.c from
probeinterface's neuropixels_probe_features.json (a copy of billkarsh/ProbeTable,
MIT). Run: /tmp/pi-venv/bin/python make_part_table.py  (needs probeinterface)."""
import json
import os

import probeinterface

path = os.path.join(os.path.dirname(probeinterface.__file__), "resources", "neuropixels_probe_features.json")
d = json.load(open(path))
fmt = {"imro_np1000": "IMRO_NP1000", "imro_np1110": "IMRO_NP1110", "imro_np2000": "IMRO_NP2000",
       "imro_np2003": "IMRO_NP2000", "imro_np3010": "IMRO_NP2000", "imro_np2010": "IMRO_NP2010",
       "imro_np2013": "IMRO_NP2010", "imro_np2020": "IMRO_NP2010", "imro_np3020": "IMRO_NP2010"}
for pn, v in d["neuropixels_probes"].items():
    gains = v["ap_gain_list"].split(",")
    fixed = gains[0] if len(gains) == 1 else "0"
    print('    {"%s", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s},' % (
        pn, fmt[v["imro_table_format_type"]], v["num_shanks"], v["cols_per_shank"], v["rows_per_shank"],
        v["electrode_pitch_horz_um"], v["electrode_pitch_vert_um"],
        v["even_row_horz_offset_left_edge_to_leftmost_electrode_center_um"],
        v["odd_row_horz_offset_left_edge_to_leftmost_electrode_center_um"], v["shank_pitch_um"],
        v["num_readout_channels"], v["adc_bit_depth"], v["adc_range_vpp"], fixed, v["on_shank_ref_chan"]))
print("type codes:", d["z_imro_format_type_to_part_number"])
