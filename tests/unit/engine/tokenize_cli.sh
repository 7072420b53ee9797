#!/usr/bin/env bash
# agentq-engine tokenize: the tiny model's golden prompt ids come back as JSON,
# and a bad model path is an error with a message.
set -euo pipefail
bin="${AGENTQ_BIN_DIR:-build/bin}/agentq-engine"
shared="${AGENTQ_SHARED_DIR:-../shared}"
[ -x "$bin" ] || { echo "skip: $bin not built"; exit 77; }

out=$("$bin" tokenize --model "$shared/models/stories260K.gguf" --text "Once upon a time" --add-special --json)
[ "$out" = '{"ids":[1,403,407,261,378]}' ] || { echo "json: got $out"; exit 1; }

out=$("$bin" tokenize --model "$shared/models/vocab/ggml-vocab-phi-3.gguf" --text '<|user|>Hi<|end|>' --parse-special)
[ "$out" = '32010 6324 32007' ] || { echo "parse-special: got $out"; exit 1; }

if "$bin" tokenize --model /nonexistent.gguf --text x 2>/dev/null; then echo "bad model accepted"; exit 1; fi
echo ok
