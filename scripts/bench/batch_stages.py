#!/usr/bin/env python3
"""Where a Batch file's jobs are over time, and which of agentqd's threads run or wait for a CPU
(issue 29, docs/queue_perf.md "Session 23 (branch queue9b)"). Samples every --interval s until
stopped (SIGINT / SIGTERM) or --seconds pass, then prints a summary and one JSON line:
- per thread name (/proc/PID/task/*/comm): CPU seconds run, seconds waited on a run queue
  (/proc/.../schedstat: time on a CPU, time runnable but not running) and their share of the window;
- the batch streams' stages over time (redis-cli against agentqd's embedded redis-server): entries
  in the stream (XLEN: fed and not yet acked) and pending (XPENDING: read by a worker, not yet acked),
  so "waiting in Redis" = XLEN - pending;
- the worker's running jobs (GET /v1/workers "running", when a key is given: admin) is not sampled:
  pending already counts claimed jobs until their end is acked.
  scripts/bench/batch_stages.py --pid PID [--redis-port P] [--interval 0.02] [--seconds 30] [--out F]
"""
import argparse, json, os, signal, socket, subprocess, sys, time


def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = (int(x) for x in f.read().split())
        except OSError:
            continue
        out[int(tid)] = (name, run_ns, wait_ns)
    return out


class redis:
    """A minimal RESP client (no redis-cli process per sample)."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        b = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
        self.s.sendall(b)
        return self.read()

    def read(self):
        line = self.f.readline().rstrip(b"\r\n")
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-"):
            return rest.decode()
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise ValueError(line)


def redis_port_of(pid):
    """agentqd's embedded redis-server is its child; its command line names the port (":PORT")."""
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid), "-x", "redis-server"], capture_output=True, text=True).stdout.split()
        for k in kids:
            with open(f"/proc/{k}/cmdline") as f:
                for part in f.read().replace("\0", " ").split():
                    if part.startswith("*:") or ":" in part:
                        tail = part.rsplit(":", 1)[1]
                        if tail.isdigit():
                            return int(tail)
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--redis-port", type=int, default=0)
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--out", default="", help="the timeline as JSON lines (t, xlen, pending)")
    a = ap.parse_args()
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    port = a.redis_port or redis_port_of(a.pid)
    r = redis(port) if port else None
    streams = []
    t0 = time.time()
    th0 = threads(a.pid)
    timeline = []
    while not stop and time.time() - t0 < a.seconds:
        if r is not None:
            if not streams:
                streams = [s for s in (r.cmd("KEYS", "agentq:jobs:*:batch") or [])]
            xlen = sum(r.cmd("XLEN", s) or 0 for s in streams)
            pend = 0
            for s in streams:
                p = r.cmd("XPENDING", s, "workers")
                if isinstance(p, list) and p:
                    pend += int(p[0] or 0)
            timeline.append((round(time.time() - t0, 3), xlen, pend))
        time.sleep(a.interval)
    dt = time.time() - t0
    th1 = threads(a.pid)
    by_name = {}
    for tid, (name, run1, wait1) in th1.items():
        _, run0, wait0 = th0.get(tid, (name, 0, 0))
        e = by_name.setdefault(name, [0, 0.0, 0.0])
        e[0] += 1
        e[1] += (run1 - run0) / 1e9
        e[2] += (wait1 - wait0) / 1e9
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    print(f"window {dt:.2f} s; per thread name: threads, CPU s run (share of window), s runnable-waiting", file=sys.stderr)
    for name, (n, run, wait) in rows:
        if run < 0.005 and wait < 0.005:
            continue
        print(f"  {name:18s} {n:3d}  run {run:6.3f} ({100 * run / dt:5.1f} %)  wait {wait:6.3f} ({100 * wait / dt:5.1f} %)", file=sys.stderr)
    if a.out:
        with open(a.out, "w") as f:
            for t, x, p in timeline:
                f.write(json.dumps({"t": t, "xlen": x, "pending": p}) + "\n")
    busy = [(x, p) for _, x, p in timeline if x > 0]
    summary = {"window_s": round(dt, 3),
               "threads": {k: {"n": v[0], "run_s": round(v[1], 3), "wait_s": round(v[2], 3)} for k, v in rows},
               "samples": len(timeline),
               "samples_with_entries": len(busy),
               "mean_waiting_in_redis": round(sum(x - p for x, p in busy) / len(busy), 1) if busy else 0,
               "mean_pending": round(sum(p for _, p in busy) / len(busy), 1) if busy else 0,
               "share_redis_empty_while_busy": round(sum(1 for x, p in busy if x == p) / len(busy), 3) if busy else 0}
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
