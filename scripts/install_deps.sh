#!/usr/bin/env bash
# Installs everything the build needs, idempotently: Debian packages (when run as root; otherwise prints
# the apt-get command) and the pinned PyPI tools in a project-local virtual environment (.venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

debian_packages=(g++ make pkg-config python3 python3-venv libgtest-dev libbenchmark-dev libopenblas-dev
                 clang libclang-rt-14-dev gnuplot-nox libpng-dev
                 g++-aarch64-linux-gnu qemu-user pocl-opencl-icd ocl-icd-libopencl1)
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    echo "missing Debian packages; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

venv="$root/.venv"
requirements="$root/scripts/requirements.txt"
stamp="$venv/.requirements.installed"
if [[ ! -x "$venv/bin/python" ]]; then
  # Debian's python3 (python3-venv above) so the venv does not depend on a user's pyenv.
  /usr/bin/python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
