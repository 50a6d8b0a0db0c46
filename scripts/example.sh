#!/usr/bin/env bash
# example.sh [DIR] - set up boundsort and run the main job on a built-in example:
# install the dependencies, build, simulate a 32-channel recording with known
# ground truth, sort it into a Phy folder (drift estimation and quality
# metrics included), check the folder, score the
# sorting against the ground truth and write the HTML report. Everything lands
# in DIR (default ./example).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/example}
bash "$root/scripts/deps.sh"
bash "$root/scripts/build.sh" "$root/build"
bs=$root/build/boundsort
mkdir -p "$out"

echo "== simulate: 60 s, 32 channels, 10 units with known spike times"
"$bs" simulate -o "$out/sim" --probe linear32 --duration 60 --units 10 --seed 1
echo "== info"
"$bs" info "$out/sim/recording.bin" --probe "$out/sim/probe.json" --fs 30000
echo "== sort (also writes the quality metrics and the curation page report.html)"
"$bs" sort "$out/sim/recording.bin" --probe "$out/sim/probe.json" --fs 30000 -o "$out/sorted"
echo "== validate the Phy folder"
"$bs" validate "$out/sorted"
echo "== accuracy against the ground truth"
"$bs" compare "$out/sorted" "$out/sim"
echo
echo "Phy folder: $out/sorted   (open with: phy template-gui $out/sorted/params.py)"
echo "Report:     $out/sorted/report.html   (quality metrics: $out/sorted/qc/qc_metrics.tsv)"
