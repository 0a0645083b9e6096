#!/bin/bash
# Runs kernels/classifier.cu and kernels/layernorm.cu on the CPU under fused_emu.cpp's
# emulation (no GPU needed), built with AddressSanitizer: every kernel, dtype and path against
# f64 references within the GPU tests' bounds. A few minutes.
# Usage: bash crates/genesis-kernels/tests/emu/fused_run.sh [0 all | 1 classifier | 2 layernorm]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in classifier layernorm; do
  # The CUDA headers out; dynamic shared memory from the emulator.
  sed -e '/#include <cuda_bf16.h>/d' -e '/#include <cuda_fp16.h>/d' \
      -e 's/extern __shared__ __align__(16) float \([a-z]*\)\[\];/float *\1 = (float *)emu_dyn_smem();/' \
      "$root/kernels/$k.cu" > "$tmp/${k}_host.inc"
  if grep -q 'extern __shared__' "$tmp/${k}_host.inc"; then echo "$k.cu: unhandled extern __shared__" >&2; exit 1; fi
done
g++ -std=c++20 -O1 -g -pthread -fsanitize=address -fno-omit-frame-pointer -I"$tmp" -I"$root/kernels" "$here/fused_emu.cpp" -o "$tmp/fused_emu"
ASAN_OPTIONS=detect_leaks=0 "$tmp/fused_emu" "${1:-0}"
