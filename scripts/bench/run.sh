#!/usr/bin/env bash
# One command for every benchmark: runs the scripts in scripts/bench/ (several repetitions
# where cheap), collects each one's final JSON line into DIR/results.json (median and
# min–max per figure, machine and commit), prints each figure beside its same-run baseline
# as a ratio, and renders charts with gnuplot into DIR/charts/.
#   scripts/bench/run.sh [--smoke|--quick|--full] [--out DIR] [--reps N] [--only A,B] [--timeout-scale X] [--report]
#     --quick  (default) reduced set, < 10 min on 2 cores; queue.sh and retention.sh too when $AGENTQ_BIN_DIR has agentqd
#     --full   everything the issues ask for: 110M and 1B models x F32/F16/Q8_0/Q4_K, batching
#              1/4/16/64, residency (resident / spill to disk / re-prefill), queue; 3 runs each
#              (~18 min on an idle 2-core box once the synthetic models exist, ~20 min writing
#              them first; 1B F32 is ~4.4 GB of the ~9 GB of models under $AGENTQ_BENCH_DIR)
#     --smoke  stories260K only, one repetition, no charts required (< 60 s; the e2e test)
#     --report also regenerate docs/BENCHMARKS.md + docs/bench/*.png (scripts/bench/report.sh DIR)
#     --only A,B  just these sections (e.g. --only engine_1b,queue; the model setup runs when needed)
#     --timeout-scale X  multiply every section's time limit (default: 1 + load average / cores,
#              at most 4, so a busy shared host does not cut sections short)
# Each section runs under a time limit (its idle-box estimate x 3 + 60 s, times the scale); a
# section that fails or runs out of time is recorded with the reason (DIR/sections.tsv, shown
# in results.json and BENCHMARKS.md) and the run goes on with the next one; run.sh then exits 1
# after writing everything it has.
# Env: AGENTQ_BIN_DIR (default build/bin), AGENTQ_SHARED_DIR (default ../shared),
#      AGENTQ_BENCH_DIR (synthetic model cache, default /tmp/agentq-bench; see model.sh),
#      AGENTQ_BENCH_NICE (default 10: every benchmark runs under nice -n 10),
#      AGENTQ_LLAMA_BENCH (a llama-bench binary: adds the llamacpp section, docs/bench/llamacpp.md).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$src"

mode=quick
out=""
reps=""
report=0
tscale="${AGENTQ_BENCH_TIMEOUT_SCALE:-}"
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke|--quick|--full) mode="${1#--}" ;;
    --out) out="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --timeout-scale) tscale="$2"; shift ;;
    --only) only=",$2,"; shift ;;
    --report) report=1 ;;
    *) echo "usage: $0 [--smoke|--quick|--full] [--out DIR] [--reps N] [--only A,B] [--timeout-scale X] [--report]" >&2; exit 2 ;;
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
rm -f "$out"/raw/* "$out/sections.tsv"
nice_cmd=(nice -n "${AGENTQ_BENCH_NICE:-10}")
tiny="$shared/models/stories260K.gguf"

tools=(agentq-bench_kernels agentq-bench_sched agentq-bench_engine agentq-mkgguf)
[ "$mode" = smoke ] || tools+=(agentq-bench_grammar agentq-bench_sampler)
for t in "${tools[@]}"; do
  [ -x "$bin/$t" ] || { echo "run.sh: missing $bin/$t (cmake --build $build --target $t)" >&2; exit 1; }
done
# The scripts find the tools under $AGENTQ_BUILD_DIR/bin (grammar.sh: $BUILD_DIR/bin).
export AGENTQ_BUILD_DIR="$build" BUILD_DIR="$build" AGENTQ_SHARED_DIR="$shared" AGENTQ_BIN_DIR="$bin"
export AGENTQ_BENCH_DIR="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
cache="$AGENTQ_BENCH_DIR"

if [ -z "$tscale" ]; then
  tscale=$(awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { s = 1 + l / n; if (s > 4) s = 4; printf "%.1f", s }')
fi

# name|repetitions|seconds per repetition on an idle 2-core box|command — one line per
# benchmark; every command ends in one JSON line. "models" is setup (writes the synthetic
# models once, see model.sh; nothing collected), so the timed sections never include it.
plan=()
queue_skip=""
case "$mode" in
  smoke)
    r=${reps:-1}
    plan+=("bandwidth|$r|5|scripts/bench/bandwidth.sh --rows 512 --cols 1024 --types q8_0,q4_k --trials 2 --batch 8 --threads 1")
    plan+=("batching|$r|5|env AGENTQ_BENCH_MODEL=$tiny scripts/bench/batching.sh --quick")
    plan+=("residency|$r|5|scripts/bench/residency.sh --smoke")
    plan+=("engine|$r|5|$bin/agentq-bench_engine --pp 64 --tg 16 --reps 1 $tiny")
    ;;
  quick)
    r=${reps:-3}
    plan+=("models|1|30|scripts/bench/model.sh 110m:q8_0 110m:q4_k")
    plan+=("bandwidth|$r|18|scripts/bench/bandwidth.sh --types f16,q8_0,q4_k --trials 4")
    plan+=("batching|$r|12|env AGENTQ_BENCH_MODEL=$cache/llama-110m-q8_0.gguf scripts/bench/batching.sh --quick")
    plan+=("residency|$r|6|scripts/bench/residency.sh --quick")
    plan+=("grammar|$r|5|scripts/bench/grammar.sh --quick")
    plan+=("sampler|$r|8|scripts/bench/sampler.sh --quick")
    plan+=("engine|$r|25|scripts/bench/engine.sh --quick")  # 110M F16/Q8_0/Q4_K
    if [ -x "$bin/agentqd" ]; then plan+=("queue|$r|60|scripts/bench/queue.sh --quick"); else queue_skip="no $bin/agentqd"; fi
    [ -x "$bin/agentqd" ] && plan+=("retention|1|45|scripts/bench/retention.sh --quick")
    # Optional: agentq vs a llama-bench the user built (llamacpp.sh never fetches or builds llama.cpp).
    [ -x "${AGENTQ_LLAMA_BENCH:-}" ] && plan+=("llamacpp|1|150|scripts/bench/llamacpp.sh --quick")
    ;;
  full)
    r=${reps:-3}
    plan+=("models|1|120|scripts/bench/model.sh 15m:q8_0 110m:f32 110m:f16 110m:q8_0 110m:q4_k 1b:f32 1b:f16 1b:q8_0 1b:q4_k")
    plan+=("bandwidth|$r|30|scripts/bench/bandwidth.sh")
    plan+=("batching|$r|20|env AGENTQ_BENCH_MODEL=$cache/llama-110m-q8_0.gguf scripts/bench/batching.sh")
    plan+=("residency|$r|80|scripts/bench/residency.sh")
    plan+=("grammar|$r|5|scripts/bench/grammar.sh")
    plan+=("sampler|$r|10|scripts/bench/sampler.sh")
    plan+=("engine|$r|35|scripts/bench/engine.sh --shapes 110m --reps 2")
    # NOTE: 1B: one pp512 + tg128 per run (no best-of inside), repetitions across runs give the spread.
    plan+=("engine_1b|$r|150|scripts/bench/engine.sh --shapes 1b --reps 1")
    if [ -x "$bin/agentqd" ]; then plan+=("queue|$r|150|scripts/bench/queue.sh"); else queue_skip="no $bin/agentqd"; fi
    [ -x "$bin/agentqd" ] && plan+=("retention|1|200|scripts/bench/retention.sh")
    [ -x "${AGENTQ_LLAMA_BENCH:-}" ] && plan+=("llamacpp|1|1500|scripts/bench/llamacpp.sh --threads 1,2")
    ;;
esac

if [ -n "$only" ]; then
  kept=()
  models_entry=""
  needs_models=0
  for entry in "${plan[@]}"; do
    name="${entry%%|*}"
    [ "$name" = models ] && models_entry="$entry"
    if [[ "$only" == *",$name,"* ]]; then
      kept+=("$entry")
      case "$name" in engine*|batching|residency) needs_models=1 ;; esac
    fi
  done
  [ ${#kept[@]} -gt 0 ] || { echo "run.sh: --only${only//,/ }: no such section in --$mode" >&2; exit 2; }
  # NOTE: the model setup stays when a kept section reads the synthetic models (a no-op when cached).
  if [ $needs_models = 1 ] && [ -n "$models_entry" ] && [[ "$only" != *",models,"* ]]; then
    kept=("$models_entry" "${kept[@]}")
  fi
  plan=("${kept[@]}")
  [[ "$only" == *",queue,"* ]] || queue_skip=""
fi

fmt_s() { awk -v s="$1" 'BEGIN { s = int(s + 0.5); if (s >= 60) printf "%dm%02ds", s / 60, s % 60; else printf "%ds", s }'; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

est_total=0
for entry in "${plan[@]}"; do
  IFS='|' read -r name n est cmd <<<"$entry"
  [[ "$n" =~ ^[0-9]+$ && "$est" =~ ^[0-9]+$ && -n "$cmd" ]] || { echo "run.sh: bad plan line '$entry' (name|reps|seconds|command)" >&2; exit 2; }
  est_total=$((est_total + n * est))
done
echo "== agentq benchmarks ($mode) -> $out" >&2
echo "   bin $bin, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "   ${#plan[@]} sections, ~$(fmt_s "$est_total") on an idle 2-core box; time limits x$tscale" >&2
cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg_start"
date -u +%Y-%m-%dT%H:%M:%SZ >"$out/date_start"
: >"$out/commands.txt"
# sections.tsv: name, status (ok|failed|timeout|skipped), repetitions done, planned, wall s,
# time limit s per repetition, idle estimate s per repetition, reason
printf 'name\tstatus\treps_done\treps_planned\twall_s\tlimit_s\test_s\treason\n' >"$out/sections.tsv"
[ -n "$queue_skip" ] && printf 'queue\tskipped\t0\t0\t0\t0\t0\t%s\n' "$queue_skip" >>"$out/sections.tsv"
t_start=$(now)
n_bad=0
# NOTE: timeout(1) runs each benchmark in its own process group (so a time-out reaches its
# children), which a terminal's Ctrl-C does not reach: forward INT/TERM to it ourselves.
tpid=""
on_signal() {
  echo "run.sh: interrupted; stopping the running benchmark" >&2
  [ -n "$tpid" ] && kill -TERM "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
  exit 130
}
trap on_signal INT TERM
k=0
for entry in "${plan[@]}"; do
  IFS='|' read -r name n est cmd <<<"$entry"
  k=$((k + 1))
  # NOTE: whole seconds, or tenths below 1 s (floor 0.1 s): a tiny --timeout-scale must be able
  # to cut short even a section that takes under a second (the smoke residency run does).
  limit=$(awk -v e="$est" -v s="$tscale" 'BEGIN { l = (e * 3 + 60) * s; if (l >= 1) printf "%d", int(l); else printf "%.1f", l < 0.1 ? 0.1 : l }')
  [ "$name" = models ] || echo "$name|$n|$cmd" >>"$out/commands.txt"
  echo "== [$k/${#plan[@]}] $name: $n x $cmd" >&2
  echo "   ~$(fmt_s "$est") per repetition on an idle box, limit $(fmt_s "$limit"); $(fmt_s "$(since "$t_start")") elapsed" >&2
  status=ok
  reason=""
  done_reps=0
  t_sec=$(now)
  for i in $(seq 1 "$n"); do
    t0=$(now)
    rc=0
    # NOTE: word splitting of $cmd is intended (the plan lines are plain words, no quoting).
    timeout -k 10 "$limit" "${nice_cmd[@]}" $cmd >"$out/logs/$name.$i.out" 2>"$out/logs/$name.$i.err" &
    tpid=$!
    wait "$tpid" || rc=$?
    tpid=""
    t1=$(now)
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      status=timeout
      reason="repetition $i/$n ran out of its $limit s limit"
    elif [ $rc != 0 ]; then
      status=failed
      last=$(grep -v '^[[:space:]]*$' "$out/logs/$name.$i.err" | tail -n 1 | tr '\t' ' ' | cut -c1-300)
      reason="repetition $i/$n exited $rc: ${last:-no message}"
    elif [ "$name" != models ] && ! tail -n 1 "$out/logs/$name.$i.out" | python3 -c 'import json,sys; json.loads(sys.stdin.read())' 2>/dev/null; then
      status=failed
      reason="repetition $i/$n did not end with a JSON line"
    fi
    if [ $status != ok ]; then
      echo "run.sh: $name: $reason; last lines of its stderr ($out/logs/$name.$i.err):" >&2
      tail -n 10 "$out/logs/$name.$i.err" >&2
      break
    fi
    done_reps=$i
    if [ "$name" != models ]; then
      tail -n 1 "$out/logs/$name.$i.out" >"$out/raw/$name.$i.json"
      echo "$t0 $t1" >"$out/raw/$name.$i.time"
    fi
    echo "   $name $i/$n: $(since "$t0") s" >&2
  done
  wall=$(since "$t_sec")
  [ $status = ok ] || n_bad=$((n_bad + 1))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$done_reps" "$n" "$wall" "$limit" "$est" "$reason" >>"$out/sections.tsv"
  echo "   $name: $status, $(fmt_s "$wall") (idle estimate $(fmt_s $((n * est))))" >&2
done
cut -d' ' -f1-3 /proc/loadavg >"$out/loadavg_end"
echo "== $(fmt_s "$(since "$t_start")") of benchmarks; per section:" >&2
awk -F'\t' 'NR > 1 { printf "   %-12s %-8s %s/%s reps %8.1f s%s\n", $1, $2, $3, $4, $5, ($8 != "" ? "  (" $8 ")" : "") }' "$out/sections.tsv" >&2

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
if [ $n_bad != 0 ]; then
  echo "run.sh: $n_bad section(s) did not complete (see $out/sections.tsv)" >&2
  exit 1
fi
