#!/usr/bin/env bash
# The whole test suite: setup (install + build), then ctest over every label but
# `slow` (opt-in: AGENTQ_TEST_SLOW=1), then the unit tests once more under
# ASan+UBSan, built for x86-64-v3 (the AVX2 kernels, where the main build on an
# AVX-512 host takes the AVX-512 ones). Tests that need Redis start their own redis-server on a free port.
#   AGENTQ_SANITIZE_SCOPE=full (default: engine and service unit tests) or engine
#   (the engine-only build: model/tokenizer/JSON parsers, kernels, KV; a shorter second build).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

jobs=$(nproc)
label_args=(-LE slow)
[ "${AGENTQ_TEST_SLOW:-0}" = 1 ] && label_args=()

status=0
asan_pid=""
if [ "${AGENTQ_SKIP_SANITIZE:-0}" != 1 ]; then
  engine_only=ON
  [ "${AGENTQ_SANITIZE_SCOPE:-full}" = full ] && engine_only=OFF
  # NOTE: the sanitizer build runs during the main ctest at nice 19, in its own process group: it
  # takes the CPU the tests leave idle (they wait on redis, HTTP and child processes) and yields
  # to them otherwise (nice 0 outweighs 19 by ~70x), then gets its priority back when ctest ends.
  # No npm ci there: the browser test may be running.
  mkdir -p build-asan
  AGENTQ_SETUP_NPM=0 AGENTQ_BUILD_DIR=build-asan AGENTQ_BUILD_TARGETS=agentq_unit_tests AGENTQ_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTQ_SANITIZE=ON -DAGENTQ_MARCH=x86-64-v3 -DAGENTQ_CUDA=OFF -DAGENTQ_ENGINE_ONLY=$engine_only" \
    setsid -w nice -n 19 ./scripts/setup.sh >build-asan/setup.log 2>&1 </dev/null &
  asan_pid=$!
  trap '[ -n "$asan_pid" ] && kill -- -"$asan_pid" 2>/dev/null' EXIT
fi

(cd build && ctest --output-on-failure -j "$jobs" "${label_args[@]}") || status=1

if [ -n "$asan_pid" ]; then
  renice -n 0 -g "$asan_pid" >/dev/null 2>&1 || true  # back to normal priority (needs root; else stays 19)
  echo "== unit tests under ASan+UBSan (build log: build-asan/setup.log)"
  asan_build=0
  wait "$asan_pid" || asan_build=$?
  asan_pid=""
  cat build-asan/setup.log
  if [ "$asan_build" -ne 0 ]; then
    echo "test.sh: the ASan+UBSan build failed"
    status=1
  else
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -L unit) || status=1
  fi
fi

if [ $status -ne 0 ]; then
  echo "test.sh: FAILED"
else
  echo "test.sh: all tests passed"
fi
exit $status
