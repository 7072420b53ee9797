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
# --llama-bin DIR (or $AGENTQ_LLAMA_BIN): a llama.cpp build's bin/ (CPU; never built here). Per
# copy model, llama-lookup (prompt lookup, --spec-draft-n-max 16: up to 17 tokens a verify, as agentq's CPU lookup since session 20)
# and llama-lookup --spec-draft-n-max 0 (plain decoding, the same harness) on the same GGUF file and the
# same "repetitive" prompt as text (bench_spec --dump-prompt; llama.cpp tokenizes it again), greedy,
# alternating, medians of --reps: one JSON line each ("bench":"spec_llamacpp"); with --draft, also
# llama-speculative with that draft. Prints "skipped" and the reason when the binaries are absent.
# Models come from scripts/bench/model.sh. Env: AGENTQ_BUILD_DIR (default build), AGENTQ_BENCH_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
shapes=110m,1b; types=q8_0,q4_k; batch=1,8; threads=2; gen=128; reps=3; draft=""; random_workloads=plain,repetitive
llama_bin="${AGENTQ_LLAMA_BIN:-}"
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
    --llama-bin) llama_bin="$2"; shift ;;
    *) echo "usage: $0 [--quick] [--all] [--shapes S,..] [--types T,..] [--batch B,..] [--threads N] [--gen N] [--reps R] [--draft SHAPE|self] [--llama-bin DIR]" >&2; exit 2 ;;
  esac
  shift
done
build="${AGENTQ_BUILD_DIR:-build}"
bench="$build/bin/agentq-bench_spec"
[ -x "$bench" ] || { echo "missing $bench (cmake --build $build --target agentq-bench_spec)" >&2; exit 1; }
echo "# host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), threads $threads"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
llama_why=""
if [ -z "$llama_bin" ]; then llama_why="no llama.cpp bin directory (pass --llama-bin DIR or set AGENTQ_LLAMA_BIN)"
elif [ ! -x "$llama_bin/llama-lookup" ]; then llama_why="$llama_bin/llama-lookup not found or not executable"
fi
# One llama.cpp run: prints "decode_tok_per_s wall_tok_per_s n_drafted n_accept" (wall: encode + decode).
llama_run() {
  local out="$tmp/llama.out"
  "$@" -f "$tmp/prompt.txt" -n "$gen" -t "$threads" --temp 0 --seed 1 -c 2048 >"$out" 2>&1 ||
    { echo "spec.sh: $1 failed; its last lines:" >&2; tail -n 5 "$out" >&2; return 1; }
  python3 - "$out" "$gen" <<'PY'
import re, sys
t = open(sys.argv[1], errors="replace").read()
enc = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", t)
dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", t)
drafted = re.search(r"n_drafted\s*=\s*(\d+)", t)
accept = re.search(r"n_accept\s*=\s*(\d+)", t)
if not dec: sys.exit("no 'decoded N tokens' line")
n, s = int(dec.group(1)), float(dec.group(2))
e = float(enc.group(2)) if enc else 0.0
print(n / s, n / (s + e), drafted.group(1) if drafted else 0, accept.group(1) if accept else 0, enc.group(1) if enc else 0)
PY
}
# llama-lookup with prompt lookup (on) and without (--spec-draft-n-max 0), alternating; one JSON line.
llama_compare() {
  local model="$1" name="$2" on=() off=() r
  for ((r = 0; r < reps; r++)); do
    if ((r % 2)); then off+=("$(llama_run "$llama_bin/llama-lookup" -m "$model" --spec-draft-n-max 0)") || return 1; fi
    on+=("$(llama_run "$llama_bin/llama-lookup" -m "$model" --spec-draft-n-max 16)") || return 1
    if ((r % 2 == 0)); then off+=("$(llama_run "$llama_bin/llama-lookup" -m "$model" --spec-draft-n-max 0)") || return 1; fi
  done
  python3 - "$name" "$(cut -d' ' -f1-3 /proc/loadavg)" "${on[@]}" -- "${off[@]}" <<'PY'
import json, statistics, sys
name, load, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
k = rest.index("--")
on = [list(map(float, x.split())) for x in rest[:k]]
off = [list(map(float, x.split())) for x in rest[k + 1:]]
med = lambda rows, i: statistics.median(r[i] for r in rows)
d_on, d_off, w_on, w_off = med(on, 0), med(off, 0), med(on, 1), med(off, 1)
drafted, accepted = on[-1][2], on[-1][3]
print(json.dumps({"bench": "spec_llamacpp", "tool": "llama-lookup", "model": name, "batch": 1, "prompt_tokens": int(on[-1][4]),
                  "tok_per_s_spec": round(w_on, 2), "tok_per_s_base": round(w_off, 2), "ratio": round(w_on / w_off, 3),
                  "decode_tok_per_s_spec": round(d_on, 2), "decode_tok_per_s_base": round(d_off, 2),
                  "ratio_decode": round(d_on / d_off, 3), "drafted": int(drafted), "accepted": int(accepted),
                  "acceptance": round(accepted / drafted, 3) if drafted else 0.0, "load": load}))
PY
}
for s in ${shapes//,/ }; do
  for t in ${types//,/ }; do
    mc=$(scripts/bench/model.sh "$s-copy:$t" | tail -1)
    echo "# $s-copy $t, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$bench" --model "$mc" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 \
      --text engine/spec/ngram_proposer.cpp --workloads repetitive,plain --dump-prompt "$tmp/prompt.txt"
    if [ -n "$llama_why" ]; then
      echo "# llama.cpp: skipped: $llama_why"
    else
      echo "# $s-copy $t with llama.cpp's llama-lookup, load: $(cut -d' ' -f1-3 /proc/loadavg)"
      llama_compare "$mc" "$s-copy-$t" || echo "# llama.cpp: failed on $s-copy $t (see above)"
    fi
    m=$(scripts/bench/model.sh "$s:$t" | tail -1)
    echo "# $s $t, load: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$bench" --model "$m" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 --workloads "$random_workloads"
    if [ -n "$draft" ]; then
      if [ "$draft" = self ]; then d="$m"; else d=$(scripts/bench/model.sh "$draft:$t" | tail -1); fi
      echo "# $s $t, draft $(basename "$d")"
      "$bench" --model "$m" --batch "$batch" --threads "$threads" --gen "$gen" --reps "$reps" --tool 300 --draft-model "$d"
      if [ -z "$llama_why" ] && [ -x "$llama_bin/llama-speculative" ]; then
        # llama-speculative (a draft model, greedy) on the copy model's prompt: decode tok/s and acceptance
        echo "# $s $t with llama.cpp's llama-speculative, draft $(basename "$d")"
        llama_run "$llama_bin/llama-speculative" -m "$m" -md "$d" --spec-draft-n-max 7 |
          awk '{ printf "{\"bench\":\"spec_llamacpp\",\"tool\":\"llama-speculative\",\"decode_tok_per_s_spec\":%.2f,\"tok_per_s_spec\":%.2f,\"drafted\":%d,\"accepted\":%d}\n", $1, $2, $3, $4 }' ||
          echo "# llama.cpp: llama-speculative failed"
      else
        echo "# llama.cpp: llama-speculative skipped: ${llama_why:-$llama_bin/llama-speculative not found}"
      fi
    fi
  done
done
