#!/usr/bin/env bash
# `mpirun -np N fsdplab run --comm mpi ...` (a rank per process) against the same run on N threads: the
# same report, the same losses, the same trace and the same checkpoint, byte for byte. The virtual clock
# makes this exact: every collective's begin and end are agreed between the processes as between threads.
#   processes_equal_threads.sh FSDPLAB MPIRUN WORKDIR
set -euo pipefail
fsdplab=$1
mpirun=$2
work=$3
rm -rf "$work"
mkdir -p "$work/processes" "$work/threads"

# Runs `fsdplab run ARGS` as NP processes (in processes/) and as NP threads (in threads/), then compares
# what each printed (the line naming how ranks ran aside) and every file each wrote but the checkpoint's lock.
compare() {
  local name=$1 np=$2
  shift 2
  (cd "$work/processes" && "$mpirun" -np "$np" "$fsdplab" run --device sim --comm mpi "$@" > "$name.txt")
  (cd "$work/threads" && "$fsdplab" run --device sim --world "$np" "$@" > "$name.txt")
  for side in processes threads; do
    sed -i 's/ranks as processes over MPI/ranks as RANKS/; s/ranks as threads/ranks as RANKS/' "$work/$side/$name.txt"
  done
  # A checkpoint's lock file (DIR.fsdplab-lock) holds the pid of the run that wrote it: the one thing that differs.
  if ! diff -r -x '*.fsdplab-lock' "$work/processes" "$work/threads"; then
    echo "FAIL: $name: $np processes and $np threads differ (above)"
    exit 1
  fi
  echo "ok: $name ($np processes = $np threads)"
}

# The streams demo (SYNC and ASYNC, per-rank overlap from the gathered trace).
compare demo 2 --trace demo.json
# FSDP training: losses, the trace of every rank, a checkpoint (a barrier and rank 0's writes).
compare gpt2 2 --model gpt2 --preset test-tiny --steps 3 --losses gpt2.csv --trace gpt2.json --checkpoint gpt2-ckpt
# Four processes, split into shard and replica groups, bf16 parameters and gradient reduction.
compare hybrid_bf16 4 --model gpt2 --preset test-tiny --steps 2 --strategy hybrid --hybrid-group 2 --precision bf16 \
  --reduce-dtype bf16 --losses hybrid.csv --trace hybrid.json
grep -q "step 3/3" "$work/processes/gpt2.txt"

# A world that is not the launcher's is refused before anything starts, by every process.
if "$mpirun" -np 2 "$fsdplab" run --device sim --comm mpi --world 3 --model gpt2 > "$work/bad_world.txt" 2>&1; then
  echo "FAIL: --world 3 under mpirun -np 2 was accepted"
  exit 1
fi
grep -q -- "--world 3 but the MPI launcher started 2 processes" "$work/bad_world.txt"
echo "ok: --world 3 under mpirun -np 2 refused"
