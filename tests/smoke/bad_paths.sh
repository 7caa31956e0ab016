#!/usr/bin/env bash
# Paths given wrong in ways that once exited 0 (so the corpus of bad inputs, which looks for signals and hangs,
# cannot see them): an output named as an input or as another output (a folder's by the files the run reads or
# writes there), or inside a checkpoint folder, and an empty path, which read as "not given". Each must be
# refused, its message naming the options, before anything is written: the inputs are compared with copies
# afterwards, and the outputs must not exist. Paths that only share a folder are fine (--trace-dir . beside
# --data tok.bin).
#   bad_paths.sh FSDPLAB SOURCE_DIR OUT_DIR
set -uo pipefail
fsdplab=$(realpath "$1") source_dir=$(realpath "$2") out=$(realpath -m "$3")
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
unset DISPLAY WAYLAND_DISPLAY
export OPENBLAS_NUM_THREADS=1
failed=0

# refused PATTERN ARG...: `fsdplab ARG...` must fail (exit 1, or 2 for a command line it cannot read) with PATTERN
# (grep -E) in its output.
refused() {
  local pattern=$1 status=0
  shift
  "$fsdplab" "$@" >log 2>&1 || status=$?
  if ((status != 1 && status != 2)) || ! grep -Eq -e "$pattern" log; then
    echo "FAIL: fsdplab $* (exit $status), expected /$pattern/:"
    sed 's/^/    /' log
    failed=$((failed + 1))
  fi
}

head -c 8192 /dev/zero >tok.bin  # 4096 tokens of id 0
cp tok.bin tok.copy
ln tok.bin hard.bin
cp "$source_dir/engine/runtime/presets.jsonc" pp.json
cp pp.json pp.copy
"$fsdplab" run --model gpt2 --preset test-tiny --device sim --steps 1 --save-init si >log 2>&1 || {
  echo "FAIL: --save-init si"; cat log; exit 1
}
cp -r si si.copy
mkdir ckd m tdx && cp tok.bin ckd/tok.bin
run=(run --model gpt2 --preset test-tiny --device sim --steps 1)

# An output that is an input: the input destroyed, with exit status 0.
refused "--losses '.*tok.bin' is the same file as --data '.*tok.bin', which the run reads" "${run[@]}" --data tok.bin --losses tok.bin
refused "--trace 'tok.bin' is the same file as --data 'tok.bin'" "${run[@]}" --data tok.bin --trace tok.bin
refused "--losses 'hard.bin' is the same file as --data 'tok.bin'" "${run[@]}" --data tok.bin --losses hard.bin
refused "--losses 'pp.json' is the same file as --presets 'pp.json'" "${run[@]}" --presets pp.json --losses pp.json
refused "--trace 'pp.json' is the same file as --presets 'pp.json'" \
  bench --what overlap --preset test-tiny --seq 16 --bandwidths 1 --presets pp.json --trace pp.json
refused "--trace 'pp.json' is the same file as --presets 'pp.json'" run --world 2 --presets pp.json --trace pp.json
"$fsdplab" run --world 2 --trace t.json >log 2>&1 && cp t.json t.copy || { echo "FAIL: --trace t.json"; cat log; exit 1; }
refused "--screenshot 't.json' is the same file as a trace to replay 't.json'" view --screenshot t.json t.json
refused "--losses 'si/config.json' is the same file as --load-init 'si/config.json', which the run reads" \
  "${run[@]}" --load-init si --losses si/config.json
refused "--save-final 'si/model.safetensors' is the same file as --load-init 'si/model.safetensors'" \
  "${run[@]}" --load-init si --save-final si
refused "--data 'ckd/tok.bin' lies in --checkpoint 'ckd', a folder the run writes" "${run[@]}" --world 2 --data ckd/tok.bin --checkpoint ckd
# Two outputs alike: one overwrote the other.
refused "--losses 'x.csv' is the same file as --trace 'x.csv', another output of the run" "${run[@]}" --losses x.csv --trace x.csv
refused "--losses 'm/model.safetensors' is the same file as --save-final 'm/model.safetensors', another output" \
  "${run[@]}" --losses m/model.safetensors --save-final m
refused "--trace 'tdx/rank1.json' is the same file as --trace-dir 'tdx/rank1.json'" \
  "${run[@]}" --world 2 --trace tdx/rank1.json --trace-dir tdx
refused "--trace 'tdx/rank0.json' is the same file as --trace-dir 'tdx/rank0.json'" \
  run --world 2 --trace tdx/rank0.json --trace-dir tdx
refused "--save-init 'same/model.safetensors' is the same file as --save-final 'same/model.safetensors'" \
  "${run[@]}" --save-init same --save-final same
# An empty path or name: the run went on as if it were not given (a resume trained from scratch over the checkpoint).
for option in --resume --checkpoint --save-init --save-final --load-init --losses --trace --trace-dir --data --presets \
  --preset --link-preset --dashboard; do
  refused "^$option: an empty value; expected " "${run[@]}" --world 2 "$option" ''
done
refused "^--presets: an empty value; expected a preset file" presets --presets ''
refused "^--trace: an empty value; expected a file" bench --what overlap --preset test-tiny --seq 16 --bandwidths 1 --trace ''
refused "^--json: an empty value; expected a file" grade --task 2 --json ''
refused "^--screenshot: an empty value; expected a PNG file" gui --screenshot ''
refused "^--screenshot: an empty value; expected a PNG file" view --screenshot '' t.json

# Paths that only share a folder: each file the run writes there is a name of its own.
mkdir shared && cp tok.bin shared/tok.bin
if ! "$fsdplab" "${run[@]}" --world 2 --data shared/tok.bin --trace-dir shared --save-final shared \
  --losses shared/losses.csv >log 2>&1; then
  echo "FAIL: --data, --trace-dir, --save-final and --losses in one folder refused:"
  sed 's/^/    /' log
  failed=$((failed + 1))
fi
tokens=$(($(stat -c %s shared/tok.bin) / 2))
grep -q "^data: shared/tok.bin, $tokens tokens, each checked against the vocabulary before step 1$" log ||
  { echo "FAIL: the run did not say it reads shared/tok.bin's $tokens tokens through:"; sed 's/^/    /' log; failed=$((failed + 1)); }
for written in shared/rank0.json shared/rank1.json shared/model.safetensors shared/config.json shared/losses.csv; do
  [[ -e $written ]] || { echo "FAIL: $written was not written"; failed=$((failed + 1)); }
done
cmp -s shared/tok.bin tok.copy || { echo "FAIL: shared/tok.bin changed"; failed=$((failed + 1)); }

cmp -s tok.bin tok.copy || { echo "FAIL: tok.bin changed"; failed=$((failed + 1)); }
cmp -s pp.json pp.copy || { echo "FAIL: pp.json changed"; failed=$((failed + 1)); }
cmp -s t.json t.copy || { echo "FAIL: the replayed trace t.json changed"; failed=$((failed + 1)); }
diff -r si si.copy >/dev/null || { echo "FAIL: the --load-init folder si changed"; failed=$((failed + 1)); }
for written in x.csv m/model.safetensors same tdx/rank0.json tdx/rank1.json ckd/manifest.json; do
  [[ ! -e $written ]] || { echo "FAIL: $written was written"; failed=$((failed + 1)); }
done
((failed == 0)) && echo "BAD_PATHS_REFUSED"
exit $((failed > 0))
