#!/usr/bin/env python3
"""Helpers for scripts/bench/retention.sh (stdlib only).
  retention.py seed DB N        insert N finished jobs (40 days old) with transcript and events
  retention.py latency URL KEY RATE SECONDS     open-loop POST /v1/jobs; one JSON line of percentiles
  retention.py deleted URL      agentq_jobs_deleted_total{reason="expired"} and agentq_db_bytes"""
import json
import os
import sqlite3
import sys
import time
import types
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def seed(db, n):
    now = int(time.time() * 1000)
    old = now - 40 * 86400000
    c = sqlite3.connect(db)
    c.execute("PRAGMA journal_mode=WAL")
    # NOTE: a realistic small job: a ~600-byte request, 3 transcript rows, 3 events
    req = json.dumps({"model": "stories260K", "messages": [{"role": "user", "content": "p" * 500}]})
    for start in range(0, n, 5000):
        batch = range(start, min(n, start + 5000))
        ids = [f"job_{i:024x}" for i in batch]
        c.executemany(
            "INSERT INTO jobs(id, tenant, status, priority, request_json, result_json, usage_json, created_ms, "
            "started_ms, finished_ms, updated_ms) VALUES (?, 'seed', 'completed', 1, ?, ?, '{}', ?, ?, ?, ?)",
            [(i, req, '{"content":"' + "r" * 300 + '"}', old, old, old, old) for i in ids])
        c.executemany(
            "INSERT INTO transcript(job_id, seq, turn_idx, role, content, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
            [(i, s, s - 1, ("user", "assistant", "tool")[s], "t" * 300, old) for i in ids for s in range(3)])
        c.executemany(
            "INSERT INTO job_events(job_id, tenant, type, data_json, created_ms) VALUES (?, 'seed', 'status', ?, ?)",
            [(i, json.dumps({"status": st}), old) for i in ids for st in ("queued", "running", "completed")])
        c.commit()
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()


def metrics(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {"deleted": 0, "db_bytes": 0, "free_pages": 0}
    for line in text.splitlines():
        if line.startswith('agentq_jobs_deleted_total{reason="expired"}'):
            out["deleted"] = int(float(line.split()[-1]))
        elif line.startswith("agentq_db_bytes "):
            out["db_bytes"] = int(float(line.split()[-1]))
        elif line.startswith("agentq_db_free_pages "):
            out["free_pages"] = int(float(line.split()[-1]))
    return out


def latency(url, key, rate, seconds):
    import loadgen
    a = types.SimpleNamespace(url=url, key=key, model="stories260K", rate=rate, seconds=seconds, clients=4)
    return loadgen.latency(a)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "seed":
        seed(sys.argv[2], int(sys.argv[3]))
    elif cmd == "latency":
        print(json.dumps(latency(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))))
    elif cmd == "deleted":
        print(json.dumps(metrics(sys.argv[2])))
