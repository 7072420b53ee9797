#!/usr/bin/env bash
# e2e: the /ui dashboard in a real headless Chromium (Debian's chromium driven by npm playwright-core):
# starts agentqd (embedded Redis, tiny model), then tests/e2e/ui/ui_browser.mjs enters a key, submits
# jobs, watches them complete live, opens a job's page and timeline and the engine page, and saves
# screenshots to $AGENTQ_ARTIFACT_DIR (default: <build>/test-artifacts/ui).
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
chromium="${AGENTQ_CHROMIUM:-/usr/bin/chromium}"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -x "$chromium" ] || skip "no $chromium (apt-get install chromium, or run scripts/setup.sh)"
[ -f "$src/tests/e2e/ui/node_modules/playwright-core/package.json" ] ||
  skip "no playwright-core (npm ci --prefix tests/e2e/ui, or run scripts/setup.sh)"

artifacts="${AGENTQ_ARTIFACT_DIR:-$bin/../test-artifacts/ui}"
mkdir -p "$artifacts"
artifacts="$(cd "$artifacts" && pwd)"
agentqd_start ui

set +e
AGENTQ_ADMIN_KEY="$admin_key" AGENTQ_ARTIFACT_DIR="$artifacts" \
  AGENTQ_CHROMIUM="$chromium" AGENTQ_MODEL_NAME="$(basename "$model" .gguf)" \
  timeout 120 node "$src/tests/e2e/ui/ui_browser.mjs"
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "--- agentqd log (tail)"
  tail -n 40 "$tmp/agentqd.log"
fi
echo "screenshots: $artifacts"
exit $rc
