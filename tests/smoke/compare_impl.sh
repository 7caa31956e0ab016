#!/usr/bin/env bash
# The student's code in the dashboard, rendered with no display. `--compare impl --impl 3=student` runs the
# reference beside the student's task 3; the skeleton's TODOs throw, so the student's run ends with the skeleton's
# message: drawn in the shot beside the reference's run, and the command's error, once, with a non-zero status —
# never a crash or a hang. Then `--break task:4` stops the world at task 4's first event for the shot, even in
# a run of test-tiny that a frame could see finished, and `--break task:4:collective-done` at the first of one
# kind; a break the runs never reach, or on a task that reports no
# events, is an error that says so; without a display, the hint repeats the student's own run.
#   compare_impl.sh FSDPLAB PNG_CHECK OUT_DIR
set -uo pipefail
fsdplab=$1 png_check=$2 out=$3
unset DISPLAY WAYLAND_DISPLAY
mkdir -p "$out"
fail() { echo "compare_impl: $*"; cat "$out/stderr"; exit 1; }

status=0
"$fsdplab" gui --preset test-tiny --compare impl --impl 3=student --screenshot "$out/compare-impl.png" --steps 2 \
  >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] || fail "expected exit status 1 (the skeleton's error), got $status"
grep -q "^screenshot: $out/compare-impl.png" "$out/stdout" || fail "no screenshot written"
"$png_check" "$out/compare-impl.png" 1600 1000 || exit 1
[ "$(grep -c 'fsdplab: error:' "$out/stderr")" = 1 ] || fail "expected the error once"
grep -q "^fsdplab: error: student (3): rank [0-9] failed: task 3, ForwardTask::[a-z_]*: not implemented yet — see labs/03-forward/README.md" \
  "$out/stderr" || fail "expected the skeleton's message, naming the student's run"

"$fsdplab" gui --preset test-tiny --break task:4 --screenshot "$out/break-task.png" --steps 1 \
  >"$out/stdout" 2>"$out/stderr" || fail "--break task:4 failed"
"$png_check" "$out/break-task.png" 1600 1000 || exit 1
grep -q "^stopped at: rank 0, step 2: [a-z -]* of task 4 (BackwardTask::" "$out/stdout" ||
  fail "--break task:4 did not stop at task 4 in step 2: $(cat "$out/stdout")"
status=0
"$fsdplab" gui --break task:10 --screenshot "$out/never.png" >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "expected task:N or task:N:KIND with N a task from 1 to 9" "$out/stderr" ||
  fail "--break task:10 accepted"
# One kind of a task's events: once task 4's code has issued its first reduce-scatter; a kind that is none, refused.
"$fsdplab" gui --preset test-tiny --break task:4:collective-done --screenshot "$out/break-kind.png" --steps 1 \
  >"$out/stdout" 2>"$out/stderr" || fail "--break task:4:collective-done failed"
grep -q "^stopped at: rank 0, step 2: collective done of task 4 (BackwardTask::" "$out/stdout" ||
  fail "--break task:4:collective-done did not stop at task 4's collective: $(cat "$out/stdout")"
status=0
"$fsdplab" gui --break task:4:issued --screenshot "$out/never.png" >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "expected one of 'pre-forward'.*task:N:KIND (task N's events of that kind)" "$out/stderr" ||
  fail "--break task:4:issued accepted"
status=0
"$fsdplab" gui --break task:9 --screenshot "$out/never.png" >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "task:9: task 9's copies (CPU offload) run inside the gathers" "$out/stderr" ||
  fail "--break task:9 accepted"
status=0
rm -f "$out/never.png" "$out/unreached.png"
"$fsdplab" gui --preset test-tiny --break task:8 --screenshot "$out/never.png" --steps 1 >"$out/stdout" \
  2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "task:8: task 8 (hybrid shard) all-reduces across replica groups" "$out/stderr" &&
  [ ! -e "$out/never.png" ] || fail "--break task:8 without replica groups accepted (status $status)"
# Task 6 under settings that gather nothing ahead is refused before any run starts, naming the setting.
status=0
"$fsdplab" gui --preset test-tiny --strategy zero2 --break task:6 --screenshot "$out/never.png" --steps 1 \
  >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "task:6: task 6 (prefetch and overlap) gathers units ahead of their use, and --strategy zero2" \
  "$out/stderr" && [ ! -e "$out/never.png" ] || fail "--break task:6 under zero2 accepted (status $status)"
# A break the focus run never reaches (one unit, the root, and forward prefetch only: there is no next unit to
# fetch): the shot waits for every run to finish, the others let go from their holds, and says so.
status=0
"$fsdplab" gui --preset test-tiny --wrap model --prefetch forward --break task:6 --screenshot "$out/unreached.png" \
  --steps 1 >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "the runs finished without reaching it" "$out/stderr" && [ -s "$out/unreached.png" ] ||
  fail "--break task:6 with one unit: expected 'finished without reaching it' and a shot, got status $status"
# The next step's first gather is task 6's too, issued where another step follows: a shot's runs go one step past
# the one they break in, so the break finds it.
status=0
"$fsdplab" gui --preset test-tiny --prefetch next-step --break task:6 --screenshot "$out/next-step.png" --steps 1 \
  >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 0 ] && grep -q "stopped at: rank 0, step 2: collective issued of task 6 (UnitLifecycle::optimizer_step" \
  "$out/stdout" || fail "--break task:6 with --prefetch next-step did not stop in step 2 (status $status)"
status=0
"$fsdplab" gui --impl 3=student --break task:3 >"$out/stdout" 2>"$out/stderr" || status=$?
[ "$status" = 1 ] && grep -q "fsdplab gui --impl 3=student --break task:3 --screenshot dashboard.png\` renders it" \
  "$out/stderr" || fail "the no-display hint does not repeat the run's arguments, or adds a --steps to its --break"
echo "compare_impl: the student's error shown and returned; --break task:4 rendered, stopped in task 4"
