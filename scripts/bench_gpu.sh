#!/usr/bin/env bash
# On a GPU machine: the GPU figures of docs/PERFORMANCE.md from one run, side by side.
#   1. single-rank gpt2 training, fsdplab's cuda device against PyTorch eager on the same GPU;
#   2. 2 ranks on one GPU with an emulated PCIe link: SYNC, ASYNC, compute, comm and eta.
# Builds first if needed. Arguments are passed to both single-rank runs (e.g. --micro-batch 8).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/app/fsdplab ]] || bash scripts/build.sh
fsdplab=build/app/fsdplab
"$fsdplab" devices
echo
"$fsdplab" bench --what train --device cuda --preset gpt2 "$@"
python3 scripts/pytorch_gpt2_eager.py --preset gpt2 "$@"
echo
"$fsdplab" bench --what train --device cuda --preset gpt2 --world 2 --emulate-link --link-preset pcie4-no-p2p \
  --device-preset h100-sxm
