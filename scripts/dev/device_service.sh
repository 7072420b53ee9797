#!/usr/bin/env bash
# The service on a GPU host end to end (a lent device machine: no Debian packages there, so the
# binaries, redis-server and their shared libraries travel in one folder): the demo's agent job
# (scripts/demo.sh: embedded Redis, SQLite, a tool call over HTTP, `agentq wait`) with
# `--device cuda`, then loadgen.py's one-request jobs through agentqd on the CPU and on CUDA, on
# the tiny model and on a synthetic 1B F16 model (agentq-mkgguf). Prints what each printed.
#   scripts/dev/device_service.sh DIR   (DIR/bin: agentqd agentq agentq-mkgguf redis-server;
#                                        DIR/lib: the libraries they need beyond the C/C++ runtime)
#   env: DEVICES (default "cpu cuda"), SYNTH=0 (the tiny model only), DEMO=0 (skip the demo)
# Shared data from shared/ inside the checkout (the device machine's copy has it there).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
dir=$(cd "${1:?usage: device_service.sh DIR}" && pwd)
export PATH="$dir/bin:$PATH" LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
shared=shared
[ -d ../shared/models ] && shared=../shared
tiny=$(cd "$shared/models" && pwd)/stories260K.gguf
status=0

if [ "${DEMO:-1}" = 1 ]; then
  echo "== the demo's agent job on --device cuda"
  AGENTQ_SKIP_SETUP=1 AGENTQ_BIN_DIR="$dir/bin" AGENTQ_MODEL="$tiny" AGENTQ_DEMO_ARGS="--device cuda" \
    timeout 180 bash scripts/demo.sh || status=1
fi

# shellcheck source=scripts/bench/agentqd_bench.sh
. scripts/bench/agentqd_bench.sh
bench_init device-service
synth="$tmp/synth-1b-f16.gguf"
if [ "${SYNTH:-1}" = 1 ]; then
  agentq-mkgguf --out "$synth" --shape 1b --type f16 --vocab "$shared/models/vocab/ggml-vocab-llama-spm.gguf" \
    --threads "$(nproc)" >/dev/null 2>&1 || echo "(agentq-mkgguf failed: the 1B runs are skipped)"
fi
for model in "$tiny" "$synth"; do
  [ -f "$model" ] || continue
  for device in ${DEVICES:-cpu cuda}; do
    echo "== loadgen one-request jobs: $(basename "$model" .gguf) on $device"
    bench_start "$dir/bin" "$tmp/data-$device-$(basename "$model" .gguf)" --device "$device"
    key=$(bench_key bench)
    timeout 120 python3 scripts/bench/loadgen.py --url "$url" --key "$key" --model "$(basename "$model" .gguf)" \
      --jobs 2000 --clients 16 --phases throughput || status=1
    bench_stop
  done
done
exit $status
