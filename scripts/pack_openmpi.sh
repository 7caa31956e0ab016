#!/usr/bin/env bash
# Open MPI for a GPU machine that has none, so that `mpirun -np N fsdplab run --comm nccl` runs there
# (scripts/gpu_checks.sh's nccl_mpirun). ../shared/gpu/pack.sh carries the libraries fsdplab links, libmpi among
# them, but not mpirun, its plugins, help texts and settings, nor PMIx's.
#   bash scripts/pack_openmpi.sh             here, after pack.sh: writes .gpu/openmpi.tar.xz, the files of this
#                                            machine's Open MPI and PMIx packages and every library they load
#                                            (C and C++ runtimes aside), at the paths they have here
#   bash scripts/pack_openmpi.sh --install   on the GPU machine (root), where no mpirun is found: unpacks it into /,
#                                            keeping every file already there, and says what it did
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu/openmpi.tar.xz

if [[ ${1:-} == --install ]]; then
  if command -v mpirun >/dev/null; then
    echo "pack_openmpi.sh: this machine has $(command -v mpirun) ($(mpirun --version 2>&1 | head -1)); nothing unpacked"
    exit 0
  fi
  [[ -f $bundle ]] || { echo "pack_openmpi.sh: no $bundle; run bash scripts/pack_openmpi.sh where fsdplab was built" >&2; exit 1; }
  tar -C / --skip-old-files -xJf "$bundle"
  # Debian names it mpirun through its alternatives, which a package's file list does not hold.
  [[ -e /usr/bin/mpirun ]] || ln -s mpirun.openmpi /usr/bin/mpirun
  ldconfig
  echo "pack_openmpi.sh: unpacked $bundle into /: $(mpirun --version 2>&1 | head -1)"
  exit 0
fi

[[ -d .gpu ]] || { echo "pack_openmpi.sh: no .gpu/; run bash ../shared/gpu/pack.sh first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "pack_openmpi.sh: no mpirun here (bash scripts/install-deps.sh installs it)" >&2; exit 1; }
# The packages of mpirun, libmpi with its plugins, Open MPI's help texts and settings, and PMIx with its plugins.
packages=$(for f in "$(readlink -f "$(command -v mpirun)")" "$(readlink -f /usr/lib/x86_64-linux-gnu/libmpi.so.40)" \
             /usr/share/openmpi /etc/openmpi "$(readlink -f /usr/lib/x86_64-linux-gnu/libpmix.so.2)"; do
             dpkg -S "$f" | cut -d: -f1
           done | sort -u)
files=$(mktemp)
trap 'rm -f "$files"' EXIT
dpkg -L $packages | grep -vE '^/usr/share/(doc|man|lintian)/' | while read -r f; do
  [[ -f $f || -L $f ]] && echo "$f"
done | sort -u >"$files"
# Every library those files load, but the C and C++ runtimes, which every machine has: its name (the folder's
# links resolved, /lib being /usr/lib here) and the file it names. ldd fails on the files that are not programs.
{ xargs -a "$files" ldd 2>/dev/null || true; } | awk '$3 ~ /^\// {print $3}' | sort -u |
  { grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' || true; } |
  while read -r lib; do echo "$(readlink -f "$(dirname "$lib")")/$(basename "$lib")"; readlink -f "$lib"; done |
  sort -u >>"$files"
tar -C / -cf - --files-from=<(sed 's|^/||' "$files" | sort -u) | xz -T0 -6 >"$bundle"
echo "pack_openmpi.sh: $bundle $(du -h "$bundle" | cut -f1) ($(wc -l <"$files") files of: $(echo $packages)); on the GPU machine: bash scripts/pack_openmpi.sh --install"
