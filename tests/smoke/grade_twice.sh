#!/usr/bin/env bash
# Grades the untouched skeleton twice and fails if any line differs but the total's wall time. Every rank of a
# check's world reaches the same TODO at once, so this is where a diagnostic quoting whichever rank failed first
# would change from one grading to the next ([Note: which failure a world reports] in engine/train/world.cpp).
#   bash tests/smoke/grade_twice.sh build/app/fsdplab
set -uo pipefail
fsdplab="$1"
grade() { "$fsdplab" grade | sed -E 's/ in [0-9.]+ s$/ in (wall time) s/'; }
first="$(grade)"
second="$(grade)"
if [[ "$first" != "$second" ]]; then
  diff <(echo "$first") <(echo "$second")
  exit 1
fi
echo "THE_SAME_DIAGNOSTICS_TWICE ($(echo "$first" | grep -c '    LOST  ') checks lost, each said the same way)"
