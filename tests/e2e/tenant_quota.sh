#!/usr/bin/env bash
# e2e (#29): the per-tenant token quota. agentqd with --tenant-tokens-per-day 20: tenant qa's
# first job (a 30-token story) takes it past the quota; its next submits — /v1/jobs,
# /v1/chat/completions, /v1/batches — get 429 with OpenAI's type `insufficient_quota`, a
# Retry-After up to the next 00:00 UTC, and a message naming the flag; tenant qb is not held back;
# GET /v1/usage shows the tokens that count; the refusals are a metric. A negative quota is a
# start-up error. Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v curl >/dev/null || skip "no curl"
command -v python3 >/dev/null || skip "no python3"
fail() { echo "FAIL: $*"; [ -n "$tmp" ] && tail -n 30 "$tmp/agentqd.log"; exit 1; }
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

set +e
out=$("$bin/agentqd" --tenant-tokens-per-day -1 --model "$model" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] || fail "a negative --tenant-tokens-per-day was accepted"
grep -q -- "--tenant-tokens-per-day must be >= 0" <<<"$out" || fail "no message for a negative quota: $out"

agentqd_start tenant-quota --tenant-tokens-per-day 20 --rate-limit 0
admin() { curl -sf -H "Authorization: Bearer $admin_key" -H 'content-type: application/json' "$@"; }
key_a=$(admin -d '{"tenant":"qa"}' "$AGENTQ_URL/v1/keys" | jget 'd["key"]')
key_b=$(admin -d '{"tenant":"qb"}' "$AGENTQ_URL/v1/keys" | jget 'd["key"]')
job='{"model":"stories260K","messages":[{"role":"user","content":"Once upon a time"}],"max_turns":1,"max_tokens_per_turn":30}'
# submit KEY PATH BODY: prints the HTTP status; the body goes to $tmp/reply, the headers to $tmp/headers
submit() {
  curl -s -o "$tmp/reply" -D "$tmp/headers" -w '%{http_code}' -H "Authorization: Bearer $1" \
    -H 'content-type: application/json' -d "$3" "$AGENTQ_URL$2"
}

[ "$(submit "$key_a" /v1/jobs "$job")" = 202 ] || fail "first job of qa: $(cat "$tmp/reply")"
id=$(jget 'd["id"]' <"$tmp/reply")
for _ in $(seq 1 300); do
  st=$(curl -sf -H "Authorization: Bearer $key_a" "$AGENTQ_URL/v1/jobs/$id" | tee "$tmp/job" | jget 'd["status"]')
  case "$st" in completed|incomplete) break ;; failed|cancelled) fail "job $st: $(cat "$tmp/job")" ;; esac
  sleep 0.1
done
case "$st" in completed|incomplete) ;; *) fail "the job did not finish ($st)" ;; esac
used=$(jget 'd["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"]' <"$tmp/job")
[ "$used" -ge 20 ] || fail "the job used only $used tokens; the test needs >= 20"
sleep 1.2  # the quota re-reads its counts at most once a second

for path in /v1/jobs /v1/chat/completions /v1/batches; do
  body=$job
  [ $path = /v1/chat/completions ] && body='{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}'
  [ $path = /v1/batches ] && body='{"input_file_id":"file-x","endpoint":"/v1/jobs","completion_window":"24h"}'
  code=$(submit "$key_a" $path "$body")
  [ "$code" = 429 ] || fail "$path for qa past its quota: $code $(cat "$tmp/reply")"
  [ "$(jget 'd["error"]["type"]' <"$tmp/reply")" = insufficient_quota ] || fail "$path: error type $(cat "$tmp/reply")"
  grep -q -- "--tenant-tokens-per-day" "$tmp/reply" || fail "$path: the message does not name the flag: $(cat "$tmp/reply")"
  retry=$(tr -d '\r' <"$tmp/headers" | awk -F': ' 'tolower($1)=="retry-after" {print $2}')
  [ -n "$retry" ] && [ "$retry" -ge 1 ] && [ "$retry" -le 86400 ] || fail "$path: Retry-After '$retry'"
done
# the other tenant goes on
[ "$(submit "$key_b" /v1/jobs "$job")" = 202 ] || fail "qb was held back: $(cat "$tmp/reply")"
# what counted is what GET /v1/usage shows for today
today=$(( $(date +%s) / 86400 * 86400 ))
shown=$(curl -sf -H "Authorization: Bearer $key_a" "$AGENTQ_URL/v1/usage?start=$today" |
  jget 'sum(r["input_tokens"] + r["output_tokens"] for b in d["data"] for r in b["results"])')
[ "$shown" = "$used" ] || fail "usage shows $shown tokens, the job used $used"
curl -sf -H "Authorization: Bearer $admin_key" "$AGENTQ_URL/metrics" >"$tmp/metrics"
grep -q '^agentq_quota_refused_total{quota="tokens_per_day"} 3' "$tmp/metrics" ||
  fail "refusals metric: $(grep agentq_quota "$tmp/metrics")"
grep -q '^agentq_quota_tokens_per_day 20' "$tmp/metrics" || fail "quota gauge: $(grep agentq_quota "$tmp/metrics")"
echo "tenant quota: qa used $used tokens of 20, 3 submits refused (Retry-After $retry s), qb accepted"
