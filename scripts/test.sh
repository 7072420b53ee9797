#!/usr/bin/env bash
# The whole test suite: setup (install + build), then ctest over every label but
# `slow` (opt-in: AGENTQ_TEST_SLOW=1), then the unit tests once more under
# ASan+UBSan. Tests that need Redis start their own redis-server on a free port.
#   AGENTQ_SANITIZE_SCOPE=full (default: engine and service unit tests) or engine
#   (the engine-only build: model/tokenizer/JSON parsers, kernels, KV; a shorter second build).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

jobs=$(nproc)
label_args=(-LE slow)
[ "${AGENTQ_TEST_SLOW:-0}" = 1 ] && label_args=()

status=0
(cd build && ctest --output-on-failure -j "$jobs" "${label_args[@]}") || status=1

if [ "${AGENTQ_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== unit tests under ASan+UBSan"
  engine_only=ON
  [ "${AGENTQ_SANITIZE_SCOPE:-full}" = full ] && engine_only=OFF
  AGENTQ_BUILD_DIR=build-asan AGENTQ_BUILD_TARGETS=agentq_unit_tests AGENTQ_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTQ_SANITIZE=ON -DAGENTQ_CUDA=OFF -DAGENTQ_ENGINE_ONLY=$engine_only" \
    ./scripts/setup.sh
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -L unit) || status=1
fi

if [ $status -ne 0 ]; then
  echo "test.sh: FAILED"
else
  echo "test.sh: all tests passed"
fi
exit $status
