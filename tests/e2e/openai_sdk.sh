#!/usr/bin/env bash
# e2e: the official openai npm client (pinned in tests/e2e/node/package.json) against agentqd on the
# tiny model (embedded Redis), run by node's test runner (tests/e2e/node/openai_sdk.mjs). Env (set by
# ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
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
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 60 "$tmp/agentqd.log"
fi
exit $rc
