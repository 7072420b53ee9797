#!/usr/bin/env bash
# futex calls per job by thread name (issue 29, docs/queue_perf.md): an all-in-one agentqd (build/bin,
# or AGENTQ_BIN_DIR), 100 warm-up jobs, then 400 1-token jobs from 8 clients under strace -f -ff
# -e trace=futex; each thread's file is counted and named from /proc/PID/task/TID/comm (agentqd names
# its threads aq-http, aq-job, aq-db-writer, aq-relay, aq-webhook-scan, aq-dispatch, aq-engine-pool).
#   scripts/bench/futex_by_thread.sh          (needs strace; run from the repository root)
set -euo pipefail
d=$(mktemp -d); bin=${AGENTQ_BIN_DIR:-build/bin}; model=${AGENTQ_SHARED_DIR:-../shared}/models/stories260K.gguf
ak="aq_fx_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
$bin/agentqd --data-dir $d/data --listen 127.0.0.1:0 --port-file $d/port --model $model --admin-key $ak --rate-limit 0 --log-level warn >$d/log 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s $d/port ] && break; sleep 0.1; done
url="http://127.0.0.1:$(cat $d/port)"
for _ in $(seq 1 100); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
key=$(curl -fsS -X POST -H "Authorization: Bearer $ak" -H 'content-type: application/json' -d '{"tenant":"fx"}' "$url/v1/keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs 100 --clients 8 --phases throughput >/dev/null
mkdir $d/fx
strace -f -ff -e trace=futex -o $d/fx/f -p $pid 2>/dev/null & st=$!
sleep 1
python3 scripts/bench/loadgen.py --url "$url" --key "$key" --jobs 400 --clients 8 --phases throughput >/dev/null
for t in /proc/$pid/task/*; do echo "$(basename $t) $(cat $t/comm)"; done > $d/names
kill -INT $st; wait $st || true
kill $pid; wait $pid || true
for f in $d/fx/f.*; do tid=${f##*.}; n=$(wc -l <$f); name=$(awk -v t=$tid '$1==t {print $2}' $d/names); echo "$n ${name:-exited}"; done |
  awk '{s[$2]+=$1; c[$2]++; t+=$1} END {printf "total futex per job %.1f\n", t/400; for (k in s) printf "%-18s threads=%d futex_per_job=%.1f\n", k, c[k], s[k]/400}' | sort -t= -k3 -rn
rm -rf $d
