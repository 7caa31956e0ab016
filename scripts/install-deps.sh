#!/usr/bin/env bash
# Installs the Debian packages fsdplab builds and tests with. Idempotent: packages already present are
# skipped, so a second run does nothing and needs no network.
#   scripts/install-deps.sh            engine, CLI and tests
#   scripts/install-deps.sh --gui      also the dashboard's ImGui, GLFW and Mesa (OpenGL, and EGL for screenshots)
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config git
          libopenblas-dev nlohmann-json3-dev libcli11-dev libgtest-dev python3
          libopenmpi-dev openmpi-bin)
if [[ "${1:-}" == "--gui" ]]; then
  packages+=(libimgui-dev libglfw3-dev libgl1-mesa-dri libglx-mesa0 libegl-dev libegl-mesa0 libstb-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
