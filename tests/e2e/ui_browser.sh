#!/usr/bin/env bash
# e2e: the /ui dashboard in a real headless Chromium (Debian's chromium driven by npm playwright-core):
# starts agentqd (embedded Redis, tiny model), then tests/e2e/ui/ui_browser.mjs enters a key, submits
# jobs, watches them complete live, opens a job's page and timeline and the engine page, and saves
# screenshots to $AGENTQ_ARTIFACT_DIR (default: <build>/test-artifacts/ui).
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
src="${AGENTQ_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
bin="${AGENTQ_BIN_DIR:-$src/build/bin}"
shared="${AGENTQ_SHARED_DIR:-$src/../shared}"
model="$shared/models/stories260K.gguf"
chromium="${AGENTQ_CHROMIUM:-/usr/bin/chromium}"
skip() { echo "skip: $*"; exit 77; }
[ -x "$bin/agentqd" ] || skip "no $bin/agentqd (build it first)"
[ -f "$model" ] || skip "no $model"
command -v node >/dev/null || skip "no node (apt-get install nodejs npm)"
[ -x "$chromium" ] || skip "no $chromium (apt-get install chromium, or run scripts/setup.sh)"
[ -f "$src/tests/e2e/ui/node_modules/playwright-core/package.json" ] ||
  skip "no playwright-core (npm ci --prefix tests/e2e/ui, or run scripts/setup.sh)"

artifacts="${AGENTQ_ARTIFACT_DIR:-$bin/../test-artifacts/ui}"
mkdir -p "$artifacts"
artifacts="$(cd "$artifacts" && pwd)"
tmp="$(mktemp -d -t agentq-ui-XXXXXX)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

admin_key="aq_uitest_$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
"$bin/agentqd" --data-dir "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" --model "$model" \
  --admin-key "$admin_key" >"$tmp/agentqd.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do [ -s "$tmp/port" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "agentqd did not start:"; cat "$tmp/agentqd.log"; exit 1; }

set +e
AGENTQ_URL="http://127.0.0.1:$(cat "$tmp/port")" AGENTQ_ADMIN_KEY="$admin_key" AGENTQ_ARTIFACT_DIR="$artifacts" \
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
