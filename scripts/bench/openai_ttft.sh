#!/usr/bin/env bash
# Chat Completions time to first token, idle and under background load, vs a normal-priority
# streamed response under the same load (same run): agentqd on the tiny model, openai_ttft.py.
# Usage: scripts/bench/openai_ttft.sh [--n N] [--background B] [--tool-s S]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../../tests/support/agentqd_env.sh
source "$here/../../tests/support/agentqd_env.sh"
agentqd_start ttft --allow-addresses 127.0.0.0/8
python3 "$here/openai_ttft.py" --url "$AGENTQ_URL" --key "$admin_key" --model "$(basename "$model" .gguf)" "$@"
