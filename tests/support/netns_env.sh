# Sourced after multiproc_env.sh by the multi-host e2e tests (#28: remote_netns, remote_netns_sentinel):
# network namespaces joined by veth pairs on private test addresses (10.231.0.0/16, which exist only
# inside the namespaces created here), the tool server, and a remote worker per namespace.
# netns_start: the control plane's namespace $ns_cp (10.231.0.1 and 10.231.0.2 on its lo), or exit 77
# with the reason (no privilege); everything is removed on exit.
need_tools ip

tag="aq$$"
ns_cp="${tag}cp"
namespaces=()
net_cleanup() {
  for ns in "${namespaces[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  cleanup
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
netns_start() {
  if ! ip netns add "$ns_cp" 2>"$tmp/netns.err"; then
    echo "skip: cannot create network namespaces: $(cat "$tmp/netns.err")"
    exit 77
  fi
  namespaces=("$ns_cp")
  trap net_cleanup EXIT
  ip netns exec "$ns_cp" ip link set lo up
  ip netns exec "$ns_cp" ip addr add 10.231.0.1/32 dev lo
  ip netns exec "$ns_cp" ip addr add 10.231.0.2/32 dev lo  # a second "host" there (a Redis replica)
}
# NOTE: a veth pair per worker straight into the control plane's namespace, not a bridge: a host
# with bridge-nf-call-iptables filters bridged traffic through its own firewall. The control plane's
# addresses are 10.231.0.0/24 (on its lo) for everyone; worker N reaches them over 10.231.N.0/24.
join() {  # join NS N: NS <-> the control plane's namespace; the control plane's end is ${tag}a<N>
  local ns=$1 n=$2
  ip link add "${tag}a$n" type veth peer name "${tag}b$n"
  ip link set "${tag}a$n" netns "$ns_cp"
  ip link set "${tag}b$n" netns "$ns"
  ip netns exec "$ns_cp" ip addr add "10.231.$n.1/24" dev "${tag}a$n"
  ip netns exec "$ns_cp" ip link set "${tag}a$n" up
  ip netns exec "$ns" ip addr add "10.231.$n.2/24" dev "${tag}b$n"
  ip netns exec "$ns" ip link set "${tag}b$n" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip route add 10.231.0.0/24 via "10.231.$n.1"
}
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# start_tools SLOW_S: the tool server on 10.231.0.1:8081 in $ns_cp: /fast answers at once, /slow after
# SLOW_S seconds; every request's call id goes to $tmp/calls.txt, each id's one effect to
# $tmp/effects.txt (a second effect of one call id would be a duplicate).
start_tools() {
  cat >"$tmp/tools.py" <<'PY'
import http.server, json, sys, threading, time
calls, effects, slow_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        call_id = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))["call_id"]
        with lock, open(calls, "a") as f: f.write(call_id + "\n")
        if self.path == "/slow": time.sleep(slow_s)
        with lock:
            if call_id not in open(effects).read().split():
                with open(effects, "a") as f: f.write(call_id + "\n")
        out = b'{"output":"sunny"}'
        self.send_response(200); self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("10.231.0.1", 8081), H).serve_forever()
PY
  touch "$tmp/calls.txt" "$tmp/effects.txt"
  in_ns "$ns_cp" python3 "$tmp/tools.py" "$tmp/calls.txt" "$tmp/effects.txt" "$1" >"$tmp/tools.log" 2>&1 &
  pids+=($!)
}

# start_worker ID [AGENTQD_ARGS...]: a new namespace with one remote worker of the control plane at
# $base (worker token $wtoken, Redis URL $redis_url), data in $tmp/ID, log $tmp/ID.log; its link
# number in $tmp/ID.link (the control plane's end of its veth: ${tag}a<N>).
n_w=0
start_worker() {
  local id=$1 ns="${tag}$1"
  shift
  n_w=$((n_w + 1))
  ip netns add "$ns"
  namespaces+=("$ns")
  join "$ns" "$n_w"
  echo "$n_w" >"$tmp/$id.link"
  in_ns "$ns" "$bin/agentqd" --role worker --remote "$base" --control-plane-token "$wtoken" --data-dir "$tmp/$id" \
    --worker-id "$id" --redis "$redis_url" --model "$model" --allow-addresses 10.231.0.0/16 \
    --lease-ms 3000 --heartbeat-ms 200 --reclaim-idle-ms 1500 --reclaim-interval-ms 300 "$@" >"$tmp/$id.log" 2>&1 &
  pids+=($!)
}

# Jobs through the caller's api() at $base: owner JOB (its lease owner, from the control plane's
# SQLite), submit BODY -> id, tool_job PATH (a required server-side tool at /PATH), client_job.
owner() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT lease_owner FROM jobs WHERE id=?', (sys.argv[2],)).fetchone()[0])" "$tmp/cp/agentq.db" "$1"; }
submit() { api "$base/v1/jobs" -d "$1" | field '["id"]'; }
tool_fn='"function":{"name":"look","parameters":{"type":"object","properties":{"q":{"enum":["Paris","London"]}},"required":["q"]}}'
tool_job() {
  submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
    "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function",'"$tool_fn"',"execution":{"type":"http","url":"http://10.231.0.1:8081/'"$1"'"}}]}'
}
client_job() {
  submit '{"model":"stories260K","messages":[{"role":"user","content":"weather?"}],"tool_choice":"required",
    "parallel_tool_calls":false,"max_turns":2,"max_tokens_per_turn":128,"tools":[{"type":"function",'"$tool_fn"'}]}'
}
# answer_client JOB: the output of its pending call
answer_client() {
  local call
  call=$(api "$base/v1/jobs/$1" | field '["required_action"]["tool_calls"][0]["id"]')
  api "$base/v1/jobs/$1/tool_outputs" -d "{\"tool_outputs\":[{\"tool_call_id\":\"$call\",\"output\":\"sunny\"}]}" >/dev/null
}
