#!/usr/bin/env bash
# e2e: server-side tool requests carry Standard Webhooks signatures made with the submitting key's
# whsec_ secret, verified by the official standardwebhooks npm package (tests/e2e/node/tool_signing.mjs)
# against agentqd on the tiny model (embedded Redis). Env (set by ctest): AGENTQ_SOURCE_DIR,
# AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
model="$shared/models/stories260K.gguf"
skip() { echo "skip: $*"; exit 77; }
[ -x "$bin/agentqd" ] || skip "no $bin/agentqd (build it first)"
[ -f "$model" ] || skip "no $model"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -f "$src/tests/e2e/node/node_modules/standardwebhooks/package.json" ] ||
  skip "no standardwebhooks (npm ci --prefix tests/e2e/node, or run scripts/setup.sh)"

tmp="$(mktemp -d -t agentq-toolsig-XXXXXX)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

admin_key="aq_toolsig_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
"$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
  --admin-key "$admin_key" --allow-addresses 127.0.0.0/8 >"$tmp/agentqd.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "agentqd did not start:"; cat "$tmp/agentqd.log"; exit 1; }

set +e
AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/port")" AGENTQ_ADMIN_KEY="$admin_key" \
  AGENTQ_MODEL_NAME="$(basename "$model" .gguf)" timeout 120 node "$src/tests/e2e/node/tool_signing.mjs"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 40 "$tmp/agentqd.log"
fi
exit $rc
