#!/usr/bin/env bash
# Installs what the build needs, builds, and runs every test: the default build (CUDA language on
# where nvcc exists), then the engine's unit tests under AddressSanitizer + UBSan and under
# ThreadSanitizer. Exits non-zero on the first failure. This is README's test command and CI's.
# In a handout (scripts/make_handout.sh), which has no tests/, it builds the default preset and grades the
# labs instead: `fsdplab grade` is a student's test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --gui
export OPENBLAS_NUM_THREADS=1  # ranks are threads; BLAS must not start its own pool under sanitizers

if [[ ! -f tests/CMakeLists.txt ]]; then
  echo "== a handout: no tests/ (the engine's own suite stays with the course); building and grading your labs"
  bash scripts/build.sh default
  exec ./build/app/fsdplab grade
fi

for preset in default asan tsan; do
  echo "== build: $preset"
  bash scripts/build.sh "$preset"
  echo "== test: $preset"
  ctest --preset "$preset" -j "$(nproc)"
done
