#!/usr/bin/env bash
# An interrupted `fsdplab report` leaves nothing behind (app/temporary_folders.hpp): stopped by SIGINT or SIGTERM
# while its first sections run, it removes its scratch folder and an --out folder it made, says so, and ends by the
# same signal; an --out folder that was there before stays.
#   report_interrupted.sh FSDPLAB OUT_DIR
set -euo pipefail
set -m  # job control: a background job takes SIGINT (without it, bash starts it with SIGINT ignored)
fsdplab=$(realpath "$1") out=$(realpath -m "$2")
rm -rf "$out"
mkdir -p "$out/tmp"
export TMPDIR="$out/tmp" DISPLAY= WAYLAND_DISPLAY=

# interrupt SIGNAL OUT: starts a report into OUT, waits until its scratch folder is made, and sends SIGNAL.
interrupt() {
  local signal=$1 into=$2
  "$fsdplab" report --quick --out "$into" > "$out/stdout" 2> "$out/stderr" &
  local pid=$!
  for _ in $(seq 1 200); do
    compgen -G "$TMPDIR/fsdplab-report-*" > /dev/null && break
    sleep 0.05
  done
  compgen -G "$TMPDIR/fsdplab-report-*" > /dev/null || { echo "FAIL: no scratch folder appeared"; exit 1; }
  kill -s "$signal" "$pid"
  local rc=0
  wait "$pid" || rc=$?
  local expected=$((128 + $(kill -l "$signal")))
  [[ $rc == "$expected" ]] || { echo "FAIL: $signal: exit $rc, expected $expected (ended by the signal)"; exit 1; }
  grep -q "fsdplab report: interrupted by SIG$signal; removed " "$out/stderr" ||
    { echo "FAIL: $signal: no message saying what was removed:"; cat "$out/stderr"; exit 1; }
  [[ -z "$(ls -A "$TMPDIR")" ]] || { echo "FAIL: $signal: left in TMPDIR: $(ls -A "$TMPDIR")"; exit 1; }
}

interrupt INT "$out/made"
[[ ! -e "$out/made" ]] || { echo "FAIL: the --out folder the report made was left"; exit 1; }
interrupt TERM "$out/made"
[[ ! -e "$out/made" ]] || { echo "FAIL: the --out folder the report made was left (SIGTERM)"; exit 1; }

mkdir -p "$out/there"
touch "$out/there/mine.txt"
interrupt INT "$out/there"
[[ "$(ls -A "$out/there")" == mine.txt ]] || { echo "FAIL: an --out folder that was there lost or gained files"; exit 1; }
echo "REPORT_INTERRUPTED_LEAVES_NOTHING"
