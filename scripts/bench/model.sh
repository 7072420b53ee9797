#!/usr/bin/env bash
# Synthetic benchmark models, written once and reused: prints the path of
# $AGENTQ_BENCH_DIR/llama-SHAPE-TYPE.gguf for each SHAPE:TYPE given, writing it with
# agentq-mkgguf first when missing (via a .tmp file, so an interrupted write is never used).
# The cache is keyed by shape + type and lives outside the repository; delete the directory
# to regenerate after changing agentq-mkgguf. 1b F32 is ~4.4 GB; refuses to start a write
# when the cache's file system has less than twice the expected size free.
#   scripts/bench/model.sh SHAPE:TYPE...      e.g. scripts/bench/model.sh 110m:q8_0 1b:q4_k
# Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR (default /tmp/agentq-bench),
#      AGENTQ_BENCH_THREADS (mkgguf threads, default nproc).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 SHAPE:TYPE..." >&2; exit 2; }
build="${AGENTQ_BUILD_DIR:-build}"
cache="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
mkgguf="$build/bin/agentq-mkgguf"
threads="${AGENTQ_BENCH_THREADS:-0}"
[ "$threads" -gt 0 ] 2>/dev/null || threads=$(nproc)
mkdir -p "$cache"

# Rough file sizes in MB (weights dominate), for the free-space check only.
size_mb() {
  local params bytes_per_param
  case "$1" in
    tiny) params=20 ;; 15m) params=25 ;; 110m) params=135 ;; 1b) params=1100 ;; 8b) params=8000 ;; *) params=1100 ;;
  esac
  case "$2" in
    f32) bytes_per_param=40 ;; f16|bf16) bytes_per_param=20 ;; q8_0) bytes_per_param=11 ;; *) bytes_per_param=6 ;;
  esac
  echo $((params * bytes_per_param / 10))
}

for spec in "$@"; do
  shape="${spec%%:*}"
  type="${spec#*:}"
  [ -n "$shape" ] && [ -n "$type" ] && [ "$shape" != "$spec" ] || { echo "model.sh: bad spec '$spec' (want SHAPE:TYPE)" >&2; exit 2; }
  path="$cache/llama-$shape-$type.gguf"
  if [ ! -s "$path" ]; then
    [ -x "$mkgguf" ] || { echo "model.sh: missing $mkgguf (cmake --build $build --target agentq-mkgguf)" >&2; exit 1; }
    need=$((2 * $(size_mb "$shape" "$type")))
    free=$(df -Pm "$cache" | awk 'NR == 2 { print $4 }')
    if [ "$free" -lt "$need" ]; then
      echo "model.sh: $cache has $free MB free, $path needs ~$((need / 2)) MB (and as much again to spare)" >&2
      exit 1
    fi
    echo "== writing $path" >&2
    t0=$(date +%s)
    "$mkgguf" --out "$path.tmp" --shape "$shape" --type "$type" --threads "$threads" >&2
    mv "$path.tmp" "$path"
    echo "   $(( $(date +%s) - t0 )) s" >&2
  fi
  echo "$path"
done
