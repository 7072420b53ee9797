#!/usr/bin/env bash
# e2e: GET /metrics after a job has run parses with Prometheus's own parser (`promtool check
# metrics`, Debian package prometheus) and holds the job's series. Split roles, as deployed:
# one redis-server, `agentqd --role api` and `agentqd --role worker` on one data dir, so the
# worker's share (tokens, KV, latency histograms) reaches the API's /metrics through SQLite.
# Also: --metrics-token guards /metrics when set.
# Env (set by ctest): AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
command -v promtool >/dev/null || { echo "skip: promtool not found (apt-get install prometheus)"; exit 77; }
[ -x "$bin/agentqd" ] && [ -x "$bin/agentq" ] || { echo "skip: no agentqd/agentq in $bin"; exit 77; }
command -v redis-server >/dev/null || { echo "skip: redis-server not found"; exit 77; }
[ -f "$shared/models/stories260K.gguf" ] || { echo "skip: no $shared/models/stories260K.gguf"; exit 77; }

tmp="$(mktemp -d)"
admin="aq_promtool_admin_key_0123456789"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.out; do echo "--- $f"; tail -20 "$f"; done; exit 1; }

rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.out" 2>&1 &
pids+=($!)
common=(--data-dir "$tmp/data" --redis "redis://127.0.0.1:$rport" --admin-key "$admin"
        --model "$shared/models/stories260K.gguf" --rate-limit 0)
start_api() {  # extra flags; sets api_pid and url
  rm -f "$tmp/port"
  "$bin/agentqd" --role api --listen 127.0.0.1:0 --port-file "$tmp/port" "${common[@]}" "$@" >>"$tmp/api.out" 2>&1 &
  api_pid=$!
  pids+=($api_pid)
  for _ in $(seq 1 600); do
    [ -s "$tmp/port" ] && break
    kill -0 "$api_pid" 2>/dev/null || fail "agentqd --role api exited"
    sleep 0.05
  done
  [ -s "$tmp/port" ] || fail "agentqd --role api did not start"
  url="http://127.0.0.1:$(cat "$tmp/port")"
}
start_api
"$bin/agentqd" --role worker "${common[@]}" >"$tmp/worker.out" 2>&1 &
pids+=($!)

export AGENTQ_URL="$url" AGENTQ_API_KEY="$admin"
rc=0
"$bin/agentq" submit --model stories260K --prompt "Once upon a time" --max-turns 1 --wait >"$tmp/job.out" 2>&1 || rc=$?
# 0 completed, 12 incomplete (the tiny model may talk past its token limit)
[ "$rc" = 0 ] || [ "$rc" = 12 ] || fail "the job did not finish (agentq exit $rc)"
# the worker's share lands with its next engine sample (about every second)
for _ in $(seq 1 50); do
  curl -sf "$url/metrics" >"$tmp/metrics.txt"
  grep -q '^agentq_job_duration_seconds_count{worker=' "$tmp/metrics.txt" && break
  sleep 0.2
done
promtool check metrics <"$tmp/metrics.txt" || fail "promtool rejected /metrics: $(cat "$tmp/metrics.txt")"
need() { grep -Eq "$1" "$tmp/metrics.txt" || fail "missing series: $1"; }
need '^agentq_jobs\{state="(completed|incomplete)"\} 1$'
need '^agentq_queue_depth\{priority="normal"\} 0$'
need '^agentq_http_requests_total\{method="POST",route="/v1/jobs",status="202"\} 1$'
need '^agentq_http_requests_total\{method="GET",route="/v1/jobs/\{id\}",status="200"\} [1-9]'
need '^agentq_generated_tokens_total\{worker="[^"]+"\} [1-9]'
need '^agentq_prompt_tokens_computed_total\{worker="[^"]+"\} [1-9]'
need '^agentq_job_duration_seconds_count\{worker="[^"]+",status="(completed|incomplete)"\} 1$'
need '^agentq_job_queue_wait_seconds_count\{worker="[^"]+"\} 1$'
need '^agentq_kv_blocks\{worker="[^"]+",state="used"\} '
need '^agentq_sqlite_errors_total\{worker="[^"]+"\} 0$'   # the worker process's own store
need '^agentq_sqlite_errors_total 0$'                     # the API process's
echo "promtool: ok ($(grep -c '^# TYPE' "$tmp/metrics.txt") families, $(grep -vc '^#' "$tmp/metrics.txt") samples)"

# --metrics-token: 401 without it, 200 with it
kill "$api_pid"; wait "$api_pid" 2>/dev/null || true
start_api --metrics-token scrape-secret-123
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/metrics")
[ "$code" = 401 ] || fail "/metrics without the token: HTTP $code, want 401"
curl -sf -H "Authorization: Bearer scrape-secret-123" "$url/metrics" | promtool check metrics || fail "with the token"
echo "metrics token: ok"
