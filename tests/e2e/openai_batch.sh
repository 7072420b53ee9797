#!/usr/bin/env bash
# e2e: the official openai npm client's Batch API (files, batches, file content, batch.completed
# webhook, cancel, tenant scoping, 429 queue_full, fairness) against agentqd on the tiny model
# (tests/e2e/node/openai_batch.mjs). Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR,
# AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -f "$src/tests/e2e/node/node_modules/openai/package.json" ] ||
  skip "no openai npm package (npm ci --prefix tests/e2e/node, or run scripts/setup.sh)"
bound=5000
agentqd_start openai-batch --allow-addresses 127.0.0.0/8 --max-queue-depth-per-tenant $bound

set +e
AGENTQ_ADMIN_KEY="$admin_key" AGENTQ_MODEL_NAME="$(basename "$model" .gguf)" AGENTQ_TENANT_BOUND=$bound \
  timeout 400 node --test --test-concurrency=1 "$src/tests/e2e/node/openai_batch.mjs"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 60 "$tmp/agentqd.log"
fi
exit $rc
