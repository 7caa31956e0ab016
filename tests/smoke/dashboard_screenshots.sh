#!/usr/bin/env bash
# The dashboard rendered for real, offscreen with no display (app/dashboard/offscreen_gl.hpp): a live run after
# a few steps, and a replayed trace, each to a PNG that png_check finds drawn.
#   dashboard_screenshots.sh FSDPLAB PNG_CHECK OUT_DIR
set -euo pipefail
fsdplab=$1 png_check=$2 out=$3
unset DISPLAY WAYLAND_DISPLAY
mkdir -p "$out"
"$fsdplab" gui --preset test-tiny --screenshot "$out/live.png" --steps 3
"$png_check" "$out/live.png" 1600 1000
"$fsdplab" run --model gpt2 --preset test-tiny --world 2 --steps 2 --trace "$out/replay.json" >/dev/null
"$fsdplab" view "$out/replay.json" --screenshot "$out/replay.png"
"$png_check" "$out/replay.png" 1600 1000
