#!/usr/bin/env python3
"""Collects the benchmark runs of scripts/bench/run.sh (DIR/raw/<bench>.<i>.json, one JSON line
each) into DIR/results.json: machine and commit, every figure as median + min-max over the
repetitions, and the ratios to each figure's same-run baseline; prints the ratios.
   scripts/bench/collect.py DIR --mode quick --bin build/bin --src ."""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import subprocess


def git(src, *args):
    try:
        return subprocess.run(["git", "-C", src, *args], capture_output=True, text=True, check=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def spread(values):
    """{median, min, max, n} of a list of numbers."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def flatten(obj, prefix=""):
    """Numeric leaves as {path: value}; list items keyed by their model/type/threads when present."""
    out = {}
    if isinstance(obj, bool):
        return out
    if isinstance(obj, (int, float)):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            key = str(i)
            if isinstance(v, dict):
                parts = [str(v[k]) for k in ("model", "type", "threads") if k in v]
                key = "/".join(parts) if parts else key
            out.update(flatten(v, f"{prefix}[{key}]"))
    return out


def ratios_of(name, run):
    """{label: (figure, baseline, unit)} from one run; the ratio is figure / baseline."""
    r = {}
    if name.startswith("engine"):  # engine (110M), engine_1b
        for m in run.get("results", []):
            roof_tps = m["bandwidth_gb_per_s"] * 1e9 / m["weight_bytes_per_token"]
            r[f"{m['model']}: decode vs bandwidth roofline"] = (m["tg128_tokens_per_s"], roof_tps, "tokens/s")
            c = m["cpu_clock"]
            r[f"{m['model']}: decode vs roofline, CPU clock"] = (
                c["tg128_tokens_per_s"], c["bandwidth_gb_per_s"] * 1e9 / m["weight_bytes_per_token"], "tokens/s/thread")
    elif name == "bandwidth":
        bw = run["bandwidth_gbps"]
        for m in run["matvec"]:
            r[f"{m['type']} x{m['threads']}: matvec vs read bandwidth"] = (m["gbps"], bw[str(m["threads"])], "GB/s")
    elif name == "residency":
        r["wall time: re-prefill vs resident"] = (run["wall_s_reprefill"], run["wall_s_resident"], "s")
        r["computed tokens/turn: re-prefill vs resident"] = (
            run["computed_tokens_per_turn_reprefill"], run["computed_tokens_per_turn"], "tokens")
        if run.get("wall_s_spill"):
            r["wall time: re-prefill vs resident with spill to disk"] = (
                run["wall_s_reprefill"], run["wall_s_spill"], "s")
            r["wall time: spill to disk vs resident (disk-tier cost)"] = (
                run["wall_s_spill"], run["wall_s_resident"], "s")
            r["computed tokens/turn: spill to disk vs resident"] = (
                run["computed_tokens_per_turn_spill"], run["computed_tokens_per_turn"], "tokens")
    elif name == "queue":
        t = run["throughput"]
        r["jobs/s end to end vs GET /healthz/s (no-op floor)"] = (t["jobs_per_s"], run["healthz_per_s"], "per s")
        r["submit/s vs GET /healthz/s"] = (t["submit_per_s"], run["healthz_per_s"], "per s")
        lat = run["latency"]
        r[f"submit p99 vs p50 latency at {lat['rate_per_s']:g} req/s"] = (lat["p99_ms"], lat["p50_ms"], "ms")
        # issue 29: the same run's BullMQ baseline (absent when npm could not install it)
        bull = run.get("bullmq", {})
        # session 25: the node client's figures (as many jobs and connections as the BullMQ run)
        one, hz = run.get("one_request_node", {}), run.get("healthz_node", {})
        if "jobs_per_s" in one and "healthz_per_s" in hz:
            r["node client: jobs/s end to end vs GET /healthz/s (no-op floor)"] = (
                one["jobs_per_s"], hz["healthz_per_s"], "per s")
        if "jobs_per_s" in bull:
            # NOTE: this label has held loadgen.py's (Python client) figure since issue 29; kept for comparison
            r["jobs/s end to end, one HTTP request per job, vs BullMQ no-op jobs/s"] = (
                t["jobs_per_s"], bull["jobs_per_s"], "per s")
            if "jobs_per_s" in one:
                r["node client: jobs/s end to end, one HTTP request per job, vs BullMQ no-op jobs/s"] = (
                    one["jobs_per_s"], bull["jobs_per_s"], "per s")
            if "accepted_lines_per_s" in run.get("batch", {}):
                r["batch lines accepted as durable jobs/s vs 2x BullMQ add/s"] = (
                    run["batch"]["accepted_lines_per_s"], 2 * bull["add_per_s"], "per s")
            if "end_to_end_jobs_per_s" in run.get("batch_e2e", {}):
                r["batch jobs/s end to end vs BullMQ no-op jobs/s"] = (
                    run["batch_e2e"]["end_to_end_jobs_per_s"], bull["jobs_per_s"], "per s")
        sub = run.get("submit_1000", {})
        if "p99_ms" in sub:
            r["submit p99 vs p50 latency at 1000 req/s"] = (sub["p99_ms"], sub["p50_ms"], "ms")
    elif name == "retention":
        r[f"submit p99 during deletion of {run['jobs']} expired jobs vs without"] = (
            run["submit_p99_ms_during_delete"], run["submit_p99_ms_baseline"], "ms")
        r["online backup (copy itself) vs cp of the same file"] = (
            run["backup_copy_only_mb_per_s"], run["copy_mb_per_s"], "MB/s")
    elif name == "sampler":
        for m in run["results"]:
            r[f"{m['vocab']} vocab, {m['mode']}: per token vs a full sort of the row"] = (
                m["us_per_token"], m["full_sort_us"], "us")
    elif name == "batching":
        s = run["scaling"]
        if s.get("1"):
            for c, v in s.items():
                if c != "1":
                    r[f"batch {c} vs batch 1 (aggregate)"] = (v, s["1"], "tokens/s")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--mode", default="quick")
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--src", default=".")
    a = ap.parse_args()

    runs = {}
    for path in sorted(glob.glob(os.path.join(a.dir, "raw", "*.json"))):
        m = re.match(r"(.+)\.(\d+)\.json$", os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            line = f.read().strip()
        t0, t1 = open(path[: -len(".json")] + ".time").read().split()
        runs.setdefault(m.group(1), []).append((int(m.group(2)), json.loads(line), float(t1) - float(t0)))

    # Cross-benchmark baselines: one decode step (ms) per engine model, for the grammar mask cost.
    step_us = {}
    for _, run, _ in runs.get("engine", []):
        for m in run.get("results", []):
            step_us.setdefault(m["model"], []).append(1e6 / m["tg128_tokens_per_s"])
    benches = {}
    for name, rs in runs.items():
        rs.sort(key=lambda x: x[0])
        figures, ratios = {}, {}
        for _, run, _ in rs:
            for k, v in flatten(run).items():
                figures.setdefault(k, []).append(v)
            extra = {}
            if name == "grammar" and step_us:
                model = sorted(step_us)[0]
                extra[f"mask per step vs one {model} decode step"] = (
                    run["mean_us"], statistics.median(step_us[model]), "us")
            for k, (fig, base, unit) in {**ratios_of(name, run), **extra}.items():
                e = ratios.setdefault(k, {"unit": unit, "figure": [], "baseline": [], "ratio": []})
                e["figure"].append(fig)
                e["baseline"].append(base)
                e["ratio"].append(fig / base if base else float("nan"))
        benches[name] = {
            "runs": [run for _, run, _ in rs],
            "wall_s": [round(w, 2) for _, _, w in rs],
            "figures": {k: spread(v) for k, v in figures.items()},
            "ratios": {k: {"unit": e["unit"], "figure": spread(e["figure"]), "baseline": spread(e["baseline"]),
                           "ratio": spread(e["ratio"])} for k, e in ratios.items()},
        }

    commands = []
    cmd_file = os.path.join(a.dir, "commands.txt")
    if os.path.exists(cmd_file):
        for line in open(cmd_file):
            name, n, cmd = line.rstrip("\n").split("|", 2)
            commands.append({"bench": name, "repetitions": int(n), "command": cmd})

    # Per-section outcome written by run.sh: status ok|failed|timeout|skipped, wall time, reason.
    sections = []
    sec_file = os.path.join(a.dir, "sections.tsv")
    if os.path.exists(sec_file):
        with open(sec_file) as f:
            header = f.readline().rstrip("\n").split("\t")
            for line in f:
                row = dict(zip(header, line.rstrip("\n").split("\t")))
                for k in ("reps_done", "reps_planned", "est_s"):
                    row[k] = int(row.get(k) or 0)
                limit = float(row.get("limit_s") or 0)  # tenths below 1 s (run.sh)
                row["limit_s"] = int(limit) if limit.is_integer() else limit
                row["wall_s"] = float(row.get("wall_s") or 0)
                sections.append(row)

    def read(name):
        p = os.path.join(a.dir, name)
        return open(p).read().strip() if os.path.exists(p) else None

    status = git(a.src, "status", "--porcelain", "--untracked-files=no")
    results = {
        "meta": {
            "commit": git(a.src, "rev-parse", "--short", "HEAD"),
            "dirty": bool(status) if status is not None else None,
            "dirty_files": [line[3:] for line in status.splitlines()] if status else [],
            "date": read("date_start") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "nproc": os.cpu_count(),
            "cpu_model": cpu_model(),
            "mode": a.mode,
            "bin_dir": a.bin,
            "loadavg_start": read("loadavg_start"),
            "loadavg_end": read("loadavg_end"),
            "commands": commands,
            "sections": sections,
            "incomplete": [s["name"] for s in sections if s["status"] != "ok"],
        },
        "benches": benches,
    }
    with open(os.path.join(a.dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    meta = results["meta"]
    print(f"commit {meta['commit']}{' (dirty)' if meta['dirty'] else ''}, {meta['date']}, "
          f"{meta['nproc']} x {meta['cpu_model']}, load {meta['loadavg_start']} -> {meta['loadavg_end']}")
    for s in sections:
        if s["status"] != "ok":
            print(f"NOT COMPLETE: {s['name']}: {s['status']} ({s['reason']})")
    for name, b in benches.items():
        print(f"\n{name}  ({len(b['runs'])} run(s), wall {b['wall_s']} s)")
        for k, e in b["ratios"].items():
            f, bl, q = e["figure"], e["baseline"], e["ratio"]
            print(f"  {k:<44} {f['median']:10.2f} vs {bl['median']:10.2f} {e['unit']:<15}"
                  f" ratio {q['median']:7.3f} ({q['min']:.3f}-{q['max']:.3f})")


if __name__ == "__main__":
    main()
