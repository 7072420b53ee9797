#!/usr/bin/env python3
"""Loopback load generator for scripts/bench/queue.sh (stdlib only). Three phases against a
running agentqd, one JSON line on stdout:
  floor      GET /healthz as fast as T keep-alive clients can for S seconds (the no-op rate)
  throughput N trivial jobs (1 output token) submitted by T clients; jobs/s end to end
             = N / (last finished_at - first created_at), server timestamps
  latency    POST /v1/jobs at a fixed rate R for S seconds (open loop: a request is sent on
             schedule whether or not earlier ones returned); submit latency percentiles
   loadgen.py --url http://127.0.0.1:PORT --key aq_... --model stories260K [--jobs N] [--clients T]
              [--rate R] [--seconds S]"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

TERMINAL = {"completed", "failed", "cancelled", "incomplete", "requires_action"}


class client:
    """One keep-alive HTTP/1.1 connection (reconnects once on a dropped connection)."""

    def __init__(self, url, key):
        u = urllib.parse.urlparse(url)
        assert u.hostname in ("127.0.0.1", "localhost", "::1"), "loopback only"
        self.host, self.port, self.key = u.hostname, u.port, key
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def request(self, method, path, body=None):
        headers = {"Authorization": f"Bearer {self.key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                if attempt:
                    raise


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def job_body(model, i):
    return {"model": model, "messages": [{"role": "user", "content": f"Once upon a time {i}"}],
            "max_turns": 1, "max_tokens_per_turn": 1}


def floor(a):
    counts = [0] * a.clients
    stop = time.monotonic() + a.seconds

    def run(i):
        c = client(a.url, a.key)
        while time.monotonic() < stop:
            s, _ = c.request("GET", "/healthz")
            assert s == 200, s
            counts[i] += 1

    ts = [threading.Thread(target=run, args=(i,)) for i in range(a.clients)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def submit_many(a, n, tag):
    ids, lock, errors = [], threading.Lock(), []
    next_i = [0]

    def run():
        c = client(a.url, a.key)
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n:
                return
            s, p = c.request("POST", "/v1/jobs", job_body(a.model, f"{tag}{i}"))
            if s not in (200, 202):
                errors.append((s, p[:200]))
                return
            with lock:
                ids.append(json.loads(p)["id"])

    ts = [threading.Thread(target=run) for _ in range(a.clients)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit(f"loadgen: submit failed: {errors[0]}")
    return ids, time.monotonic() - t0


def wait_all(a, ids, timeout_s=300):
    c = client(a.url, a.key)
    pending, jobs = list(ids), {}
    deadline = time.monotonic() + timeout_s
    # NOTE: jobs finish roughly in submit order, so polling the oldest pending one is enough
    while pending:
        if time.monotonic() > deadline:
            raise SystemExit(f"loadgen: {len(pending)} jobs not finished after {timeout_s} s")
        s, p = c.request("GET", f"/v1/jobs/{pending[0]}")
        j = json.loads(p)
        if j.get("status") in TERMINAL:
            jobs[pending.pop(0)] = j
        else:
            time.sleep(0.05)
    return jobs


def throughput(a):
    ids, submit_s = submit_many(a, a.jobs, "t")
    jobs = wait_all(a, ids)
    # NOTE: a 1-token job ends "incomplete" (truncated at max_tokens_per_turn): that is its success
    done = [j for j in jobs.values() if j["status"] in ("completed", "incomplete")]
    if len(done) != len(ids):
        raise SystemExit(f"loadgen: {len(ids) - len(done)} of {len(ids)} jobs failed")
    t_first = min(j["created_at"] for j in jobs.values())
    t_last = max(j["finished_at"] for j in jobs.values() if j.get("finished_at"))
    lat = [j["finished_at"] - j["created_at"] for j in jobs.values() if j.get("finished_at")]
    by_status = {}
    for j in jobs.values():
        by_status[j["status"]] = by_status.get(j["status"], 0) + 1
    return {"jobs": len(ids), "finished": len(done), "by_status": by_status, "submit_s": round(submit_s, 3),
            "submit_per_s": round(len(ids) / submit_s, 1), "span_s": round(t_last - t_first, 3),
            "jobs_per_s": round(len(ids) / max(1e-9, t_last - t_first), 2),
            "job_latency_p50_ms": round(1000 * pct(lat, 0.5), 1), "job_latency_p99_ms": round(1000 * pct(lat, 0.99), 1)}


def latency(a):
    n = int(a.rate * a.seconds)
    lat, ids, lock = [], [], threading.Lock()
    t0 = time.monotonic()
    sem = threading.Semaphore(64)

    def one(i):
        with sem:
            c = client(a.url, a.key)
            ts = time.monotonic()
            s, p = c.request("POST", "/v1/jobs", job_body(a.model, f"l{i}"))
            dt = time.monotonic() - ts
            c.conn.close()
            with lock:
                if s in (200, 202):
                    lat.append(dt)
                    ids.append(json.loads(p)["id"])

    ts = []
    for i in range(n):
        delay = t0 + i / a.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, args=(i,))
        t.start()
        ts.append(t)
    for t in ts:
        t.join()
    wait_all(a, ids)  # drain before the process stops
    ms = [1000 * x for x in lat]
    return {"rate_per_s": a.rate, "requests": n, "ok": len(ms), "p50_ms": round(pct(ms, 0.5), 2),
            "p90_ms": round(pct(ms, 0.9), 2), "p99_ms": round(pct(ms, 0.99), 2), "max_ms": round(max(ms), 2),
            "mean_ms": round(statistics.mean(ms), 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", default="stories260K")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--phases", default="floor,throughput,latency", help="which phases, comma-separated")
    a = ap.parse_args()
    phases = a.phases.split(",")
    out = {"bench": "queue", "clients": a.clients}
    if "floor" in phases:
        out["healthz_per_s"] = round(floor(a), 1)
    if "throughput" in phases:
        out["throughput"] = throughput(a)
    if "latency" in phases:
        out["latency"] = latency(a)
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
