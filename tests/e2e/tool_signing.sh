#!/usr/bin/env bash
# e2e: server-side tool requests carry Standard Webhooks signatures made with the submitting key's
# whsec_ secret, verified by the official standardwebhooks npm package (tests/e2e/node/tool_signing.mjs)
# against agentqd on the tiny model (embedded Redis). Env (set by ctest): AGENTQ_SOURCE_DIR,
# AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -f "$src/tests/e2e/node/node_modules/standardwebhooks/package.json" ] ||
  skip "no standardwebhooks (npm ci --prefix tests/e2e/node, or run scripts/setup.sh)"
agentqd_start toolsig --allow-addresses 127.0.0.0/8

set +e
AGENTQ_ADMIN_KEY="$admin_key" AGENTQ_MODEL_NAME="$(basename "$model" .gguf)" timeout 120 node "$src/tests/e2e/node/tool_signing.mjs"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 40 "$tmp/agentqd.log"
fi
exit $rc
