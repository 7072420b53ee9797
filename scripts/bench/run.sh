#!/usr/bin/env bash
# One command for every benchmark: runs the scripts in scripts/bench/ (several repetitions
# where cheap), collects each one's final JSON line into DIR/results.json (median and
# min–max per figure, machine and commit), prints each figure beside its same-run baseline
# as a ratio, and renders charts with gnuplot into DIR/charts/.
#   scripts/bench/run.sh [--smoke|--quick|--full] [--out DIR] [--reps N] [--report]
#     --quick  (default) reduced set, < 10 min on 2 cores; queue.sh too when $AGENTQ_BIN_DIR has agentqd
#     --full   everything the scripts offer (tens of minutes)
#     --smoke  stories260K only, one repetition, no charts required (< 60 s; the e2e test)
#     --report also regenerate docs/BENCHMARKS.md + docs/bench/*.png (scripts/bench/report.sh DIR)
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared),
#      AGENTQ_BENCH_NICE (default 10: every benchmark runs under nice -n 10).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$src"

mode=quick
out=""
reps=""
report=0
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke|--quick|--full) mode="${1#--}" ;;
    --out) out="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --report) report=1 ;;
    *) echo "usage: $0 [--smoke|--quick|--full] [--out DIR] [--reps N] [--report]" >&2; exit 2 ;;
  esac
  shift
done

bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
bin="$(cd "$bin" && pwd)"
build="$(dirname "$bin")"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
shared="$(cd "$shared" && pwd)"
out="${out:-${TMPDIR:-/tmp}/agentq-bench-out/$mode-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out/raw" "$out/logs"
out="$(cd "$out" && pwd)"
nice_cmd=(nice -n "${AGENTQ_BENCH_NICE:-10}")
tiny="$shared/models/stories260K.gguf"

for t in agentq-bench_kernels agentq-bench_sched agentq-bench_engine agentq-mkgguf; do
  [ -x "$bin/$t" ] || { echo "run.sh: missing $bin/$t (cmake --build $build --target $t)" >&2; exit 1; }
done
# The scripts find the tools under $AGENTQ_BUILD_DIR/bin (grammar.sh: $BUILD_DIR/bin).
export AGENTQ_BUILD_DIR="$build" BUILD_DIR="$build" AGENTQ_SHARED_DIR="$shared" AGENTQ_BIN_DIR="$bin"
export AGENTQ_BENCH_DIR="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"

# name|repetitions|command — one line per benchmark run; every command ends in one JSON line.
plan=()
case "$mode" in
  smoke)
    r=${reps:-1}
    plan+=("bandwidth|$r|scripts/bench/bandwidth.sh --rows 512 --cols 1024 --types q8_0,q4_k --trials 3 --batch 8")
    plan+=("batching|$r|env AGENTQ_BENCH_MODEL=$tiny scripts/bench/batching.sh --quick")
    plan+=("residency|$r|scripts/bench/residency.sh --quick")
    plan+=("engine|$r|$bin/agentq-bench_engine --pp 64 --tg 16 --reps 1 $tiny")
    ;;
  quick)
    r=${reps:-3}
    plan+=("bandwidth|$r|scripts/bench/bandwidth.sh --types f16,q8_0,q4_k --trials 4")
    plan+=("batching|$r|scripts/bench/batching.sh --quick")
    plan+=("residency|$r|scripts/bench/residency.sh --quick")
    plan+=("grammar|$r|scripts/bench/grammar.sh --quick")
    plan+=("engine|$r|scripts/bench/engine.sh --quick")
    [ -x "$bin/agentqd" ] && plan+=("queue|$r|scripts/bench/queue.sh --quick")
    ;;
  full)
    r=${reps:-3}
    plan+=("bandwidth|$r|scripts/bench/bandwidth.sh")
    plan+=("batching|$r|scripts/bench/batching.sh")
    plan+=("residency|$r|scripts/bench/residency.sh")
    plan+=("grammar|$r|scripts/bench/grammar.sh")
    plan+=("engine|1|scripts/bench/engine.sh")
    [ -x "$bin/agentqd" ] && plan+=("queue|$r|scripts/bench/queue.sh")
    ;;
esac

echo "== agentq benchmarks ($mode) -> $out" >&2
echo "   bin $bin, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg_start"
date -u +%Y-%m-%dT%H:%M:%SZ >"$out/date_start"
: >"$out/commands.txt"
t_start=$(date +%s)
for entry in "${plan[@]}"; do
  IFS='|' read -r name n cmd <<<"$entry"
  echo "$name|$n|$cmd" >>"$out/commands.txt"
  for i in $(seq 1 "$n"); do
    echo "== $name ($i/$n): $cmd" >&2
    t0=$(date +%s.%N)
    # NOTE: word splitting of $cmd is intended (the plan lines are plain words, no quoting).
    if ! "${nice_cmd[@]}" $cmd >"$out/logs/$name.$i.out" 2>"$out/logs/$name.$i.err"; then
      echo "run.sh: $name failed; last lines of its stderr:" >&2
      tail -n 20 "$out/logs/$name.$i.err" >&2
      exit 1
    fi
    t1=$(date +%s.%N)
    tail -n 1 "$out/logs/$name.$i.out" >"$out/raw/$name.$i.json"
    echo "$t0 $t1" >"$out/raw/$name.$i.time"
    echo "   $(python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))' "$t0" "$t1") s" >&2
  done
done
cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg_end"
echo "== $(( $(date +%s) - t_start )) s of benchmarks" >&2

python3 scripts/bench/collect.py "$out" --mode "$mode" --bin "$bin" --src "$src"

if [ "$mode" != smoke ]; then
  if ! command -v gnuplot >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing gnuplot-nox" >&2
    apt-get install -y gnuplot-nox >/dev/null 2>&1 || true
  fi
fi
if command -v gnuplot >/dev/null; then
  scripts/bench/charts.sh "$out"
else
  echo "run.sh: gnuplot not found, no charts (apt-get install gnuplot-nox)" >&2
fi
[ $report = 1 ] && scripts/bench/report.sh "$out"
echo "$out/results.json"
