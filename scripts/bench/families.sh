#!/usr/bin/env bash
# The model families beside llama.cpp (#25): a 1B-class qwen3, a qwen3moe with Qwen3-30B-A3B's
# expert ratio (8 of 128) and a 1B-class gemma3 (sliding window 512), synthetic Q4_K files run
# by scripts/bench/llamacpp.sh (pp512 / tg128, agentq and llama-bench alternating, ratios of the
# medians); then, for the MoE file, the expert bytes a decoded token read against the active
# experts' bytes (MoE's roofline) and all experts' bytes, from agentq-bench_engine.
#   scripts/bench/families.sh [--llama-bench PATH] [--threads N] [--reps N] [--depth D]
# --depth D (default 0: skipped): also decode (tg32) after D tokens of context in both engines
#   (agentq-bench_engine --depth, llama-bench -d; each writes the D tokens untimed first), e.g.
#   4096; --reps samples each, the engines alternating, medians and their ratio; slow on a small host.
# --skip-short: only the --depth runs (no pp512/tg128 comparison, no MoE bytes line).
# Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR (model cache, default /tmp/agentq-bench),
#      AGENTQ_LLAMA_BENCH, AGENTQ_LLAMA_OMP_WAIT_POLICY (as llamacpp.sh: passive unless "default"
#      or another value is given). The last line of stdout is one JSON object.
set -euo pipefail
cd "$(dirname "$0")/../.."
llama_bench="${AGENTQ_LLAMA_BENCH:-}"
threads="$(nproc)"
reps=1
depth=0
skip_short=0
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bench) llama_bench="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --depth) depth="$2"; shift ;;
    --skip-short) skip_short=1 ;;
    *) echo "usage: $0 [--llama-bench PATH] [--threads N] [--reps N] [--depth D] [--skip-short]" >&2; exit 2 ;;
  esac
  shift
done
build="${AGENTQ_BUILD_DIR:-build}"
cache="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
mkdir -p "$cache"
mkgguf="$build/bin/agentq-mkgguf"
bench="$build/bin/agentq-bench_engine"
for b in "$mkgguf" "$bench"; do
  [ -x "$b" ] || { echo "families.sh: missing $b (cmake --build $build --target agentq-mkgguf agentq-bench_engine)" >&2; exit 1; }
done

models=()
for spec in qwen3:1b gemma3:1b qwen3moe:moe; do
  arch="${spec%%:*}" shape="${spec#*:}"
  path="$cache/$arch-$shape-q4_k.gguf"
  if [ ! -s "$path" ]; then
    "$mkgguf" --out "$path.tmp" --shape "$shape" --type q4_k --arch "$arch" --seed 25 >&2
    mv "$path.tmp" "$path"
  fi
  models+=("$path")
done

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
args=()
for m in "${models[@]}"; do args+=(--model "$m"); done
[ -n "$llama_bench" ] && args+=(--llama-bench "$llama_bench")
cmp="null" moe_json="null"
if [ "$skip_short" = 0 ]; then
  cmp="$(scripts/bench/llamacpp.sh "${args[@]}" --threads "$threads" --reps "$reps" | tail -n 1)"
  moe="${models[2]}"
  echo "== MoE bytes per decoded token: $moe" >&2
  moe_json="$("$bench" --threads "$threads" --pp 16 --tg 32 --reps 1 "$moe" | tail -n 1)"
fi

# NOTE: the same wait policy as llamacpp.sh gives llama-bench (see there: its default spin
# barriers collapse on an oversubscribed host); "default" leaves libgomp's own.
omp_policy="${AGENTQ_LLAMA_OMP_WAIT_POLICY:-passive}"
deep="null"
if [ "$depth" -gt 0 ]; then
  echo "== decode after $depth tokens of context, $reps sample(s) each, engines alternating (llama-bench OMP_WAIT_POLICY $omp_policy)" >&2
  deep="["
  for m in "${models[@]}"; do
    as="" ls=""
    for _ in $(seq "$reps"); do
      as="$as$("$bench" --threads "$threads" --pp 16 --tg 32 --reps 1 --depth "$depth" "$m" | tail -n 1),"
      if [ -n "$llama_bench" ]; then
        if [ "$omp_policy" = default ]; then
          l="$(env -u OMP_WAIT_POLICY "$llama_bench" -m "$m" -p 0 -n 32 -d "$depth" -t "$threads" -r 1 -o jsonl 2>/dev/null | tail -n 1)"
        else
          l="$(OMP_WAIT_POLICY="$omp_policy" "$llama_bench" -m "$m" -p 0 -n 32 -d "$depth" -t "$threads" -r 1 -o jsonl 2>/dev/null | tail -n 1)"
        fi
        ls="$ls${l:-null},"
      fi
    done
    deep="$deep{\"model\":\"$(basename "$m" .gguf)\",\"agentq\":[${as%,}],\"llamacpp\":[${ls%,}]},"
  done
  deep="${deep%,}]"
fi

load_end="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$cmp" "$moe_json" "$deep" "$load_start" "$load_end" "$omp_policy" <<'EOF'
import json, statistics, sys
cmp, moe, deep = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
load = {"start": sys.argv[4], "end": sys.argv[5]}  # /proc/loadavg 1/5/15-minute averages
out = {"comparison": cmp, "load": load}
if moe is not None:
    r = moe["results"][0]
    m = {"model": r["model"], "expert_bytes_read_per_token": r["moe_expert_bytes_read_per_token"],
         "active_expert_bytes": r["moe_active_expert_bytes"], "all_expert_bytes": r["moe_all_expert_bytes"],
         "read_over_active": round(r["moe_expert_bytes_read_per_token"] / r["moe_active_expert_bytes"], 4)
         if r["moe_active_expert_bytes"] else None}
    print(f"MoE {m['model']}: experts read {m['expert_bytes_read_per_token'] / 1e6:.1f} MB per decoded token; "
          f"active {m['active_expert_bytes'] / 1e6:.1f} MB, all {m['all_expert_bytes'] / 1e6:.1f} MB "
          f"(read / active {m['read_over_active']})", file=sys.stderr)
    out["moe"] = m
print(f"load average at start {load['start']}, at end {load['end']}", file=sys.stderr)
if deep is not None:
    rows = []
    for d in deep:
        a_all = [x["results"][0]["tg128_tokens_per_s"] for x in d["agentq"]]
        l_all = [x["avg_ts"] for x in d["llamacpp"] if x]
        a = statistics.median(a_all)
        l = statistics.median(l_all) if l_all else None
        depth = d["agentq"][0]["depth"]
        rows.append({"model": d["model"], "depth": depth, "agentq_tg_tokens_per_s": a, "llamacpp_tg_tokens_per_s": l,
                     "agentq_samples": a_all, "llamacpp_samples": l_all, "llamacpp_omp_wait_policy": sys.argv[6],
                     "ratio": round(a / l, 4) if l else None})
        print(f"{d['model']}: tg32 after {depth} tokens (median of {len(a_all)}): agentq {a:.2f} tok/s, "
              f"llama.cpp {'-' if l is None else f'{l:.2f}'} tok/s, ratio {rows[-1]['ratio']}", file=sys.stderr)
    out["depth"] = rows
print(json.dumps(out))
EOF
