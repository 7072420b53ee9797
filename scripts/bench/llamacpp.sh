#!/usr/bin/env bash
# agentq vs llama.cpp's CPU backend on the same synthetic GGUF files and thread counts:
# pp512 and tg128 tokens/s from agentq-bench_engine beside llama-bench's, their ratios, and each
# engine's tg128 as a fraction of the bandwidth roofline (agentq-bench_engine's read probe / file bytes).
#   scripts/bench/llamacpp.sh [--llama-bench PATH] [--quick] [--threads 1,2] [--reps N] [--model GGUF]...
#                             [--presets all|Q4_0,Q5_K_M,...] [--shapes 110m,1b] [--llama-quantize PATH] [--no-bound]
# --presets: llama.cpp's common presets (all: Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_0 Q4_1 Q4_K_S Q4_K_M Q5_0
#   Q5_1 Q5_K_S Q5_K_M Q6_K Q8_0 IQ4_NL IQ4_XS), each made once per shape (--shapes, default 110m) by
#   llama-quantize (default: the one beside llama-bench) from the shape's F16 file (model.sh
#   SHAPE:f16), with its real per-tensor mix, and cached as $AGENTQ_BENCH_DIR/llama-SHAPE-PRESET.gguf.
# bound (unless --no-bound): per file, its main type's agentq decode kernel (the repacked _x8 / _x16
#   form where the engine repacks) timed by agentq-bench_kernels --resident on one core, matrix in
#   cache (256 x 2048, CPU clock): "compute" when that is below one core's share of the read probe
#   (agentq-bench_engine's CPU-clock probe / threads), i.e. the core cannot compute as fast as memory
#   feeds it; else "memory".
# --llama-bench (or $AGENTQ_LLAMA_BENCH): a llama-bench binary the user built (CPU backend).
#   This script never fetches or builds llama.cpp; without a binary it prints "skipped" and a
#   JSON line saying so, and exits 0.
# --quick: 110m Q8_0/Q4_K, 3 repetitions; default: 110m F16/Q8_0/Q4_K + 1b Q8_0/Q4_K, 5 repetitions.
# --model: compare on these files instead of the synthetic set (e.g. ../shared/models/stories260K.gguf).
# The two engines alternate run by run (A/B/A/B, one sample each) so load on a shared host hits
# both alike; figures are medians over the repetitions.
# llama-bench runs with OMP_WAIT_POLICY=passive unless AGENTQ_LLAMA_OMP_WAIT_POLICY says otherwise
# ("default" leaves libgomp's own): on an oversubscribed host its default spin barriers collapse
# (110m Q4_K tg at 2 threads: 4 vs 83 tok/s, docs/bench/llamacpp.md), which would measure the load,
# not the kernels. agentq's pool claims chunks and sleeps after a short spin, so it needs no such knob.
# Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR (model cache, default /tmp/agentq-bench).
# The last line of stdout is one JSON object with every result.
set -euo pipefail
cd "$(dirname "$0")/../.."

llama_bench="${AGENTQ_LLAMA_BENCH:-}"
quick=0
threads_list="$(nproc)"
reps=""
models=()
presets=""
shapes="110m"
llama_quantize=""
bound=1
while [ $# -gt 0 ]; do
  case "$1" in
    --llama-bench) llama_bench="$2"; shift ;;
    --quick) quick=1 ;;
    --threads) threads_list="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --model) models+=("$2"); shift ;;
    --presets) presets="$2"; shift ;;
    --shapes) shapes="$2"; shift ;;
    --llama-quantize) llama_quantize="$2"; shift ;;
    --no-bound) bound=0 ;;
    *) echo "usage: $0 [--llama-bench PATH] [--quick] [--threads 1,2] [--reps N] [--model GGUF]..." \
            "[--presets all|LIST] [--shapes 110m,1b] [--llama-quantize PATH] [--no-bound]" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$llama_bench" ] || [ ! -x "$llama_bench" ]; then
  why="no llama-bench binary (pass --llama-bench PATH or set AGENTQ_LLAMA_BENCH)"
  [ -n "$llama_bench" ] && why="llama-bench not found or not executable: $llama_bench"
  echo "llamacpp.sh: skipped: $why" >&2
  python3 -c 'import json, sys; print(json.dumps({"skipped": True, "reason": sys.argv[1]}))' "$why"
  exit 0
fi

build="${AGENTQ_BUILD_DIR:-build}"
bench="$build/bin/agentq-bench_engine"
[ -x "$bench" ] || { echo "missing $bench (build it: cmake --build $build --target agentq-bench_engine)" >&2; exit 1; }

if [ -n "$presets" ]; then
  [ "$presets" = all ] && presets="Q2_K,Q3_K_S,Q3_K_M,Q3_K_L,Q4_0,Q4_1,Q4_K_S,Q4_K_M,Q5_0,Q5_1,Q5_K_S,Q5_K_M,Q6_K,Q8_0,IQ4_NL,IQ4_XS"
  llama_quantize="${llama_quantize:-$(dirname "$llama_bench")/llama-quantize}"
  [ -x "$llama_quantize" ] || { echo "llamacpp.sh: --presets needs llama-quantize (--llama-quantize PATH): $llama_quantize" >&2; exit 1; }
  cache="${AGENTQ_BENCH_DIR:-/tmp/agentq-bench}"
  for shape in ${shapes//,/ }; do
    src="$(scripts/bench/model.sh "$shape:f16")"
    for p in ${presets//,/ }; do
      out="$cache/llama-$shape-$p.gguf"
      if [ ! -s "$out" ]; then
        echo "== llama-quantize $src -> $out ($p)" >&2
        # NOTE: no imatrix, as llama-quantize without flags (what scripts/dev/presets.sh's files are).
        "$llama_quantize" "$src" "$out.tmp" "$p" "$(nproc)" >"$out.log" 2>&1 ||
          { echo "llamacpp.sh: llama-quantize $p failed; last lines of $out.log:" >&2; tail -n 5 "$out.log" >&2; exit 1; }
        mv "$out.tmp" "$out"
      fi
      models+=("$out")
    done
  done
  reps=${reps:-3}
fi
if [ ${#models[@]} = 0 ]; then
  if [ $quick = 1 ]; then
    specs=(110m:q8_0 110m:q4_k); reps=${reps:-3}
  else
    specs=(110m:f16 110m:q8_0 110m:q4_k 1b:q8_0 1b:q4_k); reps=${reps:-5}
  fi
  # The same cached files as engine.sh (scripts/bench/model.sh writes each once).
  mapfile -t models < <(scripts/bench/model.sh "${specs[@]}")
  [ ${#models[@]} = ${#specs[@]} ] || { echo "llamacpp.sh: scripts/bench/model.sh failed" >&2; exit 1; }
fi
reps=${reps:-5}

omp_policy="${AGENTQ_LLAMA_OMP_WAIT_POLICY:-passive}"
if [ "$omp_policy" = default ]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY="$omp_policy"; fi

raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
echo "== agentq-bench_engine vs $llama_bench: ${#models[@]} model(s), threads $threads_list, $reps rep(s)" >&2
echo "   load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cut -d' ' -f1-3 /proc/loadavg >"$raw/loadavg_start"
# agentq: its own 16-token warm-up, then pp512 and tg128 once.
run_agentq() {
  "$bench" --threads "$2" --reps 1 "$1" 2>>"$raw/agentq.err" | tail -n 1 >"$raw/agentq.$3.$2.$4.json"
}
# llama-bench: its own warm-up, then pp512 and tg128 once (flash attention off: its default).
run_llama() {
  "$llama_bench" -m "$1" -p 512 -n 128 -t "$2" -r 1 -o jsonl 2>>"$raw/llama.err" >"$raw/llama.$3.$2.$4.jsonl" ||
    { echo "llamacpp.sh: llama-bench failed on $1; last lines of its stderr:" >&2; tail -n 5 "$raw/llama.err" >&2; exit 1; }
}
for rep in $(seq 1 "$reps"); do
  for t in ${threads_list//,/ }; do
    for m in "${models[@]}"; do
      name="$(basename "$m" .gguf)"
      # One sample each, and which engine goes first alternates by repetition.
      if [ $((rep % 2)) = 1 ]; then run_agentq "$m" "$t" "$name" "$rep"; run_llama "$m" "$t" "$name" "$rep"
      else run_llama "$m" "$t" "$name" "$rep"; run_agentq "$m" "$t" "$name" "$rep"; fi
      echo "   rep $rep/$reps, $t thread(s), $name done" >&2
    done
  done
done
cut -d' ' -f1-3 /proc/loadavg >"$raw/loadavg_end"

# bound: each main type's decode kernel in cache on one core (see the header), once per type.
kernels_bench="$build/bin/agentq-bench_kernels"
if [ "$bound" = 1 ] && [ -x "$kernels_bench" ]; then
  for f in "$raw"/agentq.*.json; do python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["type"].lower())' "$f"; done |
    sort -u | while read -r type; do
      # The layout the engine runs on an AVX2 build (weight_store's repack), else the file's.
      case $type in q8_0|q4_k|q6_k|q5_k|iq4_xs|q3_k) kt=${type}_x8 ;; q4_0) kt=q4_0_x16 ;; *) kt=$type ;; esac
      for k in $kt $type; do
        "$kernels_bench" --resident --rows 256 --cols 2048 --threads 1 --batch 1 --trials 9 --types "$k" \
          2>>"$raw/kernels.err" | tail -n 1 >"$raw/bound.$type.json" && break
      done
      echo "   bound: $type ($kt) measured" >&2
    done
fi

python3 - "$raw" "$llama_bench" "$reps" "$omp_policy" <<'EOF'
import glob, json, os, re, statistics, sys

raw, llama_bench, reps, omp_policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
# One core's in-cache decode kernel rate per main type (agentq-bench_kernels --resident), GB/s.
kernel_gbps = {}
for path in glob.glob(os.path.join(raw, "bound.*.json")):
    try:
        j = json.load(open(path))
        kernel_gbps[os.path.basename(path)[6:-5]] = (j["matvec"][0]["type"], j["matvec"][0]["gbps"])
    except (ValueError, KeyError, IndexError):
        pass
samples = {}  # (model, threads) -> {"type", "agentq_pp": [], "agentq_tg": [], "llama_pp": [], "llama_tg": []}
llama_meta = {}
for path in glob.glob(os.path.join(raw, "agentq.*.json")):
    name, t, rep = re.match(r"agentq\.(.+)\.(\d+)\.(\d+)\.json$", os.path.basename(path)).groups()
    r = json.load(open(path))["results"][0]
    s = samples.setdefault((name, int(t)), {"type": r["type"], "agentq_pp": [], "agentq_tg": [], "llama_pp": [], "llama_tg": [],
                                            "bw": [], "bw_cpu": [], "bytes": 0})
    s["agentq_pp"].append(r["pp512_tokens_per_s"])
    s["agentq_tg"].append(r["tg128_tokens_per_s"])
    s.setdefault("by_rep", {}).setdefault(int(rep), {}).update(a_pp=r["pp512_tokens_per_s"], a_tg=r["tg128_tokens_per_s"])
    # The read probe agentq-bench_engine ran just before this model (same threads), and the
    # file's weight bytes a decode step reads: the roofline both engines' tg128 is set against.
    s["bw"].append(r.get("bandwidth_gb_per_s", 0.0))
    s["bw_cpu"].append(r.get("cpu_clock", {}).get("bandwidth_gb_per_s", 0.0))
    s["bytes"] = r.get("weight_bytes_per_token", 0.0)
for path in glob.glob(os.path.join(raw, "llama.*.jsonl")):
    name, t, rep = re.match(r"llama\.(.+)\.(\d+)\.(\d+)\.jsonl$", os.path.basename(path)).groups()
    s = samples[(name, int(t))]
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        llama_meta = {k: r.get(k) for k in ("build_commit", "build_number", "cpu_info", "backends")}
        ts = statistics.median(r["samples_ts"])
        if r["n_prompt"] > 0 and r["n_gen"] == 0:
            s["llama_pp"].append(ts)
            s.setdefault("by_rep", {}).setdefault(int(rep), {})["l_pp"] = ts
        elif r["n_gen"] > 0 and r["n_prompt"] == 0:
            s["llama_tg"].append(ts)
            s.setdefault("by_rep", {}).setdefault(int(rep), {})["l_tg"] = ts

med = lambda v: statistics.median(v) if v else 0.0
results = []
print(f"\n{'model':<22}{'type':<6}{'thr':>4} {'pp512 agentq':>13}{'llama.cpp':>11}{'ratio':>7}"
      f" {'tg128 agentq':>13}{'llama.cpp':>11}{'ratio':>7} {'paired pp':>10}{'tg':>7} {'roofline agentq':>16}{'llama.cpp':>10}", file=sys.stderr)
for (name, t), s in sorted(samples.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    a_pp, l_pp, a_tg, l_tg = (med(s[k]) for k in ("agentq_pp", "llama_pp", "agentq_tg", "llama_tg"))
    bw = med(s["bw"])
    # Paired: the ratio within each repetition (the two engines ran back to back), then the
    # median; steadier than the ratio of medians when the host's load swings between repetitions.
    pair = lambda a, l: med([v[a] / v[l] for v in s.get("by_rep", {}).values() if v.get(a) and v.get(l)])
    roof = bw * 1e9 / s["bytes"] if bw and s["bytes"] else 0.0  # tokens/s at the probe's bandwidth
    kern, kgbps = kernel_gbps.get(s["type"].lower(), (None, 0.0))
    # One core's share of the read probe by CPU clock, as the kernel's in-cache rate is timed (on a
    # quiet host the same as by wall clock; on a busy one the wall-clock probe reads the load).
    bw_cpu = med(s["bw_cpu"])
    share = bw_cpu / t if bw_cpu else 0.0
    bound = ("memory" if kgbps >= share else "compute") if kgbps and share else None
    r = {"model": name, "type": s["type"], "threads": t,
         "agentq_pp512_tokens_per_s": round(a_pp, 2), "llamacpp_pp512_tokens_per_s": round(l_pp, 2),
         "pp512_ratio": round(a_pp / l_pp, 4) if l_pp else None,
         "agentq_tg128_tokens_per_s": round(a_tg, 3), "llamacpp_tg128_tokens_per_s": round(l_tg, 3),
         "tg128_ratio": round(a_tg / l_tg, 4) if l_tg else None,
         "pp512_ratio_paired_median": round(pair("a_pp", "l_pp"), 4), "tg128_ratio_paired_median": round(pair("a_tg", "l_tg"), 4),
         "probe_gb_per_s": round(bw, 2), "weight_bytes_per_token": s["bytes"],
         "agentq_tg128_roofline_fraction": round(a_tg / roof, 4) if roof else None,
         "llamacpp_tg128_roofline_fraction": round(l_tg / roof, 4) if roof else None,
         "kernel": kern, "kernel_in_cache_gb_per_s_one_core": round(kgbps, 2), "probe_gb_per_s_per_core": round(share, 2),
         "bound": bound,
         "samples": {k: [round(x, 2) for x in s[k]] for k in ("agentq_pp", "llama_pp", "agentq_tg", "llama_tg")}}
    results.append(r)
    fmt = lambda x: f"{x:7.3f}" if x is not None else "    n/a"
    print(f"{name:<22}{s['type']:<6}{t:>4} {a_pp:13.1f}{l_pp:11.1f}{fmt(r['pp512_ratio'])}"
          f" {a_tg:13.2f}{l_tg:11.2f}{fmt(r['tg128_ratio'])} {fmt(r['pp512_ratio_paired_median']):>10}{fmt(r['tg128_ratio_paired_median'])}"
          f" {fmt(r['agentq_tg128_roofline_fraction']):>16}"
          f"{fmt(r['llamacpp_tg128_roofline_fraction']):>10}", file=sys.stderr)
load = [open(os.path.join(raw, f)).read().strip() for f in ("loadavg_start", "loadavg_end")]
# The closing table: paired ratios (the median of per-repetition ratios), roofline fractions, bound.
print(f"\nload average {load[0]} -> {load[1]}, {reps} rep(s), medians; ratios paired (agentq / llama.cpp per repetition)",
      file=sys.stderr)
print(f"| model | type | threads | pp512 ratio | tg128 ratio | tg128 agentq / llama.cpp tok/s | roofline agentq | llama.cpp"
      f" | kernel in cache GB/s (1 core) | probe GB/s per core (CPU clock) | bound |", file=sys.stderr)
print("|---|---|---|---|---|---|---|---|---|---|---|", file=sys.stderr)
f2 = lambda x: f"{x:.2f}" if x is not None else "n/a"
for r in results:
    print(f"| {r['model']} | {r['type']} | {r['threads']} | {f2(r['pp512_ratio_paired_median'])} | {f2(r['tg128_ratio_paired_median'])}"
          f" | {r['agentq_tg128_tokens_per_s']:.1f} / {r['llamacpp_tg128_tokens_per_s']:.1f}"
          f" | {f2(r['agentq_tg128_roofline_fraction'])} | {f2(r['llamacpp_tg128_roofline_fraction'])}"
          f" | {(r['kernel'] or '') + ' ' + f2(r['kernel_in_cache_gb_per_s_one_core']) if r['kernel'] else 'n/a'}"
          f" | {f2(r['probe_gb_per_s_per_core'])} | {r['bound'] or 'n/a'} |", file=sys.stderr)
print(json.dumps({"skipped": False, "llama_bench": llama_bench, "llamacpp_commit": llama_meta.get("build_commit"),
                  "llamacpp_build_number": llama_meta.get("build_number"), "cpu_info": llama_meta.get("cpu_info"),
                  "omp_wait_policy": omp_policy, "reps": reps, "statistic": "median", "loadavg_start": load[0], "loadavg_end": load[1],
                  "results": results}))
EOF
