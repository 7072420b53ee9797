#!/usr/bin/env bash
# The store writer's instructions per one-request job, A against B, counted by valgrind's callgrind
# (issue 29, docs/queue_perf.md "Session 33"): test_store's case "writer: one-request jobs" (800 jobs
# from 8 threads: a submit, a claim and the final step each, as the service writes them) under
# callgrind with one profile per thread; the writer's thread is the one running writer_loop. The
# count moves < 1 % between runs of the same binary whatever else the host does (only the commits'
# grouping varies with the threads' timing), so a 2 % change of the writer's own code resolves in one
# run, where the CPU-time A/Bs (queue_kernel_units_ab.sh) need pairs of runs and still move +-3 %. It
# counts user-space instructions only: not the kernel's part of the writer (fdatasync, pwrite,
# futex), not cache misses. Prints one JSON line: instructions per job of A and B, and B / A.
#   scripts/bench/writer_instructions_ab.sh TEST_STORE_A TEST_STORE_B
# NOTE: valgrind (3.19, Debian 12) does not run AVX-512 code: build the two test_store binaries with
# -DAGENTQ_MARCH=x86-64-v3 (or AGENTQ_PORTABLE) on an AVX-512 host. Exits 77 without valgrind or when
# valgrind cannot run a binary.
set -euo pipefail
a=$(realpath "$1")
b=$(realpath "$2")
command -v valgrind >/dev/null || { echo "writer_instructions_ab.sh: valgrind not found" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n_jobs=800  # the test case's 8 threads x 100 jobs

count() {  # test_store side -> the writer thread's instructions
  local bin=$1 side=$2
  if ! (cd "$tmp" && valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$tmp/$side.out" \
      "$bin" -tc="writer: one-request jobs*" >"$tmp/$side.log" 2>&1); then
    echo "writer_instructions_ab.sh: $side did not run under valgrind (an AVX-512 build? see the NOTE):" >&2
    tail -3 "$tmp/$side.log" >&2
    exit 77
  fi
  local f
  f=$(grep -l "sqlite_store::writer_loop" "$tmp/$side.out"-* | head -n 1)
  [ -n "$f" ] || { echo "writer_instructions_ab.sh: no writer thread in $side's profiles" >&2; exit 1; }
  awk '/^summary:/ {print $2; exit}' "$f"
}

ia=$(count "$a" A)
ib=$(count "$b" B)
python3 - "$ia" "$ib" "$n_jobs" <<'PY'
import json, sys
ia, ib, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"bench": "writer_instructions", "jobs": n, "a_per_job": round(ia / n), "b_per_job": round(ib / n),
                  "b_vs_a": round(ib / ia, 4)}))
PY
