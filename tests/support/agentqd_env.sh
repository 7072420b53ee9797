# Sourced by the e2e shell tests: paths, skip(), and agentqd_start, which runs agentqd on the tiny
# model (embedded Redis) in a temp data dir with a fresh admin key and stops it on exit.
# After agentqd_start: $tmp, $pid, $admin_key, $AGENTQ_URL. Exit 77 = skipped.
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
model="$shared/models/stories260K.gguf"
skip() { echo "skip: $*"; exit 77; }

tmp=""
pid=""
agentqd_cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -n "$tmp" ] && rm -rf "$tmp"
  return 0
}

# agentqd_start NAME [AGENTQD_ARGS...]: NAME labels the temp dir; the log is $tmp/agentqd.log.
agentqd_start() {
  local name=$1
  shift
  [ -x "$bin/agentqd" ] || skip "no $bin/agentqd (build it first)"
  [ -f "$model" ] || skip "no $model"
  tmp="$(mktemp -d -t "agentq-$name-XXXXXX")"
  trap agentqd_cleanup EXIT
  admin_key="aq_${name//-/_}_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
  "$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
    --admin-key "$admin_key" "$@" >"$tmp/agentqd.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  [ -s "$tmp/port" ] || { echo "agentqd did not start:"; cat "$tmp/agentqd.log"; exit 1; }
  AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/port")"
  export AGENTQ_URL
}
