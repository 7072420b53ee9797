#!/usr/bin/env bash
# Runs kernels/cuda/matvec_quants.cuh's row dots on the CPU (a warp's 32 lanes one by one) against
# the CPU dequantizer: the lane mappings and index math of the per-format CUDA matvec, checked
# where no GPU is (it does not check alignment, timing or anything device-specific).
#   scripts/dev/cuda_lanes.sh      (needs build/kernels/libagentq_kernels.a: cmake --build build --target agentq_kernels)
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${AGENTQ_BUILD_DIR:-build}/kernels/libagentq_kernels.a
[ -f "$lib" ] || { echo "missing $lib" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp scripts/dev/cuda_lanes/common.cuh "$tmp/"
# fmaf -> the host's fused multiply-add (the device fmaf is fused too)
sed 's/fmaf(/fmaf_(/g' kernels/cuda/matvec_quants.cuh > "$tmp/matvec_quants.cuh"
g++ -std=c++20 -O1 -Ikernels/include -I"$tmp" scripts/dev/cuda_lanes/lanes.cpp "$lib" -o "$tmp/lanes"
"$tmp/lanes"
