#!/usr/bin/env bash
# Every loss the labs' READMEs quote is what its run prints. The reference's ("what right looks like"): GPT-2
# test-tiny on 2 ranks, 5 steps, seed 0 (labs 01, 04, 05, 06; lab 04 with SGD at lr 0.1 too), and on 4 ranks with
# hybrid shard groups of 2 (lab 08: AdamW, and SGD at lr 0.1, whose losses csv gives with as many digits as they
# need). And each pitfall's loss, a mutant's run (labs/mutants/) beside the reference's: a student who made that
# mistake sees these digits. A change to the numerics that leaves a README behind fails here, naming it.
#   bash tests/smoke/lab_losses.sh build/app/fsdplab labs
set -uo pipefail
fsdplab=$(realpath "$1") labs=$(realpath "$2")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export OPENBLAS_NUM_THREADS=1
# The READMEs quote the digits of the lab's OpenBLAS kernels, which fsdplab picks itself where OPENBLAS_CORETYPE is
# unset, keeping a name the user set ([Note: the same digits on every machine], app/host_blas_kernel.cpp). Some
# machines set one for every program; a student's shell in the lab does not (cli.devices_lab_blas_kernels alike).
unset OPENBLAS_CORETYPE
failed=0
losses() {  # losses FILE ARGS...: the 5 losses of `run --model gpt2 --steps 5 ARGS` as "a, b, c, d, e", as csv writes them
  local out=$1
  shift
  "$fsdplab" run --model gpt2 --steps 5 --losses "$out" "$@" >/dev/null || { echo "FAIL: run $* failed"; exit 1; }
  tail -n +2 "$out" | cut -d, -f2 | paste -sd, | sed 's/,/, /g'
}
text_of() { tr -s ' \n' '  ' < "$labs/$1"; }  # a README with its line breaks read as spaces
says() {  # says README TEXT: the README holds TEXT
  if ! text_of "$1" | grep -qF -- "$2"; then
    echo "FAIL: labs/$1 does not give the reference's losses: $2"
    failed=$((failed + 1))
  fi
}
# quotes README STEP ARGS...: the README gives the loss at STEP of `run --model gpt2 --steps 5 ARGS`, as csv writes it
# or with 8 decimals ("4.15102100" for csv's 4.151021).
quotes() {
  local readme=$1 step=$2
  shift 2
  losses "$scratch/quoted.csv" "$@" >/dev/null
  local loss fixed
  loss=$(sed -n "$((step + 1))p" "$scratch/quoted.csv" | cut -d, -f2)
  fixed=$(printf '%.8f' "$loss")
  if ! text_of "$readme" | grep -qE "(^|[^0-9.])(${loss//./\\.}|${fixed//./\\.})([^0-9]|$)"; then
    echo "FAIL: labs/$readme does not give step $step's loss of \`run --model gpt2 --steps 5 $*\`: $loss"
    failed=$((failed + 1))
  fi
}
w2=$(losses "$scratch/w2.csv" --world 2 --impl reference)
w2_printed=$(tail -n +2 "$scratch/w2.csv" | cut -d, -f2 | xargs printf '%.6f\n' | paste -sd, | sed 's/,/, /g')
w2_sgd=$(losses "$scratch/w2_sgd.csv" --world 2 --impl reference --optimizer sgd --lr 0.1)
hybrid=(--world 4 --strategy hybrid --hybrid-group 2)
hybrid_adamw=$(losses "$scratch/hybrid.csv" "${hybrid[@]}" --impl reference)
hybrid_sgd=$(losses "$scratch/hybrid_sgd.csv" "${hybrid[@]}" --impl reference --optimizer sgd --lr 0.1)
says 01-meta-init/README.md "$w2_printed"
says 04-backward/README.md "$(tail -n +2 "$scratch/w2.csv" | paste -sd' ')"
says 04-backward/README.md "$w2_sgd"
says 05-sharded-optimizer/README.md "$w2"
says 06-prefetch-overlap/README.md "$w2"
says 08-hybrid-shard/README.md "$hybrid_adamw"
says 08-hybrid-shard/README.md "$hybrid_sgd"
# The pitfalls: README, step, run.
sgd=(--optimizer sgd --lr 0.1)
quotes 01-meta-init/README.md 1 --world 2 --impl 1=mutant:index-from-zero
quotes 02-flat-parameter/README.md 1 --world 2 --batch 8 --impl 2=mutant:param-begin-in-shard-space
quotes 02-flat-parameter/README.md 1 --world 2 --batch 8 --impl 2=mutant:drops-cut-parameters
quotes 04-backward/README.md 2 --world 2 --impl 4=mutant:sum-not-mean
quotes 04-backward/README.md 2 --world 2 --impl 4=mutant:sum-not-mean "${sgd[@]}"
quotes 05-sharded-optimizer/README.md 2 --world 2 --mode sync --impl 5=mutant:step-twice
quotes 05-sharded-optimizer/README.md 2 --world 2 --strategy zero1 --impl 5=mutant:no-zero-gather
quotes 05-sharded-optimizer/README.md 2 --world 2 --strategy zero2 --impl 5=mutant:no-zero-gather
quotes 08-hybrid-shard/README.md 2 "${hybrid[@]}" --impl 8=mutant:sum-not-mean
quotes 08-hybrid-shard/README.md 2 "${hybrid[@]}" --impl 8=mutant:sum-not-mean "${sgd[@]}"
quotes 08-hybrid-shard/README.md 2 "${hybrid[@]}" --impl 8=mutant:no-all-reduce
quotes 08-hybrid-shard/README.md 2 "${hybrid[@]}" --impl 8=mutant:same-color
quotes 08-hybrid-shard/README.md 4 "${hybrid[@]}" --impl 8=mutant:swapped-colors "${sgd[@]}"
echo "W = 2: $w2; hybrid W = 4, S = 2: $hybrid_adamw; with SGD: $hybrid_sgd"
((failed == 0)) && echo "EVERY_LOSS_THE_LAB_READMES_QUOTE_IS_ITS_RUNS"
exit $((failed > 0))
