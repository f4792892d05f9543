#!/usr/bin/env bash
# Download, on a machine with the package index, the wheels bench/gpu_session.sh installs on a GPU machine
# that has none of them (the H200 image has Python 3.12, torch, transformers and safetensors, but no
# megatron-core or omegaconf, and reaches no index): into .whl/ (git-ignored: give the device tool `carry: [".whl"]`).
# Versions are constraints-gpu.txt's, so the GPU run exercises the megatron-core that CI's Python 3.12
# leg tests and the container installs.
#
#   bash bench/gpu_wheels.sh            # cp312, manylinux x86_64
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.whl"
mkdir -p "$dest"
pins=()
for name in megatron-core omegaconf antlr4-python3-runtime math-verify latex2sympy2_extended; do
    line="$(grep -iE "^${name}==" "$root/constraints-gpu.txt" "$root/constraints-cpu.txt" -h | head -n 1)"
    [ -n "$line" ] || { echo "no pin for $name in constraints-gpu.txt or constraints-cpu.txt" >&2; exit 1; }
    pins+=("$line")
done
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$dest" --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --only-binary=:all: "${pins[@]}"
ls -l "$dest"
