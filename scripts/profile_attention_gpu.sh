#!/usr/bin/env bash
# On a GPU machine with Nsight Compute: the hardware counters of fsdplab's flash attention kernels, one launch of each
# in a measured step of gpt2 124M (4 x 1024 tokens, one rank), so what bounds them (issue rate, shared memory,
# latency at the occupancy they get) is read, not guessed. In f32 (`--attention flash`: the kernels that keep
# fsdplab's f32 step behind PyTorch's, docs/PERFORMANCE.md) and in bf16.
#   bash scripts/profile_attention_gpu.sh [DIR [ARGS...]]
#     DIR   where the reports go (default attention_profiles, where the script is started): CONFIG_KERNEL.ncu-rep
#           (open in Nsight Compute's GUI) and CONFIG_KERNEL.txt (its details page: speed of light, memory, occupancy,
#           warp stalls, source counters), and summary.txt, each kernel's duration and the two throughputs
#     ARGS  given to every run (default --preset gpt2 --micro-batch 4 --seq 1024)
#   FSDPLAB=path   the fsdplab to profile (default build/app/fsdplab)
#   ARCHIVE=file   also packs DIR into this .tar.gz (one file to carry back from a lent machine)
# ncu runs with --clock-control none (the GPU's clocks as it sets them, as the other figures are measured) and
# replays each profiled kernel about 40 times; about 20 s a kernel on an H200-class GPU, most of it fsdplab starting.
set -uo pipefail
dir=$(realpath -m "${1:-attention_profiles}")
(($# > 0)) && shift
[[ -n ${FSDPLAB:-} ]] && FSDPLAB=$(realpath -m "$FSDPLAB")
archive=${ARCHIVE:+$(realpath -m "$ARCHIVE")}
cd "$(dirname "$0")/.." || exit 1
fsdplab=${FSDPLAB:-build/app/fsdplab}
[[ -x $fsdplab ]] || { echo "profile_attention_gpu.sh: $fsdplab is missing; build first (scripts/build.sh)" >&2; exit 1; }
command -v ncu >/dev/null || { echo "profile_attention_gpu.sh: no ncu (Nsight Compute) on PATH" >&2; exit 1; }
mkdir -p "$dir" || { echo "profile_attention_gpu.sh: cannot make $dir" >&2; exit 1; }
args=("$@")
((${#args[@]} > 0)) || args=(--preset gpt2 --micro-batch 4 --seq 1024)
summary=$dir/summary.txt
echo "profile_attention_gpu.sh at $(date -u '+%Y-%m-%d %H:%M UTC'), arguments: ${args[*]}" | tee "$summary"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$summary"
"$fsdplab" devices | tail -1 | tee -a "$summary"
ncu --version | tail -1 | tee -a "$summary"

failures=0
# profile CONFIG KERNEL OPTIONS...: one launch of KERNEL after the warmup step's (gpt2 124M's 12 layers launch it 12
# times a step; --launch-skip counts only KERNEL's), into DIR/CONFIG_KERNEL.{ncu-rep,txt}.
profile() {
  local config=$1 kernel=$2
  shift 2
  local report=$dir/${config}_$kernel
  echo
  echo "== $config $kernel"
  if ncu --kernel-name "$kernel" --launch-skip 12 --launch-count 1 --set full --import-source yes \
      --clock-control none -f -o "$report" \
      "$fsdplab" bench --what train --device cuda --world 1 --warmup 1 --steps 1 "${args[@]}" "$@" >"$report.log" 2>&1 &&
      [[ -f $report.ncu-rep ]]; then
    ncu --import "$report.ncu-rep" --page details --print-units base >"$report.txt" 2>&1
    # Duration and the two speed-of-light throughputs, from the details page.
    printf '%-10s %-32s %s\n' "$config" "$kernel" \
      "$(grep -E '^ +(Duration|Compute \(SM\) Throughput|Memory Throughput) ' "$report.txt" | awk '{$1=$1; print}' |
         paste -sd ';')" | tee -a "$summary"
  else
    failures=$((failures + 1))
    printf '%-10s %-32s failed (see %s)\n' "$config" "$kernel" "$report.log" | tee -a "$summary"
    tail -5 "$report.log"
  fi
}

# f32's backward is one pass, the key kernel (flash_attention_kernels.cu, [Note: dq in key-tile order]).
for kernel in flash_forward_kernel flash_backward_key_kernel; do
  profile f32_flash "$kernel" --attention flash
done
for kernel in flash_forward_kernel flash_backward_key_kernel flash_backward_query_kernel; do
  profile bf16 "$kernel" --precision bf16
done
echo
echo "summary: $summary"
if [[ -n $archive ]]; then
  tar -C "$(dirname "$dir")" -czf "$archive" "$(basename "$dir")" && echo "archive: $archive"
fi
exit $((failures > 0))
