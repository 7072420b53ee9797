#!/usr/bin/env bash
# A flame graph of agentqd's CPU over one-request jobs end to end (issue 29: submit -> commit ->
# publish -> claim -> turn -> terminal -> webhook scan), as queue.sh's headline shape runs them
# (scripts/bench/queue_node.mjs: 16 keep-alive connections, 1-token jobs on stories260K, an
# all-in-one agentqd with its embedded redis; WAL + synchronous=FULL + AOF everysec as always).
# perf samples the whole process with DWARF call graphs (the release build keeps no frame
# pointers) while JOBS jobs run after a 1,000-job warm-up; each stack's root is its thread's name
# (aq-db-writer, aq-http, aq-engine, aq-job, ...), so the graph's first row is the per-thread
# split of queue_threads.sh. Writes OUT (an SVG; default docs/bench/queue_flame.svg) and prints the
# per-thread shares of the samples.
#   scripts/bench/queue_flamegraph.sh [JOBS] [OUT]   (default 5000; AGENTQ_BIN_DIR as queue.sh)
# Needs perf (linux-perf) and Brendan Gregg's FlameGraph scripts (stackcollapse-perf.pl,
# flamegraph.pl: https://github.com/brendangregg/FlameGraph) in FLAMEGRAPH_DIR (default ../FlameGraph);
# neither is a dependency of agentq.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}; out=${2:-docs/bench/queue_flame.svg}
bin="${AGENTQ_BIN_DIR:-${AGENTQ_BUILD_DIR:-build}/bin}"
# shellcheck disable=SC2034  # agentqd_bench.sh reads it
model="${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf"
fg="${FLAMEGRAPH_DIR:-../FlameGraph}"
command -v perf >/dev/null || { echo "queue_flamegraph.sh: perf not found (apt install linux-perf)" >&2; exit 1; }
for s in stackcollapse-perf.pl flamegraph.pl; do
  [ -x "$fg/$s" ] || { echo "queue_flamegraph.sh: $fg/$s not found (set FLAMEGRAPH_DIR to a FlameGraph checkout)" >&2; exit 1; }
done
# shellcheck source=scripts/bench/agentqd_bench.sh
source scripts/bench/agentqd_bench.sh
bench_init qflame
bench_start "$bin" "$tmp/data"
key=$(bench_key flame)
node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs 1000 --clients 16 \
  --tag w >/dev/null
load0=$(cut -d' ' -f1 /proc/loadavg)
# NOTE: 499 Hz and 16 KiB of stack a sample: enough for every thread's deepest path (SQLite's
# b-tree under the writer's op, the kernel's fdatasync) at a few tens of MB for a ~3 s window.
perf record -q -F 499 --call-graph dwarf,16384 -p "$pid" -o "$tmp/perf.data" 2>"$tmp/perf.log" &
perf_pid=$!
sleep 0.5
run=$(node scripts/bench/queue_node.mjs jobs --url "$url" --key "$key" --model stories260K --jobs "$n" --clients 16 \
  --pid "$pid")
kill -INT "$perf_pid"
wait "$perf_pid" || true
bench_stop
jobs_per_s=$(echo "$run" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r["jobs_per_s"])')
perf script -i "$tmp/perf.data" 2>/dev/null | "$fg/stackcollapse-perf.pl" >"$tmp/folded"
host=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
"$fg/flamegraph.pl" --title "agentqd: one-request jobs end to end ($n jobs, $jobs_per_s jobs/s, $(nproc) x $host)" \
  --subtitle "perf cpu-clock 499 Hz, DWARF stacks; the root frames are thread names; load $load0" \
  --width 1600 --minwidth 4 "$tmp/folded" >"$out"
echo "wrote $out ($n jobs at $jobs_per_s jobs/s)" >&2
# The first row as a table: each thread's share of agentqd's samples, and what its samples were
# under (the first of these found in the stack, in this order: the kernel's flush, WAL/file I/O,
# futex waits and wakes, epoll, sockets, SQLite, JSON, the allocator, the model's kernels, hiredis).
python3 - "$tmp/folded" <<'PY'
import collections, re, sys
cats = [("fdatasync", r"fdatasync"), ("pwrite/pread", r"pwrite|pread"), ("futex", r"futex|pthread_cond|sem_"),
        ("epoll", r"epoll"), ("socket", r"sendto|recvfrom|writev|readv|sendmsg|recvmsg|tcp_|__libc_read|__libc_write|sock"),
        ("sqlite", r"sqlite3"), ("json", r"nlohmann"), ("malloc", r"malloc|_int_free|cfree|operator new|operator delete"),
        ("model", r"forward|matmul|rows8|attend|rmsnorm|kernels"), ("redis", r"redis")]
total, by, what = 0, collections.Counter(), collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    stack, n = line.rstrip("\n").rsplit(" ", 1)
    n = int(n)
    thread = re.sub(r"-[0-9/]+$", "", stack.split(";", 1)[0])
    total += n
    by[thread] += n
    what[thread][next((c for c, pat in cats if re.search(pat, stack)), "other")] += n
for thread, n in by.most_common():
    if n / total >= 0.005:
        parts = ", ".join(f"{c} {100 * m / n:.0f} %" for c, m in what[thread].most_common(6))
        print(f"{thread:16s} {100 * n / total:5.1f} %   {parts}")
PY
