#!/usr/bin/env python3
"""The model's own work per queue-bench job, measured (issue 29, docs/queue_perf.md).

queue.sh's 1-token jobs are not no-ops: each prefills its rendered prompt on stories260K before its
one token. This prints what that prefill alone costs on this host, so the queue ratios against
BullMQ's no-op jobs can be read against it:
- the two prompts queue.sh sends, rendered and tokenized as a worker does (agentq-engine render,
  then tokenize with BOS): loadgen.py's one-request job, and batch_accept.py's Batch line, whose
  tokens shared by every line (the longest common prefix of lines 1000 and 2345, whose numbers
  differ in their first digit: the system prompt and "Document ") are also counted;
- agentq-bench_engine on one thread: the best of R prefills of that many tokens (and of the Batch
  line's unshared suffix alone: the cost if the shared prefix were computed once per worker; it
  reads no prefix K/V, so it is a little optimistic), as ms per job and jobs/s per core;
- with --llama-bin DIR, llama-bench (llama.cpp's CPU backend, the engine's reference) on the same
  file and token counts, one thread.
"jobs/s for 2 cores" is twice the per-core rate: a ceiling on any queue on this host that runs
this model's prefill per job, with everything else free.
  job_model_floor.py --bin BIN_DIR --model stories260K.gguf [--reps 5] [--llama-bin DIR]
Prints one JSON line.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def tokens(bin_dir, model, messages):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.json")
        with open(path, "w") as f:
            json.dump(messages, f)
        text = subprocess.run([os.path.join(bin_dir, "agentq-engine"), "render", "--model", model, "--messages", path],
                              check=True, capture_output=True, text=True).stdout
        tpath = os.path.join(d, "t.txt")
        with open(tpath, "w") as f:
            f.write(text)
        out = subprocess.run([os.path.join(bin_dir, "agentq-engine"), "tokenize", "--model", model, "--file", tpath,
                              "--add-special", "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ids"]


def engine_ms(bin_dir, model, n, reps):
    """Best-of-reps wall ms of one n-token prefill on one thread (agentq-bench_engine)."""
    out = subprocess.run([os.path.join(bin_dir, "agentq-bench_engine"), "--threads", "1", "--pp", str(n), "--tg", "1",
                          "--reps", str(reps), model], check=True, capture_output=True, text=True).stdout
    rate = json.loads(out.strip().splitlines()[-1])["results"][0]["pp512_tokens_per_s"]
    return 1000.0 * n / rate


def llama_ms(llama_bin, model, n, reps):
    out = subprocess.run([os.path.join(llama_bin, "llama-bench"), "-m", model, "-p", str(n), "-n", "0", "-t", "1",
                          "-r", str(reps), "-o", "json"], check=True, capture_output=True, text=True).stdout
    return 1000.0 * n / json.loads(out)[0]["avg_ts"]


def figures(ms):
    return {"ms_per_job": round(ms, 4), "jobs_per_s_per_core": round(1000.0 / ms, 1),
            "jobs_per_s_2_cores": round(2000.0 / ms, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--llama-bin", default=os.environ.get("AGENTQ_LLAMA_BIN", ""))
    a = ap.parse_args()
    # NOTE: the same messages as loadgen.py's job_body and batch_accept.py's lines.
    one = tokens(a.bin, a.model, [{"role": "user", "content": "Once upon a time 1000"}])
    lines = [tokens(a.bin, a.model, [{"role": "system", "content": "You summarise documents."},
                                     {"role": "user", "content": f"Document {i}: once upon a time"}])
             for i in (1000, 2345)]
    shared = 0
    while shared < min(map(len, lines)) and lines[0][shared] == lines[1][shared]:
        shared += 1
    n_line = len(lines[0])
    out = {"bench": "job_model_floor", "threads": 1,
           "one_request": dict(prompt_tokens=len(one), **figures(engine_ms(a.bin, a.model, len(one), a.reps))),
           "batch_line": dict(prompt_tokens=n_line, shared_prefix_tokens=shared,
                              **figures(engine_ms(a.bin, a.model, n_line, a.reps))),
           "batch_line_suffix_only": dict(prompt_tokens=n_line - shared,
                                          **figures(engine_ms(a.bin, a.model, n_line - shared, a.reps)))}
    if a.llama_bin and os.path.exists(os.path.join(a.llama_bin, "llama-bench")):
        out["llamacpp"] = {"one_request": figures(llama_ms(a.llama_bin, a.model, len(one), a.reps)),
                           "batch_line": figures(llama_ms(a.llama_bin, a.model, n_line, a.reps))}
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
