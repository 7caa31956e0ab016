#!/usr/bin/env bash
# Installs what fsdplab needs, builds it, and runs it: with no arguments the default job (the sim
# device, 2 ranks); any arguments are passed to fsdplab (e.g. `scripts/run.sh --help`).
# Builds the `fsdplab` target only (scripts/build.sh default fsdplab), not the tests: scripts/test.sh
# builds those.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --gui
if [[ ! -x build/app/fsdplab ]]; then
  echo "run.sh: building fsdplab (the first build takes minutes)" >&2
fi
if ! log=$(bash scripts/build.sh default fsdplab 2>&1); then
  printf '%s\n' "$log" | tail -n 40 >&2
  echo "run.sh: the build failed (above, its last lines)" >&2
  exit 1
fi
exec ./build/app/fsdplab "$@"
