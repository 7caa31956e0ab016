#!/usr/bin/env bash
# A student's file edited after the last build that succeeded: `grade` and `run` say that what runs is the code of
# that build, not what the file holds now. A copy of fsdplab dated 2000 stands for a binary older than every lab
# file (no source is touched); the binary as built says nothing.
#   student_code_not_built.sh FSDPLAB
set -uo pipefail
fsdplab=$1
scratch="$(mktemp -d "${TMPDIR:-/tmp}/fsdplab-stale.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
fail() { echo "student_code_not_built: FAIL: $*" >&2; exit 1; }
export OPENBLAS_NUM_THREADS=1
cp "$fsdplab" "$scratch/fsdplab" && touch -d 2000-01-01 "$scratch/fsdplab" || fail "cannot copy $fsdplab"
warning="fsdplab: warning: labs/03-forward/student.cpp changed after this fsdplab was built"
"$scratch/fsdplab" grade --task 3 >"$scratch/grade.out" 2>"$scratch/grade.err"
grep -q "^$warning" "$scratch/grade.err" || fail "grade --task 3 gave no warning: $(cat "$scratch/grade.err")"
grep -q "changed after" "$scratch/grade.out" && fail "the warning went to stdout"
[ "$(grep -c 'changed after' "$scratch/grade.err")" = 1 ] || fail "expected one warning (task 3 only): $(cat "$scratch/grade.err")"
"$scratch/fsdplab" run --model gpt2 --preset test-tiny --world 2 --steps 1 --impl 3=student >/dev/null 2>"$scratch/run.err"
grep -q "^$warning" "$scratch/run.err" || fail "run --impl 3=student gave no warning: $(cat "$scratch/run.err")"
"$scratch/fsdplab" run --model gpt2 --preset test-tiny --world 2 --steps 1 >/dev/null 2>"$scratch/reference.err"
grep -q "changed after" "$scratch/reference.err" && fail "a run of the reference warned of a student's file"
"$fsdplab" grade --task 3 2>&1 >/dev/null | grep -q "changed after" && fail "the binary as built warned"
echo "student_code_not_built: grade and run warn of a student's file newer than the binary, and only then"
