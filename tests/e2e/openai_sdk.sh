#!/usr/bin/env bash
# e2e: the official openai npm client (pinned in tests/e2e/node/package.json) against agentqd on the
# tiny model (embedded Redis), run by node's test runner (tests/e2e/node/openai_sdk.mjs); then a
# Responses stream resumed with starting_after from the durable event log after an agentqd restart
# (openai_resume.mjs; on the tiny model the response has usually finished before the restart).
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -f "$src/tests/e2e/node/node_modules/openai/package.json" ] ||
  skip "no openai npm package (npm ci --prefix tests/e2e/node, or run scripts/setup.sh)"
# a per-key rate limit the flows stay under, and the 429 case's burst of 400 requests exceeds
agentqd_start openai --allow-addresses 127.0.0.0/8 --rate-limit 100 --rate-burst 300

set +e
AGENTQ_ADMIN_KEY="$admin_key" AGENTQ_MODEL_NAME="$(basename "$model" .gguf)" \
  timeout 300 node --test --test-concurrency=1 "$src/tests/e2e/node/openai_sdk.mjs"
rc=$?
set -e

# a Responses stream resumed with starting_after across an agentqd restart (same data dir)
if [ $rc -eq 0 ]; then
  export AGENTQ_API_KEY="$admin_key" AGENTQ_MODEL_NAME="$(basename "$model" .gguf)"
  set +e
  timeout 60 node "$src/tests/e2e/node/openai_resume.mjs" start "$tmp/resume.json"
  rc=$?
  set -e
  if [ $rc -eq 0 ]; then
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -f "$tmp/port"
    "$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
      --admin-key "$admin_key" --allow-addresses 127.0.0.0/8 >>"$tmp/agentqd.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; sleep 0.1; done
    [ -s "$tmp/port" ] || { echo "agentqd did not restart"; tail -n 40 "$tmp/agentqd.log"; exit 1; }
    set +e
    AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/port")" timeout 120 node "$src/tests/e2e/node/openai_resume.mjs" resume "$tmp/resume.json"
    rc=$?
    set -e
  fi
fi
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 60 "$tmp/agentqd.log"
fi
exit $rc
