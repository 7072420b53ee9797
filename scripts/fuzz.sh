#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan+UBSan) and run each for a bounded time
# on its committed seed corpus (tests/fuzz/corpus/<target>/). New inputs go to
# build-fuzz/corpus/<target>/; crashes to build-fuzz/crashes/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is required (apt-get install clang libclang-rt-14-dev)"; exit 2; }
engine_only=${AGENTQ_FUZZ_ENGINE_ONLY:-OFF}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTQ_FUZZ=ON \
  -DAGENTQ_CUDA=OFF -DAGENTQ_ENGINE_ONLY=$engine_only -DBUILD_TESTING=ON >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi
cmake --build build-fuzz --target "${targets[@]}" -j "$(nproc)"

mkdir -p build-fuzz/crashes
export AGENTQ_SHARED_DIR=${AGENTQ_SHARED_DIR:-$PWD/../shared}
status=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}; name=${name#svc_}
  mkdir -p "build-fuzz/corpus/$name"
  seeds=()
  [ -d "tests/fuzz/corpus/$name" ] && seeds=("tests/fuzz/corpus/$name")
  echo "== $t for ${secs}s"
  if ! "build-fuzz/bin/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="build-fuzz/crashes/$t-" "build-fuzz/corpus/$name" "${seeds[@]}" 2>"build-fuzz/$t.log"; then
    echo "fuzz.sh: $t FOUND A CRASH (see build-fuzz/$t.log and build-fuzz/crashes/)"
    status=1
  fi
  grep -E "^#[0-9]+.*(DONE|pulse)" "build-fuzz/$t.log" | tail -1 || true
done
exit $status
