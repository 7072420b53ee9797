#!/usr/bin/env bash
# e2e: agentqd's speculation flags (#32). --draft-model before any --model and a draft whose
# vocabulary differs fail start-up with a message; `--draft-model` (the tiny model as its own
# draft) runs a POST /v1/jobs job with a `prediction` whose usage and timeline count accepted
# proposals; `--no-spec` gives the same text with zero; a bad prediction is a 400 naming it.
# Env (set by ctest): AGENTQ_SOURCE_DIR, AGENTQ_BIN_DIR, AGENTQ_SHARED_DIR. Exit 77 = skipped.
set -euo pipefail
# shellcheck source=../support/agentqd_env.sh
source "$(dirname "$0")/../support/agentqd_env.sh"
command -v jq >/dev/null || skip "no jq"
command -v curl >/dev/null || skip "no curl"
[ -x "$bin/agentq-mkgguf" ] || skip "no $bin/agentq-mkgguf"
fail() { echo "FAIL: $*"; [ -n "$tmp" ] && tail -n 30 "$tmp/agentqd.log"; exit 1; }

# start-up refusals (before any job): a misplaced --draft-model, a draft with another vocabulary
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
set +e
timeout 30 "$bin/agentqd" --data-dir "$scratch/d1" --draft-model "$model" --model "$model" >"$scratch/o1" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "--draft-model before --model was accepted"
grep -q -- "--draft-model must follow the --model it serves" "$scratch/o1" || fail "no message: $(cat "$scratch/o1")"
"$bin/agentq-mkgguf" --out "$scratch/other.gguf" --shape tiny --type q8_0 \
  --vocab "$shared/models/vocab/ggml-vocab-llama-spm.gguf" >/dev/null
set +e
timeout 60 "$bin/agentqd" --data-dir "$scratch/d2" --listen 127.0.0.1:0 --model "$model" \
  --draft-model "$scratch/other.gguf" >"$scratch/o2" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "a draft with another vocabulary was accepted"
grep -q "vocabulary has 32000 tokens, the target's 512" "$scratch/o2" || fail "no vocabulary message: $(tail -5 "$scratch/o2")"

# run_job FILE: a job with a prediction; prints its final JSON into FILE
prediction="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
run_job() {
  local body id st
  body=$(jq -n --arg p "$prediction" '{model: "stories260K", messages: [{role: "user", content: "Once upon a time"}],
    max_turns: 1, max_tokens_per_turn: 80, prediction: {type: "content", content: $p}}')
  id=$(curl -sf -H "Authorization: Bearer $admin_key" -H 'content-type: application/json' -d "$body" \
    "$AGENTQ_URL/v1/jobs" | jq -r .id)
  [ -n "$id" ] && [ "$id" != null ] || fail "no job id"
  for _ in $(seq 1 300); do
    curl -sf -H "Authorization: Bearer $admin_key" "$AGENTQ_URL/v1/jobs/$id" >"$1"
    st=$(jq -r .status "$1")
    case "$st" in completed|incomplete) break ;; failed|cancelled) fail "job $st: $(cat "$1")" ;; esac
    sleep 0.1
  done
  case "$st" in completed|incomplete) ;; *) fail "job did not finish ($st)" ;; esac
  curl -sf -H "Authorization: Bearer $admin_key" "$AGENTQ_URL/v1/jobs/$id/timeline" >"$1.timeline"
}

agentqd_start spec-flags --draft-model "$model"
trap 'agentqd_cleanup; rm -rf "$scratch"' EXIT
grep -q "draft model 'stories260K'" "$tmp/agentqd.log" || fail "no draft model in the log"
run_job "$scratch/on.json"
acc=$(jq '.usage.completion_tokens_details.accepted_prediction_tokens' "$scratch/on.json")
[ "$acc" -gt 0 ] || fail "accepted_prediction_tokens $acc: $(jq -c .usage "$scratch/on.json")"
[ "$(jq '.turns[0].usage.completion_tokens_details.accepted_prediction_tokens' "$scratch/on.json")" = "$acc" ] ||
  fail "the turn's counter differs from the job's"
jq -e '[.marks[] | select(.kind == "speculation" and .attrs.accepted_prediction_tokens > 0)] | length == 1' \
  "$scratch/on.json.timeline" >/dev/null || fail "no speculation mark: $(jq -c .marks "$scratch/on.json.timeline")"
# a bad prediction: 400 naming the field
code=$(curl -s -o "$scratch/bad.json" -w '%{http_code}' -H "Authorization: Bearer $admin_key" \
  -H 'content-type: application/json' -d '{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"text","content":"x"}}' \
  "$AGENTQ_URL/v1/jobs")
[ "$code" = 400 ] || fail "bad prediction: HTTP $code"
[ "$(jq -r .error.param "$scratch/bad.json")" = prediction.type ] || fail "bad prediction: $(cat "$scratch/bad.json")"
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=""
rm -rf "$tmp"

# --no-spec: the same text, nothing proposed
agentqd_start spec-off --no-spec
trap 'agentqd_cleanup; rm -rf "$scratch"' EXIT
grep -q "speculative decoding off" "$tmp/agentqd.log" || fail "no --no-spec line in the log"
run_job "$scratch/off.json"
[ "$(jq '.usage.completion_tokens_details.accepted_prediction_tokens' "$scratch/off.json")" = 0 ] || fail "--no-spec accepted proposals"
[ "$(jq -r .output "$scratch/off.json")" = "$(jq -r .output "$scratch/on.json")" ] ||
  fail "output differs with and without speculation: $(jq -c .output "$scratch/off.json") vs $(jq -c .output "$scratch/on.json")"
echo "spec_flags: ok (accepted $acc with a draft and a prediction)"
