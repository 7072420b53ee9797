#!/usr/bin/env bash
# e2e: the agentq CLI as a user meets it. The README's example, run verbatim, ends `completed`
# (exit 0); tables by default and JSON under --json for keys and webhooks; under --json every
# error (rejected key, usage, unreachable server) is a JSON object on stdout too.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
fail() { echo "FAIL: $*"; [ -f "$tmp/agentqd.log" ] && tail -n 30 "$tmp/agentqd.log"; exit 1; }
[ -x "$bin/agentq" ] || skip "no $bin/agentq (build it first)"
command -v python3 >/dev/null || skip "no python3 (checks the JSON output)"
agentqd_start cli
export AGENTQ_API_KEY="$admin_key"
is_json() { python3 -c 'import json,sys; d=json.load(sys.stdin); assert '"$1" ; }

# 1. The README's example, verbatim (its `build/bin/agentq submit` line, run from our bin dir).
line=$(grep -m1 '^build/bin/agentq submit' "$src/README.md") || fail "README has no 'build/bin/agentq submit' example"
echo "README: $line"
set +e
(cd "$bin/../.." 2>/dev/null; eval "${line/build\/bin\/agentq/\"$bin/agentq\"}") >"$tmp/readme.out" 2>&1
rc=$?
set -e
cat "$tmp/readme.out"
[ $rc -eq 0 ] || fail "the README's example exited $rc (expected 0, completed)"
grep -q ' completed ' "$tmp/readme.out" || fail "the README's example did not end completed"

# 2. Tables by default, JSON with --json.
"$bin/agentq" keys list >"$tmp/keys.txt"
head -1 "$tmp/keys.txt" | grep -q '^ID *TENANT' || fail "keys list is not a table: $(cat "$tmp/keys.txt")"
"$bin/agentq" --json keys list | is_json 'd["object"] == "list"' || fail "keys list --json is not the list object"
made=$("$bin/agentq" --json keys create --tenant t1)
key_id=$(echo "$made" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
"$bin/agentq" keys rotate-secret "$key_id" | grep -q "^new webhook secret for $key_id (shown once): whsec_" ||
  fail "keys rotate-secret does not print the new secret as a line"
"$bin/agentq" --json keys rotate-secret "$key_id" | is_json 'd["webhook_secret"].startswith("whsec_")' ||
  fail "keys rotate-secret --json"
"$bin/agentq" keys revoke "$key_id" | grep -q "^revoked $key_id" || fail "keys revoke does not print a line"
job=$("$bin/agentq" submit --model stories260K --prompt hi --max-output-tokens 4)
"$bin/agentq" wait "$job" >/dev/null 2>&1 || true
"$bin/agentq" webhooks "$job" | grep -q '^no webhook deliveries$' || fail "webhooks without deliveries"
"$bin/agentq" --json webhooks "$job" | is_json 'd["data"] == []' || fail "webhooks --json"

# 3. Errors under --json are JSON on stdout, with the documented exit codes.
set +e
out=$("$bin/agentq" --json --api-key aq_not_a_real_key_at_all_0000 keys list 2>/dev/null); rc=$?
set -e
[ $rc -eq 4 ] || fail "a rejected key exited $rc, expected 4"
echo "$out" | is_json 'd["error"]["type"] == "authentication_error"' || fail "a rejected key under --json printed: $out"
set +e
out=$("$bin/agentq" --json submit --model m --prompt p --max-turns x 2>/dev/null); rc=$?
set -e
[ $rc -eq 2 ] || fail "a usage error exited $rc, expected 2"
echo "$out" | is_json 'd["error"]["type"] == "usage"' || fail "a usage error under --json printed: $out"
set +e
out=$("$bin/agentq" --json --url http://127.0.0.1:1 status job_x 2>/dev/null); rc=$?
set -e
[ $rc -eq 3 ] || fail "an unreachable server exited $rc, expected 3"
echo "$out" | is_json 'd["error"]["type"] == "unreachable"' || fail "an unreachable server under --json printed: $out"
echo "cli output: ok"
