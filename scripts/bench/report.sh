#!/usr/bin/env bash
# Regenerates docs/BENCHMARKS.md (+ charts in docs/bench/) from a benchmark run's directory
# (DIR/results.json and DIR/charts/*.png, written by scripts/bench/run.sh).
#   scripts/bench/report.sh DIR [DOCS_DIR]     (DOCS_DIR default docs/; AGENTQ_BENCH_NOTE=text adds a line)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [DOCS_DIR]" >&2; exit 2; }
dir="$(cd "$1" && pwd)"
src="$(cd "$(dirname "$0")/../.." && pwd)"
docs="${2:-$src/docs}"
[ -s "$dir/results.json" ] || { echo "report.sh: no $dir/results.json" >&2; exit 1; }
python3 "$src/scripts/bench/report.py" "$dir" "$docs"
