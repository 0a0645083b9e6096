#!/bin/bash
# Runs kernels/attention.cu on the CPU under attention_emu.cpp's emulation (no GPU needed):
# every kernel of both dtypes and head dims on shapes with tails, causal and not, GPT-2's
# strided layout, against an f64 reference within the GPU test's bound. A few minutes.
# Usage: bash crates/genesis-kernels/tests/emu/run.sh [64|128]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/gen.py" "$root/kernels/attention.cu" "$tmp/attn_host.inc"
g++ -std=c++20 -O2 -pthread -I"$here" -I"$tmp" -I"$root/kernels" "$here/attention_emu.cpp" -o "$tmp/attention_emu"
"$tmp/attention_emu" "${1:-0}"
