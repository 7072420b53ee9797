#!/usr/bin/env bash
# The one prepared check for a CUDA machine (H100/H200, CUDA 13, CMake + ninja + a C++
# compiler, none of the Debian deps): engine-only build with the CUDA backend; the gpu tests
# (every kernel vs its C++ reference, the engine on the GPU vs on the CPU: greedy tokens,
# residency, spill/restore, failed state; every registered model family vs llama.cpp's reference
# tokens and the CPU engine: gpu.cuda_families, its new kernels: gpu.cuda_family_ops; windowed KV
# on the device: gpu.engine_cuda_windowed; every tests/gpu/*.cpp is built and run) and the
# device unit tests; then the engine on
# synthetic 1B/8B-class F16 and Q4_K models: batch-1 decode as a fraction of the HBM
# roofline, aggregate decode at 32 and 128 sequences, a multi-turn residency run; last the
# kernel microbenchmark table. Budget: under 5 minutes on one H200 (phases past BUDGET_S
# seconds are skipped and say so). Exit status: 0 when every test passed.
#   scripts/device-check.sh   (env: BUILD=build-device CUDA_ARCH=90a JOBS=$(nproc) BUDGET_S=280
#                              MODELS="8b:f16 8b:q4_k 1b:f16 1b:q4_k" MODEL_DIR=$BUILD/models
#                              BUILD_TIMEOUT_S=240 CMAKE_ARGS="extra configure flags"
#                              SCALING_110M=0 (skip the 110M 1/4/16/64 scaling run)
#                              VARIANTS="1x4 2x4" (the first model's decode per f16 matvec variant)
#                              PREBUILT=dir of binaries built elsewhere for this arch, used when
#                                they start here (saves the build's minutes of device time)
#                              LOG_DIR=where full test and benchmark logs go (default $OUT or $BUILD))
# Shared data (the tiny model, golden outputs, a vocab GGUF) comes from ../shared beside the
# checkout or shared/ inside it; on a GPU machine a test that skips counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
start=$(date +%s)
build=${BUILD:-build-device}
arch=${CUDA_ARCH:-90a}
jobs=${JOBS:-$(nproc)}
budget=${BUDGET_S:-280}
models=${MODELS:-"8b:f16 8b:q4_k 1b:f16 1b:q4_k"}
model_dir=${MODEL_DIR:-$build/models}
log_dir=${LOG_DIR:-${OUT:-$build}}
elapsed() { echo $(( $(date +%s) - start )); }
in_budget() { [ "$(elapsed)" -lt "$budget" ]; }
mkdir -p "$build" "$log_dir"
tests_log=$log_dir/tests.log
bench_log=$log_dir/bench.log
: >"$tests_log"
: >"$bench_log"

shared=""
for d in "${AGENTQ_SHARED_DIR:-../shared}" shared; do
  [ -f "$d/models/stories260K.gguf" ] && { shared=$(cd "$d" && pwd); break; }
done
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

echo "== device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.memory,driver_version --format=csv,noheader 2>/dev/null \
  || echo "(nvidia-smi unavailable)"
nvcc --version 2>/dev/null | tail -1
have_gpu=0
if [ "$(nvidia-smi -L 2>/dev/null | grep -c GPU)" -gt 0 ] || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then have_gpu=1; fi

targets=(test_cuda_reference test_cuda_reference_forward test_engine_device agentq-bench_cuda agentq-bench_engine agentq-bench_sched agentq-mkgguf)
for f in tests/gpu/*.cpp; do targets+=("test_$(basename "$f" .cpp)"); done

# Binaries built elsewhere run when every library they need resolves and they start.
bin=""
if [ -n "${PREBUILT:-}" ] && [ -d "$PREBUILT" ]; then
  ok=1
  for t in "${targets[@]}"; do
    if [ ! -x "$PREBUILT/$t" ] || ldd "$PREBUILT/$t" | grep -q "not found"; then ok=0; fi
  done
  "$PREBUILT/agentq-mkgguf" --version >/dev/null 2>&1; [ $? -ge 126 ] && ok=0  # 126/127: would not exec
  if [ $ok = 1 ]; then
    bin=$(cd "$PREBUILT" && pwd)
    echo "== using prebuilt binaries in $PREBUILT"
  else
    echo "== prebuilt binaries in $PREBUILT do not start here: building"
    ldd "$PREBUILT/agentq-bench_cuda" 2>&1 | grep "not found" | head -5
  fi
fi
if [ -z "$bin" ]; then
  # doctest: carried as a single header (the machine has no doctest package).
  if [ -f /usr/include/doctest/doctest.h ]; then
    mkdir -p .deps/include/doctest && cp /usr/include/doctest/doctest.h .deps/include/doctest/doctest.h
  fi
  if [ ! -f .deps/include/doctest/doctest.h ]; then
    echo "device-check: need .deps/include/doctest/doctest.h (copy /usr/include/doctest/doctest.h there)" >&2
    exit 2
  fi
  echo "== configure + build ($arch, -j$jobs)"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAGENTQ_ENGINE_ONLY=ON -DAGENTQ_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DAGENTQ_DOCTEST_DIR="$PWD/.deps/include" ${CMAKE_ARGS:-} \
    >"$log_dir/build.log" 2>&1 || { tail -30 "$log_dir/build.log"; exit 2; }
  if ! timeout "${BUILD_TIMEOUT_S:-240}" cmake --build "$build" -j "$jobs" --target "${targets[@]}" >>"$log_dir/build.log" 2>&1; then
    grep -E "error|FAILED" "$log_dir/build.log" | head -40
    exit 2
  fi
  echo "built in $(elapsed) s"
  bin=$(cd "$build/bin" && pwd)
fi

# Synthetic models are written in the background while the tests run (CPU work beside GPU work).
vocab=""
[ -n "$shared" ] && [ -f "$shared/models/vocab/ggml-vocab-llama-spm.gguf" ] && vocab="$shared/models/vocab/ggml-vocab-llama-spm.gguf"
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

# Each test runs alone with its full output in tests.log; 77 (skipped) is a failure where a GPU is.
status=0
run_test() {
  local t=$1 t0 rc
  t0=$(date +%s)
  echo "===== $t" >>"$tests_log"
  (cd "$build" && AGENTQ_SOURCE_DIR="$root" AGENTQ_BIN_DIR="$bin" AGENTQ_SHARED_DIR="${shared:-/nonexistent}" \
    timeout "${2:-150}" "$bin/$t") >>"$tests_log" 2>&1
  rc=$?
  local verdict=passed
  if [ $rc = 77 ]; then
    verdict=skipped
    [ $have_gpu = 1 ] && { verdict="SKIPPED ON A GPU MACHINE"; status=1; }
  elif [ $rc != 0 ]; then
    verdict="FAILED (exit $rc)"
    status=1
    failed+=("$t")
  fi
  printf "%-28s %s in %d s\n" "$t" "$verdict" $(( $(date +%s) - t0 ))
}
failed=()
echo "== tests (elapsed $(elapsed) s; full output in $tests_log)"
for t in "${targets[@]}"; do
  case $t in test_*) run_test "$t" ;; esac
done
# A failing GPU test is rerun once under compute-sanitizer's memcheck (where the runtime has it)
# so one device session yields both the failure and the first bad access.
if [ ${#failed[@]} -gt 0 ] && command -v compute-sanitizer >/dev/null && in_budget; then
  t=${failed[0]}
  echo "== compute-sanitizer memcheck: $t (output in tests.log)"
  echo "===== compute-sanitizer $t" >>"$tests_log"
  (cd "$build" && AGENTQ_SOURCE_DIR="$root" AGENTQ_BIN_DIR="$bin" AGENTQ_SHARED_DIR="${shared:-/nonexistent}" \
    timeout 90 compute-sanitizer --tool memcheck --print-limit 20 "$bin/$t") >>"$tests_log" 2>&1
  grep -m 12 -E "Invalid|Error|=========  at|FAILED|ERROR" "$tests_log" | tail -12
fi
if [ $status != 0 ]; then
  echo "-- failures (first lines; the rest in tests.log):"
  grep -E "ERROR|FAILED|error:|Assertion|what\(\)|CHECK|REQUIRE|terminate" "$tests_log" | head -30
fi

declare -A tg roof agg1 agg32 agg128
echo "== engine on synthetic models (elapsed $(elapsed) s)"
if [ $have_gpu = 0 ]; then
  echo "no GPU: engine benchmarks skipped"
elif [ -z "$vocab" ]; then
  echo "no vocab GGUF (../shared/models/vocab or shared/models/vocab): engine benchmarks skipped"
else
  # The first "key":number of a JSON line (bench_engine's cpu_clock block repeats the keys).
  field() { grep -o "\"$1\":[0-9.eE+-]*" | head -1 | cut -d: -f2; }
  # The aggregate tok/s for concurrency $1 in bench_sched's "scaling" map.
  scaling() { grep -o '"scaling":{[^}]*}' | grep -o "\"$1\":[0-9.eE+-]*" | head -1 | cut -d: -f2; }
  for m in $models; do
    f="$model_dir/synth-${m%%:*}-${m##*:}.gguf"
    # Each model is benchmarked as soon as it is written (the next one is generated meanwhile).
    while [ ! -f "$f" ] && kill -0 "$gen_pid" 2>/dev/null && in_budget; do sleep 1; done
    if ! in_budget; then echo "$m: skipped (time budget)"; continue; fi
    if [ ! -f "$f" ]; then echo "$m: not generated:"; tail -3 "$f.log"; continue; fi
    echo "===== bench_engine $m" >>"$bench_log"
    j=$(timeout 90 "$bin/agentq-bench_engine" --device cuda --pp 512 --tg 128 --reps 3 "$f" 2>>"$bench_log" | tee -a "$bench_log" | tail -1)
    tg[$m]=$(echo "$j" | field tg128_tokens_per_s)
    roof[$m]=$(echo "$j" | field roofline_fraction)
    grep -E "tok/s" "$bench_log" | tail -1
    if [ "$m" = "${models%% *}" ] && in_budget; then
      # The first model also without CUDA graphs (their share of batch-1 decode) and at depth
      # 4096 (a long agent context: attention reads the K/V every step).
      echo "===== bench_engine $m, AGENTQ_CUDA_GRAPHS=0" >>"$bench_log"
      AGENTQ_CUDA_GRAPHS=0 timeout 60 "$bin/agentq-bench_engine" --device cuda --pp 512 --tg 128 --reps 3 "$f" \
        2>>"$bench_log" | tee -a "$bench_log" | grep -E "tok/s" | sed 's/^/no graphs: /'
      # VARIANTS="1x4 2x4 ...": batch-1 decode with each f16 matvec variant (AGENTQ_MATVEC16).
      for v in ${VARIANTS:-}; do
        echo "===== bench_engine $m, AGENTQ_MATVEC16=$v" >>"$bench_log"
        AGENTQ_MATVEC16=$v timeout 60 "$bin/agentq-bench_engine" --device cuda --pp 512 --tg 128 --reps 3 "$f" \
          2>>"$bench_log" | tee -a "$bench_log" | grep -E "tok/s" | sed "s/^/matvec16 $v: /"
      done
      echo "===== bench_engine $m, depth 4096" >>"$bench_log"
      timeout 60 "$bin/agentq-bench_engine" --device cuda --pp 512 --tg 64 --reps 1 --depth 4096 "$f" \
        2>>"$bench_log" | tee -a "$bench_log" | grep -E "tok/s" | sed 's/^/depth 4096: /'
    fi
    echo "===== bench_sched scaling $m" >>"$bench_log"
    j=$(timeout 120 "$bin/agentq-bench_sched" scaling --device cuda --model "$f" --concurrency 1,32,128 --gen 32 \
        --prompt 16 --kv-mib 4096 2>>"$bench_log" | tee -a "$bench_log" | tail -1)
    agg1[$m]=$(echo "$j" | scaling 1)
    agg32[$m]=$(echo "$j" | scaling 32)
    agg128[$m]=$(echo "$j" | scaling 128)
    echo "$m: bench_sched c=1 ${agg1[$m]:-?} c=32 ${agg32[$m]:-?} c=128 ${agg128[$m]:-?} tok/s (elapsed $(elapsed) s)"
  done
  printf "\n%-10s | %9s %8s | %9s %9s %9s %9s\n" "model" "b1 tok/s" "%HBMroof" "c=1" "c=32" "c=128" "128/b1"
  for m in $models; do
    [ -n "${tg[$m]:-}" ] || [ -n "${agg1[$m]:-}" ] || continue
    awk -v m="$m" -v t="${tg[$m]:-0}" -v r="${roof[$m]:-0}" -v a="${agg1[$m]:-0}" -v b="${agg32[$m]:-0}" -v c="${agg128[$m]:-0}" \
      'BEGIN { printf "%-10s | %9.1f %7.1f%% | %9.1f %9.1f %9.1f %8.1fx\n", m, t, 100 * r, a, b, c, (t > 0 ? c / t : 0) }'
  done
  echo "(b1: bench_engine tg128 on one sequence; c=N: bench_sched aggregate generated tok/s, N sequences)"
  echo "targets: 8b:f16 b1 >= 75% of HBM roofline; c=128 >= 20x b1"

  # The batching figure of the KV/batching issue on the GPU: a 110M-class model at 1/4/16/64
  # sequences (its target: aggregate tok/s at 16 >= 8x one sequence).
  if [ "${SCALING_110M:-1}" = 1 ] && in_budget; then
    f="$model_dir/synth-110m-f16.gguf"
    [ -f "$f" ] || "$bin/agentq-mkgguf" --out "$f" --shape 110m --type f16 --vocab "$vocab" --threads "$jobs" >/dev/null 2>&1
    echo "===== bench_sched scaling 110m:f16" >>"$bench_log"
    j=$(timeout 60 "$bin/agentq-bench_sched" scaling --device cuda --model "$f" --concurrency 1,4,16,64 --gen 64 \
        --prompt 16 --kv-mib 2048 2>>"$bench_log" | tee -a "$bench_log" | tail -1)
    echo "$j" | awk -v a="$(echo "$j" | scaling 1)" -v b="$(echo "$j" | scaling 4)" -v c="$(echo "$j" | scaling 16)" \
      -v d="$(echo "$j" | scaling 64)" 'BEGIN { printf "110m:f16 scaling: 1 %.0f, 4 %.0f, 16 %.0f, 64 %.0f tok/s; 16/1 = %.1fx (target 8x)\n", a, b, c, d, (a > 0 ? c / a : 0) }'
  fi

  # Multi-turn residency: jobs share a system prompt; each turn appends a tool result.
  rf="$model_dir/synth-1b-f16.gguf"
  if [ -f "$rf" ] && in_budget; then
    echo
    for reuse in 1 0; do
      echo "===== bench_sched agent reuse $reuse" >>"$bench_log"
      j=$(timeout 90 "$bin/agentq-bench_sched" agent --device cuda --model "$rf" --jobs 16 --turns 4 --system 256 \
          --tool 64 --gen 16 --reuse $reuse --kv-mib 4096 2>>"$bench_log" | tee -a "$bench_log" | tail -1)
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
