#!/usr/bin/env bash
# agentq-engine render and generate --json-schema end to end: render prints the
# expected prompt for a family (and plain for the template-less tiny model),
# refuses bad input with a message; constrained generation on the tiny model
# emits JSON that matches the schema.
set -euo pipefail
bin="${AGENTQ_BIN_DIR:-build/bin}/agentq-engine"
shared="${AGENTQ_SHARED_DIR:-../shared}"
model="$shared/models/stories260K.gguf"
[ -x "$bin" ] || { echo "missing $bin"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

printf '[{"role":"user","content":"Hi"}]' > "$tmp/m.json"
printf '[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]' > "$tmp/t.json"
out=$("$bin" render --messages "$tmp/m.json" --family qwen3)
[ "$out" = $'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant' ] || fail "qwen3 render: $out"
out=$("$bin" render --model "$model" --messages "$tmp/m.json")
[ "$out" = $'User: Hi\nAssistant:' ] || fail "plain render: $out"
out=$("$bin" render --messages "$tmp/m.json" --tools "$tmp/t.json" --family chatml)
grep -q '{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}' <<<"$out" \
  || fail "chatml tools: $out"
printf '[{"role":"wizard","content":"x"}]' > "$tmp/bad.json"
if "$bin" render --messages "$tmp/bad.json" 2>"$tmp/err"; then fail "bad role accepted"; fi
grep -q 'unknown role "wizard"' "$tmp/err" || fail "bad role message: $(cat "$tmp/err")"
if "$bin" render --messages "$tmp/m.json" --family gpt 2>/dev/null; then fail "unknown family accepted"; fi

printf '{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9},"s":{"type":"string","maxLength":4}},"required":["n","s"],"additionalProperties":false}' > "$tmp/s.json"
out=$("$bin" generate --model "$model" --prompt "Once upon a time" --json-schema "$tmp/s.json" -n 200 --json --temp 0.7 --seed 1)
text=$(sed -E 's/.*"text":"(.*)","prompt_tokens_per_s".*/\1/' <<<"$out")
compact=$(sed -E 's/\\[ntr]//g; s/\\"/"/g; s/ //g' <<<"$text")
[[ "$compact" =~ ^\{(\"n\":[1-9],\"s\":\"[^\"]{0,4}\"|\"s\":\"[^\"]{0,4}\",\"n\":[1-9])\}$ ]] || fail "constrained output: $text"
printf '{"type":"object","patternProperties":{}}' > "$tmp/bad_schema.json"
if "$bin" generate --model "$model" --prompt "x" --json-schema "$tmp/bad_schema.json" -n 4 2>"$tmp/err"; then fail "bad schema accepted"; fi
grep -q "unsupported JSON Schema keyword 'patternProperties'" "$tmp/err" || fail "bad schema message: $(cat "$tmp/err")"
echo ok
