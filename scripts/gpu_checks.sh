#!/usr/bin/env bash
# On a GPU machine: every check of the cuda device that needs a GPU (docs/cuda-device.md#tests), each into its
# own log, then one table of what passed. The figures are bench_gpu.sh's; this is correctness:
#   gpu_tests          fsdplab_gpu_tests (a process per test; two-GPU cases skip, saying why)
#   unit_cuda          the cuda instances of the unit tests (ops, models, optimizer; flash attention among them)
#   integration_cuda   the cuda instances of the integration tests (FSDP against the baseline, bf16 bounds)
#   ui_cuda            the live dashboard on the GPU, headless (DashboardLive.OnTheGpu*)
#   nccl_run           `fsdplab run --device cuda --comm nccl --world 1 ...`: FSDP over NCCL, ranks as threads
#   nccl_mpirun        the same under `mpirun -np 1` (NCCL's id sent by MPI); skipped where no mpirun is on PATH
#                      (scripts/pack_openmpi.sh carries this machine's Open MPI to one without)
#   screenshot_cuda    `fsdplab gui --device cuda --screenshot DIR/dashboard-cuda.png --steps 10`, drawn offscreen
#                      through EGL (app/dashboard/offscreen_gl.hpp: NVIDIA's EGL, or Mesa's where it is installed);
#                      the copy for assets/ once it passes
#   memcheck_*, racecheck_*, synccheck_*
#                      compute-sanitizer on the attention ops' cuda instances (exact and flash, both dtypes: the
#                      kernels that share shared memory between warps), on fsdplab_gpu_tests (its time limits
#                      scaled by FSDPLAB_TEST_TIME_SCALE, tests/gpu/gpu_runs.hpp) and on a 2-rank gpt2 run
#                      (--comm-timeout raised the same way). memcheck counts failed CUDA calls as errors too; on
#                      fsdplab_gpu_tests it counts memory errors alone, since those tests fail calls on purpose (an
#                      allocation past the GPU's memory, a copy with a bad pitch) and NCCL probes for kernels this GPU
#                      lacks (cudaFuncGetAttributes: "no kernel image"), 26 failed calls on an H200, none a fault
#
#   bash scripts/gpu_checks.sh [DIR]
#     DIR            where the logs go (default gpu_checks, where the script is started): NAME.log each, summary.txt
#   BUILD=dir        the build folder whose binaries run (default build)
#   CHECK_LIMIT=s    each check's time limit in seconds (default 300): one that fails or hangs is marked and the
#                    others still run
#   BUDGET=s         all the checks' time together (default: no limit): each runs under what is left of it if that
#                    is less than CHECK_LIMIT, and once it is spent the rest are listed as not run. The checks run
#                    in the order above, the sanitizers last, so a short budget still gets the test suites
#   ONLY=regex       only the checks whose names match (e.g. ONLY='^(gpu_tests|unit_cuda)$')
#   SCALE=n          the sanitizers' FSDPLAB_TEST_TIME_SCALE (default 20)
#   PARALLEL=n       the sanitizer checks n at a time (default 1). They check correctness, not speed, and one GPU
#                    holds several: on an H200 the nine ran in 190 s six at a time (the slowest, memcheck on the GPU
#                    tests, 180 s), where one at a time takes about ten minutes. The test suites run first, alone
#   ARCHIVE=file     also packs DIR into this .tar.gz at the end (one file to carry back from a lent machine)
set -uo pipefail
dir=$(realpath -m "${1:-gpu_checks}")
cd "$(dirname "$0")/.." || exit 1
build=${BUILD:-build}
limit=${CHECK_LIMIT:-300}
only=${ONLY:-.}
budget=${BUDGET:-}
scale=${SCALE:-20}
parallel=${PARALLEL:-1}
archive=${ARCHIVE:+$(realpath -m "$ARCHIVE")}
mkdir -p "$dir" || { echo "gpu_checks.sh: cannot make $dir" >&2; exit 1; }
rm -f "$dir"/*.row  # an earlier run's results
for exe in app/fsdplab tests/fsdplab_gpu_tests tests/fsdplab_unit_tests tests/fsdplab_integration_tests; do
  [[ -x $build/$exe ]] || { echo "gpu_checks.sh: $build/$exe is missing; build first (scripts/build.sh)" >&2; exit 1; }
done
summary=$dir/summary.txt
checks=()  # the names of the checks started, in order: each writes its row of the table to DIR/NAME.row

# row NAME VERDICT SECONDS COUNTED: NAME's line of the table, into DIR/NAME.row.
row() { printf '| %-22s | %-24s | %6d | %s |\n' "$1" "$2" "$3" "$4" >"$dir/$1.row"; }

# check NAME COMMAND...: runs COMMAND into NAME.log under the time limit, unless ONLY leaves it out or the BUDGET
# is spent.
check() {
  local name=$1 start status verdict this_limit=$limit
  shift
  [[ $name =~ $only ]] || return 0
  checks+=("$name")
  if [[ -n $budget ]]; then
    local left=$((budget - SECONDS))
    if ((left < 10)); then
      row "$name" "NOT RUN: budget spent" 0 "BUDGET=$budget s"
      echo "== $name: not run, BUDGET=$budget s spent"
      return 0
    fi
    ((left < this_limit)) && this_limit=$left
  fi
  echo "== $name: $*"
  start=$SECONDS
  timeout "$this_limit" "$@" >"$dir/$name.log" 2>&1
  status=$?
  case $status in
    0) verdict=pass ;;
    124) verdict="FAIL: past ${this_limit} s" ;;
    *) verdict="FAIL: exit $status" ;;
  esac
  # What the tools counted (compute-sanitizer's summaries; fsdplab_gpu_tests' last line, or GoogleTest's totals).
  local counted
  counted=$(grep -hoE '(ERROR|RACECHECK|SYNCCHECK) SUMMARY: [0-9]+ [a-z]+' "$dir/$name.log" | sort | uniq -c |
    sed 's/^ *\([0-9]*\) \(.*\)/\2 (x\1)/' | tr '\n' ';')
  if grep -q '^fsdplab_gpu_tests: ' "$dir/$name.log"; then
    counted+=" $(grep '^fsdplab_gpu_tests: ' "$dir/$name.log" | tail -1 | cut -d: -f2-)"
  else
    counted+=" $(grep -hoE '^\[  (PASSED|FAILED|SKIPPED)  ?\] [0-9]+ tests?' "$dir/$name.log" | tail -3 | tr '\n' ' ')"
  fi
  row "$name" "$verdict" $((SECONDS - start)) "${counted# }"
  echo "   $name: $verdict"
}

# check_beside NAME COMMAND...: check, in the background once fewer than PARALLEL checks run there.
check_beside() {
  [[ $1 =~ $only ]] || return 0
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n; done
  checks+=("$1")  # the background shell's own record of it is lost with it
  check "$@" &
}

# compute-sanitizer follows the test binary's per-test processes, and exits 99 on any error it finds.
sanitizer=(compute-sanitizer --target-processes all --error-exitcode 99 --tool)

run_args=(run --device cuda --model gpt2 --world 2 --steps 3 --cupti off)
attention_tests='*Attention*cuda*'
tests=$build/tests
{
  echo "gpu_checks.sh at $(date -u '+%Y-%m-%d %H:%M UTC'), $("$build/app/fsdplab" devices | grep '^fsdplab built from')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not found"
} | tee "$summary"

check gpu_tests "$tests/fsdplab_gpu_tests"
check unit_cuda "$tests/fsdplab_unit_tests" --gtest_filter='*cuda*:*Cuda*'
check integration_cuda "$tests/fsdplab_integration_tests" --gtest_filter='*cuda*:*Cuda*'
[[ -x $tests/fsdplab_ui_tests ]] && check ui_cuda "$tests/fsdplab_ui_tests" --gtest_filter='DashboardLive.OnTheGpu*'
nccl_args=(run --device cuda --comm nccl --world 1 --model gpt2 --preset test-tiny --steps 2)
check nccl_run "$build/app/fsdplab" "${nccl_args[@]}"
if command -v mpirun >/dev/null; then
  check nccl_mpirun env OMPI_MCA_btl_vader_single_copy_mechanism=none \
    mpirun --allow-run-as-root -np 1 "$build/app/fsdplab" "${nccl_args[@]}"
elif [[ nccl_mpirun =~ $only ]]; then
  checks+=(nccl_mpirun)
  row nccl_mpirun "skipped: no mpirun here" 0 "(Open MPI's mpirun is not on PATH)"
fi
check screenshot_cuda "$build/app/fsdplab" gui --device cuda --screenshot "$dir/dashboard-cuda.png" --steps 10
for tool in memcheck racecheck synccheck; do
  check_beside "${tool}_attention" "${sanitizer[@]}" "$tool" "$tests/fsdplab_unit_tests" --gtest_filter="$attention_tests"
done
for tool in memcheck racecheck synccheck; do
  failed_calls=()
  [[ $tool == memcheck ]] && failed_calls=(--report-api-errors no)
  check_beside "${tool}_gpu_tests" env FSDPLAB_TEST_TIME_SCALE="$scale" "${sanitizer[@]}" "$tool" \
    "${failed_calls[@]}" "$tests/fsdplab_gpu_tests"
  check_beside "${tool}_run" "${sanitizer[@]}" "$tool" "$build/app/fsdplab" "${run_args[@]}" \
    --comm-timeout $((5 * scale))
done
wait

{
  echo
  printf '| %-22s | %-24s | %6s | %s |\n' check result "s" "counted in its log"
  echo "|------------------------|--------------------------|--------|-------------------------------|"
  for name in "${checks[@]}"; do
    [[ -f $dir/$name.row ]] || row "$name" "FAIL: no result" 0 ""
    cat "$dir/$name.row"
  done
  echo
  echo "logs: $dir/NAME.log"
} | tee -a "$summary"
[[ -n $archive ]] && tar -czf "$archive" -C "$(dirname "$dir")" "$(basename "$dir")"
! grep -qE 'FAIL|NOT RUN' "$dir"/*.row
