#!/usr/bin/env bash
# Runs fsdplab over every line of tests/data/bad_inputs/corpus.txt and fails if any ends otherwise than refused:
# exit 1 (a refusal with a message) or 2 (a command line it cannot read). Not a signal (exit 128 or more: 134 is
# SIGABRT, an uncaught exception; 139 SIGSEGV), not its time limit (timeout's 124), not accepted (0).
#   bash tests/smoke/bad_input_corpus.sh build/app/fsdplab tests/data/bad_inputs/corpus.txt
set -uo pipefail
fsdplab="$(realpath "$1")"
corpus="$2"
limit="${3:-60}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/dir/sub" "$scratch/empty_dir"
echo '{"x": 1}' > "$scratch/dir/sub/file.json"
: > "$scratch/empty"
head -c 4096 /dev/urandom > "$scratch/garbage"
printf '{"traceEvents": [{"name": "gelu", "ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0}, {"name": "ge' > "$scratch/trunc.json"
mkfifo "$scratch/fifo"
mkdir "$scratch/fifo_dir"
mkfifo "$scratch/fifo_dir/config.json" "$scratch/fifo_dir/manifest.json"
export DISPLAY="" WAYLAND_DISPLAY="" OPENBLAS_NUM_THREADS=1

failed=0
checked=0
line_number=0
while IFS= read -r line || [[ -n "$line" ]]; do
  line_number=$((line_number + 1))
  [[ -z "$line" || "$line" == \#* ]] && continue
  out="$scratch/out.$line_number"
  args="${line//@DIR@/$scratch/dir}"
  args="${args//@EMPTY_DIR@/$scratch/empty_dir}"
  args="${args//@ZERO@//dev/zero}"
  args="${args//@EMPTY@/$scratch/empty}"
  args="${args//@GARBAGE@/$scratch/garbage}"
  args="${args//@TRUNC_JSON@/$scratch/trunc.json}"
  args="${args//@FIFO_DIR@/$scratch/fifo_dir}"
  args="${args//@FIFO@/$scratch/fifo}"
  args="${args//@MISSING@/$scratch/missing}"
  args="${args//@OUT@/$out}"
  read -r -a argv <<< "$args"
  (cd "$scratch" && timeout -k 5 "$limit" "$fsdplab" "${argv[@]}") > "$scratch/log" 2>&1 < /dev/null
  status=$?
  checked=$((checked + 1))
  if (( status != 1 && status != 2 )); then
    failed=$((failed + 1))
    echo "FAIL (exit $status) corpus.txt:$line_number: fsdplab $line"
    tail -n 5 "$scratch/log" | sed 's/^/    /'
  fi
done < "$corpus"
echo "$checked bad inputs, $failed not refused with exit 1 or 2"
(( failed == 0 && checked > 0 )) && echo "BAD_INPUTS_REFUSED"
exit $(( failed > 0 ))
