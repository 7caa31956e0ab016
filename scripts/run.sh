#!/usr/bin/env bash
# Installs what fsdplab needs, builds it, and runs it: with no arguments the default job (the sim
# device, 2 ranks); any arguments are passed to fsdplab (e.g. `scripts/run.sh --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --gui
bash scripts/build.sh default >/dev/null
exec ./build/app/fsdplab "$@"
