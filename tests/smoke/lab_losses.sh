#!/usr/bin/env bash
# The losses the labs' READMEs give as "what right looks like" are the reference's: GPT-2 test-tiny on 2 ranks,
# 5 steps, seed 0 (labs 01, 04, 05, 06), and on 4 ranks with hybrid shard groups of 2 (lab 08: AdamW, and SGD at
# lr 0.1, whose losses csv gives with as many digits as they need). A student compares
# their run with these digits; a change to the numerics that leaves a README behind fails here, naming it.
#   bash tests/smoke/lab_losses.sh build/app/fsdplab labs
set -uo pipefail
fsdplab=$(realpath "$1") labs=$(realpath "$2")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export OPENBLAS_NUM_THREADS=1
failed=0
losses() {  # losses FILE ARGS...: the reference's 5 losses as "a, b, c, d, e", as the csv writes them
  local out=$1
  shift
  "$fsdplab" run --model gpt2 --steps 5 --impl reference --losses "$out" "$@" >/dev/null || exit 1
  tail -n +2 "$out" | cut -d, -f2 | paste -sd, | sed 's/,/, /g'
}
says() {  # says README TEXT: the README holds TEXT, its line breaks read as spaces
  if ! tr -s ' \n' '  ' < "$labs/$1" | grep -qF -- "$2"; then
    echo "FAIL: labs/$1 does not give the reference's losses: $2"
    failed=$((failed + 1))
  fi
}
w2=$(losses "$scratch/w2.csv" --world 2)
w2_printed=$(tail -n +2 "$scratch/w2.csv" | cut -d, -f2 | xargs printf '%.6f\n' | paste -sd, | sed 's/,/, /g')
hybrid=$(losses "$scratch/hybrid.csv" --world 4 --strategy hybrid --hybrid-group 2)
hybrid_sgd=$(losses "$scratch/hybrid_sgd.csv" --world 4 --strategy hybrid --hybrid-group 2 --optimizer sgd --lr 0.1)
says 01-meta-init/README.md "$w2_printed"
says 04-backward/README.md "$(tail -n +2 "$scratch/w2.csv" | paste -sd' ')"
says 05-sharded-optimizer/README.md "$w2"
says 06-prefetch-overlap/README.md "$w2"
says 08-hybrid-shard/README.md "$hybrid"
says 08-hybrid-shard/README.md "$hybrid_sgd"
echo "W = 2: $w2; hybrid W = 4, S = 2: $hybrid; with SGD: $hybrid_sgd"
((failed == 0)) && echo "EVERY_LAB_README_GIVES_THE_REFERENCES_LOSSES"
exit $((failed > 0))
