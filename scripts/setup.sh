#!/usr/bin/env bash
# Idempotent setup: install missing Debian packages, configure and build.
#   AGENTQ_BUILD_DIR   build directory (default: build)
#   AGENTQ_CMAKE_ARGS  extra CMake arguments
#   AGENTQ_BUILD_TARGETS  build only these targets (default: all)
#   AGENTQ_SETUP_NPM   0: skip npm ci for the browser test (default: 1)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libboost1.81-dev libhiredis-dev libsqlite3-dev
  nlohmann-json3-dev libspdlog-dev doctest-dev libssl-dev redis-server sqlite3 curl python3 xz-utils
  # xz-utils: unit.tokenizer_family_vocab unpacks the committed vocab GGUFs (tests/data/vocab/*.xz)
  prometheus  # prometheus: promtool, which tests/e2e/metrics_promtool.sh runs on GET /metrics
  chromium nodejs)  # the dashboard's browser test, tests/e2e/ui_browser.sh
# npm comes with some nodejs builds; Debian packages it apart
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The dashboard's browser test (tests/e2e/ui_browser.sh) drives the system chromium with playwright-core;
# tests/e2e/node holds the real client libraries other e2e tests use (standardwebhooks).
# NOTE: npm ci (network-bound) runs alongside the build instead of after it.
npm_pid=""
if [ "${AGENTQ_SETUP_NPM:-1}" = 1 ] && command -v npm >/dev/null; then
  (
    rc=0
    [ -d tests/e2e/ui/node_modules/playwright-core ] ||
      npm ci --prefix tests/e2e/ui --no-audit --no-fund --loglevel=error >/dev/null || rc=1
    # re-run when package-lock.json is newer than the install (a dependency was added)
    [ tests/e2e/node/node_modules/.package-lock.json -nt tests/e2e/node/package-lock.json ] ||
      npm ci --prefix tests/e2e/node --no-audit --no-fund --loglevel=error >/dev/null || rc=1
    exit $rc
  ) &
  npm_pid=$!
fi

build_dir=${AGENTQ_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja ${AGENTQ_CMAKE_ARGS:-} >/dev/null
targets=()
for t in ${AGENTQ_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
echo "setup: built into $build_dir/bin"

if [ -n "$npm_pid" ]; then
  wait "$npm_pid" || echo "setup: npm ci in tests/e2e/ui or tests/e2e/node failed; the tests needing them will be skipped"
fi
