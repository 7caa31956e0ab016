#!/usr/bin/env bash
# On a GPU machine: the GPU figures of docs/PERFORMANCE.md from one run, written to LOG as they come, then side by
# side in one table:
#   PyTorch eager f32 (TF32 off); PyTorch eager bf16 autocast + fused AdamW; PyTorch bf16 + torch.compile
#   (scripts/pytorch_gpt2_eager.py: the same model and step as fsdplab's single-rank baseline);
#   llm.c's train_gpt2cu in bf16 (scripts/llmc_gpt2.py), where scripts/build_llmc.sh built it into .gpu/llmc/;
#   fsdplab f32 and bf16 on 1 rank (`bench --what train`), f32 with flash attention (`--attention flash`: the online
#   softmax PyTorch's f32 SDPA runs, where fsdplab's f32 default is the exact one), and bf16 with the vocabulary
#   unpadded (`--vocab-multiple 1`: what the padded vocabulary gains, [Note: the padded vocabulary] in
#   engine/nn/gpt2_model.hpp);
#   fsdplab bf16 on 2 ranks sharing the GPU, SYNC and ASYNC, without and with an emulated pcie4-no-p2p link (the
#   latter adds the compute step and eta), and on that link with the gradients reduced in bf16 (`--reduce-dtype bf16`,
#   half the reductions' bytes; FSDP2's default where the parameters are bf16), then also with the embedding's gradient
#   as rows (`--embedding-grad rows`: the root reduced beside the Blocks' backward, [Note: the embedding's gradient as
#   rows] in engine/fsdp/unit_lifecycle.cpp);
#   each 2-rank run also prints its device time under SYNC against ASYNC, op by op (what the collectives beside the
#   compute cost it), summed up under the table;
#   then where the step goes, kernel by kernel: PyTorch's eager f32 and bf16 (pytorch_gpt2_eager.py --kernels, after
#   their timed steps) and fsdplab's (`bench --what kernels`) in f32, f32 with flash attention, and bf16;
#   last, what CUPTI tracing costs and whether its overlap agrees with the CUDA events' (`bench --what cupti`).
#
#   bash scripts/bench_gpu.sh [LOG [ARGS...]]
#     LOG   the log file (default bench_gpu.log, where the script is started); everything is also printed
#     ARGS  given to every run, e.g. --micro-batch 8 --seq 512, or --preset gpt2-medium; the default is gpt2 (124M),
#           4 x 1024 tokens a rank, 10 measured steps after 3 warmup
#   FSDPLAB=path   the fsdplab to run (default build/app/fsdplab, built first if missing)
#   LLMC=path      llm.c's train_gpt2cu (default .gpu/llmc/train_gpt2cu); without one the llm.c row says so
#   RUN_LIMIT=s    each run's time limit in seconds (default 240): a run that fails or hangs is marked in its row
#                  and the others still run
# About 200 s on an H200 (2026-12-04, RUN_LIMIT=110, which no run reached: 166 s, then about 30 s for the
# bench --what cupti run added after), and the llm.c, bf16-reduction and embedding-rows runs added since (not yet
# timed).
set -uo pipefail
# LOG and FSDPLAB are paths from where the script was started; the runs go from the repository root.
log=$(realpath -m "${1:-bench_gpu.log}")
(( $# > 0 )) && shift
[[ -n ${FSDPLAB:-} ]] && FSDPLAB=$(realpath -m "$FSDPLAB")
[[ -n ${LLMC:-} ]] && LLMC=$(realpath -m "$LLMC")
cd "$(dirname "$0")/.." || exit 1
limit=${RUN_LIMIT:-240}
fsdplab=${FSDPLAB:-build/app/fsdplab}
if [[ -z ${FSDPLAB:-} && ! -x $fsdplab ]]; then
  bash scripts/build.sh || exit 1
fi
[[ -x $fsdplab ]] || { echo "bench_gpu.sh: FSDPLAB=$fsdplab is not an executable" >&2; exit 1; }
: >"$log" || { echo "bench_gpu.sh: cannot write the log $log" >&2; exit 1; }
exec > >(tee -a "$log") 2>&1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME COMMAND...: prints the command and its output; the output is kept as $out/NAME, the exit status as
# $out/NAME.status (124: it ran past RUN_LIMIT).
run() {
  local name=$1
  shift
  echo
  echo "\$ $*"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name"
  echo "${PIPESTATUS[0]}" >"$out/$name.status"
}

echo "bench_gpu.sh at $(date -u '+%Y-%m-%d %H:%M UTC'), arguments: ${*:-(none)}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
"$fsdplab" devices  # its last line: the commit fsdplab was built from

run torch_f32 python3 scripts/pytorch_gpt2_eager.py --kernels "$@"
run torch_bf16 python3 scripts/pytorch_gpt2_eager.py --dtype bf16 --kernels "$@"
run torch_compile python3 scripts/pytorch_gpt2_eager.py --dtype bf16 --compile "$@"
llmc=${LLMC:-.gpu/llmc/train_gpt2cu}
if [[ -x $llmc ]]; then
  run llmc python3 scripts/llmc_gpt2.py --llmc "$llmc" "$@"
else
  echo "not run: no llm.c trainer at $llmc (bash scripts/build_llmc.sh LLMC_SRC, where fsdplab was built)" \
    >"$out/llmc.skipped"
fi
run fsdplab_f32 "$fsdplab" bench --what train --device cuda --world 1 "$@"
run fsdplab_f32_flash "$fsdplab" bench --what train --device cuda --world 1 --attention flash "$@"
run fsdplab_bf16 "$fsdplab" bench --what train --device cuda --precision bf16 --world 1 "$@"
run fsdplab_bf16_unpadded "$fsdplab" bench --what train --device cuda --precision bf16 --world 1 --vocab-multiple 1 "$@"
run fsdplab_w2 "$fsdplab" bench --what train --device cuda --precision bf16 --world 2 "$@"
run fsdplab_w2_link "$fsdplab" bench --what train --device cuda --precision bf16 --world 2 --emulate-link \
  --link-preset pcie4-no-p2p "$@"
run fsdplab_w2_link_bf16_reduce "$fsdplab" bench --what train --device cuda --precision bf16 --reduce-dtype bf16 \
  --world 2 --emulate-link --link-preset pcie4-no-p2p "$@"
run fsdplab_w2_link_rows "$fsdplab" bench --what train --device cuda --precision bf16 --reduce-dtype bf16 \
  --embedding-grad rows --world 2 --emulate-link --link-preset pcie4-no-p2p "$@"
run kernels_f32 "$fsdplab" bench --what kernels --device cuda "$@"
run kernels_f32_flash "$fsdplab" bench --what kernels --device cuda --attention flash "$@"
run kernels_bf16 "$fsdplab" bench --what kernels --device cuda --precision bf16 "$@"
run cupti "$fsdplab" bench --what cupti "$@"

# failed NAME: "failed (exit N)" when the run did not end well, else nothing.
failed() {
  local status
  status=$(cat "$out/$1.status")
  [[ $status == 0 ]] || echo "failed (exit $status$([[ $status == 124 ]] && echo ", past ${limit} s"))"
}
# row LABEL NAME [TABLE_ROW]: a line of the summary from run NAME's output: pytorch_gpt2_eager.py's "step X ms,
# tokens/s Y", or the row TABLE_ROW of fsdplab's table (| run | step (ms) | tokens/s | ...), and its eta if it printed one;
# for a run never started, why ($out/NAME.skipped).
row() {
  local label=$1 name=$2 table_row=${3:-} step tokens eta why
  if [[ -f $out/$name.skipped ]]; then
    printf '| %-52s | %s |\n' "$label" "$(cat "$out/$name.skipped")"
    return
  fi
  if [[ -z $table_row ]]; then
    read -r step tokens < <(sed -n 's/^step \([0-9.]*\) ms, tokens\/s \([0-9]*\)$/\1 \2/p' "$out/$name")
  else
    read -r step tokens < <(awk -F'|' -v row="$table_row" '$2 ~ "^ " row " +$" { gsub(/ /, "", $3); gsub(/ /, "", $4); print $3, $4 }' "$out/$name")
  fi
  eta=-
  [[ $table_row == ASYNC ]] && eta=$(sed -n 's/.*: eta = \([0-9]*\.[0-9]\{3\}\).*/\1/p; s/.*: eta = undefined.*/undefined/p' "$out/$name")
  why=$(failed "$name")
  if [[ -n $why || -z ${step:-} ]]; then
    printf '| %-52s | %s |\n' "$label" "${why:-no figures in its output} (see \$ above)"
  else
    printf '| %-52s | %9s | %9s | %-5s |\n' "$label" "$step" "$tokens" "${eta:--}"
  fi
}

echo
echo "Side by side (step: the host's mean of the measured steps; tokens/s: all ranks' tokens; each run's output above):"
echo
printf '| %-52s | %9s | %9s | %-5s |\n' run "step (ms)" tokens/s eta
echo "|------------------------------------------------------|-----------|-----------|-------|"
row "PyTorch eager, f32 (TF32 off)" torch_f32
row "PyTorch eager, bf16 autocast + fused AdamW" torch_bf16
row "PyTorch, bf16 autocast + fused AdamW + torch.compile" torch_compile
row "llm.c train_gpt2cu, bf16, no cuDNN" llmc
row "fsdplab, f32, 1 rank" fsdplab_f32 single
row "fsdplab, f32, 1 rank, flash attention" fsdplab_f32_flash single
row "fsdplab, bf16, 1 rank" fsdplab_bf16 single
row "fsdplab, bf16, 1 rank, vocabulary unpadded" fsdplab_bf16_unpadded single
row "fsdplab, bf16, 2 ranks on one GPU, SYNC" fsdplab_w2 SYNC
row "fsdplab, bf16, 2 ranks on one GPU, ASYNC" fsdplab_w2 ASYNC
row "fsdplab, bf16, 2 ranks, emulated pcie4-no-p2p, SYNC" fsdplab_w2_link SYNC
row "fsdplab, bf16, 2 ranks, emulated pcie4-no-p2p, ASYNC" fsdplab_w2_link ASYNC
row "fsdplab, bf16, 2 ranks, compute (no link), ASYNC" fsdplab_w2_link compute
row "... the same, gradients reduced in bf16: SYNC" fsdplab_w2_link_bf16_reduce SYNC
row "... the same, gradients reduced in bf16: ASYNC" fsdplab_w2_link_bf16_reduce ASYNC
row "... the same, gradients reduced in bf16: compute" fsdplab_w2_link_bf16_reduce compute
row "... and the embedding's gradient as rows: SYNC" fsdplab_w2_link_rows SYNC
row "... and the embedding's gradient as rows: ASYNC" fsdplab_w2_link_rows ASYNC
row "... and the embedding's gradient as rows: compute" fsdplab_w2_link_rows compute
# What running the collectives beside the compute cost the compute, each 2-rank run: its SYNC -> ASYNC line (the ops
# that changed most are in its output above).
echo
for name in fsdplab_w2 fsdplab_w2_link fsdplab_w2_link_bf16_reduce fsdplab_w2_link_rows; do
  [[ -z $(failed "$name") ]] || continue
  sed -n "s/^Rank 0's device time a step, SYNC against ASYNC ([^)]*): \(compute [^;]*\).*/${name}: \1/p" "$out/$name"
done
for name in kernels_f32 kernels_f32_flash kernels_bf16; do
  why=$(failed "$name")
  [[ -n $why ]] && echo "bench --what kernels (${name#kernels_}): $why"
done
why=$(failed cupti)
echo
if [[ -n $why ]]; then
  echo "bench --what cupti: $why"
else
  grep -E '^(CUPTI on / off|overlap from CUPTI)' "$out/cupti"
fi
echo
echo "log: $log"
