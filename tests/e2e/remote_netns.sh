#!/usr/bin/env bash
# e2e (#28), multi-host: the control plane (with redis-server and a tool server) and each of two
# remote workers in its own network namespace (a veth pair from each worker's namespace to the control plane's, private test addresses
# 10.231.0.0/16 that exist only inside the namespaces this test creates) and its own data dir. Jobs
# with a server-side tool and a client tool complete across the namespaces; a worker's whole
# namespace is killed (every process in it, -9) inside a tool call and the job finishes on the
# other; then the other worker's link is cut past its lease and healed: its late writes are fenced
# and the job it held finishes. Reports lost jobs (0), duplicate effects (0) and time to recover.
# The Redis primary failed over with Sentinel across such namespaces: remote_netns_sentinel.sh (the
# same helpers, tests/support/netns_env.sh). Needs root (ip netns); otherwise exit 77 with the reason.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd
need_model
need_tools redis-server redis-cli python3 curl ip

source "$src/tests/support/netns_env.sh"
netns_start

# control-plane namespace: redis-server, the tool server (/slow: 8 s; one effect per call id), the API
rport=6379
redis_url="redis://10.231.0.1:$rport"
mkdir -p "$tmp/redis"
in_ns "$ns_cp" redis-server --port $rport --bind 10.231.0.1 --protected-mode no --dir "$tmp/redis" --appendonly yes --appendfsync always \
  --save "" --logfile "$tmp/redis.log" &
pids+=($!)
for _ in $(seq 1 100); do in_ns "$ns_cp" redis-cli -h 10.231.0.1 ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
start_tools 8
admin="aq_remote_netns_admin_0123456789ab"
wtoken="wt_remote_netns_token_0123456789"
in_ns "$ns_cp" "$bin/agentqd" --role api --listen 10.231.0.1:8080 --data-dir "$tmp/cp" --redis "$redis_url" \
  --model "$model" --admin-key "$admin" --rate-limit 0 --heartbeat-ms 200 --worker-token "$wtoken" --allow-addresses 10.231.0.0/16 \
  >"$tmp/cp.log" 2>&1 &
pids+=($!)
base="http://10.231.0.1:8080"
api() { in_ns "$ns_cp" curl -sf -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' "$@"; }
for _ in $(seq 1 300); do api "$base/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

start_worker wa
start_worker wb

wait_polls=600  # namespaces: slower paths
all=()

# 1. server-side and client tools across namespaces
j1=$(tool_job fast); all+=("$j1")
j2=$(client_job); all+=("$j2")
wait_status "$j1" completed incomplete
wait_status "$j2" requires_action
answer_client "$j2"
wait_status "$j2" completed incomplete
echo "across namespaces: $j1 (server tool) on $(owner "$j1"), $j2 (client tool) on $(owner "$j2")"

# 2. kill a worker's namespace inside a tool call
j3=$(tool_job slow); all+=("$j3")
for _ in $(seq 1 300); do grep -q "${j3#job_}" "$tmp/calls.txt" && break; sleep 0.05; done
victim=$(owner "$j3")
for p in $(ip netns pids "${tag}$victim"); do kill -9 "$p"; done
t0=$(date +%s.%N)
wait_status "$j3" completed incomplete
echo "namespace of $victim killed: $j3 finished on $(owner "$j3") $(python3 -c "import time; print(f'{time.time()-$t0:.1f}')") s later"
[ "$(owner "$j3")" != "$victim" ] || fail "$j3 finished on the killed $victim"

# 3. partition the survivor (link down) past its lease inside a tool call, start a third worker, heal
survivor=$(owner "$j3")
start_worker wc
sleep 1
j4=$(tool_job slow); all+=("$j4")
for _ in $(seq 1 300); do grep -q "${j4#job_}" "$tmp/calls.txt" && break; sleep 0.05; done
held=$(owner "$j4")
link="${tag}a$(cat "$tmp/$held.link")"
ip netns exec "$ns_cp" ip link set "$link" down
t0=$(date +%s.%N)
sleep 5  # past the 3 s lease: the other worker claims the job (epoch + 1)
ip netns exec "$ns_cp" ip link set "$link" up
wait_status "$j4" completed incomplete
echo "partition of $held: $j4 finished on $(owner "$j4") $(python3 -c "import time; print(f'{time.time()-$t0:.1f}')") s after the cut"
grep -q "fenced\|dropped\|lost" "$tmp/$held.log" && echo "$held after healing: its late writes were refused (log)"

# invariants: every job terminal exactly once (SQLite), one effect per call id
lost=0
for j in "${all[@]}"; do case "$(status "$j")" in completed | incomplete) ;; *) lost=$((lost + 1)) ;; esac; done
dups=$(( $(wc -l <"$tmp/effects.txt") - $(sort -u "$tmp/effects.txt" | wc -l) ))
resent=$(( $(wc -l <"$tmp/calls.txt") - $(sort -u "$tmp/calls.txt" | wc -l) ))
for id in wa wb wc; do
  [ "$(find "$tmp/$id" \( -name '*.db' -o -name '*.db-*' -o -name '*.sqlite*' \) | wc -l)" = 0 ] || fail "$id has a database file"
done
echo "lost $lost, duplicate effects $dups, tool requests re-sent under the same call id $resent"
[ "$lost" = 0 ] && [ "$dups" = 0 ] || fail "invariants"
echo "ok"
