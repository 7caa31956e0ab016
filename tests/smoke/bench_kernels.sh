#!/usr/bin/env bash
# `fsdplab bench --what kernels` on the sim device (gpt2 test-small, FSDP on 2 ranks): its three tables (by kernel,
# phase and kind) hold the rows a training step must have, each sorted by time, each table's shares adding up to
# 100 % and its ms to the GPU time the header states, the same calls in every table.
#   bench_kernels.sh FSDPLAB OUT_DIR
set -uo pipefail
fsdplab=$1 out=$2
mkdir -p "$out"
fail() { echo "bench_kernels: $*"; cat "$out/stdout" "$out/stderr"; exit 1; }

"$fsdplab" bench --what kernels --device sim --preset test-small --micro-batch 2 --seq 64 --steps 2 --warmup 1 \
  --world 2 >"$out/stdout" 2>"$out/stderr" || fail "exit status $?"
grep -q "^fsdplab bench --what kernels: gpt2 test-small, 2 ranks x 2 x 64 tokens, f32, FSDP ASYNC; 2 steps after 1 warmup; device sim" \
  "$out/stdout" || fail "no header"
gpu_ms=$(sed -n 's/.*GPU time \([0-9.]*\) ms a step.*/\1/p' "$out/stdout")
[ -n "$gpu_ms" ] || fail "no GPU time line"

# table NAME: the rows of the table whose first column is NAME, as "key calls ms share" lines.
table() {
  awk -v name="$1" -F'|' '
    $2 ~ "^ " name " +$" { inside = 1; next }
    inside && /^\|-/ { next }
    inside && /^\|/ { gsub(/ +/, "", $2); print $2, $3 + 0, $4 + 0, $5 + 0; next }
    inside { exit }' "$out/stdout"
}
for name in kernel phase kind; do
  table "$name" >"$out/$name.rows"
  [ -s "$out/$name.rows" ] || fail "no '$name' table"
  # Sorted by time, shares add up to 100 % and times to the GPU time (each printed rounded: 0.005 % and 0.0005 ms a row).
  awk -v gpu="$gpu_ms" -v name="$name" '
    NR > 1 && $3 > last + 0.0005 { print name ": not sorted by time at " $1; bad = 1 }
    { last = $3; share += $4; ms += $3; calls += $2; n++ }
    END {
      if (share < 100 - 0.005 * n || share > 100 + 0.005 * n) { print name ": shares add up to " share " %"; bad = 1 }
      if (ms < gpu - 0.0005 * n || ms > gpu + 0.0005 * n) { print name ": " ms " ms, the GPU time is " gpu; bad = 1 }
      print calls > "/dev/stderr"
      exit bad
    }' "$out/$name.rows" 2>"$out/$name.calls" || fail "the '$name' table"
done
for row in matmul adamw_update layernorm_backward attention all_gather reduce_scatter all_reduce; do
  grep -q "^$row " "$out/kernel.rows" || fail "no '$row' row in the kernel table"
done
for row in forward backward optimizer; do grep -q "^$row " "$out/phase.rows" || fail "no '$row' phase"; done
for row in compute all_gather reduce_scatter; do grep -q "^$row " "$out/kind.rows" || fail "no '$row' kind"; done
cmp -s "$out/kernel.calls" "$out/phase.calls" && cmp -s "$out/kernel.calls" "$out/kind.calls" ||
  fail "the tables count different calls: $(cat "$out/kernel.calls" "$out/phase.calls" "$out/kind.calls" | tr '\n' ' ')"
echo "BENCH_KERNELS_TABLES_ADD_UP ($(wc -l <"$out/kernel.rows") kernels, GPU time $gpu_ms ms a step)"
