#!/usr/bin/env bash
# Runs bench/cpu_peers.py, the CPU peers of sdpa_bench (PyTorch's and OpenVINO's SDPA, fp32 and bf16),
# in its own virtual environment .venv-peers, created and filled from scripts/requirements-peers.txt on
# first use (a ~3 GB download from PyPI: torch brings its CUDA packages). Nothing goes into .venv.
# Usage: scripts/cpu_peers.sh [--shapes 0,2] [--threads N] [--runs N] [--json FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-peers"
requirements="$root/scripts/requirements-peers.txt"
stamp="$venv/.requirements.installed"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
exec "$venv/bin/python" "$root/bench/cpu_peers.py" "$@"
