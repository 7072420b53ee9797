#!/usr/bin/env bash
# e2e: scripts/bench/run.sh --smoke (stories260K, one repetition) produces a results.json that
# parses and holds every benchmark, and report.sh renders a BENCHMARKS.md from it (into a temp dir);
# a section that runs out of its time limit is recorded as such (results.json, the report) and
# run.sh exits 1 after writing everything.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
for t in agentq-bench_kernels agentq-bench_sched agentq-bench_engine agentq-mkgguf; do
  [ -x "$bin/$t" ] || { echo "skip: no $bin/$t"; exit 77; }
done
[ -f "$shared/models/stories260K.gguf" ] || { echo "skip: no $shared/models/stories260K.gguf"; exit 77; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
AGENTQ_BIN_DIR="$bin" AGENTQ_SHARED_DIR="$shared" AGENTQ_BENCH_NICE=0 \
  "$src/scripts/bench/run.sh" --smoke --out "$tmp/out" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
echo "run.sh --smoke: $(( $(date +%s) - t0 )) s"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/out/results.json"
python3 - "$tmp/out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["meta"]
for k in ("commit", "date", "nproc", "cpu_model", "dirty"):
    assert k in m, k
b = r["benches"]
for name in ("bandwidth", "batching", "residency", "engine"):
    assert name in b and b[name]["runs"], name
    assert b[name]["ratios"], name + ": no ratios"
assert [s["status"] for s in m["sections"]] == ["ok"] * 4 and m["incomplete"] == [], m["sections"]
res = b["residency"]["runs"][0]
assert len(res["computed_tokens_by_turn"]) == res["turns"], res
assert res["computed_tokens_per_turn"] < res["computed_tokens_per_turn_reprefill"], res
# the spill variant really went through the disk tier, and computed no more than resident
assert res["n_spills"] > 0 and res["n_restores"] > 0, res
assert res["computed_tokens_per_turn_spill"] == res["computed_tokens_per_turn"], res
s = b["batching"]["figures"]["scaling.1"]
assert s["min"] <= s["median"] <= s["max"] and s["median"] > 0, s
print("results.json ok:", ", ".join(sorted(b)))
PY
"$src/scripts/bench/report.sh" "$tmp/out" "$tmp/docs" >/dev/null
grep -q "^## Machine" "$tmp/docs/BENCHMARKS.md"
grep -q "same-run baseline" "$tmp/docs/BENCHMARKS.md"
grep -q "^### Sections" "$tmp/docs/BENCHMARKS.md"

# A 0.1 s limit (the floor; the smoke residency run takes ~0.7 s): the section times out, the run
# says so and exits 1.
rc=0
AGENTQ_BIN_DIR="$bin" AGENTQ_SHARED_DIR="$shared" AGENTQ_BENCH_NICE=0 \
  "$src/scripts/bench/run.sh" --smoke --only residency --timeout-scale 0.001 --out "$tmp/to" >"$tmp/to.log" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$tmp/to.log"; echo "run.sh with a 0.1 s limit exited $rc, want 1"; exit 1; }
python3 - "$tmp/to/results.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["meta"]
assert m["incomplete"] == ["residency"], m
s = m["sections"][0]
assert s["status"] == "timeout" and "limit" in s["reason"], s
PY
"$src/scripts/bench/report.sh" "$tmp/to" "$tmp/docs-to" >/dev/null
grep -q "This run is incomplete" "$tmp/docs-to/BENCHMARKS.md"
grep -q "TIMED OUT" "$tmp/docs-to/BENCHMARKS.md"
echo "bench smoke ok"
