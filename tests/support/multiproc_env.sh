# Sourced by the e2e shell tests that run several processes against one redis-server
# (split_roles_cli, remote_transport, model_routing): paths, skip checks, a temp dir whose
# processes ($pids) stop on exit, fail() with every log's tail, free_port, wait_file, start_redis.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
model="$shared/models/stories260K.gguf"

# need_bins NAME...: skip unless each agentq binary is built; need_tools CMD...: unless on PATH.
need_bins() { for t in "$@"; do [ -x "$bin/$t" ] || { echo "skip: no $bin/$t"; exit 77; }; done; }
need_tools() { for t in "$@"; do command -v "$t" >/dev/null || { echo "skip: no $t"; exit 77; }; done; }
need_model() { [ -f "$model" ] || { echo "skip: no $model"; exit 77; }; }

tmp="$(mktemp -d)"
pids=()
# NOTE: SIGTERM, then SIGKILL for whatever still runs 10 s later: a redis-server asked to stop while
# it writes its initial AOF (a replica that has just synced) answers "can't exit" and keeps running,
# and a plain `wait` on it would hang the test until ctest's timeout.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log; do echo "--- $f"; tail -n 30 "$f"; done
  exit 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_file() { for _ in $(seq 1 300); do [ -s "$1" ] && return 0; sleep 0.1; done; fail "no $1"; }

# start_redis [REDIS_ARGS...]: an AOF redis-server on a free port ($rport, data in $tmp/redis, log
# $tmp/redis.log), answering PING before it returns.
start_redis() {
  rport=$(free_port)
  mkdir -p "$tmp/redis"
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp/redis" --appendonly yes --save "" --daemonize no \
    --logfile "$tmp/redis.log" "$@" &
  pids+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
}

# Job status through the caller's api() (curl with its key) at $base: field EXPR reads stdin's JSON
# at a Python subscript; wait_status JOB STATUS... polls every 0.1 s, $wait_polls times (default 400),
# failing at once on failed / cancelled.
field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
status() { api "$base/v1/jobs/$1" | field '["status"]'; }
wait_status() {
  local s
  for _ in $(seq 1 "${wait_polls:-400}"); do
    s=$(status "$1")
    for want in "${@:2}"; do [ "$s" = "$want" ] && return 0; done
    case "$s" in failed | cancelled) fail "$1 is $s" ;; esac
    sleep 0.1
  done
  fail "$1 is $(status "$1"), wanted ${*:2}"
}
