#!/usr/bin/env bash
# agentq-engine generate/info end to end: greedy --json on the tiny model reproduces
# the first golden prompt's first 16 output ids (with and without speculation, with a draft); --json text stays valid UTF-8 when a character
# is cut; info describes the model and fails with a message (exit 1) on a corrupt file.
set -euo pipefail
bin="${AGENTQ_BIN_DIR:-build/bin}/agentq-engine"
shared="${AGENTQ_SHARED_DIR:-../shared}"
model="$shared/models/stories260K.gguf"
golden="$shared/golden/stories260K.greedy.jsonl"
[ -x "$bin" ] || { echo "missing $bin"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The golden file's first line: its prompt text, prompt ids and first 16 output ids.
first=$(head -n 1 "$golden")
prompt=$(sed -E 's/^\{"prompt": "([^"]*)".*/\1/' <<<"$first")
want_prompt=$(sed -E 's/.*"prompt_ids": \[([0-9, ]*)\].*/\1/' <<<"$first" | tr -d ' ')
want_out=$(sed -E 's/.*"output_ids": \[([0-9, ]*)\].*/\1/' <<<"$first" | tr -d ' ' | cut -d, -f1-16)

out=$("$bin" generate --model "$model" --prompt "$prompt" -n 16 --json --threads 2)
got_prompt=$(sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/' <<<"$out")
got_out=$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$out")
[ "$got_prompt" = "$want_prompt" ] || fail "prompt ids: got $got_prompt, want $want_prompt"
[ "$got_out" = "$want_out" ] || fail "output ids: got $got_out, want $want_out"
grep -q '"decode_tokens_per_s":[0-9]' <<<"$out" || fail "no decode_tokens_per_s in $out"
grep -q '"text":"' <<<"$out" || fail "no text in $out"

# The same through --prompt-ids, and plain text mode prints throughput on stderr.
out2=$("$bin" generate --model "$model" --prompt-ids "$want_prompt" -n 16 --json)
[ "$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$out2")" = "$want_out" ] || fail "--prompt-ids output differs"
"$bin" generate --model "$model" --prompt "$prompt" -n 8 >"$tmp/text" 2>"$tmp/err"
grep -q "tokens/s" "$tmp/err" || fail "no tokens/s on stderr"
[ -s "$tmp/text" ] || fail "no text on stdout"

# generate runs the engine: --no-spec, speculation (the default) and a draft model (the tiny model
# as its own draft) give the same greedy ids; the draft's proposals are counted in --json.
for flags in "--no-spec" "--spec" "--draft-model $model"; do
  # shellcheck disable=SC2086
  o=$("$bin" generate --model "$model" --prompt-ids "$want_prompt" -n 16 --json $flags)
  [ "$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$o")" = "$want_out" ] || fail "$flags: output differs"
done
grep -Eq '"accepted_prediction_tokens":[1-9]' <<<"$o" || fail "--draft-model: nothing accepted: $o"
set +e
"$bin" generate --model "$model" --prompt "$prompt" -n 4 --no-spec --draft-model "$model" >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "--no-spec --draft-model: exit $rc, want 2"

# --kv-type f32 (the F32 cache) gives the same greedy ids; anything but f16/f32 is refused (exit 2).
out3=$("$bin" generate --model "$model" --prompt-ids "$want_prompt" -n 16 --json --kv-type f32)
[ "$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$out3")" = "$want_out" ] || fail "--kv-type f32 output differs"
set +e
"$bin" generate --model "$model" --prompt "$prompt" -n 4 --kv-type f8 >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 2 ] || fail "--kv-type f8: exit $rc, want 2"
grep -q "kv-type must be f16 or f32" "$tmp/err" || fail "--kv-type f8: no message ($(cat "$tmp/err"))"

# A fixed seed gives the same sample twice.
a=$("$bin" generate --model "$model" --prompt "$prompt" -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 42 --json)
b=$("$bin" generate --model "$model" --prompt "$prompt" -n 24 --temp 0.9 --top-k 40 --top-p 0.95 --seed 42 --json)
[ "$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$a")" = "$(sed -E 's/.*"output_ids":\[([0-9,]*)\].*/\1/' <<<"$b")" ] ||
  fail "same seed, different samples"

# --json text is valid UTF-8 even when generation stops inside a multi-byte character: a schema
# forcing "日" (three byte tokens on this vocab), cut at every length; a cut character is U+FFFD.
printf '{"const":"\xe6\x97\xa5"}' >"$tmp/cjk.json"
n_cut=0
for n in $(seq 1 20); do
  "$bin" generate --model "$model" --prompt "$prompt" -n "$n" --json --json-schema "$tmp/cjk.json" >"$tmp/u8"
  iconv -f UTF-8 -t UTF-8 "$tmp/u8" >/dev/null 2>&1 || fail "-n $n: --json output is not valid UTF-8: $(od -c "$tmp/u8" | head -5)"
  if grep -q $'\xef\xbf\xbd' "$tmp/u8"; then n_cut=$((n_cut + 1)); fi
done
[ "$n_cut" -gt 0 ] || fail "no run ended inside the character (the check above checked nothing)"

# --json-schema output is compact (the tiny model pads every gap it may): the whole object
# within 60 tokens; --json-free-whitespace lets it pad.
printf '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}' >"$tmp/obj.json"
out=$("$bin" generate --model "$model" --prompt "$prompt" -n 60 --json --json-schema "$tmp/obj.json")
grep -Eq '"text":"( |\\n){0,2}\{\\"a\\": ?-?[0-9]+\}"' <<<"$out" || fail "--json-schema output not compact: $out"
out=$("$bin" generate --model "$model" --prompt "$prompt" -n 60 --json --json-schema "$tmp/obj.json" --json-free-whitespace)
grep -Eq '"text":"( |\\n){3}' <<<"$out" || fail "--json-free-whitespace: no padding: $out"

# info on the model, then on a truncated file.
"$bin" info --model "$model" >"$tmp/info"
grep -q "architecture:  llama" "$tmp/info" || fail "info: no architecture"
grep -q "F32" "$tmp/info" || fail "info: no weight types"
grep -q "512 tokens" "$tmp/info" || fail "info: no vocab size"
# 5 layers x (K, V) x 4 kv heads x 8 dims x 2 bytes = 640 bytes per token
grep -q "kv cache:      0.6 KiB per token (f16" "$tmp/info" || fail "info: no kv cache size ($(grep kv "$tmp/info"))"
head -c 4000 "$model" >"$tmp/corrupt.gguf"
set +e
"$bin" info --model "$tmp/corrupt.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "info on a corrupt file: exit $rc, want 1"
grep -q "cannot load" "$tmp/err" || fail "info on a corrupt file: no message ($(cat "$tmp/err"))"
echo "engine_cli: ok"
