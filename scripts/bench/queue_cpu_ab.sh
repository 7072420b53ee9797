#!/usr/bin/env bash
# Paired A/B of agentqd's CPU per job on the one-request-per-job path (issue 29, docs/queue_perf.md):
# for each round, binary A then binary B (each a fresh all-in-one agentqd with its embedded redis,
# WAL + synchronous=FULL + AOF everysec as always): 100 warm-up jobs, then N 1-token jobs from 8
# keep-alive clients (scripts/bench/loadgen.py throughput phase); agentqd's CPU-s per 1,000 jobs
# from /proc/PID/stat (user + system) and the 1-min load at the start. With STRACE=1 also the
# syscall counts per job (strace -f -c over agentqd; slows it, so its CPU figure is not comparable).
#   scripts/bench/queue_cpu_ab.sh BIN_DIR_A BIN_DIR_B [JOBS] [ROUNDS]   (default 1000, 3)
# ARGS_A / ARGS_B: extra agentqd flags per side (e.g. ARGS_B="--http-threads 4" with the same binary).
# Prints one line per run and one JSON line: medians and the paired ratios B/A.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin_a=$1
bin_b=$2
n_jobs=${3:-1000}
rounds=${4:-3}
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
source scripts/bench/agentqd_bench.sh
bench_init qcpu

run_one() {  # bin_dir label extra_args -> prints "label cpu_per_1000 jobs_per_s load [syscalls]"
  local bin=$1 label=$2 d="$tmp/$2.$RANDOM"
  local -a extra_args
  read -r -a extra_args <<<"$3"
  bench_start "$bin" "$d" "${extra_args[@]}"
  local key
  key=$(bench_key cpu)
  python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs 100 --clients 8 --phases throughput >/dev/null
  local load c0 c1 st=""
  load=$(cut -d' ' -f1 /proc/loadavg)
  [ "${STRACE:-0}" = 1 ] && { strace -f -c -p "$pid" -o "$d.strace" 2>/dev/null & st=$!; sleep 1; }
  c0=$(bench_cpu)
  local out
  out=$(python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs "$n_jobs" --clients 8 --phases throughput)
  c1=$(bench_cpu)
  local extra=""
  if [ -n "$st" ]; then
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    extra=$(awk -v n="$n_jobs" '$NF ~ /^(futex|fdatasync|pwrite64|pread64|fcntl|epoll_wait|sendto|recvfrom|write|read)$/ {
      printf " %s=%.1f", $NF, $4 / n }' "$d.strace")
  fi
  bench_stop
  local jps
  jps=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1].splitlines()[-1]); print(round(d.get("jobs_per_s", d.get("throughput", {}).get("jobs_per_s", 0)), 1))' "$out" 2>/dev/null || echo "?")
  echo "$label $(python3 -c "print(round(($c1 - $c0) / $tck / $n_jobs * 1000, 3))") $jps $load$extra"
}

bench_ab_rounds "$rounds"
python3 - "$tmp/results" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
a = [float(r[3]) for r in rows if r[2] == "A"]
b = [float(r[3]) for r in rows if r[2] == "B"]
print(json.dumps({"cpu_s_per_1000_A": a, "cpu_s_per_1000_B": b, "median_A": statistics.median(a),
                  "median_B": statistics.median(b), "paired_ratio_B_over_A": [round(y / x, 3) for x, y in zip(a, b)],
                  "load_1min": [float(r[5]) for r in rows]}))
PY
