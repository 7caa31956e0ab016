#!/usr/bin/env bash
# A remote screenshot that waits for its runs ends when it should: with no run at all, `--timeout 2` fails
# with its message within 8 s; with a run that starts streaming 3 s late, the shot is written within 8 s of
# the run's end (here: 2.1 s and 0.2 s; the bounds leave room for a loaded machine). Before the waiting frames
# were paced and each finished (gui_window.cpp, frame_capture.cpp), llvmpipe queued the frames of the whole
# wait and drew them all at the end: the first took 17-21 s, the second came 22 s after the run.
#   remote_screenshot_wait.sh FSDPLAB OUT_DIR
set -euo pipefail
fsdplab=$1 out=$2
unset DISPLAY WAYLAND_DISPLAY
mkdir -p "$out"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# No run: the timeout's error, on time.
log="$out/timeout.log"
start=$(now_ms)
status=0
"$fsdplab" gui --listen 127.0.0.1:0 --screenshot "$out/never.png" --steps 3 --timeout 2 >"$log" 2>&1 || status=$?
took=$(($(now_ms) - start))
cat "$log"
echo "--timeout 2 ended after $took ms"
[ "$status" -ne 0 ] || { echo "no run streamed, yet it exited 0"; exit 1; }
grep -q "fsdplab: error: screenshot: no run streamed 3 steps to 127.0.0.1:[0-9]* within 2 s (the most: 0)" "$log"
[ ! -e "$out/never.png" ] || { echo "a shot was written with no run"; exit 1; }
[ "$took" -lt 8000 ] || { echo "--timeout 2 took $took ms; expected under 8000"; exit 1; }

# A run 3 s late: the shot soon after it.
log="$out/late.log"
source "$(dirname "$0")/listening_dashboard.bash"
start_listening_dashboard "$fsdplab" "$out/late.png" "$log"
sleep 3
"$fsdplab" run --model gpt2 --preset test-tiny --world 2 --device sim --steps 3 --dashboard "$address" >/dev/null
ran=$(now_ms)
status=0
wait "$gui" || status=$?
after=$(($(now_ms) - ran))
trap - EXIT
cat "$log"
echo "the shot came $after ms after the run"
[ "$status" -eq 0 ] || exit "$status"
[ -s "$out/late.png" ] || { echo "no shot written"; exit 1; }
[ "$after" -lt 8000 ] || { echo "the shot came $after ms after the run; expected under 8000"; exit 1; }
