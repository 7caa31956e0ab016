#!/usr/bin/env bash
# The dashboard rendered for real, under Xvfb with Mesa: a live run after a few steps, and a replayed
# trace, each to a PNG that png_check finds drawn. Skipped (exit 77) where xvfb-run is missing.
#   dashboard_screenshots.sh FSDPLAB PNG_CHECK OUT_DIR
set -euo pipefail
fsdplab=$1 png_check=$2 out=$3
source "$(dirname "$0")/xvfb.sh"
mkdir -p "$out"
xvfb "$fsdplab" gui --preset test-tiny --screenshot "$out/live.png" --steps 3
"$png_check" "$out/live.png" 1600 1000
"$fsdplab" run --model gpt2 --preset test-tiny --world 2 --steps 2 --trace "$out/replay.json" >/dev/null
xvfb "$fsdplab" view "$out/replay.json" --screenshot "$out/replay.png"
"$png_check" "$out/replay.png" 1600 1000
