#!/usr/bin/env bash
# The one prepared check for a CUDA machine (H100/H200, CUDA 13, CMake + ninja + a C++
# compiler, none of the Debian deps): engine-only build with the CUDA backend, the gpu
# tests (every kernel vs its C++ reference) and the CPU reference test, then the decode
# microbenchmark table. Budget: under 5 minutes. Exit status: 0 when every test passed.
#   scripts/device-check.sh            (env: BUILD=build-device CUDA_ARCH=90a JOBS=$(nproc))
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
build=${BUILD:-build-device}
arch=${CUDA_ARCH:-90a}
jobs=${JOBS:-$(nproc)}

# doctest: carried as a single header (the machine has no doctest package).
if [ -f /usr/include/doctest/doctest.h ]; then
  mkdir -p .deps/include/doctest && cp /usr/include/doctest/doctest.h .deps/include/doctest/doctest.h
fi
if [ ! -f .deps/include/doctest/doctest.h ]; then
  echo "device-check: need .deps/include/doctest/doctest.h (copy /usr/include/doctest/doctest.h there)" >&2
  exit 2
fi
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH

echo "== device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi unavailable)"
nvcc --version | tail -1

echo "== configure + build ($arch, -j$jobs)"
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAGENTQ_ENGINE_ONLY=ON -DAGENTQ_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DAGENTQ_DOCTEST_DIR="$PWD/.deps/include" >"$build/device-check.configure.log" 2>&1 \
  || { tail -30 "$build/device-check.configure.log"; exit 2; }
# Only what the check runs: every gpu test (tests/gpu/<stem>.cpp -> test_<stem>), the CPU reference test, the bench.
targets=(test_cuda_reference agentq-bench_cuda)
for f in tests/gpu/*.cpp; do targets+=("test_$(basename "$f" .cpp)"); done
if ! timeout 200 cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/device-check.build.log" 2>&1; then
  grep -E "error|FAILED" "$build/device-check.build.log" | head -40
  exit 2
fi
echo "built in $(( $(date +%s) - start )) s"

status=0
echo "== tests"
(cd "$build" && timeout 120 ctest -L gpu --output-on-failure) || status=1
(cd "$build" && timeout 60 ctest -R unit.cuda_reference --output-on-failure) || status=1

echo "== bench"
timeout 120 "$build/bin/agentq-bench_cuda" --iters 30
rc=$?
[ $rc = 0 ] || [ $rc = 77 ] || status=1  # 77: no device (bench skipped)

echo "== done in $(( $(date +%s) - start )) s, status $status"
exit $status
