#!/usr/bin/env bash
# Multi-turn agent workload: jobs share a long system prompt, each turn appends the model's
# output and a 64-token tool result. Three variants of the same workload:
#   resident   residency + prefix reuse, every pause a short tool call (KV pinned in memory);
#   spill      residency with the disk tier: every pause announces a long wait (1 h), so the
#              job's KV is written to a spill directory (a fresh temp dir) and the next turn
#              restores it from there;
#   reprefill  the baseline: prefix reuse off, every turn recomputes the whole conversation.
# Ends with one JSON line: new_tokens_per_turn, computed_tokens_per_turn[_spill|_reprefill]
# (continuation turns), wall_s_resident, wall_s_spill, wall_s_reprefill, n_spills/n_restores,
# and per turn index computed_tokens_by_turn[_spill|_reprefill] (mean over jobs, first turn included).
# Then resume after a restart vs re-prefill (agentq-bench_restart, issue 31): jobs run a first turn
# over a long conversation and park; the engine's shutdown spill writes their KV (GB/s, against
# the disk's own write + fsync rate measured right after in the same directory); a new engine
# resumes each job with 64 new tokens from disk, another re-prefills: wall time, computed tokens
# ("restart" in the JSON line, one entry per model shape). Full: 110M Q8_0 (a 900-token
# conversation: that shape's n_ctx is 1024) and 1B Q4_K (4000 tokens); quick/smoke: stories260K
# (384 tokens). AGENTQ_BENCH_SPILL_DIR: the directory (default: a temp dir; put it on the disk
# agentqd's --data-dir uses to measure that disk).
#   scripts/bench/residency.sh [--quick|--smoke] (full: 15M-class synthetic Q8_0 (scripts/bench/model.sh),
#                                             16 jobs x 8 turns; quick: stories260K, 8 jobs x 4 turns;
#                                             smoke: stories260K, 4 jobs x 3 turns, 128-token prompt;
#                                             AGENTQ_BENCH_MODEL=F: that model instead)
set -euo pipefail
cd "$(dirname "$0")/../.."
quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  --smoke) quick=2 ;;
  "") ;;
  *) echo "usage: $0 [--quick|--smoke]" >&2; exit 2 ;;
esac
build=${AGENTQ_BUILD_DIR:-build}
threads=${AGENTQ_BENCH_THREADS:-0}
if [ ! -x "$build/bin/agentq-bench_sched" ] || [ ! -x "$build/bin/agentq-mkgguf" ] || [ ! -x "$build/bin/agentq-bench_restart" ]; then
  [ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DAGENTQ_ENGINE_ONLY=ON >&2
  cmake --build "$build" --target agentq-bench_sched agentq-bench_restart agentq-mkgguf >&2
fi
if [ -n "${AGENTQ_BENCH_MODEL:-}" ]; then
  model="$AGENTQ_BENCH_MODEL"
  opts=(--jobs 16 --turns 8 --system 256 --tool 64 --gen 16)
  [ $quick = 1 ] && opts=(--jobs 8 --turns 4 --system 256 --tool 64 --gen 16)
  [ $quick = 2 ] && opts=(--jobs 4 --turns 3 --system 128 --tool 64 --gen 8)
elif [ $quick != 0 ]; then
  model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
  opts=(--jobs 8 --turns 4 --system 256 --tool 64 --gen 16)
  [ $quick = 2 ] && opts=(--jobs 4 --turns 3 --system 128 --tool 64 --gen 8)
else
  model=$(AGENTQ_BUILD_DIR="$build" scripts/bench/model.sh 15m:q8_0)
  opts=(--jobs 16 --turns 8 --system 256 --tool 64 --gen 16)
fi
bench="$build/bin/agentq-bench_sched"
spill_dir=$(mktemp -d ${AGENTQ_BENCH_SPILL_DIR:+-p "$AGENTQ_BENCH_SPILL_DIR"} -t agentq-spill-XXXXXX)
trap 'rm -rf "$spill_dir"' EXIT
resident=$("$bench" agent --model "$model" "${opts[@]}" --reuse 1 --threads "$threads" | tail -n 1)
echo "resident:  $resident" >&2
spill=$("$bench" agent --model "$model" "${opts[@]}" --reuse 1 --threads "$threads" \
  --park-wait 3600 --spill-dir "$spill_dir" | tail -n 1)
echo "spill:     $spill" >&2
reprefill=$("$bench" agent --model "$model" "${opts[@]}" --reuse 0 --threads "$threads" | tail -n 1)
echo "reprefill: $reprefill" >&2
# Resume after a restart vs re-prefill, per shape: MODEL:CONTEXT:JOBS.
if [ $quick != 0 ]; then
  restart_specs=("${AGENTQ_BENCH_MODEL:-${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf}:384:4")
else
  restart_specs=("$(AGENTQ_BUILD_DIR="$build" scripts/bench/model.sh 110m:q8_0):900:2"
                 "$(AGENTQ_BUILD_DIR="$build" scripts/bench/model.sh 1b:q4_k):4000:1")
fi
restarts=()
for spec in "${restart_specs[@]}"; do
  IFS=: read -r rmodel rctx rjobs <<<"$spec"
  rdir="$spill_dir/restart"
  rm -rf "$rdir"
  line=$("$build/bin/agentq-bench_restart" --model "$rmodel" --spill-dir "$rdir" --context "$rctx" --jobs "$rjobs" \
    --new 64 --gen 16 --threads "$threads" ${AGENTQ_BENCH_DEVICE:+--device "$AGENTQ_BENCH_DEVICE"} | tail -n 1)
  echo "restart:   $line" >&2
  restarts+=("$line")
done
python3 - "$resident" "$reprefill" "$model" "$spill" "${restarts[@]}" <<'PY'
import json, sys
r, p, s = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[4])
restart = [json.loads(x) for x in sys.argv[5:]]
# NOTE: a spill run that restored nothing measured the prefix cache, not the disk tier: say so.
if s.get("n_spills", 0) == 0 or s.get("n_restores", 0) == 0:
    sys.exit(f"residency.sh: the spill variant spilled {s.get('n_spills')} and restored {s.get('n_restores')} times")
print(json.dumps({
    "bench": "residency", "model": sys.argv[3], "jobs": r["jobs"], "turns": r["turns"],
    "system_tokens": r["system_tokens"], "tool_tokens": r["tool_tokens"], "gen": r["gen"],
    "new_tokens_per_turn": r["new_tokens_per_turn"],
    "computed_tokens_per_turn": r["computed_tokens_per_turn"],
    "computed_tokens_per_turn_reprefill": p["computed_tokens_per_turn"],
    "computed_tokens_per_turn_spill": s["computed_tokens_per_turn"],
    "wall_s_resident": r["wall_s"], "wall_s_reprefill": p["wall_s"], "wall_s_spill": s["wall_s"],
    "spill_park_wait_s": s["park_wait_s"], "n_spills": s["n_spills"], "n_restores": s["n_restores"],
    "computed_tokens_by_turn": r.get("computed_tokens_by_turn"),
    "computed_tokens_by_turn_reprefill": p.get("computed_tokens_by_turn"),
    "computed_tokens_by_turn_spill": s.get("computed_tokens_by_turn"),
    "prompt_tokens_by_turn": r.get("prompt_tokens_by_turn"),
    "speedup": round(p["wall_s"] / r["wall_s"], 2) if r["wall_s"] > 0 else None,
    "speedup_spill": round(p["wall_s"] / s["wall_s"], 2) if s["wall_s"] > 0 else None,
    "restart": [{
        "model": x["model"], "context": x["context"], "jobs": x["jobs"], "new": x["new"],
        "wall_s_restored": x["resume_restored"]["wall_s"], "wall_s_reprefill": x["resume_reprefill"]["wall_s"],
        "computed_tokens_restored": x["resume_restored"]["computed_tokens"],
        "computed_tokens_reprefill": x["resume_reprefill"]["computed_tokens"],
        "speedup": x["speedup"], "same_output": x["same_output"],
        "shutdown_spill_gbps": x["shutdown_spill"]["gbps"], "shutdown_spill_bytes": x["shutdown_spill"]["bytes"],
        "shutdown_spill_ms": x["shutdown_spill"]["ms"], "disk_write_gbps": x["disk_write_gbps"],
        "spill_vs_disk": x["spill_vs_disk"]} for x in restart],
}, separators=(",", ":")))
PY
