#!/usr/bin/env bash
# Multi-turn agent workload: jobs share a long system prompt, each turn appends the model's
# output and a 64-token tool result. Residency + prefix reuse on vs the re-prefill baseline
# (prefix_reuse=false). Ends with one JSON line: new_tokens_per_turn, computed_tokens_per_turn
# (continuation turns), wall_s_resident, wall_s_reprefill, and per turn index
# computed_tokens_by_turn[_reprefill] (mean over jobs, first turn included).
#   scripts/bench/residency.sh [--quick]     (full: 15M-class synthetic model, 16 jobs x 8 turns;
#                                             quick: stories260K, 8 jobs x 4 turns;
#                                             AGENTQ_BENCH_MODEL=F: that model instead)
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
build=${AGENTQ_BUILD_DIR:-build}
threads=${AGENTQ_BENCH_THREADS:-0}
if [ ! -x "$build/bin/agentq-bench_sched" ] || [ ! -x "$build/bin/agentq-mkgguf" ]; then
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DAGENTQ_ENGINE_ONLY=ON >&2
  cmake --build "$build" --target agentq-bench_sched agentq-mkgguf >&2
fi
if [ -n "${AGENTQ_BENCH_MODEL:-}" ]; then
  model="$AGENTQ_BENCH_MODEL"
  opts=(--jobs 16 --turns 8 --system 256 --tool 64 --gen 16)
  [ $quick = 1 ] && opts=(--jobs 8 --turns 4 --system 256 --tool 64 --gen 16)
elif [ $quick = 1 ]; then
  model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
  opts=(--jobs 8 --turns 4 --system 256 --tool 64 --gen 16)
else
  model="$build/bench-models/15m-q8_0.gguf"
  if [ ! -f "$model" ]; then
    mkdir -p "$(dirname "$model")"
    "$build/bin/agentq-mkgguf" --out "$model" --shape 15m --type q8_0 >&2
  fi
  opts=(--jobs 16 --turns 8 --system 256 --tool 64 --gen 16)
fi
bench="$build/bin/agentq-bench_sched"
resident=$("$bench" agent --model "$model" "${opts[@]}" --reuse 1 --threads "$threads" | tail -n 1)
reprefill=$("$bench" agent --model "$model" "${opts[@]}" --reuse 0 --threads "$threads" | tail -n 1)
echo "resident:  $resident" >&2
echo "reprefill: $reprefill" >&2
python3 - "$resident" "$reprefill" "$model" <<'PY'
import json, sys
r, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({
    "bench": "residency", "model": sys.argv[3], "jobs": r["jobs"], "turns": r["turns"],
    "system_tokens": r["system_tokens"], "tool_tokens": r["tool_tokens"], "gen": r["gen"],
    "new_tokens_per_turn": r["new_tokens_per_turn"],
    "computed_tokens_per_turn": r["computed_tokens_per_turn"],
    "computed_tokens_per_turn_reprefill": p["computed_tokens_per_turn"],
    "wall_s_resident": r["wall_s"], "wall_s_reprefill": p["wall_s"],
    "computed_tokens_by_turn": r.get("computed_tokens_by_turn"),
    "computed_tokens_by_turn_reprefill": p.get("computed_tokens_by_turn"),
    "prompt_tokens_by_turn": r.get("prompt_tokens_by_turn"),
    "speedup": round(p["wall_s"] / r["wall_s"], 2) if r["wall_s"] > 0 else None,
}, separators=(",", ":")))
PY
