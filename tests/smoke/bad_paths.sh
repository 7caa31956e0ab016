#!/usr/bin/env bash
# Paths given wrong in ways that once exited 0 (so the corpus of bad inputs, which looks for signals and hangs,
# cannot see them): an output named as an input or as another output, or inside a folder of another, and an empty
# path, which read as "not given". Each must be refused, its message naming the options, before anything is
# written: the inputs are compared with copies afterwards, and the outputs must not exist.
#   bad_paths.sh FSDPLAB SOURCE_DIR OUT_DIR
set -uo pipefail
fsdplab=$(realpath "$1") source_dir=$(realpath "$2") out=$(realpath -m "$3")
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1
unset DISPLAY WAYLAND_DISPLAY
export OPENBLAS_NUM_THREADS=1
failed=0

# refused PATTERN ARG...: `fsdplab ARG...` must fail (exit 1, or CLI11's usage error) with PATTERN (grep -E) in
# its output.
refused() {
  local pattern=$1 status=0
  shift
  "$fsdplab" "$@" >log 2>&1 || status=$?
  if ((status == 0 || status >= 128)) || ! grep -Eq -e "$pattern" log; then
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
refused "--losses 'si/losses.csv' lies in --load-init 'si', a folder the run reads" "${run[@]}" --load-init si --losses si/losses.csv
refused "--save-final 'si' is the same folder as --load-init 'si'" "${run[@]}" --load-init si --save-final si
refused "--data 'ckd/tok.bin' lies in --checkpoint 'ckd', a folder the run writes" "${run[@]}" --world 2 --data ckd/tok.bin --checkpoint ckd
# Two outputs alike: one overwrote the other.
refused "--losses 'x.csv' is the same file as --trace 'x.csv', another output of the run" "${run[@]}" --losses x.csv --trace x.csv
refused "--losses 'm/model.safetensors' lies in --save-final 'm', a folder the run writes" "${run[@]}" --losses m/model.safetensors --save-final m
refused "--trace 'tdx/rank0.json' lies in --trace-dir 'tdx'" "${run[@]}" --trace tdx/rank0.json --trace-dir tdx
refused "--save-init 'same' is the same folder as --save-final 'same'" "${run[@]}" --save-init same --save-final same
# An empty path or name: the run went on as if it were not given (a resume trained from scratch over the checkpoint).
for option in --resume --checkpoint --save-init --save-final --load-init --losses --trace --trace-dir --data --presets \
  --preset --link-preset --dashboard; do
  refused "^$option: an empty value; expected " "${run[@]}" --world 2 "$option" ''
done
refused "^--presets: an empty value; expected a preset file" presets --presets ''
refused "^--trace: an empty value; expected a file" bench --what overlap --preset test-tiny --seq 16 --bandwidths 1 --trace ''
refused "^--json: an empty value; expected a file" grade --task 2 --json ''

cmp -s tok.bin tok.copy || { echo "FAIL: tok.bin changed"; failed=$((failed + 1)); }
cmp -s pp.json pp.copy || { echo "FAIL: pp.json changed"; failed=$((failed + 1)); }
diff -r si si.copy >/dev/null || { echo "FAIL: the --load-init folder si changed"; failed=$((failed + 1)); }
for written in x.csv m/model.safetensors same tdx/rank0.json ckd/manifest.json si/losses.csv; do
  [[ ! -e $written ]] || { echo "FAIL: $written was written"; failed=$((failed + 1)); }
done
((failed == 0)) && echo "BAD_PATHS_REFUSED"
exit $((failed > 0))
