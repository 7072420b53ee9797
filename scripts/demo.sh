#!/usr/bin/env bash
# agentq demo: build, start agentqd (tiny model, embedded Redis) in a temp data dir, start a
# loopback tool server, create a key, submit a multi-turn agent job whose first turn must
# call a server-side tool, follow it with `agentq wait`, print the result, stop everything.
#   AGENTQ_BUILD_DIR  build directory (default: build)
#   AGENTQ_SKIP_SETUP=1  use the binaries already built there
#   AGENTQ_BIN_DIR    the binaries' folder (default: the build directory's bin)
#   AGENTQ_MODEL      the model file (default: ../shared/models/stories260K.gguf)
#   AGENTQ_DEMO_ARGS  more agentqd flags (e.g. "--device cuda" on a GPU host)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

[ "${AGENTQ_SKIP_SETUP:-0}" = 1 ] || ./scripts/setup.sh
bin="${AGENTQ_BIN_DIR:-$root/${AGENTQ_BUILD_DIR:-build}/bin}"
model="${AGENTQ_MODEL:-$root/../shared/models/stories260K.gguf}"
[ -f "$model" ] || { echo "demo: model $model not found (set AGENTQ_MODEL)"; exit 1; }

tmp=$(mktemp -d -t agentq-demo-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

wait_file() { for _ in $(seq 1 300); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "demo: timed out waiting for $1"; exit 1; }

echo "== starting the demo tool server (loopback)"
python3 scripts/demo_tool_server.py "$tmp/tool_port" 2>"$tmp/tool.log" &
pids+=($!)
wait_file "$tmp/tool_port"
tool_url="http://127.0.0.1:$(cat "$tmp/tool_port")/weather"

echo "== starting agentqd (data dir $tmp/data)"
admin_key="aq_demo_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
"$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
  --allow-addresses 127.0.0.0/8 --admin-key "$admin_key" ${AGENTQ_DEMO_ARGS:-} >"$tmp/agentqd.log" 2>&1 &
pids+=($!)
wait_file "$tmp/port"
export AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/port")"
echo "   listening on $AGENTQ_URL"

echo "== creating an API key for tenant 'demo'"
AGENTQ_API_KEY="$admin_key" "$bin/agentq" --json keys create --tenant demo >"$tmp/key.json"
export AGENTQ_API_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["key"])' "$tmp/key.json")
echo "   key ${AGENTQ_API_KEY:0:10}... (webhook secret printed once in $tmp/key.json)"
"$bin/agentq" models

cat >"$tmp/job.json" <<JSON
{
  "model": "$(basename "$model" .gguf)",
  "messages": [
    {"role": "system", "content": "You are a helpful assistant. Use the weather tool, then answer."},
    {"role": "user", "content": "What is the weather in Paris?"}
  ],
  "tools": [{
    "type": "function",
    "function": {
      "name": "get_weather",
      "description": "Current weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]}}, "required": ["city"]}
    },
    "execution": {"type": "http", "url": "$tool_url", "timeout_ms": 5000}
  }],
  "tool_choice": "required",
  "parallel_tool_calls": false,
  "max_turns": 4,
  "max_tokens_per_turn": 200,
  "stop": ["."],
  "metadata": {"demo": "weather"}
}
JSON

echo "== submitting the agent job"
job_id=$("$bin/agentq" submit "$tmp/job.json")
echo "   $job_id"
echo "== agentq wait $job_id"
set +e
"$bin/agentq" wait "$job_id" --timeout 120
code=$?
set -e
echo "== the job (transcript and usage)"
"$bin/agentq" --json status "$job_id" | python3 -c '
import json, sys
job = json.load(sys.stdin)
for m in job.get("transcript", []):
    text = m.get("content") or ""
    calls = m.get("tool_calls")
    print("  %-9s %s%s" % (m["role"], text[:160].replace("\n", " "), ("  tool_calls=" + json.dumps(calls)) if calls else ""))
u = job["usage"]
print("  status=%s turns=%s usage: prompt=%s cached=%s completion=%s total=%s" % (
    job["status"], job.get("n_turns"), u["prompt_tokens"], u["cached_tokens"], u["completion_tokens"], u["total_tokens"]))
'
echo "== tool server log"
sed 's/^/   /' "$tmp/tool.log"
echo "== agentq wait exit code: $code (0 = completed)"
exit $code
