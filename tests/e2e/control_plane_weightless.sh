#!/usr/bin/env bash
# e2e (#28): a control plane without weights. agentqd --role api on a synthetic model with large
# weights (agentq-mkgguf 110m, f32: ~0.5 GB of tensors) reads only the model's GGUF header: the
# file is never mapped (not in /proc/PID/maps) and the process's peak RSS (VmHWM) is that of the
# same control plane on the tiny model (1 MiB) give or take a few MiB — whatever the process's
# baseline (the CUDA libraries a CUDA build links are most of it) — while an all-in-one agentqd
# on the same file holds the weights. Both answer
# the same set of requests — valid, unknown model, empty messages, a prompt past the context, a
# tool schema the grammar refuses, tool_choice mistakes, a bad response schema, the OpenAI chat
# endpoint with a long prompt, a prompt within the context but past the KV pool — with the same
# status and, for refusals, the same JSON body. The KV-room check: the all-in-one has a 16 MiB
# pool (384 tokens of this model); the control plane has none, and makes the check with the room
# a worker serving the model (--kv-budget-mb 16, split role) advertises (#28).
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
source "${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/support/multiproc_env.sh"
need_bins agentqd agentq-mkgguf
need_model
need_tools redis-server redis-cli python3 curl
vocab="$shared/models/vocab/ggml-vocab-llama-spm.gguf"
[ -f "$vocab" ] || { echo "skip: no $vocab"; exit 77; }
free_mb=$(awk '/MemAvailable/ {print int($2/1024)}' /proc/meminfo)
[ "$free_mb" -gt 4000 ] || { echo "skip: $free_mb MiB available, the all-in-one daemon and the worker need ~1.5 GiB each"; exit 77; }

mkdir -p "$tmp/models"
"$bin/agentq-mkgguf" --out "$tmp/models/big.gguf" --shape 110m --type f32 --vocab "$vocab" --threads 2 \
  >"$tmp/mkgguf.log" 2>&1 || fail "agentq-mkgguf"
weights_mb=$(( $(stat -c %s "$tmp/models/big.gguf") >> 20 ))
start_redis

admin="aq_weightless_admin_0123456789abcdef"
common=(--admin-key "$admin" --rate-limit 0 --model "$tmp/models/big.gguf" --chat-family chatml --listen 127.0.0.1:0)
"$bin/agentqd" --role api --data-dir "$tmp/api" --redis "redis://127.0.0.1:$rport/0" --port-file "$tmp/api_port" \
  "${common[@]}" >"$tmp/api.log" 2>&1 &
api_pid=$!
pids+=($api_pid)
"$bin/agentqd" --role all --data-dir "$tmp/all" --redis "redis://127.0.0.1:$rport/1" --port-file "$tmp/all_port" \
  --engine-threads 1 --kv-budget-mb 16 "${common[@]}" >"$tmp/all.log" 2>&1 &
all_pid=$!
pids+=($all_pid)
# NOTE: a worker for the control plane (its Redis, its data dir): its advert carries the KV room.
"$bin/agentqd" --role worker --data-dir "$tmp/api" --redis "redis://127.0.0.1:$rport/0" --worker-id wkv \
  --model "$tmp/models/big.gguf" --chat-family chatml --kv-budget-mb 16 --engine-threads 1 --heartbeat-ms 200 \
  --max-jobs 1 >"$tmp/worker.log" 2>&1 &
pids+=($!)
"$bin/agentqd" --role api --data-dir "$tmp/tiny" --redis "redis://127.0.0.1:$rport/2" --port-file "$tmp/tiny_port" \
  --admin-key "$admin" --model "$model" --listen 127.0.0.1:0 >"$tmp/tiny.log" 2>&1 &
tiny_pid=$!
pids+=($tiny_pid)
wait_file "$tmp/api_port"
wait_file "$tmp/tiny_port"
for _ in $(seq 1 600); do [ -s "$tmp/all_port" ] && break; kill -0 "$all_pid" || fail "all-in-one exited"; sleep 0.1; done
[ -s "$tmp/all_port" ] || fail "all-in-one did not start"

api="http://127.0.0.1:$(cat "$tmp/api_port")"
all="http://127.0.0.1:$(cat "$tmp/all_port")"
export api all admin
# the worker's advert reaches the control plane (GET /v1/workers), then one fleet poll (1 s)
for _ in $(seq 1 600); do
  curl -sf -H "Authorization: Bearer $admin" "$api/v1/workers" | grep -q '"kv_room"' && break
  sleep 0.1
done
curl -sf -H "Authorization: Bearer $admin" "$api/v1/workers" | grep -q '"kv_room"' || fail "the worker advertised no kv_room"
sleep 1.5
python3 - "$api_pid" "$all_pid" "$tmp/models/big.gguf" "$weights_mb" "$tiny_pid" <<'PY' || fail "memory or validation parity"
import json, os, sys, urllib.request

api_pid, all_pid, model_path, weights_mb, tiny_pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
api, all_, admin = os.environ["api"], os.environ["all"], os.environ["admin"]

def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + admin, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())

def msgs(text):
    return [{"role": "user", "content": text}]

long_text = "Once upon a time there was a little dog. " * 200
kv_text = "Once upon a time there was a little dog. " * 40  # 462 tokens: in the context (1024), past 384
tool = lambda params: {"type": "function", "function": {"name": "f", "description": "d", "parameters": params}}
cases = [
    ("valid", "/v1/jobs", {"model": "big", "messages": msgs("Hello"), "max_turns": 1}),
    ("valid with a tool", "/v1/jobs", {"model": "big", "messages": msgs("Hello"), "max_turns": 1,
                                        "tools": [tool({"type": "object", "properties": {"a": {"type": "integer"}}})]}),
    ("unknown model", "/v1/jobs", {"model": "nope", "messages": msgs("Hello")}),
    ("empty messages", "/v1/jobs", {"model": "big", "messages": []}),
    ("prompt past the context", "/v1/jobs", {"model": "big", "messages": msgs(long_text)}),
    ("schema the grammar refuses", "/v1/jobs", {"model": "big", "messages": msgs("Hi"),
                                                "tools": [tool({"type": "string", "pattern": "(("})]}),
    ("schema with a dangling $ref", "/v1/jobs", {"model": "big", "messages": msgs("Hi"),
                                                 "tools": [tool({"$ref": "#/definitions/missing"})]}),
    ("tool_choice names no tool", "/v1/jobs", {"model": "big", "messages": msgs("Hi"), "tools": [tool({"type": "object"})],
                                               "tool_choice": {"type": "function", "function": {"name": "g"}}}),
    ("tool_choice required, no tools", "/v1/jobs", {"model": "big", "messages": msgs("Hi"), "tool_choice": "required"}),
    ("bad response schema", "/v1/jobs", {"model": "big", "messages": msgs("Hi"),
                                         "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(("}}}}),
    ("chat completions, long prompt", "/v1/chat/completions", {"model": "big", "messages": msgs(long_text)}),
    ("prompt past the KV pool", "/v1/jobs", {"model": "big", "messages": msgs(kv_text)}),
    ("chat completions, past the KV pool", "/v1/chat/completions", {"model": "big", "messages": msgs(kv_text)}),
]
n_refused = 0
for name, path, body in cases:
    sa, ba = post(api, path, body)
    sb, bb = post(all_, path, body)
    if sa != sb:
        sys.exit(f"{name}: role api answered {sa} {ba}, all-in-one {sb} {bb}")
    if sa >= 400:
        n_refused += 1
        if ba != bb:
            sys.exit(f"{name}: bodies differ:\n  api {ba}\n  all {bb}")
    print(f"  {name}: {sa} {'' if sa < 300 else ba['error']['message'][:110]}")
context_case = [c for c in cases if c[0] == "prompt past the context"][0]
s, b = post(api, context_case[1], context_case[2])
assert "context is 1024" in b["error"]["message"], b
s, b = post(api, "/v1/jobs", {"model": "big", "messages": msgs(kv_text)})
assert s == 400 and "needs more KV memory than the engine has" in b["error"]["message"], (s, b)

def proc(pid):
    st = {l.split(":")[0]: l.split(":")[1].strip() for l in open(f"/proc/{pid}/status")}
    maps = open(f"/proc/{pid}/maps").read()
    return int(st["VmHWM"].split()[0]) >> 10, int(st["VmRSS"].split()[0]) >> 10, model_path in maps

hwm_api, rss_api, mapped_api = proc(api_pid)
hwm_all, rss_all, mapped_all = proc(all_pid)
hwm_tiny, rss_tiny, _ = proc(tiny_pid)
print(f"weights file {weights_mb} MiB; role api: peak RSS {hwm_api} MiB, RSS {rss_api} MiB, file mapped {mapped_api}; "
      f"the same on the 1 MiB tiny model: peak RSS {hwm_tiny} MiB; all-in-one: peak RSS {hwm_all} MiB, RSS {rss_all} MiB")
assert not mapped_api, "the control plane mapped the model file"
assert hwm_api - hwm_tiny < min(32, weights_mb // 8), \
    f"control plane peak RSS {hwm_api} MiB vs {hwm_tiny} MiB on the tiny model: it grew with {weights_mb} MiB of weights"
assert hwm_all > weights_mb // 2, "the all-in-one daemon did not hold the weights: the comparison shows nothing"
print(f"validation parity: {len(cases)} requests, {n_refused} refused, same answers")
PY
grep -q "weights not loaded: role api" "$tmp/api.log" || fail "the API did not log its header-only load"

# The control plane's host needs no weights at all: agentq-engine header writes the header alone.
if [ -x "$bin/agentq-engine" ]; then
  mkdir -p "$tmp/hdr"
  "$bin/agentq-engine" header "$tmp/models/big.gguf" "$tmp/hdr/big.gguf" >/dev/null || fail "agentq-engine header"
  hdr_kb=$(( $(stat -c %s "$tmp/hdr/big.gguf") >> 10 ))
  [ "$hdr_kb" -lt 4096 ] || fail "the header file is $hdr_kb KiB"
  "$bin/agentqd" --role api --data-dir "$tmp/hdrapi" --redis "redis://127.0.0.1:$rport/3" --port-file "$tmp/hdr_port" \
    --admin-key "$admin" --model "$tmp/hdr/big.gguf" --chat-family chatml --listen 127.0.0.1:0 >"$tmp/hdr.log" 2>&1 &
  pids+=($!)
  wait_file "$tmp/hdr_port"
  long=$(python3 -c 'print("Once upon a time there was a little dog. " * 200)')
  ask() { curl -s -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' "$1/v1/jobs" \
    -d "{\"model\":\"big\",\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}"; }
  a=$(ask "$api"); h=$(ask "http://127.0.0.1:$(cat "$tmp/hdr_port")")
  [ "$a" = "$h" ] || fail "the header-only file validates differently: $h vs $a"
  echo "header-only file: $hdr_kb KiB, the same answers as the whole $weights_mb MiB file"
fi
echo "control plane without weights: ok"
