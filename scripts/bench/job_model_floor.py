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
  file and token counts, one thread;
- "one_request_in_service": the one-request job's forward as the service runs it (agentq-bench_cold):
  only the tokens after the head every such prompt shares (the prefix cache holds it), 8 jobs a
  forward (what a worker batches at ~1,000 jobs/s), ms per job steady (forwards back to back) and
  after a 10 ms sleep (another task ran on the core: the "cold" forward, docs/queue_perf.md
  session 24). NOTE: agentq-bench_engine's figures above are cold too: each prefill it times
  follows its 256 MiB bandwidth probe.
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


def cold_ms(bin_dir, model, n, past, seqs):
    """Median ms per job of `seqs` jobs' n-token forwards after `past` cached tokens (agentq-bench_cold):
    steady (8 forwards before each timed one) and after a 10 ms sleep."""
    exe = os.path.join(bin_dir, "agentq-bench_cold")
    out = subprocess.run([exe, "--pp", str(n), "--past", str(past), "--seqs", str(seqs), "--n", "100",
                          "--gaps", "warm:8,sleep:10000", model], check=True, capture_output=True, text=True).stdout
    gaps = {g["gap"]: g["cpu_ms_median"] / seqs for g in json.loads(out.strip().splitlines()[-1])["gaps"]}
    return gaps["warm:8"], gaps["sleep:10000"]


def shared_head(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


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
    shared = shared_head(lines[0], lines[1])
    n_line = len(lines[0])
    out = {"bench": "job_model_floor", "threads": 1,
           "one_request": dict(prompt_tokens=len(one), **figures(engine_ms(a.bin, a.model, len(one), a.reps))),
           "batch_line": dict(prompt_tokens=n_line, shared_prefix_tokens=shared,
                              **figures(engine_ms(a.bin, a.model, n_line, a.reps))),
           "batch_line_suffix_only": dict(prompt_tokens=n_line - shared,
                                          **figures(engine_ms(a.bin, a.model, n_line - shared, a.reps)))}
    if os.path.exists(os.path.join(a.bin, "agentq-bench_cold")):
        # NOTE: numbers differing in their first digit, as for the Batch lines above.
        one_shared = shared_head(one, tokens(a.bin, a.model, [{"role": "user", "content": "Once upon a time 2345"}]))
        steady, cold = cold_ms(a.bin, a.model, len(one) - one_shared, one_shared, 8)
        out["one_request_in_service"] = {"prompt_tokens": len(one), "shared_prefix_tokens": one_shared,
                                         "jobs_per_forward": 8, "steady": figures(steady),
                                         "after_10ms_away": figures(cold)}
    if a.llama_bin and os.path.exists(os.path.join(a.llama_bin, "llama-bench")):
        out["llamacpp"] = {"one_request": figures(llama_ms(a.llama_bin, a.model, len(one), a.reps)),
                           "batch_line": figures(llama_ms(a.llama_bin, a.model, n_line, a.reps))}
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
