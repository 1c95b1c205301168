#!/usr/bin/env bash
# Installs everything the build needs, idempotently: Debian packages (when run as root; otherwise prints
# the apt-get command) and the pinned PyPI tools in a project-local virtual environment (.venv).
# --list prints the Debian packages and exits (scripts/check_clean_machine.py reads it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# googletest: the sources the aarch64 cross build compiles (libgtest-dev depends on it; named here
# because the build uses it directly). libopenblas-dev and libdnnl-dev: the benchmark's peers.
debian_packages=(g++ make pkg-config python3 python3-venv libgtest-dev googletest libbenchmark-dev
                 libopenblas-dev libdnnl-dev clang libclang-rt-14-dev gnuplot-nox libpng-dev
                 g++-aarch64-linux-gnu qemu-user pocl-opencl-icd ocl-icd-libopencl1)
if [[ ${1:-} == --list ]]; then
  echo "${debian_packages[@]}"
  exit 0
fi
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
