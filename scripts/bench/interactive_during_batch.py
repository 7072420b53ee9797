#!/usr/bin/env python3
"""Interactive latency during a Batch file (issue 29's "interactive and normal jobs overtake batch"):
upload and create an N-line batch (batch_accept.py's lines), then, while it is in progress, submit
one-request jobs (loadgen.py's body, normal priority, 1 token) one at a time, each polled to its end.
Prints one JSON line: the interactive jobs' submit-to-end latency from their own timings (total_ms,
and queue_ms = submit to claim) as p50 / p90 / max, how many ran during the batch, and the batch's
jobs/s end to end (upload to completed) with the interactive jobs running beside it."""
import argparse, http.client, json, os, sys, tempfile, time, urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_accept import call, upload, write_input  # noqa: E402
from loadgen import job_body, pct  # noqa: E402

TERMINAL = ("completed", "incomplete", "failed", "cancelled", "expired")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True, help="the batch's tenant")
    ap.add_argument("--interactive-key", required=True, help="the interactive jobs' tenant")
    ap.add_argument("--model", default="stories260K")
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--jobs", type=int, default=40, help="interactive jobs at most (one at a time)")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    path = os.path.join(tempfile.mkdtemp(prefix="agentq-batch-"), "in.jsonl")
    write_input(path, a.lines, a.model, "r")
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.time()
    file_id = upload(c, a.key, path)
    b = call(c, a.key, "POST", "/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                               "completion_window": "24h"})
    # Interactive jobs once the batch's jobs run (some completed), until it completes or --jobs.
    while True:
        b = call(c, a.key, "GET", "/v1/batches/" + b["id"])
        if b["status"] in ("in_progress", "finalizing", "completed") and b["request_counts"]["completed"] > 0:
            break
        time.sleep(0.02)
    ic = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    total, queue, client_ms, n_open = [], [], [], []
    for i in range(a.jobs):
        ts = time.time()
        ic.request("POST", "/v1/jobs", body=json.dumps(job_body(a.model, f"i{i}")),
                   headers={"Authorization": "Bearer " + a.interactive_key, "Content-Type": "application/json"})
        r = ic.getresponse()
        j = json.loads(r.read())
        assert r.status in (200, 202), j
        while j.get("status") not in TERMINAL:
            time.sleep(0.005)
            j = call(ic, a.interactive_key, "GET", "/v1/jobs/" + j["id"])
        dt_ms = 1000 * (time.time() - ts)
        bb = call(c, a.key, "GET", "/v1/batches/" + b["id"])
        n = bb["request_counts"]
        if bb["status"] != "in_progress" or n["completed"] + n["failed"] >= n["total"]:
            break  # the batch ended meanwhile: this job did not run beside it throughout
        t = j.get("timings") or {}
        total.append(t.get("total_ms"))
        queue.append(t.get("queue_ms"))
        client_ms.append(dt_ms)
        n_open.append(n["total"] - n["completed"] - n["failed"])
    while b["status"] not in ("completed", "failed", "cancelled", "expired"):
        time.sleep(0.02)
        b = call(c, a.key, "GET", "/v1/batches/" + b["id"])
    span = time.time() - t0
    out = {"batch_lines": a.lines, "batch_final": b["status"], "batch_jobs_per_s": round(a.lines / span, 1),
           "interactive_during_batch": len(total)}
    if total:
        out.update({"total_ms_p50": pct(total, 0.5), "total_ms_p90": pct(total, 0.9), "total_ms_max": max(total),
                    "queue_ms_p50": pct(queue, 0.5), "queue_ms_p90": pct(queue, 0.9), "queue_ms_max": max(queue),
                    "client_ms_p50": round(pct(client_ms, 0.5), 1), "batch_open_min": min(n_open)})
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
