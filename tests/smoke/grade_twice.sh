#!/usr/bin/env bash
# Grades the untouched skeleton twice and fails if any line of the text or of the --json differs but the wall time.
# Every rank of a check's world reaches the same TODO at once, so this is where a diagnostic quoting whichever rank
# failed first would change from one grading to the next ([Note: which failure a world reports] in
# engine/train/world.cpp). The JSON holds every check's diagnostic; the text says a task still at its TODO once.
#   bash tests/smoke/grade_twice.sh build/app/fsdplab
set -uo pipefail
fsdplab="$1"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
grade() {  # into $1.txt and $1.json, by way of one --json path (the text names it); grade exits 0 whatever the points
  rm -f "$scratch/grade.json"
  "$fsdplab" grade --json "$scratch/grade.json" > "$scratch/grade.txt" || { cat "$scratch/grade.txt"; echo "FAIL: grade exited $?"; exit 1; }
  sed -E 's/ in [0-9.]+ s$/ in (wall time) s/' "$scratch/grade.txt" > "$scratch/$1.txt"
  [[ -s "$scratch/grade.json" ]] || { echo "FAIL: grade wrote no --json"; exit 1; }
  sed -E '/^  "seconds": /d' "$scratch/grade.json" > "$scratch/$1.json"
}
grade first
grade second
same=1
for kind in txt json; do
  if ! diff "$scratch/first.$kind" "$scratch/second.$kind"; then same=0; fi
done
((same)) || exit 1
checks=$(grep -c '"check": ' "$scratch/first.json")
((checks > 0)) || { echo "FAIL: the grade holds no check"; exit 1; }
echo "THE_SAME_DIAGNOSTICS_TWICE ($checks checks, each said the same way)"
