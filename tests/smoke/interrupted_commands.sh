#!/usr/bin/env bash
# An interrupted `fsdplab report` or `fsdplab grade` leaves nothing behind (app/temporary_folders.hpp): stopped by
# SIGINT or SIGTERM while it runs, it ends its child processes, says what it removes, and ends by the same signal;
# its scratch folder and an --out folder it made are then removed; an --out folder that was there before stays.
#   interrupted_commands.sh FSDPLAB OUT_DIR
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
  grep -q "fsdplab report: interrupted by SIG$signal; removing " "$out/stderr" ||
    { echo "FAIL: $signal: no message saying what is removed:"; cat "$out/stderr"; exit 1; }
  gone "$TMPDIR"/fsdplab-report-* "$into"
  [[ -z "$(ls -A "$TMPDIR")" ]] || { echo "FAIL: $signal: left in TMPDIR: $(ls -A "$TMPDIR")"; exit 1; }
}

# gone PATH...: waits (at most 10 s) until the process that removes an interrupted command's folders once it has
# ended has removed PATH... (a folder that was there before the command is not among them).
gone() {
  for _ in $(seq 1 200); do
    local left=0
    for path in "$@"; do [[ -e "$path" && ! -e "$path/mine.txt" ]] && left=1; done
    [[ $left == 0 ]] && return 0
    sleep 0.05
  done
}

interrupt INT "$out/made"
[[ ! -e "$out/made" ]] || { echo "FAIL: the --out folder the report made was left"; exit 1; }
interrupt TERM "$out/made"
[[ ! -e "$out/made" ]] || { echo "FAIL: the --out folder the report made was left (SIGTERM)"; exit 1; }

mkdir -p "$out/there"
touch "$out/there/mine.txt"
interrupt INT "$out/there"
[[ "$(ls -A "$out/there")" == mine.txt ]] || { echo "FAIL: an --out folder that was there lost or gained files"; exit 1; }
# fsdplab grade: its checks run in child processes, which end with it, and write in its scratch folder until then.
"$fsdplab" grade --impl reference > "$out/stdout" 2> "$out/stderr" &
pid=$!
for _ in $(seq 1 200); do
  compgen -G "$TMPDIR/fsdplab-grade-run-*/fsdplab-grade-*" > /dev/null && break
  sleep 0.05
done
compgen -G "$TMPDIR/fsdplab-grade-run-*/fsdplab-grade-*" > /dev/null || { echo "FAIL: grade: no check started"; exit 1; }
kill -s INT "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 130 ]] || { echo "FAIL: grade: exit $rc, expected 130 (ended by SIGINT)"; exit 1; }
grep -q "fsdplab grade: interrupted by SIGINT; removing " "$out/stderr" ||
  { echo "FAIL: grade: no message saying what is removed:"; cat "$out/stderr"; exit 1; }
gone "$TMPDIR"/fsdplab-grade-run-*
[[ -z "$(ls -A "$TMPDIR")" ]] || { echo "FAIL: grade: left in TMPDIR: $(find "$TMPDIR" | head)"; exit 1; }
echo "INTERRUPTED_COMMANDS_LEAVE_NOTHING"
