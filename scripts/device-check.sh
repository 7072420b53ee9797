#!/usr/bin/env bash
# The one prepared check for a CUDA machine (H100/H200, CUDA 13, CMake + ninja + a C++
# compiler, none of the Debian deps): engine-only build with the CUDA backend; the gpu tests
# (every kernel vs its C++ reference, the engine on the GPU vs on the CPU: greedy tokens,
# residency, spill/restore, failed state) and the device unit tests; then the engine on
# synthetic 1B/8B-class F16 and Q4_K models: batch-1 decode as a fraction of the HBM
# roofline, aggregate decode at 32 and 128 sequences, a multi-turn residency run; last the
# kernel microbenchmark table. Budget: under 5 minutes on one H200 (phases past BUDGET_S
# seconds are skipped and say so). Exit status: 0 when every test passed.
#   scripts/device-check.sh   (env: BUILD=build-device CUDA_ARCH=90a JOBS=$(nproc) BUDGET_S=280
#                              MODELS="8b:f16 8b:q4_k 1b:f16 1b:q4_k" MODEL_DIR=$BUILD/models
#                              BUILD_TIMEOUT_S=240 CMAKE_ARGS="extra configure flags, e.g. ccache launchers")
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
start=$(date +%s)
build=${BUILD:-build-device}
arch=${CUDA_ARCH:-90a}
jobs=${JOBS:-$(nproc)}
budget=${BUDGET_S:-280}
models=${MODELS:-"8b:f16 8b:q4_k 1b:f16 1b:q4_k"}
model_dir=${MODEL_DIR:-$build/models}
elapsed() { echo $(( $(date +%s) - start )); }
in_budget() { [ "$(elapsed)" -lt "$budget" ]; }

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
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAGENTQ_ENGINE_ONLY=ON -DAGENTQ_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DAGENTQ_DOCTEST_DIR="$PWD/.deps/include" ${CMAKE_ARGS:-} >"$build/device-check.configure.log" 2>&1 \
  || { tail -30 "$build/device-check.configure.log"; exit 2; }
# Only what the check runs: every gpu test (tests/gpu/<stem>.cpp -> test_<stem>), the CPU reference
# and device-selection unit tests, the benchmarks and the synthetic model writer.
targets=(test_cuda_reference test_engine_device agentq-bench_cuda agentq-bench_engine agentq-bench_sched agentq-mkgguf)
for f in tests/gpu/*.cpp; do targets+=("test_$(basename "$f" .cpp)"); done
if ! timeout "${BUILD_TIMEOUT_S:-240}" cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/device-check.build.log" 2>&1; then
  grep -E "error|FAILED" "$build/device-check.build.log" | head -40
  exit 2
fi
echo "built in $(elapsed) s"
bin=$build/bin

# The vocab the synthetic models borrow: ../shared beside the checkout, or shared/ inside it.
vocab=""
for d in "${AGENTQ_SHARED_DIR:-../shared}" shared; do
  [ -f "$d/models/vocab/ggml-vocab-llama-spm.gguf" ] && { vocab="$d/models/vocab/ggml-vocab-llama-spm.gguf"; break; }
done
have_gpu=0
if [ "$(nvidia-smi -L 2>/dev/null | grep -c GPU)" -gt 0 ] || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then have_gpu=1; fi

# Synthetic models are written in the background while the tests run (CPU work beside GPU work).
gen_pid=""
if [ $have_gpu = 1 ] && [ -n "$vocab" ]; then
  mkdir -p "$model_dir"
  (
    child=""
    trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 1' TERM
    for m in $models; do
      f="$model_dir/synth-${m%%:*}-${m##*:}.gguf"
      [ -f "$f" ] && continue  # kept from an earlier run
      "$bin/agentq-mkgguf" --out "$f.tmp" --shape "${m%%:*}" --type "${m##*:}" --vocab "$vocab" \
        --threads "$jobs" >"$f.log" 2>&1 &
      child=$!
      if wait "$child"; then mv -f "$f.tmp" "$f"; fi
    done
  ) &
  gen_pid=$!
fi

status=0
echo "== tests"
(cd "$build" && timeout 150 ctest -L gpu --output-on-failure) || status=1
(cd "$build" && timeout 60 ctest -R "unit\.(cuda_reference|engine_device)" --output-on-failure) || status=1

declare -A tg roof agg1 agg32 agg128
echo "== engine on synthetic models (elapsed $(elapsed) s)"
if [ $have_gpu = 0 ]; then
  echo "no GPU: engine benchmarks skipped"
elif [ -z "$vocab" ]; then
  echo "no vocab GGUF (../shared/models/vocab or shared/models/vocab): engine benchmarks skipped"
else
  field() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" | head -1; }
  for m in $models; do
    f="$model_dir/synth-${m%%:*}-${m##*:}.gguf"
    # Each model is benchmarked as soon as it is written (the next one is generated meanwhile).
    while [ ! -f "$f" ] && kill -0 "$gen_pid" 2>/dev/null && in_budget; do sleep 1; done
    if ! in_budget; then echo "$m: skipped (time budget)"; continue; fi
    if [ ! -f "$f" ]; then echo "$m: not generated (see $f.log)"; continue; fi
    j=$(timeout 90 "$bin/agentq-bench_engine" --device cuda --pp 512 --tg 128 --reps 1 "$f" 2>"$build/bench_engine.$m.log" | tail -1)
    tg[$m]=$(echo "$j" | field tg128_tokens_per_s)
    roof[$m]=$(echo "$j" | field roofline_fraction)
    j=$(timeout 120 "$bin/agentq-bench_sched" scaling --device cuda --model "$f" --concurrency 1,32,128 --gen 32 \
        --prompt 16 --kv-mib 4096 2>"$build/bench_sched.$m.log" | tail -1)
    agg1[$m]=$(echo "$j" | sed -n 's/.*"1":\([0-9.]*\).*/\1/p')
    agg32[$m]=$(echo "$j" | sed -n 's/.*"32":\([0-9.]*\).*/\1/p')
    agg128[$m]=$(echo "$j" | sed -n 's/.*"128":\([0-9.]*\).*/\1/p')
  done
  printf "\n%-10s | %9s %8s | %9s %9s %9s %9s\n" "model" "b1 tok/s" "%HBMroof" "c=1" "c=32" "c=128" "128/b1"
  for m in $models; do
    [ -n "${tg[$m]:-}" ] || [ -n "${agg1[$m]:-}" ] || continue
    awk -v m="$m" -v t="${tg[$m]:-0}" -v r="${roof[$m]:-0}" -v a="${agg1[$m]:-0}" -v b="${agg32[$m]:-0}" -v c="${agg128[$m]:-0}" \
      'BEGIN { printf "%-10s | %9.1f %7.1f%% | %9.1f %9.1f %9.1f %8.1fx\n", m, t, 100 * r, a, b, c, (t > 0 ? c / t : 0) }'
  done
  echo "(b1: bench_engine tg128 on one sequence; c=N: bench_sched aggregate generated tok/s, N sequences)"
  echo "targets: 8b:f16 b1 >= 75% of HBM roofline; c=128 >= 20x b1"

  # Multi-turn residency: jobs share a system prompt; each turn appends a tool result.
  rf="$model_dir/synth-1b-f16.gguf"
  if [ -f "$rf" ] && in_budget; then
    echo
    for reuse in 1 0; do
      j=$(timeout 90 "$bin/agentq-bench_sched" agent --device cuda --model "$rf" --jobs 16 --turns 4 --system 256 \
          --tool 64 --gen 16 --reuse $reuse --kv-mib 4096 2>/dev/null | tail -1)
      echo "$j" | awk -v r=$reuse -v n="$(echo "$j" | field new_tokens_per_turn)" -v c="$(echo "$j" | field computed_tokens_per_turn)" \
        -v k="$(echo "$j" | field cached_tokens_per_turn)" -v w="$(echo "$j" | field wall_s)" \
        'BEGIN { printf "residency 1b:f16 16 jobs x 4 turns, reuse %d: new %.1f, computed %.1f, cached %.1f tokens/turn; wall %.2f s\n", r, n, c, k, w }'
    done
  elif [ -f "$rf" ]; then
    echo "residency: skipped (time budget)"
  fi
fi

[ -n "$gen_pid" ] && kill "$gen_pid" 2>/dev/null  # models still being written past the budget
echo "== kernels (elapsed $(elapsed) s)"
if in_budget; then
  timeout 90 "$bin/agentq-bench_cuda" --iters 20
  rc=$?
  [ $rc = 0 ] || [ $rc = 77 ] || status=1  # 77: no device (bench skipped)
else
  echo "agentq-bench_cuda: skipped (time budget)"
fi

echo "== done in $(elapsed) s, status $status"
exit $status
