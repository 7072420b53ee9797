#!/usr/bin/env bash
# Speculative decoding (#32): generated tokens/s with and without it in the same run, acceptance
# and the ratio. Per shape and type, two models of the same tensors and cost:
#  - SHAPE-copy (agentq-mkgguf's induction-head model, which rewrites what it reads):
#    "repetitive", a turn rewriting a ~300-token tool result (a passage of
#    engine/spec/ngram_proposer.cpp with a token edited every 25; prompt lookup alone), and
#    "plain" (seeded temperature-1 sampling: nothing to look up);
#  - SHAPE (random weights, which copy nothing): "plain", and "repetitive" (its own continuation
#    as the tool result, edited: lookup proposes, the model mostly disagrees: what failed
#    proposals cost); --all adds "predicted" (a Predicted Output).
#   scripts/bench/spec.sh [--quick] [--all] [--shapes 110m,1b] [--types q8_0,q4_k] [--batch 1,8] [--threads N] [--gen N] [--reps R] [--draft SHAPE|self]
# --draft SHAPE: also run with a draft model of that synthetic shape (same type and vocabulary),
# e.g. --draft 15m; "self" = the model as its own draft (acceptance ~100%, shows the overhead).
# --quick: 110m Q8_0, batch 1 and 8, 64 tokens, 3 reps. Default: 110m and 1b x q8_0 and q4_k, 3 reps.
# Models come from scripts/bench/model.sh. Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
shapes=110m,1b; types=q8_0,q4_k; batch=1,8; threads=2; gen=128; reps=3; draft=""; random_workloads=plain,repetitive
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) shapes=110m; types=q8_0; gen=64; reps=3 ;;
    --gen) gen="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --shapes) shapes="$2"; shift ;;
    --types) types="$2"; shift ;;
    --batch) batch="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --draft) draft="$2"; shift ;;
    --all) random_workloads=repetitive,predicted,plain ;;
    *) echo "usage: $0 [--quick] [--all] [--shapes S,..] [--types T,..] [--batch B,..] [--threads N] [--gen N] [--reps R] [--draft SHAPE|self]" >&2; exit 2 ;;
  esac
  shift
done
build="${AGENTQ_BUILD_DIR:-build}"
bench="$build/bin/agentq-bench_spec"
[ -x "$bench" ] || { echo "missing $bench (cmake --build $build --target agentq-bench_spec)" >&2; exit 1; }
echo "# host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), threads $threads"
for s in ${shapes//,/ }; do
  for t in ${types//,/ }; do
    mc=$(scripts/bench/model.sh "$s-copy:$t" | tail -1)
    echo "# $s-copy $t, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$bench" --model "$mc" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 \
      --text engine/spec/ngram_proposer.cpp --workloads repetitive,plain
    m=$(scripts/bench/model.sh "$s:$t" | tail -1)
    echo "# $s $t, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$bench" --model "$m" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 --workloads "$random_workloads"
    if [ -n "$draft" ]; then
      if [ "$draft" = self ]; then d="$m"; else d=$(scripts/bench/model.sh "$draft:$t" | tail -1); fi
      echo "# $s $t, draft $(basename "$d")"
      "$bench" --model "$m" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 --draft-model "$d"
    fi
  done
done
