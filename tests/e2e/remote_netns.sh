#!/usr/bin/env bash
# e2e (#28), multi-host: the control plane (with redis-server and a tool server) and each of two
# remote workers in its own network namespace (a veth pair from each worker's namespace to the control plane's, private test addresses
# 10.231.0.0/16 that exist only inside the namespaces this test creates) and its own data dir. Jobs
# with a server-side tool and a client tool complete across the namespaces; a worker's whole
# namespace is killed (every process in it, -9) inside a tool call and the job finishes on the
# other; then the other worker's link is cut past its lease and healed: its late writes are fenced
# and the job it held finishes. Reports lost jobs (0), duplicate effects (0) and time to recover.
# Needs root (ip netns); otherwise exit 77 with the reason.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd
need_model
need_tools redis-server redis-cli python3 curl ip

tag="aq$$"
ns_cp="${tag}cp"
if ! ip netns add "$ns_cp" 2>"$tmp/netns.err"; then
  echo "skip: cannot create network namespaces: $(cat "$tmp/netns.err")"
  exit 77
fi
namespaces=("$ns_cp")
net_cleanup() {
  for ns in "${namespaces[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  cleanup
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap net_cleanup EXIT
# NOTE: a veth pair per worker straight into the control plane's namespace, not a bridge: a host
# with bridge-nf-call-iptables filters bridged traffic through its own firewall. The control plane
# is 10.231.0.1 (on its lo) for everyone; worker N reaches it over 10.231.N.0/24.
ip netns exec "$ns_cp" ip link set lo up
ip netns exec "$ns_cp" ip addr add 10.231.0.1/32 dev lo
join() {  # join NS N: NS <-> the control plane's namespace; the control plane's end is cp<N>
  local ns=$1 n=$2
  ip link add "${tag}a$n" type veth peer name "${tag}b$n"
  ip link set "${tag}a$n" netns "$ns_cp"
  ip link set "${tag}b$n" netns "$ns"
  ip netns exec "$ns_cp" ip addr add "10.231.$n.1/24" dev "${tag}a$n"
  ip netns exec "$ns_cp" ip link set "${tag}a$n" up
  ip netns exec "$ns" ip addr add "10.231.$n.2/24" dev "${tag}b$n"
  ip netns exec "$ns" ip link set "${tag}b$n" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip route add 10.231.0.1/32 via "10.231.$n.1"
}
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# control-plane namespace: redis-server, the tool server (/slow: 8 s; one effect per call id), the API
rport=6379
mkdir -p "$tmp/redis"
in_ns "$ns_cp" redis-server --port $rport --bind 10.231.0.1 --protected-mode no --dir "$tmp/redis" --appendonly yes --appendfsync always \
  --save "" --logfile "$tmp/redis.log" &
pids+=($!)
for _ in $(seq 1 100); do in_ns "$ns_cp" redis-cli -h 10.231.0.1 ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
cat >"$tmp/tools.py" <<'PY'
import http.server, json, sys, threading, time
calls, effects = sys.argv[1:3]
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        call_id = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))["call_id"]
        with lock, open(calls, "a") as f: f.write(call_id + "\n")
        if self.path == "/slow": time.sleep(8)
        with lock:
            if call_id not in open(effects).read().split():
                with open(effects, "a") as f: f.write(call_id + "\n")
        out = b'{"output":"sunny"}'
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("10.231.0.1", 8081), H).serve_forever()
PY
touch "$tmp/calls.txt" "$tmp/effects.txt"
in_ns "$ns_cp" python3 "$tmp/tools.py" "$tmp/calls.txt" "$tmp/effects.txt" >"$tmp/tools.log" 2>&1 &
pids+=($!)
admin="aq_remote_netns_admin_0123456789ab"
wtoken="wt_remote_netns_token_0123456789"
in_ns "$ns_cp" "$bin/agentqd" --role api --listen 10.231.0.1:8080 --data-dir "$tmp/cp" --redis "redis://10.231.0.1:$rport" \
  --model "$model" --admin-key "$admin" --rate-limit 0 --heartbeat-ms 200 --worker-token "$wtoken" --allow-addresses 10.231.0.0/16 \
  >"$tmp/cp.log" 2>&1 &
pids+=($!)
base="http://10.231.0.1:8080"
api() { in_ns "$ns_cp" curl -sf -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' "$@"; }
for _ in $(seq 1 300); do api "$base/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

n_w=0
start_worker() {  # start_worker ID: a new namespace with one remote worker
  local id=$1 ns="${tag}$1"
  n_w=$((n_w + 1))
  ip netns add "$ns"
  namespaces+=("$ns")
  join "$ns" "$n_w"
  echo "$n_w" >"$tmp/$id.link"
  in_ns "$ns" "$bin/agentqd" --role worker --remote "$base" --control-plane-token "$wtoken" --data-dir "$tmp/$id" \
    --worker-id "$id" --redis "redis://10.231.0.1:$rport" --model "$model" --allow-addresses 10.231.0.0/16 \
    --lease-ms 3000 --heartbeat-ms 200 --reclaim-idle-ms 1500 --reclaim-interval-ms 300 >"$tmp/$id.log" 2>&1 &
  pids+=($!)
}
start_worker wa
start_worker wb

wait_polls=600  # namespaces: slower paths
owner() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT lease_owner FROM jobs WHERE id=?', (sys.argv[2],)).fetchone()[0])" "$tmp/cp/agentq.db" "$1"; }
submit() { api "$base/v1/jobs" -d "$1" | field '["id"]'; }
fn='"function":{"name":"look","parameters":{"type":"object","properties":{"q":{"enum":["Paris","London"]}},"required":["q"]}}'
tool_job() {
  submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
    "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function",'"$fn"',"execution":{"type":"http","url":"http://10.231.0.1:8081/'"$1"'"}}]}'
}
all=()

# 1. server-side and client tools across namespaces
j1=$(tool_job fast); all+=("$j1")
j2=$(submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
  "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function",'"$fn"'}]}'); all+=("$j2")
wait_status "$j1" completed incomplete
wait_status "$j2" requires_action
call=$(api "$base/v1/jobs/$j2" | field '["required_action"]["tool_calls"][0]["id"]')
api "$base/v1/jobs/$j2/tool_outputs" -d "{\"tool_outputs\":[{\"tool_call_id\":\"$call\",\"output\":\"sunny\"}]}" >/dev/null
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
