# listening_dashboard.bash — sourced by the remote dashboard's smoke tests (remote_dashboard.sh,
# remote_screenshot_wait.sh): starts `fsdplab gui --listen` on a free loopback port, to write PNG once a run
# streamed 3 steps, and waits (at most 30 s) until it says where it listens. Sets $gui, its pid (killed when
# the test exits), and $address.
#   start_listening_dashboard FSDPLAB PNG LOG
start_listening_dashboard() {
  local fsdplab=$1 png=$2 log=$3
  rm -f "$png"
  : >"$log"  # before the dashboard starts: read below at once, it must exist (set -e)
  "$fsdplab" gui --listen 127.0.0.1:0 --screenshot "$png" --steps 3 --timeout 120 >"$log" 2>&1 &
  gui=$!
  trap 'kill "$gui" 2>/dev/null || true' EXIT
  address=
  for _ in $(seq 300); do
    address=$(sed -n 's/^fsdplab gui: listening on \([^;]*\);.*/\1/p' "$log")
    [ -n "$address" ] && break
    kill -0 "$gui" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$address" ] || { echo "the dashboard did not say where it listens:"; cat "$log"; exit 1; }
}
