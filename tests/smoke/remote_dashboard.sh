#!/usr/bin/env bash
# The dashboard on a run of another process, drawn with no display: `fsdplab gui --listen 127.0.0.1:0` says
# which port it got, `fsdplab run ... --dashboard` streams 2 ranks there, and the screenshot, taken once 3
# steps arrived, must be drawn (png_check) with lanes of both ranks in it (the dashboard lists the ranks
# whose lanes its last frame drew). The run names no --preset: its source's label names the size it trained
# (test-tiny), as a run given one does.
#   remote_dashboard.sh FSDPLAB PNG_CHECK OUT_DIR
set -euo pipefail
fsdplab=$1 png_check=$2 out=$3
unset DISPLAY WAYLAND_DISPLAY
mkdir -p "$out"
log="$out/gui.log"
source "$(dirname "$0")/listening_dashboard.bash"
start_listening_dashboard "$fsdplab" "$out/remote.png" "$log"
"$fsdplab" run --model gpt2 --world 2 --device sim --steps 3 --dashboard "$address"
status=0
wait "$gui" || status=$?
trap - EXIT
cat "$log"
[ "$status" -eq 0 ] || exit "$status"
grep -q "remote: gpt2 test-tiny .*(2 ranks, async): lanes of rank 0, 1 drawn, 3 steps" "$log"
"$png_check" "$out/remote.png" 1600 1000
